package remote

import (
	"context"
	"errors"
	"time"
)

// The shared connection of an SSH: made on first use, made again (once,
// for all the callers waiting on it) after it is lost, with a backoff
// between failed dials that grows with consecutive failures
// (minBackoff << failures, up to maxBackoff). The backoff is the pool's,
// not a caller's: every caller waits out the same one.

type dialCall struct {
	done chan struct{}
	c    *conn
	err  error
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
