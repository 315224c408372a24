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
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nemorl/nemorl-slurm/configs"
	"github.com/nemorl/nemorl-slurm/internal/labtest"
)

const serveConcurrency = 2

func TestServeLab(t *testing.T) {
	lab := labtest.Env(t)
	labtest.UseSSHD(t)
	requireStandIns(t)
	base, err := os.ReadFile("../configs/lab.yaml")
	if err != nil {
		t.Fatal(err)
	}
	lcfg, err := configs.LoadFile("../configs/lab.yaml")
	if err != nil {
		t.Fatal(err)
	}
	x := &labCLI{bin: buildBinary(t), lab: lab, base: string(base), apiKey: lcfg.PolicyModel.APIKey.Reveal()}
	cfg := x.serveConfig(t)
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

	srv := x.startServe(t, state, cfg)
	answers := make([]map[string]any, len(rows))
	codes := make([]int, len(rows))
	var wg sync.WaitGroup
	for i, body := range rows {
		wg.Add(1)
		go func() {
			defer wg.Done()
			codes[i], answers[i] = srv.post(t, "/run", body)
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
			var doc struct {
				InFlight int `json:"in_flight"`
			}
			if code, raw := srv.get(t, "/episodes"); code == 200 && json.Unmarshal(raw, &doc) == nil && doc.InFlight > maxSeen {
				maxSeen = doc.InFlight
			}
		}
	}()
	wg.Wait()
	close(stopSampling)
	<-sampled
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
		{"integrity_violation", "duplicate_record", "integrity_violation/duplicate_record"},
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
	if a := answers[5]; a["mask_sample"] != true || a["reward"] != 0.0 || a["_ng_failure_terminal"] != true || a["tampering"] != true {
		t.Errorf("integrity answer: %v", a)
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
	if code != 200 || !bytes.Contains(raw, []byte(`nemorl_serve_outcomes_total{outcome="scored",reason=""} 2`)) ||
		!bytes.Contains(raw, []byte("nemorl_serve_attached_total 1")) || bytes.Contains(raw, []byte(x.apiKey)) {
		t.Errorf("/metrics: %d\n%s", code, raw)
	}
	agg, _ := json.Marshal(map[string]any{"verify_responses": answers})
	code, doc := srv.post(t, "/aggregate_metrics", string(agg))
	if am, _ := doc["agent_metrics"].(map[string]any); code != 200 || am["num_rollouts"] != 6.0 || am["outcome/scored"] != 3.0 || am["num_masked"] != 2.0 {
		t.Errorf("/aggregate_metrics: %d %v", code, doc)
	}
	code, doc = srv.post(t, "/run", `{"responses_create_params": 7}`)
	if code != 400 || doc["field"] != "responses_create_params" {
		t.Errorf("bad row: %d %v", code, doc)
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
	// A finished row re-sent gets its stored outcome.
	code, doc = srv.post(t, "/run", rows[3])
	if code != 200 || doc["episode"] != epNoPatch || doc["stored"] != true || doc["failure_reason"] != "no_patch" {
		t.Errorf("no_patch row re-sent: %d %v", code, doc)
	}
	// SIGTERM: a clean stop.
	if err := srv.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if r := srv.wait(t, 30*time.Second); r.code != 0 || !strings.Contains(r.stderr, "serve: stopping") {
		t.Errorf("serve after SIGTERM: %s", r)
	} else if strings.Contains(r.stderr, x.apiKey) {
		t.Errorf("the API key is in serve's log:\n%s", r.stderr)
	}
}

func str(v any) string { s, _ := v.(string); return s }

func randHex(t *testing.T) string {
	var b [4]byte
	if _, err := rand.Read(b[:]); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(b[:])
}

// serveConfig is configs/lab.yaml with the author and eval stand-ins behind
// wrappers that pick their mode from a marker in the episode's prompt.
func (x *labCLI) serveConfig(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("/tmp", "nemorl-serve-lab-")
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
			t.Fatalf("configs/lab.yaml: no single %q", old)
		}
		data = strings.Replace(data, old, "command: ["+p+"]", 1)
	}
	data += fmt.Sprintf("serve:\n  concurrency: %d\n", serveConcurrency)
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
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	b := x.start(t, state, 10*time.Minute, "serve", "--config", cfg, "--allow-no-isolation", "--listen", addr)
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

// post sends body and decodes the JSON answer (no client timeout: a /run
// lasts the episode; the test's own deadline bounds it).
func (s *serveProc) post(t *testing.T, path, body string) (int, map[string]any) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*episodeTimeout)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, s.url+path, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
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
