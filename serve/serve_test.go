package serve

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nemorl/nemorl-slurm/configs"
	"github.com/nemorl/nemorl-slurm/episode"
	"github.com/nemorl/nemorl-slurm/ledger"
	"github.com/nemorl/nemorl-slurm/record"
	"github.com/nemorl/nemorl-slurm/remote"
	"github.com/nemorl/nemorl-slurm/rules"
	"github.com/nemorl/nemorl-slurm/slurm"
	"github.com/nemorl/nemorl-slurm/stages"
)

const testKey = "sk-live-serve-test-0123456789"

// newTestServer is a server on this machine (remote.Local) with its own
// ledger; nothing it is given can reach Slurm unless a test submits. with
// changes its one cluster.
func newTestServer(t *testing.T, opt Options, with ...func(*Cluster)) (*Server, *episode.Driver) {
	t.Helper()
	data, err := configs.Example("lab-none.yaml")
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := configs.Load("lab-none.yaml", data, func(string) (string, bool) { return "", false })
	if err != nil {
		t.Fatal(err)
	}
	cfg.PolicyModel.APIKey = testKey
	lg, err := ledger.OpenLedger(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	host := remote.NewLocal()
	d := &episode.Driver{Config: cfg, ConfigPath: "/nonexistent/serve-test.yaml", Host: host, Slurm: slurm.New(host), Ledger: lg}
	c := DriverCluster("", d)
	for _, f := range with {
		f(&c)
	}
	opt.Clusters, opt.Ledger, opt.ConfigPath, opt.Config = []Cluster{c}, lg, d.ConfigPath, cfg
	if opt.Concurrency == 0 {
		opt.Concurrency = 1
	}
	s, err := New(opt)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Shutdown)
	return s, d
}

func post(t *testing.T, h http.Handler, path, body string, hdr ...string) *httptest.ResponseRecorder {
	t.Helper()
	req := httptest.NewRequest(http.MethodPost, path, strings.NewReader(body))
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, req)
	return w
}

func TestParseRow(t *testing.T) {
	cases := []struct {
		name, body, task, field string
	}{
		{"problem statement", `{"responses_create_params": {"input": [], "metadata": {"problem_statement": "improve GRPO"}}, "agent_ref": {"name": "nemorl_env"}, "_ng_task_index": 3, "_ng_rollout_index": 1, "_rowidx": 9}`, "improve GRPO", ""},
		{"input string", `{"responses_create_params": {"input": "do it"}}`, "do it", ""},
		{"last user message", `{"responses_create_params": {"input": [{"role": "user", "content": "first"}, {"role": "assistant", "content": "ok"}, {"role": "user", "content": [{"type": "input_text", "text": "second"}]}, {"role": "system", "content": "sys"}]}}`, "second", ""},
		{"null metadata falls back", `{"responses_create_params": {"metadata": null, "input": "x"}}`, "x", ""},
		{"not JSON", `{"responses_create_params": `, "", "body"},
		{"array", `[1]`, "", "body"},
		{"null", `null`, "", "body"},
		{"trailing", `{"responses_create_params": {"input": "x"}} {}`, "", "body"},
		{"no params", `{"input": "x"}`, "", "responses_create_params"},
		{"params not object", `{"responses_create_params": "x"}`, "", "responses_create_params"},
		{"metadata not object", `{"responses_create_params": {"metadata": [1], "input": "x"}}`, "", "responses_create_params.metadata"},
		{"statement not string", `{"responses_create_params": {"metadata": {"problem_statement": 7}}}`, "", "responses_create_params.metadata.problem_statement"},
		{"statement empty", `{"responses_create_params": {"metadata": {"problem_statement": "  "}}}`, "", "responses_create_params.metadata.problem_statement"},
		{"no task", `{"responses_create_params": {"input": [{"role": "assistant", "content": "hi"}]}}`, "", "responses_create_params.metadata.problem_statement"},
		{"input wrong type", `{"responses_create_params": {"input": 5}}`, "", "responses_create_params.input"},
		{"content wrong type", `{"responses_create_params": {"input": [{"role": "user", "content": 5}]}}`, "", "responses_create_params.input[0].content"},
		{"task index string", `{"responses_create_params": {"input": "x"}, "_ng_task_index": "3"}`, "", "_ng_task_index"},
		{"rollout index float", `{"responses_create_params": {"input": "x"}, "_ng_rollout_index": 1.5}`, "", "_ng_rollout_index"},
		// _ng_rollout_id as Gym validates it (ROLLOUT_ID_PATTERN)
		{"rollout id", `{"responses_create_params": {"input": "x"}, "_ng_rollout_id": "step-3.task_7-r0"}`, "x", ""},
		{"rollout id null", `{"responses_create_params": {"input": "x"}, "_ng_rollout_id": null}`, "x", ""},
		{"rollout id leading dot", `{"responses_create_params": {"input": "x"}, "_ng_rollout_id": ".hidden"}`, "", "_ng_rollout_id"},
		{"rollout id slash", `{"responses_create_params": {"input": "x"}, "_ng_rollout_id": "a/b"}`, "", "_ng_rollout_id"},
		{"rollout id empty", `{"responses_create_params": {"input": "x"}, "_ng_rollout_id": ""}`, "", "_ng_rollout_id"},
		{"rollout id number", `{"responses_create_params": {"input": "x"}, "_ng_rollout_id": 7}`, "", "_ng_rollout_id"},
		{"rollout id space", `{"responses_create_params": {"input": "x"}, "_ng_rollout_id": "a b"}`, "", "_ng_rollout_id"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			rw, err := parseRow([]byte(c.body))
			if c.field != "" {
				if err == nil || err.field != c.field || err.status != http.StatusBadRequest {
					t.Fatalf("parseRow = %+v, %v; want a 400 naming %s", rw, err, c.field)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if rw.task != c.task {
				t.Errorf("task %q, want %q", rw.task, c.task)
			}
		})
	}
}

func TestRunRejectsBadBodies(t *testing.T) {
	cases := map[string]string{
		`{"responses_create_params": {"input": 1}}`: "responses_create_params.input",
		`not json`: "body",
		`{}`:       "responses_create_params",
		`{"responses_create_params": {"input": "x"}, "_ng_task_index": 0, "_ng_rollout_index": 0, "_ng_attempt_index": "one"}`: "_ng_attempt_index",
	}
	big := `{"responses_create_params": {"input": "` + strings.Repeat("x", MaxBodyBytes) + `"}}`
	// serve.failures: error: 400 (413) naming the field.
	s, d := newTestServer(t, Options{Failures: configs.ServeFailuresError})
	h := s.Handler()
	for body, field := range cases {
		w := post(t, h, "/run", body)
		var got map[string]string
		if err := json.Unmarshal(w.Body.Bytes(), &got); err != nil {
			t.Fatal(err)
		}
		if w.Code != http.StatusBadRequest || got["field"] != field || !strings.Contains(got["error"], field) {
			t.Errorf("%s: %d %s, want 400 naming %s", body, w.Code, w.Body, field)
		}
	}
	w := post(t, h, "/run", big)
	if w.Code != http.StatusRequestEntityTooLarge || !strings.Contains(w.Body.String(), `"field":"body"`) {
		t.Errorf("big body: %d %s, want 413 naming body", w.Code, w.Body)
	}
	if all, _ := d.Ledger.List(); len(all) != 0 {
		t.Errorf("the ledger has %d episodes after bad requests, want none", len(all))
	}

	// serve.failures: mask (the default): 200, masked, a terminal
	// data_error/<field> failure class that Gym files and never retries.
	s, d = newTestServer(t, Options{})
	h = s.Handler()
	cases[big] = "body"
	for body, field := range cases {
		w := post(t, h, "/run", body)
		var got map[string]any
		if err := json.Unmarshal(w.Body.Bytes(), &got); err != nil {
			t.Fatal(err)
		}
		ic, _ := got["instance_config"].(map[string]any)
		if w.Code != 200 || got["_ng_failure_class"] != "data_error/"+field || got["_ng_failure_terminal"] != true ||
			got["mask_sample"] != true || ic["mask_sample"] != true || got["outcome"] != "data_error" || got["field"] != field ||
			!strings.Contains(str(got["detail"]), field) {
			t.Errorf("%.80s: %d %.300s, want 200 with data_error/%s", body, w.Code, w.Body, field)
		}
		if !strings.Contains(w.Body.String(), `"reward":0.0,`) {
			t.Errorf("%.80s: reward not written as 0.0: %.300s", body, w.Body)
		}
		if _, ok := got["responses_create_params"].(map[string]any); !ok {
			t.Errorf("%.80s: responses_create_params %v, want an object (Gym's response model requires one)", body, got["responses_create_params"])
		}
	}
	if all, _ := d.Ledger.List(); len(all) != 0 {
		t.Errorf("the ledger has %d episodes after bad requests, want none", len(all))
	}
}

func str(v any) string { s, _ := v.(string); return s }

func TestToken(t *testing.T) {
	s, _ := newTestServer(t, Options{Token: "tok-123"})
	h := s.Handler()
	for _, hdr := range [][]string{nil, {"Authorization", "Bearer wrong"}, {"Authorization", "tok-123"}} {
		if w := post(t, h, "/run", `{}`, hdr...); w.Code != http.StatusUnauthorized {
			t.Errorf("/run with %v: %d, want 401", hdr, w.Code)
		}
	}
	req := httptest.NewRequest(http.MethodGet, "/metrics", nil)
	w := httptest.NewRecorder()
	h.ServeHTTP(w, req)
	if w.Code != http.StatusUnauthorized {
		t.Errorf("/metrics without a token: %d, want 401", w.Code)
	}
	req.Header.Set("Authorization", "Bearer tok-123")
	w = httptest.NewRecorder()
	h.ServeHTTP(w, req)
	if w.Code != http.StatusOK {
		t.Errorf("/metrics with the token: %d, want 200", w.Code)
	}
	// With the token, the body is checked.
	if w := post(t, h, "/run", `{}`, "Authorization", "Bearer tok-123"); w.Code != http.StatusOK || !strings.Contains(w.Body.String(), `"_ng_failure_class":"data_error/responses_create_params"`) {
		t.Errorf("/run with the token and a bad body: %d %s, want 200 with data_error", w.Code, w.Body)
	}
	// Liveness needs no token.
	w = httptest.NewRecorder()
	h.ServeHTTP(w, httptest.NewRequest(http.MethodGet, "/", nil))
	if w.Code != http.StatusOK || strings.TrimSpace(w.Body.String()) != `{"status":"ok"}` {
		t.Errorf("GET /: %d %s", w.Code, w.Body)
	}
	if strings.Contains(w.Body.String(), "tok-123") {
		t.Error("the token leaked")
	}
}

func TestIdempotencyKey(t *testing.T) {
	key := func(header, body string) string {
		t.Helper()
		rw, err := parseRow([]byte(body))
		if err != nil {
			t.Fatal(err)
		}
		k, err := idempotencyKey(header, rw)
		if err != nil {
			t.Fatal(err)
		}
		return k
	}
	a := key("", `{"responses_create_params": {"input": "x", "metadata": {"problem_statement": "p"}}, "_ng_task_index": 1, "_ng_rollout_index": 0}`)
	b := key("", `{"_ng_rollout_index": 0, "responses_create_params": {"metadata": {"problem_statement": "p"}, "input": "x"}, "_ng_task_index": 1, "agent_ref": {"name": "n"}}`)
	if a == "" || a != b {
		t.Errorf("the same rollout gave keys %q and %q", a, b)
	}
	if c := key("", `{"responses_create_params": {"input": "x", "metadata": {"problem_statement": "p"}}, "_ng_task_index": 1, "_ng_rollout_index": 1}`); c == a {
		t.Error("another rollout index gave the same key")
	}
	if c := key("", `{"responses_create_params": {"input": "y", "metadata": {"problem_statement": "p"}}, "_ng_task_index": 1, "_ng_rollout_index": 0}`); c == a {
		t.Error("other params gave the same key")
	}
	if c := key("", `{"responses_create_params": {"input": "x"}}`); c != "" {
		t.Errorf("a row without indices has key %q, want none", c)
	}
	if c := key("abc-1", `{"responses_create_params": {"input": "x"}}`); c != "h:abc-1" {
		t.Errorf("header key %q", c)
	}
	rw, _ := parseRow([]byte(`{"responses_create_params": {"input": "x"}}`))
	if _, err := idempotencyKey("a b", rw); err == nil || err.field != "Idempotency-Key" {
		t.Errorf("a key with a space: %v, want a 400 naming Idempotency-Key", err)
	}
}

// finalEntry writes a final episode into the ledger, with its author files
// in a local directory.
func finalEntry(t *testing.T, d *episode.Driver, o rules.Outcome, response, patch string) *ledger.Entry {
	t.Helper()
	ep := stages.NewID(time.Now())
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "author"), 0o700); err != nil {
		t.Fatal(err)
	}
	sha := func(s string) string { h := sha256.Sum256([]byte(s)); return hex.EncodeToString(h[:]) }
	if response != "" {
		if err := os.WriteFile(filepath.Join(dir, episode.ResponseFile), []byte(response), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(dir, episode.PatchFile), []byte(patch), 0o600); err != nil {
		t.Fatal(err)
	}
	o.Episode, o.Dir, o.Isolation = ep, dir, "none"
	e := &ledger.Entry{Episode: ep, Created: time.Now(), ConfigPath: d.ConfigPath, Dir: dir, Isolation: "none",
		Jobs: map[stages.Stage]*ledger.Submission{}, Author: &record.Author{PatchSHA256: sha(patch), ResponseSHA256: sha(response), PatchBytes: int64(len(patch))}}
	if err := d.Ledger.Create(e, []byte("task")); err != nil {
		t.Fatal(err)
	}
	e.Outcome = &o
	if err := d.Ledger.Save(e); err != nil {
		t.Fatal(err)
	}
	return e
}

func f64(v float64) *float64 { return &v }

func TestAnswers(t *testing.T) {
	resp := `{"id":"resp_1","object":"response","output":[],"metadata":{"leak":"` + testKey + `"}}`
	cases := []struct {
		name     string
		o        rules.Outcome
		failures string
		status   int
		class    string
		terminal bool
		reward   float64
	}{
		{"scored", rules.Outcome{Outcome: rules.Scored, Reward: f64(0.25), AIME25AvgAt8: f64(0.25), AIME25Exact: f64(0.25), TrainReward: f64(0.5), Completed: 1}, "", 200, "", false, 0.25},
		{"no_patch", rules.Outcome{Outcome: rules.PolicyFailure, Reward: f64(0), FailureReason: rules.ReasonNoPatch, FailureStage: "author"}, "", 200, "", false, 0},
		{"infra", rules.Outcome{Outcome: rules.InfraFailure, MaskSample: true, FailureReason: "missing_record", FailureStage: "eval", Detail: "no record; key " + testKey}, "", 200, "infra_failure/missing_record", false, 0},
		{"integrity", rules.Outcome{Outcome: rules.IntegrityViolation, MaskSample: true, FailureReason: "job_id_mismatch", FailureStage: "eval", Tampering: true}, "", 200, "integrity_violation/job_id_mismatch", true, 0},
		{"infra as error", rules.Outcome{Outcome: rules.InfraFailure, MaskSample: true, FailureReason: "node_failure", FailureStage: "train"}, configs.ServeFailuresError, 500, "infra_failure/node_failure", false, 0},
		{"policy with errors", rules.Outcome{Outcome: rules.PolicyFailure, Reward: f64(0), FailureReason: rules.ReasonTrainFailed, FailureStage: "train"}, configs.ServeFailuresError, 200, "", false, 0},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var logs strings.Builder
			s, d := newTestServer(t, Options{Failures: c.failures, Logf: func(f string, a ...any) { fmt.Fprintf(&logs, f+"\n", a...) }})
			e := finalEntry(t, d, c.o, resp, "diff --git a/recipe.yaml b/recipe.yaml\n")
			rw, rerr := parseRow([]byte(`{"responses_create_params": {"input": "x"}}`))
			if rerr != nil {
				t.Fatal(rerr)
			}
			w := httptest.NewRecorder()
			s.answer(w, httptest.NewRequest(http.MethodPost, "/run", nil), rw, "", ending{final: e})
			body := w.Body.String()
			if strings.Contains(body, testKey) || strings.Contains(logs.String(), testKey) {
				t.Fatalf("the API key leaked: %s\nlogs: %s", body, logs.String())
			}
			var got map[string]any
			if err := json.Unmarshal(w.Body.Bytes(), &got); err != nil {
				t.Fatal(err)
			}
			if w.Code != c.status {
				t.Errorf("status %d, want %d: %s", w.Code, c.status, body)
			}
			if got["reward"] != c.reward {
				t.Errorf("reward %v, want %v", got["reward"], c.reward)
			}
			class, _ := got["_ng_failure_class"].(string)
			if class != c.class {
				t.Errorf("_ng_failure_class %q, want %q", class, c.class)
			}
			if term, _ := got["_ng_failure_terminal"].(bool); term != c.terminal {
				t.Errorf("_ng_failure_terminal %v, want %v", term, c.terminal)
			}
			ic, _ := got["instance_config"].(map[string]any)
			if masked := c.class != ""; masked != (ic != nil && ic["mask_sample"] == true) || masked != (got["mask_sample"] == true) {
				t.Errorf("instance_config %v mask_sample %v, want masked %v", ic, got["mask_sample"], masked)
			}
			if c.status == 500 && got["error"] == "" {
				t.Error("500 without an error")
			}
			for _, k := range []string{"responses_create_params", "response", "aime25_exact", "aime25_avg_at_8", "train_reward", "completed", "inner_steps", "wandb_url", "patch", "failure_reason", "episode", "outcome", "failure_stage", "mask_sample", "jobs", "isolation"} {
				if _, ok := got[k]; !ok {
					t.Errorf("answer lacks %s", k)
				}
			}
			if got["patch"] != "diff --git a/recipe.yaml b/recipe.yaml\n" || got["episode"] != e.Episode || got["outcome"] != string(c.o.Outcome) {
				t.Errorf("patch %q episode %v outcome %v", got["patch"], got["episode"], got["outcome"])
			}
			if r, _ := got["response"].(map[string]any); r["id"] != "resp_1" {
				t.Errorf("response %v, want response.json", got["response"])
			}
		})
	}
}

// A response.json that is not what the author record names is not sent.
func TestAnswerChecksAuthorFiles(t *testing.T) {
	s, d := newTestServer(t, Options{})
	e := finalEntry(t, d, rules.Outcome{Outcome: rules.PolicyFailure, Reward: f64(0), FailureReason: "train_failed"}, `{"id":"resp_1"}`, "diff\n")
	if err := os.WriteFile(filepath.Join(e.Dir, episode.ResponseFile), []byte(`{"id":"forged"}`), 0o600); err != nil {
		t.Fatal(err)
	}
	rw, _ := parseRow([]byte(`{"responses_create_params": {"input": "x"}}`))
	w := httptest.NewRecorder()
	s.answer(w, httptest.NewRequest(http.MethodPost, "/run", nil), rw, "", ending{final: e})
	if strings.Contains(w.Body.String(), "forged") || !strings.Contains(w.Body.String(), `"status":"incomplete"`) {
		t.Errorf("answer %s: want the placeholder response, not the changed file", w.Body)
	}
}

// Two rows of the same rollout share one run while it waits; a final
// scored or policy outcome is returned as stored; an infra failure starts
// a new attempt.
func TestClaim(t *testing.T) {
	s, d := newTestServer(t, Options{Concurrency: 1})
	s.slots.force() // every new run waits: nothing is submitted
	row := func(ti, ri int) (*row, string) {
		return keyOf(t, `{"responses_create_params": {"input": "x"}, "_ng_task_index": `+itoa(ti)+`, "_ng_rollout_index": `+itoa(ri)+`}`)
	}
	rw, k := row(0, 0)
	a, st, err := s.claim(rw, k)
	if err != nil || st != nil {
		t.Fatal(err, st)
	}
	b, _, _ := s.claim(rw, k)
	if a != b {
		t.Error("the same rollout, sent twice, got two runs")
	}
	rw1, k1 := row(0, 1)
	if c, _, _ := s.claim(rw1, k1); c == a {
		t.Error("another rollout joined the first's run")
	}
	waitQueued(t, s, 2)

	// Stored outcomes.
	rw2, k2 := row(5, 0)
	done := finalEntry(t, d, rules.Outcome{Outcome: rules.PolicyFailure, Reward: f64(0), FailureReason: "no_patch"}, `{"id":"r"}`, "")
	if err := s.keys.put(k2, done.Episode); err != nil {
		t.Fatal(err)
	}
	if _, st, err := s.claim(rw2, k2); err != nil || st == nil || st.Episode != done.Episode {
		t.Errorf("claim of a finished rollout: stored %v, %v; want %s", st, err, done.Episode)
	}
	rw3, k3 := row(6, 0)
	infra := finalEntry(t, d, rules.Outcome{Outcome: rules.InfraFailure, MaskSample: true, FailureReason: "node_failure"}, `{"id":"r"}`, "")
	if err := s.keys.put(k3, infra.Episode); err != nil {
		t.Fatal(err)
	}
	if r, st, err := s.claim(rw3, k3); err != nil || st != nil || r == nil {
		t.Errorf("claim after an infra failure: run %v stored %v %v; want a new run", r, st, err)
	}
	// A mapping to an episode that never reached the ledger is ignored.
	rw4, k4 := row(7, 0)
	if err := s.keys.put(k4, "ep-20260101T000000Z-00000000"); err != nil {
		t.Fatal(err)
	}
	if r, st, err := s.claim(rw4, k4); err != nil || st != nil || r == nil {
		t.Errorf("claim of a mapping without an entry: %v %v %v", r, st, err)
	}

	// Shutdown answers the waiting rows 200 with _ng_no_persist (Gym
	// stores them nowhere and dispatches them again on resume), masked,
	// and submits nothing.
	s.Shutdown()
	select {
	case <-a.done:
	case <-time.After(5 * time.Second):
		t.Fatal("a waiting run did not end on shutdown")
	}
	w := httptest.NewRecorder()
	s.answer(w, httptest.NewRequest(http.MethodPost, "/run", nil), rw, "", ending{final: a.entry, err: a.err})
	var got map[string]any
	if err := json.Unmarshal(w.Body.Bytes(), &got); err != nil {
		t.Fatal(err)
	}
	if w.Code != http.StatusOK || got["_ng_no_persist"] != true || got["_ng_failure_class"] != "infra_failure/serve_shutdown" ||
		got["mask_sample"] != true || got["instance_config"].(map[string]any)["mask_sample"] != true || got["reward"] != 0.0 {
		t.Errorf("a row that never started, on shutdown: %d %s", w.Code, w.Body)
	}
	// with serve.failures: error, a 503 as before
	s.opt.Failures = configs.ServeFailuresError
	w = httptest.NewRecorder()
	s.answer(w, httptest.NewRequest(http.MethodPost, "/run", nil), rw, "", ending{final: a.entry, err: a.err})
	if w.Code != http.StatusServiceUnavailable || strings.Contains(w.Body.String(), "_ng_no_persist") {
		t.Errorf("on shutdown with failures: error: %d %s", w.Code, w.Body)
	}
	if all, _ := d.Ledger.List(); len(all) != 2 {
		t.Errorf("ledger has %d entries, want the 2 the test wrote", len(all))
	}
}

func waitQueued(t *testing.T, s *Server, n int) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		_, q := s.slots.counts()
		if q == n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d queued, want %d", q, n)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func itoa(i int) string { b, _ := json.Marshal(i); return string(b) }

func TestSlotsFIFO(t *testing.T) {
	s := newSlots(1)
	if err := s.acquire(context.Background()); err != nil {
		t.Fatal(err)
	}
	order := make(chan int, 3)
	for i := range 3 {
		go func() {
			if err := s.acquire(context.Background()); err == nil {
				order <- i
			}
		}()
		for { // wait until i is queued, so arrival order is known
			if _, q := s.counts(); q == i+1 {
				break
			}
			time.Sleep(time.Millisecond)
		}
	}
	for want := range 3 {
		s.release()
		if got := <-order; got != want {
			t.Fatalf("slot %d went to waiter %d", want, got)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := s.acquire(ctx); err == nil {
		t.Error("acquire with a full slot and a done context succeeded")
	}
	if n, q := s.counts(); n != 1 || q != 0 {
		t.Errorf("counts %d %d, want 1 0", n, q)
	}
}

func TestAggregateMetrics(t *testing.T) {
	s, _ := newTestServer(t, Options{})
	h := s.Handler()
	body := `{"verify_responses": [
		{"reward": 0.5, "outcome": "scored", "aime25_avg_at_8": 0.5, "_ng_task_index": 0},
		{"reward": 0.25, "outcome": "scored", "aime25_avg_at_8": 0.25},
		{"reward": 0.0, "outcome": "policy_failure", "failure_reason": "no_patch"},
		{"reward": 0.0, "outcome": "infra_failure", "failure_reason": "node_failure", "mask_sample": true, "_ng_failure_class": "infra_failure/node_failure"}
	]}`
	w := post(t, h, "/aggregate_metrics", body)
	if w.Code != 200 {
		t.Fatalf("%d %s", w.Code, w.Body)
	}
	var got struct {
		Group []any          `json:"group_level_metrics"`
		Agent map[string]any `json:"agent_metrics"`
		Key   map[string]any `json:"key_metrics"`
	}
	if err := json.Unmarshal(w.Body.Bytes(), &got); err != nil {
		t.Fatal(err)
	}
	want := map[string]any{"mean/reward": 0.25, "num_rollouts": 4.0, "num_masked": 1.0, "outcome/scored": 2.0,
		"outcome/policy_failure": 1.0, "outcome/infra_failure": 1.0, "failure_reason/no_patch": 1.0, "failure_reason/node_failure": 1.0}
	for k, v := range want {
		if got.Agent[k] != v {
			t.Errorf("agent_metrics[%s] = %v, want %v", k, got.Agent[k], v)
		}
	}
	if got.Group == nil || len(got.Group) != 0 || got.Key["mean/reward"] != 0.25 || got.Key["num_scored"] != 2.0 {
		t.Errorf("group %v key %v", got.Group, got.Key)
	}
	for _, bad := range []string{`{}`, `{"verify_responses": {}}`, `{"verify_responses": [{"reward": "x"}]}`} {
		if w := post(t, h, "/aggregate_metrics", bad); w.Code != 400 {
			t.Errorf("%s: %d, want 400", bad, w.Code)
		}
	}
}

func TestMetrics(t *testing.T) {
	s, d := newTestServer(t, Options{}, func(c *Cluster) {
		c.RemoteOps = func() map[string]int64 { return map[string]int64{"run sacct": 7, "run sbatch": 3, "stat": 2} }
	})
	e := finalEntry(t, d, rules.Outcome{Outcome: rules.PolicyFailure, Reward: f64(0), FailureReason: "no_patch"}, `{"id":"r"}`, "")
	ru := &run{done: make(chan struct{})}
	s.live[ru] = true
	s.end(ru, e, nil)
	w := httptest.NewRecorder()
	s.Handler().ServeHTTP(w, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	body, _ := io.ReadAll(w.Body)
	text := string(body)
	for _, want := range []string{
		"# TYPE nemorl_serve_episodes_in_flight gauge\nnemorl_serve_episodes_in_flight 0\n",
		"nemorl_serve_queue_length 0\n",
		`nemorl_serve_outcomes_total{outcome="policy_failure",reason="no_patch"} 1`,
		"nemorl_serve_sacct_polls_total 0\n",
		"# TYPE nemorl_serve_sacct_poll_seconds gauge\n",
		`nemorl_serve_remote_commands_total{program="sacct"} 7` + "\n" + `nemorl_serve_remote_commands_total{program="sbatch"} 3` + "\n",
		"# TYPE nemorl_serve_remote_file_operations_total counter\n" + `nemorl_serve_remote_file_operations_total{op="stat"} 2` + "\n",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("/metrics lacks %q:\n%s", want, text)
		}
	}
	if strings.Contains(text, testKey) || !strings.HasPrefix(w.Header().Get("Content-Type"), "text/plain") {
		t.Error("bad /metrics")
	}
	w = httptest.NewRecorder()
	s.Handler().ServeHTTP(w, httptest.NewRequest(http.MethodGet, "/episodes", nil))
	if w.Code != 200 || !strings.Contains(w.Body.String(), `"episodes":[]`) {
		t.Errorf("/episodes: %d %s", w.Code, w.Body)
	}
}
