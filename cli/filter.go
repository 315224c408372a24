package cli

import (
	"fmt"
	"path/filepath"
	"strings"
	"time"

	ucli "github.com/urfave/cli/v2"

	"github.com/nemorl/nemorl-slurm/ledger"
	"github.com/nemorl/nemorl-slurm/rules"
)

// The ledger filters that list and report share: --outcome, --reason,
// --since, --until, --label and the global --config.

// filterFlags are the filters' flags.
func filterFlags() []ucli.Flag {
	return []ucli.Flag{
		&ucli.StringSliceFlag{Name: "outcome", Usage: "only these outcomes: scored, policy_failure, infra_failure, integrity_violation, unfinished (repeatable)"},
		&ucli.StringFlag{Name: "reason", Usage: "only episodes with this failure_reason"},
		&ucli.StringFlag{Name: "since", Usage: "only episodes created since `WHEN`: a duration back (24h, 90m) or a date (2026-11-30, 2026-11-30T12:00:00Z)"},
		&ucli.StringFlag{Name: "until", Usage: "only episodes created before `WHEN` (as --since)"},
		&ucli.StringSliceFlag{Name: "label", Usage: "only episodes with this `KEY=VALUE` label (repeatable: all must match)"},
	}
}

var listOutcomes = map[string]bool{string(rules.Scored): true, string(rules.PolicyFailure): true,
	string(rules.InfraFailure): true, string(rules.IntegrityViolation): true, "unfinished": true}

// entryFilter is what the filters' flags ask for.
type entryFilter struct {
	outcomes     map[string]bool
	reason       string
	since, until time.Time
	config       string
	labels       map[string]string
}

// parseFilter reads the filters' flags; a bad one is a usage error naming
// it.
func parseFilter(c *ucli.Context, now time.Time) (*entryFilter, error) {
	f := &entryFilter{outcomes: map[string]bool{}, reason: c.String("reason")}
	for _, o := range c.StringSlice("outcome") {
		if !listOutcomes[o] {
			return nil, usageErr("--outcome %q: want scored, policy_failure, infra_failure, integrity_violation or unfinished", o)
		}
		f.outcomes[o] = true
	}
	var err error
	if f.since, err = parseWhen(c.String("since"), now); err != nil {
		return nil, usageErr("--since: %v", err)
	}
	if f.until, err = parseWhen(c.String("until"), now); err != nil {
		return nil, usageErr("--until: %v", err)
	}
	if f.labels, err = parseLabels(c); err != nil {
		return nil, err
	}
	if p := globalString(c, "config"); p != "" {
		if f.config, err = filepath.Abs(p); err != nil {
			return nil, usageErr("--config: %v", err)
		}
	}
	return f, nil
}

// keep reports whether en passes every filter.
func (f *entryFilter) keep(en *ledger.Entry) bool {
	kind := "unfinished"
	if en.Outcome != nil {
		kind = string(en.Outcome.Outcome)
	}
	switch {
	case len(f.outcomes) > 0 && !f.outcomes[kind]:
	case f.reason != "" && (en.Outcome == nil || en.Outcome.FailureReason != f.reason):
	case !f.since.IsZero() && en.Created.Before(f.since):
	case !f.until.IsZero() && !en.Created.Before(f.until):
	case f.config != "" && en.ConfigPath != f.config:
	case !hasLabels(en.Labels, f.labels):
	default:
		return true
	}
	return false
}

// selectEntries reads the filters' flags, then the ledger: every entry
// (oldest first) and those the filters keep.
func selectEntries(c *ucli.Context, now time.Time) (lg *ledger.Ledger, all, keep []*ledger.Entry, err error) {
	f, err := parseFilter(c, now)
	if err != nil {
		return nil, nil, nil, err
	}
	if lg, err = openLedger(); err != nil {
		return nil, nil, nil, err
	}
	if all, err = lg.List(); err != nil {
		return nil, nil, nil, err
	}
	for _, en := range all {
		if f.keep(en) {
			keep = append(keep, en)
		}
	}
	return lg, all, keep, nil
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
