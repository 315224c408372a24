package episode

import (
	"context"
	_ "embed"
	"fmt"
	"path"
	"strings"

	"github.com/nemorl/nemorl-slurm/ledger"
	"github.com/nemorl/nemorl-slurm/remote"
	"github.com/nemorl/nemorl-slurm/rules"
	"github.com/nemorl/nemorl-slurm/slurm"
	"github.com/nemorl/nemorl-slurm/stages"
)

// Retries: a train or eval stage that the cluster failed is run again, as
// a new job with the same staged script and the same verified patch, up to
// episodes.retries times; eval is run again after a retried train. The
// author is never retried: its run costs the policy's tokens and its
// secrets file is gone after it ran. An outcome the policy owns or an
// integrity violation is never retried, and neither is anything after a
// cancel (cancel, a deadline, an interrupt).
//
// Slurm may also rerun a train or eval job itself (same job id: a node
// failure or a preemption of a job submitted with --requeue, or scontrol
// requeue); the tool follows the job's latest run, and each run counts as
// an attempt.

// retry runs o's stage again instead of ending the episode with o (a
// failure rules.Decide called retryable), when attempts are left. It retires the
// stage's job and the stages after it (their ids, states and why, in the
// ledger first, with the cancels this issues), scancels those jobs (Slurm
// could still rerun a NODE_FAIL job; an eval waits on the retired train)
// and moves their output files aside; the next advance submits the stage
// again. It reports whether it did; when not, o's detail says why when the
// attempts ran out. with is what the same decision records besides: one
// save holds both.
func (d *Driver) retry(ctx context.Context, e *ledger.Entry, o *rules.Outcome, infos map[string]slurm.JobInfo, with change) (bool, error) {
	if e.CancelRequested != "" || ctx.Err() != nil {
		return false, nil
	}
	stage := o.FailureStage
	limit := 1 + d.Config.Episodes.Retries
	n := e.Attempts(stage, infos)
	if n >= limit {
		if d.Config.Episodes.Retries > 0 {
			o.Detail += fmt.Sprintf("; %s ran %d times, the last allowed (episodes.retries: %d)", stage, n, d.Config.Episodes.Retries)
		}
		return false, nil
	}
	redo := []stages.Stage{stages.Eval}
	if stage == stages.Train {
		redo = []stages.Stage{stages.Train, stages.Eval}
	}
	moves := map[string]string{}
	// advance resolves an interrupted submission (adopts its job or
	// submits it) before any outcome is decided: every sub has its id.
	// The retirement, with the cancels it issues and what the decision
	// recorded (with), is one change.
	c := with
	for _, s := range redo {
		sub := e.Jobs[s]
		if sub == nil {
			continue
		}
		a := rules.Attempt{Attempt: e.AttemptNumber(s), JobID: sub.JobID, Job: o.Jobs[s], Reason: rules.ReasonTrainRetried}
		if s == stage {
			a.Reason, a.Detail = o.FailureReason, o.Detail
		}
		if sub.Array != nil {
			a.Array, a.ArrayScript = sub.Array.Name, sub.Array.Script
		}
		if sub.JobID != "" {
			c.cancels = append(c.cancels, sub.JobID)
			out := path.Join(e.Dir, stages.Output(s))
			a.Output = strings.TrimSuffix(out, ".log") + fmt.Sprintf(".attempt-%d.log", a.Attempt)
			moves[out] = a.Output
		}
		c.retire = append(c.retire, retired{stage: s, attempt: a})
	}
	if err := d.parts().entries.apply(e, c); err != nil {
		return false, err
	}
	ids := c.cancels
	d.logf("%s: %s job %s ended as %s (%s): running %s again, attempt %d of %d",
		e.Episode, stage, o.Jobs[stage].ID, o.FailureReason, o.Jobs[stage].State, strings.Join(stageNames(redo), " and "), n+1, limit)
	if err := d.Slurm.Cancel(ctx, ids); err != nil {
		// The next submission of the stage cancels them again first.
		d.logf("%s: cancelling the retired jobs %s failed: %v", e.Episode, strings.Join(ids, ", "), err)
	}
	d.moveAside(ctx, e, moves)
	return true, nil
}

// moveAsideScript renames each SRC DST pair whose SRC exists (never
// following it, never into a directory).
//
// It is scripts/move_aside.sh.
//
//go:embed scripts/move_aside.sh
var moveAsideScript string

// moveAside keeps the retired attempts' outputs beside the new ones (the
// new job would truncate them). A failure is logged: the new attempt's
// job truncates the file anyway.
func (d *Driver) moveAside(ctx context.Context, e *ledger.Entry, moves map[string]string) {
	if len(moves) == 0 {
		return
	}
	argv := []string{"sh", "-c", moveAsideScript, "sh"}
	for src, dst := range moves {
		argv = append(argv, src, dst)
	}
	if _, err := d.Host.Run(ctx, remote.Command{Argv: argv, Label: "retire"}); err != nil {
		d.logf("%s: could not keep the retired attempts' output: %v", e.Episode, err)
	}
}

// stageNames are the names of ss, for messages.
func stageNames(ss []stages.Stage) []string {
	out := make([]string, len(ss))
	for i, s := range ss {
		out[i] = string(s)
	}
	return out
}
