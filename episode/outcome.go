package episode

import (
	"time"

	"github.com/nemorl/nemorl-slurm/slurm"
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

// Policy failure reasons (reward 0, never masked), besides the record
// reasons of a rejected author or train record (record.Reason: missing_record,
// foreign_record, duplicate_record, …).
const (
	ReasonNoPatch       = "no_patch"
	ReasonPatchRejected = "patch_rejected"
	ReasonTrainFailed   = "train_failed"
	// ReasonAuthorFailed: the author job failed by its own exit status
	// (not a verdict of its batch script).
	ReasonAuthorFailed = "author_failed"
	// ReasonTrainTimeout: the train job ran into its Slurm time limit (the
	// launcher stops the trainer well before it).
	ReasonTrainTimeout = "train_timeout"
	// ReasonTrainOutOfMemory: the train job ran out of memory.
	ReasonTrainOutOfMemory = "train_out_of_memory"
	// ReasonBadPatch: change.diff is not a regular file, is larger than
	// the author record says, or larger than MaxPatchBytes.
	ReasonBadPatch = "bad_patch"
	// ReasonBadWeights: the trusted check rejected the weights train
	// exported, or they are missing or not a regular file.
	ReasonBadWeights = "bad_weights"
	// ReasonForeignCancel: a job of the episode was cancelled by the
	// user's own uid, and not by this tool (tampering).
	ReasonForeignCancel = "foreign_cancel"
	// ReasonPlantedOutput: a stage's output file is a FIFO, a symlink or
	// anything but a regular file (tampering).
	ReasonPlantedOutput = "planted_output"
)

// Infrastructure failure reasons besides the Slurm failures
// (slurm.Failure: node_failure, timeout, cancelled, …) and the record
// reason missing_record.
const (
	ReasonDeadline       = "deadline"        // run --deadline passed: the jobs were cancelled
	ReasonInterrupted    = "interrupted"     // run got SIGINT or SIGTERM: the jobs were cancelled
	ReasonCancelled      = "cancelled"       // nemorl-slurm cancel
	ReasonConnectionLost = "connection_lost" // the cluster could not be reached beyond retries
	ReasonJobLost        = "job_lost"        // Slurm forgot a job before reporting its end
	ReasonTimesUnknown   = "times_unknown"   // sacct never reported the start and end times needed
	ReasonSubmitRefused  = "submit_refused"  // sbatch refused a stage for good (partition, account, GRES, a missing script)
	// ReasonIsolationBreach: a job's guard found Slurm reachable from its
	// container (a munge socket, a Slurm config, a network interface): the
	// site's setup, not the policy; the payload never ran.
	ReasonIsolationBreach = "isolation_breach"
	// ReasonNoGPU: a train or eval job found no GPU where Slurm gave one.
	ReasonNoGPU = "no_gpu"
	// ReasonPolicyEndpointFailed: the policy's model endpoint failed the
	// author stage (unreachable, 5xx, rate limited): the policy never got
	// its chance.
	ReasonPolicyEndpointFailed = "policy_endpoint_failed"
	// ReasonScriptRefused: a stage's batch script refused to start its
	// payload (an input it must find was missing).
	ReasonScriptRefused = "script_refused"
	// ReasonRolloutsRejected: the evaluator's score step rejected the
	// rollouts (failed rollouts, wrong counts): eval infrastructure.
	ReasonRolloutsRejected = "rollouts_rejected"
)

// Integrity reasons besides the record.Reason values.
const (
	ReasonEvalInputsTampered = "eval_inputs_tampered" // the eval job refused its image or inputs (exit 65)
	ReasonEvalBeforeTrainEnd = "eval_started_before_train_ended"
	// ReasonEvalOutputRedirected: the eval script found its standard
	// output was not its own out.log (exit 67): someone changed the job's
	// StdOut or replaced the file.
	ReasonEvalOutputRedirected = "eval_output_redirected"
	// ReasonEvalOutputTampered: eval's out.log was changed outside the eval
	// job's run, or is not the file the job wrote.
	ReasonEvalOutputTampered = "eval_output_tampered"
	// ReasonImpostorJob: a job found on the cluster under a stage's name
	// or tag is not the one the tool submitted (its batch script, user or
	// submit time differ); it is cancelled.
	ReasonImpostorJob = "impostor_job"
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
	FailureStage string `json:"failure_stage,omitempty"`
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
	Completed    int      `json:"completed"`
	// Correct of Samples (30 problems × 8) is the score the reward is.
	Correct          *int   `json:"correct,omitempty"`
	Samples          int    `json:"samples,omitempty"`
	PatchSHA256      string `json:"patch_sha256,omitempty"`
	CheckpointSHA256 string `json:"checkpoint_sha256,omitempty"`
	WandbURL         string `json:"wandb_url,omitempty"`
	Isolation        string `json:"isolation"`
	Dir              string `json:"dir"`

	Jobs map[string]JobSummary `json:"jobs"`
	// Attempts counts, by stage, how many times its job ran or was queued
	// to: the tool's retries and Slurm's own requeues (retry.go).
	Attempts map[string]int `json:"attempts,omitempty"`
	// Retried are the stages' earlier attempts, as the ledger keeps them.
	Retried map[string][]Attempt `json:"retried,omitempty"`
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

// info is the job as the summary keeps it.
func (s JobSummary) info() slurm.JobInfo {
	j := slurm.JobInfo{ID: s.ID, State: slurm.ParseState(s.State, ""), ExitCode: slurm.ParseExitCode(s.ExitCode),
		Start: s.Start, End: s.End, NodeList: s.NodeList, Source: slurm.SourceSacct, Runs: s.Runs, EarlierRuns: s.EarlierRuns}
	if !s.Start.IsZero() && s.End.After(s.Start) {
		j.Elapsed = s.End.Sub(s.Start)
	}
	return j
}

func summarize(j slurm.JobInfo) JobSummary {
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

func ptr[T any](v T) *T { return &v }
