package templates

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nemorl/nemorl-slurm/configs"
	"github.com/nemorl/nemorl-slurm/evaluate"
	"github.com/nemorl/nemorl-slurm/record"
	"github.com/nemorl/nemorl-slurm/stages"
)

// standInProblems is the lab's stand-in problem set, the image root's
// eval/aime25.jsonl here.
const standInProblems = "../lab/stand-ins/aime25-stand-in.jsonl"

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
	// The lab's generated stand-in problem set (never real AIME25 text).
	aime, err := os.ReadFile(standInProblems)
	if err != nil {
		t.Fatal(err)
	}
	files["eval/aime25.jsonl"] = string(aime)
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

// payloadCmd is a stage's built-in payload under bash with the variables
// the exec line gives it, plus the stand-in image root.
func payloadCmd(t *testing.T, tr *Tree, stage stages.Stage, root, log string, env map[string]string) *exec.Cmd {
	t.Helper()
	cmd := exec.Command("bash", filepath.Join(tr.Dir, string(stage), "bundle", string(stage)+".sh"))
	cmd.Env = []string{"PATH=/usr/local/bin:/usr/bin:/bin", "HOME=/nonexistent", "TMPDIR=" + t.TempDir(),
		"NEMORL_IMAGE_ROOT=" + root, "NEMORL_STANDIN_LOG=" + log, "NEMORL_STANDIN_REAL_BIN=" + os.Getenv("NEMORL_STANDIN_REAL_BIN"),
		"NEMORL_EPISODE=" + tr.Episode, "NEMORL_STAGE=" + string(stage), "SLURM_JOB_ID=4242"}
	for k, v := range env {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	return cmd
}

// runPayload runs a stage's payload to its end.
func runPayload(t *testing.T, tr *Tree, stage stages.Stage, root, log string, env map[string]string) (stdout, stderr string, code int) {
	t.Helper()
	cmd := payloadCmd(t, tr, stage, root, log, env)
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

// payloadEpisode renders the lab config with the built-in payloads into a
// temp workdir, stages secrets.env, and lays out the stand-in image root.
func payloadEpisode(t *testing.T) (tr *Tree, root, log string, at func(string) string) {
	t.Helper()
	dir := t.TempDir()
	root = imageRoot(t, dir)
	log = filepath.Join(dir, "commands.log")
	cfg := loadExample(t, "lab-none.yaml")
	cfg.Cluster.Workdir = filepath.Join(dir, "work")
	cfg.Stages.Author.Command, cfg.Stages.Train.Command, cfg.Stages.Eval.Command = nil, nil, nil
	tr, err := Render(cfg, Input{Episode: "ep-payloads", Prompt: []byte("Improve GRPO.\n"), Version: "test"})
	if err != nil {
		t.Fatal(err)
	}
	writeTree(t, tr)
	at = func(rel string) string { return filepath.Join(tr.Dir, rel) }
	if err := os.WriteFile(at("author/secrets.env"), []byte("NEMORL_POLICY_API_KEY="+testKey+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return tr, root, log, at
}

func TestPayloads(t *testing.T) {
	tr, root, log, at := payloadEpisode(t)
	cfg := loadExample(t, "lab-none.yaml")

	// author
	out, errs, code := runPayload(t, tr, stages.Author, root, log, map[string]string{
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
		claudeLog, _ := os.ReadFile(at("author/claude.log"))
		t.Fatalf("patch %v, %+v:\n%s\nclaude.log:\n%s", err, ar, patch, claudeLog)
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
	out, errs, code = runPayload(t, tr, stages.Train, root, log, map[string]string{
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
	out, errs, code = runPayload(t, tr, stages.Eval, root, log, map[string]string{
		"NEMORL_WEIGHTS": at("train/checkpoint/model.safetensors"), "NEMORL_PATCH": at("author/change.diff"), "NEMORL_BUNDLE": at("eval/bundle"), "NEMORL_OUT": at("eval/work")})
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
	// The contamination check read the author's patch and the image's
	// problems, and found nothing in a learning-rate change.
	if ev.Contaminated || ev.PatchSHA256 != fileSHA256(t, at("author/change.diff")) || ev.ProblemsSHA256 != fileSHA256(t, filepath.Join(root, "eval/aime25.jsonl")) {
		t.Fatalf("eval record: contaminated %v, patch %s, problems %s: want the author's patch and the image's problems, clean", ev.Contaminated, ev.PatchSHA256, ev.ProblemsSHA256)
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

// TestPayloadAuthorTimeout: Claude Code that never ends is stopped at
// research_seconds; the author record says so (timed out, timeout's status
// 124) and the patch is what the policy had written by then (nothing).
func TestPayloadAuthorTimeout(t *testing.T) {
	tr, root, log, at := payloadEpisode(t)
	settings := at("author/bundle/author.json")
	b, _ := os.ReadFile(settings)
	b = regexp.MustCompile(`"research_seconds": [0-9]+`).ReplaceAll(b, []byte(`"research_seconds": 2`))
	if err := os.WriteFile(settings, b, 0o600); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	out, errs, code := runPayload(t, tr, stages.Author, root, log, map[string]string{"NEMORL_STANDIN_MODE": "claude-hangs",
		"NEMORL_OUT": at("author"), "NEMORL_BUNDLE": at("author/bundle"), "NEMORL_PROMPT": at("author/prompt.txt"), "NEMORL_SECRETS": at("author/secrets.env")})
	if code != 0 || time.Since(start) > 30*time.Second {
		t.Fatalf("author exit %d after %s\n%s%s", code, time.Since(start), out, errs)
	}
	rec, err := record.Scan(record.StageAuthor, []byte(out))
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	a := rec.(*record.Author)
	if !a.TimedOut || a.ExitStatus != 124 || a.PatchBytes != 0 {
		t.Fatalf("author record %+v, want timed out (124) with no patch", a)
	}
}

// TestPayloadTrainTerm: TERM to the train payload (Slurm's, near the time
// limit) reaches the launcher, which stops the trainer and still prints its
// record (trainer_timeout, exit 1, so eval is cancelled); the work dir goes.
func TestPayloadTrainTerm(t *testing.T) {
	tr, root, log, at := payloadEpisode(t)
	// A real patch, from the author payload.
	if out, errs, code := runPayload(t, tr, stages.Author, root, log, map[string]string{
		"NEMORL_OUT": at("author"), "NEMORL_BUNDLE": at("author/bundle"), "NEMORL_PROMPT": at("author/prompt.txt"), "NEMORL_SECRETS": at("author/secrets.env")}); code != 0 {
		t.Fatalf("author exit %d\n%s%s", code, out, errs)
	}
	cmd := payloadCmd(t, tr, stages.Train, root, log, map[string]string{"NEMORL_STANDIN_MODE": "trainer-hangs",
		"NEMORL_PATCH": at("author/change.diff"), "NEMORL_BUNDLE": at("train/bundle"), "NEMORL_OUT": at("train/checkpoint"),
		"NEMORL_DEADLINE": strconv.FormatInt(time.Now().Add(30*time.Second).Unix(), 10)})
	tmp := strings.TrimPrefix(cmd.Env[2], "TMPDIR=")
	var out, errs syncBuffer
	cmd.Stdout, cmd.Stderr = &out, &errs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	deadline := time.Now().Add(30 * time.Second)
	for {
		if b, _ := os.ReadFile(log); strings.Contains(string(b), "run_grpo_nemo_gym.py") {
			break
		}
		if time.Now().After(deadline) {
			cmd.Process.Kill()
			<-done
			b, _ := os.ReadFile(log)
			t.Fatalf("the trainer never started\nlog:\n%s\nstdout:\n%s\nstderr:\n%s", b, out.String(), errs.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
	time.Sleep(300 * time.Millisecond)
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	var err error
	select {
	case err = <-done:
	case <-time.After(60 * time.Second):
		cmd.Process.Kill()
		t.Fatalf("the payload did not end after TERM\n%s", errs.String())
	}
	ee, ok := err.(*exec.ExitError)
	if !ok || ee.ExitCode() != 1 {
		t.Fatalf("exit %v, want 1\n%s%s", err, out.String(), errs.String())
	}
	rec, rerr := record.Scan(record.StageTrain, []byte(out.String()))
	if rerr != nil {
		t.Fatalf("%v\n%s", rerr, out.String())
	}
	if tr := rec.(*record.Train); tr.Status != record.StatusTrainerTimeout || tr.TrainReward != 0.125 {
		t.Fatalf("train record %+v, want trainer_timeout with the reward seen so far", tr)
	}
	if left, _ := filepath.Glob(filepath.Join(tmp, "nemorl-train.*")); len(left) != 0 {
		t.Fatalf("work dir left behind: %v", left)
	}
}

// TestPayloadEvalWeightsRejected: weights that `evaluate check-weights`
// rejects (its exit 4) make the eval payload exit 68 (the policy's weights
// were bad), before any server starts and without a record.
func TestPayloadEvalWeightsRejected(t *testing.T) {
	tr, root, log, at := payloadEpisode(t)
	if err := os.WriteFile(at("train/checkpoint/model.safetensors"), []byte("\x08\x00\x00\x00\x00\x00\x00\x00{\"a\":1}"), 0o600); err != nil {
		t.Fatal(err)
	}
	out, errs, code := runPayload(t, tr, stages.Eval, root, log, map[string]string{
		"NEMORL_WEIGHTS": at("train/checkpoint/model.safetensors"), "NEMORL_PATCH": at("author/change.diff"), "NEMORL_BUNDLE": at("eval/bundle"), "NEMORL_OUT": at("eval/work")})
	if code != stages.ExitWeightsRejected || !strings.Contains(errs, "weights rejected") || strings.Contains(out, "NEMORL_ENV_RESULT") {
		t.Fatalf("exit %d, want %d\n%s%s", code, stages.ExitWeightsRejected, out, errs)
	}
	if b, _ := os.ReadFile(log); strings.Contains(string(b), "vllm") {
		t.Errorf("a server started for rejected weights:\n%s", b)
	}
}

// TestPayloadEvalContaminated: a patch that adds the eval problems as a
// JSONL training file is not scored: the payload prints the record of
// reward 0 with the evidence, starts no server, and keeps the report.
func TestPayloadEvalContaminated(t *testing.T) {
	tr, root, log, at := payloadEpisode(t)
	// The image stand-in's export writes weights check-weights accepts.
	export := exec.Command(filepath.Join(root, "src/NeMo-RL/.venv/bin/python"), "export_dcp.py", "--dcp", t.TempDir(), "--out", at("train/checkpoint/model.safetensors"))
	export.Env = append(os.Environ(), "NEMORL_STANDIN_LOG="+filepath.Join(t.TempDir(), "export.log"))
	if b, err := export.CombinedOutput(); err != nil {
		t.Fatalf("export: %v\n%s", err, b)
	}
	rows, err := os.ReadFile(filepath.Join(root, "eval/aime25.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.SplitAfter(strings.TrimSuffix(string(rows), "\n"), "\n")
	patch := fmt.Sprintf("diff --git a/data/extra.jsonl b/data/extra.jsonl\nnew file mode 100644\nindex 0000000..1111111\n--- /dev/null\n+++ b/data/extra.jsonl\n@@ -0,0 +1,%d @@\n+%s\n", len(lines), strings.Join(lines, "+"))
	if err := os.WriteFile(at("author/change.diff"), []byte(patch), 0o600); err != nil {
		t.Fatal(err)
	}
	settings := at("eval/bundle/eval.json")
	b, _ := os.ReadFile(settings)
	if err := os.WriteFile(settings, bytes.Replace(b, []byte(`"qwen2.5-1.5b-instruct"`), []byte(`"tiny-qwen2"`), 1), 0o600); err != nil {
		t.Fatal(err)
	}
	out, errs, code := runPayload(t, tr, stages.Eval, root, log, map[string]string{
		"NEMORL_WEIGHTS": at("train/checkpoint/model.safetensors"), "NEMORL_PATCH": at("author/change.diff"), "NEMORL_BUNDLE": at("eval/bundle"), "NEMORL_OUT": at("eval/work")})
	if code != 0 {
		t.Fatalf("eval exit %d\n%s%s", code, out, errs)
	}
	rec, err := record.Scan(record.StageEval, []byte(out))
	if err != nil {
		t.Fatalf("eval record: %v\n%s", err, out)
	}
	ev := rec.(*record.Eval)
	if !ev.Contaminated || ev.Reward != 0 || ev.Correct != 0 || !strings.Contains(ev.Contamination, "problem 1:") || ev.PatchSHA256 != fileSHA256(t, at("author/change.diff")) {
		t.Fatalf("eval record %+v: want contaminated, reward 0, evidence naming problem 1, the patch's sha256", ev)
	}
	if b, _ := os.ReadFile(log); strings.Contains(string(b), "vllm") || strings.Contains(string(b), "gym eval") {
		t.Errorf("a contaminated patch's weights were served or sampled:\n%s", b)
	}
	if _, err := os.Stat(at("eval/work/contamination.json")); err != nil {
		t.Errorf("the report is not kept: %v", err)
	}
}

// fileSHA256 is a file's hex sha256.
func fileSHA256(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// TestRunAuthorEndpointStatus runs the rendered author script with a fake
// payload that writes the proxy's status lines on descriptor 4: the script
// exits 75 (stages.ExitPolicyEndpoint) only when the built-in proxy's header is
// there and no call succeeded, or the last one failed with 5xx, 429 or
// connect; otherwise the payload's status stands (and a payload claiming 75
// itself is reported as 1).
func TestRunAuthorEndpointStatus(t *testing.T) {
	if stages.ExitPolicyEndpoint != 75 || !stages.ReservedExit(stages.ExitPolicyEndpoint) {
		t.Fatalf("ExitPolicyEndpoint %d must be 75, in the reserved range", stages.ExitPolicyEndpoint)
	}
	for _, c := range []struct {
		name  string
		lines []string
		exit  int
		want  int
	}{
		{"ok, ok", []string{"proxy 1 started", "ok", "ok"}, 0, 0},
		{"ok, ok, payload failed", []string{"proxy 1 started", "ok", "ok"}, 3, 3},
		{"ok, error 500", []string{"proxy 1 started", "ok", "error 500"}, 0, stages.ExitPolicyEndpoint},
		{"ok, error 429", []string{"proxy 1 started", "ok", "error 429"}, 1, stages.ExitPolicyEndpoint},
		{"ok, error connect", []string{"proxy 1 started", "ok", "error connect"}, 1, stages.ExitPolicyEndpoint},
		{"ok, error 400 - prompt too long", []string{"proxy 1 started", "ok", "error 400"}, 1, 1},
		{"error 500, then ok", []string{"proxy 1 started", "error 500", "ok"}, 0, 0},
		{"started only", []string{"proxy 1 started"}, 1, stages.ExitPolicyEndpoint},
		{"only errors 400", []string{"proxy 1 started", "error 400", "error 400"}, 1, stages.ExitPolicyEndpoint},
		{"no status - replaced command", nil, 0, 0},
		{"no status, payload failed", nil, 2, 2},
		{"no header: lines ignored", []string{"error 500"}, 0, 0},
		{"payload claims 75", nil, 75, stages.ExitPayloadReserved},
	} {
		t.Run(c.name, func(t *testing.T) {
			body := `rm -f "$NEMORL_SECRETS"` + "\n"
			for _, l := range c.lines {
				body += "echo '" + l + "' >&4\n"
			}
			body += "exit " + strconv.Itoa(c.exit)
			tr := stageRun(t, map[stages.Stage]string{stages.Author: body})
			if err := os.WriteFile(filepath.Join(tr.Dir, "author/secrets.env"), []byte("NEMORL_POLICY_API_KEY=x\n"), 0o600); err != nil {
				t.Fatal(err)
			}
			out, code := runScript(t, tr, stages.Author)
			if code != c.want {
				t.Fatalf("exit %d, want %d\n%s", code, c.want, out)
			}
			if (code == stages.ExitPolicyEndpoint) != strings.Contains(out, "nemorl: policy endpoint:") {
				t.Errorf("stderr does not say why:\n%s", out)
			}
		})
	}
}

// TestPayloadAuthorKeyNeverInEnviron: while the author payload runs (the
// stand-in Claude Code holds still after its model call, the proxy up), no
// process on the machine carries the API key in its environment or its
// command line: the key travels on a descriptor only.
func TestPayloadAuthorKeyNeverInEnviron(t *testing.T) {
	tr, root, log, at := payloadEpisode(t)
	release := filepath.Join(t.TempDir(), "release")
	cmd := payloadCmd(t, tr, stages.Author, root, log, map[string]string{"NEMORL_STANDIN_CLAUDE_WAIT": release,
		"NEMORL_OUT": at("author"), "NEMORL_BUNDLE": at("author/bundle"), "NEMORL_PROMPT": at("author/prompt.txt"), "NEMORL_SECRETS": at("author/secrets.env")})
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	defer func() {
		_ = os.WriteFile(release, nil, 0o600)
		<-done
	}()
	// Wait for the stand-in claude to be holding (it logs its model call).
	deadline := time.Now().Add(60 * time.Second)
	for {
		b, _ := os.ReadFile(log)
		if strings.Contains(string(b), "claude: waiting for") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the stand-in claude never reached its wait\n%s", errb.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
	scanned, proxies := 0, 0
	procs, _ := filepath.Glob("/proc/[0-9]*")
	for _, p := range procs {
		for _, f := range []string{"environ", "cmdline"} {
			b, err := os.ReadFile(filepath.Join(p, f))
			if err != nil {
				continue // gone, or not ours to read
			}
			scanned++
			if f == "cmdline" && bytes.Contains(b, []byte("author_proxy.py")) {
				// This episode's proxy, not one of another package's
				// tests running at the same time (cli's author tests).
				if env, err := os.ReadFile(filepath.Join(p, "environ")); err == nil && bytes.Contains(env, []byte(tr.Dir)) {
					proxies++
				}
			}
			if bytes.Contains(b, []byte(testKey)) {
				t.Errorf("%s/%s holds the API key: %q", p, f, bytes.ReplaceAll(b, []byte{0}, []byte{' '}))
			}
		}
	}
	if proxies != 1 || scanned < 10 {
		t.Fatalf("scanned %d /proc files, %d proxy processes; want the proxy running during the scan", scanned, proxies)
	}
	_ = os.WriteFile(release, nil, 0o600)
	if err := <-done; err != nil {
		t.Fatalf("author payload: %v\n%s", err, errb.String())
	}
	done <- nil
	if _, err := os.Stat(at("author/secrets.env")); !os.IsNotExist(err) {
		t.Errorf("secrets.env still there: %v", err)
	}
}
