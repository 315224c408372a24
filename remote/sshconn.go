package remote

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"time"

	"github.com/pkg/sftp"
)

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

// sftpEnded says whether cl is the connection's SFTP client and has ended.
func (c *conn) sftpEnded(cl *sftp.Client) bool {
	c.sftpMu.Lock()
	defer c.sftpMu.Unlock()
	if c.sftp != cl {
		return true // already replaced
	}
	select {
	case <-c.sftpOK:
		return true
	default:
		return false
	}
}
