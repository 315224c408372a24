package remote

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/kevinburke/ssh_config"
)

// ConfigError is a problem with Options or the SSH config file.
type ConfigError struct {
	Msg string
	Err error
}

func (e *ConfigError) Error() string {
	if e.Err != nil {
		return "remote: ssh config: " + e.Msg + ": " + e.Err.Error()
	}
	return "remote: ssh config: " + e.Msg
}

func (e *ConfigError) Unwrap() error { return e.Err }

// resolved is Options after the SSH config and defaults were applied.
type resolved struct {
	alias, hostname string
	port            int
	user            string
	identities      []string // explicit or from config
	defaultIDs      bool     // identities are the ~/.ssh/id_* defaults
	knownHosts      string   // written by accept-new
	globalKnown     []string // read only
	jumps           []*resolved
	acceptNew       bool
	connectTimeout  time.Duration
	keepalive       time.Duration
	keepaliveMax    int
	maxSessions     int
	maxRetries      int
	prompt          Prompt
	logf            func(string, ...any)
}

func (r *resolved) addr() string { return joinHostPort(r.hostname, r.port) }

// dest is user@host:port, as used in messages.
func (r *resolved) dest() string { return fmt.Sprintf("%s@%s:%d", r.user, r.hostname, r.port) }

func joinHostPort(host string, port int) string {
	if strings.Contains(host, ":") {
		return "[" + host + "]:" + strconv.Itoa(port)
	}
	return host + ":" + strconv.Itoa(port)
}

// sshConfig is the parsed client config, or nil for none.
type sshConfig struct {
	path string
	cfg  *ssh_config.Config
}

func loadSSHConfig(path string) (*sshConfig, error) {
	if path == "none" {
		return &sshConfig{}, nil
	}
	explicit := path != ""
	if !explicit {
		home, err := os.UserHomeDir()
		if err != nil {
			return &sshConfig{}, nil
		}
		path = filepath.Join(home, ".ssh", "config")
	}
	f, err := os.Open(path)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) && !explicit {
			return &sshConfig{}, nil
		}
		return nil, &ConfigError{Msg: "reading " + path, Err: err}
	}
	defer f.Close()
	cfg, err := ssh_config.Decode(f)
	if err != nil {
		return nil, &ConfigError{Msg: "parsing " + path, Err: err}
	}
	return &sshConfig{path: path, cfg: cfg}, nil
}

func (c *sshConfig) get(alias, key string) (string, error) {
	if c.cfg == nil {
		return "", nil
	}
	v, err := c.cfg.Get(alias, key)
	if err != nil {
		return "", &ConfigError{Msg: fmt.Sprintf("%s: %s for %s", c.path, key, alias), Err: err}
	}
	return strings.TrimSpace(v), nil
}

func (c *sshConfig) getAll(alias, key string) ([]string, error) {
	if c.cfg == nil {
		return nil, nil
	}
	v, err := c.cfg.GetAll(alias, key)
	if err != nil {
		return nil, &ConfigError{Msg: fmt.Sprintf("%s: %s for %s", c.path, key, alias), Err: err}
	}
	return v, nil
}

// resolve applies the SSH config and defaults to opts.
func resolve(opts Options) (*resolved, error) {
	if opts.Host == "" {
		return nil, &ConfigError{Msg: "no host"}
	}
	cfg, err := loadSSHConfig(opts.ConfigFile)
	if err != nil {
		return nil, err
	}
	return resolveWith(opts, cfg, nil)
}

// resolveWith resolves one host; parent is set for a jump host, which
// inherits the known_hosts file and identities of the host it serves.
func resolveWith(opts Options, cfg *sshConfig, parent *resolved) (*resolved, error) {
	alias := opts.Host
	r := &resolved{
		alias:        alias,
		acceptNew:    opts.AcceptNewHostKey,
		keepaliveMax: opts.KeepaliveCountMax,
		maxSessions:  opts.MaxSessions,
		maxRetries:   opts.MaxRetries,
		prompt:       opts.Prompt,
		logf:         opts.Logf,
	}
	if r.logf == nil {
		r.logf = func(string, ...any) {}
	}
	if r.prompt == nil {
		r.prompt = TerminalPrompt{}
	}
	if r.keepaliveMax <= 0 {
		r.keepaliveMax = 3
	}
	if r.maxSessions <= 0 {
		r.maxSessions = 8
	}
	switch {
	case r.maxRetries == 0:
		r.maxRetries = 3
	case r.maxRetries < 0:
		r.maxRetries = 0
	}

	hn, err := cfg.get(alias, "HostName")
	if err != nil {
		return nil, err
	}
	r.hostname = alias
	if hn != "" {
		r.hostname = strings.ReplaceAll(hn, "%h", alias)
	}

	r.port = opts.Port
	if r.port == 0 {
		p, err := cfg.get(alias, "Port")
		if err != nil {
			return nil, err
		}
		if p != "" {
			if r.port, err = strconv.Atoi(p); err != nil || r.port <= 0 || r.port > 65535 {
				return nil, &ConfigError{Msg: fmt.Sprintf("%s: bad Port %q for %s", cfg.path, p, alias)}
			}
		}
	}
	if r.port == 0 {
		r.port = 22
	}

	r.user = opts.User
	if r.user == "" {
		if r.user, err = cfg.get(alias, "User"); err != nil {
			return nil, err
		}
	}
	if r.user == "" {
		if u, err := user.Current(); err == nil {
			r.user = u.Username
		} else {
			r.user = os.Getenv("USER")
		}
	}

	home, _ := os.UserHomeDir()
	expand := func(p string) string {
		if strings.HasPrefix(p, "~/") || p == "~" {
			p = filepath.Join(home, strings.TrimPrefix(p, "~"))
		}
		return strings.NewReplacer("%d", home, "%u", currentUser(), "%r", r.user,
			"%h", r.hostname, "%n", alias, "%p", strconv.Itoa(r.port), "%%", "%").Replace(p)
	}

	switch {
	case opts.IdentityFile != "":
		r.identities = []string{expand(opts.IdentityFile)}
	default:
		ids, err := cfg.getAll(alias, "IdentityFile")
		if err != nil {
			return nil, err
		}
		for _, id := range ids {
			if id = strings.TrimSpace(id); id != "" && !strings.EqualFold(id, "none") {
				r.identities = append(r.identities, expand(id))
			}
		}
		if len(r.identities) == 0 && parent != nil && !parent.defaultIDs {
			r.identities = parent.identities
		}
		if len(r.identities) == 0 {
			r.defaultIDs = true
			for _, n := range []string{"id_ed25519", "id_ecdsa", "id_rsa"} {
				r.identities = append(r.identities, filepath.Join(home, ".ssh", n))
			}
		}
	}

	switch {
	case opts.KnownHostsFile != "":
		r.knownHosts = expand(opts.KnownHostsFile)
	case parent != nil:
		r.knownHosts, r.globalKnown = parent.knownHosts, parent.globalKnown
	default:
		v, err := cfg.get(alias, "UserKnownHostsFile")
		if err != nil {
			return nil, err
		}
		if f := strings.Fields(v); len(f) > 0 {
			r.knownHosts = expand(f[0])
		} else {
			r.knownHosts = filepath.Join(home, ".ssh", "known_hosts")
		}
		for _, g := range []string{"/etc/ssh/ssh_known_hosts", "/etc/ssh/ssh_known_hosts2"} {
			if _, err := os.Stat(g); err == nil {
				r.globalKnown = append(r.globalKnown, g)
			}
		}
	}

	r.connectTimeout = opts.ConnectTimeout
	if r.connectTimeout == 0 {
		if r.connectTimeout, err = cfgSeconds(cfg, alias, "ConnectTimeout"); err != nil {
			return nil, err
		}
	}
	if r.connectTimeout <= 0 {
		r.connectTimeout = 30 * time.Second
	}
	r.keepalive = opts.KeepaliveInterval
	if r.keepalive == 0 {
		if r.keepalive, err = cfgSeconds(cfg, alias, "ServerAliveInterval"); err != nil {
			return nil, err
		}
	}
	if r.keepalive == 0 {
		r.keepalive = 15 * time.Second
	}

	if parent != nil {
		return r, nil // a hop's own ProxyJump is not followed
	}
	jump := opts.ProxyJump
	if jump == "" {
		if jump, err = cfg.get(alias, "ProxyJump"); err != nil {
			return nil, err
		}
	}
	if jump != "" && !strings.EqualFold(jump, "none") {
		for _, hop := range strings.Split(jump, ",") {
			ho, err := parseJump(strings.TrimSpace(hop))
			if err != nil {
				return nil, err
			}
			ho.AcceptNewHostKey = opts.AcceptNewHostKey
			ho.ConnectTimeout = opts.ConnectTimeout
			ho.Prompt, ho.Logf = opts.Prompt, opts.Logf
			jr, err := resolveWith(ho, cfg, r)
			if err != nil {
				return nil, err
			}
			r.jumps = append(r.jumps, jr)
		}
	}
	return r, nil
}

func cfgSeconds(cfg *sshConfig, alias, key string) (time.Duration, error) {
	v, err := cfg.get(alias, key)
	if err != nil || v == "" {
		return 0, err
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 0 {
		return 0, &ConfigError{Msg: fmt.Sprintf("%s: bad %s %q for %s", cfg.path, key, v, alias)}
	}
	if n == 0 {
		return -1, nil
	}
	return time.Duration(n) * time.Second, nil
}

// parseJump parses one ProxyJump hop, "[user@]host[:port]" (or an
// ssh://[user@]host[:port] URI).
func parseJump(hop string) (Options, error) {
	var o Options
	s := strings.TrimPrefix(hop, "ssh://")
	if s == "" {
		return o, &ConfigError{Msg: fmt.Sprintf("bad ProxyJump hop %q", hop)}
	}
	if i := strings.LastIndex(s, "@"); i >= 0 {
		o.User, s = s[:i], s[i+1:]
		if o.User == "" {
			return o, &ConfigError{Msg: fmt.Sprintf("bad ProxyJump hop %q: empty user", hop)}
		}
	}
	host, port := s, ""
	switch {
	case strings.HasPrefix(s, "["):
		end := strings.Index(s, "]")
		if end < 0 {
			return o, &ConfigError{Msg: fmt.Sprintf("bad ProxyJump hop %q: unclosed [", hop)}
		}
		host, port = s[1:end], strings.TrimPrefix(s[end+1:], ":")
		if s[end+1:] != "" && !strings.HasPrefix(s[end+1:], ":") {
			return o, &ConfigError{Msg: fmt.Sprintf("bad ProxyJump hop %q", hop)}
		}
	case strings.Count(s, ":") == 1:
		i := strings.Index(s, ":")
		host, port = s[:i], s[i+1:]
	}
	if host == "" || strings.ContainsAny(host, " \t/@") {
		return o, &ConfigError{Msg: fmt.Sprintf("bad ProxyJump hop %q: bad host", hop)}
	}
	o.Host = host
	if port != "" {
		p, err := strconv.Atoi(port)
		if err != nil || p <= 0 || p > 65535 {
			return o, &ConfigError{Msg: fmt.Sprintf("bad ProxyJump hop %q: bad port", hop)}
		}
		o.Port = p
	}
	return o, nil
}

func currentUser() string {
	if u, err := user.Current(); err == nil {
		return u.Username
	}
	return os.Getenv("USER")
}
