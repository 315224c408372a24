package labtest

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
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
// no cluster 2.
func (l Lab) Cluster2(t testing.TB) Lab {
	t.Helper()
	l.need2(t)
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
	env := []string{}
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "SLURM_CONF=") {
			env = append(env, kv)
		}
	}
	return append(env, "SLURM_CONF="+l.Lab2Conf)
}

// StopCluster2 stops cluster 2's slurmctld (lab/cluster2 stop: SIGTERM, a
// few seconds). Its slurmd, its sshd and the jobs running on it go on;
// its clients fail with "Unable to contact slurm controller" (after
// Slurm's MessageTimeout, 10 s here) until StartCluster2; cluster 1 is not
// touched. t must hold the lab lock exclusively (LockLab, before Env):
// StopCluster2 fails it otherwise. When t ends the controller is started
// again (lab/cluster2 start, which only waits when it runs already), so t
// never leaves it stopped.
func (l Lab) StopCluster2(t testing.TB) {
	t.Helper()
	l.cluster2Ctl(t, "stop")
}

// StartCluster2 starts cluster 2's slurmctld again (lab/cluster2 start)
// and returns once it answers (scontrol ping), its node is in service
// and slurmdbd has its address again (sacct -M, squeue -M); it fails t if
// that takes more than about two minutes. t must hold the lab lock
// exclusively (LockLab).
func (l Lab) StartCluster2(t testing.TB) {
	t.Helper()
	l.cluster2Ctl(t, "start")
}

func (l Lab) cluster2Ctl(t testing.TB, verb string) {
	t.Helper()
	l.need2(t)
	if !theLock.heldExclusivelyBy(t) {
		t.Fatalf("labtest: %s cluster 2's controller: %s must hold the lab lock exclusively (labtest.LockLab before labtest.Env)", verb, t.Name())
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
