package episode

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"path"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nemorl/nemorl-slurm/configs"
	"github.com/nemorl/nemorl-slurm/ledger"
	"github.com/nemorl/nemorl-slurm/remote"
	"github.com/nemorl/nemorl-slurm/slurm"
	"github.com/nemorl/nemorl-slurm/stages"
	"github.com/nemorl/nemorl-slurm/templates"
)

// SecretsFile is the author stage's secrets file, relative to the episode
// directory. It holds one line, NEMORL_POLICY_API_KEY=<key>; the author job
// reads and deletes it.
const SecretsFile = stages.SecretsFile

// ManifestFile is the episode's plan on the cluster.
const ManifestFile = "manifest.json"

// Driver stages, submits, watches and collects episodes of one config on
// one cluster.
type Driver struct {
	Config *configs.Config
	// ConfigPath and ConfigSHA256 name the config file; they go into the
	// ledger and the manifest.
	ConfigPath, ConfigSHA256 string
	Host                     remote.Host
	Slurm                    *slurm.Client
	Ledger                   *ledger.Ledger
	// Version of nemorl-slurm, written into scripts and manifests.
	Version string
	// Logf receives progress lines (stderr); nil discards them.
	Logf func(format string, args ...any)
	// Now is the clock; nil means time.Now.
	Now func() time.Time
	// Labels are given to every episode this driver submits (submit
	// --label); see CheckLabel.
	Labels map[string]string
	// DiscardNotCreated: an episode whose author sbatch made no job (the
	// controller unreachable, its rate limit) is discarded, its staged
	// directory removed, rather than kept for a retry here: serve, over
	// several clusters, places it on another.
	DiscardNotCreated bool
	// Overrides are the --set KEY=VALUE applied to the config file
	// (configs.ApplySets): recorded in every entry submitted.
	Overrides []string

	policyOnce sync.Once
	policyNext atomic.Uint64 // round-robin over policy_model.base_url

	gateOnce sync.Once
	gate     *pacer // cluster.submit_rate; nil: no cap

	uidMu sync.Mutex
	uid   *int   // the cluster user's uid, once asked
	user  string // and name
}

// submitGate is the pace of cluster.submit_rate, nil when there is none.
func (d *Driver) submitGate() *pacer {
	d.gateOnce.Do(func() {
		if r := d.Config.Cluster.SubmitRate; r > 0 {
			d.gate = &pacer{gap: time.Duration(float64(time.Second) / r)}
		}
	})
	return d.gate
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

func (d *Driver) logf(format string, args ...any) {
	if d.Logf != nil {
		d.Logf(format, args...)
	}
}

func (d *Driver) now() time.Time {
	if d.Now != nil {
		return d.Now()
	}
	return time.Now()
}

// SubmitOne creates episode id (a new one when empty): it writes the ledger
// entry, stages the episode's tree, manifest and secrets.env on the cluster,
// and submits the author job. Train and eval are submitted by Watch once
// the author's patch is verified, so an episode without a patch never
// submits them. The returned entry is locked by this process until lock is
// released. An error with a nil entry left nothing behind; with an entry,
// the ledger has it and resume carries it on.
func (d *Driver) SubmitOne(ctx context.Context, id string, prompt []byte) (*ledger.Entry, *ledger.Lock, error) {
	r := d.Submit(ctx, []Spec{{ID: id, Prompt: prompt}})[0]
	return r.Entry, r.Lock, r.Err
}

// PreflightError is a config value that names a file the cluster does not
// have: found before anything is staged or submitted, not an hour later.
type PreflightError struct {
	Key, Path, Host string
	Err             error
}

func (e *PreflightError) Error() string {
	return fmt.Sprintf("%s: %s on %s: %v", e.Key, e.Path, e.Host, e.Err)
}

func (e *PreflightError) Unwrap() error { return e.Err }

// Preflight checks, on the cluster, the files the jobs will need that the
// config names: the three images (with a container runtime) and the
// stages' replacement commands given by absolute path.
func (d *Driver) Preflight(ctx context.Context) error {
	check := d.preflightChecks()
	keys := make([]string, 0, len(check))
	for k := range check {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		fi, err := d.Host.Stat(ctx, check[k])
		switch {
		case errors.Is(err, fs.ErrNotExist) || errors.Is(err, fs.ErrPermission):
			return &PreflightError{Key: k, Path: check[k], Host: d.Host.Name(), Err: err}
		case err != nil:
			return fmt.Errorf("preflight: %s %s: %w", k, check[k], err)
		case fi.IsDir():
			return &PreflightError{Key: k, Path: check[k], Host: d.Host.Name(), Err: errors.New("is a directory")}
		}
	}
	return nil
}

// pickPolicyBaseURL spreads episodes over policy_model.base_url: round
// robin within this process (serve, submit --count), from a random start
// so that separate one-episode processes spread too.
func (d *Driver) pickPolicyBaseURL() string {
	urls := d.Config.PolicyModel.BaseURL
	if len(urls) <= 1 {
		return urls.First()
	}
	d.policyOnce.Do(func() { d.policyNext.Store(rand.Uint64()) })
	return urls[d.policyNext.Add(1)%uint64(len(urls))]
}

func (d *Driver) render(id string, prompt []byte, policyBaseURL string) (*templates.Tree, error) {
	tree, err := templates.Render(d.Config, templates.Input{Episode: id, Prompt: prompt, Version: d.Version, PolicyBaseURL: policyBaseURL})
	if err != nil {
		return nil, fmt.Errorf("episode %s: %w", id, err)
	}
	return tree, nil
}

// stage puts the tree on the cluster in one command (stage.go): a
// complete directory is left as it is; none is staged whole.
func (d *Driver) stage(ctx context.Context, e *ledger.Entry, tree *templates.Tree) error {
	if err := d.stageAgain(ctx, e, tree); err != nil {
		return err
	}
	if e.Scripts == nil {
		e.Scripts = scriptHashes(tree)
	}
	e.Staged = true
	if err := d.Ledger.Save(e); err != nil {
		return err
	}
	d.logf("%s: staged %s on %s", e.Episode, e.Dir, d.Host.Name())
	return nil
}

// Manifest is WORKDIR/EPISODE/manifest.json: what was planned and submitted.
type Manifest struct {
	Episode      string                  `json:"episode"`
	Created      time.Time               `json:"created"`
	Version      string                  `json:"version"`
	Host         string                  `json:"host"`
	Dir          string                  `json:"dir"`
	Isolation    string                  `json:"isolation"`
	ConfigSHA256 string                  `json:"config_sha256"`
	Images       map[stages.Stage]string `json:"images,omitempty"`
	Digests      map[stages.Stage]string `json:"image_digests,omitempty"`
	Scripts      map[stages.Stage]string `json:"scripts_sha256"`
	Jobs         map[stages.Stage]string `json:"jobs"`
	// Retried lists, by stage, the job ids of its earlier attempts.
	Retried map[stages.Stage][]string `json:"retried,omitempty"`
}

// writeManifest (re)writes the manifest from the entry: at staging and
// after every submission.
func (d *Driver) writeManifest(ctx context.Context, e *ledger.Entry) error {
	b, err := d.manifest(e, "")
	if err != nil {
		return err
	}
	if err := d.Host.WriteFile(ctx, path.Join(e.Dir, ManifestFile), b, 0o600); err != nil {
		return fmt.Errorf("episode %s: write %s: %w", e.Episode, ManifestFile, err)
	}
	return nil
}

// submit runs sbatch for stage once, with the crash-safe protocol: the
// intent is saved before sbatch and the job id after. A stage whose intent
// is on record but whose id is not (a crash, or a connection lost during
// sbatch) is first looked up on the cluster by its job name and --comment
// tag, and adopted when found: a stage is never submitted twice. after is
// the job it waits for (afterok), or "".
func (d *Driver) submit(ctx context.Context, e *ledger.Entry, stage stages.Stage, after string) error {
	sub := e.Jobs[stage]
	if sub != nil && sub.JobID != "" {
		return nil
	}
	if sub != nil {
		adopted, err := d.adopt(ctx, e, stage)
		if err != nil || adopted {
			return err
		}
	}
	sub = &ledger.Submission{Intent: d.now().UTC(), Attempt: e.AttemptNumber(stage), After: after}
	if retired := e.RetiredJobs(stage); len(retired) > 0 {
		// A crash after a retry was recorded may have kept its scancel
		// from running, and Slurm could still rerun a retired job: never
		// two attempts at once.
		if err := d.Slurm.Cancel(ctx, retired); err != nil {
			return fmt.Errorf("episode %s: cancel the retired %s jobs %s before attempt %d: %w", e.Episode, stage, strings.Join(retired, ", "), sub.Attempt, err)
		}
	}
	e.Jobs[stage] = sub
	if err := d.Ledger.Save(e); err != nil {
		return err
	}
	req := d.submitRequest(e, stage, after)
	res, err := d.submitRemote(ctx, e, stage, req)
	if err != nil && after != "" && dependencyGone(err) {
		// The job waited for has ended and left slurmctld's memory
		// (MinJobAge); the caller has verified that it completed, so the
		// order afterok guarantees already holds. sbatch failed, so no job
		// was made: submitting again cannot make a second one.
		d.logf("%s: %s: job %s is no longer known to slurmctld; submitting without the dependency (it completed)", e.Episode, stage, after)
		req.AfterOK = nil
		res, err = d.submitRemote(ctx, e, stage, req)
	}
	if err != nil {
		if errors.Is(err, remote.ErrOutcomeUnknown) {
			if adopted, aerr := d.adopt(ctx, e, stage); aerr == nil && adopted {
				return nil
			}
		}
		if slurm.SubmitNotCreated(err) {
			// Refused before slurmctld took it in (the user's rate limit):
			// no job to look for; the next try submits afresh, without
			// the look-up (a sacct and a squeue) an intent left would cost.
			d.forgetIntent(e, stage, sub)
		}
		return fmt.Errorf("episode %s: submit %s: %w", e.Episode, stage, err)
	}
	sub.JobID, sub.Submitted = res.JobID, d.now().UTC()
	if err := d.Ledger.Save(e); err != nil {
		return err
	}
	for _, w := range res.Warnings {
		d.logf("%s: %s: sbatch: %s", e.Episode, stage, w)
	}
	d.logf("%s: submitted %s as job %s", e.Episode, stage, res.JobID)
	return nil
}

// forgetIntent drops stage's submission intent sub after an sbatch that
// made no job (slurm.SubmitNotCreated), so that the next try does not look
// for one. A failed save keeps the intent: the next try then looks.
func (d *Driver) forgetIntent(e *ledger.Entry, stage stages.Stage, sub *ledger.Submission) {
	if e.Jobs[stage] != sub || sub.JobID != "" {
		return
	}
	delete(e.Jobs, stage)
	if err := d.Ledger.Save(e); err != nil {
		e.Jobs[stage] = sub
		d.logf("%s: %v", e.Episode, err)
	}
}

// submitRequest is stage's sbatch: its staged script, job name and
// --comment tag, after the job it waits for (afterok), if any.
func (d *Driver) submitRequest(e *ledger.Entry, stage stages.Stage, after string) slurm.SubmitRequest {
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
func (d *Driver) adopt(ctx context.Context, e *ledger.Entry, stage stages.Stage) (bool, error) {
	name, tag := stages.JobName(e.Episode, stage), stages.AttemptComment(e.Episode, stage, e.AttemptNumber(stage))
	// The stage's earlier attempts have its job name too: they are known.
	retired := e.RetiredJobs(stage)
	// Only jobs that existed since the intent (less the clocks' slack) can
	// be the submission: sacct reads that window, not a week of history.
	within := d.now().Sub(e.Jobs[stage].Intent) + AdoptSubmitSlack + time.Minute
	if e.Jobs[stage].Intent.IsZero() {
		within = 0
	}
	found, err := d.Slurm.FindWithin(ctx, within, func(j slurm.JobInfo) bool {
		return (j.Name == name || j.Comment == tag) && !slices.Contains(retired, j.ID)
	})
	if err != nil {
		return false, fmt.Errorf("episode %s: look for the %s job before submitting it again: %w", e.Episode, stage, err)
	}
	if len(found) == 0 {
		return false, nil
	}
	var genuine []slurm.JobInfo
	imp := &ImpostorError{Episode: e.Episode, Stage: stage}
	for _, j := range found {
		why, err := d.provenance(ctx, e, stage, j)
		if err != nil {
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
	sub := e.Jobs[stage]
	sub.JobID, sub.Submitted, sub.Adopted = genuine[0].ID, d.now().UTC(), true
	if err := d.Ledger.Save(e); err != nil {
		return false, err
	}
	d.logf("%s: adopted %s job %s found on the cluster (its batch script, user and submit time check out)", e.Episode, stage, sub.JobID)
	return true, d.writeManifest(ctx, e)
}

// provenance says why job j is not the stage's job the tool submitted, or
// "" when it is.
func (d *Driver) provenance(ctx context.Context, e *ledger.Entry, stage stages.Stage, j slurm.JobInfo) (string, error) {
	want := e.Scripts[stage]
	if want == "" {
		return "", fmt.Errorf("episode %s: the ledger has no batch-script sha256 for %s: cannot tell its job from an impostor", e.Episode, stage)
	}
	user, _, err := d.clusterUser(ctx)
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
	script, err := d.Slurm.BatchScript(ctx, j.ID)
	if err != nil {
		return "", fmt.Errorf("episode %s: %s job %s: read its batch script to prove it is the tool's: %w", e.Episode, stage, j.ID, err)
	}
	sum := sha256.Sum256(script)
	if got := hex.EncodeToString(sum[:]); got != want {
		return fmt.Sprintf("its batch script has sha256 %s, the staged %s has %s", got, stages.Script(stage), want), nil
	}
	return "", nil
}

// clusterUser is the name and uid of the user the jobs run as (id on the
// cluster), asked once.
func (d *Driver) clusterUser(ctx context.Context) (string, int, error) {
	d.uidMu.Lock()
	defer d.uidMu.Unlock()
	if d.uid != nil {
		return d.user, *d.uid, nil
	}
	res, err := d.Host.Run(ctx, remote.Command{Argv: []string{"id"}, Idempotent: true})
	if err != nil {
		return "", 0, fmt.Errorf("ask the cluster user: %w", err)
	}
	user, uid, err := parseID(string(res.Stdout))
	if err != nil {
		return "", 0, fmt.Errorf("ask the cluster user: %w", err)
	}
	d.user, d.uid = user, &uid
	return user, uid, nil
}

// parseID reads "uid=1001(nemorl) gid=…" as printed by id(1).
func parseID(s string) (string, int, error) {
	f, _, _ := strings.Cut(strings.TrimSpace(s), " ")
	num, name, ok := strings.Cut(strings.TrimPrefix(f, "uid="), "(")
	uid, err := strconv.Atoi(num)
	if !strings.HasPrefix(f, "uid=") || !ok || !strings.HasSuffix(name, ")") || err != nil || uid < 0 {
		return "", 0, fmt.Errorf("id printed %q", s)
	}
	return strings.TrimSuffix(name, ")"), uid, nil
}

// dependencyGone reports an sbatch refusal of a dependency on a job
// slurmctld no longer knows.
func dependencyGone(err error) bool {
	var ce *remote.CommandError
	return errors.As(err, &ce) && strings.Contains(ce.Stderr, "Job dependency problem")
}

// Cancel stops an episode for good. It records why in a cancel marker next
// to the ledger entry (so nothing more is submitted, by this process, by the
// process that owns the episode, or by a resume) and scancels every job of
// the episode that is known. The owner — the process holding the episode's
// lock, which it passes as lock — also records it in the entry and first
// looks up submissions whose job id is not known yet; a process that does
// not own the episode (lock nil) leaves the entry alone: the owner sees
// the marker at its next poll and cancels what it submitted since. It
// returns the jobs it signalled: those that had not ended.
func (d *Driver) Cancel(ctx context.Context, e *ledger.Entry, reason string, lock *ledger.Lock) ([]string, error) {
	owner := lock != nil
	if e.Final() {
		return nil, nil
	}
	first, err := d.Ledger.RequestCancel(e.Episode, reason)
	if err != nil {
		return nil, err
	}
	e.CancelRequested = first
	if owner {
		if err := d.Ledger.Save(e); err != nil {
			return nil, err
		}
	}
	var ids []string
	for _, s := range stages.All {
		sub := e.Jobs[s]
		if sub == nil {
			continue
		}
		if sub.JobID == "" && owner {
			var imp *ImpostorError
			if _, err := d.adopt(ctx, e, s); errors.As(err, &imp) {
				d.logf("%s: %v: cancelling them too", e.Episode, err)
				ids = append(ids, imp.IDs...)
			} else if err != nil {
				return nil, err
			}
		}
		if sub.JobID != "" {
			ids = append(ids, sub.JobID)
		}
	}
	if owner {
		e.RecordCancels(ids)
		if err := d.Ledger.Save(e); err != nil {
			return nil, err
		}
	}
	// Only the jobs that have not ended are signalled (and reported): one
	// query; if it fails, all of them (scancel of an ended job is a no-op).
	live := ids
	if infos, err := d.Slurm.Query(ctx, ids); err == nil {
		live = nil
		for _, id := range ids {
			if !infos[id].State.Terminal() {
				live = append(live, id)
			}
		}
	}
	if err := d.Slurm.Cancel(ctx, live); err != nil {
		return live, fmt.Errorf("episode %s: %w", e.Episode, err)
	}
	d.removeSecrets(ctx, e)
	if len(live) > 0 {
		d.logf("%s: cancelled jobs %s (%s)", e.Episode, strings.Join(live, ", "), first)
	}
	return live, nil
}

// removeSecrets deletes the episode's secrets.env from the cluster, if it
// is still there (the author job deletes it when it runs): when the episode
// ends, whatever its outcome, and when a cancel is recorded. A failure is
// logged, not fatal: clean removes the directory later.
func (d *Driver) removeSecrets(ctx context.Context, e *ledger.Entry) {
	p := path.Join(e.Dir, SecretsFile)
	if err := d.Host.Remove(ctx, p); err != nil && !errors.Is(err, fs.ErrNotExist) {
		d.logf("%s: could not remove %s: %v", e.Episode, p, err)
	}
}

// CheckLabel checks one label: a key of letters, digits and ._-/ (at most
// 64), a value of at most 256 printable characters.
func CheckLabel(k, v string) error {
	if k == "" || len(k) > 64 {
		return fmt.Errorf("label key %q: want 1..64 characters", k)
	}
	for _, r := range k {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("._-/", r)) {
			return fmt.Errorf("label key %q: want letters, digits and ._-/ only", k)
		}
	}
	if len(v) > 256 {
		return fmt.Errorf("label %s: the value is over 256 bytes", k)
	}
	for _, r := range v {
		if r < ' ' || r == 0x7f {
			return fmt.Errorf("label %s: the value holds a control character", k)
		}
	}
	return nil
}

// UserNames returns the names of the given uids on the cluster (for
// "CANCELLED by 1001"): one `getent passwd` for all of them; a uid with no
// name is left out.
func (d *Driver) UserNames(ctx context.Context, uids []int) (map[int]string, error) {
	out := map[int]string{}
	if len(uids) == 0 {
		return out, nil
	}
	argv := []string{"getent", "passwd"}
	for _, u := range uids {
		argv = append(argv, strconv.Itoa(u))
	}
	res, err := d.Host.Run(ctx, remote.Command{Argv: argv, Idempotent: true})
	if res == nil {
		return out, fmt.Errorf("user names: %w", err)
	}
	// getent exits 2 when some key is unknown; the lines it printed hold.
	for _, line := range strings.Split(string(res.Stdout), "\n") {
		f := strings.Split(line, ":")
		if len(f) < 3 {
			continue
		}
		if uid, err := strconv.Atoi(f[2]); err == nil && f[0] != "" {
			out[uid] = f[0]
		}
	}
	return out, nil
}

// removeTree removes an episode's directory on the cluster (rm -rf on one
// file system, as clean does).
func (d *Driver) removeTree(ctx context.Context, dir string) error {
	if !path.IsAbs(dir) || path.Clean(dir) != dir || dir == "/" {
		return fmt.Errorf("refusing to remove %q", dir)
	}
	_, err := d.Host.Run(ctx, remote.Command{Argv: []string{"rm", "-rf", "--one-file-system", "--", dir}, Idempotent: true, Label: "rm"})
	return err
}
