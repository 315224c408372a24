package lab_test

// Tests of the lab's stand-in stage commands (lab/stand-ins/{author,train,eval}):
// each is run directly with bash, as the jobs run it (cleared environment,
// cwd = the stage directory), in a temporary directory laid out like an
// episode, and its outputs are checked with the repository's own record and
// evaluate packages. No Slurm is needed.

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nemorl/nemorl-slurm/evaluate"
	"github.com/nemorl/nemorl-slurm/record"
)

// cleanPath is the PATH the jobs run with.
const cleanPath = "PATH=/usr/local/bin:/usr/bin:/bin"

// recipeFixture is the recipe.yaml the stand-in author's patch is made
// against (the script's $base).
const recipeFixture = `grpo:
  num_prompts_per_step: 32
  num_generations_per_prompt: 16
policy:
  optimizer:
    name: adamw
    lr: 5.0e-6
    weight_decay: 0.01
    betas: [0.9, 0.999]
    eps: 1.0e-8
`

func bashPath(t *testing.T) string {
	t.Helper()
	p, err := exec.LookPath("bash")
	if err != nil {
		t.Skip("bash not found: the stand-ins are bash scripts")
	}
	return p
}

func script(t *testing.T, stage record.Stage) string {
	t.Helper()
	p, err := filepath.Abs(filepath.Join("stand-ins", string(stage)))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(p); err != nil {
		t.Fatal(err)
	}
	return p
}

// episode is a temporary episode directory.
type episode struct {
	name string
	dir  string
	key  string // the policy API key staged in author/secrets.env
	// Slurm job ids of the three stages.
	authorJob, trainJob, evalJob string
}

func newEpisode(t *testing.T, name string, firstJob int) *episode {
	t.Helper()
	var kb [16]byte
	if _, err := rand.Read(kb[:]); err != nil {
		t.Fatal(err)
	}
	e := &episode{
		name: name, dir: t.TempDir(), key: "sk-standin-test-" + hex.EncodeToString(kb[:]),
		authorJob: strconv.Itoa(firstJob), trainJob: strconv.Itoa(firstJob + 1), evalJob: strconv.Itoa(firstJob + 2),
	}
	for _, d := range []string{"author/bundle", "train/bundle", "train/checkpoint", "eval/bundle", "eval/work"} {
		if err := os.MkdirAll(e.path(d), 0o700); err != nil {
			t.Fatal(err)
		}
	}
	for rel, data := range map[string]string{
		"author/prompt.txt":         "Improve the GRPO recipe for AIME25.\n",
		"author/bundle/author.json": `{"max_turns":4}` + "\n",
		"train/bundle/train.json":   `{"train_seconds":60}` + "\n",
		"eval/bundle/eval.json":     `{"problems":30,"samples_per_problem":8}` + "\n",
	} {
		if err := os.WriteFile(e.path(rel), []byte(data), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(e.path("author/secrets.env"), []byte("NEMORL_POLICY_API_KEY="+e.key+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return e
}

func (e *episode) path(rel string) string { return filepath.Join(e.dir, filepath.FromSlash(rel)) }

func (e *episode) authorEnv() []string {
	return []string{
		"NEMORL_EPISODE=" + e.name, "NEMORL_STAGE=author",
		"NEMORL_OUT=" + e.path("author"), "NEMORL_BUNDLE=" + e.path("author/bundle"),
		"NEMORL_PROMPT=" + e.path("author/prompt.txt"), "NEMORL_SECRETS=" + e.path("author/secrets.env"),
		"SLURM_JOB_ID=" + e.authorJob, "SLURM_CPUS_PER_TASK=1",
	}
}

// trainEnv writes the weights to out (default train/checkpoint).
func (e *episode) trainEnv(out string) []string {
	if out == "" {
		out = e.path("train/checkpoint")
	}
	return []string{
		"NEMORL_EPISODE=" + e.name, "NEMORL_STAGE=train",
		"NEMORL_PATCH=" + e.path("author/change.diff"), "NEMORL_BUNDLE=" + e.path("train/bundle"),
		"NEMORL_OUT=" + out, "NEMORL_DEADLINE=" + strconv.FormatInt(time.Now().Unix()+60, 10),
		"SLURM_JOB_ID=" + e.trainJob,
	}
}

func (e *episode) evalEnv() []string {
	return []string{
		"NEMORL_EPISODE=" + e.name, "NEMORL_STAGE=eval",
		"NEMORL_WEIGHTS=" + e.path("train/checkpoint/model.safetensors"), "NEMORL_BUNDLE=" + e.path("eval/bundle"),
		"NEMORL_OUT=" + e.path("eval/work"), "SLURM_JOB_ID=" + e.evalJob,
	}
}

func (e *episode) env(stage record.Stage) []string {
	switch stage {
	case record.StageAuthor:
		return e.authorEnv()
	case record.StageTrain:
		return e.trainEnv("")
	}
	return e.evalEnv()
}

type result struct {
	stdout, stderr []byte
	code           int
}

// run runs a stand-in like a job does: env -i PATH=… HOME=/nonexistent
// NEMORL_…, cwd = the stage directory.
func (e *episode) run(t *testing.T, stage record.Stage, env []string, args ...string) result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bashPath(t), append([]string{script(t, stage)}, args...)...)
	cmd.Env = append([]string{cleanPath, "HOME=/nonexistent"}, env...)
	cmd.Dir = e.path(string(stage))
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	var ee *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &ee) && ee.Exited():
	default:
		t.Fatalf("%s %v: %v\nstderr:\n%s", stage, args, err, stderr.Bytes())
	}
	r := result{stdout: stdout.Bytes(), stderr: stderr.Bytes(), code: cmd.ProcessState.ExitCode()}
	t.Logf("%s %v: exit %d\nstdout:\n%sstderr:\n%s", stage, args, r.code, r.stdout, r.stderr)
	return r
}

func sha256File(t *testing.T, path string) (string, int64) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:]), int64(len(b))
}

func wantExit(t *testing.T, r result, code int) {
	t.Helper()
	if r.code != code {
		t.Fatalf("exit status %d, want %d", r.code, code)
	}
}

func wantReason(t *testing.T, err error, want record.Reason) {
	t.Helper()
	if got := record.ReasonOf(err); got != want {
		t.Fatalf("rejection %q (%v), want %q", got, err, want)
	}
}

func wantStandInLog(t *testing.T, stage record.Stage, r result) {
	t.Helper()
	if !bytes.Contains(r.stderr, []byte("stand-in "+string(stage)+": ")) {
		t.Errorf("stderr does not say it is a stand-in:\n%s", r.stderr)
	}
}

// runAuthor runs the normal author stage and checks everything about it.
func runAuthor(t *testing.T, e *episode) *record.Author {
	t.Helper()
	r := e.run(t, record.StageAuthor, e.authorEnv())
	wantExit(t, r, 0)
	wantStandInLog(t, record.StageAuthor, r)
	rec, err := record.Scan(record.StageAuthor, r.stdout)
	if err != nil {
		t.Fatal(err)
	}
	a := rec.(*record.Author)
	patch, err := os.ReadFile(e.path("author/change.diff"))
	if err != nil {
		t.Fatal(err)
	}
	if err := record.VerifyPatch(a, patch); err != nil {
		t.Fatal(err)
	}
	if a.PatchBytes == 0 || a.FilesChanged != 1 || a.ExitStatus != 0 || a.TimedOut || a.Turns < 1 {
		t.Errorf("author record %+v", a)
	}
	if !bytes.Contains(patch, []byte("+    lr: ")) || !bytes.Contains(patch, []byte("episode "+e.name)) {
		t.Errorf("change.diff does not change the learning rate for episode %s:\n%s", e.name, patch)
	}
	if sum, _ := sha256File(t, e.path("author/response.json")); sum != a.ResponseSHA256 {
		t.Errorf("response.json sha256 %s, record %s", sum, a.ResponseSHA256)
	}
	var resp struct {
		ID, Object, Model, Status string
		Output                    []struct {
			Type, Role string
			Content    []struct{ Type, Text string }
		}
	}
	b, err := os.ReadFile(e.path("author/response.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &resp); err != nil {
		t.Fatalf("response.json: %v\n%s", err, b)
	}
	if resp.Object != "response" || resp.Model != "stand-in" || resp.Status != "completed" || resp.ID == "" ||
		len(resp.Output) != 1 || resp.Output[0].Role != "assistant" || len(resp.Output[0].Content) != 1 ||
		!strings.Contains(resp.Output[0].Content[0].Text, "tand-in") || !strings.Contains(resp.Output[0].Content[0].Text, e.name) {
		t.Errorf("response.json: %+v", resp)
	}
	wantSecretsGone(t, e, r)

	// The patch applies to the fixture recipe.yaml, as git would apply it.
	if git, err := exec.LookPath("git"); err == nil {
		dir := t.TempDir()
		if err := os.WriteFile(filepath.Join(dir, "recipe.yaml"), []byte(recipeFixture), 0o600); err != nil {
			t.Fatal(err)
		}
		cmd := exec.Command(git, "apply", "--check", "--verbose", e.path("author/change.diff"))
		cmd.Dir = dir
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Errorf("git apply --check: %v\n%s", err, out)
		}
	} else {
		t.Log("git not found: not checking that change.diff applies")
	}
	return a
}

// wantSecretsGone checks that secrets.env is deleted and that the key shows
// nowhere: not on stdout, not on stderr, in no file of the episode.
func wantSecretsGone(t *testing.T, e *episode, r result) {
	t.Helper()
	if _, err := os.Lstat(e.path("author/secrets.env")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("secrets.env survived the author stand-in: %v", err)
	}
	key := []byte(e.key)
	if bytes.Contains(r.stdout, key) || bytes.Contains(r.stderr, key) {
		t.Errorf("the policy API key appears in the author's output")
	}
	err := filepath.WalkDir(e.dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		if bytes.Contains(b, key) {
			t.Errorf("the policy API key appears in %s", p)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// runTrain runs the normal train stage and checks the weights.
func runTrain(t *testing.T, e *episode) *record.Train {
	t.Helper()
	r := e.run(t, record.StageTrain, e.trainEnv(""))
	wantExit(t, r, 0)
	wantStandInLog(t, record.StageTrain, r)
	rec, err := record.Scan(record.StageTrain, r.stdout)
	if err != nil {
		t.Fatal(err)
	}
	tr := rec.(*record.Train)
	if tr.Status != record.StatusOK || tr.InnerSteps < 1 || tr.TrainerExitStatus != 0 || tr.TrainReward < 0 || tr.TrainReward > 1 {
		t.Errorf("train record %+v", tr)
	}
	weights := e.path("train/checkpoint/model.safetensors")
	wantTinyWeights(t, weights, tr.WeightsSHA256, tr.WeightsBytes)
	return tr
}

func wantTinyWeights(t *testing.T, path, sha string, size int64) {
	t.Helper()
	arch := evaluate.TinyQwen2()
	rep, err := evaluate.CheckWeights(path, arch)
	if err != nil {
		t.Fatalf("CheckWeights: %v", err)
	}
	if rep.SHA256 != sha || rep.Size != size {
		t.Errorf("weights: sha256 %s, %d bytes; the record says %s, %d bytes", rep.SHA256, rep.Size, sha, size)
	}
	if sum, n := sha256File(t, path); sum != sha || n != size {
		t.Errorf("weights file: sha256 %s, %d bytes; the record says %s, %d bytes", sum, n, sha, size)
	}
	if rep.Parameters != arch.Parameters() || rep.Tensors != len(arch.Tensors)-1 || !rep.TiedHead ||
		rep.DTypes["BF16"] != rep.Tensors || len(rep.DTypes) != 1 {
		t.Errorf("weights report %+v, want %d BF16 tensors of %s with a tied head (%d parameters)", rep, len(arch.Tensors)-1, arch.Name, arch.Parameters())
	}
}

// runEval runs the normal eval stage and checks its record and rollouts.
func runEval(t *testing.T, e *episode, tr *record.Train) *record.Eval {
	t.Helper()
	r := e.run(t, record.StageEval, e.evalEnv())
	wantExit(t, r, 0)
	wantStandInLog(t, record.StageEval, r)
	rec, err := record.Scan(record.StageEval, r.stdout)
	if err != nil {
		t.Fatal(err)
	}
	ev := rec.(*record.Eval)
	if err := record.VerifyEvalJob(ev, e.evalJob); err != nil {
		t.Error(err)
	}
	if err := record.VerifyWeights(tr, ev); err != nil {
		t.Error(err)
	}
	if ev.Reward != float64(ev.Correct)/240 || ev.Reward != record.RewardFor(ev.Correct) ||
		ev.AIME25Exact != ev.Reward || ev.AIME25AvgAt8 != ev.Reward {
		t.Errorf("reward %v, aime25_exact %v, aime25_avg_at_8 %v for %d correct", ev.Reward, ev.AIME25Exact, ev.AIME25AvgAt8, ev.Correct)
	}
	if ev.WandbURL != "" || ev.Completed != 1 {
		t.Errorf("eval record %+v", ev)
	}

	// rollouts.jsonl: one row per answer, consistent with the counts.
	path := e.path("eval/work/rollouts.jsonl")
	if sum, _ := sha256File(t, path); sum != ev.RolloutsSHA256 {
		t.Errorf("rollouts sha256 %s, record %s", sum, ev.RolloutsSHA256)
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var counts [record.Problems]int
	seen := map[[2]int]bool{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var row struct {
			Task    *int     `json:"_ng_task_index"`
			Rollout *int     `json:"_ng_rollout_index"`
			Reward  *float64 `json:"reward"`
		}
		if err := json.Unmarshal(sc.Bytes(), &row); err != nil || row.Task == nil || row.Rollout == nil || row.Reward == nil {
			t.Fatalf("rollout row %q: %v", sc.Text(), err)
		}
		q, s, rw := *row.Task, *row.Rollout, *row.Reward
		if q < 0 || q >= record.Problems || s < 0 || s >= record.SamplesPerProblem || (rw != 0 && rw != 1) || seen[[2]int{q, s}] {
			t.Fatalf("bad or repeated rollout row %q", sc.Text())
		}
		seen[[2]int{q, s}] = true
		counts[q] += int(rw)
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	if len(seen) != record.TotalSamples {
		t.Errorf("%d rollout rows, want %d", len(seen), record.TotalSamples)
	}
	if !slices.Equal(counts[:], ev.PerQuestionCorrect) {
		t.Errorf("rollouts count %v correct per question, the record says %v", counts, ev.PerQuestionCorrect)
	}
	return ev
}

// TestStandInChain runs author → train → eval for two episodes and checks
// each stage with the collector's own checks, and that the episodes differ
// all along the chain (the score is derived from the weights, the weights
// from the patch, the patch from the episode).
func TestStandInChain(t *testing.T) {
	bashPath(t)
	t.Parallel()
	type out struct {
		a  *record.Author
		tr *record.Train
		ev *record.Eval
	}
	var outs []out
	for i, name := range []string{"lab-ep-0001", "lab-ep-0002"} {
		e := newEpisode(t, name, 1000+10*i)
		var o out
		t.Run(name, func(t *testing.T) {
			t.Run("author", func(t *testing.T) { o.a = runAuthor(t, e) })
			if o.a == nil {
				t.FailNow()
			}
			t.Run("train", func(t *testing.T) { o.tr = runTrain(t, e) })
			if o.tr == nil {
				t.FailNow()
			}
			t.Run("eval", func(t *testing.T) { o.ev = runEval(t, e, o.tr) })
			if o.ev == nil {
				t.FailNow()
			}
			// Deterministic: the same patch gives the same weights.
			again := t.TempDir()
			r := e.run(t, record.StageTrain, e.trainEnv(again))
			wantExit(t, r, 0)
			rec, err := record.Scan(record.StageTrain, r.stdout)
			if err != nil {
				t.Fatal(err)
			}
			if got := rec.(*record.Train); *got != *o.tr {
				t.Errorf("train again on the same patch: %+v, first run %+v", got, o.tr)
			}
		})
		outs = append(outs, o)
	}
	if t.Failed() {
		return
	}
	a, b := outs[0], outs[1]
	if a.a.PatchSHA256 == b.a.PatchSHA256 {
		t.Errorf("two episodes, one patch %s", a.a.PatchSHA256)
	}
	if a.tr.WeightsSHA256 == b.tr.WeightsSHA256 {
		t.Errorf("two patches, one set of weights %s", a.tr.WeightsSHA256)
	}
	if a.ev.RolloutsSHA256 == b.ev.RolloutsSHA256 || a.ev.WeightsSHA256 == b.ev.WeightsSHA256 {
		t.Errorf("two sets of weights, same rollouts %s", a.ev.RolloutsSHA256)
	}
}

// TestStandInModes checks that each broken mode produces exactly the
// failure the collector must see.
func TestStandInModes(t *testing.T) {
	bashPath(t)
	t.Parallel()

	// One good chain up to the weights, for the train and eval modes.
	base := newEpisode(t, "lab-modes", 2000)
	baseTrain := func() *record.Train {
		runAuthor(t, base)
		return runTrain(t, base)
	}()

	t.Run("author/no-patch", func(t *testing.T) {
		t.Parallel()
		e := newEpisode(t, "lab-no-patch", 2100)
		r := e.run(t, record.StageAuthor, e.authorEnv(), "--no-patch")
		wantExit(t, r, 0)
		rec, err := record.Scan(record.StageAuthor, r.stdout)
		if err != nil {
			t.Fatal(err)
		}
		a := rec.(*record.Author)
		if a.PatchBytes != 0 || a.FilesChanged != 0 || a.PatchSHA256 != record.EmptySHA256 {
			t.Errorf("no-patch record %+v", a)
		}
		patch, err := os.ReadFile(e.path("author/change.diff"))
		if err != nil {
			t.Fatal(err)
		}
		if err := record.VerifyPatch(a, patch); err != nil || len(patch) != 0 {
			t.Errorf("change.diff of %d bytes: %v", len(patch), err)
		}
		wantSecretsGone(t, e, r)
	})
	t.Run("author/missing-secrets", func(t *testing.T) {
		t.Parallel()
		e := newEpisode(t, "lab-no-secrets", 2200)
		if err := os.Remove(e.path("author/secrets.env")); err != nil {
			t.Fatal(err)
		}
		r := e.run(t, record.StageAuthor, e.authorEnv())
		wantExit(t, r, 78)
		_, err := record.Scan(record.StageAuthor, r.stdout)
		wantReason(t, err, record.ReasonMissingRecord)
	})
	t.Run("author/key-formats", func(t *testing.T) {
		t.Parallel()
		for i, format := range []string{"NEMORL_POLICY_API_KEY=%s", "OTHER=1\r\nNEMORL_POLICY_API_KEY=%s\r\n"} {
			e := newEpisode(t, "lab-key-"+strconv.Itoa(i), 2250+10*i)
			if err := os.WriteFile(e.path("author/secrets.env"), []byte(strings.ReplaceAll(format, "%s", e.key)), 0o600); err != nil {
				t.Fatal(err)
			}
			r := e.run(t, record.StageAuthor, e.authorEnv())
			wantExit(t, r, 0)
			if _, err := record.Scan(record.StageAuthor, r.stdout); err != nil {
				t.Errorf("secrets.env %q: %v", format, err)
			}
			wantSecretsGone(t, e, r)
		}
	})
	t.Run("author/empty-key", func(t *testing.T) {
		t.Parallel()
		e := newEpisode(t, "lab-empty-key", 2300)
		if err := os.WriteFile(e.path("author/secrets.env"), []byte("NEMORL_POLICY_API_KEY=\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		r := e.run(t, record.StageAuthor, e.authorEnv())
		wantExit(t, r, 78)
		if _, err := os.Lstat(e.path("author/secrets.env")); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("secrets.env survived: %v", err)
		}
	})

	t.Run("train/trainer-crash", func(t *testing.T) {
		t.Parallel()
		out := t.TempDir()
		r := base.run(t, record.StageTrain, base.trainEnv(out), "--trainer-crash")
		wantExit(t, r, 1)
		rec, err := record.Scan(record.StageTrain, r.stdout)
		if err != nil {
			t.Fatal(err)
		}
		tr := rec.(*record.Train)
		if tr.Status != record.StatusTrainerFailed || tr.TrainerExitStatus != 1 {
			t.Errorf("trainer-crash record %+v", tr)
		}
		if _, err := os.Lstat(filepath.Join(out, "model.safetensors")); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("weights written although the trainer crashed: %v", err)
		}
	})
	t.Run("train/patch-rejected", func(t *testing.T) {
		t.Parallel()
		out := t.TempDir()
		r := base.run(t, record.StageTrain, base.trainEnv(out), "--patch-rejected")
		wantExit(t, r, 1)
		rec, err := record.Scan(record.StageTrain, r.stdout)
		if err != nil {
			t.Fatal(err)
		}
		if tr := rec.(*record.Train); tr.Status != record.StatusPatchFailed || tr.TrainerExitStatus != 0 {
			t.Errorf("patch-rejected record %+v", tr)
		}
		if _, err := os.Lstat(filepath.Join(out, "model.safetensors")); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("weights written although the patch was rejected: %v", err)
		}
	})
	t.Run("train/no-record", func(t *testing.T) {
		t.Parallel()
		out := t.TempDir()
		r := base.run(t, record.StageTrain, base.trainEnv(out), "--no-record")
		wantExit(t, r, 1)
		_, err := record.Scan(record.StageTrain, r.stdout)
		wantReason(t, err, record.ReasonMissingRecord)
		if _, err := evaluate.CheckWeights(filepath.Join(out, "model.safetensors"), evaluate.TinyQwen2()); err != nil {
			t.Errorf("no-record still writes valid weights: %v", err)
		}
	})
	t.Run("train/forge-eval-record", func(t *testing.T) {
		t.Parallel()
		out := t.TempDir()
		r := base.run(t, record.StageTrain, base.trainEnv(out), "--forge-eval-record")
		wantExit(t, r, 0)
		_, err := record.Scan(record.StageTrain, r.stdout)
		wantReason(t, err, record.ReasonForeignRecord)
		// The forged line itself is a plausible eval record.
		for _, line := range strings.Split(string(r.stdout), "\n") {
			if strings.HasPrefix(line, record.PrefixEval) {
				if _, err := record.ParseLine(record.StageEval, []byte(line)); err != nil {
					t.Errorf("the forged eval record is not even plausible: %v", err)
				}
			}
		}
	})

	evalMode := func(flag string) result {
		t.Helper()
		return base.run(t, record.StageEval, base.evalEnv(), flag)
	}
	// The eval modes share base's eval/work: run them one after the other.
	t.Run("eval", func(t *testing.T) {
		t.Run("no-record", func(t *testing.T) {
			r := evalMode("--no-record")
			wantExit(t, r, 0)
			_, err := record.Scan(record.StageEval, r.stdout)
			wantReason(t, err, record.ReasonMissingRecord)
		})
		t.Run("two-records", func(t *testing.T) {
			r := evalMode("--two-records")
			wantExit(t, r, 0)
			_, err := record.Scan(record.StageEval, r.stdout)
			wantReason(t, err, record.ReasonDuplicateRecord)
		})
		t.Run("wrong-counts", func(t *testing.T) {
			r := evalMode("--wrong-counts")
			wantExit(t, r, 0)
			_, err := record.Scan(record.StageEval, r.stdout)
			wantReason(t, err, record.ReasonBadCounts)
		})
		t.Run("nan-reward", func(t *testing.T) {
			r := evalMode("--nan-reward")
			wantExit(t, r, 0)
			if !bytes.Contains(r.stdout, []byte(`{"reward":NaN,`)) {
				t.Fatalf("no NaN reward in %s", r.stdout)
			}
			// NaN is not JSON: the object does not even parse.
			_, err := record.Scan(record.StageEval, r.stdout)
			wantReason(t, err, record.ReasonMalformedJSON)
		})
		t.Run("wrong-job-id", func(t *testing.T) {
			r := evalMode("--wrong-job-id")
			wantExit(t, r, 0)
			rec, err := record.Scan(record.StageEval, r.stdout)
			if err != nil {
				t.Fatal(err)
			}
			ev := rec.(*record.Eval)
			if err := record.VerifyWeights(baseTrain, ev); err != nil {
				t.Error(err)
			}
			wantReason(t, record.VerifyEvalJob(ev, base.evalJob), record.ReasonJobIDMismatch)
		})
		t.Run("wrong-weights", func(t *testing.T) {
			r := evalMode("--wrong-weights")
			wantExit(t, r, 0)
			rec, err := record.Scan(record.StageEval, r.stdout)
			if err != nil {
				t.Fatal(err)
			}
			ev := rec.(*record.Eval)
			if err := record.VerifyEvalJob(ev, base.evalJob); err != nil {
				t.Error(err)
			}
			wantReason(t, record.VerifyWeights(baseTrain, ev), record.ReasonWeightsMismatch)
		})
	})

	for _, stage := range record.Stages {
		t.Run(string(stage)+"/unknown-flag", func(t *testing.T) {
			t.Parallel()
			e := newEpisode(t, "lab-flags", 2400)
			for _, args := range [][]string{{"--bogus"}, {"--exit"}, {"--exit", "256"}, {"--exit", "x"}, {"--sleep-forever", "--exit", "1"}} {
				r := e.run(t, stage, e.env(stage), args...)
				wantExit(t, r, 2)
				if len(r.stdout) != 0 || !bytes.Contains(r.stderr, []byte("stand-in "+string(stage)+": ")) {
					t.Errorf("%v: stdout %q, stderr %q", args, r.stdout, r.stderr)
				}
			}
		})
		t.Run(string(stage)+"/exit", func(t *testing.T) {
			t.Parallel()
			e := newEpisode(t, "lab-exit", 2500)
			r := e.run(t, stage, e.env(stage), "--exit", "3")
			wantExit(t, r, 3)
			if len(r.stdout) != 0 {
				t.Errorf("--exit printed %q", r.stdout)
			}
			if stage == record.StageAuthor {
				wantSecretsGone(t, e, r)
			}
		})
	}
}

// TestStandInSleepForever checks that --sleep-forever survives SIGTERM (a
// stage that ignores its time limit), then kills its process group.
func TestStandInSleepForever(t *testing.T) {
	bash := bashPath(t)
	t.Parallel()
	for _, stage := range record.Stages {
		t.Run(string(stage), func(t *testing.T) {
			t.Parallel()
			e := newEpisode(t, "lab-sleep", 3000)
			cmd := exec.Command(bash, script(t, stage), "--sleep-forever")
			cmd.Env = append([]string{cleanPath, "HOME=/nonexistent"}, e.env(stage)...)
			cmd.Dir = e.path(string(stage))
			cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
			stderr, err := cmd.StderrPipe()
			if err != nil {
				t.Fatal(err)
			}
			var stdout bytes.Buffer
			cmd.Stdout = &stdout
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			pgid := cmd.Process.Pid
			t.Cleanup(func() { _ = syscall.Kill(-pgid, syscall.SIGKILL) })

			// Wait until TERM is ignored (the script logs after its trap).
			ready := make(chan bool, 1)
			logged := make(chan []byte, 1)
			go func() {
				var all []byte
				br := bufio.NewReader(stderr)
				said := false
				for {
					line, err := br.ReadBytes('\n')
					all = append(all, line...)
					if !said && bytes.Contains(line, []byte("sleeping forever")) {
						said = true
						ready <- true
					}
					if err != nil {
						if !said {
							ready <- false
						}
						logged <- all
						return
					}
				}
			}()
			select {
			case ok := <-ready:
				if !ok {
					_ = syscall.Kill(-pgid, syscall.SIGKILL)
					_ = cmd.Wait()
					t.Fatalf("the stand-in ended before sleeping: %s", <-logged)
				}
			case <-time.After(30 * time.Second):
				t.Fatal("no 'sleeping forever' on stderr after 30 s")
			}

			// The stderr reader must finish before Wait closes the pipe.
			done := make(chan error, 1)
			go func() {
				<-logged
				done <- cmd.Wait()
			}()
			if err := syscall.Kill(-pgid, syscall.SIGTERM); err != nil {
				t.Fatal(err)
			}
			select {
			case err := <-done:
				t.Fatalf("ended %v after SIGTERM", err)
			case <-time.After(300 * time.Millisecond):
			}
			if err := syscall.Kill(-pgid, syscall.SIGKILL); err != nil {
				t.Fatal(err)
			}
			select {
			case err := <-done:
				var ee *exec.ExitError
				if !errors.As(err, &ee) {
					t.Fatalf("after SIGKILL: %v", err)
				}
				if ws, ok := ee.Sys().(syscall.WaitStatus); !ok || !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
					t.Errorf("after SIGKILL: %v", err)
				}
			case <-time.After(30 * time.Second):
				t.Fatal("still running 30 s after SIGKILL")
			}
			// Nothing of the process group is left.
			if err := syscall.Kill(-pgid, 0); !errors.Is(err, syscall.ESRCH) {
				t.Errorf("process group %d still exists after SIGKILL: %v", pgid, err)
			}
			if stdout.Len() != 0 {
				t.Errorf("--sleep-forever printed %q", stdout.Bytes())
			}
			if stage == record.StageAuthor {
				if _, err := os.Lstat(e.path("author/secrets.env")); !errors.Is(err, fs.ErrNotExist) {
					t.Errorf("secrets.env survived --sleep-forever: %v", err)
				}
			}
		})
	}
}
