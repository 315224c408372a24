package cli

import (
	"errors"
	"fmt"

	ucli "github.com/urfave/cli/v2"

	"github.com/nemorl/nemorl-slurm/episode"
	"github.com/nemorl/nemorl-slurm/rules"
)

func resultCommand(e *env) *ucli.Command {
	return &ucli.Command{
		Name:      "result",
		Usage:     "the episode's verified outcome; exit 0 scored or policy failure, 3 infrastructure failure, 4 integrity violation",
		ArgsUsage: "EPISODE",
		Flags:     withGlobals(),
		Action:    e.result,
	}
}

func (e *env) result(c *ucli.Context) error {
	if c.NArg() != 1 {
		return usageErr("result takes one episode id")
	}
	lg, entries, err := ledgerEntries(c.Args().Slice(), nil)
	if err != nil {
		return err
	}
	en := entries[0]
	if !en.Final() {
		sessions, _, err := e.sessionsFor(c.Context, c, lg, entries)
		if err != nil {
			return err
		}
		s := sessions[0]
		defer s.close()
		var row episode.Row
		en, row, err = s.Inspect(c.Context, en.Episode)
		if errors.Is(err, episode.ErrNotFinished) {
			return &Error{Code: ExitUsage, Err: fmt.Errorf("episode %s is not finished: %s job %s is %s", row.Episode, row.Stage, orDash(row.JobID), row.State),
				Hint: "nemorl-slurm watch " + row.Episode + " waits for it"}
		}
		if err != nil {
			return withCode(ExitInfra, err, "")
		}
	}
	return e.finishOutcome(c, en.Outcome)
}

// finishOutcome prints an outcome (JSON or human) and returns its exit code.
func (e *env) finishOutcome(c *ucli.Context, o *rules.Outcome) error {
	if globalBool(c, "json") {
		if err := e.writeJSON(o); err != nil {
			return err
		}
	} else {
		e.printOutcome(o)
	}
	if code := o.ExitCode(); code != ExitOK {
		return ucli.Exit("", code)
	}
	return nil
}
