package templates

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nemorl/nemorl-slurm/configs"
	"github.com/nemorl/nemorl-slurm/evaluate"
	"github.com/nemorl/nemorl-slurm/record"
)

// imageRoot lays out a stand-in image root as the three images do
// (NEMORL_IMAGE_ROOT, normally /opt/nemorl): the real nemorl-slurm, and the
// image stand-in (testdata/imagestandin) linked as claude, the venvs'
// python and gym. It returns the root.
func imageRoot(t *testing.T, dir string) string {
	t.Helper()
	root := filepath.Join(dir, "image")
	real := filepath.Join(dir, "nemorl-slurm.real")
	standin := filepath.Join(dir, "imagestandin")
	for bin, pkg := range map[string]string{real: "../cmd/nemorl-slurm", standin: "./testdata/imagestandin"} {
		if out, err := exec.Command("go", "build", "-o", bin, pkg).CombinedOutput(); err != nil {
			t.Fatalf("go build %s: %v\n%s", pkg, err, out)
		}
	}
	files := map[string]string{
		"src/recipe.yaml": "grpo:\n  num_prompts_per_step: 8\npolicy:\n  optimizer:\n    lr: 5.0e-6\n",
		"src/train_math.jsonl": `{"input": "What is 1+1?", "output": "2"}` + "\n" +
			`{"input": "What is 2+3?", "output": "5"}` + "\n",
		"src/NeMo-RL/pyproject.toml":                            "[project]\nname = \"nemo-rl\"\n",
		"src/NeMo-RL/nemo_rl/__init__.py":                       "",
		"src/NeMo-RL/examples/nemo_gym/run_grpo_nemo_gym.py":    "# the real trainer is in the image\n",
		"src/NeMo-RL/3rdparty/Gym-workspace/Gym/pyproject.toml": "[project]\nname = \"nemo-gym\"\n",
		"model/config.json":                                     `{"architectures": ["Qwen2ForCausalLM"]}`,
		"model/tokenizer.json":                                  `{}`,
	}
	var aime bytes.Buffer
	for i := range 30 {
		fmt.Fprintf(&aime, `{"question": "AIME25 stand-in problem %d", "expected_answer": "%d"}`+"\n", i, i)
	}
	files["eval/aime25.jsonl"] = aime.String()
	for rel, data := range files {
		p := filepath.Join(root, rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for _, link := range []string{"bin/nemorl-slurm", "bin/claude", "gym-venv/bin/python", "src/NeMo-RL/.venv/bin/python", "src/NeMo-RL/.venv/bin/gym"} {
		p := filepath.Join(root, link)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(standin, p); err != nil {
			t.Fatal(err)
		}
	}
	t.Setenv("NEMORL_STANDIN_REAL_BIN", real)
	return root
}

// runPayload runs a stage's built-in payload under bash with the variables
// the exec line gives it, plus the stand-in image root.
func runPayload(t *testing.T, tr *Tree, stage, root, log string, env map[string]string) (stdout, stderr string, code int) {
	t.Helper()
	cmd := exec.Command("bash", filepath.Join(tr.Dir, stage, "bundle", stage+".sh"))
	cmd.Env = []string{"PATH=/usr/local/bin:/usr/bin:/bin", "HOME=/nonexistent", "TMPDIR=" + t.TempDir(),
		"NEMORL_IMAGE_ROOT=" + root, "NEMORL_STANDIN_LOG=" + log, "NEMORL_STANDIN_REAL_BIN=" + os.Getenv("NEMORL_STANDIN_REAL_BIN"),
		"NEMORL_EPISODE=" + tr.Episode, "NEMORL_STAGE=" + stage, "SLURM_JOB_ID=4242"}
	for k, v := range env {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return out.String(), errb.String(), code
}

// TestPayloads runs the three built-in payloads one after the other on a
// rendered episode, with the image's programs played by stand-ins: each
// prints a record that passes the collector's checks, the chain binds
// (patch → weights → score), and the command lines every payload runs are
// the golden ones (testdata/golden/payload-commands.txt; -update rewrites).
func TestPayloads(t *testing.T) {
	dir := t.TempDir()
	root := imageRoot(t, dir)
	log := filepath.Join(dir, "commands.log")
	cfg := loadExample(t, "lab.yaml")
	cfg.Cluster.Workdir = filepath.Join(dir, "work")
	cfg.Stages.Author.Command, cfg.Stages.Train.Command, cfg.Stages.Eval.Command = nil, nil, nil
	tr, err := Render(cfg, Input{Episode: "ep-payloads", Prompt: []byte("Improve GRPO.\n"), Version: "test"})
	if err != nil {
		t.Fatal(err)
	}
	writeTree(t, tr)
	at := func(rel string) string { return filepath.Join(tr.Dir, rel) }
	if err := os.WriteFile(at("author/secrets.env"), []byte("NEMORL_POLICY_API_KEY="+testKey+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}

	// author
	out, errs, code := runPayload(t, tr, Author, root, log, map[string]string{
		"NEMORL_OUT": at("author"), "NEMORL_BUNDLE": at("author/bundle"), "NEMORL_PROMPT": at("author/prompt.txt"), "NEMORL_SECRETS": at("author/secrets.env")})
	if code != 0 {
		t.Fatalf("author exit %d\n%s%s", code, out, errs)
	}
	rec, err := record.Scan(record.StageAuthor, []byte(out))
	if err != nil {
		t.Fatalf("author record: %v\n%s", err, out)
	}
	ar := rec.(*record.Author)
	patch, _ := os.ReadFile(at("author/change.diff"))
	if err := record.VerifyPatch(ar, patch); err != nil || ar.FilesChanged != 1 || !strings.Contains(string(patch), "+# tuned by the stand-in policy") {
		t.Fatalf("patch %v, %+v:\n%s", err, ar, patch)
	}
	if _, err := os.Stat(at("author/secrets.env")); !os.IsNotExist(err) {
		t.Fatalf("secrets.env survived the author payload: %v", err)
	}
	var resp map[string]any
	if b, _ := os.ReadFile(at("author/response.json")); json.Unmarshal(b, &resp) != nil || resp["object"] != "response" {
		t.Fatalf("response.json: %s", b)
	}

	// train
	deadline := time.Now().Add(time.Duration(configs.InnerDeadlineSeconds(cfg.Stages.Train.TrainSeconds)) * time.Second)
	out, errs, code = runPayload(t, tr, Train, root, log, map[string]string{
		"NEMORL_PATCH": at("author/change.diff"), "NEMORL_BUNDLE": at("train/bundle"), "NEMORL_OUT": at("train/checkpoint"),
		"NEMORL_DEADLINE": strconv.FormatInt(deadline.Unix(), 10)})
	if code != 0 {
		t.Fatalf("train exit %d\n%s%s", code, out, errs)
	}
	rec, err = record.Scan(record.StageTrain, []byte(out))
	if err != nil {
		t.Fatalf("train record: %v\n%s", err, out)
	}
	trr := rec.(*record.Train)
	if trr.Status != record.StatusOK || trr.InnerSteps != 3 || trr.TrainReward != 0.375 {
		t.Fatalf("train record %+v", trr)
	}

	// eval: the stand-in weights are the tiny architecture.
	settings := at("eval/bundle/eval.json")
	b, _ := os.ReadFile(settings)
	if err := os.WriteFile(settings, bytes.Replace(b, []byte(`"qwen2.5-1.5b-instruct"`), []byte(`"tiny-qwen2"`), 1), 0o600); err != nil {
		t.Fatal(err)
	}
	out, errs, code = runPayload(t, tr, Eval, root, log, map[string]string{
		"NEMORL_WEIGHTS": at("train/checkpoint/model.safetensors"), "NEMORL_BUNDLE": at("eval/bundle"), "NEMORL_OUT": at("eval/work")})
	if code != 0 {
		t.Fatalf("eval exit %d\n%s%s", code, out, errs)
	}
	rec, err = record.Scan(record.StageEval, []byte(out))
	if err != nil {
		t.Fatalf("eval record: %v\n%s", err, out)
	}
	ev := rec.(*record.Eval)
	if err := record.VerifyEvalJob(ev, "4242"); err != nil {
		t.Fatal(err)
	}
	if err := record.VerifyWeights(trr, ev); err != nil {
		t.Fatal(err)
	}
	correct := 0
	for i := range 30 {
		correct += min(i%9, 8)
	}
	if ev.Correct != correct || ev.Reward != record.RewardFor(correct) {
		t.Fatalf("eval scored %d (reward %g), the stand-in answered %d right", ev.Correct, ev.Reward, correct)
	}
	if rep, err := evaluate.CheckWeights(at("train/checkpoint/model.safetensors"), evaluate.TinyQwen2()); err != nil || rep.SHA256 != ev.WeightsSHA256 {
		t.Fatalf("weights: %v", err)
	}

	// What ran, and with which arguments.
	raw, err := os.ReadFile(log)
	if err != nil {
		t.Fatal(err)
	}
	got := normalizeCommands(string(raw), map[string]string{root: "$ROOT", tr.Dir: "$EP"})
	if strings.Contains(got, testKey) {
		t.Fatal("the policy key is in a command line")
	}
	golden := filepath.Join("testdata", "golden", "payload-commands.txt")
	if *update {
		if err := os.WriteFile(golden, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatal(err)
	}
	if got != string(want) {
		t.Errorf("payload command lines differ from %s (go test ./templates -run TestPayloads -update, then review):\n%s", golden, got)
	}
}

var (
	reWorkDir = regexp.MustCompile(`/[^ '"]*/(nemorl-[a-z-]+)\.[A-Za-z0-9]{6}`)
	rePort    = regexp.MustCompile(`(127\.0\.0\.1:|--port )[0-9]+`)
	reCommit  = regexp.MustCompile(`\b[0-9a-f]{40}\b`)
	reSaveBy  = regexp.MustCompile(`checkpoint_must_save_by=[0-9:]+`)
)

// normalizeCommands replaces what differs between runs: temp paths, ports,
// the baseline commit, the time left to the deadline.
func normalizeCommands(s string, paths map[string]string) string {
	for p, name := range paths {
		s = strings.ReplaceAll(s, p, name)
	}
	s = reWorkDir.ReplaceAllString(s, "$$TMPDIR/$1.XXXXXX")
	s = rePort.ReplaceAllString(s, "${1}PORT")
	s = reCommit.ReplaceAllString(s, "COMMIT")
	s = reSaveBy.ReplaceAllString(s, "checkpoint_must_save_by=DD:HH:MM:SS")
	return s
}
