package slurm

import (
	"errors"
	"fmt"
	"iter"
	"strconv"
	"strings"
)

// Job arrays. An array is one sbatch (--array=SPEC) whose job id, as
// sbatch prints it, names the array; each of its tasks has the job id
// "ARRAY_TASK" ("123_4", TaskID), which every method of the Client takes
// where it takes a job id, and which JobInfo.ID is for a task whatever
// Slurm printed. Slurm keeps an array's pending tasks in one record (the
// array's own job id, sacct JobID "123_[5-9]") until it splits a task out
// (it starts, is modified, or waits on a dependency of its own, such as
// aftercorr); a split task has its own job id (JobInfo.RawID: squeue %A,
// sacct JobIDRaw), and the task that starts last keeps the array's.

// MaxArrayIndex is the largest array task index any Slurm accepts:
// MaxArraySize "may not exceed 4000001" and an array's indices are below
// it (slurm.conf(5), 22.05 to 26.05). A cluster's own bound is its
// MaxArraySize less one (Client.Config): 1000 by default.
const MaxArrayIndex = 4000000

// TaskID is the job id of task task of the array whose job id (as sbatch
// printed it) is array: "123_4". It is "" — no job id anywhere one is
// taken — when array is not a plain job id in canonical form (digits, no
// leading zero) or task is not within 0..MaxArrayIndex.
func TaskID(array string, task int) string {
	if !canonicalNumber(array) || task < 0 || task > MaxArrayIndex {
		return ""
	}
	return array + "_" + strconv.Itoa(task)
}

// SplitTaskID splits an array task's job id ("123_4") into its array's job
// id ("123") and its task index (4). ok is false for anything else: a
// plain job id, a heterogeneous job's component ("123+0"), a range of
// tasks ("123_[4-9]"), numbers Slurm would not print ("0123_4", "123_04",
// "123_+4") or a task index above MaxArrayIndex.
func SplitTaskID(id string) (array string, task int, ok bool) {
	a, t, found := strings.Cut(id, "_")
	if !found || !canonicalNumber(a) || !canonicalNumber(t) || len(t) > len(strconv.Itoa(MaxArrayIndex)) {
		return "", 0, false
	}
	n, err := strconv.Atoi(t)
	if err != nil || n > MaxArrayIndex {
		return "", 0, false
	}
	return a, n, true
}

// canonicalNumber reports a decimal number as Slurm prints one: digits,
// no leading zero (but "0"), at most 20 of them.
func canonicalNumber(s string) bool {
	return isDigits(s) && len(s) <= 20 && (s == "0" || s[0] != '0')
}

// sacctJobsOf is the --jobs list that makes sacct show ids: each task id
// replaced by its array's id (sacct --jobs=123_4 shows a task only once
// Slurm has split it out of the array's pending record, which only
// --jobs=123 shows), duplicates dropped, order kept.
func sacctJobsOf(ids []string) []string {
	seen := make(map[string]bool, len(ids))
	out := make([]string, 0, len(ids))
	for _, id := range ids {
		if array, _, ok := SplitTaskID(id); ok {
			id = array
		}
		if !seen[id] {
			seen[id] = true
			out = append(out, id)
		}
	}
	return out
}

// taskSpan is the task indices first, first+step, … up to last.
type taskSpan struct{ first, last, step int }

// taskSet is a set of array task indices as spans, in the order written.
type taskSet []taskSpan

func (s taskSet) has(t int) bool {
	for _, sp := range s {
		if t >= sp.first && t <= sp.last && (t-sp.first)%sp.step == 0 {
			return true
		}
	}
	return false
}

// count is how many indices s names (an index written twice counts twice).
func (s taskSet) count() int {
	n := 0
	for _, sp := range s {
		n += (sp.last-sp.first)/sp.step + 1
	}
	return n
}

// all yields the indices of s in the order written.
func (s taskSet) all() iter.Seq[int] {
	return func(yield func(int) bool) {
		for _, sp := range s {
			for t := sp.first; t <= sp.last; t += sp.step {
				if !yield(t) {
					return
				}
			}
		}
	}
}

// parseTaskList reads a comma-separated list of task indices and ranges
// ("0-3", "0,2-3", "7"), and with steps also Slurm's stepped ranges
// ("1-99:2", what xlate_array_task_str prints for an evenly spaced set).
// Every index is within 0..MaxArrayIndex; a range goes upwards.
func parseTaskList(s string, steps bool) (taskSet, error) {
	if s == "" {
		return nil, errors.New("no task index")
	}
	var set taskSet
	for item := range strings.SplitSeq(s, ",") {
		rng, stepStr, stepped := strings.Cut(item, ":")
		if stepped && !steps {
			return nil, fmt.Errorf("%q: a step (:N) is not taken here", item)
		}
		lo, hi, isRange := strings.Cut(rng, "-")
		if !isRange {
			hi = lo
		}
		first, err1 := taskIndex(lo)
		last, err2 := taskIndex(hi)
		if err := errors.Join(err1, err2); err != nil {
			return nil, fmt.Errorf("%q: %w", item, err)
		}
		if first > last {
			return nil, fmt.Errorf("%q: a range must go upwards", item)
		}
		step := 1
		if stepped {
			if !isRange || !isDigits(stepStr) || len(stepStr) > 7 {
				return nil, fmt.Errorf("%q: bad step", item)
			}
			if step, _ = strconv.Atoi(stepStr); step < 1 {
				return nil, fmt.Errorf("%q: bad step", item)
			}
		}
		set = append(set, taskSpan{first, last, step})
	}
	return set, nil
}

// taskIndex reads one task index: digits, at most MaxArrayIndex.
func taskIndex(s string) (int, error) {
	if !isDigits(s) || len(s) > 7 {
		return 0, fmt.Errorf("bad task index %.12q", s)
	}
	n, _ := strconv.Atoi(s)
	if n > MaxArrayIndex {
		return 0, fmt.Errorf("task index %d above %d", n, MaxArrayIndex)
	}
	return n, nil
}

// checkArraySpec validates an --array spec as SubmitRequest.Array takes
// it: task indices and ranges separated by commas, with an optional "%N"
// (at most N tasks running at once, N ≥ 1): "0-49", "0,3,7", "0-49%5".
// Nothing else: no step (":N"), no spaces, no empty item.
func checkArraySpec(spec string) error {
	list, throttle, hasThrottle := strings.Cut(spec, "%")
	if hasThrottle && (!isDigits(throttle) || len(throttle) > 7 || strings.Trim(throttle, "0") == "") {
		return fmt.Errorf("slurm: submit: array %q: the throttle after %% must be a number of at least 1", spec)
	}
	if _, err := parseTaskList(list, false); err != nil {
		return fmt.Errorf("slurm: submit: array %q: %w", spec, err)
	}
	return nil
}

// CheckArray reports whether an --array spec (SubmitRequest.Array) fits
// cfg's cluster as slurmctld checks it: every task index below
// MaxArraySize (0 disables arrays), and no more tasks than
// SchedulerParameters' max_array_tasks where set (a lower bound on the
// count alone). An array that does not fit is refused by sbatch ("Invalid
// job array specification": SubmitRefused), after the one RPC it costs.
func (cfg Config) CheckArray(spec string) error {
	if err := checkArraySpec(spec); err != nil {
		return err
	}
	list, _, _ := strings.Cut(spec, "%")
	tasks, _ := parseTaskList(list, false)
	if cfg.MaxArraySize <= 0 {
		return fmt.Errorf("slurm: array %q: the cluster takes no arrays (MaxArraySize=%d)", spec, cfg.MaxArraySize)
	}
	top := 0
	for _, sp := range tasks {
		top = max(top, sp.last)
	}
	if top >= cfg.MaxArraySize {
		return fmt.Errorf("slurm: array %q: task index %d, the cluster's MaxArraySize is %d (indices 0 to %d)", spec, top, cfg.MaxArraySize, cfg.MaxArraySize-1)
	}
	seen := map[int]bool{}
	for t := range tasks.all() {
		seen[t] = true
	}
	if limit, ok := maxArrayTasks(cfg.Values["SchedulerParameters"]); ok && len(seen) > limit {
		return fmt.Errorf("slurm: array %q: %d tasks, the cluster's max_array_tasks is %d", spec, len(seen), limit)
	}
	return nil
}

// maxArrayTasks reads max_array_tasks=N from SchedulerParameters.
func maxArrayTasks(params string) (int, bool) {
	for p := range strings.SplitSeq(params, ",") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(p), "max_array_tasks="); ok {
			if n, err := strconv.Atoi(v); err == nil && n >= 0 {
				return n, true
			}
		}
	}
	return 0, false
}

// parseTaskRange reads the job id Slurm prints for the pending tasks an
// array still keeps in one record: "123_[5-9]", "123_[0,2-3]",
// "123_[1-99:2]", with a throttle "123_[0-9%2]". ok is false when s is
// not of that form; err is set when it is but cannot be read (sacct and
// squeue cut the list at 64 characters with "..." unless
// SLURM_BITSTR_LEN=0, which the Client sets).
func parseTaskRange(s string) (array string, tasks taskSet, ok bool, err error) {
	a, rest, found := strings.Cut(s, "_[")
	if !found || !strings.HasSuffix(rest, "]") {
		return "", nil, false, nil
	}
	if !canonicalNumber(a) {
		return "", nil, true, fmt.Errorf("bad array job id in %.40q", s)
	}
	list := strings.TrimSuffix(rest, "]")
	list, _, _ = strings.Cut(list, "%")
	if strings.Contains(list, "...") {
		return "", nil, true, fmt.Errorf("array %s's pending tasks cut short: %.80q", a, s)
	}
	tasks, err = parseTaskList(list, true)
	if err != nil {
		return "", nil, true, fmt.Errorf("array %s's pending tasks %.80q: %w", a, s, err)
	}
	return a, tasks, true, nil
}

// maxListedTasks bounds how many tasks ParseSqueue and ParseSacct list
// for the pending records of arrays (each task its own JobInfo): a short
// line can name millions. The Client looks tasks up without listing them,
// and Find lists them without this bound.
const maxListedTasks = 1 << 16

// pendingTasks is a record of an array's pending tasks that Slurm keeps
// together ("123_[5-9]"): one state for every task it holds.
type pendingTasks struct {
	job   JobInfo // ID empty; RawID, ArrayJobID set; ArrayTask -1
	shown string  // as printed, "123_[5-9]"
	tasks taskSet
}

// task is the record's answer for task t.
func (p *pendingTasks) task(t int) JobInfo {
	j := p.job
	j.ID = TaskID(p.job.ArrayJobID, t)
	j.ArrayTask = t
	return j
}

// jobSet is what one squeue or sacct showed: each job and each task under
// its own id (JobInfo.ID), and the records of pending tasks an array
// keeps together. Lookups answer a task from either.
type jobSet struct {
	jobs    []JobInfo
	pending []pendingTasks
	// order lists the entries as first shown: >= 0 a job, < 0 the
	// pending record -i-1.
	order   []int
	byID    map[string]int
	byArray map[string][]int // pending records by array job id
	byRaw   map[string][]int // entries (as in order) by RawID
	arrays  map[string]bool  // the arrays any entry is a task of
}

func newJobSet() *jobSet {
	return &jobSet{byID: map[string]int{}, byArray: map[string][]int{}, byRaw: map[string][]int{}, arrays: map[string]bool{}}
}

// knowsArray reports whether s shows any task of array, or its record of
// pending tasks (a nil s shows none).
func (s *jobSet) knowsArray(array string) bool {
	return s != nil && s.arrays[array]
}

// withdrawn marks Withdrawn each task of ids still unknown (SourceNone)
// whose array one of sets shows: both commands answered (the caller
// checks), neither shows the task, one shows its array.
func withdrawn(ids []string, out map[string]JobInfo, sets ...*jobSet) {
	for _, id := range ids {
		j := out[id]
		a, _, ok := SplitTaskID(id)
		if !ok || j.Source != SourceNone {
			continue
		}
		for _, s := range sets {
			if s.knowsArray(a) {
				j.Source = SourceWithdrawn
				out[id] = j
				break
			}
		}
	}
}

// add adds j, replacing an entry of the same ID in place (squeue: the
// later line).
func (s *jobSet) add(j JobInfo) {
	if i, ok := s.byID[j.ID]; ok {
		s.jobs[i] = j
		return
	}
	s.byID[j.ID] = len(s.jobs)
	if j.ArrayJobID != "" {
		s.arrays[j.ArrayJobID] = true
	}
	s.byRaw[j.RawID] = append(s.byRaw[j.RawID], len(s.jobs))
	s.order = append(s.order, len(s.jobs))
	s.jobs = append(s.jobs, j)
}

func (s *jobSet) addPending(p pendingTasks) {
	i := len(s.pending)
	s.pending = append(s.pending, p)
	s.byArray[p.job.ArrayJobID] = append(s.byArray[p.job.ArrayJobID], i)
	s.arrays[p.job.ArrayJobID] = true
	s.byRaw[p.job.RawID] = append(s.byRaw[p.job.RawID], -i-1)
	s.order = append(s.order, -i-1)
}

func (s *jobSet) entry(e int) JobInfo {
	if e >= 0 {
		return s.jobs[e]
	}
	return s.pending[-e-1].job
}

// lookup is the answer for id:
//   - the job or task of that ID (a task Slurm has split out);
//   - for a task id, else, the latest record of its array's pending
//     tasks that holds it;
//   - for a plain id, else, the job Slurm keeps under that raw id (sacct
//     JobIDRaw, squeue %A): a task's own id, or an array's (the record of
//     its pending tasks, later the task that started last), with ID the
//     id asked for; ArrayTask -1 when that record is more than one task.
//
// A nil s (a command that failed) shows nothing.
func (s *jobSet) lookup(id string) (JobInfo, bool) {
	if s == nil {
		return JobInfo{}, false
	}
	if i, ok := s.byID[id]; ok {
		return s.jobs[i], true
	}
	if array, task, ok := SplitTaskID(id); ok {
		if p := s.pendingOf(array, task); p != nil {
			return p.task(task), true
		}
		return JobInfo{}, false
	}
	es := s.byRaw[id]
	if len(es) == 0 {
		return JobInfo{}, false
	}
	j := s.entry(es[0])
	for _, e := range es[1:] {
		if o := s.entry(e); laterRecord(o, j) {
			j = o
		}
	}
	if len(es) > 1 {
		j.ArrayTask = -1
	}
	j.ID = id
	return j, true
}

// inRecord reports whether s answers task id only from its array's record
// of pending tasks, not from a record of the task's own.
func (s *jobSet) inRecord(id string) bool {
	if s == nil {
		return false
	}
	if _, own := s.byID[id]; own {
		return false
	}
	array, task, ok := SplitTaskID(id)
	return ok && s.pendingOf(array, task) != nil
}

// pendingOf is the latest record of array's pending tasks that holds task,
// or nil.
func (s *jobSet) pendingOf(array string, task int) *pendingTasks {
	var best *pendingTasks
	for _, i := range s.byArray[array] {
		p := &s.pending[i]
		if p.tasks.has(task) && (best == nil || laterRecord(p.job, best.job)) {
			best = p
		}
	}
	return best
}

// list is every job and task of s, each once, in the order first shown:
// a pending record's tasks in its place, but a task that has a record of
// its own only there. limit > 0 bounds the tasks listed from pending
// records; past it, the rest of them are left out and reported. A nil s
// (a command that failed) lists nothing.
func (s *jobSet) list(limit int) ([]JobInfo, error) {
	if s == nil {
		return nil, nil
	}
	out := make([]JobInfo, 0, len(s.jobs))
	listed := 0
	done := map[string]bool{} // tasks listed from pending records
	var errs []error
	for _, e := range s.order {
		if e >= 0 {
			out = append(out, s.jobs[e])
			continue
		}
		p := &s.pending[-e-1]
		if limit > 0 && listed+p.tasks.count() > limit {
			errs = append(errs, fmt.Errorf("%s: %d pending tasks, more than %d to list", p.shown, p.tasks.count(), limit-listed))
			continue
		}
		for t := range p.tasks.all() {
			id := TaskID(p.job.ArrayJobID, t)
			if _, own := s.byID[id]; own || done[id] || s.pendingOf(p.job.ArrayJobID, t) != p {
				continue
			}
			done[id] = true
			out = append(out, p.task(t))
			listed++
		}
	}
	return out, errors.Join(errs...)
}
