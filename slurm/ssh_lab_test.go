package slurm

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nemorl/nemorl-slurm/internal/labtest"
	"github.com/nemorl/nemorl-slurm/remote"
)

// sshClientAt dials lab's sshd (cluster 1's, cluster 3's login:
// labtest.Slurm.Lab; a private one: PrivateSSHD) as the lab user, with
// strict host keys, and returns a Client over that one connection,
// counting its commands.
func sshClientAt(t *testing.T, lab labtest.Lab, opts ...func(*remote.Options)) (*Client, *countingRunner, labtest.Lab) {
	t.Helper()
	lab.WaitSSH(t, time.Minute)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ro := remote.Options{
		Host: lab.SSHHost, Port: lab.SSHPort, User: lab.User,
		IdentityFile: lab.Key, KnownHostsFile: lab.KnownHosts,
		ConfigFile: "none",
	}
	for _, o := range opts {
		o(&ro)
	}
	s, err := remote.Dial(ctx, ro)
	if err != nil {
		t.Fatalf("ssh to the lab: %v", err)
	}
	t.Cleanup(func() { _ = s.Close() })
	cr := &countingRunner{inner: s}
	return New(cr), cr, lab
}

// TestSSHChain submits a 3-job afterok chain over one SSH connection as the
// lab user, on each Slurm's login (on 24.11 its RPCs rate limited); a
// Query of 300 ids is one sacct; cancelling the running parent cancels the
// children (--kill-on-invalid-dep=yes).
func TestSSHChain(t *testing.T) {
	eachSlurm(t, testSSHChain)
}

func testSSHChain(t *testing.T, l *lab) {
	c, cr, lab := sshClientAt(t, l.slurm.Lab)
	ctx := context.Background()
	args := []string{"--time=5", "--output=/dev/null", "--partition=" + lab.Partition}
	tag := uniqueTag("ssh-chain")
	var ids []string
	for i, body := range []string{"sleep 300", "true", "true"} {
		req := SubmitRequest{
			Script:           []byte("#!/bin/bash\n" + body + "\n"),
			Name:             "ssh-chain-" + strconv.Itoa(i),
			Comment:          tag,
			KillOnInvalidDep: true,
			Args:             args,
		}
		if len(ids) > 0 {
			req.AfterOK = []string{ids[len(ids)-1]}
		}
		r, err := c.Submit(ctx, req)
		if err != nil {
			t.Fatalf("submit %d over ssh: %v", i, err)
		}
		ids = append(ids, r.JobID)
	}
	t.Cleanup(func() { _ = c.Cancel(context.Background(), ids) })
	if n := cr.count("sbatch"); n != 3 {
		t.Errorf("sbatch ran %d times, want 3", n)
	}

	waitFor(t, c, ids[:1], labWait, func(j JobInfo) bool { return j.State.Class == Running })

	// 300 ids, the chain's among them, in one sacct process.
	all := append([]string{}, ids...)
	for i := 0; len(all) < 300; i++ {
		all = append(all, strconv.Itoa(90000000+i))
	}
	cr.reset()
	got, err := c.Query(ctx, all)
	if err != nil {
		t.Fatal(err)
	}
	if n := cr.count("sacct"); n != 1 {
		t.Errorf("Query of %d ids ran sacct %d times, want 1", len(all), n)
	}
	if n := cr.count("squeue"); n > 1 {
		t.Errorf("Query ran squeue %d times, want at most 1", n)
	}
	// sacct may still say PENDING for a job squeue already runs: lag.
	if p := got[ids[0]]; p.Terminal() || p.State.Class == Unknown {
		t.Errorf("parent %s: %+v, want pending or running", ids[0], p.State)
	}
	if got["90000000"].State.Class != Unknown {
		t.Errorf("a made-up id came back %+v, want unknown", got["90000000"].State)
	}

	// Kill the parent: the children must end without running.
	if err := c.Cancel(ctx, ids[:1]); err != nil {
		t.Fatal(err)
	}
	final := waitFor(t, c, ids, labWait, func(j JobInfo) bool { return j.Terminal() })
	if s := final[ids[0]].State; s.Failure != FailureCancelled {
		t.Errorf("parent: %+v, want cancelled", s)
	}
	for _, id := range ids[1:] {
		j := final[id]
		if j.State.Failure != FailureDependency {
			t.Errorf("child %s: %+v started %v elapsed %v; want cancelled without running", id, j.State, j.Start, j.Elapsed)
		}
	}
}

// TestSSHQueryAcrossSSHDRestart restarts the sshd (which drops the
// connection) in the middle of a series of Query calls: the calls after the
// restart succeed without anyone redialling by hand. The sshd is the
// test's own (labtest.PrivateSSHD): the lab's stays up for the others.
func TestSSHQueryAcrossSSHDRestart(t *testing.T) {
	needLab(t)
	private, sshd := labtest.Env(t).PrivateSSHD(t)
	var mu sync.Mutex
	var logged []string
	c, cr, lab := sshClientAt(t, private, func(o *remote.Options) {
		o.MaxRetries = 12
		o.Logf = func(f string, a ...any) {
			mu.Lock()
			defer mu.Unlock()
			logged = append(logged, fmt.Sprintf(f, a...))
		}
	})
	ctx := context.Background()
	r, err := c.Submit(ctx, SubmitRequest{Wrap: "true", Args: []string{"--time=5", "--output=/dev/null", "--partition=" + lab.Partition}})
	if err != nil {
		t.Fatal(err)
	}
	ids := []string{r.JobID, "90000001"}
	for i := 0; i < 6; i++ {
		if i == 3 {
			sshd.Restart(t)
		}
		if _, err := c.Query(ctx, ids); err != nil {
			t.Fatalf("query %d (restart before query 3): %v", i, err)
		}
	}
	if n := cr.count("sacct"); n < 6 {
		t.Errorf("sacct ran %d times over 6 queries", n)
	}
	mu.Lock()
	defer mu.Unlock()
	if !strings.Contains(strings.Join(logged, "\n"), "connection lost") {
		t.Errorf("the restart dropped no connection (no \"connection lost\" logged): %q", logged)
	}
}
