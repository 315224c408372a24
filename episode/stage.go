package episode

// Staging in one stream. Episodes' trees (about 20 files, 50–100 KB each),
// their secrets.env and manifests reach the cluster as one tar stream on
// the stdin of one command (batchScript), gzipped, which checks the files the
// config names (preflight), unpacks the stream into a fresh 0700
// directory beside the episodes', syncs it (syncfs), renames each episode's
// directory into place whole (an episode directory exists only complete:
// there is no partial tree for resume to finish) and, for a submit, runs
// each author's sbatch and records its job id in the manifest. Over SSH
// that is one session, two round trips after the handshake, for one
// episode (submit) or many (submit --count), where staging file by file
// over SFTP took about a hundred per episode.
//
// Later submissions (train, eval) run sbatch and rewrite the manifest with
// the new job id in one command too (submitScript).

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha256"
	_ "embed"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"path"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nemorl/nemorl-slurm/configs"
	"github.com/nemorl/nemorl-slurm/internal/shell"
	"github.com/nemorl/nemorl-slurm/ledger"
	"github.com/nemorl/nemorl-slurm/remote"
	"github.com/nemorl/nemorl-slurm/slurm"
	"github.com/nemorl/nemorl-slurm/stages"
	"github.com/nemorl/nemorl-slurm/templates"
)

// Exit statuses of batchScript.
const (
	stageExitPreflight = 90 // a file the config names is missing
	stageExitFailed    = 92 // mkdir, mktemp or tar failed
)

// jobIDMarker stands for the job id in a manifest written before sbatch ran.
const jobIDMarker = "@NEMORL_JOB_ID@"

// MaxBatch bounds the episodes staged by one command (the stream is built
// in memory, about 100 KB per episode).
const MaxBatch = 50

// batchScript stages episodes and submits their author jobs in one
// command:
//
//	sh -c batchScript sh PARENT MODE GAP NCHECKS KEY=PATH… NEPS {EP NAME COMMENT SCRIPT}… [SBATCH ARGV…]
//
// with the episodes' trees as one tar stream on stdin (EP/… for each, and
// .next/EP: the manifest, on one line, with @NEMORL_JOB_ID@ where the
// author's job id goes). MODE is "new" (an episode directory that exists
// is refused) or "restage" (a complete one, with its manifest, is kept).
// The trees are unpacked into a fresh 0700 directory beside the episodes',
// synced (syncfs), and each renamed into place whole (one mv for all).
// Then, when SBATCH ARGV (the options common to every episode) is given,
// each episode's sbatch runs (four at a time; with a GAP other than "0",
// one at a time and GAP seconds apart: cluster.submit_rate) with its job
// name, comment and script, and its manifest gets the job id.
// It prints one line per event, tab-separated: "nemorl-batch EP staged",
// "… exists", "… failed", "… sbatch RC", "… out LINE" (sbatch's output).
// Every process costs (a login node under load, a sandbox): the script
// starts as few as it can: about two per episode (sbatch and its subshell).
//
// It is scripts/batch.sh.
//
//go:embed scripts/batch.sh
var batchScript string

// submitScript: sh -c submitScript sh MANIFEST PRE POST SBATCH ARGV…:
// sbatch, and the manifest rewritten in place with the new job id (PRE id
// POST), in one command.
//
// It is scripts/submit.sh.
//
//go:embed scripts/submit.sh
var submitScript string

// preflightChecks maps config keys to the cluster files they name that the
// jobs need: the three images (with a container runtime) and the stages'
// replacement commands given by absolute path.
func (d *Driver) preflightChecks() map[string]string {
	cfg := d.Config
	check := map[string]string{}
	if cfg.Runtime.Kind != configs.RuntimeNone {
		check["runtime.images.author"] = cfg.Runtime.Images.Author
		check["runtime.images.train"] = cfg.Runtime.Images.Train
		check["runtime.images.eval"] = cfg.Runtime.Images.Eval
	}
	for key, argv := range map[string][]string{"stages.author.command[0]": cfg.Stages.Author.Command,
		"stages.train.command[0]": cfg.Stages.Train.Command, "stages.eval.command[0]": cfg.Stages.Eval.Command} {
		if len(argv) > 0 && path.IsAbs(argv[0]) && cfg.Runtime.Kind == configs.RuntimeNone {
			check[key] = argv[0]
		}
	}
	return check
}

// scriptHashes is the sha256 of each stage's sbatch script in tree.
func scriptHashes(tree *templates.Tree) map[stages.Stage]string {
	out := map[stages.Stage]string{}
	for _, s := range stages.All {
		f, _ := tree.Lookup(stages.Script(s))
		sum := sha256.Sum256(f.Data)
		out[s] = hex.EncodeToString(sum[:])
	}
	return out
}

// scriptTimeLimits are the stages' time limits as their scripts ask for
// them (#SBATCH --time=HH:MM:SS), in the whole minutes Slurm keeps
// (rounded up); a stage whose script gives none is left out.
func scriptTimeLimits(tree *templates.Tree) map[stages.Stage]int {
	out := map[stages.Stage]int{}
	for _, s := range stages.All {
		f, _ := tree.Lookup(stages.Script(s))
		for line := range strings.SplitSeq(string(f.Data), "\n") {
			v, ok := strings.CutPrefix(line, "#SBATCH --time=")
			if !ok {
				continue
			}
			var h, m, sec int
			if n, err := fmt.Sscanf(v, "%d:%d:%d", &h, &m, &sec); err == nil && n == 3 {
				out[s] = h*60 + m + (sec+59)/60
			}
			break
		}
	}
	return out
}

// secretsData is secrets.env: the only place the policy API key is written.
func (d *Driver) secretsData(e *ledger.Entry) ([]byte, error) {
	key := d.Config.PolicyModel.APIKey.Reveal()
	if key == "" {
		return nil, fmt.Errorf("episode %s: policy_model.api_key: %s is not set in the environment: staging the episode needs the key", e.Episode, d.Config.SecretUnset)
	}
	if strings.ContainsAny(key, "\x00\r\n") {
		return nil, fmt.Errorf("episode %s: policy_model.api_key holds a newline or NUL", e.Episode)
	}
	return []byte("NEMORL_POLICY_API_KEY=" + key + "\n"), nil
}

func preflightErr(reason string) error {
	switch reason {
	case "no such file or directory":
		return fs.ErrNotExist
	case "permission denied":
		return fs.ErrPermission
	}
	return errors.New(reason)
}

// lastLine returns the rest of the last line of b that starts with prefix.
func lastLine(b []byte, prefix string) string {
	var out string
	for _, l := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(l, prefix); ok {
			out = rest
		}
	}
	return out
}

// manifestAround is the manifest with stage's job id pending, split
// around where the id goes.
func (d *Driver) manifestAround(e *ledger.Entry, stage stages.Stage) (pre, post string, err error) {
	b, err := d.manifest(e, stage)
	if err != nil {
		return "", "", err
	}
	pre, post, ok := strings.Cut(string(b), jobIDMarker)
	if !ok {
		return "", "", fmt.Errorf("episode %s: manifest: no place for the %s job id", e.Episode, stage)
	}
	return pre, post, nil
}

// manifest renders the manifest of e; pending, when set, is a stage whose
// job id is not known yet: it appears as jobIDMarker for the script to
// fill in.
func (d *Driver) manifest(e *ledger.Entry, pending stages.Stage) ([]byte, error) {
	rt := d.Config.Runtime
	m := Manifest{
		Episode: e.Episode, Created: e.Created, Version: d.Version, Host: e.Host, Dir: e.Dir,
		Isolation: e.Isolation, ConfigSHA256: e.ConfigSHA256, Scripts: e.Scripts, Jobs: map[stages.Stage]string{},
	}
	if rt.Kind != configs.RuntimeNone {
		m.Images = map[stages.Stage]string{stages.Author: rt.Images.Author, stages.Train: rt.Images.Train, stages.Eval: rt.Images.Eval}
		m.Digests = map[stages.Stage]string{}
		for stage, digest := range map[stages.Stage]string{stages.Author: rt.Digests.Author, stages.Train: rt.Digests.Train, stages.Eval: rt.Digests.Eval} {
			if digest != "" {
				m.Digests[stage] = digest
			}
		}
	}
	for s, sub := range e.Jobs {
		if sub.JobID != "" {
			m.Jobs[s] = sub.JobID
		}
	}
	if pending != "" {
		m.Jobs[pending] = jobIDMarker
	}
	for s := range e.Retried {
		if m.Retried == nil {
			m.Retried = map[stages.Stage][]string{}
		}
		m.Retried[s] = e.RetiredJobs(s)
	}
	b, err := json.Marshal(m) // one line: batchScript reads it with read -r
	if err != nil {
		return nil, fmt.Errorf("episode %s: manifest: %w", e.Episode, err)
	}
	return append(b, '\n'), nil
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

// pending is an episode between its ledger entry and its command's end.
type pending struct {
	i    int
	e    *ledger.Entry
	tree *templates.Tree
	req  slurm.SubmitRequest
	lock *ledger.Lock
	// created: its ledger entry was written.
	created bool
}

// Submit submits several episodes as SubmitOne submits one, staging and
// submitting up to MaxBatch of them per command. Each gets its own ledger
// entry, written with the author's intent before the command runs, so a
// crash at any point leaves every episode for resume (adopted or staged
// again). A preflight refusal refuses them all; nothing of them stays.
func (d *Driver) Submit(ctx context.Context, specs []Spec) []Submitted {
	out := make([]Submitted, len(specs))
	var ready []*pending
	for i, s := range specs {
		p, err := d.prepare(s)
		if err != nil {
			out[i] = Submitted{Entry: entryOf(p), Err: err}
			continue
		}
		p.i = i
		ready = append(ready, p)
	}
	// The ledger entries, each with its intent, on disk before anything
	// runs on the cluster (in parallel: each is a few fsyncs).
	d.parallel(ready, func(p *pending) error {
		if err := d.Ledger.Create(p.e, specs[p.i].Prompt); err != nil {
			return err
		}
		p.created = true
		lock, ok, err := d.Ledger.TryLock(p.e.Episode)
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
	var live []*pending
	for _, p := range ready {
		if out[p.i].Err == nil {
			live = append(live, p)
		}
	}
	// Two batches at once: one stages while the other's sbatch waits on
	// slurmctld; one at a time under cluster.submit_rate, whose pace the
	// batch script keeps.
	var wg sync.WaitGroup
	sem := make(chan struct{}, 2)
	if d.submitGate() != nil {
		sem = make(chan struct{}, 1)
	}
	for len(live) > 0 {
		n := min(len(live), MaxBatch)
		batch := live[:n]
		live = live[n:]
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			d.runBatch(ctx, batch, out)
		}()
	}
	wg.Wait()
	return out
}

func entryOf(p *pending) *ledger.Entry {
	if p == nil {
		return nil
	}
	return p.e
}

// parallel runs f for every p, a few at once; fail receives each error.
func (d *Driver) parallel(ps []*pending, f func(*pending) error, fail func(*pending, error)) {
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

// prepare renders one episode and makes its entry, with the author's
// intent, in memory.
func (d *Driver) prepare(s Spec) (*pending, error) {
	id := s.ID
	if id == "" {
		id = stages.NewID(d.now())
	}
	if !stages.ValidEpisode(id) {
		return nil, fmt.Errorf("%w %q: want letters, digits and ._- only", ledger.ErrBadEpisodeID, id)
	}
	endpoint := d.pickPolicyBaseURL()
	tree, err := d.render(id, s.Prompt, endpoint)
	if err != nil {
		return nil, err
	}
	now := d.now().UTC()
	e := &ledger.Entry{
		Episode: id, Created: now, ConfigPath: d.ConfigPath, ConfigSHA256: d.ConfigSHA256,
		Host: d.Host.Name(), Cluster: d.Config.ClusterName, Dir: tree.Dir, Isolation: tree.Isolation, Jobs: map[stages.Stage]*ledger.Submission{stages.Author: {Intent: now}},
		PolicyBaseURL: endpoint, Scripts: scriptHashes(tree), TimeLimitMinutes: scriptTimeLimits(tree),
	}
	if len(d.Labels) > 0 {
		e.Labels = maps.Clone(d.Labels)
	}
	e.Overrides = slices.Clone(d.Overrides)
	if _, err := d.secretsData(e); err != nil {
		return nil, err
	}
	p := &pending{e: e, tree: tree, req: d.submitRequest(e, stages.Author, "")}
	if _, err := slurm.SbatchArgs(p.req); err != nil {
		return nil, err
	}
	return p, nil
}

// runBatch stages and submits ps in one command and records each result.
func (d *Driver) runBatch(ctx context.Context, ps []*pending, out []Submitted) {
	res, err := d.batchCommand(ctx, ps, "new", true)
	var pe *PreflightError
	for _, p := range ps {
		r := res[p.e.Episode]
		switch {
		case errors.As(err, &pe) || (err == nil && r.exists):
			// Refused before anything of it was written on the cluster.
			if err == nil {
				err1 := fmt.Errorf("episode %s %w: %s on %s; refusing to overwrite it", p.e.Episode, ledger.ErrEpisodeExists, p.e.Dir, d.Host.Name())
				d.discard(p, out, err1)
				continue
			}
			d.discard(p, out, err)
		case err != nil && errors.Is(err, remote.ErrOutcomeUnknown):
			// The command may have staged and submitted: look.
			if adopted, aerr := d.adopt(ctx, p.e, stages.Author); aerr == nil && adopted {
				p.e.Staged = true
				d.settle(p, out, d.Ledger.Save(p.e))
				continue
			}
			d.settle(p, out, fmt.Errorf("episode %s: submit %s: %w", p.e.Episode, stages.Author, err))
		case err != nil:
			d.settle(p, out, fmt.Errorf("episode %s: submit %s: %w", p.e.Episode, stages.Author, err))
		case !r.staged:
			d.settle(p, out, fmt.Errorf("episode %s: stage %s on %s: the directory could not be put in place", p.e.Episode, p.e.Dir, d.Host.Name()))
		case r.sbatchErr != nil && d.DiscardNotCreated && slurm.SubmitNotCreated(r.sbatchErr):
			// No job was made and the caller places the episode
			// elsewhere: nothing of it stays, its staged directory
			// neither (best effort: the id is not used here again).
			if rerr := d.removeTree(ctx, p.e.Dir); rerr != nil {
				d.logf("%s: removing %s on %s: %v", p.e.Episode, p.e.Dir, d.Host.Name(), rerr)
			}
			d.discard(p, out, fmt.Errorf("episode %s: submit %s: %w", p.e.Episode, stages.Author, r.sbatchErr))
		case r.sbatchErr != nil:
			p.e.Staged = true
			if slurm.SubmitNotCreated(r.sbatchErr) {
				delete(p.e.Jobs, stages.Author) // no job made: the retry submits without a look-up
			}
			if serr := d.Ledger.Save(p.e); serr != nil {
				d.settle(p, out, serr)
				continue
			}
			d.settle(p, out, fmt.Errorf("episode %s: submit %s: %w", p.e.Episode, stages.Author, r.sbatchErr))
		default:
			sub := p.e.Jobs[stages.Author]
			sub.JobID, sub.Submitted = r.job.JobID, d.now().UTC()
			p.e.Staged = true
			for _, w := range r.job.Warnings {
				d.logf("%s: %s: sbatch: %s", p.e.Episode, stages.Author, w)
			}
			d.logf("%s: staged %s on %s; submitted %s as job %s", p.e.Episode, p.e.Dir, d.Host.Name(), stages.Author, r.job.JobID)
			out[p.i] = Submitted{Entry: p.e}
		}
	}
	// The job ids, on disk.
	var saved []*pending
	for _, p := range ps {
		if out[p.i].Err == nil && out[p.i].Entry != nil {
			saved = append(saved, p)
		}
	}
	d.parallel(saved, func(p *pending) error { return d.Ledger.Save(p.e) }, func(p *pending, err error) { d.settle(p, out, err) })
	for _, p := range saved {
		if out[p.i].Err == nil {
			out[p.i].Lock = p.lock
		}
	}
}

// settle ends p with err (nil: done), the entry kept for resume.
func (d *Driver) settle(p *pending, out []Submitted, err error) {
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
func (d *Driver) discard(p *pending, out []Submitted, err error) {
	if derr := d.Ledger.Discard(p.e.Episode); derr != nil {
		d.logf("%s: %v", p.e.Episode, derr)
	}
	if p.lock != nil {
		p.lock.Unlock()
		p.lock = nil
	}
	out[p.i] = Submitted{Err: err}
}

// batchResult is what batchScript said of one episode.
type batchResult struct {
	staged, exists bool
	job            slurm.SubmitResult
	sbatchErr      error
}

// batchCommand runs batchScript for ps (mode "new" or "restage"), with the
// authors' sbatch when submit is set, and parses what it printed.
func (d *Driver) batchCommand(ctx context.Context, ps []*pending, mode string, submit bool) (map[string]*batchResult, error) {
	if len(ps) == 0 {
		return nil, nil
	}
	parent := path.Dir(ps[0].e.Dir)
	// gzip at its fastest: the scripts shrink about sixfold, for about
	// half a millisecond per episode here.
	var buf bytes.Buffer
	zw, _ := gzip.NewWriterLevel(&buf, gzip.BestSpeed)
	tw := tar.NewWriter(zw)
	gap := "0"
	if submit {
		if g := d.submitGate(); g != nil {
			// The batch's sbatch are paced on the cluster, gap apart;
			// their starts are taken here, so that train and eval
			// submissions wait behind them.
			if err := sleepCtx(ctx, time.Until(g.reserve(time.Now(), len(ps)))); err != nil {
				return nil, err
			}
			defer func() { g.ranUntil(time.Now()) }()
			gap = strconv.FormatFloat(g.gap.Seconds(), 'f', 3, 64)
		}
	}
	argv := []string{"sh", "-c", batchScript, "sh", parent, mode, gap}
	if mode == "new" {
		checks := d.preflightChecks()
		keys := make([]string, 0, len(checks))
		for k := range checks {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		argv = append(argv, strconv.Itoa(len(keys)))
		for _, k := range keys {
			argv = append(argv, k+"="+checks[k])
		}
	} else {
		argv = append(argv, "0")
	}
	argv = append(argv, strconv.Itoa(len(ps)))
	for _, p := range ps {
		if path.Dir(p.e.Dir) != parent {
			return nil, fmt.Errorf("episode %s: %s is not in %s with the others of its batch", p.e.Episode, p.e.Dir, parent)
		}
		if err := d.addToBundle(tw, p.e, p.tree); err != nil {
			return nil, err
		}
		argv = append(argv, p.e.Episode, p.req.Name, p.req.Comment, p.req.ScriptPath)
	}
	if err := errors.Join(tw.Close(), zw.Close()); err != nil {
		return nil, fmt.Errorf("episode %s: bundle: %w", ps[0].e.Episode, err)
	}
	var common []string
	if submit {
		req := ps[0].req
		req.Name, req.Comment, req.ScriptPath = "", "", "/"
		args, err := slurm.SbatchArgs(req)
		if err != nil {
			return nil, err
		}
		common = args[:len(args)-1] // without the script
		argv = append(argv, common...)
	}
	label := "stage"
	if submit {
		label = "stage+sbatch"
	}
	res, err := d.Host.Run(ctx, remote.Command{Argv: argv, Stdin: &buf, Label: label})
	var ce *remote.CommandError
	if errors.As(err, &ce) && res != nil {
		switch ce.ExitStatus {
		case stageExitPreflight:
			f := strings.Split(strings.TrimSpace(lastLine(res.Stderr, "nemorl-stage: preflight\t")), "\t")
			if len(f) == 3 {
				return nil, &PreflightError{Key: f[0], Path: f[1], Host: d.Host.Name(), Err: preflightErr(f[2])}
			}
		case stageExitFailed:
			return nil, fmt.Errorf("stage in %s on %s: %s", parent, d.Host.Name(), remote.TrimStderr(res.Stderr))
		}
		return nil, fmt.Errorf("stage in %s on %s: exit status %d: %s", parent, d.Host.Name(), ce.ExitStatus, remote.TrimStderr(res.Stderr))
	}
	if err != nil {
		return nil, fmt.Errorf("stage in %s on %s: %w", parent, d.Host.Name(), err)
	}
	results, err := parseBatch(res.Stdout)
	if err != nil {
		return nil, fmt.Errorf("stage in %s on %s: %w", parent, d.Host.Name(), err)
	}
	for _, p := range ps {
		r := results[p.e.Episode]
		if r == nil {
			results[p.e.Episode] = &batchResult{}
			continue
		}
		if r.sbatchErr != nil {
			var ce *remote.CommandError
			if errors.As(r.sbatchErr, &ce) {
				ce.Host = d.Host.Name()
				ce.Command = shell.Join(append(append(append([]string(nil), common...), "--job-name="+p.req.Name, "--comment="+p.req.Comment), p.req.ScriptPath))
			}
		}
	}
	return results, nil
}

// parseBatch parses batchScript's output.
func parseBatch(b []byte) (map[string]*batchResult, error) {
	out := map[string]*batchResult{}
	type acc struct {
		rc    int
		lines []string
	}
	sb := map[string]*acc{}
	var order []string
	for _, line := range strings.Split(string(b), "\n") {
		if line == "" {
			continue
		}
		f := strings.SplitN(line, "\t", 4)
		if len(f) < 3 || f[0] != "nemorl-batch" || !stages.ValidEpisode(f[1]) {
			return nil, fmt.Errorf("unexpected output %.80q", line)
		}
		ep := f[1]
		r := out[ep]
		if r == nil {
			r = &batchResult{}
			out[ep] = r
		}
		a := sb[ep]
		if a == nil {
			a = &acc{}
			sb[ep] = a
		}
		switch {
		case f[2] == "staged" && len(f) == 3:
			r.staged = true
		case f[2] == "exists" && len(f) == 3:
			r.exists = true
		case f[2] == "failed" && len(f) == 3:
		case f[2] == "sbatch" && len(f) == 4:
			rc, err := strconv.Atoi(f[3])
			if err != nil || rc < 0 {
				return nil, fmt.Errorf("unexpected output %.80q", line)
			}
			a.rc = rc
			order = append(order, ep)
		case f[2] == "out" && len(f) == 4:
			a.lines = append(a.lines, f[3])
		case f[2] == "out" && len(f) == 3:
		default:
			return nil, fmt.Errorf("unexpected output %.80q", line)
		}
	}
	for _, ep := range order {
		a, r := sb[ep], out[ep]
		text := []byte(strings.Join(a.lines, "\n"))
		if a.rc != 0 {
			r.sbatchErr = &remote.CommandError{Command: "sbatch", ExitStatus: a.rc, Stderr: remote.TrimStderr(text)}
			continue
		}
		job, err := slurm.ParseSbatch(text, nil)
		if err != nil {
			r.sbatchErr = err
			continue
		}
		r.job = job
	}
	return out, nil
}

// addToBundle adds an episode's tree, secrets.env and manifest under
// EP/…, and its manifest to be once the author's job id is known under
// .next/EP.
func (d *Driver) addToBundle(tw *tar.Writer, e *ledger.Entry, tree *templates.Tree) error {
	secrets, err := d.secretsData(e)
	if err != nil {
		return err
	}
	manifest, err := d.manifest(e, "")
	if err != nil {
		return err
	}
	next, err := d.manifest(e, stages.Author)
	if err != nil {
		return err
	}
	files := append([]templates.File(nil), tree.Files...)
	files = append(files, templates.File{Path: SecretsFile, Mode: 0o600, Data: secrets},
		templates.File{Path: ManifestFile, Mode: 0o600, Data: manifest})
	now := d.now()
	add := func(name string, f templates.File) error {
		h := &tar.Header{Name: name, Mode: int64(f.Mode.Perm()), ModTime: now, Format: tar.FormatPAX}
		if f.IsDir() {
			h.Typeflag, h.Name = tar.TypeDir, name+"/"
		} else {
			h.Typeflag, h.Size = tar.TypeReg, int64(len(f.Data))
		}
		if err := tw.WriteHeader(h); err != nil {
			return fmt.Errorf("episode %s: bundle %s: %w", e.Episode, f.Path, err)
		}
		if !f.IsDir() {
			if _, err := tw.Write(f.Data); err != nil {
				return fmt.Errorf("episode %s: bundle %s: %w", e.Episode, f.Path, err)
			}
		}
		return nil
	}
	for _, f := range files {
		if err := add(path.Join(e.Episode, f.Path), f); err != nil {
			return err
		}
	}
	return add(path.Join(".next", e.Episode), templates.File{Path: ".next/" + e.Episode, Mode: 0o600, Data: next})
}

// stageAgain puts an episode's tree on the cluster after a crash before
// its staging was recorded: a complete directory is kept as it is.
func (d *Driver) stageAgain(ctx context.Context, e *ledger.Entry, tree *templates.Tree) error {
	res, err := d.batchCommand(ctx, []*pending{{e: e, tree: tree, req: d.submitRequest(e, stages.Author, "")}}, "restage", false)
	if err != nil {
		return fmt.Errorf("episode %s: %w", e.Episode, err)
	}
	if r := res[e.Episode]; r == nil || !r.staged {
		return fmt.Errorf("episode %s: %s on %s exists but is not a complete episode directory (no manifest.json); move it away and resume", e.Episode, e.Dir, d.Host.Name())
	}
	return nil
}

// submitRemote runs sbatch for req and, in the same command, rewrites the
// manifest with the new job as stage's.
func (d *Driver) submitRemote(ctx context.Context, e *ledger.Entry, stage stages.Stage, req slurm.SubmitRequest) (slurm.SubmitResult, error) {
	sbatch, err := slurm.SbatchArgs(req)
	if err != nil {
		return slurm.SubmitResult{}, err
	}
	pre, post, err := d.manifestAround(e, stage)
	if err != nil {
		return slurm.SubmitResult{}, err
	}
	argv := append([]string{"sh", "-c", submitScript, "sh", path.Join(e.Dir, ManifestFile), pre, post}, sbatch...)
	if g := d.submitGate(); g != nil {
		if err := sleepCtx(ctx, time.Until(g.reserve(time.Now(), 1))); err != nil {
			return slurm.SubmitResult{}, fmt.Errorf("slurm: submit: waiting for cluster.submit_rate: %w", err)
		}
	}
	res, err := d.Host.Run(ctx, remote.Command{Argv: argv, Label: "sbatch"})
	var ce *remote.CommandError
	if errors.As(err, &ce) {
		c := *ce
		c.Command = shell.Join(sbatch)
		if c.Stderr == "" && res != nil {
			c.Stderr = remote.TrimStderr(res.Stderr)
		}
		return slurm.SubmitResult{}, fmt.Errorf("slurm: submit: %w", &c)
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
