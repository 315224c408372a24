package cli

// BenchmarkServeBurst (issue #19): NeMo RL sends every row of a step at
// once. 1,000 rows POSTed to serve at once (serve.concurrency 1,000; the
// author jobs held back with --begin so the lab's CPUs stay free): the
// time until every episode's author job is submitted, serve's peak RSS,
// and, in the same run, the floor of any tool: one ssh session running
// sbatch on an already staged script. Figures go to docs/BENCHMARKS.md.

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

func BenchmarkServeBurst(b *testing.B) {
	lab, eps := benchEndpoints(b)
	bin := buildBinary(b)
	defer scancelAll(b, lab)
	n := 1000
	if v, err := strconv.Atoi(os.Getenv("NEMORL_BENCH_BURST")); err == nil && v > 0 {
		n = v
	}
	// The floor: sbatch alone, the same number of times, one connection.
	staged := benchRun(b, bin, b.TempDir(), "--json", "--config", benchConfig(b, lab.SSHPort), "submit")
	benchDirs = nil
	defer os.RemoveAll(staged["dir"].(string))
	script := staged["dir"].(string) + "/author/author.sbatch"
	for _, ep := range eps {
		b.Run(ep.name+"/sbatch-only-floor", func(b *testing.B) { sbatchFloor(b, lab, ep.port, n, script, "--begin=now+1hour") })
		scancelAll(b, lab)
		b.Run(fmt.Sprintf("%s/serve-%d-rows", ep.name, n), func(b *testing.B) {
			for b.Loop() {
				r := serveBurst(b, bin, ep.port, n)
				b.ReportMetric(r.secs, "s/burst")
				b.ReportMetric(float64(n)/r.secs, "episodes/s")
				b.ReportMetric(float64(r.rss)/(1<<20), "MiB-peak-RSS")
				b.ReportMetric(float64(r.threads), "threads")
				b.ReportMetric(float64(r.goroutines), "goroutines")
				b.ReportMetric(r.pollSecs*1000, "ms/poll-held")
				b.ReportMetric(r.sacctJobs, "sacct-jobs/poll-held")
			}
		})
		scancelAll(b, lab)
	}
}

// burstResult is what one burst measured: the seconds until every author
// job was submitted, serve's peak RSS (VmHWM) and threads once the n rows
// are held open, and its polls then (three, with every episode waiting):
// the last one's duration and the job ids each asked of sacct.
type burstResult struct {
	secs      float64
	rss       int64
	threads   int
	pollSecs  float64
	sacctJobs float64
	// goroutines in serve while the rows are held.
	goroutines int
}

// goroutines is the goroutine count of the serve whose profiles are on
// prof (NEMORL_SERVE_PPROF).
func goroutines(b *testing.B, prof string) int {
	resp, err := http.Get("http://" + prof + "/debug/pprof/goroutine?debug=1")
	if err != nil {
		b.Fatalf("serve's goroutine profile: %v", err)
	}
	defer resp.Body.Close()
	var n int
	if _, err := fmt.Fscanf(resp.Body, "goroutine profile: total %d", &n); err != nil {
		b.Fatalf("serve's goroutine profile: %v", err)
	}
	return n
}

func saveProfile(b *testing.B, url, path string) {
	resp, err := http.Get(url)
	if err != nil {
		b.Fatal(err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		b.Fatalf("%s: %d %v", url, resp.StatusCode, err)
	}
	if err := os.WriteFile(path, raw, 0o644); err != nil {
		b.Fatal(err)
	}
}

// serveBurst runs one burst of n rows and holds them open for three polls.
func serveBurst(b *testing.B, bin string, port, n int) burstResult {
	cfgPath := benchConfig(b, port)
	data, err := os.ReadFile(cfgPath)
	if err != nil {
		b.Fatal(err)
	}
	cfg := strings.Replace(string(data), "  gres: gpu:h100:1\n", "  gres: gpu:h100:1\n  extra_sbatch: [--begin=now+1hour]\n", 1)
	cfg += fmt.Sprintf("serve:\n  concurrency: %d\n", n)
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o600); err != nil {
		b.Fatal(err)
	}
	addr := freeAddr(b)
	state := b.TempDir()
	prof := freeAddr(b)
	cmd := exec.Command(bin, "serve", "--config", cfgPath, "--allow-no-isolation", "--listen", addr)
	cmd.Env = append(cliEnv(state), "NEMORL_SERVE_PPROF="+prof)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	logf, _ := os.Create(filepath.Join(b.TempDir(), "serve.log"))
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	defer func() {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		_ = cmd.Wait()
		logf.Close()
		removeLedgerDirs(state)
	}()
	base := "http://" + addr
	for i := 0; ; i++ {
		if resp, err := http.Get(base + "/"); err == nil {
			resp.Body.Close()
			break
		}
		if i > 300 {
			b.Fatal("serve did not come up")
		}
		time.Sleep(100 * time.Millisecond)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	client := &http.Client{Transport: &http.Transport{MaxConnsPerHost: 0, MaxIdleConnsPerHost: n}}
	tag := strconv.FormatInt(time.Now().UnixNano(), 36)
	start := time.Now()
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			body := fmt.Sprintf(`{"responses_create_params": {"input": "burst"}, "metadata": {}, "_ng_task_index": %d, "_ng_rollout_index": 0, "_ng_run_id": %q}`, i, tag)
			req, _ := http.NewRequestWithContext(ctx, http.MethodPost, base+"/run", strings.NewReader(body))
			if resp, err := client.Do(req); err == nil {
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			}
		}()
	}
	// Submitted: every followed episode has its author job id.
	var secs float64
	for {
		time.Sleep(250 * time.Millisecond)
		withJob := episodesWithJob(b, base)
		if withJob >= n {
			secs = time.Since(start).Seconds()
			break
		}
		if limit := 5*time.Minute + time.Duration(n)*50*time.Millisecond; time.Since(start) > limit {
			b.Fatalf("after %s %d of %d episodes submitted", limit, withJob, n)
		}
	}
	// Held open: three polls with every episode waiting in the queue.
	metric := func(name string) float64 {
		resp, err := http.Get(base + "/metrics")
		if err != nil {
			b.Fatalf("/metrics: %v", err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		for _, l := range strings.Split(string(body), "\n") {
			if v, ok := strings.CutPrefix(l, name+" "); ok {
				f, _ := strconv.ParseFloat(strings.TrimSpace(v), 64)
				return f
			}
		}
		return 0
	}
	polls0, sacct0 := metric("nemorl_serve_sacct_polls_total"), metric("nemorl_serve_poll_sacct_jobs_total")
	for deadline := time.Now().Add(3 * time.Minute); metric("nemorl_serve_sacct_polls_total") < polls0+3; {
		if time.Now().After(deadline) {
			b.Fatal("serve did not poll three times in 3 minutes")
		}
		time.Sleep(time.Second)
	}
	r := burstResult{secs: secs, rss: vmHWM(b, cmd.Process.Pid), threads: procThreads(b, cmd.Process.Pid),
		pollSecs: metric("nemorl_serve_sacct_poll_seconds"), goroutines: goroutines(b, prof)}
	// NEMORL_BENCH_PROFILES=DIR keeps serve's heap profile of the held
	// rows (go tool pprof -sample_index=inuse_space DIR/heap-N.pb.gz).
	if dir := os.Getenv("NEMORL_BENCH_PROFILES"); dir != "" {
		saveProfile(b, "http://"+prof+"/debug/pprof/heap?gc=1", filepath.Join(dir, fmt.Sprintf("heap-%d.pb.gz", n)))
		saveProfile(b, "http://"+prof+"/debug/pprof/goroutine?debug=1", filepath.Join(dir, fmt.Sprintf("goroutine-%d.txt", n)))
	}
	r.sacctJobs = (metric("nemorl_serve_poll_sacct_jobs_total") - sacct0) / (metric("nemorl_serve_sacct_polls_total") - polls0)
	cancel()
	wg.Wait()
	return r
}

// procThreads is a process's thread count.
func procThreads(b *testing.B, pid int) int {
	st, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		b.Fatal(err)
	}
	for _, l := range strings.Split(string(st), "\n") {
		if v, ok := strings.CutPrefix(l, "Threads:"); ok {
			n, _ := strconv.Atoi(strings.TrimSpace(v))
			return n
		}
	}
	b.Fatal("no Threads")
	return 0
}

// vmHWM is a process's peak resident set size in bytes.
func vmHWM(b *testing.B, pid int) int64 {
	st, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		b.Fatal(err)
	}
	for _, l := range strings.Split(string(st), "\n") {
		if v, ok := strings.CutPrefix(l, "VmHWM:"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			return kb << 10
		}
	}
	b.Fatal("no VmHWM")
	return 0
}

// removeLedgerDirs removes the episode directories a ledger names.
func removeLedgerDirs(state string) {
	files, _ := filepath.Glob(filepath.Join(state, "nemorl-slurm", "episodes", "ep-*.json"))
	for _, f := range files {
		var e struct {
			Dir string `json:"dir"`
		}
		if b, err := os.ReadFile(f); err == nil && json.Unmarshal(b, &e) == nil && e.Dir != "" {
			_ = os.RemoveAll(e.Dir)
		}
	}
}

// episodesWithJob is how many of the episodes serve at base follows have
// their author job id (its /episodes).
func episodesWithJob(b *testing.B, base string) int {
	b.Helper()
	resp, err := http.Get(base + "/episodes")
	if err != nil {
		b.Fatalf("/episodes: %v", err)
	}
	defer resp.Body.Close()
	var doc struct {
		Episodes []struct {
			JobID string `json:"job_id"`
		} `json:"episodes"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&doc); err != nil {
		b.Fatalf("/episodes: %v", err)
	}
	with := 0
	for _, e := range doc.Episodes {
		if e.JobID != "" {
			with++
		}
	}
	return with
}
