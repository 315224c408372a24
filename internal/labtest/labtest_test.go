package labtest

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nemorl/nemorl-slurm/internal/shell"
)

func TestParse(t *testing.T) {
	in := "# lab\n\nA=1\nexport B='two words'\nC=\"x=y\"\nD=\n"
	got, err := Parse(strings.NewReader(in))
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"A": "1", "B": "two words", "C": "x=y", "D": ""}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s = %q, want %q", k, got[k], v)
		}
	}
	for _, bad := range []string{"novalue\n", "1A=x\n", "A='x\n", "A B=c\n"} {
		if _, err := Parse(strings.NewReader(bad)); err == nil {
			t.Errorf("Parse(%q) succeeded", bad)
		}
	}
}

func TestLoad(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "lab.env")
	full := "NEMORL_LAB_SSH_HOST=127.0.0.1\nNEMORL_LAB_SSH_PORT=2222\nNEMORL_LAB_USER=nemorl\nNEMORL_LAB_KEY=/k\n" +
		"NEMORL_LAB_KNOWN_HOSTS=/kh\nNEMORL_LAB_HOST_KEY_PUB=/h.pub\nNEMORL_LAB_WORKDIR=/w\n"
	if err := os.WriteFile(p, []byte(full), 0o600); err != nil {
		t.Fatal(err)
	}
	lab, err := Load(p)
	if err != nil {
		t.Fatal(err)
	}
	if lab.SSHPort != 2222 || lab.User != "nemorl" || lab.Workdir != "/w" {
		t.Errorf("Load = %+v", lab)
	}
	if err := os.WriteFile(p, []byte(strings.Replace(full, "NEMORL_LAB_USER=nemorl\n", "", 1)), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := Load(p); err == nil || !strings.Contains(err.Error(), "NEMORL_LAB_USER") {
		t.Errorf("missing user: err = %v", err)
	}
	if err := os.WriteFile(p, []byte(strings.Replace(full, "2222", "ssh", 1)), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := Load(p); err == nil {
		t.Error("bad port accepted")
	}
}

func TestLoadFar(t *testing.T) {
	p := filepath.Join(t.TempDir(), "lab.env")
	base := "NEMORL_LAB_SSH_HOST=127.0.0.1\nNEMORL_LAB_SSH_PORT=2222\nNEMORL_LAB_USER=nemorl\nNEMORL_LAB_KEY=/k\n" +
		"NEMORL_LAB_KNOWN_HOSTS=/kh\nNEMORL_LAB_HOST_KEY_PUB=/h.pub\nNEMORL_LAB_WORKDIR=/w\n"
	load := func(extra string) (Lab, error) {
		t.Helper()
		if err := os.WriteFile(p, []byte(base+extra), 0o600); err != nil {
			t.Fatal(err)
		}
		return Load(p)
	}
	// An older lab.env: no far endpoint.
	lab, err := load("")
	if err != nil || lab.FarSSHPort != 0 || lab.FarRTT != 0 {
		t.Errorf("no far endpoint: %+v, %v", lab, err)
	}
	lab, err = load("NEMORL_LAB_FAR_SSH_PORT=2223\nNEMORL_LAB_FAR_RTT_MS=20\n")
	if err != nil || lab.FarSSHPort != 2223 || lab.FarRTT != 20*time.Millisecond || lab.SSHPort != 2222 {
		t.Errorf("far endpoint: %+v, %v", lab, err)
	}
	if far := lab.Far(t); far.SSHPort != 2223 || far.SSHHost != lab.SSHHost || far.User != lab.User {
		t.Errorf("Far() = %+v", far)
	}
	for _, bad := range []string{
		"NEMORL_LAB_FAR_SSH_PORT=far\nNEMORL_LAB_FAR_RTT_MS=20\n",
		"NEMORL_LAB_FAR_SSH_PORT=70000\nNEMORL_LAB_FAR_RTT_MS=20\n",
		"NEMORL_LAB_FAR_SSH_PORT=2223\n",
		"NEMORL_LAB_FAR_SSH_PORT=2223\nNEMORL_LAB_FAR_RTT_MS=20ms\n",
		"NEMORL_LAB_FAR_SSH_PORT=2223\nNEMORL_LAB_FAR_RTT_MS=-1\n",
	} {
		if lab, err := load(bad); err == nil {
			t.Errorf("%q accepted: %+v", bad, lab)
		}
	}
}

// TestEnvSkipOrFail checks the skip/fail switch in a subprocess-free way:
// with a missing file and the requirement off, Env skips.
func TestEnvSkip(t *testing.T) {
	t.Setenv("NEMORL_LAB_ENV", filepath.Join(t.TempDir(), "absent.env"))
	t.Setenv("NEMORL_REQUIRE_LAB", "")
	skipped := true
	t.Run("inner", func(t *testing.T) {
		Env(t)
		skipped = false
	})
	if !skipped {
		t.Error("Env did not skip without a lab")
	}
}

func FuzzParse(f *testing.F) {
	f.Add("A=1\n# c\nexport B='x'\n")
	f.Add("=\n")
	f.Add("A=\"\n")
	f.Fuzz(func(t *testing.T, s string) {
		vars, err := Parse(strings.NewReader(s))
		if err != nil {
			return
		}
		for k := range vars {
			if !shell.IsName(k) {
				t.Errorf("bad key %q accepted", k)
			}
		}
	})
}

// TestEnvRequired runs Env in a child test process with NEMORL_REQUIRE_LAB=1
// and no lab: the child must fail, not skip.
func TestEnvRequired(t *testing.T) {
	if os.Getenv("LABTEST_CHILD") == "1" {
		Env(t)
		return
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestEnvRequired$", "-test.v")
	cmd.Env = append(os.Environ(), "LABTEST_CHILD=1", "NEMORL_REQUIRE_LAB=1",
		"NEMORL_LAB_ENV="+filepath.Join(t.TempDir(), "absent.env"))
	out, err := cmd.CombinedOutput()
	if err == nil || !strings.Contains(string(out), "lab required (NEMORL_REQUIRE_LAB=1) but absent") {
		t.Errorf("child: %v\n%s", err, out)
	}
}

// useLockPath points the lab lock at p (in a temporary directory, not the
// one real lab tests use) for t.
func useLockPath(t *testing.T, p string) {
	old, oldClear := lockPath, clearQueue
	lockPath = func() string { return p }
	clearQueue = func(testing.TB) {} // these tests' LockLab is not the lab's
	t.Cleanup(func() { lockPath, clearQueue = old, oldClear })
}

// canFlock says whether another holder (another open file: to flock, the
// same as another process) could take the lock at p now, shared or
// exclusive.
func canFlock(t *testing.T, p string, how int) bool {
	t.Helper()
	f, err := os.OpenFile(p, os.O_RDONLY|os.O_CREATE, 0o666)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	switch err := syscall.Flock(int(f.Fd()), how|syscall.LOCK_NB); err {
	case nil:
		return true
	case syscall.EWOULDBLOCK:
		return false
	default:
		t.Fatal(err)
		return false
	}
}

// testLabEnv writes a minimal lab.env and points NEMORL_LAB_ENV at it.
func testLabEnv(t *testing.T) {
	p := filepath.Join(t.TempDir(), "lab.env")
	env := "NEMORL_LAB_SSH_HOST=127.0.0.1\nNEMORL_LAB_SSH_PORT=2222\nNEMORL_LAB_USER=nemorl\nNEMORL_LAB_KEY=/k\n" +
		"NEMORL_LAB_KNOWN_HOSTS=/kh\nNEMORL_LAB_HOST_KEY_PUB=/h.pub\nNEMORL_LAB_WORKDIR=/w\n"
	if err := os.WriteFile(p, []byte(env), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("NEMORL_LAB_ENV", p)
}

// TestLabLockAcrossProcesses: a child test process holds the lab lock
// exclusively (LockLab, with UseLab inside it); a shared taker here (UseLab)
// waits until the child lets go.
func TestLabLockAcrossProcesses(t *testing.T) {
	if os.Getenv("LABTEST_LOCK_CHILD") == "1" {
		LockLab(t)
		UseLab(t) // only counts: must not deadlock
		fmt.Println("locked")
		_, _ = io.Copy(io.Discard, os.Stdin) // until the parent closes it
		return
	}
	dir := t.TempDir()
	p := filepath.Join(dir, "nemorl-lab.lock")
	useLockPath(t, p)
	cmd := exec.Command(os.Args[0], "-test.run=^TestLabLockAcrossProcesses$", "-test.v")
	cmd.Env = append(os.Environ(), "LABTEST_LOCK_CHILD=1", "TMPDIR="+dir) // the child's lock: $TMPDIR/nemorl-lab.lock
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	locked := make(chan struct{})
	var childOut strings.Builder
	outDone := make(chan struct{})
	go func() {
		defer close(outDone)
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			childOut.WriteString(sc.Text() + "\n")
			if sc.Text() == "locked" {
				close(locked)
			}
		}
	}()
	select {
	case <-locked:
	case <-outDone:
		t.Fatalf("the child ended without taking the lock:\n%s", childOut.String())
	case <-time.After(10 * time.Second):
		t.Fatal("the child did not take the lock within 10s")
	}
	if canFlock(t, p, syscall.LOCK_SH) {
		t.Fatal("a shared flock was granted while the child holds the lab lock exclusively")
	}

	const hold = 300 * time.Millisecond
	released := make(chan time.Time, 1)
	start := time.Now()
	go func() {
		time.Sleep(hold)
		released <- time.Now()
		_ = stdin.Close() // the child's test returns and its cleanup unlocks
	}()
	var took time.Time
	t.Run("shared", func(t *testing.T) {
		UseLab(t)
		took = time.Now()
		if canFlock(t, p, syscall.LOCK_EX) {
			t.Error("an exclusive flock was granted while UseLab holds the lab lock")
		}
	})
	rel := <-released
	if took.Before(rel) {
		t.Errorf("UseLab returned %v after the start, before the child let go (%v)", took.Sub(start), rel.Sub(start))
	}
	<-outDone
	if err := cmd.Wait(); err != nil {
		t.Errorf("child: %v\n%s", err, childOut.String())
	}
	if !canFlock(t, p, syscall.LOCK_EX) {
		t.Error("the lab lock is still held after both tests ended")
	}
}

// TestLabLockInProcess: in one process nothing deadlocks, and another
// process (another open file) sees the right lock throughout: UseLab and Env
// inside LockLab, LockLab again in a subtest, Env before LockLab in one test
// (against the rule, but its hold is converted), a LockLab test while a
// parallel test that called Env is paused (what a package's sequential
// fault test meets), and Env from a benchmark.
func TestLabLockInProcess(t *testing.T) {
	p := filepath.Join(t.TempDir(), "nemorl-lab.lock")
	useLockPath(t, p)
	testLabEnv(t)
	exclusive := func(t *testing.T) {
		t.Helper()
		if canFlock(t, p, syscall.LOCK_SH) {
			t.Error("another process could take the lab lock shared: not held exclusively")
		}
	}
	shared := func(t *testing.T) {
		t.Helper()
		if !canFlock(t, p, syscall.LOCK_SH) || canFlock(t, p, syscall.LOCK_EX) {
			t.Error("the lab lock is not held shared")
		}
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		t.Run("exclusive, then shared inside", func(t *testing.T) {
			LockLab(t)
			UseLab(t)
			Env(t)
			Env(t)
			t.Run("subtest", func(t *testing.T) {
				Env(t)
				LockLab(t)
				UseLab(t)
				exclusive(t)
			})
			exclusive(t)
		})
		t.Run("Env, then LockLab", func(t *testing.T) {
			Env(t)
			shared(t)
			LockLab(t)
			exclusive(t)
		})
		t.Run("paused parallel test", func(t *testing.T) {
			t.Run("parallel", func(t *testing.T) {
				Env(t)
				t.Parallel() // waits for the sequential subtest below
				shared(t)
			})
			t.Run("sequential LockLab", func(t *testing.T) {
				LockLab(t)
				exclusive(t)
			})
		})
		var benchErr string
		testing.Benchmark(func(b *testing.B) {
			Env(b)
			UseLab(b)
			if !canFlock(t, p, syscall.LOCK_SH) || canFlock(t, p, syscall.LOCK_EX) {
				benchErr = "Env in a benchmark: the lab lock is not held shared"
			}
		})
		if benchErr != "" {
			t.Error(benchErr)
		}
	}()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		panic("lab lock: deadlock (the subtests did not end within 5s)")
	}
	if !canFlock(t, p, syscall.LOCK_EX) {
		t.Error("the lab lock is still held after every test ended")
	}
}

func TestLoadCluster2(t *testing.T) {
	p := filepath.Join(t.TempDir(), "lab.env")
	base := "NEMORL_LAB_SSH_HOST=127.0.0.1\nNEMORL_LAB_SSH_PORT=2222\nNEMORL_LAB_USER=nemorl\nNEMORL_LAB_KEY=/k\n" +
		"NEMORL_LAB_KNOWN_HOSTS=/kh\nNEMORL_LAB_HOST_KEY_PUB=/h.pub\nNEMORL_LAB_WORKDIR=/w\n" +
		"NEMORL_LAB_PARTITION=gpu\nNEMORL_LAB_GRES=gpu:h100:2\nNEMORL_LAB_CLUSTER=nemorl-lab\nNEMORL_LAB_NODE=vm\n"
	c2 := "NEMORL_LAB2_CLUSTER=nemorl-lab2\nNEMORL_LAB2_SSH_PORT=2224\nNEMORL_LAB2_HOST_KEY_PUB=/h2.pub\n" +
		"NEMORL_LAB2_CONF=/etc/slurm-lab2/slurm.conf\nNEMORL_LAB2_GRES=gpu:h100:1\nNEMORL_LAB2_PARTITION=gpu\n" +
		"NEMORL_LAB2_NODE=vm\nNEMORL_LAB2_SLURMCTLD_PORT=6827\n"
	load := func(env string) (Lab, error) {
		t.Helper()
		if err := os.WriteFile(p, []byte(env), 0o600); err != nil {
			t.Fatal(err)
		}
		return Load(p)
	}
	// An older lab.env: no cluster 2.
	lab, err := load(base)
	if err != nil || lab.HasCluster2() || lab.Lab2Conf != "" || lab.Cluster2Env() != nil {
		t.Errorf("no cluster 2: %+v, %v", lab, err)
	}
	if lab.Cluster != "nemorl-lab" || lab.Node != "vm" {
		t.Errorf("cluster 1: %+v", lab)
	}
	lab, err = load(base + c2)
	if err != nil {
		t.Fatal(err)
	}
	if !lab.HasCluster2() || lab.Lab2SSHPort != 2224 || lab.Lab2CtldPort != 6827 || lab.Lab2Cluster != "nemorl-lab2" ||
		lab.Lab2Conf != "/etc/slurm-lab2/slurm.conf" || lab.Lab2Gres != "gpu:h100:1" || lab.Lab2HostKeyPub != "/h2.pub" ||
		lab.Lab2Partition != "gpu" || lab.SSHPort != 2222 {
		t.Errorf("cluster 2: %+v", lab)
	}
	t.Setenv("SLURM_CONF", "/elsewhere")
	env := lab.Cluster2Env()
	n := 0
	for _, kv := range env {
		if strings.HasPrefix(kv, "SLURM_CONF=") {
			n++
			if kv != "SLURM_CONF=/etc/slurm-lab2/slurm.conf" {
				t.Errorf("Cluster2Env: %s", kv)
			}
		}
	}
	if n != 1 {
		t.Errorf("Cluster2Env has %d SLURM_CONF", n)
	}
	v := lab.Cluster2(t)
	if v.SSHPort != 2224 || v.HostKeyPub != "/h2.pub" || v.Cluster != "nemorl-lab2" || v.Gres != "gpu:h100:1" ||
		v.FarSSHPort != 0 || v.User != lab.User || v.Key != lab.Key || v.KnownHosts != lab.KnownHosts || v.Node != "vm" {
		t.Errorf("Cluster2() = %+v", v)
	}
	for _, bad := range []string{
		strings.Replace(c2, "NEMORL_LAB2_CONF=/etc/slurm-lab2/slurm.conf\n", "", 1),
		strings.Replace(c2, "NEMORL_LAB2_SLURMCTLD_PORT=6827\n", "", 1),
		strings.Replace(c2, "=2224", "=ssh", 1),
		strings.Replace(c2, "=6827", "=70000", 1),
	} {
		if lab, err := load(base + bad); err == nil {
			t.Errorf("%q accepted: %+v", bad, lab)
		}
	}
}

// TestStopCluster2NeedsLockLab: StopCluster2 without cluster 2 (or the
// lab) held exclusively fails the test before it touches the lab.
func TestStopCluster2NeedsLockLab(t *testing.T) {
	if os.Getenv("LABTEST_CHILD") == "1" {
		Lab{File: "lab.env", Lab2SSHPort: 2224, Lab2Cluster: "nemorl-lab2"}.StopCluster2(t)
		return
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestStopCluster2NeedsLockLab$", "-test.v")
	cmd.Env = append(os.Environ(), "LABTEST_CHILD=1")
	out, err := cmd.CombinedOutput()
	if err == nil || !strings.Contains(string(out), "must hold cluster 2 exclusively") || strings.Contains(string(out), "lab/cluster2 stop:") {
		t.Errorf("child: %v\n%s", err, out)
	}
}

// optionalParts are the lab's parts a test asks for by name: without them
// in lab.env each skips, and fails under NEMORL_REQUIRE_LAB=1 naming the
// key lab/up writes.
var optionalParts = []struct {
	name, missing string
	ask           func(Lab, testing.TB)
}{
	{"Far", "has no NEMORL_LAB_FAR_SSH_PORT; run lab/up", func(l Lab, t testing.TB) { l.Far(t) }},
	{"Cluster2", "has no NEMORL_LAB2_SSH_PORT; run lab/up", func(l Lab, t testing.TB) { l.Cluster2(t) }},
	{"Cluster3", "is not set up: no old3.env; run lab/cluster3 up", func(l Lab, t testing.TB) { l.Cluster3(t) }},
	{"Slurm3", "is not set up: no old3.env; run lab/cluster3 up", func(l Lab, t testing.TB) { l.Slurm3(t) }},
}

// TestOptionalPartSkip: an old lab.env without the part: the test skips.
func TestOptionalPartSkip(t *testing.T) {
	t.Setenv("NEMORL_REQUIRE_LAB", "")
	for _, part := range optionalParts {
		skipped := true
		t.Run(part.name, func(t *testing.T) {
			part.ask(Lab{File: "old.env", SSHPort: 2222, Lab3: Lab3{File: "old3.env"}}, t)
			skipped = false
		})
		if !skipped {
			t.Errorf("%s did not skip without its part of the lab", part.name)
		}
	}
}

// TestOptionalPartRequired: under NEMORL_REQUIRE_LAB=1 the test fails
// (in a child process), saying which key is missing.
func TestOptionalPartRequired(t *testing.T) {
	if child := os.Getenv("LABTEST_CHILD"); child != "" {
		for _, part := range optionalParts {
			if part.name == child {
				part.ask(Lab{File: "old.env", SSHPort: 2222, Lab3: Lab3{File: "old3.env"}}, t)
			}
		}
		return
	}
	for _, part := range optionalParts {
		cmd := exec.Command(os.Args[0], "-test.run=^TestOptionalPartRequired$", "-test.v")
		cmd.Env = append(os.Environ(), "LABTEST_CHILD="+part.name, "NEMORL_REQUIRE_LAB=1")
		out, err := cmd.CombinedOutput()
		if err == nil || !strings.Contains(string(out), part.missing) {
			t.Errorf("%s, child: %v\n%s", part.name, err, out)
		}
	}
}

// TestCluster2Lock: LockCluster2 holds cluster 2's lock exclusively (no
// other holder, in this process or another, can take it) and the lab's
// shared (others may share it, nobody may take it exclusively); its
// subtests share its hold; Cluster2's shared holds exclude it and not each
// other; everything is released when the tests end.
func TestCluster2Lock(t *testing.T) {
	dir := t.TempDir()
	p, p2 := filepath.Join(dir, "lab.lock"), filepath.Join(dir, "lab2.lock")
	useLockPath(t, p)
	old := lock2Path
	lock2Path = func() string { return p2 }
	t.Cleanup(func() { lock2Path = old })

	t.Run("exclusive", func(t *testing.T) {
		LockCluster2(t)
		if canFlock(t, p2, syscall.LOCK_SH) {
			t.Error("cluster 2's lock can be shared while LockCluster2 holds it")
		}
		if !canFlock(t, p, syscall.LOCK_SH) || canFlock(t, p, syscall.LOCK_EX) {
			t.Error("the lab lock is not held shared under LockCluster2")
		}
		t.Run("subtest", func(t *testing.T) {
			done := make(chan struct{})
			go func() { // would block forever if the subtest took a hold of its own
				defer close(done)
				useCluster2(t)
				LockCluster2(t)
			}()
			select {
			case <-done:
			case <-time.After(5 * time.Second):
				t.Fatal("a subtest of the holder waited for cluster 2's lock")
			}
		})
	})
	if !canFlock(t, p2, syscall.LOCK_EX) || !canFlock(t, p, syscall.LOCK_EX) {
		t.Fatal("locks still held after LockCluster2's test ended")
	}
	got := make(chan struct{})
	t.Run("shared", func(t *testing.T) {
		useCluster2(t)
		if !canFlock(t, p2, syscall.LOCK_SH) || canFlock(t, p2, syscall.LOCK_EX) {
			t.Error("Cluster2's hold is not shared")
		}
		go func() {
			release, err := flockFile(p2, syscall.LOCK_EX)
			if err == nil {
				release()
			}
			close(got)
		}()
		select {
		case <-got:
			t.Error("an exclusive hold was had while Cluster2 held the lock shared")
		case <-time.After(300 * time.Millisecond):
		}
	})
	select { // taken once the shared test's hold went
	case <-got:
	case <-time.After(5 * time.Second):
		t.Fatal("the exclusive hold was not had after Cluster2's test ended")
	}
	if !canFlock(t, p2, syscall.LOCK_EX) {
		t.Fatal("cluster 2's lock still held after the shared test ended")
	}
}
