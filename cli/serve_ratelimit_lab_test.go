package cli

// serve against a controller that rate-limits its users: the lab's
// cluster 3 (lab/cluster3: Slurm 24.11 with
// SlurmctldParameters=rl_enable, bucket 30, refill 2/s; lab/README.md).

import (
	"bytes"
	"fmt"
	"os"
	"os/user"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/nemorl/nemorl-slurm/slurm"
)

// TestServeRateLimitedLab: a burst of NEMORL_RL_ROWS rows (default 8; with
// NEMORL_RL_SUBMIT_RATE, cluster.submit_rate set to it) to a serve whose
// cluster, the lab's cluster 3, throttles every user's RPCs. Slurm's
// client commands back off by themselves there (they sleep and retry,
// print nothing and exit 0; lab/README.md "Cluster 3"), so what the tool
// sees is slow sbatch and squeue: every row must still be scored, once;
// the controller's log must show it told the lab user to back off while
// the rows ran, and serve's own log that its Slurm commands were slowed
// (slurm.Client.Slow: a command of 2 s or more). The bucket is the lab
// user's, which other tests on cluster 3 share (they run meanwhile: the
// test holds cluster 3 shared, as holding it alone cost make test minutes
// of waits); serve's log is what shows the burst's own commands throttled.
func TestServeRateLimitedLab(t *testing.T) {
	t.Parallel()
	x := newLabCLI(t)
	requireStandIns(t)
	s := x.lab.Slurm3(t)
	n := 8
	if v := os.Getenv("NEMORL_RL_ROWS"); v != "" {
		var err error
		if n, err = strconv.Atoi(v); err != nil || n < 1 {
			t.Fatalf("NEMORL_RL_ROWS=%q: want a number ≥ 1", v)
		}
	}
	spec := clusterSpec{name: "rl", port: s.Lab.SSHPort, knownHosts: s.Lab.KnownHosts}
	if r := os.Getenv("NEMORL_RL_SUBMIT_RATE"); r != "" { // cluster.submit_rate: the tool paces its sbatch
		spec.extra = append(spec.extra, "submit_rate: "+r)
	}
	cfg := x.clustersConfigOf(t, 64, spec)

	// The controller's log from here on: one line per RPC it refused.
	ctldLog := s.CtldLog
	from, err := s.CtldLogSize()
	if err != nil {
		t.Fatal(err)
	}
	u, err := user.Lookup(x.lab.User)
	if err != nil {
		t.Fatal(err)
	}
	uid, err := strconv.Atoi(u.Uid)
	if err != nil {
		t.Fatal(err)
	}

	state := t.TempDir()
	limit := 15*time.Minute + time.Duration(n)*10*time.Second
	srv := x.startServeFor(t, state, cfg, freeAddr(t), limit)
	t.Cleanup(func() { srv.kill(t) })
	start := time.Now()
	tag := randHex(t)
	codes := make([]int, n)
	docs := make([]map[string]any, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			body := rowBody(i, tag)
			codes[i], docs[i] = srv.postWithin(t, limit, "/run", body, "")
		}()
	}
	wg.Wait()
	took := time.Since(start)

	seen := map[string]int{}
	scored := 0
	for i, doc := range docs {
		ep := str(doc["episode"])
		if codes[i] != 200 || doc["outcome"] != "scored" {
			t.Errorf("row %d: %d %v", i, codes[i], doc)
		} else {
			scored++
		}
		if prev, ok := seen[ep]; ok {
			t.Errorf("rows %d and %d answered by the same episode %s", prev, i, ep)
		}
		seen[ep] = i
	}
	// What the controller refused this user while the rows ran, by RPC
	// ("RPC rate limit exceeded by uid 1001 with REQUEST_SUBMIT_BATCH_JOB
	// from 127.0.0.1:40488, telling to back off").
	byRPC, err := s.Refusals(from, uid)
	if err != nil {
		t.Fatal(err)
	}
	total := 0
	for _, n := range byRPC {
		total += n
	}
	_, raw := srv.get(t, "/metrics")
	ops := map[string]string{}
	for _, l := range strings.Split(string(raw), "\n") {
		if rest, ok := strings.CutPrefix(l, `nemorl_serve_remote_commands_total{program="`); ok {
			prog, count, _ := strings.Cut(rest, `"} `)
			ops[prog] = count
		}
	}
	pollFailures := metricValue(t, raw, "nemorl_serve_sacct_poll_failures_total")
	// serve's log: "cluster rl: slurm: squeue: squeue … took 7.2 s
	// (deadline 30s): a throttled or busy controller", one line per
	// command of its own that was slow.
	var slow []string
	for _, l := range strings.Split(srv.stderr.String(), "\n") {
		if strings.Contains(l, ": a throttled or busy controller") {
			slow = append(slow, l)
		}
	}
	t.Logf("%d of %d rows scored in %s; the controller told the lab user to back off %d times (%v); commands run: %v; poll failures: %d; serve's Slurm commands it logged as slow: %d",
		scored, n, took.Round(time.Second), total, byRPC, ops, pollFailures, len(slow))
	if len(slow) > 0 {
		t.Logf("the first: %s", slow[0])
	}
	if total == 0 {
		t.Errorf("the controller's log (%s) shows no RPC of uid %s refused: the burst never reached the rate limit, so this run shows nothing", ctldLog, u.Uid)
	}
	if len(slow) == 0 {
		t.Errorf("serve logged none of its Slurm commands as slow (a throttled or busy controller): the burst's own commands were not seen throttled")
	}
	sbatchAlone, _ := strconv.Atoi(ops["sbatch"])
	checkSlurmMetrics(t, srv, "rl", scored, sbatchAlone)
}

// checkSlurmMetrics: once every row is answered (serve runs no Slurm
// command then), /metrics counts cluster's slow Slurm commands as serve
// logged them, kind by kind ("cluster rl: slurm: squeue: … took 7.2 s
// (deadline 30s): a throttled or busy controller"); each slow command was
// observed in the duration histogram above 2 s, and each other one at or
// below; the train and eval sbatch of the scored rows (jobs or arrays)
// and the polls' squeue were observed, and the authors' sbatch, run
// within the staging command, beside the sbatchAlone run as commands of
// their own.
func checkSlurmMetrics(t *testing.T, srv *serveProc, cluster string, scored, sbatchAlone int) {
	t.Helper()
	type kindCounts struct{ slow, stopped, observed, over2s float64 }
	var byKind map[string]*kindCounts
	var logged map[string]int
	var mismatch string
	eventually(t, 15*time.Second, 250*time.Millisecond, func() string {
		_, raw := srv.get(t, "/metrics")
		parser := expfmt.NewTextParser(model.LegacyValidation)
		mfs, err := parser.TextToMetricFamilies(bytes.NewReader(raw))
		if err != nil {
			t.Fatalf("/metrics: %v", err)
		}
		byKind = map[string]*kindCounts{}
		of := func(m *dto.Metric) *kindCounts {
			var cl, kind string
			for _, lp := range m.GetLabel() {
				switch lp.GetName() {
				case "cluster":
					cl = lp.GetValue()
				case "kind":
					kind = lp.GetValue()
				}
			}
			if cl != cluster {
				return &kindCounts{}
			}
			if byKind[kind] == nil {
				byKind[kind] = &kindCounts{}
			}
			return byKind[kind]
		}
		for _, m := range mfs["nemorl_serve_slurm_slow_commands_total"].GetMetric() {
			of(m).slow = m.GetCounter().GetValue()
		}
		for _, m := range mfs["nemorl_serve_slurm_deadline_stopped_total"].GetMetric() {
			of(m).stopped = m.GetCounter().GetValue()
		}
		for _, m := range mfs["nemorl_serve_slurm_command_duration_seconds"].GetMetric() {
			h, k := m.GetHistogram(), of(m)
			k.observed = float64(h.GetSampleCount())
			k.over2s = k.observed
			for _, b := range h.GetBucket() {
				if b.GetUpperBound() == slurm.DefaultSlowAfter.Seconds() {
					k.over2s -= float64(b.GetCumulativeCount())
				}
			}
		}
		logged = map[string]int{}
		for _, l := range strings.Split(srv.stderr.String(), "\n") {
			_, rest, ok := strings.Cut(l, "cluster "+cluster+": slurm: ")
			if ok && strings.HasSuffix(l, ": a throttled or busy controller") {
				kind, _, _ := strings.Cut(rest, ":")
				logged[kind]++
			}
		}
		mismatch = ""
		for kind, k := range byKind {
			if k.slow != float64(logged[kind]) || k.over2s != k.slow {
				mismatch += fmt.Sprintf(" %s: %v slow, %v stopped in /metrics, %d logged, %v of %v observed above 2 s;", kind, k.slow, k.stopped, logged[kind], k.over2s, k.observed)
			}
		}
		for kind, n := range logged {
			if byKind[kind] == nil {
				mismatch += fmt.Sprintf(" %s: %d logged slow, not in /metrics;", kind, n)
			}
		}
		return mismatch
	})
	total := 0.0
	view := ""
	for kind, k := range byKind {
		total += k.slow
		view += fmt.Sprintf(" %s: %v commands, %v slow (%v stopped);", kind, k.observed, k.slow, k.stopped)
	}
	t.Logf("/metrics of cluster %s's Slurm commands:%s", cluster, view)
	if total == 0 {
		t.Errorf("/metrics counts none of cluster %s's Slurm commands as slow during a burst the controller throttled", cluster)
	}
	// The scored rows' trains and evals took an sbatch each, or one per
	// job array of them (one poll's trains, their evals): two at least.
	if sb := byKind["sbatch"]; scored > 0 && (sb == nil || sb.observed < 2) {
		t.Errorf("/metrics observed %v sbatch on cluster %s, want at least a train and an eval sbatch for the %d rows scored", sb, cluster, scored)
	}
	// The authors' sbatch ran inside the staging command, timed on the
	// cluster: each is observed as well, so more sbatch are observed than
	// serve ran as commands of their own.
	if sb := byKind["sbatch"]; scored > 0 && (sb == nil || sb.observed <= float64(sbatchAlone)) {
		t.Errorf("/metrics observed %v sbatch on cluster %s, the same as the %d sbatch serve ran alone: the authors' sbatch (in the staging command) were not observed", sb, cluster, sbatchAlone)
	}
	if sq := byKind["squeue"]; sq == nil || sq.observed == 0 {
		t.Errorf("/metrics observed no squeue (the polls) on cluster %s", cluster)
	}
}
