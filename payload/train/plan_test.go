package train

import (
	"flag"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

var update = flag.Bool("update", false, "rewrite the golden files")

// goldenPlan is a plan with fixed paths as the built-in train.sh sets them.
func goldenPlan() Plan {
	return Plan{
		WorkDir:      "/tmp/nemorl-train.Ab3dEf",
		Patch:        "/nemorl/in/change.diff",
		Python:       "/opt/nemorl/src/NeMo-RL/.venv/bin/python",
		TrainData:    "/tmp/nemorl-train.Ab3dEf/train_math.jsonl",
		OutDir:       "/nemorl/out",
		ExportScript: "/nemorl/bundle/export_dcp.py",
		Deadline:     time.Date(2026, 11, 29, 1, 0, 0, 0, time.UTC),
		Settings:     validSettings(),
	}
}

func TestTrainerArgvGolden(t *testing.T) {
	p := goldenPlan()
	// 3480.9 s before the deadline (inner_deadline_seconds for a one-hour
	// budget, plus a fraction), which rounds down to 00:00:58:00.
	now := p.Deadline.Add(-3480*time.Second - 900*time.Millisecond)
	got := strings.Join(p.TrainerArgv(now), "\n") + "\n"
	golden := filepath.Join("testdata", "trainer_argv.golden")
	if *update {
		if err := os.WriteFile(golden, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatalf("%v (run go test ./payload/train -run Golden -update)", err)
	}
	if got != string(want) {
		t.Errorf("TrainerArgv differs from %s (run go test ./payload/train -run Golden -update and review the diff):\n%s", golden, got)
	}
	if !strings.Contains(got, "++checkpointing.checkpoint_must_save_by=00:00:58:00\n") {
		t.Error("deadline override missing or wrong")
	}
	// Deterministic.
	if !slices.Equal(p.TrainerArgv(now), p.TrainerArgv(now)) {
		t.Error("TrainerArgv is not deterministic")
	}
}

func TestTrainerArgvShape(t *testing.T) {
	p := goldenPlan()
	argv := p.TrainerArgv(p.Deadline.Add(-time.Hour))
	if !slices.Equal(argv[:4], []string{p.Python, "examples/nemo_gym/run_grpo_nemo_gym.py", "--config", "/tmp/nemorl-train.Ab3dEf/recipe.yaml"}) {
		t.Errorf("head %q", argv[:4])
	}
	keys := map[string]bool{}
	for _, a := range argv[4:] {
		k, v, ok := strings.Cut(a, "=")
		if !ok || !strings.HasPrefix(k, "++") || v == "" {
			t.Errorf("override %q is not ++key=value", a)
		}
		if keys[k] {
			t.Errorf("override %q given twice", k)
		}
		keys[k] = true
	}
	for _, want := range []string{
		"++grpo.num_prompts_per_step=8", "++grpo.num_generations_per_prompt=8",
		"++policy.train_global_batch_size=64", "++policy.model_name=Qwen/Qwen2.5-1.5B-Instruct",
		"++checkpointing.checkpoint_dir=/tmp/nemorl-train.Ab3dEf/results/grpo",
		"++data.train.data_path=/tmp/nemorl-train.Ab3dEf/gym_train.jsonl",
		"++logger.log_dir=/tmp/nemorl-train.Ab3dEf/results/logs",
		"++checkpointing.checkpoint_must_save_by=00:01:00:00",
	} {
		if !slices.Contains(argv, want) {
			t.Errorf("missing %q", want)
		}
	}
}

func TestMustSaveBy(t *testing.T) {
	for _, c := range []struct {
		d    time.Duration
		want string
	}{
		{0, "00:00:00:00"},
		{-5 * time.Second, "00:00:00:00"},
		{999 * time.Millisecond, "00:00:00:00"},
		{59900 * time.Millisecond, "00:00:00:59"},
		{3480 * time.Second, "00:00:58:00"},
		{3600 * time.Second, "00:01:00:00"},
		{25*time.Hour + 61*time.Second, "01:01:01:01"},
		{100 * 24 * time.Hour, "100:00:00:00"},
	} {
		if got := MustSaveBy(c.d); got != c.want {
			t.Errorf("MustSaveBy(%v) = %s, want %s", c.d, got, c.want)
		}
	}
}

func TestExportArgv(t *testing.T) {
	p := goldenPlan()
	got := p.ExportArgv("/tmp/nemorl-train.Ab3dEf/results/grpo/step_12")
	want := []string{
		"/opt/nemorl/src/NeMo-RL/.venv/bin/python", "/nemorl/bundle/export_dcp.py",
		"--dcp", "/tmp/nemorl-train.Ab3dEf/results/grpo/step_12/policy/weights",
		"--out", "/nemorl/out/model.safetensors.partial",
	}
	if !slices.Equal(got, want) {
		t.Errorf("got %q\nwant %q", got, want)
	}
}

func TestParseDeadline(t *testing.T) {
	d, err := ParseDeadline("1795914000")
	if err != nil || !d.Equal(time.Unix(1795914000, 0)) {
		t.Errorf("got %v, %v", d, err)
	}
	for _, bad := range []string{"", "0", "-5", "+5", "1.5", " 17", "17 ", "1e9", "99999999999999999999", "abc"} {
		if _, err := ParseDeadline(bad); err == nil {
			t.Errorf("ParseDeadline(%q) accepted", bad)
		}
	}
}

func TestPlanValidate(t *testing.T) {
	if err := goldenPlan().Validate(); err != nil {
		t.Fatal(err)
	}
	for name, mutate := range map[string]func(*Plan){
		"relative work dir":    func(p *Plan) { p.WorkDir = "work" },
		"work dir with space":  func(p *Plan) { p.WorkDir = "/tmp/my work" },
		"work dir with quote":  func(p *Plan) { p.WorkDir = "/tmp/a'b" },
		"work dir with dollar": func(p *Plan) { p.WorkDir = "/tmp/${x}" },
		"unclean work dir":     func(p *Plan) { p.WorkDir = "/tmp/a/../b" },
		"root work dir":        func(p *Plan) { p.WorkDir = "/" },
		"no python":            func(p *Plan) { p.Python = "" },
		"relative patch":       func(p *Plan) { p.Patch = "change.diff" },
		"no deadline":          func(p *Plan) { p.Deadline = time.Time{} },
		"negative grace":       func(p *Plan) { p.Grace = -time.Second },
		"bad env":              func(p *Plan) { p.Env = []string{"NOEQUALS"} },
		"bad settings":         func(p *Plan) { p.Settings.PromptsPerStep = 0 },
	} {
		p := goldenPlan()
		mutate(&p)
		if err := p.Validate(); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

func TestTrainerEnv(t *testing.T) {
	p := goldenPlan()
	p.Env = []string{"PYTHONUNBUFFERED=0", "EXTRA=1"}
	env := p.TrainerEnv([]string{"PATH=/bin", "NEMORL_ROOT=/elsewhere"})
	want := []string{
		"PATH=/bin", "NEMORL_ROOT=/elsewhere",
		"NEMORL_ROOT=/tmp/nemorl-train.Ab3dEf/NeMo-RL",
		"PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True",
		"PYTHONUNBUFFERED=1",
		"PYTHONUNBUFFERED=0", "EXTRA=1",
	}
	if !slices.Equal(env, want) {
		t.Errorf("got %q", env)
	}
}
