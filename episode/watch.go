package episode

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/nemorl/nemorl-slurm/ledger"
	"github.com/nemorl/nemorl-slurm/remote"
	"github.com/nemorl/nemorl-slurm/rules"
	"github.com/nemorl/nemorl-slurm/slurm"
	"github.com/nemorl/nemorl-slurm/stages"
)

// ErrConnectionLost is matched by Watch's error when the cluster could not
// be queried MaxPollFailures times in a row.
var ErrConnectionLost = remote.ErrConnectionLost

// Row is one episode's line in the live table.
// (The CLI renders rows as a table or, with --json, through its own type.)
type Row struct {
	Episode string
	// Stage is the episode's current stage (RowNoStage before its first
	// submission).
	Stage stages.Stage
	JobID string
	// Cluster is the clusters: entry the episode runs on ("": the config's
	// one cluster:).
	Cluster string
	// State is Slurm's state of the stage's job (RowPending until Slurm
	// reports it: a job just submitted waits), or the engine's own phase
	// before the stage's job has an id (RowStaging, RowStaged,
	// RowSubmitting).
	State RowState
	// Reason is why a PENDING job waits (Slurm's reason: Dependency,
	// Resources, Priority, …); "" otherwise.
	Reason string
	// Elapsed is how long the job has run (zero while pending); for a
	// finished episode, from the outcome's record of the job.
	Elapsed time.Duration
	// Attempt is how many times the stage has run or been queued to run,
	// this job's runs included (retries, requeues): 1 normally.
	Attempt int
	// Outcome is set once the episode is final.
	Outcome *rules.Outcome
}

// RowNoStage is a row's Stage before the episode's first submission, as
// tables and JSON show it (no stage of its own).
const RowNoStage stages.Stage = "-"

// RowState is a row's state: one of the engine's own phases, before
// Slurm knows the stage's job, or the Slurm state of that job as Slurm
// prints it (SlurmRowState). Rendered, it is the same text either way
// (STAGING, SUBMITTING, RUNNING, CANCELLED by 1000, …).
type RowState string

// The engine's own phases of a row.
const (
	RowStaging    RowState = "STAGING"    // the episode's tree is being staged
	RowStaged     RowState = "STAGED"     // staged, its first job not yet submitted
	RowSubmitting RowState = "SUBMITTING" // a stage's submission is on record, its job id not yet
	// RowPending: submitted, not yet in sacct or squeue (they lag): it
	// waits, as Slurm's PENDING reads.
	RowPending RowState = "PENDING"
)

// SlurmRowState is the row state of a job in Slurm's state s (its text as
// sacct or squeue printed it).
func SlurmRowState(s slurm.State) RowState { return RowState(s.Raw) }

// summaryRowState is the row state of a job as an outcome recorded it.
func summaryRowState(j rules.JobSummary) RowState { return RowState(j.State) }

// String is the state's text, as tables, logs and JSON show it.
func (s RowState) String() string { return string(s) }

// WatchOptions tune Watch.
type WatchOptions struct {
	// Act lets Watch submit, collect and finalize the episodes it can
	// lock; without it, Watch only observes.
	Act bool
	// Observe is called after every poll with one row per episode.
	Observe func([]Row)
	// PollMin and PollMax bound the interval between polls; it doubles
	// from PollMin to PollMax while nothing changes. Zero: the config's.
	PollMin, PollMax time.Duration
	// MaxPollFailures is how many polls in a row may fail (the cluster
	// unreachable beyond the transport's own retries) before Watch gives
	// up with ErrConnectionLost. Zero means 5.
	MaxPollFailures int
	// Once makes Watch poll one time and return.
	Once bool
}

type watchState struct {
	entries map[string]*ledger.Entry
	order   []string
	locks   map[string]*ledger.Lock
	since   map[string]time.Time // first time a wait began, by key
	// runs are what sacct last said of a live job's runs (a requeued
	// job's earlier ones): a poll takes a live job from squeue, which
	// knows no history.
	runs map[string]slurm.JobInfo
	cost slurm.PollCost // what the polls ran, summed
}

// keepRuns gives the jobs taken from squeue the runs sacct last reported
// for them, and remembers sacct's for the next poll.
func (st *watchState) keepRuns(infos map[string]slurm.JobInfo) {
	if st.runs == nil {
		st.runs = map[string]slurm.JobInfo{}
	}
	for id, j := range infos {
		switch {
		case j.Source == slurm.SourceSacct && j.Runs > 1:
			st.runs[id] = slurm.JobInfo{Runs: j.Runs, EarlierRuns: j.EarlierRuns}
		case j.Source == slurm.SourceSqueue && j.Runs == 0:
			if r, ok := st.runs[id]; ok {
				j.Runs, j.EarlierRuns = r.Runs, r.EarlierRuns
				infos[id] = j
			}
		}
	}
}

// waitsFor are episode ep's wait clocks in st, at the clock now, as
// rules.Facts.Waited gives them; mu guards st.since (advanceAll advances
// episodes concurrently).
func (st *watchState) waitsFor(ep string, now func() time.Time, mu *sync.Mutex) waits {
	return waits{st: st, ep: ep, now: now, mu: mu}
}

// waits are one episode's wait clocks: how long each wait Decide asked
// for has lasted, counted from the first poll that asked.
type waits struct {
	st  *watchState
	ep  string
	now func() time.Time
	mu  *sync.Mutex
}

func (w waits) prefix() string { return w.ep + "/" }

// durations are the waits under way.
func (w waits) durations() map[string]time.Duration {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := map[string]time.Duration{}
	now := w.now()
	for k, t := range w.st.since {
		if key, ok := strings.CutPrefix(k, w.prefix()); ok {
			out[key] = now.Sub(t)
		}
	}
	return out
}

// keep starts the clocks of the keys not yet under way and stops every
// other of the episode's.
func (w waits) keep(keys []string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	want := map[string]bool{}
	for _, k := range keys {
		want[w.prefix()+k] = true
		if _, ok := w.st.since[w.prefix()+k]; !ok {
			w.st.since[w.prefix()+k] = w.now()
		}
	}
	for k := range w.st.since {
		if strings.HasPrefix(k, w.prefix()) && !want[k] {
			delete(w.st.since, k)
		}
	}
}

// Watch polls the episodes (one slurm.Client.Poll for all their jobs per
// poll: one squeue, and sacct for the jobs that left squeue) until
// every one is final, ctx ends, or the cluster stays unreachable. It
// returns the entries as last seen. With opt.Act it advances the episodes
// it can lock: submits train and eval once the author's patch is verified,
// resolves submissions interrupted by a crash, and collects, verifies and
// records each outcome.
func (d *Driver) Watch(ctx context.Context, episodes []string, opt WatchOptions) (map[string]*ledger.Entry, error) {
	st := &watchState{entries: map[string]*ledger.Entry{}, locks: map[string]*ledger.Lock{}, since: map[string]time.Time{}}
	defer func() {
		for _, l := range st.locks {
			l.Unlock()
		}
	}()
	for _, ep := range episodes {
		e, err := d.Ledger.Load(ep)
		if err != nil {
			return nil, err
		}
		if _, dup := st.entries[ep]; !dup {
			st.order = append(st.order, ep)
		}
		st.entries[ep] = e
	}
	maxFail := opt.MaxPollFailures
	if maxFail <= 0 {
		maxFail = 5
	}
	failures := 0
	var last []Row
	err := d.pollLoop(ctx, opt.PollMin, opt.PollMax, nil, func(ctx context.Context) (pollStep, error) {
		rows, err := d.poll(ctx, st, opt.Act)
		if ctx.Err() != nil {
			return pollStep{done: true}, ctx.Err()
		}
		busy := false
		switch {
		case err != nil && slurm.IsControllerBusy(err):
			// A throttled or busy controller is asked again, more
			// slowly; it says nothing about the connection or the jobs.
			busy = true
			d.logf("poll: the controller is busy; backing off to %v: %v", opt.PollMax, err)
		case err != nil:
			failures++
			d.logf("poll %d/%d failed: %v", failures, maxFail, err)
			if failures >= maxFail {
				return pollStep{done: true}, fmt.Errorf("%w: %d polls in a row failed; the jobs keep running, resume re-attaches: %w", ErrConnectionLost, failures, err)
			}
		default:
			failures = 0
			if opt.Observe != nil {
				opt.Observe(rows)
			}
		}
		done := true
		for _, e := range st.entries {
			done = done && e.Final()
		}
		changed := err == nil && !sameRows(rows, last)
		last = rows
		return pollStep{changed: changed, done: done || opt.Once, busy: busy}, nil
	})
	return st.entries, err
}

// pollStep is what one poll tells the loop.
type pollStep struct {
	changed bool // something moved: poll again soon
	done    bool // stop
	busy    bool // the controller said it is busy or throttling: back off to pollMax
}

// pollLoop is the one poll loop of Watch and Engine.Run: it calls poll,
// then waits an interval that starts at pollMin (zero: the config's) and
// doubles up to pollMax while poll reports no change (at once to pollMax
// when the controller said it is busy), or until woken (a nil wake never
// wakes), and goes on until poll says it is done, returns an error, or
// ctx ends. Every wait is lengthened by a random 0-20 %, so that many
// watchers of one controller do not poll in step.
func (d *Driver) pollLoop(ctx context.Context, pollMin, pollMax time.Duration, wake <-chan struct{}, poll func(context.Context) (pollStep, error)) error {
	if pollMin <= 0 {
		pollMin = d.Config.Episodes.PollMin.Duration
	}
	if pollMax < pollMin {
		pollMax = max(d.Config.Episodes.PollMax.Duration, pollMin)
	}
	interval := pollMin
	for {
		step, err := poll(ctx)
		if err != nil || step.done {
			return err
		}
		interval = nextInterval(interval, step, pollMin, pollMax)
		t := time.NewTimer(jitter(interval))
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-wake:
			t.Stop()
		case <-t.C:
		}
	}
}

// nextInterval is the wait after a poll: pollMax when the controller was
// busy, pollMin after a change, else twice the last, up to pollMax.
func nextInterval(last time.Duration, step pollStep, pollMin, pollMax time.Duration) time.Duration {
	switch {
	case step.busy:
		return pollMax
	case step.changed:
		return pollMin
	}
	return min(last*2, pollMax)
}

// jitter lengthens d by up to 20 %: never shorter, so that poll_max stays
// the slowest a quiet controller is asked.
func jitter(d time.Duration) time.Duration {
	if d <= 0 {
		return d
	}
	return d + time.Duration(rand.Float64()*0.2*float64(d))
}

func sameRows(a, b []Row) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i].Episode != b[i].Episode || a[i].Stage != b[i].Stage || a[i].JobID != b[i].JobID || a[i].State != b[i].State {
			return false
		}
	}
	return true
}

// poll runs one round: claim what can be claimed, one Query for every job
// of every unfinished episode, advance the claimed episodes, and build the
// rows.
func (d *Driver) poll(ctx context.Context, st *watchState, act bool) ([]Row, error) {
	var jobs []slurm.PollJob
	for _, ep := range st.order {
		e := st.entries[ep]
		if e.Final() {
			continue
		}
		if st.locks[ep] == nil {
			if act {
				lock, ok, err := d.Ledger.TryLock(ep)
				if err != nil {
					return nil, err
				}
				if ok {
					st.locks[ep] = lock
				}
			}
			// Another process may have moved it on: read it again.
			fresh, err := d.Ledger.Load(ep)
			if err != nil {
				return nil, err
			}
			st.entries[ep], e = fresh, fresh
			if e.Final() {
				continue
			}
		}
		for _, s := range stages.All {
			if id := e.JobID(s); id != "" && e.Ended[s].ID != id {
				sub := e.Jobs[s]
				at := sub.Submitted
				if at.IsZero() || (!sub.Intent.IsZero() && sub.Intent.Before(at)) {
					at = sub.Intent // adopted after a crash: when it was to be submitted
				}
				jobs = append(jobs, slurm.PollJob{ID: id, Submitted: at})
			}
		}
	}
	infos := map[string]slurm.JobInfo{}
	if len(jobs) > 0 {
		var err error
		var cost slurm.PollCost
		infos, cost, err = d.Slurm.Poll(ctx, jobs)
		st.cost.Add(cost)
		if err != nil {
			return nil, err
		}
		st.keepRuns(infos)
	}
	// The stages collected already, as the ledger keeps them.
	for _, ep := range st.order {
		e := st.entries[ep]
		for s, js := range e.Ended {
			if id := e.JobID(s); id != "" && js.ID == id {
				infos[id] = js.Info()
			}
		}
	}
	if act {
		// A cancel asked for by another process (nemorl-slurm cancel) while
		// this one owns the episode: honour it before anything is
		// submitted, and scancel whatever was submitted meanwhile.
		for ep, lock := range st.locks {
			e := st.entries[ep]
			if lock == nil || e.Final() || e.CancelRequested != "" {
				continue
			}
			if r := d.Ledger.CancelRequest(ep); r != "" {
				if _, err := d.Cancel(ctx, e, r, lock); err != nil {
					return nil, err
				}
			}
		}
		d.advanceAll(ctx, st, infos)
	}
	rows := make([]Row, 0, len(st.order))
	for _, ep := range st.order {
		rows = append(rows, rowOf(st.entries[ep], infos))
	}
	return rows, nil
}

// advanceAll advances every claimed, unfinished episode, at most
// episodes.concurrency at once. With job arrays (cluster.job_arrays), the
// first train submissions this cycle's decisions ask for are one array,
// and the evals that follow them one array chained to it task for task
// (stage_array.go).
func (d *Driver) advanceAll(ctx context.Context, st *watchState, infos map[string]slurm.JobInfo) {
	var mu sync.Mutex // guards st.since
	var all []*ledger.Entry
	for _, ep := range st.order {
		if e := st.entries[ep]; !e.Final() && st.locks[ep] != nil {
			all = append(all, e)
		}
	}
	var train *stageBatch
	if d.Config.Cluster.Arrays() {
		train = &stageBatch{stage: stages.Train}
	}
	d.advanceEach(ctx, st, infos, all, train, &mu)
	if train == nil || len(train.items) == 0 {
		return
	}
	sb := d.parts().submitter
	name, job, alone := sb.submitStageArray(ctx, train, "")
	d.advanceEach(ctx, st, infos, alone, nil, &mu)
	if name == "" {
		return
	}
	// Only the episodes whose train is a task of that array: those sent
	// on alone were advanced above.
	eval := &stageBatch{stage: stages.Eval, of: name}
	d.advanceEach(ctx, st, infos, train.inArray(name), eval, &mu)
	if len(eval.items) == 0 {
		return
	}
	_, _, alone = sb.submitStageArray(ctx, eval, job)
	d.advanceEach(ctx, st, infos, alone, nil, &mu)
}

// advanceEach advances es, at most episodes.concurrency at once; b, when
// not nil, gathers the first submissions of its stage (advance).
func (d *Driver) advanceEach(ctx context.Context, st *watchState, infos map[string]slurm.JobInfo, es []*ledger.Entry, b *stageBatch, mu *sync.Mutex) {
	n := max(d.Config.Episodes.Concurrency, 1)
	sem := make(chan struct{}, n)
	var wg sync.WaitGroup
	for _, e := range es {
		if e.Final() {
			continue
		}
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			if err := d.advance(ctx, e, infos, st.waitsFor(e.Episode, d.now, mu), b); err != nil && ctx.Err() == nil {
				d.logf("%s: %v (will retry)", e.Episode, err)
			}
		}()
	}
	wg.Wait()
}

// advance takes one episode as far as the jobs' states allow: it gathers
// the facts rules.Decide asks for and does what it says (submit the next
// stage, record the author's verified patch, end the episode), until
// Decide has nothing more to say before the next poll; w times the waits
// Decide asks for (a job unknown, a requeue, times unknown). b, when not
// nil, takes the first submission of its stage: the episode stops there
// until the batch is submitted (stage_array.go).
func (d *Driver) advance(ctx context.Context, e *ledger.Entry, infos map[string]slurm.JobInfo, w waits, b *stageBatch) error {
	if e.Final() {
		return nil
	}
	f := d.parts().collector.facts(e, infos, w.durations())
	var impostors []string
	for range 32 {
		dec, err := d.parts().collector.decide(ctx, e, f)
		if err != nil {
			return err
		}
		w.keep(dec.Waits)
		// What the decision records (the author's verified record,
		// eval's files checked) goes into the ledger with its verdict
		// when it has one, else on its own, before its next step.
		var rec change
		if a := dec.AuthorVerified; a != nil && e.Author == nil {
			rec.author, rec.authorJob = a, f.Jobs[stages.Author]
		}
		if dec.EvalOutputChecked && !e.EvalOutputChecked {
			rec.evalOutputChecked = true
		}
		if v := dec.Verdict; v != nil {
			w.keep(nil) // a retry's attempt starts its waits afresh
			o := d.parts().collector.outcome(e, infos, v)
			if v.Retryable {
				if retried, err := d.retry(ctx, e, o, infos, rec); retried || err != nil {
					return err
				}
			}
			// The episode ends here, any impostors with it.
			return d.finish(ctx, e, o, infos, rec, impostors...)
		}
		if !rec.empty() && dec.Next != rules.SubmitStage {
			if err := d.parts().entries.apply(e, rec); err != nil {
				return err
			}
			f.Author, f.EvalOutputChecked = e.Author, e.EvalOutputChecked
			rec = change{}
		}
		switch dec.Next {
		case rules.Restage:
			if err := d.parts().stager.restage(ctx, e); err != nil {
				return err
			}
			f.Staged = e.Staged
		case rules.SubmitStage:
			stage, after, met := dec.Stage, "", false
			if i := slices.Index(stages.All, stage); i > 0 {
				prev := stages.All[i-1]
				// f.Jobs holds what Slurm said of e's current job of
				// each stage (none: no job, not completed).
				after, met = e.JobID(prev), f.Jobs[prev].Completed()
			}
			if b.take(e, stage, rec, after) {
				return nil
			}
			err := d.parts().submitter.submit(ctx, e, stage, after, met, rec)
			f.Author, f.EvalOutputChecked = e.Author, e.EvalOutputChecked
			var imp *ImpostorError
			if errors.As(err, &imp) {
				f.Submit[stage] = rules.Submit{Impostor: imp.Error()}
				impostors = imp.IDs
				continue
			}
			if why, refused := slurm.SubmitRefused(err); refused {
				f.Submit[stage] = rules.Submit{Refused: why}
				continue
			}
			if err != nil {
				return err
			}
			// Submitted: Slurm reports it at the next poll.
			id := e.JobID(stage)
			j, ok := infos[id]
			if !ok {
				j = slurm.JobInfo{ID: id}
			}
			f.Jobs[stage] = j
		default:
			return nil
		}
	}
	return fmt.Errorf("episode %s: the rules did not settle", e.Episode)
}

// finish records the outcome in the ledger, then removes the episode's
// secrets.env if the author job never consumed it (a cancelled or refused
// episode must not leave the key in the shared workdir).
//
// An episode that ends takes its jobs that still run or wait with it (an
// eval left pending, a train whose episode was judged lost; infos are the
// jobs' states o was made from), and extra (impostor jobs found under its
// name): on record first, in the same save as the outcome, so their
// CANCELLED is never read as the policy's. with is what the same decision
// records besides: one save holds both.
func (d *Driver) finish(ctx context.Context, e *ledger.Entry, o *rules.Outcome, infos map[string]slurm.JobInfo, with change, extra ...string) error {
	live := append(liveJobs(e, infos), extra...)
	with.cancels, with.outcome = append(with.cancels, live...), o
	if err := d.parts().entries.apply(e, with); err != nil {
		return err
	}
	if len(live) > 0 {
		if err := d.Slurm.Cancel(ctx, live); err != nil {
			d.logf("%s: ended as %s; cancelling its jobs %s failed: %v", e.Episode, o.Outcome, strings.Join(live, ", "), err)
		} else {
			d.logf("%s: ended as %s; cancelled its jobs still running or waiting: %s", e.Episode, o.Outcome, strings.Join(live, ", "))
		}
	}
	if o.Jobs[stages.Author].State != "COMPLETED" {
		// A completed author job's script deleted it already.
		d.parts().stager.removeSecrets(ctx, e)
	}
	// The outcome itself is reported once, by the caller (watch's report,
	// serve's answer), not logged here too.
	return nil
}

// rowOf shows the episode's current stage: the first submitted stage whose
// job has not completed, else the last one.
func rowOf(e *ledger.Entry, infos map[string]slurm.JobInfo) Row {
	r := Row{Episode: e.Episode, Cluster: e.Cluster, Stage: RowNoStage, State: RowStaging, Outcome: e.Outcome}
	if e.Staged {
		r.State = RowStaged
	}
	for _, s := range stages.All {
		sub := e.Jobs[s]
		if sub == nil {
			break
		}
		r.Stage, r.JobID, r.Elapsed, r.Reason = s, sub.JobID, 0, ""
		r.Attempt = max(e.Attempts(s, infos), e.AttemptNumber(s))
		if sub.JobID == "" {
			r.State = RowSubmitting
			break
		}
		j, ok := infos[sub.JobID]
		switch {
		case ok && j.State.Raw != "":
			r.State, r.Elapsed = SlurmRowState(j.State), j.Elapsed
			if j.State.Class == slurm.Pending {
				r.Elapsed = 0
				if j.Reason != "" && j.Reason != "None" {
					r.Reason = j.Reason
				}
			}
		case e.Outcome != nil && e.Outcome.Jobs[s].State != "":
			js := e.Outcome.Jobs[s]
			r.State, r.Elapsed = summaryRowState(js), js.Info().Elapsed
		default:
			// Submitted, not yet in sacct or squeue (they lag): it waits.
			r.State = RowPending
		}
		if r.State != "COMPLETED" {
			break
		}
	}
	return r
}

// Inspect returns the episode's outcome when it is final, polling the
// cluster once (and advancing the episode, when no other process holds it)
// if it is not. While the episode runs, it returns ErrNotFinished and the
// episode's current row.
func (d *Driver) Inspect(ctx context.Context, ep string) (*ledger.Entry, Row, error) {
	var row Row
	entries, err := d.Watch(ctx, []string{ep}, WatchOptions{Act: true, Once: true, MaxPollFailures: 1,
		Observe: func(r []Row) { row = r[0] }})
	if err != nil {
		return nil, row, err
	}
	if e := entries[ep]; !e.Final() {
		return e, row, ErrNotFinished
	}
	return entries[ep], row, nil
}

// ErrNotFinished is returned by Result for an episode still running.
var ErrNotFinished = errors.New("episode not finished")

// liveJobs are the episode's jobs that the last poll's states (infos, the
// outcome's source) do not show ended: running, pending, or not seen.
func liveJobs(e *ledger.Entry, infos map[string]slurm.JobInfo) []string {
	var out []string
	for _, s := range stages.All {
		id := e.JobID(s)
		if id == "" {
			continue
		}
		if infos[id].State.Terminal() {
			continue
		}
		out = append(out, id)
	}
	return out
}
