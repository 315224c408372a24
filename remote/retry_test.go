package remote

// Tests of WithRetry over a scripted Host: no network.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"strings"
	"sync"
	"testing"
	"time"
)

// scriptHost is a Host whose every call returns the next step of a script
// (the last step repeats), recording what each attempt got and when.
type scriptHost struct {
	Host // nil: only Run and Stat are scripted

	steps []step
	// onCall, when set, runs at the start of every call (attempt 0, 1, …).
	onCall func(attempt int)

	mu     sync.Mutex
	calls  []time.Time
	stdins []string
}

type step struct {
	res *Result
	err error
}

func (h *scriptHost) Name() string { return "alice@login1:22" }

func (h *scriptHost) next(cmd Command) (*Result, error) {
	h.mu.Lock()
	n := len(h.calls)
	h.calls = append(h.calls, time.Now())
	h.mu.Unlock()
	if h.onCall != nil {
		h.onCall(n)
	}
	if cmd.Stdin != nil {
		b, _ := io.ReadAll(cmd.Stdin)
		h.mu.Lock()
		h.stdins = append(h.stdins, string(b))
		h.mu.Unlock()
	}
	s := h.steps[min(n, len(h.steps)-1)]
	return s.res, s.err
}

func (h *scriptHost) Run(ctx context.Context, cmd Command) (*Result, error) { return h.next(cmd) }

func (h *scriptHost) Stat(ctx context.Context, p string) (fs.FileInfo, error) {
	_, err := h.next(Command{})
	return nil, err
}

func (h *scriptHost) attempts() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.calls)
}

// gaps are the waits between consecutive attempts.
func (h *scriptHost) gaps() []time.Duration {
	h.mu.Lock()
	defer h.mu.Unlock()
	var g []time.Duration
	for i := 1; i < len(h.calls); i++ {
		g = append(g, h.calls[i].Sub(h.calls[i-1]))
	}
	return g
}

// What a Host says, as SSH's single attempt says it ("host: command: …").
func connErr(stage ConnStage) error {
	return fmt.Errorf("alice@login1:22: cmd: %w", &ConnError{Stage: stage, Err: errors.New("EOF")})
}

var (
	stepOK      = step{res: &Result{Stdout: []byte("ok\n")}}
	notConn     = step{err: connErr(NotConnected)}
	lostBefore  = step{err: connErr(LostBeforeStart)}
	lostAfter   = step{err: connErr(LostAfterStart)}
	failedCmd   = step{res: &Result{ExitStatus: 1}, err: &CommandError{Host: "alice@login1:22", Command: "sacct", ExitStatus: 1}}
	otherErr    = step{err: errors.New("alice@login1:22: cmd: stdin pipe: broken")}
	sessionGone = step{err: connErr(SessionEnded)}
)

func TestWithRetry(t *testing.T) {
	const minB, maxB = 20 * time.Millisecond, 50 * time.Millisecond
	for _, tc := range []struct {
		name       string
		idempotent bool
		retries    int // RetryPolicy.MaxRetries
		steps      []step
		cancelAt   int // cancel ctx during this attempt (1-based; 0: never)

		attempts int
		ok       bool
		is       []error // errors.Is must match each
		isNot    []error // and none of these
		logs     []string
		asIs     bool // err is the last attempt's, unchanged
	}{
		{name: "idempotent lost after start, then ok", idempotent: true, retries: 3, steps: []step{lostAfter, stepOK},
			attempts: 2, ok: true, logs: []string{"sacct -j 1: connection lost while running; re-running (idempotent)"}},
		{name: "idempotent retried up to the limit", idempotent: true, retries: 3, steps: []step{lostAfter},
			attempts: 4, is: []error{ErrConnectionLost}, isNot: []error{ErrOutcomeUnknown}, asIs: true,
			logs: []string{"re-running (idempotent)", "re-running (idempotent)", "re-running (idempotent)"}},
		{name: "non-idempotent lost after start: outcome unknown, not re-run", retries: 3, steps: []step{lostAfter, stepOK},
			attempts: 1, is: []error{ErrOutcomeUnknown, ErrConnectionLost}},
		{name: "non-idempotent lost before start is retried", retries: 3, steps: []step{lostBefore, lostBefore, stepOK},
			attempts: 3, ok: true, logs: []string{"connection lost before the command started; retrying", "connection lost before the command started; retrying"}},
		{name: "not connected: retried without a line of its own", retries: 2, steps: []step{notConn},
			attempts: 3, isNot: []error{ErrConnectionLost, ErrOutcomeUnknown}, asIs: true},
		{name: "not connected, then ok", retries: 2, steps: []step{notConn, stepOK}, attempts: 2, ok: true},
		{name: "command error never retried", idempotent: true, retries: 3, steps: []step{failedCmd, stepOK},
			attempts: 1, isNot: []error{ErrConnectionLost}, asIs: true},
		{name: "other error never retried", idempotent: true, retries: 3, steps: []step{otherErr, stepOK}, attempts: 1, asIs: true},
		{name: "negative retries: never", idempotent: true, retries: -1, steps: []step{lostAfter, stepOK},
			attempts: 1, is: []error{ErrConnectionLost}, asIs: true},
		{name: "cancel during the backoff stops retries", idempotent: true, retries: 5, steps: []step{lostAfter}, cancelAt: 1,
			attempts: 1, is: []error{context.Canceled}, logs: []string{"re-running (idempotent)"}},
		{name: "cancel during the second attempt", retries: 5, steps: []step{notConn}, cancelAt: 2,
			attempts: 2, is: []error{context.Canceled}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithCancel(t.Context())
			defer cancel()
			h := &scriptHost{steps: tc.steps}
			h.onCall = func(n int) {
				if n+1 == tc.cancelAt {
					cancel()
				}
			}
			var logs logLines
			r := WithRetry(h, RetryPolicy{MaxRetries: tc.retries, MinBackoff: minB, MaxBackoff: maxB, Logf: logs.logf})
			cmd := Command{Argv: []string{"sacct", "-j", "1"}, Idempotent: tc.idempotent}
			if !tc.idempotent {
				cmd.Argv = []string{"sbatch", "x.sbatch"}
			}
			res, err := r.Run(ctx, cmd)
			if got := h.attempts(); got != tc.attempts {
				t.Errorf("%d attempts, want %d (err %v)", got, tc.attempts, err)
			}
			if tc.ok != (err == nil) || (err == nil && string(res.Stdout) != "ok\n") {
				t.Fatalf("Run = %v, %v; want ok %v", res, err, tc.ok)
			}
			for _, target := range tc.is {
				if !errors.Is(err, target) {
					t.Errorf("err %v does not match %v", err, target)
				}
			}
			for _, target := range tc.isNot {
				if errors.Is(err, target) {
					t.Errorf("err %v matches %v", err, target)
				}
			}
			if errors.Is(err, ErrOutcomeUnknown) {
				var oue *OutcomeUnknownError
				if !errors.As(err, &oue) || oue.Host != "alice@login1:22" || oue.Command != "sbatch x.sbatch" {
					t.Errorf("err = %#v, want *OutcomeUnknownError for sbatch x.sbatch", err)
				}
			}
			if tc.asIs && err != tc.steps[min(h.attempts(), len(tc.steps))-1].err {
				t.Errorf("err %v is not the last attempt's, as it was", err)
			}
			if ce := (*CommandError)(nil); errors.As(tc.steps[0].err, &ce) && (res == nil || !errors.As(err, &ce)) {
				t.Errorf("command error: Run = %v, %v; want its result and *CommandError", res, err)
			}
			logs.check(t, tc.logs)
			// Each wait is jittered in [d/2, d), d doubling from minB up to maxB.
			for i, g := range h.gaps() {
				d := min(minB<<i, maxB)
				if g < d/2 {
					t.Errorf("wait %d: %v, want at least %v", i, g, d/2)
				}
			}
		})
	}
}

// TestWithRetryStdinReplayed: an idempotent command re-run gets its whole
// stdin again; a non-idempotent one retried before it started gets the
// reader as given (unread).
func TestWithRetryStdinReplayed(t *testing.T) {
	h := &scriptHost{steps: []step{lostAfter, lostBefore, stepOK}}
	r := WithRetry(h, RetryPolicy{MinBackoff: -1})
	if _, err := r.Run(t.Context(), Command{Argv: []string{"sh"}, Stdin: strings.NewReader("echo hi"), Idempotent: true}); err != nil {
		t.Fatal(err)
	}
	if len(h.stdins) != 3 || h.stdins[0] != "echo hi" || h.stdins[1] != "echo hi" || h.stdins[2] != "echo hi" {
		t.Errorf("stdin per attempt: %q", h.stdins)
	}
	// An unreadable stdin of an idempotent command: nothing runs.
	h = &scriptHost{steps: []step{stepOK}}
	r = WithRetry(h, RetryPolicy{})
	_, err := r.Run(t.Context(), Command{Argv: []string{"sh"}, Stdin: errReader{}, Idempotent: true})
	if err == nil || !strings.Contains(err.Error(), "alice@login1:22: sh: reading stdin: bad disk") || h.attempts() != 0 {
		t.Errorf("unreadable stdin: %v, %d attempts", err, h.attempts())
	}
}

type errReader struct{}

func (errReader) Read([]byte) (int, error) { return 0, errors.New("bad disk") }

// TestWithRetryFiles: file operations are idempotent; a lost connection or
// an ended SFTP session is tried again, a file error is not.
func TestWithRetryFiles(t *testing.T) {
	notExist := step{err: fmt.Errorf("alice@login1:22: %w", &fs.PathError{Op: "stat", Path: "/x", Err: fs.ErrNotExist})}
	for _, tc := range []struct {
		name     string
		steps    []step
		attempts int
		ok       bool
		logs     []string
	}{
		{"lost, then ok", []step{lostAfter, stepOK}, 2, true, []string{"stat /x: connection lost; retrying"}},
		{"sftp session ended, then ok", []step{sessionGone, stepOK}, 2, true, []string{"alice@login1:22: sftp session ended; restarting it"}},
		{"not connected, up to the limit", []step{notConn}, 3, false, nil},
		{"file error: not retried", []step{notExist, stepOK}, 1, false, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := &scriptHost{steps: tc.steps}
			var logs logLines
			r := WithRetry(h, RetryPolicy{MaxRetries: 2, MinBackoff: time.Millisecond, Logf: logs.logf})
			_, err := r.Stat(t.Context(), "/x")
			if h.attempts() != tc.attempts || tc.ok != (err == nil) {
				t.Errorf("%d attempts, err %v; want %d, ok %v", h.attempts(), err, tc.attempts, tc.ok)
			}
			logs.check(t, tc.logs)
		})
	}
	// A ctx that ends during the backoff: its error, as the file's.
	h := &scriptHost{steps: []step{lostAfter}}
	ctx, cancel := context.WithCancel(t.Context())
	h.onCall = func(int) { cancel() }
	_, err := WithRetry(h, RetryPolicy{MinBackoff: time.Hour}).Stat(ctx, "/x")
	var pe *fs.PathError
	if !errors.Is(err, context.Canceled) || !errors.As(err, &pe) || pe.Op != "stat" || pe.Path != "/x" || h.attempts() != 1 {
		t.Errorf("cancelled: %v, %d attempts", err, h.attempts())
	}
}

func TestRetryBackoff(t *testing.T) {
	p := RetryPolicy{}.withDefaults()
	if p.MaxRetries != 3 || p.MinBackoff != 250*time.Millisecond || p.MaxBackoff != 8*time.Second {
		t.Errorf("defaults %+v", p)
	}
	for attempt, want := range []time.Duration{250, 500, 1000, 2000, 4000, 8000, 8000, 8000} {
		want *= time.Millisecond
		for range 50 {
			if d := p.backoff(attempt); d < want/2 || d > want {
				t.Fatalf("backoff(%d) = %v, want in [%v, %v]", attempt, d, want/2, want)
			}
		}
	}
	if d := p.backoff(1 << 20); d > 8*time.Second {
		t.Errorf("backoff(huge) = %v", d)
	}
	if d := (RetryPolicy{MinBackoff: -1}).withDefaults().backoff(3); d != 0 {
		t.Errorf("no backoff: %v", d)
	}
	if p := (RetryPolicy{MaxRetries: -5}).withDefaults(); p.MaxRetries != 0 {
		t.Errorf("negative retries: %d", p.MaxRetries)
	}
}

// logLines records log lines.
type logLines struct {
	mu    sync.Mutex
	lines []string
}

func (l *logLines) logf(format string, args ...any) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.lines = append(l.lines, fmt.Sprintf(format, args...))
}

// check: one line per want, in order, each containing it and naming the host.
func (l *logLines) check(t *testing.T, want []string) {
	t.Helper()
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.lines) != len(want) {
		t.Errorf("logged %q, want %d lines like %q", l.lines, len(want), want)
		return
	}
	for i, w := range want {
		if !strings.Contains(l.lines[i], w) || !strings.HasPrefix(l.lines[i], "remote: alice@login1:22: ") {
			t.Errorf("line %d: %q, want %q", i, l.lines[i], w)
		}
	}
}
