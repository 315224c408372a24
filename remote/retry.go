package remote

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math/rand/v2"
	"path"
	"time"
)

// ConnError is how a Host tells WithRetry that one attempt failed for want
// of a working connection, and how far the call got before it did. Any
// other error (a *CommandError, a file error, a cancelled ctx, a host key
// or authentication failure) is final. It matches ErrConnectionLost when
// the connection was lost during the call.
type ConnError struct {
	Stage ConnStage
	Err   error
}

// ConnStage is how far a call got before its connection failed.
type ConnStage int

const (
	// NotConnected: the connection could not be made; nothing was sent.
	NotConnected ConnStage = iota
	// LostBeforeStart: the connection was lost before the command was
	// started; it did not run, whatever it is.
	LostBeforeStart
	// LostAfterStart: the connection was lost after the command (or file
	// request) may have reached the server; it may have taken effect.
	LostAfterStart
	// SessionEnded: the connection's SFTP session ended while the
	// connection stayed up; the next attempt starts a new one.
	SessionEnded
)

func (e *ConnError) lost() bool { return e.Stage == LostBeforeStart || e.Stage == LostAfterStart }

func (e *ConnError) Error() string {
	if e.lost() {
		return ErrConnectionLost.Error() + ": " + e.Err.Error()
	}
	return e.Err.Error()
}

// Unwrap returns the cause, and ErrConnectionLost when the connection was
// lost.
func (e *ConnError) Unwrap() []error {
	if e.lost() {
		return []error{ErrConnectionLost, e.Err}
	}
	return []error{e.Err}
}

// RetryPolicy says how often and how soon WithRetry tries a call again.
type RetryPolicy struct {
	// MaxRetries is how many times a call is tried again after its first
	// attempt. Default 3; negative: never.
	MaxRetries int
	// MinBackoff is the wait before the first retry, doubled for each next
	// one up to MaxBackoff; each wait is drawn from [d/2, d). Defaults
	// 250ms and 8s; a negative MinBackoff: no wait.
	MinBackoff, MaxBackoff time.Duration
	// Logf, when set, receives one line per retry.
	Logf func(format string, args ...any)
}

// Default retry policy (and SSH's reconnection backoff).
const (
	defaultRetries = 3
	minBackoff     = 250 * time.Millisecond
	maxBackoff     = 8 * time.Second
)

func (p RetryPolicy) withDefaults() RetryPolicy {
	switch {
	case p.MaxRetries == 0:
		p.MaxRetries = defaultRetries
	case p.MaxRetries < 0:
		p.MaxRetries = 0
	}
	if p.MinBackoff == 0 {
		p.MinBackoff = minBackoff
	}
	if p.MaxBackoff == 0 {
		p.MaxBackoff = maxBackoff
	}
	if p.Logf == nil {
		p.Logf = func(string, ...any) {}
	}
	return p
}

// backoff is the wait before retry number attempt+1.
func (p RetryPolicy) backoff(attempt int) time.Duration {
	if p.MinBackoff <= 0 {
		return 0
	}
	d := p.MinBackoff
	for i := 0; i < attempt && d < p.MaxBackoff; i++ {
		d *= 2
	}
	return jitter(min(d, p.MaxBackoff))
}

// jitter returns a duration in [d/2, d).
func jitter(d time.Duration) time.Duration {
	return d/2 + time.Duration(rand.Int64N(int64(d/2)+1))
}

// WithRetry is h with every call that failed for want of a connection (h
// returned a *ConnError) tried again, at most p.MaxRetries times, after a
// jittered exponential backoff:
//
//   - a call whose connection could not be made, or was lost before the
//     command started, is tried again, whatever the command;
//   - a command whose connection was lost after it started is re-run only
//     when it is Idempotent (with the same stdin, read once up front); any
//     other command (sbatch) returns an *OutcomeUnknownError, matching
//     ErrOutcomeUnknown, and is never re-run;
//   - file operations are idempotent: always tried again;
//   - every other error comes back as h returned it, the first time: a
//     *CommandError (the command ran and failed), a file error, ctx's.
//
// A retry is logged through p.Logf; once the retries are spent the last
// attempt's error is returned. A ctx that ends during a backoff ends the
// call with ctx's error. SSH composes it over its single attempts.
func WithRetry(h Host, p RetryPolicy) Host {
	return &retryHost{Host: h, p: p.withDefaults()}
}

type retryHost struct {
	Host
	p RetryPolicy
}

func (r *retryHost) Run(ctx context.Context, cmd Command) (*Result, error) {
	if len(cmd.Argv) == 0 {
		return r.Host.Run(ctx, cmd) // h says what is wrong with it
	}
	var replay []byte
	if cmd.Idempotent && cmd.Stdin != nil {
		// A re-run needs the same input again.
		b, err := io.ReadAll(cmd.Stdin)
		if err != nil {
			return nil, fmt.Errorf("%s: %s: reading stdin: %w", r.Name(), cmd, err)
		}
		replay = b
	}
	for attempt := 0; ; attempt++ {
		if replay != nil {
			cmd.Stdin = bytes.NewReader(replay)
		}
		res, err := r.Host.Run(ctx, cmd)
		var ce *ConnError
		if err == nil || !errors.As(err, &ce) {
			return res, err
		}
		if ce.Stage == LostAfterStart && !cmd.Idempotent {
			return nil, &OutcomeUnknownError{Host: r.Name(), Command: cmd.String(), Err: ce}
		}
		if attempt >= r.p.MaxRetries {
			return nil, err
		}
		switch ce.Stage {
		case LostBeforeStart:
			r.p.Logf("remote: %s: %s: connection lost before the command started; retrying", r.Name(), cmd)
		case LostAfterStart:
			r.p.Logf("remote: %s: %s: connection lost while running; re-running (idempotent)", r.Name(), cmd)
		}
		if err := sleepCtx(ctx, r.p.backoff(attempt)); err != nil {
			return nil, fmt.Errorf("%s: %s: %w", r.Name(), cmd, err)
		}
	}
}

// file runs one file operation (op on p) until it succeeds, fails for
// another reason than the connection, or the retries are spent.
func (r *retryHost) file(ctx context.Context, op, p string, attempt func() error) error {
	for n := 0; ; n++ {
		err := attempt()
		var ce *ConnError
		if err == nil || !errors.As(err, &ce) || n >= r.p.MaxRetries {
			return err
		}
		switch ce.Stage {
		case LostBeforeStart, LostAfterStart:
			r.p.Logf("remote: %s: %s %s: connection lost; retrying", r.Name(), op, p)
		case SessionEnded:
			r.p.Logf("remote: %s: sftp session ended; restarting it", r.Name())
		}
		if err := sleepCtx(ctx, r.p.backoff(n)); err != nil {
			return fmt.Errorf("%s: %w", r.Name(), &fs.PathError{Op: op, Path: p, Err: err})
		}
	}
}

func (r *retryHost) MkdirAll(ctx context.Context, dir string, mode fs.FileMode) error {
	return r.file(ctx, "mkdir", path.Clean(dir), func() error { return r.Host.MkdirAll(ctx, dir, mode) })
}

func (r *retryHost) WriteFile(ctx context.Context, p string, data []byte, mode fs.FileMode) error {
	return r.file(ctx, "write", p, func() error { return r.Host.WriteFile(ctx, p, data, mode) })
}

func (r *retryHost) ReadFile(ctx context.Context, p string) (b []byte, err error) {
	err = r.file(ctx, "read", p, func() error { b, err = r.Host.ReadFile(ctx, p); return err })
	return b, err
}

func (r *retryHost) ReadTail(ctx context.Context, p string, n int64) (b []byte, err error) {
	err = r.file(ctx, "read", p, func() error { b, err = r.Host.ReadTail(ctx, p, n); return err })
	return b, err
}

func (r *retryHost) Stat(ctx context.Context, p string) (fi fs.FileInfo, err error) {
	err = r.file(ctx, "stat", p, func() error { fi, err = r.Host.Stat(ctx, p); return err })
	return fi, err
}

func (r *retryHost) Lstat(ctx context.Context, p string) (fi fs.FileInfo, err error) {
	err = r.file(ctx, "lstat", p, func() error { fi, err = r.Host.Lstat(ctx, p); return err })
	return fi, err
}

func (r *retryHost) Remove(ctx context.Context, p string) error {
	return r.file(ctx, "remove", p, func() error { return r.Host.Remove(ctx, p) })
}

// sleepCtx waits d, or until ctx ends (its error).
func sleepCtx(ctx context.Context, d time.Duration) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if d <= 0 {
		return nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
