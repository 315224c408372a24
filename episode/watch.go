package episode

import (
	"context"
	"errors"
	"fmt"
	"github.com/nemorl/nemorl-slurm/stages"
	"os"
	"path"
	"strings"
	"sync"
	"time"

	"github.com/nemorl/nemorl-slurm/record"
	"github.com/nemorl/nemorl-slurm/remote"
	"github.com/nemorl/nemorl-slurm/slurm"
)

// Limits of patience with Slurm's account of a job.
const (
	// JobLostAfter: a submitted job that neither sacct nor squeue knows
	// for this long is lost (infra_failure job_lost). Unknown is not
	// failed: sacct lags submissions and ends by seconds.
	JobLostAfter = 10 * time.Minute
	// RequeueGrace is how long a job ended NODE_FAIL, PREEMPTED or
	// BOOT_FAIL is given to be requeued by Slurm (it does so within
	// seconds) before its end counts.
	RequeueGrace = 2 * time.Minute
	// TimesUnknownAfter: an ended eval whose start (or train's end) sacct
	// has not reported for this long cannot be checked (times_unknown).
	TimesUnknownAfter = 5 * time.Minute
	// DependentCancelWait: after train failed, how long to wait for Slurm to
	// cancel the eval job waiting on it before classifying without it.
	DependentCancelWait = 2 * time.Minute
)

// ErrConnectionLost is matched by Watch's error when the cluster could not
// be queried MaxPollFailures times in a row.
var ErrConnectionLost = remote.ErrConnectionLost

// Row is one episode's line in the live table.
// (The CLI renders rows as a table or, with --json, through its own type.)
type Row struct {
	Episode, Stage, JobID string
	// State is Slurm's state of the stage's job (PENDING until Slurm
	// reports it: a job just submitted waits).
	State string
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
	Outcome *Outcome
}

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
	entries map[string]*Entry
	order   []string
	locks   map[string]*Lock
	since   map[string]time.Time // first time a wait began, by key
}

func (st *watchState) waited(key string, now time.Time) time.Duration {
	t, ok := st.since[key]
	if !ok {
		st.since[key] = now
		return 0
	}
	return now.Sub(t)
}

// waits are advance's timers: waited reports how long a named wait has
// lasted, counted from its first call; forget ends it (the next waited
// starts again from zero).
type waits struct {
	waited func(key string) time.Duration
	forget func(key string)
}

// waitsFor are episode ep's timers in st, at the clock now; mu guards
// st.since (advanceAll advances episodes concurrently).
func (st *watchState) waitsFor(ep string, now func() time.Time, mu *sync.Mutex) waits {
	return waits{
		waited: func(key string) time.Duration {
			mu.Lock()
			defer mu.Unlock()
			return st.waited(ep+"/"+key, now())
		},
		forget: func(key string) {
			mu.Lock()
			defer mu.Unlock()
			delete(st.since, ep+"/"+key)
		},
	}
}

// Watch polls the episodes (one sacct for all their jobs per poll) until
// every one is final, ctx ends, or the cluster stays unreachable. It
// returns the entries as last seen. With opt.Act it advances the episodes
// it can lock: submits train and eval once the author's patch is verified,
// resolves submissions interrupted by a crash, and collects, verifies and
// records each outcome.
func (d *Driver) Watch(ctx context.Context, episodes []string, opt WatchOptions) (map[string]*Entry, error) {
	st := &watchState{entries: map[string]*Entry{}, locks: map[string]*Lock{}, since: map[string]time.Time{}}
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
	pollMin, pollMax := opt.PollMin, opt.PollMax
	if pollMin <= 0 {
		pollMin = d.Config.Episodes.PollMin.Duration
	}
	if pollMax < pollMin {
		pollMax = max(d.Config.Episodes.PollMax.Duration, pollMin)
	}
	maxFail := opt.MaxPollFailures
	if maxFail <= 0 {
		maxFail = 5
	}
	interval, failures := pollMin, 0
	var last []Row
	for {
		rows, err := d.poll(ctx, st, opt.Act)
		if ctx.Err() != nil {
			return st.entries, ctx.Err()
		}
		if err != nil {
			failures++
			d.logf("poll %d/%d failed: %v", failures, maxFail, err)
			if failures >= maxFail {
				return st.entries, fmt.Errorf("%w: %d polls in a row failed; the jobs keep running, resume re-attaches: %w", ErrConnectionLost, failures, err)
			}
		} else {
			failures = 0
			if opt.Observe != nil {
				opt.Observe(rows)
			}
		}
		done := true
		for _, e := range st.entries {
			done = done && e.Final()
		}
		if done || opt.Once {
			return st.entries, nil
		}
		if err == nil && !sameRows(rows, last) {
			interval = pollMin
		} else {
			interval = min(interval*2, pollMax)
		}
		last = rows
		t := time.NewTimer(interval)
		select {
		case <-ctx.Done():
			t.Stop()
			return st.entries, ctx.Err()
		case <-t.C:
		}
	}
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
	var ids []string
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
				ids = append(ids, id)
			}
		}
	}
	infos := map[string]slurm.JobInfo{}
	if len(ids) > 0 {
		var err error
		infos, err = d.Slurm.Query(ctx, ids)
		if err != nil {
			return nil, err
		}
	}
	// The stages collected already, as the ledger keeps them.
	for _, ep := range st.order {
		e := st.entries[ep]
		for s, js := range e.Ended {
			if id := e.JobID(s); id != "" && js.ID == id {
				infos[id] = js.info()
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
				if _, err := d.Cancel(ctx, e, r, true); err != nil {
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
// episodes.concurrency at once.
func (d *Driver) advanceAll(ctx context.Context, st *watchState, infos map[string]slurm.JobInfo) {
	n := max(d.Config.Episodes.Concurrency, 1)
	sem := make(chan struct{}, n)
	var wg sync.WaitGroup
	var mu sync.Mutex // guards st.since
	for _, ep := range st.order {
		e := st.entries[ep]
		if e.Final() || st.locks[ep] == nil {
			continue
		}
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			if err := d.advance(ctx, e, infos, st.waitsFor(e.Episode, d.now, &mu)); err != nil && ctx.Err() == nil {
				d.logf("%s: %v (will retry)", e.Episode, err)
			}
		}()
	}
	wg.Wait()
}

// advance takes one episode as far as the jobs' states allow; w times the
// waits that end it (a job unknown, times unknown).
func (d *Driver) advance(ctx context.Context, e *Entry, infos map[string]slurm.JobInfo, w waits) error {
	if e.Final() {
		return nil
	}
	waited := w.waited
	// finish ends the episode with o, unless o is a failure of the
	// cluster's that a retry of its stage may cure (retry.go).
	finish := func(o *Outcome) error {
		if retried, err := d.retry(ctx, e, o, infos); retried || err != nil {
			return err
		}
		return d.finish(ctx, e, o)
	}
	// submit submits stage; a refusal sbatch will repeat for ever (a wrong
	// partition, a script that is gone) ends the episode, anything else is
	// tried again at the next poll.
	submit := func(stage, after string) error {
		err := d.submit(ctx, e, stage, after)
		var imp *ImpostorError
		if errors.As(err, &imp) {
			// The episode ends here, the impostors with it.
			return d.finish(ctx, e, d.base(e, infos).fail(IntegrityViolation, stage, ReasonImpostorJob, imp.Error()+"; cancelled").tampered(), imp.IDs...)
		}
		if why, refused := slurm.SubmitRefused(err); refused {
			return finish(d.base(e, infos).fail(InfraFailure, stage, ReasonSubmitRefused,
				fmt.Sprintf("sbatch refused the %s job: %s", stage, why)))
		}
		return err
	}
	cancelled := func() error {
		return finish(d.base(e, infos).fail(InfraFailure, stageOfCancel(e, infos), e.CancelRequested, "the episode was cancelled: "+e.CancelRequested))
	}
	// lost finalizes a job Slurm forgot, after JobLostAfter of continuous
	// evidence: every poll in between answered and did not know it. A poll
	// that sees it, or one where sacct or squeue failed (its absence then
	// proves nothing), starts the count again.
	lost := func(stage string) error {
		id := e.JobID(stage)
		j := infos[id]
		if j.State.Class != slurm.Unknown || j.Source != slurm.SourceNone {
			w.forget("unknown-" + id)
			return nil
		}
		if w := waited("unknown-" + id); w > JobLostAfter {
			return finish(d.base(e, infos).fail(InfraFailure, stage, ReasonJobLost,
				fmt.Sprintf("%s job %s: neither sacct nor squeue has known it for %s", stage, id, w.Round(time.Second))))
		}
		return nil
	}

	// settling: a job that ended for the cluster's reasons (its node
	// failed, it was preempted, its node did not boot) may be requeued by
	// Slurm itself, same job id, a new run (the scripts allow it): its end
	// is final only once RequeueGrace has passed without a new run.
	settling := func(stage string, j slurm.JobInfo) bool {
		switch j.State.Failure {
		case slurm.FailureNodeFailure, slurm.FailurePreempted, slurm.FailureBootFailure:
			// The author, and train and eval under episodes.no_requeue,
			// are submitted --no-requeue: Slurm will not run them again.
			requeues := stage != stages.Author && !d.Config.Episodes.NoRequeue
			return requeues && e.CancelRequested == "" && waited("requeue-"+j.ID) < RequeueGrace
		}
		w.forget("requeue-" + j.ID)
		return false
	}

	if !e.Staged {
		if e.CancelRequested != "" {
			return cancelled()
		}
		if err := d.restage(ctx, e); err != nil {
			return err
		}
	}
	// Once a cancel is on record nothing is submitted (an interrupted
	// submission was already looked up and adopted by Cancel).
	if e.JobID(stages.Author) == "" {
		if e.CancelRequested != "" {
			return cancelled()
		}
		return submit(stages.Author, "")
	}
	ai := infos[e.JobID(stages.Author)]
	if settling(stages.Author, ai) {
		return nil
	}
	if !ai.State.Terminal() {
		return lost(stages.Author)
	}
	if e.Jobs[stages.Train] == nil {
		switch {
		case e.CancelRequested != "":
			return cancelled()
		case ai.State.Class != slurm.Succeeded:
			o, err := d.authorFailed(ctx, e, d.base(e, infos), ai)
			if err != nil {
				return err
			}
			// A record of another stage in the author's output is
			// tampering, whatever the job's state.
			if _, _, err := d.scan(ctx, e, stages.Author); record.ReasonOf(err) == record.ReasonForeignRecord {
				o = d.base(e, infos).policyRecord(stages.Author, err)
			}
			return finish(o)
		}
		if e.Author == nil {
			o, err := d.collectAuthor(ctx, e, infos)
			if err != nil {
				return err
			}
			if o != nil {
				return finish(o)
			}
			e.markEnded(stages.Author, ai)
			if err := d.Ledger.Save(e); err != nil {
				return err
			}
		}
	}
	if e.JobID(stages.Train) == "" {
		if e.CancelRequested != "" {
			return cancelled()
		}
		if err := submit(stages.Train, ai.ID); err != nil || e.Final() {
			return err
		}
	}
	ti := infos[e.JobID(stages.Train)]
	if e.JobID(stages.Eval) == "" {
		switch {
		case e.CancelRequested != "":
			// Nothing more is submitted; classify once train has ended.
		case ti.State.Terminal() && ti.State.Class != slurm.Succeeded && e.Jobs[stages.Eval] == nil:
			// Train failed before eval was submitted: eval would never run.
		default:
			return submit(stages.Eval, e.JobID(stages.Train))
		}
	}
	if settling(stages.Train, ti) {
		return nil
	}
	if !ti.State.Terminal() {
		return lost(stages.Train)
	}
	if id := e.JobID(stages.Eval); id != "" && !infos[id].State.Terminal() && !e.EvalOutputChecked {
		// Eval's output is opened by slurmstepd when eval starts: a FIFO
		// planted there (without isolation the train job can) would stall
		// it until its time limit. Look once, as soon as train has ended.
		if o, err := d.checkEvalOutput(ctx, e, infos); err != nil {
			return err
		} else if o != nil {
			return d.finish(ctx, e, o)
		}
	}
	if id := e.JobID(stages.Eval); id != "" {
		ei := infos[id]
		if settling(stages.Eval, ei) {
			return nil
		}
		if !ei.State.Terminal() {
			if ti.State.Class == slurm.Succeeded || waited("dependent-"+id) < DependentCancelWait {
				return lost(stages.Eval)
			}
		}
	}
	o, err := d.classify(ctx, e, infos)
	if err != nil {
		return err
	}
	if o == nil {
		if w := waited("times"); w > TimesUnknownAfter {
			return finish(d.base(e, infos).fail(InfraFailure, stages.Eval, ReasonTimesUnknown,
				fmt.Sprintf("sacct has not reported train's end and eval's start for %s: the order of the jobs cannot be checked", w.Round(time.Second))))
		}
		return nil
	}
	return finish(o)
}

// finish records the outcome in the ledger, then removes the episode's
// secrets.env if the author job never consumed it (a cancelled or refused
// episode must not leave the key in the shared workdir).
//
// An episode that ends takes its jobs that still run or wait with it (an
// eval left pending, a train whose episode was judged lost), and extra
// (impostor jobs found under its name): on record first, in the same save
// as the outcome, so their CANCELLED is never read as the policy's.
func (d *Driver) finish(ctx context.Context, e *Entry, o *Outcome, extra ...string) error {
	live := append(liveJobs(e, o), extra...)
	e.recordCancels(live)
	e.Outcome = o
	if err := d.Ledger.Save(e); err != nil {
		e.Outcome = nil
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
		d.removeSecrets(ctx, e)
	}
	// The outcome itself is reported once, by the caller (watch's report,
	// serve's answer), not logged here too.
	return nil
}

// restage stages an episode again after a crash before its staging was
// complete, from the prompt the ledger kept.
func (d *Driver) restage(ctx context.Context, e *Entry) error {
	prompt, err := os.ReadFile(d.Ledger.PromptPath(e.Episode))
	if err != nil {
		return fmt.Errorf("episode %s: restage: %w", e.Episode, err)
	}
	tree, err := d.render(e.Episode, prompt, e.PolicyBaseURL)
	if err != nil {
		return err
	}
	return d.stage(ctx, e, tree)
}

// rowOf shows the episode's current stage: the first submitted stage whose
// job has not completed, else the last one.
func rowOf(e *Entry, infos map[string]slurm.JobInfo) Row {
	r := Row{Episode: e.Episode, Stage: "-", State: "STAGING", Outcome: e.Outcome}
	if e.Staged {
		r.State = "STAGED"
	}
	for _, s := range stages.All {
		sub := e.Jobs[s]
		if sub == nil {
			break
		}
		r.Stage, r.JobID, r.Elapsed, r.Reason = s, sub.JobID, 0, ""
		r.Attempt = max(e.attempts(s, infos), e.attemptNumber(s))
		if sub.JobID == "" {
			r.State = "SUBMITTING"
			break
		}
		j, ok := infos[sub.JobID]
		switch {
		case ok && j.State.Raw != "":
			r.State, r.Elapsed = j.State.Raw, j.Elapsed
			if j.State.Class == slurm.Pending {
				r.Elapsed = 0
				if j.Reason != "" && j.Reason != "None" {
					r.Reason = j.Reason
				}
			}
		case e.Outcome != nil && e.Outcome.Jobs[s].State != "":
			js := e.Outcome.Jobs[s]
			r.State, r.Elapsed = js.State, js.info().Elapsed
		default:
			// Submitted, not yet in sacct or squeue (they lag): it waits.
			r.State = "PENDING"
		}
		if r.State != "COMPLETED" {
			break
		}
	}
	return r
}

// Result returns the episode's outcome when it is final, polling the
// cluster once (and advancing the episode, when no other process holds it)
// if it is not. While the episode runs, it returns ErrNotFinished and the
// episode's current row.
func (d *Driver) Result(ctx context.Context, ep string) (*Entry, Row, error) {
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

// checkEvalOutput looks at eval's out.log once train has ended: anything
// there but a regular file is the planted output it is (the caller aborts
// the episode); otherwise the check is recorded and not made again.
func (d *Driver) checkEvalOutput(ctx context.Context, e *Entry, infos map[string]slurm.JobInfo) (*Outcome, error) {
	p := path.Join(e.Dir, stages.Output(stages.Eval))
	fi, err := d.lstat(ctx, p)
	if err != nil {
		return nil, fmt.Errorf("episode %s: %w", e.Episode, err)
	}
	if !fi.Exists || fi.Regular() {
		e.EvalOutputChecked = true
		return nil, d.Ledger.Save(e)
	}
	return d.base(e, infos).planted(e, &plantedError{Stage: stages.Eval, Path: p, Type: fi.Type}), nil
}

// liveJobs are the episode's jobs that the outcome does not show ended:
// running, pending, or not seen by the last poll.
func liveJobs(e *Entry, o *Outcome) []string {
	var out []string
	for _, s := range stages.All {
		id := e.JobID(s)
		if id == "" {
			continue
		}
		if j, ok := o.Jobs[s]; ok && j.State != "" && slurm.ParseState(j.State, "").Terminal() {
			continue
		}
		out = append(out, id)
	}
	return out
}

// markEnded records stage's job as ended and collected: it is not queried
// again.
func (e *Entry) markEnded(stage string, j slurm.JobInfo) {
	if e.Ended == nil {
		e.Ended = map[string]JobSummary{}
	}
	e.Ended[stage] = summarize(j)
}
