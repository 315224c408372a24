package cli

import (
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/nemorl/nemorl-slurm/ledger"
)

// Exit codes (README "Exit codes").
const (
	ExitOK        = 0 // done: scored, or a policy failure with its reward
	ExitInternal  = 1 // a bug or an unexpected local failure
	ExitUsage     = 2 // bad command line or config
	ExitInfra     = 3 // infrastructure failure: no reward, mask the sample
	ExitIntegrity = 4 // integrity violation: records rejected
)

// Error is a user-facing failure with its exit code and an optional hint.
type Error struct {
	Code int
	Err  error
	Hint string
}

func (e *Error) Error() string { return e.Err.Error() }
func (e *Error) Unwrap() error { return e.Err }

func usageErr(format string, args ...any) error {
	return &Error{Code: ExitUsage, Err: fmt.Errorf(format, args...)}
}

func withCode(code int, err error, hint string) error {
	if err == nil {
		return nil
	}
	return &Error{Code: code, Err: err, Hint: hint}
}

// report prints err to stderr and returns its exit code and hint. Errors
// without a code that name a bad argument (an episode id that is not one,
// or not in the ledger) are usage errors.
func report(stderr io.Writer, err error) (int, string) {
	var e *Error
	code := ExitInternal
	hint := ""
	switch {
	case errors.As(err, &e):
		code, hint = e.Code, e.Hint
	case errors.Is(err, ledger.ErrBadEpisodeID):
		code, hint = ExitUsage, "episode ids look like ep-20261129T214501Z-3f9a1c2b: nemorl-slurm list shows them"
	case errors.Is(err, ledger.ErrNotInLedger):
		code, hint = ExitUsage, "nemorl-slurm list shows the episodes in the ledger"
	}
	msg := err.Error()
	if strings.Contains(msg, "\n") {
		fmt.Fprintf(stderr, "nemorl-slurm: %s\n", strings.ReplaceAll(msg, "\n", "\n  "))
	} else {
		fmt.Fprintf(stderr, "nemorl-slurm: %s\n", msg)
	}
	if hint != "" {
		fmt.Fprintf(stderr, "hint: %s\n", hint)
	}
	return code, hint
}
