package cli

import (
	"fmt"

	ucli "github.com/urfave/cli/v2"

	"github.com/nemorl/nemorl-slurm/episode"
)

func statusCommand(e *env) *ucli.Command {
	return &ucli.Command{
		Name:      "status",
		Usage:     "show the episodes' jobs (default: every unfinished episode) with one sacct",
		ArgsUsage: "[EPISODE…]",
		Flags:     withGlobals(),
		Action:    e.status,
	}
}

func (e *env) status(c *ucli.Context) error {
	ledger, entries, err := ledgerEntries(c.Args().Slice(), unfinished)
	if err != nil {
		return err
	}
	sessions, skipped, err := e.sessionsFor(c.Context, c, ledger, entries)
	if err != nil {
		return err
	}
	var rows []episode.Row
	for _, s := range sessions {
		_, err := s.Watch(c.Context, s.episodes, episode.WatchOptions{Once: true, MaxPollFailures: 1,
			Observe: func(r []episode.Row) { rows = append(rows, r...) }})
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
		e.logf("no unfinished episodes in %s", ledger.Dir)
		return nil
	}
	fmt.Fprint(e.stdout, formatRows(rows))
	return skippedError(skipped)
}
