package cli

import (
	"fmt"
	"slices"
	"strings"

	ucli "github.com/urfave/cli/v2"

	"github.com/nemorl/nemorl-slurm/ledger"
	"github.com/nemorl/nemorl-slurm/rules"
)

func cancelCommand(e *env) *ucli.Command {
	return &ucli.Command{
		Name:      "cancel",
		Usage:     "scancel every job of the episodes; nothing more is submitted for them",
		ArgsUsage: "EPISODE…",
		Flags:     withGlobals(),
		Action:    e.cancel,
	}
}

func (e *env) cancel(c *ucli.Context) error {
	if c.NArg() == 0 {
		return usageErr("cancel takes one or more episode ids")
	}
	lg, entries, err := ledgerEntries(c.Args().Slice(), nil)
	if err != nil {
		return err
	}
	sessions, skipped, err := e.sessionsFor(c.Context, c, lg, entries)
	if err != nil {
		return err
	}
	cancelled := map[string][]string{}
	ended := map[string][]string{}
	var failed []string
	for ep, err := range skipped {
		failed = append(failed, ep+": "+err.Error())
	}
	for _, s := range sessions {
		for _, ep := range s.episodes {
			lock, ok, err := lg.TryLock(ep)
			if err != nil {
				failed = append(failed, err.Error())
				continue
			}
			if !ok {
				// The owner (run, watch) sees the cancel marker at its
				// next poll, cancels what it submitted since and
				// records the outcome.
				e.logf("%s: another nemorl-slurm process watches it; it will record the cancellation", ep)
			}
			en, err := lg.Load(ep)
			if err == nil {
				if en.Final() {
					e.logf("%s: already finished (%s); nothing to cancel", ep, en.Outcome.Outcome)
					lock.Unlock()
					continue
				}
				var ids []string
				logf := s.setup.Logf
				s.setup.Logf = nil // the result line below says it
				// lock is nil unless this process owns the episode.
				ids, err = s.Cancel(c.Context, en, rules.ReasonCancelled, lock)
				s.setup.Logf = logf
				cancelled[ep] = append([]string{}, ids...) // [] rather than null in --json
				ended[ep] = endedJobs(en, ids)
			}
			lock.Unlock()
			if err != nil {
				failed = append(failed, err.Error())
			}
		}
		s.close()
	}
	if globalBool(c, "json") {
		if err := e.writeJSON(map[string]any{"cancelled": cancelled, "already_ended": ended, "errors": failed}); err != nil {
			return err
		}
	} else {
		for _, en := range entries {
			if ids, ok := cancelled[en.Episode]; ok {
				line := fmt.Sprintf("%s: cancelled jobs %s", en.Episode, orDash(strings.Join(ids, " ")))
				if done := ended[en.Episode]; len(done) > 0 {
					line += fmt.Sprintf(" (already ended: %s)", strings.Join(done, " "))
				}
				fmt.Fprintln(e.stdout, line)
			}
		}
	}
	if len(failed) > 0 {
		return withCode(ExitInfra, fmt.Errorf("cancel: %s", strings.Join(failed, "; ")), "")
	}
	return nil
}

// endedJobs are the episode's known jobs that Cancel did not signal: they
// had ended.
func endedJobs(en *ledger.Entry, signalled []string) []string {
	out := []string{}
	for _, id := range en.JobIDs() {
		if !slices.Contains(signalled, id) {
			out = append(out, id)
		}
	}
	return out
}
