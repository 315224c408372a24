package labtest

import (
	"context"
	"fmt"
	"net"
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

// loadCluster2 fills l's Lab2 fields from vars: none when
// NEMORL_LAB2_SSH_PORT is absent (a lab.env from before cluster 2), all
// of them otherwise.
func (l *Lab) loadCluster2(path string, vars map[string]string) error {
	port := vars["NEMORL_LAB2_SSH_PORT"]
	if port == "" {
		return nil
	}
	var err error
	need := func(key string) string {
		v := vars[key]
		if v == "" && err == nil {
			err = fmt.Errorf("%s: %s is missing (NEMORL_LAB2_SSH_PORT is set)", path, key)
		}
		return v
	}
	l.Lab2Cluster = need("NEMORL_LAB2_CLUSTER")
	l.Lab2HostKeyPub = need("NEMORL_LAB2_HOST_KEY_PUB")
	l.Lab2Conf = need("NEMORL_LAB2_CONF")
	l.Lab2Gres = need("NEMORL_LAB2_GRES")
	l.Lab2Partition = need("NEMORL_LAB2_PARTITION")
	ctld := need("NEMORL_LAB2_SLURMCTLD_PORT")
	if err != nil {
		return err
	}
	for _, p := range []struct {
		key, v string
		to     *int
	}{{"NEMORL_LAB2_SSH_PORT", port, &l.Lab2SSHPort}, {"NEMORL_LAB2_SLURMCTLD_PORT", ctld, &l.Lab2CtldPort}} {
		n, err := strconv.Atoi(p.v)
		if err != nil || n <= 0 || n > 65535 {
			return fmt.Errorf("%s: %s=%q is not a port", path, p.key, p.v)
		}
		*p.to = n
	}
	return nil
}

// HasCluster2 says whether lab.env describes cluster 2.
func (l Lab) HasCluster2() bool { return l.Lab2SSHPort != 0 }

// need2 skips t (fails it when Required) when lab.env has no cluster 2.
func (l Lab) need2(t testing.TB) {
	t.Helper()
	if l.HasCluster2() {
		return
	}
	if Required() {
		t.Fatalf("lab required (NEMORL_REQUIRE_LAB=1) but %s has no NEMORL_LAB2_SSH_PORT; run lab/up", l.File)
	}
	t.Skipf("%s has no NEMORL_LAB2_SSH_PORT (a lab from before cluster 2); run lab/up", l.File)
}

// Cluster2 returns the lab as cluster 2's login node (its sshd) has it:
// SSHPort, HostKeyPub, Cluster, Gres and Partition are cluster 2's, and
// there is no far endpoint. The user, key, known_hosts file, workdir and
// node are the same. It skips t (fails it when Required) when lab.env has
// no cluster 2. t holds cluster 2 shared until it ends (see LockCluster2).
func (l Lab) Cluster2(t testing.TB) Lab {
	t.Helper()
	l.need2(t)
	useCluster2(t)
	l.SSHPort = l.Lab2SSHPort
	l.HostKeyPub = l.Lab2HostKeyPub
	l.Cluster = l.Lab2Cluster
	l.Gres = l.Lab2Gres
	l.Partition = l.Lab2Partition
	l.FarSSHPort, l.FarRTT = 0, 0
	return l
}

// Cluster2Env is this process's environment with SLURM_CONF naming
// cluster 2's slurm.conf: for exec.Cmd.Env, to run Slurm's clients here
// against cluster 2. Nil (the process's environment: cluster 1) when
// lab.env has no cluster 2.
func (l Lab) Cluster2Env() []string {
	if !l.HasCluster2() {
		return nil
	}
	return withVars([]string{"SLURM_CONF=" + l.Lab2Conf})
}

// StopCluster2 stops cluster 2's slurmctld (lab/cluster2 stop: SIGTERM, a
// few seconds). Its slurmd, its sshd and the jobs running on it go on;
// its clients fail with "Unable to contact slurm controller" (after
// Slurm's MessageTimeout, 10 s here) until StartCluster2; cluster 1 is not
// touched. t must hold cluster 2 exclusively (LockCluster2, or the whole
// lab: LockLab): StopCluster2 fails it otherwise. When t ends the controller is started
// again (lab/cluster2 start, which only waits when it runs already), so t
// never leaves it stopped.
func (l Lab) StopCluster2(t testing.TB) {
	t.Helper()
	l.cluster2Ctl(t, "stop")
}

// StartCluster2 starts cluster 2's slurmctld again (lab/cluster2 start)
// and returns once it answers (scontrol ping), its node is in service
// and slurmdbd has its address again (sacct -M, squeue -M); it fails t if
// that takes more than about two minutes. t must hold cluster 2
// exclusively (LockCluster2 or LockLab).
func (l Lab) StartCluster2(t testing.TB) {
	t.Helper()
	l.cluster2Ctl(t, "start")
}

func (l Lab) cluster2Ctl(t testing.TB, verb string) {
	t.Helper()
	l.need2(t)
	if !holdsCluster2(t) && !theLock.heldExclusivelyBy(t) {
		t.Fatalf("labtest: %s cluster 2's controller: %s must hold cluster 2 exclusively (labtest.LockCluster2, or the whole lab: LockLab)", verb, t.Name())
	}
	script := Script(t, "cluster2")
	if verb != "start" {
		t.Cleanup(func() {
			if out, err := runCluster2(script, "start"); err != nil {
				t.Errorf("cleanup: lab/cluster2 start: %v\n%s", err, out)
			}
		})
	}
	start := time.Now()
	out, err := runCluster2(script, verb)
	if err != nil {
		t.Fatalf("lab/cluster2 %s: %v\n%s", verb, err, out)
	}
	t.Logf("lab/cluster2 %s: %v", verb, time.Since(start).Round(10*time.Millisecond))
}

// runCluster2 runs lab/cluster2 VERB (3 minutes at most).
func runCluster2(script, verb string) ([]byte, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	return exec.CommandContext(ctx, script, verb).CombinedOutput()
}

// ctld2Accepts says whether cluster 2's slurmctld port accepts a TCP
// connection (the controller is up) within a second.
func (l Lab) ctld2Accepts() bool {
	if l.Lab2CtldPort == 0 {
		return false
	}
	c, err := net.DialTimeout("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(l.Lab2CtldPort)), time.Second)
	if err != nil {
		return false
	}
	_ = c.Close()
	return true
}

// heldExclusivelyBy says whether t (or a test it is a subtest of) holds
// the lab lock exclusively (LockLab).
func (l *labLock) heldExclusivelyBy(t testing.TB) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	name := t.Name()
	return l.mode == syscall.LOCK_EX && l.owner != "" && (name == l.owner || strings.HasPrefix(name, l.owner+"/"))
}

// The cluster 2 lock: $TMPDIR/nemorl-lab2.lock, flocked by the tests that
// use cluster 2: shared by Cluster2, exclusively by LockCluster2 (a test
// that stops cluster 2's controller). Cluster 1 is not theirs to break:
// such a test holds the lab lock shared, as any lab test, and runs
// alongside the tests that do not use cluster 2. Each hold is a file
// description of its own (flock excludes between descriptions of one
// process as between processes), so holds of one process exclude each
// other too; a test's subtests share its exclusive hold. Cluster 3 has a
// lock of its own, the same way (cluster3.go).
var lock2Path = func() string { return filepath.Join(os.TempDir(), "nemorl-lab2.lock") }

// cluster2Lock is cluster 2's lock.
var cluster2Lock = &clusterLock{what: "cluster 2", path: func() string { return lock2Path() }}

// LockCluster2 takes cluster 2 for t alone until t ends (the lab itself
// shared: UseLab), so that t may stop its controller (StopCluster2). No
// other test that uses cluster 2 runs meanwhile, in any process. Call it
// before Env or Cluster2 and, in a parallel test, after t.Parallel: a
// test paused with a hold would keep it from the others.
func LockCluster2(t testing.TB) {
	t.Helper()
	cluster2Lock.lockExclusive(t)
}

// holdsCluster2 says whether t (or a test it is a subtest of) holds
// cluster 2 exclusively (LockCluster2).
func holdsCluster2(t testing.TB) bool { return cluster2Lock.holds(t) }

// useCluster2 holds cluster 2 shared until t ends, unless t holds it
// exclusively already.
func useCluster2(t testing.TB) {
	t.Helper()
	cluster2Lock.useShared(t)
}

// clusterLock is the lock of one cluster of the lab (2 or 3): a file
// flocked shared by the tests that use the cluster and exclusively by a
// test that must be alone on it; the exclusive holder also holds the lab
// lock shared (UseLab).
type clusterLock struct {
	what string        // "cluster 2", for messages
	path func() string // the lock file

	mu    sync.Mutex
	names map[string]bool // the tests of this process holding it exclusively
}

// lockExclusive takes the cluster for t alone until t ends (nothing when
// t or a test it is a subtest of holds it already).
func (c *clusterLock) lockExclusive(t testing.TB) {
	t.Helper()
	if c.holds(t) {
		return
	}
	UseLab(t)
	release, err := flockFile(c.path(), syscall.LOCK_EX)
	if err != nil {
		t.Fatalf("%s lock: %v", c.what, err)
	}
	c.mu.Lock()
	if c.names == nil {
		c.names = map[string]bool{}
	}
	c.names[t.Name()] = true
	c.mu.Unlock()
	t.Cleanup(func() {
		c.mu.Lock()
		delete(c.names, t.Name())
		c.mu.Unlock()
		release()
	})
}

// holds says whether t (or a test it is a subtest of) holds the cluster
// exclusively.
func (c *clusterLock) holds(t testing.TB) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	for name := t.Name(); ; {
		if c.names[name] {
			return true
		}
		i := strings.LastIndexByte(name, '/')
		if i < 0 {
			return false
		}
		name = name[:i]
	}
}

// useShared holds the cluster shared until t ends, unless t holds it
// exclusively already.
func (c *clusterLock) useShared(t testing.TB) {
	t.Helper()
	if c.holds(t) {
		return
	}
	release, err := flockFile(c.path(), syscall.LOCK_SH)
	if err != nil {
		t.Fatalf("%s lock: %v", c.what, err)
	}
	t.Cleanup(release)
}

// flockFile opens path (creating it) and flocks it with how, waiting; the
// returned func unlocks and closes it.
func flockFile(path string, how int) (func(), error) {
	f, err := os.OpenFile(path, os.O_RDONLY|os.O_CREATE, 0o666)
	if err != nil {
		return nil, err
	}
	for {
		if err = syscall.Flock(int(f.Fd()), how); err != syscall.EINTR {
			break
		}
	}
	if err != nil {
		_ = f.Close()
		return nil, fmt.Errorf("flock %s: %w", path, err)
	}
	return func() {
		_ = syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
		_ = f.Close()
	}, nil
}
