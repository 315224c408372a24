package templates

// The stages' plans: what makes each stage's script and bundle its own
// (its resources, image, binds, the paths its payload is told about, its
// settings file and its own script data). build (render.go) renders them.

import (
	"path"

	"github.com/nemorl/nemorl-slurm/configs"
	"github.com/nemorl/nemorl-slurm/stages"
)

// Where the payload sees its files in its container (the isolation guard
// allows these binds alone).
const (
	containerAuthor = "/nemorl/author" // the author's directory
	containerIn     = "/nemorl/in"     // train, eval: the previous stages' outputs, read-only
	containerBundle = "/nemorl/bundle" // train, eval: the stage's bundle, read-only
	containerOut    = "/nemorl/out"    // train, eval: the stage's output directory
)

// A mount makes rel (in the episode) visible to the payload at container.
// With hostVar, an isolated stage binds the node-local directory or copy
// the script keeps in that variable, not the shared path.
type mount struct {
	rel, container string
	ro             bool
	hostVar        string
}

// stagePlan is what makes a stage's script and bundle its own: authorPlan,
// trainPlan and evalPlan fill it in, build renders it.
type stagePlan struct {
	stage   stages.Stage
	res     configs.Resources
	seconds int // the --time limit, margins included
	image   string
	gpu     bool     // --gres, --nv and the GPU checks
	noNet   bool     // --net --network none
	pass    []string // passed into the container besides SLURM_JOB_ID and SLURM_CPUS_PER_TASK
	mounts  []mount
	// paths are the NEMORL_* variables that name the payload's files: each
	// variable's path, relative to the episode; the payload is told where
	// it sees it (inside). envVars (unisolated eval) are those the script
	// sets from its own variables instead (its node-local copies).
	paths, envVars map[string]string
	imageVar       string // the script's variable holding the image that runs
	bundle         []File // the stage's own files; build adds the payload and the guard
	data           scriptData
	// pinInputs (eval): the script checks its bundle against the sha256s
	// written into it.
	pinInputs bool
}

// authorPlan: the policy model edits NeMo RL in its node-local directory
// (isolated); it must reach the policy endpoint.
func (r *renderer) authorPlan() (*stagePlan, error) {
	cfg, a := r.cfg, r.cfg.Stages.Author
	settings := map[string]any{
		"research_seconds": a.ResearchSeconds,
		"max_turns":        a.MaxTurns,
		"policy_model": map[string]any{
			"base_url":              r.in.PolicyBaseURL,
			"model":                 cfg.PolicyModel.Model,
			"uses_reasoning_parser": *cfg.PolicyModel.UsesReasoningParser,
		},
		"pins": pins(),
	}
	b, err := settingsFile(stages.BundleFile(stages.Author, "author.json"), settings)
	if err != nil {
		return nil, err
	}
	p := &stagePlan{
		stage: stages.Author, res: a.Resources, seconds: a.ResearchSeconds + AuthorMarginSeconds,
		image: cfg.Runtime.Images.Author,
		// Node-local: the trusted script copies back the expected files
		// alone, each within its bound (AuthorCopyOut).
		mounts: []mount{{rel: string(stages.Author), container: containerAuthor, hostVar: AuthorOutVar}},
		paths: map[string]string{
			"NEMORL_OUT":     string(stages.Author),
			"NEMORL_BUNDLE":  stages.Bundle(stages.Author),
			"NEMORL_PROMPT":  stages.PromptFile,
			"NEMORL_SECRETS": stages.SecretsFile,
		},
		bundle: []File{b, {Path: stages.PromptFile, Mode: 0o600, Data: r.in.Prompt}},
	}
	if r.isolated() {
		p.data.AuthorOutVar, p.data.AuthorCopyOut = AuthorOutVar, authorCopyOut
	}
	return p, nil
}

// trainPlan: the author's patch applied, GRPO for train_seconds; no
// network unless stages.train.network.
func (r *renderer) trainPlan() (*stagePlan, error) {
	cfg, t := r.cfg, r.cfg.Stages.Train
	settings := map[string]any{
		"train_seconds":          t.TrainSeconds,
		"inner_deadline_seconds": configs.InnerDeadlineSeconds(t.TrainSeconds),
		"prompts_per_step":       configs.TrainPromptsPerStep,
		"generations_per_prompt": configs.TrainGenerations,
		"pins":                   pins(),
	}
	b, err := settingsFile(stages.BundleFile(stages.Train, "train.json"), settings)
	if err != nil {
		return nil, err
	}
	p := &stagePlan{
		stage: stages.Train, res: t.Resources, seconds: t.TrainSeconds + TrainMarginSeconds,
		image: cfg.Runtime.Images.Train, gpu: true, noNet: !t.Network,
		pass: []string{"CUDA_VISIBLE_DEVICES", "NEMORL_DEADLINE"},
		mounts: []mount{
			{rel: stages.PatchFile, container: path.Join(containerIn, stages.PatchName), ro: true},
			{rel: stages.Bundle(stages.Train), container: containerBundle, ro: true},
			// Node-local: the trusted script copies out the weights alone,
			// within their bound (MaxWeightsBytes).
			{rel: stages.CheckpointDir, container: containerOut, hostVar: TrainOutVar},
		},
		paths: map[string]string{
			"NEMORL_PATCH":  stages.PatchFile,
			"NEMORL_BUNDLE": stages.Bundle(stages.Train),
			"NEMORL_OUT":    stages.CheckpointDir,
		},
		bundle: []File{b},
	}
	p.data.InnerDeadlineSeconds = configs.InnerDeadlineSeconds(t.TrainSeconds)
	p.data.PatchFile, p.data.WeightsFile = r.host(stages.PatchFile), r.host(stages.WeightsFile)
	if r.isolated() {
		p.data.TrainOutVar, p.data.MaxWeightsBytes = TrainOutVar, MaxWeightsBytes()
	}
	return p, nil
}

// evalPlan: the pinned evaluator scores the weights; the payload sees the
// node-local copies the script checked (image, patch, bundle), not the
// shared files. No network unless stages.eval.network.
func (r *renderer) evalPlan() (*stagePlan, error) {
	cfg, e := r.cfg, r.cfg.Stages.Eval
	settings := map[string]any{
		"benchmark":              "aime25",
		"architecture":           "qwen2.5-1.5b-instruct",
		"problems":               configs.AIME25Problems,
		"samples_per_problem":    configs.AIME25Samples,
		"temperature":            configs.EvalTemperature,
		"top_p":                  configs.EvalTopP,
		"concurrency":            e.Concurrency,
		"max_model_len":          configs.EvalMaxModelLen,
		"gpu_memory_utilization": configs.EvalGPUMemoryUtil,
		"server_ready_seconds":   configs.EvalServerReadySecs,
		"base_model":             configs.BaseModel,
		"base_model_revision":    configs.BaseModelRev,
	}
	b, err := settingsFile(stages.BundleFile(stages.Eval, "eval.json"), settings)
	if err != nil {
		return nil, err
	}
	p := &stagePlan{
		stage: stages.Eval, res: e.Resources, seconds: e.TimeLimitSeconds,
		image: cfg.Runtime.Images.Eval, gpu: true, noNet: !e.Network,
		pass: []string{"CUDA_VISIBLE_DEVICES"},
		mounts: []mount{
			{rel: stages.WeightsFile, container: path.Join(containerIn, stages.WeightsName), ro: true},
			{rel: stages.PatchFile, container: path.Join(containerIn, stages.PatchName), ro: true, hostVar: EvalPatchVar},
			{rel: stages.Bundle(stages.Eval), container: containerBundle, ro: true, hostVar: EvalBundleVar},
			{rel: stages.EvalWorkDir, container: containerOut},
		},
		paths: map[string]string{
			"NEMORL_WEIGHTS": stages.WeightsFile,
			"NEMORL_PATCH":   stages.PatchFile,
			"NEMORL_BUNDLE":  stages.Bundle(stages.Eval),
			"NEMORL_OUT":     stages.EvalWorkDir,
		},
		imageVar: EvalImageVar, bundle: []File{b}, pinInputs: true,
	}
	if !r.isolated() {
		p.envVars = map[string]string{"NEMORL_BUNDLE": EvalBundleVar, "NEMORL_PATCH": EvalPatchVar}
	}
	d := &p.data
	d.Image, d.EvalDigest, d.ImageVar = p.image, cfg.Runtime.Digests.Eval, EvalImageVar
	d.WeightsFile = r.host(stages.WeightsFile)
	d.PatchFile, d.EvalPatchVar, d.MaxPatchBytes = r.host(stages.PatchFile), EvalPatchVar, stages.MaxPatchBytes
	d.BundleVar = EvalBundleVar
	return p, nil
}
