// Package configs holds the nemorl-slurm configuration: its schema, strict
// YAML loading (unknown keys rejected, every error naming the key and line),
// environment expansion, defaults, validation and the example configs.
package configs

import (
	"encoding/json"
	"fmt"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/nemorl/nemorl-slurm/stages"
)

// Config is the whole configuration file.
type Config struct {
	// Cluster is the cluster episodes run on. With clusters: set it is the
	// first entry's (For gives the others).
	Cluster Cluster `yaml:"cluster,omitempty"`
	// Clusters are the clusters one serve places episodes on, each its own
	// login, partition, GRES, images and limits (clusters.go); unset, the
	// config's one cluster: is the only one.
	Clusters    []ClusterEntry `yaml:"clusters,omitempty"`
	Runtime     Runtime        `yaml:"runtime"`
	PolicyModel PolicyModel    `yaml:"policy_model"`
	Stages      Stages         `yaml:"stages"`
	Episodes    Episodes       `yaml:"episodes"`
	Serve       Serve          `yaml:"serve"`

	// Source is the file the config was loaded from ("" for in-memory).
	Source string `yaml:"-"`
	// ClusterName is the clusters: entry Cluster (and Runtime's images)
	// were taken from; "" for a config of one cluster: (For sets it).
	ClusterName string `yaml:"-"`
	// SecretUnset names the unset variable of a secret (policy_model.api_key:
	// "${POLICY_API_KEY}") when the config was loaded with
	// LoadOptions.SecretsOptional; the secret is then empty.
	SecretUnset string `yaml:"-"`

	// lines maps key paths to their line in Source (Line).
	lines map[string]int
}

// Line is the line of key (a dotted path) in the file the config was
// loaded from, or 0.
func (c *Config) Line(key string) int { return c.lines[key] }

// Cluster says where Slurm is and how jobs are requested.
type Cluster struct {
	// Login is nil when the tool runs on the login node itself.
	Login       *Login   `yaml:"login,omitempty"`
	Workdir     string   `yaml:"workdir"`
	Partition   string   `yaml:"partition"`
	Account     string   `yaml:"account"`
	QOS         string   `yaml:"qos"`
	Gres        string   `yaml:"gres"`
	ExtraSbatch []string `yaml:"extra_sbatch"`
	// GPUDevices is a glob of the GPU device files on a compute node
	// (default /dev/nvidia[0-9]*). The train and eval scripts refuse to run
	// (exit 70, no GPU) when nothing matches it, on the node and, with a
	// container runtime, inside the container after --nv.
	GPUDevices string `yaml:"gpu_devices"`
	// SubmitRate caps the sbatch commands this tool runs on the cluster,
	// per second (0, the default: no cap). Sites that throttle users
	// (SlurmctldParameters=rl_enable) answer a burst of sbatch with "rate
	// limit"; a rate below the site's refill keeps a burst of rows from
	// being refused.
	SubmitRate float64 `yaml:"submit_rate"`
	// JobArrays (default true): the authors of episodes submitted together
	// (serve's rows, submit --count) are one job array, one sbatch for up
	// to 50 of them; false submits each as a job of its own (a site that
	// disallows arrays: MaxArraySize=0).
	JobArrays *bool `yaml:"job_arrays"`
	// Member is the Slurm cluster (of a clusters: entry's members) every
	// Slurm command is sent to: SLURM_CLUSTERS for sbatch, squeue, sinfo,
	// scancel and scontrol, --clusters for sacct (which reads no such
	// variable). "": the login's own cluster. Set by Config.For.
	Member string `yaml:"-"`
}

// Login is how to reach the login node over SSH.
type Login struct {
	Host         string `yaml:"host"`
	Port         int    `yaml:"port"`
	User         string `yaml:"user"`
	IdentityFile string `yaml:"identity_file"`
	KnownHosts   string `yaml:"known_hosts"`
	ProxyJump    string `yaml:"proxy_jump"`
	// AcceptNewHostKey adds an unknown host's key to known_hosts on first
	// contact, like OpenSSH's StrictHostKeyChecking=accept-new. A changed
	// key is always refused.
	AcceptNewHostKey bool `yaml:"accept_new_host_key"`
}

// Runtime kinds.
const (
	RuntimeApptainer   = "apptainer"
	RuntimeSingularity = "singularity"
	RuntimeNone        = "none"
)

// Runtime is the container runtime that isolates each stage.
type Runtime struct {
	Kind    string  `yaml:"kind"`
	Binary  string  `yaml:"binary"`
	Images  Images  `yaml:"images"`
	Digests Digests `yaml:"digests"`
}

// Images are the SIF files on the cluster, one per stage.
type Images struct {
	Author string `yaml:"author"`
	Train  string `yaml:"train"`
	Eval   string `yaml:"eval"`
}

// Of is stage's image ("" for a stage that has none).
func (i Images) Of(stage stages.Stage) string { return ofStage(stage, i.Author, i.Train, i.Eval) }

// ofStage picks stage's value of a per-stage triple ("" for no stage).
func ofStage(stage stages.Stage, author, train, eval string) string {
	switch stage {
	case stages.Author:
		return author
	case stages.Train:
		return train
	case stages.Eval:
		return eval
	}
	return ""
}

// Digests pin images by sha256 ("sha256:<64 hex>"). The eval digest is
// required with a container runtime: the eval job refuses any other image.
type Digests struct {
	Author string `yaml:"author"`
	Train  string `yaml:"train"`
	Eval   string `yaml:"eval"`
}

// Of is stage's pinned digest ("" when none is pinned).
func (d Digests) Of(stage stages.Stage) string { return ofStage(stage, d.Author, d.Train, d.Eval) }

// PolicyModel is the endpoint of the policy that drives Claude Code.
type PolicyModel struct {
	// BaseURL is one endpoint or a list; episodes are spread over a list
	// (Driver.PolicyBaseURL) and each episode keeps the one it got.
	BaseURL             URLs   `yaml:"base_url"`
	APIKey              Secret `yaml:"api_key"`
	Model               string `yaml:"model"`
	UsesReasoningParser *bool  `yaml:"uses_reasoning_parser"`
}

// Stages holds per-stage resources and budgets.
type Stages struct {
	Author AuthorStage `yaml:"author"`
	Train  TrainStage  `yaml:"train"`
	Eval   EvalStage   `yaml:"eval"`
}

// Resources are the Slurm requests common to every stage.
type Resources struct {
	CPUs int    `yaml:"cpus"`
	Mem  string `yaml:"mem"`
	// Command replaces the stage's built-in payload when non-empty
	// (stand-ins in the lab and tests).
	Command []string `yaml:"command"`
}

// AuthorStage is the policy's research stage (CPU only).
type AuthorStage struct {
	ResearchSeconds int `yaml:"research_seconds"`
	MaxTurns        int `yaml:"max_turns"`
	Resources       `yaml:",inline"`
}

// TrainStage is the time-boxed GRPO training on one GPU.
type TrainStage struct {
	TrainSeconds int `yaml:"train_seconds"`
	// Network gives the train container the host network; false (the
	// default) runs it with --net --network none (loopback only).
	Network   bool `yaml:"network"`
	Resources `yaml:",inline"`
}

// EvalStage is the AIME25 evaluation on one GPU.
type EvalStage struct {
	Concurrency int `yaml:"concurrency"`
	// TimeLimitSeconds bounds the eval job (vLLM start-up plus 240
	// generations of up to 32K tokens).
	TimeLimitSeconds int `yaml:"time_limit_seconds"`
	// Network gives the eval container the host network; false (the
	// default) runs it with --net --network none (loopback only).
	Network   bool `yaml:"network"`
	Resources `yaml:",inline"`
}

// Episodes governs many episodes in flight.
type Episodes struct {
	Concurrency int      `yaml:"concurrency"`
	PollMin     Duration `yaml:"poll_min"`
	PollMax     Duration `yaml:"poll_max"`
	// Retries is how many times a train or eval stage that the cluster
	// failed (a node failure, a preemption, no GPU, a lost job, an
	// evaluator that died) is run again with the same verified patch;
	// a run Slurm requeued counts as one.
	Retries int `yaml:"retries"`
	// NoRequeue submits train and eval with --no-requeue: Slurm does not
	// rerun them after a node failure or preemption, and the tool retries
	// them as new jobs instead. By default they say --requeue and the tool
	// follows Slurm's reruns. The author job is never requeued (its
	// secrets file is gone after its first run).
	NoRequeue bool `yaml:"no_requeue"`
}

// Duration is a time.Duration written as "5s", "1m30s".
type Duration struct{ time.Duration }

// Secret is a string that never prints.
type Secret string

// Redacted is what a set secret prints as.
const Redacted = "<redacted>"

func (s Secret) String() string {
	if s == "" {
		return ""
	}
	return Redacted
}

// GoString keeps %#v from leaking the value.
func (s Secret) GoString() string { return `configs.Secret("` + s.String() + `")` }

// Reveal returns the secret's value; only the staging of secrets.env calls it.
func (s Secret) Reveal() string { return string(s) }

// The evaluation protocol is the reward's definition, not a setting: the
// record checks depend on these numbers, so they are constants.
const (
	AIME25Problems      = 30
	AIME25Samples       = 8
	EvalTemperature     = 0.7
	EvalTopP            = 1.0
	EvalMaxModelLen     = 32768
	EvalGPUMemoryUtil   = 0.85
	EvalServerReadySecs = 600
	TrainPromptsPerStep = 8
	TrainGenerations    = 8
	// InnerDeadlineMargin is taken off train_seconds for the inner
	// training deadline, leaving time to save and export the checkpoint.
	InnerDeadlineMargin = 120
)

// Pins of the reference episode.
const (
	NemoRLCommit  = "1cee83587d0f0d2ba82e7cdeced9772641fddbe3"
	GymCommit     = "fd5e84d6b1c485c80e7ae61553bbd485611c03b4"
	BaseModel     = "Qwen/Qwen2.5-1.5B-Instruct"
	BaseModelRev  = "989aa7980e4cf806f80c7fef2b1adb7bc71aa306"
	DefaultGres   = "gpu:h100:1"
	DefaultBinary = "apptainer"
	// DefaultGPUDevices is cluster.gpu_devices' default: the NVIDIA GPU
	// device files (not /dev/nvidiactl, /dev/nvidia-uvm).
	DefaultGPUDevices = "/dev/nvidia[0-9]*"
)

// UnmarshalYAML reads "5s"-style durations.
func (d *Duration) UnmarshalYAML(n *yaml.Node) error {
	v, err := time.ParseDuration(n.Value)
	if err != nil {
		return fmt.Errorf("line %d: want a duration such as 5s: %w", n.Line, err)
	}
	d.Duration = v
	return nil
}

// MarshalYAML writes the duration back as "5s".
func (d Duration) MarshalYAML() (any, error) { return d.String(), nil }

// MarshalJSON writes the duration as "5s".
func (d Duration) MarshalJSON() ([]byte, error) { return json.Marshal(d.String()) }

// MarshalYAML never writes the secret.
func (s Secret) MarshalYAML() (any, error) { return s.String(), nil }

// MarshalJSON never writes the secret.
func (s Secret) MarshalJSON() ([]byte, error) { return json.Marshal(s.String()) }

// InnerDeadlineSeconds is the inner training deadline, counted from the start
// of the train stage: train_seconds − 120 as in the reference, but never less
// than half the budget (short lab budgets).
func InnerDeadlineSeconds(trainSeconds int) int {
	return trainSeconds - min(InnerDeadlineMargin, trainSeconds/2)
}

// Arrays reports whether episodes submitted together are a job array
// (cluster.job_arrays, default true).
func (c Cluster) Arrays() bool { return c.JobArrays == nil || *c.JobArrays }
