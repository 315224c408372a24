package episode

// Train and eval as job arrays. In a poll cycle, the episodes whose next
// step (rules.Decide's) is the first submission of train are gathered
// (stageBatch) instead of each running its own sbatch; once every episode
// has been advanced, they are submitted as one train array, then advanced
// again: those whose next step is then eval's first submission, and whose
// train is a task of that array, are submitted as one eval array whose
// task i waits for train's task i (aftercorr): one sbatch per stage for
// up to MaxBatch episodes where each cost one. An episode whose train
// failed has its eval task withdrawn by Slurm (--kill-on-invalid-dep),
// never run; its siblings' tasks go on. A retried stage (attempt 2 on),
// a stage whose intent a crash left, and a batch of one are submitted as
// jobs of their own, as before: a task's retry or cancel never touches
// its siblings. Each task runs exactly its episode's staged script
// (array.go), whose sha256 the array's script holds.

import (
	"bytes"
	"context"
	_ "embed"
	"errors"
	"fmt"
	"os"
	"path"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nemorl/nemorl-slurm/ledger"
	"github.com/nemorl/nemorl-slurm/remote"
	"github.com/nemorl/nemorl-slurm/slurm"
	"github.com/nemorl/nemorl-slurm/stages"
	"github.com/nemorl/nemorl-slurm/templates"
)

// arraySubmitScript writes an array's script and submits it, then the
// manifests of its tasks' episodes with their ids.
//
// It is scripts/array_submit.sh.
//
//go:embed scripts/array_submit.sh
var arraySubmitScript string

// stageBatch gathers, in one poll cycle, the episodes ready for the
// first submission of stage.
type stageBatch struct {
	stage stages.Stage
	// of, for eval: the train array whose tasks the episodes' trains must
	// be (ledger.ArrayTask.Name), each eval task taking its train task's
	// index; "" for train.
	of string

	mu    sync.Mutex
	items []*batchItem
}

// batchItem is one episode of a stageBatch: what its decision records
// with the submission (change), and the job it waits for.
type batchItem struct {
	e     *ledger.Entry
	with  change
	after string
	task  int
}

// take reports whether e's submission of b's stage goes into the batch
// (then added): its first attempt, no intent on record, and for eval its
// train a task of b's train array.
func (b *stageBatch) take(e *ledger.Entry, stage stages.Stage, with change, after string) bool {
	if b == nil || stage != b.stage || e.Jobs[stage] != nil || len(e.Retried[stage]) > 0 || e.CancelRequested != "" {
		return false
	}
	task := -1
	if b.of != "" {
		t := e.Jobs[stages.Train]
		if t == nil || t.Array == nil || t.Array.Name != b.of || t.JobID == "" || len(e.Retried[stages.Train]) > 0 {
			return false
		}
		task = t.Array.Task
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if task < 0 {
		task = len(b.items)
	}
	b.items = append(b.items, &batchItem{e: e, with: with, after: after, task: task})
	return true
}

// arrayFailed is why an array of stage cannot be submitted on this
// cluster (sbatch refused it for good): its episodes go one by one from
// then on.
type arrayFailed struct {
	mu  sync.Mutex
	why map[stages.Stage]string
}

func (a *arrayFailed) get(stage stages.Stage) string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.why[stage]
}

func (a *arrayFailed) set(stage stages.Stage, why string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.why == nil {
		a.why = map[stages.Stage]string{}
	}
	a.why[stage] = why
}

// submitStageArray submits b's episodes as one job array of b's stage;
// after, for eval, is the train array's job id (aftercorr). It returns
// the episodes it did not submit (too few for an array, scripts that ask
// for different resources, the array refused): the caller advances them
// again, one by one. An episode whose intent was saved and whose array's
// sbatch did not say what it made is left to its next advance, which
// looks for its task (adopt) as for any interrupted submission.
func (sb *submitter) submitStageArray(ctx context.Context, b *stageBatch, after string) (arrayName, arrayJob string, rest []*ledger.Entry) {
	if len(b.items) < minArray || sb.failed.get(b.stage) != "" {
		return "", "", b.entries()
	}
	slices.SortFunc(b.items, func(x, y *batchItem) int { return x.task - y.task })
	// The scripts as staged, rendered again (the same, sha256 checked):
	// the array's table pins each. An episode whose script does not
	// render the same (another config's) goes on its own.
	ps := make([]*pending, 0, len(b.items))
	var alone []*ledger.Entry
	kept := b.items[:0]
	for _, it := range b.items {
		e := it.e
		tree, err := sb.stagedTree(e, b.stage)
		if err != nil {
			sb.logf("%s: %s as a job array task: %v: submitted on its own", e.Episode, b.stage, err)
			alone = append(alone, e)
			continue
		}
		ps, kept = append(ps, &pending{e: e, tree: tree}), append(kept, it)
	}
	b.items = kept
	if len(ps) < minArray {
		return "", "", append(alone, b.entries()...)
	}
	parent := path.Dir(ps[0].e.Dir)
	arr, err := renderArrayTasks(parent, b.stage, ps, b.taskIndexes(), sb.stager.version, sb.now())
	if err != nil || arr == nil {
		if err != nil {
			sb.logf("%s array of %d episodes: %v: submitted one by one", b.stage, len(ps), err)
		}
		return "", "", append(alone, b.entries()...)
	}
	// The intents, each with its task, on record before sbatch.
	now := sb.now().UTC()
	var mu sync.Mutex
	var ready []*batchItem
	sb.parallel(ps, func(p *pending) error {
		it := b.item(p.e)
		c := it.with
		c.stage = b.stage
		c.intent = &ledger.Submission{Intent: now, Attempt: p.e.AttemptNumber(b.stage), After: it.after, Array: arr.taskOf(it.task)}
		if err := sb.entries.apply(p.e, c); err != nil {
			return err
		}
		mu.Lock()
		ready = append(ready, it)
		mu.Unlock()
		return nil
	}, func(p *pending, err error) { sb.logf("%s: %v (will retry)", p.e.Episode, err) })
	if len(ready) == 0 {
		return "", "", alone
	}
	slices.SortFunc(ready, func(x, y *batchItem) int { return x.task - y.task })
	req := slurm.SubmitRequest{ScriptPath: arr.path, Name: arr.name, Comment: arr.comment, KillOnInvalidDep: true}
	var tasks []string
	for _, it := range ready {
		tasks = append(tasks, strconv.Itoa(it.task))
	}
	req.Array = strings.Join(tasks, ",")
	if after != "" {
		req.AfterCorr = []string{after}
	}
	res, err := sb.runArraySubmit(ctx, arr, ready, req)
	if err != nil {
		why, refused := slurm.SubmitRefused(err)
		if refused || slurm.SubmitNotCreated(err) || errors.Is(err, errArrayNotWritten) {
			// No job was made: no intent stays to be looked for.
			for _, it := range ready {
				sb.forgetIntent(it.e, b.stage, it.e.Jobs[b.stage])
			}
		}
		if refused {
			sb.failed.set(b.stage, why)
			sb.logf("%s as a job array: sbatch refused it for good (%s): %s jobs go one by one from now on", b.stage, why, b.stage)
			return "", "", append(alone, b.entries()...)
		}
		sb.logf("%s array %s of %d episodes: %v (each is looked for or submitted again at its next poll)", b.stage, arr.id, len(ready), err)
		return "", "", alone
	}
	for _, w := range res.Warnings {
		sb.logf("%s array %s: sbatch: %s", b.stage, arr.id, w)
	}
	at := sb.now().UTC()
	sb.parallel(ps, func(p *pending) error {
		it := b.item(p.e)
		if p.e.Jobs[b.stage] == nil || p.e.Jobs[b.stage].Array == nil {
			return nil // its intent was not saved: not in the array
		}
		return sb.entries.apply(p.e, change{stage: b.stage, job: &submittedJob{id: slurm.TaskID(res.JobID, it.task), at: at}})
	}, func(p *pending, err error) {
		sb.logf("%s: %v (its task is looked for at its next poll)", p.e.Episode, err)
	})
	sb.logf("submitted the %s jobs of %d episodes as job array %s (%s)", b.stage, len(ready), res.JobID, arr.id)
	return arr.name, res.JobID, alone
}

// stagedTree renders e's tree again, as staged: its stage script must
// have the sha256 the ledger recorded at staging.
func (sb *submitter) stagedTree(e *ledger.Entry, stage stages.Stage) (*templates.Tree, error) {
	prompt, err := os.ReadFile(sb.ledger.PromptPath(e.Episode))
	if err != nil {
		return nil, err
	}
	tree, err := sb.stager.render(e.Episode, prompt, e.PolicyBaseURL, time.Duration(e.KillWaitSeconds)*time.Second)
	if err != nil {
		return nil, err
	}
	if got := scriptHashes(tree)[stage]; got != e.Scripts[stage] {
		return nil, fmt.Errorf("its %s renders with sha256 %s here, the ledger has %s (staged under another config)", stages.Script(stage), got, e.Scripts[stage])
	}
	return tree, nil
}

// entries are b's episodes.
func (b *stageBatch) entries() []*ledger.Entry {
	var es []*ledger.Entry
	for _, it := range b.items {
		es = append(es, it.e)
	}
	return es
}

// inArray are b's episodes whose stage submission is a task of the array
// named name.
func (b *stageBatch) inArray(name string) []*ledger.Entry {
	var es []*ledger.Entry
	for _, it := range b.items {
		if sub := it.e.Jobs[b.stage]; sub != nil && sub.Array != nil && sub.Array.Name == name {
			es = append(es, it.e)
		}
	}
	return es
}

// item is e's item of b.
func (b *stageBatch) item(e *ledger.Entry) *batchItem {
	for _, it := range b.items {
		if it.e == e {
			return it
		}
	}
	return nil
}

// taskIndexes are b's items' task indexes, in order.
func (b *stageBatch) taskIndexes() []int {
	out := make([]int, len(b.items))
	for i, it := range b.items {
		out[i] = it.task
	}
	return out
}

// errArrayNotWritten: the array's script could not be written on the
// cluster (array_submit.sh's exit 91); no sbatch ran.
var errArrayNotWritten = errors.New("the job array's script could not be written")

// runArraySubmit writes the array's script and submits it in one command,
// which also writes each episode's manifest with its task's id.
func (sb *submitter) runArraySubmit(ctx context.Context, arr *jobArray, items []*batchItem, req slurm.SubmitRequest) (slurm.SubmitResult, error) {
	sbatch, err := slurm.SbatchArgs(req)
	if err != nil {
		return slurm.SubmitResult{}, err
	}
	var stdin bytes.Buffer
	argv := []string{"sh", "-c", arraySubmitScript, "sh", arr.path, strconv.Itoa(len(items))}
	for _, it := range items {
		m, err := sb.stager.manifest(it.e, arr.stage)
		if err != nil {
			return slurm.SubmitResult{}, err
		}
		stdin.Write(m) // one line
		argv = append(argv, strconv.Itoa(it.task), path.Join(it.e.Dir, ManifestFile))
	}
	stdin.Write(arr.script)
	argv = append(argv, sbatch...)
	return sb.runSbatch(ctx, remote.Command{Argv: argv, Stdin: &stdin, Label: "sbatch"}, sbatch, func(ce *remote.CommandError) error {
		if ce.ExitStatus == 91 {
			return fmt.Errorf("%w: %s on %s", errArrayNotWritten, arr.path, sb.host.Name())
		}
		return nil
	})
}
