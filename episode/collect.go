package episode

import (
	"context"
	"errors"
	"fmt"
	"github.com/nemorl/nemorl-slurm/stages"
	"path"
	"slices"
	"strings"
	"time"

	"github.com/nemorl/nemorl-slurm/configs"
	"github.com/nemorl/nemorl-slurm/record"
	"github.com/nemorl/nemorl-slurm/slurm"
)

// TailBytes is how much of the end of a stage's output file the collector
// reads. Every payload prints its record last, followed by one line of the
// batch script.
const TailBytes = 1 << 20

// scan finds stage's one record in the last TailBytes of its output file,
// inspected and filtered where it lies (readOutput: one command, the
// change time included): a missing file is a missing record, anything but
// a regular file (or one that cannot be opened) is a *plantedError. Errors
// that are neither that nor a *record.Rejection mean the file could not be
// read (try again later). fi is what the inspection found.
func (d *Driver) scan(ctx context.Context, e *Entry, stage string) (rec record.Record, fi fileInfo, err error) {
	p := path.Join(e.Dir, stages.Output(stage))
	out, err := d.readOutput(ctx, p, TailBytes)
	if err != nil {
		return nil, fi, fmt.Errorf("episode %s: %s output: %w", e.Episode, stage, err)
	}
	fi = out.fi
	switch {
	case !fi.Exists:
		return nil, fi, &record.Rejection{Stage: record.Stage(stage), Reason: record.ReasonMissingRecord, Offset: -1,
			Detail: "the output file " + p + " does not exist"}
	case !fi.Regular():
		return nil, fi, &plantedError{Stage: stage, Path: p, Type: fi.Type}
	case out.unopenable:
		// The honest job writes its output 0600 and leaves it so.
		return nil, fi, &plantedError{Stage: stage, Path: p, Type: "regular file that cannot be opened for reading and writing"}
	case out.replaced:
		// Outputs are read only after their job ended, and the honest job
		// never replaces its out.log: a file swapped in while it is read
		// is planted (retrying would let a process that keeps swapping it
		// hold the episode unfinished until a deadline masks it).
		return nil, fi, &plantedError{Stage: stage, Path: p, Type: "file replaced while it was read"}
	}
	rec, err = record.ScanLines(record.Stage(stage), out.lines)
	var rj *record.Rejection
	if errors.As(err, &rj) {
		rj.Detail = fmt.Sprintf("%s (in %s)", rj.Detail, p)
	}
	return rec, fi, err
}

// base is an outcome with what every outcome carries.
func (d *Driver) base(e *Entry, infos map[string]slurm.JobInfo) *Outcome {
	o := &Outcome{Episode: e.Episode, Isolation: e.Isolation, Dir: e.Dir, Jobs: map[string]JobSummary{}, Decided: d.now().UTC()}
	for _, s := range stages.All {
		if id := e.JobID(s); id != "" {
			j, ok := infos[id]
			if !ok {
				j = slurm.JobInfo{ID: id}
			}
			o.Jobs[s] = summarize(j)
		}
	}
	if e.Author != nil {
		o.PatchSHA256 = e.Author.PatchSHA256
	}
	if len(e.Retried) > 0 || o.Jobs[stages.Train].Runs > 1 || o.Jobs[stages.Eval].Runs > 1 {
		o.Attempts, o.Retried = map[string]int{}, e.Retried
		for s := range o.Jobs {
			o.Attempts[s] = e.attempts(s, infos)
		}
	}
	return o
}

func (o *Outcome) fail(kind Kind, stage, reason, detail string) *Outcome {
	o.Outcome, o.FailureStage, o.FailureReason, o.Detail = kind, stage, reason, detail
	switch kind {
	case PolicyFailure:
		o.Reward, o.MaskSample = ptr(0.0), false
	default:
		o.Reward, o.MaskSample = nil, true
	}
	return o
}

// tampered marks the outcome as a tampering signal.
func (o *Outcome) tampered() *Outcome {
	o.Tampering = true
	return o
}

// policyRecord is the outcome of a rejected record of a stage the policy
// controls (author, train): its 0, never a mask. Anything but a missing
// record is something the honest payload never prints: tampering.
func (o *Outcome) policyRecord(stage string, err error) *Outcome {
	reason := record.ReasonOf(err)
	o.fail(PolicyFailure, stage, string(reason), err.Error())
	if reason != record.ReasonMissingRecord {
		o.tampered()
	}
	return o
}

// evalRecord is the outcome of a rejected eval record. The eval job is the
// trusted evaluator: a record it did not print right was forged (an
// integrity violation, masked, an alarm), and no record at all means the
// evaluator died (infrastructure).
func (o *Outcome) evalRecord(err error) *Outcome {
	reason := record.ReasonOf(err)
	if reason == record.ReasonMissingRecord {
		return o.fail(InfraFailure, stages.Eval, string(reason), err.Error())
	}
	return o.fail(IntegrityViolation, stages.Eval, string(reason), err.Error()).tampered()
}

// planted is the outcome of a stage output that is not a regular file. The
// author's and the train job's outputs are the policy's; eval's output path
// is reachable by the policy only without isolation (the train container
// does not bind eval/), so there it is the policy's too, and with isolation
// it is a breach.
func (o *Outcome) planted(e *Entry, pe *plantedError) *Outcome {
	if pe.Stage == stages.Eval && e.Isolation != configs.RuntimeNone {
		return o.fail(IntegrityViolation, stages.Eval, ReasonEvalOutputTampered, pe.Error()).tampered()
	}
	return o.fail(PolicyFailure, pe.Stage, ReasonPlantedOutput, pe.Error()).tampered()
}

// jobFailed is the outcome of a stage job that Slurm ended for a reason of
// the cluster's (a node failure, a preemption, a boot failure, …): an
// infrastructure failure named after Slurm's account of it.
func (o *Outcome) jobFailed(stage string, j slurm.JobInfo) *Outcome {
	reason := string(j.State.Failure)
	if reason == "" {
		reason = "job_" + j.State.Class.String()
	}
	return o.fail(InfraFailure, stage, reason, fmt.Sprintf("%s job %s ended %s, exit code %s", stage, j.ID, j.State.Raw, j.ExitCode.Raw))
}

// EvalRejectedExit is the eval payload's status when the evaluator's score
// step rejected the rollouts (nemorl-slurm evaluate score exit 4). The
// scripts' own verdicts are templates.Exit* (64..79): the author and train
// scripts report a payload status in that range as 1, so those come from
// the trusted scripts only; eval's payload (the pinned, unpatched
// evaluator) has verdicts of its own.
const EvalRejectedExit = 4

// verdictFailed is the outcome of a stage job whose batch script refused
// to run its payload (before any code of the policy's ran in the job), or
// found that the cluster failed it.
func (o *Outcome) verdictFailed(stage string, j slurm.JobInfo, findings []string) *Outcome {
	switch j.ExitCode.Code {
	case stages.ExitNoGPU:
		return o.fail(InfraFailure, stage, ReasonNoGPU,
			fmt.Sprintf("%s job %s found no GPU where Slurm gave it one (exit %d, node %s)", stage, j.ID, stages.ExitNoGPU, j.NodeList))
	case stages.ExitPolicyEndpoint:
		return o.fail(InfraFailure, stage, ReasonPolicyEndpointFailed,
			fmt.Sprintf("%s job %s: the policy's endpoint failed (exit %d): no model call succeeded, or the last one failed; see nemorl-slurm logs --stage author", stage, j.ID, stages.ExitPolicyEndpoint))
	case stages.ExitIsolation:
		detail := fmt.Sprintf("%s job %s refused to start its payload (exit %d): its isolation guard found a way out of the container", stage, j.ID, stages.ExitIsolation)
		if len(findings) > 0 {
			detail += ": " + strings.Join(findings, "; ")
		} else {
			detail += "; see nemorl-slurm logs --stage " + stage + " for each finding and its cause"
		}
		return o.fail(InfraFailure, stage, ReasonIsolationBreach, detail)
	}
	return o.fail(InfraFailure, stage, ReasonScriptRefused,
		fmt.Sprintf("%s job %s: its batch script refused to start the payload (exit %s); see nemorl-slurm logs --stage %s", stage, j.ID, j.ExitCode.Raw, stage))
}

// cancelled attributes a CANCELLED stage job (not a dependency cancel). A
// cancel the tool issued (cancel, a deadline, an interrupt) is the
// operator's; one by another uid is an administrator's; one by the user's
// own uid that the tool did not issue can only come from the policy's code
// (it runs as that user) or from a hand-typed scancel, which the README
// warns against: it is the policy's 0, flagged as tampering.
func (d *Driver) cancelled(ctx context.Context, e *Entry, o *Outcome, stage string, j slurm.JobInfo) (*Outcome, error) {
	if e.CancelRequested != "" {
		return o.fail(InfraFailure, stage, e.CancelRequested, "the episode's jobs were cancelled: "+e.CancelRequested), nil
	}
	if slices.Contains(e.CancelsIssued, j.ID) {
		return o.fail(InfraFailure, stage, ReasonCancelled, fmt.Sprintf("%s job %s was cancelled by nemorl-slurm", stage, j.ID)), nil
	}
	if j.State.ByUID < 0 {
		// sacct (22.05) sometimes drops the uid of a running job's
		// canceller. Without isolation the policy's code may have been it.
		if e.Isolation == configs.RuntimeNone {
			return o.fail(PolicyFailure, stage, ReasonForeignCancel,
				fmt.Sprintf("%s job %s ended %s and nemorl-slurm did not cancel it; Slurm does not say who did, and without isolation the policy's code can", stage, j.ID, j.State.Raw)).tampered(), nil
		}
		return o.fail(InfraFailure, stage, ReasonCancelled,
			fmt.Sprintf("%s job %s ended %s: Slurm does not say who cancelled it, and the policy's code cannot reach Slurm from its container", stage, j.ID, j.State.Raw)), nil
	}
	_, uid, err := d.clusterUser(ctx)
	if err != nil {
		return nil, err
	}
	if j.State.ByUID != uid {
		return o.fail(InfraFailure, stage, ReasonCancelled,
			fmt.Sprintf("%s job %s was cancelled by uid %d, not by this user (uid %d): an administrator or the cluster", stage, j.ID, j.State.ByUID, uid)), nil
	}
	return o.fail(PolicyFailure, stage, ReasonForeignCancel,
		fmt.Sprintf("%s job %s was cancelled by this user's uid %d, and not by nemorl-slurm: the policy's code can do that, the tool did not (cancel episodes with nemorl-slurm cancel)", stage, j.ID, uid)).tampered(), nil
}

// authorFailed attributes an author job that did not complete. Everything
// in the author container is the policy's: its exit, its time limit, its
// memory. The cluster's failures and the script's own verdicts (the
// secrets file missing, isolation) are not.
func (d *Driver) authorFailed(ctx context.Context, e *Entry, o *Outcome, j slurm.JobInfo) (*Outcome, error) {
	switch j.State.Failure {
	case slurm.FailureCancelled:
		return d.cancelled(ctx, e, o, stages.Author, j)
	case slurm.FailureExitCode:
		if stages.ReservedExit(j.ExitCode.Code) && j.ExitCode.Signal == 0 {
			return o.verdictFailed(stages.Author, j, d.guardFindings(ctx, e, stages.Author, j)), nil
		}
		return o.fail(PolicyFailure, stages.Author, ReasonAuthorFailed,
			fmt.Sprintf("author job %s failed with exit code %s: the author container (Claude Code and what it ran) is the policy's", j.ID, j.ExitCode.Raw)), nil
	case slurm.FailureTimeout, slurm.FailureOutOfMemory:
		return o.fail(PolicyFailure, stages.Author, ReasonAuthorFailed,
			fmt.Sprintf("author job %s ended %s: the author container is the policy's", j.ID, j.State.Raw)), nil
	}
	return o.jobFailed(stages.Author, j), nil
}

// MaxPatchBytes bounds change.diff: a larger patch is bad_patch, and the
// collector never reads more.
const MaxPatchBytes = 32 << 20

// collectAuthor checks the author's record and patch once its job
// COMPLETED. It returns the final outcome when the episode ends here
// (no_patch, a rejected record or patch) and nil when train may go ahead;
// e.Author is set then. A non-nil error means the files could not be read
// yet.
func (d *Driver) collectAuthor(ctx context.Context, e *Entry, infos map[string]slurm.JobInfo) (*Outcome, error) {
	o := d.base(e, infos)
	rec, _, err := d.scan(ctx, e, stages.Author)
	var pe *plantedError
	switch {
	case errors.As(err, &pe):
		return o.planted(e, pe), nil
	case isRejection(err):
		return o.policyRecord(stages.Author, err), nil
	case err != nil:
		return nil, err
	}
	a := rec.(*record.Author)
	p := path.Join(e.Dir, "author/change.diff")
	badPatch := func(format string, args ...any) *Outcome {
		return o.fail(PolicyFailure, stages.Author, ReasonBadPatch, fmt.Sprintf("%s: ", p)+fmt.Sprintf(format, args...)).tampered()
	}
	if a.PatchBytes > MaxPatchBytes {
		return badPatch("the author record claims %d bytes, more than the %d a patch may have", a.PatchBytes, MaxPatchBytes), nil
	}
	fi, err := d.lstat(ctx, p)
	if err != nil {
		return nil, fmt.Errorf("episode %s: %w", e.Episode, err)
	}
	var patch []byte
	switch {
	case !fi.Exists:
		// Verified below against the record: fine for an empty patch.
	case !fi.Regular():
		return badPatch("a %s, not a regular file", fi.Type), nil
	case fi.Size > MaxPatchBytes:
		return badPatch("%d bytes, more than the %d a patch may have", fi.Size, MaxPatchBytes), nil
	case fi.Size != a.PatchBytes:
		return badPatch("%d bytes, but the author record says %d", fi.Size, a.PatchBytes), nil
	default:
		// Never more than the size checked: the file could change.
		if patch, err = d.Host.ReadTail(ctx, p, fi.Size); err != nil {
			return nil, fmt.Errorf("episode %s: read %s: %w", e.Episode, p, err)
		}
	}
	if err := record.VerifyPatch(a, patch); err != nil {
		return o.policyRecord(stages.Author, err), nil
	}
	e.Author = a
	o.PatchSHA256 = a.PatchSHA256
	if a.PatchBytes == 0 {
		return o.fail(PolicyFailure, stages.Author, ReasonNoPatch, "the author's change.diff is empty: train and eval are not run"), nil
	}
	return nil, nil
}

// EvalOutputSlack is how far eval's out.log may have last changed outside
// the eval job's start and end as sacct reports them (whole seconds, from
// slurmctld's clock, while the file's change time comes from the file
// server's clock).
const EvalOutputSlack = 2 * time.Second

// EvalOutputQuiet is how long before the end sacct reports for the eval
// job its honest out.log last changed, at least: the script writes
// nothing after the record and watches the file for
// stages.EvalOutputWatchSeconds (bash's whole seconds may make that one
// less), and sacct's End drops the fraction of a second (one more). A
// file renamed over out.log after the script's last look changed later.
const EvalOutputQuiet = time.Duration(stages.EvalOutputWatchSeconds-2) * time.Second

// classify decides the outcome of an episode whose train job has ended and
// whose eval job has ended (or never will). It returns nil, nil when Slurm
// has not yet reported what the checks need (sacct lags). Who could have
// caused a failure decides it (README "Attribution"): everything the train
// job does is the policy's; the eval job is trusted.
func (d *Driver) classify(ctx context.Context, e *Entry, infos map[string]slurm.JobInfo) (*Outcome, error) {
	o := d.base(e, infos)
	ti, ei := infos[e.JobID(stages.Train)], infos[e.JobID(stages.Eval)]

	// A cancel on record (cancel, a deadline, an interrupt) wins over
	// whatever the stopped jobs printed as they were stopped.
	if e.CancelRequested != "" && ei.State.Class != slurm.Succeeded {
		return o.fail(InfraFailure, stageOfCancel(e, infos), e.CancelRequested, "the episode's jobs were cancelled: "+e.CancelRequested), nil
	}

	// Train: the job's end first (the cluster's failures are not the
	// policy's), then its record.
	if ti.State.Class == slurm.Failed {
		switch ti.State.Failure {
		case slurm.FailureCancelled:
			return d.cancelled(ctx, e, o, stages.Train, ti)
		case slurm.FailureTimeout:
			return o.fail(PolicyFailure, stages.Train, ReasonTrainTimeout,
				fmt.Sprintf("train job %s ran into its time limit (%s): the launcher stops the trainer long before it", ti.ID, ti.State.Raw)), nil
		case slurm.FailureOutOfMemory:
			return o.fail(PolicyFailure, stages.Train, ReasonTrainOutOfMemory, fmt.Sprintf("train job %s ran out of memory", ti.ID)), nil
		case slurm.FailureExitCode:
			if stages.ReservedExit(ti.ExitCode.Code) && ti.ExitCode.Signal == 0 {
				return o.verdictFailed(stages.Train, ti, d.guardFindings(ctx, e, stages.Train, ti)), nil
			}
			// The payload's own failure: its record says why.
		default:
			return o.jobFailed(stages.Train, ti), nil
		}
	}
	rec, _, err := d.scan(ctx, e, stages.Train)
	var pe *plantedError
	switch {
	case errors.As(err, &pe):
		return o.planted(e, pe), nil
	case isRejection(err):
		o = o.policyRecord(stages.Train, err)
		if ti.State.Class == slurm.Failed {
			o.Detail += fmt.Sprintf("; the train job failed with exit code %s", ti.ExitCode.Raw)
		}
		return o, nil
	case err != nil:
		return nil, err
	}
	tr := rec.(*record.Train)
	o.TrainReward, o.InnerSteps = ptr(tr.TrainReward), ptr(tr.InnerSteps)
	if tr.Status.PolicyFailure() {
		reason := ReasonTrainFailed
		if tr.Status == record.StatusPatchFailed {
			reason = ReasonPatchRejected
		}
		return o.fail(PolicyFailure, stages.Train, reason, fmt.Sprintf("train record status %q (trainer exit status %d)", tr.Status, tr.TrainerExitStatus)), nil
	}
	if ti.State.Class != slurm.Succeeded {
		return o.fail(PolicyFailure, stages.Train, ReasonTrainFailed,
			fmt.Sprintf("train job %s failed with exit code %s although its record says %q", ti.ID, ti.ExitCode.Raw, tr.Status)), nil
	}
	o.CheckpointSHA256 = tr.WeightsSHA256

	// Eval: the trusted evaluator.
	evalOut := path.Join(e.Dir, stages.Output(stages.Eval))
	if ei.State.Class != slurm.Succeeded {
		// A FIFO planted where eval's output goes stalls the job in
		// slurmstepd until its time limit.
		if fi, err := d.lstat(ctx, evalOut); err != nil {
			return nil, fmt.Errorf("episode %s: %w", e.Episode, err)
		} else if fi.Exists && !fi.Regular() {
			return o.planted(e, &plantedError{Stage: stages.Eval, Path: evalOut, Type: fi.Type}), nil
		}
		switch ei.State.Failure {
		case slurm.FailureCancelled:
			return d.cancelled(ctx, e, o, stages.Eval, ei)
		case slurm.FailureExitCode:
		default:
			return o.jobFailed(stages.Eval, ei), nil
		}
		switch ei.ExitCode.Code {
		case stages.ExitInputsTampered:
			return o.fail(IntegrityViolation, stages.Eval, ReasonEvalInputsTampered,
				fmt.Sprintf("eval job %s refused to run (exit %d): the eval image or the evaluator inputs differ from those pinned", ei.ID, stages.ExitInputsTampered)).tampered(), nil
		case stages.ExitOutputNotOwn:
			return o.fail(IntegrityViolation, stages.Eval, ReasonEvalOutputRedirected,
				fmt.Sprintf("eval job %s refused to print its record (exit %d): its standard output was not its %s (the job's StdOut was changed or the file replaced)", ei.ID, stages.ExitOutputNotOwn, evalOut)).tampered(), nil
		case stages.ExitInputBad:
			return o.fail(PolicyFailure, stages.Eval, ReasonBadWeights,
				fmt.Sprintf("eval job %s found no regular file of weights where train exported them (exit %d)", ei.ID, stages.ExitInputBad)), nil
		case stages.ExitWeightsRejected:
			return o.fail(PolicyFailure, stages.Eval, ReasonBadWeights,
				fmt.Sprintf("eval job %s: the trusted check rejected the weights train exported (exit %d); see nemorl-slurm logs %s --stage eval", ei.ID, stages.ExitWeightsRejected, e.Episode)), nil
		case stages.ExitIsolation, stages.ExitNoGPU:
			return o.verdictFailed(stages.Eval, ei, d.guardFindings(ctx, e, stages.Eval, ei)), nil
		case EvalRejectedExit:
			return o.fail(InfraFailure, stages.Eval, ReasonRolloutsRejected,
				fmt.Sprintf("eval job %s: the evaluator rejected the rollouts (exit %d): see nemorl-slurm logs %s --stage eval", ei.ID, EvalRejectedExit, e.Episode)), nil
		}
		return o.jobFailed(stages.Eval, ei), nil
	}
	if ti.End.IsZero() || ei.Start.IsZero() || ei.End.IsZero() {
		return nil, nil // sacct has not caught up
	}
	if ei.Start.Before(ti.End) {
		return o.fail(IntegrityViolation, stages.Eval, ReasonEvalBeforeTrainEnd,
			fmt.Sprintf("eval job %s started at %s, before train job %s ended at %s", ei.ID, ei.Start.UTC().Format("15:04:05"), ti.ID, ti.End.UTC().Format("15:04:05"))).tampered(), nil
	}
	rec, fi, err := d.scan(ctx, e, stages.Eval)
	switch {
	case errors.As(err, &pe):
		return o.planted(e, pe), nil
	case record.ReasonOf(err) == record.ReasonMissingRecord && !fi.Exists:
		return o.fail(IntegrityViolation, stages.Eval, ReasonEvalOutputTampered,
			fmt.Sprintf("eval job %s completed, but its output %s is gone", ei.ID, evalOut)).tampered(), nil
	case err != nil && !isRejection(err):
		return nil, err
	}
	// The file must be the one the eval job wrote, last changed while it
	// ran and before its quiet watch: a redirected StdOut leaves a file
	// older than the job, a rewrite or a rename after the script's last
	// look a younger one.
	latest := ei.End.Add(-EvalOutputQuiet).Add(EvalOutputSlack)
	if fi.Ctime.Before(ei.Start.Add(-EvalOutputSlack)) || fi.Ctime.After(latest) {
		return o.fail(IntegrityViolation, stages.Eval, ReasonEvalOutputTampered,
			fmt.Sprintf("eval's output %s last changed at %s, outside eval job %s's run before its quiet watch (%s to %s; the job ran to %s)", evalOut,
				fi.Ctime.UTC().Format(time.RFC3339), ei.ID, ei.Start.UTC().Format(time.RFC3339), latest.UTC().Format(time.RFC3339), ei.End.UTC().Format(time.RFC3339))).tampered(), nil
	}
	if err != nil {
		return o.evalRecord(err), nil
	}
	ev := rec.(*record.Eval)
	if err := record.VerifyEvalJob(ev, ei.ID); err != nil {
		return o.evalRecord(err), nil
	}
	if err := record.VerifyWeights(tr, ev); err != nil {
		// The eval record is the trusted evaluator's (checked above): the
		// weights it scored are not those the train record names, so the
		// train job's record or its checkpoint lied.
		return o.fail(PolicyFailure, stages.Train, string(record.ReasonOf(err)), err.Error()).tampered(), nil
	}
	o.Outcome, o.Reward, o.MaskSample = Scored, ptr(ev.Reward), false
	o.AIME25Exact, o.AIME25AvgAt8 = ptr(ev.AIME25Exact), ptr(ev.AIME25AvgAt8)
	o.Completed, o.WandbURL = ev.Completed, ev.WandbURL
	o.Correct, o.Samples = ptr(ev.Correct), ev.Problems*ev.SamplesPerProblem
	return o, nil
}

// stageOfCancel names the first stage that did not complete.
func stageOfCancel(e *Entry, infos map[string]slurm.JobInfo) string {
	for _, s := range stages.All {
		id := e.JobID(s)
		if id == "" || infos[id].State.Class != slurm.Succeeded {
			return s
		}
	}
	return stages.Eval
}

func isRejection(err error) bool {
	var rj *record.Rejection
	return errors.As(err, &rj)
}
