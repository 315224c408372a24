// Package templates renders an episode: the three sbatch scripts (embedded
// text/templates, missingkey=error) and the bundle tree staged next to them,
// WORKDIR/EPISODE/{author,train,eval}/. Rendering contacts no cluster.
package templates

import (
	"bytes"
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io/fs"
	"path"
	"slices"
	"sort"
	"strings"
	"text/template"

	"github.com/nemorl/nemorl-slurm/apptainer"
	"github.com/nemorl/nemorl-slurm/configs"
	"github.com/nemorl/nemorl-slurm/evaluate"
	"github.com/nemorl/nemorl-slurm/stages"
)

//go:embed sbatch/*.tmpl
var sbatchFS embed.FS

//go:embed payload/*.sh payload/*.py
var payloadFS embed.FS

// payloadFiles are each stage's built-in payload files, staged in its
// bundle when the stage's command is not replaced; the first is the entry
// point. GuardFile is staged in every stage's bundle whatever the command.
var payloadFiles = map[string][]string{
	stages.Author: {"author.sh", "author_proxy.py"},
	stages.Train:  {"train.sh", "export_dcp.py"},
	stages.Eval:   {"eval.sh", "eval_prepare.py"},
}

// GuardFile is the isolation guard (payload/guard.sh), staged in every
// stage's bundle: in container mode the script runs it in the stage's
// container before the payload (see stages.ExitIsolation). In the eval bundle it is
// one of the pinned evaluator inputs.
const GuardFile = "guard.sh"

// Margins added to a stage's budget for its Slurm --time, and the grace
// before the limit at which Slurm sends TERM to the batch shell.
const (
	AuthorMarginSeconds = 600 // unpack the checkout before, write the diff after
	TrainMarginSeconds  = 600 // export DCP to safetensors after the inner deadline
	GraceSeconds        = 120
)

// File is one entry of the rendered tree, relative to the episode directory.
type File struct {
	Path string // slash-separated, relative
	Mode fs.FileMode
	Data []byte // nil for directories
}

// IsDir reports whether f is a directory entry.
func (f File) IsDir() bool { return f.Mode.IsDir() }

// Tree is a rendered episode, ready to stage at Dir on the cluster.
type Tree struct {
	Episode   string
	Dir       string // WORKDIR/EPISODE on the cluster
	Isolation string // "apptainer", "singularity" or "none"
	Files     []File // directories first, then files, sorted by path
}

// Lookup returns the file at rel, if rendered.
func (t *Tree) Lookup(rel string) (File, bool) {
	for _, f := range t.Files {
		if f.Path == rel {
			return f, true
		}
	}
	return File{}, false
}

// Input is what Render needs besides the config.
type Input struct {
	Episode string
	Prompt  []byte // the author's task prompt
	Version string // of nemorl-slurm, written into the scripts
	// PolicyBaseURL is the episode's one of policy_model.base_url; empty:
	// the first.
	PolicyBaseURL string
}

// Render renders the episode tree for cfg. It never includes the policy API
// key: secrets.env is written at staging time only.
func Render(cfg *configs.Config, in Input) (*Tree, error) {
	if !stages.ValidEpisode(in.Episode) {
		return nil, fmt.Errorf("episode id %q: want letters, digits and ._- only", in.Episode)
	}
	if in.PolicyBaseURL == "" {
		in.PolicyBaseURL = cfg.PolicyModel.BaseURL.First()
	} else if !slices.Contains(cfg.PolicyModel.BaseURL, in.PolicyBaseURL) {
		return nil, fmt.Errorf("episode %s: policy endpoint %q is not one of policy_model.base_url", in.Episode, in.PolicyBaseURL)
	}
	r := &renderer{cfg: cfg, in: in, dir: path.Join(cfg.Cluster.Workdir, in.Episode)}
	t := &Tree{Episode: in.Episode, Dir: r.dir, Isolation: cfg.Runtime.Kind}
	for _, d := range []string{"", stages.Author, stages.Author + "/bundle", stages.Train, stages.Train + "/bundle", stages.Train + "/checkpoint", stages.Eval, stages.Eval + "/bundle", stages.Eval + "/work"} {
		t.Files = append(t.Files, File{Path: d, Mode: fs.ModeDir | 0o700})
	}
	for _, stage := range stages.All {
		files, err := r.stage(stage)
		if err != nil {
			return nil, fmt.Errorf("render %s stage: %w", stage, err)
		}
		t.Files = append(t.Files, files...)
	}
	sort.SliceStable(t.Files, func(i, j int) bool {
		a, b := t.Files[i], t.Files[j]
		if a.IsDir() != b.IsDir() {
			return a.IsDir()
		}
		return a.Path < b.Path
	})
	return t, nil
}

type renderer struct {
	cfg *configs.Config
	in  Input
	dir string
}

func (r *renderer) host(rel string) string { return path.Join(r.dir, rel) }

// scriptData is what the sbatch templates see.
type scriptData struct {
	Episode, Stage, Version, Runtime string
	Isolated                         bool
	ScratchVar                       string
	Sbatch                           []string
	StageDir                         string
	GraceSeconds                     int
	Exec                             string
	// GuardExec runs the isolation guard with the payload's exact flags,
	// binds and environment (container mode only).
	GuardExec string
	// NoNetwork: the stage runs with --net --network none.
	NoNetwork bool
	// GPU (train, eval): the script checks that the job's GPU is visible
	// before anything runs: GPUDevices (cluster.gpu_devices) must match a
	// device file on the node and, through GPUCheckExec (container mode),
	// in the container after --nv. NoGPUExit is stages.ExitNoGPU.
	GPU                      bool
	GPUDevices, GPUCheckExec string
	NoGPUExit                int
	// ScratchDirs are the directories the script makes under the scratch
	// directory before the payload starts (HOME and the caches), relative
	// to it as the host sees them.
	ScratchDirs  []string
	Exit         exitCodes
	WatchSeconds int // eval: stages.EvalOutputWatchSeconds
	// author, train: the payload's stdout and stderr reach out.log through
	// a cap: the first OutputHeadBytes as they come, then the last
	// OutputTailBytes (the record's window).
	OutputHeadBytes, OutputTailBytes int64
	// train
	InnerDeadlineSeconds int
	PatchFile            string
	// train, isolated: the node-local output directory (TrainOutVar) and
	// the bound of the one file copied out of it.
	TrainOutVar     string
	MaxWeightsBytes int64
	// author, isolated: the node-local directory bound as the container's
	// /nemorl/author (AuthorOutVar) and the files copied out of it after
	// the payload, each within its bound.
	AuthorOutVar  string
	AuthorCopyOut []copyOut
	// eval: EvalPatchVar holds the node-local copy of PatchFile (at most
	// MaxPatchBytes) that the contamination check reads.
	EvalPatchVar  string
	MaxPatchBytes int64
	// eval
	Image, EvalDigest, WeightsFile, ImageVar string
	BundleVar                                string
	BundleFiles                              []string // host paths, to copy
	PinnedInputs                             []string // "sha256  name", names relative to the bundle
}

func (r *renderer) stage(stage string) ([]File, error) {
	cfg := r.cfg
	isolated := cfg.Runtime.Kind != configs.RuntimeNone
	// A mount makes rel (in the episode) visible to the payload at container.
	type mount struct {
		rel, container string
		ro             bool
	}
	var (
		mounts  []mount
		env     = map[string]string{"NEMORL_EPISODE": r.in.Episode, "NEMORL_STAGE": stage}
		pass    = []string{"SLURM_JOB_ID", "SLURM_CPUS_PER_TASK"}
		gpu     bool
		image   string
		bundle  []File
		res     configs.Resources
		seconds int
	)
	switch stage {
	case stages.Author:
		a := cfg.Stages.Author
		res, seconds = a.Resources, a.ResearchSeconds+AuthorMarginSeconds
		image = cfg.Runtime.Images.Author
		mounts = []mount{{stages.Author, "/nemorl/author", false}}
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
		b, err := settingsFile("author/bundle/author.json", settings)
		if err != nil {
			return nil, err
		}
		bundle = append(bundle, b, File{Path: "author/prompt.txt", Mode: 0o600, Data: r.in.Prompt})
	case stages.Train:
		t := cfg.Stages.Train
		res, seconds = t.Resources, t.TrainSeconds+TrainMarginSeconds
		image, gpu = cfg.Runtime.Images.Train, true
		pass = append(pass, "CUDA_VISIBLE_DEVICES", "NEMORL_DEADLINE")
		mounts = []mount{
			{"author/change.diff", "/nemorl/in/change.diff", true},
			{"train/bundle", "/nemorl/bundle", true},
			{"train/checkpoint", "/nemorl/out", false},
		}
		settings := map[string]any{
			"train_seconds":          t.TrainSeconds,
			"inner_deadline_seconds": configs.InnerDeadlineSeconds(t.TrainSeconds),
			"prompts_per_step":       configs.TrainPromptsPerStep,
			"generations_per_prompt": configs.TrainGenerations,
			"pins":                   pins(),
		}
		b, err := settingsFile("train/bundle/train.json", settings)
		if err != nil {
			return nil, err
		}
		bundle = append(bundle, b)
	case stages.Eval:
		e := cfg.Stages.Eval
		res, seconds = e.Resources, e.TimeLimitSeconds
		image, gpu = cfg.Runtime.Images.Eval, true
		pass = append(pass, "CUDA_VISIBLE_DEVICES")
		mounts = []mount{
			{"train/checkpoint/model.safetensors", "/nemorl/in/model.safetensors", true},
			{"author/change.diff", "/nemorl/in/change.diff", true},
			{"eval/bundle", "/nemorl/bundle", true},
			{"eval/work", "/nemorl/out", false},
		}
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
		b, err := settingsFile("eval/bundle/eval.json", settings)
		if err != nil {
			return nil, err
		}
		bundle = append(bundle, b)
	}

	// The stage's command: the built-in payload from its bundle, or the
	// configured replacement.
	argv := res.Command
	if len(argv) == 0 {
		for i, name := range payloadFiles[stage] {
			p, err := payloadFS.ReadFile("payload/" + name)
			if err != nil {
				return nil, fmt.Errorf("built-in payload: %w", err)
			}
			rel := stage + "/bundle/" + name
			bundle = append(bundle, File{Path: rel, Mode: 0o600, Data: p})
			if i == 0 {
				argv = []string{"/bin/bash", r.inside(isolated, rel, stage)}
			}
		}
	}

	// The isolation guard, whatever the command.
	guard, err := payloadFS.ReadFile("payload/" + GuardFile)
	if err != nil {
		return nil, fmt.Errorf("isolation guard: %w", err)
	}
	guardRel := stage + "/bundle/" + GuardFile
	bundle = append(bundle, File{Path: guardRel, Mode: 0o600, Data: guard})

	// Paths the payload is told about, as it sees them.
	see := func(rel string) string { return r.inside(isolated, rel, stage) }
	switch stage {
	case stages.Author:
		env["NEMORL_OUT"] = see("author")
		env["NEMORL_BUNDLE"] = see("author/bundle")
		env["NEMORL_PROMPT"] = see("author/prompt.txt")
		env["NEMORL_SECRETS"] = see("author/secrets.env")
	case stages.Train:
		env["NEMORL_PATCH"] = see("author/change.diff")
		env["NEMORL_BUNDLE"] = see("train/bundle")
		env["NEMORL_OUT"] = see("train/checkpoint")
	case stages.Eval:
		env["NEMORL_WEIGHTS"] = see("train/checkpoint/model.safetensors")
		env["NEMORL_PATCH"] = see("author/change.diff")
		env["NEMORL_BUNDLE"] = see("eval/bundle")
		env["NEMORL_OUT"] = see("eval/work")
	}
	// stages.Train and eval get no network unless stages.<stage>.network says
	// otherwise; the author must reach the policy endpoint.
	noNet := false
	switch stage {
	case stages.Train:
		noNet = !cfg.Stages.Train.Network
	case stages.Eval:
		noNet = !cfg.Stages.Eval.Network
	}
	spec := apptainer.Spec{Kind: cfg.Runtime.Kind, Binary: cfg.Runtime.Binary, Image: image, GPU: gpu, NoNetwork: noNet,
		Env: env, PassEnv: pass, Argv: argv, WorkdirVar: ScratchVar, ScratchEnv: ScratchEnv(stage)}
	if isolated {
		spec.Pwd = ContainerPwd
	}
	if stage == stages.Eval {
		// The node-local copies the script checked, not the shared files.
		spec.ImageVar = EvalImageVar
		if !isolated {
			delete(spec.Env, "NEMORL_BUNDLE")
			delete(spec.Env, "NEMORL_PATCH")
			spec.EnvVars = map[string]string{"NEMORL_BUNDLE": EvalBundleVar, "NEMORL_PATCH": EvalPatchVar}
		}
	}
	if isolated {
		for _, m := range mounts {
			b := apptainer.Bind{Host: r.host(m.rel), Container: m.container, ReadOnly: m.ro}
			if stage == stages.Eval && m.rel == "eval/bundle" {
				b.Host, b.HostVar = "", EvalBundleVar
			}
			if stage == stages.Eval && m.rel == "author/change.diff" {
				b.Host, b.HostVar = "", EvalPatchVar
			}
			if stage == stages.Author && m.rel == stages.Author {
				// Node-local: the trusted script copies back the expected
				// files alone, each within its bound (AuthorCopyOut).
				b.Host, b.HostVar = "", AuthorOutVar
			}
			if stage == stages.Train && m.rel == "train/checkpoint" {
				// Node-local: the trusted script copies out the weights alone,
				// within their bound (MaxWeightsBytes).
				b.Host, b.HostVar = "", TrainOutVar
			}
			spec.Binds = append(spec.Binds, b)
		}
	}
	line, err := spec.Line()
	if err != nil {
		return nil, err
	}
	var guardLine string
	if isolated {
		// Same spec, only the command differs: the guard sees exactly what
		// the payload will.
		guardArgv := []string{"/bin/bash", r.inside(true, guardRel, stage)}
		if gpu && !noNet {
			guardArgv = append(guardArgv, "--host-network")
		}
		guardLine, err = spec.WithArgv(append(guardArgv, stage)...).Line()
		if err != nil {
			return nil, err
		}
	}
	var gpuLine string
	if isolated && gpu {
		// The device files must be in the container too: --nv on a node
		// without a working driver succeeds and binds nothing.
		gpuLine, err = spec.WithArgv("/bin/sh", "-c", fmt.Sprintf(
			`for d in %s; do [ -e "$d" ] && exit 0; done; echo "nemorl: no GPU: no device file matches %s in the container after --nv" >&2; exit %d`,
			cfg.Cluster.GPUDevices, cfg.Cluster.GPUDevices, stages.ExitNoGPU)).Line()
		if err != nil {
			return nil, err
		}
	}
	var scratchDirs []string
	for _, rel := range []string{"home", "cache", "config"} {
		if isolated {
			rel = path.Join(apptainer.ScratchTmp, rel)
		}
		scratchDirs = append(scratchDirs, rel)
	}

	data := scriptData{
		Episode: r.in.Episode, Stage: stage, Version: r.in.Version, Runtime: cfg.Runtime.Kind,
		Isolated: isolated, ScratchVar: ScratchVar, StageDir: r.host(stage), GraceSeconds: GraceSeconds, Exec: line,
		GuardExec: guardLine, Exit: scriptExits, WatchSeconds: stages.EvalOutputWatchSeconds,
		NoNetwork: noNet, GPU: gpu, GPUDevices: cfg.Cluster.GPUDevices, GPUCheckExec: gpuLine, NoGPUExit: stages.ExitNoGPU,
		ScratchDirs:     scratchDirs,
		Sbatch:          r.sbatchOptions(stage, res, seconds, gpu),
		OutputHeadBytes: OutputHeadBytes, OutputTailBytes: OutputTailBytes,
	}
	switch stage {
	case stages.Author:
		if isolated {
			data.AuthorOutVar, data.AuthorCopyOut = AuthorOutVar, authorCopyOut
		}
	case stages.Train:
		data.InnerDeadlineSeconds = configs.InnerDeadlineSeconds(cfg.Stages.Train.TrainSeconds)
		data.PatchFile = r.host("author/change.diff")
		data.WeightsFile = r.host("train/checkpoint/model.safetensors")
		if isolated {
			data.TrainOutVar, data.MaxWeightsBytes = TrainOutVar, MaxWeightsBytes()
		}
	case stages.Eval:
		data.Image, data.EvalDigest, data.ImageVar = image, cfg.Runtime.Digests.Eval, EvalImageVar
		data.WeightsFile = r.host("train/checkpoint/model.safetensors")
		data.PatchFile, data.EvalPatchVar, data.MaxPatchBytes = r.host("author/change.diff"), EvalPatchVar, stages.MaxPatchBytes
		data.BundleVar = EvalBundleVar
		for _, f := range bundle {
			sum := sha256.Sum256(f.Data)
			data.BundleFiles = append(data.BundleFiles, r.host(f.Path))
			data.PinnedInputs = append(data.PinnedInputs, hex.EncodeToString(sum[:])+"  "+path.Base(f.Path))
		}
		sort.Strings(data.BundleFiles)
		sort.Strings(data.PinnedInputs)
	}
	script, err := execute(stage+".sbatch.tmpl", data)
	if err != nil {
		return nil, err
	}
	return append(bundle, File{Path: stages.Script(stage), Mode: 0o600, Data: script}), nil
}

// inside is where the payload sees rel: its container path, or the host path
// without isolation.
func (r *renderer) inside(isolated bool, rel, stage string) string {
	if !isolated {
		return r.host(rel)
	}
	switch {
	case stage == stages.Author && strings.HasPrefix(rel, "author"):
		return path.Join("/nemorl", rel)
	case rel == "author/change.diff":
		return "/nemorl/in/change.diff"
	case rel == "train/checkpoint/model.safetensors":
		return "/nemorl/in/model.safetensors"
	case strings.HasPrefix(rel, stage+"/bundle"):
		return path.Join("/nemorl/bundle", strings.TrimPrefix(rel, stage+"/bundle"))
	case rel == "train/checkpoint" || rel == "eval/work":
		return "/nemorl/out"
	}
	panic("templates: no container path for " + rel + " in stage " + stage)
}

func (r *renderer) sbatchOptions(stage string, res configs.Resources, seconds int, gpu bool) []string {
	cl := r.cfg.Cluster
	o := []string{"--job-name=" + stages.JobName(r.in.Episode, stage)}
	if cl.Partition != "" {
		o = append(o, "--partition="+cl.Partition)
	}
	if cl.Account != "" {
		o = append(o, "--account="+cl.Account)
	}
	if cl.QOS != "" {
		o = append(o, "--qos="+cl.QOS)
	}
	o = append(o,
		"--nodes=1", "--ntasks=1",
		fmt.Sprintf("--cpus-per-task=%d", res.CPUs),
		"--mem="+res.Mem,
		"--time="+slurmTime(seconds),
	)
	if gpu {
		o = append(o, "--gres="+cl.Gres)
	}
	// stages.Train and eval may be rerun by Slurm after a node failure or a
	// preemption (the tool follows the job's runs as attempts); the author
	// never: its secrets file is gone after its first run.
	if stage == stages.Author || r.cfg.Episodes.NoRequeue {
		o = append(o, "--no-requeue")
	} else {
		o = append(o, "--requeue")
	}
	o = append(o,
		"--output="+r.host(stages.Output(stage)),
		"--open-mode=truncate",
		"--comment="+stages.Comment(r.in.Episode, stage),
		fmt.Sprintf("--signal=B:USR1@%d", GraceSeconds),
		"--kill-on-invalid-dep=yes",
		"--export=NONE",
	)
	return append(o, cl.ExtraSbatch...)
}

// ScratchVar is every script's variable holding its private node-local
// scratch directory, removed when the job ends. In a container it is
// --workdir: the container's /tmp and /var/tmp are there, on the node's disk,
// not in Apptainer's small in-memory session directory.
const ScratchVar = "nemorl_scratch"

// ContainerPwd is the payload's working directory in the container
// (--pwd): its /tmp, in the job's scratch directory.
const ContainerPwd = "/tmp"

// scratchEnv are the variables every stage's payload gets pointing under
// the job's scratch directory (paths relative to the container's /tmp, or
// to the scratch directory without a container): with --no-home, HOME would
// stay /home/<user>, which does not exist in the container, and every cache
// NeMo RL, vLLM, Triton, uv, pip, PyTorch, CUDA and Hugging Face write would
// go there.
var scratchEnv = map[string]string{
	"HOME":                    "home",
	"XDG_CACHE_HOME":          "cache",
	"XDG_CONFIG_HOME":         "config",
	"TRITON_CACHE_DIR":        "cache/triton",
	"VLLM_CACHE_ROOT":         "cache/vllm",
	"UV_CACHE_DIR":            "cache/uv",
	"HF_HOME":                 "cache/huggingface",
	"TORCHINDUCTOR_CACHE_DIR": "cache/torchinductor",
	"CUDA_CACHE_PATH":         "cache/nv",
	"PIP_CACHE_DIR":           "cache/pip",
}

// ScratchEnv returns the variables a stage's payload gets under its scratch
// directory (name → path relative to it; see scratchEnv). stages.Train keeps the
// image's HF_HOME: the train image pins it to the read-only snapshot of the
// base model (HF_HUB_OFFLINE=1), which training loads by name from there.
func ScratchEnv(stage string) map[string]string {
	m := make(map[string]string, len(scratchEnv))
	for k, v := range scratchEnv {
		if stage == stages.Train && k == "HF_HOME" {
			continue
		}
		m[k] = v
	}
	return m
}

// EvalImageVar is the eval script's variable holding the node-local copy of
// the eval image: the copy is what is hashed and what runs, so replacing or
// rewriting the shared image after the check changes nothing.
const EvalImageVar = "NEMORL_EVAL_IMAGE"

// TrainOutVar is the train script's variable holding the node-local
// directory bound as the container's /nemorl/out: the policy's code writes
// its checkpoints there, not on the shared file system, and the script
// copies out model.safetensors alone, within MaxWeightsBytes.
const TrainOutVar = "NEMORL_TRAIN_OUT"

// AuthorOutVar is the author script's variable holding the node-local
// directory bound as the container's /nemorl/author: the script copies the
// bundle and the prompt in and moves the key in, and after the payload
// copies back only authorCopyOut, each file within its bound.
const AuthorOutVar = "NEMORL_AUTHOR_OUT"

// copyOut is a file the trusted script copies from the payload's
// node-local directory to the stage directory: Whole, a file over Max bytes
// is not copied (the records' checks then fail it: a patch not
// copied back does not match the author record, patch_mismatch); otherwise only its first Max bytes are.
type copyOut struct {
	Name  string
	Max   int64
	Whole bool
}

// authorCopyOut is what leaves the author's node: the patch and the
// response whole, the logs for a human their first OutputHeadBytes.
var authorCopyOut = []copyOut{
	{"change.diff", stages.MaxPatchBytes, true},
	{"response.json", stages.MaxResponseBytes, true},
	{"transcript.jsonl", OutputHeadBytes, false},
	{"claude.log", OutputHeadBytes, false},
	{"proxy.log", OutputHeadBytes, false},
}

// The cap on the policy's stdout and stderr (author, train) in out.log: the
// first OutputHeadBytes as they come, then only the last OutputTailBytes,
// where the record is (the collector reads that window).
const (
	OutputHeadBytes = 16 << 20
	OutputTailBytes = 1 << 20
)

// MaxWeightsBytes bounds the weights train may copy out: every tensor of
// the pinned architecture (Qwen2.5-1.5B-Instruct, the optional tied
// lm_head included) in float32, the widest dtype the trusted check
// accepts, and 16 MiB for the safetensors header.
func MaxWeightsBytes() int64 {
	var n int64
	for _, t := range evaluate.Qwen25_1_5B_Instruct().Tensors {
		e := int64(1)
		for _, d := range t.Shape {
			e *= d
		}
		n += e
	}
	return 4*n + 16<<20
}

// EvalPatchVar is the eval script's variable holding the node-local copy of
// the author's change.diff: what the contamination check reads, and whose
// sha256 the eval record names, whatever happens to the shared file.
const EvalPatchVar = "NEMORL_EVAL_PATCH"

// EvalBundleVar is the eval script's variable holding the node-local copy of
// the eval bundle (the evaluator inputs), checked against the sums pinned in
// the script and the only copy the payload sees.
const EvalBundleVar = "NEMORL_EVAL_BUNDLE"

func slurmTime(seconds int) string {
	return fmt.Sprintf("%02d:%02d:%02d", seconds/3600, seconds%3600/60, seconds%60)
}

func pins() map[string]string {
	return map[string]string{
		"nemo_rl":             configs.NemoRLCommit,
		"gym":                 configs.GymCommit,
		"base_model":          configs.BaseModel,
		"base_model_revision": configs.BaseModelRev,
	}
}

func settingsFile(rel string, v any) (File, error) {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return File{}, fmt.Errorf("%s: %w", rel, err)
	}
	return File{Path: rel, Mode: 0o600, Data: append(b, '\n')}, nil
}

var scripts = template.Must(template.New("").Option("missingkey=error").ParseFS(sbatchFS, "sbatch/*.tmpl"))

func execute(name string, data scriptData) ([]byte, error) {
	var b bytes.Buffer
	if err := scripts.ExecuteTemplate(&b, name, data); err != nil {
		return nil, fmt.Errorf("template %s: %w", name, err)
	}
	return b.Bytes(), nil
}
