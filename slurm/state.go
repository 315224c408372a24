package slurm

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Class is the coarse state of a job: what a caller acts on.
type Class int

const (
	// Unknown: neither sacct nor squeue knows the job (yet), its state
	// string is not one this package knows, or it reads REVOKED (a
	// federated job's copy on a cluster that did not run it: see
	// JobInfo.Revoked). Unknown is never a failure: sacct lags
	// submissions and job ends by seconds.
	Unknown Class = iota
	// Pending: waiting to run (queued, held, dependency, requeued,
	// expediting).
	Pending
	// Running: allocated (running, completing, suspended, configuring…).
	Running
	// Succeeded: COMPLETED (exit code 0).
	Succeeded
	// Failed: ended in any other way; State.Failure says how.
	Failed
)

var classNames = [...]string{"unknown", "pending", "running", "succeeded", "failed"}

func (c Class) String() string {
	if c < 0 || int(c) >= len(classNames) {
		return "class(" + strconv.Itoa(int(c)) + ")"
	}
	return classNames[c]
}

// MarshalText renders the class as its lower-case name (for JSON).
func (c Class) MarshalText() ([]byte, error) { return []byte(c.String()), nil }

// UnmarshalText reads a class name written by MarshalText.
func (c *Class) UnmarshalText(b []byte) error {
	for i, n := range classNames {
		if string(b) == n {
			*c = Class(i)
			return nil
		}
	}
	*c = Unknown
	return nil
}

// Terminal reports whether the class is final.
func (c Class) Terminal() bool { return c == Succeeded || c == Failed }

// Failure says how a Failed job failed. It is empty for every other class.
type Failure string

const (
	NoFailure          Failure = ""
	FailureExitCode    Failure = "exit_code"                  // FAILED: non-zero exit or signal of the batch script
	FailureCancelled   Failure = "cancelled"                  // CANCELLED (scancel, by a user or an admin)
	FailureDependency  Failure = "dependency_never_satisfied" // cancelled by slurmctld before it ever ran, a dependency never met (--kill-on-invalid-dep)
	FailureTimeout     Failure = "timeout"                    // TIMEOUT: hit its time limit
	FailureOutOfMemory Failure = "out_of_memory"              // OUT_OF_MEMORY (on the job or one of its steps)
	FailureNodeFailure Failure = "node_failure"               // NODE_FAIL
	FailurePreempted   Failure = "preempted"                  // PREEMPTED
	FailureBootFailure Failure = "boot_failure"               // BOOT_FAIL
	FailureDeadline    Failure = "deadline"                   // DEADLINE: could not run before its --deadline
	FailureLaunch      Failure = "launch_failure"             // FAILED with reason SystemFailure, BadConstraints, InvalidAccount/QOS, PartitionDown, or killed by Slurm before its batch script ran
	// FailureRevoked is no longer given: REVOKED is a federated job's
	// copy on a cluster that did not run it, not the job's end (ParseState
	// classes it Unknown). Kept for outcomes recorded with it.
	FailureRevoked Failure = "revoked"
)

// State is a job state as Slurm printed it, with its classification.
type State struct {
	// Raw is the state exactly as printed: "CANCELLED by 1000", "RUNNING".
	Raw string `json:"raw"`
	// Name is the base state, upper case, long form: "CANCELLED".
	Name string `json:"name"`
	// ByUID is the uid in "CANCELLED by UID", else -1: who cancelled the
	// job. Only sacct prints it; squeue never does. What Slurm 22.05
	// records (lab, 22.05.8):
	//   - scancel of a pending job: always "CANCELLED by UID" — the owner's
	//     uid when the owner cancelled it, 0 for root;
	//   - scancel of a running job: "CANCELLED by UID" likewise in every
	//     trial of ours (owner and root, 0 to 8 s after the start, a job
	//     that ignores TERM too), with job exit code 0:0 and the batch
	//     step CANCELLED 0:15. But NOT reliably: an earlier capture
	//     (testdata/lab/sacct_final.txt, job 342, a running sleep
	//     scancelled by root) reads plain "CANCELLED" with job exit code
	//     0:15 — the record the batch step's end wrote, without the uid;
	//   - slurmctld's own cancellation (--kill-on-invalid-dep, a
	//     dependency never satisfied): no uid at all, plain "CANCELLED",
	//     reason None for a few seconds, then Dependency.
	// So -1 on a CANCELLED job proves nothing about who cancelled it.
	ByUID int `json:"by_uid"`
	// Class is the coarse state.
	Class Class `json:"class"`
	// Failure is set for Failed only.
	Failure Failure `json:"failure,omitempty"`
}

// Terminal reports whether the job has ended for good.
func (s State) Terminal() bool { return s.Class.Terminal() }

// compact (squeue %t) → long state names.
var compactStates = map[string]string{
	"PD": "PENDING", "R": "RUNNING", "CG": "COMPLETING", "CD": "COMPLETED",
	"CA": "CANCELLED", "F": "FAILED", "TO": "TIMEOUT", "NF": "NODE_FAIL",
	"PR": "PREEMPTED", "BF": "BOOT_FAIL", "DL": "DEADLINE", "OOM": "OUT_OF_MEMORY",
	"S": "SUSPENDED", "ST": "STOPPED", "RQ": "REQUEUED", "RH": "REQUEUE_HOLD",
	"RF": "REQUEUE_FED", "RS": "RESIZING", "RV": "REVOKED", "SE": "SPECIAL_EXIT",
	"SI": "SIGNALING", "SO": "STAGE_OUT", "RD": "RESV_DEL_HOLD", "CF": "CONFIGURING",
}

var stateClass = map[string]Class{
	// EXPEDITING (25.11: --requeue=expedite with SlurmctldParameters=
	// enable_expedited_requeue) is a flag job_state_string prints before
	// REQUEUED, for a job on its way back to the queue.
	"PENDING": Pending, "REQUEUED": Pending, "REQUEUE_HOLD": Pending, "EXPEDITING": Pending,
	"REQUEUE_FED": Pending, "RESV_DEL_HOLD": Pending, "SPECIAL_EXIT": Pending,
	"RUNNING": Running, "COMPLETING": Running, "CONFIGURING": Running,
	"SUSPENDED": Running, "STOPPED": Running, "SIGNALING": Running,
	"STAGE_OUT": Running, "RESIZING": Running, "POWER_UP_NODE": Running,
	"UPDATE_DB": Running,
	"COMPLETED": Succeeded,
	"FAILED":    Failed, "CANCELLED": Failed, "TIMEOUT": Failed, "NODE_FAIL": Failed,
	"PREEMPTED": Failed, "BOOT_FAIL": Failed, "DEADLINE": Failed,
	"OUT_OF_MEMORY": Failed,
	// REVOKED is not a state of the job: a federated job has a copy on
	// each sibling cluster, and all but the one that runs it read REVOKED
	// (sacct shows them under --duplicates; squeue on the origin cluster
	// shows its own). Its state is the running copy's: Unknown here.
	"REVOKED": Unknown,
}

var stateFailure = map[string]Failure{
	"FAILED": FailureExitCode, "CANCELLED": FailureCancelled, "TIMEOUT": FailureTimeout,
	"NODE_FAIL": FailureNodeFailure, "PREEMPTED": FailurePreempted,
	"BOOT_FAIL": FailureBootFailure, "DEADLINE": FailureDeadline,
	"OUT_OF_MEMORY": FailureOutOfMemory,
}

// ParseState classifies a state string as sacct (State) or squeue (%T or
// %t) prints it. reason is Slurm's reason field (sacct Reason, squeue %r),
// used to tell a dependency cancellation from a user's scancel and a launch
// failure from a script's exit code; it may be empty. An unrecognised state
// is Unknown, never Failed.
func ParseState(raw, reason string) State {
	s := State{Raw: raw, ByUID: -1}
	f := strings.Fields(raw)
	if len(f) == 0 {
		return s
	}
	name := strings.ToUpper(strings.TrimRight(f[0], "+"))
	if long, ok := compactStates[name]; ok {
		name = long
	}
	s.Name = name
	if len(f) == 3 && strings.EqualFold(f[1], "by") {
		if uid, err := strconv.Atoi(f[2]); err == nil && uid >= 0 {
			s.ByUID = uid
		}
	}
	cl, ok := stateClass[name]
	if !ok {
		return s // Unknown
	}
	s.Class = cl
	if cl != Failed {
		return s
	}
	s.Failure = stateFailure[name]
	r := reasonWord(reason)
	switch name {
	case "CANCELLED":
		// --kill-on-invalid-dep: sacct shows "CANCELLED" (no "by UID") with
		// reason "Dependency" (None for the first seconds: foldSteps);
		// squeue shows reason DependencyNeverSatisfied. A scancel shows
		// "CANCELLED by UID" in sacct for a pending job, usually but not
		// always for a running one (reason None): see State.ByUID.
		if s.ByUID < 0 && (r == "DependencyNeverSatisfied" || r == "Dependency") {
			s.Failure = FailureDependency
		}
	case "FAILED":
		switch r {
		// Not "JobLaunchFailure": slurmctld (squeue) gives that reason to a
		// batch script killed by a signal too (lab capture, 22.05).
		case "SystemFailure", ReasonLaunchHeld,
			"BadConstraints", "InvalidAccount", "InvalidQOS", "PartitionDown":
			s.Failure = FailureLaunch
		case "NodeDown":
			s.Failure = FailureNodeFailure
		case "OutOfMemory":
			s.Failure = FailureOutOfMemory
		}
	}
	return s
}

// reasonWord returns the leading word of a reason such as
// "RaisedSignal:9(Killed)" or "(DependencyNeverSatisfied)".
func reasonWord(r string) string {
	r = strings.TrimSpace(r)
	r = strings.TrimPrefix(r, "(")
	r = strings.TrimSuffix(r, ")")
	if r == ReasonLaunchHeld {
		return r
	}
	if i := strings.IndexAny(r, ":( ,"); i >= 0 {
		r = r[:i]
	}
	return r
}

// ExitCode is Slurm's "code:signal" pair: the batch script's exit status
// and the signal that killed it. Slurm 22.05 (as before 25.11) folds exit
// statuses of 128 and more: a script that ran `exit 137` shows 9:0, not
// 137:0 (lab capture), so Code 9 may mean 9 or 137. A script killed by
// SIGKILL shows 0:9, by SIGTERM 0:15.
type ExitCode struct {
	Raw    string `json:"raw"`    // as printed, "" when not reported
	Known  bool   `json:"known"`  // Raw parsed as code:signal
	Code   int    `json:"code"`   // exit status
	Signal int    `json:"signal"` // terminating signal, 0 for none
}

// String returns the raw form, or "" when unknown.
func (e ExitCode) String() string { return e.Raw }

// Zero reports an exit code known to be 0:0.
func (e ExitCode) Zero() bool { return e.Known && e.Code == 0 && e.Signal == 0 }

// ParseExitCode parses "code:signal" (sacct, squeue exit_code). Anything
// else is kept raw with Known false.
func ParseExitCode(s string) ExitCode {
	s = strings.TrimSpace(s)
	e := ExitCode{Raw: s}
	a, b, ok := strings.Cut(s, ":")
	if !ok {
		return e
	}
	code, err1 := strconv.Atoi(a)
	sig, err2 := strconv.Atoi(b)
	if err1 != nil || err2 != nil || code < 0 || sig < 0 || code > 255 || sig > 255 {
		return e
	}
	e.Known, e.Code, e.Signal = true, code, sig
	return e
}

// ParseElapsed parses a Slurm duration: [days-][hours:]minutes:seconds with
// an optional fraction, or plain seconds. "INVALID", "UNLIMITED",
// "NOT_SET", "N/A" and anything malformed give 0, false.
func ParseElapsed(s string) (time.Duration, bool) {
	s = strings.TrimSpace(s)
	if s == "" {
		return 0, false
	}
	var days int64
	if d, rest, ok := strings.Cut(s, "-"); ok {
		n, err := strconv.ParseInt(d, 10, 64)
		if err != nil || n < 0 || n > 1e6 {
			return 0, false
		}
		days, s = n, rest
	}
	var frac time.Duration
	if whole, f, ok := strings.Cut(s, "."); ok {
		if f == "" || len(f) > 9 {
			return 0, false
		}
		n, err := strconv.ParseUint(f, 10, 64)
		if err != nil {
			return 0, false
		}
		for i := len(f); i < 9; i++ {
			n *= 10
		}
		frac, s = time.Duration(n), whole
	}
	parts := strings.Split(s, ":")
	if len(parts) > 3 {
		return 0, false
	}
	var secs int64
	for _, p := range parts {
		if p == "" || len(p) > 6 {
			return 0, false
		}
		n, err := strconv.ParseInt(p, 10, 64)
		if err != nil || n < 0 {
			return 0, false
		}
		secs = secs*60 + n
	}
	total := days*86400 + secs
	if total > 1<<33 { // ~272 years: nonsense, and near time.Duration's range
		return 0, false
	}
	return time.Duration(total)*time.Second + frac, true
}

// maxTimeLimit bounds what ParseTimeLimit accepts: 100 years, far above
// any real limit, far below time.Duration's range (Slurm's own bound,
// 2^32-2 minutes, is beyond it).
const maxTimeLimit = 100 * 365 * 24 * time.Hour

// ParseTimeLimit parses a job's time limit as Slurm prints it:
//   - squeue %l and sacct Timelimit: [days-]hours:minutes:seconds,
//     minutes:seconds ("1-00:00:00", "1:00:00", "30:00");
//   - sacct TimelimitRaw: whole minutes ("60");
//   - the other forms Slurm reads for --time: days-hours,
//     days-hours:minutes;
//   - "UNLIMITED" (or "INFINITE", any case): Unlimited;
//   - "NOT_SET", "INVALID", "Partition_Limit" (sacct, for a job submitted
//     without --time: the partition's limit applies, which sacct does not
//     say; squeue prints that limit instead), "N/A" and "": 0, no error.
//
// Anything else is an error, with 0. A finite limit is never negative
// (nor above 100 years).
func ParseTimeLimit(s string) (time.Duration, error) {
	s = strings.TrimSpace(s)
	switch strings.ToUpper(s) {
	case "", "NOT_SET", "INVALID", "PARTITION_LIMIT", "N/A":
		return 0, nil
	case "UNLIMITED", "INFINITE":
		return Unlimited, nil
	}
	bad := func() (time.Duration, error) {
		return 0, fmt.Errorf("slurm: bad time limit %.40q", s)
	}
	num := func(p string) (int64, bool) {
		if !isDigits(p) || len(p) > 10 {
			return 0, false
		}
		n, err := strconv.ParseInt(p, 10, 64)
		return n, err == nil
	}
	var secs int64
	days, rest, hasDays := strings.Cut(s, "-")
	parts := strings.Split(rest, ":")
	if !hasDays {
		parts = strings.Split(s, ":")
	}
	if len(parts) > 3 {
		return bad()
	}
	ns := make([]int64, len(parts))
	for i, p := range parts {
		n, ok := num(p)
		if !ok {
			return bad()
		}
		ns[i] = n
	}
	if hasDays {
		d, ok := num(days)
		if !ok {
			return bad()
		}
		// days-hours[:minutes[:seconds]]
		secs = d * 86400
		for i, unit := range []int64{3600, 60, 1}[:len(ns)] {
			secs += ns[i] * unit
		}
	} else {
		// minutes, minutes:seconds, hours:minutes:seconds
		switch len(ns) {
		case 1:
			secs = ns[0] * 60
		case 2:
			secs = ns[0]*60 + ns[1]
		case 3:
			secs = ns[0]*3600 + ns[1]*60 + ns[2]
		}
	}
	// Each number has at most 10 digits, so secs cannot overflow first.
	if secs < 0 || time.Duration(secs) > maxTimeLimit/time.Second {
		return bad()
	}
	return time.Duration(secs) * time.Second, nil
}

// TimeLayout is Slurm's default time format (SLURM_TIME_FORMAT=standard),
// printed in the local time zone of the host running the command.
const TimeLayout = "2006-01-02T15:04:05"

// ParseTime parses a time as sacct or squeue prints it: seconds since the
// epoch (SLURM_TIME_FORMAT=%s, what Client asks for) or TimeLayout in loc
// (nil means time.Local). "Unknown", "None", "N/A", "" and anything
// malformed give the zero time.
func ParseTime(s string, loc *time.Location) time.Time {
	s = strings.TrimSpace(s)
	if s == "" || s == "0" {
		return time.Time{}
	}
	if isDigits(s) {
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil || n <= 0 || n > 1<<40 {
			return time.Time{}
		}
		return time.Unix(n, 0)
	}
	if loc == nil {
		loc = time.Local
	}
	t, err := time.ParseInLocation(TimeLayout, s, loc)
	if err != nil {
		return time.Time{}
	}
	return t
}

func isDigits(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}
