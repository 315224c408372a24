package record

import (
	"crypto/sha256"
	"encoding/hex"
)

// VerifyEvalJob checks that the eval record names the eval job the
// collector knows (the id sbatch returned and sacct reports). A record
// copied from another job, or printed by something other than the eval job,
// fails here.
func VerifyEvalJob(ev *Eval, evalJobID string) error {
	if ev.SlurmJobID != evalJobID {
		return &Rejection{Stage: StageEval, Reason: ReasonJobIDMismatch, Field: "slurm_job_id", Offset: -1,
			Detail: "record names job " + quote(ev.SlurmJobID) + ", the eval job is " + quote(evalJobID)}
	}
	return nil
}

// VerifyWeights checks that the eval record scored the weights the train
// record exported: the train stage succeeded and both name the same sha256.
func VerifyWeights(tr *Train, ev *Eval) error {
	if tr.Status != StatusOK {
		return &Rejection{Stage: StageEval, Reason: ReasonTrainNotOK, Field: "status", Offset: -1,
			Detail: "an eval record exists but the train record's status is " + quote(string(tr.Status))}
	}
	if !IsSHA256Hex(tr.WeightsSHA256) || ev.WeightsSHA256 != tr.WeightsSHA256 {
		return &Rejection{Stage: StageEval, Reason: ReasonWeightsMismatch, Field: "weights_sha256", Offset: -1,
			Detail: "eval scored " + quote(ev.WeightsSHA256) + ", train exported " + quote(tr.WeightsSHA256)}
	}
	return nil
}

// VerifyPatch checks change.diff against the author record: same size and
// same sha256.
func VerifyPatch(a *Author, patch []byte) error {
	sum := sha256.Sum256(patch)
	got := hex.EncodeToString(sum[:])
	if int64(len(patch)) != a.PatchBytes || got != a.PatchSHA256 {
		return &Rejection{Stage: StageAuthor, Reason: ReasonPatchMismatch, Field: "patch_sha256", Offset: -1,
			Detail: "change.diff has sha256 " + got + ", the author record names " + quote(a.PatchSHA256)}
	}
	return nil
}

// VerifyCheckedPatch checks that the patch eval's contamination check read
// is the one the author record names: a clean patch shown to the check in
// place of the one train ran fails here.
func VerifyCheckedPatch(a *Author, ev *Eval) error {
	if ev.PatchSHA256 != a.PatchSHA256 {
		return &Rejection{Stage: StageEval, Reason: ReasonCheckedPatchMismatch, Field: "patch_sha256", Offset: -1,
			Detail: "eval's contamination check read a patch with sha256 " + quote(ev.PatchSHA256) + ", the author record names " + quote(a.PatchSHA256)}
	}
	return nil
}

func quote(s string) string {
	const max = 80
	if len(s) > max {
		s = s[:max] + "…"
	}
	return "\"" + s + "\""
}
