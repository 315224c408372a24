package slurm

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"
)

// PollJob is one job a Poll asks about: its id, and when it was submitted
// as the caller recorded it (zero when not known), which bounds how far
// back sacct looks for it.
type PollJob struct {
	ID        string
	Submitted time.Time
}

// PollCost is what one Poll ran: the commands, and how many job ids went
// to sacct (the accounting database's part of the cost).
type PollCost struct {
	Squeue, Sacct int
	SacctJobs     int
}

// Add adds o to c.
func (c *PollCost) Add(o PollCost) {
	c.Squeue += o.Squeue
	c.Sacct += o.Sacct
	c.SacctJobs += o.SacctJobs
}

// sacctMargin widens Poll's sacct window beyond the earliest submission it
// asks about: the caller's clock and the cluster's may differ, and the
// caller records a submission when sbatch returned.
const sacctMargin = time.Hour

// squeueListMax is the most job ids a Poll names to squeue (--jobs); for
// more, it lists the user's jobs whole and keeps those it asked about.
// squeue matches a --jobs list against every job it loaded, one id after
// another: on the lab (22.05, 10,000 jobs of the user), naming 1,000 ids
// costs the login node 0.2 s of CPU, 5,000 ids 0.8 s, listing all 10,000
// jobs 0.07 s. At or below the bound, naming keeps a small poll's answer
// small when the user has other jobs queued.
const squeueListMax = 1000

// Poll is Query for a poll that runs every few seconds over jobs believed
// to be live: its cost follows what changed, not how many jobs there are.
// It asks slurmctld first, with one squeue (from memory, the live view:
// a hold or a new reason at once) for every job, and takes a job squeue
// shows pending or running from it. The squeue is for the user's own jobs
// (--me: slurmctld packs only them, REQUEST_JOB_USER_INFO, not every job
// of the cluster for squeue to filter), naming the jobs when there are at
// most squeueListMax of them. Only the jobs squeue shows ended, or no
// longer shows (or does not show: a job of another user), or could not be
// asked about, go to sacct (with --duplicates, as Query), and with
// --starttime set to the earliest of their submissions less sacctMargin
// rather than sacct's default of the Unix epoch for --jobs; a job without
// a submission time lifts that bound. sacct's record wins for those jobs
// (exit code, steps, earlier runs) as long as sacct shows them; while
// sacct lags an end that squeue already shows, the job reads as sacct has
// it, still running, until the next poll. A job neither knows is Unknown
// (SourceNone, or SourceUnanswered when either command failed), never
// Failed.
//
// Array tasks ("123_4") are polled as jobs, at the same cost: squeue
// shows each task (--array), sacct is asked about the tasks' arrays, each
// named once. A task sacct shows only in its array's record of pending
// tasks is taken from squeue, and is Unknown when squeue answered without
// it (cancelled while pending: see Query).
//
// A job that reads REVOKED (a federated job's copy on a cluster that did
// not run it) is asked of sacct --federation, once per poll for all such
// jobs, by a Client without Cluster; it stays Unknown, never Failed,
// where that shows no other copy.
//
// Each command has its deadline (Deadlines): one stopped there is a
// failed command here, its jobs unanswered (SourceUnanswered), never
// failed or lost.
//
// A job taken from squeue has no steps, exit code or earlier runs (Runs
// 0): the caller keeps what an earlier answer said. The error is non-nil
// only when nothing could be learned (squeue and sacct both failed) or
// ctx ended. A poll runs one squeue, and at most one sacct per
// MaxIDsPerCall jobs.
func (c *Client) Poll(ctx context.Context, jobs []PollJob) (map[string]JobInfo, PollCost, error) {
	var cost PollCost
	ids := make([]string, len(jobs))
	submitted := make(map[string]time.Time, len(jobs))
	for i, j := range jobs {
		ids[i] = j.ID
		if t, ok := submitted[j.ID]; !ok || (!t.IsZero() && (j.Submitted.IsZero() || j.Submitted.Before(t))) {
			submitted[j.ID] = j.Submitted
		}
	}
	ids, err := cleanIDs(ids)
	if err != nil {
		return nil, cost, err
	}
	out := make(map[string]JobInfo, len(ids))
	for _, id := range ids {
		out[id] = unknownJob(id)
	}
	sel := []string{"--me"}
	if len(ids) <= squeueListMax {
		sel = append(sel, "--jobs="+strings.Join(ids, ","))
	}
	cost.Squeue++
	live, squeueErr := c.squeue(ctx, sel...)
	if err := ctx.Err(); err != nil {
		return out, cost, err
	}
	queued := make(map[string]JobInfo, len(ids))
	answer(live, ids, queued)
	p := &poller{c: c, submitted: submitted, queued: queued, live: live, squeueErr: squeueErr, out: out, cost: &cost}
	for chunk := range slices.Chunk(ids, MaxIDsPerCall) {
		if err := p.answer(ctx, chunk); err != nil {
			return out, cost, err
		}
	}
	return out, cost, nil
}

// poller is one Poll after its squeue: what squeue said, and the answers
// and cost so far.
type poller struct {
	c         *Client
	submitted map[string]time.Time
	queued    map[string]JobInfo // squeue's jobs among those asked about
	live      *jobSet            // all squeue showed
	squeueErr error
	out       map[string]JobInfo
	cost      *PollCost
}

// answer answers for ids, at most MaxIDsPerCall of them: squeue's job for
// those it shows live, sacct's for the rest.
func (p *poller) answer(ctx context.Context, ids []string) error {
	var ask []string
	var earliest time.Time
	bounded := true
	for _, id := range ids {
		if j, ok := p.queued[id]; ok && (j.State.Class == Pending || j.State.Class == Running) {
			p.out[id] = j
			continue
		}
		ask = append(ask, id)
		switch t := p.submitted[id]; {
		case t.IsZero():
			bounded = false
		case earliest.IsZero() || t.Before(earliest):
			earliest = t
		}
	}
	if len(ask) == 0 { // squeue answered, and every job is live
		return nil
	}
	var window []string
	if bounded && !earliest.IsZero() {
		mins := int64((time.Since(earliest)+sacctMargin+time.Minute-1)/time.Minute) + 1
		window = append(window, fmt.Sprintf("--starttime=now-%dminutes", mins))
	}
	sel := append(append([]string{"--duplicates"}, window...), "--jobs="+strings.Join(sacctJobsOf(ask), ","))
	p.cost.Sacct++
	p.cost.SacctJobs += len(ask)
	acct, sacctErr := p.c.sacct(ctx, sel...)
	if err := ctx.Err(); err != nil {
		return err
	}
	answer(acct, ask, p.out)
	// A task sacct shows only within its array's record of pending tasks:
	// slurmctld's answer is fresher (the task started or ended, and
	// slurmdbd has not heard yet); without one from a squeue that
	// answered, the task is gone: cancelled while pending, which leaves
	// no record (24.11 keeps such a task in the accounting record: lab).
	for _, id := range ask {
		if !acct.inRecord(id) || p.out[id].Source != SourceSacct {
			continue
		}
		if j, ok := p.queued[id]; ok {
			p.out[id] = j
		} else if p.squeueErr == nil {
			p.out[id] = unknownJob(id)
		}
	}
	if n := p.c.federated(ctx, window, ask, p.out); n > 0 {
		p.cost.Sacct++
		p.cost.SacctJobs += n
		if err := ctx.Err(); err != nil {
			return err
		}
	}
	for _, id := range ask {
		if p.out[id].Source != SourceNone {
			continue
		}
		if j, ok := p.queued[id]; ok {
			p.out[id] = j // ended (or a state this package does not know), and not in sacct yet
			continue
		}
		if p.squeueErr != nil || sacctErr != nil {
			j := p.out[id]
			j.Source = SourceUnanswered
			p.out[id] = j
		}
	}
	if p.squeueErr == nil && sacctErr == nil {
		withdrawn(ask, p.out, p.live, acct)
	}
	if p.squeueErr != nil && sacctErr != nil {
		return fmt.Errorf("slurm: poll: %w", errors.Join(p.squeueErr, sacctErr))
	}
	return nil
}
