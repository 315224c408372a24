package cli

import (
	"fmt"
	"strings"

	ucli "github.com/urfave/cli/v2"

	"github.com/nemorl/nemorl-slurm/episode"
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
	ledger, entries, err := ledgerEntries(c.Args().Slice(), nil)
	if err != nil {
		return err
	}
	sessions, skipped, err := e.sessionsFor(c.Context, c, ledger, entries)
	if err != nil {
		return err
	}
	cancelled := map[string][]string{}
	var failed []string
	for ep, err := range skipped {
		failed = append(failed, ep+": "+err.Error())
	}
	for _, s := range sessions {
		for _, ep := range s.episodes {
			lock, ok, err := ledger.TryLock(ep)
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
			en, err := ledger.Load(ep)
			if err == nil {
				var ids []string
				ids, err = s.Cancel(c.Context, en, episode.ReasonCancelled, ok)
				cancelled[ep] = append([]string{}, ids...) // [] rather than null in --json
			}
			lock.Unlock()
			if err != nil {
				failed = append(failed, err.Error())
			}
		}
		s.close()
	}
	if globalBool(c, "json") {
		if err := e.writeJSON(map[string]any{"cancelled": cancelled, "errors": failed}); err != nil {
			return err
		}
	} else {
		for _, en := range entries {
			if ids, ok := cancelled[en.Episode]; ok {
				fmt.Fprintf(e.stdout, "%s: cancelled jobs %s\n", en.Episode, orDash(strings.Join(ids, " ")))
			}
		}
	}
	if len(failed) > 0 {
		return withCode(ExitInfra, fmt.Errorf("cancel: %s", strings.Join(failed, "; ")), "")
	}
	return nil
}
