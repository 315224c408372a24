package templates

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"flag"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nemorl/nemorl-slurm/configs"
	"github.com/nemorl/nemorl-slurm/internal/labtest"
	"github.com/nemorl/nemorl-slurm/stages"
)

var update = flag.Bool("update", false, "rewrite the golden files")

const testKey = "sk-live-do-not-leak-4242"

func lookup(k string) (string, bool) {
	if k == "POLICY_API_KEY" {
		return testKey, true
	}
	return "", false
}

func loadExample(t *testing.T, name string) *configs.Config {
	t.Helper()
	b, err := configs.Example(name)
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := configs.Load(name, b, lookup)
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

func render(t *testing.T, cfg *configs.Config) *Tree {
	t.Helper()
	return renderKillWait(t, cfg, 0)
}

// renderKillWait is render with Input.KillWait (zero: unknown).
func renderKillWait(t *testing.T, cfg *configs.Config, killWait time.Duration) *Tree {
	t.Helper()
	tr, err := Render(cfg, Input{Episode: "ep-20261129T000000Z-golden", Prompt: []byte("Improve GRPO.\n"), Version: "test", KillWait: killWait})
	if err != nil {
		t.Fatal(err)
	}
	return tr
}

// labKillWait is the lab's KillWait (lab/up's and lab/cluster3's
// slurm.conf), what slurm.Client.Config reads there.
const labKillWait = 5 * time.Second

// TestGolden: the lab's configs render as an episode of the lab does, with
// its KillWait (5 s); cluster-example as render --out does, with KillWait
// unknown (Slurm's default 30 s assumed, and the scripts say so).
func TestGolden(t *testing.T) {
	killWait := map[string]time.Duration{"lab.yaml": labKillWait, "lab-none.yaml": labKillWait, "cluster-example.yaml": 0}
	for _, name := range []string{"lab.yaml", "lab-none.yaml", "cluster-example.yaml"} {
		tr := renderKillWait(t, loadExample(t, name), killWait[name])
		for _, stage := range stages.All {
			f, ok := tr.Lookup(stages.Script(stage))
			if !ok {
				t.Fatalf("%s: no %s", name, stages.Script(stage))
			}
			golden := filepath.Join("testdata", "golden", strings.TrimSuffix(name, ".yaml"), string(stage)+".sbatch")
			if *update {
				if err := os.MkdirAll(filepath.Dir(golden), 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(golden, f.Data, 0o644); err != nil {
					t.Fatal(err)
				}
				continue
			}
			want, err := os.ReadFile(golden)
			if err != nil {
				t.Fatalf("%v (run go test ./templates -update)", err)
			}
			if !bytes.Equal(f.Data, want) {
				t.Errorf("%s differs from %s (run go test ./templates -update and review the diff)", stages.Script(stage), golden)
			}
		}
	}
}

func sbatchLines(data []byte) []string {
	var out []string
	for _, l := range strings.Split(string(data), "\n") {
		if strings.HasPrefix(l, "#SBATCH ") {
			out = append(out, strings.TrimPrefix(l, "#SBATCH "))
		}
	}
	return out
}

func has(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

func TestSbatchOptions(t *testing.T) {
	cfg := loadExample(t, "cluster-example.yaml")
	cfg.Cluster.Account, cfg.Cluster.QOS = "rl-lab", "high"
	cfg.Cluster.ExtraSbatch = []string{"--constraint=h100_80gb"}
	tr := render(t, cfg)
	for _, stage := range stages.All {
		f, _ := tr.Lookup(stages.Script(stage))
		o := sbatchLines(f.Data)
		for _, want := range []string{
			"--partition=gpu", "--account=rl-lab", "--qos=high", "--open-mode=truncate",
			"--comment=nemorl:ep-20261129T000000Z-golden:" + string(stage),
			"--output=/scratch/alice/nemorl/ep-20261129T000000Z-golden/" + string(stage) + "/out.log",
			"--signal=B:USR1@120", "--kill-on-invalid-dep=yes", "--export=NONE", "--constraint=h100_80gb",
		} {
			if !has(o, want) {
				t.Errorf("%s: missing #SBATCH %s", stage, want)
			}
		}
		gpu := has(o, "--gres=gpu:h100:1")
		if gpu != (stage != stages.Author) {
			t.Errorf("%s: --gres=gpu:h100:1 present=%v", stage, gpu)
		}
		for _, l := range o {
			if strings.HasPrefix(l, "--gres") && stage == stages.Author {
				t.Errorf("author requests a GPU: %s", l)
			}
		}
		nv := strings.Contains(string(f.Data), " --nv ")
		if nv != (stage != stages.Author) {
			t.Errorf("%s: --nv present=%v", stage, nv)
		}
		for _, flag := range []string{"exec --containall --cleanenv --no-home"} {
			if !strings.Contains(string(f.Data), flag) {
				t.Errorf("%s: exec line lacks %q", stage, flag)
			}
		}
	}
	// Slurm may rerun train and eval (the tool follows the runs), never the
	// author; episodes.no_requeue leaves the retries to the tool.
	for _, noRequeue := range []bool{false, true} {
		cfg.Episodes.NoRequeue = noRequeue
		tr := render(t, cfg)
		for _, stage := range stages.All {
			f, _ := tr.Lookup(stages.Script(stage))
			o := sbatchLines(f.Data)
			want := "--requeue"
			if stage == stages.Author || noRequeue {
				want = "--no-requeue"
			}
			if !has(o, want) || has(o, "--requeue") == has(o, "--no-requeue") {
				t.Errorf("%s (no_requeue %v): want #SBATCH %s alone", stage, noRequeue, want)
			}
		}
	}
	times := map[stages.Stage]string{stages.Author: "--time=01:10:00", stages.Train: "--time=01:10:00", stages.Eval: "--time=02:00:00"}
	for stage, want := range times {
		f, _ := tr.Lookup(stages.Script(stage))
		if !has(sbatchLines(f.Data), want) {
			t.Errorf("%s: want %s", stage, want)
		}
	}
}

// TestBinds checks each stage sees only what it needs, read-only where it
// only reads.
func TestBinds(t *testing.T) {
	tr := render(t, loadExample(t, "cluster-example.yaml"))
	ep := "/scratch/alice/nemorl/ep-20261129T000000Z-golden"
	want := map[stages.Stage][]string{
		// The author writes node-local scratch: its files are copied back.
		stages.Author: {`"$NEMORL_AUTHOR_OUT:/nemorl/author"`},
		// Train's output is node-local: only the weights are copied out.
		stages.Train: {ep + "/author/change.diff:/nemorl/in/change.diff:ro", ep + "/train/bundle:/nemorl/bundle:ro", `"$NEMORL_TRAIN_OUT:/nemorl/out"`},
		// The eval bundle is the script's checked node-local copy.
		stages.Eval: {ep + "/train/checkpoint/model.safetensors:/nemorl/in/model.safetensors:ro", `"$NEMORL_EVAL_PATCH:/nemorl/in/change.diff:ro"`, `"$NEMORL_EVAL_BUNDLE:/nemorl/bundle:ro"`, ep + "/eval/work:/nemorl/out"},
	}
	for stage, binds := range want {
		f, _ := tr.Lookup(stages.Script(stage))
		var got []string
		payload, guard := execLines(t, f.Data)
		if strings.TrimSuffix(guard, " >&2 || nemorl_guard_status=$?") == guard {
			t.Errorf("%s: guard line: %s", stage, guard)
		}
		fields := strings.Fields(payload)
		for i, w := range fields {
			if w == "--bind" {
				got = append(got, fields[i+1])
			}
		}
		if strings.Join(got, " ") != strings.Join(binds, " ") {
			t.Errorf("%s binds = %v, want %v", stage, got, binds)
		}
	}
}

// TestBundleSplit asserts on the rendered tree that author and train never
// receive the evaluator, AIME25 data or eval settings, and eval never
// receives the recipe or the launcher, and reads the patch only as the
// contamination check's data (never applies or runs it).
func TestBundleSplit(t *testing.T) {
	for _, name := range []string{"lab.yaml", "lab-none.yaml", "cluster-example.yaml"} {
		tr := render(t, loadExample(t, name))
		for _, f := range tr.Files {
			if f.IsDir() {
				continue
			}
			stage := stages.Stage(strings.SplitN(f.Path, "/", 2)[0])
			low := strings.ToLower(f.Path + "\n" + payloadText(f))
			switch stage {
			case stages.Author, stages.Train:
				for _, bad := range []string{"aime", "evaluat", "eval.json", "samples_per_problem", "temperature"} {
					if strings.Contains(low, bad) {
						t.Errorf("%s: %s carries %q", name, f.Path, bad)
					}
				}
			case stages.Eval:
				for _, bad := range []string{"recipe", "launch", "train.json", "prompt.txt", "git apply", "patch -p"} {
					if strings.Contains(low, bad) {
						t.Errorf("%s: %s carries %q", name, f.Path, bad)
					}
				}
				for _, l := range strings.Split(payloadText(f), "\n") {
					l = strings.TrimSpace(l)
					if !strings.Contains(l, "NEMORL_PATCH") || strings.HasPrefix(l, "#") {
						continue
					}
					if !strings.HasPrefix(l, `: "${NEMORL_WEIGHTS:?}" "${NEMORL_PATCH:?}"`) && !strings.HasPrefix(l, `"$bin" evaluate contamination --patch "$NEMORL_PATCH" `) {
						t.Errorf("%s: %s uses the patch other than as the contamination check's data: %s", name, f.Path, l)
					}
				}
			}
		}
	}
}

// payloadText is what a file says, less the script plumbing that names
// other stages' outputs by path (the eval script must check the weights).
func payloadText(f File) string {
	if strings.HasSuffix(f.Path, ".sbatch") {
		return "" // scripts are checked by TestBinds and TestGolden
	}
	return string(f.Data)
}

func TestNoSecretAnywhere(t *testing.T) {
	for _, name := range []string{"lab.yaml", "lab-none.yaml", "cluster-example.yaml"} {
		cfg := loadExample(t, name)
		tr := render(t, cfg)
		key := cfg.PolicyModel.APIKey.Reveal()
		for _, f := range tr.Files {
			if bytes.Contains(f.Data, []byte(key)) {
				t.Errorf("%s: %s contains the API key", name, f.Path)
			}
			if strings.Contains(f.Path, "secrets") {
				t.Errorf("%s: render wrote %s", name, f.Path)
			}
		}
	}
}

func TestScriptsParse(t *testing.T) {
	bash, err := exec.LookPath("bash")
	if err != nil {
		t.Skip("no bash")
	}
	for _, name := range []string{"lab.yaml", "lab-none.yaml", "cluster-example.yaml"} {
		tr := render(t, loadExample(t, name))
		for _, stage := range stages.All {
			f, _ := tr.Lookup(stages.Script(stage))
			cmd := exec.Command(bash, "-n")
			cmd.Stdin = bytes.NewReader(f.Data)
			if out, err := cmd.CombinedOutput(); err != nil {
				t.Errorf("%s %s: bash -n: %v\n%s", name, stage, err, out)
			}
		}
	}
}

func TestBadEpisodeID(t *testing.T) {
	cfg := loadExample(t, "lab-none.yaml")
	for _, id := range []string{"", "../x", "a b", "-x", "$(id)"} {
		if _, err := Render(cfg, Input{Episode: id}); err == nil {
			t.Errorf("episode %q accepted", id)
		}
	}
}

// writeTree writes a rendered tree under its own Dir (a temp dir in tests).
func writeTree(t *testing.T, tr *Tree) {
	t.Helper()
	if _, err := tr.Write(tr.Dir); err != nil {
		t.Fatal(err)
	}
}

// stageRun renders the lab config into a temp workdir with stand-in
// commands given as shell snippets, and returns the tree. KillWait is
// unknown (Slurm's default 30 s assumed): stageRunKillWait gives one.
func stageRun(t *testing.T, snippets map[stages.Stage]string) *Tree {
	t.Helper()
	return stageRunKillWait(t, snippets, 0)
}

// stageRunKillWait is stageRun with Input.KillWait.
func stageRunKillWait(t *testing.T, snippets map[stages.Stage]string, killWait time.Duration) *Tree {
	t.Helper()
	// The scripts ask the host's Slurm (squeue --me, their one Slurm
	// command): never while the lab's fault tests have it down.
	labtest.UseLab(t)
	dir := t.TempDir()
	cfg := loadExample(t, "lab-none.yaml")
	cfg.Cluster.Workdir = dir
	cfg.Cluster.GPUDevices = testGPUDevices
	for stage, body := range snippets {
		p := filepath.Join(dir, "standin-"+string(stage))
		if err := os.WriteFile(p, []byte("#!/bin/bash\n"+body+"\n"), 0o755); err != nil {
			t.Fatal(err)
		}
		switch stage {
		case stages.Author:
			cfg.Stages.Author.Command = []string{p}
		case stages.Train:
			cfg.Stages.Train.Command = []string{p}
		case stages.Eval:
			cfg.Stages.Eval.Command = []string{p}
		}
	}
	tr, err := Render(cfg, Input{Episode: "ep-run", Prompt: []byte("p"), Version: "test", KillWait: killWait})
	if err != nil {
		t.Fatal(err)
	}
	writeTree(t, tr)
	return tr
}

// testGPUDevices is cluster.gpu_devices in the tests that run scripts: a
// device file every machine has, standing for the GPU (the scripts only
// check that one exists). runScriptTo sets CUDA_VISIBLE_DEVICES=0.
const testGPUDevices = "/dev/nul[l]"

// runScript runs a stage's rendered script under bash as slurmd would:
// stdout and stderr on the stage's out.log (truncated), which it returns.
func runScript(t *testing.T, tr *Tree, stage stages.Stage, env ...string) (string, int) {
	t.Helper()
	log := filepath.Join(tr.Dir, stages.Output(stage))
	f, err := os.OpenFile(log, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	code := runScriptTo(t, tr, stage, f, env...)
	out, err := os.ReadFile(log)
	if err != nil {
		t.Fatal(err)
	}
	return string(out), code
}

// runScriptTo runs a stage's rendered script under bash with stdout and
// stderr on out, and returns its exit status.
func runScriptTo(t *testing.T, tr *Tree, stage stages.Stage, out *os.File, env ...string) int {
	t.Helper()
	cmd := exec.Command("bash", filepath.Join(tr.Dir, stages.Script(stage)))
	cmd.Env = append([]string{"PATH=/usr/bin:/bin", "SLURM_JOB_ID=4242", "CUDA_VISIBLE_DEVICES=0", "POLICY_API_KEY=" + testKey, "TMPDIR=" + tr.Dir + "/.node-tmp"}, env...)
	cmd.Stdout, cmd.Stderr = out, out
	if err := os.MkdirAll(tr.Dir+"/.node-tmp", 0o700); err != nil {
		t.Fatal(err)
	}
	err := cmd.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	// The job's node-local scratch goes with it, whatever the exit.
	if left, _ := os.ReadDir(tr.Dir + "/.node-tmp"); len(left) != 0 {
		t.Errorf("%s job left %d entries in TMPDIR (%s…)", stage, len(left), left[0].Name())
	}
	return code
}

// execLines returns a rendered script's payload exec line and, in
// container mode, its guard exec line.
func execLines(t *testing.T, script []byte) (payload, guard string) {
	t.Helper()
	for _, l := range strings.Split(string(script), "\n") {
		l = strings.TrimPrefix(l, "setsid ") // the payload runs in its own process group
		if !strings.Contains(l, " exec --containall ") && !strings.HasPrefix(l, "env -i ") {
			continue
		}
		switch {
		case strings.Contains(l, "/guard.sh "):
			guard = l
		case strings.Contains(l, " /bin/sh -c "): // the GPU check
		default:
			payload = l
		}
	}
	if payload == "" {
		t.Fatalf("no exec line in\n%s", script)
	}
	return payload, guard
}

// gpuCheckLine is the container GPU check's exec line of a script ("" if
// none).
func gpuCheckLine(script []byte) string {
	for _, l := range strings.Split(string(script), "\n") {
		if strings.Contains(l, " exec --containall ") && strings.Contains(l, " /bin/sh -c ") {
			return l
		}
	}
	return ""
}

// TestRunEval runs the rendered eval script under bash: it runs the
// payload with the documented environment, and refuses to run when an
// evaluator input was changed after rendering.
func TestRunEval(t *testing.T) {
	t.Parallel()
	tr := stageRun(t, map[stages.Stage]string{stages.Eval: `echo "weights=$NEMORL_WEIGHTS job=$SLURM_JOB_ID key=${POLICY_API_KEY:-unset}"`})
	weights := filepath.Join(tr.Dir, "train/checkpoint/model.safetensors")
	out, code := runScript(t, tr, stages.Eval)
	if code != 66 || !strings.Contains(out, "weights") || !strings.Contains(out, "missing") {
		t.Fatalf("without weights: exit %d, %s", code, out)
	}
	if err := os.WriteFile(weights, []byte("w"), 0o600); err != nil {
		t.Fatal(err)
	}
	out, code = runScript(t, tr, stages.Eval)
	if code != 0 || !strings.Contains(out, "weights="+weights+" job=4242 key=unset") {
		t.Fatalf("exit %d, %s", code, out)
	}
	settings := filepath.Join(tr.Dir, "eval/bundle/eval.json")
	if err := os.WriteFile(settings, []byte(`{"samples_per_problem": 1}`), 0o600); err != nil {
		t.Fatal(err)
	}
	out, code = runScript(t, tr, stages.Eval)
	if code != 65 || !strings.Contains(out, "refusing to evaluate") || strings.Contains(out, "weights=") {
		t.Fatalf("tampered evaluator inputs: exit %d, %s", code, out)
	}
}

// TestRunEvalBundleCopy: the eval payload reads the node-local copy of its
// bundle that the script checked; rewriting the shared bundle while it runs
// changes nothing it sees, and an extra file dropped into the shared bundle
// never reaches it.
func TestRunEvalBundleCopy(t *testing.T) {
	t.Parallel()
	tr := stageRun(t, map[stages.Stage]string{stages.Eval: `shared=$(dirname "$NEMORL_OUT")/bundle
echo '{"samples_per_problem": 1}' > "$shared/eval.json"
echo "bundle=$NEMORL_BUNDLE"
echo "seen=$(cat "$NEMORL_BUNDLE/eval.json" | tr -d ' \n' | cut -c1-40)"
ls "$NEMORL_BUNDLE"`})
	if err := os.WriteFile(filepath.Join(tr.Dir, "train/checkpoint/model.safetensors"), []byte("w"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(tr.Dir, "eval/bundle/extra.py"), []byte("print('planted')\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	out, code := runScript(t, tr, stages.Eval)
	if code != 0 || strings.Contains(out, "bundle="+filepath.Join(tr.Dir, "eval/bundle")) || !strings.Contains(out, `seen={"architecture":"qwen2.5-1.5b-instruct"`) || strings.Contains(out, "extra.py") {
		t.Fatalf("exit %d; want the checked copy, unchanged, without the planted file:\n%s", code, out)
	}
}

func TestRunAuthorSecrets(t *testing.T) {
	tr := stageRun(t, map[stages.Stage]string{stages.Author: `test -f "$NEMORL_SECRETS" && echo secrets-present; exit 3`})
	out, code := runScript(t, tr, stages.Author)
	if code != 78 || !strings.Contains(out, "secrets.env is missing") {
		t.Fatalf("without secrets.env: exit %d, %s", code, out)
	}
	sec := filepath.Join(tr.Dir, "author/secrets.env")
	if err := os.WriteFile(sec, []byte("NEMORL_POLICY_API_KEY=x\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	out, code = runScript(t, tr, stages.Author)
	if code != 3 || !strings.Contains(out, "secrets-present") || !strings.Contains(out, "exited with status 3") {
		t.Fatalf("exit %d, %s", code, out)
	}
	if _, err := os.Stat(sec); !os.IsNotExist(err) {
		t.Errorf("secrets.env survived the job: %v", err)
	}
}

// termPayload counts the TERMs it gets: each prints a line; it exits 42 a
// second after the first, so a second TERM in between would show.
const termPayload = `echo "pid=$$"; trap 'echo payload-got-term; [ -n "$t" ] || t=$(date +%s)' TERM; echo started; while [ -z "$t" ] || [ $(date +%s) -lt $((t + 2)) ]; do sleep 0.1; done; exit 42`

// startTermRun starts the train script with termPayload and returns once
// the payload runs, with its pid.
func startTermRun(t *testing.T) (*exec.Cmd, *syncBuffer, int, chan error) {
	t.Helper()
	tr := stageRun(t, map[stages.Stage]string{stages.Train: termPayload})
	if err := os.WriteFile(filepath.Join(tr.Dir, "author/change.diff"), []byte("d"), 0o600); err != nil {
		t.Fatal(err)
	}
	out := &syncBuffer{}
	cmd := exec.Command("bash", filepath.Join(tr.Dir, stages.Script(stages.Train)))
	cmd.Env = []string{"PATH=/usr/bin:/bin", "CUDA_VISIBLE_DEVICES=0"}
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	deadline := time.Now().Add(10 * time.Second)
	for !strings.Contains(out.String(), "started") && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	m := regexp.MustCompile(`pid=(\d+)`).FindStringSubmatch(out.String())
	if m == nil {
		t.Fatalf("the payload did not start:\n%s", out.String())
	}
	pid, _ := strconv.Atoi(m[1])
	return cmd, out, pid, done
}

func waitTermRun(t *testing.T, cmd *exec.Cmd, out *syncBuffer, done chan error) {
	t.Helper()
	select {
	case err := <-done:
		ee, ok := err.(*exec.ExitError)
		if !ok || ee.ExitCode() != 42 {
			t.Fatalf("want exit 42 from the payload, got %v\n%s", err, out.String())
		}
	case <-time.After(15 * time.Second):
		_ = cmd.Process.Kill()
		<-done
		t.Fatalf("batch shell did not end\n%s", out.String())
	}
	if n := strings.Count(out.String(), "payload-got-term"); n != 1 {
		t.Errorf("the payload got %d TERMs, want exactly one:\n%s", n, out.String())
	}
}

// TestUSR1Forwarded: the time-limit warning (--signal=B:USR1@N) reaches the
// batch shell alone; the payload gets it as one TERM, at once.
func TestUSR1Forwarded(t *testing.T) {
	cmd, out, _, done := startTermRun(t)
	if err := cmd.Process.Signal(syscall.SIGUSR1); err != nil {
		t.Fatal(err)
	}
	waitTermRun(t, cmd, out, done)
	if !strings.Contains(out.String(), "USR1 received (time limit near); sending the payload TERM") {
		t.Errorf("USR1 not forwarded:\n%s", out.String())
	}
}

// TestTermNotForwardedTwice: scancel (and the time limit) send TERM to every
// process of the job; the batch shell must not send the payload a second
// one (bug: the stand-in printed its record twice, and the duplicate was
// judged an integrity violation).
func TestTermNotForwardedTwice(t *testing.T) {
	cmd, out, pid, done := startTermRun(t)
	// As slurmd does: every process of the job, the payload's too. The
	// payload's TERM first, seen, then the shell's: a forwarded second TERM
	// would be a signal of its own, not merged with the first.
	if err := syscall.Kill(pid, syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for !strings.Contains(out.String(), "payload-got-term") && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	waitTermRun(t, cmd, out, done)
	if !strings.Contains(out.String(), "TERM received (job cancelled or at its time limit; Slurm signalled the payload too)") {
		t.Errorf("no note of the TERM:\n%s", out.String())
	}
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestRunEvalImageCopy runs the isolated eval script with a stand-in
// apptainer that swaps the shared image as soon as it starts: the image it
// was given is the node-local copy that was checked, so the swap changes
// nothing; and an image that differs from the digest is refused (exit 65).
func TestRunEvalImageCopy(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	shared := filepath.Join(dir, "eval.sif")
	good := []byte("the pinned eval image\n")
	if err := os.WriteFile(shared, good, 0o644); err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(good)
	fake := filepath.Join(dir, "apptainer")
	script := `#!/bin/bash
case "$*" in */guard.sh\ eval) echo "guard-ran" >&2; exit 0 ;; esac
img=
for a in "$@"; do case $a in */eval.sif) img=$a ;; esac; done
echo "forged image" > ` + shared + `
echo "image-arg=$img"
while [ $# -gt 0 ]; do [ "$1" = --workdir ] && { echo "workdir=$2"; touch "$2/container-tmp-file"; }; shift; done
echo "image-ran=$(sha256sum "$img" | cut -d' ' -f1)"
`
	if err := os.WriteFile(fake, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	cfg := loadExample(t, "cluster-example.yaml")
	cfg.Cluster.Workdir = filepath.Join(dir, "work")
	cfg.Cluster.GPUDevices = testGPUDevices
	cfg.Runtime.Binary = fake
	cfg.Runtime.Images.Eval = shared
	cfg.Runtime.Digests.Eval = "sha256:" + hex.EncodeToString(sum[:])
	tr := render(t, cfg)
	writeTree(t, tr)
	if err := os.WriteFile(filepath.Join(tr.Dir, "train/checkpoint/model.safetensors"), []byte("w"), 0o600); err != nil {
		t.Fatal(err)
	}
	out, code := runScript(t, tr, stages.Eval)
	if code != 0 || !strings.Contains(out, "image-ran="+hex.EncodeToString(sum[:])) || strings.Contains(out, "image-arg="+shared+"\n") ||
		!strings.Contains(out, "guard-ran") {
		t.Fatalf("exit %d; want the checked node-local copy run:\n%s", code, out)
	}
	// The container's /tmp is the job's node-local scratch (--workdir),
	// and it is gone with the job.
	workdir := regexp.MustCompile(`workdir=(\S+)`).FindStringSubmatch(out)
	if workdir == nil || !strings.HasPrefix(workdir[1], filepath.Join(tr.Dir, ".node-tmp", "nemorl-eval.")) {
		t.Fatalf("--workdir: %v\n%s", workdir, out)
	}
	if _, err := os.Stat(workdir[1]); !os.IsNotExist(err) {
		t.Fatalf("scratch %s left after the job: %v", workdir[1], err)
	}
	// The shared image is now the forged one: the next eval refuses it.
	out, code = runScript(t, tr, stages.Eval)
	if code != 65 || !strings.Contains(out, "refusing to evaluate") || strings.Contains(out, "image-ran=") {
		t.Fatalf("forged image: exit %d:\n%s", code, out)
	}
}

// The author gets the episode's one of policy_model.base_url, and only
// one that the config lists.
func TestPolicyBaseURLChoice(t *testing.T) {
	cfg := loadExample(t, "lab-none.yaml")
	cfg.PolicyModel.BaseURL = configs.URLs{"http://a:8000/v1", "http://b:8000/v1"}
	authorJSON := func(tr *Tree) map[string]any {
		for _, f := range tr.Files {
			if f.Path == "author/bundle/author.json" {
				var doc map[string]any
				if err := json.Unmarshal(f.Data, &doc); err != nil {
					t.Fatal(err)
				}
				return doc["policy_model"].(map[string]any)
			}
		}
		t.Fatal("no author/bundle/author.json")
		return nil
	}
	for in, want := range map[string]string{"": "http://a:8000/v1", "http://b:8000/v1": "http://b:8000/v1"} {
		tr, err := Render(cfg, Input{Episode: "ep-x", Prompt: []byte("p\n"), Version: "test", PolicyBaseURL: in})
		if err != nil {
			t.Fatal(err)
		}
		if got := authorJSON(tr)["base_url"]; got != want {
			t.Errorf("PolicyBaseURL %q: author.json base_url %v, want %s", in, got, want)
		}
	}
	_, err := Render(cfg, Input{Episode: "ep-x", Prompt: []byte("p\n"), Version: "test", PolicyBaseURL: "http://c:8000/v1"})
	if err == nil || !strings.Contains(err.Error(), `"http://c:8000/v1" is not one of policy_model.base_url`) {
		t.Errorf("an endpoint the config does not list: %v", err)
	}
}
