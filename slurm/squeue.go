package slurm

import (
	"errors"
	"fmt"
	"strings"
	"time"
)

// SqueueFields is what the Client asks squeue for (with --format), in
// order, joined by Sep: job id (unique per array task), name, long state,
// reason, submit time, start time, end time, time used, nodes, user name,
// time limit, comment (last: free text).
var SqueueFields = []string{"%A", "%j", "%T", "%r", "%V", "%S", "%e", "%M", "%N", "%u", "%l", "%k"}

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
// Malformed lines are skipped and reported in the error; the jobs parsed
// from the other lines are still returned.
func ParseSqueue(out []byte) ([]JobInfo, error) {
	return parseSqueue(out, nil)
}

func parseSqueue(out []byte, loc *time.Location) ([]JobInfo, error) {
	var (
		jobs []JobInfo
		seen = map[string]int{}
	)
	rows, errs := splitRows("squeue", out, sqNumFields)
	for _, row := range rows {
		f := row.f
		id := strings.TrimSpace(f[sqID])
		if !validJobID(id) {
			errs = append(errs, fmt.Errorf("squeue line %d: bad job id %.40q", row.line, id))
			continue
		}
		reason := strings.TrimSpace(f[sqReason])
		j := JobInfo{
			ID:       id,
			Name:     f[sqName],
			State:    ParseState(strings.TrimSpace(f[sqState]), reason),
			Reason:   reason,
			Submit:   ParseTime(f[sqSubmit], loc),
			NodeList: nodeList(f[sqNodes]),
			User:     nullString(strings.TrimSpace(f[sqUser])),
			Comment:  nullString(f[sqComment]),
			Source:   SourceSqueue,
		}
		if j.State.Class == Running || j.State.Terminal() {
			j.Start = ParseTime(f[sqStart], loc)
		}
		if j.State.Terminal() {
			j.End = ParseTime(f[sqEnd], loc)
		}
		j.Elapsed, _ = ParseElapsed(f[sqElapsed])
		j.TimeLimit, _ = ParseTimeLimit(f[sqTimeLimit]) // malformed: 0, unknown
		if i, dup := seen[id]; dup {
			jobs[i] = j
			continue
		}
		seen[id] = len(jobs)
		jobs = append(jobs, j)
	}
	return jobs, errors.Join(errs...)
}

// nullString maps squeue's "(null)" (an unset string) to "".
func nullString(s string) string {
	if s == "(null)" {
		return ""
	}
	return s
}
