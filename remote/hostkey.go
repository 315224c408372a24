package remote

import (
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"

	"github.com/skeema/knownhosts"
	"golang.org/x/crypto/ssh"
	xknownhosts "golang.org/x/crypto/ssh/knownhosts"
)

// HostKeyError is a host key that is not trusted: unknown (no entry for
// the host) or changed (entries exist, none matches).
type HostKeyError struct {
	Host        string // as written in known_hosts: host or [host]:port
	Port        int
	KeyType     string // offered by the server
	Fingerprint string // SHA256:… of the offered key
	File        string // the known_hosts file consulted (and written by accept-new)
	// Known lists the entries that did not match ("file:line type SHA256:…").
	Known []string
	// Unknown is true when no entry exists for the host.
	Unknown bool
	// NoCommonAlgorithm: the server offered none of the key types known for it.
	NoCommonAlgorithm bool
	Err               error
}

func (e *HostKeyError) Error() string {
	bare := strings.TrimSuffix(strings.TrimPrefix(e.Host, "["), fmt.Sprintf("]:%d", e.Port))
	switch {
	case e.Unknown:
		scan := "ssh-keyscan"
		if e.Port != 22 {
			scan += fmt.Sprintf(" -p %d", e.Port)
		}
		return fmt.Sprintf("host key verification failed: %s is not a known host; it offered %s key %s. "+
			"Check that fingerprint with the cluster's admins, then add the key: %s %s >> %s "+
			"(or set accept-new to trust a first key)", e.Host, e.KeyType, e.Fingerprint, scan, bare, e.File)
	case e.NoCommonAlgorithm:
		return fmt.Sprintf("HOST KEY VERIFICATION FAILED: %s offered none of the key types recorded for it (%s); "+
			"the host key may have been replaced — possible man-in-the-middle attack. If the change is legitimate, "+
			"remove the old entries with: ssh-keygen -R '%s' -f %s",
			e.Host, strings.Join(e.Known, "; "), e.Host, e.File)
	default:
		return fmt.Sprintf("HOST KEY VERIFICATION FAILED: REMOTE HOST IDENTIFICATION HAS CHANGED for %s: "+
			"it offered %s key %s, but %s; possible man-in-the-middle attack. If the change is legitimate, "+
			"remove the old entry with: ssh-keygen -R '%s' -f %s",
			e.Host, e.KeyType, e.Fingerprint, "known_hosts has "+strings.Join(e.Known, "; "), e.Host, e.File)
	}
}

func (e *HostKeyError) Unwrap() error { return e.Err }

// hostKeyChecker checks one handshake's host key against known_hosts.
type hostKeyChecker struct {
	cfg   *resolved
	db    *knownhosts.HostKeyDB
	err   error // the *HostKeyError the callback returned, if any
	algos []string
}

// knownHostsMu serialises accept-new appends within this process.
var knownHostsMu sync.Mutex

func newHostKeyChecker(cfg *resolved) (*hostKeyChecker, error) {
	var files []string
	for _, f := range append([]string{cfg.knownHosts}, cfg.globalKnown...) {
		if _, err := os.Stat(f); err == nil {
			files = append(files, f)
		} else if !errors.Is(err, fs.ErrNotExist) {
			return nil, &ConfigError{Msg: "known_hosts " + f, Err: err}
		}
	}
	db, err := knownhosts.NewDB(files...)
	if err != nil {
		return nil, &ConfigError{Msg: "reading known_hosts", Err: err}
	}
	return &hostKeyChecker{cfg: cfg, db: db}, nil
}

// algorithms returns the host key algorithms known for addr, so the
// server is asked for a key we can check (nil: the ssh defaults).
func (h *hostKeyChecker) algorithms(addr string) []string {
	h.algos = h.db.HostKeyAlgorithms(addr)
	return h.algos
}

func (h *hostKeyChecker) callback(hostname string, remote net.Addr, key ssh.PublicKey) error {
	err := h.db.HostKeyCallback()(hostname, remote, key)
	if err == nil {
		return nil
	}
	var ke *xknownhosts.KeyError
	if !errors.As(err, &ke) {
		var re *xknownhosts.RevokedError
		if errors.As(err, &re) {
			h.err = fmt.Errorf("host key verification failed: %s offered a revoked key (%s line %d): %w",
				hostname, re.Revoked.Filename, re.Revoked.Line, err)
			return h.err
		}
		return err
	}
	e := &HostKeyError{
		Host:        knownhosts.Normalize(hostname),
		Port:        h.cfg.port,
		KeyType:     key.Type(),
		Fingerprint: ssh.FingerprintSHA256(key),
		File:        h.cfg.knownHosts,
		Unknown:     len(ke.Want) == 0,
		Err:         err,
	}
	for _, w := range ke.Want {
		e.Known = append(e.Known, fmt.Sprintf("%s:%d %s %s", w.Filename, w.Line, w.Key.Type(), ssh.FingerprintSHA256(w.Key)))
	}
	if e.Unknown && h.cfg.acceptNew {
		if werr := appendKnownHost(h.cfg.knownHosts, hostname, remote, key); werr != nil {
			h.err = fmt.Errorf("accept-new: adding the key of %s to %s: %w", e.Host, h.cfg.knownHosts, werr)
			return h.err
		}
		h.cfg.logf("remote: permanently added %s key %s for %s to %s", key.Type(), e.Fingerprint, e.Host, h.cfg.knownHosts)
		return nil
	}
	h.err = e
	return e
}

// explain recognises a handshake that failed because the server has none
// of the key types known_hosts lists for it.
func (h *hostKeyChecker) explain(err error, addr string) error {
	if len(h.algos) == 0 || !strings.Contains(err.Error(), "no common algorithm for host key") {
		return err
	}
	e := &HostKeyError{Host: knownhosts.Normalize(addr), Port: h.cfg.port, File: h.cfg.knownHosts, NoCommonAlgorithm: true, Err: err}
	for _, k := range h.db.HostKeys(addr) {
		e.Known = append(e.Known, fmt.Sprintf("%s %s", k.Type(), ssh.FingerprintSHA256(k)))
	}
	return e
}

// appendKnownHost adds a line for hostname the way OpenSSH's accept-new
// does, creating the file (0600) and its directory (0700) when missing.
func appendKnownHost(file, hostname string, remote net.Addr, key ssh.PublicKey) error {
	knownHostsMu.Lock()
	defer knownHostsMu.Unlock()
	if err := os.MkdirAll(filepath.Dir(file), 0o700); err != nil {
		return err
	}
	f, err := os.OpenFile(file, os.O_RDWR|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		return err
	}
	// Start on a fresh line if the file does not end with one.
	if fi, err := f.Stat(); err == nil && fi.Size() > 0 {
		last := make([]byte, 1)
		if _, err := f.ReadAt(last, fi.Size()-1); err == nil && last[0] != '\n' {
			if _, err := f.Write([]byte("\n")); err != nil {
				_ = f.Close()
				return err
			}
		}
	}
	if err := knownhosts.WriteKnownHost(f, hostname, remote, key); err != nil {
		_ = f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		_ = f.Close()
		return err
	}
	return f.Close()
}
