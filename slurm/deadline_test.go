package slurm

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nemorl/nemorl-slurm/internal/procfs"
	"github.com/nemorl/nemorl-slurm/remote"
)

// stallRunner stands in for a throttled Slurm (rl_enable): the programs in
// stall never answer and wait for their context to end, as Slurm's client
// library sleeps and retries; the others answer through fakeRunner. It
// records the deadline each command ran under.
type stallRunner struct {
	fakeRunner
	stall map[string]bool

	dmu       sync.Mutex
	deadlines map[string]time.Duration // by program: time left when it started
}

func (s *stallRunner) Run(ctx context.Context, cmd remote.Command) (*remote.Result, error) {
	prog := program(cmd.Argv)
	if cmd.Label != "" {
		prog = cmd.Label
	}
	if d, ok := ctx.Deadline(); ok {
		s.dmu.Lock()
		if s.deadlines == nil {
			s.deadlines = map[string]time.Duration{}
		}
		s.deadlines[prog] = time.Until(d)
		s.dmu.Unlock()
	}
	if s.stall[prog] {
		s.mu.Lock()
		s.calls = append(s.calls, cmd)
		s.mu.Unlock()
		<-ctx.Done()
		return nil, ctx.Err() // as remote.Local and remote.SSH report a killed command
	}
	return s.fakeRunner.Run(ctx, cmd)
}

func (s *stallRunner) deadline(prog string) time.Duration {
	s.dmu.Lock()
	defer s.dmu.Unlock()
	return s.deadlines[prog]
}

// short are deadlines a test waits out.
var short = Deadlines{Sbatch: 50 * time.Millisecond, Squeue: 50 * time.Millisecond, Sacct: 50 * time.Millisecond,
	Sinfo: 50 * time.Millisecond, Scancel: 50 * time.Millisecond, Scontrol: 50 * time.Millisecond}

func stalled(progs ...string) *stallRunner {
	s := &stallRunner{stall: map[string]bool{}}
	s.handlers = map[string]func([]string) (string, string, int){}
	for _, p := range progs {
		s.stall[p] = true
	}
	return s
}

func isDeadline(err error) bool {
	var de *DeadlineError
	var ce *remote.CommandError
	return errors.As(err, &de) && errors.Is(err, ErrDeadline) && errors.Is(err, remote.ErrOutcomeUnknown) &&
		!errors.As(err, &ce) && !errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, context.Canceled)
}

// TestDeadlinePoll: a poll whose squeue and sacct never answer returns
// within their deadlines, every job unanswered (Unknown, never failed or
// lost), with an error that is the controller's being busy; with sacct
// answering, its jobs are answered and the poll is no error.
func TestDeadlinePoll(t *testing.T) {
	jobs := []PollJob{{ID: "1", Submitted: time.Now()}, {ID: "2", Submitted: time.Now()}}
	t.Run("both stall", func(t *testing.T) {
		r := stalled("squeue", "sacct")
		c := New(r)
		c.Deadlines = short
		start := time.Now()
		got, cost, err := c.Poll(context.Background(), jobs)
		if took := time.Since(start); took > 2*time.Second {
			t.Errorf("poll took %v", took)
		}
		if !isDeadline(err) || !IsControllerBusy(err) {
			t.Errorf("error %v: want a deadline error, the controller busy", err)
		}
		if !strings.Contains(err.Error(), "squeue") || !strings.Contains(err.Error(), "sacct") {
			t.Errorf("error %v: want both commands named", err)
		}
		for _, id := range []string{"1", "2"} {
			if j := got[id]; j.State.Class != Unknown || j.Source != SourceUnanswered || j.Terminal() {
				t.Errorf("job %s: %+v", id, j)
			}
		}
		if cost.Squeue != 1 || cost.Sacct != 1 {
			t.Errorf("cost %+v", cost)
		}
	})
	t.Run("squeue stalls", func(t *testing.T) {
		r := stalled("squeue")
		r.handlers["sacct"] = func([]string) (string, string, int) { return sacctJobLine("1", "RUNNING", "0:0"), "", 0 }
		c := New(r)
		c.Deadlines = short
		got, _, err := c.Poll(context.Background(), jobs)
		if err != nil {
			t.Fatal(err)
		}
		if got["1"].Class() != Running || got["2"].Source != SourceUnanswered || got["2"].Class() != Unknown {
			t.Errorf("%+v", got)
		}
	})
}

// TestDeadlineSubmit: an sbatch that never answers is stopped at its
// deadline with an outcome unknown (the look-up by comment tag), never a
// failure sbatch reported, never run again.
func TestDeadlineSubmit(t *testing.T) {
	r := stalled("sbatch")
	c := New(r)
	c.Deadlines = short
	start := time.Now()
	_, err := c.Submit(context.Background(), SubmitRequest{Wrap: "true", Comment: "nemorl-ep-x-author"})
	if time.Since(start) > 2*time.Second {
		t.Errorf("submit took %v", time.Since(start))
	}
	if !isDeadline(err) {
		t.Fatalf("error %v: want a deadline error", err)
	}
	if SubmitNotCreated(err) {
		t.Error("a submission past its deadline reads as not created: it could be made twice")
	}
	if why, refused := SubmitRefused(err); refused {
		t.Errorf("a submission past its deadline reads as refused: %s", why)
	}
	if !strings.Contains(err.Error(), "sbatch") || !strings.Contains(err.Error(), "may or may not have been made") {
		t.Errorf("error %v", err)
	}
	if n := r.count("sbatch"); n != 1 {
		t.Errorf("sbatch ran %d times", n)
	}
}

// TestDeadlineEveryCommand: each command the Client runs has its kind's
// deadline, and one that stalls comes back as a deadline error (the room
// probe's: no answer, which placement reads as the cluster not
// answering), promptly.
func TestDeadlineEveryCommand(t *testing.T) {
	d := Deadlines{Sbatch: 61 * time.Millisecond, Squeue: 62 * time.Millisecond, Sacct: 63 * time.Millisecond,
		Sinfo: 64 * time.Millisecond, Scancel: 65 * time.Millisecond, Scontrol: 66 * time.Millisecond}
	ctx := context.Background()
	for _, c := range []struct {
		prog string
		want time.Duration
		run  func(c *Client) error
	}{
		{"sbatch", d.Sbatch, func(c *Client) error { _, err := c.Submit(ctx, SubmitRequest{Wrap: "true"}); return err }},
		{"squeue", d.Squeue, func(c *Client) error { _, err := c.Queue(ctx, []string{"1"}); return err }},
		{"sacct", d.Sacct, func(c *Client) error { _, err := c.SacctVersion(ctx); return err }},
		{"sinfo+squeue", d.Sinfo, func(c *Client) error { _, err := c.Room(ctx, "gpu", "gpu:h100:1"); return err }},
		{"scancel", d.Scancel, func(c *Client) error { return c.Cancel(ctx, []string{"1"}) }},
		{"scontrol", d.Scontrol, func(c *Client) error { return c.Release(ctx, []string{"1"}) }},
	} {
		r := stalled(c.prog)
		cl := New(r)
		cl.Deadlines = d
		start := time.Now()
		err := c.run(cl)
		if !isDeadline(err) {
			t.Errorf("%s: %v; want a deadline error", c.prog, err)
		}
		if took := time.Since(start); took > 2*time.Second {
			t.Errorf("%s took %v", c.prog, took)
		}
		if got := r.deadline(c.prog); got <= 0 || got > c.want {
			t.Errorf("%s ran with %v left, want at most %v", c.prog, got, c.want)
		}
	}
	// Query, BatchScript and FindByComment: each of their commands too.
	for _, name := range []string{"query", "batch script", "find"} {
		r := stalled("sacct", "squeue", "scontrol")
		cl := New(r)
		cl.Deadlines = short
		var err error
		switch name {
		case "query":
			_, err = cl.Query(ctx, []string{"1"})
		case "batch script":
			_, err = cl.BatchScript(ctx, "1")
		case "find":
			_, err = cl.FindByComment(ctx, "tag")
		}
		if !errors.Is(err, ErrDeadline) {
			t.Errorf("%s: %v", name, err)
		}
	}
}

// TestDeadlineDefaults: a Client that sets none has DefaultDeadlines, of
// tens of seconds; a field set replaces its default only.
func TestDeadlineDefaults(t *testing.T) {
	c := New(&fakeRunner{})
	for _, k := range []Kind{KindSbatch, KindSqueue, KindSacct, KindSinfo, KindScancel, KindScontrol, "other"} {
		if d := c.Deadline(k); d < 10*time.Second || d > 5*time.Minute {
			t.Errorf("%s: default %v", k, d)
		}
	}
	c.Deadlines.Squeue = 3 * time.Second
	if c.Deadline(KindSqueue) != 3*time.Second || c.Deadline(KindSacct) != DefaultDeadlines.Sacct {
		t.Errorf("squeue %v, sacct %v", c.Deadline(KindSqueue), c.Deadline(KindSacct))
	}
	r := stalled()
	r.handlers["squeue"] = func([]string) (string, string, int) { return "", "", 0 }
	cl := New(r)
	if _, err := cl.Queue(context.Background(), []string{"1"}); err != nil {
		t.Fatal(err)
	}
	if got := r.deadline("squeue"); got < DefaultDeadlines.Squeue-time.Second || got > DefaultDeadlines.Squeue {
		t.Errorf("squeue ran with %v left", got)
	}
}

// TestDeadlineCallerContext: the caller's own end (a cancel, the caller's
// shorter deadline) is reported as it is, not as the command's deadline.
func TestDeadlineCallerContext(t *testing.T) {
	r := stalled("squeue", "sacct", "sbatch")
	c := New(r)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Millisecond)
	defer cancel()
	if _, _, err := c.Poll(ctx, []PollJob{{ID: "1"}}); !errors.Is(err, context.DeadlineExceeded) || errors.Is(err, ErrDeadline) {
		t.Errorf("poll: %v", err)
	}
	ctx2, cancel2 := context.WithCancel(context.Background())
	time.AfterFunc(20*time.Millisecond, cancel2)
	if _, err := c.Submit(ctx2, SubmitRequest{Wrap: "true"}); !errors.Is(err, context.Canceled) || errors.Is(err, remote.ErrOutcomeUnknown) {
		t.Errorf("submit: %v", err)
	}
}

// TestDeadlineKillsLocalProcess: through remote.Local, a command past its
// deadline is killed with its children (its process group), and RunVia
// returns at once; no goroutine is left behind.
func TestDeadlineKillsLocalProcess(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("reads /proc")
	}
	before := runtime.NumGoroutine()
	pidFile := filepath.Join(t.TempDir(), "pid")
	c := New(remote.NewLocal())
	c.Deadlines.Squeue = 300 * time.Millisecond
	start := time.Now()
	_, err := c.RunVia(context.Background(), remote.NewLocal(), KindSqueue, remote.Command{
		Argv: []string{"sh", "-c", `sleep 60 & echo $! >"$1"; wait`, "sh", pidFile}, Idempotent: true})
	if !isDeadline(err) {
		t.Fatalf("%v", err)
	}
	if took := time.Since(start); took > 5*time.Second {
		t.Errorf("took %v", took)
	}
	b, err := os.ReadFile(pidFile)
	if err != nil {
		t.Fatal(err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		t.Fatal(err)
	}
	alive := func() bool {
		procs, err := procfs.List()
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range procs {
			if p.PID == pid && !p.Gone() {
				return true
			}
		}
		return false
	}
	for deadline := time.Now().Add(5 * time.Second); alive(); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the command's child %d still runs after its deadline", pid)
		}
	}
	for deadline := time.Now().Add(5 * time.Second); runtime.NumGoroutine() > before+2; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%d goroutines, %d before", runtime.NumGoroutine(), before)
		}
	}
}

// slowRunner answers every command through fakeRunner after delay.
type slowRunner struct {
	fakeRunner
	delay time.Duration
}

func (s *slowRunner) Run(ctx context.Context, cmd remote.Command) (*remote.Result, error) {
	select {
	case <-time.After(s.delay):
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	return s.fakeRunner.Run(ctx, cmd)
}

// TestSlowCommands: Client.Slow hears of each command that took SlowAfter
// or more, with its duration, and of one stopped at its deadline; a quick
// one is not reported.
func TestSlowCommands(t *testing.T) {
	var mu sync.Mutex
	var got []SlowCommand
	hear := func(s SlowCommand) { mu.Lock(); got = append(got, s); mu.Unlock() }

	r := &slowRunner{delay: 30 * time.Millisecond}
	r.handlers = map[string]func([]string) (string, string, int){"scancel": func([]string) (string, string, int) { return "", "", 0 }}
	c := New(r)
	c.Slow, c.SlowAfter = hear, 20*time.Millisecond
	if err := c.Cancel(context.Background(), []string{"7"}); err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || got[0].Kind != KindScancel || got[0].Stopped || got[0].Took < 20*time.Millisecond ||
		!strings.Contains(got[0].Command, "scancel") || !strings.Contains(got[0].String(), "took") {
		t.Fatalf("slow scancel: %+v", got)
	}

	got = nil
	c.SlowAfter = time.Second // the 30 ms command is quick now
	if err := c.Cancel(context.Background(), []string{"7"}); err != nil || len(got) != 0 {
		t.Fatalf("a quick scancel reported: %+v (%v)", got, err)
	}

	s := stalled("scancel")
	c = New(s)
	c.Deadlines, c.Slow = short, hear
	if err := c.Cancel(context.Background(), []string{"7"}); !isDeadline(err) {
		t.Fatalf("stalled scancel: %v", err)
	}
	if len(got) != 1 || !got[0].Stopped || got[0].Deadline != short.Scancel || !strings.Contains(got[0].String(), "stopped at its deadline") {
		t.Fatalf("stopped scancel: %+v", got)
	}
}
