package cli

import (
	"fmt"

	ucli "github.com/urfave/cli/v2"

	"github.com/nemorl/nemorl-slurm/episode"
	"github.com/nemorl/nemorl-slurm/ledger"
)

func statusCommand(e *env) *ucli.Command {
	return &ucli.Command{
		Name: "status",
		Description: `Examples:
   nemorl-slurm status            # every unfinished episode, one poll (one squeue)
   nemorl-slurm status --all --json`,
		Usage:     "show the episodes' jobs (default: every unfinished episode) with one poll: one squeue, sacct only for jobs that left it",
		ArgsUsage: "[EPISODE…]",
		Flags: withGlobals(
			&ucli.BoolFlag{Name: "all", Aliases: []string{"a"}, Usage: "finished episodes too (list shows the whole ledger without asking the cluster)"},
		),
		Action: e.status,
	}
}

func (e *env) status(c *ucli.Context) error {
	keep := unfinished
	if c.Bool("all") {
		keep = func(*ledger.Entry) bool { return true }
	}
	lg, entries, err := ledgerEntries(c.Args().Slice(), keep)
	if err != nil {
		return err
	}
	sessions, skipped, err := e.sessionsFor(c.Context, c, lg, entries)
	if err != nil {
		return err
	}
	var rows []episode.Row
	var names userNames
	for _, s := range sessions {
		_, err := s.Watch(c.Context, s.episodes, episode.WatchOptions{Once: true, MaxPollFailures: 1,
			Observe: func(r []episode.Row) {
				names.rename(c.Context, s.setup.UserNames, r)
				rows = append(rows, r...)
			}})
		s.close()
		if err != nil {
			return withCode(ExitInfra, err, "")
		}
	}
	if globalBool(c, "json") {
		doc := map[string]any{"episodes": rowsJSON(rows)}
		if len(skipped) > 0 {
			doc["skipped"] = skippedStrings(skipped)
		}
		if err := e.writeJSON(doc); err != nil {
			return err
		}
		return skippedError(skipped)
	}
	if len(rows) == 0 && len(skipped) == 0 {
		if c.Bool("all") {
			e.logf("no episodes in %s", lg.Dir)
		} else {
			e.logf("no unfinished episodes in %s (status --all shows the finished too; list shows the ledger)", lg.Dir)
		}
		return nil
	}
	fmt.Fprint(e.stdout, formatRows(rows))
	return skippedError(skipped)
}
