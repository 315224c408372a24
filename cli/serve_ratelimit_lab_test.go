package cli

// serve against a controller that rate-limits its users: the lab's
// optional cluster 3 (lab/cluster3: Slurm 24.11 with
// SlurmctldParameters=rl_enable, bucket 30, refill 2/s; lab/README.md).

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"os"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nemorl/nemorl-slurm/internal/labtest"
)

// lab3 is what $STATE/lab3.env says of cluster 3, or a skip: it is not
// part of lab/up, make test or CI (it builds Slurm 24.11 from source), so
// its absence is never a failure.
func lab3(t *testing.T, lab labtest.Lab) map[string]string {
	t.Helper()
	p := filepath.Join(filepath.Dir(lab.File), "lab3.env")
	f, err := os.Open(p)
	if err != nil {
		t.Skipf("cluster 3 (Slurm 24.11 with rl_enable) is not set up (%v): sudo lab/cluster3 up", err)
	}
	defer f.Close()
	vars, err := labtest.Parse(f)
	if err != nil {
		t.Fatalf("%s: %v", p, err)
	}
	for _, port := range []string{vars["NEMORL_LAB3_SSH_PORT"], vars["NEMORL_LAB3_SLURMCTLD_PORT"]} {
		c, err := net.DialTimeout("tcp", net.JoinHostPort("127.0.0.1", port), 2*time.Second)
		if err != nil {
			t.Skipf("cluster 3 is not running (%v): sudo lab/cluster3 up", err)
		}
		c.Close()
	}
	return vars
}

// TestServeRateLimitedLab: a burst of NEMORL_RL_ROWS rows (default 24; with
// NEMORL_RL_SUBMIT_RATE, cluster.submit_rate set to it) to a
// serve whose cluster throttles every user's RPCs. Slurm's client
// commands back off by themselves there (they sleep and retry, print
// nothing and exit 0; lab/README.md "Cluster 3"), so what the tool sees is
// slow sbatch and squeue: every row must still be scored, once, and the
// controller's log must show it told this user to back off.
func TestServeRateLimitedLab(t *testing.T) {
	x := newLabCLI(t)
	requireStandIns(t)
	v := lab3(t, x.lab)
	n := 24
	if s := os.Getenv("NEMORL_RL_ROWS"); s != "" {
		var err error
		if n, err = strconv.Atoi(s); err != nil || n < 1 {
			t.Fatalf("NEMORL_RL_ROWS=%q: want a number ≥ 1", s)
		}
	}
	port, _ := strconv.Atoi(v["NEMORL_LAB3_SSH_PORT"])
	pub, err := os.ReadFile(v["NEMORL_LAB3_HOST_KEY_PUB"])
	if err != nil {
		t.Fatal(err)
	}
	// lab/up rewrites the lab's known_hosts without cluster 3's entry: pin
	// its host key here.
	f := strings.Fields(string(pub))
	if len(f) < 2 {
		t.Fatalf("%s: not a public key", v["NEMORL_LAB3_HOST_KEY_PUB"])
	}
	known := filepath.Join(t.TempDir(), "known_hosts")
	if err := os.WriteFile(known, []byte(fmt.Sprintf("[127.0.0.1]:%d %s %s\n", port, f[0], f[1])), 0o644); err != nil {
		t.Fatal(err)
	}
	spec := clusterSpec{name: "rl", port: port, knownHosts: known}
	if r := os.Getenv("NEMORL_RL_SUBMIT_RATE"); r != "" { // cluster.submit_rate: the tool paces its sbatch
		spec.extra = append(spec.extra, "submit_rate: "+r)
	}
	cfg := x.clustersConfigOf(t, 64, spec)

	// The controller's log from here on: one line per RPC it refused.
	ctldLog := filepath.Join(v["NEMORL_LAB3_LOGDIR"], "slurmctld-lab3.log")
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
	t.Logf("%d of %d rows scored in %s; the controller told the tool to back off %d times (%v); commands run: %v; poll failures: %d",
		scored, n, took.Round(time.Second), total, byRPC, ops, pollFailures)
	if total == 0 {
		t.Errorf("the controller's log (%s) shows no RPC of uid %s refused: the burst never reached the rate limit, so this run shows nothing", ctldLog, u.Uid)
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
