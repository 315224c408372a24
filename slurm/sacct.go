package slurm

import (
	"bytes"
	"errors"
	"fmt"
	"strings"
	"time"
)

// Sep separates fields in the sacct and squeue output the Client asks for:
// the ASCII unit separator, which no job name or comment holds in practice
// (a "|" in a comment would break the default delimiter).
const Sep = "\x1f"

// SacctFields is the --format list the Client passes to sacct, in order.
// ParseSacct expects exactly these columns. Comment is last: it is the only
// free-text field a user sets freely, and a stray separator in it is kept.
// User is the job's user name and TimelimitRaw its time limit in minutes
// (UNLIMITED, Partition_Limit; both empty on step lines).
var SacctFields = []string{
	"JobIDRaw", "JobID", "JobName", "State", "ExitCode", "Reason",
	"Submit", "Start", "End", "Elapsed", "NodeList", "User", "TimelimitRaw",
	"Comment",
}

const (
	saIDRaw = iota
	saID
	saName
	saState
	saExit
	saReason
	saSubmit
	saStart
	saEnd
	saElapsed
	saNodes
	saUser
	saTimeLimit
	saComment
	saNumFields
)

// ParseSacct parses `sacct --parsable2 --noheader --delimiter=Sep
// --format=SacctFields` output (times as epoch seconds or TimeLayout in
// time.Local). Step lines (123.batch, 123.extern, 123.0) are folded into
// their job; a job id seen twice (a requeued job with --duplicates) keeps
// its latest submission, and a federated job's REVOKED copies (--duplicates
// shows the copies of a job that ran on another cluster of a federation)
// never stand for it when another record does, nor count as runs. Jobs
// come back in order of first appearance.
//
// An array task (JobID "123_4") is its own JobInfo with ID "123_4" and
// RawID its JobIDRaw; a record of an array's pending tasks ("123_[5-9]")
// is listed as one JobInfo per task (at most maxListedTasks of them in
// all), except a task that has a record of its own.
//
// Malformed lines are skipped and reported in the error; the jobs parsed
// from the other lines are still returned.
func ParseSacct(out []byte) ([]JobInfo, error) {
	return parseSacct(out, nil)
}

func parseSacct(out []byte, loc *time.Location) ([]JobInfo, error) {
	set, err := parseSacctSet(out, loc)
	jobs, lerr := set.list(maxListedTasks)
	return jobs, errors.Join(err, lerr)
}

// sacctKey says which job or task a sacct line (job or step) belongs to,
// from its JobIDRaw and JobID: the task's id for an array task ("123_4"),
// the record's JobID for an array's pending tasks ("123_[5-9]", job lines
// only), else the raw job id (a plain job; a heterogeneous component,
// which JobID shows as "123+0", as before). pend is set for pending
// tasks; err for a JobID of that form that cannot be read.
func sacctKey(rawJob, jobID string, isStep bool) (key string, task bool, pend *pendingTasks, err error) {
	if a, tasks, ok, err := parseTaskRange(jobID); ok && !isStep {
		if err != nil {
			return "", false, nil, err
		}
		return jobID, false, &pendingTasks{job: JobInfo{RawID: rawJob, ArrayJobID: a, ArrayTask: -1}, shown: jobID, tasks: tasks}, nil
	}
	shown, _, _ := strings.Cut(jobID, ".")
	if _, _, ok := SplitTaskID(shown); ok {
		return shown, true, nil, nil
	}
	return rawJob, false, nil, nil
}

// parseSacctSet is ParseSacct's reading as a jobSet, which looks tasks up
// without listing an array's pending tasks one by one.
func parseSacctSet(out []byte, loc *time.Location) (*jobSet, error) {
	// A record is one job line with the step lines that follow it. With
	// --duplicates a requeued job has several records; the latest
	// submission wins.
	type record struct {
		raw     string // the job's JobIDRaw
		job     JobInfo
		haveJob bool
		steps   []Step
	}
	type group struct {
		recs []*record
		pend *pendingTasks // an array's pending tasks: no steps, no runs
	}
	var (
		order  []string
		groups = map[string]*group{}
	)
	rows, errs := splitRows("sacct", out, saNumFields)
	for _, row := range rows {
		f := row.f
		raw := strings.TrimSpace(f[saIDRaw])
		rawJob, stepID, isStep := strings.Cut(raw, ".")
		if !ValidJobID(rawJob) || strings.Contains(rawJob, "_") || (isStep && stepID == "") {
			errs = append(errs, fmt.Errorf("sacct line %d: bad job id %.40q", row.line, raw))
			continue
		}
		key, task, pend, err := sacctKey(rawJob, strings.TrimSpace(f[saID]), isStep)
		if err != nil {
			errs = append(errs, fmt.Errorf("sacct line %d: %w", row.line, err))
			continue
		}
		reason := strings.TrimSpace(f[saReason])
		st := ParseState(strings.TrimSpace(f[saState]), reason)
		ec := ParseExitCode(f[saExit])
		g := groups[key]
		if g == nil {
			g = &group{}
			groups[key] = g
			order = append(order, key)
		}
		if isStep {
			if len(g.recs) == 0 {
				g.recs = append(g.recs, &record{raw: rawJob})
			}
			r := g.recs[len(g.recs)-1]
			r.steps = append(r.steps, Step{ID: stepID, Name: f[saName], State: st, ExitCode: ec,
				Start: ParseTime(f[saStart], loc), End: ParseTime(f[saEnd], loc)})
			continue
		}
		j := JobInfo{
			ID:        rawJob,
			RawID:     rawJob,
			ArrayTask: -1,
			Name:      f[saName],
			State:     st,
			Reason:    reason,
			ExitCode:  ec,
			Submit:    ParseTime(f[saSubmit], loc),
			Start:     ParseTime(f[saStart], loc),
			End:       ParseTime(f[saEnd], loc),
			NodeList:  nodeList(f[saNodes]),
			User:      strings.TrimSpace(f[saUser]),
			Comment:   f[saComment],
			Source:    SourceSacct,
		}
		j.Elapsed, _ = ParseElapsed(f[saElapsed])
		j.TimeLimit, _ = ParseTimeLimit(f[saTimeLimit]) // malformed: 0, unknown
		if task {
			j.ID = key
			j.ArrayJobID, j.ArrayTask, _ = SplitTaskID(key)
		}
		if pend != nil {
			// Pending tasks never ran: no start, no node, no exit code.
			j.ID, j.ArrayJobID = "", pend.job.ArrayJobID
			foldSteps(&j)
			j.Runs = 1
			if g.pend == nil || laterRecord(j, g.pend.job) {
				pend.job = j
				g.pend = pend
			}
			continue
		}
		if len(g.recs) == 1 && !g.recs[0].haveJob {
			// steps came before their job line: adopt them
			g.recs[0].job, g.recs[0].haveJob = j, true
			continue
		}
		g.recs = append(g.recs, &record{raw: rawJob, job: j, haveJob: true})
	}
	set := newJobSet()
	for _, key := range order {
		g := groups[key]
		if g.pend != nil {
			set.addPending(*g.pend)
			continue
		}
		var best *record
		for _, r := range g.recs {
			if best == nil || !best.haveJob || (r.haveJob && laterRecord(r.job, best.job)) {
				best = r
			}
		}
		j := best.job
		if !best.haveJob {
			// Only step lines: build the job from its batch step.
			j = JobInfo{ID: key, RawID: best.raw, ArrayTask: -1, State: State{ByUID: -1}, Source: SourceSacct}
			if array, task, ok := SplitTaskID(key); ok {
				j.ArrayJobID, j.ArrayTask = array, task
			}
			for _, s := range best.steps {
				if s.ID == "batch" {
					j.State, j.ExitCode = s.State, s.ExitCode
				}
			}
		}
		j.Steps = best.steps
		foldSteps(&j)
		// Each job line is one run: a job Slurm requeued (a node failure,
		// a preemption, scontrol requeue) has one per run, oldest first.
		// (A job id Slurm handed out again after a reset of its counter
		// is another job: another name.)
		for _, r := range g.recs {
			if r.haveJob && r != best && r.job.Name == j.Name && !r.job.Revoked() {
				j.EarlierRuns = append(j.EarlierRuns, r.job.State.Raw)
			}
		}
		j.Runs = len(j.EarlierRuns) + 1
		set.add(j)
	}
	return set, errors.Join(errs...)
}

// laterRecord reports whether sacct record a stands for its job rather than
// b: a record that is not a REVOKED copy over one that is, else the later
// submission (the later line on a tie).
func laterRecord(a, b JobInfo) bool {
	if a.Revoked() != b.Revoked() {
		return b.Revoked()
	}
	return !a.Submit.Before(b.Submit)
}

// foldSteps refines a job from its steps:
//   - an OUT_OF_MEMORY step explains a FAILED job;
//   - a FAILED job whose own exit code says nothing (0:0 or missing) takes
//     its batch step's;
//   - a job that ended without ever running (no node, no step) has no
//     start time, whatever the record says: slurmdbd records a job
//     cancelled right after submission (--kill-on-invalid-dep) under the
//     name "allocation" with Start = Submit and reason None;
//   - such a job, CANCELLED by no user, was cancelled by slurmctld: in
//     practice because a dependency can never be satisfied;
//   - a FAILED job whose batch script never ran is a launch failure (see
//     killedBeforeScript).
func foldSteps(j *JobInfo) {
	var batch *Step
	oom := false
	for i := range j.Steps {
		s := &j.Steps[i]
		if s.ID == "batch" {
			batch = s
		}
		if s.State.Name == "OUT_OF_MEMORY" {
			oom = true
		}
	}
	if j.State.Class != Failed {
		return
	}
	if oom && j.State.Failure == FailureExitCode {
		j.State.Failure = FailureOutOfMemory
	}
	if j.State.Failure == FailureExitCode && killedBeforeScript(batch) {
		j.State.Failure = FailureLaunch
	}
	if batch != nil && (j.State.Failure == FailureExitCode || j.State.Failure == FailureOutOfMemory) &&
		(!j.ExitCode.Known || j.ExitCode.Zero()) && batch.ExitCode.Known && !batch.ExitCode.Zero() {
		j.ExitCode = batch.ExitCode
	}
	if len(j.Steps) == 0 && j.NodeList == "" {
		j.Start, j.Elapsed = time.Time{}, 0
		r := reasonWord(j.Reason)
		if j.State.Name == "CANCELLED" && j.State.ByUID < 0 && (r == "" || r == "None" || r == "Dependency" || r == "DependencyNeverSatisfied") {
			j.State.Failure = FailureDependency
		}
	}
}

// killedBeforeScript reports a batch step that Slurm ended before its
// script ran: slurmd refused to start it (slurmctld's log: "Killing
// non-startable batch JobId=N: Job credential revoked", a requeued job
// started again before the old run's credential expired), and sacct
// shows the job FAILED 1:0 and its batch step CANCELLED with no exit
// code, started and ended in the same second (lab, 22.05.8). The script
// never ran, so nothing of a payload did: it is the cluster's. A batch
// step whose script ran and was killed, or that slurmstepd could not
// set up (an output it could not open: 0:53), has an exit code, and so
// does one killed by the job's own user.
func killedBeforeScript(batch *Step) bool {
	return batch != nil && batch.NeverReported() && !batch.Start.IsZero() && batch.Start.Equal(batch.End)
}

func nodeList(s string) string {
	s = strings.TrimSpace(s)
	switch s {
	case "None assigned", "(null)", "None", "n/a", "N/A":
		return ""
	}
	return s
}

// ValidJobID accepts a job id as sbatch prints it (123), an array task's
// as Slurm prints it (123_4: SplitTaskID) or a heterogeneous component
// (123+0).
func ValidJobID(id string) bool {
	if id == "" || len(id) > 32 {
		return false
	}
	if strings.Contains(id, "_") {
		_, _, ok := SplitTaskID(id)
		return ok
	}
	a, b, ok := strings.Cut(id, "+")
	if !isDigits(a) {
		return false
	}
	return !ok || isDigits(b)
}

// row is one delimited output line of sacct or squeue.
type row struct {
	line int // 1-based, for messages
	f    []string
}

// splitRows splits tool's output into rows of exactly n Sep-delimited
// fields, skipping blank lines; a line of another width is an error naming
// its line number, and parsing goes on with the rest.
func splitRows(tool string, out []byte, n int) ([]row, []error) {
	var (
		rows []row
		errs []error
	)
	for i, line := range bytes.Split(out, []byte("\n")) {
		l := strings.TrimRight(string(line), "\r")
		if strings.TrimSpace(l) == "" {
			continue
		}
		f := strings.SplitN(l, Sep, n)
		if len(f) != n {
			errs = append(errs, fmt.Errorf("%s line %d: %d fields, want %d: %.120q", tool, i+1, len(f), n, l))
			continue
		}
		rows = append(rows, row{line: i + 1, f: f})
	}
	return rows, errs
}
