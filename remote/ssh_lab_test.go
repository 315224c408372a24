package remote_test

// Integration tests against the lab's sshd (lab/up). Skipped without the
// lab unless NEMORL_REQUIRE_LAB=1.

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/pem"
	"errors"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/crypto/ssh"

	"github.com/nemorl/nemorl-slurm/internal/labtest"
	"github.com/nemorl/nemorl-slurm/remote"
	"github.com/nemorl/nemorl-slurm/remote/remotetest"
)

// labOptions are Options for the lab with its key and known_hosts.
func labOptions(t *testing.T, lab labtest.Lab) remote.Options {
	t.Helper()
	lab.WaitSSH(t, time.Minute)
	t.Setenv("SSH_AUTH_SOCK", "") // only the keys the test names
	return remote.Options{
		Host:              lab.SSHHost,
		Port:              lab.SSHPort,
		User:              lab.User,
		IdentityFile:      lab.Key,
		KnownHostsFile:    lab.KnownHosts,
		ConfigFile:        "none",
		ConnectTimeout:    10 * time.Second,
		KeepaliveInterval: time.Second,
		Prompt:            noPrompt{t},
		Logf:              t.Logf,
	}
}

// noPrompt fails the test if a prompt is shown.
type noPrompt struct{ t *testing.T }

func (p noPrompt) Passphrase(keyFile string) ([]byte, error) {
	p.t.Errorf("unexpected passphrase prompt for %s", keyFile)
	return nil, errors.New("no prompts in tests")
}

func (p noPrompt) Challenge(dest, _, _ string, q []string, _ []bool) ([]string, error) {
	p.t.Errorf("unexpected keyboard-interactive prompt from %s: %q", dest, q)
	return nil, errors.New("no prompts in tests")
}

func dialLab(t *testing.T, opts remote.Options) *remote.SSH {
	t.Helper()
	labtest.UseLab(t) // never overlap another package's sshd or Slurm restart
	h, err := remote.Dial(t.Context(), opts)
	if err != nil {
		t.Fatalf("Dial: %v", err)
	}
	t.Cleanup(func() { _ = h.Close() })
	return h
}

// scratchDir makes a fresh directory under the lab workdir, removed after t.
func scratchDir(t *testing.T, h remote.Host, lab labtest.Lab) string {
	t.Helper()
	var rnd [6]byte
	_, _ = rand.Read(rnd[:])
	dir := path.Join(lab.Workdir, fmt.Sprintf("remotetest-%x", rnd))
	if err := h.MkdirAll(t.Context(), dir, 0o700); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if _, err := h.Run(ctx, remote.Command{Argv: []string{"rm", "-rf", dir}, Idempotent: true}); err != nil {
			t.Logf("cleanup %s: %v", dir, err)
		}
	})
	return dir
}

func TestSSHLab(t *testing.T) {
	lab := labtest.Env(t)
	remotetest.Run(t, func(t *testing.T) (remote.Host, string) {
		h := dialLab(t, labOptions(t, lab))
		if want := fmt.Sprintf("%s@%s:%d", lab.User, lab.SSHHost, lab.SSHPort); h.Name() != want {
			t.Errorf("Name() = %q, want %q", h.Name(), want)
		}
		return h, scratchDir(t, h, lab)
	})
}

func labHostKey(t *testing.T, lab labtest.Lab) ssh.PublicKey {
	t.Helper()
	b, err := os.ReadFile(lab.HostKeyPub)
	if err != nil {
		t.Fatal(err)
	}
	k, _, _, _, err := ssh.ParseAuthorizedKey(b)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func TestSSHLabUnknownHostKey(t *testing.T) {
	lab := labtest.Env(t)
	kh := filepath.Join(t.TempDir(), "known_hosts")
	if err := os.WriteFile(kh, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	opts := labOptions(t, lab)
	opts.KnownHostsFile = kh
	_, err := remote.Dial(t.Context(), opts)
	var hk *remote.HostKeyError
	if !errors.As(err, &hk) || !hk.Unknown {
		t.Fatalf("Dial = %v, want an unknown-host *HostKeyError", err)
	}
	fp := ssh.FingerprintSHA256(labHostKey(t, lab))
	msg := err.Error()
	hint := fmt.Sprintf("ssh-keyscan -p %d %s >> %s", lab.SSHPort, lab.SSHHost, kh)
	if !strings.Contains(msg, fp) || !strings.Contains(msg, hint) {
		t.Errorf("message %q\nlacks the fingerprint %s or the hint %q", msg, fp, hint)
	}
	t.Logf("unknown host: %v", err)
	if b, _ := os.ReadFile(kh); len(b) != 0 {
		t.Errorf("known_hosts was written without accept-new: %q", b)
	}
}

func TestSSHLabChangedHostKey(t *testing.T) {
	lab := labtest.Env(t)
	other, _, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	pub, err := ssh.NewPublicKey(other)
	if err != nil {
		t.Fatal(err)
	}
	kh := filepath.Join(t.TempDir(), "known_hosts")
	content := "# comment\nexample.org ssh-ed25519 " + strings.Fields(string(ssh.MarshalAuthorizedKey(pub)))[1] + "\n" +
		fmt.Sprintf("[%s]:%d %s", lab.SSHHost, lab.SSHPort, ssh.MarshalAuthorizedKey(pub))
	if err := os.WriteFile(kh, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	opts := labOptions(t, lab)
	opts.KnownHostsFile = kh
	opts.AcceptNewHostKey = true // must not matter for a changed key
	_, err = remote.Dial(t.Context(), opts)
	var hk *remote.HostKeyError
	if !errors.As(err, &hk) || hk.Unknown {
		t.Fatalf("Dial = %v, want a changed-key *HostKeyError", err)
	}
	msg := err.Error()
	for _, want := range []string{"CHANGED", kh + ":3", ssh.FingerprintSHA256(pub), ssh.FingerprintSHA256(labHostKey(t, lab)), "ssh-keygen -R"} {
		if !strings.Contains(msg, want) {
			t.Errorf("message lacks %q:\n%s", want, msg)
		}
	}
	t.Logf("changed host key: %v", err)
	if b, _ := os.ReadFile(kh); string(b) != content {
		t.Errorf("known_hosts changed: %q", b)
	}
}

func writeKey(t *testing.T, dir string, priv any, passphrase []byte) string {
	t.Helper()
	var blk *pem.Block
	var err error
	if passphrase != nil {
		blk, err = ssh.MarshalPrivateKeyWithPassphrase(priv, "test", passphrase)
	} else {
		blk, err = ssh.MarshalPrivateKey(priv, "test")
	}
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(dir, "id_test")
	if err := os.WriteFile(p, pem.EncodeToMemory(blk), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestSSHLabWrongClientKey(t *testing.T) {
	lab := labtest.Env(t)
	_, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	opts := labOptions(t, lab)
	opts.IdentityFile = writeKey(t, t.TempDir(), priv, nil)
	_, err = remote.Dial(t.Context(), opts)
	var ae *remote.AuthError
	if !errors.As(err, &ae) {
		t.Fatalf("Dial = %v, want *AuthError", err)
	}
	signer, _ := ssh.NewSignerFromKey(priv)
	want := fmt.Sprintf("permission denied (publickey) for %s@%s:%d: tried %s (ssh-ed25519 %s)",
		lab.User, lab.SSHHost, lab.SSHPort, opts.IdentityFile, ssh.FingerprintSHA256(signer.PublicKey()))
	if err.Error() != want {
		t.Errorf("message\n%q\nwant\n%q", err, want)
	}
}

// labKey parses the lab's client key.
func labKey(t *testing.T, lab labtest.Lab) any {
	t.Helper()
	b, err := os.ReadFile(lab.Key)
	if err != nil {
		t.Fatal(err)
	}
	k, err := ssh.ParseRawPrivateKey(b)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

type passPrompt struct {
	pass  []byte
	asked int
	mu    sync.Mutex
}

func (p *passPrompt) Passphrase(string) ([]byte, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.asked++
	return append([]byte(nil), p.pass...), nil
}

func (p *passPrompt) Challenge(string, string, string, []string, []bool) ([]string, error) {
	return nil, errors.New("unexpected challenge")
}

func TestSSHLabPassphraseKey(t *testing.T) {
	lab := labtest.Env(t)
	opts := labOptions(t, lab)
	opts.IdentityFile = writeKey(t, t.TempDir(), labKey(t, lab), []byte("s3cret"))

	t.Run("prompted", func(t *testing.T) {
		p := &passPrompt{pass: []byte("s3cret")}
		o := opts
		o.Prompt = p
		h := dialLab(t, o)
		if res, err := h.Run(t.Context(), remote.Command{Argv: []string{"id", "-un"}}); err != nil || strings.TrimSpace(string(res.Stdout)) != lab.User {
			t.Errorf("id -un: %v", err)
		}
		if p.asked != 1 {
			t.Errorf("asked %d times for the passphrase", p.asked)
		}
	})
	t.Run("no terminal", func(t *testing.T) {
		devnull, err := os.Open(os.DevNull)
		if err != nil {
			t.Fatal(err)
		}
		defer devnull.Close()
		o := opts
		o.Prompt = remote.TerminalPrompt{In: devnull}
		_, err = remote.Dial(t.Context(), o)
		if !errors.Is(err, remote.ErrNoTerminal) || !strings.Contains(err.Error(), "needs a terminal for the passphrase of "+o.IdentityFile) {
			t.Fatalf("Dial = %v, want a needs-a-terminal error", err)
		}
		t.Logf("no terminal: %v", err)
	})
}

func TestSSHLabAcceptNew(t *testing.T) {
	lab := labtest.Env(t)
	kh := filepath.Join(t.TempDir(), "ssh", "known_hosts") // neither exists yet
	opts := labOptions(t, lab)
	opts.KnownHostsFile = kh
	opts.AcceptNewHostKey = true
	h := dialLab(t, opts)
	_ = h.Close()

	b, err := os.ReadFile(kh)
	if err != nil {
		t.Fatal(err)
	}
	host := labHostKey(t, lab)
	want := fmt.Sprintf("[%s]:%d %s", lab.SSHHost, lab.SSHPort, ssh.MarshalAuthorizedKey(host))
	if string(b) != want {
		t.Errorf("known_hosts = %q, want %q", b, want)
	}
	if fi, err := os.Stat(kh); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("known_hosts mode %v (%v)", fi.Mode(), err)
	}
	// Now known: a strict dial works and adds nothing.
	opts.AcceptNewHostKey = false
	h2 := dialLab(t, opts)
	_ = h2.Close()
	if b2, _ := os.ReadFile(kh); !bytes.Equal(b, b2) {
		t.Errorf("second dial changed known_hosts: %q", b2)
	}
}

func TestSSHLabConfigAliasAndProxyJump(t *testing.T) {
	lab := labtest.Env(t)
	lab.WaitSSH(t, time.Minute)
	t.Setenv("SSH_AUTH_SOCK", "")
	cfg := filepath.Join(t.TempDir(), "config")
	content := fmt.Sprintf(`# test ssh config
Host labalias
    HostName %s
    Port %d
    User %s
    IdentityFile %s
    UserKnownHostsFile %s

Host labviajump
    HostName %s
    Port %d
    User %s
    IdentityFile %s
    UserKnownHostsFile %s
    ProxyJump labalias
`, lab.SSHHost, lab.SSHPort, lab.User, lab.Key, lab.KnownHosts,
		lab.SSHHost, lab.SSHPort, lab.User, lab.Key, lab.KnownHosts)
	if err := os.WriteFile(cfg, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, alias := range []string{"labalias", "labviajump"} {
		t.Run(alias, func(t *testing.T) {
			var logs logRecorder
			h := dialLab(t, remote.Options{Host: alias, ConfigFile: cfg, Prompt: noPrompt{t}, Logf: logs.Logf})
			if want := fmt.Sprintf("%s@%s:%d", lab.User, lab.SSHHost, lab.SSHPort); h.Name() != want {
				t.Errorf("Name() = %q, want %q", h.Name(), want)
			}
			res, err := h.Run(t.Context(), remote.Command{Argv: []string{"sh", "-c", "id -un; echo $SSH_CONNECTION"}})
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("%s: %q; log: %q", alias, res.Stdout, logs.String())
			if !strings.HasPrefix(string(res.Stdout), lab.User+"\n") {
				t.Errorf("ran as %q", res.Stdout)
			}
			via := strings.Contains(logs.String(), "via "+h.Name())
			if via != (alias == "labviajump") {
				t.Errorf("jump used = %v for %s; log %q", via, alias, logs.String())
			}
			dir := scratchDir(t, h, lab)
			if err := h.WriteFile(t.Context(), path.Join(dir, "f"), []byte("via sftp"), 0o600); err != nil {
				t.Error(err)
			}
		})
	}
	// An explicit ProxyJump option works too, and "none" disables the config's.
	t.Run("option", func(t *testing.T) {
		var logs logRecorder
		h := dialLab(t, remote.Options{Host: "labviajump", ConfigFile: cfg, ProxyJump: "none", Prompt: noPrompt{t}, Logf: logs.Logf})
		if strings.Contains(logs.String(), "via") {
			t.Errorf("ProxyJump none still jumped: %q", logs.String())
		}
		_ = h.Close()
		logs = logRecorder{}
		jump := fmt.Sprintf("%s@%s:%d", lab.User, lab.SSHHost, lab.SSHPort)
		h = dialLab(t, remote.Options{Host: "labalias", ConfigFile: cfg, ProxyJump: jump, Prompt: noPrompt{t}, Logf: logs.Logf})
		if !strings.Contains(logs.String(), "via "+jump) {
			t.Errorf("explicit ProxyJump not used: %q", logs.String())
		}
		if _, err := h.Run(t.Context(), remote.Command{Argv: []string{"true"}}); err != nil {
			t.Error(err)
		}
	})
}

type logRecorder struct {
	mu    sync.Mutex
	lines []string
}

func (l *logRecorder) Logf(format string, args ...any) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.lines = append(l.lines, fmt.Sprintf(format, args...))
}

func (l *logRecorder) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.Join(l.lines, "\n")
}

// TestSSHLabReconnect stops and restarts the sshd (which also kills the
// connections it serves) in the middle of a series of calls. The sshd is
// the test's own (labtest.PrivateSSHD): the lab's stays up for the others.
func TestSSHLabReconnect(t *testing.T) {
	lab, sshd := labtest.Env(t).PrivateSSHD(t)
	var logs logRecorder
	opts := labOptions(t, lab)
	opts.Logf = func(f string, a ...any) { logs.Logf(f, a...); t.Logf(f, a...) }
	opts.MaxRetries = 12 // rides out a restart of a few seconds
	h := dialLab(t, opts)
	dir := scratchDir(t, h, lab)
	ctx := t.Context()
	idem := func(i int) error {
		res, err := h.Run(ctx, remote.Command{Argv: []string{"echo", strconv.Itoa(i)}, Idempotent: true})
		if err == nil && strings.TrimSpace(string(res.Stdout)) != strconv.Itoa(i) {
			err = fmt.Errorf("stdout %q", res.Stdout)
		}
		return err
	}
	for i := range 3 {
		if err := idem(i); err != nil {
			t.Fatalf("call %d before the restart: %v", i, err)
		}
	}

	t.Run("idempotent call spans the restart", func(t *testing.T) {
		sshd.Stop(t)
		errc := make(chan error, 1)
		go func() { errc <- idem(100) }()
		time.Sleep(1500 * time.Millisecond) // the call is retrying meanwhile
		sshd.Start(t)
		if err := <-errc; err != nil {
			t.Errorf("idempotent call made while sshd was down: %v", err)
		}
		for i := 3; i < 8; i++ {
			if err := idem(i); err != nil {
				t.Errorf("call %d after the restart: %v", i, err)
			}
		}
		if !strings.Contains(logs.String(), "reconnected") {
			t.Errorf("no reconnection logged: %q", logs.String())
		}
	})

	// A command running when the connection drops: an idempotent one is
	// re-run after reconnecting; a non-idempotent one reports that its
	// outcome is unknown and is not re-run.
	for _, idempotent := range []bool{true, false} {
		t.Run(fmt.Sprintf("running command, idempotent=%v", idempotent), func(t *testing.T) {
			marks := path.Join(dir, fmt.Sprintf("marks-%v", idempotent))
			started := path.Join(dir, fmt.Sprintf("started-%v", idempotent))
			errc := make(chan error, 1)
			go func() {
				// Each run appends a line to marks, then sleeps past the drop.
				_, err := h.Run(ctx, remote.Command{
					Argv:       []string{"sh", "-c", `echo run >> "$1"; touch "$2"; sleep 3; echo done`, "sh", marks, started},
					Idempotent: idempotent,
				})
				errc <- err
			}()
			waitUntil(t, 10*time.Second, func() bool { _, err := h.Stat(ctx, started); return err == nil })
			sshd.Restart(t)
			var err error
			select {
			case err = <-errc:
			case <-time.After(60 * time.Second):
				t.Fatal("Run did not return")
			}
			b, rerr := h.ReadFile(ctx, marks)
			if rerr != nil {
				t.Fatal(rerr)
			}
			runs := strings.Count(string(b), "run")
			if idempotent {
				if err != nil || runs != 2 {
					t.Errorf("idempotent: err %v, %d runs; want success after one re-run", err, runs)
				}
				return
			}
			var oue *remote.OutcomeUnknownError
			if !errors.Is(err, remote.ErrOutcomeUnknown) || !errors.As(err, &oue) || !errors.Is(err, remote.ErrConnectionLost) {
				t.Errorf("non-idempotent: err = %v, want ErrOutcomeUnknown wrapping ErrConnectionLost", err)
			}
			if runs != 1 {
				t.Errorf("non-idempotent command ran %d times", runs)
			}
			t.Logf("non-idempotent: %v", err)
		})
	}
}

func waitUntil(t *testing.T, limit time.Duration, ok func() bool) {
	t.Helper()
	deadline := time.Now().Add(limit)
	for !ok() {
		if time.Now().After(deadline) {
			t.Fatalf("condition not met within %v", limit)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestSSHLabNoGoroutineLeak: after Close, every goroutine the connection
// started (keepalive, waiters, SFTP) is gone.
func TestSSHLabNoGoroutineLeak(t *testing.T) {
	lab := labtest.Env(t)
	opts := labOptions(t, lab)
	opts.KeepaliveInterval = 50 * time.Millisecond
	before := runtime.NumGoroutine()
	h, err := remote.Dial(t.Context(), opts)
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	var wg sync.WaitGroup
	for range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := h.Run(ctx, remote.Command{Argv: []string{"true"}}); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	if _, err := h.Stat(ctx, lab.Workdir); err != nil {
		t.Fatal(err)
	}
	cctx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	_, _ = h.Run(cctx, remote.Command{Argv: []string{"sleep", "10"}})
	cancel()
	time.Sleep(200 * time.Millisecond) // some keepalives
	if err := h.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := h.Run(ctx, remote.Command{Argv: []string{"true"}}); !errors.Is(err, remote.ErrClosed) {
		t.Errorf("Run after Close: %v, want ErrClosed", err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for runtime.NumGoroutine() > before {
		if time.Now().After(deadline) {
			buf := make([]byte, 1<<20)
			t.Fatalf("%d goroutines after Close, %d before:\n%s", runtime.NumGoroutine(), before, buf[:runtime.Stack(buf, true)])
		}
		time.Sleep(20 * time.Millisecond)
	}
}
