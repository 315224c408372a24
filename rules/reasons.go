package rules

import (
	"github.com/nemorl/nemorl-slurm/record"
	"github.com/nemorl/nemorl-slurm/slurm"
)

// The failure reasons: one vocabulary for every outcome. Besides the names
// below, an outcome's reason may be a record rejection (record.Reason:
// missing_record, foreign_record, job_id_mismatch, …) or a Slurm failure
// (slurm.Failure: node_failure, preempted, exit_code, …); Vocabulary lists
// every reason with the outcomes it may carry, and the property tests hold
// Decide to it.
const (
	// The policy's (reward 0, never masked).
	ReasonNoPatch          = "no_patch"            // the author's change.diff is empty
	ReasonPatchRejected    = "patch_rejected"      // train record patch_failed: the patch does not apply
	ReasonTrainFailed      = "train_failed"        // train record trainer_failed, no_reward, …; or a failed job whose record says ok
	ReasonAuthorFailed     = "author_failed"       // the author job failed by its own exit status, time limit or memory
	ReasonTrainTimeout     = "train_timeout"       // the train job ran into its Slurm time limit
	ReasonTrainOutOfMemory = "train_out_of_memory" // the train job ran out of memory
	ReasonBadPatch         = "bad_patch"           // change.diff not a regular file, larger than the record says, or over stages.MaxPatchBytes
	ReasonBadWeights       = "bad_weights"         // eval found no regular file of weights (exit 66) or the trusted check rejected them (exit 68)
	ReasonForeignCancel    = "foreign_cancel"      // an episode job cancelled by the user's uid, not by the tool
	ReasonPlantedOutput    = "planted_output"      // a stage's output (or eval's output directory) is not what the job or the tool made
	// ReasonJobHeld: an episode job held by the user's uid (scontrol hold),
	// which the tool never does, after the policy's code ran with Slurm
	// within reach (runtime none).
	ReasonJobHeld = "job_held"
	// ReasonJobModified: an episode job whose time limit is not the one
	// its script asked for (scontrol update), after the policy's code ran
	// with Slurm within reach (runtime none).
	ReasonJobModified = "job_modified"
	// ReasonOutputTooLarge: the weights train's payload left in its
	// node-local output are larger than the pinned architecture can be:
	// the trusted script copied nothing out (exit 71).
	ReasonOutputTooLarge = "output_too_large"
	// ReasonContaminated: eval's contamination check found the eval
	// problems (statements, answers as a list, problem-answer pairs) in
	// the added lines of the author's patch: training on the test set.
	ReasonContaminated = "contaminated"
	// ReasonUnreadablePatch: eval's contamination check refused the
	// author's patch for what it cannot read (binary files, archives it
	// cannot open, encoded or compressed data over its bound): a patch to
	// a training stack has no need to carry it, and the author's prompt
	// says so ("readable or refused", docs/integrity.md).
	ReasonUnreadablePatch = "unreadable_patch"

	// The cluster's or the operator's (no reward, masked).
	ReasonDeadline             = "deadline"               // run --deadline passed: the jobs were cancelled
	ReasonInterrupted          = "interrupted"            // run got SIGINT or SIGTERM: the jobs were cancelled
	ReasonCancelled            = "cancelled"              // nemorl-slurm cancel, or an administrator's scancel
	ReasonConnectionLost       = "connection_lost"        // the cluster could not be reached beyond retries
	ReasonJobLost              = "job_lost"               // Slurm forgot a job before reporting its end
	ReasonTimesUnknown         = "times_unknown"          // sacct never reported the start and end times needed
	ReasonSubmitRefused        = "submit_refused"         // sbatch refused a stage for good (partition, account, GRES, a missing script)
	ReasonIsolationBreach      = "isolation_breach"       // the guard found a way out of a container (exit 69): the site's setup
	ReasonNoGPU                = "no_gpu"                 // train or eval found no GPU where Slurm gave one (exit 70)
	ReasonPolicyEndpointFailed = "policy_endpoint_failed" // the policy's model endpoint failed the author stage (exit 75)
	ReasonScriptRefused        = "script_refused"         // a batch script refused to start its payload (exit 64–79)
	ReasonRolloutsRejected     = "rollouts_rejected"      // the evaluator's score step rejected the rollouts (exit 4)
	// serve's own: a row that reached no episode.
	ReasonSubmitFailed  = "submit_failed"  // serve could not stage or submit the row's episode
	ReasonServeShutdown = "serve_shutdown" // serve stopped before the row's episode ended (the episode goes on; a re-sent row attaches)
	ReasonDataError     = "data_error"     // a /run row serve cannot run: malformed (serve.failures: mask; also the row's outcome)

	// A retired attempt's (rules.Attempt.Reason), besides its stage's
	// failure reason: ReasonTrainRetried retires an eval job with the
	// train attempt it waited for.
	ReasonTrainRetried = "train_retried"

	// Nobody's, if isolation holds (no reward, masked, an alarm). Without
	// isolation the policy's code can do each of them: policy_failure.
	ReasonEvalInputsTampered   = "eval_inputs_tampered"            // the eval job refused its image or inputs (exit 65)
	ReasonEvalBeforeTrainEnd   = "eval_started_before_train_ended" // eval started before train ended
	ReasonEvalOutputRedirected = "eval_output_redirected"          // the eval script found its stdout was not its out.log (exit 67)
	ReasonEvalOutputTampered   = "eval_output_tampered"            // eval's out.log changed outside the eval job's run, gone, or not the file it wrote
	ReasonImpostorJob          = "impostor_job"                    // a job under a stage's name or tag that the tool did not submit
	ReasonLedgerTampered       = "ledger_tampered"                 // a ledger entry no longer matches its seal
	ReasonScriptAltered        = "script_altered"                  // a job array's task found its episode's staged script changed (exit 65)
)

// Vocabulary lists every failure reason an outcome can carry, with the
// outcomes it may come with.
var Vocabulary = func() map[string][]Kind {
	p, i, v := PolicyFailure, InfraFailure, IntegrityViolation
	m := map[string][]Kind{
		ReasonNoPatch: {p}, ReasonPatchRejected: {p}, ReasonTrainFailed: {p}, ReasonAuthorFailed: {p},
		ReasonTrainTimeout: {p}, ReasonTrainOutOfMemory: {p}, ReasonBadPatch: {p}, ReasonBadWeights: {p},
		ReasonForeignCancel: {p}, ReasonPlantedOutput: {p}, ReasonJobHeld: {p}, ReasonJobModified: {p}, ReasonOutputTooLarge: {p}, ReasonContaminated: {p}, ReasonUnreadablePatch: {p},

		ReasonDeadline: {i}, ReasonInterrupted: {i}, ReasonCancelled: {i}, ReasonConnectionLost: {i},
		ReasonJobLost: {i}, ReasonTimesUnknown: {i}, ReasonSubmitRefused: {i}, ReasonIsolationBreach: {i},
		ReasonNoGPU: {i}, ReasonPolicyEndpointFailed: {i}, ReasonScriptRefused: {i}, ReasonRolloutsRejected: {i},

		ReasonEvalInputsTampered: {v, p}, ReasonEvalBeforeTrainEnd: {v, p}, ReasonEvalOutputRedirected: {v, p},
		ReasonEvalOutputTampered: {v, p}, ReasonImpostorJob: {v, p}, ReasonLedgerTampered: {v}, ReasonScriptAltered: {v, p},
	}
	// A Slurm failure of a job the cluster ended is the cluster's.
	for _, f := range []slurm.Failure{slurm.FailureExitCode, slurm.FailureCancelled, slurm.FailureDependency, slurm.FailureTimeout,
		slurm.FailureOutOfMemory, slurm.FailureNodeFailure, slurm.FailurePreempted, slurm.FailureBootFailure,
		slurm.FailureDeadline, slurm.FailureLaunch, slurm.FailureRevoked} {
		m[string(f)] = []Kind{i}
	}
	for _, c := range []slurm.Class{slurm.Unknown, slurm.Pending, slurm.Running, slurm.Succeeded, slurm.Failed} {
		m[ReasonJobClass(c)] = []Kind{i} // a failure Slurm did not name (jobFailed's fallback)
	}
	// A rejected record: the author's and train's are the policy's, eval's
	// a forgery (or, missing, the evaluator's death).
	for _, r := range record.Reasons {
		m[string(r)] = []Kind{p, v}
	}
	m[string(record.ReasonMissingRecord)] = []Kind{p, i}
	return m
}()

// ReasonJobClass is the reason of a job Slurm ended without naming a
// failure: "job_" and its state class (job_unknown, job_failed, …).
func ReasonJobClass(c slurm.Class) string { return "job_" + c.String() }
