package slurm

import (
	"errors"
	"fmt"
	"strings"
	"time"
)

// SqueueFields is what the Client asks squeue for (with --format), in
// order, joined by Sep: the job's own id and, after "=", its id as squeue
// shows it (%A=%i: "123=123" for a job, "130=123_4" for an array task,
// "123=123_[5-9]" for the pending tasks an array keeps in one record,
// which squeue shows one task a line under --array, as the Client asks),
// name, long state, reason, submit time, start time, end time, time used,
// nodes, user name, time limit, comment (last: free text).
var SqueueFields = []string{"%A=%i", "%j", "%T", "%r", "%V", "%S", "%e", "%M", "%N", "%u", "%l", "%k"}

const (
	sqID = iota
	sqName
	sqState
	sqReason
	sqSubmit
	sqStart
	sqEnd
	sqElapsed
	sqNodes
	sqUser
	sqTimeLimit
	sqComment
	sqNumFields
)

// SqueueFormat is the --format argument matching SqueueFields.
func SqueueFormat() string { return strings.Join(SqueueFields, Sep) }

// ParseSqueue parses `squeue --noheader --format=SqueueFormat()` output
// (times as epoch seconds or TimeLayout in time.Local). squeue knows no
// exit code and no steps; the start time of a pending job and the end time
// of a job still running are Slurm's expectations and are dropped (zero).
//
// An array task ("130=123_4") is its own JobInfo with ID "123_4" and RawID
// "130"; the pending tasks an array keeps in one record ("123=123_[5-9]",
// squeue without --array) are listed one JobInfo per task (at most
// maxListedTasks in all). A first field without "=" (the layout before
// %i joined it) is the job's own id, as it was read then.
//
// Malformed lines are skipped and reported in the error; the jobs parsed
// from the other lines are still returned.
func ParseSqueue(out []byte) ([]JobInfo, error) {
	set, err := parseSqueueSet(out, nil)
	jobs, lerr := set.list(maxListedTasks)
	return jobs, errors.Join(err, lerr)
}

// parseSqueueSet is ParseSqueue's reading (times in loc, nil for
// time.Local) as a jobSet.
func parseSqueueSet(out []byte, loc *time.Location) (*jobSet, error) {
	set := newJobSet()
	rows, errs := splitRows("squeue", out, sqNumFields)
	for _, row := range rows {
		f := row.f
		field := strings.TrimSpace(f[sqID])
		raw, shown, hasShown := strings.Cut(field, "=")
		if !hasShown {
			shown = raw
		}
		// raw is a job's own id (%A): never a task's "123_4".
		if !ValidJobID(raw) || strings.Contains(raw, "_") || shown == "" {
			errs = append(errs, fmt.Errorf("squeue line %d: bad job id %.40q", row.line, field))
			continue
		}
		reason := strings.TrimSpace(f[sqReason])
		state := ParseState(strings.TrimSpace(f[sqState]), reason)
		if state.Failure == FailureDependency && reasonWord(reason) == "Dependency" {
			// squeue gives slurmctld's own cancellation of a job whose
			// dependency can never be met the reason
			// DependencyNeverSatisfied; a job cancelled by scancel while
			// it waited on a dependency keeps "Dependency" (lab, 22.05 and
			// 24.11, testdata/lab*/squeue_array_*: sacct then says
			// "CANCELLED by UID"). squeue prints no "by UID".
			state.Failure = FailureCancelled
		}
		j := JobInfo{
			ID:        raw,
			RawID:     raw,
			ArrayTask: -1,
			Name:      f[sqName],
			State:     state,
			Reason:    reason,
			Submit:    ParseTime(f[sqSubmit], loc),
			NodeList:  nodeList(f[sqNodes]),
			User:      nullString(strings.TrimSpace(f[sqUser])),
			Comment:   nullString(f[sqComment]),
			Source:    SourceSqueue,
		}
		if j.State.Class == Running || j.State.Terminal() {
			j.Start = ParseTime(f[sqStart], loc)
		}
		if j.State.Terminal() {
			j.End = ParseTime(f[sqEnd], loc)
		}
		j.Elapsed, _ = ParseElapsed(f[sqElapsed])
		j.TimeLimit, _ = ParseTimeLimit(f[sqTimeLimit]) // malformed: 0, unknown
		if j.State.Class == Failed && j.NodeList == "" {
			// Ended without ever running (no node): squeue shows the
			// moment it was cancelled as its start (lab, 24.11: an array
			// task cancelled for a dependency never satisfied); sacct
			// shows none (foldSteps).
			j.Start, j.Elapsed = time.Time{}, 0
		}
		if array, task, ok := SplitTaskID(shown); ok {
			j.ID, j.ArrayJobID, j.ArrayTask = shown, array, task
		} else if array, tasks, ok, err := parseTaskRange(shown); ok {
			if err != nil {
				errs = append(errs, fmt.Errorf("squeue line %d: %w", row.line, err))
				continue
			}
			j.ID, j.ArrayJobID = "", array
			set.addPending(pendingTasks{job: j, shown: shown, tasks: tasks})
			continue
		}
		// A job that is no array task keeps its own id (%A) as its ID, as
		// before %i joined the format: a heterogeneous job's component
		// too, which %i shows as "123+0".
		set.add(j)
	}
	return set, errors.Join(errs...)
}

// nullString maps squeue's "(null)" (an unset string) to "".
func nullString(s string) string {
	if s == "(null)" {
		return ""
	}
	return s
}
