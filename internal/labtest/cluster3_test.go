package labtest

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"
)

const lab3EnvText = "NEMORL_LAB3_CLUSTER=nemorl-lab3\nNEMORL_LAB3_SLURM_VERSION=24.11.5\nNEMORL_LAB3_PREFIX=/opt/nemorl-slurm-24.11\n" +
	"NEMORL_LAB3_SSH_HOST=127.0.0.1\nNEMORL_LAB3_SSH_PORT=2225\nNEMORL_LAB3_USER=nemorl\nNEMORL_LAB3_HOST_KEY_PUB=/h3.pub\n" +
	"NEMORL_LAB3_CONF=/etc/slurm-lab3/slurm.conf\nNEMORL_LAB3_GRES=gpu:h100:2\nNEMORL_LAB3_PARTITION=gpu\nNEMORL_LAB3_NODE=vm\n" +
	"NEMORL_LAB3_WORKDIR=/w\nNEMORL_LAB3_SLURMCTLD_PORT=6837\nNEMORL_LAB3_RL_BUCKET_SIZE=30\nNEMORL_LAB3_RL_REFILL_RATE=2\n" +
	"NEMORL_LAB3_LOGDIR=/var/lib/nemorl-lab/log\n"

// TestLoadCluster3: lab3.env is read from lab.env's directory; without it
// the lab has no cluster 3 and loads as before; a broken one does not fail
// Load (every lab test) but is kept for the tests that ask for cluster 3.
func TestLoadCluster3(t *testing.T) {
	dir := t.TempDir()
	p, p3 := filepath.Join(dir, "lab.env"), filepath.Join(dir, "lab3.env")
	base := "NEMORL_LAB_SSH_HOST=127.0.0.1\nNEMORL_LAB_SSH_PORT=2222\nNEMORL_LAB_USER=nemorl\nNEMORL_LAB_KEY=/k\n" +
		"NEMORL_LAB_KNOWN_HOSTS=/kh\nNEMORL_LAB_HOST_KEY_PUB=/h.pub\nNEMORL_LAB_WORKDIR=/w\nNEMORL_LAB_CLUSTER=nemorl-lab\n"
	if err := os.WriteFile(p, []byte(base), 0o600); err != nil {
		t.Fatal(err)
	}
	lab, err := Load(p)
	if err != nil || lab.HasCluster3() || lab.Lab3.File != p3 || lab.lab3Err != nil || lab.Cluster3Vars() != nil || lab.Cluster3Env() != nil {
		t.Fatalf("no lab3.env: %+v, %v", lab, err)
	}
	if err := os.WriteFile(p3, []byte(lab3EnvText), 0o600); err != nil {
		t.Fatal(err)
	}
	lab, err = Load(p)
	if err != nil {
		t.Fatal(err)
	}
	c := lab.Lab3
	if !lab.HasCluster3() || c.Cluster != "nemorl-lab3" || c.Version != "24.11.5" || c.SSHPort != 2225 || c.CtldPort != 6837 ||
		c.Conf != "/etc/slurm-lab3/slurm.conf" || c.Prefix != "/opt/nemorl-slurm-24.11" || c.Gres != "gpu:h100:2" ||
		c.RLBucket != 30 || c.RLRefill != 2 || c.LogDir != "/var/lib/nemorl-lab/log" || lab.SSHPort != 2222 || lab.Cluster != "nemorl-lab" {
		t.Errorf("cluster 3: %+v", lab)
	}
	t.Setenv("PATH", "/somewhere:/usr/bin:/bin")
	t.Setenv("SLURM_CONF", "/elsewhere")
	want := []string{"PATH=/opt/nemorl-slurm-24.11/bin:" + systemPath, "SLURM_CONF=/etc/slurm-lab3/slurm.conf"}
	if got := lab.Cluster3Vars(); !slices.Equal(got, want) {
		t.Errorf("Cluster3Vars = %q, want %q", got, want)
	}
	env := lab.Cluster3Env()
	for _, name := range []string{"PATH", "SLURM_CONF"} {
		var got []string
		for _, kv := range env {
			if strings.HasPrefix(kv, name+"=") {
				got = append(got, kv)
			}
		}
		if len(got) != 1 || !slices.Contains(want, got[0]) {
			t.Errorf("Cluster3Env's %s: %q", name, got)
		}
	}
	for _, bad := range []string{
		strings.Replace(lab3EnvText, "NEMORL_LAB3_CONF=/etc/slurm-lab3/slurm.conf\n", "", 1),
		strings.Replace(lab3EnvText, "NEMORL_LAB3_SLURMCTLD_PORT=6837\n", "", 1),
		strings.Replace(lab3EnvText, "=2225", "=ssh", 1),
		strings.Replace(lab3EnvText, "=6837", "=70000", 1),
		strings.Replace(lab3EnvText, "=24.11.5", "=latest", 1),
		"NEMORL_LAB3_CLUSTER\n",
	} {
		if err := os.WriteFile(p3, []byte(bad), 0o600); err != nil {
			t.Fatal(err)
		}
		lab, err := Load(p)
		if err != nil || lab.lab3Err == nil || lab.HasCluster3() {
			t.Errorf("%q: Load %v, cluster 3 %+v (err %v): want lab.env loaded and lab3.env's error kept", bad, err, lab.Lab3, lab.lab3Err)
		}
	}
}

// TestBrokenLab3Fails: a lab3.env that is there but broken fails a test
// that asks for cluster 3 even where a missing one would skip it.
func TestBrokenLab3Fails(t *testing.T) {
	if os.Getenv("LABTEST_CHILD") == "1" {
		Lab{File: "lab.env", Lab3: Lab3{File: "lab3.env"}, lab3Err: os.ErrInvalid}.Cluster3(t)
		return
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestBrokenLab3Fails$", "-test.v")
	cmd.Env = append(os.Environ(), "LABTEST_CHILD=1", "NEMORL_REQUIRE_LAB=")
	out, err := cmd.CombinedOutput()
	if err == nil || !strings.Contains(string(out), "--- FAIL") || !strings.Contains(string(out), "cluster 3: invalid argument") {
		t.Errorf("child: %v\n%s", err, out)
	}
}

func TestSeriesAndAtLeast(t *testing.T) {
	for _, c := range []struct {
		v            string
		major, minor int
		ok           bool
	}{{"22.05.8", 22, 5, true}, {"24.11.5", 24, 11, true}, {"25.11", 25, 11, true}, {"24", 0, 0, false}, {"x.y", 0, 0, false}, {"", 0, 0, false}} {
		major, minor, ok := seriesOf(c.v)
		if ok != c.ok || ok && (major != c.major || minor != c.minor) {
			t.Errorf("seriesOf(%q) = %d, %d, %v", c.v, major, minor, ok)
		}
	}
	s := Slurm{Major: 24, Minor: 11}
	for _, c := range []struct {
		major, minor int
		want         bool
	}{{22, 5, true}, {24, 5, true}, {24, 11, true}, {24, 12, false}, {25, 0, false}} {
		if got := s.AtLeast(c.major, c.minor); got != c.want {
			t.Errorf("24.11 AtLeast(%d, %d) = %v", c.major, c.minor, got)
		}
	}
}

// TestSlurmCommand: a Slurm with a PATH of its own runs its own clients
// (exec.Command alone would look in this process's PATH), with its
// variables in the command's environment; cluster 1's run as the
// process's.
func TestSlurmCommand(t *testing.T) {
	bin := t.TempDir()
	if err := os.WriteFile(filepath.Join(bin, "squeue"), []byte("#!/bin/sh\necho \"mine $SLURM_CONF\"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	s := Slurm{vars: []string{"PATH=" + bin + ":" + os.Getenv("PATH"), "SLURM_CONF=/etc/x.conf"}}
	out, err := s.Command("squeue").Output()
	if err != nil || strings.TrimSpace(string(out)) != "mine /etc/x.conf" {
		t.Errorf("s.Command(squeue): %q, %v", out, err)
	}
	if c := s.Command("sh", "-c", "true"); !strings.HasSuffix(c.Path, "/sh") || c.Env == nil {
		t.Errorf("a program s has not: %s, env %d", c.Path, len(c.Env))
	}
	one := Slurm{}
	if c := one.Command("squeue"); strings.HasPrefix(c.Path, bin) || c.Env != nil {
		t.Errorf("cluster 1's squeue: %s, env %v", c.Path, c.Env)
	}
	if got := s.Vars(); len(got) != 2 {
		t.Errorf("Vars = %q", got)
	}
}

// TestCluster3Lock: LockCluster3 is cluster 2's discipline on a lock of its
// own: exclusive against any other holder, the lab held shared, subtests
// sharing the hold, released at the end; cluster 2's lock is not touched.
func TestCluster3Lock(t *testing.T) {
	dir := t.TempDir()
	p, p2, p3 := filepath.Join(dir, "lab.lock"), filepath.Join(dir, "lab2.lock"), filepath.Join(dir, "lab3.lock")
	useLockPath(t, p)
	old2, old3 := lock2Path, lock3Path
	lock2Path, lock3Path = func() string { return p2 }, func() string { return p3 }
	t.Cleanup(func() { lock2Path, lock3Path = old2, old3 })

	t.Run("exclusive", func(t *testing.T) {
		LockCluster3(t)
		if canFlock(t, p3, syscall.LOCK_SH) {
			t.Error("cluster 3's lock can be shared while LockCluster3 holds it")
		}
		if !canFlock(t, p2, syscall.LOCK_EX) {
			t.Error("LockCluster3 holds cluster 2's lock")
		}
		if !canFlock(t, p, syscall.LOCK_SH) || canFlock(t, p, syscall.LOCK_EX) {
			t.Error("the lab lock is not held shared under LockCluster3")
		}
		t.Run("subtest", func(t *testing.T) {
			done := make(chan struct{})
			go func() {
				defer close(done)
				useCluster3(t)
				LockCluster3(t)
			}()
			select {
			case <-done:
			case <-time.After(5 * time.Second):
				t.Fatal("a subtest of the holder waited for cluster 3's lock")
			}
		})
	})
	if !canFlock(t, p3, syscall.LOCK_EX) || !canFlock(t, p, syscall.LOCK_EX) {
		t.Fatal("locks still held after LockCluster3's test ended")
	}
	t.Run("shared", func(t *testing.T) {
		useCluster3(t)
		if !canFlock(t, p3, syscall.LOCK_SH) || canFlock(t, p3, syscall.LOCK_EX) {
			t.Error("cluster 3's shared hold is not shared")
		}
	})
	if !canFlock(t, p3, syscall.LOCK_EX) {
		t.Fatal("cluster 3's lock still held after the shared test ended")
	}
}
