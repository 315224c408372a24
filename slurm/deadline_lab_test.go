package slurm

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nemorl/nemorl-slurm/internal/labtest"
	"github.com/nemorl/nemorl-slurm/remote"
)

// TestLabDeadlineThrottled plays, on cluster 3 (Slurm 24.11 with
// rl_enable: 30 RPCs at once, then 2 a second per user), what the
// deadlines are for. The lab user's bucket is kept empty by a crowd of
// its own squeue over the same login; then, with deadlines of 2 s, a Poll
// of a job that exists and a Submit each meet Slurm's silent back-off: the
// poll returns within its deadlines with the job unanswered (never failed,
// never lost) and an error that reads as a busy controller; the sbatch is
// stopped with its outcome unknown (a DeadlineError, which matches
// remote.ErrOutcomeUnknown) and, looked up by its comment once the crowd
// is gone, made at most one job. Slow hears of each. The test holds
// cluster 3 alone: every lab user's RPC counts against one bucket.
func TestLabDeadlineThrottled(t *testing.T) {
	labtest.LockCluster3(t)
	s := labtest.Env(t).Slurm3(t)
	p := probed(t, s)
	c, _, lab := sshClientAt(t, s.Lab)
	ctx := context.Background()

	// A job to poll: held, so it stays.
	known := submit(t, c, SubmitRequest{Wrap: "true", Name: "deadline-known", Comment: uniqueTag("deadline-known"),
		Hold: true, Args: []string{"--time=5", "--output=/dev/null", "--partition=" + p.partition}})
	t.Cleanup(func() { _ = c.Cancel(context.Background(), []string{known}) })

	// The crowd: 12 squeue at a time over the login, until the test ends.
	crowd, stop := New(c.runner), make(chan struct{})
	var wg sync.WaitGroup
	var crowdRuns atomic.Int64
	for range 12 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
				_, _ = crowd.runner.Run(cctx, remote.Command{Argv: []string{"squeue", "--me", "--noheader"}, Idempotent: true})
				cancel()
				crowdRuns.Add(1)
			}
		}()
	}
	stopCrowd := sync.OnceFunc(func() { close(stop); wg.Wait() })
	t.Cleanup(stopCrowd)

	// Throttled: one plain squeue takes 2 s or more (or is still asking
	// after 3).
	throttled := false
	for deadline := time.Now().Add(90 * time.Second); time.Now().Before(deadline); {
		start := time.Now()
		cctx, cancel := context.WithTimeout(ctx, 3*time.Second)
		_, err := c.runner.Run(cctx, remote.Command{Argv: []string{"squeue", "--me", "--noheader", "--jobs=" + known}, Idempotent: true})
		cancel()
		if took := time.Since(start); took >= 2*time.Second {
			throttled = true
			t.Logf("throttled: a squeue took %v (%v) after %d of the crowd's", took.Round(10*time.Millisecond), err, crowdRuns.Load())
			break
		}
	}
	if !throttled {
		t.Fatalf("cluster 3 never throttled the lab user (%d squeue of the crowd): is rl_enable on? (%s)", crowdRuns.Load(), lab.Cluster)
	}

	short := Deadlines{Sbatch: 2 * time.Second, Squeue: 2 * time.Second, Sacct: 2 * time.Second,
		Sinfo: 2 * time.Second, Scancel: 2 * time.Second, Scontrol: 2 * time.Second}
	var mu sync.Mutex
	var slow []SlowCommand
	c.Deadlines, c.SlowAfter = short, time.Second
	c.Slow = func(s SlowCommand) { mu.Lock(); slow = append(slow, s); mu.Unlock() }

	start := time.Now()
	got, _, err := c.Poll(ctx, []PollJob{{ID: known, Submitted: time.Now().Add(-time.Minute)}})
	took := time.Since(start)
	t.Logf("poll under the crowd: %v, %v: job %s %+v", took.Round(10*time.Millisecond), err, known, got[known].State)
	if j := got[known]; j.Terminal() || j.State.Class == Failed {
		t.Errorf("job %s under a throttled poll: %+v, want it running, pending or unanswered, never ended", known, j)
	}
	if err != nil && !IsControllerBusy(err) {
		t.Errorf("poll error %v: want none or a busy controller", err)
	}
	if took > 2*short.Squeue+2*short.Sacct+5*time.Second {
		t.Errorf("the poll took %v, past its commands' deadlines", took)
	}

	tag := uniqueTag("deadline-submit")
	_, err = c.Submit(ctx, SubmitRequest{Wrap: "true", Name: "deadline-submit", Comment: tag, Hold: true,
		Args: []string{"--time=5", "--output=/dev/null", "--partition=" + p.partition}})
	var de *DeadlineError
	submitUnknown := errors.As(err, &de)
	t.Logf("sbatch under the crowd: %v", err)
	if err != nil && (!submitUnknown || !errors.Is(err, remote.ErrOutcomeUnknown)) {
		t.Errorf("sbatch error %v: want none or a deadline (outcome unknown)", err)
	}
	stopCrowd()

	// What sbatch left: found by its comment tag, never two.
	c.Deadlines, c.Slow = Deadlines{}, nil
	var jobs []JobInfo
	for deadline := time.Now().Add(2 * time.Minute); time.Now().Before(deadline); time.Sleep(2 * time.Second) {
		if jobs, err = c.FindByComment(ctx, tag); err == nil {
			break
		}
	}
	if err != nil {
		t.Fatalf("find by comment after the crowd: %v", err)
	}
	ids := make([]string, 0, len(jobs))
	for _, j := range jobs {
		ids = append(ids, j.ID)
	}
	if len(ids) > 0 {
		t.Cleanup(func() { _ = c.Cancel(context.Background(), ids) })
	}
	if len(jobs) > 1 || !submitUnknown && len(jobs) != 1 {
		t.Errorf("sbatch (outcome unknown: %v) left jobs %v, want at most one (exactly one when it answered)", submitUnknown, ids)
	}
	mu.Lock()
	defer mu.Unlock()
	stopped := 0
	for _, s := range slow {
		t.Logf("slow: %s", s)
		if s.Stopped {
			stopped++
		}
	}
	if len(slow) == 0 {
		t.Errorf("Slow heard of no command under a throttled controller")
	}
	t.Logf("sbatch stopped at its deadline: %v, its job(s) found after: %v; %d slow commands, %d stopped", submitUnknown, ids, len(slow), stopped)
}
