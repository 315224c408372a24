package episode

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/nemorl/nemorl-slurm/ledger"
	"github.com/nemorl/nemorl-slurm/record"
	"github.com/nemorl/nemorl-slurm/rules"
	"github.com/nemorl/nemorl-slurm/slurm"
	"github.com/nemorl/nemorl-slurm/stages"
)

// change is one decided change of an episode's ledger entry: what
// rules.Decide said (the author's verified record, eval's files checked,
// the outcome), a retry's retired attempts, a staging, a submission, a
// cancel. Only entries.apply makes it, and saves it: no other code of the
// engine writes an entry's fields or calls ledger.Save (ledger.Create
// writes a new entry once).
//
// A change is saved once, whole. A submission is the one exception, a
// decision saved twice: its intent (intent) before sbatch, so that a crash
// during sbatch leaves the look-up that adopts the job rather than a
// second one, and its job id (job) after; or, when sbatch made no job, the
// intent dropped (withdraw).
type change struct {
	// rules.Decide's Decision.AuthorVerified, and the author's job as it
	// ended (kept: not queried again).
	author    *record.Author
	authorJob slurm.JobInfo
	// Decision.EvalOutputChecked.
	evalOutputChecked bool
	// retire: a retry's attempts (retry.go), each the stage's current
	// attempt ending: its submission and ended job dropped, eval's check
	// with them.
	retire []retired
	// cancels are the jobs the tool is about to scancel: on record first,
	// so that their CANCELLED is never read as the policy's.
	cancels []string
	// cancelRequested: why the episode is cancelled (Cancel).
	cancelRequested string
	// staged: the episode's tree is on the cluster; scripts are its
	// scripts' sha256s, recorded unless the entry has them (a restage
	// renders the same).
	staged  bool
	scripts map[stages.Stage]string
	// A submission of stage: its intent, its job (sbatch's answer, or one
	// found on the cluster: adopted), or its intent withdrawn.
	stage    stages.Stage
	intent   *ledger.Submission
	job      *submittedJob
	withdraw bool
	// outcome: the episode ends (Decision.Verdict, or a refusal).
	outcome *rules.Outcome
}

// retired is one stage's attempt a retry ends.
type retired struct {
	stage   stages.Stage
	attempt rules.Attempt
}

// submittedJob is a submission's job id and when the tool learnt it.
type submittedJob struct {
	id      string
	at      time.Time
	adopted bool
}

// parts names the parts c holds.
func (c change) parts() []string {
	var p []string
	if c.staged {
		p = append(p, "staged")
	}
	switch {
	case c.intent != nil:
		p = append(p, string(c.stage)+"'s submission intent")
	case c.job != nil:
		p = append(p, string(c.stage)+" job "+c.job.id)
	case c.withdraw:
		p = append(p, string(c.stage)+"'s intent withdrawn")
	}
	if c.author != nil {
		p = append(p, "the author's verified record")
	}
	if c.evalOutputChecked {
		p = append(p, "eval's files checked")
	}
	if len(c.retire) > 0 {
		p = append(p, "a retry")
	}
	if len(c.cancels) > 0 {
		p = append(p, "cancels")
	}
	if c.cancelRequested != "" {
		p = append(p, "a cancel request")
	}
	if c.outcome != nil {
		p = append(p, "the outcome "+string(c.outcome.Outcome))
	}
	return p
}

// what names c for errors: the parts it holds, or "nothing".
func (c change) what() string {
	if p := c.parts(); len(p) > 0 {
		return strings.Join(p, ", ")
	}
	return "nothing"
}

// empty reports whether c holds nothing to record.
func (c change) empty() bool { return len(c.parts()) == 0 }

// applyTo makes c in e. It only writes e: the decision is made (rules,
// retry, submit), this records it.
func (c change) applyTo(e *ledger.Entry) {
	if c.staged {
		e.Staged = true
		if e.Scripts == nil && c.scripts != nil {
			e.Scripts = maps.Clone(c.scripts)
		}
	}
	if c.stage != "" {
		if e.Jobs == nil {
			e.Jobs = map[stages.Stage]*ledger.Submission{}
		}
		switch {
		case c.intent != nil:
			e.Jobs[c.stage] = c.intent
		case c.job != nil:
			if sub := e.Jobs[c.stage]; sub != nil {
				sub.JobID, sub.Submitted, sub.Adopted = c.job.id, c.job.at, c.job.adopted
			}
		case c.withdraw:
			delete(e.Jobs, c.stage)
		}
	}
	if c.author != nil && e.Author == nil {
		e.Author = c.author
		e.MarkEnded(stages.Author, c.authorJob)
	}
	if c.evalOutputChecked {
		e.EvalOutputChecked = true
	}
	if len(c.retire) > 0 {
		if e.Retried == nil {
			e.Retried = map[stages.Stage][]rules.Attempt{}
		}
		for _, r := range c.retire {
			e.Retried[r.stage] = append(e.Retried[r.stage], r.attempt)
			delete(e.Jobs, r.stage)
			delete(e.Ended, r.stage)
		}
		e.EvalOutputChecked = false
	}
	e.RecordCancels(c.cancels)
	if c.cancelRequested != "" {
		e.CancelRequested = c.cancelRequested
	}
	if c.outcome != nil && e.Outcome == nil {
		e.Outcome = c.outcome
	}
}

// entries is the one owner of the episodes' ledger entries while the
// engine runs: apply.
type entries struct {
	ledger *ledger.Ledger
}

// apply makes c in e and saves e. A failed save leaves e as it was, in
// memory as on disk: nothing the engine did not record is acted upon.
func (w *entries) apply(e *ledger.Entry, c change) error {
	before := snapshot(e)
	c.applyTo(e)
	if err := w.ledger.Save(e); err != nil {
		*e = before
		return fmt.Errorf("episode %s: record %s: %w", e.Episode, c.what(), err)
	}
	return nil
}

// snapshot is e as applyTo and ledger.Save find it, to put back: a copy
// of the entry and of everything of it they write into (the submissions,
// the maps and slices they change in place); what they only replace (the
// author's record, the outcome) is shared. A few allocations, not a deep
// copy: serve applies a change per episode of a 10,000-row burst.
func snapshot(e *ledger.Entry) ledger.Entry {
	c := *e
	if e.Jobs != nil {
		c.Jobs = make(map[stages.Stage]*ledger.Submission, len(e.Jobs))
		for s, sub := range e.Jobs {
			if sub != nil {
				cp := *sub
				sub = &cp
			}
			c.Jobs[s] = sub
		}
	}
	c.Ended = maps.Clone(e.Ended)
	if e.Retried != nil {
		c.Retried = make(map[stages.Stage][]rules.Attempt, len(e.Retried))
		for s, as := range e.Retried {
			c.Retried[s] = slices.Clone(as)
		}
	}
	c.CancelsIssued = slices.Clone(e.CancelsIssued)
	return c
}
