package remote

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/pkg/sftp"
	"golang.org/x/crypto/ssh"

	"github.com/nemorl/nemorl-slurm/internal/shell"
)

// Options says how to reach a login node over SSH. Empty fields are looked
// up in the OpenSSH client config (ConfigFile) for Host, then defaulted the
// way ssh(1) does.
type Options struct {
	// Host is a host name, an address or an ssh_config alias.
	Host string
	// Port defaults to the config's Port, else 22.
	Port int
	// User defaults to the config's User, else the local user name.
	User string
	// IdentityFile is a private key. Default: the config's IdentityFile
	// entries, else ~/.ssh/id_ed25519, id_ecdsa, id_rsa (those that exist).
	// Keys from ssh-agent (SSH_AUTH_SOCK) are tried first.
	IdentityFile string
	// KnownHostsFile holds the trusted host keys. Default: the config's
	// UserKnownHostsFile, else ~/.ssh/known_hosts (plus the system file).
	// Host keys are always checked.
	KnownHostsFile string
	// ProxyJump is "[user@]host[:port]" (comma-separated for several hops),
	// or "none". Default: the config's ProxyJump.
	ProxyJump string
	// AcceptNewHostKey appends the key of a host that has none in
	// KnownHostsFile (OpenSSH's StrictHostKeyChecking=accept-new). A host
	// whose key changed is refused regardless.
	AcceptNewHostKey bool
	// ConnectTimeout bounds the TCP connect and, separately, the SSH
	// handshake (time spent in prompts excluded). Default: the config's
	// ConnectTimeout, else 30s.
	ConnectTimeout time.Duration
	// KeepaliveInterval is how often keepalive@openssh.com is sent; a
	// connection that leaves KeepaliveCountMax of them unanswered is dead.
	// Default: the config's ServerAliveInterval, else 15s. Negative: off.
	KeepaliveInterval time.Duration
	// KeepaliveCountMax defaults to 3.
	KeepaliveCountMax int
	// MaxSessions caps concurrent commands on the connection; more wait.
	// Default 8: sshd allows 10 sessions per connection and SFTP holds one.
	MaxSessions int
	// MaxRetries is how many times a call is retried after reconnecting
	// (dial failures, or a dropped connection for Idempotent commands and
	// file operations). Default 3; negative: never.
	MaxRetries int
	// ConfigFile is the OpenSSH client config. "" means ~/.ssh/config;
	// "none" means no config.
	ConfigFile string
	// Prompt asks for passphrases and keyboard-interactive answers.
	// Default: TerminalPrompt{} (fails clearly without a terminal).
	Prompt Prompt
	// Logf, when set, receives one line per connection event.
	Logf func(format string, args ...any)
}

// Backoff between reconnection attempts.
const (
	minBackoff = 250 * time.Millisecond
	maxBackoff = 8 * time.Second
)

// SSH is a Host reached over one shared SSH connection: commands run in
// sessions on it (at most MaxSessions at once) and files go through one SFTP
// client on it. When the connection drops, the next call redials. It is safe
// for concurrent use.
type SSH struct {
	cfg  *resolved
	name string
	sem  chan struct{}
	logf func(string, ...any)
	dial func(context.Context, *resolved) (*conn, error) // dialConn; tests replace it

	mu       sync.Mutex
	cur      *conn
	dialing  *dialCall
	closed   bool
	failures int
	nextDial time.Time
	// reconnects counts the connections made after a failed one.
	reconnects atomic.Int64
}

var _ Host = (*SSH)(nil)

type dialCall struct {
	done chan struct{}
	c    *conn
	err  error
}

// Dial resolves opts against the SSH config, connects, checks the host key
// and logs in. Host key and authentication failures come back as
// *HostKeyError and *AuthError.
func Dial(ctx context.Context, opts Options) (*SSH, error) {
	s, err := Open(opts)
	if err != nil {
		return nil, err
	}
	if _, err := s.conn(ctx); err != nil {
		return nil, err
	}
	return s, nil
}

// Open resolves opts against the SSH config and returns the host without
// connecting: the first call connects (and a failed connection is tried
// again with the usual backoff). serve opens a cluster this way when it
// does not answer at start. Only what resolving finds wrong is an error.
func Open(opts Options) (*SSH, error) {
	cfg, err := resolve(opts)
	if err != nil {
		return nil, err
	}
	return &SSH{
		cfg:  cfg,
		name: cfg.dest(),
		sem:  make(chan struct{}, cfg.maxSessions),
		logf: cfg.logf,
		dial: dialConn,
	}, nil
}

// Name returns user@host:port.
func (s *SSH) Name() string { return s.name }

// Close closes the connection and stops its goroutines. Calls in flight
// fail; later calls return ErrClosed.
func (s *SSH) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	c := s.cur
	s.cur = nil
	d := s.dialing
	s.mu.Unlock()
	if d != nil {
		<-d.done // the dialer sees closed and closes what it made
	}
	if c != nil {
		c.close()
	}
	return nil
}

// conn returns the live connection, dialing (once, for all waiting callers)
// when there is none, after a backoff that grows with consecutive failures.
func (s *SSH) conn(ctx context.Context) (*conn, error) {
	for {
		s.mu.Lock()
		if s.closed {
			s.mu.Unlock()
			return nil, ErrClosed
		}
		if c := s.cur; c != nil {
			if !c.isDead() {
				s.mu.Unlock()
				return c, nil
			}
			s.cur = nil
			go c.close() // reap its goroutines; it is already dead
			s.logf("remote: %s: connection lost: %v; reconnecting", s.name, c.deathCause())
		}
		if d := s.dialing; d != nil {
			s.mu.Unlock()
			select {
			case <-d.done:
			case <-ctx.Done():
				return nil, ctx.Err()
			}
			if d.err != nil && isCtxErr(d.err) && ctx.Err() == nil {
				continue // the dialer gave up on its own ctx; try again
			}
			if d.err != nil {
				return nil, d.err
			}
			continue
		}
		d := &dialCall{done: make(chan struct{})}
		s.dialing = d
		wait := time.Until(s.nextDial)
		s.mu.Unlock()

		if wait > 0 {
			if err := sleepCtx(ctx, wait); err != nil {
				d.err = err
				s.finishDial(d)
				return nil, err
			}
		}
		d.c, d.err = s.dial(ctx, s.cfg)
		s.finishDial(d)
		if d.err != nil {
			return nil, d.err
		}
	}
}

func (s *SSH) finishDial(d *dialCall) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.dialing = nil
	defer close(d.done)
	switch {
	case d.err != nil:
		if !isCtxErr(d.err) {
			s.failures++
			b := minBackoff << min(s.failures-1, 10)
			s.nextDial = time.Now().Add(min(b, maxBackoff))
			s.logf("remote: %s: connect failed (attempt %d): %v", s.name, s.failures, d.err)
		}
	case s.closed:
		go d.c.close()
		d.c, d.err = nil, ErrClosed
	default:
		if s.failures > 0 {
			s.reconnects.Add(1)
			s.logf("remote: %s: reconnected", s.name)
		}
		s.failures = 0
		s.nextDial = time.Time{}
		s.cur = d.c
	}
}

// Reconnects is how many times the connection was made again after it was
// lost (serve's /metrics).
func (s *SSH) Reconnects() int64 { return s.reconnects.Load() }

func (s *SSH) acquire(ctx context.Context) error {
	select {
	case s.sem <- struct{}{}:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (s *SSH) release() { <-s.sem }

// canRetry says whether attempt (0-based) may be followed by another.
func (s *SSH) canRetry(attempt int) bool { return attempt < s.cfg.maxRetries }

// Run runs cmd in a session on the shared connection, as "exec ARGV" under
// the login shell (so a cancel signal reaches the program itself). When ctx
// is done the remote command is sent SIGKILL and the session is closed.
//
// When the connection drops before the session opens, the call reconnects
// and tries again. When it drops while the command runs, an Idempotent
// command is re-run after reconnecting; any other command returns an
// *OutcomeUnknownError (matching ErrOutcomeUnknown).
func (s *SSH) Run(ctx context.Context, cmd Command) (*Result, error) {
	if len(cmd.Argv) == 0 {
		return nil, fmt.Errorf("%s: empty command", s.name)
	}
	line := "exec " + shell.Join(cmd.Argv)
	stdin := cmd.Stdin
	var replay []byte
	if cmd.Idempotent && stdin != nil {
		// A re-run needs the same input again.
		b, err := io.ReadAll(stdin)
		if err != nil {
			return nil, fmt.Errorf("%s: %s: reading stdin: %w", s.name, cmd, err)
		}
		replay = b
	}
	refused := 0
	for attempt := 0; ; attempt++ {
		if replay != nil {
			stdin = bytes.NewReader(replay)
		}
		c, err := s.conn(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return nil, fmt.Errorf("%s: %s: %w", s.name, cmd, ctx.Err())
			}
			if isPermanent(err) || !s.canRetry(attempt) {
				return nil, fmt.Errorf("%s: %s: %w", s.name, cmd, err)
			}
			continue // conn() waits out the backoff
		}
		res, started, err := s.runOnce(ctx, c, cmd, line, stdin)
		var ce *CommandError
		if err == nil || errors.As(err, &ce) {
			return res, err
		}
		if ctx.Err() != nil {
			return nil, fmt.Errorf("%s: %s: %w", s.name, cmd, ctx.Err())
		}
		if errors.Is(err, errSessionRefused) && refused < maxRefused {
			// The server refused a new session: nothing ran, so wait a
			// little and try again. sshd frees a finished session's slot a
			// moment after the channel closes, so a full semaphore can race
			// it; that does not count as a failed attempt.
			refused++
			attempt--
			if err := sleepCtx(ctx, jitter(20*time.Millisecond<<min(refused, 6))); err != nil {
				return nil, fmt.Errorf("%s: %s: %w", s.name, cmd, err)
			}
			continue
		}
		if !c.lost(err) {
			return nil, fmt.Errorf("%s: %s: %w", s.name, cmd, err)
		}
		lostErr := fmt.Errorf("%w: %w", ErrConnectionLost, err)
		switch {
		case !started && s.canRetry(attempt):
			s.logf("remote: %s: %s: connection lost before the command started; retrying", s.name, cmd)
		case !started:
			return nil, fmt.Errorf("%s: %s: %w", s.name, cmd, lostErr)
		case !cmd.Idempotent:
			return nil, &OutcomeUnknownError{Host: s.name, Command: cmd.String(), Err: lostErr}
		case s.canRetry(attempt):
			s.logf("remote: %s: %s: connection lost while running; re-running (idempotent)", s.name, cmd)
		default:
			return nil, fmt.Errorf("%s: %s: %w", s.name, cmd, lostErr)
		}
	}
}

var errSessionRefused = errors.New("server refused a new session")

// maxRefused bounds the retries of a session the server would not open.
const maxRefused = 30

// jitter returns a duration in [d/2, d).
func jitter(d time.Duration) time.Duration {
	return d/2 + time.Duration(rand.Int64N(int64(d/2)+1))
}

// runOnce runs the command in one session. started says whether the exec
// request may have reached the server.
func (s *SSH) runOnce(ctx context.Context, c *conn, cmd Command, line string, stdin io.Reader) (res *Result, started bool, err error) {
	if err := s.acquire(ctx); err != nil {
		return nil, false, err
	}
	defer s.release()
	sess, err := c.client.NewSession()
	if err != nil {
		var oce *ssh.OpenChannelError
		if errors.As(err, &oce) {
			// "administratively prohibited" or "open failed" (sshd's
			// MaxSessions): the command never started.
			return nil, false, fmt.Errorf("%w: %w", errSessionRefused, err)
		}
		return nil, false, fmt.Errorf("opening session: %w", err)
	}
	defer sess.Close()

	var stdout, stderr bytes.Buffer
	sess.SetOutput(&stdout, &stderr)
	var stdinW io.WriteCloser
	if stdin != nil {
		if stdinW, err = sess.StdinPipe(); err != nil {
			return nil, false, fmt.Errorf("stdin pipe: %w", err)
		}
	}
	if err := sess.Start(line); err != nil {
		return nil, true, fmt.Errorf("starting command: %w", err)
	}
	if stdinW != nil {
		// Not waited for: it ends when stdin is drained or when the
		// session closes (writes then fail).
		go func() {
			_, _ = io.Copy(stdinW, stdin)
			_ = stdinW.Close()
		}()
	}
	stop := context.AfterFunc(ctx, func() {
		_ = sess.Signal(ssh.SIGKILL)
		_ = sess.Close()
	})
	defer stop()
	err = sess.Wait()
	if ctx.Err() != nil {
		return nil, true, ctx.Err()
	}
	res = &Result{Stdout: stdout.Bytes(), Stderr: stderr.Bytes()}
	var exitErr *ssh.ExitError
	switch {
	case err == nil:
		return res, true, nil
	case errors.As(err, &exitErr):
		res.ExitStatus = exitErr.ExitStatus()
		msg := res.Stderr
		if exitErr.Signal() != "" {
			msg = append(append([]byte{}, msg...), []byte("\nkilled by signal "+exitErr.Signal())...)
		}
		return res, true, &CommandError{Host: s.name, Command: cmd.String(), ExitStatus: res.ExitStatus, Stderr: TrimStderr(msg)}
	default:
		return nil, true, err
	}
}

// isPermanent says whether a dial error will not go away by retrying.
func isPermanent(err error) bool {
	var hk *HostKeyError
	var ae *AuthError
	var ce *ConfigError
	return errors.As(err, &hk) || errors.As(err, &ae) || errors.As(err, &ce) || errors.Is(err, ErrClosed)
}

func isCtxErr(err error) bool {
	return errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)
}

func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// conn is one SSH connection with its keepalive and lazily made SFTP client.
type conn struct {
	client  sshClient
	closers []io.Closer // jump hosts, closed after client
	logf    func(string, ...any)
	dest    string

	dead      chan struct{}
	deathOnce sync.Once
	deathErr  error
	wg        sync.WaitGroup

	probeTimeout time.Duration

	sftpMu sync.Mutex
	sftp   *sftp.Client
	sftpOK chan struct{} // closed when the current SFTP client ended
}

func newConn(client sshClient, closers []io.Closer, cfg *resolved) *conn {
	c := &conn{
		client:       client,
		closers:      closers,
		logf:         cfg.logf,
		dest:         cfg.dest(),
		dead:         make(chan struct{}),
		probeTimeout: 10 * time.Second,
	}
	if cfg.keepalive > 0 {
		c.probeTimeout = min(c.probeTimeout, cfg.keepalive*time.Duration(cfg.keepaliveMax))
	}
	c.wg.Add(1)
	go func() {
		defer c.wg.Done()
		err := client.Wait()
		if err == nil {
			err = io.EOF
		}
		c.markDead(fmt.Errorf("connection closed: %w", err))
	}()
	if cfg.keepalive > 0 {
		c.wg.Add(1)
		go c.keepalive(cfg.keepalive, cfg.keepaliveMax)
	}
	return c
}

func (c *conn) isDead() bool {
	select {
	case <-c.dead:
		return true
	default:
		return false
	}
}

func (c *conn) deathCause() error {
	<-c.dead
	return c.deathErr
}

// markDead records why the connection ended and closes it, which unblocks
// every call waiting on it.
func (c *conn) markDead(err error) {
	c.deathOnce.Do(func() {
		c.deathErr = err
		close(c.dead)
		_ = c.client.Close()
	})
}

// close closes the connection and waits for its goroutines.
func (c *conn) close() {
	c.markDead(ErrClosed)
	c.sftpMu.Lock()
	if c.sftp != nil {
		_ = c.sftp.Close()
	}
	c.sftpMu.Unlock()
	c.wg.Wait()
	for i := len(c.closers) - 1; i >= 0; i-- {
		_ = c.closers[i].Close()
	}
}

// keepalive sends keepalive@openssh.com every interval and marks the
// connection dead when countMax of them in a row went unanswered, or on
// the first send error.
func (c *conn) keepalive(interval time.Duration, countMax int) {
	defer c.wg.Done()
	t := time.NewTicker(interval)
	defer t.Stop()
	missed := 0
	for {
		select {
		case <-c.dead:
			return
		case <-t.C:
		}
		switch err := c.ping(interval); {
		case err == nil:
			missed = 0
		case errors.Is(err, errPingTimeout):
			missed++
			if missed >= countMax {
				c.markDead(fmt.Errorf("no keepalive reply for %v: %w", interval*time.Duration(missed), ErrConnectionLost))
				return
			}
		default:
			c.markDead(fmt.Errorf("keepalive: %w", err))
			return
		}
	}
}

var errPingTimeout = errors.New("keepalive timed out")

// ping sends one keepalive and waits up to timeout for the reply. The
// request goroutine ends when the reply comes or the connection closes.
func (c *conn) ping(timeout time.Duration) error {
	errc := make(chan error, 1)
	c.wg.Add(1)
	go func() {
		defer c.wg.Done()
		errc <- c.client.SendKeepalive()
	}()
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case err := <-errc:
		return err
	case <-t.C:
		return errPingTimeout
	case <-c.dead:
		return c.deathErr
	}
}

// lost says whether err happened because the connection is gone; when the
// connection looks alive it probes it once.
func (c *conn) lost(err error) bool {
	if c.isDead() {
		return true
	}
	if perr := c.ping(c.probeTimeout); perr != nil {
		c.markDead(fmt.Errorf("after %v: probe failed: %w", err, perr))
		return true
	}
	return false
}

// sftpClient returns the connection's SFTP client, starting it on first use
// (or after the previous one ended).
func (c *conn) sftpClient(ctx context.Context) (*sftp.Client, error) {
	c.sftpMu.Lock()
	defer c.sftpMu.Unlock()
	if c.sftp != nil {
		select {
		case <-c.sftpOK:
			_ = c.sftp.Close()
			c.sftp = nil
		default:
			return c.sftp, nil
		}
	}
	if c.isDead() {
		return nil, c.deathCause()
	}
	type made struct {
		cl  *sftp.Client
		err error
	}
	ch := make(chan made, 1)
	go func() {
		cl, err := c.client.NewSFTP()
		ch <- made{cl, err}
	}()
	var m made
	select {
	case m = <-ch:
	case <-ctx.Done():
		// Let the starter finish in the background; close what it made.
		go func() {
			if m := <-ch; m.cl != nil {
				_ = m.cl.Close()
			}
		}()
		return nil, ctx.Err()
	}
	if m.err != nil {
		return nil, fmt.Errorf("starting sftp: %w", m.err)
	}
	c.sftp = m.cl
	ended := make(chan struct{})
	c.sftpOK = ended
	c.wg.Add(1)
	go func() {
		defer c.wg.Done()
		_ = m.cl.Wait()
		close(ended)
	}()
	return m.cl, nil
}

// sshClient is what conn needs from an SSH connection; sshSession is what
// Run needs from a session. Small, so tests can stand in for the network.
type sshClient interface {
	NewSession() (sshSession, error)
	NewSFTP() (*sftp.Client, error)
	SendKeepalive() error
	Wait() error
	Close() error
}

type sshSession interface {
	SetOutput(stdout, stderr io.Writer)
	StdinPipe() (io.WriteCloser, error)
	Start(cmd string) error
	Wait() error
	Signal(sig ssh.Signal) error
	Close() error
}

// xClient adapts *ssh.Client.
type xClient struct{ *ssh.Client }

func (x xClient) NewSession() (sshSession, error) {
	s, err := x.Client.NewSession()
	if err != nil {
		return nil, err
	}
	return xSession{s}, nil
}

func (x xClient) NewSFTP() (*sftp.Client, error) { return sftp.NewClient(x.Client) }

func (x xClient) SendKeepalive() error {
	_, _, err := x.Client.SendRequest("keepalive@openssh.com", true, nil)
	return err
}

type xSession struct{ *ssh.Session }

func (x xSession) SetOutput(stdout, stderr io.Writer) {
	x.Session.Stdout = stdout
	x.Session.Stderr = stderr
}
