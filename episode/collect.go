package episode

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"path"

	"github.com/nemorl/nemorl-slurm/record"
	"github.com/nemorl/nemorl-slurm/slurm"
	"github.com/nemorl/nemorl-slurm/templates"
)

// TailBytes is how much of the end of a stage's output file the collector
// reads. Every payload prints its record last, followed by one line of the
// batch script.
const TailBytes = 1 << 20

// Exit statuses of the eval job that are verdicts, not accidents.
const (
	// EvalRefusedExit: the eval image or the evaluator inputs differ from
	// those pinned at submission (the eval script's check).
	EvalRefusedExit = 65
	// EvalRejectedExit: the trusted checks rejected the weights or the
	// rollouts (nemorl-slurm evaluate check-weights / score exit 4).
	EvalRejectedExit = 4
)

// scan reads the tail of stage's output file and returns its one record.
// A missing output file is a missing record. Errors that are not a
// *record.Rejection mean the file could not be read (try again later).
func (d *Driver) scan(ctx context.Context, e *Entry, stage string) (record.Record, error) {
	p := path.Join(e.Dir, templates.Output(stage))
	fi, err := d.Host.Stat(ctx, p)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, &record.Rejection{Stage: record.Stage(stage), Reason: record.ReasonMissingRecord, Offset: -1,
			Detail: "the output file " + p + " does not exist"}
	}
	if err != nil {
		return nil, fmt.Errorf("episode %s: %s output: %w", e.Episode, stage, err)
	}
	tail, err := d.Host.ReadTail(ctx, p, TailBytes)
	if err != nil {
		return nil, fmt.Errorf("episode %s: %s output: %w", e.Episode, stage, err)
	}
	offset := max(fi.Size()-int64(len(tail)), 0)
	rec, err := record.ScanTail(record.Stage(stage), tail, offset)
	var rj *record.Rejection
	if errors.As(err, &rj) {
		rj.Detail = fmt.Sprintf("%s (in %s)", rj.Detail, p)
	}
	return rec, err
}

// base is an outcome with what every outcome carries.
func (d *Driver) base(e *Entry, infos map[string]slurm.JobInfo) *Outcome {
	o := &Outcome{Episode: e.Episode, Isolation: e.Isolation, Dir: e.Dir, Jobs: map[string]JobSummary{}, Decided: d.now().UTC()}
	for _, s := range templates.Stages {
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

// rejected turns a record rejection into its outcome: a missing record is an
// infrastructure failure (the payload or the node died before printing
// it); any other rejection is an integrity violation.
func (o *Outcome) rejected(stage string, err error) *Outcome {
	reason := record.ReasonOf(err)
	if reason == record.ReasonMissingRecord {
		return o.fail(InfraFailure, stage, string(reason), err.Error())
	}
	return o.fail(IntegrityViolation, stage, string(reason), err.Error())
}

// jobFailed is the outcome of a stage job that ended without success and
// left no record that says why: an infrastructure failure named after
// Slurm's account of it.
func (o *Outcome) jobFailed(stage string, j slurm.JobInfo) *Outcome {
	reason := string(j.State.Failure)
	if reason == "" {
		reason = "job_" + j.State.Class.String()
	}
	return o.fail(InfraFailure, stage, reason, fmt.Sprintf("%s job %s ended %s, exit code %s", stage, j.ID, j.State.Raw, j.ExitCode.Raw))
}

// collectAuthor checks the author's record and patch once its job
// COMPLETED. It returns the final outcome when the episode ends here
// (no_patch, a rejected record) and nil when train may go ahead; e.Author
// is set then. A non-nil error means the files could not be read yet.
func (d *Driver) collectAuthor(ctx context.Context, e *Entry, infos map[string]slurm.JobInfo) (*Outcome, error) {
	o := d.base(e, infos)
	rec, err := d.scan(ctx, e, Author)
	if err != nil {
		if isRejection(err) {
			return o.rejected(Author, err), nil
		}
		return nil, err
	}
	a := rec.(*record.Author)
	p := path.Join(e.Dir, "author/change.diff")
	patch, err := d.Host.ReadFile(ctx, p)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		patch = nil // verified below against the record
	case err != nil:
		return nil, fmt.Errorf("episode %s: read %s: %w", e.Episode, p, err)
	}
	if err := record.VerifyPatch(a, patch); err != nil {
		return o.rejected(Author, err), nil
	}
	e.Author = a
	o.PatchSHA256 = a.PatchSHA256
	if a.PatchBytes == 0 {
		return o.fail(PolicyFailure, Author, ReasonNoPatch, "the author's change.diff is empty: train and eval are not run"), nil
	}
	return nil, nil
}

// classify decides the outcome of an episode whose train job has ended and
// whose eval job has ended (or never will). It returns nil, nil when Slurm
// has not yet reported what the checks need (sacct lags).
func (d *Driver) classify(ctx context.Context, e *Entry, infos map[string]slurm.JobInfo) (*Outcome, error) {
	o := d.base(e, infos)
	ti, ei := infos[e.JobID(Train)], infos[e.JobID(Eval)]

	// The train record, when there is one, says whether the policy's
	// code failed. Another stage's record in it is tampering.
	rec, err := d.scan(ctx, e, Train)
	var tr *record.Train
	switch {
	case err == nil:
		tr = rec.(*record.Train)
		o.TrainReward, o.InnerSteps = ptr(tr.TrainReward), ptr(tr.InnerSteps)
	case !isRejection(err):
		return nil, err
	case record.ReasonOf(err) != record.ReasonMissingRecord:
		return o.rejected(Train, err), nil
	}
	// A train job the cluster ended (a cancel, a preemption, a node that
	// died, its time limit) is infrastructure, whatever the launcher wrote
	// as it was stopped: only a job that ended by itself (its exit status,
	// or memory the policy's code used) lets its record blame the policy.
	if e.CancelRequested != "" && ei.State.Class != slurm.Succeeded {
		return o.fail(InfraFailure, stageOfCancel(e, infos), e.CancelRequested, "the episode's jobs were cancelled: "+e.CancelRequested), nil
	}
	if ti.State.Class == slurm.Failed && ti.State.Failure != slurm.FailureExitCode && ti.State.Failure != slurm.FailureOutOfMemory {
		return o.jobFailed(Train, ti), nil
	}
	if tr != nil && tr.Status.PolicyFailure() {
		reason := ReasonTrainFailed
		if tr.Status == record.StatusPatchFailed {
			reason = ReasonPatchRejected
		}
		return o.fail(PolicyFailure, Train, reason, fmt.Sprintf("train record status %q (trainer exit status %d)", tr.Status, tr.TrainerExitStatus)), nil
	}
	if ti.State.Class != slurm.Succeeded {
		if tr == nil && ti.State.Class == slurm.Failed && ti.State.Failure == slurm.FailureExitCode {
			return o.fail(InfraFailure, Train, string(record.ReasonMissingRecord),
				fmt.Sprintf("train job %s failed (exit code %s) without a train record: the launcher, not the trainer, failed", ti.ID, ti.ExitCode.Raw)), nil
		}
		return o.jobFailed(Train, ti), nil
	}
	if tr == nil {
		return o.rejected(Train, err), nil
	}
	o.CheckpointSHA256 = tr.WeightsSHA256

	if ei.State.Class != slurm.Succeeded {
		if ei.State.Failure == slurm.FailureExitCode && ei.ExitCode.Code == EvalRefusedExit {
			return o.fail(IntegrityViolation, Eval, ReasonEvalInputsTampered,
				fmt.Sprintf("eval job %s refused to run (exit %d): the eval image or the evaluator inputs differ from those pinned", ei.ID, EvalRefusedExit)), nil
		}
		if ei.State.Failure == slurm.FailureExitCode && ei.ExitCode.Code == EvalRejectedExit {
			return o.fail(IntegrityViolation, Eval, ReasonEvalRejected,
				fmt.Sprintf("eval job %s rejected the weights or the rollouts (exit %d): see nemorl-slurm logs %s --stage eval", ei.ID, EvalRejectedExit, e.Episode)), nil
		}
		return o.jobFailed(Eval, ei), nil
	}
	rec, err = d.scan(ctx, e, Eval)
	if err != nil {
		if isRejection(err) {
			return o.rejected(Eval, err), nil
		}
		return nil, err
	}
	ev := rec.(*record.Eval)
	if err := record.VerifyEvalJob(ev, ei.ID); err != nil {
		return o.rejected(Eval, err), nil
	}
	if err := record.VerifyWeights(tr, ev); err != nil {
		return o.rejected(Eval, err), nil
	}
	if ti.End.IsZero() || ei.Start.IsZero() {
		return nil, nil // sacct has not caught up
	}
	if ei.Start.Before(ti.End) {
		return o.fail(IntegrityViolation, Eval, ReasonEvalBeforeTrainEnd,
			fmt.Sprintf("eval job %s started at %s, before train job %s ended at %s", ei.ID, ei.Start.UTC().Format("15:04:05"), ti.ID, ti.End.UTC().Format("15:04:05"))), nil
	}
	o.Outcome, o.Reward, o.MaskSample = Scored, ptr(ev.Reward), false
	o.AIME25Exact, o.AIME25AvgAt8 = ptr(ev.AIME25Exact), ptr(ev.AIME25AvgAt8)
	o.Completed, o.WandbURL = ev.Completed, ev.WandbURL
	return o, nil
}

// stageOfCancel names the first stage that did not complete.
func stageOfCancel(e *Entry, infos map[string]slurm.JobInfo) string {
	for _, s := range templates.Stages {
		id := e.JobID(s)
		if id == "" || infos[id].State.Class != slurm.Succeeded {
			return s
		}
	}
	return Eval
}

func isRejection(err error) bool {
	var rj *record.Rejection
	return errors.As(err, &rj)
}
