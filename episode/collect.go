package episode

import (
	"context"
	"errors"
	"fmt"
	"path"
	"time"

	"github.com/nemorl/nemorl-slurm/configs"
	"github.com/nemorl/nemorl-slurm/ledger"
	"github.com/nemorl/nemorl-slurm/record"
	"github.com/nemorl/nemorl-slurm/remote"
	"github.com/nemorl/nemorl-slurm/rules"
	"github.com/nemorl/nemorl-slurm/slurm"
	"github.com/nemorl/nemorl-slurm/stages"
)

// The engine gathers the facts of an episode (rules.Facts) and does what
// rules.Decide says: it decides nothing itself.

// collector gathers what rules.Decide asks for from the cluster: the
// output files' records, the patch, the eval files, the queue, the
// cluster user's uid; and reads the author's files for serve.
type collector struct {
	host    remote.Host
	slurm   *slurm.Client
	config  *configs.Config
	now     func() time.Time // Driver.now: the Driver's clock at each call
	account *account         // the cluster user, asked once
	// decided, when set, is told of every rules.Decide call (Driver's
	// onDecide: the engine's tests count them).
	decided func(ep string)
}

// TailBytes is how much of the end of a stage's output file the collector
// reads. Every payload prints its record last, followed by one line of the
// batch script.
const TailBytes = 1 << 20

// facts are the episode's facts that need no cluster contact beyond the
// poll's: the ledger's account and Slurm's account of its jobs.
func (c *collector) facts(e *ledger.Entry, infos map[string]slurm.JobInfo, waited map[string]time.Duration) *rules.Facts {
	f := &rules.Facts{
		Episode: e.Episode, Isolated: e.Isolation != configs.RuntimeNone, Requeues: c.config == nil || !c.config.Episodes.NoRequeue,
		Staged: e.Staged, CancelRequested: e.CancelRequested, CancelsIssued: e.CancelsIssued,
		Jobs: map[stages.Stage]slurm.JobInfo{}, TimeLimits: map[stages.Stage]time.Duration{}, Submit: map[stages.Stage]rules.Submit{},
		Waited: waited, Author: e.Author, EvalOutputChecked: e.EvalOutputChecked, Outputs: map[stages.Stage]rules.Output{},
	}
	for _, s := range stages.All {
		if id := e.JobID(s); id != "" {
			j, ok := infos[id]
			if !ok {
				j = slurm.JobInfo{ID: id}
			}
			f.Jobs[s] = j
		}
		if m := e.TimeLimitMinutes[s]; m > 0 {
			f.TimeLimits[s] = time.Duration(m) * time.Minute
		}
	}
	return f
}

// decide runs rules.Decide over f, gathering what it asks for, until it
// decides.
func (c *collector) decide(ctx context.Context, e *ledger.Entry, f *rules.Facts) (rules.Decision, error) {
	for {
		dec := rules.Decide(f)
		if c.decided != nil {
			c.decided(e.Episode)
		}
		if dec.Need == 0 {
			return dec, nil
		}
		if err := c.gather(ctx, e, f, dec.Need); err != nil {
			return dec, err
		}
	}
}

// gather adds the facts Decide asked for.
func (c *collector) gather(ctx context.Context, e *ledger.Entry, f *rules.Facts, need rules.Need) error {
	for _, s := range stages.All {
		if need&rules.NeedOutput(s) != 0 {
			o, err := c.scan(ctx, e, s)
			if err != nil {
				return err
			}
			f.Outputs[s] = o
		}
	}
	if need&rules.NeedPatch != 0 {
		p, err := c.patch(ctx, e, f)
		if err != nil {
			return err
		}
		f.Patch = p
	}
	if need&rules.NeedEvalFiles != 0 {
		ef := &rules.EvalFiles{DirPath: path.Join(e.Dir, string(stages.Eval)), OutPath: path.Join(e.Dir, stages.Output(stages.Eval))}
		// Both at once: one round trip on the SFTP session, not two.
		var dirErr error
		done := make(chan struct{})
		go func() {
			defer close(done)
			ef.Dir, dirErr = c.lstat(ctx, ef.DirPath)
		}()
		var err error
		ef.Out, err = c.lstat(ctx, ef.OutPath)
		<-done
		if err = errors.Join(dirErr, err); err != nil {
			return fmt.Errorf("episode %s: %w", e.Episode, err)
		}
		f.EvalFiles = ef
	}
	if need&rules.NeedQueue != 0 {
		var ids []string
		for _, j := range f.Jobs {
			ids = append(ids, j.ID)
		}
		q, err := c.slurm.Queue(ctx, ids)
		if err != nil {
			return fmt.Errorf("episode %s: %w", e.Episode, err)
		}
		f.Queue = map[stages.Stage]slurm.JobInfo{}
		for s, j := range f.Jobs {
			if qj, ok := q[j.ID]; ok {
				f.Queue[s] = qj
			}
		}
	}
	if need&rules.NeedUID != 0 {
		_, uid, err := c.account.clusterUser(ctx)
		if err != nil {
			return err
		}
		f.UID, f.UIDKnown = uid, true
	}
	return nil
}

// scan inspects stage's output file and finds its one record in the last
// TailBytes, filtered where it lies (readOutput: one command, the change
// time included). A missing file is a missing record. An error means the
// file could not be read (try again later).
func (c *collector) scan(ctx context.Context, e *ledger.Entry, stage stages.Stage) (rules.Output, error) {
	p := path.Join(e.Dir, stages.Output(stage))
	out, err := c.readOutput(ctx, p, TailBytes, true)
	if err != nil {
		return rules.Output{}, fmt.Errorf("episode %s: %s output: %w", e.Episode, stage, err)
	}
	o := rules.Output{Path: p, File: out.fi.file(), Unopenable: out.unopenable, Replaced: out.replaced, Findings: out.findings}
	switch {
	case !o.File.Exists:
		o.RecordErr = &record.Rejection{Stage: record.Stage(stage), Reason: record.ReasonMissingRecord, Offset: -1,
			Detail: "the output file " + p + " does not exist"}
	case !o.File.Regular() || o.Unopenable || o.Replaced:
		// Planted: the rules say so; there is no record to read.
	default:
		o.Record, o.RecordErr = record.ScanLines(record.Stage(stage), out.lines)
		var rj *record.Rejection
		if errors.As(o.RecordErr, &rj) {
			rj.Detail = fmt.Sprintf("%s (in %s)", rj.Detail, p)
		} else if o.RecordErr != nil {
			return rules.Output{}, fmt.Errorf("episode %s: %s output: %w", e.Episode, stage, o.RecordErr)
		}
	}
	return o, nil
}

// patch inspects the author's change.diff and reads it when it is a
// regular file of the size the author record gives, within
// stages.MaxPatchBytes: never more than the size checked (the file could
// change).
func (c *collector) patch(ctx context.Context, e *ledger.Entry, f *rules.Facts) (*rules.Patch, error) {
	p := &rules.Patch{Path: path.Join(e.Dir, stages.PatchFile)}
	fi, err := c.lstat(ctx, p.Path)
	if err != nil {
		return nil, fmt.Errorf("episode %s: %w", e.Episode, err)
	}
	p.File = fi
	a, _ := f.Outputs[stages.Author].Record.(*record.Author)
	if a != nil && fi.Regular() && fi.Size == a.PatchBytes && fi.Size <= stages.MaxPatchBytes && fi.Size > 0 {
		if p.Data, err = c.host.ReadTail(ctx, p.Path, fi.Size); err != nil {
			return nil, fmt.Errorf("episode %s: read %s: %w", e.Episode, p.Path, err)
		}
	}
	return p, nil
}

// outcome is the outcome of verdict v: what every outcome carries (the
// jobs, the attempts, the patch), and what v decided.
func (c *collector) outcome(e *ledger.Entry, infos map[string]slurm.JobInfo, v *rules.Verdict) *rules.Outcome {
	o := c.base(e, infos)
	v.Apply(o)
	return o
}

// base is an outcome with what every outcome carries.
func (c *collector) base(e *ledger.Entry, infos map[string]slurm.JobInfo) *rules.Outcome {
	o := &rules.Outcome{Episode: e.Episode, Isolation: e.Isolation, Dir: e.Dir, Jobs: map[stages.Stage]rules.JobSummary{}, Decided: c.now().UTC()}
	for _, s := range stages.All {
		if id := e.JobID(s); id != "" {
			j, ok := infos[id]
			if !ok {
				j = slurm.JobInfo{ID: id}
			}
			o.Jobs[s] = rules.Summarize(j)
		}
	}
	if e.Author != nil {
		o.PatchSHA256 = e.Author.PatchSHA256
	}
	if len(e.Retried) > 0 || o.Jobs[stages.Train].Runs > 1 || o.Jobs[stages.Eval].Runs > 1 {
		o.Attempts, o.Retried = map[stages.Stage]int{}, e.Retried
		for s := range o.Jobs {
			o.Attempts[s] = e.Attempts(s, infos)
		}
	}
	return o
}
