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
	"math/rand/v2"
	"os"
	"path"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
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

// The statuses batchScript reports of an sbatch that timeout stopped at
// its deadline: SIGTERM (124), or SIGKILL 5 s later (137, 128+9).
const (
	sbatchExitDeadline       = 124
	sbatchExitDeadlineKilled = 137
)

// jobIDMarker stands for the job id in a manifest written before sbatch ran.
const jobIDMarker = "@NEMORL_JOB_ID@"

// MaxBatch bounds the episodes staged by one command (the stream is built
// in memory, about 100 KB per episode).
const MaxBatch = 50

// stager renders episodes' trees and manifests and puts them on the
// cluster (batchScript; sbatch runs in the same command when the submitter
// asks), checks the files the config names (preflight), and removes what
// an episode leaves (its secrets, its directory).
type stager struct {
	host    remote.Host
	config  *configs.Config
	ledger  *ledger.Ledger // its prompts (restage)
	entries *entries       // records the staging
	version string
	// logf and now are the Driver's: they read its Logf and Now at each
	// call.
	logf func(format string, args ...any)
	now  func() time.Time
	// slurmConfig is the cluster's slurmctld configuration
	// (slurm.Client.Config: one scontrol show config per Client), whose
	// KillWait is written into the scripts: the jobs ask Slurm nothing
	// the tool can tell them.
	slurmConfig func(context.Context) (slurm.Config, error)

	policyOnce sync.Once
	configWarn sync.Once
	policyNext atomic.Uint64 // round-robin over policy_model.base_url
}

// preflight is Preflight: it checks the files of preflightChecks on the
// cluster, one by one.
func (sg *stager) preflight(ctx context.Context) error {
	check := sg.preflightChecks()
	keys := make([]string, 0, len(check))
	for k := range check {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		fi, err := sg.host.Stat(ctx, check[k])
		switch {
		case errors.Is(err, fs.ErrNotExist) || errors.Is(err, fs.ErrPermission):
			return &PreflightError{Key: k, Path: check[k], Host: sg.host.Name(), Err: err}
		case err != nil:
			return fmt.Errorf("preflight: %s %s: %w", k, check[k], err)
		case fi.IsDir():
			return &PreflightError{Key: k, Path: check[k], Host: sg.host.Name(), Err: errors.New("is a directory")}
		}
	}
	return nil
}

// pickPolicyBaseURL spreads episodes over policy_model.base_url: round
// robin within this process (serve, submit --count), from a random start
// so that separate one-episode processes spread too.
func (sg *stager) pickPolicyBaseURL() string {
	urls := sg.config.PolicyModel.BaseURL
	if len(urls) <= 1 {
		return urls.First()
	}
	sg.policyOnce.Do(func() { sg.policyNext.Store(rand.Uint64()) })
	return urls[sg.policyNext.Add(1)%uint64(len(urls))]
}

// killWait is the cluster's KillWait, 0 (unknown: the scripts assume
// Slurm's default and say so) when scontrol show config failed.
func (sg *stager) killWait(ctx context.Context) time.Duration {
	if sg.slurmConfig == nil {
		return 0
	}
	cfg, err := sg.slurmConfig(ctx)
	if err != nil {
		sg.configWarn.Do(func() {
			sg.logf("the cluster's KillWait is unknown (%v): the scripts assume Slurm's default, %v", err, templates.DefaultKillWait)
		})
		return 0
	}
	return cfg.KillWait
}

// render renders episode id's tree with the cluster's killWait (0:
// unknown), which its entry records (a restage renders the same).
func (sg *stager) render(id string, prompt []byte, policyBaseURL string, killWait time.Duration) (*templates.Tree, error) {
	tree, err := templates.Render(sg.config, templates.Input{Episode: id, Prompt: prompt, Version: sg.version, PolicyBaseURL: policyBaseURL, KillWait: killWait})
	if err != nil {
		return nil, fmt.Errorf("episode %s: %w", id, err)
	}
	return tree, nil
}

// stage puts the tree on the cluster in one command (stage.go): a
// complete directory is left as it is; none is staged whole.
func (sg *stager) stage(ctx context.Context, e *ledger.Entry, tree *templates.Tree) error {
	if err := sg.stageAgain(ctx, e, tree); err != nil {
		return err
	}
	if err := sg.entries.apply(e, change{staged: true, scripts: scriptHashes(tree)}); err != nil {
		return err
	}
	sg.logf("%s: staged %s on %s", e.Episode, e.Dir, sg.host.Name())
	return nil
}

// restage stages an episode again after a crash before its staging was
// complete, from the prompt the ledger kept.
func (sg *stager) restage(ctx context.Context, e *ledger.Entry) error {
	prompt, err := os.ReadFile(sg.ledger.PromptPath(e.Episode))
	if err != nil {
		return fmt.Errorf("episode %s: restage: %w", e.Episode, err)
	}
	tree, err := sg.render(e.Episode, prompt, e.PolicyBaseURL, time.Duration(e.KillWaitSeconds)*time.Second)
	if err != nil {
		return err
	}
	return sg.stage(ctx, e, tree)
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
func (sg *stager) writeManifest(ctx context.Context, e *ledger.Entry) error {
	b, err := sg.manifest(e, "")
	if err != nil {
		return err
	}
	if err := sg.host.WriteFile(ctx, path.Join(e.Dir, ManifestFile), b, 0o600); err != nil {
		return fmt.Errorf("episode %s: write %s: %w", e.Episode, ManifestFile, err)
	}
	return nil
}

// removeSecrets deletes the episode's secrets.env from the cluster, if it
// is still there (the author job deletes it when it runs): when the episode
// ends, whatever its outcome, and when a cancel is recorded. A failure is
// logged, not fatal: clean removes the directory later.
func (sg *stager) removeSecrets(ctx context.Context, e *ledger.Entry) {
	p := path.Join(e.Dir, SecretsFile)
	if err := sg.host.Remove(ctx, p); err != nil && !errors.Is(err, fs.ErrNotExist) {
		sg.logf("%s: could not remove %s: %v", e.Episode, p, err)
	}
}

// removeTree removes an episode's directory on the cluster (rm -rf on one
// file system, as clean does).
func (sg *stager) removeTree(ctx context.Context, dir string) error {
	if !path.IsAbs(dir) || path.Clean(dir) != dir || dir == "/" {
		return fmt.Errorf("refusing to remove %q", dir)
	}
	_, err := sg.host.Run(ctx, remote.Command{Argv: []string{"rm", "-rf", "--one-file-system", "--", dir}, Idempotent: true, Label: "rm"})
	return err
}

// batchScript stages episodes and submits their author jobs in one
// command:
//
//	sh -c batchScript sh PARENT MODE GAP DEADLINE NCHECKS KEY=PATH… NEPS {EP NAME COMMENT SCRIPT}… [SBATCH ARGV…]
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
// name, comment and script, and its manifest gets the job id. Each sbatch
// runs under coreutils timeout, stopped at DEADLINE seconds (the client's
// sbatch deadline; "0": none), its status then 124 or 137: outcome
// unknown, a *slurm.DeadlineError (parseBatch).
// It prints one line per event, tab-separated: "nemorl-batch EP staged",
// "… exists", "… failed", "… sbatch RC", "… out LINE" (sbatch's output).
// Every process costs (a login node under load, a sandbox): the script
// starts as few as it can: about two per episode (sbatch and its subshell).
//
// It is scripts/batch.sh.
//
//go:embed scripts/batch.sh
var batchScript string

// preflightChecks maps config keys to the cluster files they name that the
// jobs need: the three images (with a container runtime) and the stages'
// replacement commands given by absolute path.
func (sg *stager) preflightChecks() map[string]string {
	cfg := sg.config
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
func (sg *stager) secretsData(e *ledger.Entry) ([]byte, error) {
	key := sg.config.PolicyModel.APIKey.Reveal()
	if key == "" {
		return nil, fmt.Errorf("episode %s: policy_model.api_key: %s is not set in the environment: staging the episode needs the key", e.Episode, sg.config.SecretUnset)
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
func (sg *stager) manifestAround(e *ledger.Entry, stage stages.Stage) (pre, post string, err error) {
	b, err := sg.manifest(e, stage)
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
func (sg *stager) manifest(e *ledger.Entry, pending stages.Stage) ([]byte, error) {
	rt := sg.config.Runtime
	m := Manifest{
		Episode: e.Episode, Created: e.Created, Version: sg.version, Host: e.Host, Dir: e.Dir,
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

// pending is an episode between its ledger entry and its command's end.
type pending struct {
	i    int
	e    *ledger.Entry
	tree *templates.Tree
	req  slurm.SubmitRequest
	lock *ledger.Lock
	// created: its ledger entry was written.
	created bool
	// done is what its batch's command did, recorded once the batch is
	// through (the staging and the author's job id).
	done change
}

// batchResult is what batchScript said of one episode.
type batchResult struct {
	staged, exists bool
	job            slurm.SubmitResult
	sbatchErr      error
}

// sbatchRun is one sbatch a batch command ran ("nemorl-sbatch MS RC"): how
// long it took, timed on the cluster (known false where the cluster could
// not time it), and its exit status.
type sbatchRun struct {
	took  time.Duration
	known bool
	rc    int
}

// stopped says the sbatch was stopped at its deadline (timeout's 124 or
// 137).
func (r sbatchRun) stopped() bool {
	return r.rc == sbatchExitDeadline || r.rc == sbatchExitDeadlineKilled
}

// batchMode is what one run of batchScript does (its first argument).
type batchMode string

const (
	// batchNew stages new episodes after the preflight checks and
	// submits their authors.
	batchNew batchMode = "new"
	// batchRestage stages an episode again; it submits nothing.
	batchRestage batchMode = "restage"
	// batchArray is batchNew with one sbatch for all: a job array
	// (array.go), each episode a task of it.
	batchArray batchMode = "array"
)

// batchCommand runs batchScript for ps, the authors' sbatch of a batchNew
// started gap apart on the cluster (cluster.submit_rate's pace, which the
// submitter keeps; 0: four at a time), each under sbatchDeadline (0:
// none), and parses what it printed. With arr (batchArray), the
// authors are submitted as that job array, p its task p.e's author
// submission names, in one sbatch. It returns each episode's result, and
// the sbatch runs in the order they ended: the submitter observes each as
// a Slurm command of its own (how long the controller took).
func (sg *stager) batchCommand(ctx context.Context, ps []*pending, mode batchMode, arr *jobArray, gap, sbatchDeadline time.Duration) (map[string]*batchResult, []sbatchRun, error) {
	submit := mode == batchNew || mode == batchArray
	if len(ps) == 0 {
		return nil, nil, nil
	}
	if (mode == batchArray) != (arr != nil) {
		return nil, nil, fmt.Errorf("episode %s: batch mode %s with array %v", ps[0].e.Episode, mode, arr != nil)
	}
	parent := path.Dir(ps[0].e.Dir)
	// gzip at its fastest: the scripts shrink about sixfold, for about
	// half a millisecond per episode here.
	var buf bytes.Buffer
	zw, _ := gzip.NewWriterLevel(&buf, gzip.BestSpeed)
	tw := tar.NewWriter(zw)
	gapArg := "0"
	if submit && gap > 0 {
		gapArg = strconv.FormatFloat(gap.Seconds(), 'f', 3, 64)
	}
	deadline := "0"
	if submit && sbatchDeadline > 0 {
		deadline = strconv.FormatFloat(sbatchDeadline.Seconds(), 'f', 3, 64)
	}
	argv := []string{"sh", "-c", batchScript, "sh", parent, string(mode), gapArg, deadline}
	if submit {
		checks := sg.preflightChecks()
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
			return nil, nil, fmt.Errorf("episode %s: %s is not in %s with the others of its batch", p.e.Episode, p.e.Dir, parent)
		}
		if err := sg.addToBundle(tw, p.e, p.tree); err != nil {
			return nil, nil, err
		}
		if arr != nil {
			t := p.e.Jobs[stages.Author].Array
			if t == nil || t.ScriptSHA256 != arr.sum {
				return nil, nil, fmt.Errorf("episode %s: its author submission is not a task of array %s", p.e.Episode, arr.id)
			}
			argv = append(argv, p.e.Episode, strconv.Itoa(t.Task), "", arr.path)
			continue
		}
		argv = append(argv, p.e.Episode, p.req.Name, p.req.Comment, p.req.ScriptPath)
	}
	if arr != nil {
		if err := addArrayToBundle(tw, arr, sg.now()); err != nil {
			return nil, nil, err
		}
	}
	if err := errors.Join(tw.Close(), zw.Close()); err != nil {
		return nil, nil, fmt.Errorf("episode %s: bundle: %w", ps[0].e.Episode, err)
	}
	var common []string
	if submit {
		req := ps[0].req
		req.Name, req.Comment, req.ScriptPath = "", "", "/"
		if arr != nil {
			req.Name, req.Comment = arr.name, arr.comment
		}
		args, err := slurm.SbatchArgs(req)
		if err != nil {
			return nil, nil, err
		}
		common = args[:len(args)-1] // without the script
		argv = append(argv, common...)
	}
	label := "stage"
	if submit {
		label = "stage+sbatch"
	}
	res, err := sg.host.Run(ctx, remote.Command{Argv: argv, Stdin: &buf, Label: label})
	var ce *remote.CommandError
	if errors.As(err, &ce) && res != nil {
		switch ce.ExitStatus {
		case stageExitPreflight:
			f := strings.Split(strings.TrimSpace(lastLine(res.Stderr, "nemorl-stage: preflight\t")), "\t")
			if len(f) == 3 {
				return nil, nil, &PreflightError{Key: f[0], Path: f[1], Host: sg.host.Name(), Err: preflightErr(f[2])}
			}
		case stageExitFailed:
			return nil, nil, fmt.Errorf("stage in %s on %s: %s", parent, sg.host.Name(), remote.TrimStderr(res.Stderr))
		}
		return nil, nil, fmt.Errorf("stage in %s on %s: exit status %d: %s", parent, sg.host.Name(), ce.ExitStatus, remote.TrimStderr(res.Stderr))
	}
	if err != nil {
		return nil, nil, fmt.Errorf("stage in %s on %s: %w", parent, sg.host.Name(), err)
	}
	results, runs, err := parseBatch(res.Stdout)
	if err != nil {
		return nil, nil, fmt.Errorf("stage in %s on %s: %w", parent, sg.host.Name(), err)
	}
	for _, p := range ps {
		r := results[p.e.Episode]
		if r == nil {
			results[p.e.Episode] = &batchResult{}
			continue
		}
		if r.sbatchErr != nil {
			sbatch := shell.Join(append(append(append([]string(nil), common...), "--job-name="+p.req.Name, "--comment="+p.req.Comment), p.req.ScriptPath))
			if arr != nil {
				sbatch = shell.Join(append(append([]string(nil), common...), "--array=…", arr.path))
			}
			var ce *remote.CommandError
			var de *slurm.DeadlineError
			switch {
			case errors.As(r.sbatchErr, &ce):
				ce.Host = sg.host.Name()
				ce.Command = sbatch
			case errors.As(r.sbatchErr, &de):
				de.Command, de.Deadline = remote.Brief(sbatch), sbatchDeadline
			}
		}
	}
	return results, runs, nil
}

// parseBatch parses batchScript's output: each episode's result, and the
// sbatch runs.
func parseBatch(b []byte) (map[string]*batchResult, []sbatchRun, error) {
	out := map[string]*batchResult{}
	var runs []sbatchRun
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
		if rest, ok := strings.CutPrefix(line, "nemorl-sbatch\t"); ok {
			r, ok := parseSbatchRun(rest)
			if !ok {
				return nil, nil, fmt.Errorf("unexpected output %.80q", line)
			}
			runs = append(runs, r)
			continue
		}
		f := strings.SplitN(line, "\t", 4)
		if len(f) < 3 || f[0] != "nemorl-batch" || !stages.ValidEpisode(f[1]) {
			return nil, nil, fmt.Errorf("unexpected output %.80q", line)
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
				return nil, nil, fmt.Errorf("unexpected output %.80q", line)
			}
			a.rc = rc
			order = append(order, ep)
		case f[2] == "out" && len(f) == 4:
			a.lines = append(a.lines, f[3])
		case f[2] == "out" && len(f) == 3:
		default:
			return nil, nil, fmt.Errorf("unexpected output %.80q", line)
		}
	}
	for _, ep := range order {
		a, r := sb[ep], out[ep]
		text := []byte(strings.Join(a.lines, "\n"))
		if a.rc == sbatchExitDeadline || a.rc == sbatchExitDeadlineKilled {
			// Stopped at its deadline: the job may or may not have been
			// made (remote.ErrOutcomeUnknown); its intent stays, and it
			// is looked for by its comment tag before any new sbatch.
			r.sbatchErr = &slurm.DeadlineError{Kind: slurm.KindSbatch, Command: "sbatch"}
			continue
		}
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
	return out, runs, nil
}

// parseSbatchRun parses "MS\tRC", the rest of a "nemorl-sbatch" line (MS
// empty: not timed).
func parseSbatchRun(s string) (sbatchRun, bool) {
	ms, rc, ok := strings.Cut(s, "\t")
	var r sbatchRun
	var err error
	if r.rc, err = strconv.Atoi(rc); !ok || err != nil || r.rc < 0 || r.rc > 255 {
		return sbatchRun{}, false
	}
	if ms == "" {
		return r, true
	}
	n, err := strconv.ParseInt(ms, 10, 64)
	if err != nil || n < 0 || n > int64(24*time.Hour/time.Millisecond) {
		return sbatchRun{}, false
	}
	r.took, r.known = time.Duration(n)*time.Millisecond, true
	return r, true
}

// addToBundle adds an episode's tree, secrets.env and manifest under
// EP/…, and its manifest to be once the author's job id is known under
// .next/EP.
func (sg *stager) addToBundle(tw *tar.Writer, e *ledger.Entry, tree *templates.Tree) error {
	secrets, err := sg.secretsData(e)
	if err != nil {
		return err
	}
	manifest, err := sg.manifest(e, "")
	if err != nil {
		return err
	}
	next, err := sg.manifest(e, stages.Author)
	if err != nil {
		return err
	}
	files := append([]templates.File(nil), tree.Files...)
	files = append(files, templates.File{Path: SecretsFile, Mode: 0o600, Data: secrets},
		templates.File{Path: ManifestFile, Mode: 0o600, Data: manifest})
	now := sg.now()
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
func (sg *stager) stageAgain(ctx context.Context, e *ledger.Entry, tree *templates.Tree) error {
	res, _, err := sg.batchCommand(ctx, []*pending{{e: e, tree: tree, req: submitRequest(e, stages.Author, "")}}, batchRestage, nil, 0, 0)
	if err != nil {
		return fmt.Errorf("episode %s: %w", e.Episode, err)
	}
	if r := res[e.Episode]; r == nil || !r.staged {
		return fmt.Errorf("episode %s: %s on %s exists but is not a complete episode directory (no manifest.json); move it away and resume", e.Episode, e.Dir, sg.host.Name())
	}
	return nil
}

// addArrayToBundle adds array a's script under .arrays/ID/, which
// batchScript moves beside the episodes (ArraysDir) before its sbatch.
func addArrayToBundle(tw *tar.Writer, a *jobArray, now time.Time) error {
	dir := path.Join(ArraysDir, a.id)
	for _, h := range []*tar.Header{
		{Name: dir + "/", Typeflag: tar.TypeDir, Mode: 0o700, ModTime: now, Format: tar.FormatPAX},
		{Name: path.Join(dir, path.Base(a.path)), Typeflag: tar.TypeReg, Mode: 0o600, Size: int64(len(a.script)), ModTime: now, Format: tar.FormatPAX},
	} {
		if err := tw.WriteHeader(h); err != nil {
			return fmt.Errorf("array %s: bundle: %w", a.id, err)
		}
	}
	if _, err := tw.Write(a.script); err != nil {
		return fmt.Errorf("array %s: bundle: %w", a.id, err)
	}
	return nil
}
