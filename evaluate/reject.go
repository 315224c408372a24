package evaluate

import (
	"errors"
	"fmt"
	"strings"
)

// Reason is the machine-readable cause of a Rejection.
type Reason string

// Weights rejections (CheckWeights).
const (
	ReasonNotRegularFile   Reason = "not_regular_file"  // the path is not a regular file
	ReasonTruncated        Reason = "truncated"         // the file ends before the header or a tensor's data
	ReasonHeaderSize       Reason = "header_size"       // header length 0, absurd, or beyond the file
	ReasonHeaderInvalid    Reason = "header_invalid"    // header not a strict safetensors JSON object
	ReasonDuplicateTensor  Reason = "duplicate_tensor"  // a tensor name appears twice in the header
	ReasonDTypeNotAllowed  Reason = "dtype_not_allowed" // anything but BF16, F16, F32
	ReasonSizeMismatch     Reason = "size_mismatch"     // data_offsets span != product(shape) × dtype size
	ReasonOffsetsOverlap   Reason = "offsets_overlap"   // two tensors share bytes
	ReasonOffsetsGap       Reason = "offsets_gap"       // bytes between tensors (or before the first) belong to none
	ReasonOffsetsCoverage  Reason = "offsets_coverage"  // bytes after the last tensor belong to none
	ReasonMissingTensor    Reason = "missing_tensor"    // a required tensor of the architecture is absent
	ReasonUnexpectedTensor Reason = "unexpected_tensor" // a tensor the architecture does not have
	ReasonShapeMismatch    Reason = "shape_mismatch"    // a tensor's shape differs from the architecture's
	ReasonNonFinite        Reason = "non_finite"        // a NaN or ±Inf value
	ReasonFileChanged      Reason = "file_changed"      // the file grew while it was read
)

// Rollout rejections (Score, LoadQuestions).
const (
	ReasonFailedRollouts   Reason = "failed_rollouts"    // the failures file is not empty
	ReasonMalformedRow     Reason = "malformed_row"      // a rollouts line is not a JSON object of the documented shape
	ReasonRowTooLarge      Reason = "row_too_large"      // a rollouts line longer than MaxRowBytes
	ReasonMissingReward    Reason = "missing_reward"     // a row without a reward
	ReasonNonBinaryReward  Reason = "non_binary_reward"  // a reward other than the numbers 0 and 1
	ReasonUnknownQuestion  Reason = "unknown_question"   // a row whose prompt is not one of the 30 AIME25 questions
	ReasonQuestionField    Reason = "question_mismatch"  // the row's question field disagrees with its prompt
	ReasonDuplicateQ       Reason = "duplicate_question" // a question under two task indexes, or twice in the AIME25 file
	ReasonDuplicateRollout Reason = "duplicate_rollout"  // the same (task, rollout) index twice
	ReasonMissingAnswers   Reason = "missing_answers"    // a question with fewer than 8 answers
	ReasonExtraAnswers     Reason = "extra_answers"      // a question with more than 8 answers
	ReasonBadQuestions     Reason = "bad_questions"      // the AIME25 file is not 30 unique questions
)

// Rejection is the error a check returns when the content it checks is bad.
type Rejection struct {
	Reason Reason
	// Tensor names the tensor concerned (weights), if any.
	Tensor string
	// Line is the 1-based line of the rollouts or questions file, if any.
	Line   int
	Detail string
}

func (r *Rejection) Error() string {
	var b strings.Builder
	b.WriteString("evaluate: rejected: " + string(r.Reason))
	if r.Tensor != "" {
		b.WriteString(": tensor " + r.Tensor)
	}
	if r.Line > 0 {
		fmt.Fprintf(&b, ": line %d", r.Line)
	}
	if r.Detail != "" {
		b.WriteString(": " + r.Detail)
	}
	return b.String()
}

// Is makes errors.Is(err, &Rejection{Reason: R}) match rejections with
// reason R, and &Rejection{} match any rejection.
func (r *Rejection) Is(target error) bool {
	t, ok := target.(*Rejection)
	return ok && (t.Reason == "" || t.Reason == r.Reason)
}

// ReasonOf returns the reason of the *Rejection in err's chain, or "".
func ReasonOf(err error) Reason {
	var r *Rejection
	if errors.As(err, &r) {
		return r.Reason
	}
	return ""
}

func rejectTensor(reason Reason, tensor, format string, args ...any) *Rejection {
	return &Rejection{Reason: reason, Tensor: tensor, Detail: fmt.Sprintf(format, args...)}
}

func rejectLine(reason Reason, line int, format string, args ...any) *Rejection {
	return &Rejection{Reason: reason, Line: line, Detail: fmt.Sprintf(format, args...)}
}
