package rules

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/nemorl/nemorl-slurm/record"
	"github.com/nemorl/nemorl-slurm/slurm"
	"github.com/nemorl/nemorl-slurm/stages"
)

// table is the attribution rule, in the order Decide tries it (the first
// rule that matches decides) and in the order of docs/episode.md's table. Who
// could have caused a failure decides it: everything in the author
// container and everything the train job does is the policy's; the
// cluster's failures and the operator's acts are not; the trusted eval is
// nobody's if isolation holds, and the policy's without it.
//
// Each row is a pure function of the facts: it returns its Result and
// reads nothing another row returned (what a row needs of the facts,
// such as the author's record whose patch verifies, is computed from them
// by view). The order is priority only: a row may leave to rows before it
// the cases they decide (author-failed leaves the script's verdicts to
// author-script-verdict), never data. Rules returns a copy.
var table = []Rule{
	// The tool's own record stands before everything.
	{"ledger-seal", Chain, func(v view) (r Result) {
		if v.f.SealBroken == "" {
			return r
		}
		return r.with(fail(IntegrityViolation, "", ReasonLedgerTampered, v.f.SealBroken).tampered())
	}},
	{"cancel-on-record", Chain, func(v view) (r Result) {
		// A cancel on record (cancel, a deadline, an interrupt) wins over
		// whatever the stopped jobs printed as they were stopped, once
		// they have stopped; an eval that completed is still scored.
		if v.f.CancelRequested == "" {
			return r
		}
		if v.live(&r) && !v.onlyWithdrawnLive(&r) {
			// Nothing is decided until the cancelled jobs have ended:
			// sacct reports each end seconds apart, and a rule that saw
			// one job's CANCELLED before the others' would blame it. A
			// job Slurm forgot is left to job-lost.
			for _, s := range stages.All {
				if j, ok := v.job(s); ok && j.State.Class == slurm.Unknown && j.Source == slurm.SourceNone && v.waited(&r, "unknown-"+j.ID) > JobLostAfter {
					return r
				}
			}
			r.Pending = true
			return r
		}
		if e, ok := v.job(stages.Eval); ok && e.State.Class == slurm.Succeeded {
			return r
		}
		return r.with(fail(InfraFailure, v.firstUnfinished(), v.f.CancelRequested, "the episode's jobs were cancelled: "+v.f.CancelRequested))
	}},
	{"submit-refused", TheCluster, func(v view) (r Result) {
		for _, s := range stages.All {
			if why := v.f.Submit[s].Refused; why != "" {
				return r.with(fail(InfraFailure, s, ReasonSubmitRefused, fmt.Sprintf("sbatch refused the %s job: %s", s, why)))
			}
		}
		return r
	}},
	{"impostor-job", Nobody, func(v view) (r Result) {
		for _, s := range stages.All {
			if imp := v.f.Submit[s].Impostor; imp != "" {
				return r.with(fail(IntegrityViolation, s, ReasonImpostorJob, imp+"; cancelled").tampered())
			}
		}
		return r
	}},
	// Slurm's account of a change to an episode job the tool never makes:
	// without isolation the policy's code (run as the user) can make it.
	{"job-held", ThePolicy, func(v view) (r Result) {
		// Once the stage before it has ended (sacct may not show a hold:
		// squeue, slurmctld's live view, does; a poll takes a pending
		// job from squeue already, and only a job known from sacct is
		// asked of squeue again).
		if v.f.Isolated {
			return r
		}
		for _, s := range []stages.Stage{stages.Train, stages.Eval} {
			j, ok := v.job(s)
			if !ok || j.State.Class != slurm.Pending {
				continue
			}
			if _, before := v.ended(&r, stages.All[slices.Index(stages.All, s)-1]); !before {
				continue
			}
			// squeue's view is the one a hold shows in, and the only one
			// that tells a user's hold from Slurm's: sacct records a job
			// Slurm held after a failed launch as JobHeldUser too (lab,
			// 22.05.8), where squeue says "launch failed requeued held".
			held := j.Source == slurm.SourceSqueue && j.HeldBy() == "user"
			if j.Source != slurm.SourceSqueue {
				if v.f.Queue == nil {
					r.Need |= NeedQueue
					return r
				}
				if q, ok := v.f.Queue[s]; ok && q.HeldBy() == "user" {
					held, j.Reason = true, q.Reason
				}
			}
			if held {
				return r.with(fail(PolicyFailure, s, ReasonJobHeld, fmt.Sprintf("%s job %s is held by this user (reason %s), and nemorl-slurm never holds a job: without isolation the policy's code can (scontrol hold)", s, j.ID, j.Reason)).tampered())
			}
		}
		return r
	}},
	{"job-modified", ThePolicy, func(v view) (r Result) {
		if v.f.Isolated {
			return r
		}
		for _, s := range []stages.Stage{stages.Train, stages.Eval} {
			j, ok := v.job(s)
			want := v.f.TimeLimits[s]
			if ok && want > 0 && j.TimeLimit != 0 && j.TimeLimit != want {
				got := "UNLIMITED"
				if j.TimeLimit > 0 {
					got = j.TimeLimit.String()
				}
				return r.with(fail(PolicyFailure, s, ReasonJobModified, fmt.Sprintf("%s job %s has time limit %s, but its script asked for %s, and nemorl-slurm never changes it: without isolation the policy's code can (scontrol update)", s, j.ID, got, want)).tampered())
			}
		}
		return r
	}},
	{"task-withdrawn", ThePolicy, func(v view) (r Result) {
		// An array task withdrawn before it ran: Slurm keeps no record
		// of a task cancelled while pending in its array's record (nor,
		// on 24.11, of a split-out one once slurmctld forgot it), so its
		// uid is unknown; the tool's own cancel is on record
		// (cancel-on-record). A task whose dependency can never be met
		// is withdrawn too (KillOnInvalidDep): an eval task is this
		// row's only while its train task COMPLETED; otherwise train's
		// end decides. Author and train tasks wait on nothing. Without
		// isolation the policy's code (a sibling episode's, the same
		// user) can scancel a task; with isolation it cannot reach
		// Slurm: an administrator.
		for _, s := range stages.All {
			j, ok := v.job(s)
			if !ok || !v.withdrawn(&r, j) {
				continue
			}
			if s == stages.Eval {
				if t, ended := v.ended(&r, stages.Train); !ended || t.State.Name != "COMPLETED" {
					continue
				}
			}
			detail := fmt.Sprintf("%s job %s was withdrawn from its job array before it ran: Slurm has kept no record of it for %s while its array's other tasks have theirs, which only a scancel of that task does, and nemorl-slurm did not cancel it",
				s, j.ID, v.f.Waited["withdrawn-"+j.ID].Round(time.Second))
			if v.f.Isolated {
				return r.with(fail(InfraFailure, s, ReasonCancelled, detail+"; with isolation the policy cannot reach Slurm: an administrator"))
			}
			return r.with(fail(PolicyFailure, s, ReasonForeignCancel, detail+"; without isolation the policy's code (a sibling episode's, the same user) can").tampered())
		}
		return r
	}},
	{"job-lost", TheCluster, func(v view) (r Result) {
		// A job Slurm forgot, after JobLostAfter of continuous evidence:
		// every poll in between answered and did not know it.
		for _, s := range stages.All {
			j, ok := v.job(s)
			if !ok || j.State.Terminal() || j.State.Class != slurm.Unknown || j.Source != slurm.SourceNone {
				continue
			}
			if w := v.waited(&r, "unknown-"+j.ID); w > JobLostAfter {
				return r.with(fail(InfraFailure, s, ReasonJobLost, fmt.Sprintf("%s job %s: neither sacct nor squeue has known it for %s", s, j.ID, w.Round(time.Second))))
			}
		}
		return r
	}},
	{"launch-held", TheCluster, func(v view) (r Result) {
		// Slurm requeues a batch job whose launch failed (its node lost as
		// it started, a prolog that failed) and holds it: PENDING, reason
		// "launch failed requeued held", until someone releases it, which
		// a user may not be allowed to do. Slurm launches the job; nothing
		// of the policy has run in it yet. The cluster's launch failure:
		// train and eval run again (the tool cancels the held job), an
		// author is never run twice.
		for _, s := range stages.All {
			j, ok := v.job(s)
			if !ok || j.State.Class != slurm.Pending {
				continue
			}
			if j.Source != slurm.SourceSqueue && j.HeldBy() != "" {
				// sacct says JobHeldUser for this hold too: squeue tells.
				if v.f.Queue == nil {
					r.Need |= NeedQueue
					return r
				}
				j = v.f.Queue[s]
			}
			if !j.LaunchHeld() {
				continue
			}
			return r.with(fail(InfraFailure, s, string(slurm.FailureLaunch), fmt.Sprintf("%s job %s: Slurm requeued and held it after its launch failed (reason %q); the tool cancels it", s, v.f.Jobs[s].ID, slurm.ReasonLaunchHeld)))
		}
		return r
	}},

	// The author: everything in its container is the policy's.
	{"author-foreign-record", ThePolicy, func(v view) (r Result) {
		if _, ended := v.ended(&r, stages.Author); !ended || v.f.Author != nil {
			return r
		}
		o, ok := v.output(&r, stages.Author)
		if ok && record.ReasonOf(o.RecordErr) == record.ReasonForeignRecord {
			// A record of another stage in the author's output is
			// tampering, whatever the job's state.
			return r.with(recordRejected(stages.Author, o.RecordErr))
		}
		return r
	}},
	{"author-planted-output", ThePolicy, func(v view) (r Result) {
		if _, ended := v.ended(&r, stages.Author); !ended || v.f.Author != nil {
			return r
		}
		o, _ := v.output(&r, stages.Author)
		return r.with(v.plantedOutput(stages.Author, o))
	}},
	{"author-cancelled", TheCluster, func(v view) (r Result) {
		if a, ended := v.ended(&r, stages.Author); ended && a.State.Failure == slurm.FailureCancelled {
			return r.with(v.cancelled(&r, stages.Author, a))
		}
		return r
	}},
	{"author-script-verdict", TheCluster, func(v view) (r Result) {
		if a, ended := v.ended(&r, stages.Author); ended && scriptVerdict(a) {
			return r.with(v.verdictFailed(&r, stages.Author, a))
		}
		return r
	}},
	{"author-failed", ThePolicy, func(v view) (r Result) {
		a, ended := v.ended(&r, stages.Author)
		if !ended {
			return r
		}
		switch a.State.Failure {
		case slurm.FailureExitCode:
			return r.with(fail(PolicyFailure, stages.Author, ReasonAuthorFailed,
				fmt.Sprintf("author job %s failed with exit code %s: the author container (Claude Code and what it ran) is the policy's", a.ID, a.ExitCode.Raw)))
		case slurm.FailureTimeout, slurm.FailureOutOfMemory:
			return r.with(fail(PolicyFailure, stages.Author, ReasonAuthorFailed,
				fmt.Sprintf("author job %s ended %s: the author container is the policy's", a.ID, a.State.Raw)))
		}
		return r
	}},
	{"author-slurm-failure", TheCluster, func(v view) (r Result) {
		if a, ended := v.ended(&r, stages.Author); ended && a.State.Class != slurm.Succeeded {
			return r.with(jobFailed(stages.Author, a))
		}
		return r
	}},
	{"author-record", ThePolicy, func(v view) (r Result) {
		if _, ended := v.ended(&r, stages.Author); !ended || v.f.Author != nil {
			return r
		}
		if o, ok := v.output(&r, stages.Author); ok && o.RecordErr != nil {
			return r.with(recordRejected(stages.Author, o.RecordErr))
		}
		return r
	}},
	{"bad-patch", ThePolicy, func(v view) (r Result) {
		a := v.newAuthorRecord(&r)
		if a == nil {
			return r
		}
		bad := func(format string, args ...any) *Verdict {
			return fail(PolicyFailure, stages.Author, ReasonBadPatch, v.patchPath()+": "+fmt.Sprintf(format, args...)).tampered()
		}
		if a.PatchBytes > stages.MaxPatchBytes {
			return r.with(bad("the author record claims %d bytes, more than the %d a patch may have", a.PatchBytes, stages.MaxPatchBytes))
		}
		p := v.f.Patch
		if p == nil {
			r.Need |= NeedPatch
			return r
		}
		switch fi := p.File; {
		case !fi.Exists:
			// Verified below against the record: fine for an empty patch.
		case !fi.Regular():
			return r.with(bad("a %s, not a regular file", fi.Type))
		case fi.Size > stages.MaxPatchBytes:
			return r.with(bad("%d bytes, more than the %d a patch may have", fi.Size, stages.MaxPatchBytes))
		case fi.Size != a.PatchBytes:
			return r.with(bad("%d bytes, but the author record says %d", fi.Size, a.PatchBytes))
		}
		return r
	}},
	{"patch-mismatch", ThePolicy, func(v view) (r Result) {
		a := v.newAuthorRecord(&r)
		if a == nil || v.f.Patch == nil {
			return r
		}
		if err := record.VerifyPatch(a, v.f.Patch.Data); err != nil {
			vd := recordRejected(stages.Author, err)
			if !v.f.Patch.File.Exists {
				// Under isolation: the script did not copy it back (its
				// out.log says why: not a regular file, or over the bound).
				vd.Detail = fmt.Sprintf("%s is missing, and the author record names a patch of %d bytes; %s", v.patchPath(), a.PatchBytes, vd.Detail)
			}
			return r.with(vd)
		}
		r.Verified = a
		return r
	}},
	{"no-patch", ThePolicy, func(v view) (r Result) {
		if a := v.authorRecord(); a != nil && a.PatchBytes == 0 {
			return r.with(fail(PolicyFailure, stages.Author, ReasonNoPatch, "the author's change.diff is empty: train and eval are not run"))
		}
		return r
	}},

	// Train: everything the job does is the policy's; the cluster's
	// failures are not.
	{"train-cancelled", TheCluster, func(v view) (r Result) {
		if t, ended := v.trainEnded(&r); ended && t.State.Failure == slurm.FailureCancelled {
			return r.with(v.cancelled(&r, stages.Train, t))
		}
		return r
	}},
	{"train-timeout", ThePolicy, func(v view) (r Result) {
		if t, ended := v.trainEnded(&r); ended && t.State.Failure == slurm.FailureTimeout {
			return r.with(fail(PolicyFailure, stages.Train, ReasonTrainTimeout,
				fmt.Sprintf("train job %s ran into its time limit (%s): the launcher stops the trainer long before it", t.ID, t.State.Raw)))
		}
		return r
	}},
	{"train-out-of-memory", ThePolicy, func(v view) (r Result) {
		if t, ended := v.trainEnded(&r); ended && t.State.Failure == slurm.FailureOutOfMemory {
			return r.with(fail(PolicyFailure, stages.Train, ReasonTrainOutOfMemory, fmt.Sprintf("train job %s ran out of memory", t.ID)))
		}
		return r
	}},
	{"train-output-bound", ThePolicy, func(v view) (r Result) {
		if t, ended := v.trainEnded(&r); ended && scriptVerdict(t) && t.ExitCode.Code == stages.ExitOutputBound {
			return r.with(fail(PolicyFailure, stages.Train, ReasonOutputTooLarge,
				fmt.Sprintf("train job %s: the weights its payload left are larger than the pinned architecture can be (exit %d): nothing was copied out; see nemorl-slurm logs --stage train", t.ID, stages.ExitOutputBound)))
		}
		return r
	}},
	{"train-script-verdict", TheCluster, func(v view) (r Result) {
		if t, ended := v.trainEnded(&r); ended && scriptVerdict(t) {
			return r.with(v.verdictFailed(&r, stages.Train, t))
		}
		return r
	}},
	{"train-slurm-failure", TheCluster, func(v view) (r Result) {
		if t, ended := v.trainEnded(&r); ended && t.State.Class == slurm.Failed && t.State.Failure != slurm.FailureExitCode {
			return r.with(jobFailed(stages.Train, t))
		}
		return r
	}},
	{"train-planted-output", ThePolicy, func(v view) (r Result) {
		if _, ended := v.trainEnded(&r); !ended {
			return r
		}
		o, _ := v.output(&r, stages.Train)
		return r.with(v.plantedOutput(stages.Train, o))
	}},
	{"train-record", ThePolicy, func(v view) (r Result) {
		t, ended := v.trainEnded(&r)
		if !ended {
			return r
		}
		o, ok := v.output(&r, stages.Train)
		if !ok || o.RecordErr == nil {
			return r
		}
		vd := recordRejected(stages.Train, o.RecordErr)
		if t.State.Class == slurm.Failed {
			vd.Detail += fmt.Sprintf("; the train job failed with exit code %s", t.ExitCode.Raw)
		}
		return r.with(vd)
	}},
	{"train-status", ThePolicy, func(v view) (r Result) {
		tr := v.trainRecordRead(&r)
		if tr == nil || !tr.Status.PolicyFailure() {
			return r
		}
		reason := ReasonTrainFailed
		if tr.Status == record.StatusPatchFailed {
			reason = ReasonPatchRejected
		}
		vd := fail(PolicyFailure, stages.Train, reason, fmt.Sprintf("train record status %q (trainer exit status %d)", tr.Status, tr.TrainerExitStatus))
		vd.Train = tr
		return r.with(vd)
	}},
	{"train-failed-record-ok", ThePolicy, func(v view) (r Result) {
		tr := v.trainRecordRead(&r)
		if t, _ := v.trainEnded(&r); tr == nil || t.State.Class == slurm.Succeeded {
			return r
		}
		t, _ := v.trainEnded(&r)
		vd := fail(PolicyFailure, stages.Train, ReasonTrainFailed,
			fmt.Sprintf("train job %s failed with exit code %s although its record says %q", t.ID, t.ExitCode.Raw, tr.Status))
		vd.Train = tr
		return r.with(vd)
	}},

	// Eval: the trusted evaluator. Its files are reachable by the policy
	// only without isolation; a failure of its job is the cluster's.
	{"eval-files", Nobody, func(v view) (r Result) {
		if v.trainRecord(&r) == nil {
			return r
		}
		e, ok := v.job(stages.Eval)
		_, ended := v.ended(&r, stages.Eval)
		// Looked at once train has ended (slurmstepd opens eval's output
		// as eval starts: a FIFO there stalls it, a file or directory it
		// may not write fails it), and again if eval failed (a helper
		// job may have acted later).
		if !ok || (ended && e.State.Class == slurm.Succeeded) || (!ended && v.f.EvalOutputChecked) {
			return r
		}
		if v.f.EvalFiles == nil {
			r.Need |= NeedEvalFiles
			return r
		}
		if vd := v.evalFilesModified(v.f.EvalFiles); vd != nil {
			return r.with(vd)
		}
		if !ended {
			r.EvalChecked = true
		}
		return r
	}},
	{"eval-cancelled", TheCluster, func(v view) (r Result) {
		if e, ended := v.evalEnded(&r); ended && e.State.Failure == slurm.FailureCancelled {
			return r.with(v.cancelled(&r, stages.Eval, e))
		}
		return r
	}},
	{"eval-slurm-failure", TheCluster, func(v view) (r Result) {
		if e, ended := v.evalEnded(&r); ended && e.State.Class != slurm.Succeeded && e.State.Failure != slurm.FailureExitCode {
			return r.with(jobFailed(stages.Eval, e))
		}
		return r
	}},
	{"eval-inputs-tampered", Nobody, func(v view) (r Result) {
		if e, ok := v.evalExit(&r, stages.ExitInputsTampered); ok {
			return r.with(fail(IntegrityViolation, stages.Eval, ReasonEvalInputsTampered,
				fmt.Sprintf("eval job %s refused to run (exit %d): the eval image or the evaluator inputs differ from those pinned", e.ID, stages.ExitInputsTampered)).tampered())
		}
		return r
	}},
	{"eval-output-redirected", Nobody, func(v view) (r Result) {
		if e, ok := v.evalExit(&r, stages.ExitOutputNotOwn); ok {
			return r.with(fail(IntegrityViolation, stages.Eval, ReasonEvalOutputRedirected,
				fmt.Sprintf("eval job %s refused to print its record (exit %d): its standard output was not its %s (the job's StdOut was changed or the file replaced)", e.ID, stages.ExitOutputNotOwn, v.evalOutPath())).tampered())
		}
		return r
	}},
	{"eval-bad-weights", ThePolicy, func(v view) (r Result) {
		if e, ok := v.evalExit(&r, stages.ExitInputBad); ok {
			return r.with(fail(PolicyFailure, stages.Eval, ReasonBadWeights,
				fmt.Sprintf("eval job %s found no regular file of weights where train exported them (exit %d)", e.ID, stages.ExitInputBad)))
		}
		if e, ok := v.evalExit(&r, stages.ExitWeightsRejected); ok {
			return r.with(fail(PolicyFailure, stages.Eval, ReasonBadWeights,
				fmt.Sprintf("eval job %s: the trusted check rejected the weights train exported (exit %d); see nemorl-slurm logs %s --stage eval", e.ID, stages.ExitWeightsRejected, v.f.Episode)))
		}
		return r
	}},
	{"eval-script-verdict", TheCluster, func(v view) (r Result) {
		if e, ok := v.evalExit(&r, stages.ExitIsolation); ok {
			return r.with(v.verdictFailed(&r, stages.Eval, e))
		}
		if e, ok := v.evalExit(&r, stages.ExitNoGPU); ok {
			return r.with(v.verdictFailed(&r, stages.Eval, e))
		}
		return r
	}},
	{"eval-rollouts-rejected", TheCluster, func(v view) (r Result) {
		if e, ok := v.evalExit(&r, stages.EvalRejectedExit); ok {
			return r.with(fail(InfraFailure, stages.Eval, ReasonRolloutsRejected,
				fmt.Sprintf("eval job %s: the evaluator rejected the rollouts (exit %d): see nemorl-slurm logs %s --stage eval", e.ID, stages.EvalRejectedExit, v.f.Episode)))
		}
		return r
	}},
	{"eval-exit-code", TheCluster, func(v view) (r Result) {
		if e, ended := v.evalEnded(&r); ended && e.State.Class != slurm.Succeeded {
			return r.with(jobFailed(stages.Eval, e))
		}
		return r
	}},
	{"times-unknown", TheCluster, func(v view) (r Result) {
		e, ended := v.evalEnded(&r)
		if !ended {
			return r
		}
		t, _ := v.ended(&r, stages.Train)
		if !t.End.IsZero() && !e.Start.IsZero() && !e.End.IsZero() {
			return r
		}
		if w := v.waited(&r, "times"); w > TimesUnknownAfter {
			return r.with(fail(InfraFailure, stages.Eval, ReasonTimesUnknown,
				fmt.Sprintf("sacct has not reported train's end and eval's start for %s: the order of the jobs cannot be checked", w.Round(time.Second))))
		}
		r.Pending = true
		return r
	}},
	{"eval-before-train-end", Nobody, func(v view) (r Result) {
		e, ended := v.evalEnded(&r)
		t, _ := v.ended(&r, stages.Train)
		if ended && e.Start.Before(t.End) {
			return r.with(fail(IntegrityViolation, stages.Eval, ReasonEvalBeforeTrainEnd,
				fmt.Sprintf("eval job %s started at %s, before train job %s ended at %s", e.ID, e.Start.UTC().Format("15:04:05"), t.ID, t.End.UTC().Format("15:04:05"))).tampered())
		}
		return r
	}},
	{"eval-output-planted", Nobody, func(v view) (r Result) {
		if _, ended := v.evalEnded(&r); !ended {
			return r
		}
		o, _ := v.output(&r, stages.Eval)
		return r.with(v.plantedOutput(stages.Eval, o))
	}},
	{"eval-output-gone", Nobody, func(v view) (r Result) {
		e, ended := v.evalEnded(&r)
		if !ended {
			return r
		}
		if o, ok := v.output(&r, stages.Eval); ok && !o.File.Exists {
			return r.with(fail(IntegrityViolation, stages.Eval, ReasonEvalOutputTampered,
				fmt.Sprintf("eval job %s completed, but its output %s is gone", e.ID, o.Path)).tampered())
		}
		return r
	}},
	{"eval-output-changed", Nobody, func(v view) (r Result) {
		// The file must be the one the eval job wrote, last changed while
		// it ran and before its quiet watch: a redirected StdOut leaves a
		// file older than the job, a rewrite or a rename after the
		// script's last look a younger one.
		e, ended := v.evalEnded(&r)
		if !ended {
			return r
		}
		o, _ := v.output(&r, stages.Eval)
		latest := e.End.Add(-EvalOutputQuiet).Add(EvalOutputSlack)
		if c := o.File.Ctime; c.Before(e.Start.Add(-EvalOutputSlack)) || c.After(latest) {
			return r.with(fail(IntegrityViolation, stages.Eval, ReasonEvalOutputTampered,
				fmt.Sprintf("eval's output %s last changed at %s, outside eval job %s's run before its quiet watch (%s to %s; the job ran to %s)", o.Path,
					c.UTC().Format(time.RFC3339), e.ID, e.Start.UTC().Format(time.RFC3339), latest.UTC().Format(time.RFC3339), e.End.UTC().Format(time.RFC3339))).tampered())
		}
		return r
	}},
	{"eval-record", Nobody, func(v view) (r Result) {
		e, ended := v.evalEnded(&r)
		if !ended {
			return r
		}
		o, ok := v.output(&r, stages.Eval)
		if !ok {
			return r
		}
		if o.RecordErr != nil {
			vd := recordRejected(stages.Eval, o.RecordErr)
			vd.Train = v.trainRecord(&r)
			return r.with(vd)
		}
		ev, _ := o.Record.(*record.Eval)
		// The record names the job it ran in ($SLURM_JOB_ID): an array
		// task's own id (sacct's JobIDRaw), not its ARRAY_TASK.
		own := e.ID
		if e.ArrayJobID != "" {
			if e.RawID == "" {
				r.Pending = true // Slurm has not said yet
				return r
			}
			own = e.RawID
		}
		if err := record.VerifyEvalJob(ev, own); err != nil {
			return r.with(recordRejected(stages.Eval, err))
		}
		return r
	}},
	{"weights-mismatch", ThePolicy, func(v view) (r Result) {
		if _, ended := v.evalEnded(&r); !ended {
			return r
		}
		// The eval record is the trusted evaluator's (checked above): the
		// weights it scored are not those the train record names, so the
		// train job's record or its checkpoint lied.
		tr, ev := v.trainRecord(&r), v.evalRecord()
		if ev == nil {
			return r
		}
		if err := record.VerifyWeights(tr, ev); err != nil {
			vd := fail(PolicyFailure, stages.Train, string(record.ReasonOf(err)), err.Error()).tampered()
			vd.Train = tr
			return r.with(vd)
		}
		return r
	}},
	{"eval-checked-patch", Nobody, func(v view) (r Result) {
		// The contamination check must have read the patch train ran,
		// the author's: a clean patch shown in its place after the
		// author's ended is a deliberate act.
		a := v.authorRecord()
		if _, ended := v.evalEnded(&r); !ended || a == nil {
			return r
		}
		ev := v.evalRecord()
		if ev == nil {
			return r
		}
		if err := record.VerifyCheckedPatch(a, ev); err != nil {
			vd := fail(IntegrityViolation, stages.Eval, string(record.ReasonOf(err)), err.Error()).tampered()
			vd.Train = v.trainRecord(&r)
			return r.with(vd)
		}
		return r
	}},
	{"eval-contaminated", ThePolicy, func(v view) (r Result) {
		// The trusted check found the eval problems or their answers in
		// the patch the policy wrote: its weights were not scored.
		if _, ended := v.evalEnded(&r); !ended {
			return r
		}
		ev := v.evalRecord()
		if ev == nil || !ev.Contaminated {
			return r
		}
		var vd *Verdict
		if strings.HasPrefix(ev.Contamination, record.EvidenceOpaque) || strings.HasPrefix(ev.Contamination, record.EvidenceUncheckable) {
			// Refused for what the check cannot read: no proof of
			// tampering, the policy's failure all the same.
			vd = fail(PolicyFailure, stages.Eval, ReasonUnreadablePatch, "eval's contamination check: "+ev.Contamination)
		} else {
			vd = fail(PolicyFailure, stages.Eval, ReasonContaminated, "eval's contamination check: "+ev.Contamination).tampered()
		}
		vd.Train = v.trainRecord(&r)
		return r.with(vd)
	}},
	{"scored", TheCluster, func(v view) (r Result) {
		ev := v.evalRecord()
		if _, ended := v.evalEnded(&r); !ended || ev == nil {
			return r
		}
		return r.with(&Verdict{Kind: Scored, Train: v.trainRecord(&r), Eval: ev})
	}},
}

// Rules is the attribution table, in the order Decide tries it: a copy,
// so that no caller changes what Decide does.
func Rules() []Rule { return slices.Clone(table) }

// newAuthorRecord is the author's record, read from a completed author
// job's output and not yet verified (the ledger keeps none); nil when
// there is none to verify.
func (v view) newAuthorRecord(r *Result) *record.Author {
	a, ended := v.ended(r, stages.Author)
	if !ended || a.State.Class != slurm.Succeeded || v.f.Author != nil {
		return nil
	}
	o, ok := v.output(r, stages.Author)
	if !ok || o.RecordErr != nil {
		return nil
	}
	ar, _ := o.Record.(*record.Author)
	return ar
}

func (v view) patchPath() string {
	if v.f.Patch != nil && v.f.Patch.Path != "" {
		return v.f.Patch.Path
	}
	return stages.PatchFile
}

func (v view) evalOutPath() string {
	if v.f.EvalFiles != nil {
		return v.f.EvalFiles.OutPath
	}
	return stages.Output(stages.Eval)
}

// trainEnded is train's job once the author's patch is verified and the
// job has ended.
func (v view) trainEnded(r *Result) (slurm.JobInfo, bool) {
	if v.authorRecord() == nil {
		return slurm.JobInfo{}, false
	}
	return v.ended(r, stages.Train)
}

// trainRecordRead is train's accepted record once its job ended (nil
// before, or when the train rules above decided).
func (v view) trainRecordRead(r *Result) *record.Train {
	if _, ended := v.trainEnded(r); !ended {
		return nil
	}
	o, ok := v.output(r, stages.Train)
	if !ok || o.RecordErr != nil {
		return nil
	}
	tr, _ := o.Record.(*record.Train)
	return tr
}

// evalEnded is eval's job once train's record is accepted and the job
// has ended.
func (v view) evalEnded(r *Result) (slurm.JobInfo, bool) {
	if v.trainRecord(r) == nil {
		return slurm.JobInfo{}, false
	}
	return v.ended(r, stages.Eval)
}

// evalRecord is eval's record once eval has ended and eval-record
// accepted it (nil, which no row after it sees, otherwise).
func (v view) evalRecord() *record.Eval {
	ev, _ := v.f.Outputs[stages.Eval].Record.(*record.Eval)
	return ev
}

// evalExit is eval's job when it ended FAILED with exit status code.
func (v view) evalExit(r *Result, code int) (slurm.JobInfo, bool) {
	e, ended := v.evalEnded(r)
	return e, ended && e.State.Failure == slurm.FailureExitCode && e.ExitCode.Code == code
}
