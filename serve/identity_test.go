package serve

// The rollout identity rule, one test per row of the README's table
// ("Rollout identity").

import (
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nemorl/nemorl-slurm/episode"
	"github.com/nemorl/nemorl-slurm/ledger"
	"github.com/nemorl/nemorl-slurm/rules"
)

// gymRow is a row as Gym's collector sends it; extra is spliced in.
func gymRow(task, rollout int, extra string) string {
	return `{"responses_create_params": {"input": [{"role": "user", "content": "improve"}], "metadata": {"problem_statement": "improve GRPO"}}, "agent_ref": {"name": "nemorl_env"}, "_ng_task_index": ` +
		itoa(task) + `, "_ng_rollout_index": ` + itoa(rollout) + extra + `}`
}

func keyOf(t *testing.T, body string) (*row, string) {
	t.Helper()
	rw, rerr := parseRow([]byte(body))
	if rerr != nil {
		t.Fatal(rerr)
	}
	k, rerr := idempotencyKey("", rw)
	if rerr != nil {
		t.Fatal(rerr)
	}
	return rw, k
}

// The keys: what a re-send carries unchanged is the same key; every stamp
// a caller uses to tell rollouts apart makes another.
func TestIdentityKeys(t *testing.T) {
	_, base := keyOf(t, gymRow(1, 0, ""))
	same := map[string]string{
		"the same row":                  gymRow(1, 0, ""),
		"keys in another order":         `{"_ng_rollout_index": 0, "agent_ref": {"name": "nemorl_env"}, "_ng_task_index": 1, "responses_create_params": {"metadata": {"problem_statement": "improve GRPO"}, "input": [{"content": "improve", "role": "user"}]}}`,
		"NeMo RL's _rowidx (per batch)": gymRow(1, 0, `, "_rowidx": 17`),
	}
	for name, body := range same {
		if _, k := keyOf(t, body); k != base {
			t.Errorf("%s: key %q, want the same rollout's %q", name, k, base)
		}
	}
	other := map[string]string{
		"another rollout index":                    gymRow(1, 1, ""),
		"another task index":                       gymRow(2, 0, ""),
		"Gym's resume of a failed row (attempt 1)": gymRow(1, 0, `, "_ng_attempt_index": 1`),
		"another Gym run (_ng_run_id)":             gymRow(1, 0, `, "_ng_run_id": "9f0c2a"`),
		"NeMo RL's rollout id":                     gymRow(1, 0, `, "_ng_rollout_id": "r-3"`),
		"another weight version (extra_body)":      strings.Replace(gymRow(1, 0, ""), `"problem_statement": "improve GRPO"`, `"problem_statement": "improve GRPO", "extra_body": {"_ng_target_weight_version": 4}`, 1),
		"another sampling temperature":             strings.Replace(gymRow(1, 0, ""), `"metadata"`, `"temperature": 0.7, "metadata"`, 1),
	}
	seen := map[string]string{base: "base"}
	for name, body := range other {
		_, k := keyOf(t, body)
		if prev, dup := seen[k]; dup {
			t.Errorf("%s: the same key as %s", name, prev)
		}
		seen[k] = name
	}
	if _, k := keyOf(t, `{"responses_create_params": {"input": "x"}, "_rowidx": 0}`); k != "" {
		t.Errorf("a row without Gym's indices has key %q, want none (every request a new rollout)", k)
	}
}

// The scope: another config or another policy is another rollout.
func TestIdentityScope(t *testing.T) {
	_, d := newTestServer(t, Options{})
	a := Scope("/etc/a.yaml", d.Config)
	if b := Scope("/etc/b.yaml", d.Config); a == b {
		t.Error("two configs share a scope")
	}
	cfg := *d.Config
	cfg.PolicyModel.Model = "checkpoint-2"
	if b := Scope("/etc/a.yaml", &cfg); a == b {
		t.Error("another policy model shares the scope")
	}
	cfg = *d.Config
	cfg.PolicyModel.BaseURL = append(append([]string(nil), cfg.PolicyModel.BaseURL...), "http://other:8000/v1")
	if b := Scope("/etc/a.yaml", &cfg); a == b {
		t.Error("other policy endpoints share the scope")
	}
}

// failingWriter is a connection that broke before the answer got out.
type failingWriter struct{ httptest.ResponseRecorder }

func (f *failingWriter) Write([]byte) (int, error)       { return 0, errors.New("broken pipe") }
func (f *failingWriter) WriteString(string) (int, error) { return 0, errors.New("broken pipe") }

// The rule over a final episode, one case per row of the table.
func TestIdentityRule(t *testing.T) {
	clock := struct {
		sync.Mutex
		t time.Time
	}{t: time.Now()}
	now := func() time.Time { clock.Lock(); defer clock.Unlock(); return clock.t }
	advance := func(d time.Duration) { clock.Lock(); clock.t = clock.t.Add(d); clock.Unlock() }
	s, d := newTestServer(t, Options{Concurrency: 1, Now: now, ResendWindow: time.Hour})
	s.slots.force() // every new run waits: nothing is submitted

	n := 0
	final := func(o rules.Outcome) (*row, string, *ledger.Entry) {
		n++
		rw, k := keyOf(t, gymRow(100+n, 0, ""))
		e := finalEntry(t, d, o, `{"id":"r"}`, "diff --git a/recipe.yaml b/recipe.yaml\n")
		e.Outcome.Decided = now()
		if err := d.Ledger.Save(e); err != nil {
			t.Fatal(err)
		}
		if err := s.keys.put(k, e.Episode); err != nil {
			t.Fatal(err)
		}
		return rw, k, e
	}
	scored := rules.Outcome{Outcome: rules.Scored, Reward: f64(0.25), AIME25AvgAt8: f64(0.25), AIME25Exact: f64(0.25), Completed: 1}
	claim := func(rw *row, k string) (*run, *ledger.Entry) {
		t.Helper()
		ru, st, err := s.claim(rw, k)
		if err != nil {
			t.Fatal(err)
		}
		return ru, st
	}
	deliver := func(rw *row, k string, e *ledger.Entry, w http.ResponseWriter) {
		s.answer(w, httptest.NewRequest(http.MethodPost, "/run", nil), rw, k, ending{final: e, stored: true})
	}

	t.Run("never delivered: the re-send gets it", func(t *testing.T) {
		rw, k, e := final(scored)
		advance(59 * time.Minute)
		if _, st := claim(rw, k); st == nil || st.Episode != e.Episode {
			t.Fatalf("stored %v, want %s", st, e.Episode)
		}
	})
	t.Run("delivered: the next request is a new episode", func(t *testing.T) {
		rw, k, e := final(scored)
		_, st := claim(rw, k)
		if st == nil {
			t.Fatal("no stored outcome before delivery")
		}
		w := httptest.NewRecorder()
		deliver(rw, k, st, w)
		if w.Code != 200 || !strings.Contains(w.Body.String(), e.Episode) {
			t.Fatalf("answer %d %s", w.Code, w.Body)
		}
		if rec, _ := s.keys.get(k); rec == nil || rec.Delivered.IsZero() {
			t.Fatalf("the delivery is not on record: %+v", rec)
		}
		ru, st := claim(rw, k)
		if st != nil || ru == nil {
			t.Fatalf("after delivery: stored %v, want a new run", st)
		}
	})
	t.Run("the answer did not get out: still undelivered", func(t *testing.T) {
		rw, k, e := final(scored)
		deliver(rw, k, e, &failingWriter{*httptest.NewRecorder()})
		if rec, _ := s.keys.get(k); rec == nil || !rec.Delivered.IsZero() {
			t.Fatalf("a failed write left the delivery on record: %+v", rec)
		}
		if _, st := claim(rw, k); st == nil || st.Episode != e.Episode {
			t.Fatalf("re-send after a broken connection: stored %v, want %s", st, e.Episode)
		}
	})
	t.Run("past the re-send window: a new episode", func(t *testing.T) {
		rw, k, _ := final(scored)
		advance(61 * time.Minute)
		if ru, st := claim(rw, k); st != nil || ru == nil {
			t.Fatalf("past the window: stored %v, want a new run", st)
		}
	})
	t.Run("the window counts from serve's start when later", func(t *testing.T) {
		rw, k, e := final(scored)
		advance(5 * time.Hour) // serve was down meanwhile
		s2, err := New(Options{Clusters: s.opt.Clusters, Ledger: d.Ledger, ConfigPath: d.ConfigPath, Config: d.Config, Concurrency: 1, Now: now, ResendWindow: time.Hour})
		if err != nil {
			t.Fatal(err)
		}
		defer s2.Shutdown()
		s2.slots.force()
		advance(10 * time.Minute)
		if _, st, err := s2.claim(rw, k); err != nil || st == nil || st.Episode != e.Episode {
			t.Fatalf("a re-send 10 min after the restart: stored %v %v, want %s", st, err, e.Episode)
		}
	})
	t.Run("an infrastructure failure: a new attempt", func(t *testing.T) {
		rw, k, _ := final(rules.Outcome{Outcome: rules.InfraFailure, MaskSample: true, FailureReason: "node_failure"})
		if ru, st := claim(rw, k); st != nil || ru == nil {
			t.Fatalf("after an infra failure: stored %v, want a new run", st)
		}
	})
	t.Run("an integrity violation never delivered: the re-send gets it", func(t *testing.T) {
		rw, k, e := final(rules.Outcome{Outcome: rules.IntegrityViolation, MaskSample: true, FailureReason: "job_id_mismatch", Tampering: true})
		if _, st := claim(rw, k); st == nil || st.Episode != e.Episode {
			t.Fatalf("stored %v, want %s", st, e.Episode)
		}
	})
	t.Run("another policy: a new episode", func(t *testing.T) {
		rw, k, _ := final(scored)
		cfg := *d.Config
		cfg.PolicyModel.Model = "checkpoint-2"
		d2 := &episode.Driver{Config: &cfg, ConfigPath: d.ConfigPath, Host: d.Host, Slurm: d.Slurm, Ledger: d.Ledger}
		c := DriverCluster("", d2)
		c.Follower = s.opt.Clusters[0].Follower
		s2, err := New(Options{Clusters: []Cluster{c}, Ledger: d2.Ledger, ConfigPath: d2.ConfigPath, Config: d2.Config, Concurrency: 1, Now: now})
		if err != nil {
			t.Fatal(err)
		}
		defer s2.Shutdown()
		s2.slots.force()
		if ru, st, err := s2.claim(rw, k); err != nil || st != nil || ru == nil {
			t.Fatalf("another policy model: stored %v %v, want a new run", st, err)
		}
	})
}

// /aggregate_metrics reads a body of any size (Gym sends every row's
// patch) and adds what serve itself answered since the last aggregation:
// the masked rows Gym never sends.
func TestAggregateLargeAndServed(t *testing.T) {
	s, d := newTestServer(t, Options{})
	h := s.Handler()
	// Answers on record: one scored, one masked, one malformed row.
	ok := finalEntry(t, d, rules.Outcome{Outcome: rules.Scored, Reward: f64(0.5), AIME25AvgAt8: f64(0.5), AIME25Exact: f64(0.5), Completed: 1}, `{"id":"r"}`, "diff\n")
	infra := finalEntry(t, d, rules.Outcome{Outcome: rules.InfraFailure, MaskSample: true, FailureReason: "node_failure"}, `{"id":"r"}`, "")
	rw, _ := parseRow([]byte(`{"responses_create_params": {"input": "x"}}`))
	for _, e := range []*ledger.Entry{ok, infra} {
		s.answer(httptest.NewRecorder(), httptest.NewRequest(http.MethodPost, "/run", nil), rw, "", ending{final: e})
	}
	post(t, h, "/run", `{"responses_create_params": 3}`)

	patch := strings.Repeat("+x\n", 23<<20/3)
	var b strings.Builder
	b.WriteString(`{"verify_responses": [`)
	for i := 0; i < 3; i++ {
		if i > 0 {
			b.WriteString(",")
		}
		b.WriteString(`{"reward": 0.5, "outcome": "scored", "aime25_avg_at_8": 0.5, "patch": "` + strings.ReplaceAll(patch, "\n", `\n`) + `", "response": {"usage": {}}}`)
	}
	b.WriteString(`], "extra": {"x": [1, 2]}}`)
	if b.Len() < 3*23<<20 {
		t.Fatalf("body of %d bytes, want over 69 MiB", b.Len())
	}
	w := post(t, h, "/aggregate_metrics", b.String())
	if w.Code != 200 {
		t.Fatalf("three 23 MiB patches: %d %.300s", w.Code, w.Body)
	}
	var got struct {
		Agent map[string]any `json:"agent_metrics"`
		Key   map[string]any `json:"key_metrics"`
	}
	if err := jsonUnmarshal(w.Body.Bytes(), &got); err != nil {
		t.Fatal(err)
	}
	want := map[string]any{"num_rollouts": 3.0, "mean/reward": 0.5, "served/num_answers": 3.0, "served/num_masked": 2.0,
		"served/num_data_errors": 1.0, "served/outcome/scored": 1.0, "served/failure_class/infra_failure/node_failure": 1.0,
		"served/failure_class/data_error/responses_create_params": 1.0}
	for k, v := range want {
		if got.Agent[k] != v {
			t.Errorf("agent_metrics[%s] = %v, want %v", k, got.Agent[k], v)
		}
	}
	if got.Key["num_masked"] != 2.0 {
		t.Errorf("key_metrics num_masked %v, want 2 (from serve's records)", got.Key["num_masked"])
	}
	// The next aggregation counts only what came after this one.
	w = post(t, h, "/aggregate_metrics", `{"verify_responses": []}`)
	if err := jsonUnmarshal(w.Body.Bytes(), &got); err != nil || got.Agent["served/num_answers"] != 0.0 {
		t.Errorf("second aggregation: %v %v", err, got.Agent)
	}
	for _, bad := range []string{`{"verify_responses": [{"reward": 1}]`, `{"verify_responses": [1]}`, `{"verify_responses": []} x`, `[]`} {
		if w := post(t, h, "/aggregate_metrics", bad); w.Code != 400 {
			t.Errorf("%s: %d, want 400", bad, w.Code)
		}
	}
}

// As Gym's head server: the global config with serve as the agent.
func TestHeadDocument(t *testing.T) {
	head := &HeadConfig{AgentName: "nemorl_env", Gym: map[string]any{"nemorl_env": "old", "other": map[string]any{"k": 1}},
		Addr: func() string { return "0.0.0.0:8765" }}
	s, _ := newTestServer(t, Options{Head: head})
	w := httptest.NewRecorder()
	s.Handler().ServeHTTP(w, httptest.NewRequest(http.MethodGet, "/global_config_dict_yaml", nil))
	var text string
	if err := jsonUnmarshal(w.Body.Bytes(), &text); err != nil || w.Code != 200 {
		t.Fatalf("%d %s: %v", w.Code, w.Body, err)
	}
	for _, want := range []string{"head_server:\n    host: 127.0.0.1\n    port: 8765\n", "nemorl_env:\n    responses_api_agents:\n        nemorl_env:\n            host: 127.0.0.1\n            port: 8765\n", "other:\n    k: 1\n"} {
		if !strings.Contains(text, want) {
			t.Errorf("global config lacks %q:\n%s", want, text)
		}
	}
	if strings.Contains(text, testKey) {
		t.Error("the API key is in the global config")
	}
}

func jsonUnmarshal(b []byte, v any) error { return json.Unmarshal(b, v) }

// FuzzParseRow: any body is a row with a task and, when it has Gym's
// indices, a stable identity, or a request error naming a field; never a
// panic. The identity does not depend on the order of the keys.
func FuzzParseRow(f *testing.F) {
	f.Add([]byte(gymRow(1, 0, "")))
	f.Add([]byte(gymRow(1, 0, `, "_ng_attempt_index": 2, "_ng_run_id": "r"`)))
	f.Add([]byte(`{"responses_create_params": {"input": [{"role": "user", "content": [{"type": "input_text", "text": "x"}]}]}}`))
	f.Add([]byte(`{"responses_create_params": 7}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		rw, rerr := parseRow(b)
		if rerr != nil {
			if rerr.field == "" || rerr.status == 0 {
				t.Fatalf("an error without a field or status: %+v", rerr)
			}
			return
		}
		if rw.task == "" {
			t.Fatal("a row without a task")
		}
		k1, e1 := idempotencyKey("", rw)
		rw2, _ := parseRow(b)
		k2, e2 := idempotencyKey("", rw2)
		if (e1 == nil) != (e2 == nil) || k1 != k2 {
			t.Fatalf("the same body, two identities: %q %q", k1, k2)
		}
		if (rw.taskIndex != nil && rw.rolloutIndex != nil && e1 == nil) != (k1 != "") {
			t.Fatalf("identity %q for indices %v %v", k1, rw.taskIndex, rw.rolloutIndex)
		}
	})
}

// FuzzDecodeVerifyResponses: any /aggregate_metrics body decodes or is a
// 400 naming a field; never a panic.
func FuzzDecodeVerifyResponses(f *testing.F) {
	f.Add([]byte(`{"verify_responses": [{"reward": 0.5, "outcome": "scored", "patch": "x"}], "other": [1]}`))
	f.Add([]byte(`{"verify_responses": []}`))
	f.Add([]byte(`{"verify_responses": [1]}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		rows, rerr := decodeVerifyResponses(strings.NewReader(string(b)))
		if rerr != nil {
			if rerr.field == "" {
				t.Fatalf("an error without a field: %+v", rerr)
			}
			return
		}
		_ = aggregate(rows)
	})
}

// blockingWriter is a ResponseWriter whose first Write signals started
// and waits for release: an answer on its way to its caller.
type blockingWriter struct {
	*httptest.ResponseRecorder
	started, release chan struct{}
	once             sync.Once
}

func (b *blockingWriter) Write(p []byte) (int, error) {
	b.once.Do(func() { close(b.started); <-b.release })
	return b.ResponseRecorder.Write(p)
}

func (b *blockingWriter) WriteString(s string) (int, error) { return b.Write([]byte(s)) }

// An answer reaches its caller before its line reaches the answer log:
// /aggregate_metrics, which a caller sends once it has its answers, waits
// for the answers being written and counts them.
func TestAggregateWaitsForDeliveries(t *testing.T) {
	s, d := newTestServer(t, Options{})
	h := s.Handler()
	e := finalEntry(t, d, rules.Outcome{Outcome: rules.Scored, Reward: f64(0.5), AIME25AvgAt8: f64(0.5), AIME25Exact: f64(0.5), Completed: 1}, `{"id":"r"}`, "diff\n")
	rw, _ := parseRow([]byte(`{"responses_create_params": {"input": "x"}}`))
	bw := &blockingWriter{ResponseRecorder: httptest.NewRecorder(), started: make(chan struct{}), release: make(chan struct{})}
	answered := make(chan struct{})
	go func() {
		defer close(answered)
		s.answer(bw, httptest.NewRequest(http.MethodPost, "/run", nil), rw, "", ending{final: e})
	}()
	<-bw.started
	agg := make(chan *httptest.ResponseRecorder, 1)
	go func() { agg <- post(t, h, "/aggregate_metrics", `{"verify_responses": []}`) }()
	select {
	case w := <-agg:
		t.Fatalf("/aggregate_metrics answered while an answer was being written: %s", w.Body)
	case <-time.After(100 * time.Millisecond):
	}
	close(bw.release)
	<-answered
	w := <-agg
	var got struct {
		Agent map[string]any `json:"agent_metrics"`
	}
	if err := jsonUnmarshal(w.Body.Bytes(), &got); err != nil || got.Agent["served/num_answers"] != 1.0 {
		t.Errorf("aggregation after the answer: %v %v, want served/num_answers 1", err, got.Agent)
	}
}
