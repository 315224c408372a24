package rules

import (
	"time"

	"github.com/nemorl/nemorl-slurm/record"

	"github.com/nemorl/nemorl-slurm/slurm"
	"github.com/nemorl/nemorl-slurm/stages"
)

// Kind is an episode's outcome.
type Kind string

// The four outcomes (DESIGN.md "Outcome JSON").
const (
	// Scored: the eval record was verified; Reward is the episode's reward.
	Scored Kind = "scored"
	// PolicyFailure: the policy's work failed in a way the policy owns
	// (no patch, a patch that does not apply, a trainer that crashed);
	// reward 0.
	PolicyFailure Kind = "policy_failure"
	// InfraFailure: no reward can be given (node failure, preemption, a
	// missing record, cancellation, a lost connection); mask the sample.
	InfraFailure Kind = "infra_failure"
	// IntegrityViolation: a record was rejected (forged, duplicated,
	// inconsistent, bound to other weights or another job); no reward.
	IntegrityViolation Kind = "integrity_violation"
)

// Outcome is an episode's verified result (result, run --json).
type Outcome struct {
	Episode string `json:"episode"`
	Outcome Kind   `json:"outcome"`
	// Reward is null for infra_failure and integrity_violation.
	Reward        *float64 `json:"reward"`
	MaskSample    bool     `json:"mask_sample"`
	FailureReason string   `json:"failure_reason"`
	// FailureStage names the stage that decided a failure.
	FailureStage stages.Stage `json:"failure_stage,omitempty"`
	// Detail explains a failure in one line.
	Detail string `json:"detail,omitempty"`
	// Tampering marks a failure that only a deliberate act explains (a
	// foreign record, a planted output file, a cancel the tool did not
	// issue, …): for operators to review. FailureReason names it.
	Tampering bool `json:"tampering,omitempty"`

	AIME25Exact  *float64 `json:"aime25_exact,omitempty"`
	AIME25AvgAt8 *float64 `json:"aime25_avg_at_8,omitempty"`
	TrainReward  *float64 `json:"train_reward,omitempty"`
	InnerSteps   *int     `json:"inner_steps,omitempty"`
	// GPU is the GPU the eval job had, from its record (read in the job by
	// the trusted evaluator); TrainGPU the train job's, from the train
	// record (what the policy's code printed: informational). Nil where the
	// record names none.
	GPU       *record.GPU `json:"gpu,omitempty"`
	TrainGPU  *record.GPU `json:"train_gpu,omitempty"`
	Completed int         `json:"completed"`
	// Correct of Samples (30 problems × 8) is the score the reward is.
	Correct          *int   `json:"correct,omitempty"`
	Samples          int    `json:"samples,omitempty"`
	PatchSHA256      string `json:"patch_sha256,omitempty"`
	CheckpointSHA256 string `json:"checkpoint_sha256,omitempty"`
	WandbURL         string `json:"wandb_url,omitempty"`
	Isolation        string `json:"isolation"`
	Dir              string `json:"dir"`

	Jobs map[stages.Stage]JobSummary `json:"jobs"`
	// Attempts counts, by stage, how many times its job ran or was queued
	// to: the tool's retries and Slurm's own requeues (retry.go).
	Attempts map[stages.Stage]int `json:"attempts,omitempty"`
	// Retried are the stages' earlier attempts, as the ledger keeps them.
	Retried map[stages.Stage][]Attempt `json:"retried,omitempty"`
	// Decided is when the outcome was decided.
	Decided time.Time `json:"decided"`
}

// JobSummary is a stage job as sacct last showed it.
type JobSummary struct {
	ID       string    `json:"id"`
	State    string    `json:"state"`
	ExitCode string    `json:"exit_code"`
	Start    time.Time `json:"start,omitzero"`
	End      time.Time `json:"end,omitzero"`
	Elapsed  string    `json:"elapsed,omitempty"`
	NodeList string    `json:"node_list,omitempty"`
	// Runs, when more than one, is how many times Slurm ran the job (it
	// requeued it); EarlierRuns are the states the earlier runs ended in.
	Runs        int      `json:"runs,omitempty"`
	EarlierRuns []string `json:"earlier_runs,omitempty"`
}

// Info is the job as the summary keeps it.
func (s JobSummary) Info() slurm.JobInfo {
	j := slurm.JobInfo{ID: s.ID, State: slurm.ParseState(s.State, ""), ExitCode: slurm.ParseExitCode(s.ExitCode),
		Start: s.Start, End: s.End, NodeList: s.NodeList, Source: slurm.SourceSacct, Runs: s.Runs, EarlierRuns: s.EarlierRuns}
	if !s.Start.IsZero() && s.End.After(s.Start) {
		j.Elapsed = s.End.Sub(s.Start)
	}
	return j
}

// Summarize is the job as an outcome and the ledger keep it.
func Summarize(j slurm.JobInfo) JobSummary {
	s := JobSummary{ID: j.ID, State: j.State.Raw, ExitCode: j.ExitCode.Raw, Start: j.Start, End: j.End, NodeList: j.NodeList, EarlierRuns: j.EarlierRuns}
	if j.Runs > 1 {
		s.Runs = j.Runs
	}
	if s.State == "" {
		s.State = "UNKNOWN"
	}
	if j.Elapsed > 0 {
		s.Elapsed = j.Elapsed.String()
	}
	return s
}

// ExitCode maps an outcome to the process exit code of DESIGN.md: 0 done
// (scored, or a policy failure with its reward), 3 infrastructure failure,
// 4 integrity violation.
func (o *Outcome) ExitCode() int {
	switch o.Outcome {
	case Scored, PolicyFailure:
		return 0
	case IntegrityViolation:
		return 4
	}
	return 3
}

// Attempt is an earlier attempt of a stage, retired when the stage was run
// again.
type Attempt struct {
	// Attempt numbers it: 1 is the stage's first.
	Attempt int    `json:"attempt"`
	JobID   string `json:"job_id"`
	// Job is the job as sacct last showed it before it was retired.
	Job JobSummary `json:"job"`
	// Reason is why it was retired: its stage's failure reason, or, for an
	// eval retired with the train it waited for, "train_retried".
	Reason string `json:"reason"`
	Detail string `json:"detail,omitempty"`
	// Output is where its output file was moved ("" if it had none).
	Output string `json:"output,omitempty"`
	// Array and ArrayScript, for a task of a job array: the array's job
	// name and where its script was staged (clean removes the array's
	// directory once every episode that ran a task of it is cleaned).
	Array       string `json:"array,omitempty"`
	ArrayScript string `json:"array_script,omitempty"`
}

// Apply writes the verdict into o, which carries the episode's jobs and
// paths: the outcome, its reward and mask, and the scores behind a score.
func (v *Verdict) Apply(o *Outcome) {
	o.Outcome, o.FailureStage, o.FailureReason, o.Detail, o.Tampering = v.Kind, v.Stage, v.Reason, v.Detail, v.Tampering
	switch v.Kind {
	case Scored, PolicyFailure:
		o.Reward, o.MaskSample = ptr(0.0), false
	default:
		o.Reward, o.MaskSample = nil, true
	}
	if tr := v.Train; tr != nil {
		o.TrainReward, o.InnerSteps, o.TrainGPU = ptr(tr.TrainReward), ptr(tr.InnerSteps), tr.GPU()
		if !tr.Status.PolicyFailure() {
			o.CheckpointSHA256 = tr.WeightsSHA256
		}
	}
	if v.Eval != nil {
		o.GPU = v.Eval.GPU()
	}
	if ev := v.Eval; v.Kind == Scored && ev != nil {
		o.Reward = ptr(ev.Reward)
		o.AIME25Exact, o.AIME25AvgAt8 = ptr(ev.AIME25Exact), ptr(ev.AIME25AvgAt8)
		o.Completed, o.WandbURL = ev.Completed, ev.WandbURL
		o.Correct, o.Samples = ptr(ev.Correct), ev.Problems*ev.SamplesPerProblem
	}
}

func ptr[T any](v T) *T { return &v }
