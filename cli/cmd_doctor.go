package cli

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"net/url"
	"os"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	ucli "github.com/urfave/cli/v2"

	"github.com/nemorl/nemorl-slurm/configs"
	"github.com/nemorl/nemorl-slurm/internal/shell"
	"github.com/nemorl/nemorl-slurm/remote"
	"github.com/nemorl/nemorl-slurm/slurm"

	"github.com/nemorl/nemorl-slurm/stages"
)

func doctorCommand(e *env) *ucli.Command {
	return &ucli.Command{
		Name:  "doctor",
		Usage: "check, before the first submit, everything an episode needs: SSH, Slurm, accounting, partition and GRES, workdir, images, the policy endpoint",
		Description: `Each check says what is wrong and how to fix it. Exit 0 when every check
passes (or is skipped), 2 when one fails.

Examples:
   nemorl-slurm doctor --config my.yaml
   nemorl-slurm doctor --json | jq '.checks[] | select(.status == "fail")'
   nemorl-slurm doctor --skip-endpoint     # no compute-node job`,
		ArgsUsage: " ",
		Flags: withGlobals(
			&ucli.BoolFlag{Name: "skip-endpoint", Usage: "do not run the short CPU job that checks the policy endpoint from a compute node"},
			&ucli.BoolFlag{Name: "skip-guard", Usage: "do not run the short GPU job that runs the isolation guard with the author and train exec lines on a node of the partition"},
			&ucli.BoolFlag{Name: "skip-digests", Usage: "do not hash the images (several GB each) to check their digests"},
		),
		Action: e.doctor,
	}
}

// check is one doctor check's result.
type check struct {
	Name   string `json:"name"`
	Status string `json:"status"` // ok, fail, warn, skip
	Detail string `json:"detail"`
	Fix    string `json:"fix,omitempty"`
}

// MinFreeWorkdirBytes is the free space doctor wants in the workdir: the
// weights of a few episodes (3.1 GB each) and their logs.
const MinFreeWorkdirBytes = 16 << 30

func (e *env) doctor(c *ucli.Context) error {
	if c.NArg() > 0 {
		return usageErr("doctor takes no arguments, got %q", c.Args().First())
	}
	var checks []check
	add := func(name, status, detail, fix string) {
		checks = append(checks, check{Name: name, Status: status, Detail: detail, Fix: fix})
	}
	path := configPath(c)
	data, err := os.ReadFile(path)
	if err != nil {
		return withCode(ExitUsage, fmt.Errorf("config %s: %w", path, err), "set --config or NEMORL_SLURM_CONFIG (nemorl-slurm init writes a starter config)")
	}
	cfg, err := configs.LoadWith(path, data, os.LookupEnv, configs.LoadOptions{SecretsOptional: true, PolicyFromGymHead: true})
	if err != nil {
		add("config", "fail", err.Error(), "fix the keys named (nemorl-slurm config check)")
		return e.doctorReport(c, checks)
	}
	add("config", "ok", cfg.Source+" loads", "")
	for _, w := range configs.Warnings(cfg) {
		add("config", "warn", fmt.Sprintf("%s:%d: %s: %s", cfg.Source, w.Line, w.Path, w.Msg), "change it in the config")
	}
	if cfg.SecretUnset != "" {
		add("policy key", "warn", "policy_model.api_key names "+cfg.SecretUnset+", which is not set here", "export it before submit or run")
	}

	ctx, cancel := context.WithTimeout(c.Context, 10*time.Minute)
	defer cancel()
	host, err := dialCluster(ctx, cfg, path, nil)
	l := cfg.Cluster.Login
	switch {
	case err != nil:
		var hk *remote.HostKeyError
		var ae *remote.AuthError
		switch {
		case errors.As(err, &hk) && hk.Unknown:
			add("ssh host key", "fail", err.Error(), "check the key's fingerprint with the cluster's admins, then add it to "+hk.File+" (ssh-keyscan), or set cluster.login.accept_new_host_key: true once")
		case errors.As(err, &hk):
			add("ssh host key", "fail", err.Error(), "the host key changed: ask the cluster's admins before you trust the new one")
		case errors.As(err, &ae):
			add("ssh login", "fail", err.Error(), "set cluster.login.identity_file to a key the cluster accepts, or load it into ssh-agent")
		default:
			add("ssh reachable", "fail", err.Error(), "check cluster.login.host and port (and proxy_jump) from this machine: ssh -p PORT USER@HOST true")
		}
		return e.doctorReport(c, checks)
	case l == nil:
		add("ssh", "skip", "no cluster.login: commands run on this machine", "")
	default:
		add("ssh", "ok", "logged in to "+host.Name()+" (host key checked against "+l.KnownHosts+")", "")
	}
	defer host.Close()
	output := func(res *remote.Result, err error) (string, string, error) {
		if res == nil {
			return "", "", err
		}
		return strings.TrimSpace(string(res.Stdout)), remote.TrimStderr(res.Stderr), err
	}
	run := func(argv ...string) (string, string, error) {
		return output(host.Run(ctx, remote.Command{Argv: argv, Idempotent: true}))
	}
	// A Slurm command runs under its kind's deadline, as slurm.Client's
	// do: one stopped there returns a *slurm.DeadlineError.
	sl := &slurm.Client{Deadlines: doctorDeadlines}
	slurmRun := func(k slurm.Kind, argv ...string) (string, string, error) {
		return output(sl.RunVia(ctx, host, k, remote.Command{Argv: argv, Idempotent: true}))
	}

	checkSlurm(run, slurmRun, add)
	// KillWait and MaxArraySize, read as an episode reads them.
	slc := slurm.New(host)
	slc.Deadlines = doctorDeadlines
	checkSlurmConfig(ctx, slc, add)
	cl := cfg.Cluster
	checkPartition(slurmRun, cl, add)
	checkWorkdir(run, cl, add)
	rt := cfg.Runtime
	checkImages(run, rt, c.Bool("skip-digests"), add)

	// The isolation guard, where the jobs run.
	switch {
	case rt.Kind == configs.RuntimeNone:
		add("isolation", "skip", "runtime.kind none: no containers, no guard (lab only)", "")
	case c.Bool("skip-guard"):
		add("isolation", "skip", "--skip-guard", "")
	default:
		e.doctorGuard(ctx, run, cfg, add)
	}

	// The policy endpoint, from a compute node.
	switch {
	case len(cfg.Stages.Author.Command) > 0:
		add("policy endpoint", "skip", "stages.author.command replaces the author payload; it calls no policy", "")
	case c.Bool("skip-endpoint"):
		add("policy endpoint", "skip", "--skip-endpoint", "")
	case len(cfg.PolicyModel.BaseURL) == 0:
		add("policy endpoint", "skip", "serve.gym_head gives it when serve starts", "")
	default:
		for _, u := range cfg.PolicyModel.BaseURL {
			e.doctorEndpoint(ctx, run, cfg, u, add)
		}
	}
	return e.doctorReport(c, checks)
}

// doctorRun runs a command on the cluster: its trimmed stdout and stderr.
type doctorRun func(argv ...string) (stdout, stderr string, err error)

// doctorSlurmRun runs a Slurm command of kind k on the cluster under k's
// deadline (doctorDeadlines): its trimmed stdout and stderr, and a
// *slurm.DeadlineError for a command stopped there.
type doctorSlurmRun func(k slurm.Kind, argv ...string) (stdout, stderr string, err error)

// doctorAdd records one check.
type doctorAdd func(name, status, detail, fix string)

// doctorDeadlines bound each of doctor's Slurm commands, as a
// slurm.Client's (zero fields: slurm.DefaultDeadlines). A variable for
// the tests.
var doctorDeadlines slurm.Deadlines

// pastDeadlineFix is the fix of a check whose Slurm command gave no
// answer within its deadline.
const pastDeadlineFix = "run doctor again later; if it persists, ask the admins whether slurmctld (or slurmdbd) is overloaded or rate-limits you (SlurmctldParameters=rl_enable): episodes' Slurm commands stop at the same deadlines, their outcomes unknown"

// pastDeadline is the detail of a check whose Slurm command was stopped
// at its deadline (err matches *slurm.DeadlineError), and whether it was.
func pastDeadline(err error) (string, bool) {
	var de *slurm.DeadlineError
	if !errors.As(err, &de) {
		return "", false
	}
	return fmt.Sprintf("no answer within %gs (a throttled or overloaded controller?)", de.Deadline.Seconds()), true
}

// checkSlurm checks Slurm's commands and accounting.
func checkSlurm(run doctorRun, slurmRun doctorSlurmRun, add doctorAdd) {
	out, _, _ := run("sh", "-c", doctorSlurmCommands)
	if out != "" {
		add("slurm commands", "fail", "not on the PATH of a non-interactive login: "+strings.Join(strings.Fields(out), ", "), "load Slurm in ~/.bashrc for non-interactive shells (module load slurm), or run nemorl-slurm on a login node")
	} else {
		add("slurm commands", "ok", "sbatch, sacct, squeue, scancel, sinfo and sacctmgr found", "")
	}
	_, stderr, err := slurmRun(slurm.KindSacct, "sacct", "-n", "-X", "-P", "--starttime=now-1hours", "--format=JobIDRaw")
	if late, ok := pastDeadline(err); ok {
		add("accounting", "fail", "sacct: "+late, pastDeadlineFix)
	} else if err != nil {
		add("accounting", "fail", "sacct fails: "+orText(stderr, err), "episodes are watched with sacct: ask the admins to enable accounting (slurmdbd)")
	} else {
		add("accounting", "ok", "sacct answers", "")
	}
}

// checkPartition checks cluster.partition, its GRES, account and QOS.
func checkPartition(slurmRun doctorSlurmRun, cl configs.Cluster, add doctorAdd) {
	parts, stderr, err := slurmRun(slurm.KindSinfo, "sinfo", "-h", "-p", cl.Partition, "-o", "%P|%G|%a")
	late, isLate := pastDeadline(err)
	switch {
	case isLate:
		add("partition", "fail", "sinfo: "+late, pastDeadlineFix)
	case err != nil:
		add("partition", "fail", "sinfo: "+orText(stderr, err), "check cluster.partition")
	case parts == "":
		all, _, _ := slurmRun(slurm.KindSinfo, "sinfo", "-h", "-o", "%P")
		add("partition", "fail", fmt.Sprintf("cluster.partition %q does not exist (partitions: %s)", cl.Partition, strings.Join(strings.Fields(all), ", ")), "set cluster.partition to one of them, one with H100s")
	default:
		add("partition", "ok", "partition "+cl.Partition+" exists", "")
		want := gresType(cl.Gres)
		var gres []string
		for _, line := range strings.Split(parts, "\n") {
			if f := strings.Split(line, "|"); len(f) >= 2 {
				gres = append(gres, f[1])
			}
		}
		if want != "" && !strings.Contains(strings.Join(gres, ","), want) {
			add("gres", "fail", fmt.Sprintf("cluster.gres %q: partition %s has no %s (its nodes have %s)", cl.Gres, cl.Partition, want, strings.Join(gres, ", ")),
				"set cluster.gres to a type the partition has (sinfo -o %G)")
		} else {
			add("gres", "ok", fmt.Sprintf("partition %s has %s", cl.Partition, want), "")
		}
	}
	if cl.Account != "" || cl.QOS != "" {
		assoc, stderr, err := slurmRun(slurm.KindSacct, "sh", "-c", doctorAssociations) // sacctmgr asks slurmdbd, as sacct does
		if late, ok := pastDeadline(err); ok {
			add("account", "warn", "sacctmgr: "+late, pastDeadlineFix)
		} else if err != nil {
			add("account", "warn", "sacctmgr: "+orText(stderr, err), "check cluster.account and qos with your admins")
		} else {
			if cl.Account != "" && !assocHas(assoc, 0, cl.Account) {
				add("account", "fail", fmt.Sprintf("cluster.account %q is not one of your associations (%s)", cl.Account, assocList(assoc, 0)), "set cluster.account to one of them")
			} else if cl.Account != "" {
				add("account", "ok", "account "+cl.Account+" is yours", "")
			}
			if cl.QOS != "" && !assocHas(assoc, 1, cl.QOS) {
				add("qos", "fail", fmt.Sprintf("cluster.qos %q is not allowed for you (%s)", cl.QOS, assocList(assoc, 1)), "set cluster.qos to one of them")
			} else if cl.QOS != "" {
				add("qos", "ok", "qos "+cl.QOS+" is allowed", "")
			}
		}
	}
}

// checkWorkdir checks that cluster.workdir is writable, and its room.
func checkWorkdir(run doctorRun, cl configs.Cluster, add doctorAdd) {
	free, stderr, err := run("sh", "-c", doctorWorkdir, "sh", cl.Workdir)
	kb, perr := strconv.ParseInt(free, 10, 64)
	switch {
	case err != nil:
		add("workdir", "fail", fmt.Sprintf("%s: not writable: %s", cl.Workdir, orText(stderr, err)), "set cluster.workdir to a directory you can write on a shared file system")
	case perr != nil:
		add("workdir", "warn", fmt.Sprintf("%s is writable; df printed %q", cl.Workdir, free), "")
	case kb*1024 < MinFreeWorkdirBytes:
		add("workdir", "warn", fmt.Sprintf("%s: %.1f GiB free; an episode's weights alone are 3.1 GB", cl.Workdir, float64(kb)/(1<<20)), "free space, or clean finished episodes (nemorl-slurm clean)")
	default:
		add("workdir", "ok", fmt.Sprintf("%s is writable, %.0f GiB free", cl.Workdir, float64(kb)/(1<<20)), "")
	}
}

// checkImages checks the runtime and the stages' images and their
// pinned digests (skipDigests: readable only).
func checkImages(run doctorRun, rt configs.Runtime, skipDigests bool, add doctorAdd) {
	if rt.Kind == configs.RuntimeNone {
		add("images", "skip", "runtime.kind none: no images (lab only)", "")
	} else {
		if out, stderr, err := run("sh", "-c", doctorCommandPath, "sh", rt.Binary); err != nil || out == "" {
			add("runtime", "fail", fmt.Sprintf("runtime.binary %q is not on the PATH of the login node: %s", rt.Binary, orText(stderr, err)), "load Apptainer (module load apptainer) for non-interactive shells, or set runtime.binary to its path")
		} else {
			add("runtime", "ok", rt.Binary+" is "+out, "")
		}
		for _, stage := range stages.All {
			im := struct{ stage, path, digest string }{string(stage), rt.Images.Of(stage), rt.Digests.Of(stage)}
			key := "runtime.images." + im.stage
			if _, stderr, err := run("test", "-r", im.path); err != nil {
				add("image "+im.stage, "fail", fmt.Sprintf("%s %s: missing or unreadable on the cluster %s", key, im.path, stderr), "build it from apptainer/"+im.stage+".def and copy it there, or fix the path")
				continue
			}
			if im.digest == "" || skipDigests {
				add("image "+im.stage, "ok", im.path+" is readable", "")
				continue
			}
			sum, stderr, err := run("sha256sum", "--", im.path)
			got := "sha256:" + strings.Fields(sum + " -")[0]
			switch {
			case err != nil:
				add("image "+im.stage, "fail", "sha256sum: "+orText(stderr, err), "")
			case got != im.digest:
				add("image "+im.stage, "fail", fmt.Sprintf("%s is %s, runtime.digests.%s pins %s", im.path, got, im.stage, im.digest), "rebuild or copy the pinned image, or pin this one: nemorl-slurm images lock")
			default:
				add("image "+im.stage, "ok", im.path+" matches its pinned digest", "")
			}
		}
	}
}

// The shell of doctor's checks on the login host, each one round trip:
// sh -c SCRIPT [sh ARG].
var (
	// doctorSlurmCommands prints the Slurm commands not on the PATH.
	//
	//go:embed scripts/doctor_slurm_commands.sh
	doctorSlurmCommands string

	// doctorAssociations prints the user's ACCOUNT|QOS associations.
	//
	//go:embed scripts/doctor_associations.sh
	doctorAssociations string

	// doctorWorkdir (sh WORKDIR) makes the workdir, checks that it is
	// writable and prints its free KiB.
	//
	//go:embed scripts/doctor_workdir.sh
	doctorWorkdir string

	// doctorCommandPath (sh NAME) prints where NAME is on the PATH.
	//
	//go:embed scripts/doctor_command_path.sh
	doctorCommandPath string
)

// endpointProbe prints the HTTP status a compute node gets from a URL:
// sh -c endpointProbe sh URL endpointProbePy (curl, or python3 -c
// endpointProbePy URL where there is no curl).
//
//go:embed scripts/endpoint_probe.sh
var endpointProbe string

// endpointProbePy is endpointProbe's Python, for a node without curl.
//
//go:embed scripts/endpoint_probe.py
var endpointProbePy string

// doctorEndpoint runs a one-minute CPU job in the partition that opens
// base/models (no key: any HTTP answer, 401 included, proves the route).
func (e *env) doctorEndpoint(ctx context.Context, run func(...string) (string, string, error), cfg *configs.Config, base string, add func(string, string, string, string)) {
	u, err := url.Parse(base)
	if err != nil {
		add("policy endpoint", "fail", err.Error(), "")
		return
	}
	target := strings.TrimSuffix(u.String(), "/") + "/models"
	argv := []string{"srun", "--partition=" + cfg.Cluster.Partition, "--time=2", "--ntasks=1", "--cpus-per-task=1", "--mem=256M", "--quiet", "--job-name=nemorl-doctor"}
	if cfg.Cluster.Account != "" {
		argv = append(argv, "--account="+cfg.Cluster.Account)
	}
	if cfg.Cluster.QOS != "" {
		argv = append(argv, "--qos="+cfg.Cluster.QOS)
	}
	argv = append(argv, "sh", "-c", endpointProbe, "sh", target, endpointProbePy)
	code, stderr, err := run("timeout", "300", "sh", "-c", shell.Join(argv))
	switch {
	case err != nil && code == "":
		add("policy endpoint", "fail", fmt.Sprintf("the probe job in %s did not run: %s", cfg.Cluster.Partition, orText(stderr, err)), "check that you may run short CPU jobs in "+cfg.Cluster.Partition)
	case code == "000" || code == "":
		add("policy endpoint", "fail", fmt.Sprintf("%s is not reachable from a compute node of %s (%s)", base, cfg.Cluster.Partition, orText(stderr, err)),
			"the author job calls it from a compute node: use an address the compute nodes can reach (not localhost), and check the cluster's egress rules")
	default:
		add("policy endpoint", "ok", fmt.Sprintf("%s answers HTTP %s from a compute node", target, code), "")
	}
}

func (e *env) doctorReport(c *ucli.Context, checks []check) error {
	failed := 0
	for _, ch := range checks {
		if ch.Status == "fail" {
			failed++
		}
	}
	if globalBool(c, "json") {
		if err := e.writeJSON(map[string]any{"ok": failed == 0, "checks": checks}); err != nil {
			return err
		}
	} else {
		tw := tabwriter.NewWriter(e.stdout, 0, 0, 2, ' ', 0)
		for _, ch := range checks {
			mark := map[string]string{"ok": "ok", "fail": "FAIL", "warn": "warn", "skip": "skip"}[ch.Status]
			fmt.Fprintf(tw, "%s\t%s\t%s\n", mark, ch.Name, ch.Detail)
			if ch.Fix != "" && ch.Status != "ok" {
				fmt.Fprintf(tw, "\t\tfix: %s\n", ch.Fix)
			}
		}
		_ = tw.Flush()
	}
	if failed > 0 {
		return &Error{Code: ExitUsage, Err: fmt.Errorf("doctor: %d check(s) failed", failed), Hint: "each failed check above says how to fix it"}
	}
	return nil
}

// gresType is "gpu:h100" of "gpu:h100:1".
func gresType(g string) string {
	f := strings.Split(g, ":")
	if len(f) >= 2 {
		if _, err := strconv.Atoi(f[len(f)-1]); err == nil {
			f = f[:len(f)-1]
		}
	}
	return strings.Join(f, ":")
}

func assocHas(assoc string, field int, want string) bool {
	for _, line := range strings.Split(assoc, "\n") {
		f := strings.Split(line, "|")
		if field < len(f) {
			for _, v := range strings.Split(f[field], ",") {
				if v == want {
					return true
				}
			}
		}
	}
	return false
}

func assocList(assoc string, field int) string {
	seen := map[string]bool{}
	var out []string
	for _, line := range strings.Split(assoc, "\n") {
		f := strings.Split(line, "|")
		if field < len(f) {
			for _, v := range strings.Split(f[field], ",") {
				if v != "" && !seen[v] {
					seen[v] = true
					out = append(out, v)
				}
			}
		}
	}
	if len(out) == 0 {
		return "none"
	}
	return strings.Join(out, ", ")
}

func orText(s string, err error) string {
	if s != "" {
		return s
	}
	if err != nil {
		return err.Error()
	}
	return "no output"
}
