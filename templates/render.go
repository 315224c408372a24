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
	"os"
	"path"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"text/template"
	"time"

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
var payloadFiles = map[stages.Stage][]string{
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

// Write writes the tree's directories and files under dir (render --out,
// and tests that run the scripts where the tree says: dir = Dir) and
// returns the files' paths relative to dir. Directories come first in
// Files, so each file's directory exists when it is written.
func (t *Tree) Write(dir string) ([]string, error) {
	var files []string
	for _, f := range t.Files {
		p := filepath.Join(dir, filepath.FromSlash(f.Path))
		if f.IsDir() {
			if err := os.MkdirAll(p, f.Mode.Perm()); err != nil {
				return files, fmt.Errorf("write %s: %w", p, err)
			}
			continue
		}
		if err := os.WriteFile(p, f.Data, f.Mode.Perm()); err != nil {
			return files, fmt.Errorf("write %s: %w", p, err)
		}
		files = append(files, f.Path)
	}
	return files, nil
}

// Input is what Render needs besides the config.
type Input struct {
	Episode string
	Prompt  []byte // the author's task prompt
	Version string // of nemorl-slurm, written into the scripts
	// PolicyBaseURL is the episode's one of policy_model.base_url; empty:
	// the first.
	PolicyBaseURL string
	// KillWait is the cluster's KillWait (slurm.Client.Config: one
	// scontrol show config per Client), written into the scripts: their
	// TERM path waits two thirds of it (1..20 s) for the payload, and the
	// jobs ask slurmctld nothing for it. Zero: unknown (render contacts no
	// cluster): DefaultKillWait is assumed, and the scripts say so. A
	// cluster whose KillWait is 0 (Slurm kills at once after TERM) renders
	// as unknown too; its jobs are killed before any wait could matter.
	KillWait time.Duration
}

// DefaultKillWait is Slurm's default KillWait (slurm.conf(5)), which the
// scripts assume when Input.KillWait is unknown.
const DefaultKillWait = 30 * time.Second

// MaxTermWaitSeconds bounds the scripts' wait for the payload after TERM
// (two thirds of KillWait, at least 1 s).
const MaxTermWaitSeconds = 20

// TermWaitSeconds is how long a script waits for its payload after TERM
// before it kills the payload's process group, for a cluster whose
// KillWait is killWait (zero or less: unknown, DefaultKillWait): two thirds
// of it in whole seconds, rounded down, within 1..MaxTermWaitSeconds, so
// that the script cleans up and exits before Slurm's KILL.
func TermWaitSeconds(killWait time.Duration) int {
	if killWait <= 0 {
		killWait = DefaultKillWait
	}
	s := int64(killWait/time.Second) * 2 / 3
	return int(min(max(s, 1), MaxTermWaitSeconds))
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
	for _, d := range []string{"", string(stages.Author), stages.Bundle(stages.Author), string(stages.Train), stages.Bundle(stages.Train), stages.CheckpointDir, string(stages.Eval), stages.Bundle(stages.Eval), stages.EvalWorkDir} {
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
	ScratchDirs []string
	// KillWaitSeconds is the cluster's KillWait written into the script
	// (KillWaitKnown false: unknown at render, DefaultKillWait assumed);
	// TermWaitSeconds is the TERM path's wait (TermWaitSeconds).
	KillWaitSeconds, TermWaitSeconds int
	KillWaitKnown                    bool
	// Exit: the scripts' exit statuses (exitcodes.go).
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

// isolated: the stages run in containers (runtime.kind apptainer or
// singularity), not on the host.
func (r *renderer) isolated() bool { return r.cfg.Runtime.Kind != configs.RuntimeNone }

// stage renders a stage's files: its bundle and its script, from its plan
// (plan.go).
func (r *renderer) stage(stage stages.Stage) ([]File, error) {
	var (
		p   *stagePlan
		err error
	)
	switch stage {
	case stages.Author:
		p, err = r.authorPlan()
	case stages.Train:
		p, err = r.trainPlan()
	case stages.Eval:
		p, err = r.evalPlan()
	default:
		return nil, fmt.Errorf("no stage %q", stage)
	}
	if err != nil {
		return nil, err
	}
	return r.build(p)
}

// build renders a stage's bundle and script from its plan.
func (r *renderer) build(p *stagePlan) ([]File, error) {
	bundle, argv, err := r.payload(p)
	if err != nil {
		return nil, err
	}
	spec := r.spec(p, argv)
	line, err := spec.Line()
	if err != nil {
		return nil, err
	}
	guardLine, err := r.guardLine(p, spec)
	if err != nil {
		return nil, err
	}
	gpuLine, err := r.gpuLine(p, spec)
	if err != nil {
		return nil, err
	}
	data := r.scriptData(p, line, guardLine, gpuLine)
	if p.pinInputs {
		data.BundleFiles, data.PinnedInputs = r.pinned(bundle)
	}
	script, err := execute(string(p.stage)+".sbatch.tmpl", data)
	if err != nil {
		return nil, err
	}
	return append(bundle, File{Path: stages.Script(p.stage), Mode: 0o600, Data: script}), nil
}

// payload returns the stage's bundle with the built-in payload (unless the
// stage's command replaces it) and the isolation guard (whatever the
// command), and the command.
func (r *renderer) payload(p *stagePlan) ([]File, []string, error) {
	bundle, argv := p.bundle, p.res.Command
	if len(argv) == 0 {
		for i, name := range payloadFiles[p.stage] {
			data, err := payloadFS.ReadFile("payload/" + name)
			if err != nil {
				return nil, nil, fmt.Errorf("built-in payload: %w", err)
			}
			rel := stages.BundleFile(p.stage, name)
			bundle = append(bundle, File{Path: rel, Mode: 0o600, Data: data})
			if i == 0 {
				argv = []string{"/bin/bash", r.inside(p, rel)}
			}
		}
	}
	guard, err := payloadFS.ReadFile("payload/" + GuardFile)
	if err != nil {
		return nil, nil, fmt.Errorf("isolation guard: %w", err)
	}
	return append(bundle, File{Path: stages.BundleFile(p.stage, GuardFile), Mode: 0o600, Data: guard}), argv, nil
}

// spec is the stage's exec line: argv in its container with its binds,
// or on the host without isolation.
func (r *renderer) spec(p *stagePlan, argv []string) apptainer.Spec {
	cfg := r.cfg
	env := map[string]string{"NEMORL_EPISODE": r.in.Episode, "NEMORL_STAGE": string(p.stage)}
	for name, rel := range p.paths {
		if _, ok := p.envVars[name]; !ok {
			env[name] = r.inside(p, rel)
		}
	}
	spec := apptainer.Spec{Kind: cfg.Runtime.Kind, Binary: cfg.Runtime.Binary, Image: p.image, GPU: p.gpu, NoNetwork: p.noNet,
		Env: env, EnvVars: p.envVars, PassEnv: append([]string{"SLURM_JOB_ID", "SLURM_CPUS_PER_TASK"}, p.pass...), Argv: argv,
		WorkdirVar: ScratchVar, ScratchEnv: ScratchEnv(p.stage), ImageVar: p.imageVar}
	if !r.isolated() {
		return spec
	}
	spec.Pwd = ContainerPwd
	for _, m := range p.mounts {
		b := apptainer.Bind{Host: r.host(m.rel), Container: m.container, ReadOnly: m.ro}
		if m.hostVar != "" {
			b.Host, b.HostVar = "", m.hostVar
		}
		spec.Binds = append(spec.Binds, b)
	}
	return spec
}

// guardLine runs the isolation guard with spec (isolated only): only the
// command differs, so the guard sees exactly what the payload will.
func (r *renderer) guardLine(p *stagePlan, spec apptainer.Spec) (string, error) {
	if !r.isolated() {
		return "", nil
	}
	argv := []string{"/bin/bash", r.inside(p, stages.BundleFile(p.stage, GuardFile))}
	if p.gpu && !p.noNet {
		argv = append(argv, "--host-network")
	}
	return spec.WithArgv(append(argv, string(p.stage))...).Line()
}

// gpuCheckScript is the GPU check in the container (gpuCheck).
//
//go:embed scripts/gpu_check.sh
var gpuCheckScript string

// gpuLine runs the GPU check with spec (isolated, GPU stages only): the
// device files must be in the container too, as --nv on a node without a
// working driver succeeds and binds nothing.
func (r *renderer) gpuLine(p *stagePlan, spec apptainer.Spec) (string, error) {
	if !r.isolated() || !p.gpu {
		return "", nil
	}
	return spec.WithArgv("/bin/sh", "-c", gpuCheck(r.cfg.Cluster.GPUDevices, stages.ExitNoGPU)).Line()
}

// gpuCheck is scripts/gpu_check.sh as one sh -c line: its comment lines
// dropped, the others joined with "; ", devices and exit written in.
func gpuCheck(devices string, exit int) string {
	var cmds []string
	for _, l := range strings.Split(gpuCheckScript, "\n") {
		if l != "" && !strings.HasPrefix(l, "#") {
			cmds = append(cmds, l)
		}
	}
	return strings.NewReplacer(`"$NEMORL_NO_GPU_EXIT"`, strconv.Itoa(exit), "$NEMORL_GPU_DEVICES", devices).Replace(strings.Join(cmds, "; "))
}

// scriptData is the plan's script data with the fields every stage has.
func (r *renderer) scriptData(p *stagePlan, exec, guardExec, gpuCheckExec string) scriptData {
	d := p.data
	d.Episode, d.Stage, d.Version, d.Runtime = r.in.Episode, string(p.stage), r.in.Version, r.cfg.Runtime.Kind
	d.Isolated, d.ScratchVar, d.StageDir, d.GraceSeconds = r.isolated(), ScratchVar, r.host(string(p.stage)), GraceSeconds
	d.Exec, d.GuardExec, d.Exit, d.WatchSeconds = exec, guardExec, scriptExits, stages.EvalOutputWatchSeconds
	d.NoNetwork, d.GPU, d.GPUDevices = p.noNet, p.gpu, r.cfg.Cluster.GPUDevices
	d.GPUCheckExec, d.NoGPUExit = gpuCheckExec, stages.ExitNoGPU
	d.ScratchDirs = r.scratchDirs()
	d.KillWaitKnown = r.in.KillWait > 0
	d.KillWaitSeconds = int(DefaultKillWait / time.Second)
	if d.KillWaitKnown {
		d.KillWaitSeconds = int(r.in.KillWait / time.Second)
	}
	d.TermWaitSeconds = TermWaitSeconds(r.in.KillWait)
	d.Sbatch = r.sbatchOptions(p.stage, p.res, p.seconds, p.gpu)
	d.OutputHeadBytes, d.OutputTailBytes = OutputHeadBytes, OutputTailBytes
	return d
}

// scratchDirs are the directories the script makes under the scratch
// directory before the payload starts, as the host sees them.
func (r *renderer) scratchDirs() []string {
	var dirs []string
	for _, rel := range []string{"home", "cache", "config"} {
		if r.isolated() {
			rel = path.Join(apptainer.ScratchTmp, rel)
		}
		dirs = append(dirs, rel)
	}
	return dirs
}

// pinned are the bundle's host paths (to copy) and "sha256  name" lines
// (to check the copies against), each sorted.
func (r *renderer) pinned(bundle []File) (files, sums []string) {
	for _, f := range bundle {
		sum := sha256.Sum256(f.Data)
		files = append(files, r.host(f.Path))
		sums = append(sums, hex.EncodeToString(sum[:])+"  "+path.Base(f.Path))
	}
	sort.Strings(files)
	sort.Strings(sums)
	return files, sums
}

// inside is where the payload sees rel: under the container path of the
// stage's mount that holds it, or the host path without isolation.
func (r *renderer) inside(p *stagePlan, rel string) string {
	if !r.isolated() {
		return r.host(rel)
	}
	for _, m := range p.mounts {
		if rest, ok := strings.CutPrefix(rel, m.rel); ok && (rest == "" || rest[0] == '/') {
			return m.container + rest
		}
	}
	panic("templates: no container path for " + rel + " in stage " + string(p.stage))
}

func (r *renderer) sbatchOptions(stage stages.Stage, res configs.Resources, seconds int, gpu bool) []string {
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
func ScratchEnv(stage stages.Stage) map[string]string {
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
	{stages.PatchName, stages.MaxPatchBytes, true},
	{stages.ResponseName, stages.MaxResponseBytes, true},
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
