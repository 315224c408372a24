package slurm

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nemorl/nemorl-slurm/internal/labtest"
	"github.com/nemorl/nemorl-slurm/remote"
)

// BenchmarkPollInFlight (issue #32) is one poll of N jobs in flight on the
// lab, N = 1,000, 3,000 and 10,000 (NEMORL_BENCH_INFLIGHT="1000,3000"
// picks others): held jobs (a stand-in for episodes waiting in the queue;
// they never run), submitted as the lab user over SSH. Two polls of the
// same jobs, on one warm SSH connection:
//
//   - poll: Client.Poll, what watch and serve run: one squeue for the
//     jobs (one per 5,000), sacct only for the jobs that left squeue;
//     1 % of the ids are jobs that ended long ago, so one sacct for those;
//   - query: Client.Query, the poll before issue #32: one sacct for every
//     job, squeue for those sacct lacks.
//
// Per poll: wall time, this process's CPU time, bytes received over SSH,
// commands run, and the CPU time slurmctld, slurmdbd and MariaDB spent
// (the controller's share of the cost). Figures go to docs/BENCHMARKS.md.
func BenchmarkPollInFlight(b *testing.B) {
	lab := labtest.Env(b)
	labtest.LockLab(b) // 10,000 held jobs fill the queue: nobody else's jobs in it
	lab.WaitSSH(b, time.Minute)
	sizes := []int{1000, 3000, 10000}
	if v := os.Getenv("NEMORL_BENCH_INFLIGHT"); v != "" {
		sizes = nil
		for _, f := range strings.Split(v, ",") {
			n, err := strconv.Atoi(strings.TrimSpace(f))
			if err != nil || n <= 0 {
				b.Fatalf("NEMORL_BENCH_INFLIGHT=%q: %q is not a count", v, f)
			}
			sizes = append(sizes, n)
		}
	}
	ctx := context.Background()
	ssh, err := remote.Dial(ctx, remote.Options{Host: lab.SSHHost, Port: lab.SSHPort, User: lab.User,
		IdentityFile: lab.Key, KnownHostsFile: lab.KnownHosts, ConfigFile: "none"})
	if err != nil {
		b.Fatal(err)
	}
	defer ssh.Close()
	counted := remote.NewCounted(ssh)
	c := New(counted)
	cancelAll := func() {
		_, _ = ssh.Run(ctx, remote.Command{Argv: []string{"scancel", "--me", "--name=nemorl-bench-inflight"}})
		// wait until slurmctld has let them go
		for range 120 {
			out, _ := exec.Command("squeue", "-h", "-u", lab.User, "--name=nemorl-bench-inflight", "-o", "%i").Output()
			if len(strings.TrimSpace(string(out))) == 0 {
				return
			}
			time.Sleep(500 * time.Millisecond)
		}
	}
	defer cancelAll()
	// Jobs that ended long ago: the 1 % that left squeue.
	old, err := exec.Command("sacct", "-a", "-X", "-n", "-P", "--starttime=now-30days", "--endtime=now-10minutes", "--state=CD,F,CA", "--format=JobIDRaw").Output()
	if err != nil {
		b.Fatalf("sacct: %v", err)
	}
	var ended []string
	for _, f := range strings.Fields(string(old)) {
		if _, err := strconv.ParseUint(f, 10, 64); err == nil {
			ended = append(ended, f)
		}
	}
	var live []string
	for _, n := range sizes {
		live = holdJobs(b, ssh, live, n)
		nEnded := min(n/100, len(ended))
		jobs := make([]PollJob, 0, n)
		ids := make([]string, 0, n)
		submitted := time.Now().Add(-2 * time.Hour)
		for _, id := range ended[len(ended)-nEnded:] {
			jobs = append(jobs, PollJob{ID: id, Submitted: submitted.Add(-24 * time.Hour)})
			ids = append(ids, id)
		}
		for _, id := range live[:n-nEnded] {
			jobs = append(jobs, PollJob{ID: id, Submitted: submitted})
			ids = append(ids, id)
		}
		measure := func(b *testing.B, poll func() error) {
			var wall, cpu, daemons time.Duration
			var bytes, cmds int64
			for b.Loop() {
				c0, d0, r0, n0 := selfCPU(), daemonCPU(b), counted.Received(), commands(counted)
				t0 := time.Now()
				if err := poll(); err != nil {
					b.Fatal(err)
				}
				wall += time.Since(t0)
				cpu += selfCPU() - c0
				daemons += daemonCPU(b) - d0
				bytes += counted.Received() - r0
				cmds += commands(counted) - n0
			}
			k := float64(b.N)
			b.ReportMetric(float64(wall.Milliseconds())/k, "ms/poll")
			b.ReportMetric(float64(cpu.Milliseconds())/k, "ms-cpu/poll")
			b.ReportMetric(float64(daemons.Milliseconds())/k, "ms-slurm-cpu/poll")
			b.ReportMetric(float64(bytes)/1024/k, "KiB/poll")
			b.ReportMetric(float64(cmds)/k, "commands/poll")
		}
		b.Run(fmt.Sprintf("%d/poll", n), func(b *testing.B) {
			measure(b, func() error {
				got, _, err := c.Poll(ctx, jobs)
				if err == nil && len(got) != len(jobs) {
					err = fmt.Errorf("%d of %d jobs answered", len(got), len(jobs))
				}
				for _, id := range ids[nEnded:] {
					if j := got[id]; err == nil && (j.Source != SourceSqueue || j.HeldBy() != "user") {
						err = fmt.Errorf("held job %s: %+v", id, j)
					}
				}
				return err
			})
		})
		b.Run(fmt.Sprintf("%d/query-sacct-all", n), func(b *testing.B) {
			measure(b, func() error { _, err := c.Query(ctx, ids); return err })
		})
	}
}

// holdJobs tops live up to n held jobs of the lab user, submitted through
// one command on the lab (eight sbatch at a time), and returns their ids.
func holdJobs(b *testing.B, ssh remote.Host, live []string, n int) []string {
	b.Helper()
	need := n - len(live)
	if need <= 0 {
		return live
	}
	script := `n=$1; seq "$n" | xargs -P 8 -n 50 sh -c 'for _ do sbatch --parsable --hold --job-name=nemorl-bench-inflight --time=5 --output=/dev/null --wrap=true || exit 255; done' sh`
	t0 := time.Now()
	res, err := ssh.Run(context.Background(), remote.Command{Argv: []string{"sh", "-c", script, "sh", strconv.Itoa(need)}})
	if err != nil {
		b.Fatalf("submitting %d held jobs: %v", need, err)
	}
	for _, f := range strings.Fields(string(res.Stdout)) {
		id, _, _ := strings.Cut(f, ";")
		live = append(live, id)
	}
	if len(live) < n {
		b.Fatalf("%d held jobs after submitting %d", len(live), need)
	}
	b.Logf("%d held jobs submitted in %v", need, time.Since(t0).Round(time.Second))
	return live
}

// selfCPU is this process's CPU time so far.
func selfCPU() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// daemonCPU is the CPU time slurmctld, slurmdbd and MariaDB have used.
func daemonCPU(b *testing.B) time.Duration {
	var total time.Duration
	for _, name := range []string{"slurmctld", "slurmdbd", "mariadbd"} {
		out, _ := exec.Command("pgrep", "-x", name).Output()
		for _, pid := range strings.Fields(string(out)) {
			st, err := os.ReadFile("/proc/" + pid + "/stat")
			if err != nil {
				continue
			}
			s := string(st)
			f := strings.Fields(s[strings.LastIndexByte(s, ')')+2:])
			ut, _ := strconv.ParseInt(f[11], 10, 64)
			stt, _ := strconv.ParseInt(f[12], 10, 64)
			total += time.Duration(ut+stt) * 10 * time.Millisecond // USER_HZ 100
		}
	}
	return total
}

// commands is how many commands have gone through c.
func commands(c *remote.Counted) int64 {
	var n int64
	for k, v := range c.Counts() {
		if strings.HasPrefix(k, "run ") {
			n += v
		}
	}
	return n
}
