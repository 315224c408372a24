package cli

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"path"
	"slices"

	ucli "github.com/urfave/cli/v2"

	"github.com/nemorl/nemorl-slurm/episode"
	"github.com/nemorl/nemorl-slurm/templates"
)

func logsCommand(e *env) *ucli.Command {
	return &ucli.Command{
		Name:      "logs",
		Usage:     "print the tail of a stage's output file (default: the latest stage submitted)",
		ArgsUsage: "EPISODE",
		Flags: withGlobals(
			&ucli.StringFlag{Name: "stage", Usage: "author, train or eval"},
			&ucli.IntFlag{Name: "tail", Value: 50, Usage: "lines to print"},
		),
		Action: e.logs,
	}
}

func (e *env) logs(c *ucli.Context) error {
	if c.NArg() != 1 {
		return usageErr("logs takes one episode id")
	}
	n := c.Int("tail")
	if n <= 0 {
		return usageErr("--tail %d: want a positive number of lines", n)
	}
	stage := c.String("stage")
	if stage != "" && !slices.Contains(templates.Stages, stage) {
		return usageErr("--stage %q: want author, train or eval", stage)
	}
	ledger, entries, err := ledgerEntries(c.Args().Slice(), nil)
	if err != nil {
		return err
	}
	en := entries[0]
	if stage == "" {
		for _, s := range templates.Stages {
			if en.Jobs[s] != nil {
				stage = s
			}
		}
		if stage == "" {
			return usageErr("episode %s has no job yet", en.Episode)
		}
	}
	sessions, _, err := e.sessionsFor(c.Context, c, ledger, entries)
	if err != nil {
		return err
	}
	s := sessions[0]
	defer s.close()
	p := path.Join(en.Dir, templates.Output(stage))
	tail, err := s.Host.ReadTail(c.Context, p, min(int64(n)*4096, episode.TailBytes))
	if errors.Is(err, fs.ErrNotExist) {
		return &Error{Code: ExitUsage, Err: fmt.Errorf("%s: the %s stage has no output yet (%s)", en.Episode, stage, p),
			Hint: "its job has not started: nemorl-slurm status " + en.Episode}
	}
	if err != nil {
		return withCode(ExitInfra, fmt.Errorf("%s: %s output %s on %s: %w", en.Episode, stage, p, s.Host.Name(), err), "")
	}
	lines := bytes.SplitAfter(tail, []byte("\n"))
	if len(lines) > 0 && len(lines[len(lines)-1]) == 0 {
		lines = lines[:len(lines)-1]
	}
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	if globalBool(c, "json") {
		out := make([]string, 0, len(lines))
		for _, l := range lines {
			out = append(out, string(bytes.TrimSuffix(l, []byte("\n"))))
		}
		return e.writeJSON(map[string]any{"episode": en.Episode, "stage": stage, "path": p, "lines": out})
	}
	for _, l := range lines {
		_, _ = e.stdout.Write(l)
	}
	return nil
}
