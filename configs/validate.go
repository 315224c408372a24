package configs

import (
	"fmt"
	"net/url"
	"os"
	"path"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/nemorl/nemorl-slurm/stages"
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
	applyClusterDefaults("cluster", &c.Cluster, present)
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

// applyClusterDefaults fills a cluster's defaults (cluster: or a clusters:
// entry, under pre).
func applyClusterDefaults(pre string, cl *Cluster, present func(string) bool) {
	if cl.Gres == "" && !present(pre+".gres") {
		cl.Gres = DefaultGres
	}
	if cl.GPUDevices == "" && !present(pre+".gpu_devices") {
		cl.GPUDevices = DefaultGPUDevices
	}
	if lg := cl.Login; lg != nil && lg.KnownHosts == "" && !present(pre+".login.known_hosts") {
		lg.KnownHosts = DefaultKnownHostsInHome
	}
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

	if len(cfg.Clusters) == 0 {
		c.cluster("cluster", cfg.Cluster)
	} else {
		c.clusters(cfg, opt)
	}

	rt := &cfg.Runtime
	switch rt.Kind {
	case RuntimeApptainer, RuntimeSingularity:
		if !reBinary.MatchString(rt.Binary) {
			c.add("runtime.binary", "want a command name or absolute path, got %q", rt.Binary)
		}
		if len(cfg.Clusters) == 0 {
			c.images("runtime", "runtime", rt.Kind, rt.Images, rt.Digests, opt)
		}
	case RuntimeNone:
	default:
		c.add("runtime.kind", "want apptainer, singularity or none, got %q", rt.Kind)
	}
	c.digests("runtime.digests", rt.Digests)

	c.policyModel(cfg, opt.PolicyFromGymHead && cfg.Serve.GymHead != "", opt.SecretsOptional)

	st := cfg.Stages
	c.rangeInt("stages.author.research_seconds", st.Author.ResearchSeconds, MinBudgetSeconds, MaxBudgetSeconds)
	c.rangeInt("stages.author.max_turns", st.Author.MaxTurns, 1, MaxTurnsLimit)
	c.rangeInt("stages.train.train_seconds", st.Train.TrainSeconds, MinBudgetSeconds, MaxBudgetSeconds)
	c.rangeInt("stages.eval.concurrency", st.Eval.Concurrency, 1, 256)
	c.rangeInt("stages.eval.time_limit_seconds", st.Eval.TimeLimitSeconds, 600, 86400)
	for _, s := range []struct {
		name stages.Stage
		r    Resources
	}{{stages.Author, st.Author.Resources}, {stages.Train, st.Train.Resources}, {stages.Eval, st.Eval.Resources}} {
		p := "stages." + string(s.name)
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
	// clusters: entries that inherit runtime's images report its
	// problems once.
	seen := map[Problem]bool{}
	return slices.DeleteFunc(c.problems, func(p Problem) bool {
		dup := seen[p]
		seen[p] = true
		return dup
	})
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

// cluster checks one cluster's keys, under pre ("cluster" or
// "clusters[i]").
func (c *checker) cluster(pre string, cl Cluster) {
	c.clusterPath(pre+".workdir", cl.Workdir, true)
	c.name(pre+".partition", cl.Partition)
	c.name(pre+".account", cl.Account)
	c.name(pre+".qos", cl.QOS)
	if !reGres.MatchString(cl.Gres) {
		c.add(pre+".gres", "want name[:type]:count such as gpu:h100:1, got %q", cl.Gres)
	}
	if !reDevGlob.MatchString(cl.GPUDevices) || strings.Contains(cl.GPUDevices, "..") {
		c.add(pre+".gpu_devices", "want a glob of device files under /dev of [A-Za-z0-9._/*?[]-] such as /dev/nvidia[0-9]*, got %q", cl.GPUDevices)
	}
	if cl.SubmitRate < 0 || cl.SubmitRate > 1000 {
		c.add(pre+".submit_rate", "want sbatch per second from 0 (no cap) to 1000, got %v", cl.SubmitRate)
	}
	for i, o := range cl.ExtraSbatch {
		p := fmt.Sprintf("%s.extra_sbatch[%d]", pre, i)
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
			c.add(pre+".login.host", "required when %s.login is set (omit %s.login to run on the login node)", pre, pre)
		} else if !reHost.MatchString(lg.Host) {
			c.add(pre+".login.host", "want a host name or ~/.ssh/config alias, got %q", lg.Host)
		}
		if lg.User != "" && !reName.MatchString(lg.User) {
			c.add(pre+".login.user", "want a user name of [A-Za-z0-9._-], got %q", lg.User)
		}
		if lg.Port < 0 || lg.Port > 65535 {
			c.add(pre+".login.port", "want 1..65535 (or omit for ~/.ssh/config or 22), got %d", lg.Port)
		}
		if lg.ProxyJump != "" && !reJump.MatchString(lg.ProxyJump) {
			c.add(pre+".login.proxy_jump", "want [user@]host[:port][,…], got %q", lg.ProxyJump)
		}
		c.localPath(pre+".login.identity_file", lg.IdentityFile)
		c.localPath(pre+".login.known_hosts", lg.KnownHosts)
	}
}

// images checks a runtime's images and the eval digest, under imPre and
// dgPre ("runtime", or "clusters[i]" where the entry sets its own).
func (c *checker) images(imPre, dgPre, kind string, im Images, dg Digests, opt LoadOptions) {
	c.clusterPath(imPre+".images.author", im.Author, true)
	c.clusterPath(imPre+".images.train", im.Train, true)
	c.clusterPath(imPre+".images.eval", im.Eval, true)
	if dg.Eval == "" && !opt.EvalDigestOptional {
		c.add(dgPre+".digests.eval", "required with runtime.kind %s: the eval job refuses any image but the pinned one (sha256sum the eval image, or run nemorl-slurm images lock)", kind)
	}
}

func (c *checker) digests(pre string, dg Digests) {
	for _, s := range stages.All {
		if d := dg.Of(s); d != "" && !reDigest.MatchString(d) {
			c.add(pre+"."+string(s), "want sha256:<64 lower-case hex digits>, got %q", d)
		}
	}
}

// members checks an entry's members: Slurm cluster names, each once.
func (c *checker) members(pre string, members []string) {
	for j, m := range members {
		key := fmt.Sprintf("%s.members[%d]", pre, j)
		switch {
		case m == "" || !reName.MatchString(m):
			c.add(key, "want a Slurm cluster name of [A-Za-z0-9._-] (sacctmgr show clusters), got %q", m)
		case slices.Index(members, m) < j:
			c.add(key, "%q is named twice", m)
		}
	}
}

// clusters checks the clusters: entries: each a cluster of its own, named
// once; cluster: is then not set.
func (c *checker) clusters(cfg *Config, opt LoadOptions) {
	seen := map[string]int{}
	for i, e := range cfg.Clusters {
		pre := fmt.Sprintf("clusters[%d]", i)
		switch {
		case e.Name == "":
			c.add(pre+".name", "required: the cluster's name in the ledger, list, status and /metrics")
		case !reName.MatchString(e.Name):
			c.add(pre+".name", "want a name of [A-Za-z0-9._-], got %q", e.Name)
		default:
			if j, ok := seen[e.Name]; ok {
				c.add(pre+".name", "%q is also the name of clusters[%d]", e.Name, j)
			}
			seen[e.Name] = i
		}
		c.cluster(pre, e.Cluster)
		c.members(pre, e.Members)
		c.rangeInt(pre+".max_in_flight", e.MaxInFlight, 0, 1<<20)
		if k := cfg.Runtime.Kind; k == RuntimeApptainer || k == RuntimeSingularity {
			im, dg, imPre, dgPre := cfg.Runtime.Images, cfg.Runtime.Digests, "runtime", "runtime"
			if e.Images != nil {
				im, imPre = *e.Images, pre
			}
			if e.Digests != nil {
				dg, dgPre = *e.Digests, pre
			}
			c.images(imPre, dgPre, k, im, dg, opt)
		}
		if e.Digests != nil {
			c.digests(pre+".digests", *e.Digests)
		}
	}
	c.gpuTypes(cfg)
}

// GPUType is the GPU type a well-formed gres names, in lower case ("h100"
// of gpu:h100:1 and of gpu:H100:2), or "" for an untyped one (gpu:1).
// Types are compared without regard to case.
func GPUType(gres string) string {
	parts := strings.Split(gres, ":")
	if len(parts) != 3 {
		return ""
	}
	return strings.ToLower(parts[1])
}

// gpuTypes checks that the clusters: entries share one GPU type, the type
// of their gres, unless serve.mix_gpu_types says mixing is meant. An
// untyped gres (gpu:1) cannot show that it shares one: it is refused too.
// Every gres in conflict is named, each with its line and the one it
// conflicts with.
func (c *checker) gpuTypes(cfg *Config) {
	if cfg.Serve.MixGPUTypes || len(cfg.Clusters) < 2 {
		return
	}
	const fix = "one config's clusters share one GPU type, because serve places the rows of one GRPO step on all of them and an hour of training on one GPU is not an hour on another: " +
		"name the same type in every entry's gres, or set serve.mix_gpu_types: true to mix GPU types on purpose (serve then keeps the rows of one task on one type)"
	// where names an entry's gres for a message about another's.
	where := func(i int) string {
		key := fmt.Sprintf("clusters[%d].gres", i)
		if line := cfg.Line(key); line > 0 {
			return fmt.Sprintf("%s %s (line %d)", key, cfg.Clusters[i].Gres, line)
		}
		return fmt.Sprintf("%s %s (the default; clusters[%d] at line %d)", key, cfg.Clusters[i].Gres, i, c.line(key))
	}
	first := -1 // the first typed entry: the others are compared with it
	var differ []int
	for i, e := range cfg.Clusters {
		key := fmt.Sprintf("clusters[%d].gres", i)
		switch t := GPUType(e.Gres); {
		case !reGres.MatchString(e.Gres):
			// Reported by cluster().
		case t == "":
			c.add(key, "%s names no GPU type, so nothing shows that it is the other clusters' GPU: write it as name:TYPE:count with the type the nodes' gres.conf names (%s); %s",
				e.Gres, DefaultGres, fix)
		case first < 0:
			first = i
		case t != GPUType(cfg.Clusters[first].Gres):
			differ = append(differ, i)
			c.add(key, "%s names GPU type %s, but %s names %s: %s", e.Gres, t, where(first), GPUType(cfg.Clusters[first].Gres), fix)
		}
	}
	if len(differ) > 0 {
		others := make([]string, len(differ))
		for j, i := range differ {
			others[j] = where(i)
		}
		key, gres, verb := fmt.Sprintf("clusters[%d].gres", first), cfg.Clusters[first].Gres, "names"
		if cfg.Line(key) == 0 {
			gres += " (the default)"
		}
		if len(differ) > 1 {
			verb = "name"
		}
		c.add(key, "%s names GPU type %s, but %s %s another: %s", gres, GPUType(cfg.Clusters[first].Gres), strings.Join(others, ", "), verb, fix)
	}
}
