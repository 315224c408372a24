package cli

import (
	"fmt"
	"sort"
	"strings"

	ucli "github.com/urfave/cli/v2"

	"github.com/nemorl/nemorl-slurm/episode"
)

// labelFlag is --label KEY=VALUE, repeatable.
func labelFlag(usage string) ucli.Flag {
	return &ucli.StringSliceFlag{Name: "label", Usage: usage}
}

// parseLabels reads --label KEY=VALUE flags.
func parseLabels(c *ucli.Context) (map[string]string, error) {
	vals := c.StringSlice("label")
	if len(vals) == 0 {
		return nil, nil
	}
	out := map[string]string{}
	for _, kv := range vals {
		k, v, ok := strings.Cut(kv, "=")
		if !ok {
			return nil, usageErr("--label %q: want KEY=VALUE", kv)
		}
		if err := episode.CheckLabel(k, v); err != nil {
			return nil, usageErr("--label: %v", err)
		}
		if old, dup := out[k]; dup && old != v {
			return nil, usageErr("--label %s given twice (%q and %q)", k, old, v)
		}
		out[k] = v
	}
	return out, nil
}

// formatLabels is "k=v,k2=v2" in key order, or "-".
func formatLabels(m map[string]string) string {
	if len(m) == 0 {
		return "-"
	}
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = fmt.Sprintf("%s=%s", k, m[k])
	}
	return strings.Join(parts, ",")
}

// setFlag is --set KEY=VALUE, repeatable: one config value overridden for
// the episodes submitted, validated like the file, recorded in the ledger.
func setFlag() ucli.Flag {
	return &ucli.StringSliceFlag{Name: "set", Usage: "override one config value (`KEY=VALUE`, e.g. stages.train.train_seconds=1800) for these episodes; repeatable; recorded in the ledger"}
}

// clusterFlag is --cluster NAME: the config's clusters: entry the episodes
// run on (submit, run); serve places each row itself.
func clusterFlag() ucli.Flag {
	return &ucli.StringFlag{Name: "cluster", Usage: "the clusters: entry (`NAME`) to run on (default: the first; a config of one cluster: has no names)"}
}
