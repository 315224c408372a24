package cli

import (
	"fmt"
	"path/filepath"
	"strings"
	"text/tabwriter"
	"time"

	ucli "github.com/urfave/cli/v2"

	"github.com/nemorl/nemorl-slurm/ledger"
	"github.com/nemorl/nemorl-slurm/rules"
)

func listCommand(e *env) *ucli.Command {
	return &ucli.Command{
		Name: "list",
		Description: `Examples:
   nemorl-slurm list
   nemorl-slurm list --outcome infra_failure --since 24h
   nemorl-slurm list --label sweep=lr3e-6 --json | jq '.episodes[].outcome.reward'`,
		Usage:     "every episode in the ledger, finished or not, newest last (reads only the ledger: no cluster contact)",
		ArgsUsage: " ",
		Flags: withGlobals(
			&ucli.StringSliceFlag{Name: "outcome", Usage: "only these outcomes: scored, policy_failure, infra_failure, integrity_violation, unfinished (repeatable)"},
			&ucli.StringFlag{Name: "reason", Usage: "only episodes with this failure_reason"},
			&ucli.StringFlag{Name: "since", Usage: "only episodes created since `WHEN`: a duration back (24h, 90m) or a date (2026-11-30, 2026-11-30T12:00:00Z)"},
			&ucli.StringFlag{Name: "until", Usage: "only episodes created before `WHEN` (as --since)"},
			&ucli.StringSliceFlag{Name: "label", Usage: "only episodes with this `KEY=VALUE` label (repeatable: all must match)"},
		),
		Action: e.list,
	}
}

var listOutcomes = map[string]bool{string(rules.Scored): true, string(rules.PolicyFailure): true,
	string(rules.InfraFailure): true, string(rules.IntegrityViolation): true, "unfinished": true}

func (e *env) list(c *ucli.Context) error {
	if c.NArg() > 0 {
		return usageErr("list takes no arguments, got %q (filter with --outcome, --label, --since, --config)", c.Args().First())
	}
	outcomes := map[string]bool{}
	for _, o := range c.StringSlice("outcome") {
		if !listOutcomes[o] {
			return usageErr("--outcome %q: want scored, policy_failure, infra_failure, integrity_violation or unfinished", o)
		}
		outcomes[o] = true
	}
	now := time.Now()
	since, err := parseWhen(c.String("since"), now)
	if err != nil {
		return usageErr("--since: %v", err)
	}
	until, err := parseWhen(c.String("until"), now)
	if err != nil {
		return usageErr("--until: %v", err)
	}
	want, err := parseLabels(c)
	if err != nil {
		return err
	}
	configFilter := ""
	if p := globalString(c, "config"); p != "" {
		if configFilter, err = filepath.Abs(p); err != nil {
			return usageErr("--config: %v", err)
		}
	}
	lg, err := openLedger()
	if err != nil {
		return err
	}
	all, err := lg.List()
	if err != nil {
		return err
	}
	var keep []*ledger.Entry
	for _, en := range all {
		kind := "unfinished"
		if en.Outcome != nil {
			kind = string(en.Outcome.Outcome)
		}
		switch {
		case len(outcomes) > 0 && !outcomes[kind]:
		case c.String("reason") != "" && (en.Outcome == nil || en.Outcome.FailureReason != c.String("reason")):
		case !since.IsZero() && en.Created.Before(since):
		case !until.IsZero() && !en.Created.Before(until):
		case configFilter != "" && en.ConfigPath != configFilter:
		case !hasLabels(en.Labels, want):
		default:
			keep = append(keep, en)
		}
	}
	if globalBool(c, "json") {
		docs := make([]map[string]any, 0, len(keep))
		for _, en := range keep {
			docs = append(docs, listJSON(en))
		}
		return e.writeJSON(map[string]any{"episodes": docs, "ledger": lg.Dir})
	}
	if len(keep) == 0 {
		e.logf("no episodes match in %s (%d in all)", lg.Dir, len(all))
		return nil
	}
	tw := tabwriter.NewWriter(e.stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "EPISODE\tCREATED\tOUTCOME\tREWARD\tREASON\tLABELS")
	for _, en := range keep {
		kind, reward, reason := "unfinished", "-", "-"
		if en.CancelRequested != "" && en.Outcome == nil {
			kind = "cancelling"
		}
		if o := en.Outcome; o != nil {
			kind, reward = string(o.Outcome), formatReward(o)
			if o.FailureReason != "" {
				reason = o.FailureStage + ": " + o.FailureReason
			}
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", en.Episode, en.Created.Local().Format("2006-01-02 15:04"), kind, reward, reason, formatLabels(en.Labels))
	}
	return tw.Flush()
}

func listJSON(en *ledger.Entry) map[string]any {
	doc := map[string]any{"episode": en.Episode, "created": en.Created, "config": en.ConfigPath, "host": en.Host,
		"dir": en.Dir, "isolation": en.Isolation, "labels": en.Labels, "outcome": en.Outcome, "finished": en.Final()}
	if en.Labels == nil {
		doc["labels"] = map[string]string{}
	}
	if !en.Cleaned.IsZero() {
		doc["cleaned"] = en.Cleaned
	}
	return doc
}

func hasLabels(have, want map[string]string) bool {
	for k, v := range want {
		if have[k] != v {
			return false
		}
	}
	return true
}

// parseWhen reads a duration back from now ("24h", "90m", "7d") or a time
// (RFC 3339, or a date in local time); "" is the zero time.
func parseWhen(s string, now time.Time) (time.Time, error) {
	if s == "" {
		return time.Time{}, nil
	}
	if days, ok := strings.CutSuffix(s, "d"); ok {
		var n int
		if _, err := fmt.Sscanf(days, "%d", &n); err == nil && n >= 0 && fmt.Sprint(n) == days {
			return now.Add(-time.Duration(n) * 24 * time.Hour), nil
		}
	}
	if d, err := time.ParseDuration(s); err == nil {
		if d < 0 {
			return time.Time{}, fmt.Errorf("%q: want a duration back, not a negative one", s)
		}
		return now.Add(-d), nil
	}
	for _, layout := range []string{time.RFC3339, "2006-01-02T15:04:05", "2006-01-02 15:04", "2006-01-02"} {
		if t, err := time.ParseInLocation(layout, s, time.Local); err == nil {
			return t, nil
		}
	}
	return time.Time{}, fmt.Errorf("%q: want a duration such as 24h or 7d, or a date such as 2026-11-30", s)
}
