package episode

import (
	"context"
	"sync"
	"time"

	"github.com/nemorl/nemorl-slurm/ledger"
	"github.com/nemorl/nemorl-slurm/slurm"
)

// Engine is a long-lived Watch over a set of episodes that changes while it
// runs (serve): episodes are added with Follow, one poll (one squeue; sacct for jobs that left it) covers
// every job of every episode followed, each episode is advanced as Watch
// advances it, and whoever follows an episode is told once it is final.
// Final episodes leave the set (their locks released).
type Engine struct {
	d   *Driver
	opt EngineOptions

	mu      sync.Mutex
	pending []pendingEpisode
	waiters map[string][]func(*ledger.Entry) // by episode: every follower
	rows    []Row                            // as of the last successful poll
	stats   EngineStats
	wake    chan struct{}
	// onPoll are told the duration of every poll (ObservePolls).
	onPoll []func(took time.Duration, failed bool)
}

// EngineOptions tune an Engine.
type EngineOptions struct {
	// PollMin and PollMax bound the interval between polls (zero: the
	// config's), as in WatchOptions.
	PollMin, PollMax time.Duration
}

// EngineStats are counters for metrics.
type EngineStats struct {
	Polls, PollFailures int64
	// Backoffs counts the failed polls whose answer was the controller's
	// "busy" (rate limit, socket timeout): each waits PollMax.
	Backoffs int64
	// LastPoll is how long the last poll (sacct and advancing) took.
	LastPoll time.Duration
	// PollSeconds is the total time spent polling.
	PollSeconds float64
	// Followed is how many episodes the engine follows now.
	Followed int
	// Cost is what the polls ran, summed: the squeue and sacct commands,
	// and the job ids asked of sacct (only those that left squeue).
	Cost slurm.PollCost
}

type pendingEpisode struct {
	e    *ledger.Entry
	lock *ledger.Lock
}

// NewEngine returns an engine of d; Run drives it.
func (d *Driver) NewEngine(opt EngineOptions) *Engine {
	return &Engine{d: d, opt: opt, waiters: map[string][]func(*ledger.Entry){}, wake: make(chan struct{}, 1)}
}

// Follow adds episode e (held by lock, or nil: the engine takes the lock
// at its next poll, as Watch does, or only observes when another process
// holds it) and returns a channel that receives the final entry once. An
// episode already followed is not added twice: the channel joins its
// followers. A final e is sent at once.
func (g *Engine) Follow(e *ledger.Entry, lock *ledger.Lock) <-chan *ledger.Entry {
	ch := make(chan *ledger.Entry, 1)
	g.Recover(e, lock, func(final *ledger.Entry) { ch <- final })
	return ch
}

// Recover is Follow with a function told the final entry instead of a
// channel: no goroutine waits for the episode (serve follows thousands).
// done is called once, from Run's goroutine after the poll that ended the
// episode (from a goroutine of its own when e is final already), without
// the engine's lock held; it must not block.
func (g *Engine) Recover(e *ledger.Entry, lock *ledger.Lock, done func(*ledger.Entry)) {
	if e.Final() {
		if lock != nil {
			lock.Unlock()
		}
		go done(e)
		return
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if ws, ok := g.waiters[e.Episode]; ok {
		g.waiters[e.Episode] = append(ws, done)
		if lock != nil {
			lock.Unlock()
		}
		return
	}
	g.waiters[e.Episode] = []func(*ledger.Entry){done}
	g.pending = append(g.pending, pendingEpisode{e: e, lock: lock})
	select {
	case g.wake <- struct{}{}:
	default:
	}
}

// Following reports whether ep is followed now.
func (g *Engine) Following(ep string) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	_, ok := g.waiters[ep]
	return ok
}

// Rows returns one row per followed episode, as of the last poll.
func (g *Engine) Rows() []Row {
	g.mu.Lock()
	defer g.mu.Unlock()
	return append([]Row(nil), g.rows...)
}

// Stats returns the engine's counters.
func (g *Engine) Stats() EngineStats {
	g.mu.Lock()
	defer g.mu.Unlock()
	s := g.stats
	s.Followed = len(g.waiters)
	return s
}

// ObservePolls has f told the duration of every poll from now on (sacct and
// advancing the episodes; failed polls too), for a histogram. f is called
// from Run's goroutine, without the engine's lock held: it must not block.
func (g *Engine) ObservePolls(f func(took time.Duration, failed bool)) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.onPoll = append(g.onPoll, f)
}

// Run polls until ctx ends: one Query per poll for every job of every
// followed episode, advancing those it holds. A failed poll is logged and
// retried (the interval grows to PollMax); the episodes stay followed.
func (g *Engine) Run(ctx context.Context) error {
	d := g.d
	st := &watchState{entries: map[string]*ledger.Entry{}, locks: map[string]*ledger.Lock{}, since: map[string]time.Time{}}
	defer func() {
		for _, l := range st.locks {
			l.Unlock()
		}
	}()
	var last []Row
	return d.pollLoop(ctx, g.opt.PollMin, g.opt.PollMax, g.wake, func(ctx context.Context) (pollStep, error) {
		g.mu.Lock()
		added := len(g.pending) > 0
		for _, p := range g.pending {
			ep := p.e.Episode
			if _, dup := st.entries[ep]; !dup {
				st.order = append(st.order, ep)
			}
			st.entries[ep] = p.e
			if p.lock != nil {
				st.locks[ep] = p.lock
			}
		}
		g.pending = nil
		g.mu.Unlock()

		var rows []Row
		var err error
		busy := false
		if len(st.order) > 0 {
			t0 := time.Now()
			rows, err = d.poll(ctx, st, true)
			took := time.Since(t0)
			if ctx.Err() != nil {
				return pollStep{done: true}, ctx.Err()
			}
			busy = err != nil && slurm.IsControllerBusy(err)
			g.mu.Lock()
			g.stats.Polls++
			g.stats.LastPoll = took
			g.stats.PollSeconds += took.Seconds()
			g.stats.Cost = st.cost
			if err != nil {
				g.stats.PollFailures++
			}
			if busy {
				g.stats.Backoffs++
			}
			observers := g.onPoll
			g.mu.Unlock()
			for _, f := range observers {
				f(took, err != nil)
			}
			switch {
			case busy:
				// A throttled or busy controller is asked again at
				// PollMax; the episodes stay followed, nothing is failed.
				d.logf("poll: the controller is busy (backing off): %v", err)
			case err != nil:
				// A failed poll is retried; the episodes stay followed.
				d.logf("poll failed (retrying): %v", err)
			}
		}
		if err == nil {
			g.settle(st, rows)
		}
		changed := err == nil && (added || !sameRows(rows, last))
		last = rows
		return pollStep{changed: changed, busy: busy}, nil
	})
}

// settle tells the followers of every final episode and drops it from st;
// the rows of the others become Rows.
func (g *Engine) settle(st *watchState, rows []Row) {
	keep := st.order[:0]
	var final []*ledger.Entry
	for _, ep := range st.order {
		e := st.entries[ep]
		if !e.Final() {
			keep = append(keep, ep)
			continue
		}
		final = append(final, e)
		if l := st.locks[ep]; l != nil {
			l.Unlock()
		}
		delete(st.locks, ep)
		for _, s := range e.Jobs {
			if s != nil {
				delete(st.runs, s.JobID)
			}
		}
		delete(st.entries, ep)
		for k := range st.since {
			if len(k) > len(ep) && k[:len(ep)+1] == ep+"/" {
				delete(st.since, k)
			}
		}
	}
	st.order = keep
	live := make([]Row, 0, len(rows))
	for _, r := range rows {
		if st.entries[r.Episode] != nil {
			live = append(live, r)
		}
	}
	type told struct {
		e  *ledger.Entry
		fs []func(*ledger.Entry)
	}
	var tell []told
	g.mu.Lock()
	g.rows = live
	for _, e := range final {
		tell = append(tell, told{e, g.waiters[e.Episode]})
		delete(g.waiters, e.Episode)
	}
	g.mu.Unlock()
	for _, t := range tell {
		for _, f := range t.fs {
			f(t.e)
		}
	}
}
