package rules

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nemorl/nemorl-slurm/configs"
	"github.com/nemorl/nemorl-slurm/internal/labtest"
	"github.com/nemorl/nemorl-slurm/slurm"
	"github.com/nemorl/nemorl-slurm/stages"
	"github.com/nemorl/nemorl-slurm/templates"
)

// labExitSignals are the deaths by signal the table plays besides exits.
var labExitSignals = map[string]int{"HUP": 1, "INT": 2, "KILL": 9, "SEGV": 11, "TERM": 15, "USR1": 10, "RTMIN": 34, "RTMAX": 64}

// labExitStatuses is what a payload ends with in TestLabExitStatusTable:
// every status 0–255 with NEMORL_EXIT_TABLE=full, else those around the
// boundaries that matter (0, 1, 63–80, 127–129, 137, 143, 191–208, 255).
func labExitStatuses() []int {
	if os.Getenv("NEMORL_EXIT_TABLE") == "full" {
		s := make([]int, 256)
		for i := range s {
			s[i] = i
		}
		return s
	}
	s := []int{0, 1, 127, 128, 129, 137, 143, 255}
	for i := 63; i <= 80; i++ {
		s = append(s, i, i+128)
	}
	return s
}

// TestLabExitStatusTable: the author and train scripts, rendered as the
// tool renders them (runtime none, a stand-in payload), run in real Slurm
// jobs on each Slurm of the lab (22.05, which folds exit statuses of 128
// and more in sacct, and 24.11, which does too; 25.11 and later do not),
// with payloads that end with each status and by each signal above. Each
// job's ExitCode as that Slurm's sacct reports it is decided as the
// episode's: always the policy's failure (0: a success), never a masked
// verdict. One array job per stage and Slurm runs every case: task i
// execs case i's script, which is then the job's batch shell.
func TestLabExitStatusTable(t *testing.T) {
	labtest.EachSlurm(t, func(t *testing.T, s labtest.Slurm) {
		type tcase struct {
			how    string
			status int // what the script's wait sees
		}
		var cases []tcase
		for _, n := range labExitStatuses() {
			cases = append(cases, tcase{fmt.Sprintf("exit %d", n), n})
		}
		names := make([]string, 0, len(labExitSignals))
		for name := range labExitSignals {
			names = append(names, name)
		}
		sort.Strings(names)
		for _, name := range names {
			cases = append(cases, tcase{"kill " + name, 128 + labExitSignals[name]})
		}
		dir := s.JobDir(t)
		for _, stage := range []stages.Stage{stages.Author, stages.Train} {
			var scripts []string
			for i, c := range cases {
				work := filepath.Join(dir, fmt.Sprintf("%s-%03d", stage, i))
				scripts = append(scripts, renderExitCase(t, work, stage, c.how))
			}
			wrapper := filepath.Join(dir, string(stage)+"-array.sh")
			var b strings.Builder
			b.WriteString("#!/bin/bash\nscripts=(")
			for _, p := range scripts {
				b.WriteString(" " + p)
			}
			// The train script wants a visible GPU; the exit status is what
			// this test is about, so the job says it has one.
			b.WriteString(" )\nexport CUDA_VISIBLE_DEVICES=0\nexec bash \"${scripts[$SLURM_ARRAY_TASK_ID]}\"\n")
			if err := os.WriteFile(wrapper, []byte(b.String()), 0o755); err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
			defer cancel()
			out, err := s.CommandContext(ctx, "sbatch", "--parsable", "--partition="+s.Lab.Partition, "--job-name=nemorl-exit-table",
				fmt.Sprintf("--array=0-%d", len(cases)-1), "--output="+filepath.Join(dir, string(stage)+"-%a.log"), "--cpus-per-task=1", "--mem=100M",
				"--time=5", wrapper).CombinedOutput()
			if err != nil {
				t.Fatalf("sbatch: %v\n%s", err, out)
			}
			id, _, _ := strings.Cut(strings.TrimSpace(string(out)), ";")
			t.Cleanup(func() { _ = s.Command("scancel", id).Run() })
			rows := waitArray(ctx, t, s, id, len(cases))
			var table []string
			for i, c := range cases {
				row := rows[i]
				exit := stages.ScriptExit(stage, c.status)
				if row.ExitCode.Signal != 0 || !slices.Contains(stages.SacctReadings(exit), row.ExitCode.Code) {
					log, _ := os.ReadFile(filepath.Join(dir, fmt.Sprintf("%s-%d.log", stage, i)))
					t.Errorf("%s payload %q: sacct says %s %s, want an exit of %d read as one of %v\n%s", stage, c.how, row.State.Raw, row.ExitCode.Raw, exit, stages.SacctReadings(exit), log)
					continue
				}
				f := healthy(true)
				j := f.Jobs[stage]
				j.State, j.ExitCode = row.State, row.ExitCode
				f.Jobs[stage] = j
				v := Decide(f).Verdict
				if v == nil {
					t.Errorf("%s payload %q on %s: sacct %s %s: no verdict with every fact gathered", stage, c.how, s.Version, row.State.Raw, row.ExitCode.Raw)
					continue
				}
				outcome := string(v.Kind) + "/" + v.Reason
				if c.status == 0 && v.Kind != Scored || c.status != 0 && (v.Kind != PolicyFailure || v.Stage != stage) {
					t.Errorf("%s payload %q on %s: sacct %s %s → %s, want the policy's failure (or a score for 0)", stage, c.how, s.Version, row.State.Raw, row.ExitCode.Raw, outcome)
				}
				table = append(table, fmt.Sprintf("%s %-10s → %-9s %-6s → %s", stage, c.how, row.State.Raw, row.ExitCode.Raw, outcome))
			}
			t.Logf("Slurm %s, %s: %d payload ends, job %s\n%s", s.Version, stage, len(cases), id, strings.Join(table, "\n"))
		}
	})
}

// renderExitCase renders lab-none.yaml's episode into work, its stage's
// command the exit stand-in ending as how says, with the files the stage's
// script needs staged, and returns the stage's script.
func renderExitCase(t *testing.T, work string, stage stages.Stage, how string) string {
	t.Helper()
	b, err := configs.Example("lab-none.yaml")
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := configs.Load("lab-none.yaml", b, func(k string) (string, bool) { return "test-key", k == "POLICY_API_KEY" })
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(work, 0o755); err != nil {
		t.Fatal(err)
	}
	standin := filepath.Join(work, "standin")
	if err := os.WriteFile(standin, []byte("#!/bin/bash\n"+labtest.ExitStandIn), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(work, "status"), []byte(how), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg.Cluster.Workdir = work
	cfg.Cluster.GPUDevices = "/dev/nul[l]" // a device file every node has, standing for the GPU
	cfg.Stages.Author.Command = []string{standin}
	cfg.Stages.Train.Command = []string{standin}
	tr, err := templates.Render(cfg, templates.Input{Episode: "ep-exit-table", Prompt: []byte("p"), Version: "test"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tr.Write(tr.Dir); err != nil {
		t.Fatal(err)
	}
	staged := map[stages.Stage][2]string{stages.Author: {"author/secrets.env", "NEMORL_POLICY_API_KEY=test-key\n"}, stages.Train: {"author/change.diff", "d\n"}}
	if err := os.WriteFile(filepath.Join(tr.Dir, staged[stage][0]), []byte(staged[stage][1]), 0o600); err != nil {
		t.Fatal(err)
	}
	return filepath.Join(tr.Dir, stages.Script(stage))
}

// waitArray waits until sacct reports every task of array id ended, and
// returns each task's row by its index.
func waitArray(ctx context.Context, t *testing.T, s labtest.Slurm, id string, n int) map[int]slurm.JobInfo {
	t.Helper()
	rows := map[int]slurm.JobInfo{}
	for {
		out, _ := s.CommandContext(ctx, "sacct", "--noheader", "--parsable2", "--allocations", "--jobs="+id, "--format=JobID,State,ExitCode").Output()
		ended := map[int]slurm.JobInfo{}
		for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
			f := strings.Split(line, "|")
			if len(f) != 3 {
				continue
			}
			task, ok := strings.CutPrefix(f[0], id+"_")
			i, err := strconv.Atoi(task)
			if !ok || err != nil {
				continue
			}
			st := slurm.ParseState(f[1], "")
			if st.Class == slurm.Succeeded || st.Class == slurm.Failed {
				ended[i] = slurm.JobInfo{ID: f[0], State: st, ExitCode: slurm.ParseExitCode(f[2])}
			}
		}
		rows = ended
		if len(rows) == n {
			return rows
		}
		select {
		case <-ctx.Done():
			t.Fatalf("array %s: %d of %d tasks ended before the deadline", id, len(rows), n)
		case <-time.After(time.Second):
		}
	}
}
