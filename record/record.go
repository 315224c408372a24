// Package record defines the NEMORL_ENV_* records that the three stage jobs
// print on their stdout, how they are printed (Format, Write), how the
// collector finds and checks them in a stage's output file (Scan, ScanTail),
// and the cross-checks between records and Slurm (Verify*).
//
// A record is one whole line: the stage's prefix at the very start of the
// line, then exactly one JSON object, then the end of the line.
//
//	NEMORL_ENV_AUTHOR_RESULT={"patch_sha256":"…","patch_bytes":1234,…}   author
//	NEMORL_ENV_TRAIN_RESULT={"status":"ok","train_reward":0.31,…}        train
//	NEMORL_ENV_RESULT={"reward":0.1375,"aime25_exact":0.1375,…}          eval
//
// The same types serve the in-job code (which prints a record) and the
// collector (which parses it), so both sides agree on field names by
// construction. Every field of every record is required but the train
// record's GPU fields (OptionalFieldNames); unknown, duplicate, null and
// non-finite fields are rejected. Every rejection is a *Rejection
// carrying a machine-readable Reason.
package record

import (
	"fmt"
	"reflect"
	"strings"

	"github.com/nemorl/nemorl-slurm/stages"
)

// Stage names one of the three jobs of an episode, as the records know
// it: the stage whose prefix a record line carries (a stages.Stage
// converts to it: record.Stage(stages.Train)).
type Stage string

// The three stages.
const (
	StageAuthor Stage = Stage(stages.Author)
	StageTrain  Stage = Stage(stages.Train)
	StageEval   Stage = Stage(stages.Eval)
)

// Stages lists every stage, in chain order.
var Stages = []Stage{StageAuthor, StageTrain, StageEval}

// Record line prefixes. No prefix is a prefix of another (they differ at byte
// 11), so a line can start with at most one of them.
const (
	PrefixAuthor = "NEMORL_ENV_AUTHOR_RESULT="
	PrefixTrain  = "NEMORL_ENV_TRAIN_RESULT="
	PrefixEval   = "NEMORL_ENV_RESULT="
)

// Prefix returns the record prefix of the stage, or "" for an unknown stage.
func (s Stage) Prefix() string {
	switch s {
	case StageAuthor:
		return PrefixAuthor
	case StageTrain:
		return PrefixTrain
	case StageEval:
		return PrefixEval
	}
	return ""
}

// Valid reports whether s is one of the three stages.
func (s Stage) Valid() bool { return s.Prefix() != "" }

// AIME25 evaluation shape: 30 problems, 8 sampled answers each.
const (
	Problems          = 30
	SamplesPerProblem = 8
	TotalSamples      = Problems * SamplesPerProblem // 240
	// MaxTurns is the largest author turn budget (max_turns is 1..200).
	MaxTurns = 200
)

// Record is one of *Author, *Train, *Eval.
type Record interface {
	// Stage is the stage that prints this kind of record.
	Stage() Stage
	// Validate checks the values of a decoded record (ranges and
	// consistency). A nil result means the record may be printed or trusted
	// as far as its own content goes; cross-checks are the Verify functions.
	Validate() error
}

// Author is the author stage's record (NEMORL_ENV_AUTHOR_RESULT=). It
// describes the patch the policy produced (change.diff, restricted to
// recipe.yaml and NeMo-RL/) and how the Claude Code run ended.
type Author struct {
	// PatchSHA256 is the hex sha256 of change.diff as written (the sha256
	// of the empty string for an empty patch).
	PatchSHA256 string `json:"patch_sha256"`
	// PatchBytes is the size of change.diff; 0 means "no_patch".
	PatchBytes int64 `json:"patch_bytes"`
	// FilesChanged counts the files the diff touches; 0 iff PatchBytes is 0.
	FilesChanged int `json:"files_changed"`
	// Turns is the number of agent turns used (0..MaxTurns).
	Turns int `json:"turns"`
	// ExitStatus is the exit status of the claude process (-1: killed by a
	// signal).
	ExitStatus int `json:"exit_status"`
	// TimedOut is true when the research budget ended the run.
	TimedOut bool `json:"timed_out"`
	// ResponseSHA256 is the hex sha256 of response.json, the transcript.
	ResponseSHA256 string `json:"response_sha256"`
	// TerminalReason says why the Claude Code run ended (TerminalReasons;
	// "" when unknown).
	TerminalReason string `json:"terminal_reason"`
	// ModelCalls counts the model calls of the run: distinct assistant
	// messages from a real model (Claude Code's synthetic API-error
	// messages are not calls). Turns is ModelCalls clamped to MaxTurns.
	ModelCalls int `json:"model_calls"`
	// DroppedEvents counts the transcript lines the converter could not
	// read (not JSON, cut short, or beyond its bound for one line), so
	// whatever they held is missing from response.json.
	DroppedEvents int `json:"dropped_events"`
}

// Terminal reasons of the author record (Author.TerminalReason).
const (
	TerminalSuccess       = "success"         // Claude Code ended the run itself, without error
	TerminalMaxTurns      = "max_turns"       // stopped at --max-turns; the patch so far is kept
	TerminalAPIError      = "api_error"       // the policy endpoint kept failing (Claude Code gave up)
	TerminalPromptTooLong = "prompt_too_long" // the endpoint refused the context as too long; the patch so far is kept
	TerminalTimeout       = "timeout"         // the research time limit killed Claude Code
	TerminalError         = "error"           // no result event, or a result flagged is_error for another reason
)

// TerminalReasons lists the values Author.TerminalReason may take ("" is
// valid too: unknown).
var TerminalReasons = []string{TerminalSuccess, TerminalMaxTurns, TerminalAPIError, TerminalPromptTooLong, TerminalTimeout, TerminalError}

// MaxModelCalls bounds Author.ModelCalls and Author.DroppedEvents.
const MaxModelCalls = 1 << 20

// Stage implements Record.
func (*Author) Stage() Stage { return StageAuthor }

// TrainStatus says how the train stage ended. Every status but StatusOK
// comes with no usable weights.
type TrainStatus string

// Train statuses. PolicyFailure tells the ones caused by the policy (reward
// 0, "policy_failure": its patch or its code) from StatusOK. A launcher or
// infrastructure fault prints no record at all (the launcher crashed, the
// node died), which the collector sees as missing_record: no reward.
const (
	// StatusOK: the trainer exited 0, reported an average reward, saved a
	// checkpoint, and the export to model.safetensors succeeded.
	StatusOK TrainStatus = "ok"
	// StatusPatchFailed: git apply --check refused the patch on the pinned
	// checkouts. The policy wrote the patch, so the episode is a policy
	// failure, "patch_rejected".
	StatusPatchFailed TrainStatus = "patch_failed"
	// StatusTrainerFailed: the trainer (the policy's code) exited non-zero.
	StatusTrainerFailed TrainStatus = "trainer_failed"
	// StatusTrainerTimeout: the trainer was still running at the inner
	// deadline (train_seconds − 120 s) and was stopped without a checkpoint.
	StatusTrainerTimeout TrainStatus = "trainer_timeout"
	// StatusNoReward: the trainer exited 0 but never reported an average
	// reward.
	StatusNoReward TrainStatus = "no_reward"
	// StatusNoCheckpoint: the trainer exited 0 but left no step_N checkpoint.
	StatusNoCheckpoint TrainStatus = "no_checkpoint"
	// StatusExportFailed: the checkpoint could not be converted to bf16
	// model.safetensors (its format comes from the policy's NeMo RL).
	StatusExportFailed TrainStatus = "export_failed"
)

var trainStatuses = map[TrainStatus]bool{
	StatusOK: true, StatusPatchFailed: true, StatusTrainerFailed: true,
	StatusTrainerTimeout: true, StatusNoReward: true, StatusNoCheckpoint: true,
	StatusExportFailed: true,
}

// Valid reports whether s is a known train status.
func (s TrainStatus) Valid() bool { return trainStatuses[s] }

// PolicyFailure reports whether the status is the policy's fault (the
// episode gets reward 0), as opposed to StatusOK or an infrastructure fault.
func (s TrainStatus) PolicyFailure() bool {
	switch s {
	case StatusPatchFailed, StatusTrainerFailed, StatusTrainerTimeout, StatusNoReward, StatusNoCheckpoint, StatusExportFailed:
		return true
	}
	return false
}

// Train is the train stage's record (NEMORL_ENV_TRAIN_RESULT=). The first
// two fields are the reference's; the rest bind the exported weights and
// tell a crashed trainer from a broken launcher.
type Train struct {
	Status TrainStatus `json:"status"`
	// TrainReward is the last "Avg Reward" the trainer logged (0 when none).
	TrainReward float64 `json:"train_reward"`
	// InnerSteps is N of the last step_N checkpoint (0 when none).
	InnerSteps int `json:"inner_steps"`
	// WeightsSHA256 is the hex sha256 of model.safetensors; "" unless ok.
	WeightsSHA256 string `json:"weights_sha256"`
	// WeightsBytes is the size of model.safetensors; 0 unless ok.
	WeightsBytes int64 `json:"weights_bytes"`
	// TrainerExitStatus is the trainer process's exit status (-1: killed
	// by a signal).
	TrainerExitStatus int `json:"trainer_exit_status"`
	// GPUName, GPUMemoryMiB and GPUCount are the GPU the train job had, as
	// the launcher read it (QueryGPU; "", 0, 0: not read). The policy's
	// code runs in this job, so they are informational, never trusted
	// (the eval record's are). Optional: a record of a launcher older than
	// them is read as not saying (a train image not rebuilt must not cost
	// the policy its reward).
	GPUName      string `json:"gpu_name" record:"optional"`
	GPUMemoryMiB int    `json:"gpu_memory_mib" record:"optional"`
	GPUCount     int    `json:"gpu_count" record:"optional"`
}

// Stage implements Record.
func (*Train) Stage() Stage { return StageTrain }

// Eval is the eval stage's record (NEMORL_ENV_RESULT=). The first five
// fields are the reference's; the rest bind the score to its Slurm job and
// weights and carry the counts the reward is computed from, so the
// collector can recompute it.
type Eval struct {
	// Reward is the episode's reward: Correct / 240 (AIME25 avg@8).
	Reward float64 `json:"reward"`
	// AIME25Exact and AIME25AvgAt8 equal Reward (kept for the reference's
	// consumers).
	AIME25Exact  float64 `json:"aime25_exact"`
	AIME25AvgAt8 float64 `json:"aime25_avg_at_8"`
	// Completed is always 1.
	Completed int    `json:"completed"`
	WandbURL  string `json:"wandb_url"`
	// SlurmJobID is the eval job's own id ($SLURM_JOB_ID).
	SlurmJobID string `json:"slurm_job_id"`
	// WeightsSHA256 is the hex sha256 of the model.safetensors scored.
	WeightsSHA256 string `json:"weights_sha256"`
	// RolloutsSHA256 is the hex sha256 of the rollouts file scored.
	RolloutsSHA256 string `json:"rollouts_sha256"`
	// Problems is 30, SamplesPerProblem 8.
	Problems          int `json:"problems"`
	SamplesPerProblem int `json:"samples_per_problem"`
	// Correct is the number of answers with reward 1 (0..240).
	Correct int `json:"correct"`
	// PerQuestionCorrect holds, in AIME25 dataset order, each problem's
	// number of correct answers (30 entries, each 0..8, summing to Correct).
	PerQuestionCorrect []int `json:"per_question_correct"`
	// PatchSHA256 is the hex sha256 of the change.diff the contamination
	// check read (the eval job's node-local copy); the collector compares
	// it with the author record's.
	PatchSHA256 string `json:"patch_sha256"`
	// ProblemsSHA256 is the hex sha256 of the AIME25 problems file the
	// check and the scoring used (the eval image's, pinned by its digest).
	ProblemsSHA256 string `json:"problems_sha256"`
	// Contaminated: the check found the eval problems or their answers in
	// the patch's added lines. The weights were then not scored: Correct
	// is 0, the reward 0. Contamination is the evidence (which problem,
	// which patch lines, the overlap), at most MaxEvidenceBytes; "" when
	// not contaminated.
	Contaminated  bool   `json:"contaminated"`
	Contamination string `json:"contamination"`
	// GPUName, GPUMemoryMiB and GPUCount are the GPU the eval job had, as
	// the trusted evaluator read it in the job (QueryGPU: nvidia-smi for
	// the GPUs of CUDA_VISIBLE_DEVICES); "", 0, 0 when it could not be
	// read. Required: a record without them comes from an eval image
	// older than them (rebuild it and pin it again).
	GPUName      string `json:"gpu_name"`
	GPUMemoryMiB int    `json:"gpu_memory_mib"`
	GPUCount     int    `json:"gpu_count"`
}

// Stage implements Record.
func (*Eval) Stage() Stage { return StageEval }

// New returns a zero record of the stage's type.
func New(s Stage) (Record, error) {
	switch s {
	case StageAuthor:
		return new(Author), nil
	case StageTrain:
		return new(Train), nil
	case StageEval:
		return new(Eval), nil
	}
	return nil, fmt.Errorf("record: unknown stage %q", s)
}

// fieldKind is the JSON kind a record field must have.
type fieldKind int

const (
	kindString fieldKind = iota
	kindInt
	kindFloat
	kindBool
	kindIntArray
)

func (k fieldKind) String() string {
	return [...]string{"string", "integer", "number", "boolean", "array of integers"}[k]
}

type fieldSpec struct {
	name string
	kind fieldKind
	// optional: a record may leave the field out (it then reads as its
	// zero value); every other field is required.
	optional bool
}

// specs lists each record type's JSON fields, in struct (= output) order,
// derived from the struct tags so that the parser and the types never drift.
var specs = map[Stage][]fieldSpec{
	StageAuthor: specOf(reflect.TypeFor[Author]()),
	StageTrain:  specOf(reflect.TypeFor[Train]()),
	StageEval:   specOf(reflect.TypeFor[Eval]()),
}

func specOf(t reflect.Type) []fieldSpec {
	var out []fieldSpec
	for i := range t.NumField() {
		f := t.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if name == "" || name == "-" {
			panic("record: field without json name: " + f.Name)
		}
		var k fieldKind
		switch f.Type.Kind() {
		case reflect.String:
			k = kindString
		case reflect.Int, reflect.Int64:
			k = kindInt
		case reflect.Float64:
			k = kindFloat
		case reflect.Bool:
			k = kindBool
		case reflect.Slice:
			if f.Type.Elem().Kind() != reflect.Int {
				panic("record: unsupported slice field " + f.Name)
			}
			k = kindIntArray
		default:
			panic("record: unsupported field type " + f.Name)
		}
		opt := false
		switch tag := f.Tag.Get("record"); tag {
		case "":
		case "optional":
			opt = true
		default:
			panic("record: unknown record tag " + tag + " on " + f.Name)
		}
		out = append(out, fieldSpec{name: name, kind: k, optional: opt})
	}
	return out
}

// FieldNames returns the JSON field names of the stage's record, in output
// order. All of them are required but the OptionalFieldNames.
func FieldNames(s Stage) []string {
	var out []string
	for _, f := range specs[s] {
		out = append(out, f.name)
	}
	return out
}

// OptionalFieldNames are the fields of the stage's record that a record
// may leave out (added after records were first printed, and only
// informational): the train record's GPU fields.
func OptionalFieldNames(s Stage) []string {
	var out []string
	for _, f := range specs[s] {
		if f.optional {
			out = append(out, f.name)
		}
	}
	return out
}
