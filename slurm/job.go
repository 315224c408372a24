package slurm

import "time"

// Source says where a JobInfo came from.
type Source string

const (
	// SourceNone: neither sacct nor squeue knows the job; its class is Unknown.
	SourceNone Source = "none"
	// SourceUnanswered: neither knows the job, but sacct or squeue failed
	// (slurmdbd or slurmctld away): its absence proves nothing. Its class
	// is Unknown.
	SourceUnanswered Source = "unanswered"
	// SourceWithdrawn: an array task neither knows while both answered
	// and one of them knows its array (a sibling task, or the record of
	// its pending tasks): Slurm keeps no record of a task cancelled while
	// pending in its array's record (it is cleared from the array's
	// bitmap: lab, 22.05 and 24.11), nor (24.11) of a split-out task
	// cancelled before it ran (a dependency never satisfied, a scancel)
	// once slurmctld forgets it; losing state would lose the array, not
	// one task. Its class is Unknown: slurmdbd lags job ends by seconds,
	// so only continuous evidence says it was withdrawn, and what
	// withdrew it is for the caller to tell (a task with no dependency:
	// only a scancel).
	SourceWithdrawn Source = "withdrawn"
	// SourceSacct: the accounting database (slurmdbd).
	SourceSacct Source = "sacct"
	// SourceSqueue: the controller's memory (slurmctld), used for jobs sacct
	// does not show yet and whenever sacct fails.
	SourceSqueue Source = "squeue"
)

// Unlimited is JobInfo.TimeLimit (and ParseTimeLimit's result) for a job
// without a time limit (Slurm's UNLIMITED). It is negative, unlike every
// real limit; test it with TimeLimit < 0 or == Unlimited.
const Unlimited time.Duration = -1

// JobInfo is what Slurm says about one job.
type JobInfo struct {
	// ID is the job id as sbatch printed it (sacct JobIDRaw), and for an
	// array task the task's id "ARRAY_TASK" ("123_4", TaskID): the id the
	// caller asked about, whether squeue or sacct answered, and whether or
	// not Slurm had split the task out of the array's pending record.
	ID string `json:"id"`
	// RawID is the job's own id, unique per array task (sacct JobIDRaw,
	// squeue %A): for a plain job the same as ID; for a task the id Slurm
	// gave it when it split it out of its array's pending record (when it
	// started, was changed, or waited on a dependency of its own). A task
	// still in that record shares the array's own id with the record's
	// other tasks; the task that starts last keeps that id. "" when Slurm
	// did not say (a job neither knows).
	RawID string `json:"raw_id,omitempty"`
	// ArrayJobID is the job id of the array a task belongs to ("123" for
	// "123_4"), "" for a job that is no array task. ArrayTask is the
	// task's index; it is -1 when the JobInfo is not one task: a plain
	// job, or an array asked about by its own id (see Client.Query).
	// Test ArrayJobID, not ArrayTask, to tell a task: a JobInfo made
	// outside this package may hold ArrayTask 0 for a plain job. (JSON:
	// array_task is left out for task 0, which reads back as 0.)
	ArrayJobID string `json:"array_job_id,omitempty"`
	ArrayTask  int    `json:"array_task,omitempty"`
	Name       string `json:"name"`
	// State is the job's state with its classification; Steps may have
	// refined its Failure (an OUT_OF_MEMORY step makes a FAILED job
	// out_of_memory).
	State State `json:"state"`
	// Reason is Slurm's reason field, raw ("None", "Dependency",
	// "DependencyNeverSatisfied", "NonZeroExitCode").
	Reason string `json:"reason,omitempty"`
	// ExitCode is the job's exit code; when the job line says 0:0 or
	// nothing but the batch step says otherwise, the batch step's.
	ExitCode ExitCode      `json:"exit_code"`
	Submit   time.Time     `json:"submit"` // zero when unknown
	Start    time.Time     `json:"start"`  // zero when unknown (pending, never ran)
	End      time.Time     `json:"end"`    // zero when unknown (not ended)
	Elapsed  time.Duration `json:"elapsed"`
	NodeList string        `json:"nodelist,omitempty"` // "" when none assigned
	// User is the name of the user the job belongs to (runs as), as sacct
	// (User) and squeue (%u) print it; "" when not reported (a job known
	// from its step lines only). A user name the login node cannot
	// resolve may come back as a number.
	User string `json:"user,omitempty"`
	// TimeLimit is the job's current time limit as Slurm reports it
	// (sacct TimelimitRaw, squeue %l): 0 when unknown or not reported
	// (no such column, a job known from its step lines only, squeue's
	// NOT_SET or INVALID, sacct's Partition_Limit); Unlimited (negative)
	// for UNLIMITED. Slurm keeps limits in whole minutes. Both sources
	// follow `scontrol update jobid=N TimeLimit=…` at once (lab, 22.05.8):
	// compare it with the limit the job was submitted with to see that
	// someone changed it. A job submitted without --time reads
	// Partition_Limit (0) in sacct but the partition's limit in squeue
	// (UNLIMITED in the lab). Step lines never set it.
	TimeLimit time.Duration `json:"time_limit,omitempty"`
	Comment   string        `json:"comment,omitempty"`
	Steps     []Step        `json:"steps,omitempty"` // sacct only
	// Runs is how many times the job ran or was queued to run: one, or
	// more when Slurm requeued it (sacct --duplicates shows a record per
	// run; the fields above are the latest's). Zero when sacct did not
	// report the job (squeue knows no history).
	Runs int `json:"runs,omitempty"`
	// EarlierRuns are the states the earlier runs ended in (NODE_FAIL,
	// PREEMPTED, REQUEUED, …), oldest first.
	EarlierRuns []string `json:"earlier_runs,omitempty"`
	Source      Source   `json:"source"`
}

// Step is one step line of sacct (123.batch, 123.extern, 123.0).
type Step struct {
	ID       string    `json:"id"` // "batch", "extern", "0"…
	Name     string    `json:"name"`
	State    State     `json:"state"`
	ExitCode ExitCode  `json:"exit_code"`
	Start    time.Time `json:"start,omitzero"` // zero when unknown
	End      time.Time `json:"end,omitzero"`   // zero when unknown
}

// NeverReported reports a step whose end slurmstepd never reported:
// slurmdbd closed it CANCELLED, with no exit code, when its job ended
// (lab, 22.05.8). A step that ran and ended, by its script's exit or a
// signal (a kill by the job's own user, `scancel --batch`, an output
// slurmstepd could not open), has an exit code ("0:9", "0:53").
func (s Step) NeverReported() bool {
	return s.State.Name == "CANCELLED" && s.ExitCode.Raw == ""
}

// Terminal reports whether the job has ended for good.
func (j JobInfo) Terminal() bool { return j.State.Terminal() }

// Class is shorthand for j.State.Class.
func (j JobInfo) Class() Class { return j.State.Class }

// Completed reports whether j ended COMPLETED: what afterok waits for.
func (j JobInfo) Completed() bool { return j.State.Class == Succeeded && j.State.Name == "COMPLETED" }

// HeldBy says who holds a pending job, from its Reason: "user" for
// JobHeldUser (sbatch --hold, scontrol uhold, or scontrol hold by the
// job's owner), "admin" for JobHeldAdmin (scontrol hold by root or an
// operator), "" otherwise: not held, a reason this package does not know,
// or a job that is not pending — sacct keeps the reason of a job that was
// held, released and ran (lab, 22.05.8: COMPLETED, reason JobHeldUser).
//
// Only squeue follows holds put on later. sacct's Reason is what slurmdbd
// recorded with the job's latest record (lab, 22.05.8): the JobHeldUser
// of a job submitted with --hold, yes (after reason None for its first
// seconds, with the lab busy), but a later scontrol hold left
// sacct at JobHeldUser (or BeginTime) for minutes while squeue said
// JobHeldAdmin at once; a later change to the job (scontrol update
// TimeLimit=…) carried the new reason into sacct in some trials, not in
// others. Query takes a job sacct shows from sacct, so a hold put on
// after submission is not reliably seen through it.
func (j JobInfo) HeldBy() string {
	if j.State.Class != Pending {
		return ""
	}
	switch reasonWord(j.Reason) {
	case "JobHeldUser":
		return "user"
	case "JobHeldAdmin":
		return "admin"
	}
	return ""
}

// LaunchHeld reports a pending job that Slurm requeued and held after
// its launch failed (squeue's reason "launch failed requeued held": the
// node was lost as the job started, a prolog failed). It never starts
// by itself: the hold stays until someone releases it, and a user may
// not be allowed to (sites differ).
func (j JobInfo) LaunchHeld() bool {
	return j.State.Class == Pending && reasonWord(j.Reason) == ReasonLaunchHeld
}

// ReasonLaunchHeld is the reason Slurm gives a job it held after a
// failed launch.
const ReasonLaunchHeld = "launch failed requeued held"

// Blocked reports a pending job that can never start because a dependency
// can never be satisfied (it was not submitted with --kill-on-invalid-dep).
func (j JobInfo) Blocked() bool {
	return j.State.Class == Pending && reasonWord(j.Reason) == "DependencyNeverSatisfied"
}

// Revoked reports a job that reads REVOKED: in a Slurm federation, the
// copy of a job on a cluster that did not run it (the origin's copy of a
// job that a sibling runs, or a sibling's copy of a job that another ran).
// It says nothing of the job's own state, which is its running copy's
// (Class Unknown): sacct --federation shows that copy, and a config's
// clusters: entry with members: sends every command to one member, where
// a job has no sibling copy.
func (j JobInfo) Revoked() bool { return j.State.Name == "REVOKED" }

// IsTask reports whether j is one task of a job array.
func (j JobInfo) IsTask() bool { return j.ArrayJobID != "" && j.ArrayTask >= 0 }

// unknownJob is the answer for id when neither squeue nor sacct knows it:
// a task id still says which array and task it names (RawID unknown).
func unknownJob(id string) JobInfo {
	j := JobInfo{ID: id, RawID: id, ArrayTask: -1, State: State{ByUID: -1}, Source: SourceNone}
	if array, task, ok := SplitTaskID(id); ok {
		j.RawID, j.ArrayJobID, j.ArrayTask = "", array, task
	}
	return j
}
