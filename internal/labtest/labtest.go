// Package labtest gives integration tests the facts of the local Slurm lab
// (lab/up writes them to /var/lib/nemorl-lab/lab.env). Tests call Env: when
// the lab is absent the test is skipped, unless NEMORL_REQUIRE_LAB=1 (set by
// CI), which turns the skip into a failure.
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
	"sync/atomic"
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

// Env returns the lab, or skips t (fails it when Required) when there is
// none. A lab.env that exists but is broken always fails t.
func Env(t testing.TB) Lab {
	t.Helper()
	lab, err := Load(Path())
	switch {
	case err == nil:
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
	addr := net.JoinHostPort(l.SSHHost, strconv.Itoa(l.SSHPort))
	deadline := time.Now().Add(limit)
	for {
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			_ = c.Close()
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("lab sshd at %s not reachable within %v: %v (lab/status; lab/sshd start)", addr, limit, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// LockSSHD serialises tests (in any package or process) that stop or
// restart the lab sshd: it takes an exclusive flock on
// $TMPDIR/nemorl-lab-sshd.lock, released when t ends.
func LockSSHD(t testing.TB) {
	flockSSHD(t, syscall.LOCK_EX)
	exclusive.Store(true)
	t.Cleanup(func() { exclusive.Store(false) })
}

// exclusive is set while this process holds the lock exclusively.
var exclusive atomic.Bool

// UseSSHD is for tests that need the lab sshd up from start to end: it takes
// the same lock shared, so they never overlap a test that restarts sshd.
// Inside a test that holds it exclusively, it does nothing.
func UseSSHD(t testing.TB) {
	if !exclusive.Load() {
		flockSSHD(t, syscall.LOCK_SH)
	}
}

func flockSSHD(t testing.TB, how int) {
	t.Helper()
	p := filepath.Join(os.TempDir(), "nemorl-lab-sshd.lock")
	f, err := os.OpenFile(p, os.O_RDWR|os.O_CREATE, 0o666)
	if err != nil {
		t.Fatalf("lab sshd lock: %v", err)
	}
	if err := syscall.Flock(int(f.Fd()), how); err != nil {
		_ = f.Close()
		t.Fatalf("lab sshd lock: %v", err)
	}
	t.Cleanup(func() {
		_ = syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
		_ = f.Close()
	})
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

// WithWorkdir returns config text (configs/lab.yaml or a variant) with its
// cluster.workdir, from, replaced by dir.
func (l Lab) WithWorkdir(t testing.TB, config, from, dir string) string {
	t.Helper()
	old := "  workdir: " + from + "\n"
	if strings.Count(config, old) != 1 {
		t.Fatalf("the lab config has no single %q", strings.TrimSpace(old))
	}
	return strings.Replace(config, old, "  workdir: "+dir+"\n", 1)
}
