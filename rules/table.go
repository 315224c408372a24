package rules

import (
	"fmt"
	"slices"
	"time"

	"github.com/nemorl/nemorl-slurm/record"
	"github.com/nemorl/nemorl-slurm/slurm"
	"github.com/nemorl/nemorl-slurm/stages"
)

// Table is the attribution rule, in the order Decide tries it (the first
// rule that matches decides) and in the order of the README's table. Who
// could have caused a failure decides it: everything in the author
// container and everything the train job does is the policy's; the
// cluster's failures and the operator's acts are not; the trusted eval is
// nobody's if isolation holds, and the policy's without it.
var Table = []Rule{
	// The tool's own record stands before everything.
	{"ledger-seal", Chain, func(d *decider) *Verdict {
		if d.f.SealBroken == "" {
			return nil
		}
		return fail(IntegrityViolation, "", ReasonLedgerTampered, d.f.SealBroken).tampered()
	}},
	{"cancel-on-record", Chain, func(d *decider) *Verdict {
		// A cancel on record (cancel, a deadline, an interrupt) wins over
		// whatever the stopped jobs printed as they were stopped, once
		// they have stopped; an eval that completed is still scored.
		if d.f.CancelRequested == "" {
			return nil
		}
		if d.live() {
			// Nothing is decided until the cancelled jobs have ended:
			// sacct reports each end seconds apart, and a rule that saw
			// one job's CANCELLED before the others' would blame it. A
			// job Slurm forgot is left to job-lost.
			for _, s := range stages.All {
				if j, ok := d.job(s); ok && j.State.Class == slurm.Unknown && j.Source == slurm.SourceNone && d.waited("unknown-"+j.ID) > JobLostAfter {
					return nil
				}
			}
			d.pending = true
			return nil
		}
		if e, ok := d.job(stages.Eval); ok && e.State.Class == slurm.Succeeded {
			return nil
		}
		return fail(InfraFailure, d.firstUnfinished(), d.f.CancelRequested, "the episode's jobs were cancelled: "+d.f.CancelRequested)
	}},
	{"submit-refused", TheCluster, func(d *decider) *Verdict {
		for _, s := range stages.All {
			if why := d.f.Submit[s].Refused; why != "" {
				return fail(InfraFailure, s, ReasonSubmitRefused, fmt.Sprintf("sbatch refused the %s job: %s", s, why))
			}
		}
		return nil
	}},
	{"impostor-job", Nobody, func(d *decider) *Verdict {
		for _, s := range stages.All {
			if imp := d.f.Submit[s].Impostor; imp != "" {
				return fail(IntegrityViolation, s, ReasonImpostorJob, imp+"; cancelled").tampered()
			}
		}
		return nil
	}},
	// Slurm's account of a change to an episode job the tool never makes:
	// without isolation the policy's code (run as the user) can make it.
	{"job-held", ThePolicy, func(d *decider) *Verdict {
		// Once the stage before it has ended (sacct may not show a hold:
		// squeue, slurmctld's live view, does; a poll takes a pending
		// job from squeue already, and only a job known from sacct is
		// asked of squeue again).
		if d.f.Isolated {
			return nil
		}
		for _, s := range []string{stages.Train, stages.Eval} {
			j, ok := d.job(s)
			if !ok || j.State.Class != slurm.Pending {
				continue
			}
			if _, before := d.ended(stages.All[slices.Index(stages.All, s)-1]); !before {
				continue
			}
			held := j.HeldBy() == "user"
			if !held && j.Source != slurm.SourceSqueue { // squeue's view is the one a hold shows in
				if d.f.Queue == nil {
					d.need |= NeedQueue
					return nil
				}
				if q, ok := d.f.Queue[s]; ok && q.HeldBy() == "user" {
					held, j.Reason = true, q.Reason
				}
			}
			if held {
				return fail(PolicyFailure, s, ReasonJobHeld, fmt.Sprintf("%s job %s is held by this user (reason %s), and nemorl-slurm never holds a job: without isolation the policy's code can (scontrol hold)", s, j.ID, j.Reason)).tampered()
			}
		}
		return nil
	}},
	{"job-modified", ThePolicy, func(d *decider) *Verdict {
		if d.f.Isolated {
			return nil
		}
		for _, s := range []string{stages.Train, stages.Eval} {
			j, ok := d.job(s)
			want := d.f.TimeLimits[s]
			if ok && want > 0 && j.TimeLimit != 0 && j.TimeLimit != want {
				got := "UNLIMITED"
				if j.TimeLimit > 0 {
					got = j.TimeLimit.String()
				}
				return fail(PolicyFailure, s, ReasonJobModified, fmt.Sprintf("%s job %s has time limit %s, but its script asked for %s, and nemorl-slurm never changes it: without isolation the policy's code can (scontrol update)", s, j.ID, got, want)).tampered()
			}
		}
		return nil
	}},
	{"job-lost", TheCluster, func(d *decider) *Verdict {
		// A job Slurm forgot, after JobLostAfter of continuous evidence:
		// every poll in between answered and did not know it.
		for _, s := range stages.All {
			j, ok := d.job(s)
			if !ok || j.State.Terminal() || j.State.Class != slurm.Unknown || j.Source != slurm.SourceNone {
				continue
			}
			if w := d.waited("unknown-" + j.ID); w > JobLostAfter {
				return fail(InfraFailure, s, ReasonJobLost, fmt.Sprintf("%s job %s: neither sacct nor squeue has known it for %s", s, j.ID, w.Round(time.Second)))
			}
		}
		return nil
	}},

	// The author: everything in its container is the policy's.
	{"author-foreign-record", ThePolicy, func(d *decider) *Verdict {
		if _, ended := d.ended(stages.Author); !ended || d.authorRecord() != nil {
			return nil
		}
		o, ok := d.output(stages.Author)
		if ok && record.ReasonOf(o.RecordErr) == record.ReasonForeignRecord {
			// A record of another stage in the author's output is
			// tampering, whatever the job's state.
			return recordRejected(stages.Author, o.RecordErr)
		}
		return nil
	}},
	{"author-planted-output", ThePolicy, func(d *decider) *Verdict {
		if _, ended := d.ended(stages.Author); !ended || d.authorRecord() != nil {
			return nil
		}
		o, _ := d.output(stages.Author)
		return d.plantedOutput(stages.Author, o)
	}},
	{"author-cancelled", TheCluster, func(d *decider) *Verdict {
		if a, ended := d.ended(stages.Author); ended && a.State.Failure == slurm.FailureCancelled {
			return d.cancelled(stages.Author, a)
		}
		return nil
	}},
	{"author-script-verdict", TheCluster, func(d *decider) *Verdict {
		if a, ended := d.ended(stages.Author); ended && scriptVerdict(a) {
			return d.verdictFailed(stages.Author, a)
		}
		return nil
	}},
	{"author-failed", ThePolicy, func(d *decider) *Verdict {
		a, ended := d.ended(stages.Author)
		if !ended {
			return nil
		}
		switch a.State.Failure {
		case slurm.FailureExitCode:
			return fail(PolicyFailure, stages.Author, ReasonAuthorFailed,
				fmt.Sprintf("author job %s failed with exit code %s: the author container (Claude Code and what it ran) is the policy's", a.ID, a.ExitCode.Raw))
		case slurm.FailureTimeout, slurm.FailureOutOfMemory:
			return fail(PolicyFailure, stages.Author, ReasonAuthorFailed,
				fmt.Sprintf("author job %s ended %s: the author container is the policy's", a.ID, a.State.Raw))
		}
		return nil
	}},
	{"author-slurm-failure", TheCluster, func(d *decider) *Verdict {
		if a, ended := d.ended(stages.Author); ended && a.State.Class != slurm.Succeeded {
			return jobFailed(stages.Author, a)
		}
		return nil
	}},
	{"author-record", ThePolicy, func(d *decider) *Verdict {
		if _, ended := d.ended(stages.Author); !ended || d.authorRecord() != nil {
			return nil
		}
		if o, ok := d.output(stages.Author); ok && o.RecordErr != nil {
			return recordRejected(stages.Author, o.RecordErr)
		}
		return nil
	}},
	{"bad-patch", ThePolicy, func(d *decider) *Verdict {
		a := d.newAuthorRecord()
		if a == nil {
			return nil
		}
		bad := func(format string, args ...any) *Verdict {
			return fail(PolicyFailure, stages.Author, ReasonBadPatch, d.patchPath()+": "+fmt.Sprintf(format, args...)).tampered()
		}
		if a.PatchBytes > stages.MaxPatchBytes {
			return bad("the author record claims %d bytes, more than the %d a patch may have", a.PatchBytes, stages.MaxPatchBytes)
		}
		p := d.f.Patch
		if p == nil {
			d.need |= NeedPatch
			return nil
		}
		switch fi := p.File; {
		case !fi.Exists:
			// Verified below against the record: fine for an empty patch.
		case !fi.Regular():
			return bad("a %s, not a regular file", fi.Type)
		case fi.Size > stages.MaxPatchBytes:
			return bad("%d bytes, more than the %d a patch may have", fi.Size, stages.MaxPatchBytes)
		case fi.Size != a.PatchBytes:
			return bad("%d bytes, but the author record says %d", fi.Size, a.PatchBytes)
		}
		return nil
	}},
	{"patch-mismatch", ThePolicy, func(d *decider) *Verdict {
		a := d.newAuthorRecord()
		if a == nil || d.f.Patch == nil {
			return nil
		}
		if err := record.VerifyPatch(a, d.f.Patch.Data); err != nil {
			v := recordRejected(stages.Author, err)
			if !d.f.Patch.File.Exists {
				// Under isolation: the script did not copy it back (its
				// out.log says why: not a regular file, or over the bound).
				v.Detail = fmt.Sprintf("%s is missing, and the author record names a patch of %d bytes; %s", d.patchPath(), a.PatchBytes, v.Detail)
			}
			return v
		}
		d.verified = a
		return nil
	}},
	{"no-patch", ThePolicy, func(d *decider) *Verdict {
		if a := d.authorRecord(); a != nil && a.PatchBytes == 0 {
			return fail(PolicyFailure, stages.Author, ReasonNoPatch, "the author's change.diff is empty: train and eval are not run")
		}
		return nil
	}},

	// Train: everything the job does is the policy's; the cluster's
	// failures are not.
	{"train-cancelled", TheCluster, func(d *decider) *Verdict {
		if t, ended := d.trainEnded(); ended && t.State.Failure == slurm.FailureCancelled {
			return d.cancelled(stages.Train, t)
		}
		return nil
	}},
	{"train-timeout", ThePolicy, func(d *decider) *Verdict {
		if t, ended := d.trainEnded(); ended && t.State.Failure == slurm.FailureTimeout {
			return fail(PolicyFailure, stages.Train, ReasonTrainTimeout,
				fmt.Sprintf("train job %s ran into its time limit (%s): the launcher stops the trainer long before it", t.ID, t.State.Raw))
		}
		return nil
	}},
	{"train-out-of-memory", ThePolicy, func(d *decider) *Verdict {
		if t, ended := d.trainEnded(); ended && t.State.Failure == slurm.FailureOutOfMemory {
			return fail(PolicyFailure, stages.Train, ReasonTrainOutOfMemory, fmt.Sprintf("train job %s ran out of memory", t.ID))
		}
		return nil
	}},
	{"train-output-bound", ThePolicy, func(d *decider) *Verdict {
		if t, ended := d.trainEnded(); ended && scriptVerdict(t) && t.ExitCode.Code == stages.ExitOutputBound {
			return fail(PolicyFailure, stages.Train, ReasonOutputTooLarge,
				fmt.Sprintf("train job %s: the weights its payload left are larger than the pinned architecture can be (exit %d): nothing was copied out; see nemorl-slurm logs --stage train", t.ID, stages.ExitOutputBound))
		}
		return nil
	}},
	{"train-script-verdict", TheCluster, func(d *decider) *Verdict {
		if t, ended := d.trainEnded(); ended && scriptVerdict(t) {
			return d.verdictFailed(stages.Train, t)
		}
		return nil
	}},
	{"train-slurm-failure", TheCluster, func(d *decider) *Verdict {
		if t, ended := d.trainEnded(); ended && t.State.Class == slurm.Failed && t.State.Failure != slurm.FailureExitCode {
			return jobFailed(stages.Train, t)
		}
		return nil
	}},
	{"train-planted-output", ThePolicy, func(d *decider) *Verdict {
		if _, ended := d.trainEnded(); !ended {
			return nil
		}
		o, _ := d.output(stages.Train)
		return d.plantedOutput(stages.Train, o)
	}},
	{"train-record", ThePolicy, func(d *decider) *Verdict {
		t, ended := d.trainEnded()
		if !ended {
			return nil
		}
		o, ok := d.output(stages.Train)
		if !ok || o.RecordErr == nil {
			return nil
		}
		v := recordRejected(stages.Train, o.RecordErr)
		if t.State.Class == slurm.Failed {
			v.Detail += fmt.Sprintf("; the train job failed with exit code %s", t.ExitCode.Raw)
		}
		return v
	}},
	{"train-status", ThePolicy, func(d *decider) *Verdict {
		tr := d.trainRecordRead()
		if tr == nil || !tr.Status.PolicyFailure() {
			return nil
		}
		reason := ReasonTrainFailed
		if tr.Status == record.StatusPatchFailed {
			reason = ReasonPatchRejected
		}
		v := fail(PolicyFailure, stages.Train, reason, fmt.Sprintf("train record status %q (trainer exit status %d)", tr.Status, tr.TrainerExitStatus))
		v.Train = tr
		return v
	}},
	{"train-failed-record-ok", ThePolicy, func(d *decider) *Verdict {
		tr := d.trainRecordRead()
		if t, _ := d.trainEnded(); tr == nil || t.State.Class == slurm.Succeeded {
			return nil
		}
		t, _ := d.trainEnded()
		v := fail(PolicyFailure, stages.Train, ReasonTrainFailed,
			fmt.Sprintf("train job %s failed with exit code %s although its record says %q", t.ID, t.ExitCode.Raw, tr.Status))
		v.Train = tr
		return v
	}},

	// Eval: the trusted evaluator. Its files are reachable by the policy
	// only without isolation; a failure of its job is the cluster's.
	{"eval-files", Nobody, func(d *decider) *Verdict {
		if d.trainRecord() == nil {
			return nil
		}
		e, ok := d.job(stages.Eval)
		_, ended := d.ended(stages.Eval)
		// Looked at once train has ended (slurmstepd opens eval's output
		// as eval starts: a FIFO there stalls it, a file or directory it
		// may not write fails it), and again if eval failed (a helper
		// job may have acted later).
		if !ok || (ended && e.State.Class == slurm.Succeeded) || (!ended && d.f.EvalOutputChecked) {
			return nil
		}
		if d.f.EvalFiles == nil {
			d.need |= NeedEvalFiles
			return nil
		}
		if v := d.evalFilesModified(d.f.EvalFiles); v != nil {
			return v
		}
		if !ended {
			d.evalChecked = true
		}
		return nil
	}},
	{"eval-cancelled", TheCluster, func(d *decider) *Verdict {
		if e, ended := d.evalEnded(); ended && e.State.Failure == slurm.FailureCancelled {
			return d.cancelled(stages.Eval, e)
		}
		return nil
	}},
	{"eval-slurm-failure", TheCluster, func(d *decider) *Verdict {
		if e, ended := d.evalEnded(); ended && e.State.Class != slurm.Succeeded && e.State.Failure != slurm.FailureExitCode {
			return jobFailed(stages.Eval, e)
		}
		return nil
	}},
	{"eval-inputs-tampered", Nobody, func(d *decider) *Verdict {
		if e, ok := d.evalExit(stages.ExitInputsTampered); ok {
			return fail(IntegrityViolation, stages.Eval, ReasonEvalInputsTampered,
				fmt.Sprintf("eval job %s refused to run (exit %d): the eval image or the evaluator inputs differ from those pinned", e.ID, stages.ExitInputsTampered)).tampered()
		}
		return nil
	}},
	{"eval-output-redirected", Nobody, func(d *decider) *Verdict {
		if e, ok := d.evalExit(stages.ExitOutputNotOwn); ok {
			return fail(IntegrityViolation, stages.Eval, ReasonEvalOutputRedirected,
				fmt.Sprintf("eval job %s refused to print its record (exit %d): its standard output was not its %s (the job's StdOut was changed or the file replaced)", e.ID, stages.ExitOutputNotOwn, d.evalOutPath())).tampered()
		}
		return nil
	}},
	{"eval-bad-weights", ThePolicy, func(d *decider) *Verdict {
		if e, ok := d.evalExit(stages.ExitInputBad); ok {
			return fail(PolicyFailure, stages.Eval, ReasonBadWeights,
				fmt.Sprintf("eval job %s found no regular file of weights where train exported them (exit %d)", e.ID, stages.ExitInputBad))
		}
		if e, ok := d.evalExit(stages.ExitWeightsRejected); ok {
			return fail(PolicyFailure, stages.Eval, ReasonBadWeights,
				fmt.Sprintf("eval job %s: the trusted check rejected the weights train exported (exit %d); see nemorl-slurm logs %s --stage eval", e.ID, stages.ExitWeightsRejected, d.f.Episode))
		}
		return nil
	}},
	{"eval-script-verdict", TheCluster, func(d *decider) *Verdict {
		if e, ok := d.evalExit(stages.ExitIsolation); ok {
			return d.verdictFailed(stages.Eval, e)
		}
		if e, ok := d.evalExit(stages.ExitNoGPU); ok {
			return d.verdictFailed(stages.Eval, e)
		}
		return nil
	}},
	{"eval-rollouts-rejected", TheCluster, func(d *decider) *Verdict {
		if e, ok := d.evalExit(stages.EvalRejectedExit); ok {
			return fail(InfraFailure, stages.Eval, ReasonRolloutsRejected,
				fmt.Sprintf("eval job %s: the evaluator rejected the rollouts (exit %d): see nemorl-slurm logs %s --stage eval", e.ID, stages.EvalRejectedExit, d.f.Episode))
		}
		return nil
	}},
	{"eval-exit-code", TheCluster, func(d *decider) *Verdict {
		if e, ended := d.evalEnded(); ended && e.State.Class != slurm.Succeeded {
			return jobFailed(stages.Eval, e)
		}
		return nil
	}},
	{"times-unknown", TheCluster, func(d *decider) *Verdict {
		e, ended := d.evalEnded()
		if !ended {
			return nil
		}
		t, _ := d.ended(stages.Train)
		if !t.End.IsZero() && !e.Start.IsZero() && !e.End.IsZero() {
			return nil
		}
		if w := d.waited("times"); w > TimesUnknownAfter {
			return fail(InfraFailure, stages.Eval, ReasonTimesUnknown,
				fmt.Sprintf("sacct has not reported train's end and eval's start for %s: the order of the jobs cannot be checked", w.Round(time.Second)))
		}
		d.pending = true
		return nil
	}},
	{"eval-before-train-end", Nobody, func(d *decider) *Verdict {
		e, ended := d.evalEnded()
		t, _ := d.ended(stages.Train)
		if ended && e.Start.Before(t.End) {
			return fail(IntegrityViolation, stages.Eval, ReasonEvalBeforeTrainEnd,
				fmt.Sprintf("eval job %s started at %s, before train job %s ended at %s", e.ID, e.Start.UTC().Format("15:04:05"), t.ID, t.End.UTC().Format("15:04:05"))).tampered()
		}
		return nil
	}},
	{"eval-output-planted", Nobody, func(d *decider) *Verdict {
		if _, ended := d.evalEnded(); !ended {
			return nil
		}
		o, _ := d.output(stages.Eval)
		return d.plantedOutput(stages.Eval, o)
	}},
	{"eval-output-gone", Nobody, func(d *decider) *Verdict {
		e, ended := d.evalEnded()
		if !ended {
			return nil
		}
		if o, ok := d.output(stages.Eval); ok && !o.File.Exists {
			return fail(IntegrityViolation, stages.Eval, ReasonEvalOutputTampered,
				fmt.Sprintf("eval job %s completed, but its output %s is gone", e.ID, o.Path)).tampered()
		}
		return nil
	}},
	{"eval-output-changed", Nobody, func(d *decider) *Verdict {
		// The file must be the one the eval job wrote, last changed while
		// it ran and before its quiet watch: a redirected StdOut leaves a
		// file older than the job, a rewrite or a rename after the
		// script's last look a younger one.
		e, ended := d.evalEnded()
		if !ended {
			return nil
		}
		o, _ := d.output(stages.Eval)
		latest := e.End.Add(-EvalOutputQuiet).Add(EvalOutputSlack)
		if c := o.File.Ctime; c.Before(e.Start.Add(-EvalOutputSlack)) || c.After(latest) {
			return fail(IntegrityViolation, stages.Eval, ReasonEvalOutputTampered,
				fmt.Sprintf("eval's output %s last changed at %s, outside eval job %s's run before its quiet watch (%s to %s; the job ran to %s)", o.Path,
					c.UTC().Format(time.RFC3339), e.ID, e.Start.UTC().Format(time.RFC3339), latest.UTC().Format(time.RFC3339), e.End.UTC().Format(time.RFC3339))).tampered()
		}
		return nil
	}},
	{"eval-record", Nobody, func(d *decider) *Verdict {
		e, ended := d.evalEnded()
		if !ended {
			return nil
		}
		o, _ := d.output(stages.Eval)
		if o.RecordErr != nil {
			v := recordRejected(stages.Eval, o.RecordErr)
			v.Train = d.trainRecord()
			return v
		}
		ev, _ := o.Record.(*record.Eval)
		if err := record.VerifyEvalJob(ev, e.ID); err != nil {
			return recordRejected(stages.Eval, err)
		}
		return nil
	}},
	{"weights-mismatch", ThePolicy, func(d *decider) *Verdict {
		if _, ended := d.evalEnded(); !ended {
			return nil
		}
		// The eval record is the trusted evaluator's (checked above): the
		// weights it scored are not those the train record names, so the
		// train job's record or its checkpoint lied.
		tr, ev := d.trainRecord(), d.f.Outputs[stages.Eval].Record.(*record.Eval)
		if err := record.VerifyWeights(tr, ev); err != nil {
			v := fail(PolicyFailure, stages.Train, string(record.ReasonOf(err)), err.Error()).tampered()
			v.Train = tr
			return v
		}
		return nil
	}},
	{"eval-checked-patch", Nobody, func(d *decider) *Verdict {
		// The contamination check must have read the patch train ran,
		// the author's: a clean patch shown in its place after the
		// author's ended is a deliberate act.
		a := d.authorRecord()
		if _, ended := d.evalEnded(); !ended || a == nil {
			return nil
		}
		ev := d.f.Outputs[stages.Eval].Record.(*record.Eval)
		if err := record.VerifyCheckedPatch(a, ev); err != nil {
			v := fail(IntegrityViolation, stages.Eval, string(record.ReasonOf(err)), err.Error()).tampered()
			v.Train = d.trainRecord()
			return v
		}
		return nil
	}},
	{"eval-contaminated", ThePolicy, func(d *decider) *Verdict {
		// The trusted check found the eval problems or their answers in
		// the patch the policy wrote: its weights were not scored.
		if _, ended := d.evalEnded(); !ended {
			return nil
		}
		ev := d.f.Outputs[stages.Eval].Record.(*record.Eval)
		if !ev.Contaminated {
			return nil
		}
		v := fail(PolicyFailure, stages.Eval, ReasonContaminated, "eval's contamination check: "+ev.Contamination).tampered()
		v.Train = d.trainRecord()
		return v
	}},
	{"scored", TheCluster, func(d *decider) *Verdict {
		if _, ended := d.evalEnded(); !ended {
			return nil
		}
		return &Verdict{Kind: Scored, Train: d.trainRecord(), Eval: d.f.Outputs[stages.Eval].Record.(*record.Eval)}
	}},
}

// newAuthorRecord is the author's record, read from a completed author
// job's output and not yet verified; nil when there is none to verify.
func (d *decider) newAuthorRecord() *record.Author {
	a, ended := d.ended(stages.Author)
	if !ended || a.State.Class != slurm.Succeeded || d.f.Author != nil || d.verified != nil {
		return nil
	}
	o, ok := d.output(stages.Author)
	if !ok || o.RecordErr != nil {
		return nil
	}
	r, _ := o.Record.(*record.Author)
	return r
}

func (d *decider) patchPath() string {
	if d.f.Patch != nil && d.f.Patch.Path != "" {
		return d.f.Patch.Path
	}
	return "author/change.diff"
}

func (d *decider) evalOutPath() string {
	if d.f.EvalFiles != nil {
		return d.f.EvalFiles.OutPath
	}
	return stages.Output(stages.Eval)
}

// trainEnded is train's job once the author's patch is verified and the
// job has ended.
func (d *decider) trainEnded() (slurm.JobInfo, bool) {
	if d.authorRecord() == nil {
		return slurm.JobInfo{}, false
	}
	return d.ended(stages.Train)
}

// trainRecordRead is train's accepted record once its job ended (nil
// before, or when the train rules above decided).
func (d *decider) trainRecordRead() *record.Train {
	if _, ended := d.trainEnded(); !ended {
		return nil
	}
	o, ok := d.output(stages.Train)
	if !ok || o.RecordErr != nil {
		return nil
	}
	tr, _ := o.Record.(*record.Train)
	return tr
}

// evalEnded is eval's job once train's record is accepted and the job
// has ended.
func (d *decider) evalEnded() (slurm.JobInfo, bool) {
	if d.trainRecord() == nil {
		return slurm.JobInfo{}, false
	}
	return d.ended(stages.Eval)
}

// evalExit is eval's job when it ended FAILED with exit status code.
func (d *decider) evalExit(code int) (slurm.JobInfo, bool) {
	e, ended := d.evalEnded()
	return e, ended && e.State.Failure == slurm.FailureExitCode && e.ExitCode.Code == code
}
