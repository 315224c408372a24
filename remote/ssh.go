package remote

import (
	"context"
	"io/fs"
	"sync"
	"sync/atomic"
	"time"
)

// The SSH host, in files of one job each:
//
//	ssh.go        SSH: Options, Dial and Open, the Host methods (each one
//	              WithRetry over a single attempt), Name, Close
//	sshpool.go    the shared connection: dialled once for all waiting
//	              callers, with a backoff between failed dials
//	sshconn.go    one connection: keepalive, probes, its SFTP client
//	sshsession.go one command in one session: the session cap, stdin,
//	              stdout and stderr, exit status, cancel
//	sshfiles.go   one file operation over SFTP
//	sshclient.go  the small interfaces over x/crypto/ssh (fakes in tests)
//	sshdial.go    connecting: TCP, jump hosts, handshake, authentication
//	sshconfig.go  Options resolved against ~/.ssh/config
//	hostkey.go    known_hosts
//	retry.go      WithRetry: what is tried again after a lost connection

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
	// file operations), each after a jittered backoff (WithRetry).
	// Default 3; negative: never.
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

// SSH is a Host reached over one shared SSH connection: commands run in
// sessions on it (at most MaxSessions at once) and files go through one SFTP
// client on it. When the connection drops, the next call redials. Every
// call is WithRetry over one attempt (sshOnce). It is safe for concurrent
// use.
type SSH struct {
	cfg   *resolved
	name  string
	sem   chan struct{}
	logf  func(string, ...any)
	dial  func(context.Context, *resolved) (*conn, error) // dialConn; tests replace it
	retry Host                                            // WithRetry(sshOnce{s})

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
	return newSSH(cfg), nil
}

func newSSH(cfg *resolved) *SSH {
	s := &SSH{
		cfg:  cfg,
		name: cfg.dest(),
		sem:  make(chan struct{}, cfg.maxSessions),
		logf: cfg.logf,
		dial: dialConn,
	}
	retries := cfg.maxRetries
	if retries == 0 {
		retries = -1 // resolved: 0 is none, not the default
	}
	// The pool (conn) keeps its own backoff between failed dials, shared
	// by every caller; a retry's backoff overlaps it.
	s.retry = WithRetry(sshOnce{s}, RetryPolicy{MaxRetries: retries, Logf: cfg.logf})
	return s
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

// Reconnects is how many times the connection was made again after it was
// lost (serve's /metrics).
func (s *SSH) Reconnects() int64 { return s.reconnects.Load() }

// Run runs cmd in a session on the shared connection, as "exec ARGV" under
// the login shell (so a cancel signal reaches the program itself). When ctx
// is done the remote command is sent SIGKILL and the session is closed.
//
// When the connection drops before the session opens, the call reconnects
// and tries again. When it drops while the command runs, an Idempotent
// command is re-run after reconnecting; any other command returns an
// *OutcomeUnknownError (matching ErrOutcomeUnknown). (WithRetry.)
func (s *SSH) Run(ctx context.Context, cmd Command) (*Result, error) { return s.retry.Run(ctx, cmd) }

// MkdirAll makes dir and its missing parents, chmod-ing each one it made to
// mode (the server's umask would narrow it otherwise). File operations are
// idempotent: one that failed because the connection dropped is retried
// after reconnecting, as every one below.
func (s *SSH) MkdirAll(ctx context.Context, dir string, mode fs.FileMode) error {
	return s.retry.MkdirAll(ctx, dir, mode)
}

// WriteFile writes a temp file in the same directory, chmods it to mode
// before any data goes in, fsyncs it (when the server has fsync@openssh.com)
// and renames it over path with posix-rename@openssh.com.
func (s *SSH) WriteFile(ctx context.Context, p string, data []byte, mode fs.FileMode) error {
	return s.retry.WriteFile(ctx, p, data, mode)
}

// ReadFile reads the whole file.
func (s *SSH) ReadFile(ctx context.Context, p string) ([]byte, error) {
	return s.retry.ReadFile(ctx, p)
}

// ReadTail returns at most the last n bytes of the file, seeking past the
// rest so a large log is not transferred.
func (s *SSH) ReadTail(ctx context.Context, p string, n int64) ([]byte, error) {
	return s.retry.ReadTail(ctx, p, n)
}

// Stat returns the file's info; a missing file matches fs.ErrNotExist.
func (s *SSH) Stat(ctx context.Context, p string) (fs.FileInfo, error) { return s.retry.Stat(ctx, p) }

// Lstat is Stat without following a final symlink.
func (s *SSH) Lstat(ctx context.Context, p string) (fs.FileInfo, error) { return s.retry.Lstat(ctx, p) }

// Remove removes a file or an empty directory.
func (s *SSH) Remove(ctx context.Context, p string) error { return s.retry.Remove(ctx, p) }

// sshOnce is s as a Host whose every call is one attempt, reporting a
// failed or lost connection as a *ConnError: what WithRetry wraps.
type sshOnce struct{ s *SSH }

var _ Host = sshOnce{}

func (o sshOnce) Name() string { return o.s.name }
func (o sshOnce) Close() error { return o.s.Close() }
func (o sshOnce) Run(ctx context.Context, cmd Command) (*Result, error) {
	return o.s.runAttempt(ctx, cmd)
}

func (o sshOnce) MkdirAll(ctx context.Context, dir string, mode fs.FileMode) error {
	return o.s.mkdirAll(ctx, dir, mode)
}

func (o sshOnce) WriteFile(ctx context.Context, p string, data []byte, mode fs.FileMode) error {
	return o.s.writeFile(ctx, p, data, mode)
}

func (o sshOnce) ReadFile(ctx context.Context, p string) ([]byte, error) {
	return o.s.readFile(ctx, p)
}

func (o sshOnce) ReadTail(ctx context.Context, p string, n int64) ([]byte, error) {
	return o.s.readTail(ctx, p, n)
}

func (o sshOnce) Stat(ctx context.Context, p string) (fs.FileInfo, error) { return o.s.stat(ctx, p) }
func (o sshOnce) Lstat(ctx context.Context, p string) (fs.FileInfo, error) {
	return o.s.lstat(ctx, p)
}
func (o sshOnce) Remove(ctx context.Context, p string) error { return o.s.remove(ctx, p) }
