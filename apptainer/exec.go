// Package apptainer builds the command line that runs one stage's payload:
// `apptainer exec` (or `singularity exec`) with least-privilege binds and an
// explicit environment, or — with runtime.kind none, in the lab only — the
// payload itself on the host.
package apptainer

import (
	"fmt"
	"path"
	"sort"
	"strings"

	"github.com/nemorl/nemorl-slurm/configs"
	"github.com/nemorl/nemorl-slurm/internal/shell"
)

// Bind is one host path made visible inside the container.
type Bind struct {
	Host      string // absolute host path
	Container string // absolute path inside the container
	ReadOnly  bool
	// HostVar, when set, names a batch-shell variable holding the host
	// path instead (a node-local, checked copy); Host is then unused.
	HostVar string
}

// Spec is what one stage needs to run.
type Spec struct {
	Kind   string // configs.RuntimeApptainer, RuntimeSingularity or RuntimeNone
	Binary string // apptainer or singularity (or an absolute path)
	Image  string // SIF on the cluster; unused with RuntimeNone
	// ImageVar, when set, names a batch-shell variable holding the image
	// path instead (the eval job's node-local, checked copy).
	ImageVar string
	// WorkdirVar, when set, names a batch-shell variable holding a
	// node-local directory for --workdir: with --containall the container's
	// /tmp and /var/tmp are made there instead of in Apptainer's in-memory
	// session directory (64 MiB by default).
	WorkdirVar string
	GPU        bool // --nv (train and eval only)
	// NoNetwork gives the container its own network namespace with only
	// loopback (--net --network none): train and eval. The author keeps the
	// host network, as it must reach the policy endpoint.
	NoNetwork bool
	Binds     []Bind
	// Env is set inside the container to fixed values.
	Env map[string]string
	// EnvVars sets variables to the value of a batch-shell variable when
	// the line runs (name → shell variable), e.g. a node-local path.
	EnvVars map[string]string
	// PassEnv names job variables passed through by value at run time
	// (SLURM_JOB_ID, CUDA_VISIBLE_DEVICES). --cleanenv drops everything else.
	PassEnv []string
	// ScratchEnv sets variables to directories under the job's scratch
	// directory (name → path relative to it): HOME and the caches. In a
	// container they are under /tmp, which --workdir puts in the scratch
	// directory (WorkdirVar/tmp on the host); without one, under WorkdirVar
	// itself. Requires WorkdirVar.
	ScratchEnv map[string]string
	// Pwd is the container's working directory (--pwd): with --containall
	// the host's working directory does not exist in the container, and
	// Apptainer warns in every log when it cannot change to it. Unused
	// without a container (the payload inherits the script's).
	Pwd  string
	Argv []string
}

// ScratchTmp is where, under the scratch directory given to --workdir,
// Apptainer makes the container's /tmp.
const ScratchTmp = "tmp"

// Isolated says whether the spec runs in a container.
func (s Spec) Isolated() bool { return s.Kind != configs.RuntimeNone }

// WithArgv returns a copy of s that runs argv instead: the same flags,
// binds and environment, another command (the isolation guard).
func (s Spec) WithArgv(argv ...string) Spec {
	s.Argv = append([]string(nil), argv...)
	return s
}

// Line renders the spec as one shell command line for a bash batch script.
// Fixed values are single-quoted; pass-through variables are expanded by the
// batch shell when the line runs.
//
// In a container the line always has --containall --cleanenv --no-home
// --writable-tmpfs and --no-mount hostfs,bind-paths (neither the `bind
// path` entries of the site's apptainer.conf nor, with `mount hostfs`, the
// host's file systems are mounted: only Binds are), --home for a scratch
// HOME, plus --net --network none with NoNetwork and --nv with GPU.
func (s Spec) Line() (string, error) {
	if len(s.Argv) == 0 || s.Argv[0] == "" {
		return "", fmt.Errorf("stage command is empty")
	}
	for _, b := range s.Binds {
		paths := []string{b.Container}
		if b.HostVar != "" {
			if !shell.IsName(b.HostVar) || strings.ContainsAny(b.Container, "\"$`\\") {
				return "", fmt.Errorf("bind of variable %q to %q: want a valid name and a plain path", b.HostVar, b.Container)
			}
		} else {
			paths = append(paths, b.Host)
		}
		for _, p := range paths {
			if !path.IsAbs(p) || path.Clean(p) != p || strings.ContainsAny(p, ":,\n") {
				return "", fmt.Errorf("bind path %q: want an absolute clean path without ':' or ','", p)
			}
		}
	}
	varKeys := make([]string, 0, len(s.EnvVars))
	for k, v := range s.EnvVars {
		if !shell.IsName(k) || !shell.IsName(v) {
			return "", fmt.Errorf("environment %q from variable %q: not valid names", k, v)
		}
		varKeys = append(varKeys, k)
	}
	sort.Strings(varKeys)
	keys := make([]string, 0, len(s.Env))
	for k := range s.Env {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	scratchKeys := make([]string, 0, len(s.ScratchEnv))
	for k, rel := range s.ScratchEnv {
		if !shell.IsName(k) || rel == "" || path.IsAbs(rel) || path.Clean(rel) != rel || strings.HasPrefix(rel, "..") || strings.ContainsAny(rel, "\"$`\\ \n:,") {
			return "", fmt.Errorf("scratch environment %q=%q: want a valid name and a clean relative path", k, rel)
		}
		if _, dup := s.Env[k]; dup {
			return "", fmt.Errorf("environment %q set twice", k)
		}
		scratchKeys = append(scratchKeys, k)
	}
	sort.Strings(scratchKeys)
	if len(scratchKeys) > 0 && s.WorkdirVar == "" {
		return "", fmt.Errorf("scratch environment without a scratch directory variable")
	}
	if s.Pwd != "" && (!path.IsAbs(s.Pwd) || path.Clean(s.Pwd) != s.Pwd || strings.ContainsAny(s.Pwd, "\"$`\\'\n")) {
		return "", fmt.Errorf("working directory %q: want an absolute clean path", s.Pwd)
	}
	if s.ImageVar != "" && !shell.IsName(s.ImageVar) {
		return "", fmt.Errorf("image variable %q is not a valid name", s.ImageVar)
	}
	if s.WorkdirVar != "" && !shell.IsName(s.WorkdirVar) {
		return "", fmt.Errorf("workdir variable %q is not a valid name", s.WorkdirVar)
	}
	for _, k := range append(append([]string{}, keys...), s.PassEnv...) {
		if !shell.IsName(k) {
			return "", fmt.Errorf("environment name %q is not valid", k)
		}
	}

	var w []string
	if !s.Isolated() {
		// No container: the payload sees the host. Set the same variables
		// with env(1), clearing the job's environment like --cleanenv.
		w = append(w, "env", "-i", "PATH=/usr/local/bin:/usr/bin:/bin")
		if _, ok := s.ScratchEnv["HOME"]; !ok {
			w = append(w, "HOME=/nonexistent")
		}
		for _, k := range keys {
			w = append(w, shell.Quote(k+"="+s.Env[k]))
		}
		for _, k := range scratchKeys {
			w = append(w, fmt.Sprintf(`"%s=$%s/%s"`, k, s.WorkdirVar, s.ScratchEnv[k]))
		}
		for _, k := range varKeys {
			w = append(w, fmt.Sprintf(`"%s=$%s"`, k, s.EnvVars[k]))
		}
		for _, k := range s.PassEnv {
			w = append(w, fmt.Sprintf(`"%s=${%s:-}"`, k, k))
		}
		for _, a := range s.Argv {
			w = append(w, shell.Quote(a))
		}
		return strings.Join(w, " "), nil
	}
	// --no-mount hostfs,bind-paths: neither the site's `bind path` entries
	// nor, with `mount hostfs = yes` in apptainer.conf, the host's file
	// systems are mounted: only Binds are.
	w = append(w, shell.Quote(s.Binary), "exec", "--containall", "--cleanenv", "--no-home", "--writable-tmpfs", "--no-mount", "hostfs,bind-paths")
	if rel, ok := s.ScratchEnv["HOME"]; ok {
		// HOME inside the container: --env HOME= is refused by Apptainer
		// ("Overriding HOME environment variable with APPTAINERENV_HOME is
		// not permitted"); --home with --no-home sets it and mounts nothing.
		w = append(w, "--home", shell.Quote(path.Join("/tmp", rel)))
	}
	if s.WorkdirVar != "" {
		w = append(w, "--workdir", `"$`+s.WorkdirVar+`"`)
	}
	if s.NoNetwork {
		w = append(w, "--net", "--network", "none")
	}
	if s.GPU {
		w = append(w, "--nv")
	}
	if s.Pwd != "" {
		w = append(w, "--pwd", shell.Quote(s.Pwd))
	}
	for _, b := range s.Binds {
		spec := b.Container
		if b.ReadOnly {
			spec += ":ro"
		}
		if b.HostVar != "" {
			w = append(w, "--bind", fmt.Sprintf(`"$%s:%s"`, b.HostVar, spec))
		} else {
			w = append(w, "--bind", shell.Quote(b.Host+":"+spec))
		}
	}
	for _, k := range keys {
		w = append(w, "--env", shell.Quote(k+"="+s.Env[k]))
	}
	for _, k := range scratchKeys {
		if k == "HOME" {
			continue // --home above
		}
		w = append(w, "--env", shell.Quote(k+"="+path.Join("/tmp", s.ScratchEnv[k])))
	}
	for _, k := range varKeys {
		w = append(w, "--env", fmt.Sprintf(`"%s=$%s"`, k, s.EnvVars[k]))
	}
	for _, k := range s.PassEnv {
		w = append(w, "--env", fmt.Sprintf(`"%s=${%s:-}"`, k, k))
	}
	if s.ImageVar != "" {
		w = append(w, `"$`+s.ImageVar+`"`)
	} else {
		w = append(w, shell.Quote(s.Image))
	}
	for _, a := range s.Argv {
		w = append(w, shell.Quote(a))
	}
	return strings.Join(w, " "), nil
}
