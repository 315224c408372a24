package train

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"os"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/nemorl/nemorl-slurm/record"
)

const (
	okTrainer = `
  echo "  • Avg Reward: 0.25"
  mkdir -p "$CKPT/step_2/policy/weights" "$CKPT/step_4/policy/weights" "$CKPT/tmp_step_6/policy/weights"
  echo "trainer noise on stderr" >&2
  echo "  • Avg Reward: 0.3125"
  exit 0`
	okExporter = `
  [ "$1" = --dcp ] && [ "$3" = --out ] && [ -d "$2" ] || { echo "bad export args: $*" >&2; exit 9; }
  case "$2" in */results/grpo/step_4/policy/weights) ;; *) echo "not step 4: $2" >&2; exit 8 ;; esac
  printf 'weights-bytes' > "$4"`
)

func TestRunOK(t *testing.T) {
	f := newFixture(t, okTrainer, okExporter)
	r := f.run(context.Background())
	rec := r.checkRecord(t, record.StatusOK)
	sum := sha256.Sum256([]byte("weights-bytes"))
	want := record.Train{Status: record.StatusOK, TrainReward: 0.3125, InnerSteps: 4,
		WeightsSHA256: hex.EncodeToString(sum[:]), WeightsBytes: 13, TrainerExitStatus: 0}
	want.SetGPU(fixtureGPU)
	if *rec != want {
		t.Errorf("got %+v\nwant %+v", *rec, want)
	}
	if got := strings.TrimSpace(f.read("smi.args")); got != "--query-gpu=name,memory.total --format=csv,noheader,nounits -i 0" {
		t.Errorf("nvidia-smi %s", got)
	}
	if got := f.read("out/model.safetensors"); got != "weights-bytes" {
		t.Errorf("weights %q", got)
	}
	if f.exists("out/model.safetensors.partial") {
		t.Error("temporary weights left")
	}
	// The patch was applied before training.
	if !strings.Contains(f.read("work/recipe.yaml"), "normalize_rewards: false") {
		t.Error("recipe.yaml not patched")
	}
	// The trainer's command line, directory and environment.
	args := f.read("trainer.args")
	if !strings.HasPrefix(args, "--config\n"+f.plan.WorkDir+"/recipe.yaml\n++grpo.num_prompts_per_step=8\n") ||
		!strings.Contains(args, "\n++checkpointing.checkpoint_must_save_by=00:00:49:5") {
		t.Errorf("trainer args:\n%s", args)
	}
	if got := strings.TrimSpace(f.read("trainer.cwd")); got != f.plan.NemoRLRoot() {
		t.Errorf("trainer cwd %s", got)
	}
	env := f.read("trainer.env")
	for _, kv := range []string{"NEMORL_ROOT=" + f.plan.NemoRLRoot(), "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True", "PYTHONUNBUFFERED=1"} {
		if !strings.Contains(env, kv+"\n") {
			t.Errorf("trainer env lacks %s", kv)
		}
	}
	// Its output went to train.log and to the log, stderr included.
	trainLog := f.read("work/train.log")
	for _, s := range []string{"• Avg Reward: 0.3125", "trainer noise on stderr"} {
		if !strings.Contains(trainLog, s) || !strings.Contains(r.log, s) {
			t.Errorf("%q missing from train.log or the log", s)
		}
	}
	// The training rows.
	rows := f.read("work/gym_train.jsonl")
	if strings.Count(rows, "\n") != 2 || !strings.Contains(rows, `"question":"What is 2+2?","expected_answer":"4"`) {
		t.Errorf("gym_train.jsonl:\n%s", rows)
	}
}

func TestRunTrainerFailed(t *testing.T) {
	f := newFixture(t, `echo "• Avg Reward: 0.5"; mkdir -p "$CKPT/step_1"; exit 3`, okExporter)
	rec := f.run(context.Background()).checkRecord(t, record.StatusTrainerFailed)
	if rec.TrainerExitStatus != 3 || rec.TrainReward != 0.5 || rec.InnerSteps != 1 || rec.WeightsSHA256 != "" {
		t.Errorf("%+v", *rec)
	}
	if f.exists("exporter.ran") {
		t.Error("the exporter ran")
	}
}

func TestRunTrainerKilledBySignal(t *testing.T) {
	f := newFixture(t, `echo "• Avg Reward: 0.5"; kill -SEGV $$`, okExporter)
	rec := f.run(context.Background()).checkRecord(t, record.StatusTrainerFailed)
	if rec.TrainerExitStatus != -1 {
		t.Errorf("%+v", *rec)
	}
}

// TestRunTrainerTimeout: a trainer still running at the deadline plus the
// grace is stopped, with its whole process group, whether it obeys TERM or
// not.
func TestRunTrainerTimeout(t *testing.T) {
	for name, trap := range map[string]string{"obeys TERM": "", "ignores TERM": "trap '' TERM"} {
		t.Run(name, func(t *testing.T) {
			f := newFixture(t, trap+`
  echo "• Avg Reward: 0.125"
  mkdir -p "$CKPT/step_3"
  sleep 1000 &
  echo $! > "$FIX/child.pid"
  wait
  exit 0`, okExporter)
			// Long enough for the trainer to start under -race.
			f.plan.Deadline = time.Now().Add(3 * time.Second)
			start := time.Now()
			rec := f.run(context.Background()).checkRecord(t, record.StatusTrainerTimeout)
			elapsed := time.Since(start)
			if rec.TrainerExitStatus != -1 || rec.TrainReward != 0.125 || rec.InnerSteps != 3 || rec.WeightsBytes != 0 {
				t.Errorf("%+v", *rec)
			}
			if elapsed < 3*time.Second+f.plan.Grace || elapsed > 15*time.Second {
				t.Errorf("Run took %s", elapsed)
			}
			checkGroupGone(t, f.pid("trainer.pid"), f.pid("child.pid"))
			if f.exists("exporter.ran") {
				t.Error("the exporter ran")
			}
		})
	}
}

// TestRunCancelled: the job got TERM (ctx cancelled) while training: the
// group is stopped and a trainer_timeout record is still printed.
func TestRunCancelled(t *testing.T) {
	f := newFixture(t, `trap '' TERM; sleep 1000 & echo $! > "$FIX/child.pid"; wait`, okExporter)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		for !f.exists("trainer.pid") || !f.exists("child.pid") {
			time.Sleep(10 * time.Millisecond)
		}
		cancel()
	}()
	rec := f.run(ctx).checkRecord(t, record.StatusTrainerTimeout)
	if rec.TrainerExitStatus != -1 {
		t.Errorf("%+v", *rec)
	}
	checkGroupGone(t, f.pid("trainer.pid"), f.pid("child.pid"))
}

func TestRunCancelledBeforeTraining(t *testing.T) {
	f := newFixture(t, okTrainer, okExporter)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	r := f.run(ctx)
	r.checkRecord(t, record.StatusTrainerTimeout)
	if f.exists("trainer.pid") {
		t.Error("the trainer ran")
	}
}

// TestRunStragglersKilled: processes the trainer leaves behind (as Ray
// does) are killed when it exits, even while holding its output pipe.
func TestRunStragglersKilled(t *testing.T) {
	f := newFixture(t, `
  sleep 1000 &
  echo $! > "$FIX/child.pid"
  `+okTrainer, okExporter)
	start := time.Now()
	f.run(context.Background()).checkRecord(t, record.StatusOK)
	if d := time.Since(start); d > drainWait {
		t.Errorf("Run took %s", d)
	}
	checkGroupGone(t, f.pid("trainer.pid"), f.pid("child.pid"))
}

func TestRunNoReward(t *testing.T) {
	f := newFixture(t, `echo "• Avg Reward: nan"; mkdir -p "$CKPT/step_1"`, okExporter)
	rec := f.run(context.Background()).checkRecord(t, record.StatusNoReward)
	if rec.InnerSteps != 1 || rec.TrainReward != 0 {
		t.Errorf("%+v", *rec)
	}
}

func TestRunNoCheckpoint(t *testing.T) {
	f := newFixture(t, `echo "• Avg Reward: -0.5"; mkdir -p "$CKPT/tmp_step_2" "$CKPT/step_0" "$CKPT/step_x"; touch "$CKPT/step_9"`, okExporter)
	rec := f.run(context.Background()).checkRecord(t, record.StatusNoCheckpoint)
	if rec.InnerSteps != 0 || rec.TrainReward != -0.5 {
		t.Errorf("%+v", *rec)
	}
}

func TestRunExportFailed(t *testing.T) {
	for name, exporter := range map[string]string{
		"exit status":       `printf 'half' > "$4"; exit 5`,
		"no output":         `exit 0`,
		"empty output":      `: > "$4"`,
		"directory output":  `mkdir "$4"`,
		"outlives its time": `printf 'x' > "$4"; sleep 1000`,
	} {
		t.Run(name, func(t *testing.T) {
			f := newFixture(t, okTrainer, exporter)
			f.plan.ExportMargin = 300 * time.Millisecond
			rec := f.run(context.Background()).checkRecord(t, record.StatusExportFailed)
			if rec.InnerSteps != 4 || rec.TrainReward != 0.3125 || rec.TrainerExitStatus != 0 || rec.WeightsSHA256 != "" {
				t.Errorf("%+v", *rec)
			}
			if f.exists("out/model.safetensors") {
				t.Error("weights left in the output directory")
			}
		})
	}
}

func TestRunPatchFailed(t *testing.T) {
	f := newFixture(t, okTrainer, okExporter)
	f.write("in/change.diff", strings.Replace(goodPatch, "-clip = 0.2", "-clip = 0.3", 1), 0o644)
	rec := f.run(context.Background()).checkRecord(t, record.StatusPatchFailed)
	want := record.Train{Status: record.StatusPatchFailed}
	want.SetGPU(fixtureGPU) // read before the patch is applied
	if *rec != want {
		t.Errorf("%+v", *rec)
	}
	if f.exists("trainer.pid") || f.exists("work/gym_train.jsonl") {
		t.Error("the trainer ran")
	}
}

// TestRunStaleOutputs: weights and checkpoints from an earlier attempt are
// not taken for this run's.
func TestRunStaleOutputs(t *testing.T) {
	f := newFixture(t, `echo "• Avg Reward: 0.5"`, okExporter)
	f.write("out/model.safetensors", "stale", 0o644)
	f.write("work/results/grpo/step_99/policy/weights/x", "stale", 0o644)
	f.run(context.Background()).checkRecord(t, record.StatusNoCheckpoint)
	if f.exists("out/model.safetensors") {
		t.Error("stale weights left")
	}
}

// TestRunInfra: launcher faults print no record.
func TestRunInfra(t *testing.T) {
	for name, c := range map[string]struct {
		setup func(f *fixture)
		want  string
	}{
		"empty patch":    {func(f *fixture) { f.write("in/change.diff", "", 0o644) }, "empty"},
		"no out dir":     {func(f *fixture) { f.plan.OutDir = f.path("missing") }, "out dir"},
		"no python":      {func(f *fixture) { f.plan.Python = f.path("bin/none") }, "python"},
		"no recipe":      {func(f *fixture) { os.Remove(f.path("work/recipe.yaml")) }, "recipe"},
		"bad train data": {func(f *fixture) { f.write("work/train_math.jsonl", "{}\n", 0o644) }, "line 1"},
		"bad plan":       {func(f *fixture) { f.plan.Deadline = time.Time{} }, "deadline"},
		"far deadline":   {func(f *fixture) { f.plan.Deadline = time.Now().Add(3 * time.Hour) }, "more than inner_deadline_seconds"},
		"python not executable": {func(f *fixture) {
			if err := os.Chmod(f.plan.Python, 0o644); err != nil {
				f.t.Fatal(err)
			}
		}, "permission denied"},
	} {
		t.Run(name, func(t *testing.T) {
			f := newFixture(t, okTrainer, okExporter)
			c.setup(f)
			r := f.run(context.Background())
			if r.err == nil || !strings.Contains(r.err.Error(), c.want) || r.code != ExitInfra || r.rec != nil || r.stdout != "" {
				t.Errorf("got %v, code %d, record %v, stdout %q; want an error containing %q", r.err, r.code, r.rec, r.stdout, c.want)
			}
		})
	}
}

type failingWriter struct{}

func (failingWriter) Write([]byte) (int, error) { return 0, errors.New("log is gone") }

// TestRunLogFails: a failing log does not block the trainer's output.
func TestRunLogFails(t *testing.T) {
	f := newFixture(t, `for i in $(seq 2000); do echo "line $i of trainer output that fills a pipe buffer"; done
`+okTrainer, okExporter)
	var stdout strings.Builder
	rec, code, err := Run(context.Background(), f.plan, &stdout, failingWriter{})
	if err != nil || code != ExitOK || rec.Status != record.StatusOK {
		t.Fatalf("%v %d %+v", err, code, rec)
	}
	if !strings.Contains(f.read("work/train.log"), "line 2000 of") {
		t.Error("train.log incomplete")
	}
}

// TestRunNoGoroutineLeak: Run leaves no goroutine behind, on the ok path
// and on the timeout path.
func TestRunNoGoroutineLeak(t *testing.T) {
	before := runtime.NumGoroutine()
	f := newFixture(t, okTrainer, okExporter)
	f.run(context.Background()).checkRecord(t, record.StatusOK)
	g := newFixture(t, `sleep 1000`, okExporter)
	g.plan.Deadline = time.Now().Add(300 * time.Millisecond)
	g.run(context.Background()).checkRecord(t, record.StatusTrainerTimeout)
	deadline := time.Now().Add(2 * time.Second)
	for runtime.NumGoroutine() > before {
		if time.Now().After(deadline) {
			buf := make([]byte, 1<<16)
			t.Fatalf("%d goroutines before, %d after:\n%s", before, runtime.NumGoroutine(), buf[:runtime.Stack(buf, true)])
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestLastCheckpoint(t *testing.T) {
	dir := t.TempDir()
	if n, p, err := LastCheckpoint(dir + "/none"); n != 0 || p != "" || err != nil {
		t.Errorf("missing dir: %d %q %v", n, p, err)
	}
	for _, d := range []string{"step_2", "step_10", "step_9", "tmp_step_20", "step_", "step_-3", "step_1a", "step_007"} {
		if err := os.MkdirAll(dir+"/"+d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(dir+"/step_11", nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if n, p, err := LastCheckpoint(dir); n != 10 || p != dir+"/step_10" || err != nil {
		t.Errorf("got %d %q %v", n, p, err)
	}
}

// TestRunGPUUnread: a GPU nvidia-smi cannot read (here: not the job's) is
// not the stage's failure: the record names none and the log says why.
func TestRunGPUUnread(t *testing.T) {
	f := newFixture(t, okTrainer, okExporter)
	f.plan.GPUs = "5"
	r := f.run(context.Background())
	rec := r.checkRecord(t, record.StatusOK)
	if rec.GPU() != nil || rec.GPUMemoryMiB != 0 || rec.GPUCount != 0 {
		t.Errorf("record names a GPU: %+v", *rec)
	}
	if !strings.Contains(r.log, "the GPU could not be read") || !strings.Contains(r.log, "No devices were found") {
		t.Errorf("log does not say why:\n%s", r.log)
	}
	if !strings.Contains(r.stdout, `"gpu_name":"","gpu_memory_mib":0,"gpu_count":0}`) {
		t.Errorf("record line %s", r.stdout)
	}
}
