package slurm

import (
	"context"
	"strings"
	"testing"
	"time"
)

// TestLabPoll runs Poll against the lab's real squeue and sacct beside
// Query (sacct for everything): a held job, a running one, one that
// failed (in squeue for MinJobAge, then only in sacct) and an id Slurm
// never issued. Poll must agree with Query on every job's class, ask
// sacct only about the failed and the unknown, and take the hold from
// squeue.
func TestLabPoll(t *testing.T) {
	t.Parallel()
	eachSlurm(t, testLabPoll)
}

func testLabPoll(t *testing.T, l *lab) {
	c, cr := l.client(t)
	tag := uniqueTag("poll")
	held := submit(t, c, SubmitRequest{Wrap: "true", Comment: tag + ":held", Hold: true, Args: l.jobArgs(t)})
	running := submit(t, c, SubmitRequest{Wrap: "sleep 300", Comment: tag + ":running", Args: l.jobArgs(t)})
	failed := submit(t, c, SubmitRequest{Wrap: "exit 3", Comment: tag + ":failed", Args: l.jobArgs(t)})
	const never = "987654321"
	// Running in sacct, not only in squeue: slurmdbd may learn of a job
	// after slurmctld started it, and meanwhile sacct says PENDING for a job
	// squeue runs (CI once, job 15885): Query, the reference, would then
	// disagree with Poll's squeue for a reason that is neither's.
	waitFor(t, c, []string{running}, labWait, func(j JobInfo) bool { return j.State.Class == Running && j.Source == SourceSacct })
	waitFor(t, c, []string{failed}, labWait, terminalInSacct)
	submitted := time.Now().Add(-10 * time.Minute)
	jobs := []PollJob{{held, submitted}, {running, submitted}, {failed, submitted}, {never, submitted}}
	ids := []string{held, running, failed, never}

	check := func(when string) {
		t.Helper()
		cr.reset()
		got, cost, err := c.Poll(context.Background(), jobs)
		if err != nil {
			t.Fatalf("%s: poll: %v", when, err)
		}
		if cr.count("squeue") != 1 || cr.count("sacct") != 1 || cost.SacctJobs != 2 {
			t.Errorf("%s: %d squeue, %d sacct, cost %+v: want one each, sacct for 2 jobs", when, cr.count("squeue"), cr.count("sacct"), cost)
		}
		ref, err := c.Query(context.Background(), ids)
		if err != nil {
			t.Fatalf("%s: query: %v", when, err)
		}
		for _, id := range ids {
			if got[id].State.Class != ref[id].State.Class {
				t.Errorf("%s: job %s: poll says %v (%s), query %v (%s)", when, id, got[id].State.Class, got[id].Source, ref[id].State.Class, ref[id].Source)
			}
		}
		if j := got[held]; j.Source != SourceSqueue || j.HeldBy() != "user" {
			t.Errorf("%s: held job %s: %+v", when, held, j)
		}
		if j := got[running]; j.Source != SourceSqueue || j.State.Class != Running || j.User == "" || j.TimeLimit != 5*time.Minute {
			t.Errorf("%s: running job %s: %+v", when, running, j)
		}
		if j := got[failed]; j.Source != SourceSacct || j.ExitCode.Code != 3 {
			t.Errorf("%s: failed job %s: %+v", when, failed, j)
		}
		if j := got[never]; j.State.Class != Unknown || j.Source != SourceNone {
			t.Errorf("%s: job %s Slurm never issued: %+v", when, never, j)
		}
	}
	check("the failed job just ended")
	// Once slurmctld forgets the failed job (MinJobAge), only sacct knows it.
	deadline := time.Now().Add(3 * time.Minute)
	for {
		out, _ := l.command(context.Background(), "squeue", "-h", "--states=all", "-j", failed, "-o", "%i").CombinedOutput()
		if !strings.Contains(string(out), failed) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("job %s still in squeue after 3 minutes: %s", failed, out)
		}
		time.Sleep(2 * time.Second)
	}
	check("slurmctld forgot the failed job")
}
