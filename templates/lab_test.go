package templates

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nemorl/nemorl-slurm/internal/labtest"
)

// TestLabChain submits the three rendered scripts (runtime.kind none, stand-in
// commands) to the lab's real Slurm as an afterok chain with plain sbatch,
// waits, and reads the final states with sacct. It also checks the one
// thing only a real slurmd shows: the job's output lands where --output says.
func TestLabChain(t *testing.T) {
	lab := labtest.Env(t)
	if os.Geteuid() != 0 {
		t.Skip("submits as root, the user the lab registers for local jobs")
	}
	tr := stageRun(t, map[string]string{
		Author: `rm -f "$NEMORL_SECRETS"; echo diff > "$NEMORL_OUT/change.diff"; echo NEMORL_ENV_AUTHOR_RESULT={}`,
		Train:  `test -f "$NEMORL_PATCH"; test -n "$NEMORL_DEADLINE"; echo w > "$NEMORL_OUT/model.safetensors"; echo "train job=$SLURM_JOB_ID"`,
		Eval:   `test -f "$NEMORL_WEIGHTS"; echo "eval job=$SLURM_JOB_ID"`,
	})
	// Staging writes secrets.env; the author script refuses to run without it.
	if err := os.WriteFile(filepath.Join(tr.Dir, "author/secrets.env"), []byte("NEMORL_POLICY_API_KEY=x\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	var ids []string
	for _, stage := range Stages {
		args := []string{"--parsable", "--partition=" + lab.Partition}
		if len(ids) > 0 {
			args = append(args, "--dependency=afterok:"+ids[len(ids)-1])
		}
		args = append(args, filepath.Join(tr.Dir, Script(stage)))
		out, err := exec.CommandContext(ctx, "sbatch", args...).CombinedOutput()
		if err != nil {
			t.Fatalf("sbatch %s: %v\n%s", stage, err, out)
		}
		id, _, _ := strings.Cut(strings.TrimSpace(string(out)), ";")
		ids = append(ids, id)
	}
	t.Cleanup(func() { _ = exec.Command("scancel", ids...).Run() })

	states := map[string]string{}
	for {
		out, err := exec.CommandContext(ctx, "sacct", "--noheader", "--parsable2", "--jobs="+strings.Join(ids, ","), "--format=JobID,State,ExitCode").Output()
		if err != nil && ctx.Err() != nil {
			t.Fatalf("timed out; last states %v", states)
		}
		for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
			f := strings.Split(line, "|")
			if len(f) == 3 && !strings.Contains(f[0], ".") {
				states[f[0]] = f[1] + " " + f[2]
			}
		}
		done := len(states) == 3
		for _, s := range states {
			if strings.HasPrefix(s, "PENDING") || strings.HasPrefix(s, "RUNNING") || strings.HasPrefix(s, "COMPLETING") {
				done = false
			}
		}
		if done {
			break
		}
		select {
		case <-ctx.Done():
			t.Fatalf("timed out; last states %v", states)
		case <-time.After(500 * time.Millisecond):
		}
	}
	for i, id := range ids {
		if states[id] != "COMPLETED 0:0" {
			out, _ := os.ReadFile(filepath.Join(tr.Dir, Output(Stages[i])))
			t.Errorf("%s job %s: %s\n%s", Stages[i], id, states[id], out)
		}
	}
	out, err := os.ReadFile(filepath.Join(tr.Dir, Output(Eval)))
	if err != nil || !strings.Contains(string(out), "eval job="+ids[2]) {
		t.Errorf("eval output (%v):\n%s", err, out)
	}
	if _, err := os.Stat(filepath.Join(tr.Dir, "author/secrets.env")); !os.IsNotExist(err) {
		t.Errorf("secrets.env survived the author job: %v", err)
	}
}

// TestLabEvalOutputRedirected submits the rendered eval script (runtime.kind
// none) to the lab's Slurm twice: with its stdout sent elsewhere
// (--output=other.log on the command line overrides the script's) while
// out.log exists, it fails with 67 before the payload and no record reaches
// either file; as rendered, the record lands in out.log.
func TestLabEvalOutputRedirected(t *testing.T) {
	lab := labtest.Env(t)
	if os.Geteuid() != 0 {
		t.Skip("submits as root, the user the lab registers for local jobs")
	}
	tr := stageRun(t, map[string]string{Eval: `echo payload-ran >&2; echo 'NEMORL_ENV_RESULT={"reward": 1}'`})
	if err := os.WriteFile(filepath.Join(tr.Dir, "train/checkpoint/model.safetensors"), []byte("w"), 0o600); err != nil {
		t.Fatal(err)
	}
	outLog, other := filepath.Join(tr.Dir, Output(Eval)), filepath.Join(tr.Dir, "eval/other.log")
	if err := os.WriteFile(outLog, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	state := labRun(ctx, t, lab, "--output="+other, filepath.Join(tr.Dir, Script(Eval)))
	got, _ := os.ReadFile(other)
	logData, _ := os.ReadFile(outLog)
	if state != "FAILED 67:0" || !strings.Contains(string(got), "output check (at start)") || strings.Contains(string(got), "payload-ran") {
		t.Errorf("redirected: %s, want FAILED 67:0 before the payload\n%s", state, got)
	}
	if strings.Contains(string(got), "NEMORL_ENV_RESULT") || strings.Contains(string(logData), "NEMORL_ENV_RESULT") {
		t.Errorf("a record escaped:\nother.log:\n%s\nout.log:\n%s", got, logData)
	}

	state = labRun(ctx, t, lab, filepath.Join(tr.Dir, Script(Eval)))
	logData, _ = os.ReadFile(outLog)
	if state != "COMPLETED 0:0" || strings.Count(string(logData), "NEMORL_ENV_RESULT=") != 1 {
		t.Errorf("as rendered: %s\n%s", state, logData)
	}
}

// labRun submits one script with sbatch and returns its final "State
// ExitCode" from sacct.
func labRun(ctx context.Context, t *testing.T, lab labtest.Lab, args ...string) string {
	t.Helper()
	args = append([]string{"--parsable", "--partition=" + lab.Partition}, args...)
	out, err := exec.CommandContext(ctx, "sbatch", args...).CombinedOutput()
	if err != nil {
		t.Fatalf("sbatch: %v\n%s", err, out)
	}
	id, _, _ := strings.Cut(strings.TrimSpace(string(out)), ";")
	t.Cleanup(func() { _ = exec.Command("scancel", id).Run() })
	state := ""
	for {
		out, err := exec.CommandContext(ctx, "sacct", "--noheader", "--parsable2", "--jobs="+id, "--format=JobID,State,ExitCode").Output()
		if err != nil && ctx.Err() != nil {
			t.Fatalf("job %s timed out; last state %q", id, state)
		}
		for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
			if f := strings.Split(line, "|"); len(f) == 3 && f[0] == id {
				state = f[1] + " " + f[2]
			}
		}
		if state != "" && !strings.HasPrefix(state, "PENDING") && !strings.HasPrefix(state, "RUNNING") && !strings.HasPrefix(state, "COMPLETING") {
			return state
		}
		select {
		case <-ctx.Done():
			t.Fatalf("job %s timed out; last state %q", id, state)
		case <-time.After(500 * time.Millisecond):
		}
	}
}
