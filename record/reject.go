package record

import (
	"errors"
	"fmt"
	"strings"
)

// Reason is the machine-readable cause of a Rejection.
type Reason string

// Rejection reasons. They are stable strings: the collector maps them to
// outcomes and they appear in JSON output.
const (
	// Finding the record.
	ReasonMissingRecord   Reason = "missing_record"   // no line with the stage's prefix
	ReasonDuplicateRecord Reason = "duplicate_record" // more than one such line
	ReasonForeignRecord   Reason = "foreign_record"   // another stage's prefix in this stage's output (tampering signal)
	ReasonOversizedRecord Reason = "oversized_record" // record line longer than MaxRecordBytes

	// Parsing the JSON object.
	ReasonMalformedJSON  Reason = "malformed_json"  // not one valid UTF-8 JSON object
	ReasonTrailingData   Reason = "trailing_data"   // anything but whitespace after the object
	ReasonUnknownField   Reason = "unknown_field"   // a key the record type does not have (exact case)
	ReasonMissingField   Reason = "missing_field"   // a required key is absent
	ReasonDuplicateField Reason = "duplicate_field" // a key appears twice
	ReasonWrongType      Reason = "wrong_type"      // null, or a value of the wrong JSON type / integer range
	ReasonNonFinite      Reason = "non_finite"      // a number that overflows float64 (±Inf)

	// Values.
	ReasonInvalidValue     Reason = "invalid_value"       // bad status, hash, job id, negative size, …
	ReasonNotCompleted     Reason = "not_completed"       // eval completed != 1
	ReasonBadCounts        Reason = "bad_counts"          // problems != 30, samples_per_problem != 8, or not 30 per-question entries
	ReasonCountOutOfRange  Reason = "count_out_of_range"  // a per-question count outside 0..8, or correct outside 0..240
	ReasonCountSumMismatch Reason = "count_sum_mismatch"  // per-question counts do not sum to correct
	ReasonRewardOutOfRange Reason = "reward_out_of_range" // reward outside [0, 1]
	ReasonRewardMismatch   Reason = "reward_mismatch"     // reward != correct/240, or aime25_exact / avg_at_8 != reward

	// Cross-checks (Verify*).
	ReasonJobIDMismatch   Reason = "job_id_mismatch"  // eval.slurm_job_id is not the eval job's id
	ReasonWeightsMismatch Reason = "weights_mismatch" // eval.weights_sha256 != train.weights_sha256
	ReasonPatchMismatch   Reason = "patch_mismatch"   // change.diff does not match the author record
	// ReasonCheckedPatchMismatch: the patch eval's contamination check
	// read (eval.patch_sha256) is not the author record's.
	ReasonCheckedPatchMismatch Reason = "checked_patch_mismatch"
	ReasonTrainNotOK           Reason = "train_not_ok" // an eval record exists although train did not succeed
)

// Reasons lists every rejection reason.
var Reasons = []Reason{
	ReasonMissingRecord, ReasonDuplicateRecord, ReasonForeignRecord, ReasonOversizedRecord,
	ReasonMalformedJSON, ReasonTrailingData, ReasonUnknownField, ReasonMissingField, ReasonDuplicateField, ReasonWrongType, ReasonNonFinite,
	ReasonInvalidValue, ReasonNotCompleted, ReasonBadCounts, ReasonCountOutOfRange, ReasonCountSumMismatch, ReasonRewardOutOfRange, ReasonRewardMismatch,
	ReasonJobIDMismatch, ReasonWeightsMismatch, ReasonPatchMismatch, ReasonCheckedPatchMismatch, ReasonTrainNotOK,
}

// Rejection is the error every check of this package returns.
type Rejection struct {
	Stage  Stage
	Reason Reason
	// Field is the JSON field concerned, when there is one.
	Field string
	// Line is the 1-based line number in the scanned text (for ScanTail:
	// counted from the first whole line of the tail), 0 when not about a
	// line.
	Line int
	// Offset is the byte offset of that line in the stage's output file,
	// -1 when not about a line.
	Offset int64
	Detail string
}

func (r *Rejection) Error() string {
	var b strings.Builder
	b.WriteString("record")
	if r.Stage != "" {
		b.WriteString(" (" + string(r.Stage) + ")")
	}
	b.WriteString(" rejected: " + string(r.Reason))
	if r.Field != "" {
		b.WriteString(": field " + r.Field)
	}
	if r.Line > 0 {
		fmt.Fprintf(&b, " at line %d", r.Line)
		if r.Offset >= 0 {
			fmt.Fprintf(&b, " (byte %d)", r.Offset)
		}
	}
	if r.Detail != "" {
		b.WriteString(": " + r.Detail)
	}
	return b.String()
}

// Is makes errors.Is(err, &Rejection{Reason: R}) match any rejection with
// reason R (and errors.Is(err, &Rejection{}) any rejection at all).
func (r *Rejection) Is(target error) bool {
	t, ok := target.(*Rejection)
	if !ok {
		return false
	}
	return t.Reason == "" || t.Reason == r.Reason
}

// ReasonOf returns the reason of the *Rejection in err's chain, or "".
func ReasonOf(err error) Reason {
	var r *Rejection
	if errors.As(err, &r) {
		return r.Reason
	}
	return ""
}

func reject(reason Reason, field, format string, args ...any) *Rejection {
	return &Rejection{Reason: reason, Field: field, Offset: -1, Detail: fmt.Sprintf(format, args...)}
}
