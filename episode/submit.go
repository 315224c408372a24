package episode

import (
	"context"
	"crypto/sha256"
	_ "embed"
	"encoding/hex"
	"errors"
	"fmt"
	"maps"
	"path"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/nemorl/nemorl-slurm/configs"
	"github.com/nemorl/nemorl-slurm/internal/shell"
	"github.com/nemorl/nemorl-slurm/ledger"
	"github.com/nemorl/nemorl-slurm/remote"
	"github.com/nemorl/nemorl-slurm/slurm"
	"github.com/nemorl/nemorl-slurm/stages"
)

// submitter runs sbatch: the authors' with their staging, in batches
// (Submit), and each later stage's with the crash-safe protocol (the
// intent saved before sbatch, the job id after; a job left by a crash is
// adopted, never submitted twice), paced by cluster.submit_rate.
type submitter struct {
	host                     remote.Host
	slurm                    *slurm.Client
	config                   *configs.Config
	ledger                   *ledger.Ledger // new entries (Create), their locks
	entries                  *entries       // records every change of an entry
	configPath, configSHA256 string
	overrides                []string
	// labels, discardNotCreated, logf and now read the Driver's Labels,
	// DiscardNotCreated, Logf and Now at each call: they may change
	// between calls.
	labels            func() map[string]string
	discardNotCreated func() bool
	logf              func(format string, args ...any)
	now               func() time.Time

	stager  *stager  // stages the trees, renders the manifests
	account *account // the cluster user, whose jobs adopt accepts

	gateOnce sync.Once
	gate     *pacer // cluster.submit_rate; nil: no cap

	// failed: the stages whose arrays sbatch refused for good here.
	failed arrayFailed

	// unknownSince: when adopt first found a job id that an episode's
	// manifest names for a stage unknown to Slurm (manifestJob), by
	// "episode/stage/id".
	unknownMu    sync.Mutex
	unknownSince map[string]time.Time
}

// arrays reports whether the authors of a batch are submitted as one job
// array (cluster.job_arrays).
func (sb *submitter) arrays() bool { return sb.config.Cluster.Arrays() }

// submitGate is the pace of cluster.submit_rate, nil when there is none.
func (sb *submitter) submitGate() *pacer {
	sb.gateOnce.Do(func() {
		if r := sb.config.Cluster.SubmitRate; r > 0 {
			sb.gate = &pacer{gap: time.Duration(float64(time.Second) / r)}
		}
	})
	return sb.gate
}

// pacer spaces the starts of sbatch at least gap apart, on whichever path
// they run (a batch's script, or one submission).
type pacer struct {
	gap  time.Duration
	mu   sync.Mutex
	next time.Time // the earliest the next start may be
}

// reserve takes n starts, gap apart, and returns when the first may be.
func (p *pacer) reserve(now time.Time, n int) time.Time {
	p.mu.Lock()
	defer p.mu.Unlock()
	start := now
	if p.next.After(start) {
		start = p.next
	}
	p.next = start.Add(time.Duration(n) * p.gap)
	return start
}

// ranUntil says that starts ran until t (a batch's script, which paces
// itself and may run late): the next is gap after t at the earliest.
func (p *pacer) ranUntil(t time.Time) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if t.Add(p.gap).After(p.next) {
		p.next = t.Add(p.gap)
	}
}

// sleepCtx waits d, or until ctx ends.
func sleepCtx(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// Spec is one episode to submit: its id (empty: a new one) and prompt.
type Spec struct {
	ID     string
	Prompt []byte
}

// Submitted is the result of one Spec: as Submit's three results.
type Submitted struct {
	Entry *ledger.Entry
	Lock  *ledger.Lock
	Err   error
}

// submitAll is Submit: it prepares each episode, writes its ledger entry
// and lock, then stages and submits them in batches.
func (sb *submitter) submitAll(ctx context.Context, specs []Spec) []Submitted {
	out := make([]Submitted, len(specs))
	// The cluster's KillWait, once for the lot (every script gets it).
	killWait := sb.stager.killWait(ctx).Truncate(time.Second)
	var ready []*pending
	for i, s := range specs {
		p, err := sb.prepare(s, killWait)
		if err != nil {
			out[i] = Submitted{Entry: entryOf(p), Err: err}
			continue
		}
		p.i = i
		ready = append(ready, p)
	}
	batches, arrays := sb.batchArrays(ctx, ready, out)
	ready = slices.Concat(batches...)
	// The ledger entries, each with its intent, on disk before anything
	// runs on the cluster (in parallel: each is a few fsyncs).
	sb.parallel(ready, func(p *pending) error {
		if err := sb.ledger.Create(p.e, specs[p.i].Prompt); err != nil {
			return err
		}
		p.created = true
		lock, ok, err := sb.ledger.TryLock(p.e.Episode)
		if err != nil {
			return err
		}
		if !ok {
			return fmt.Errorf("episode %s: another nemorl-slurm process holds it", p.e.Episode)
		}
		p.lock = lock
		return nil
	}, func(p *pending, err error) {
		out[p.i] = Submitted{Err: err}
		if p.created {
			out[p.i].Entry = p.e // in the ledger: resume carries it on
		}
	})
	// Two batches at once: one stages while the other's sbatch waits on
	// slurmctld; one at a time under cluster.submit_rate, whose pace the
	// batch script keeps.
	var wg sync.WaitGroup
	sem := make(chan struct{}, 2)
	if sb.submitGate() != nil {
		sem = make(chan struct{}, 1)
	}
	for i, b := range batches {
		var live []*pending
		for _, p := range b {
			if out[p.i].Err == nil {
				live = append(live, p)
			}
		}
		if len(live) == 0 {
			continue
		}
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			sb.runBatch(ctx, live, arrays[i], out)
		}()
	}
	wg.Wait()
	return out
}

// batchArrays splits ps into batches of up to MaxBatch and renders each
// batch of two or more as one job array of their authors (array.go),
// each episode's task recorded in its entry's author submission (the
// intent, saved before anything runs). A batch whose array cannot be
// rendered is refused, its episodes' results errors.
func (sb *submitter) batchArrays(ctx context.Context, ps []*pending, out []Submitted) ([][]*pending, []*jobArray) {
	var batches [][]*pending
	var arrays []*jobArray
	size, useArrays := MaxBatch, sb.arrays()
	if useArrays {
		// An array's task indexes are below the cluster's MaxArraySize
		// (0 disables arrays). Unknown (scontrol failed): Slurm's default,
		// 1001, far above a batch.
		if cfg, err := sb.slurm.Config(ctx); err == nil {
			switch {
			case cfg.MaxArraySize < minArray:
				useArrays = false
			case cfg.MaxArraySize < size:
				size = cfg.MaxArraySize
			}
			// SchedulerParameters' max_array_tasks, where set, bounds
			// the count: a batch it refuses is submitted job by job.
			if useArrays && cfg.CheckArray(fmt.Sprintf("0-%d", min(size, len(ps))-1)) != nil {
				useArrays, size = false, MaxBatch
			}
		}
		// Slurm 23.11.6's scancel, sent to a member cluster (members:,
		// SLURM_CLUSTERS), signals a whole array for one pending task's
		// id (fixed in 23.11.7): cancelling one episode would cancel its
		// siblings. There, each author is a job of its own.
		if useArrays && sb.config.Cluster.Member != "" {
			if v, err := sb.slurm.SacctVersion(ctx); err != nil || (v.Major == 23 && v.Minor == 11 && v.Micro == 6) {
				useArrays, size = false, MaxBatch
			}
		}
	}
	for len(ps) > 0 {
		n := min(len(ps), size)
		b := ps[:n]
		ps = ps[n:]
		var arr *jobArray
		if useArrays {
			var err error
			arr, err = renderArray(path.Dir(b[0].e.Dir), stages.Author, b, sb.stager.version, sb.now())
			if err != nil {
				for _, p := range b {
					out[p.i] = Submitted{Err: err}
				}
				continue
			}
		}
		if arr != nil {
			for j, p := range b {
				p.e.Jobs[stages.Author].Array = arr.taskOf(j)
			}
		}
		batches, arrays = append(batches, b), append(arrays, arr)
	}
	return batches, arrays
}

func entryOf(p *pending) *ledger.Entry {
	if p == nil {
		return nil
	}
	return p.e
}

// parallel runs f for every p, a few at once; fail receives each error.
func (sb *submitter) parallel(ps []*pending, f func(*pending) error, fail func(*pending, error)) {
	var wg sync.WaitGroup
	var mu sync.Mutex
	sem := make(chan struct{}, 8)
	for _, p := range ps {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			if err := f(p); err != nil {
				mu.Lock()
				fail(p, err)
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
}

// prepare renders one episode (its scripts with the cluster's killWait,
// which its entry records) and makes its entry, with the author's
// intent, in memory.
func (sb *submitter) prepare(s Spec, killWait time.Duration) (*pending, error) {
	id := s.ID
	if id == "" {
		id = stages.NewID(sb.now())
	}
	if !stages.ValidEpisode(id) {
		return nil, fmt.Errorf("%w %q: want letters, digits and ._- only", ledger.ErrBadEpisodeID, id)
	}
	endpoint := sb.stager.pickPolicyBaseURL()
	tree, err := sb.stager.render(id, s.Prompt, endpoint, killWait)
	if err != nil {
		return nil, err
	}
	now := sb.now().UTC()
	e := &ledger.Entry{
		Episode: id, Created: now, ConfigPath: sb.configPath, ConfigSHA256: sb.configSHA256,
		Host: sb.host.Name(), Cluster: sb.config.ClusterName, Dir: tree.Dir, Isolation: tree.Isolation, Jobs: map[stages.Stage]*ledger.Submission{stages.Author: {Intent: now}},
		PolicyBaseURL: endpoint, Scripts: scriptHashes(tree), TimeLimitMinutes: scriptTimeLimits(tree),
		KillWaitSeconds: int(killWait / time.Second),
	}
	if labels := sb.labels(); len(labels) > 0 {
		e.Labels = maps.Clone(labels)
	}
	e.Overrides = slices.Clone(sb.overrides)
	if _, err := sb.stager.secretsData(e); err != nil {
		return nil, err
	}
	p := &pending{e: e, tree: tree, req: submitRequest(e, stages.Author, "")}
	if _, err := slurm.SbatchArgs(p.req); err != nil {
		return nil, err
	}
	return p, nil
}

// batchDeadline bounds one batch command of n episodes: staging and n
// sbatch, paced gap apart (cluster.submit_rate). It allows one sbatch
// deadline, and a twelfth of one (5 s by default) for each sbatch: a
// healthy sbatch takes a tenth of a second, a throttled one (rl_enable) a
// few seconds.
func (sb *submitter) batchDeadline(n int) time.Duration {
	var gap time.Duration
	if g := sb.submitGate(); g != nil {
		gap = g.gap
	}
	d := sb.slurm.Deadline(slurm.KindSbatch)
	return d + time.Duration(n)*(gap+d/12)
}

// runBatch stages and submits ps in one command and records each result.
// A command still running at its deadline (batchDeadline) is stopped,
// and its outcome is unknown: each episode's job is looked for by its
// comment tag, as after a lost connection, never submitted again blindly.
func (sb *submitter) runBatch(ctx context.Context, ps []*pending, arr *jobArray, out []Submitted) {
	d := sb.batchDeadline(len(ps))
	bctx, cancel := context.WithTimeoutCause(ctx, d, errBatchDeadline)
	mode := batchNew
	if arr != nil {
		mode = batchArray
	}
	res, err := sb.batchOnCluster(bctx, ps, mode, arr)
	if err != nil && ctx.Err() == nil && errors.Is(context.Cause(bctx), errBatchDeadline) {
		err = fmt.Errorf("%w (%v)", &slurm.DeadlineError{Kind: slurm.KindSbatch, Deadline: d,
			Command: fmt.Sprintf("staging and sbatch of %d episodes on %s", len(ps), sb.host.Name())}, err)
	}
	cancel()
	var pe *PreflightError
	for _, p := range ps {
		r := res[p.e.Episode]
		switch {
		case errors.As(err, &pe) || (err == nil && r.exists):
			// Refused before anything of it was written on the cluster.
			if err == nil {
				err1 := fmt.Errorf("episode %s %w: %s on %s; refusing to overwrite it", p.e.Episode, ledger.ErrEpisodeExists, p.e.Dir, sb.host.Name())
				sb.discard(p, out, err1)
				continue
			}
			sb.discard(p, out, err)
		case err != nil && errors.Is(err, remote.ErrOutcomeUnknown):
			// The command may have staged and submitted: look.
			if adopted, aerr := sb.adopt(ctx, p.e, stages.Author); aerr == nil && adopted {
				sb.settle(p, out, sb.entries.apply(p.e, change{staged: true}))
				continue
			}
			sb.settle(p, out, fmt.Errorf("episode %s: submit %s: %w", p.e.Episode, stages.Author, err))
		case err != nil:
			sb.settle(p, out, fmt.Errorf("episode %s: submit %s: %w", p.e.Episode, stages.Author, err))
		case !r.staged:
			sb.settle(p, out, fmt.Errorf("episode %s: stage %s on %s: the directory could not be put in place", p.e.Episode, p.e.Dir, sb.host.Name()))
		case r.sbatchErr != nil && sb.discardNotCreated() && slurm.SubmitNotCreated(r.sbatchErr):
			// No job was made and the caller places the episode
			// elsewhere: nothing of it stays, its staged directory
			// neither (best effort: the id is not used here again).
			if rerr := sb.stager.removeTree(ctx, p.e.Dir); rerr != nil {
				sb.logf("%s: removing %s on %s: %v", p.e.Episode, p.e.Dir, sb.host.Name(), rerr)
			}
			sb.discard(p, out, fmt.Errorf("episode %s: submit %s: %w", p.e.Episode, stages.Author, r.sbatchErr))
		case r.sbatchErr != nil:
			c := change{staged: true}
			if slurm.SubmitNotCreated(r.sbatchErr) {
				// No job made: the retry submits without a look-up.
				c.stage, c.withdraw = stages.Author, true
			}
			if serr := sb.entries.apply(p.e, c); serr != nil {
				sb.settle(p, out, serr)
				continue
			}
			sb.settle(p, out, fmt.Errorf("episode %s: submit %s: %w", p.e.Episode, stages.Author, r.sbatchErr))
		default:
			id := r.job.JobID
			if a := p.e.Jobs[stages.Author].Array; a != nil {
				id = slurm.TaskID(r.job.JobID, a.Task)
			}
			p.done = change{staged: true, stage: stages.Author, job: &submittedJob{id: id, at: sb.now().UTC()}}
			for _, w := range r.job.Warnings {
				sb.logf("%s: %s: sbatch: %s", p.e.Episode, stages.Author, w)
			}
			sb.logf("%s: staged %s on %s; submitted %s as job %s", p.e.Episode, p.e.Dir, sb.host.Name(), stages.Author, id)
			out[p.i] = Submitted{Entry: p.e}
		}
	}
	// An array's sbatch that made no job leaves no array: its episodes are
	// submitted again as jobs of their own (their intent, with the task,
	// dropped above) or elsewhere (discarded).
	if arr != nil && err == nil {
		if r := res[ps[0].e.Episode]; r != nil && r.sbatchErr != nil && slurm.SubmitNotCreated(r.sbatchErr) {
			if rerr := sb.stager.removeTree(ctx, path.Dir(arr.path)); rerr != nil {
				sb.logf("array %s: removing %s on %s: %v", arr.id, path.Dir(arr.path), sb.host.Name(), rerr)
			}
		}
	}
	// The job ids, on disk.
	var saved []*pending
	for _, p := range ps {
		if out[p.i].Err == nil && out[p.i].Entry != nil {
			saved = append(saved, p)
		}
	}
	sb.parallel(saved, func(p *pending) error { return sb.entries.apply(p.e, p.done) }, func(p *pending, err error) { sb.settle(p, out, err) })
	for _, p := range saved {
		if out[p.i].Err == nil {
			out[p.i].Lock = p.lock
		}
	}
}

// batchOnCluster runs the batch's command (the stager's: staging and the
// authors' sbatch), its sbatch starts taken from cluster.submit_rate's
// pace first, so that train and eval submissions wait behind them; the
// batch script starts them the pace's gap apart on the cluster.
func (sb *submitter) batchOnCluster(ctx context.Context, ps []*pending, mode batchMode, arr *jobArray) (map[string]*batchResult, error) {
	var gap time.Duration
	if g := sb.submitGate(); g != nil && len(ps) > 0 {
		n := len(ps)
		if arr != nil {
			n = 1 // one sbatch
		}
		if err := sleepCtx(ctx, time.Until(g.reserve(time.Now(), n))); err != nil {
			return nil, err
		}
		defer func() { g.ranUntil(time.Now()) }()
		gap = g.gap
	}
	res, runs, err := sb.stager.batchCommand(ctx, ps, mode, arr, gap, sb.slurm.Deadline(slurm.KindSbatch))
	// Each sbatch the batch ran, timed on the cluster, is a Slurm command
	// of its own in the metrics and the slow log, as one run by itself
	// is (a throttled controller slows the authors' sbatch too).
	what := fmt.Sprintf("sbatch of an author job (a batch of %d episodes)", len(ps))
	if arr != nil {
		what = fmt.Sprintf("sbatch --array of author array %s (%d episodes)", arr.name, len(ps))
	}
	for _, r := range runs {
		switch {
		case r.known:
			sb.slurm.Observe(sb.host, slurm.KindSbatch, what, r.took, r.stopped())
		case r.stopped(): // not timed: it ran to its deadline
			sb.slurm.Observe(sb.host, slurm.KindSbatch, what, sb.slurm.Deadline(slurm.KindSbatch), true)
		}
	}
	return res, err
}

// settle ends p with err (nil: done), the entry kept for resume.
func (sb *submitter) settle(p *pending, out []Submitted, err error) {
	if err == nil {
		out[p.i] = Submitted{Entry: p.e, Lock: p.lock}
		return
	}
	if p.lock != nil {
		p.lock.Unlock()
		p.lock = nil
	}
	out[p.i] = Submitted{Entry: p.e, Err: err}
}

// discard ends p with err: nothing of it reached the cluster, so its
// ledger entry goes too.
func (sb *submitter) discard(p *pending, out []Submitted, err error) {
	if derr := sb.ledger.Discard(p.e.Episode); derr != nil {
		sb.logf("%s: %v", p.e.Episode, derr)
	}
	if p.lock != nil {
		p.lock.Unlock()
		p.lock = nil
	}
	out[p.i] = Submitted{Err: err}
}

// submitScript: sh -c submitScript sh MANIFEST PRE POST SBATCH ARGV…:
// sbatch, and the manifest rewritten in place with the new job id (PRE id
// POST), in one command.
//
// It is scripts/submit.sh.
//
//go:embed scripts/submit.sh
var submitScript string

// submitRemote runs sbatch for req and, in the same command, rewrites the
// manifest with the new job as stage's.
func (sb *submitter) submitRemote(ctx context.Context, e *ledger.Entry, stage stages.Stage, req slurm.SubmitRequest) (slurm.SubmitResult, error) {
	sbatch, err := slurm.SbatchArgs(req)
	if err != nil {
		return slurm.SubmitResult{}, err
	}
	pre, post, err := sb.stager.manifestAround(e, stage)
	if err != nil {
		return slurm.SubmitResult{}, err
	}
	argv := append([]string{"sh", "-c", submitScript, "sh", path.Join(e.Dir, ManifestFile), pre, post}, sbatch...)
	return sb.runSbatch(ctx, remote.Command{Argv: argv, Label: "sbatch"}, sbatch, nil)
}

// runSbatch runs cmd, a command around one sbatch (its argv sbatch: the
// submit scripts), paced by cluster.submit_rate, and reads sbatch's
// answer. Under the sbatch deadline: one stopped there is a
// *slurm.DeadlineError, its outcome unknown (remote.ErrOutcomeUnknown),
// like a lost connection. own, when not nil, tells a failure of the
// command's own (an exit status sbatch does not give) from sbatch's.
func (sb *submitter) runSbatch(ctx context.Context, cmd remote.Command, sbatch []string, own func(*remote.CommandError) error) (slurm.SubmitResult, error) {
	if g := sb.submitGate(); g != nil {
		if err := sleepCtx(ctx, time.Until(g.reserve(time.Now(), 1))); err != nil {
			return slurm.SubmitResult{}, fmt.Errorf("slurm: submit: waiting for cluster.submit_rate: %w", err)
		}
	}
	res, err := sb.slurm.RunVia(ctx, sb.host, slurm.KindSbatch, cmd)
	var ce *remote.CommandError
	if errors.As(err, &ce) {
		if own != nil {
			if err := own(ce); err != nil {
				return slurm.SubmitResult{}, err
			}
		}
		c := *ce
		c.Command = shell.Join(sbatch)
		if c.Stderr == "" && res != nil {
			c.Stderr = remote.TrimStderr(res.Stderr)
		}
		return slurm.SubmitResult{}, fmt.Errorf("slurm: submit: %w", &c)
	}
	var de *slurm.DeadlineError
	if errors.As(err, &de) {
		d := *de
		d.Command = remote.Brief(shell.Join(sbatch))
		return slurm.SubmitResult{}, fmt.Errorf("slurm: submit: %w", &d)
	}
	if err != nil {
		return slurm.SubmitResult{}, fmt.Errorf("slurm: submit: %s: %w", shell.Join(sbatch), err)
	}
	r, err := slurm.ParseSbatch(res.Stdout, res.Stderr)
	if err != nil {
		return r, fmt.Errorf("%w: %s", err, shell.Join(sbatch))
	}
	return r, nil
}

// submit runs sbatch for stage once, with the crash-safe protocol: the
// intent is saved before sbatch and the job id after. A stage whose intent
// is on record but whose id is not (a crash, or a connection lost during
// sbatch) is first looked up on the cluster by its job name and --comment
// tag, and adopted when found: a stage is never submitted twice. after is
// the job it waits for (afterok), or ""; met says that Slurm already read
// it COMPLETED this poll: the order is on record (Submission.After) but
// sbatch is asked for no dependency, which it would refuse once the job
// left slurmctld (MinJobAge) at the cost of a refusal, a look-up and a
// second sbatch (a train array asks none of its authors for the same
// reason). with is what the decision to submit records besides (the
// author's verified record before train): it goes into the ledger with
// the intent, one save.
func (sb *submitter) submit(ctx context.Context, e *ledger.Entry, stage stages.Stage, after string, met bool, with change) error {
	sub := e.Jobs[stage]
	if sub != nil && (sub.JobID != "" || !with.empty()) {
		// Nothing to submit, or a look-up first: what the decision
		// records goes on its own.
		if !with.empty() {
			if err := sb.entries.apply(e, with); err != nil {
				return err
			}
			with = change{}
		}
		if sub.JobID != "" {
			return nil
		}
	}
	if sub != nil {
		adopted, err := sb.adopt(ctx, e, stage)
		if err != nil || adopted {
			return err
		}
	}
	sub = &ledger.Submission{Intent: sb.now().UTC(), Attempt: e.AttemptNumber(stage), After: after}
	if retired := e.RetiredJobs(stage); len(retired) > 0 {
		// A crash after a retry was recorded may have kept its scancel
		// from running, and Slurm could still rerun a retired job: never
		// two attempts at once.
		if err := sb.slurm.Cancel(ctx, retired); err != nil {
			return fmt.Errorf("episode %s: cancel the retired %s jobs %s before attempt %d: %w", e.Episode, stage, strings.Join(retired, ", "), sub.Attempt, err)
		}
	}
	// The intent, on record before sbatch (change: the exception).
	with.stage, with.intent = stage, sub
	if err := sb.entries.apply(e, with); err != nil {
		return err
	}
	req := submitRequest(e, stage, after)
	if met {
		req.AfterOK = nil
	}
	res, err := sb.submitRemote(ctx, e, stage, req)
	if err != nil && req.AfterOK != nil && dependencyGone(err) {
		// sbatch refused the dependency, so no job was made. Either the
		// job waited for has ended and left slurmctld's memory (MinJobAge),
		// or (Slurm 23.02.0 to 23.11.6) it is a federated job that runs on
		// another cluster of the federation: the same words. Only a job
		// that Slurm says COMPLETED lets the stage go without it: the
		// order afterok guarantees then holds already.
		if cerr := sb.parentCompleted(ctx, after); cerr != nil {
			sb.forgetIntent(e, stage, sub)
			return fmt.Errorf("episode %s: submit %s: %w; not submitted without the dependency: %w", e.Episode, stage, err, cerr)
		}
		sb.logf("%s: %s: job %s is no longer known to slurmctld and completed; submitting without the dependency", e.Episode, stage, after)
		req.AfterOK = nil
		res, err = sb.submitRemote(ctx, e, stage, req)
	}
	if err != nil {
		if errors.Is(err, remote.ErrOutcomeUnknown) {
			if adopted, aerr := sb.adopt(ctx, e, stage); aerr == nil && adopted {
				return nil
			}
		}
		if slurm.SubmitNotCreated(err) {
			// Refused before slurmctld took it in (the user's rate limit):
			// no job to look for; the next try submits afresh, without
			// the look-up (a sacct and a squeue) an intent left would cost.
			sb.forgetIntent(e, stage, sub)
		}
		return fmt.Errorf("episode %s: submit %s: %w", e.Episode, stage, err)
	}
	// The id, on record after it.
	if err := sb.entries.apply(e, change{stage: stage, job: &submittedJob{id: res.JobID, at: sb.now().UTC()}}); err != nil {
		return err
	}
	for _, w := range res.Warnings {
		sb.logf("%s: %s: sbatch: %s", e.Episode, stage, w)
	}
	sb.logf("%s: submitted %s as job %s", e.Episode, stage, res.JobID)
	return nil
}

// forgetIntent drops stage's submission intent sub after an sbatch that
// made no job (slurm.SubmitNotCreated), so that the next try does not look
// for one. A failed save keeps the intent: the next try then looks.
func (sb *submitter) forgetIntent(e *ledger.Entry, stage stages.Stage, sub *ledger.Submission) {
	if e.Jobs[stage] != sub || sub.JobID != "" {
		return
	}
	if err := sb.entries.apply(e, change{stage: stage, withdraw: true}); err != nil {
		sb.logf("%s: %v", e.Episode, err)
	}
}

// submitRequest is stage's sbatch: its staged script, job name and
// --comment tag, after the job it waits for (afterok), if any.
func submitRequest(e *ledger.Entry, stage stages.Stage, after string) slurm.SubmitRequest {
	req := slurm.SubmitRequest{
		ScriptPath:       path.Join(e.Dir, stages.Script(stage)),
		Name:             stages.JobName(e.Episode, stage),
		Comment:          stages.AttemptComment(e.Episode, stage, e.AttemptNumber(stage)),
		KillOnInvalidDep: true,
	}
	if after != "" {
		req.AfterOK = []string{after}
	}
	return req
}

// AdoptSubmitSlack is how much earlier than the intent (the tool's clock)
// a job's submit time (slurmctld's clock) may be and still be adopted.
const AdoptSubmitSlack = 2 * time.Minute

// ImpostorError is a job found on the cluster under a stage's job name or
// --comment tag that is not the one the tool submitted: its batch script
// is not the one staged, it belongs to another user, or it was submitted
// before the tool meant to submit the stage. The policy runs as the user
// and can sbatch such a job; adopting it would score its record.
type ImpostorError struct {
	Episode string
	Stage   stages.Stage
	// IDs are the impostor jobs; Why says what gave each away.
	IDs []string
	Why []string
}

func (e *ImpostorError) Error() string {
	return fmt.Sprintf("episode %s: %s: job(s) %s under the stage's name or tag are not the tool's: %s",
		e.Episode, e.Stage, strings.Join(e.IDs, ", "), strings.Join(e.Why, "; "))
}

// adopt looks for stage's job on the cluster (after a crash between the
// intent and the id) and records it when found. A job is adopted only if
// it proves to be the one submitted: its batch script has the sha256 the
// ledger saved at staging, it is the cluster user's, and it was submitted
// after the intent. Any other job under the stage's name or tag is an
// *ImpostorError.
func (sb *submitter) adopt(ctx context.Context, e *ledger.Entry, stage stages.Stage) (bool, error) {
	name, tag := stages.JobName(e.Episode, stage), stages.AttemptComment(e.Episode, stage, e.AttemptNumber(stage))
	// The stage's earlier attempts have its job name too: they are known.
	retired := e.RetiredJobs(stage)
	// Only jobs that existed since the intent (less the clocks' slack) can
	// be the submission: sacct reads that window, not a week of history.
	within := sb.now().Sub(e.Jobs[stage].Intent) + AdoptSubmitSlack + time.Minute
	if e.Jobs[stage].Intent.IsZero() {
		within = 0
	}
	// A task of a job array (ledger.ArrayTask) is found by the array's
	// name or tag, and proven by the array's script; a job under the
	// stage's own name or tag must prove itself by the stage's script.
	arr := e.Jobs[stage].Array
	ofArray := func(j slurm.JobInfo) bool { return arr != nil && (j.Name == arr.Name || j.Comment == arr.Comment) }
	found, err := sb.slurm.FindWithin(ctx, within, func(j slurm.JobInfo) bool {
		return (j.Name == name || j.Comment == tag || ofArray(j)) && !slices.Contains(retired, j.ID)
	})
	if err != nil {
		return false, fmt.Errorf("episode %s: look for the %s job before submitting it again: %w", e.Episode, stage, err)
	}
	if len(found) == 0 {
		// Not found by name or tag: the manifest on the cluster may
		// still name a job that Slurm forgot before slurmdbd recorded it.
		j, err := sb.manifestJob(ctx, e, stage, retired)
		if err != nil || j == nil {
			return false, err
		}
		found = []slurm.JobInfo{*j}
	}
	var genuine []slurm.JobInfo
	imp := &ImpostorError{Episode: e.Episode, Stage: stage}
	arrays := map[string]string{} // an array's job id: why it is not ours ("": it is)
	for _, j := range found {
		var why string
		if ofArray(j) {
			a, task, ok := slurm.SplitTaskID(j.ID)
			if !ok {
				imp.IDs, imp.Why = append(imp.IDs, j.ID), append(imp.Why, fmt.Sprintf("job %s: under array %s's name or tag, but not a task of a job array", j.ID, arr.Name))
				continue
			}
			w, known := arrays[a]
			if !known {
				if w, err = sb.provenance(ctx, e, stage, j, arr.ScriptSHA256); err != nil {
					return false, err
				}
				arrays[a] = w
			}
			if w == "" && task != arr.Task {
				continue // another episode's task of the same array
			}
			why = w
		} else if why, err = sb.provenance(ctx, e, stage, j, e.Scripts[stage]); err != nil {
			return false, err
		}
		if why != "" {
			imp.IDs, imp.Why = append(imp.IDs, j.ID), append(imp.Why, fmt.Sprintf("job %s: %s", j.ID, why))
			continue
		}
		genuine = append(genuine, j)
	}
	if len(imp.IDs) > 0 {
		return false, imp
	}
	if len(genuine) > 1 {
		var ids []string
		for _, j := range genuine {
			ids = append(ids, j.ID)
		}
		return false, fmt.Errorf("episode %s: %d %s jobs on the cluster (%s); expected one: cancel the extra ones with scancel, then resume",
			e.Episode, len(genuine), stage, strings.Join(ids, ", "))
	}
	if err := sb.entries.apply(e, change{stage: stage, job: &submittedJob{id: genuine[0].ID, at: sb.now().UTC(), adopted: true}}); err != nil {
		return false, err
	}
	sb.logf("%s: adopted %s job %s found on the cluster (its batch script, user and submit time check out)", e.Episode, stage, genuine[0].ID)
	return true, sb.stager.writeManifest(ctx, e)
}

// provenance says why job j is not the stage's job the tool submitted, or
// "" when it is.
func (sb *submitter) provenance(ctx context.Context, e *ledger.Entry, stage stages.Stage, j slurm.JobInfo, want string) (string, error) {
	if want == "" {
		return "", fmt.Errorf("episode %s: the ledger has no batch-script sha256 for %s: cannot tell its job from an impostor", e.Episode, stage)
	}
	user, _, err := sb.account.clusterUser(ctx)
	if err != nil {
		return "", err
	}
	if j.User != "" && j.User != user {
		return fmt.Sprintf("it belongs to user %q, not %q", j.User, user), nil
	}
	if sub := e.Jobs[stage]; sub != nil && !j.Submit.IsZero() && j.Submit.Before(sub.Intent.Add(-AdoptSubmitSlack)) {
		return fmt.Sprintf("it was submitted at %s, before the tool meant to submit the stage (%s)",
			j.Submit.UTC().Format(time.RFC3339), sub.Intent.UTC().Format(time.RFC3339)), nil
	}
	script, err := sb.slurm.BatchScript(ctx, j.ID)
	if err != nil {
		return "", fmt.Errorf("episode %s: %s job %s: read its batch script to prove it is the tool's: %w", e.Episode, stage, j.ID, err)
	}
	sum := sha256.Sum256(script)
	if got := hex.EncodeToString(sum[:]); got != want {
		staged := stages.Script(stage)
		if a := e.Jobs[stage].Array; a != nil && want == a.ScriptSHA256 {
			staged = a.Script
		}
		return fmt.Sprintf("its batch script has sha256 %s, the staged %s has %s", got, staged, want), nil
	}
	return "", nil
}

// errBatchDeadline is the cause of a batch command's context ending at
// its deadline (runBatch).
var errBatchDeadline = errors.New("episode: batch command deadline")

// ErrDependencyUnconfirmed is matched by the error of a stage whose sbatch
// refused its afterok dependency ("Job dependency problem") while Slurm
// does not say that the job it waits for COMPLETED: the stage is not
// submitted (no job was made), and is tried again later.
var ErrDependencyUnconfirmed = errors.New("the job it waits for is not known to have completed")

// parentCompleted asks Slurm (sacct, then squeue) whether job id, which a
// stage waits for (afterok), COMPLETED; nil when it did. Otherwise the
// error matches ErrDependencyUnconfirmed and says what Slurm said: a job
// that reads REVOKED, or that still runs or waits, is a federated job on
// another cluster of a federation (Slurm 23.02.0 to 23.11.6 refuse a
// dependency on it in the same words as on a job gone past MinJobAge), and
// the error names members:, the config key that sends every command to
// one member cluster.
func (sb *submitter) parentCompleted(ctx context.Context, id string) error {
	infos, err := sb.slurm.Query(ctx, []string{id})
	if err != nil {
		return fmt.Errorf("%w: asking Slurm about job %s: %w", ErrDependencyUnconfirmed, id, err)
	}
	j := infos[id]
	const federation = "Slurm 23.02.0 to 23.11.6 refuse a dependency on a federated job that runs on another cluster of the federation: " +
		"name the federation's clusters in the config (a clusters: entry with members:) so that each episode's jobs go to one of them"
	switch {
	case j.Completed():
		return nil
	case j.Revoked():
		return fmt.Errorf("%w: job %s reads %s here, a copy of a federated job that another cluster runs; %s", ErrDependencyUnconfirmed, id, j.State.Raw, federation)
	case j.State.Class == slurm.Pending || j.State.Class == slurm.Running:
		return fmt.Errorf("%w: job %s is %s; %s", ErrDependencyUnconfirmed, id, j.State.Raw, federation)
	case j.State.Class == slurm.Failed:
		return fmt.Errorf("%w: job %s ended %s", ErrDependencyUnconfirmed, id, j.State.Raw)
	}
	return fmt.Errorf("%w: Slurm has no state for job %s (%s); trying again later", ErrDependencyUnconfirmed, id, j.Source)
}

// dependencyGone reports an sbatch refusal of a dependency ("Job
// dependency problem"): on a job slurmctld no longer knows, or (Slurm
// 23.02.0 to 23.11.6) on a federated job another cluster runs.
func dependencyGone(err error) bool {
	var ce *remote.CommandError
	return errors.As(err, &ce) && strings.Contains(ce.Stderr, "Job dependency problem")
}
