package templates

// The scripts' KillWait is written into them at render time (Input.KillWait,
// from slurm.Client.Config): a job asks slurmctld nothing the tool can tell
// it, as under rl_enable every RPC of the user's counts against one bucket.
// Their one Slurm command is the scratch sweep's squeue --me.

import (
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nemorl/nemorl-slurm/stages"
)

func TestTermWaitSeconds(t *testing.T) {
	for _, c := range []struct {
		killWait time.Duration
		want     int
	}{
		{0, 20}, {-time.Second, 20}, // unknown: Slurm's default 30 s
		{500 * time.Millisecond, 1}, {time.Second, 1}, {2 * time.Second, 1}, {3 * time.Second, 2},
		{5 * time.Second, 3}, {29 * time.Second, 19}, {30 * time.Second, 20}, {31 * time.Second, 20},
		{65533 * time.Second, 20},
	} {
		if got := TermWaitSeconds(c.killWait); got != c.want {
			t.Errorf("TermWaitSeconds(%v) = %d, want %d", c.killWait, got, c.want)
		}
	}
}

// TestRenderKillWait: a known KillWait is written into every script with
// its term wait; an unknown one (zero: render --out, which contacts no
// cluster) is Slurm's default 30 s, and the script says it was assumed.
func TestRenderKillWait(t *testing.T) {
	for _, c := range []struct {
		killWait time.Duration
		lines    []string
	}{
		{0, []string{"# KillWait was unknown when this script was rendered (nemorl-slurm render", "# contacts no cluster): Slurm's default, 30 s, is assumed.", "nemorl_term_wait=20 # s: two thirds of 30 s, within 1..20"}},
		{5 * time.Second, []string{"# KillWait is 5 s (scontrol show config, asked by nemorl-slurm before", "nemorl_term_wait=3 # s: two thirds of 5 s, within 1..20"}},
		{120 * time.Second, []string{"# KillWait is 120 s (scontrol show config, asked by nemorl-slurm before", "nemorl_term_wait=20 # s: two thirds of 120 s, within 1..20"}},
		{time.Second, []string{"# KillWait is 1 s (scontrol show config, asked by nemorl-slurm before", "nemorl_term_wait=1 # s: two thirds of 1 s, within 1..20"}},
	} {
		for _, name := range []string{"lab.yaml", "lab-none.yaml", "cluster-example.yaml"} {
			tr := renderKillWait(t, loadExample(t, name), c.killWait)
			for _, stage := range stages.All {
				f, _ := tr.Lookup(stages.Script(stage))
				lines := strings.Split(string(f.Data), "\n")
				for _, want := range c.lines {
					if !slices.Contains(lines, want) {
						t.Errorf("%s %s, KillWait %v: no line %q", name, stage, c.killWait, want)
					}
				}
				if n := strings.Count(string(f.Data), "\nnemorl_term_wait="); n != 1 {
					t.Errorf("%s %s: nemorl_term_wait set %d times", name, stage, n)
				}
			}
		}
	}
}

// slurmClients are Slurm's command-line clients (22.05 to 26.05), none of
// which a rendered script may run but squeue.
var slurmClients = []string{"sacct", "sacctmgr", "salloc", "sattach", "sbatch", "sbcast", "scancel", "scontrol", "scrontab", "sdiag", "sh5util", "sinfo", "sjobexitmod", "sjstat", "smap", "sprio", "squeue", "sreport", "srun", "sshare", "sstat", "strigger", "sview", "slurmrestd"}

// sweepLines are the only lines of a script that name a Slurm client
// outside comments: nemorl_sweep_scratch's squeue --me and its message.
var sweepLines = []string{
	`  if ! live=$(timeout 60 squeue --me -h -o %A 2>/dev/null); then`,
	`    echo "nemorl: squeue failed: stale scratch directories are left alone" >&2`,
}

// TestScriptsNameNoSlurmClientButSqueue: outside comments, no rendered
// script of any example config, KillWait known or not, names a Slurm
// client but in the scratch sweep's two lines (squeue --me).
func TestScriptsNameNoSlurmClientButSqueue(t *testing.T) {
	word := regexp.MustCompile(`\b(` + strings.Join(slurmClients, "|") + `)\b`)
	for _, killWait := range []time.Duration{0, labKillWait} {
		for _, name := range []string{"lab.yaml", "lab-none.yaml", "cluster-example.yaml"} {
			tr := renderKillWait(t, loadExample(t, name), killWait)
			for _, stage := range stages.All {
				f, _ := tr.Lookup(stages.Script(stage))
				var sweep []string
				for i, l := range strings.Split(string(f.Data), "\n") {
					if strings.HasPrefix(strings.TrimSpace(l), "#") || !word.MatchString(l) {
						continue
					}
					if !slices.Contains(sweepLines, l) {
						t.Errorf("%s %s line %d names a Slurm client (%s): %s", name, stage, i+1, word.FindString(l), l)
					}
					sweep = append(sweep, l)
				}
				if !slices.Equal(sweep, sweepLines) {
					t.Errorf("%s %s: the sweep's lines %q, want %q", name, stage, sweep, sweepLines)
				}
			}
		}
	}
}

// TestScriptsRunOnlySqueue: each stage's script (runtime none, stand-in
// payloads), run with every Slurm client a stand-in that logs its call,
// runs one Slurm command: squeue --me -h -o %A (the scratch sweep). In
// particular none runs scontrol, KillWait known or not.
func TestScriptsRunOnlySqueue(t *testing.T) {
	t.Parallel()
	for _, killWait := range []time.Duration{0, labKillWait} {
		t.Run(killWait.String(), func(t *testing.T) {
			t.Parallel()
			testScriptsRunOnlySqueue(t, killWait)
		})
	}
}

func testScriptsRunOnlySqueue(t *testing.T, killWait time.Duration) {
	{
		tr := stageRunKillWait(t, map[stages.Stage]string{
			stages.Author: `echo author-ran`,
			stages.Train:  `echo train-ran`,
			stages.Eval:   `echo eval-ran`,
		}, killWait)
		bin := filepath.Join(tr.Dir, "slurm-bin")
		mkdirAll(t, bin)
		log := filepath.Join(tr.Dir, "slurm-calls.log")
		for _, c := range slurmClients {
			// squeue answers (no live jobs); every other client fails.
			stub := "#!/bin/sh\nprintf '%s\\n' \"" + c + " $*\" >> " + log + "\n"
			if c != "squeue" {
				stub += "exit 1\n"
			}
			if err := os.WriteFile(filepath.Join(bin, c), []byte(stub), 0o755); err != nil {
				t.Fatal(err)
			}
		}
		if err := os.WriteFile(filepath.Join(tr.Dir, "author/secrets.env"), []byte("K=x\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(tr.Dir, "author/change.diff"), []byte("d"), 0o600); err != nil {
			t.Fatal(err)
		}
		writeWeights(t, tr)
		for _, stage := range stages.All {
			if err := os.Remove(log); err != nil && !os.IsNotExist(err) {
				t.Fatal(err)
			}
			out, code := runScript(t, tr, stage, "PATH="+bin+":/usr/bin:/bin")
			if code != 0 || !strings.Contains(out, string(stage)+"-ran") {
				t.Fatalf("KillWait %v, %s: exit %d\n%s", killWait, stage, code, out)
			}
			calls, err := os.ReadFile(log)
			if err != nil {
				t.Fatalf("KillWait %v, %s: no Slurm command logged: %v", killWait, stage, err)
			}
			if got := string(calls); got != "squeue --me -h -o %A\n" {
				t.Errorf("KillWait %v, %s ran these Slurm commands:\n%s", killWait, stage, got)
			}
		}
	}
}
