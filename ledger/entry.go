package ledger

import (
	"slices"

	"github.com/nemorl/nemorl-slurm/rules"
	"github.com/nemorl/nemorl-slurm/slurm"
	"github.com/nemorl/nemorl-slurm/stages"
)

// JobIDs returns the episode's known job ids in chain order.
func (e *Entry) JobIDs() []string {
	var ids []string
	for _, s := range stages.All {
		if id := e.JobID(s); id != "" {
			ids = append(ids, id)
		}
	}
	return ids
}

// RecordCancels adds ids to the cancels this tool issued (before the
// scancel: a CANCELLED job the ledger lists is never the policy's doing).
func (e *Entry) RecordCancels(ids []string) {
	for _, id := range ids {
		if !slices.Contains(e.CancelsIssued, id) {
			e.CancelsIssued = append(e.CancelsIssued, id)
		}
	}
}

// Attempts is how many times stage has run or been queued to run: every
// run of its retired attempts and of its current job (a job Slurm
// requeued ran more than once).
func (e *Entry) Attempts(stage stages.Stage, infos map[string]slurm.JobInfo) int {
	n := 0
	for _, a := range e.Retried[stage] {
		n += max(a.Job.Runs, 1)
	}
	if id := e.JobID(stage); id != "" {
		n += max(infos[id].Runs, 1)
	}
	return n
}

// ArrayScripts are the job arrays the episode ran a task of, its current
// submissions' and its retired attempts': array name → where the array's
// script was staged.
func (e *Entry) ArrayScripts() map[string]string {
	out := map[string]string{}
	for _, sub := range e.Jobs {
		if sub != nil && sub.Array != nil {
			out[sub.Array.Name] = sub.Array.Script
		}
	}
	for _, as := range e.Retried {
		for _, a := range as {
			if a.Array != "" {
				out[a.Array] = a.ArrayScript
			}
		}
	}
	return out
}

// AttemptNumber is the number of the stage's next submission.
func (e *Entry) AttemptNumber(stage stages.Stage) int { return len(e.Retried[stage]) + 1 }

// RetiredJobs are the job ids of stage's retired attempts.
func (e *Entry) RetiredJobs(stage stages.Stage) []string {
	var ids []string
	for _, a := range e.Retried[stage] {
		ids = append(ids, a.JobID)
	}
	return ids
}

// MarkEnded records stage's job as ended and collected: it is not queried
// again.
func (e *Entry) MarkEnded(stage stages.Stage, j slurm.JobInfo) {
	if e.Ended == nil {
		e.Ended = map[stages.Stage]rules.JobSummary{}
	}
	e.Ended[stage] = rules.Summarize(j)
}
