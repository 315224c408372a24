package cli

// End-to-end test of `serve` through the built binary on the lab: Gym-shaped
// rows POSTed to /run at once, each run as an episode on the lab's Slurm.
// The stand-ins' mode is chosen per row: wrapper commands read a marker in
// the episode's prompt (the row's task), so one server serves scored,
// no_patch and eval-without-record rows side by side.

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/nemorl/nemorl-slurm/internal/chromium"
)

const serveConcurrency = 4

func TestServeLab(t *testing.T) {
	t.Parallel() // with the package's other shared-lab tests, after its LockLab ones
	x := newLabCLI(t)
	requireStandIns(t)
	// Gym's head server stands in this process: serve reads the policy
	// endpoint from it, two endpoints to spread the episodes over (the
	// stand-in author calls neither).
	endpoints := []string{"http://127.0.0.1:9/v1", "http://localhost:9/v1"}
	head := gymHeadServer(t, endpoints, x.apiKey)
	cfg := x.serveConfig(t, fmt.Sprintf("  concurrency: %d\n", serveConcurrency), head)
	state := t.TempDir()

	// Refusals, before any connection.
	r := x.run(t, state, quickTimeout, "serve", "--config", cfg)
	r.want(t, ExitUsage)
	if !strings.Contains(r.stderr, "--allow-no-isolation") {
		t.Errorf("serve with runtime none: %s", r)
	}
	r = x.run(t, state, quickTimeout, "serve", "--config", cfg, "--allow-no-isolation", "--listen", "0.0.0.0:0")
	r.want(t, ExitUsage)
	if !strings.Contains(r.stderr, "serve.token") {
		t.Errorf("serve beyond loopback without a token: %s", r)
	}

	tag := randHex(t)
	rowFor := func(task, rollout int, statement string) string {
		return fmt.Sprintf(`{"responses_create_params": {"input": [{"role": "user", "content": "ignored"}], "metadata": {"problem_statement": %q}}, "agent_ref": {"name": "nemorl_env"}, "_ng_task_index": %d, "_ng_rollout_index": %d, "_rowidx": %d}`,
			statement+" "+tag, task, rollout, task)
	}
	scoredA := rowFor(0, 0, "Improve post-training (A).")
	rows := []string{
		scoredA,
		scoredA, // the same rollout at once: one chain
		rowFor(1, 0, "Improve post-training (B)."),
		rowFor(2, 0, "LABMODE:author-no-patch"),
		rowFor(3, 0, "LABMODE:eval-no-record"),
		rowFor(5, 0, "LABMODE:eval-two-records"),
	}
	for i := 6; i < 12; i++ {
		rows = append(rows, rowFor(i, 0, fmt.Sprintf("Improve post-training (%d).", i)))
	}

	srv := x.startServe(t, state, cfg)
	answers := make([]map[string]any, len(rows))
	codes := make([]int, len(rows))
	var wg sync.WaitGroup
	var answered atomic.Int32
	for i, body := range rows {
		wg.Add(1)
		go func() {
			defer wg.Done()
			codes[i], answers[i] = srv.post(t, "/run", body)
			answered.Add(1)
		}()
	}
	// While they run, /episodes never shows more than the bound in flight.
	maxSeen, maxConns := 0, 0
	stopSampling := make(chan struct{})
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		for {
			select {
			case <-stopSampling:
				return
			case <-time.After(300 * time.Millisecond):
			}
			if n := sshConnections(t, srv.cmd.Process.Pid, x.lab.SSHPort); n > maxConns {
				maxConns = n
			}
			if n := srv.inFlight(t); n > maxSeen {
				maxSeen = n
			}
		}
	}()
	// The live page, in a real browser, while they run: episodes in flight.
	requireChromium(t)
	eventually(t, quickTimeout, 200*time.Millisecond, func() string {
		if srv.inFlight(t) <= 0 {
			return "no episode in flight yet"
		}
		return ""
	})
	during := x.livePage(t, srv, false, "")
	// One page kept open while the rows run: its own script refreshes it,
	// and the count it shows changes, down to 0, without a reload (a
	// reload would end the watching script).
	var (
		w         liveWatch
		watchPage *chromium.Page
		watchErr  error
	)
	watched := make(chan struct{})
	watchCtx, stopWatch := context.WithTimeout(context.Background(), 5*time.Minute)
	t.Cleanup(func() { stopWatch(); <-watched }) // no browser outlives the test
	go func() {
		defer close(watched)
		w, watchPage, watchErr = watchLivePage(watchCtx, srv)
	}()
	// Once a first wave has ended, others run: the page with its pictures.
	eventually(t, episodeTimeout, 200*time.Millisecond, func() string {
		if answered.Load() < serveConcurrency {
			return "the first rows have not been answered"
		}
		return ""
	})
	mid := x.livePage(t, srv, false, os.Getenv("NEMORL_UI_SCREENSHOT"))
	wg.Wait()
	close(stopSampling)
	<-sampled
	after := x.livePage(t, srv, true, "")
	<-watched
	if watchErr != nil {
		t.Fatal(watchErr)
	}
	browserClean(t, watchPage)
	var counts []string
	for _, s := range w.Seen {
		counts = append(counts, fmt.Sprintf("%s at %.1fs", s.V, float64(s.MS)/1000))
	}
	if len(w.Seen) < 2 || w.Seen[0].V == "0" || w.Seen[len(w.Seen)-1].V != "0" || w.Swaps < 2 {
		t.Errorf("/ui kept open in Chromium: in flight %v over %d refreshes, want a count that changes down to 0 over refreshes", counts, w.Swaps)
	}
	t.Logf("/ui kept open in Chromium, refreshed %d times by its own script: in flight %s", w.Swaps, strings.Join(counts, ", "))
	if during.Inflight == "0" || after.Inflight != "0" {
		t.Errorf("/ui in Chromium: %q in flight while the rows ran, %q after, want some then 0", during.Inflight, after.Inflight)
	}
	if mid.Rows <= during.Rows && during.Rows < len(rows)-1 {
		t.Errorf("/ui in Chromium: %d episodes at first, %d after the first answers, want more", during.Rows, mid.Rows)
	}
	if after.Rows != len(rows)-1 { // the doubled row is one episode
		t.Errorf("/ui in Chromium after the rows: %d episode rows, want %d", after.Rows, len(rows)-1)
	}
	t.Logf("/ui in Chromium: %s in flight (%d episodes) at first, %s (%d) after %d answers, %s (%d) at the end", during.Inflight, during.Rows, mid.Inflight, mid.Rows, serveConcurrency, after.Inflight, after.Rows)
	if maxSeen > serveConcurrency || maxSeen == 0 {
		t.Errorf("/episodes showed %d in flight at most, want 1..%d", maxSeen, serveConcurrency)
	}
	t.Logf("at most %d episodes in flight (/episodes), %d SSH connections", maxSeen, maxConns)
	if maxConns != 1 {
		t.Errorf("serve held up to %d SSH connections to the lab, want exactly 1", maxConns)
	}
	for i, a := range answers {
		if codes[i] != 200 {
			t.Fatalf("row %d: HTTP %d %v", i, codes[i], a)
		}
	}
	want := []struct{ outcome, reason, class string }{
		{"scored", "", ""}, {"scored", "", ""}, {"scored", "", ""},
		{"policy_failure", "no_patch", ""},
		{"infra_failure", "missing_record", "infra_failure/missing_record"},
		// A forged eval record: the policy's doing without isolation.
		{"policy_failure", "duplicate_record", ""},
	}
	for len(want) < len(rows) {
		want = append(want, want[0])
	}
	for i, w := range want {
		a := answers[i]
		if a["outcome"] != w.outcome || a["failure_reason"] != w.reason || str(a["_ng_failure_class"]) != w.class {
			t.Errorf("row %d: outcome %v reason %v class %v (detail %v), want %+v", i, a["outcome"], a["failure_reason"], a["_ng_failure_class"], a["detail"], w)
		}
	}
	if answers[0]["episode"] != answers[1]["episode"] {
		t.Errorf("the same row sent twice ran as %v and %v, want one episode", answers[0]["episode"], answers[1]["episode"])
	}
	if a := answers[0]; a["reward"] != a["aime25_avg_at_8"] || a["mask_sample"] != false || !strings.Contains(str(a["patch"]), "diff --git") {
		t.Errorf("scored answer: reward %v aime25_avg_at_8 %v mask %v patch %.60q", a["reward"], a["aime25_avg_at_8"], a["mask_sample"], a["patch"])
	}
	if resp, _ := answers[0]["response"].(map[string]any); resp["object"] != "response" {
		t.Errorf("scored answer: response %v, want the author's response.json", answers[0]["response"])
	}
	if a := answers[3]; a["reward"] != 0.0 || a["mask_sample"] != false || a["patch"] != "" {
		t.Errorf("no_patch answer: reward %v mask %v patch %q", a["reward"], a["mask_sample"], a["patch"])
	}
	if a := answers[4]; a["mask_sample"] != true || a["reward"] != 0.0 || a["_ng_failure_terminal"] != nil {
		t.Errorf("masked answer: %v", a)
	} else if ic, _ := a["instance_config"].(map[string]any); ic["mask_sample"] != true {
		t.Errorf("masked answer: instance_config %v", a["instance_config"])
	}
	if a := answers[5]; a["mask_sample"] != false || a["reward"] != 0.0 || a["_ng_failure_terminal"] != nil || a["tampering"] != true {
		t.Errorf("forged eval record's answer: %v, want the policy's 0, flagged", a)
	}
	for i, a := range answers {
		if raw, _ := json.Marshal(a); bytes.Contains(raw, []byte(x.apiKey)) {
			t.Errorf("row %d: the API key is in the answer", i)
		}
	}

	// One chain for the doubled row; no train or eval for no_patch.
	epA, epNoPatch := str(answers[0]["episode"]), str(answers[3]["episode"])
	waitSacct(t, epA, sacctWant{states: allStates("COMPLETED", labStages...), tags: true})
	waitSacct(t, epNoPatch, sacctWant{states: map[string]string{"author": "COMPLETED"}, tags: true})
	for _, a := range answers {
		t.Cleanup(func() { cleanupEpisode(t, str(a["episode"])) })
	}

	// Never more than serve.concurrency episodes in flight, by the ledger:
	// from the author's sbatch intent to the outcome.
	x.checkOverlap(t, state, serveConcurrency)

	// /metrics and /aggregate_metrics.
	code, raw := srv.get(t, "/metrics")
	if code != 200 || !bytes.Contains(raw, []byte(`nemorl_serve_outcomes_total{outcome="scored",reason=""} 8`)) ||
		!bytes.Contains(raw, []byte("nemorl_serve_attached_total 1")) || bytes.Contains(raw, []byte(x.apiKey)) {
		t.Errorf("/metrics: %d\n%s", code, raw)
	}
	// The exposition as Prometheus reads it, with the episodes' histograms.
	promtool := exec.Command("promtool", "check", "metrics")
	promtool.Stdin = bytes.NewReader(raw)
	if out, err := promtool.CombinedOutput(); err != nil {
		t.Errorf("promtool check metrics on serve's /metrics: %v\n%s", err, out)
	}
	if n := metricValue(t, raw, "nemorl_serve_episode_duration_seconds_count"); n != int64(len(rows)-1) {
		t.Errorf("nemorl_serve_episode_duration_seconds_count %d, want %d episodes", n, len(rows)-1)
	}
	if !bytes.Contains(raw, []byte(`nemorl_serve_stage_run_seconds_bucket{stage="train",le="3600"}`)) {
		t.Errorf("/metrics has no train run-time bucket at 1 h")
	}
	// Each poll: at most one squeue for the jobs in flight, and sacct only
	// when a job left squeue: the commands serve ran on the cluster,
	// counted where they are sent.
	polls, sacct := metricValue(t, raw, "nemorl_serve_sacct_polls_total"), metricValue(t, raw, `nemorl_serve_remote_commands_total{program="sacct"}`)
	squeue, sacctJobs := metricValue(t, raw, `nemorl_serve_remote_commands_total{program="squeue"}`), metricValue(t, raw, "nemorl_serve_poll_sacct_jobs_total")
	staged, sbatch := metricValue(t, raw, `nemorl_serve_remote_commands_total{program="stage+sbatch"}`), metricValue(t, raw, `nemorl_serve_remote_commands_total{program="sbatch"}`)
	t.Logf("%d polls, %d squeue, %d sacct (for %d job ids); %d commands staged and submitted authors, %d submitted train and eval (jobs and job arrays), for %d episodes", polls, squeue, sacct, sacctJobs, staged, sbatch, len(rows)-1)
	// One sbatch per train or eval job of its own, one per job array of
	// them (one poll's trains, their evals), as the ledger records them:
	// none for the episode without a patch; the eval that prints no
	// record is run twice more (episodes.retries: 2, the evaluator dying
	// is the cluster's), each retry a job of its own.
	units := map[string]bool{}
	for _, a := range answers[1:] {
		readLedger(t, state, str(a["episode"])).sbatchUnits(units)
	}
	if staged < 1 || staged > int64(len(rows)-1) || sbatch != int64(len(units)) || len(units) > 2*(len(rows)-1-1)+2 {
		t.Errorf("%d staging commands and %d sbatch for %d episodes (one without a patch, one eval retried twice): want at most one staging command per episode, and one sbatch per train or eval job or job array the ledger records (%d: %v), at most one each and two for the retries", staged, sbatch, len(rows)-1, len(units), units)
	}
	if polls < 5 || squeue < 1 || squeue > polls || sacct < 1 || sacct > polls || sacctJobs < sacct {
		t.Errorf("%d squeue and %d sacct commands (for %d job ids) for %d polls, want at most one squeue and one sacct per poll, and sacct for the jobs that ended", squeue, sacct, sacctJobs, polls)
	}
	// The episodes went round the head's endpoints; each author got its own.
	used := map[string]int{}
	for _, a := range answers[1:] {
		var e struct {
			PolicyBaseURL string `json:"policy_base_url"`
			Dir           string `json:"dir"`
		}
		b, err := os.ReadFile(ledgerPath(state, str(a["episode"])))
		if err != nil || json.Unmarshal(b, &e) != nil {
			t.Fatalf("ledger of %v: %v", a["episode"], err)
		}
		used[e.PolicyBaseURL]++
		var settings struct {
			PolicyModel struct {
				BaseURL string `json:"base_url"`
			} `json:"policy_model"`
		}
		b, err = os.ReadFile(filepath.Join(e.Dir, "author", "bundle", "author.json"))
		if err != nil || json.Unmarshal(b, &settings) != nil || settings.PolicyModel.BaseURL != e.PolicyBaseURL {
			t.Errorf("%v: author.json (%v) names %q, the ledger %q", a["episode"], err, settings.PolicyModel.BaseURL, e.PolicyBaseURL)
		}
	}
	if len(used) != 2 || used[endpoints[0]] < 4 || used[endpoints[1]] < 4 {
		t.Errorf("episodes by endpoint %v, want both of %v used evenly", used, endpoints)
	}
	agg, _ := json.Marshal(map[string]any{"verify_responses": answers})
	code, doc := srv.post(t, "/aggregate_metrics", string(agg))
	if am, _ := doc["agent_metrics"].(map[string]any); code != 200 || am["num_rollouts"] != 12.0 || am["outcome/scored"] != 9.0 || am["num_masked"] != 1.0 {
		t.Errorf("/aggregate_metrics: %d %v", code, doc)
	}
	code, doc = srv.post(t, "/run", `{"responses_create_params": 7}`)
	if code != 200 || doc["field"] != "responses_create_params" || doc["_ng_failure_class"] != "data_error/responses_create_params" || doc["mask_sample"] != true {
		t.Errorf("bad row: %d %v, want 200 with data_error/responses_create_params", code, doc)
	}

	// kill -9 mid-episode, restart, re-send: the same episode, one chain.
	rowE := rowFor(4, 0, "Improve post-training (E).")
	go srv.post(t, "/run", rowE) // its answer dies with the server
	epE := x.waitNewEpisode(t, state, answers)
	srv.kill(t)
	srv = x.startServe(t, state, cfg)
	t.Cleanup(func() { cleanupEpisode(t, epE) })
	code, doc = srv.post(t, "/run", rowE)
	if code != 200 || doc["episode"] != epE || doc["outcome"] != "scored" {
		t.Errorf("row re-sent after kill -9: %d episode %v outcome %v, want %s scored", code, doc["episode"], doc["outcome"], epE)
	}
	waitSacct(t, epE, sacctWant{states: allStates("COMPLETED", labStages...), tags: true})
	// A finished row whose answer was delivered, sent again: a new episode.
	code, doc = srv.post(t, "/run", rows[3])
	if code != 200 || doc["episode"] == epNoPatch || doc["stored"] == true || doc["failure_reason"] != "no_patch" {
		t.Errorf("no_patch row sent again after its answer was delivered: %d %v, want a new episode", code, doc)
	}
	t.Cleanup(func() { cleanupEpisode(t, str(doc["episode"])) })
	// A row whose caller left before the end: its re-send gets the stored
	// outcome, once.
	rowF := rowFor(13, 0, "LABMODE:author-no-patch (F)")
	lctx, leave := context.WithCancel(context.Background())
	go func() {
		req, _ := http.NewRequestWithContext(lctx, http.MethodPost, srv.url+"/run", strings.NewReader(rowF))
		if resp, err := http.DefaultClient.Do(req); err == nil {
			resp.Body.Close()
		}
	}()
	epF := x.waitNewEpisode(t, state, append(answers, doc, map[string]any{"episode": epE}))
	leave()
	t.Cleanup(func() { cleanupEpisode(t, epF) })
	eventually(t, episodeTimeout, 500*time.Millisecond, func() string {
		if e := readLedgerRaw(t, state, epF); !strings.Contains(e, `"decided"`) {
			return epF + " not final yet"
		}
		return ""
	})
	code, doc = srv.post(t, "/run", rowF)
	if code != 200 || doc["episode"] != epF || doc["stored"] != true || doc["failure_reason"] != "no_patch" {
		t.Errorf("re-send of a row whose caller left: %d %v, want %s stored", code, doc, epF)
	}
	code, doc = srv.post(t, "/run", rowF)
	if code != 200 || doc["episode"] == epF || doc["stored"] == true {
		t.Errorf("the same row after its stored outcome was delivered: %d %v, want a new episode", code, doc)
	}
	t.Cleanup(func() { cleanupEpisode(t, str(doc["episode"])) })
	// SIGTERM: a clean stop.
	if err := srv.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if r := srv.wait(t, 30*time.Second); r.code != 0 || !strings.Contains(r.stderr, "serve: stopping") ||
		!strings.Contains(r.stderr, "serve: policy_model.base_url, policy_model.api_key, policy_model.model from the gym head server "+head+" (2 endpoint(s))") {
		t.Errorf("serve after SIGTERM: %s", r)
	} else if strings.Contains(r.stderr, x.apiKey) {
		t.Errorf("the API key is in serve's log:\n%s", r.stderr)
	}

	// serve.failures: error and a token, through the binary: no token is
	// 401 and submits nothing; a masked outcome is HTTP 500 with a JSON body.
	const token = "lab-serve-token-0123456789"
	cfgErr := x.serveConfig(t, "  failures: error\n  token: "+token+"\n", head)
	srv = x.startServe(t, state, cfgErr)
	rowM := rowFor(12, 0, "LABMODE:eval-no-record")
	code, doc = srv.postAuth(t, "/run", rowM, "")
	if code != 401 || !strings.Contains(str(doc["error"]), "bearer token") {
		t.Errorf("/run without the token: %d %v", code, doc)
	}
	code, doc = srv.postAuth(t, "/run", rowM, "wrong-"+token)
	if code != 401 {
		t.Errorf("/run with a wrong token: %d %v", code, doc)
	}
	if code, _ := srv.get(t, "/metrics"); code != 401 {
		t.Errorf("/metrics without the token: %d", code)
	}
	code, doc = srv.postAuth(t, "/run", rowM, token)
	t.Cleanup(func() { cleanupEpisode(t, str(doc["episode"])) })
	if code != 500 || doc["outcome"] != "infra_failure" || doc["failure_reason"] != "missing_record" || doc["mask_sample"] != true || doc["episode"] == "" {
		t.Errorf("serve.failures error, a masked outcome: HTTP %d %v", code, doc)
	}
	if raw, _ := json.Marshal(doc); bytes.Contains(raw, []byte(token)) || bytes.Contains(raw, []byte(x.apiKey)) {
		t.Errorf("a secret is in the 500 answer: %s", raw)
	}
	if err := srv.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if r := srv.wait(t, 30*time.Second); r.code != 0 || strings.Contains(r.stderr, token) || strings.Contains(r.stderr, x.apiKey) {
		t.Errorf("the second serve after SIGTERM (or a secret in its log): %s", r)
	}
}

// gymHeadServer stands for NeMo Gym's head server: GET
// /global_config_dict_yaml answers the global config as NeMo RL makes it
// (the YAML text JSON-encoded), with the policy endpoints, key and model.
func gymHeadServer(t *testing.T, endpoints []string, key string) string {
	t.Helper()
	var y strings.Builder
	y.WriteString("policy_base_url:\n")
	for _, e := range endpoints {
		fmt.Fprintf(&y, "- %s\n", e)
	}
	fmt.Fprintf(&y, "policy_api_key: %s\npolicy_model_name: stand-in\nhead_server:\n  host: 127.0.0.1\n  port: 11000\n", key)
	body, _ := json.Marshal(y.String())
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/global_config_dict_yaml" {
			http.NotFound(w, r)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(body)
	}))
	t.Cleanup(srv.Close)
	return srv.URL
}

// metricValue reads one sample of a Prometheus text exposition.
func metricValue(t *testing.T, text []byte, name string) int64 {
	t.Helper()
	for _, line := range strings.Split(string(text), "\n") {
		if v, ok := strings.CutPrefix(line, name+" "); ok {
			var n int64
			if _, err := fmt.Sscan(v, &n); err == nil {
				return n
			}
		}
	}
	t.Errorf("/metrics has no %s:\n%s", name, text)
	return -1
}

func str(v any) string { s, _ := v.(string); return s }

// rowBody is a /run row whose problem statement names i and tag.
func rowBody(i int, tag string) string {
	return fmt.Sprintf(`{"responses_create_params": {"input": "x", "metadata": {"problem_statement": "Improve post-training (%d) %s"}}, "_ng_task_index": %d, "_ng_rollout_index": 0}`, i, tag, i)
}

func randHex(t *testing.T) string {
	var b [4]byte
	if _, err := rand.Read(b[:]); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(b[:])
}

// serveConfig is configs/lab-none.yaml with the author and eval stand-ins behind
// wrappers that pick their mode from a marker in the episode's prompt.
func (x *labCLI) serveConfig(t *testing.T, serveKeys string, gymHead string) string {
	t.Helper()
	// In /var/tmp, not /tmp: the lab's cluster 2 node has a /tmp of its own.
	dir, err := os.MkdirTemp("/var/tmp", "nemorl-serve-lab-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil { // the lab user runs them
		t.Fatal(err)
	}
	// LABMODE:<stage>-<flag> in the prompt gives the stage's stand-in --<flag>.
	wrapper := func(stage, prompt string) string {
		return "#!/bin/sh\nmode=$(/bin/sed -n 's/.*LABMODE:" + stage + "-\\([a-z-]*\\).*/\\1/p' \"" + prompt + "\" | /usr/bin/head -n 1)\n" +
			"exec " + labStandIns + "/" + stage + " ${mode:+--$mode}\n"
	}
	wrappers := map[string]string{
		"author": wrapper("author", "$NEMORL_PROMPT"),
		"eval":   wrapper("eval", "$NEMORL_OUT/../../author/prompt.txt"),
	}
	data := x.base
	for stage, body := range wrappers {
		p := filepath.Join(dir, stage)
		if err := os.WriteFile(p, []byte(body), 0o755); err != nil {
			t.Fatal(err)
		}
		old := "command: [" + labStandIns + "/" + stage + "]"
		if strings.Count(data, old) != 1 {
			t.Fatalf("configs/lab-none.yaml: no single %q", old)
		}
		data = strings.Replace(data, old, "command: ["+p+"]", 1)
	}
	if gymHead != "" {
		// The policy endpoint comes from the head server instead.
		for _, key := range []string{"base_url", "api_key", "model"} {
			lines := strings.Split(data, "\n")
			kept := lines[:0]
			for _, l := range lines {
				if !strings.HasPrefix(l, "  "+key+":") {
					kept = append(kept, l)
				}
			}
			data = strings.Join(kept, "\n")
		}
		serveKeys += "  gym_head: " + gymHead + "\n"
	}
	data += "serve:\n" + serveKeys
	p := filepath.Join(t.TempDir(), "serve.yaml")
	if err := os.WriteFile(p, []byte(data), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

type serveProc struct {
	*bgRun
	url string
}

func (x *labCLI) startServe(t *testing.T, state, cfg string) *serveProc {
	t.Helper()
	addr := freeAddr(t)
	return x.startServeAt(t, state, cfg, addr)
}

// startServeAt starts serve listening on addr (a restart at the address
// its clients retry).
func (x *labCLI) startServeAt(t *testing.T, state, cfg, addr string) *serveProc {
	t.Helper()
	return x.startServeFor(t, state, cfg, addr, 10*time.Minute)
}

// startServeFor is startServeAt with serve's own time limit.
func (x *labCLI) startServeFor(t *testing.T, state, cfg, addr string, limit time.Duration) *serveProc {
	t.Helper()
	b := x.start(t, state, limit, "serve", "--config", cfg, "--allow-no-isolation", "--listen", addr)
	s := &serveProc{bgRun: b, url: "http://" + addr}
	eventually(t, quickTimeout, 100*time.Millisecond, func() string {
		if b.exited() {
			t.Fatalf("serve exited: %s", b.res)
		}
		code, _ := s.get(t, "/")
		if code != 200 {
			return "serve not up yet"
		}
		return ""
	})
	return s
}

func (s *serveProc) kill(t *testing.T) {
	_ = syscall.Kill(-s.cmd.Process.Pid, syscall.SIGKILL)
	<-s.done
}

func (s *serveProc) get(t *testing.T, path string) (int, []byte) {
	resp, err := http.Get(s.url + path)
	if err != nil {
		return 0, nil
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, b
}

// inFlight is serve's in_flight of /episodes, or -1 when it does not answer.
func (s *serveProc) inFlight(t *testing.T) int {
	var doc struct {
		InFlight int `json:"in_flight"`
	}
	if code, raw := s.get(t, "/episodes"); code != 200 || json.Unmarshal(raw, &doc) != nil {
		return -1
	}
	return doc.InFlight
}

// post sends body and decodes the JSON answer (no client timeout: a /run
// lasts the episode; the test's own deadline bounds it).
func (s *serveProc) post(t *testing.T, path, body string) (int, map[string]any) {
	return s.postAuth(t, path, body, "")
}

// postAuth is post with a bearer token, when not empty.
func (s *serveProc) postAuth(t *testing.T, path, body, token string) (int, map[string]any) {
	return s.postWithin(t, 2*episodeTimeout, path, body, token)
}

// postWithin is postAuth that waits up to d for the answer.
func (s *serveProc) postWithin(t *testing.T, d time.Duration, path, body, token string) (int, map[string]any) {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, s.url+path, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, map[string]any{"error": err.Error()}
	}
	defer resp.Body.Close()
	var doc map[string]any
	raw, _ := io.ReadAll(resp.Body)
	if err := json.Unmarshal(raw, &doc); err != nil {
		doc = map[string]any{"raw": string(raw)}
	}
	return resp.StatusCode, doc
}

// checkOverlap reads the ledger: at no instant were more than n episodes
// between their author's sbatch intent and their outcome.
func (x *labCLI) checkOverlap(t *testing.T, state string, n int) {
	t.Helper()
	files, _ := filepath.Glob(filepath.Join(state, "nemorl-slurm", "episodes", "ep-*.json"))
	type ev struct {
		at    time.Time
		delta int
	}
	var evs []ev
	for _, f := range files {
		var e struct {
			Jobs map[string]struct {
				Intent time.Time `json:"intent"`
			} `json:"jobs"`
			Outcome struct {
				Decided time.Time `json:"decided"`
			} `json:"outcome"`
		}
		b, err := os.ReadFile(f)
		if err != nil || json.Unmarshal(b, &e) != nil {
			t.Fatalf("ledger %s: %v", f, err)
		}
		evs = append(evs, ev{e.Jobs["author"].Intent, +1}, ev{e.Outcome.Decided, -1})
	}
	sort.Slice(evs, func(i, j int) bool {
		if evs[i].at.Equal(evs[j].at) {
			return evs[i].delta < evs[j].delta
		}
		return evs[i].at.Before(evs[j].at)
	})
	cur, peak := 0, 0
	for _, e := range evs {
		cur += e.delta
		peak = max(peak, cur)
	}
	if peak > n || len(files) == 0 {
		t.Errorf("the ledger (%d episodes) shows %d in flight at once, want at most %d", len(files), peak, n)
	}
}

// waitNewEpisode waits for an episode not among answers to have its
// author job id in the ledger, and returns it.
func (x *labCLI) waitNewEpisode(t *testing.T, state string, answers []map[string]any) string {
	t.Helper()
	known := map[string]bool{}
	for _, a := range answers {
		known[str(a["episode"])] = true
	}
	var ep string
	eventually(t, quickTimeout, 200*time.Millisecond, func() string {
		files, _ := filepath.Glob(filepath.Join(state, "nemorl-slurm", "episodes", "ep-*.json"))
		for _, f := range files {
			id := strings.TrimSuffix(filepath.Base(f), ".json")
			if known[id] {
				continue
			}
			if e := readLedger(t, state, id); e.Jobs["author"].JobID != "" {
				ep = id
				return ""
			}
		}
		return "no new episode with an author job yet"
	})
	return ep
}

// cleanupEpisode scancels whatever an episode left.
func cleanupEpisode(t *testing.T, ep string) {
	if ep == "" {
		return
	}
	for _, s := range labStages {
		_ = exec.Command("scancel", "--name="+jobName(ep, s)).Run()
	}
}

// sshConnections counts the established TCP connections of process pid to
// the lab's sshd (ss, as root).
func sshConnections(t *testing.T, pid, port int) int {
	out, err := exec.Command("ss", "-Htnp", "state", "established", fmt.Sprintf("( dport = :%d )", port)).Output()
	if err != nil {
		t.Logf("ss: %v", err)
		return 0
	}
	return strings.Count(string(out), fmt.Sprintf("pid=%d,", pid))
}

// liveWatch is what watchScript saw of one /ui page kept open: each
// in-flight count it showed, from when, and how many times the page's
// own script swapped in new figures.
type liveWatch struct {
	Seen []struct {
		V  string `json:"v"`
		MS int64  `json:"ms"`
	} `json:"seen"`
	Swaps int `json:"swaps"`
}

// watchScript follows #inflight-now every 250 ms until it shows 0 (or four
// minutes pass) and counts the swaps of #live's content.
const watchScript = `new Promise((resolve) => {
  const t0 = Date.now();
  let swaps = 0;
  new MutationObserver(() => { swaps++; }).observe(document.getElementById("live"), {childList: true});
  const seen = [];
  const look = () => {
    const el = document.getElementById("inflight-now");
    const v = el ? el.textContent.trim() : "";
    if (seen.length === 0 || seen[seen.length - 1].v !== v) seen.push({v: v, ms: Date.now() - t0});
    if (v === "0" || Date.now() - t0 > 240000) { resolve({seen: seen, swaps: swaps}); return; }
    setTimeout(look, 250);
  };
  look();
})`

// watchLivePage loads serve's /ui once and keeps it open under
// watchScript. It runs beside the test, so it reports instead of failing.
func watchLivePage(ctx context.Context, srv *serveProc) (liveWatch, *chromium.Page, error) {
	var w liveWatch
	page, err := chromium.Load(ctx, srv.url+"/ui", chromium.Options{AllowLoopback: true, Script: watchScript})
	if err != nil {
		return w, nil, fmt.Errorf("chromium /ui kept open: %w", err)
	}
	if err := json.Unmarshal(page.Result, &w); err != nil {
		return w, page, fmt.Errorf("/ui kept open, its answer %s: %w", page.Result, err)
	}
	return w, page, nil
}

// livePage is serve's /ui as headless Chromium shows it (loopback only):
// every chart present (drawn, with withData: it may say "no data" while
// no episode has ended), nothing logged wrong; png, when set, gets its
// screenshot.
func (x *labCLI) livePage(t *testing.T, srv *serveProc, withData bool, png string) pageView {
	t.Helper()
	return loadPage(t, "/ui", srv.url+"/ui", chromium.Options{AllowLoopback: true}, withData, png, 1300)
}

// freeAddr is a loopback address with a port free now, for a server the
// test starts (serve's --listen, NEMORL_SERVE_PPROF).
func freeAddr(t testing.TB) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}
