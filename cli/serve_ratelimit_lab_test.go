package cli

// serve against a controller that rate-limits its users: the lab's
// cluster 3 (lab/cluster3: Slurm 24.11 with
// SlurmctldParameters=rl_enable, bucket 30, refill 2/s; lab/README.md).

import (
	"bufio"
	"io"
	"os"
	"os/user"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
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
	from := fileSize(t, ctldLog)
	u, err := user.Lookup(x.lab.User)
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
	// What the controller refused this user while the rows ran, by RPC.
	byRPC := map[string]int{}
	total := 0
	for _, l := range linesFrom(t, ctldLog, from) {
		// "RPC rate limit exceeded by uid 1001 with REQUEST_SUBMIT_BATCH_JOB from 127.0.0.1:40488, telling to back off"
		_, rest, ok := strings.Cut(l, "RPC rate limit exceeded by uid "+u.Uid+" with ")
		if !ok {
			continue
		}
		rpc, _, _ := strings.Cut(rest, " ")
		byRPC[rpc]++
		total++
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
	// serve's log: "slurm: squeue … took 7.2 s (deadline 30s): a throttled
	// or busy controller", one line per command of its own that was slow.
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
}

func fileSize(t *testing.T, p string) int64 {
	t.Helper()
	fi, err := os.Stat(p)
	if err != nil {
		t.Fatal(err)
	}
	return fi.Size()
}

// linesFrom returns the lines of p after byte offset from.
func linesFrom(t *testing.T, p string, from int64) []string {
	t.Helper()
	f, err := os.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.Seek(from, io.SeekStart); err != nil {
		t.Fatal(err)
	}
	var out []string
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		out = append(out, sc.Text())
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}
