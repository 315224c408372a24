package train

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// Defaults for the Plan durations left zero.
const (
	// DefaultGrace is how long after Plan.Deadline a trainer may still run
	// before it is stopped. The trainer is told to save by the deadline
	// (checkpointing.checkpoint_must_save_by), but its own clock starts
	// after its setup (Ray, vLLM, the model: minutes), so it saves that
	// much later; the grace covers that setup and the save (see
	// TrainerArgv). 300 s still leaves Deadline + Grace + KillAfter +
	// ExportMargin = Deadline + 450 s inside the 600 s between the inner
	// deadline and Slurm's TERM.
	DefaultGrace = 300 * time.Second
	// DefaultKillAfter is the wait between TERM and KILL to the trainer's
	// (or the exporter's) process group.
	DefaultKillAfter = 30 * time.Second
	// DefaultExportMargin bounds the exporter's run.
	DefaultExportMargin = 120 * time.Second
)

// File and directory names inside Plan.WorkDir and Plan.OutDir.
const (
	RecipeFile       = "recipe.yaml"
	NemoRLDir        = "NeMo-RL"
	GymTrainFile     = "gym_train.jsonl"
	TrainLogFile     = "train.log"
	CheckpointSubdir = "results/grpo"
	LogSubdir        = "results/logs"
	WeightsFile      = "model.safetensors"
	// TrainerScript is run_grpo_nemo_gym.py relative to WorkDir/NeMo-RL, the
	// trainer's working directory.
	TrainerScript = "examples/nemo_gym/run_grpo_nemo_gym.py"
	// weightsTemp is where the exporter writes; it is renamed to
	// WeightsFile only once the export succeeded, so a partial file never
	// has the final name.
	weightsTemp = WeightsFile + ".partial"
)

// Plan is everything Run needs. Paths are absolute, as the launcher sees
// them inside the train image.
type Plan struct {
	// WorkDir is the node-local, writable copy of the pristine tree:
	// WorkDir/recipe.yaml and WorkDir/NeMo-RL/… (with
	// NeMo-RL/3rdparty/Gym-workspace/Gym/…). The caller makes the copy;
	// change.diff paths are relative to it. Run writes gym_train.jsonl,
	// train.log and results/ here. It must be made only of letters,
	// digits and / . _ - (it appears unquoted in Hydra overrides).
	WorkDir string
	// Patch is the author's change.diff.
	Patch string
	// Python is the synced venv's python; it runs the trainer and the
	// exporter.
	Python string
	// TrainData is the pristine train_math.jsonl ({input, output} rows).
	TrainData string
	// OutDir receives model.safetensors (the stage's output directory).
	OutDir string
	// ExportScript is the bundle's converter from a DCP checkpoint
	// directory to bf16 safetensors, run as
	// `<Python> <ExportScript> --dcp DIR --out FILE`.
	ExportScript string
	// Deadline is the inner training deadline: $NEMORL_DEADLINE (epoch
	// seconds), which the job script sets to the start of the stage plus
	// inner_deadline_seconds (train_seconds − 120 s). See ParseDeadline.
	Deadline time.Time
	// Grace: the trainer is stopped if it still runs at Deadline+Grace.
	// Zero means DefaultGrace.
	Grace time.Duration
	// KillAfter is the wait between TERM and KILL. Zero means
	// DefaultKillAfter.
	KillAfter time.Duration
	// ExportMargin is the time kept for the export: the exporter is stopped
	// (export_failed) if it runs longer. It is not taken off Deadline: the
	// inner deadline is already train_seconds − 120 s, and the stage's Slurm
	// limit is train_seconds + 600 s (TERM 120 s before it), so the worst
	// case Deadline + Grace + KillAfter + ExportMargin (by default the
	// stage start + train_seconds + 330 s) ends before the job is
	// signalled (train_seconds + 480 s). Zero means DefaultExportMargin.
	ExportMargin time.Duration
	// Git is the git binary; empty means "git" from PATH.
	Git string
	// Env holds extra KEY=VALUE entries for the trainer and the exporter,
	// after the launcher's environment and the defaults of TrainerEnv.
	Env []string
	// Settings is the bundle's train.json.
	Settings Settings
	// SMI is the nvidia-smi the launcher asks for the job's GPU, which the
	// record names (gpu_name, gpu_memory_mib, gpu_count); empty means
	// "nvidia-smi" from PATH (--nv binds the node's).
	SMI string
	// GPUs are the job's GPUs as nvidia-smi -i takes them; empty means
	// $CUDA_VISIBLE_DEVICES (Slurm's, which the job script passes on).
	GPUs string
}

// ParseDeadline reads $NEMORL_DEADLINE: a positive number of seconds since
// the epoch (decimal digits only).
func ParseDeadline(s string) (time.Time, error) {
	if s == "" || strings.TrimLeft(s, "0123456789") != "" {
		return time.Time{}, fmt.Errorf("NEMORL_DEADLINE %q: want epoch seconds", s)
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n <= 0 {
		return time.Time{}, fmt.Errorf("NEMORL_DEADLINE %q: want positive epoch seconds", s)
	}
	return time.Unix(n, 0), nil
}

// Validate checks the plan's fields (not the file system).
func (p Plan) Validate() error {
	for _, f := range []struct{ name, path string }{
		{"work dir", p.WorkDir}, {"patch", p.Patch}, {"python", p.Python},
		{"train data", p.TrainData}, {"out dir", p.OutDir}, {"export script", p.ExportScript},
	} {
		if f.path == "" || !filepath.IsAbs(f.path) {
			return fmt.Errorf("plan: %s %q is not an absolute path", f.name, f.path)
		}
	}
	if !hydraPlain(p.WorkDir) {
		return fmt.Errorf("plan: work dir %q: only letters, digits and / . _ - are allowed (it is passed in Hydra overrides)", p.WorkDir)
	}
	if p.WorkDir != filepath.Clean(p.WorkDir) || p.WorkDir == "/" {
		return fmt.Errorf("plan: work dir %q is not a clean directory path", p.WorkDir)
	}
	if p.Deadline.IsZero() {
		return errors.New("plan: no deadline")
	}
	if p.Grace < 0 || p.KillAfter < 0 || p.ExportMargin < 0 {
		return errors.New("plan: negative duration")
	}
	for _, kv := range p.Env {
		if k, _, ok := strings.Cut(kv, "="); !ok || k == "" {
			return fmt.Errorf("plan: env entry %q is not KEY=VALUE", kv)
		}
	}
	return p.Settings.Validate()
}

func (p Plan) withDefaults() Plan {
	if p.Grace == 0 {
		p.Grace = DefaultGrace
	}
	if p.KillAfter == 0 {
		p.KillAfter = DefaultKillAfter
	}
	if p.ExportMargin == 0 {
		p.ExportMargin = DefaultExportMargin
	}
	if p.Git == "" {
		p.Git = "git"
	}
	if p.SMI == "" {
		p.SMI = "nvidia-smi"
	}
	if p.GPUs == "" {
		p.GPUs = os.Getenv("CUDA_VISIBLE_DEVICES")
	}
	return p
}

// NemoRLRoot is WorkDir/NeMo-RL, the trainer's working directory.
func (p Plan) NemoRLRoot() string { return filepath.Join(p.WorkDir, NemoRLDir) }

// CheckpointDir is where the trainer saves step_N checkpoints.
func (p Plan) CheckpointDir() string { return filepath.Join(p.WorkDir, CheckpointSubdir) }

// WeightsPath is OutDir/model.safetensors.
func (p Plan) WeightsPath() string { return filepath.Join(p.OutDir, WeightsFile) }

func (p Plan) weightsTempPath() string { return filepath.Join(p.OutDir, weightsTemp) }

// TrainerArgv is the trainer's command line, run in WorkDir/NeMo-RL:
//
//	<Python> examples/nemo_gym/run_grpo_nemo_gym.py --config <WorkDir>/recipe.yaml <overrides…>
//
// The overrides are the values the reference launch_inner.py forces on the
// loaded recipe (it edits the config in Python; here they are Hydra
// overrides, which run_grpo_nemo_gym.py applies after loading --config),
// plus the paths of this work directory. Every override uses "++" (add or
// replace), so it holds whether or not the policy's recipe still has the
// key. The order is fixed.
//
// checkpointing.checkpoint_must_save_by (DD:HH:MM:SS) is the time left from
// now to Deadline, rounded down to the second (zero once past it). NeMo
// RL's TimeoutChecker starts counting when grpo_train starts, after the
// trainer's setup, so without the reference's clock-anchoring shim the
// trainer's own deadline falls after Deadline by the time its setup takes
// (Ray, vLLM and model start-up), and Grace must cover that.
func (p Plan) TrainerArgv(now time.Time) []string {
	s := p.Settings
	model := s.Pins.BaseModel
	argv := []string{p.Python, TrainerScript, "--config", filepath.Join(p.WorkDir, RecipeFile)}
	for _, o := range []struct{ key, value string }{
		{"grpo.num_prompts_per_step", strconv.Itoa(s.PromptsPerStep)},
		{"grpo.num_generations_per_prompt", strconv.Itoa(s.GenerationsPerPrompt)},
		{"grpo.max_num_steps", "1000000"},
		{"grpo.max_num_epochs", "1000000"},
		{"grpo.val_at_start", "false"},
		{"grpo.val_at_end", "false"},
		{"grpo.val_period", "0"},
		{"policy.model_name", model},
		{"policy.tokenizer.name", model},
		{"policy.train_global_batch_size", strconv.Itoa(s.PromptsPerStep * s.GenerationsPerPrompt)},
		{"data.validation", "null"},
		{"data.train.data_path", filepath.Join(p.WorkDir, GymTrainFile)},
		{"policy.train_micro_batch_size", "1"},
		{"policy.logprob_batch_size", "1"},
		{"policy.dtensor_cfg._v2", "false"},
		{"policy.generation.val_temperature", "${policy.generation.temperature}"},
		{"policy.generation.val_top_p", "${policy.generation.top_p}"},
		{"policy.generation.val_top_k", "${policy.generation.top_k}"},
		{"loss_fn.force_on_policy_ratio", "true"},
		{"checkpointing.enabled", "true"},
		{"checkpointing.checkpoint_dir", p.CheckpointDir()},
		{"checkpointing.save_period", "1000000"},
		{"checkpointing.checkpoint_must_save_by", MustSaveBy(p.Deadline.Sub(now))},
		{"checkpointing.metric_name", "null"},
		{"checkpointing.keep_top_k", "1"},
		{"checkpointing.model_save_format", "null"},
		{"checkpointing.save_consolidated", "false"},
		{"checkpointing.save_optimizer", "false"},
		{"cluster.gpus_per_node", "1"},
		{"cluster.num_nodes", "1"},
		{"logger.wandb_enabled", "false"},
		{"logger.log_dir", filepath.Join(p.WorkDir, LogSubdir)},
	} {
		argv = append(argv, "++"+o.key+"="+o.value)
	}
	return argv
}

// MustSaveBy formats a duration as NeMo RL's checkpoint_must_save_by,
// DD:HH:MM:SS (nemo_rl/utils/timer.py convert_to_seconds), rounded down to
// the second; negative durations give 00:00:00:00.
func MustSaveBy(d time.Duration) string {
	secs := int64(d / time.Second)
	if secs < 0 {
		secs = 0
	}
	return fmt.Sprintf("%02d:%02d:%02d:%02d", secs/86400, secs%86400/3600, secs%3600/60, secs%60)
}

// ExportArgv is the exporter's command line for the checkpoint directory
// stepDir (results/grpo/step_N), run in WorkDir:
//
//	<Python> <ExportScript> --dcp <stepDir>/policy/weights --out <OutDir>/model.safetensors.partial
//
// Run renames the output to OutDir/model.safetensors once the exporter
// succeeded and the file is non-empty.
func (p Plan) ExportArgv(stepDir string) []string {
	return []string{
		p.Python, p.ExportScript,
		"--dcp", filepath.Join(stepDir, "policy", "weights"),
		"--out", p.weightsTempPath(),
	}
}

// TrainerEnv is the environment of the trainer and the exporter: base (the
// launcher's environment), then the reference run.sh's NEMORL_ROOT and
// PYTORCH_CUDA_ALLOC_CONF, PYTHONUNBUFFERED=1 (the trainer's output goes to
// a pipe; unbuffered, the log is live and a killed trainer loses none of
// it), then Plan.Env. Later entries win.
func (p Plan) TrainerEnv(base []string) []string {
	env := append([]string(nil), base...)
	env = append(env,
		"NEMORL_ROOT="+p.NemoRLRoot(),
		"PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True",
		"PYTHONUNBUFFERED=1",
	)
	return append(env, p.Env...)
}
