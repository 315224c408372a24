package cli

import (
	"fmt"
	"io"
	"strings"
	"time"

	ucli "github.com/urfave/cli/v2"

	"github.com/nemorl/nemorl-slurm/internal/atomicfile"
	rpt "github.com/nemorl/nemorl-slurm/report"
)

func reportCommand(e *env) *ucli.Command {
	return &ucli.Command{
		Name: "report",
		Description: `Examples:
   nemorl-slurm report --out report.html
   nemorl-slurm report --since 7d --label sweep=lr3e-6 --out sweep.html
   nemorl-slurm report --outcome scored --json | jq '.reward.scored.median'

The HTML file is self-contained (charts as inline SVG, no network needed
to open it): the reward distribution and the reward over time, each
stage's queue wait and run time, the episodes' wall time, outcomes and
failure reasons, episodes in flight over time, and a sortable table.
--json prints the same figures as one JSON document instead.`,
		Usage:     "a picture of many episodes, as one HTML file (reads only the ledger: no cluster contact)",
		ArgsUsage: " ",
		Flags: withGlobals(append(filterFlags(),
			&ucli.StringFlag{Name: "out", Aliases: []string{"o"}, Usage: "write the HTML report to `FILE` (replaced atomically)"},
			&ucli.StringFlag{Name: "title", Usage: "the report's title (default: nemorl-slurm report and the filters)"},
		)...),
		Action: e.report,
	}
}

func (e *env) report(c *ucli.Context) error {
	if c.NArg() > 0 {
		return usageErr("report takes no arguments, got %q (filter with --outcome, --label, --since, --config; write with --out FILE)", c.Args().First())
	}
	out, asJSON := c.String("out"), globalBool(c, "json")
	switch {
	case out != "" && asJSON:
		return usageErr("--out and --json: give one (--out writes the HTML report, --json prints its figures)")
	case out == "" && !asJSON:
		return usageErr("--out FILE is required (or --json to print the figures)")
	}
	now := time.Now()
	lg, all, keep, err := selectEntries(c, now)
	if err != nil {
		return err
	}
	figs := rpt.Build(keep, now)
	if asJSON {
		return e.writeJSON(figs)
	}
	title := c.String("title")
	if title == "" {
		title = "nemorl-slurm report" + filterText(c)
	}
	if err := atomicfile.WriteFunc(out, 0o644, func(w io.Writer) error { return rpt.RenderHTML(w, figs, title) }); err != nil {
		return fmt.Errorf("report: write %s: %w", out, err)
	}
	if len(keep) == 0 {
		e.logf("wrote %s: no episodes match in %s (%d in all)", out, lg.Dir, len(all))
		return nil
	}
	e.logf("wrote %s: %d episodes (%d in %s)", out, len(keep), len(all), lg.Dir)
	return nil
}

// filterText names the filters given, for the title: "" when none.
func filterText(c *ucli.Context) string {
	var parts []string
	for _, name := range []string{"outcome", "reason", "since", "until", "label"} {
		if !c.IsSet(name) {
			continue
		}
		if vs := c.StringSlice(name); len(vs) > 0 {
			for _, v := range vs {
				parts = append(parts, "--"+name+" "+v)
			}
		} else {
			parts = append(parts, "--"+name+" "+c.String(name))
		}
	}
	if p := globalString(c, "config"); p != "" {
		parts = append(parts, "--config "+p)
	}
	if len(parts) == 0 {
		return ""
	}
	return " (" + strings.Join(parts, " ") + ")"
}
