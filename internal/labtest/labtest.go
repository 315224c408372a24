// Package labtest gives integration tests the facts of the local Slurm lab
// (lab/up writes them to /var/lib/nemorl-lab/lab.env). Tests call Env: when
// the lab is absent the test is skipped, unless NEMORL_REQUIRE_LAB=1 (set by
// CI), which turns the skip into a failure. Env also takes the lab lock
// (see LockLab and UseLab) for its test.
package labtest

import (
	"bufio"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"os"
	"path"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nemorl/nemorl-slurm/internal/shell"
)

// DefaultPath is where lab/up writes the lab's facts.
const DefaultPath = "/var/lib/nemorl-lab/lab.env"

// Lab is what lab.env says.
type Lab struct {
	File       string // the lab.env read
	SSHHost    string // NEMORL_LAB_SSH_HOST
	SSHPort    int    // NEMORL_LAB_SSH_PORT
	User       string // NEMORL_LAB_USER
	Key        string // NEMORL_LAB_KEY: the client private key
	KnownHosts string // NEMORL_LAB_KNOWN_HOSTS
	HostKeyPub string // NEMORL_LAB_HOST_KEY_PUB
	Workdir    string // NEMORL_LAB_WORKDIR, writable by User
	Partition  string // NEMORL_LAB_PARTITION
	Account    string // NEMORL_LAB_ACCOUNT
	Gres       string // NEMORL_LAB_GRES
	StandIns   string // NEMORL_LAB_STANDINS
	// FarSSHPort is the same sshd reached through lab/delayproxy, which adds
	// FarRTT to every round trip (NEMORL_LAB_FAR_SSH_PORT,
	// NEMORL_LAB_FAR_RTT_MS); 0 when lab.env predates it.
	FarSSHPort int
	FarRTT     time.Duration
	Cluster    string // NEMORL_LAB_CLUSTER: cluster 1's ClusterName ("" in an older lab.env)
	Node       string // NEMORL_LAB_NODE: the node (both clusters'), this host's short name
	// Cluster 2 (lab/README.md, "Cluster 2"): a second Slurm cluster on
	// this host, reached over its own sshd (Lab2SSHPort, same user and key,
	// its own host key) whose sessions have SLURM_CONF=Lab2Conf; here, its
	// clients need SLURM_CONF=Lab2Conf (Lab2Env) or -M Lab2Cluster. Its
	// slurmctld listens on Lab2CtldPort. All zero when lab.env predates it
	// (Cluster2 skips then).
	Lab2Cluster    string // NEMORL_LAB2_CLUSTER
	Lab2SSHPort    int    // NEMORL_LAB2_SSH_PORT
	Lab2HostKeyPub string // NEMORL_LAB2_HOST_KEY_PUB
	Lab2Conf       string // NEMORL_LAB2_CONF: its slurm.conf
	Lab2Gres       string // NEMORL_LAB2_GRES: its node's GRES (half cluster 1's GPUs)
	Lab2Partition  string // NEMORL_LAB2_PARTITION: the same name as Partition
	Lab2CtldPort   int    // NEMORL_LAB2_SLURMCTLD_PORT
	// Lab3 is cluster 3 (lab/README.md, "Cluster 3": Slurm 24.11 with
	// rl_enable), from lab3.env beside lab.env (lab/cluster3 up writes
	// it); zero but File when there is none (Cluster3, Slurm3 and
	// EachSlurm's 24.11 subtest skip then, or fail when Required).
	Lab3    Lab3
	lab3Err error // a lab3.env that is there but broken: fails what asks for cluster 3
	// Vars holds every variable, including those without a field.
	Vars map[string]string
}

// Path returns the lab.env to read: $NEMORL_LAB_ENV, else DefaultPath.
func Path() string {
	if p := os.Getenv("NEMORL_LAB_ENV"); p != "" {
		return p
	}
	return DefaultPath
}

// Required says whether a missing lab fails tests (NEMORL_REQUIRE_LAB=1).
func Required() bool { return os.Getenv("NEMORL_REQUIRE_LAB") == "1" }

// Need stops t when a program the test needs (what: "chromium",
// "promtool") was not found (err): a failure under NEMORL_REQUIRE_LAB=1,
// where lab/up has installed it, else a skip. A nil err does nothing.
func Need(t testing.TB, what string, err error) {
	t.Helper()
	if err == nil {
		return
	}
	if Required() {
		t.Fatalf("%s is required (NEMORL_REQUIRE_LAB=1) but not found: %v", what, err)
	}
	t.Skipf("no %s: %v", what, err)
}

// Env returns the lab, or skips t (fails it when Required) when there is
// none. A lab.env that exists but is broken always fails t.
//
// Env also takes the lab lock shared for t until t ends (UseLab), so every
// lab test keeps out of the way of the tests that break the lab on purpose.
// It may be called several times, in a test and in its subtests, and from
// benchmarks. A test that needs the lab lock exclusively calls LockLab
// before Env.
func Env(t testing.TB) Lab {
	t.Helper()
	lab, err := Load(Path())
	switch {
	case err == nil:
		UseLab(t)
		return lab
	case errors.Is(err, fs.ErrNotExist) && Required():
		t.Fatalf("lab required (NEMORL_REQUIRE_LAB=1) but absent: %v; run lab/up", err)
	case errors.Is(err, fs.ErrNotExist):
		t.Skipf("no lab (%v); run lab/up, or set NEMORL_LAB_ENV", err)
	default:
		t.Fatalf("lab: %v", err)
	}
	return Lab{}
}

// Load reads and checks a lab.env file.
func Load(path string) (Lab, error) {
	f, err := os.Open(path)
	if err != nil {
		return Lab{}, err
	}
	defer f.Close()
	vars, err := Parse(f)
	if err != nil {
		return Lab{}, fmt.Errorf("%s: %w", path, err)
	}
	lab := Lab{File: path, Vars: vars}
	need := func(key string) string {
		v := vars[key]
		if v == "" && err == nil {
			err = fmt.Errorf("%s: %s is missing", path, key)
		}
		return v
	}
	lab.SSHHost = need("NEMORL_LAB_SSH_HOST")
	port := need("NEMORL_LAB_SSH_PORT")
	lab.User = need("NEMORL_LAB_USER")
	lab.Key = need("NEMORL_LAB_KEY")
	lab.KnownHosts = need("NEMORL_LAB_KNOWN_HOSTS")
	lab.HostKeyPub = need("NEMORL_LAB_HOST_KEY_PUB")
	lab.Workdir = need("NEMORL_LAB_WORKDIR")
	lab.Partition = vars["NEMORL_LAB_PARTITION"]
	lab.Account = vars["NEMORL_LAB_ACCOUNT"]
	lab.Gres = vars["NEMORL_LAB_GRES"]
	lab.StandIns = vars["NEMORL_LAB_STANDINS"]
	lab.Cluster = vars["NEMORL_LAB_CLUSTER"]
	lab.Node = vars["NEMORL_LAB_NODE"]
	if err != nil {
		return Lab{}, err
	}
	if lab.SSHPort, err = strconv.Atoi(port); err != nil || lab.SSHPort <= 0 || lab.SSHPort > 65535 {
		return Lab{}, fmt.Errorf("%s: NEMORL_LAB_SSH_PORT=%q is not a port", path, port)
	}
	if v := vars["NEMORL_LAB_FAR_SSH_PORT"]; v != "" {
		if lab.FarSSHPort, err = strconv.Atoi(v); err != nil || lab.FarSSHPort <= 0 || lab.FarSSHPort > 65535 {
			return Lab{}, fmt.Errorf("%s: NEMORL_LAB_FAR_SSH_PORT=%q is not a port", path, v)
		}
		v = vars["NEMORL_LAB_FAR_RTT_MS"]
		ms, err := strconv.Atoi(v)
		if err != nil || ms < 0 {
			return Lab{}, fmt.Errorf("%s: NEMORL_LAB_FAR_RTT_MS=%q is not a number of milliseconds", path, v)
		}
		lab.FarRTT = time.Duration(ms) * time.Millisecond
	}
	if err := lab.loadCluster2(path, vars); err != nil {
		return Lab{}, err
	}
	lab.loadCluster3(path)
	return lab, nil
}

// Far returns the lab with its far endpoint (FarSSHPort) as the SSH port,
// or skips t (fails it when Required) when lab.env has none: a lab brought
// up before lab/up started lab/delayproxy.
func (l Lab) Far(t testing.TB) Lab {
	t.Helper()
	if l.FarSSHPort == 0 {
		if Required() {
			t.Fatalf("lab required (NEMORL_REQUIRE_LAB=1) but %s has no NEMORL_LAB_FAR_SSH_PORT; run lab/up", l.File)
		}
		t.Skipf("%s has no NEMORL_LAB_FAR_SSH_PORT (a lab from before the far endpoint); run lab/up", l.File)
	}
	l.SSHPort = l.FarSSHPort
	return l
}

// Parse reads KEY=VALUE lines. Blank lines and lines starting with # are
// skipped; an optional "export " prefix is allowed; a value may be wrapped
// in single or double quotes (no escapes inside). Keys must be shell names.
func Parse(r io.Reader) (map[string]string, error) {
	vars := map[string]string{}
	sc := bufio.NewScanner(r)
	n := 0
	for sc.Scan() {
		n++
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		line = strings.TrimPrefix(line, "export ")
		key, val, ok := strings.Cut(line, "=")
		if !ok {
			return nil, fmt.Errorf("line %d: no '=' in %q", n, line)
		}
		if !shell.IsName(key) {
			return nil, fmt.Errorf("line %d: bad name %q", n, key)
		}
		if len(val) >= 2 && (val[0] == '"' || val[0] == '\'') {
			if val[len(val)-1] != val[0] {
				return nil, fmt.Errorf("line %d: unterminated quote in %s", n, key)
			}
			val = val[1 : len(val)-1]
		}
		vars[key] = val
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	return vars, nil
}

// Script returns the path of a lab script (e.g. "sshd") in this checkout's
// lab/ folder, found by walking up from the working directory to go.mod.
// It skips (or fails, when Required) t if there is none.
func Script(t testing.TB, name string) string {
	t.Helper()
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			p := filepath.Join(dir, "lab", name)
			if _, err := os.Stat(p); err != nil {
				break
			}
			return p
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			break
		}
		dir = parent
	}
	if Required() {
		t.Fatalf("lab script %s not found", name)
	}
	t.Skipf("lab script %s not found", name)
	return ""
}

// WaitSSH waits up to limit for the lab sshd to accept TCP connections (the
// lab may be restarting: lab/sshd restart, lab/up) and fails t if it does not.
func (l Lab) WaitSSH(t testing.TB, limit time.Duration) {
	t.Helper()
	if err := waitTCP(net.JoinHostPort(l.SSHHost, strconv.Itoa(l.SSHPort)), limit); err != nil {
		t.Fatalf("lab sshd: %v (lab/status; lab/sshd start)", err)
	}
}

// waitTCP waits up to limit for addr to accept a TCP connection.
func waitTCP(addr string, limit time.Duration) error {
	deadline := time.Now().Add(limit)
	for {
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			_ = c.Close()
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s not accepting connections within %v: %w", addr, limit, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// The lab lock: $TMPDIR/nemorl-lab.lock, flocked by every lab test of every
// test process (go test runs each package in a process of its own, and runs
// them in parallel). Lab tests hold it shared: Env takes it for its test,
// UseLab takes it explicitly. Tests that break the lab on purpose (stop or
// restart sshd, slurmctld, slurmdbd or slurmd, set the node DOWN: lab/sshd,
// lab/daemon) hold it exclusively (LockLab), so they never overlap another
// lab test, in any package.
//
// The rule: a test that needs the exclusive lock calls LockLab first,
// before labtest.Env or anything else that reaches the lab, and from a
// top-level test that does not call t.Parallel. go test runs no other test
// of the package alongside such a test (parallel tests wait, paused, until
// the sequential ones are done), so LockLab only has to keep the other
// processes out; the package's paused tests that already called Env keep
// their shared hold and do not block it (see labLock). LockLab after Env in
// the same test does not deadlock either (the test's shared hold is
// converted), but the test then reached the lab before it was alone on it.

// LockLab takes the lab lock exclusively until t ends: no lab test of any
// other process runs meanwhile, and those already running are waited for.
// Call it before labtest.Env (see above). Within it, Env and UseLab only
// count, and LockLab again (in t or a subtest) does nothing.
func LockLab(t testing.TB) {
	t.Helper()
	theLock.lockExclusive(t)
}

// UseLab takes the lab lock shared until t ends, so t never overlaps a
// LockLab test of another process. Env already does this for its test;
// UseLab is for tests that reach the lab without Env. Inside a LockLab
// holder it only counts.
func UseLab(t testing.TB) {
	t.Helper()
	theLock.lockShared(t)
}

// lockPath is the lab lock file; a variable for this package's tests.
var lockPath = func() string { return filepath.Join(os.TempDir(), "nemorl-lab.lock") }

// theLock is this process's hold on the lab lock.
var theLock labLock

// labLock is a process's hold on the lab lock. Every hold of the process,
// shared or exclusive, goes through one open file, so flock sees one holder
// per process: LockLab converts the process's shared lock to an exclusive
// one instead of waiting for it. Separate files per hold would deadlock a
// LockLab test on the shared holds of its own process: its own Env, or
// the package's parallel tests that called Env and then t.Parallel, paused
// until the sequential LockLab test ends. (An exclusive flock also blocks a
// shared flock of the same process taken on another file: that is why a
// shared hold inside an exclusive one only counts.)
//
// flock converts a lock by dropping it and then waiting for the new one, so
// while LockLab waits this process holds nothing, and two processes that
// both convert cannot deadlock each other.
type labLock struct {
	excl sync.Mutex // one exclusive holder (test) at a time in this process

	mu     sync.Mutex // guards what follows; held while flock blocks
	f      *os.File   // the lock file, open while anything is held
	mode   int        // what f holds: 0, syscall.LOCK_SH or syscall.LOCK_EX
	shared int        // shared holds (Env, UseLab) of this process
	owner  string     // name of the test holding it exclusively, "" if none
}

func (l *labLock) lockShared(t testing.TB) {
	t.Helper()
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.mode == 0 {
		if err := l.flock(syscall.LOCK_SH); err != nil {
			t.Fatalf("lab lock: %v", err)
		}
	}
	l.shared++
	t.Cleanup(func() {
		l.mu.Lock()
		defer l.mu.Unlock()
		l.shared--
		if l.shared == 0 && l.mode == syscall.LOCK_SH {
			_ = l.flock(0)
		}
	})
}

func (l *labLock) lockExclusive(t testing.TB) {
	t.Helper()
	name := t.Name()
	l.mu.Lock()
	nested := l.owner != "" && (name == l.owner || strings.HasPrefix(name, l.owner+"/"))
	l.mu.Unlock()
	if nested {
		return
	}
	l.excl.Lock()
	l.mu.Lock()
	err := l.flock(syscall.LOCK_EX)
	if err == nil {
		l.owner = name
	}
	l.mu.Unlock()
	if err != nil {
		l.excl.Unlock()
		t.Fatalf("lab lock: %v", err)
	}
	clearQueue(t)
	t.Cleanup(func() {
		l.mu.Lock()
		l.owner = ""
		how := 0 // unlock
		if l.shared > 0 {
			how = syscall.LOCK_SH // the process's shared holds go on
		}
		err := l.flock(how)
		l.mu.Unlock()
		l.excl.Unlock()
		if err != nil {
			t.Errorf("lab lock: %v", err)
		}
	})
}

// flock sets what the process holds to how (0: nothing), opening the lock
// file first if need be and closing it when nothing is held. l.mu is held.
func (l *labLock) flock(how int) error {
	if how == l.mode {
		return nil
	}
	if l.f == nil {
		p := lockPath()
		f, err := os.OpenFile(p, os.O_RDONLY|os.O_CREATE, 0o666)
		if err != nil {
			return err
		}
		l.f = f
	}
	op := how
	if how == 0 {
		op = syscall.LOCK_UN
	}
	var err error
	for {
		if err = syscall.Flock(int(l.f.Fd()), op); err != syscall.EINTR {
			break
		}
	}
	if err == nil {
		l.mode = how
	} else {
		// A failed conversion may have dropped the old lock: hold
		// nothing rather than believe in a lock that may be gone.
		_ = syscall.Flock(int(l.f.Fd()), syscall.LOCK_UN)
		l.mode = 0
		err = fmt.Errorf("flock %s: %w", l.f.Name(), err)
	}
	if l.mode == 0 {
		_ = l.f.Close()
		l.f = nil
	}
	return err
}

// TestWorkdir is a workdir on the lab for t alone (under Workdir, created
// by the first staging), removed with everything in it when t ends: tests
// leave no episode directories behind.
func (l Lab) TestWorkdir(t testing.TB) string {
	t.Helper()
	var b [4]byte
	if _, err := rand.Read(b[:]); err != nil {
		t.Fatal(err)
	}
	name := strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' {
			return r
		}
		return '-'
	}, t.Name())
	if len(name) > 40 {
		name = name[:40]
	}
	d := path.Join(l.Workdir, "test-"+name+"-"+hex.EncodeToString(b[:]))
	t.Cleanup(func() { _ = os.RemoveAll(d) })
	return d
}

// WithWorkdir returns config text (configs/lab-none.yaml or a variant) with its
// cluster.workdir, from, replaced by dir.
func (l Lab) WithWorkdir(t testing.TB, config, from, dir string) string {
	t.Helper()
	old := "  workdir: " + from + "\n"
	if strings.Count(config, old) != 1 {
		t.Fatalf("the lab config has no single %q", strings.TrimSpace(old))
	}
	return strings.Replace(config, old, "  workdir: "+dir+"\n", 1)
}
