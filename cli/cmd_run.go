package cli

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	ucli "github.com/urfave/cli/v2"

	"github.com/nemorl/nemorl-slurm/episode"
	"github.com/nemorl/nemorl-slurm/rules"
	"github.com/nemorl/nemorl-slurm/stages"
)

// CancelGrace bounds how long run waits, after cancelling an episode's jobs
// (deadline or interrupt), for Slurm to report them ended.
const CancelGrace = 3 * time.Minute

func runCommand(e *env) *ucli.Command {
	return &ucli.Command{
		Name:      "run",
		Usage:     "submit an episode, watch it and print its verified outcome; on --deadline or SIGINT cancel its jobs and exit 3",
		ArgsUsage: " ",
		Flags: withGlobals(
			&ucli.DurationFlag{Name: "deadline", Usage: "cancel the episode's jobs after this long (e.g. 2h30m); 0 means none"},
			&ucli.StringFlag{Name: "episode", Usage: "episode id (default: a new one)"},
			&ucli.StringFlag{Name: "prompt-file", Usage: "the author's task prompt (default: the built-in one)"},
			labelFlag("attach a `KEY=VALUE` label to the episode (repeatable); list shows and filters them"),
			setFlag(),
			clusterFlag(),
		),
		Action: e.run,
	}
}

func (e *env) run(c *ucli.Context) error {
	if c.NArg() > 0 {
		return usageErr("run takes no arguments, got %q", c.Args().First())
	}
	deadline := c.Duration("deadline")
	if deadline < 0 {
		return usageErr("--deadline %s: must not be negative", deadline)
	}
	start := time.Now()
	ctx, stop := signal.NotifyContext(c.Context, os.Interrupt, syscall.SIGTERM)
	defer stop()
	s, en, err := e.submitEpisode(c, true)
	if err != nil {
		return err
	}
	defer s.close()
	ep := en.Episode
	e.logf("%s: submitted; author job %s (ledger %s)", ep, en.JobID(stages.Author), s.Ledger.Path(ep))

	wctx := ctx
	if deadline > 0 {
		var cancel context.CancelFunc
		wctx, cancel = context.WithDeadline(ctx, start.Add(deadline))
		defer cancel()
	}
	p := newProgress(e.stderr)
	entries, err := s.Watch(wctx, []string{ep}, episode.WatchOptions{Act: true, Observe: p.update})
	if wctx.Err() != nil {
		reason := rules.ReasonInterrupted
		if ctx.Err() == nil {
			reason = rules.ReasonDeadline
		}
		stop() // a second SIGINT ends the process at once
		e.logf("%s: %s: cancelling the episode's jobs", ep, reason)
		bg, cancel := context.WithTimeout(context.Background(), CancelGrace)
		defer cancel()
		cur, lerr := s.Ledger.Load(ep)
		if lerr != nil {
			return lerr
		}
		lock, _, lerr := s.Ledger.TryLock(ep) // nil when another process owns it
		if lerr != nil {
			return lerr
		}
		_, cerr := s.Cancel(bg, cur, reason, lock)
		lock.Unlock()
		if cerr != nil {
			return withCode(ExitInfra, fmt.Errorf("%s: %s, and cancelling the jobs failed: %w", ep, reason, cerr),
				"scancel them by hand: nemorl-slurm cancel "+ep)
		}
		entries, err = s.Watch(bg, []string{ep}, episode.WatchOptions{Act: true, Observe: p.update})
	}
	if err != nil {
		hint := "the jobs keep running on the cluster: nemorl-slurm resume re-attaches"
		if errors.Is(err, context.DeadlineExceeded) {
			hint = "Slurm did not report the cancelled jobs ended within " + CancelGrace.String() + ": nemorl-slurm result " + ep + " later"
		}
		if globalBool(c, "json") {
			_ = e.writeJSON(map[string]any{"episode": ep, "outcome": rules.InfraFailure, "reward": nil, "mask_sample": true,
				"failure_reason": reasonOf(err), "final": false, "detail": err.Error()})
		}
		return withCode(ExitInfra, fmt.Errorf("%s: %w", ep, err), hint)
	}
	return e.finishOutcome(c, entries[ep].Outcome)
}

func reasonOf(err error) string {
	if errors.Is(err, episode.ErrConnectionLost) {
		return rules.ReasonConnectionLost
	}
	return "watch_failed"
}
