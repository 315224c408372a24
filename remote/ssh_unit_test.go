package remote

// Unit tests of the connection logic with a fake SSH client: no network.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/pkg/sftp"
	"golang.org/x/crypto/ssh"
)

// fakeClient is an SSH connection whose sessions run Go functions.
type fakeClient struct {
	id       int
	run      func(c *fakeClient, cmd string, stdout io.Writer, killed <-chan struct{}) error
	openErr  func() error // NewSession failure, if any
	pingErr  atomic.Value // error from SendKeepalive (nil: ok)
	pingHang atomic.Bool  // SendKeepalive never answers

	closeOnce sync.Once
	closed    chan struct{}

	mu        sync.Mutex
	sessions  int
	active    int
	maxActive int
	signals   []ssh.Signal
}

func newFakeClient(id int) *fakeClient { return &fakeClient{id: id, closed: make(chan struct{})} }

func (c *fakeClient) NewSession() (sshSession, error) {
	select {
	case <-c.closed:
		return nil, io.EOF
	default:
	}
	if c.openErr != nil {
		if err := c.openErr(); err != nil {
			return nil, err
		}
	}
	c.mu.Lock()
	c.sessions++
	c.active++
	c.maxActive = max(c.maxActive, c.active)
	c.mu.Unlock()
	return &fakeSession{c: c, killed: make(chan struct{})}, nil
}

func (c *fakeClient) NewSFTP() (*sftp.Client, error) { return nil, errors.New("no sftp in fakes") }

func (c *fakeClient) SendKeepalive() error {
	if c.pingHang.Load() {
		<-c.closed
		return io.EOF
	}
	select {
	case <-c.closed:
		return io.EOF
	default:
	}
	if err, _ := c.pingErr.Load().(error); err != nil {
		return err
	}
	return nil
}

func (c *fakeClient) Wait() error { <-c.closed; return io.EOF }

func (c *fakeClient) Close() error {
	c.closeOnce.Do(func() { close(c.closed) })
	return nil
}

// drop simulates the network going away.
func (c *fakeClient) drop() { c.pingErr.Store(io.EOF); _ = c.Close() }

type fakeSession struct {
	c              *fakeClient
	stdout, stderr io.Writer
	cmd            string
	killed         chan struct{}
	killOnce       sync.Once
	closeOnce      sync.Once
}

func (s *fakeSession) SetOutput(stdout, stderr io.Writer) { s.stdout, s.stderr = stdout, stderr }
func (s *fakeSession) StdinPipe() (io.WriteCloser, error) { return nopWriteCloser{io.Discard}, nil }
func (s *fakeSession) Start(cmd string) error             { s.cmd = cmd; return nil }
func (s *fakeSession) Wait() error {
	return s.c.run(s.c, s.cmd, s.stdout, s.killed)
}

func (s *fakeSession) Signal(sig ssh.Signal) error {
	s.c.mu.Lock()
	s.c.signals = append(s.c.signals, sig)
	s.c.mu.Unlock()
	s.killOnce.Do(func() { close(s.killed) })
	return nil
}

func (s *fakeSession) Close() error {
	s.closeOnce.Do(func() {
		s.c.mu.Lock()
		s.c.active--
		s.c.mu.Unlock()
	})
	s.killOnce.Do(func() { close(s.killed) })
	return nil
}

type nopWriteCloser struct{ io.Writer }

func (nopWriteCloser) Close() error { return nil }

// fakeHost is an *SSH whose dials hand out fake clients made by mk.
type fakeHost struct {
	*SSH
	mu      sync.Mutex
	clients []*fakeClient
}

func newFakeHost(t *testing.T, opts Options, mk func(n int) (*fakeClient, error)) *fakeHost {
	t.Helper()
	if opts.Host == "" {
		opts.Host = "login1"
	}
	opts.ConfigFile, opts.User, opts.KnownHostsFile = "none", "alice", filepath.Join(t.TempDir(), "kh")
	if opts.KeepaliveInterval == 0 {
		opts.KeepaliveInterval = -1
	}
	if opts.Logf == nil {
		opts.Logf = t.Logf
	}
	cfg, err := resolve(opts)
	if err != nil {
		t.Fatal(err)
	}
	fh := &fakeHost{}
	fh.SSH = newSSH(cfg)
	fh.dial = func(ctx context.Context, cfg *resolved) (*conn, error) {
		fh.mu.Lock()
		n := len(fh.clients)
		fh.mu.Unlock()
		fc, err := mk(n)
		if err != nil {
			fh.mu.Lock()
			fh.clients = append(fh.clients, nil)
			fh.mu.Unlock()
			return nil, err
		}
		fh.mu.Lock()
		fh.clients = append(fh.clients, fc)
		fh.mu.Unlock()
		return newConn(fc, nil, cfg), nil
	}
	t.Cleanup(func() { _ = fh.Close() })
	return fh
}

func (fh *fakeHost) client(i int) *fakeClient {
	fh.mu.Lock()
	defer fh.mu.Unlock()
	return fh.clients[i]
}

func (fh *fakeHost) dials() int {
	fh.mu.Lock()
	defer fh.mu.Unlock()
	return len(fh.clients)
}

// echoRun answers every command with "ok".
func echoRun(c *fakeClient, cmd string, stdout io.Writer, killed <-chan struct{}) error {
	_, _ = io.WriteString(stdout, "ok\n")
	return nil
}

// dropOnFirstRun: on client 0 the command starts and then the connection
// drops; later clients answer normally.
func dropOnFirstRun(runs *atomic.Int32) func(int) (*fakeClient, error) {
	return func(n int) (*fakeClient, error) {
		fc := newFakeClient(n)
		fc.run = func(c *fakeClient, cmd string, stdout io.Writer, killed <-chan struct{}) error {
			runs.Add(1)
			if c.id == 0 {
				c.drop()
				return errors.New("wait: remote command exited without exit status or exit signal")
			}
			return echoRun(c, cmd, stdout, killed)
		}
		return fc, nil
	}
}

func TestRunIdempotentRerunAfterDrop(t *testing.T) {
	var runs atomic.Int32
	h := newFakeHost(t, Options{}, dropOnFirstRun(&runs))
	res, err := h.Run(t.Context(), Command{Argv: []string{"sacct", "-j", "1"}, Idempotent: true})
	if err != nil || string(res.Stdout) != "ok\n" {
		t.Fatalf("Run = %v, %v", res, err)
	}
	if runs.Load() != 2 || h.dials() != 2 {
		t.Errorf("runs %d, dials %d; want 2, 2", runs.Load(), h.dials())
	}
}

// TestRunLogLines: the lines a lost connection logs, which serve shows
// without -v ("connection lost", ": reconnected").
func TestRunLogLines(t *testing.T) {
	var logs logLines
	h := newFakeHost(t, Options{Logf: logs.logf}, func(n int) (*fakeClient, error) {
		if n == 1 {
			return nil, &net.OpError{Op: "dial", Err: errors.New("connection refused")}
		}
		fc := newFakeClient(n)
		fc.run = func(c *fakeClient, cmd string, stdout io.Writer, killed <-chan struct{}) error {
			if c.id == 0 {
				c.drop()
				return errors.New("wait: remote command exited without exit status or exit signal")
			}
			return echoRun(c, cmd, stdout, killed)
		}
		return fc, nil
	})
	res, err := h.Run(t.Context(), Command{Argv: []string{"sacct", "-j", "1"}, Idempotent: true})
	if err != nil || string(res.Stdout) != "ok\n" || h.dials() != 3 {
		t.Fatalf("Run = %v, %v after %d dials", res, err, h.dials())
	}
	logs.check(t, []string{
		"remote: alice@login1:22: sacct -j 1: connection lost while running; re-running (idempotent)",
		"remote: alice@login1:22: connection lost: ",
		"remote: alice@login1:22: connect failed (attempt 1): dial: connection refused",
		"remote: alice@login1:22: reconnected",
	})
	if l := logs.lines[1]; !strings.HasSuffix(l, "; reconnecting") {
		t.Errorf("line 1: %q", l)
	}
	if h.Reconnects() != 1 {
		t.Errorf("Reconnects() = %d", h.Reconnects())
	}
}

func TestRunNonIdempotentOutcomeUnknown(t *testing.T) {
	var runs atomic.Int32
	h := newFakeHost(t, Options{}, dropOnFirstRun(&runs))
	_, err := h.Run(t.Context(), Command{Argv: []string{"sbatch", "x.sbatch"}})
	var oue *OutcomeUnknownError
	if !errors.Is(err, ErrOutcomeUnknown) || !errors.As(err, &oue) || !errors.Is(err, ErrConnectionLost) {
		t.Fatalf("err = %v, want *OutcomeUnknownError", err)
	}
	if oue.Command != "sbatch x.sbatch" || oue.Host != "alice@login1:22" {
		t.Errorf("error = %+v", oue)
	}
	if runs.Load() != 1 {
		t.Errorf("sbatch ran %d times", runs.Load())
	}
	// The next call reconnects by itself.
	if _, err := h.Run(t.Context(), Command{Argv: []string{"squeue"}}); err != nil {
		t.Errorf("next call: %v", err)
	}
}

// A connection that died unnoticed: the session cannot even open, so the
// command never started and even sbatch is safely sent on a new connection.
func TestRunNotStartedIsRetried(t *testing.T) {
	var runs atomic.Int32
	h := newFakeHost(t, Options{}, func(n int) (*fakeClient, error) {
		fc := newFakeClient(n)
		fc.run = func(c *fakeClient, cmd string, stdout io.Writer, k <-chan struct{}) error {
			runs.Add(1)
			return echoRun(c, cmd, stdout, k)
		}
		return fc, nil
	})
	if _, err := h.Run(t.Context(), Command{Argv: []string{"true"}}); err != nil {
		t.Fatal(err)
	}
	// Dies silently: sessions fail, keepalive fails, but Wait has not noticed.
	c0 := h.client(0)
	c0.openErr = func() error { return io.EOF }
	c0.pingErr.Store(io.EOF)
	if _, err := h.Run(t.Context(), Command{Argv: []string{"sbatch", "x"}}); err != nil {
		t.Fatalf("sbatch on a silently dead connection: %v", err)
	}
	if runs.Load() != 2 || h.dials() != 2 {
		t.Errorf("runs %d, dials %d; want 2, 2", runs.Load(), h.dials())
	}
}

func TestRunSessionRefusedIsRetried(t *testing.T) {
	var refusals atomic.Int32
	h := newFakeHost(t, Options{}, func(n int) (*fakeClient, error) {
		fc := newFakeClient(n)
		fc.run = echoRun
		fc.openErr = func() error {
			if refusals.Add(1) <= 3 {
				return &ssh.OpenChannelError{Reason: ssh.ConnectionFailed, Message: "open failed"}
			}
			return nil
		}
		return fc, nil
	})
	if _, err := h.Run(t.Context(), Command{Argv: []string{"sbatch", "x"}}); err != nil {
		t.Fatal(err)
	}
	if h.dials() != 1 {
		t.Errorf("redialled for a refused session")
	}
}

func TestRunSessionLimit(t *testing.T) {
	h := newFakeHost(t, Options{MaxSessions: 3}, func(n int) (*fakeClient, error) {
		fc := newFakeClient(n)
		fc.run = func(c *fakeClient, cmd string, stdout io.Writer, k <-chan struct{}) error {
			time.Sleep(5 * time.Millisecond)
			return echoRun(c, cmd, stdout, k)
		}
		return fc, nil
	})
	var wg sync.WaitGroup
	for range 64 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := h.Run(t.Context(), Command{Argv: []string{"true"}}); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	c := h.client(0)
	if c.maxActive > 3 || c.sessions != 64 {
		t.Errorf("max %d sessions at once (limit 3), %d in all", c.maxActive, c.sessions)
	}
}

func TestRunCancelSignals(t *testing.T) {
	h := newFakeHost(t, Options{}, func(n int) (*fakeClient, error) {
		fc := newFakeClient(n)
		fc.run = func(c *fakeClient, cmd string, stdout io.Writer, killed <-chan struct{}) error {
			<-killed
			return &ssh.ExitMissingError{}
		}
		return fc, nil
	})
	ctx, cancel := context.WithTimeout(t.Context(), 50*time.Millisecond)
	defer cancel()
	_, err := h.Run(ctx, Command{Argv: []string{"sleep", "1000"}})
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("err = %v", err)
	}
	c := h.client(0)
	if len(c.signals) != 1 || c.signals[0] != ssh.SIGKILL {
		t.Errorf("signals sent: %v", c.signals)
	}
	if c.active != 0 {
		t.Errorf("%d sessions left open", c.active)
	}
}

func TestRunExitStatus(t *testing.T) {
	h := newFakeHost(t, Options{}, func(n int) (*fakeClient, error) {
		fc := newFakeClient(n)
		fc.run = func(c *fakeClient, cmd string, stdout io.Writer, killed <-chan struct{}) error {
			return &ssh.ExitError{Waitmsg: ssh.Waitmsg{}}
		}
		return fc, nil
	})
	_, err := h.Run(t.Context(), Command{Argv: []string{"false"}})
	var ce *CommandError
	if !errors.As(err, &ce) || ce.Host != "alice@login1:22" || ce.Command != "false" {
		t.Errorf("err = %#v", err)
	}
}

func TestKeepaliveFailureMarksDead(t *testing.T) {
	for _, hang := range []bool{false, true} {
		t.Run(fmt.Sprintf("hang=%v", hang), func(t *testing.T) {
			h := newFakeHost(t, Options{KeepaliveInterval: 10 * time.Millisecond, KeepaliveCountMax: 2}, func(n int) (*fakeClient, error) {
				fc := newFakeClient(n)
				fc.run = echoRun
				return fc, nil
			})
			c, err := h.conn(t.Context())
			if err != nil {
				t.Fatal(err)
			}
			fc := h.client(0)
			if hang {
				fc.pingHang.Store(true)
			} else {
				fc.pingErr.Store(errors.New("broken pipe"))
			}
			select {
			case <-c.dead:
				t.Logf("dead: %v", c.deathCause())
			case <-time.After(5 * time.Second):
				t.Fatal("keepalive did not notice")
			}
			if _, err := h.Run(t.Context(), Command{Argv: []string{"true"}}); err != nil || h.dials() != 2 {
				t.Errorf("after keepalive failure: %v, %d dials", err, h.dials())
			}
		})
	}
}

func TestDialBackoffAndPermanentErrors(t *testing.T) {
	var fail atomic.Bool
	fail.Store(true)
	h := newFakeHost(t, Options{MaxRetries: 2}, func(n int) (*fakeClient, error) {
		if fail.Load() {
			return nil, &net.OpError{Op: "dial", Err: errors.New("connection refused")}
		}
		fc := newFakeClient(n)
		fc.run = echoRun
		return fc, nil
	})
	start := time.Now()
	_, err := h.Run(t.Context(), Command{Argv: []string{"squeue"}, Idempotent: true})
	if err == nil || !strings.Contains(err.Error(), "connection refused") {
		t.Fatalf("err = %v", err)
	}
	// 3 attempts with backoffs of 250ms and 500ms between them.
	if d := time.Since(start); d < 700*time.Millisecond || h.dials() != 3 {
		t.Errorf("%d dials in %v", h.dials(), d)
	}
	fail.Store(false)
	if _, err := h.Run(t.Context(), Command{Argv: []string{"squeue"}, Idempotent: true}); err != nil {
		t.Errorf("after recovery: %v", err)
	}

	h2 := newFakeHost(t, Options{}, func(n int) (*fakeClient, error) {
		return nil, &AuthError{Dest: "alice@login1:22"}
	})
	if _, err := h2.Run(t.Context(), Command{Argv: []string{"true"}}); err == nil || h2.dials() != 1 {
		t.Errorf("auth failure retried: %d dials (%v)", h2.dials(), err)
	}
}

// TestConcurrentCallersShareOneDial: 32 callers on a dead connection cause
// one dial, not 32.
func TestConcurrentCallersShareOneDial(t *testing.T) {
	h := newFakeHost(t, Options{}, func(n int) (*fakeClient, error) {
		time.Sleep(20 * time.Millisecond)
		fc := newFakeClient(n)
		fc.run = echoRun
		return fc, nil
	})
	var wg sync.WaitGroup
	for range 32 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := h.Run(t.Context(), Command{Argv: []string{"true"}}); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	if h.dials() != 1 {
		t.Errorf("%d dials", h.dials())
	}
}

func TestCloseStopsGoroutines(t *testing.T) {
	before := runtime.NumGoroutine()
	h := newFakeHost(t, Options{KeepaliveInterval: time.Millisecond}, func(n int) (*fakeClient, error) {
		fc := newFakeClient(n)
		fc.run = echoRun
		return fc, nil
	})
	for range 10 {
		if _, err := h.Run(t.Context(), Command{Argv: []string{"true"}}); err != nil {
			t.Fatal(err)
		}
	}
	time.Sleep(20 * time.Millisecond)
	_ = h.Close()
	if _, err := h.Run(t.Context(), Command{Argv: []string{"true"}}); !errors.Is(err, ErrClosed) {
		t.Errorf("after Close: %v", err)
	}
	deadline := time.Now().Add(3 * time.Second)
	for runtime.NumGoroutine() > before {
		if time.Now().After(deadline) {
			t.Fatalf("%d goroutines, %d before", runtime.NumGoroutine(), before)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func TestResolveConfig(t *testing.T) {
	dir := t.TempDir()
	t.Setenv("HOME", dir)
	cfgPath := filepath.Join(dir, "config")
	err := os.WriteFile(cfgPath, []byte(`
Host login1
    HostName login1.cluster.example
    User alice
    Port 2200
    IdentityFile ~/.ssh/cluster_key
    ProxyJump bob@bastion:2022
    ServerAliveInterval 30

Host bastion
    HostName bastion.example
    IdentityFile ~/.ssh/bastion_key

Host *.example
    ConnectTimeout 7
`), 0o600)
	if err != nil {
		t.Fatal(err)
	}
	r, err := resolve(Options{Host: "login1", ConfigFile: cfgPath})
	if err != nil {
		t.Fatal(err)
	}
	if r.dest() != "alice@login1.cluster.example:2200" || r.identities[0] != filepath.Join(dir, ".ssh", "cluster_key") ||
		r.keepalive != 30*time.Second || r.maxSessions != 8 || r.knownHosts != filepath.Join(dir, ".ssh", "known_hosts") {
		t.Errorf("resolved %+v", r)
	}
	if len(r.jumps) != 1 || r.jumps[0].dest() != "bob@bastion.example:2022" || r.jumps[0].identities[0] != filepath.Join(dir, ".ssh", "bastion_key") {
		t.Fatalf("jumps %+v", r.jumps)
	}
	// Options win over the config; "none" turns the jump off.
	r, err = resolve(Options{Host: "login1", ConfigFile: cfgPath, User: "carol", Port: 22, ProxyJump: "none", IdentityFile: "/k"})
	if err != nil {
		t.Fatal(err)
	}
	if r.dest() != "carol@login1.cluster.example:22" || len(r.jumps) != 0 || r.identities[0] != "/k" {
		t.Errorf("resolved %+v", r)
	}
	// An unknown host keeps its name and gets the defaults.
	r, err = resolve(Options{Host: "10.0.0.5", ConfigFile: cfgPath, User: "u"})
	if err != nil {
		t.Fatal(err)
	}
	if r.dest() != "u@10.0.0.5:22" || !r.defaultIDs || r.connectTimeout != 30*time.Second {
		t.Errorf("resolved %+v", r)
	}
	if _, err := resolve(Options{Host: "x", ConfigFile: filepath.Join(dir, "missing")}); err == nil {
		t.Error("a missing explicit config file was ignored")
	}
}

func TestParseJump(t *testing.T) {
	good := map[string]Options{
		"bastion":                 {Host: "bastion"},
		"bob@bastion":             {Host: "bastion", User: "bob"},
		"bob@bastion:2022":        {Host: "bastion", User: "bob", Port: 2022},
		"ssh://bob@bastion:2022":  {Host: "bastion", User: "bob", Port: 2022},
		"[::1]:2222":              {Host: "::1", Port: 2222},
		"a.b@c@host.example":      {Host: "host.example", User: "a.b@c"},
		"192.168.1.1":             {Host: "192.168.1.1"},
		"user@[fe80::1%eth0]:202": {Host: "fe80::1%eth0", User: "user", Port: 202},
	}
	for in, want := range good {
		got, err := parseJump(in)
		if err != nil || got.Host != want.Host || got.User != want.User || got.Port != want.Port {
			t.Errorf("parseJump(%q) = %+v, %v; want %+v", in, got, err, want)
		}
	}
	for _, bad := range []string{"", "@host", "host:0", "host:99999", "host:x", "[::1", "[::1]x", "a b", "ssh://"} {
		if o, err := parseJump(bad); err == nil {
			t.Errorf("parseJump(%q) = %+v, want an error", bad, o)
		}
	}
}

func FuzzParseJump(f *testing.F) {
	for _, s := range []string{"bastion", "bob@bastion:2022", "[::1]:22", "ssh://x@y:1", "@", "a:b:c"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		o, err := parseJump(s)
		if err != nil {
			return
		}
		if o.Host == "" || strings.ContainsAny(o.Host, " \t/@") || o.Port < 0 || o.Port > 65535 {
			t.Errorf("parseJump(%q) = %+v", s, o)
		}
	})
}

// TestHandshakeTimeout: a server that accepts TCP and never speaks must
// not hang Dial (ClientConfig.Timeout covers only the TCP connect).
func TestHandshakeTimeout(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			defer c.Close() // silent until the listener closes
		}
	}()
	port := ln.Addr().(*net.TCPAddr).Port
	t.Setenv("SSH_AUTH_SOCK", "")
	start := time.Now()
	_, err = Dial(t.Context(), Options{Host: "127.0.0.1", Port: port, User: "u", ConfigFile: "none",
		KnownHostsFile: filepath.Join(t.TempDir(), "kh"), ConnectTimeout: 300 * time.Millisecond})
	if err == nil || !strings.Contains(err.Error(), "no answer within 300ms") {
		t.Errorf("err = %v", err)
	}
	if d := time.Since(start); d > 3*time.Second {
		t.Errorf("Dial took %v", d)
	}

	ctx, cancel := context.WithTimeout(t.Context(), 200*time.Millisecond)
	defer cancel()
	_, err = Dial(ctx, Options{Host: "127.0.0.1", Port: port, User: "u", ConfigFile: "none",
		KnownHostsFile: filepath.Join(t.TempDir(), "kh"), ConnectTimeout: time.Minute})
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Dial with a short ctx: %v", err)
	}
}

func TestDialRefused(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	_, err = Dial(t.Context(), Options{Host: "127.0.0.1", Port: port, User: "u", ConfigFile: "none", KnownHostsFile: "/nonexistent/kh"})
	if err == nil || !strings.Contains(err.Error(), fmt.Sprintf("connect to 127.0.0.1:%d", port)) {
		t.Errorf("err = %v", err)
	}
}

func TestTerminalPromptWithoutTerminal(t *testing.T) {
	f, err := os.Open(os.DevNull)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	p := TerminalPrompt{In: f, Out: io.Discard}
	if _, err := p.Passphrase("/k"); !errors.Is(err, ErrNoTerminal) || !strings.Contains(err.Error(), "needs a terminal for the passphrase of /k") {
		t.Errorf("Passphrase: %v", err)
	}
	if _, err := p.Challenge("a@h:22", "", "", []string{"Verification code: "}, []bool{false}); !errors.Is(err, ErrNoTerminal) ||
		!strings.Contains(err.Error(), "needs a terminal for keyboard-interactive authentication to a@h:22") {
		t.Errorf("Challenge: %v", err)
	}
	if ans, err := p.Challenge("a@h:22", "", "banner", nil, nil); err != nil || len(ans) != 0 {
		t.Errorf("empty challenge: %v %v", ans, err)
	}
}
