package remote

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strings"
	"sync"
	"time"

	"golang.org/x/crypto/ssh"
	"golang.org/x/crypto/ssh/agent"
)

// dialConn connects to cfg (through its jump hosts) and returns the
// connection with its keepalive running.
func dialConn(ctx context.Context, cfg *resolved) (*conn, error) {
	var closers []io.Closer
	fail := func(err error) (*conn, error) {
		for i := len(closers) - 1; i >= 0; i-- {
			_ = closers[i].Close()
		}
		return nil, err
	}
	var via *ssh.Client
	for _, hop := range cfg.jumps {
		cl, err := dialClient(ctx, hop, via)
		if err != nil {
			return fail(fmt.Errorf("jump host %s: %w", hop.dest(), err))
		}
		closers = append(closers, cl)
		via = cl
	}
	cl, err := dialClient(ctx, cfg, via)
	if err != nil {
		return fail(err)
	}
	if len(cfg.jumps) > 0 {
		cfg.logf("remote: connected to %s via %s", cfg.dest(), cfg.jumps[len(cfg.jumps)-1].dest())
	} else {
		cfg.logf("remote: connected to %s", cfg.dest())
	}
	return newConn(xClient{cl}, closers, cfg), nil
}

// dialClient opens the TCP connection (directly, or through via) and runs
// the SSH handshake. ClientConfig.Timeout only covers the TCP connect, so
// the handshake gets its own deadline on the net.Conn (cleared afterwards,
// and paused while the user answers a prompt), and a watchdog closes the
// conn if ctx ends first.
func dialClient(ctx context.Context, cfg *resolved, via *ssh.Client) (*ssh.Client, error) {
	addr := cfg.addr()
	var nc net.Conn
	var err error
	if via == nil {
		d := net.Dialer{Timeout: cfg.connectTimeout}
		nc, err = d.DialContext(ctx, "tcp", addr)
	} else {
		dctx, cancel := context.WithTimeout(ctx, cfg.connectTimeout)
		nc, err = via.DialContext(dctx, "tcp", addr)
		cancel()
	}
	if err != nil {
		return nil, fmt.Errorf("connect to %s: %w", addr, err)
	}

	g := newHandshakeGuard(nc, cfg.connectTimeout)
	stop := context.AfterFunc(ctx, func() { g.abort() })

	hk, err := newHostKeyChecker(cfg)
	if err != nil {
		stop()
		g.finish()
		_ = nc.Close()
		return nil, err
	}
	auth, err := newAuth(cfg, g)
	if err != nil {
		stop()
		g.finish()
		_ = nc.Close()
		return nil, err
	}
	defer auth.close()

	conf := &ssh.ClientConfig{
		User:              cfg.user,
		Auth:              auth.methods,
		HostKeyCallback:   hk.callback,
		HostKeyAlgorithms: hk.algorithms(addr),
		Timeout:           cfg.connectTimeout,
	}
	c, chans, reqs, err := ssh.NewClientConn(nc, addr, conf)
	stopped := stop()
	timedOut := g.finish()
	if err != nil {
		_ = nc.Close()
		switch {
		case !stopped && ctx.Err() != nil:
			return nil, fmt.Errorf("ssh handshake with %s: %w", cfg.dest(), ctx.Err())
		case hk.err != nil:
			return nil, hk.err
		case timedOut || errors.Is(err, os.ErrDeadlineExceeded):
			return nil, fmt.Errorf("ssh handshake with %s: no answer within %v: %w", cfg.dest(), cfg.connectTimeout, err)
		}
		return nil, auth.explain(hk.explain(err, addr))
	}
	return ssh.NewClient(c, chans, reqs), nil
}

// handshakeGuard keeps a deadline on the conn during the handshake, pauses
// it while a prompt waits for the user, and clears it at the end.
type handshakeGuard struct {
	nc      net.Conn
	timeout time.Duration

	mu       sync.Mutex
	timer    *time.Timer
	done     bool
	timedOut bool
}

func newHandshakeGuard(nc net.Conn, timeout time.Duration) *handshakeGuard {
	g := &handshakeGuard{nc: nc, timeout: timeout}
	g.resume()
	return g
}

// resume (re)arms the deadline. Connections through a jump host do not
// support deadlines; the timer closes those instead.
func (g *handshakeGuard) resume() {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.done {
		return
	}
	_ = g.nc.SetDeadline(time.Now().Add(g.timeout))
	g.timer = time.AfterFunc(g.timeout, func() {
		g.mu.Lock()
		defer g.mu.Unlock()
		if !g.done {
			g.timedOut = true
			_ = g.nc.Close()
		}
	})
}

// pause lifts the deadline while a human answers.
func (g *handshakeGuard) pause() {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.timer != nil {
		g.timer.Stop()
	}
	_ = g.nc.SetDeadline(time.Time{})
}

func (g *handshakeGuard) abort() {
	g.mu.Lock()
	defer g.mu.Unlock()
	_ = g.nc.Close()
}

// finish clears the deadline for good and says whether it had fired.
func (g *handshakeGuard) finish() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.done = true
	if g.timer != nil {
		g.timer.Stop()
	}
	_ = g.nc.SetDeadline(time.Time{})
	return g.timedOut
}

// AuthError is a login the server refused.
type AuthError struct {
	Dest    string   // user@host:port
	Methods string   // what was attempted, e.g. "publickey"
	Tried   []string // the keys offered, and notes on keys that could not be
	Err     error
}

func (e *AuthError) Error() string {
	m := e.Methods
	if m == "" {
		m = "publickey"
	}
	msg := fmt.Sprintf("permission denied (%s) for %s", m, e.Dest)
	if len(e.Tried) > 0 {
		msg += ": tried " + strings.Join(e.Tried, ", ")
	} else {
		msg += ": no keys to offer (no ssh-agent, no identity file)"
	}
	if e.Err != nil && errors.Is(e.Err, ErrNoTerminal) {
		msg += ": " + e.Err.Error()
	}
	return msg
}

func (e *AuthError) Unwrap() error { return e.Err }

// authSetup is the auth methods offered on one handshake and what they
// hold open (the agent socket).
type authSetup struct {
	dest    string
	methods []ssh.AuthMethod
	tried   []string
	closers []io.Closer
	promptE error // a prompt that could not be shown
	mu      sync.Mutex
}

func (a *authSetup) close() {
	for _, c := range a.closers {
		_ = c.Close()
	}
}

// promptFailed remembers a prompt that could not be answered.
func (a *authSetup) promptFailed(err error) {
	a.mu.Lock()
	a.promptE = err
	a.mu.Unlock()
}

// explain turns the ssh package's "unable to authenticate" into *AuthError.
func (a *authSetup) explain(err error) error {
	msg := err.Error()
	noTerm := errors.Is(err, ErrNoTerminal)
	if !strings.Contains(msg, "unable to authenticate") && !noTerm {
		return fmt.Errorf("ssh handshake with %s: %w", a.dest, err)
	}
	methods := ""
	if i := strings.Index(msg, "attempted methods ["); i >= 0 {
		rest := msg[i+len("attempted methods ["):]
		if j := strings.Index(rest, "]"); j >= 0 {
			var ms []string
			for _, m := range strings.Fields(rest[:j]) {
				if m != "none" {
					ms = append(ms, m)
				}
			}
			methods = strings.Join(ms, ",")
		}
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	cause := err
	if a.promptE != nil {
		cause = a.promptE
	}
	if methods == "" && errors.Is(cause, ErrNoTerminal) {
		// Not refused: a key the server would take needs a passphrase.
		return fmt.Errorf("ssh login to %s: %w", a.dest, cause)
	}
	return &AuthError{Dest: a.dest, Methods: methods, Tried: append([]string(nil), a.tried...), Err: cause}
}

// newAuth offers, in order: ssh-agent keys (when SSH_AUTH_SOCK is set) and
// identity files in one publickey method (the ssh package tries each method
// once), then keyboard-interactive.
func newAuth(cfg *resolved, g *handshakeGuard) (*authSetup, error) {
	a := &authSetup{dest: cfg.dest()}
	var signers []ssh.Signer
	if sock := os.Getenv("SSH_AUTH_SOCK"); sock != "" {
		ac, err := net.Dial("unix", sock)
		if err != nil {
			cfg.logf("remote: ssh-agent at %s: %v", sock, err)
		} else {
			a.closers = append(a.closers, ac)
			ss, err := agent.NewClient(ac).Signers()
			if err != nil {
				cfg.logf("remote: ssh-agent: %v", err)
			}
			for _, s := range ss {
				a.tried = append(a.tried, fmt.Sprintf("agent key %s %s", s.PublicKey().Type(), ssh.FingerprintSHA256(s.PublicKey())))
			}
			signers = append(signers, ss...)
		}
	}
	for _, path := range cfg.identities {
		s, desc, err := loadIdentity(path, cfg.prompt, g, a.promptFailed)
		switch {
		case err != nil && cfg.defaultIDs && errors.Is(err, os.ErrNotExist):
			continue // defaults that do not exist are not worth a word
		case err != nil && errors.Is(err, ErrNoTerminal):
			a.tried = append(a.tried, path+" (passphrase-protected; "+err.Error()+")")
			a.promptE = err
			continue
		case err != nil:
			a.tried = append(a.tried, fmt.Sprintf("%s (unusable: %v)", path, err))
			continue
		}
		a.tried = append(a.tried, desc)
		signers = append(signers, s)
	}
	if len(signers) > 0 {
		a.methods = append(a.methods, ssh.PublicKeys(signers...))
	}
	a.methods = append(a.methods, ssh.KeyboardInteractive(func(name, instruction string, questions []string, echos []bool) ([]string, error) {
		if len(questions) == 0 {
			return cfg.prompt.Challenge(a.dest, name, instruction, questions, echos)
		}
		g.pause()
		defer g.resume()
		ans, err := cfg.prompt.Challenge(a.dest, name, instruction, questions, echos)
		if err != nil {
			a.promptFailed(err)
		}
		return ans, err
	}))
	return a, nil
}

// loadIdentity reads a private key. A passphrase-protected key whose public
// half is known (new OpenSSH format, or a .pub file beside it) is decrypted
// only when the server accepts it; otherwise the passphrase is asked now.
func loadIdentity(path string, p Prompt, g *handshakeGuard, onErr func(error)) (ssh.Signer, string, error) {
	pem, err := os.ReadFile(path)
	if err != nil {
		return nil, "", err
	}
	s, err := ssh.ParsePrivateKey(pem)
	if err == nil {
		return s, describeKey(path, s.PublicKey()), nil
	}
	var pm *ssh.PassphraseMissingError
	if !errors.As(err, &pm) {
		return nil, "", err
	}
	pub := pm.PublicKey
	if pub == nil {
		if b, err := os.ReadFile(path + ".pub"); err == nil {
			pub, _, _, _, _ = ssh.ParseAuthorizedKey(b)
		}
	}
	ls := &lazySigner{path: path, pem: pem, pub: pub, prompt: p, guard: g, onErr: onErr}
	if pub == nil {
		if err := ls.decrypt(); err != nil {
			return nil, "", err
		}
		pub = ls.signer.PublicKey()
		ls.pub = pub
	}
	return ls, describeKey(path, pub) + " (passphrase-protected)", nil
}

func describeKey(path string, pub ssh.PublicKey) string {
	return fmt.Sprintf("%s (%s %s)", path, pub.Type(), ssh.FingerprintSHA256(pub))
}

// lazySigner asks for a key's passphrase the first time it must sign.
type lazySigner struct {
	path   string
	pem    []byte
	pub    ssh.PublicKey
	prompt Prompt
	guard  *handshakeGuard
	onErr  func(error) // told when decrypting fails

	mu     sync.Mutex
	signer ssh.Signer
}

var _ ssh.MultiAlgorithmSigner = (*lazySigner)(nil)

func (l *lazySigner) decrypt() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.signer != nil {
		return nil
	}
	if l.guard != nil {
		l.guard.pause()
		defer l.guard.resume()
	}
	for try := 0; try < 3; try++ {
		pass, err := l.prompt.Passphrase(l.path)
		if err != nil {
			return err
		}
		s, err := ssh.ParsePrivateKeyWithPassphrase(l.pem, pass)
		clear(pass)
		if err == nil {
			l.signer = s
			return nil
		}
		if !errors.Is(err, x509.IncorrectPasswordError) {
			return fmt.Errorf("identity file %s: %w", l.path, err)
		}
	}
	return fmt.Errorf("identity file %s: wrong passphrase", l.path)
}

func (l *lazySigner) PublicKey() ssh.PublicKey { return l.pub }

func (l *lazySigner) Sign(rand io.Reader, data []byte) (*ssh.Signature, error) {
	if err := l.decryptOrReport(); err != nil {
		return nil, err
	}
	return l.signer.Sign(rand, data)
}

func (l *lazySigner) decryptOrReport() error {
	err := l.decrypt()
	if err != nil && l.onErr != nil {
		l.onErr(err)
	}
	return err
}

func (l *lazySigner) SignWithAlgorithm(rand io.Reader, data []byte, algorithm string) (*ssh.Signature, error) {
	if err := l.decryptOrReport(); err != nil {
		return nil, err
	}
	if as, ok := l.signer.(ssh.AlgorithmSigner); ok {
		return as.SignWithAlgorithm(rand, data, algorithm)
	}
	return l.signer.Sign(rand, data)
}

func (l *lazySigner) Algorithms() []string {
	if l.pub.Type() == ssh.KeyAlgoRSA {
		return []string{ssh.KeyAlgoRSASHA512, ssh.KeyAlgoRSASHA256, ssh.KeyAlgoRSA}
	}
	return []string{l.pub.Type()}
}
