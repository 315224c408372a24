package slurm

import (
	"context"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nemorl/nemorl-slurm/internal/labtest"
	"github.com/nemorl/nemorl-slurm/remote"
)

// BenchmarkWatchPoll measures one watch poll over SSH for the jobs of 100
// episodes (300 ids) on the lab, three ways in the same run:
//
//   - query: Client.Query on a warm remote.SSH connection (what watch does
//     every poll: one sacct, plus one squeue for ids sacct does not know);
//   - ssh-one: the plain OpenSSH recipe done well, one `ssh host sacct
//     --jobs=<all 300>` per poll (a new connection each time);
//   - ssh-per-job: the plain recipe done per job, one `ssh host sacct
//     --jobs=ID` per job, timed on 5 jobs and reported per job (a poll
//     costs 300 of them).
//
// Figures go to docs/BENCHMARKS.md.
func BenchmarkWatchPoll(b *testing.B) {
	lab := labtest.Env(b)
	labtest.UseLab(b)
	lab.WaitSSH(b, time.Minute)
	out, err := exec.Command("sacct", "-a", "-X", "-n", "-P", "--starttime=now-30days", "--format=JobIDRaw").Output()
	if err != nil {
		b.Fatalf("sacct: %v", err)
	}
	var ids []string
	for _, f := range strings.Fields(string(out)) {
		if _, err := strconv.ParseUint(f, 10, 64); err == nil {
			ids = append(ids, f)
		}
	}
	if len(ids) > 300 {
		ids = ids[len(ids)-300:]
	}
	for len(ids) < 300 { // a young lab: pad with ids Slurm never issued
		ids = append(ids, strconv.Itoa(9_000_000+len(ids)))
	}
	ctx := context.Background()
	ssh, err := remote.Dial(ctx, remote.Options{Host: lab.SSHHost, Port: lab.SSHPort, User: lab.User,
		IdentityFile: lab.Key, KnownHostsFile: lab.KnownHosts, ConfigFile: "none"})
	if err != nil {
		b.Fatal(err)
	}
	defer ssh.Close()
	c := New(ssh)
	if _, err := c.Query(ctx, ids); err != nil { // warm the connection
		b.Fatal(err)
	}
	plain := func(jobs string) error {
		cmd := exec.Command("ssh", "-i", lab.Key, "-o", "UserKnownHostsFile="+lab.KnownHosts, "-o", "StrictHostKeyChecking=yes",
			"-o", "BatchMode=yes", "-p", strconv.Itoa(lab.SSHPort), lab.User+"@"+lab.SSHHost,
			"sacct", "--parsable2", "--noheader", "--jobs="+jobs, "--format="+strings.Join(SacctFields, ","))
		return cmd.Run()
	}

	b.Run("query", func(b *testing.B) {
		for b.Loop() {
			if _, err := c.Query(ctx, ids); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(b.Elapsed().Milliseconds())/float64(b.N), "ms/poll")
	})
	b.Run("ssh-one", func(b *testing.B) {
		for b.Loop() {
			if err := plain(strings.Join(ids, ",")); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(b.Elapsed().Milliseconds())/float64(b.N), "ms/poll")
	})
	b.Run("ssh-per-job", func(b *testing.B) {
		const sample = 5
		for b.Loop() {
			for _, id := range ids[:sample] {
				if err := plain(id); err != nil {
					b.Fatal(err)
				}
			}
		}
		perJob := float64(b.Elapsed().Milliseconds()) / float64(b.N*sample)
		b.ReportMetric(perJob, "ms/job")
		b.ReportMetric(perJob*float64(len(ids))/1000, "s/poll")
	})
}
