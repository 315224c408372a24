// Package slurm drives Slurm through its command-line contract — sbatch
// --parsable, sacct --parsable2, squeue, scancel — over a remote.Runner
// (the login node itself, or one reached over SSH). It is built to watch
// thousands of jobs at once: Poll asks squeue about any number of live
// jobs in one process, and sacct (bounded by --starttime) only about the
// jobs that left squeue; Query, for single look-ups, asks sacct first and
// squeue only for the jobs sacct does not show (yet).
//
// Every time is asked for as epoch seconds (SLURM_TIME_FORMAT=%s, through
// env(1)), so the login node's time zone does not matter.
package slurm

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nemorl/nemorl-slurm/remote"
)

// MaxIDsPerCall bounds the job ids one sacct or squeue process is given, to
// keep the command line far below the kernel's 128 KiB limit on one
// argument (over SSH the whole command is one argument of sh -c). Query
// splits larger lists into several calls.
const MaxIDsPerCall = 5000

// DefaultHistory is how far back FindByComment looks in sacct.
const DefaultHistory = 7 * 24 * time.Hour

// Client runs Slurm commands through a remote.Runner.
type Client struct {
	runner remote.Runner
	// History is how far back FindByComment searches the accounting
	// database (sacct --starttime=now-N). Zero means DefaultHistory.
	History time.Duration
	// Cluster, when set, is the Slurm cluster sacct reports on
	// (--clusters): a member of a federation, whose other commands the
	// runner sends there with SLURM_CLUSTERS (remote.WithEnv), which
	// sacct does not read.
	Cluster string
	// Deadlines bound each kind of command (zero fields: DefaultDeadlines).
	Deadlines Deadlines
	// Slow, when set, is told of every command that took SlowAfter or
	// more (zero: DefaultSlowAfter), and of every one stopped at its
	// deadline: what a throttled controller looks like from here (under
	// rl_enable the clients sleep and retry silently and exit 0).
	Slow      func(SlowCommand)
	SlowAfter time.Duration

	mu           sync.Mutex
	sacctVersion *Version // SacctVersion's answer, once asked
}

// sacctArgv is the sacct command line before its options.
func (c *Client) sacctArgv(prefix ...string) []string {
	argv := append(prefix, "sacct")
	if c.Cluster != "" {
		argv = append(argv, "--clusters="+c.Cluster)
	}
	return argv
}

// New returns a Client that runs commands through r.
func New(r remote.Runner) *Client { return &Client{runner: r} }

// timeEnv prefixes a Slurm command so that it prints times as epoch
// seconds, and an array's pending tasks in full (SLURM_BITSTR_LEN=0:
// sacct and squeue otherwise cut "123_[0,2,4,…]" at 64 characters).
var timeEnv = []string{"env", "SLURM_TIME_FORMAT=%s", "SLURM_BITSTR_LEN=0"}

// Submit runs sbatch once (never retried: Command.Idempotent is false) and
// returns the new job's id. A failed sbatch gives an error naming the
// command and its trimmed stderr; one stopped at its deadline a
// *DeadlineError (matching remote.ErrOutcomeUnknown: look for the job by
// its comment tag before submitting again).
func (c *Client) Submit(ctx context.Context, req SubmitRequest) (SubmitResult, error) {
	argv, err := SbatchArgs(req)
	if err != nil {
		return SubmitResult{}, err
	}
	cmd := remote.Command{Argv: argv}
	if req.Script != nil {
		cmd.Stdin = strings.NewReader(string(req.Script))
	}
	res, err := c.run(ctx, KindSbatch, cmd)
	if err != nil {
		return SubmitResult{}, commandError("submit", cmd, res, err)
	}
	r, err := ParseSbatch(res.Stdout, res.Stderr)
	if err != nil {
		return r, fmt.Errorf("%w: %s", err, cmd.Brief())
	}
	return r, nil
}

// Query returns what Slurm says about each of ids, keyed by id; every id
// is in the map. It runs one sacct for all of them and, only for the ids
// sacct does not show (just submitted, held or waiting on a dependency, or
// all of them when sacct fails because slurmdbd is down), one squeue. An id
// that neither knows comes back with Class Unknown and Source SourceNone —
// never Failed.
//
// An id may be an array task's ("123_4"), answered under that id with
// ArrayJobID and ArrayTask set: sacct is asked about the array (--jobs=123
// shows the tasks still pending in the array's record, which
// --jobs=123_4 does not), squeue about the task when sacct does not show
// it or shows it only in that record (the squeue is then slurmctld's
// fresher word: the task may have started, and a task it does not hold
// is not pending). An array's own id (what sbatch printed for it) is
// answered, as before tasks were understood, with the record Slurm keeps
// under that id: the tasks still pending together, later the task that
// started last (ArrayTask says which, -1 for several): ask about each
// task by its id (TaskID) for its own answer. A task cancelled while
// still pending in the array's record leaves no record at all (lab,
// 22.05 and 24.11; 24.11's sacct goes on listing it in the record): it is
// Unknown, as an id Slurm never issued; so is, on 24.11, a task split out
// of its record and cancelled before it ran (a dependency never met,
// scancel) once slurmctld has forgotten it (MinJobAge): slurmdbd never
// recorded it (docs/slurm-versions.md).
//
// The error is non-nil only when nothing could be learned: sacct and
// squeue both failed, or the context ended. More than MaxIDsPerCall ids
// take one sacct (and at most one squeue) per MaxIDsPerCall.
func (c *Client) Query(ctx context.Context, ids []string) (map[string]JobInfo, error) {
	ids, err := cleanIDs(ids)
	if err != nil {
		return nil, err
	}
	out := make(map[string]JobInfo, len(ids))
	for chunk := range slices.Chunk(ids, MaxIDsPerCall) {
		if err := c.query(ctx, chunk, out); err != nil {
			return out, err
		}
	}
	return out, nil
}

// Queue reports the jobs as squeue, slurmctld's live view, shows them: a
// pending job's current reason (a hold that sacct does not yet report).
// Jobs squeue does not know are absent. Task ids are answered as Query
// answers them.
func (c *Client) Queue(ctx context.Context, ids []string) (map[string]JobInfo, error) {
	ids, err := cleanIDs(ids)
	if err != nil {
		return nil, err
	}
	out := make(map[string]JobInfo, len(ids))
	for chunk := range slices.Chunk(ids, MaxIDsPerCall) {
		live, err := c.squeue(ctx, "--jobs="+strings.Join(chunk, ","))
		if err != nil {
			return out, err
		}
		for _, id := range chunk {
			if j, ok := live.lookup(id); ok {
				out[id] = j
			}
		}
	}
	return out, nil
}

func (c *Client) query(ctx context.Context, ids []string, out map[string]JobInfo) error {
	for _, id := range ids {
		out[id] = unknownJob(id)
	}
	// --duplicates: a requeued job's every run, so that its runs are
	// counted (the latest is the job's state either way).
	acct, sacctErr := c.sacct(ctx, "--duplicates", "--jobs="+strings.Join(sacctJobsOf(ids), ","))
	if err := ctx.Err(); err != nil {
		return err
	}
	answer(acct, ids, out)
	if c.federated(ctx, nil, ids, out) > 0 {
		if err := ctx.Err(); err != nil {
			return err
		}
	}
	// squeue for the jobs sacct does not show, and for the tasks it shows
	// only within their array's record of pending tasks: slurmdbd may
	// not have heard yet that a task started, or was cancelled while
	// pending (24.11 keeps such a task in the record: lab), which leaves
	// no record of its own.
	var missing []string
	for _, id := range ids {
		if out[id].Source == SourceNone || acct.inRecord(id) {
			missing = append(missing, id)
		}
	}
	if len(missing) == 0 {
		return nil
	}
	live, squeueErr := c.squeue(ctx, "--jobs="+strings.Join(missing, ","))
	if err := ctx.Err(); err != nil {
		return err
	}
	answer(live, missing, out)
	if squeueErr == nil {
		dropGone(acct, live, missing, out)
	}
	if sacctErr == nil && squeueErr == nil {
		withdrawn(missing, out, acct, live)
	}
	if sacctErr != nil && squeueErr != nil {
		return fmt.Errorf("slurm: query: %w", errors.Join(sacctErr, squeueErr))
	}
	if sacctErr != nil || squeueErr != nil {
		for _, id := range missing {
			if j := out[id]; j.Source == SourceNone {
				j.Source = SourceUnanswered
				out[id] = j
			}
		}
	}
	return nil
}

// answer sets out[id] to set's answer for each of ids that set shows (a
// nil set, from a failed command, shows none).
func answer(set *jobSet, ids []string, out map[string]JobInfo) {
	if set == nil {
		return
	}
	for _, id := range ids {
		if j, ok := set.lookup(id); ok {
			out[id] = j
		}
	}
}

// dropGone makes Unknown each of ids that acct answered only from its
// array's record of pending tasks while live, slurmctld's answer, does
// not show it: a task slurmctld does not hold is not pending, whatever
// the accounting record says (24.11 keeps a task cancelled while pending
// in it: lab); it was cancelled while pending, which leaves no record.
func dropGone(acct, live *jobSet, ids []string, out map[string]JobInfo) {
	for _, id := range ids {
		if _, shown := live.lookup(id); !shown && acct.inRecord(id) && out[id].Source == SourceSacct {
			out[id] = unknownJob(id)
		}
	}
}

// sacct runs one sacct with the given selection. Malformed lines make an
// error, but the jobs parsed from the rest are returned.
func (c *Client) sacct(ctx context.Context, selection ...string) (*jobSet, error) {
	argv := append(c.sacctArgv(slices.Clone(timeEnv)...), "--parsable2", "--noheader",
		"--delimiter="+Sep, "--format="+strings.Join(SacctFields, ","))
	argv = append(argv, selection...)
	cmd := remote.Command{Argv: argv, Idempotent: true}
	res, err := c.run(ctx, KindSacct, cmd)
	if err != nil {
		return nil, commandError("sacct", cmd, res, err)
	}
	jobs, err := parseSacctSet(res.Stdout, nil)
	if err != nil {
		err = fmt.Errorf("slurm: sacct output: %w", err)
	}
	return jobs, err
}

// federated looks up, with one sacct --federation (--duplicates, within
// window), the jobs among ids whose answer in out reads REVOKED: a
// federated job's copy on a cluster that did not run it, which is what
// the login's own cluster shows of a job a sibling runs. A record of
// another copy (the one that runs or ran) replaces it; a job sacct shows
// no other copy of stays as it was (Unknown, never Failed), and so does
// every job when that sacct fails. Only a Client without Cluster asks:
// with members: every command goes to one member, where a job has no
// sibling copy. It returns how many jobs it asked about.
func (c *Client) federated(ctx context.Context, window, ids []string, out map[string]JobInfo) int {
	var revoked []string
	for _, id := range ids {
		if out[id].Revoked() {
			revoked = append(revoked, id)
		}
	}
	if c.Cluster != "" || len(revoked) == 0 {
		return 0
	}
	sel := append(append([]string{"--federation", "--duplicates"}, window...), "--jobs="+strings.Join(sacctJobsOf(revoked), ","))
	fed, _ := c.sacct(ctx, sel...)
	if fed != nil {
		for _, id := range revoked {
			if j, ok := fed.lookup(id); ok && !j.Revoked() {
				out[id] = j
			}
		}
	}
	return len(revoked)
}

// squeue runs one squeue over all job states with the given selection,
// one array task a line (--array). An id list squeue rejects outright
// ("Invalid job id specified": none of the jobs is known to slurmctld) is
// an empty answer, not an error.
func (c *Client) squeue(ctx context.Context, selection ...string) (*jobSet, error) {
	argv := append(slices.Clone(timeEnv), "squeue", "--noheader", "--states=all", "--array",
		"--format="+SqueueFormat())
	argv = append(argv, selection...)
	cmd := remote.Command{Argv: argv, Idempotent: true}
	res, err := c.run(ctx, KindSqueue, cmd)
	if err != nil {
		if res != nil && strings.Contains(string(res.Stderr), "Invalid job id specified") {
			return newJobSet(), nil
		}
		return nil, commandError("squeue", cmd, res, err)
	}
	jobs, err := parseSqueueSet(res.Stdout, nil)
	if err != nil {
		err = fmt.Errorf("slurm: squeue output: %w", err)
	}
	return jobs, err
}

// Cancel cancels ids with one scancel. Jobs that have already ended, or
// that Slurm has forgotten, are not an error.
func (c *Client) Cancel(ctx context.Context, ids []string) error {
	ids, err := cleanIDs(ids)
	if err != nil || len(ids) == 0 {
		return err
	}
	for chunk := range slices.Chunk(ids, MaxIDsPerCall) {
		cmd := remote.Command{Argv: append([]string{"scancel"}, chunk...), Idempotent: true}
		res, err := c.run(ctx, KindScancel, cmd)
		if err != nil && !(res != nil && harmlessScancel(res.Stderr)) {
			return commandError("cancel", cmd, res, err)
		}
	}
	return nil
}

// harmlessScancel reports stderr made only of complaints about jobs that
// have already ended or are unknown.
func harmlessScancel(stderr []byte) bool {
	ls := lines(stderr)
	if len(ls) == 0 {
		return false
	}
	for _, l := range ls {
		if !strings.Contains(l, "already completing or completed") &&
			!strings.Contains(l, "Invalid job id specified") {
			return false
		}
	}
	return true
}

// Release releases held jobs (submitted with Hold) with one scontrol.
func (c *Client) Release(ctx context.Context, ids []string) error {
	ids, err := cleanIDs(ids)
	if err != nil || len(ids) == 0 {
		return err
	}
	for chunk := range slices.Chunk(ids, MaxIDsPerCall) {
		cmd := remote.Command{Argv: []string{"scontrol", "release", strings.Join(chunk, ",")}, Idempotent: true}
		if res, err := c.run(ctx, KindScontrol, cmd); err != nil {
			return commandError("release", cmd, res, err)
		}
	}
	return nil
}

// FindByComment returns the calling user's jobs whose comment is exactly
// tag, sorted by job id: jobs slurmctld still holds (one squeue --me over
// all states) and jobs in the accounting database submitted within History
// (one sacct). Finished jobs are found through sacct only when slurm.conf
// has AccountingStoreFlags=job_comment. Both commands must succeed: after
// a crash, a missed job could be submitted twice.
func (c *Client) FindByComment(ctx context.Context, tag string) ([]JobInfo, error) {
	if tag == "" || strings.ContainsAny(tag, "\x00\n\r"+Sep) {
		return nil, fmt.Errorf("slurm: find: bad comment tag %q", tag)
	}
	return c.Find(ctx, func(j JobInfo) bool { return j.Comment == tag })
}

// Find returns the calling user's jobs for which match is true, from one
// sacct (jobs submitted within History) and one squeue --me (jobs
// slurmctld still holds), sorted by job id; a job both know is taken from
// squeue only while sacct has not caught up with its end. sacct shows a
// job's comment only once the job has ended (22.05 stores it with the job
// completion; 24.11 too, for a pending array's record); match on the job
// name too to find a job in any state from sacct alone. Both commands
// must succeed.
//
// Each task of an array is its own JobInfo (ID "A_T"), all with the
// array's name and comment: a task still pending in its array's record is
// listed from it, so that a caller finds its own task by the array's tag
// and the task's index. A task slurmctld does not hold that sacct lists
// only in that record is left out (cancelled while pending: see Query).
func (c *Client) Find(ctx context.Context, match func(JobInfo) bool) ([]JobInfo, error) {
	return c.FindWithin(ctx, 0, match)
}

// FindWithin is Find over the jobs sacct shows in the last within (zero:
// History): jobs that existed at some time in that window, whenever they
// were submitted. A short window keeps sacct from reading a week of the
// user's jobs for each look-up. sacct is asked for the jobs' own lines
// only (--allocations), so a found job's state is its job line's, not
// refined by its steps (an OUT_OF_MEMORY step, a launch failure): Query
// and Poll say how a job ended. A job that never became eligible (cancelled
// while pending, a dependency never satisfied) is not in sacct's time
// window on 22.05 or 24.11 (sacct -j shows it, Eligible Unknown): it is
// found only while slurmctld holds it (MinJobAge after its end). Such a
// job never ran; a caller that misses it submits again at worst a job
// whose first copy never started.
func (c *Client) FindWithin(ctx context.Context, within time.Duration, match func(JobInfo) bool) ([]JobInfo, error) {
	hist := c.History
	if hist <= 0 {
		hist = DefaultHistory
	}
	if within > 0 && within < hist {
		hist = within
	}
	start := fmt.Sprintf("--starttime=now-%dminutes", int64((hist+time.Minute-1)/time.Minute))
	// --allocations: the jobs' own lines, none of their steps. A look-up
	// needs a job's id, name, comment, user and submit time, all on its
	// line; the steps would cost slurmdbd a query of their own per job
	// (22.05, 75,000 jobs in a week: 16 s with the steps, 1.7 s without;
	// a CI run on 2 loaded cores went past sacct's 60 s deadline).
	acctSet, err := c.sacct(ctx, "--allocations", start)
	if err != nil {
		return nil, fmt.Errorf("slurm: find: %w", err)
	}
	liveSet, err := c.squeue(ctx, "--me")
	if err != nil {
		return nil, fmt.Errorf("slurm: find: %w", err)
	}
	// Every task of an array is its own job here (pending tasks listed
	// from their array's record), each with the array's name and comment.
	acct, _ := acctSet.list(0) // no bound, no error
	live, _ := liveSet.list(0)
	// A task sacct lists only within its array's record of pending tasks
	// and that slurmctld does not hold is not pending: it was cancelled
	// while pending, which leaves no record (24.11 keeps such a task in the
	// accounting record: lab).
	acct = slices.DeleteFunc(acct, func(j JobInfo) bool {
		_, held := liveSet.lookup(j.ID)
		return !held && acctSet.inRecord(j.ID)
	})
	byID := map[string]JobInfo{}
	for _, j := range acct {
		if match(j) {
			byID[j.ID] = j
		}
	}
	for _, j := range live {
		if !match(j) {
			continue
		}
		// squeue is fresher while sacct lags a job's end.
		if a, ok := byID[j.ID]; !ok || (!a.Terminal() && j.State.Class >= a.State.Class) {
			byID[j.ID] = j
		}
	}
	found := make([]JobInfo, 0, len(byID))
	for _, j := range byID {
		found = append(found, j)
	}
	slices.SortFunc(found, func(a, b JobInfo) int { return compareIDs(a.ID, b.ID) })
	return found, nil
}

// compareIDs orders job ids numerically: by job id, an array's tasks
// after the array's own id and by task index ("7" < "7_2" < "7_10" <
// "8"); ids of another form (heterogeneous components, "7+1") as
// strings, as before.
func compareIDs(a, b string) int {
	ka, oka := idKey(a)
	kb, okb := idKey(b)
	if !oka || !okb {
		return strings.Compare(a, b)
	}
	if c := cmp.Compare(ka.job, kb.job); c != 0 {
		return c
	}
	return cmp.Compare(ka.task, kb.task)
}

// idKey is a plain job id (task -1) or a task id as numbers.
func idKey(id string) (k struct {
	job  uint64
	task int
}, ok bool) {
	job, task := id, -1
	if array, t, isTask := SplitTaskID(id); isTask {
		job, task = array, t
	}
	n, err := strconv.ParseUint(job, 10, 64)
	if err != nil {
		return k, false
	}
	k.job, k.task = n, task
	return k, true
}

// cleanIDs checks ids and drops duplicates, keeping the order.
func cleanIDs(ids []string) ([]string, error) {
	seen := make(map[string]bool, len(ids))
	out := make([]string, 0, len(ids))
	for _, id := range ids {
		if !ValidJobID(id) {
			return nil, fmt.Errorf("slurm: bad job id %q", id)
		}
		if !seen[id] {
			seen[id] = true
			out = append(out, id)
		}
	}
	return out, nil
}

// commandError makes sure the error of a failed command names the command
// and carries its trimmed stderr.
func commandError(op string, cmd remote.Command, res *remote.Result, err error) error {
	var ce *remote.CommandError
	if errors.As(err, &ce) && ce.Stderr == "" && res != nil && len(res.Stderr) > 0 {
		c := *ce
		c.Stderr = remote.TrimStderr(res.Stderr)
		if c.Command == "" {
			c.Command = cmd.String()
		}
		return fmt.Errorf("slurm: %s: %w", op, &c)
	}
	if ce != nil || strings.Contains(err.Error(), cmd.Argv[0]) {
		return fmt.Errorf("slurm: %s: %w", op, err)
	}
	return fmt.Errorf("slurm: %s: %s: %w", op, cmd.Brief(), err)
}
