package labtest

import (
	"bufio"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nemorl/nemorl-slurm/internal/procfs"
)

// SSHD is a lab sshd of a test's own: the lab sshd's config (its host key,
// user, keys and sftp) on a port of its own, started and stopped by the
// test. A test that stops or restarts sshd does it to this one, so it
// holds the lab shared (Env) and runs alongside every other lab test:
// nobody else's connection drops.
type SSHD struct {
	Host    string
	Port    int
	dir     string // config, pid file and log
	config  string
	pidFile string
	log     string
}

// PrivateSSHD starts an SSHD for t (stopped with its sessions when t
// ends) and returns the lab as seen through it: SSHPort is its port and
// KnownHosts a file that names the lab's host key for that port (host
// keys are checked as ever). It needs root, as the lab sshd does; without
// root it skips t (fails it when Required).
func (l Lab) PrivateSSHD(t testing.TB) (Lab, *SSHD) {
	t.Helper()
	if os.Geteuid() != 0 {
		if Required() {
			t.Fatal("a private lab sshd runs as root, as the lab's: run the test as root")
		}
		t.Skip("a private lab sshd runs as root, as the lab's")
	}
	labConfig := filepath.Join(l.Vars["NEMORL_LAB_DIR"], "ssh", "sshd_config")
	base, err := os.ReadFile(labConfig)
	if err != nil {
		t.Fatalf("the lab sshd's config: %v (run lab/up)", err)
	}
	pub, err := os.ReadFile(l.HostKeyPub)
	if err != nil {
		t.Fatalf("the lab's host key: %v", err)
	}
	f := strings.Fields(string(pub))
	if len(f) < 2 {
		t.Fatalf("%s: not a public key: %q", l.HostKeyPub, pub)
	}
	// sshd refuses a config in a directory others can write: a directory
	// of root's, not t.TempDir's parent /tmp.
	dir, err := os.MkdirTemp(filepath.Join(l.Vars["NEMORL_LAB_DIR"], "run"), "sshd-test-")
	if err != nil {
		t.Fatal(err)
	}
	s := &SSHD{dir: dir, config: filepath.Join(dir, "sshd_config"), pidFile: filepath.Join(dir, "sshd.pid"), log: filepath.Join(dir, "sshd.log")}
	t.Cleanup(func() {
		s.stop()
		_ = os.RemoveAll(dir)
	})
	s.Host, s.Port = l.SSHHost, freePort(t, l.SSHHost)
	var out strings.Builder
	sc := bufio.NewScanner(strings.NewReader(string(base)))
	for sc.Scan() {
		line := sc.Text()
		switch k, _, _ := strings.Cut(strings.TrimSpace(line), " "); k {
		case "Port":
			line = "Port " + strconv.Itoa(s.Port)
		case "PidFile":
			line = "PidFile " + s.pidFile
		}
		out.WriteString(line + "\n")
	}
	if err := os.WriteFile(s.config, []byte(out.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	known := filepath.Join(t.TempDir(), "known_hosts")
	line := fmt.Sprintf("[%s]:%d %s %s\n", l.SSHHost, s.Port, f[0], f[1])
	if err := os.WriteFile(known, []byte(line), 0o600); err != nil {
		t.Fatal(err)
	}
	s.Start(t)
	l.SSHPort, l.KnownHosts, l.FarSSHPort = s.Port, known, 0
	return l, s
}

// freePort returns a TCP port on host that nothing listens on now.
func freePort(t testing.TB, host string) int {
	t.Helper()
	ln, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// Start starts the sshd (it daemonizes, as the lab's) and waits until it
// accepts connections.
func (s *SSHD) Start(t testing.TB) {
	t.Helper()
	if err := s.start(); err != nil {
		t.Fatal(err)
	}
}

func (s *SSHD) start() error {
	if out, err := exec.Command("/usr/sbin/sshd", "-f", s.config, "-E", s.log).CombinedOutput(); err != nil {
		logged, _ := os.ReadFile(s.log)
		return fmt.Errorf("sshd -f %s: %v\n%s%s", s.config, err, out, logged)
	}
	if err := waitTCP(net.JoinHostPort(s.Host, strconv.Itoa(s.Port)), 30*time.Second); err != nil {
		logged, _ := os.ReadFile(s.log)
		return fmt.Errorf("private sshd: %w\n%s", err, logged)
	}
	return nil
}

// Stop stops the sshd and closes every session it serves, as a host going
// away does (lab/sshd stop): clients have to connect again.
func (s *SSHD) Stop(t testing.TB) {
	t.Helper()
	if err := s.stop(); err != nil {
		t.Fatal(err)
	}
}

// Restart is Stop, then Start.
func (s *SSHD) Restart(t testing.TB) {
	t.Helper()
	if err := s.RestartErr(); err != nil {
		t.Fatal(err)
	}
}

// RestartErr is Restart for a goroutine other than the test's: it returns
// what went wrong.
func (s *SSHD) RestartErr() error {
	if err := s.stop(); err != nil {
		return err
	}
	return s.start()
}

func (s *SSHD) stop() error {
	raw, err := os.ReadFile(s.pidFile)
	if os.IsNotExist(err) {
		return nil // not running
	}
	if err != nil {
		return err
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(raw)))
	if err != nil || pid <= 1 {
		return fmt.Errorf("%s: no pid: %q", s.pidFile, raw)
	}
	var kids []int
	if procs, err := procfs.List(); err == nil {
		kids = procfs.Descendants(procs, pid)
	}
	_ = syscall.Kill(pid, syscall.SIGTERM)
	for _, k := range kids {
		_ = syscall.Kill(k, syscall.SIGKILL)
	}
	deadline := time.Now().Add(10 * time.Second)
	for syscall.Kill(pid, 0) == nil {
		if time.Now().After(deadline) {
			_ = syscall.Kill(pid, syscall.SIGKILL)
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	_ = os.Remove(s.pidFile)
	return nil
}
