package cli

// doctor's isolation check: the isolation guard run where the jobs run,
// before the first episode, with the exact author and train exec lines of a
// rendered episode and the real images, in one short job on the partition
// with the stage's GPU. A site learns here, not from its first masked
// episode, what its apptainer.conf, wrappers or --nv add.

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"path"
	"strings"

	"github.com/nemorl/nemorl-slurm/configs"
	"github.com/nemorl/nemorl-slurm/internal/shell"
	"github.com/nemorl/nemorl-slurm/stages"
	"github.com/nemorl/nemorl-slurm/templates"
)

// guardStages are the stages doctor checks: the author (no GPU, the host
// network) and train (--nv, no network); eval's line is train's but for
// its binds.
var guardStages = []stages.Stage{stages.Author, stages.Train}

// doctorGuard renders a throwaway episode, and in one job on the partition
// lays out what the guard lines bind, runs each stage's guard line, and
// removes it all. It reports one check per stage, and one failed check per
// finding, each with a fix for the setting that produces it.
func (e *env) doctorGuard(ctx context.Context, run func(...string) (string, string, error), cfg *configs.Config, add func(string, string, string, string)) {
	var b [4]byte
	_, _ = rand.Read(b[:])
	tree, err := templates.Render(cfg, templates.Input{Episode: "nemorl-doctor-" + hex.EncodeToString(b[:]), Prompt: []byte("doctor")})
	if err != nil {
		add("isolation", "fail", "rendering the stage scripts: "+err.Error(), "fix the config (nemorl-slurm render)")
		return
	}
	guard, ok := tree.Lookup(stages.BundleFile(stages.Train, templates.GuardFile))
	if !ok {
		add("isolation", "fail", "the rendered tree has no isolation guard", "report this: the templates are broken")
		return
	}
	var sb strings.Builder
	sb.WriteString("set -u\numask 077\n")
	fmt.Fprintf(&sb, "d=%s\ntrap 'rm -rf -- \"$d\"' EXIT\n", shell.Quote(tree.Dir))
	sb.WriteString("mkdir -p -- \"$d/author/bundle\" \"$d/train/bundle\" \"$d/train/checkpoint\" || exit 1\n: > \"$d/author/change.diff\"\n")
	fmt.Fprintf(&sb, "echo %s | base64 -d > \"$d/author/bundle/%s\"\ncp \"$d/author/bundle/%s\" \"$d/train/bundle/%s\"\n",
		base64.StdEncoding.EncodeToString(guard.Data), templates.GuardFile, templates.GuardFile, templates.GuardFile)
	for _, st := range guardStages {
		f, ok := tree.Lookup(stages.Script(st))
		if !ok {
			add("isolation "+string(st), "fail", "no rendered "+stages.Script(st), "report this: the templates are broken")
			return
		}
		line := guardLine(string(f.Data), st)
		if line == "" {
			add("isolation "+string(st), "fail", "no guard line in "+stages.Script(st), "report this: the templates are broken")
			return
		}
		fmt.Fprintf(&sb, "%s=$(mktemp -d \"${TMPDIR:-/tmp}/nemorl-doctor.XXXXXX\")\n", templates.ScratchVar)
		if st == stages.Author {
			// The author's directory is node-local, as in its script,
			// with the bundle copied in.
			fmt.Fprintf(&sb, "%s=$%s/author\nmkdir -p -- \"$%s/bundle\"\ncp -- \"$d/author/bundle/%s\" \"$%s/bundle/\"\n",
				templates.AuthorOutVar, templates.ScratchVar, templates.AuthorOutVar, templates.GuardFile, templates.AuthorOutVar)
		}
		if st == stages.Train {
			// Train's output directory is node-local, as in its script.
			fmt.Fprintf(&sb, "%s=$%s/out\nmkdir -- \"$%s\"\n", templates.TrainOutVar, templates.ScratchVar, templates.TrainOutVar)
		}
		fmt.Fprintf(&sb, "%s 2>&1 </dev/null | grep -a -e '^nemorl: ' -e 'FATAL' -e 'ERROR'\necho \"nemorl-doctor %s ${PIPESTATUS[0]}\"\nrm -rf -- \"$%s\"\n", line, st, templates.ScratchVar)
	}
	argv := []string{"srun", "--partition=" + cfg.Cluster.Partition, "--time=5", "--ntasks=1", "--cpus-per-task=1", "--mem=1G",
		"--gres=" + cfg.Cluster.Gres, "--quiet", "--job-name=nemorl-doctor"}
	if cfg.Cluster.Account != "" {
		argv = append(argv, "--account="+cfg.Cluster.Account)
	}
	if cfg.Cluster.QOS != "" {
		argv = append(argv, "--qos="+cfg.Cluster.QOS)
	}
	argv = append(argv, "bash", "-c", sb.String())
	out, stderr, err := run("timeout", "600", "sh", "-c", shell.Join(argv))
	findings := map[stages.Stage][]string{}
	status := map[stages.Stage]string{}
	var errs []string
	for _, l := range strings.Split(out, "\n") {
		if strings.Contains(l, "FATAL") || strings.Contains(l, "ERROR") {
			errs = append(errs, strings.TrimSpace(l))
		}
		if rest, ok := strings.CutPrefix(l, "nemorl-doctor "); ok {
			st, code, _ := strings.Cut(rest, " ")
			status[stages.Stage(st)] = code // looked up by guardStages alone
			continue
		}
		for _, st := range guardStages {
			if f, ok := strings.CutPrefix(l, "nemorl: isolation: "); ok && strings.Contains(f, "in the "+string(st)+" container") {
				findings[st] = append(findings[st], f)
			}
		}
	}
	for _, st := range guardStages {
		name := "isolation " + string(st)
		switch code := status[st]; {
		case code == "":
			add(name, "fail", fmt.Sprintf("the guard job in %s did not report: %s", cfg.Cluster.Partition, orText(stderr, err)),
				"check that you may run a short job with "+cfg.Cluster.Gres+" in "+cfg.Cluster.Partition+", and that runtime.binary runs on its nodes")
		case code == "0":
			add(name, "ok", fmt.Sprintf("the %s guard found no way to Slurm in its container on a node of %s (the exact exec line, the real image)", st, cfg.Cluster.Partition), "")
		case len(findings[st]) == 0:
			add(name, "fail", fmt.Sprintf("the %s guard line exited %s without a finding: %s", st, code, orText(strings.Join(append(errs, stderr), "; "), err)),
				"run the "+string(st)+" exec line by hand on a node (nemorl-slurm render shows it) and read Apptainer's error")
		default:
			for _, f := range findings[st] {
				add(name, "fail", f, guardFix(f))
			}
		}
	}
}

// guardLine is the guard's exec line of a rendered stage script, without
// the script's redirection and status capture.
func guardLine(script string, stage stages.Stage) string {
	for _, l := range strings.Split(script, "\n") {
		if strings.Contains(l, "/"+templates.GuardFile+" ") && strings.Contains(l, " "+string(stage)+" >&2") {
			l, _, _ = strings.Cut(l, " >&2")
			return l
		}
	}
	return ""
}

// guardFix is the fix for one finding, by the setting it names.
func guardFix(finding string) string {
	switch {
	case strings.Contains(finding, "unix socket"):
		return "no socket may be bound into a stage's container: remove the bind of it (apptainer.conf \"bind path\", APPTAINER_BIND in the job's environment, or a wrapper's --bind)"
	case strings.Contains(finding, "which gets no GPU"):
		return "the stage gets no GPU: set \"always use nv = no\" in apptainer.conf (nemorl-slurm passes --nv to train and eval itself)"
	case strings.Contains(finding, "mount hostfs"):
		return "remove the site bind that mounts it (apptainer.conf \"bind path\", APPTAINER_BIND, a wrapper's --bind); nemorl-slurm already passes --no-mount hostfs,bind-paths, so a wrapper or a newer apptainer.conf option adds it"
	case strings.Contains(finding, "Slurm client"), strings.Contains(finding, "is present"):
		return "use images without Slurm's clients or configuration (" + path.Join("apptainer", "defs") + " builds them)"
	case strings.Contains(finding, "environment variable"):
		return "the variable comes from the image's environment or APPTAINERENV_*: remove it"
	case strings.Contains(finding, "network interface"):
		return "train and eval run with --net --network none: check that the site's Apptainer allows it (allow net networks = none), or set stages.<stage>.network"
	}
	return "see the finding; the guard's header (templates/payload/guard.sh) lists what a container may hold"
}
