package train

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nemorl/nemorl-slurm/configs"
	"github.com/nemorl/nemorl-slurm/templates"
)

// validSettings is what templates renders for train_seconds 3600.
func validSettings() Settings {
	return Settings{
		TrainSeconds:         3600,
		InnerDeadlineSeconds: 3480,
		PromptsPerStep:       8,
		GenerationsPerPrompt: 8,
		Pins: Pins{
			NemoRL:            configs.NemoRLCommit,
			Gym:               configs.GymCommit,
			BaseModel:         configs.BaseModel,
			BaseModelRevision: configs.BaseModelRev,
		},
	}
}

// TestLoadRenderedSettings reads the train.json templates renders from the
// shipped example configs.
func TestLoadRenderedSettings(t *testing.T) {
	for _, name := range []string{"cluster-example.yaml", "lab-none.yaml"} {
		t.Run(name, func(t *testing.T) { checkRenderedSettings(t, name) })
	}
}

func checkRenderedSettings(t *testing.T, name string) {
	b, err := configs.Example(name)
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := configs.Load(name, b, func(string) (string, bool) { return "sk-test", true })
	if err != nil {
		t.Fatal(err)
	}
	tr, err := templates.Render(cfg, templates.Input{Episode: "ep-settings", Prompt: []byte("x\n"), Version: "test"})
	if err != nil {
		// templates' own tests report this; here it only means the
		// cross-check cannot run.
		t.Skipf("templates does not render %s: %v", name, err)
	}
	f, ok := tr.Lookup("train/bundle/train.json")
	if !ok {
		t.Fatal("no train/bundle/train.json")
	}
	path := filepath.Join(t.TempDir(), "train.json")
	if err := os.WriteFile(path, f.Data, 0o600); err != nil {
		t.Fatal(err)
	}
	s, err := LoadSettings(path)
	if err != nil {
		t.Fatal(err)
	}
	ts := cfg.Stages.Train.TrainSeconds
	want := validSettings()
	want.TrainSeconds, want.InnerDeadlineSeconds = ts, configs.InnerDeadlineSeconds(ts)
	if s != want {
		t.Errorf("got %+v, want %+v", s, want)
	}
}

func TestParseSettingsRejects(t *testing.T) {
	good := `{"train_seconds": 3600, "inner_deadline_seconds": 3480, "prompts_per_step": 8, "generations_per_prompt": 8,
	"pins": {"nemo_rl": "` + configs.NemoRLCommit + `", "gym": "` + configs.GymCommit + `",
	"base_model": "Qwen/Qwen2.5-1.5B-Instruct", "base_model_revision": "` + configs.BaseModelRev + `"}}`
	if s, err := ParseSettings([]byte(good)); err != nil || s != validSettings() {
		t.Fatalf("good settings: %+v, %v", s, err)
	}
	for name, c := range map[string]struct{ old, new, want string }{
		"unknown field":     {`"train_seconds"`, `"extra": 1, "train_seconds"`, "unknown field"},
		"unknown pin":       {`"gym"`, `"vllm": "x", "gym"`, "unknown field"},
		"missing field":     {`"prompts_per_step": 8,`, ``, "prompts_per_step"},
		"null pins":         {`"pins": {`, `"pins": null, "x": {`, "unknown field"},
		"wrong deadline":    {`3480`, `3500`, "inner_deadline_seconds"},
		"zero train":        {`"train_seconds": 3600`, `"train_seconds": 0`, "train_seconds"},
		"string number":     {`"prompts_per_step": 8`, `"prompts_per_step": "8"`, "cannot unmarshal"},
		"short commit":      {configs.GymCommit, "fd5e84d", "pins.gym"},
		"model with quote":  {"Qwen/Qwen2.5-1.5B-Instruct", "Qwen/Qwen'2.5", "base_model"},
		"model with spaces": {"Qwen/Qwen2.5-1.5B-Instruct", "Qwen Qwen", "base_model"},
		"trailing data":     {`"}}`, `"}} {}`, "trailing"},
		"fraction":          {`"generations_per_prompt": 8`, `"generations_per_prompt": 8.5`, "cannot unmarshal"},
	} {
		in := strings.Replace(good, c.old, c.new, 1)
		if in == good {
			t.Fatalf("%s: replacement did not apply", name)
		}
		if _, err := ParseSettings([]byte(in)); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: got %v, want an error containing %q", name, err, c.want)
		}
	}
	if _, err := LoadSettings(filepath.Join(t.TempDir(), "missing.json")); err == nil {
		t.Error("missing file accepted")
	}
}
