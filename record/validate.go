package record

import (
	"math"
	"slices"
	"strings"
	"unicode"
)

// EmptySHA256 is the hex sha256 of zero bytes (the hash of an empty patch).
const EmptySHA256 = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"

// MaxURLBytes bounds wandb_url.
const MaxURLBytes = 2048

// The eval record's contamination evidence starts with one of these,
// written by the trusted evaluator (evaluate.Evidence) and read by the
// rules: the eval problems found (EvidenceFound), or a patch refused
// because the check cannot read what it carries (EvidenceOpaque: data
// the check cannot read; EvidenceUncheckable: an archive or binary it
// cannot open).
const (
	EvidenceFound       = "the eval problems are in the patch"
	EvidenceOpaque      = "the patch carries data the check cannot read: "
	EvidenceUncheckable = "the patch cannot be checked for the eval problems: "
)

// MaxEvidenceBytes bounds the eval record's contamination evidence.
const MaxEvidenceBytes = 4096

// IsSHA256Hex reports whether s is 64 lowercase hex digits.
func IsSHA256Hex(s string) bool { return IsLowerHex(s, 64) }

// IsLowerHex reports whether s is exactly n lowercase hex digits (64: a
// sha256, 40: a git commit).
func IsLowerHex(s string, n int) bool {
	if len(s) != n {
		return false
	}
	for i := range len(s) {
		c := s[i]
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

// IsJobID reports whether s looks like a plain Slurm job id: 1..20 digits,
// no leading zero.
func IsJobID(s string) bool {
	if len(s) == 0 || len(s) > 20 || s[0] == '0' {
		return false
	}
	for i := range len(s) {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}

func finite(f float64) bool { return !math.IsNaN(f) && !math.IsInf(f, 0) }

func exitStatusOK(s int) bool { return s >= -1 && s <= 255 }

// Validate implements Record.
func (a *Author) Validate() error {
	switch {
	case !IsSHA256Hex(a.PatchSHA256):
		return reject(ReasonInvalidValue, "patch_sha256", "not 64 lowercase hex digits")
	case !IsSHA256Hex(a.ResponseSHA256):
		return reject(ReasonInvalidValue, "response_sha256", "not 64 lowercase hex digits")
	case a.PatchBytes < 0:
		return reject(ReasonInvalidValue, "patch_bytes", "negative: %d", a.PatchBytes)
	case a.FilesChanged < 0:
		return reject(ReasonInvalidValue, "files_changed", "negative: %d", a.FilesChanged)
	case a.PatchBytes == 0 && a.PatchSHA256 != EmptySHA256:
		return reject(ReasonInvalidValue, "patch_sha256", "patch_bytes is 0 but the hash is not that of an empty patch")
	case a.PatchBytes > 0 && a.PatchSHA256 == EmptySHA256:
		return reject(ReasonInvalidValue, "patch_sha256", "hash of an empty patch but patch_bytes is %d", a.PatchBytes)
	case (a.PatchBytes == 0) != (a.FilesChanged == 0):
		return reject(ReasonInvalidValue, "files_changed", "files_changed %d inconsistent with patch_bytes %d", a.FilesChanged, a.PatchBytes)
	case a.Turns < 0 || a.Turns > MaxTurns:
		return reject(ReasonInvalidValue, "turns", "%d outside 0..%d", a.Turns, MaxTurns)
	case !exitStatusOK(a.ExitStatus):
		return reject(ReasonInvalidValue, "exit_status", "%d outside -1..255", a.ExitStatus)
	case a.TerminalReason != "" && !slices.Contains(TerminalReasons, a.TerminalReason):
		return reject(ReasonInvalidValue, "terminal_reason", "unknown reason %q", a.TerminalReason)
	case a.ModelCalls < 0 || a.ModelCalls > MaxModelCalls:
		return reject(ReasonInvalidValue, "model_calls", "%d outside 0..%d", a.ModelCalls, MaxModelCalls)
	case a.DroppedEvents < 0 || a.DroppedEvents > MaxModelCalls:
		return reject(ReasonInvalidValue, "dropped_events", "%d outside 0..%d", a.DroppedEvents, MaxModelCalls)
	}
	return nil
}

// Validate implements Record.
func (t *Train) Validate() error {
	switch {
	case !t.Status.Valid():
		return reject(ReasonInvalidValue, "status", "unknown status %q", t.Status)
	case !finite(t.TrainReward):
		return reject(ReasonNonFinite, "train_reward", "%v", t.TrainReward)
	case t.InnerSteps < 0:
		return reject(ReasonInvalidValue, "inner_steps", "negative: %d", t.InnerSteps)
	case t.WeightsBytes < 0:
		return reject(ReasonInvalidValue, "weights_bytes", "negative: %d", t.WeightsBytes)
	case t.WeightsSHA256 != "" && !IsSHA256Hex(t.WeightsSHA256):
		return reject(ReasonInvalidValue, "weights_sha256", "neither empty nor 64 lowercase hex digits")
	case !exitStatusOK(t.TrainerExitStatus):
		return reject(ReasonInvalidValue, "trainer_exit_status", "%d outside -1..255", t.TrainerExitStatus)
	}
	if rej := checkGPU(t.GPUName, t.GPUMemoryMiB, t.GPUCount); rej != nil {
		return rej
	}
	if t.Status == StatusOK {
		switch {
		case t.TrainerExitStatus != 0:
			return reject(ReasonInvalidValue, "trainer_exit_status", "status ok with trainer exit status %d", t.TrainerExitStatus)
		case t.WeightsSHA256 == "":
			return reject(ReasonInvalidValue, "weights_sha256", "status ok without a weights hash")
		case t.WeightsBytes == 0:
			return reject(ReasonInvalidValue, "weights_bytes", "status ok with no weights")
		case t.InnerSteps < 1:
			return reject(ReasonInvalidValue, "inner_steps", "status ok with %d steps", t.InnerSteps)
		}
		return nil
	}
	switch {
	case t.WeightsSHA256 != "" || t.WeightsBytes != 0:
		return reject(ReasonInvalidValue, "weights_sha256", "status %s must not name weights", t.Status)
	case t.Status == StatusTrainerFailed && t.TrainerExitStatus == 0:
		return reject(ReasonInvalidValue, "trainer_exit_status", "status trainer_failed with exit status 0")
	}
	return nil
}

// RewardFor returns the reward for a number of correct answers out of 240,
// computed exactly as the record requires: float64(correct) / 240.
func RewardFor(correct int) float64 { return float64(correct) / TotalSamples }

// Validate implements Record.
func (e *Eval) Validate() error {
	if e.Completed != 1 {
		return reject(ReasonNotCompleted, "completed", "completed is %d, want 1", e.Completed)
	}
	for _, f := range []struct {
		name string
		v    float64
	}{{"reward", e.Reward}, {"aime25_exact", e.AIME25Exact}, {"aime25_avg_at_8", e.AIME25AvgAt8}} {
		if !finite(f.v) {
			return reject(ReasonNonFinite, f.name, "%v", f.v)
		}
		if f.v < 0 || f.v > 1 {
			return reject(ReasonRewardOutOfRange, f.name, "%v outside [0, 1]", f.v)
		}
	}
	switch {
	case e.Problems != Problems:
		return reject(ReasonBadCounts, "problems", "%d, want %d", e.Problems, Problems)
	case e.SamplesPerProblem != SamplesPerProblem:
		return reject(ReasonBadCounts, "samples_per_problem", "%d, want %d", e.SamplesPerProblem, SamplesPerProblem)
	case len(e.PerQuestionCorrect) != Problems:
		return reject(ReasonBadCounts, "per_question_correct", "%d entries, want %d", len(e.PerQuestionCorrect), Problems)
	case e.Correct < 0 || e.Correct > TotalSamples:
		return reject(ReasonCountOutOfRange, "correct", "%d outside 0..%d", e.Correct, TotalSamples)
	}
	sum := 0
	for i, c := range e.PerQuestionCorrect {
		if c < 0 || c > SamplesPerProblem {
			return reject(ReasonCountOutOfRange, "per_question_correct", "entry %d is %d, outside 0..%d", i, c, SamplesPerProblem)
		}
		sum += c
	}
	switch {
	case sum != e.Correct:
		return reject(ReasonCountSumMismatch, "per_question_correct", "entries sum to %d, correct is %d", sum, e.Correct)
	case e.Reward != RewardFor(e.Correct):
		return reject(ReasonRewardMismatch, "reward", "%v, but correct/240 = %d/240 = %v", e.Reward, e.Correct, RewardFor(e.Correct))
	case e.AIME25Exact != e.Reward:
		return reject(ReasonRewardMismatch, "aime25_exact", "%v differs from reward %v", e.AIME25Exact, e.Reward)
	case e.AIME25AvgAt8 != e.Reward:
		return reject(ReasonRewardMismatch, "aime25_avg_at_8", "%v differs from reward %v", e.AIME25AvgAt8, e.Reward)
	case !IsJobID(e.SlurmJobID):
		return reject(ReasonInvalidValue, "slurm_job_id", "%q is not a Slurm job id", e.SlurmJobID)
	case !IsSHA256Hex(e.WeightsSHA256):
		return reject(ReasonInvalidValue, "weights_sha256", "not 64 lowercase hex digits")
	case !IsSHA256Hex(e.RolloutsSHA256):
		return reject(ReasonInvalidValue, "rollouts_sha256", "not 64 lowercase hex digits")
	case len(e.WandbURL) > MaxURLBytes:
		return reject(ReasonInvalidValue, "wandb_url", "%d bytes, longer than %d", len(e.WandbURL), MaxURLBytes)
	case len(e.Contamination) > MaxEvidenceBytes:
		return reject(ReasonInvalidValue, "contamination", "%d bytes, longer than %d", len(e.Contamination), MaxEvidenceBytes)
	}
	for _, f := range []struct{ name, v string }{{"wandb_url", e.WandbURL}, {"contamination", e.Contamination}} {
		for _, r := range f.v {
			if unicode.IsControl(r) || r == unicode.ReplacementChar {
				return reject(ReasonInvalidValue, f.name, "contains a control or invalid character")
			}
		}
	}
	switch {
	case !IsSHA256Hex(e.PatchSHA256):
		return reject(ReasonInvalidValue, "patch_sha256", "not 64 lowercase hex digits")
	case !IsSHA256Hex(e.ProblemsSHA256):
		return reject(ReasonInvalidValue, "problems_sha256", "not 64 lowercase hex digits")
	case e.Contaminated && e.Contamination == "":
		return reject(ReasonInvalidValue, "contamination", "contaminated without evidence")
	case !e.Contaminated && e.Contamination != "":
		return reject(ReasonInvalidValue, "contamination", "evidence, but contaminated is false")
	case e.Contaminated && e.Correct != 0:
		return reject(ReasonInvalidValue, "correct", "%d for a contaminated patch, whose weights are not scored", e.Correct)
	}
	if rej := checkGPU(e.GPUName, e.GPUMemoryMiB, e.GPUCount); rej != nil {
		return rej
	}
	return nil
}

// missingHint says, for a required field that a record of an older
// nemorl-slurm lacks, where such a record comes from.
func missingHint(stage Stage, field string) string {
	if stage == StageEval && strings.HasPrefix(field, "gpu_") {
		return ": an eval record without the GPU fields comes from an eval image whose nemorl-slurm is older than them (rebuild the eval image and pin it again: nemorl-slurm images lock)"
	}
	return ""
}
