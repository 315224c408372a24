package labtest

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// Slurm is one Slurm release of the lab as a test drives it: cluster 1
// (Debian 12's Slurm 22.05) or cluster 3 (24.11 built from source, with
// rl_enable). EachSlurm runs a test body against each, so that every
// Slurm-facing suite sees both; where the two differ in what they print,
// the test asks AtLeast.
type Slurm struct {
	// Name is the release series ("22.05", "24.11"): the subtest's name.
	Name string
	// Version is the full version ("22.05.8"); Major and Minor its series.
	Version      string
	Major, Minor int
	// Lab is the lab as the cluster's login node has it: the lab itself
	// for cluster 1, Lab.Cluster3 for cluster 3 (its SSH port, host key,
	// known_hosts, ClusterName, GRES, partition).
	Lab Lab
	// Cluster is its ClusterName.
	Cluster string
	// CtldLog is its slurmctld's log file.
	CtldLog string
	// RateLimited: its controller rate-limits every user's RPCs but root's
	// and SlurmUser's (SlurmctldParameters=rl_enable): the lab user's
	// commands over its login may be slowed (they back off silently).
	RateLimited bool
	// vars send this machine's Slurm clients to it (nil: cluster 1, the
	// process's own environment).
	vars []string
}

// Vars are the variables ("NAME=value") that send this machine's Slurm
// clients to s (nil for cluster 1: the process's environment already
// does): for remote.WithEnv around remote.NewLocal.
func (s Slurm) Vars() []string { return append([]string(nil), s.vars...) }

// Env is this process's environment with Vars set: for exec.Cmd.Env (nil
// for cluster 1, which exec.Cmd reads as this process's environment).
func (s Slurm) Env() []string { return withVars(s.vars) }

// Command is exec.Command of one of s's clients (sbatch, squeue, sacct,
// scancel, scontrol, sinfo) run here, as this process's user (root in
// make test: never rate limited).
func (s Slurm) Command(name string, args ...string) *exec.Cmd {
	return s.CommandContext(context.Background(), name, args...)
}

// CommandContext is Command with a context.
func (s Slurm) CommandContext(ctx context.Context, name string, args ...string) *exec.Cmd {
	if p := s.clientPath(name); p != "" {
		name = p
	}
	c := exec.CommandContext(ctx, name, args...)
	c.Env = s.Env()
	return c
}

// clientPath is the path of s's client name when s has a PATH of its own
// that holds it ("" otherwise): exec.Command looks a bare name up in this
// process's PATH, not in Cmd.Env's.
func (s Slurm) clientPath(name string) string { return lookPathIn(s.vars, name) }

// lookPathIn is name looked up in the PATH that vars (or an environment)
// set, "" when they set none or it has no such program there (the
// process's PATH then applies). A name with a slash is itself.
func lookPathIn(vars []string, name string) string {
	if strings.Contains(name, "/") {
		return name
	}
	for _, v := range vars {
		path, ok := strings.CutPrefix(v, "PATH=")
		if !ok {
			continue
		}
		for _, dir := range filepath.SplitList(path) {
			if p := filepath.Join(dir, name); dir != "" && isExecutable(p) {
				return p
			}
		}
	}
	return ""
}

func isExecutable(p string) bool {
	fi, err := os.Stat(p)
	return err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0
}

// AtLeast says whether s is Slurm major.minor or later.
func (s Slurm) AtLeast(major, minor int) bool {
	return s.Major > major || s.Major == major && s.Minor >= minor
}

// JobDir is a directory for t's job files on s (--output, scripts): the
// same path here and in s's jobs (not under /tmp, which cluster 3's node
// has of its own, as cluster 2's), writable by every user, removed with
// its contents when t ends (which makes the jobs still queued with their
// output there leftovers that LockLab cancels).
func (s Slurm) JobDir(t testing.TB) string {
	t.Helper()
	dir, err := os.MkdirTemp("/var/tmp", "nemorl-labjob-")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, 0o777); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	return dir
}

// EachSlurm runs f as a parallel subtest (it calls t.Parallel first) per
// Slurm of the lab, named by its series: "22.05" (cluster 1) and "24.11"
// (cluster 3). t must be a lab test (EachSlurm calls Env). The 24.11
// subtest holds cluster 3 shared (see LockCluster3), and skips (fails under
// NEMORL_REQUIRE_LAB=1) when cluster 3 is not set up or not running; the
// 22.05 one runs regardless.
func EachSlurm(t *testing.T, f func(t *testing.T, s Slurm)) {
	t.Helper()
	lab := Env(t)
	one := lab.Slurm1(t)
	t.Run(one.Name, func(t *testing.T) {
		t.Parallel()
		f(t, one)
	})
	name := Cluster3Series
	if lab.HasCluster3() {
		name = lab.Lab3.Version
		if major, minor, ok := seriesOf(name); ok {
			name = fmt.Sprintf("%d.%02d", major, minor)
		}
	}
	t.Run(name, func(t *testing.T) {
		t.Parallel()
		f(t, lab.Slurm3(t))
	})
}

// Cluster3Series is the Slurm release lab/cluster3 builds.
const Cluster3Series = "24.11"

// Slurm1 is cluster 1's Slurm: the lab itself, Debian's clients on this
// process's PATH. Its version is lab.env's NEMORL_LAB_SLURM_VERSION, or
// what sbatch --version says (once per process) in a lab.env from before
// it; t fails when neither says.
func (l Lab) Slurm1(t testing.TB) Slurm {
	t.Helper()
	v := l.Vars["NEMORL_LAB_SLURM_VERSION"]
	if v == "" {
		v1.once.Do(func() { v1.version, v1.err = clientVersion() })
		if v1.err != nil {
			t.Fatalf("cluster 1's Slurm version: %v", v1.err)
		}
		v = v1.version
	}
	major, minor, ok := seriesOf(v)
	if !ok {
		t.Fatalf("cluster 1's Slurm version %q is not one", v)
	}
	return Slurm{Name: fmt.Sprintf("%d.%02d", major, minor), Version: v, Major: major, Minor: minor,
		Lab: l, Cluster: l.Cluster, CtldLog: filepath.Join(l.Vars["NEMORL_LAB_LOGDIR"], "slurmctld.log")}
}

// v1 is cluster 1's version as its sbatch says it, asked once.
var v1 struct {
	once    sync.Once
	version string
	err     error
}

// clientVersion runs sbatch --version and returns its version ("22.05.8").
func clientVersion() (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, "sbatch", "--version").CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("sbatch --version: %v: %s", err, out)
	}
	// "slurm 24.11.5"; Debian's: "slurm-wlm 22.05.8"
	f := strings.Fields(string(out))
	if len(f) != 2 || !strings.HasPrefix(f[0], "slurm") {
		return "", fmt.Errorf("sbatch --version: %q", out)
	}
	return f[1], nil
}

// Slurm3 is cluster 3's Slurm (Cluster3: t holds it shared; skipped, or
// failed under NEMORL_REQUIRE_LAB=1, when it is not set up or not
// running).
func (l Lab) Slurm3(t testing.TB) Slurm {
	t.Helper()
	login := l.Cluster3(t)
	c := l.Lab3
	major, minor, _ := seriesOf(c.Version) // checked by LoadLab3
	return Slurm{Name: fmt.Sprintf("%d.%02d", major, minor), Version: c.Version, Major: major, Minor: minor,
		Lab: login, Cluster: c.Cluster, CtldLog: filepath.Join(c.LogDir, "slurmctld-lab3.log"),
		RateLimited: true, vars: l.Cluster3Vars()}
}

// seriesOf reads "MAJOR.MINOR[.PATCH...]" ("22.05.8", "24.11").
func seriesOf(v string) (major, minor int, ok bool) {
	f := strings.SplitN(v, ".", 3)
	if len(f) < 2 {
		return 0, 0, false
	}
	major, err1 := strconv.Atoi(f[0])
	minor, err2 := strconv.Atoi(f[1])
	return major, minor, err1 == nil && err2 == nil && major > 0 && minor >= 0
}
