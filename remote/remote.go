// Package remote runs commands and touches files on the machine that talks to
// Slurm: the login node itself (Local) or a login node reached over SSH and
// SFTP (SSH). Both satisfy Host, and one shared suite (remote/remotetest)
// tests every implementation.
package remote

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"strings"
	"unicode/utf8"

	"github.com/nemorl/nemorl-slurm/internal/shell"
)

// Command is one program invocation. Argv[0] is looked up on the remote PATH.
// Stdin, when set, is streamed to the command.
type Command struct {
	Argv  []string
	Stdin io.Reader
	// Idempotent marks a command that may be re-run after a dropped
	// connection (sacct, squeue). sbatch is never idempotent.
	Idempotent bool
	// Label names what a script does ("stage", "collect"), for counting
	// (Counted) where argv[0] is a shell; empty: the program's name.
	Label string
}

// String renders the command as a shell line.
func (c Command) String() string { return shell.Join(c.Argv) }

// Brief renders the command as a shell line, cut for a message as Brief
// cuts it.
func (c Command) Brief() string { return Brief(c.String()) }

// briefMax is the most bytes of a command line a message shows.
const briefMax = 400

// Brief is line, a command line, as a message shows it: whole up to
// briefMax bytes, else its head and how much was left out. A poll of
// 5,000 jobs names 30 KB of ids: one failed sacct would otherwise print
// them all, in every log line and error of the poll.
func Brief(line string) string {
	if len(line) <= briefMax {
		return line
	}
	cut := briefMax
	for cut > 0 && !utf8.RuneStart(line[cut]) {
		cut--
	}
	return fmt.Sprintf("%s… (%d more bytes)", line[:cut], len(line)-cut)
}

// Result is what a finished command produced.
type Result struct {
	Stdout     []byte
	Stderr     []byte
	ExitStatus int
}

// Runner runs commands.
type Runner interface {
	// Run runs cmd to completion. A command that ran and exited non-zero
	// returns its Result and a *CommandError; a command that could not be
	// run (or whose connection was lost) returns a nil Result and an error.
	Run(ctx context.Context, cmd Command) (*Result, error)
}

// Files is file access on the remote side. Paths are absolute.
type Files interface {
	// MkdirAll makes dir and missing parents with mode (parents too).
	MkdirAll(ctx context.Context, dir string, mode fs.FileMode) error
	// WriteFile writes data atomically: a temp file in the same directory,
	// chmod to mode, then rename over path.
	WriteFile(ctx context.Context, path string, data []byte, mode fs.FileMode) error
	ReadFile(ctx context.Context, path string) ([]byte, error)
	// ReadTail returns at most the last n bytes of path.
	ReadTail(ctx context.Context, path string, n int64) ([]byte, error)
	Stat(ctx context.Context, path string) (fs.FileInfo, error)
	// Lstat is Stat without following a final symlink: one SFTP request.
	// What a job of the user may have planted (a FIFO, a symlink to
	// /dev/zero) is inspected with it before anything is read.
	Lstat(ctx context.Context, path string) (fs.FileInfo, error)
	// Remove removes a file or an empty directory.
	Remove(ctx context.Context, path string) error
}

// Host is a Runner with file access.
type Host interface {
	Runner
	Files
	// Name says where commands run ("local", "alice@login1:22").
	Name() string
	Close() error
}

// CommandError is a command that ran and exited non-zero.
type CommandError struct {
	Host       string
	Command    string
	ExitStatus int
	Stderr     string // trimmed
}

func (e *CommandError) Error() string {
	msg := fmt.Sprintf("%s: %s: exit status %d", e.Host, Brief(e.Command), e.ExitStatus)
	if e.Stderr != "" {
		msg += ": " + e.Stderr
	}
	return msg
}

// TrimStderr keeps the last few meaningful lines of stderr for messages.
func TrimStderr(b []byte) string {
	const maxLines, maxBytes = 5, 800
	s := strings.TrimSpace(string(b))
	lines := strings.Split(s, "\n")
	if len(lines) > maxLines {
		lines = lines[len(lines)-maxLines:]
	}
	s = strings.Join(lines, "\n")
	if len(s) > maxBytes {
		s = "…" + s[len(s)-maxBytes:]
	}
	return s
}

// ErrOutcomeUnknown is matched (errors.Is) by the error of a command that was
// started but whose connection was lost before it reported an exit status:
// it may or may not have run, and it was not re-run because it is not
// Idempotent. A caller that gets it must find out what happened (for sbatch:
// look for the job by its --comment tag) before trying again.
var ErrOutcomeUnknown = errors.New("outcome unknown")

// ErrConnectionLost is matched by errors caused by a connection that dropped.
var ErrConnectionLost = errors.New("connection lost")

// ErrClosed is returned by calls on a Host after Close.
var ErrClosed = errors.New("remote: host is closed")

// OutcomeUnknownError is a non-idempotent command whose connection dropped
// after it was started. It matches ErrOutcomeUnknown and wraps the cause.
type OutcomeUnknownError struct {
	Host    string
	Command string
	Err     error
}

func (e *OutcomeUnknownError) Error() string {
	return fmt.Sprintf("%s: %s: connection lost while the command was running; outcome unknown (it may or may not have taken effect; not re-run because it is not idempotent): %v",
		e.Host, Brief(e.Command), e.Err)
}

// Unwrap returns ErrOutcomeUnknown and the cause.
func (e *OutcomeUnknownError) Unwrap() []error { return []error{ErrOutcomeUnknown, e.Err} }
