package cli

// What serve asks of Slurm, counted in RPCs (issue 41: the baseline for
// submitting episodes as job arrays). slurmctld's own counters (sdiag)
// and slurmdbd's (sacctmgr show stats), read here as root before and
// after, and, on cluster 3 (rl_enable), the refusals in slurmctld's log
// (internal/labtest/rpc.go says what each can tell). Figures go to
// docs/BENCHMARKS.md.

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/nemorl/nemorl-slurm/episode"
	"github.com/nemorl/nemorl-slurm/internal/labtest"
)

// BenchmarkServeBurstRateLimited: BenchmarkServeBurst's burst (serveBurst:
// N rows POSTed at once, author jobs held with --begin, the time until
// every author job is submitted, then three polls held) against the lab's
// cluster 3, whose controller rate-limits the lab user (a bucket of
// RLBucket RPCs refilled at RLRefill a second: lab3.env). N is
// NEMORL_BENCH_BURST_RL (default 200). Beside the time, in the same run:
// the RPCs slurmctld answered (the lab user's; the sbatch ones,
// REQUEST_SUBMIT_BATCH_JOB, every user's, with the other users' RPCs
// reported to show they are none), the bucket's floor for them
// ((sbatch RPCs - bucket) / refill: no client of this user can submit
// them faster) and the RPCs it refused (its log). It holds cluster 3
// alone (the bucket is the lab user's: another test's RPCs would count).
// serveBurst gives up at 5 min + 50 ms a row: from about 700 rows the
// bucket's floor for their sbatch alone is longer, and such a run ends
// with serveBurst's count of the authors submitted by then and, logged
// here, the RPCs counted by then.
func BenchmarkServeBurstRateLimited(b *testing.B) {
	labtest.LockCluster3(b)
	lab := labtest.Env(b)
	s := lab.Slurm3(b)
	bucket, refill := lab.Lab3.RLBucket, lab.Lab3.RLRefill
	if bucket == 0 || refill == 0 {
		b.Fatalf("%s names no rate limit (NEMORL_LAB3_RL_BUCKET_SIZE, NEMORL_LAB3_RL_REFILL_RATE): lab/cluster3 up", lab.Lab3.File)
	}
	// serveBurst's config is configs/lab-none.yaml on the given port, whose
	// known_hosts must pin cluster 3's host key for it.
	if kh, err := os.ReadFile(lab.KnownHosts); err != nil || !bytes.Contains(kh, []byte(fmt.Sprintf("[%s]:%d ", s.Lab.SSHHost, s.Lab.SSHPort))) {
		b.Fatalf("%s has no host key for cluster 3's login [%s]:%d (%v): lab/cluster3 up", lab.KnownHosts, s.Lab.SSHHost, s.Lab.SSHPort, err)
	}
	bin := buildBinary(b)
	n := 200
	if v, err := strconv.Atoi(os.Getenv("NEMORL_BENCH_BURST_RL")); err == nil && v > 0 {
		n = v
	}
	b.Run(fmt.Sprintf("serve-%d-rows", n), func(b *testing.B) {
		for b.Loop() {
			jobs := userJobs(b, s, lab.User)
			b.Cleanup(func() { cancelNewJobs(b, s, lab.User, jobs) })
			mark := s.MarkRPCs(b)
			finished := false
			b.Cleanup(func() {
				if !finished { // serveBurst stopped it (b.Fatal): what was counted by then
					c := mark.Count(b, lab.User)
					b.Logf("the burst stopped unfinished after %.0f s; RPCs answered: the lab user's %d, by type (every user's) %s; other users' %d; refused: %d %s",
						c.CtldAll.Took.Seconds(), c.Ctld, countsView(c.CtldAll.ByType), c.Others, c.Refusals(), countsView(c.Refused))
				}
			})
			r := serveBurst(b, bin, s.Lab.SSHPort, n)
			finished = true
			c := mark.Count(b, lab.User)

			// The authors of a batch (up to episode.MaxBatch rows that
			// arrived together) are one job array: one sbatch RPC each
			// (cluster.job_arrays, the default); each its own job, one
			// RPC an author.
			sbatch := c.CtldAll.ByType["REQUEST_SUBMIT_BATCH_JOB"]
			if least := int64((n + episode.MaxBatch - 1) / episode.MaxBatch); sbatch < least {
				b.Fatalf("sdiag counted %d REQUEST_SUBMIT_BATCH_JOB for %d author jobs submitted, want at least %d (batches of %d)", sbatch, n, least, episode.MaxBatch)
			}
			floor := labtest.BucketFloor(sbatch, bucket, refill).Seconds()
			// The floor of one sbatch per author, as before job arrays.
			b.ReportMetric(labtest.BucketFloor(int64(n), bucket, refill).Seconds(), "s-one-sbatch-per-author-floor")
			b.ReportMetric(float64(n)/float64(max(sbatch, 1)), "authors/sbatch-rpc")
			b.ReportMetric(r.secs, "s/burst")
			b.ReportMetric(float64(n)/r.secs, "episodes/s")
			b.ReportMetric(floor, "s-sbatch-floor")
			if floor > 0 {
				b.ReportMetric(r.secs/floor, "x-floor")
			}
			b.ReportMetric(float64(sbatch), "sbatch-rpcs")
			b.ReportMetric(float64(c.Ctld), "user-rpcs")
			b.ReportMetric(labtest.BucketFloor(c.Ctld, bucket, refill).Seconds(), "s-user-rpcs-floor")
			b.ReportMetric(float64(c.Refusals()), "refusals")
			b.ReportMetric(float64(c.Refused["REQUEST_SUBMIT_BATCH_JOB"]), "sbatch-refusals")
			b.ReportMetric(float64(c.Others), "other-users-rpcs")
			b.Logf("%d rows on cluster 3 (bucket %d, refill %d/s): every author job submitted in %.1f s; RPCs answered: the lab user's %d (%d s of the run), by type (every user's) %s; other users' %d; refused: %d %s",
				n, bucket, refill, r.secs, c.Ctld, int(c.CtldAll.Took.Seconds()), countsView(c.CtldAll.ByType), c.Others, c.Refusals(), countsView(c.Refused))
		}
	})
}

// BenchmarkEpisodeRPCs: what serve asks of the lab's cluster 1 (no rate
// limit) in RPCs, counted by sdiag (slurmctld) and sacctmgr show stats
// (slurmdbd) before and after. It holds the lab alone (LockLab): every RPC
// of the lab user in the window is this benchmark's.
//
//   - episode: one full episode of one row (configs/lab-none.yaml's
//     stand-in stages, as the lab tests run them), from the POST to its
//     answer: the lab user's RPCs (the tool's commands and the jobs' own:
//     the batch scripts run squeue and scontrol), by type, and serve's
//     commands by kind, from its /metrics.
//   - poll: NEMORL_BENCH_POLL_ROWS rows (default 10) held in the queue
//     (--begin), then NEMORL_BENCH_POLLS polls of serve's engine (default
//     10): RPCs per poll (one squeue for the jobs in flight; sacct only for
//     jobs that left squeue, none here).
func BenchmarkEpisodeRPCs(b *testing.B) {
	labtest.LockLab(b)
	lab := labtest.Env(b)
	s := lab.Slurm1(b)
	bin := buildBinary(b)
	base, err := os.ReadFile("../configs/lab-none.yaml")
	if err != nil {
		b.Fatal(err)
	}
	config := func(b *testing.B, serveKeys string, extra ...string) string {
		data := lab.WithWorkdir(b, string(base), lab.Workdir, lab.TestWorkdir(b))
		if len(extra) > 0 {
			data = strings.Replace(data, "  gres: gpu:h100:1\n", "  gres: gpu:h100:1\n  extra_sbatch: ["+strings.Join(extra, ", ")+"]\n", 1)
		}
		p := filepath.Join(b.TempDir(), "serve.yaml")
		if err := os.WriteFile(p, []byte(data+"serve:\n"+serveKeys), 0o600); err != nil {
			b.Fatal(err)
		}
		return p
	}

	b.Run("episode", func(b *testing.B) {
		for b.Loop() {
			jobs := userJobs(b, s, lab.User)
			srv := startBenchServe(b, bin, config(b, "  concurrency: 1\n"))
			m0 := srv.metrics(b)
			mark := s.MarkRPCs(b)
			start := time.Now()
			code, doc := srv.post(b, 10*time.Minute, rowBody(0, strconv.FormatInt(time.Now().UnixNano(), 36)))
			took := time.Since(start)
			c := mark.Count(b, lab.User)
			m1 := srv.metrics(b)
			srv.stop(b)
			cancelNewJobs(b, s, lab.User, jobs)
			if code != http.StatusOK || doc["outcome"] != "scored" {
				b.Fatalf("the row: %d %v\nserve's log:\n%s", code, doc, srv.logTail())
			}
			polls := m1.value("nemorl_serve_sacct_polls_total") - m0.value("nemorl_serve_sacct_polls_total")
			cmds := commandsByKind(m0, m1)
			b.ReportMetric(took.Seconds(), "s/episode")
			b.ReportMetric(float64(c.Ctld), "rpcs/episode")
			b.ReportMetric(float64(c.DBD), "dbd-rpcs/episode")
			b.ReportMetric(polls, "polls/episode")
			b.ReportMetric(float64(c.Others), "other-users-rpcs")
			for _, k := range []string{"sbatch", "squeue", "sacct", "scancel", "scontrol", "sinfo"} {
				b.ReportMetric(cmds[k], k+"/episode")
			}
			for typ, v := range c.CtldAll.ByType {
				if typ != "REQUEST_STATS_INFO" { // the readings' own
					b.ReportMetric(float64(v), typ+"/episode")
				}
			}
			b.Logf("one episode (%s, %v): the lab user's RPCs: slurmctld %d, slurmdbd %d; slurmctld by type (every user's: others' %d, the daemons' among them) %s; serve's commands %s, %v polls; remote commands %s",
				doc["episode"], took.Round(time.Second), c.Ctld, c.DBD, c.Others, countsView(c.CtldAll.ByType), countsView(cmds), polls, countsView(programs(m0, m1)))
		}
	})

	b.Run("poll", func(b *testing.B) {
		rows, k := envInt(b, "NEMORL_BENCH_POLL_ROWS", 10), envInt(b, "NEMORL_BENCH_POLLS", 10)
		for b.Loop() {
			jobs := userJobs(b, s, lab.User)
			srv := startBenchServe(b, bin, config(b, fmt.Sprintf("  concurrency: %d\n", rows), "--begin=now+1hour"))
			ctx, cancel := context.WithCancel(context.Background())
			var wg sync.WaitGroup
			tag := strconv.FormatInt(time.Now().UnixNano(), 36)
			for i := range rows {
				wg.Add(1)
				go func() { defer wg.Done(); srv.postCtx(ctx, rowBody(i, tag)) }()
			}
			srv.waitSubmitted(b, rows, 3*time.Minute)
			// Count from the end of a poll to the end of the k-th after it.
			polls0 := srv.waitPolls(b, 1, time.Minute)
			m0 := srv.metrics(b)
			mark := s.MarkRPCs(b)
			srv.waitPolls(b, k, time.Duration(k)*time.Minute)
			c := mark.Count(b, lab.User)
			m1 := srv.metrics(b)
			polls := m1.value("nemorl_serve_sacct_polls_total") - polls0
			cancel()
			srv.stop(b)
			wg.Wait()
			cancelNewJobs(b, s, lab.User, jobs)
			cmds := commandsByKind(m0, m1)
			b.ReportMetric(float64(c.Ctld)/polls, "rpcs/poll")
			b.ReportMetric(float64(c.DBD)/polls, "dbd-rpcs/poll")
			b.ReportMetric(cmds["squeue"]/polls, "squeue/poll")
			b.ReportMetric(cmds["sacct"]/polls, "sacct/poll")
			b.ReportMetric(float64(c.Others), "other-users-rpcs")
			b.Logf("%v polls of %d held rows: the lab user's RPCs: slurmctld %d, slurmdbd %d; slurmctld by type (every user's: others' %d) %s; serve's commands %s",
				polls, rows, c.Ctld, c.DBD, c.Others, countsView(c.CtldAll.ByType), countsView(cmds))
		}
	})
}

// ---- helpers of these benchmarks -------------------------------------------

func envInt(b *testing.B, name string, def int) int {
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 {
		b.Fatalf("%s=%q: want a number ≥ 1", name, v)
	}
	return n
}

// userJobs is the set of user's jobs in s's queue now (root's squeue:
// never rate limited).
func userJobs(b *testing.B, s labtest.Slurm, user string) map[string]bool {
	b.Helper()
	out, err := s.Command("squeue", "-h", "-u", user, "-o", "%i").Output()
	if err != nil {
		b.Fatalf("squeue -u %s: %v", user, err)
	}
	ids := map[string]bool{}
	for _, id := range strings.Fields(string(out)) {
		ids[id] = true
	}
	return ids
}

// cancelNewJobs scancels user's jobs in s's queue that were not there
// before (jobs, userJobs': the benchmark holds the cluster alone, so they
// are its own).
func cancelNewJobs(b *testing.B, s labtest.Slurm, user string, before map[string]bool) {
	b.Helper()
	var ids []string
	for id := range userJobs(b, s, user) {
		if !before[id] {
			ids = append(ids, id)
		}
	}
	if len(ids) == 0 {
		return
	}
	if out, err := s.Command("scancel", ids...).CombinedOutput(); err != nil {
		b.Errorf("scancel of the %d jobs made: %v: %s", len(ids), err, out)
	}
}

// countsView prints a count map in a stable order, largest first.
func countsView[V int | int64 | float64](m map[string]V) string {
	keys := make([]string, 0, len(m))
	for k, v := range m {
		if v != 0 {
			keys = append(keys, k)
		}
	}
	sort.Slice(keys, func(i, j int) bool {
		if m[keys[i]] != m[keys[j]] {
			return m[keys[i]] > m[keys[j]]
		}
		return keys[i] < keys[j]
	})
	var parts []string
	for _, k := range keys {
		parts = append(parts, fmt.Sprintf("%s %v", k, m[k]))
	}
	return "[" + strings.Join(parts, ", ") + "]"
}

// benchServe is a serve the benchmarks started (in its own process
// group, its log in a file).
type benchServe struct {
	base    string
	cmd     *exec.Cmd
	logPath string
	done    bool
}

func startBenchServe(b *testing.B, bin, cfg string) *benchServe {
	b.Helper()
	addr := freeAddr(b)
	state := b.TempDir()
	cmd := exec.Command(bin, "serve", "--config", cfg, "--allow-no-isolation", "--listen", addr)
	cmd.Env = cliEnv(state)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	logPath := filepath.Join(b.TempDir(), "serve.log")
	logf, err := os.Create(logPath)
	if err != nil {
		b.Fatal(err)
	}
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	logf.Close()
	srv := &benchServe{base: "http://" + addr, cmd: cmd, logPath: logPath}
	b.Cleanup(func() { srv.stop(b) })
	for i := 0; ; i++ {
		if resp, err := http.Get(srv.base + "/"); err == nil {
			resp.Body.Close()
			return srv
		}
		if i > 300 {
			b.Fatalf("serve did not come up:\n%s", srv.logTail())
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func (s *benchServe) stop(b *testing.B) {
	if s.done {
		return
	}
	s.done = true
	_ = syscall.Kill(-s.cmd.Process.Pid, syscall.SIGKILL)
	_ = s.cmd.Wait()
}

func (s *benchServe) logTail() string {
	raw, _ := os.ReadFile(s.logPath)
	return tail(string(raw), 4000)
}

// post sends a row and decodes its answer, waiting up to limit.
func (s *benchServe) post(b *testing.B, limit time.Duration, body string) (int, map[string]any) {
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()
	code, raw := s.postCtx(ctx, body)
	var doc map[string]any
	if err := json.Unmarshal(raw, &doc); err != nil {
		doc = map[string]any{"raw": string(raw)}
	}
	return code, doc
}

func (s *benchServe) postCtx(ctx context.Context, body string) (int, []byte) {
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, s.base+"/run", strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, []byte(err.Error())
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, raw
}

// waitSubmitted waits until n episodes have their author job.
func (s *benchServe) waitSubmitted(b *testing.B, n int, limit time.Duration) {
	b.Helper()
	deadline := time.Now().Add(limit)
	for {
		with := episodesWithJob(b, s.base)
		if with >= n {
			return
		}
		if time.Now().After(deadline) {
			b.Fatalf("after %v, %d of %d episodes submitted:\n%s", limit, with, n, s.logTail())
		}
		time.Sleep(250 * time.Millisecond)
	}
}

// waitPolls waits until the engine has ended k more polls, and returns
// the count of polls then (checked every 20 ms: a poll ends a second or
// more before the next begins).
func (s *benchServe) waitPolls(b *testing.B, k int, limit time.Duration) float64 {
	b.Helper()
	from := s.metrics(b).value("nemorl_serve_sacct_polls_total")
	deadline := time.Now().Add(limit)
	for {
		if n := s.metrics(b).value("nemorl_serve_sacct_polls_total"); n >= from+float64(k) {
			return n
		}
		if time.Now().After(deadline) {
			b.Fatalf("serve did not poll %d times in %v", k, limit)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// promSnapshot is one scrape of /metrics.
type promSnapshot map[string]*dto.MetricFamily

func (s *benchServe) metrics(b *testing.B) promSnapshot {
	b.Helper()
	resp, err := http.Get(s.base + "/metrics")
	if err != nil {
		b.Fatalf("/metrics: %v", err)
	}
	defer resp.Body.Close()
	p := expfmt.NewTextParser(model.LegacyValidation)
	mfs, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		b.Fatalf("/metrics: %v", err)
	}
	return mfs
}

// value sums name's series whose labels include labels (name, value, …);
// a histogram's is its count of observations.
func (p promSnapshot) value(name string, labels ...string) float64 {
	total := 0.0
	for _, m := range p[name].GetMetric() {
		match := true
		for i := 0; i+1 < len(labels); i += 2 {
			match = match && slices.ContainsFunc(m.GetLabel(), func(lp *dto.LabelPair) bool {
				return lp.GetName() == labels[i] && lp.GetValue() == labels[i+1]
			})
		}
		switch {
		case !match:
		case m.Counter != nil:
			total += m.GetCounter().GetValue()
		case m.Gauge != nil:
			total += m.GetGauge().GetValue()
		case m.Histogram != nil:
			total += float64(m.GetHistogram().GetSampleCount())
		}
	}
	return total
}

// commandsByKind is serve's Slurm commands by kind between two scrapes
// (nemorl_serve_slurm_command_duration_seconds).
func commandsByKind(from, to promSnapshot) map[string]float64 {
	return byLabel(from, to, "nemorl_serve_slurm_command_duration_seconds", "kind")
}

// programs is serve's remote commands by program between two scrapes.
func programs(from, to promSnapshot) map[string]float64 {
	return byLabel(from, to, "nemorl_serve_remote_commands_total", "program")
}

func byLabel(from, to promSnapshot, name, label string) map[string]float64 {
	out := map[string]float64{}
	for _, m := range to[name].GetMetric() {
		for _, lp := range m.GetLabel() {
			if lp.GetName() == label {
				v := lp.GetValue()
				out[v] = to.value(name, label, v) - from.value(name, label, v)
			}
		}
	}
	return out
}
