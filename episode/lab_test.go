package episode

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nemorl/nemorl-slurm/configs"
	"github.com/nemorl/nemorl-slurm/internal/labtest"
	"github.com/nemorl/nemorl-slurm/ledger"
	"github.com/nemorl/nemorl-slurm/remote"
	"github.com/nemorl/nemorl-slurm/rules"
	"github.com/nemorl/nemorl-slurm/slurm"
	"github.com/nemorl/nemorl-slurm/stages"
)

// slurmCounter remembers when each squeue and sacct process run through it
// started: the poll's own squeue (the one given --jobs) apart.
type slurmCounter struct {
	inner remote.Runner
	mu    sync.Mutex
	polls []time.Time // squeue --jobs=…: one per poll
	sacct []time.Time
}

func (c *slurmCounter) Run(ctx context.Context, cmd remote.Command) (*remote.Result, error) {
	c.mu.Lock()
	switch {
	case slices.Contains(cmd.Argv, "sacct"):
		c.sacct = append(c.sacct, time.Now())
	case slices.Contains(cmd.Argv, "squeue") && slices.ContainsFunc(cmd.Argv, func(a string) bool { return strings.HasPrefix(a, "--jobs=") }):
		c.polls = append(c.polls, time.Now())
	}
	c.mu.Unlock()
	return c.inner.Run(ctx, cmd)
}

// calls returns the times of the polls' squeue and of every sacct.
func (c *slurmCounter) calls() (polls, sacct []time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.polls), slices.Clone(c.sacct)
}

// labDriver is a Driver for configs/lab-none.yaml over SSH, its train stage
// replaced by trainArgv, counting sacct.
func labDriver(t *testing.T, trainArgv []string) (*Driver, *slurmCounter) {
	t.Helper()
	labtest.Env(t)
	labtest.UseLab(t)
	return dialLab(t, trainArgv, 0)
}

// dialLab connects to the lab; retries is remote.Options.MaxRetries.
func dialLab(t *testing.T, trainArgv []string, retries int) (*Driver, *slurmCounter) {
	t.Helper()
	return dialLabAt(t, labtest.Env(t), trainArgv, retries)
}

// dialLabAt is dialLab through lab's sshd (a private one: PrivateSSHD).
func dialLabAt(t *testing.T, lab labtest.Lab, trainArgv []string, retries int) (*Driver, *slurmCounter) {
	t.Helper()
	lab.WaitSSH(t, time.Minute)
	cfg, err := configs.LoadFile("../configs/lab-none.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if trainArgv != nil {
		cfg.Stages.Train.Command = trainArgv
	}
	cfg.Cluster.Workdir = lab.TestWorkdir(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	host, err := remote.Dial(ctx, remote.Options{Host: lab.SSHHost, Port: lab.SSHPort, User: lab.User,
		IdentityFile: lab.Key, KnownHostsFile: lab.KnownHosts, ConfigFile: "none", MaxRetries: retries})
	if err != nil {
		t.Fatalf("ssh to the lab: %v", err)
	}
	t.Cleanup(func() { _ = host.Close() })
	lg, err := ledger.OpenLedger(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	counter := &slurmCounter{inner: host}
	return &Driver{Config: cfg, ConfigPath: "../configs/lab-none.yaml", Host: host, Slurm: slurm.New(counter),
		Ledger: lg, Version: "test", Logf: t.Logf}, counter
}

var sleepingTrain = []string{"/opt/nemorl-lab/stand-ins/train", "--sleep-forever"}

// TestWatchOneSqueuePerPoll watches three episodes at once: every poll is
// one squeue for all their jobs, sacct is asked only about jobs that left
// squeue (the author jobs that ended: none while train sleeps), and while
// nothing changes the interval doubles from poll_min up to poll_max.
func TestWatchOneSqueuePerPoll(t *testing.T) {
	d, counter := labDriver(t, sleepingTrain)
	ctx := context.Background()
	var eps []string
	for range 3 {
		e, lock, err := d.SubmitOne(ctx, "", []byte("stand-in prompt"))
		if err != nil {
			t.Fatal(err)
		}
		lock.Unlock()
		eps = append(eps, e.Episode)
	}
	t.Cleanup(func() {
		for _, ep := range eps {
			if e, err := d.Ledger.Load(ep); err == nil {
				cancelAsOwner(d, e)
			}
		}
	})

	const pollMin, pollMax = 200 * time.Millisecond, 1600 * time.Millisecond
	var polls []time.Time
	var lastRows []Row
	unchanged := 0
	wctx, cancel := context.WithTimeout(ctx, 40*time.Second)
	defer cancel()
	beforePolls, beforeSacct := counter.calls()
	_, err := d.Watch(wctx, eps, WatchOptions{Act: true, PollMin: pollMin, PollMax: pollMax, Observe: func(rows []Row) {
		polls = append(polls, time.Now())
		// Stop after six polls in a row that saw the same rows, all at the
		// train stage (it sleeps): the interval has then had time to
		// double from poll_min to poll_max.
		allTrain := true
		for _, r := range rows {
			allTrain = allTrain && r.Stage == stages.Train && r.JobID != ""
		}
		if allTrain && sameRows(rows, lastRows) {
			unchanged++
		} else {
			unchanged = 0
		}
		lastRows = rows
		if unchanged >= 6 {
			cancel()
		}
	}})
	if err == nil || wctx.Err() == nil {
		t.Fatalf("Watch returned %v before the test stopped it; rows %+v", err, lastRows)
	}
	allPolls, allSacct := counter.calls()
	sacct, sacctCalls := allPolls[len(beforePolls):], allSacct[len(beforeSacct):]
	// One squeue per poll (the poll that was cancelled may have run its
	// squeue without reaching Observe).
	if n, p := len(sacct), len(polls); n != p && n != p+1 {
		t.Fatalf("%d squeue calls for %d polls of %d episodes; want one per poll", n, p, len(eps))
	}
	// sacct only for the jobs that left squeue: none in the polls that saw
	// nothing change (the last six), so fewer than one per poll.
	quiet := sacct[len(sacct)-6]
	for _, at := range sacctCalls {
		if at.After(quiet) {
			t.Errorf("a sacct at %s, after the quiet polls began at %s: sacct must follow the jobs that left squeue only", at.Format(time.StampMilli), quiet.Format(time.StampMilli))
		}
	}
	if len(lastRows) != 3 {
		t.Fatalf("rows %+v", lastRows)
	}
	for _, r := range lastRows {
		if r.Stage != stages.Train || (r.State != "RUNNING" && r.State != "PENDING") || r.JobID == "" {
			t.Errorf("row %+v: want the train job running or pending", r)
		}
	}
	// The last gaps, all while nothing changed, grew to poll_max and never
	// beyond what doubling allows.
	var gaps []time.Duration
	for i := 1; i < len(sacct); i++ {
		gaps = append(gaps, sacct[i].Sub(sacct[i-1]))
	}
	if len(gaps) < 4 {
		t.Fatalf("only %d gaps", len(gaps))
	}
	last := gaps[len(gaps)-1]
	if last < pollMax {
		t.Errorf("last gap %s, want ≥ poll_max %s once nothing changes (gaps %v)", last, pollMax, gaps)
	}
	if first := gaps[0]; first > pollMax {
		t.Errorf("first gap %s, want about poll_min %s (gaps %v)", first, pollMin, gaps)
	}
}

// TestWatchConnectionLost stops the sshd under a watch: after
// MaxPollFailures failed polls Watch gives up with ErrConnectionLost, the
// episode stays unfinished in the ledger (no outcome is made up), and a
// later watch picks it up again once sshd is back. The sshd is the test's
// own (labtest.PrivateSSHD): the lab's stays up for the others.
func TestWatchConnectionLost(t *testing.T) {
	lab, sshd := labtest.Env(t).PrivateSSHD(t)
	// No transport retries: the polls fail at once (the retries themselves
	// are remote's tests).
	d, _ := dialLabAt(t, lab, sleepingTrain, -1)
	ctx := context.Background()
	e, lock, err := d.SubmitOne(ctx, "", []byte("stand-in prompt"))
	if err != nil {
		t.Fatal(err)
	}
	lock.Unlock()
	t.Cleanup(func() {
		sshd.Start(t)
		if e, err := d.Ledger.Load(e.Episode); err == nil {
			cancelAsOwner(d, e)
		}
	})
	sshd.Stop(t)
	wctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	defer cancel()
	start := time.Now()
	_, err = d.Watch(wctx, []string{e.Episode}, WatchOptions{Act: true, PollMin: 100 * time.Millisecond, PollMax: 200 * time.Millisecond, MaxPollFailures: 2})
	if !errors.Is(err, ErrConnectionLost) {
		t.Fatalf("Watch with sshd stopped: %v (after %s), want ErrConnectionLost", err, time.Since(start))
	}
	t.Logf("gave up after %s: %v", time.Since(start).Round(time.Millisecond), err)
	got, lerr := d.Ledger.Load(e.Episode)
	if lerr != nil || got.Final() || got.JobID(stages.Author) != e.JobID(stages.Author) {
		t.Fatalf("ledger after the lost connection: final=%v author=%q (%v); want unfinished, same author job", got.Final(), got.JobID(stages.Author), lerr)
	}
	sshd.Start(t)
	var rows []Row
	_, err = d.Watch(wctx, []string{e.Episode}, WatchOptions{Act: true, Once: true, Observe: func(r []Row) { rows = r }})
	if err != nil || len(rows) != 1 || rows[0].JobID == "" {
		t.Fatalf("watch after sshd came back: %v, rows %+v", err, rows)
	}
}

// TestSubmitRefused, on each Slurm: a stage sbatch refuses for good (here
// the staged train script names a partition the cluster does not have)
// ends the episode as infra_failure / submit_refused instead of being
// retried at every poll. The author job goes through batch.sh's sbatch
// (under its deadline) over each cluster's login, 24.11's rate limited.
func TestSubmitRefused(t *testing.T) {
	labtest.EachSlurm(t, testSubmitRefused)
}

func testSubmitRefused(t *testing.T, s labtest.Slurm) {
	labtest.UseLab(t)
	d, _ := dialLabAt(t, s.Lab, nil, 0)
	ctx := context.Background()
	e, lock, err := d.SubmitOne(ctx, "", []byte("stand-in prompt"))
	if err != nil {
		t.Fatal(err)
	}
	lock.Unlock()
	script := filepath.Join(e.Dir, "train", "train.sbatch")
	b, err := os.ReadFile(script)
	if err != nil {
		t.Fatal(err)
	}
	bad := strings.Replace(string(b), "#SBATCH --partition="+d.Config.Cluster.Partition+"\n", "#SBATCH --partition=nosuch\n", 1)
	if bad == string(b) {
		t.Fatalf("no partition line in %s", script)
	}
	if err := os.WriteFile(script, []byte(bad), 0o600); err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	got, err := d.Watch(wctx, []string{e.Episode}, WatchOptions{Act: true, PollMin: 200 * time.Millisecond, PollMax: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	o := got[e.Episode].Outcome
	if o == nil || o.Outcome != rules.InfraFailure || o.FailureReason != rules.ReasonSubmitRefused || o.FailureStage != stages.Train ||
		!strings.Contains(o.Detail, "nosuch") || !o.MaskSample || o.Reward != nil {
		t.Fatalf("outcome %+v", o)
	}
	if id := got[e.Episode].JobID(stages.Train); id != "" {
		t.Fatalf("a train job %s exists", id)
	}
}

// cancelAsOwner cancels e (a test's cleanup) as the process that owns it,
// taking its lock for the call.
func cancelAsOwner(d *Driver, e *ledger.Entry) {
	lock, _, _ := d.Ledger.TryLock(e.Episode)
	defer lock.Unlock()
	_, _ = d.Cancel(context.Background(), e, rules.ReasonCancelled, lock)
}
