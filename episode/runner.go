package episode

import (
	"context"
	"time"

	"github.com/nemorl/nemorl-slurm/ledger"
)

// The engine as serve and the CLI see it: two small interfaces, in the
// shape of Nomad's DriverPlugin (StartTask, WaitTask, StopTask,
// RecoverTask, InspectTask). An episode's saved handle is its ledger
// entry: the staged directory, each stage's submission intent and job id,
// the attempts, sealed. From the handle alone a new process (a run after
// a crash, serve after a restart, watch on another login) recovers the
// episode: Watch and Recover adopt a submission whose job id was never
// recorded and follow every job on record; nothing is submitted twice.
//
// serve and the CLI hold these, never a Driver's parts: what the engine
// does inside (staging, sbatch, the poll, gathering facts, rules.Decide,
// retries) is its own.

// Runner starts, follows, stops and inspects episodes on one cluster.
// *Driver implements it.
type Runner interface {
	// Preflight checks, on the cluster, the files the config names
	// (images, replacement commands) before anything is staged.
	Preflight(ctx context.Context) error
	// Submit stages and submits new episodes, up to MaxBatch per remote
	// command. Each result holds the episode's handle, locked by this
	// process, or why it failed (a nil Entry: nothing is left of it).
	Submit(ctx context.Context, specs []Spec) []Submitted
	// Watch recovers episodes from their handles and follows them
	// (opt.Act: advances those it can lock) until each is final, ctx
	// ends, or the cluster stays unreachable.
	Watch(ctx context.Context, episodes []string, opt WatchOptions) (map[string]*ledger.Entry, error)
	// Cancel stops an episode for good. lock is the episode's lock when
	// this process holds it (its owner: the entry records the cancel),
	// nil otherwise (the owner sees the cancel marker at its next poll).
	Cancel(ctx context.Context, e *ledger.Entry, reason string, lock *ledger.Lock) ([]string, error)
	// Inspect returns an episode's handle and its row now: its outcome
	// when final, else ErrNotFinished.
	Inspect(ctx context.Context, ep string) (*ledger.Entry, Row, error)
	// AuthorFiles reads the author's response and patch within their
	// bounds, as the verified author record names them.
	AuthorFiles(ctx context.Context, e *ledger.Entry) (response, patch []byte, problems []string, err error)
	// Follower returns a long-lived follower of this cluster's episodes.
	Follower(opt EngineOptions) Follower
}

// Follower is a long-lived watch over a set of episodes that changes
// while it runs (serve): one poll for every job of every episode it
// follows. *Engine implements it.
type Follower interface {
	// Run polls and advances until ctx ends.
	Run(ctx context.Context) error
	// Recover follows the episode of handle e (held by lock, or nil: the
	// follower takes the lock at its next poll) until it is final; done
	// is told the final entry once.
	Recover(e *ledger.Entry, lock *ledger.Lock, done func(final *ledger.Entry))
	// Following reports whether episode ep is followed now.
	Following(ep string) bool
	// Rows are the followed episodes' rows as of the last poll.
	Rows() []Row
	// Stats are the follower's counters.
	Stats() EngineStats
	// ObservePolls tells f the duration of every poll.
	ObservePolls(f func(took time.Duration, failed bool))
}

var (
	_ Runner   = (*Driver)(nil)
	_ Follower = (*Engine)(nil)
)

// Follower returns a new Engine of d as a Follower.
func (d *Driver) Follower(opt EngineOptions) Follower { return d.NewEngine(opt) }
