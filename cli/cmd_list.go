package cli

import (
	"fmt"
	"slices"
	"text/tabwriter"
	"time"

	ucli "github.com/urfave/cli/v2"

	"github.com/nemorl/nemorl-slurm/ledger"
	rpt "github.com/nemorl/nemorl-slurm/report"
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
		Flags:     withGlobals(filterFlags()...),
		Action:    e.list,
	}
}

func (e *env) list(c *ucli.Context) error {
	if c.NArg() > 0 {
		return usageErr("list takes no arguments, got %q (filter with --outcome, --label, --since, --config)", c.Args().First())
	}
	lg, all, keep, err := selectEntries(c, time.Now())
	if err != nil {
		return err
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
	// A CLUSTER column once any episode was placed on a clusters: entry,
	// a GPU column once any outcome names the GPU its jobs had.
	clusters := slices.ContainsFunc(keep, func(en *ledger.Entry) bool { return en.Cluster != "" })
	gpus := slices.ContainsFunc(keep, func(en *ledger.Entry) bool { ev, tr := rpt.OutcomeGPUs(en.Outcome); return ev != nil || tr != nil })
	if clusters {
		fmt.Fprint(tw, "CLUSTER\t")
	}
	if gpus {
		fmt.Fprint(tw, "GPU\t")
	}
	fmt.Fprintln(tw, "EPISODE\tCREATED\tOUTCOME\tREWARD\tREASON\tLABELS")
	for _, en := range keep {
		if clusters {
			fmt.Fprintf(tw, "%s\t", orDash(en.Cluster))
		}
		if gpus {
			fmt.Fprintf(tw, "%s\t", rpt.GPUText(rpt.OutcomeGPUs(en.Outcome)))
		}
		kind, reward, reason := "unfinished", "-", "-"
		if en.CancelRequested != "" && en.Outcome == nil {
			kind = "cancelling"
		}
		if o := en.Outcome; o != nil {
			kind, reward = string(o.Outcome), formatReward(o)
			if o.FailureReason != "" {
				reason = string(o.FailureStage) + ": " + o.FailureReason
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
	if en.Cluster != "" {
		doc["cluster"] = en.Cluster
	}
	// The GPUs the records name: the eval job's (trusted), the train
	// job's (what the policy's code printed).
	ev, tr := rpt.OutcomeGPUs(en.Outcome)
	if ev != nil {
		doc["gpu"] = ev
	}
	if tr != nil {
		doc["train_gpu"] = tr
	}
	return doc
}
