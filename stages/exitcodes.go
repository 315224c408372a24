package stages

// Exit codes the batch scripts keep for their own verdicts, 64..79
// (ExitReservedMin..ExitReservedMax). The author and train scripts report a
// payload status in that range as 1, so code the policy controls can never
// fake one of these verdicts; the eval payload runs in the pinned image and
// its status passes through (ExitWeightsRejected comes from it).
const (
	// ExitReservedMin and ExitReservedMax bound the reserved range.
	ExitReservedMin = 64
	ExitReservedMax = 79

	// ExitPayloadReserved is what the author and train scripts exit with
	// when their payload exited with a reserved code.
	ExitPayloadReserved = 1

	// ExitInputsTampered (eval): the node-local copy of the eval image or
	// of a pinned evaluator input (eval.json, guard.sh, the payload files)
	// differs from the sha256 written into the script at render time.
	ExitInputsTampered = 65

	// ExitInputBad: the previous stage's output, which the policy
	// controls, is missing, not a regular file, or a symlink — train:
	// author/change.diff; eval: train/checkpoint/model.safetensors.
	ExitInputBad = 66

	// ExitOutputNotOwn (eval): the batch shell's stdout is not the same
	// device and inode as an lstat of its out.log, or out.log is not a
	// regular file with exactly one link — checked at the start and again
	// after the payload ended, before any record is written. Someone
	// redirected the job's output (scontrol update StdOut, a swapped file).
	ExitOutputNotOwn = 67

	// ExitWeightsRejected (eval payload): `evaluate check-weights` rejected
	// the trained weights (names, shapes, dtypes, non-finite values): the
	// policy's weights were bad. `evaluate score` rejecting the rollouts
	// stays exit 4 (eval infrastructure).
	ExitWeightsRejected = 68

	// ExitIsolation: the isolation guard, run in the stage's container
	// before the payload with the payload's exact flags, binds and
	// environment, found a way to Slurm (a mount outside the allowlist, a
	// unix socket, a network interface on train or eval, Slurm variables,
	// a Slurm client, Slurm or munge configuration), or an APPTAINER_* /
	// SINGULARITY_* variable could not be cleared. The payload never ran.
	ExitIsolation = 69

	// ExitOutputBound (train, isolated): the weights the payload left in its
	// node-local output are larger than the pinned architecture can be (or
	// grew while copied): nothing was copied out (policy_failure
	// output_too_large).
	ExitOutputBound = 71

	ExitNoGPU = 70 // train, eval: the job's GPU is not visible (node fault: infra_failure/no_gpu)

	// ExitPolicyEndpoint (author): the policy endpoint failed, not the
	// policy: the proxy reported, on the status descriptor the script opened
	// outside the container, no successful call, or a last call that failed
	// with a 5xx, 429 or no HTTP answer (infrastructure: no reward).
	ExitPolicyEndpoint = 75

	// ExitSecretsMissing (author): secrets.env is missing (the job was
	// re-run; its key is read once and deleted).
	ExitSecretsMissing = 78
)

// ReservedExit reports whether status is in the range the scripts keep for
// their own verdicts.
func ReservedExit(status int) bool { return status >= ExitReservedMin && status <= ExitReservedMax }

// EvalRejectedExit is the eval payload's status when the evaluator's score
// step rejected the rollouts (nemorl-slurm evaluate score exit 4). The
// scripts' own verdicts are Exit* (64..79): the author and train scripts
// report a payload status in that range as 1, so those come from the
// trusted scripts only; eval's payload (the pinned, unpatched evaluator)
// has verdicts of its own.
const EvalRejectedExit = 4

// SacctFoldMin is the least exit status Slurm's sacct shows folded before
// 25.11: 22.05 to 25.05 print a status of 128 or more as status − 128
// (src/sacct/print.c, PRINT_EXITCODE); 25.11 and later print it as is.
const SacctFoldMin = 128

// SacctReadings is every way sacct can show a job's exit status: as is
// and, for a status of 128 or more, folded by 128 (Slurm before 25.11).
func SacctReadings(status int) []int {
	if status >= SacctFoldMin {
		return []int{status, status - SacctFoldMin}
	}
	return []int{status}
}

// ScriptExit is the rule every batch script ends by (common.tmpl's
// nemorl_leave), for a script that did not decide a verdict of its own:
// the status it exits with when its payload ended with status (0–255;
// 128+N for a death by signal N). A status of 128 or more, or one in the
// reserved range, is reported as ExitPayloadReserved, so that no reading
// of SacctReadings is ever a verdict the script did not decide, and every
// Slurm reads the same status. The eval script's payload is trusted: a
// status of its below 128 in the reserved range is its verdict (eval
// only), passed through.
func ScriptExit(stage Stage, status int) int {
	switch {
	case status >= SacctFoldMin:
		return ExitPayloadReserved
	case ReservedExit(status) && stage != Eval:
		return ExitPayloadReserved
	}
	return status
}
