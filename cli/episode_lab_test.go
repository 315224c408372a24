package cli

// End-to-end tests of the episode verbs (run, submit, status, watch, result,
// logs, cancel, resume) against the local Slurm lab (lab/up): the binary is
// built once, run with os/exec, and every case is checked three ways: the
// exit code, the outcome JSON, and Slurm's own account (sacct, run locally
// as root) plus, where it matters, the episode's files on the cluster.
//
// Each case derives its config from configs/lab-none.yaml by giving one stage's
// stand-in command a mode flag (lab/stand-ins/*: --no-patch,
// --trainer-crash, --sleep-forever, …), uses its own XDG_STATE_HOME (so
// its own ledger) and its own episode id, and scancels whatever its episode
// left behind.

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"sort"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nemorl/nemorl-slurm/configs"
	"github.com/nemorl/nemorl-slurm/evaluate"
	"github.com/nemorl/nemorl-slurm/internal/labtest"
	"github.com/nemorl/nemorl-slurm/ledger"
	"github.com/nemorl/nemorl-slurm/stages"
)

// labStandIns is where lab/up installs the stand-ins; configs/lab-none.yaml
// names them there.
const labStandIns = "/opt/nemorl-lab/stand-ins"

var labStages = []string{"author", "train", "eval"}

// Patience.
const (
	episodeTimeout = 3 * time.Minute  // one run/watch/resume of a normal episode
	quickTimeout   = 60 * time.Second // submit, status, result, cancel, logs
	sacctPatience  = 30 * time.Second // for sacct to show what is expected
)

// TestEpisodeLab runs every episode case on the lab. The parent builds the
// binary, checks the installed stand-ins and holds the lab lock (shared)
// until all of its parallel subtests have ended.
func TestEpisodeLab(t *testing.T) {
	t.Parallel() // with the package's other shared-lab tests, after its LockLab ones
	lab := labtest.Env(t)
	labtest.UseLab(t) // held until the parallel subtests below are done
	requireStandIns(t)

	base, err := os.ReadFile("../configs/lab-none.yaml")
	if err != nil {
		t.Fatal(err)
	}
	shared := lab.Workdir
	lab.Workdir = lab.TestWorkdir(t)
	base = []byte(lab.WithWorkdir(t, string(base), shared, lab.Workdir))
	cfg, err := configs.LoadFile("../configs/lab-none.yaml")
	if err != nil {
		t.Fatalf("configs/lab-none.yaml: %v", err)
	}
	x := &labCLI{
		bin:    buildBinary(t),
		lab:    lab,
		base:   string(base),
		apiKey: cfg.PolicyModel.APIKey.Reveal(),
	}
	if x.apiKey == "" {
		t.Fatal("configs/lab-none.yaml has no policy_model.api_key")
	}

	t.Run("Scored", x.testScored)
	t.Run("NoPatch", x.testNoPatch)
	t.Run("TrainFails", x.testTrainFails)
	t.Run("EvalNoRecord", x.testEvalNoRecord)
	t.Run("Integrity", x.testIntegrity)
	t.Run("Deadline", x.testDeadline)
	t.Run("Interrupt", x.testInterrupt)
	t.Run("CrashResume", x.testCrashResume)
	t.Run("SubmitWatch", x.testSubmitWatch)
	t.Run("SubmitWatchCancel", x.testSubmitWatchCancel)
	t.Run("CancelBeforeTrainWhileWatched", x.testCancelBeforeTrainWhileWatched)
	t.Run("Clean", x.testClean)
	t.Run("CleanArray", x.testCleanArray)
	t.Run("Preflight", x.testPreflight)
	t.Run("ConfigGone", x.testConfigGone)
	t.Run("ResultUnknown", x.testResultUnknown)
	t.Run("ResultUnfinished", x.testResultUnfinished)
	t.Run("Attacks", x.testAttacks)
}

// requireStandIns fails t unless every installed stand-in is a
// byte-identical, executable copy of lab/stand-ins/.
func requireStandIns(t *testing.T) {
	t.Helper()
	for _, s := range labStages {
		src := filepath.Join("..", "lab", "stand-ins", s)
		dst := filepath.Join(labStandIns, s)
		want, err := os.ReadFile(src)
		if err != nil {
			t.Fatal(err)
		}
		got, err := os.ReadFile(dst)
		if err != nil {
			t.Fatalf("stand-in %s: %v: run lab/up", dst, err)
		}
		if !bytes.Equal(got, want) {
			t.Fatalf("stand-in %s differs from %s: run lab/up", dst, src)
		}
		if fi, err := os.Stat(dst); err != nil || fi.Mode().Perm()&0o111 == 0 {
			t.Fatalf("stand-in %s is not executable (%v): run lab/up", dst, err)
		}
	}
}

// labCLI runs the built binary against the lab.
type labCLI struct {
	bin    string
	lab    labtest.Lab
	base   string // configs/lab-none.yaml
	apiKey string // the lab's policy API key: must never stay on the cluster
	// sharedWorkdir is the lab's own workdir (lab.Workdir is the test's).
	sharedWorkdir string
	// slurmEnv is the environment of Slurm's clients run here for x's
	// cluster: nil for cluster 1 (this process's), cluster 2's when the
	// episodes run there (onCluster2), cluster 3's (on).
	slurmEnv []string
	// slurm is x's Slurm when x was pointed at one (on); zero otherwise
	// (cluster 1, or cluster 2 by onCluster2).
	slurm labtest.Slurm
}

// newLabCLI is the lab and the built binary for a test, with configs/lab-none.yaml
// as its base config staging into a workdir of the test's own (removed when
// it ends). It holds the lab lock (shared) for the test (labtest.UseLab).
func newLabCLI(t *testing.T) *labCLI {
	t.Helper()
	lab := labtest.Env(t)
	labtest.UseLab(t)
	base, err := os.ReadFile("../configs/lab-none.yaml")
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := configs.LoadFile("../configs/lab-none.yaml")
	if err != nil {
		t.Fatalf("configs/lab-none.yaml: %v", err)
	}
	shared := lab.Workdir
	lab.Workdir = lab.TestWorkdir(t)
	return &labCLI{bin: buildBinary(t), lab: lab, base: lab.WithWorkdir(t, string(base), shared, lab.Workdir),
		apiKey: cfg.PolicyModel.APIKey.Reveal(), sharedWorkdir: shared}
}

// config writes configs/lab-none.yaml to a temp dir, with stage's stand-in
// command given args (no stage: unchanged), and returns its path.
func (x *labCLI) config(t *testing.T, stage string, args ...string) string {
	t.Helper()
	data := x.base
	if stage != "" {
		old := "command: [" + labStandIns + "/" + stage + "]"
		if n := strings.Count(data, old); n != 1 {
			t.Fatalf("configs/lab-none.yaml: %d lines %q, want 1", n, old)
		}
		data = strings.Replace(data, old, "command: ["+strings.Join(append([]string{labStandIns + "/" + stage}, args...), ", ")+"]", 1)
	}
	p := filepath.Join(t.TempDir(), "lab-none.yaml")
	if err := os.WriteFile(p, []byte(data), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// newEpisode returns a fresh episode id for the test and scancels the
// episode's jobs when the test ends.
func newEpisode(t *testing.T, name string) string {
	t.Helper()
	var b [4]byte
	if _, err := rand.Read(b[:]); err != nil {
		t.Fatal(err)
	}
	ep := "ep-test-" + name + "-" + hex.EncodeToString(b[:])
	t.Cleanup(func() {
		for _, s := range labStages {
			if out, err := exec.Command("scancel", "--name="+jobName(ep, s)).CombinedOutput(); err != nil {
				t.Logf("cleanup: scancel --name=%s: %v %s", jobName(ep, s), err, out)
			}
		}
	})
	return ep
}

func jobName(ep, stage string) string { return "nemorl-" + stage + "-" + ep }
func jobTag(ep, stage string) string  { return "nemorl:" + ep + ":" + stage }

// ---- running the binary ----------------------------------------------------

// cliRun is one finished invocation.
type cliRun struct {
	args   []string
	code   int
	stdout []byte
	stderr string
	took   time.Duration
	state  *os.ProcessState
}

func (r cliRun) String() string {
	return fmt.Sprintf("nemorl-slurm %s: exit %d after %v\nstdout:\n%s\nstderr:\n%s",
		strings.Join(r.args, " "), r.code, r.took.Round(time.Millisecond), r.stdout, r.stderr)
}

// cliEnv is the test's environment with XDG_STATE_HOME=state (so the
// ledger is the test's own) and no config from the environment.
func cliEnv(state string) []string {
	var env []string
	for _, kv := range os.Environ() {
		switch k, _, _ := strings.Cut(kv, "="); k {
		case "XDG_STATE_HOME", "NEMORL_SLURM_CONFIG":
			continue
		}
		env = append(env, kv)
	}
	return append(env, "XDG_STATE_HOME="+state)
}

// command is the binary in its own process group, killed (the whole group)
// when ctx ends.
func (x *labCLI) command(ctx context.Context, state string, args []string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, x.bin, args...)
	cmd.Env = cliEnv(state)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 5 * time.Second
	return cmd
}

// bgRun is an invocation running in the background.
type bgRun struct {
	cmd            *exec.Cmd
	stdout, stderr lockedBuffer // read while the process writes
	start          time.Time
	done           chan struct{}
	res            cliRun
	err            error // from Wait, other than a plain exit status
}

// lockedBuffer is a bytes.Buffer safe to read while a process writes it.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

func (l *lockedBuffer) Bytes() []byte {
	l.mu.Lock()
	defer l.mu.Unlock()
	return bytes.Clone(l.b.Bytes())
}

// start runs the binary in the background; it is killed after timeout or
// when the test ends, whichever comes first.
func (x *labCLI) start(t *testing.T, state string, timeout time.Duration, args ...string) *bgRun {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	b := &bgRun{done: make(chan struct{})}
	b.cmd = x.command(ctx, state, args)
	b.cmd.Stdout, b.cmd.Stderr = &b.stdout, &b.stderr
	b.start = time.Now()
	if err := b.cmd.Start(); err != nil {
		cancel()
		t.Fatalf("start nemorl-slurm %s: %v", strings.Join(args, " "), err)
	}
	go func() {
		defer close(b.done)
		defer cancel()
		err := b.cmd.Wait()
		b.res = cliRun{args: args, stdout: b.stdout.Bytes(), stderr: b.stderr.String(), took: time.Since(b.start), state: b.cmd.ProcessState}
		var ee *exec.ExitError
		switch {
		case ctx.Err() != nil:
			b.err = fmt.Errorf("killed after %v (timeout): %w", timeout, err)
		case err == nil:
		case errors.As(err, &ee) && ee.Exited():
			b.res.code = ee.ExitCode()
		default:
			b.err = err
			b.res.code = -1
		}
	}()
	t.Cleanup(func() {
		select {
		case <-b.done:
		default:
			_ = syscall.Kill(-b.cmd.Process.Pid, syscall.SIGKILL)
			<-b.done
		}
	})
	return b
}

// exited reports whether the process has ended.
func (b *bgRun) exited() bool {
	select {
	case <-b.done:
		return true
	default:
		return false
	}
}

// wait waits up to limit for the process to exit and returns its result;
// it fails t if the process was killed or did not exit in time.
func (b *bgRun) wait(t *testing.T, limit time.Duration) cliRun {
	t.Helper()
	select {
	case <-b.done:
	case <-time.After(limit):
		_ = syscall.Kill(-b.cmd.Process.Pid, syscall.SIGKILL)
		<-b.done
		t.Fatalf("no exit within %v; killed\n%s", limit, b.res)
	}
	if b.err != nil {
		t.Fatalf("%v\n%s", b.err, b.res)
	}
	return b.res
}

// run runs the binary to its end (at most timeout) and returns its result.
func (x *labCLI) run(t *testing.T, state string, timeout time.Duration, args ...string) cliRun {
	t.Helper()
	return x.start(t, state, timeout, args...).wait(t, timeout+10*time.Second)
}

// want fails t unless r exited with code.
func (r cliRun) want(t *testing.T, code int) cliRun {
	t.Helper()
	if r.code != code {
		t.Fatalf("exit %d, want %d\n%s", r.code, code, r)
	}
	return r
}

// oneJSON decodes stdout, which must be exactly one JSON document, into v.
func oneJSON(t *testing.T, r cliRun, v any) {
	t.Helper()
	dec := json.NewDecoder(bytes.NewReader(r.stdout))
	if err := dec.Decode(v); err != nil {
		t.Fatalf("stdout is not a JSON document: %v\n%s", err, r)
	}
	var extra json.RawMessage
	if err := dec.Decode(&extra); err != io.EOF {
		t.Fatalf("stdout holds more than one JSON document (%v)\n%s", err, r)
	}
}

// ---- outcomes --------------------------------------------------------------

type jobJSON struct {
	ID       string    `json:"id"`
	State    string    `json:"state"`
	ExitCode string    `json:"exit_code"`
	Start    time.Time `json:"start"`
	End      time.Time `json:"end"`
}

// outcomeJSON is the outcome document as the README specifies it, read
// independently of package episode.
type outcomeJSON struct {
	Episode          string             `json:"episode"`
	Outcome          string             `json:"outcome"`
	Reward           *float64           `json:"reward"`
	MaskSample       bool               `json:"mask_sample"`
	FailureReason    string             `json:"failure_reason"`
	FailureStage     string             `json:"failure_stage"`
	Detail           string             `json:"detail"`
	Tampering        bool               `json:"tampering"`
	AIME25Exact      *float64           `json:"aime25_exact"`
	AIME25AvgAt8     *float64           `json:"aime25_avg_at_8"`
	TrainReward      *float64           `json:"train_reward"`
	InnerSteps       *int               `json:"inner_steps"`
	Completed        int                `json:"completed"`
	PatchSHA256      string             `json:"patch_sha256"`
	CheckpointSHA256 string             `json:"checkpoint_sha256"`
	Isolation        string             `json:"isolation"`
	Dir              string             `json:"dir"`
	Jobs             map[string]jobJSON `json:"jobs"`
	Decided          time.Time          `json:"decided"`
}

// outcomeKeys are in every outcome document ("reward" even when null).
var outcomeKeys = []string{"episode", "outcome", "reward", "mask_sample", "failure_reason", "completed", "isolation", "dir", "jobs", "decided"}

// decodeOutcome checks and decodes one outcome object.
func decodeOutcome(t *testing.T, raw json.RawMessage) outcomeJSON {
	t.Helper()
	var keys map[string]json.RawMessage
	if err := json.Unmarshal(raw, &keys); err != nil {
		t.Fatalf("outcome: %v\n%s", err, raw)
	}
	for _, k := range outcomeKeys {
		if _, ok := keys[k]; !ok {
			t.Errorf("outcome lacks %q:\n%s", k, raw)
		}
	}
	var o outcomeJSON
	if err := json.Unmarshal(raw, &o); err != nil {
		t.Fatalf("outcome: %v\n%s", err, raw)
	}
	switch o.Outcome {
	case "scored", "policy_failure", "infra_failure", "integrity_violation":
	default:
		t.Errorf("outcome %q is none of the four", o.Outcome)
	}
	if o.Decided.IsZero() {
		t.Errorf("outcome has no decided time:\n%s", raw)
	}
	return o
}

// outcomeOf decodes the outcome a run or result printed.
func outcomeOf(t *testing.T, r cliRun) outcomeJSON {
	t.Helper()
	var raw json.RawMessage
	oneJSON(t, r, &raw)
	return decodeOutcome(t, raw)
}

// watchDoc is what watch --json and resume --json print.
type watchDoc struct {
	Episodes []struct {
		Episode string          `json:"episode"`
		Final   bool            `json:"final"`
		Outcome json.RawMessage `json:"outcome"`
	} `json:"episodes"`
	Error string `json:"error"`
}

// watchedOutcome decodes a watch or resume document about exactly ep and
// returns its final outcome.
func watchedOutcome(t *testing.T, r cliRun, ep string) outcomeJSON {
	t.Helper()
	var doc watchDoc
	oneJSON(t, r, &doc)
	if len(doc.Episodes) != 1 || doc.Episodes[0].Episode != ep {
		t.Fatalf("episodes: want exactly %s\n%s", ep, r)
	}
	e := doc.Episodes[0]
	if !e.Final || len(e.Outcome) == 0 {
		t.Fatalf("episode %s not final\n%s", ep, r)
	}
	if doc.Error != "" {
		t.Errorf("watch error %q", doc.Error)
	}
	o := decodeOutcome(t, e.Outcome)
	if o.Episode != ep {
		t.Errorf("outcome episode %q, want %q", o.Episode, ep)
	}
	return o
}

// wantFailure checks an outcome's kind, reason and stage ("" for any
// stage), and its reward: 0 and not masked for a policy failure, null and
// masked for the others.
func wantFailure(t *testing.T, o outcomeJSON, kind, reason, stage string) {
	t.Helper()
	if o.Outcome != kind || o.FailureReason != reason {
		t.Errorf("outcome %s (%s), want %s (%s); detail: %s", o.Outcome, o.FailureReason, kind, reason, o.Detail)
	}
	if stage != "" && o.FailureStage != stage {
		t.Errorf("failure_stage %q, want %q", o.FailureStage, stage)
	}
	if o.Detail == "" {
		t.Errorf("a %s has no detail", kind)
	}
	switch kind {
	case "policy_failure":
		if o.Reward == nil || *o.Reward != 0 || o.MaskSample {
			t.Errorf("policy_failure: reward %v mask_sample %v, want 0 and false", fmtReward(o.Reward), o.MaskSample)
		}
	default:
		if o.Reward != nil || !o.MaskSample {
			t.Errorf("%s: reward %v mask_sample %v, want null and true", kind, fmtReward(o.Reward), o.MaskSample)
		}
	}
}

func fmtReward(r *float64) string {
	if r == nil {
		return "null"
	}
	return fmt.Sprint(*r)
}

// wantJobs checks the outcome's jobs: exactly the stages in want, each
// with a state starting with want[stage].
func wantJobs(t *testing.T, o outcomeJSON, want map[string]string) {
	t.Helper()
	for s, prefix := range want {
		j, ok := o.Jobs[s]
		switch {
		case !ok:
			t.Errorf("outcome has no %s job; want one %s…", s, prefix)
		case !validJobID(j.ID):
			t.Errorf("outcome %s job id %q", s, j.ID)
		case !strings.HasPrefix(j.State, prefix):
			t.Errorf("outcome %s job %s is %q (exit %s), want %s…", s, j.ID, j.State, j.ExitCode, prefix)
		}
	}
	for s := range o.Jobs {
		if _, ok := want[s]; !ok {
			t.Errorf("outcome has a %s job %+v; want none", s, o.Jobs[s])
		}
	}
}

var jobIDRe = regexp.MustCompile(`^[1-9][0-9]*$`)

func validJobID(id string) bool { return jobIDRe.MatchString(id) }

// ---- the ledger ------------------------------------------------------------

func ledgerPath(state, ep string) string {
	return filepath.Join(state, "nemorl-slurm", "episodes", ep+".json")
}

type ledgerEntry struct {
	Episode string `json:"episode"`
	Jobs    map[string]struct {
		Intent  time.Time `json:"intent"`
		JobID   string    `json:"job_id"`
		Adopted bool      `json:"adopted"`
		Array   *struct {
			Name   string `json:"name"`
			Script string `json:"script"`
			Task   int    `json:"task"`
		} `json:"array"`
	} `json:"jobs"`
	Retried map[string][]struct {
		JobID string `json:"job_id"`
	} `json:"retried"`
	CancelRequested string          `json:"cancel_requested"`
	Outcome         json.RawMessage `json:"outcome"`
}

// sbatchUnits adds to units what e's train and eval jobs took to submit,
// current and retired: one sbatch per job of its own, one per job array
// ("stage A" for every task A_T of it).
func (e ledgerEntry) sbatchUnits(units map[string]bool) {
	for _, stage := range []string{"train", "eval"} {
		ids := []string{e.Jobs[stage].JobID}
		for _, a := range e.Retried[stage] {
			ids = append(ids, a.JobID)
		}
		for _, id := range ids {
			if id == "" {
				continue
			}
			array, _, _ := strings.Cut(id, "_")
			units[stage+" "+array] = true
		}
	}
}

func readLedger(t *testing.T, state, ep string) ledgerEntry {
	t.Helper()
	b, err := os.ReadFile(ledgerPath(state, ep))
	if err != nil {
		t.Fatal(err)
	}
	var e ledgerEntry
	if err := json.Unmarshal(b, &e); err != nil {
		t.Fatalf("ledger %s: %v", ledgerPath(state, ep), err)
	}
	return e
}

// ---- Slurm's view --------------------------------------------------------

type sacctJob struct{ ID, Name, Comment, State string }

// sacctQueries are run together (their union is the view). The first is
// the plain time window; it leaves out jobs that never became eligible (an
// eval cancelled while it waited on a failed or cancelled train: Eligible
// Unknown), which a query by state up to now includes.
// Both lab clusters' jobs (one slurmdbd; their job ids apart): an
// episode's jobs are found wherever it ran (TestFaultCluster2Lab's on
// cluster 2).
var sacctQueries = [][]string{
	{"--clusters=all", "-a", "-n", "-P", "-X", "--starttime=now-2hours", "--format=JobID,JobName,Comment,State"},
	{"--clusters=all", "-a", "-n", "-P", "-X", "--starttime=now-2hours", "--endtime=now", "--state=" + sacctAllStates, "--format=JobID,JobName,Comment,State"},
}

const sacctAllStates = "BF,CA,CD,DL,F,NF,OOM,PD,PR,R,RQ,RS,RV,S,TO"

// sacctEpisode lists the jobs sacct knows for ep (by job name or comment)
// on cluster 1 and cluster 2.
func sacctEpisode(ep string) ([]sacctJob, error) { return sacctEpisodeOn(labtest.Slurm{}, ep) }

// sacctEpisodeOn is sacctEpisode with s's sacct (the zero Slurm: cluster
// 1's, which shows cluster 2's jobs as well; cluster 3 has a slurmdbd of
// its own).
func sacctEpisodeOn(s labtest.Slurm, ep string) ([]sacctJob, error) {
	byID := map[string]sacctJob{}
	for _, args := range sacctQueries {
		out, err := s.Command("sacct", args...).Output()
		if err != nil {
			var ee *exec.ExitError
			if errors.As(err, &ee) {
				err = fmt.Errorf("%w: %s", err, ee.Stderr)
			}
			return nil, fmt.Errorf("sacct: %w", err)
		}
		sc := bufio.NewScanner(bytes.NewReader(out))
		for sc.Scan() {
			f := strings.SplitN(sc.Text(), "|", 4)
			if len(f) != 4 {
				continue
			}
			j := sacctJob{ID: f[0], Name: f[1], Comment: f[2], State: f[3]}
			if sacctStage(ep, j) != "" {
				byID[j.ID] = j // the later query is the fresher
			}
		}
		if err := sc.Err(); err != nil {
			return nil, err
		}
	}
	jobs := make([]sacctJob, 0, len(byID))
	for _, j := range byID {
		jobs = append(jobs, j)
	}
	return jobs, nil
}

// sacctStage is the stage of ep that j belongs to, or "": by its job name
// or comment, or, for a task of a job array of a stage (named and tagged
// as its array), by the task the episode's manifest names.
func sacctStage(ep string, j sacctJob) string {
	for _, s := range labStages {
		if j.Name == jobName(ep, s) || j.Comment == jobTag(ep, s) {
			return s
		}
	}
	for _, s := range labStages {
		if arrayJobOf(j, s) && j.ID == manifestJob(ep, s) {
			return s
		}
	}
	return ""
}

// arrayJob reports whether j is a task of a job array of one stage's
// jobs: named and tagged as its array (episode/array.go).
func arrayJob(j sacctJob) bool {
	for _, s := range labStages {
		if arrayJobOf(j, s) {
			return true
		}
	}
	return false
}

// arrayJobOf reports whether j is a task of a job array of stage's jobs.
func arrayJobOf(j sacctJob, stage string) bool {
	return strings.HasPrefix(j.Name, "nemorl-"+stage+"-arr-") && strings.HasPrefix(j.Comment, "nemorl-array:arr-") && strings.HasSuffix(j.Comment, ":"+stage)
}

// manifestJob is stage's job id in ep's manifest on the lab (under its
// workdir, or a test's workdir in it), "" when there is none.
func manifestJob(ep, stage string) string {
	lab, err := labtest.Load(labtest.Path())
	if err != nil {
		return ""
	}
	for _, pat := range []string{filepath.Join(lab.Workdir, ep, "manifest.json"), filepath.Join(lab.Workdir, "*", ep, "manifest.json")} {
		ms, _ := filepath.Glob(pat)
		for _, m := range ms {
			b, err := os.ReadFile(m)
			if err != nil {
				continue
			}
			var man struct {
				Jobs map[string]string `json:"jobs"`
			}
			if json.Unmarshal(b, &man) == nil && man.Jobs[stage] != "" {
				return man.Jobs[stage]
			}
		}
	}
	return ""
}

// sacctView is ep's jobs as "stage id state comment" lines, sorted.
func sacctView(ep string, jobs []sacctJob) string {
	var ls []string
	for _, j := range jobs {
		ls = append(ls, fmt.Sprintf("%s %s %q comment %q", sacctStage(ep, j), j.ID, j.State, j.Comment))
	}
	sort.Strings(ls)
	return strings.Join(ls, "\n")
}

// sacctWant describes what sacct must show for an episode: exactly these
// stages, each job with this id (when known) and a state starting with
// this prefix; with tags, every job's comment must be its nemorl: tag
// (sacct shows comments of ended jobs only).
type sacctWant struct {
	states map[string]string // stage → state prefix
	ids    map[string]string // stage → job id ("" or absent: any)
	tags   bool
}

func (w sacctWant) mismatch(ep string, jobs []sacctJob) string {
	seen := map[string]int{}
	for _, j := range jobs {
		s := sacctStage(ep, j)
		seen[s]++
		prefix, ok := w.states[s]
		switch {
		case !ok:
			return fmt.Sprintf("unexpected %s job %s", s, j.ID)
		case w.ids[s] != "" && j.ID != w.ids[s]:
			return fmt.Sprintf("%s job %s, want %s", s, j.ID, w.ids[s])
		case !strings.HasPrefix(j.State, prefix):
			return fmt.Sprintf("%s job %s is %q, want %s…", s, j.ID, j.State, prefix)
		case j.Name != jobName(ep, s) && !arrayJob(j):
			return fmt.Sprintf("%s job %s is named %q, want %q", s, j.ID, j.Name, jobName(ep, s))
		case w.tags && j.Comment != jobTag(ep, s) && !arrayJob(j):
			return fmt.Sprintf("%s job %s has comment %q, want %q", s, j.ID, j.Comment, jobTag(ep, s))
		}
	}
	for s := range w.states {
		if seen[s] != 1 {
			return fmt.Sprintf("%d %s jobs, want 1", seen[s], s)
		}
	}
	return ""
}

// waitSacct polls sacct (it lags by seconds) until it shows ep's jobs as w
// says, and fails t if it does not within sacctPatience.
func waitSacct(t *testing.T, ep string, w sacctWant) []sacctJob {
	t.Helper()
	return waitSacctOn(t, labtest.Slurm{}, ep, w)
}

// waitSacctOn is waitSacct with s's sacct (sacctEpisodeOn).
func waitSacctOn(t *testing.T, s labtest.Slurm, ep string, w sacctWant) []sacctJob {
	t.Helper()
	deadline := time.Now().Add(sacctPatience)
	for {
		jobs, err := sacctEpisodeOn(s, ep)
		why := ""
		if err != nil {
			why = err.Error()
		} else if why = w.mismatch(ep, jobs); why == "" {
			return jobs
		}
		if time.Now().After(deadline) {
			t.Fatalf("sacct for %s after %v: %s; it shows:\n%s", ep, sacctPatience, why, sacctView(ep, jobs))
		}
		time.Sleep(time.Second)
	}
}

// idsOf maps an outcome's stages to job ids.
func idsOf(o outcomeJSON) map[string]string {
	ids := map[string]string{}
	for s, j := range o.Jobs {
		ids[s] = j.ID
	}
	return ids
}

// allStates gives every stage the same state prefix.
func allStates(prefix string, stages ...string) map[string]string {
	m := map[string]string{}
	for _, s := range stages {
		m[s] = prefix
	}
	return m
}

// eventually calls f every interval until it returns "" and fails t with
// f's last complaint after limit.
func eventually(t *testing.T, limit, interval time.Duration, f func() string) {
	t.Helper()
	deadline := time.Now().Add(limit)
	for {
		why := f()
		if why == "" {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("after %v: %s", limit, why)
		}
		time.Sleep(interval)
	}
}

// ---- the cases -------------------------------------------------------------

// testScored: a normal episode is scored, and every verb and the cluster
// agree.
func (x *labCLI) testScored(t *testing.T) {
	t.Parallel()
	state, cfg, ep := t.TempDir(), x.config(t, ""), newEpisode(t, "scored")

	r := x.run(t, state, episodeTimeout, "run", "--config", cfg, "--json", "--episode", ep).want(t, ExitOK)
	t.Logf("run took %v", r.took.Round(time.Millisecond))
	o := outcomeOf(t, r)
	if o.Episode != ep || o.Outcome != "scored" {
		t.Fatalf("outcome %s %s (%s), want %s scored\n%s", o.Episode, o.Outcome, o.FailureReason, ep, r)
	}
	switch {
	case o.Reward == nil || math.IsNaN(*o.Reward) || *o.Reward < 0 || *o.Reward > 1:
		t.Errorf("reward %s, want a number in [0,1]", fmtReward(o.Reward))
	case o.AIME25AvgAt8 == nil || *o.AIME25AvgAt8 != *o.Reward:
		t.Errorf("aime25_avg_at_8 %s != reward %s", fmtReward(o.AIME25AvgAt8), fmtReward(o.Reward))
	}
	if o.MaskSample || o.FailureReason != "" || o.FailureStage != "" {
		t.Errorf("scored with mask_sample %v failure %q/%q", o.MaskSample, o.FailureStage, o.FailureReason)
	}
	if o.Isolation != "none" {
		t.Errorf("isolation %q, want none (the lab)", o.Isolation)
	}
	if o.Completed != 1 {
		t.Errorf("completed %d, want 1", o.Completed)
	}
	if o.TrainReward == nil || o.InnerSteps == nil || *o.InnerSteps != 5 {
		t.Errorf("train_reward %s inner_steps %v, want the stand-in's (5 steps)", fmtReward(o.TrainReward), o.InnerSteps)
	}
	if want := x.lab.Workdir + "/" + ep; o.Dir != want {
		t.Errorf("dir %q, want %q", o.Dir, want)
	}
	hex64 := regexp.MustCompile(`^[0-9a-f]{64}$`)
	if !hex64.MatchString(o.PatchSHA256) || !hex64.MatchString(o.CheckpointSHA256) {
		t.Errorf("patch_sha256 %q checkpoint_sha256 %q: want hex sha256s", o.PatchSHA256, o.CheckpointSHA256)
	}
	wantJobs(t, o, allStates("COMPLETED", labStages...))
	for s, j := range o.Jobs {
		if j.ExitCode != "0:0" || j.Start.IsZero() || j.End.IsZero() {
			t.Errorf("%s job %s: exit %q start %v end %v, want 0:0 and both times", s, j.ID, j.ExitCode, j.Start, j.End)
		}
	}
	if tr, ev := o.Jobs["train"], o.Jobs["eval"]; ev.Start.Before(tr.End) {
		t.Errorf("eval started %v before train ended %v", ev.Start, tr.End)
	}

	// result prints the same outcome.
	res := x.run(t, state, quickTimeout, "result", "--json", ep).want(t, ExitOK)
	var a, b map[string]any
	oneJSON(t, r, &a)
	oneJSON(t, res, &b)
	if !reflect.DeepEqual(a, b) {
		t.Errorf("result --json differs from run --json:\nrun: %s\nresult: %s", r.stdout, res.stdout)
	}

	// logs shows the eval record, naming the eval job. (The flags go
	// before the episode: urfave/cli stops parsing flags at the first
	// argument, although the README writes logs EPISODE [--stage S].)
	logs := x.run(t, state, quickTimeout, "logs", ep, "--stage", "eval").want(t, ExitOK)
	var rec map[string]any
	for _, l := range strings.Split(string(logs.stdout), "\n") {
		if v, ok := strings.CutPrefix(l, "NEMORL_ENV_RESULT="); ok {
			if err := json.Unmarshal([]byte(v), &rec); err != nil {
				t.Errorf("logs: eval record %q: %v", v, err)
			}
		}
	}
	if rec == nil {
		t.Errorf("logs --stage eval has no NEMORL_ENV_RESULT= line\n%s", logs)
	} else if rec["slurm_job_id"] != o.Jobs["eval"].ID {
		t.Errorf("eval record names job %v, want %s", rec["slurm_job_id"], o.Jobs["eval"].ID)
	}

	// status: nothing unfinished.
	st := x.run(t, state, quickTimeout, "status", "--json").want(t, ExitOK)
	var sdoc struct {
		Episodes []json.RawMessage `json:"episodes"`
	}
	oneJSON(t, st, &sdoc)
	if sdoc.Episodes == nil || len(sdoc.Episodes) != 0 {
		t.Errorf("status --json: want \"episodes\": []\n%s", st)
	}

	x.checkClusterDir(t, ep, o)
	waitSacct(t, ep, sacctWant{states: allStates("COMPLETED", labStages...), ids: idsOf(o), tags: true})
}

// checkClusterDir checks a scored episode's directory on the cluster (the
// lab is this machine; the test runs as root): no key left anywhere, mode
// 0700, the manifest names the jobs, the weights are sound and are those
// scored.
func (x *labCLI) checkClusterDir(t *testing.T, ep string, o outcomeJSON) {
	t.Helper()
	dir := o.Dir
	fi, err := os.Stat(dir)
	if err != nil {
		t.Fatalf("episode dir: %v (is the test running as root on the lab machine?)", err)
	}
	if !fi.IsDir() || fi.Mode().Perm() != 0o700 {
		t.Errorf("episode dir %s: mode %v, want a 0700 directory", dir, fi.Mode())
	}
	if _, err := os.Stat(filepath.Join(dir, "author", "secrets.env")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("author/secrets.env still there (stat: %v)", err)
	}
	files := 0
	err = filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() {
			return err
		}
		files++
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		if bytes.Contains(b, []byte(x.apiKey)) {
			t.Errorf("%s holds the policy API key", p)
		}
		return nil
	})
	if err != nil {
		t.Errorf("walk %s: %v", dir, err)
	}
	if files < 10 {
		t.Errorf("only %d files under %s", files, dir)
	}

	b, err := os.ReadFile(filepath.Join(dir, "manifest.json"))
	if err != nil {
		t.Fatal(err)
	}
	var m struct {
		Episode string            `json:"episode"`
		Jobs    map[string]string `json:"jobs"`
	}
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatalf("manifest.json: %v", err)
	}
	if m.Episode != ep || !reflect.DeepEqual(m.Jobs, idsOf(o)) {
		t.Errorf("manifest.json: episode %q jobs %v, want %s %v", m.Episode, m.Jobs, ep, idsOf(o))
	}

	weights := filepath.Join(dir, "train", "checkpoint", "model.safetensors")
	rep, err := evaluate.CheckWeights(weights, evaluate.TinyQwen2())
	if err != nil {
		t.Errorf("CheckWeights(%s): %v", weights, err)
	} else if rep.SHA256 != o.CheckpointSHA256 {
		t.Errorf("weights sha256 %s, outcome checkpoint_sha256 %s", rep.SHA256, o.CheckpointSHA256)
	}
}

// testNoPatch: an empty patch is the policy's failure, and neither train nor
// eval is ever submitted.
func (x *labCLI) testNoPatch(t *testing.T) {
	t.Parallel()
	state, cfg, ep := t.TempDir(), x.config(t, "author", "--no-patch"), newEpisode(t, "no-patch")
	r := x.run(t, state, episodeTimeout, "run", "--config", cfg, "--json", "--episode", ep).want(t, ExitOK)
	o := outcomeOf(t, r)
	wantFailure(t, o, "policy_failure", "no_patch", "author")
	wantJobs(t, o, map[string]string{"author": "COMPLETED"})
	if e := readLedger(t, state, ep); len(e.Jobs) != 1 || e.Jobs["author"].JobID != o.Jobs["author"].ID {
		t.Errorf("ledger jobs %+v, want the author's alone", e.Jobs)
	}
	waitSacct(t, ep, sacctWant{states: map[string]string{"author": "COMPLETED"}, ids: idsOf(o), tags: true})
}

// testTrainFails: a train job that fails takes its waiting eval job with
// it; the train record (or its absence) decides the outcome.
func (x *labCLI) testTrainFails(t *testing.T) {
	cases := []struct {
		flag, kind, reason string
		code               int
	}{
		{"--trainer-crash", "policy_failure", "train_failed", ExitOK},
		{"--patch-rejected", "policy_failure", "patch_rejected", ExitOK},
		// The train job's output is the policy's: no record is its 0.
		{"--no-record", "policy_failure", "missing_record", ExitOK},
	}
	for _, c := range cases {
		t.Run(strings.TrimPrefix(c.flag, "--"), func(t *testing.T) {
			t.Parallel()
			state, cfg := t.TempDir(), x.config(t, "train", c.flag)
			ep := newEpisode(t, strings.TrimPrefix(c.flag, "--"))
			r := x.run(t, state, episodeTimeout, "run", "--config", cfg, "--json", "--episode", ep).want(t, c.code)
			o := outcomeOf(t, r)
			wantFailure(t, o, c.kind, c.reason, "train")
			// Decided at train's end: the outcome shows eval as it was then
			// (waiting on train), and eval is cancelled with the episode.
			wantJobs(t, o, map[string]string{"author": "COMPLETED", "train": "FAILED", "eval": ""})
			if j := o.Jobs["eval"]; j.State != "PENDING" && !strings.HasPrefix(j.State, "CANCELLED") {
				t.Errorf("outcome eval job %s is %q, want PENDING or CANCELLED", j.ID, j.State)
			}
			if j := o.Jobs["train"]; j.ExitCode != "1:0" {
				t.Errorf("train job exit code %q, want 1:0", j.ExitCode)
			}
			waitSacct(t, ep, sacctWant{states: map[string]string{"author": "COMPLETED", "train": "FAILED", "eval": "CANCELLED"}, ids: idsOf(o)})
		})
	}
}

// testEvalNoRecord: an eval job that prints no record gives no reward. The
// evaluator dying is the cluster's: eval is run again (episodes.retries:
// 2) on the same train's weights, then the episode is masked.
func (x *labCLI) testEvalNoRecord(t *testing.T) {
	t.Parallel()
	state, cfg, ep := t.TempDir(), x.config(t, "eval", "--no-record"), newEpisode(t, "eval-no-record")
	r := x.run(t, state, episodeTimeout, "run", "--config", cfg, "--json", "--episode", ep).want(t, ExitInfra)
	o := outcomeOf(t, r)
	wantFailure(t, o, "infra_failure", "missing_record", "eval")
	wantJobs(t, o, allStates("COMPLETED", labStages...))
	a := attemptsOf(t, r.stdout)
	if a.Attempts["eval"] != 3 || a.Attempts["train"] != 1 || len(a.Retried["eval"]) != 2 || len(a.Retried["train"]) != 0 ||
		!strings.Contains(o.Detail, "eval ran 3 times, the last allowed (episodes.retries: 2)") {
		t.Errorf("attempts %v, retried %+v, detail %q: want eval run three times on one train", a.Attempts, a.Retried, o.Detail)
	}
	want := map[string][]string{"author": {o.Jobs["author"].ID + " COMPLETED"}, "train": {o.Jobs["train"].ID + " COMPLETED"}}
	for _, r := range a.Retried["eval"] {
		want["eval"] = append(want["eval"], r.JobID+" COMPLETED")
	}
	want["eval"] = append(want["eval"], o.Jobs["eval"].ID+" COMPLETED "+jobTag(ep, "eval")+":3")
	waitRuns(t, ep, want)
}

// testIntegrity: forged, duplicated or inconsistent records are rejected
// although every job completed. In the trusted eval's output that is an
// integrity violation (exit 4); in the train job's, the policy's 0 flagged as
// tampering; eval scoring other weights than the train record names means
// the train record or checkpoint lied: the policy's 0 too.
func (x *labCLI) testIntegrity(t *testing.T) {
	cases := []struct {
		stage, flag, kind, reason, failStage string
		code                                 int
	}{
		{"train", "--forge-eval-record", "policy_failure", "foreign_record", "train", ExitOK},
		// A forged eval record is an integrity violation where isolation
		// holds; without it (lab-none) the policy's code can forge it: its 0.
		{"eval", "--two-records", "policy_failure", "duplicate_record", "eval", ExitOK},
		{"eval", "--wrong-counts", "policy_failure", "bad_counts", "eval", ExitOK},
		{"eval", "--nan-reward", "policy_failure", "malformed_json", "eval", ExitOK}, // NaN is not JSON
		{"eval", "--wrong-job-id", "policy_failure", "job_id_mismatch", "eval", ExitOK},
		{"eval", "--wrong-weights", "policy_failure", "weights_mismatch", "train", ExitOK},
	}
	for _, c := range cases {
		name := strings.TrimPrefix(c.flag, "--")
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			state, cfg, ep := t.TempDir(), x.config(t, c.stage, c.flag), newEpisode(t, name)
			r := x.run(t, state, episodeTimeout, "run", "--config", cfg, "--json", "--episode", ep).want(t, c.code)
			o := outcomeOf(t, r)
			wantFailure(t, o, c.kind, c.reason, c.failStage)
			if !o.Tampering {
				t.Errorf("outcome not flagged as tampering: %+v", o)
			}
			if o.AIME25AvgAt8 != nil || o.AIME25Exact != nil {
				t.Errorf("a rejected record's scores were reported: aime25_exact %s avg_at_8 %s", fmtReward(o.AIME25Exact), fmtReward(o.AIME25AvgAt8))
			}
			if c.stage == "train" {
				// Decided at train's end: eval, still waiting or running,
				// is cancelled with the episode.
				want := allStates("COMPLETED", "author", "train")
				want["eval"] = "" // any state: it had not ended
				wantJobs(t, o, want)
				return
			}
			wantJobs(t, o, allStates("COMPLETED", labStages...))
			waitSacct(t, ep, sacctWant{states: allStates("COMPLETED", labStages...), ids: idsOf(o)})
		})
	}
}

// testDeadline: run --deadline cancels a train job that never ends (it
// ignores SIGTERM) and its eval, and exits 3.
func (x *labCLI) testDeadline(t *testing.T) {
	t.Parallel()
	const deadline = 20 * time.Second
	// The author never ends (and ignores TERM): whether it is still queued
	// behind the other subtests' jobs or running at the deadline, run must
	// cancel it, and train and eval must never be submitted. (Interrupt
	// covers cancelling a running train with its pending eval.)
	state, cfg, ep := t.TempDir(), x.config(t, "author", "--sleep-forever"), newEpisode(t, "deadline")
	r := x.run(t, state, 2*time.Minute, "run", "--deadline", deadline.String(), "--config", cfg, "--json", "--episode", ep).want(t, ExitInfra)
	t.Logf("run --deadline %v took %v", deadline, r.took.Round(time.Millisecond))
	if r.took < deadline-time.Second || r.took > 90*time.Second {
		t.Errorf("run --deadline %v took %v, want [%v, 90s)", deadline, r.took, deadline)
	}
	o := outcomeOf(t, r)
	wantFailure(t, o, "infra_failure", "deadline", "author")
	states := map[string]string{"author": "CANCELLED"}
	wantJobs(t, o, states)
	waitSacct(t, ep, sacctWant{states: states, ids: idsOf(o)})
}

// testCrashResume: run is killed after submitting the author job; the
// ledger is put back to the instant between sbatch and the save of its job
// id; resume finds the author job on the cluster instead of submitting a
// second one and finishes the episode.
func (x *labCLI) testCrashResume(t *testing.T) {
	t.Parallel()
	state, cfg, ep := t.TempDir(), x.config(t, ""), newEpisode(t, "crash-resume")
	b := x.start(t, state, episodeTimeout, "run", "--json", "--config", cfg, "--episode", ep)

	// Wait for the author's job id in the ledger, then kill run at once.
	authorID := ""
	eventually(t, quickTimeout, 10*time.Millisecond, func() string {
		if b.exited() {
			t.Fatalf("run ended before it was killed\n%s", b.res)
		}
		raw, err := os.ReadFile(ledgerPath(state, ep))
		if err != nil {
			return err.Error()
		}
		var e ledgerEntry
		if err := json.Unmarshal(raw, &e); err != nil {
			return err.Error()
		}
		if authorID = e.Jobs["author"].JobID; authorID == "" {
			return "no author job id in the ledger"
		}
		return ""
	})
	if err := syscall.Kill(-b.cmd.Process.Pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-b.done
	if ws, ok := b.res.state.Sys().(syscall.WaitStatus); !ok || !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
		t.Fatalf("run did not die of SIGKILL: %v\n%s", b.res.state, b.res)
	}
	if err := syscall.Kill(b.cmd.Process.Pid, 0); !errors.Is(err, syscall.ESRCH) {
		t.Fatalf("run (pid %d) still exists: %v", b.cmd.Process.Pid, err)
	}

	// The crash window: sbatch ran, its id was never saved. The entry is
	// put back as nemorl-slurm itself wrote it then (sealed).
	crashWindow(t, state, ep, "author", authorID)

	r := x.run(t, state, episodeTimeout, "resume", "--json", "--config", cfg).want(t, ExitOK)
	o := watchedOutcome(t, r, ep)
	if o.Outcome != "scored" || o.Reward == nil {
		t.Fatalf("resumed episode: %s (%s) reward %s, want scored\n%s", o.Outcome, o.FailureReason, fmtReward(o.Reward), r)
	}
	wantJobs(t, o, allStates("COMPLETED", labStages...))

	e := readLedger(t, state, ep)
	if a := e.Jobs["author"]; a.JobID != authorID || !a.Adopted {
		t.Errorf("ledger author job %q adopted %v, want %s adopted", a.JobID, a.Adopted, authorID)
	}
	for _, s := range labStages {
		if got := e.Jobs[s].JobID; got != o.Jobs[s].ID {
			t.Errorf("ledger %s job %q, outcome %q", s, got, o.Jobs[s].ID)
		}
	}
	for _, s := range []string{"train", "eval"} {
		if e.Jobs[s].Adopted {
			t.Errorf("ledger %s job %s marked adopted; resume submitted it", s, e.Jobs[s].JobID)
		}
	}
	waitSacct(t, ep, sacctWant{states: allStates("COMPLETED", labStages...), ids: idsOf(o), tags: true})
}

// submitDoc is what submit --json prints.
type submitDoc struct {
	Episode   string            `json:"episode"`
	Dir       string            `json:"dir"`
	Isolation string            `json:"isolation"`
	Jobs      map[string]string `json:"jobs"`
}

// submit runs submit --json and returns the author's job id.
func (x *labCLI) submit(t *testing.T, state, cfg, ep string) string {
	t.Helper()
	r := x.run(t, state, quickTimeout, "submit", "--json", "--config", cfg, "--episode", ep).want(t, ExitOK)
	var d submitDoc
	oneJSON(t, r, &d)
	if d.Episode != ep || len(d.Jobs) != 1 || !validJobID(d.Jobs["author"]) {
		t.Fatalf("submit --json: want %s with its author job alone\n%s", ep, r)
	}
	if got := readLedger(t, state, ep).Jobs["author"].JobID; got != d.Jobs["author"] {
		t.Fatalf("ledger author job %q, submit printed %q", got, d.Jobs["author"])
	}
	return d.Jobs["author"]
}

// testSubmitWatch: submit, then watch carries the episode to its score.
func (x *labCLI) testSubmitWatch(t *testing.T) {
	t.Parallel()
	state, cfg, ep := t.TempDir(), x.config(t, ""), newEpisode(t, "submit-watch")
	author := x.submit(t, state, cfg, ep)
	r := x.run(t, state, episodeTimeout, "watch", "--json", ep).want(t, ExitOK)
	o := watchedOutcome(t, r, ep)
	if o.Outcome != "scored" || o.Reward == nil {
		t.Fatalf("watched episode: %s (%s), want scored\n%s", o.Outcome, o.FailureReason, r)
	}
	wantJobs(t, o, allStates("COMPLETED", labStages...))
	if o.Jobs["author"].ID != author {
		t.Errorf("outcome author job %s, submit printed %s", o.Jobs["author"].ID, author)
	}
	waitSacct(t, ep, sacctWant{states: allStates("COMPLETED", labStages...), ids: idsOf(o)})
}

// statusRow is a row of status --json.
type statusRow struct {
	Episode string `json:"episode"`
	Stage   string `json:"stage"`
	JobID   string `json:"job_id"`
	State   string `json:"state"`
}

// waitTrainRunning polls status --json EP until the episode's train job
// runs, and returns its id.
func (x *labCLI) waitTrainRunning(t *testing.T, state, ep string, alive *bgRun) string {
	t.Helper()
	id := ""
	eventually(t, 2*time.Minute, 500*time.Millisecond, func() string {
		if alive != nil && alive.exited() {
			t.Fatalf("watch ended early\n%s", alive.res)
		}
		r := x.run(t, state, quickTimeout, "status", "--json", ep).want(t, ExitOK)
		var doc struct {
			Episodes []statusRow `json:"episodes"`
		}
		oneJSON(t, r, &doc)
		if len(doc.Episodes) != 1 || doc.Episodes[0].Episode != ep {
			t.Fatalf("status --json %s: want one row for it\n%s", ep, r)
		}
		row := doc.Episodes[0]
		if row.Stage != "train" || row.State != "RUNNING" {
			return fmt.Sprintf("episode at %s job %s %s, want train RUNNING", row.Stage, row.JobID, row.State)
		}
		id = row.JobID
		return ""
	})
	return id
}

// testInterrupt: SIGINT to run while its train job runs cancels the
// episode's jobs, reports infra_failure (interrupted) and exits 3. The train
// stand-in behaves as the real launcher does on TERM: it prints a
// trainer_timeout record and exits 1; the cancel, not the policy, ended
// it, so the outcome must not be a policy failure with reward 0.
func (x *labCLI) testInterrupt(t *testing.T) {
	t.Parallel()
	state, cfg, ep := t.TempDir(), x.config(t, "train", "--stopped-by-term"), newEpisode(t, "interrupt")
	r := x.start(t, state, episodeTimeout, "run", "--config", cfg, "--json", "--episode", ep)
	eventually(t, quickTimeout, 50*time.Millisecond, func() string {
		if _, err := os.Stat(ledgerPath(state, ep)); err != nil {
			return err.Error()
		}
		return ""
	})
	x.waitTrainRunning(t, state, ep, r)
	if err := r.cmd.Process.Signal(os.Interrupt); err != nil {
		t.Fatal(err)
	}
	res := r.wait(t, 90*time.Second).want(t, ExitInfra)
	o := outcomeOf(t, res)
	wantFailure(t, o, "infra_failure", "interrupted", "train")
	states := map[string]string{"author": "COMPLETED", "train": "CANCELLED", "eval": "CANCELLED"}
	wantJobs(t, o, states)
	waitSacct(t, ep, sacctWant{states: states, ids: idsOf(o)})
}

// testPreflight: a stage command the cluster does not have is a config
// error at submit (exit 2, naming the key), before anything is staged,
// recorded or submitted.
func (x *labCLI) testPreflight(t *testing.T) {
	t.Parallel()
	state, ep := t.TempDir(), newEpisode(t, "preflight")
	cfg := filepath.Join(t.TempDir(), "lab-none.yaml")
	data := strings.Replace(x.base, "command: ["+labStandIns+"/train]", "command: ["+labStandIns+"/no-such-stand-in]", 1)
	if err := os.WriteFile(cfg, []byte(data), 0o600); err != nil {
		t.Fatal(err)
	}
	r := x.run(t, state, quickTimeout, "submit", "--config", cfg, "--episode", ep).want(t, ExitUsage)
	if !strings.Contains(r.stderr, "stages.train.command[0]") || !strings.Contains(r.stderr, "no-such-stand-in") || len(r.stdout) != 0 {
		t.Errorf("submit with a missing stage command: %s", r)
	}
	if _, err := os.Stat(ledgerPath(state, ep)); !os.IsNotExist(err) {
		t.Errorf("ledger entry after a refused submit: %v", err)
	}
	if _, err := os.Stat(x.lab.Workdir + "/" + ep); !os.IsNotExist(err) {
		t.Errorf("episode dir after a refused submit: %v", err)
	}
}

// testConfigGone: episodes are followed with the configs they were
// submitted with; one whose config file has gone is skipped with its
// reason (exit 3), and the others are still watched to their outcomes.
func (x *labCLI) testConfigGone(t *testing.T) {
	t.Parallel()
	state := t.TempDir()
	cfgA, epA := x.config(t, ""), newEpisode(t, "config-kept")
	cfgB, epB := x.config(t, ""), newEpisode(t, "config-gone")
	x.submit(t, state, cfgA, epA)
	x.submit(t, state, cfgB, epB)
	if err := os.Remove(cfgB); err != nil {
		t.Fatal(err)
	}
	st := x.run(t, state, quickTimeout, "status", "--json").want(t, ExitInfra)
	var doc struct {
		Episodes []statusRow       `json:"episodes"`
		Skipped  map[string]string `json:"skipped"`
	}
	oneJSON(t, st, &doc)
	if len(doc.Episodes) != 1 || doc.Episodes[0].Episode != epA || !strings.Contains(doc.Skipped[epB], cfgB) {
		t.Fatalf("status with one config gone: %s", st)
	}
	w := x.run(t, state, episodeTimeout, "watch", "--json").want(t, ExitInfra)
	var wd watchDoc
	oneJSON(t, w, &wd)
	final := map[string]bool{}
	for _, e := range wd.Episodes {
		final[e.Episode] = e.Final
	}
	if len(final) != 2 || !final[epA] || final[epB] || !strings.Contains(wd.Error, epB) {
		t.Fatalf("watch with one config gone: %s", w)
	}
}

// testClean: clean removes a finished episode's directory from the cluster
// and keeps its outcome in the ledger; it refuses an unfinished episode and
// removes nothing then.
func (x *labCLI) testClean(t *testing.T) {
	t.Parallel()
	state, cfg, ep := t.TempDir(), x.config(t, "author", "--no-patch"), newEpisode(t, "clean")
	x.run(t, state, episodeTimeout, "run", "--config", cfg, "--json", "--episode", ep).want(t, ExitOK)
	dir := x.lab.Workdir + "/" + ep
	if _, err := os.Stat(dir); err != nil {
		t.Fatalf("episode dir before clean: %v", err)
	}
	before := x.run(t, state, quickTimeout, "result", "--json", ep).want(t, ExitOK)

	r := x.run(t, state, quickTimeout, "clean", ep, "--json").want(t, ExitOK)
	var doc struct {
		Cleaned []string `json:"cleaned"`
		Errors  []string `json:"errors"`
	}
	oneJSON(t, r, &doc)
	if len(doc.Cleaned) != 1 || doc.Cleaned[0] != ep || len(doc.Errors) != 0 {
		t.Fatalf("clean --json: %s", r)
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Fatalf("episode dir after clean: %v, want gone", err)
	}
	after := x.run(t, state, quickTimeout, "result", "--json", ep).want(t, ExitOK)
	if string(after.stdout) != string(before.stdout) {
		t.Errorf("the outcome changed with clean:\n%s\n%s", before.stdout, after.stdout)
	}

	// An unfinished episode: refused, nothing removed.
	cfg2, ep2 := x.config(t, "author", "--sleep-forever"), newEpisode(t, "clean-running")
	x.submit(t, state, cfg2, ep2)
	t.Cleanup(func() { x.run(t, state, quickTimeout, "cancel", ep2) })
	u := x.run(t, state, quickTimeout, "clean", ep2).want(t, ExitUsage)
	if !strings.Contains(u.stderr, "not finished") {
		t.Errorf("clean of an unfinished episode: %s", u)
	}
	if _, err := os.Stat(x.lab.Workdir + "/" + ep2); err != nil {
		t.Errorf("unfinished episode dir after a refused clean: %v", err)
	}
}

// testCleanArray: the authors of submit --count 2 are one job array; the
// array's directory (its script) stays while either episode's does, and
// goes with the last one cleaned.
func (x *labCLI) testCleanArray(t *testing.T) {
	t.Parallel()
	state, cfg := t.TempDir(), x.config(t, "author", "--no-patch")
	eps := x.submitCount(t, state, cfg, 2)
	x.run(t, state, episodeTimeout, "watch", "--json", eps[0], eps[1]).want(t, ExitOK)
	arr := readLedger(t, state, eps[0]).Jobs["author"].Array
	if arr == nil || readLedger(t, state, eps[1]).Jobs["author"].Array == nil || readLedger(t, state, eps[1]).Jobs["author"].Array.Name != arr.Name {
		t.Fatalf("submit --count 2: authors %+v, %+v: want one array", readLedger(t, state, eps[0]).Jobs["author"], readLedger(t, state, eps[1]).Jobs["author"])
	}
	dir := filepath.Dir(arr.Script)
	x.run(t, state, quickTimeout, "clean", eps[0]).want(t, ExitOK)
	if _, err := os.Stat(arr.Script); err != nil {
		t.Fatalf("the array's script after cleaning one of its two episodes: %v, want kept", err)
	}
	x.run(t, state, quickTimeout, "clean", eps[1]).want(t, ExitOK)
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Fatalf("the array's directory %s after cleaning both episodes: %v, want gone", dir, err)
	}
}

// testSubmitWatchCancel: cancel stops an episode another process watches;
// the watch and result report infra_failure cancelled.
func (x *labCLI) testSubmitWatchCancel(t *testing.T) {
	t.Parallel()
	state, cfg, ep := t.TempDir(), x.config(t, "train", "--sleep-forever"), newEpisode(t, "cancel")
	x.submit(t, state, cfg, ep)
	w := x.start(t, state, episodeTimeout, "watch", "--json", ep)
	train := x.waitTrainRunning(t, state, ep, w)

	r := x.run(t, state, quickTimeout, "cancel", "--json", ep).want(t, ExitOK)
	var doc struct {
		Cancelled    map[string][]string `json:"cancelled"`
		AlreadyEnded map[string][]string `json:"already_ended"`
		Errors       []string            `json:"errors"`
	}
	oneJSON(t, r, &doc)
	e := readLedger(t, state, ep)
	// The author had completed: it is reported as ended, not cancelled
	// (bug: every job was reported cancelled).
	want := []string{e.Jobs[string(stages.Train)].JobID, e.Jobs[string(stages.Eval)].JobID}
	got := slices.Clone(doc.Cancelled[ep])
	slices.Sort(got)
	slices.Sort(want)
	if len(doc.Cancelled) != 1 || !slices.Equal(got, want) || !slices.Contains(got, train) || len(doc.Errors) != 0 ||
		!slices.Equal(doc.AlreadyEnded[ep], []string{e.Jobs[string(stages.Author)].JobID}) {
		t.Errorf("cancel --json: want %s: %v cancelled (with train job %s), author %s already ended, no errors\n%s", ep, want, train, e.Jobs[string(stages.Author)].JobID, r)
	}
	// The outcome line does not show a train reward for a cancelled episode.
	defer func() {
		if rr := x.run(t, state, quickTimeout, "result", ep); strings.Contains(string(rr.stdout), "train_reward") {
			t.Errorf("result of a cancelled episode shows a train reward:\n%s", rr)
		}
	}()

	wr := w.wait(t, 2*time.Minute).want(t, ExitInfra)
	o := watchedOutcome(t, wr, ep)
	wantFailure(t, o, "infra_failure", "cancelled", "")
	states := map[string]string{"author": "COMPLETED", "train": "CANCELLED", "eval": "CANCELLED"}
	wantJobs(t, o, states)

	res := x.run(t, state, quickTimeout, "result", "--json", ep).want(t, ExitInfra)
	if ro := outcomeOf(t, res); ro.Outcome != "infra_failure" || ro.FailureReason != "cancelled" {
		t.Errorf("result: %s (%s), want infra_failure (cancelled)", ro.Outcome, ro.FailureReason)
	}
	waitSacct(t, ep, sacctWant{states: states, ids: idsOf(o)})
}

// testResultUnknown: result on an episode the ledger does not know is a
// usage error with a hint.
func (x *labCLI) testResultUnknown(t *testing.T) {
	t.Parallel()
	state := t.TempDir()
	ep := "ep-test-unknown-" + fmt.Sprint(time.Now().UnixNano())
	r := x.run(t, state, quickTimeout, "result", ep).want(t, ExitUsage)
	if !strings.Contains(r.stderr, ep) || !strings.Contains(r.stderr, "not in the ledger") || !strings.Contains(r.stderr, "\nhint: ") {
		t.Errorf("stderr should name %s, say it is not in the ledger, and give a hint\n%s", ep, r)
	}
	if len(r.stdout) != 0 {
		t.Errorf("stdout not empty\n%s", r)
	}
}

// testResultUnfinished: result on a running episode says so (exit 2), and
// gives the outcome once the episode is cancelled.
func (x *labCLI) testResultUnfinished(t *testing.T) {
	t.Parallel()
	state, cfg, ep := t.TempDir(), x.config(t, "train", "--sleep-forever"), newEpisode(t, "unfinished")
	x.submit(t, state, cfg, ep)
	// Nobody watches: each result advances the episode one poll (it
	// submits train and eval once the author is done).
	var last cliRun
	eventually(t, 2*time.Minute, time.Second, func() string {
		last = x.run(t, state, quickTimeout, "result", "--json", ep).want(t, ExitUsage)
		if !strings.Contains(last.stderr, "episode "+ep+" is not finished") || !strings.Contains(last.stderr, "hint: ") {
			t.Fatalf("want \"episode %s is not finished\" and a hint\n%s", ep, last)
		}
		if !regexp.MustCompile(`train job [0-9]+ is RUNNING`).MatchString(last.stderr) {
			return "result: " + strings.TrimSpace(last.stderr)
		}
		return ""
	})
	if e := readLedger(t, state, ep); e.Outcome != nil {
		t.Fatalf("ledger has an outcome for an unfinished episode: %s", e.Outcome)
	}

	x.run(t, state, quickTimeout, "cancel", ep).want(t, ExitOK)
	eventually(t, time.Minute, time.Second, func() string {
		last = x.run(t, state, quickTimeout, "result", "--json", ep)
		if last.code == ExitUsage {
			return "still not finished: " + strings.TrimSpace(last.stderr)
		}
		return ""
	})
	last.want(t, ExitInfra)
	o := outcomeOf(t, last)
	wantFailure(t, o, "infra_failure", "cancelled", "")
	waitSacct(t, ep, sacctWant{states: map[string]string{"author": "COMPLETED", "train": "CANCELLED", "eval": "CANCELLED"}, ids: idsOf(o)})
}

// testCancelBeforeTrainWhileWatched: cancel while another process (watch)
// owns the episode, after the author ended and before the owner submitted
// train. The README promises "nothing more is submitted; the outcome
// becomes infra_failure / cancelled". cancel does not own the episode, so it
// leaves a cancel marker; the owner must honour it at its next poll rather
// than submit train. The watcher is stopped (SIGSTOP) across the window to
// make the race certain.
func (x *labCLI) testCancelBeforeTrainWhileWatched(t *testing.T) {
	t.Parallel()
	state, cfg, ep := t.TempDir(), x.config(t, ""), newEpisode(t, "cancel-race")
	author := x.submit(t, state, cfg, ep)
	w := x.start(t, state, episodeTimeout, "watch", "--json", ep)

	// Wait until watch holds the episode's lock, then freeze it.
	lg := &ledger.Ledger{Dir: filepath.Join(state, "nemorl-slurm")}
	eventually(t, quickTimeout, 20*time.Millisecond, func() string {
		if locked, err := lg.Locked(ep); err != nil || !locked {
			return fmt.Sprintf("watch does not hold %s (%v)", ep, err)
		}
		return ""
	})
	if err := syscall.Kill(-w.cmd.Process.Pid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	waitSacct(t, ep, sacctWant{states: map[string]string{"author": "COMPLETED"}, ids: map[string]string{"author": author}})
	x.run(t, state, quickTimeout, "cancel", ep).want(t, ExitOK)
	if err := syscall.Kill(-w.cmd.Process.Pid, syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}

	o := watchedOutcome(t, w.wait(t, 2*time.Minute), ep)
	wantFailure(t, o, "infra_failure", "cancelled", "train") // the author had completed; train never started
	if e := readLedger(t, state, ep); e.CancelRequested != "cancelled" {
		t.Errorf("ledger cancel_requested %q, want cancelled", e.CancelRequested)
	}
	time.Sleep(3 * time.Second) // nothing may be submitted later either
	waitSacct(t, ep, sacctWant{states: map[string]string{"author": "COMPLETED"}, ids: map[string]string{"author": author}})
}
