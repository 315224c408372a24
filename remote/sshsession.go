package remote

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"golang.org/x/crypto/ssh"

	"github.com/nemorl/nemorl-slurm/internal/shell"
)

// runAttempt is one attempt at cmd (sshOnce.Run): on the shared connection
// (made first if there is none), in one session. A connection that could
// not be made, or was lost during the call, comes back as a *ConnError
// saying whether the command had started; WithRetry decides what to do
// with it (SSH.Run). A session the server refused (its MaxSessions) is
// waited for here: nothing ran, and the connection is fine.
func (s *SSH) runAttempt(ctx context.Context, cmd Command) (*Result, error) {
	if len(cmd.Argv) == 0 {
		return nil, fmt.Errorf("%s: empty command", s.name)
	}
	fail := func(err error) (*Result, error) { return nil, fmt.Errorf("%s: %s: %w", s.name, cmd, err) }
	if err := ctx.Err(); err != nil {
		return fail(err)
	}
	line := "exec " + shell.Join(cmd.Argv)
	for refused := 0; ; {
		c, err := s.conn(ctx) // waits out the pool's backoff
		if err != nil {
			if ctx.Err() != nil {
				return fail(ctx.Err())
			}
			if isPermanent(err) {
				return fail(err)
			}
			return fail(&ConnError{Stage: NotConnected, Err: err})
		}
		res, started, err := s.runOnce(ctx, c, cmd, line)
		var ce *CommandError
		if err == nil || errors.As(err, &ce) {
			return res, err
		}
		if ctx.Err() != nil {
			return fail(ctx.Err())
		}
		if errors.Is(err, errSessionRefused) && refused < maxRefused {
			// The server refused a new session: nothing ran, so wait a
			// little and try again. sshd frees a finished session's slot a
			// moment after the channel closes, so a full semaphore can race
			// it; that is not a lost connection.
			refused++
			if err := sleepCtx(ctx, jitter(20*time.Millisecond<<min(refused, 6))); err != nil {
				return fail(err)
			}
			continue
		}
		if !c.lost(err) {
			return fail(err)
		}
		stage := LostBeforeStart
		if started {
			stage = LostAfterStart
		}
		return fail(&ConnError{Stage: stage, Err: err})
	}
}

var errSessionRefused = errors.New("server refused a new session")

// maxRefused bounds the retries of a session the server would not open.
const maxRefused = 30

func (s *SSH) acquire(ctx context.Context) error {
	select {
	case s.sem <- struct{}{}:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (s *SSH) release() { <-s.sem }

// runOnce runs the command (as line) in one session of c, streaming its
// stdin. started says whether the exec request may have reached the server.
func (s *SSH) runOnce(ctx context.Context, c *conn, cmd Command, line string) (res *Result, started bool, err error) {
	stdin := cmd.Stdin
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
