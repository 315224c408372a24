package slurm

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/nemorl/nemorl-slurm/remote"
)

// Kind is a kind of Slurm command, which has a deadline of its own
// (Deadlines).
type Kind string

// The kinds of Slurm command the Client runs. The room probe (sinfo and
// squeue in one sh) is KindSinfo; sacct --version is KindSacct.
const (
	KindSbatch   Kind = "sbatch"
	KindSqueue   Kind = "squeue"
	KindSacct    Kind = "sacct"
	KindSinfo    Kind = "sinfo"
	KindScancel  Kind = "scancel"
	KindScontrol Kind = "scontrol"
)

// Deadlines bound how long one Slurm command of each kind may run. Under
// SlurmctldParameters=rl_enable, Slurm's client library answers a refused
// request by sleeping and asking again (1 s, 2 s, 3 s… from 23.11.5),
// without bound and without a word, then exits 0: one throttled command
// would otherwise hold a poll, a submission or a placement probe for
// minutes. A command past its deadline is stopped (locally its process
// group is killed; over SSH the remote command is sent SIGKILL and its
// session closed) and its outcome is unknown: a *DeadlineError, never a
// failure. A zero field takes its DefaultDeadlines value.
type Deadlines struct {
	Sbatch, Squeue, Sacct, Sinfo, Scancel, Scontrol time.Duration
}

// DefaultDeadlines are the deadlines of a Client that sets none: tens of
// seconds, far above what each command takes on a healthy cluster (tens
// to hundreds of milliseconds; sacct over a week of 15,000 jobs, 2 s in
// the lab). sacct and sbatch get longer: slurmdbd's answers grow with the
// history asked for, and a submission stopped at its deadline costs a
// look-up by its comment tag.
var DefaultDeadlines = Deadlines{
	Sbatch:   time.Minute,
	Squeue:   30 * time.Second,
	Sacct:    time.Minute,
	Sinfo:    30 * time.Second,
	Scancel:  30 * time.Second,
	Scontrol: 30 * time.Second,
}

// For is kind k's deadline: d's, else DefaultDeadlines'; an unknown kind
// gets the longest default.
func (d Deadlines) For(k Kind) time.Duration {
	pick := func(set, def time.Duration) time.Duration {
		if set > 0 {
			return set
		}
		return def
	}
	def := DefaultDeadlines
	switch k {
	case KindSbatch:
		return pick(d.Sbatch, def.Sbatch)
	case KindSqueue:
		return pick(d.Squeue, def.Squeue)
	case KindSacct:
		return pick(d.Sacct, def.Sacct)
	case KindSinfo:
		return pick(d.Sinfo, def.Sinfo)
	case KindScancel:
		return pick(d.Scancel, def.Scancel)
	case KindScontrol:
		return pick(d.Scontrol, def.Scontrol)
	}
	return max(def.Sbatch, def.Squeue, def.Sacct, def.Sinfo, def.Scancel, def.Scontrol)
}

// ErrDeadline is matched (errors.Is) by the error of a Slurm command
// stopped at its deadline (*DeadlineError).
var ErrDeadline = errors.New("no answer within the command's deadline")

// DeadlineError is a Slurm command stopped at its deadline. Its outcome is
// unknown: a query's answer is missing (the jobs it asked about are
// unanswered, not failed); an sbatch may or may not have made its job. It
// matches ErrDeadline and remote.ErrOutcomeUnknown, so that a submission
// goes to the look-up by comment tag that a lost connection takes, and is
// never simply run again.
type DeadlineError struct {
	Kind     Kind
	Command  string // cut by remote.Brief
	Deadline time.Duration
}

func (e *DeadlineError) Error() string {
	msg := fmt.Sprintf("%s: no answer within its deadline of %s; stopped, outcome unknown (a throttled or busy controller: Slurm's commands retry silently under rl_enable)", e.Command, e.Deadline)
	if e.Kind == KindSbatch {
		msg += "; the job may or may not have been made"
	}
	return msg
}

// Unwrap returns ErrDeadline and remote.ErrOutcomeUnknown.
func (e *DeadlineError) Unwrap() []error { return []error{ErrDeadline, remote.ErrOutcomeUnknown} }

// errPastDeadline is the cause of a command's context ending at its
// deadline (and not its caller's).
var errPastDeadline = errors.New("slurm: command deadline")

// Deadline is the deadline of the Client's commands of kind k.
func (c *Client) Deadline(k Kind) time.Duration { return c.Deadlines.For(k) }

// run runs cmd, a Slurm command of kind k, through the Client's runner
// under k's deadline.
func (c *Client) run(ctx context.Context, k Kind, cmd remote.Command) (*remote.Result, error) {
	return c.RunVia(ctx, c.runner, k, cmd)
}

// RunVia runs cmd, a Slurm command of kind k, through r under k's
// deadline (for a Slurm command the Client does not build itself, such
// as an sbatch inside a script). A command still running at the deadline
// is stopped and RunVia returns a *DeadlineError with a nil Result; ctx's
// own end is returned as r returns it.
func (c *Client) RunVia(ctx context.Context, r remote.Runner, k Kind, cmd remote.Command) (*remote.Result, error) {
	d := c.Deadline(k)
	dctx, cancel := context.WithTimeoutCause(ctx, d, errPastDeadline)
	defer cancel()
	start := time.Now()
	res, err := r.Run(dctx, cmd)
	took := time.Since(start)
	if err != nil && ctx.Err() == nil && errors.Is(context.Cause(dctx), errPastDeadline) {
		c.Observe(r, k, cmd.Brief(), took, true)
		return nil, &DeadlineError{Kind: k, Command: cmd.Brief(), Deadline: d}
	}
	if ctx.Err() == nil {
		c.Observe(r, k, cmd.Brief(), took, false)
	}
	return res, err
}

// Observe tells r, when it is an Observer, and the Client's Slow hook
// (when took is SlowAfter or more, or the command was stopped at its
// deadline) of a Slurm command of kind k, cmd, that ran for took: what
// RunVia does once a command ends, for a command timed where it ran
// (an sbatch among other work in one script on the cluster).
func (c *Client) Observe(r remote.Runner, k Kind, cmd string, took time.Duration, stopped bool) {
	if o, ok := r.(Observer); ok {
		o.ObserveSlurm(k, took, stopped)
	}
	if stopped || took >= c.slowAfter() {
		c.slow(SlowCommand{Kind: k, Command: cmd, Took: took, Deadline: c.Deadline(k), Stopped: stopped})
	}
}

// Observer is told of every Slurm command that RunVia (and so every
// command of the Client's own) runs through a runner that implements it:
// the command's kind, how long it took, and whether it was stopped at
// its deadline. A command cut short by its caller's context is not
// observed. It is called on the command's goroutine, once the command
// has ended: keep it cheap (a histogram observation). serve feeds its
// metrics of Slurm command durations, per cluster and kind, so: its
// cluster's host (the runner of its Client and of the episode's staged
// sbatch) implements it.
type Observer interface {
	ObserveSlurm(kind Kind, took time.Duration, stopped bool)
}

// DefaultSlowAfter is how long a Slurm command may take before the
// Client's Slow hears of it: far above a healthy controller's tens to
// hundreds of milliseconds, at the first back-off of a throttled one
// (rl_enable's clients sleep 1 s, then 2 s, … per refusal).
const DefaultSlowAfter = 2 * time.Second

// SlowCommand is a Slurm command that took long (Client.Slow).
type SlowCommand struct {
	Kind     Kind
	Command  string // cut by remote.Brief
	Took     time.Duration
	Deadline time.Duration
	// Stopped: it reached its deadline and was stopped (outcome unknown).
	Stopped bool
}

// String says it for a log line, one line: its kind, the command (a
// script's first line only: sh -c 'SCRIPT' …), how long it took.
func (s SlowCommand) String() string {
	cmd := s.Command
	if i := strings.IndexByte(cmd, '\n'); i >= 0 {
		cmd = cmd[:i] + " …"
	}
	if s.Stopped {
		return fmt.Sprintf("slurm: %s: %s stopped at its deadline of %s after %.1f s (outcome unknown): a throttled or busy controller", s.Kind, cmd, s.Deadline, s.Took.Seconds())
	}
	return fmt.Sprintf("slurm: %s: %s took %.1f s (deadline %s): a throttled or busy controller", s.Kind, cmd, s.Took.Seconds(), s.Deadline)
}

func (c *Client) slowAfter() time.Duration {
	if c.SlowAfter > 0 {
		return c.SlowAfter
	}
	return DefaultSlowAfter
}

func (c *Client) slow(s SlowCommand) {
	if c.Slow != nil {
		c.Slow(s)
	}
}
