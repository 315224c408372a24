package configs

import (
	"fmt"
	"net/url"
	"os"
	"path"
	"reflect"
	"regexp"
	"strings"
	"time"
)

// Defaults of the reference episode.
const (
	DefaultResearchSeconds = 3600
	DefaultTrainSeconds    = 3600
	DefaultMaxTurns        = 200
	DefaultEvalConcurrency = 30
	// DefaultRetries and MaxRetries bound episodes.retries.
	DefaultRetries          = 2
	MaxRetries              = 10
	DefaultEvalTimeLimit    = 7200
	DefaultEpisodeParallel  = 32
	DefaultPollMin          = 5 * time.Second
	DefaultPollMax          = 60 * time.Second
	MinBudgetSeconds        = 60
	MaxBudgetSeconds        = 3600
	MaxTurnsLimit           = 200
	DefaultKnownHostsInHome = "~/.ssh/known_hosts"
)

func applyDefaults(c *Config, present func(string) bool) {
	setStr := func(p string, dst *string, v string) {
		if *dst == "" && !present(p) {
			*dst = v
		}
	}
	setInt := func(p string, dst *int, v int) {
		if *dst == 0 && !present(p) {
			*dst = v
		}
	}
	setStr("cluster.gres", &c.Cluster.Gres, DefaultGres)
	setStr("cluster.gpu_devices", &c.Cluster.GPUDevices, DefaultGPUDevices)
	if c.Cluster.Login != nil {
		setStr("cluster.login.known_hosts", &c.Cluster.Login.KnownHosts, DefaultKnownHostsInHome)
	}
	setStr("runtime.kind", &c.Runtime.Kind, RuntimeApptainer)
	if c.Runtime.Binary == "" && !present("runtime.binary") && c.Runtime.Kind != RuntimeNone {
		c.Runtime.Binary = c.Runtime.Kind
	}
	a, t, e := &c.Stages.Author, &c.Stages.Train, &c.Stages.Eval
	setInt("stages.author.research_seconds", &a.ResearchSeconds, DefaultResearchSeconds)
	setInt("stages.author.max_turns", &a.MaxTurns, DefaultMaxTurns)
	setInt("stages.author.cpus", &a.CPUs, 4)
	setStr("stages.author.mem", &a.Mem, "16G")
	setInt("stages.train.train_seconds", &t.TrainSeconds, DefaultTrainSeconds)
	setInt("stages.train.cpus", &t.CPUs, 8)
	setStr("stages.train.mem", &t.Mem, "64G")
	setInt("stages.eval.concurrency", &e.Concurrency, DefaultEvalConcurrency)
	setInt("stages.eval.time_limit_seconds", &e.TimeLimitSeconds, DefaultEvalTimeLimit)
	setInt("stages.eval.cpus", &e.CPUs, 8)
	setStr("stages.eval.mem", &e.Mem, "64G")
	setInt("episodes.concurrency", &c.Episodes.Concurrency, DefaultEpisodeParallel)
	setInt("episodes.retries", &c.Episodes.Retries, DefaultRetries)
	if c.Episodes.PollMin.Duration == 0 && !present("episodes.poll_min") {
		c.Episodes.PollMin.Duration = DefaultPollMin
	}
	if c.Episodes.PollMax.Duration == 0 && !present("episodes.poll_max") {
		c.Episodes.PollMax.Duration = DefaultPollMax
	}
	applyServeDefaults(c, present)
}

var (
	reName      = regexp.MustCompile(`^[A-Za-z0-9._-]+$`)
	reHost      = regexp.MustCompile(`^[A-Za-z0-9._-]+$`)
	reJump      = regexp.MustCompile(`^([A-Za-z0-9._-]+@)?[A-Za-z0-9._-]+(:[0-9]{1,5})?(,([A-Za-z0-9._-]+@)?[A-Za-z0-9._-]+(:[0-9]{1,5})?)*$`)
	reGres      = regexp.MustCompile(`^[a-z][a-z0-9_]*(:[A-Za-z0-9_.-]+)?:[1-9][0-9]*$`)
	reMem       = regexp.MustCompile(`^[1-9][0-9]*[KMGT]?$`)
	reDigest    = regexp.MustCompile(`^sha256:[0-9a-f]{64}$`)
	reSbatchOpt = regexp.MustCompile(`^--([a-z][a-z0-9-]*)=([A-Za-z0-9._:,=@/+%-]+)$`)
	reBinary    = regexp.MustCompile(`^[A-Za-z0-9._/+-]+$`)
	// reDevGlob is a device-file glob under /dev: it is written unquoted
	// into the scripts, so only these characters.
	reDevGlob = regexp.MustCompile(`^/dev/[A-Za-z0-9._/*?\[\]-]+$`)
)

// ReservedSbatch are the options the tool sets itself; extra_sbatch may not
// override them (nor the few that would change what a job is).
var ReservedSbatch = map[string]bool{
	"output": true, "error": true, "input": true, "open-mode": true,
	"dependency": true, "kill-on-invalid-dep": true, "comment": true,
	"job-name": true, "signal": true, "time": true, "gres": true, "gpus": true,
	"partition": true, "account": true, "qos": true, "cpus-per-task": true,
	"mem": true, "mem-per-cpu": true, "mem-per-gpu": true, "chdir": true,
	"wrap": true, "array": true, "parsable": true, "hold": true,
	"export": true, "export-file": true, "test-only": true, "wait": true,
	"uid": true, "gid": true, "ntasks": true, "nodes": true,
}

type checker struct {
	line     func(string) int
	problems []Problem
}

func (c *checker) add(p string, format string, args ...any) {
	c.problems = append(c.problems, Problem{Path: p, Line: c.line(p), Msg: fmt.Sprintf(format, args...)})
}

func validate(cfg *Config, line func(string) int, opt LoadOptions) []Problem {
	c := &checker{line: line}
	c.scriptSafe(reflect.ValueOf(cfg).Elem(), "")

	cl := cfg.Cluster
	c.clusterPath("cluster.workdir", cl.Workdir, true)
	c.name("cluster.partition", cl.Partition)
	c.name("cluster.account", cl.Account)
	c.name("cluster.qos", cl.QOS)
	if !reGres.MatchString(cl.Gres) {
		c.add("cluster.gres", "want name[:type]:count such as gpu:h100:1, got %q", cl.Gres)
	}
	if !reDevGlob.MatchString(cl.GPUDevices) || strings.Contains(cl.GPUDevices, "..") {
		c.add("cluster.gpu_devices", "want a glob of device files under /dev of [A-Za-z0-9._/*?[]-] such as /dev/nvidia[0-9]*, got %q", cl.GPUDevices)
	}
	if cl.SubmitRate < 0 || cl.SubmitRate > 1000 {
		c.add("cluster.submit_rate", "want sbatch per second from 0 (no cap) to 1000, got %v", cl.SubmitRate)
	}
	for i, o := range cl.ExtraSbatch {
		p := fmt.Sprintf("cluster.extra_sbatch[%d]", i)
		m := reSbatchOpt.FindStringSubmatch(o)
		switch {
		case m == nil:
			c.add(p, "want --name=value with a value of letters, digits and ._:,=@/+%%-, got %q", o)
		case ReservedSbatch[m[1]]:
			c.add(p, "--%s is set by nemorl-slurm itself and cannot be overridden", m[1])
		}
	}
	if lg := cl.Login; lg != nil {
		if lg.Host == "" {
			c.add("cluster.login.host", "required when cluster.login is set (omit cluster.login to run on the login node)")
		} else if !reHost.MatchString(lg.Host) {
			c.add("cluster.login.host", "want a host name or ~/.ssh/config alias, got %q", lg.Host)
		}
		if lg.User != "" && !reName.MatchString(lg.User) {
			c.add("cluster.login.user", "want a user name of [A-Za-z0-9._-], got %q", lg.User)
		}
		if lg.Port < 0 || lg.Port > 65535 {
			c.add("cluster.login.port", "want 1..65535 (or omit for ~/.ssh/config or 22), got %d", lg.Port)
		}
		if lg.ProxyJump != "" && !reJump.MatchString(lg.ProxyJump) {
			c.add("cluster.login.proxy_jump", "want [user@]host[:port][,…], got %q", lg.ProxyJump)
		}
		c.localPath("cluster.login.identity_file", lg.IdentityFile)
		c.localPath("cluster.login.known_hosts", lg.KnownHosts)
	}

	rt := &cfg.Runtime
	switch rt.Kind {
	case RuntimeApptainer, RuntimeSingularity:
		if !reBinary.MatchString(rt.Binary) {
			c.add("runtime.binary", "want a command name or absolute path, got %q", rt.Binary)
		}
		c.clusterPath("runtime.images.author", rt.Images.Author, true)
		c.clusterPath("runtime.images.train", rt.Images.Train, true)
		c.clusterPath("runtime.images.eval", rt.Images.Eval, true)
		if rt.Digests.Eval == "" && !opt.EvalDigestOptional {
			c.add("runtime.digests.eval", "required with runtime.kind %s: the eval job refuses any image but the pinned one (sha256sum the eval image, or run nemorl-slurm images lock)", rt.Kind)
		}
	case RuntimeNone:
	default:
		c.add("runtime.kind", "want apptainer, singularity or none, got %q", rt.Kind)
	}
	for k, d := range map[string]string{"author": rt.Digests.Author, "train": rt.Digests.Train, "eval": rt.Digests.Eval} {
		if d != "" && !reDigest.MatchString(d) {
			c.add("runtime.digests."+k, "want sha256:<64 lower-case hex digits>, got %q", d)
		}
	}

	c.policyModel(cfg, opt.PolicyFromGymHead && cfg.Serve.GymHead != "", opt.SecretsOptional)

	st := cfg.Stages
	c.rangeInt("stages.author.research_seconds", st.Author.ResearchSeconds, MinBudgetSeconds, MaxBudgetSeconds)
	c.rangeInt("stages.author.max_turns", st.Author.MaxTurns, 1, MaxTurnsLimit)
	c.rangeInt("stages.train.train_seconds", st.Train.TrainSeconds, MinBudgetSeconds, MaxBudgetSeconds)
	c.rangeInt("stages.eval.concurrency", st.Eval.Concurrency, 1, 256)
	c.rangeInt("stages.eval.time_limit_seconds", st.Eval.TimeLimitSeconds, 600, 86400)
	for _, s := range []struct {
		name string
		r    Resources
	}{{"author", st.Author.Resources}, {"train", st.Train.Resources}, {"eval", st.Eval.Resources}} {
		p := "stages." + s.name
		c.rangeInt(p+".cpus", s.r.CPUs, 1, 1024)
		if !reMem.MatchString(s.r.Mem) {
			c.add(p+".mem", "want a size such as 16G, 64000M, got %q", s.r.Mem)
		}
		if len(s.r.Command) > 0 && s.r.Command[0] == "" {
			c.add(p+".command[0]", "empty program name")
		}
	}

	ep := cfg.Episodes
	c.rangeInt("episodes.concurrency", ep.Concurrency, 1, 4096)
	c.rangeInt("episodes.retries", ep.Retries, 0, MaxRetries)
	if ep.PollMin.Duration < time.Second {
		c.add("episodes.poll_min", "want at least 1s, got %s", ep.PollMin.Duration)
	}
	if ep.PollMax.Duration < ep.PollMin.Duration || ep.PollMax.Duration > time.Hour {
		c.add("episodes.poll_max", "want between poll_min (%s) and 1h, got %s", ep.PollMin.Duration, ep.PollMax.Duration)
	}
	c.serve(cfg.Serve)
	return c.problems
}

func (c *checker) rangeInt(p string, v, lo, hi int) {
	if v < lo || v > hi {
		c.add(p, "want %d..%d, got %d", lo, hi, v)
	}
}

func (c *checker) name(p, v string) {
	if v != "" && !reName.MatchString(v) {
		c.add(p, "want only letters, digits and ._- , got %q", v)
	}
}

// clusterPath checks an absolute, clean path on the cluster.
func (c *checker) clusterPath(p, v string, required bool) {
	switch {
	case v == "":
		if required {
			c.add(p, "required")
		}
	case !path.IsAbs(v):
		c.add(p, "want an absolute path on the cluster, got %q", v)
	case path.Clean(v) != v:
		c.add(p, "want a clean path (%q), got %q", path.Clean(v), v)
	case strings.ContainsAny(v, " \t*?[]{}~;&|<>\\!#:,"):
		c.add(p, "path has a character that is unsafe in a batch script: %q", v)
	}
}

// localPath checks a path on this machine (after ~/ expansion) is absolute.
func (c *checker) localPath(p, v string) {
	if v != "" && !path.IsAbs(v) {
		c.add(p, "want an absolute path or ~/…, got %q", v)
	}
}

// expandHome turns a leading ~/ into the user's home directory; it is done
// with the defaults, before validation, so validation only checks.
func expandHome(v string) (string, error) {
	if !strings.HasPrefix(v, "~/") {
		return v, nil
	}
	home, err := os.UserHomeDir()
	if err != nil {
		return v, fmt.Errorf("cannot expand ~: %w", err)
	}
	return path.Join(home, v[2:]), nil
}

// scriptSafe rejects, in every string that can reach a script, the
// characters that would let it escape its quoting: newline, carriage
// return, NUL, quotes, backticks and $( .
func (c *checker) scriptSafe(v reflect.Value, p string) {
	switch v.Kind() {
	case reflect.Pointer:
		if !v.IsNil() {
			c.scriptSafe(v.Elem(), p)
		}
	case reflect.Struct:
		if v.Type() == durationType {
			return
		}
		for k, f := range fieldsOf(v.Type()) {
			c.scriptSafe(v.FieldByIndex(f.Index), join(p, k))
		}
	case reflect.Slice:
		for i := 0; i < v.Len(); i++ {
			c.scriptSafe(v.Index(i), fmt.Sprintf("%s[%d]", p, i))
		}
	case reflect.String:
		if v.Type() == secretType {
			return // checked on its own, never printed
		}
		if bad := unsafeInScript(v.String()); bad != "" {
			c.add(p, "contains %s, which is not allowed in a value that reaches a batch script", bad)
		}
	}
}

func unsafeInScript(s string) string {
	switch {
	case strings.ContainsRune(s, '\n'), strings.ContainsRune(s, '\r'):
		return "a newline"
	case strings.ContainsRune(s, 0):
		return "a NUL byte"
	case strings.ContainsRune(s, '\''), strings.ContainsRune(s, '"'):
		return "a quote"
	case strings.ContainsRune(s, '`'):
		return "a backtick"
	case strings.Contains(s, "$("):
		return "$("
	}
	return ""
}

// policyModel checks policy_model. fromHead: serve fills base_url, api_key
// and model from serve.gym_head, so they may be missing here.
//
// keyOptional (LoadOptions.SecretsOptional): the commands that never stage
// an episode do not need the key, set or not.
func (c *checker) policyModel(cfg *Config, fromHead, keyOptional bool) {
	pm := cfg.PolicyModel
	var missing []string
	if len(pm.BaseURL) == 0 && !fromHead {
		missing = append(missing, "base_url")
	}
	if pm.APIKey == "" && cfg.SecretUnset == "" && !fromHead && !keyOptional {
		missing = append(missing, "api_key")
	}
	if pm.Model == "" && !fromHead {
		missing = append(missing, "model")
	}
	if pm.UsesReasoningParser == nil && !fromHead {
		missing = append(missing, "uses_reasoning_parser")
	}
	if len(missing) > 0 {
		hint := ""
		if cfg.Serve.GymHead != "" {
			hint = "; serve.gym_head fills base_url, api_key and model for serve only"
		}
		c.add("policy_model", "missing %s (the author job needs base_url, api_key, model and uses_reasoning_parser%s)", strings.Join(missing, ", "), hint)
	}
	seen := map[string]bool{}
	for i, raw := range pm.BaseURL {
		key := "policy_model.base_url"
		if len(pm.BaseURL) > 1 {
			key = fmt.Sprintf("policy_model.base_url[%d]", i)
		}
		u, err := url.Parse(raw)
		switch {
		case err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "":
			c.add(key, "want an http:// or https:// URL, got %q", raw)
		case u.User != nil:
			c.add(key, "must not carry credentials; put the key in policy_model.api_key")
		case seen[raw]:
			c.add(key, "%q is listed twice", raw)
		}
		seen[raw] = true
	}
	for _, r := range pm.APIKey {
		if r <= ' ' || r == 0x7f {
			c.add("policy_model.api_key", "contains whitespace or a control character")
			break
		}
	}
}

// CheckPolicyModel checks cfg.PolicyModel once serve has filled it from
// the Gym head server: every key present and well-formed. source names
// where the values came from, for the message.
func CheckPolicyModel(cfg *Config, source string) error {
	c := &checker{line: func(string) int { return 0 }}
	c.policyModel(cfg, false, false)
	if len(c.problems) == 0 {
		return nil
	}
	return &Error{File: source, Problems: c.problems}
}
