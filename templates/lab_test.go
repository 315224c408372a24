package templates

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/nemorl/nemorl-slurm/internal/labtest"
	"github.com/nemorl/nemorl-slurm/remote"
	"github.com/nemorl/nemorl-slurm/slurm"
	"github.com/nemorl/nemorl-slurm/stages"
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
	tr := stageRun(t, map[stages.Stage]string{
		stages.Author: `rm -f "$NEMORL_SECRETS"; echo diff > "$NEMORL_OUT/change.diff"; echo NEMORL_ENV_AUTHOR_RESULT={}`,
		stages.Train:  `test -f "$NEMORL_PATCH"; test -n "$NEMORL_DEADLINE"; echo w > "$NEMORL_OUT/model.safetensors"; echo "train job=$SLURM_JOB_ID"`,
		stages.Eval:   `test -f "$NEMORL_WEIGHTS"; echo "eval job=$SLURM_JOB_ID"`,
	})
	// Staging writes secrets.env; the author script refuses to run without it.
	if err := os.WriteFile(filepath.Join(tr.Dir, "author/secrets.env"), []byte("NEMORL_POLICY_API_KEY=x\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	var ids []string
	for _, stage := range stages.All {
		args := []string{"--parsable", "--partition=" + lab.Partition}
		if len(ids) > 0 {
			args = append(args, "--dependency=afterok:"+ids[len(ids)-1])
		}
		args = append(args, filepath.Join(tr.Dir, stages.Script(stage)))
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
			out, _ := os.ReadFile(filepath.Join(tr.Dir, stages.Output(stages.All[i])))
			t.Errorf("%s job %s: %s\n%s", stages.All[i], id, states[id], out)
		}
	}
	out, err := os.ReadFile(filepath.Join(tr.Dir, stages.Output(stages.Eval)))
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
	tr := stageRun(t, map[stages.Stage]string{stages.Eval: `echo payload-ran >&2; echo 'NEMORL_ENV_RESULT={"reward": 1}'`})
	if err := os.WriteFile(filepath.Join(tr.Dir, "train/checkpoint/model.safetensors"), []byte("w"), 0o600); err != nil {
		t.Fatal(err)
	}
	outLog, other := filepath.Join(tr.Dir, stages.Output(stages.Eval)), filepath.Join(tr.Dir, "eval/other.log")
	if err := os.WriteFile(outLog, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	state := labRun(ctx, t, lab, "--output="+other, filepath.Join(tr.Dir, stages.Script(stages.Eval)))
	got, _ := os.ReadFile(other)
	logData, _ := os.ReadFile(outLog)
	if state != "FAILED 67:0" || !strings.Contains(string(got), "output check (at start)") || strings.Contains(string(got), "payload-ran") {
		t.Errorf("redirected: %s, want FAILED 67:0 before the payload\n%s", state, got)
	}
	if strings.Contains(string(got), "NEMORL_ENV_RESULT") || strings.Contains(string(logData), "NEMORL_ENV_RESULT") {
		t.Errorf("a record escaped:\nother.log:\n%s\nout.log:\n%s", got, logData)
	}

	state = labRun(ctx, t, lab, filepath.Join(tr.Dir, stages.Script(stages.Eval)))
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

// labSubmit submits one script with sbatch and returns its job id.
func labSubmit(ctx context.Context, t *testing.T, lab labtest.Lab, args ...string) string {
	t.Helper()
	args = append([]string{"--parsable", "--partition=" + lab.Partition}, args...)
	out, err := exec.CommandContext(ctx, "sbatch", args...).CombinedOutput()
	if err != nil {
		t.Fatalf("sbatch: %v\n%s", err, out)
	}
	id, _, _ := strings.Cut(strings.TrimSpace(string(out)), ";")
	t.Cleanup(func() { _ = exec.Command("scancel", id).Run() })
	return id
}

// labState is a job's "State ExitCode" from sacct ("" before it is known).
func labState(ctx context.Context, id string) string {
	out, _ := exec.CommandContext(ctx, "sacct", "--noheader", "--parsable2", "--jobs="+id, "--format=JobID,State,ExitCode").Output()
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		if f := strings.Split(line, "|"); len(f) == 3 && f[0] == id {
			return f[1] + " " + f[2]
		}
	}
	return ""
}

// TestLabCancelledPayloadIgnoresTerm: the rendered train script (runtime
// none) whose payload ignores TERM is cancelled with scancel. Slurm would
// SIGKILL everything KillWait (the lab: 5 s) after its TERM, and no EXIT
// trap survives that; the script's TERM path kills the payload's process
// group after 2/3 of KillWait and removes its scratch directory first.
// KillWait reaches the script as it does in an episode: read by
// slurm.Client.Config (one scontrol show config) and given to Render.
func TestLabCancelledPayloadIgnoresTerm(t *testing.T) {
	lab := labtest.Env(t)
	if os.Geteuid() != 0 {
		t.Skip("submits as root, the user the lab registers for local jobs")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	sc, err := slurm.New(remote.NewLocal()).Config(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if sc.KillWait != labKillWait {
		t.Fatalf("the lab's KillWait is %v, want %v (lab/up's slurm.conf)", sc.KillWait, labKillWait)
	}
	tr := stageRunKillWait(t, map[stages.Stage]string{stages.Train: `trap '' TERM; echo "home=$HOME"; sleep 600 & wait`}, sc.KillWait)
	if err := os.WriteFile(filepath.Join(tr.Dir, "author/change.diff"), []byte("d"), 0o600); err != nil {
		t.Fatal(err)
	}
	id := labSubmit(ctx, t, lab, filepath.Join(tr.Dir, stages.Script(stages.Train)))
	logPath := filepath.Join(tr.Dir, stages.Output(stages.Train))
	var home string
	for home == "" {
		if ctx.Err() != nil {
			t.Fatalf("the payload never started (%s)", labState(ctx, id))
		}
		b, _ := os.ReadFile(logPath)
		if m := regexp.MustCompile(`home=(\S+)`).FindSubmatch(b); m != nil {
			home = string(m[1])
		}
		time.Sleep(200 * time.Millisecond)
	}
	scratch := filepath.Dir(home)
	if _, err := os.Stat(filepath.Join(scratch, "job")); err != nil {
		t.Fatalf("scratch %s has no job file: %v", scratch, err)
	}
	if out, err := exec.CommandContext(ctx, "scancel", id).CombinedOutput(); err != nil {
		t.Fatalf("scancel: %v %s", err, out)
	}
	// sacct says CANCELLED at once; the job's processes run on until they
	// exit or Slurm's KILL (the job is COMPLETING meanwhile): wait until
	// squeue no longer lists the job at all.
	for {
		out, err := exec.CommandContext(ctx, "squeue", "-h", "-j", id, "-o", "%T").Output()
		if err == nil && strings.TrimSpace(string(out)) == "" {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("job %s did not end: %s", id, out)
		}
		time.Sleep(300 * time.Millisecond)
	}
	state := labState(ctx, id)
	log, _ := os.ReadFile(logPath)
	if _, err := os.Stat(scratch); !os.IsNotExist(err) {
		t.Fatalf("scratch %s survived the cancelled job (%s): %v\nout.log:\n%s", scratch, state, err, log)
	}
	if !strings.Contains(string(log), "killing its process group") || !strings.Contains(string(log), "it has 3 s to exit") {
		t.Errorf("the script did not kill the payload itself after 3 s (2/3 of KillWait 5 s):\n%s", log)
	}
}

// TestLabStaleScratchSwept: a job removes the scratch directories that
// this user's jobs no longer running left behind (a dead job id in their
// job file), and keeps those of live jobs, those without a job file, and
// everything when squeue fails.
func TestLabStaleScratchSwept(t *testing.T) {
	lab := labtest.Env(t)
	if os.Geteuid() != 0 {
		t.Skip("submits as root, the user the lab registers for local jobs")
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	live := labSubmit(ctx, t, lab, "--hold", "--wrap=true") // pending: listed by squeue --me
	tr := stageRun(t, map[stages.Stage]string{stages.Train: `echo ran`})
	if err := os.WriteFile(filepath.Join(tr.Dir, "author/change.diff"), []byte("d"), 0o600); err != nil {
		t.Fatal(err)
	}
	tmp := filepath.Join(tr.Dir, "node-tmp-swept") // runScript checks its own TMPDIR is left empty
	plant := func(name, job string) string {
		d := filepath.Join(tmp, name)
		mkdirAll(t, filepath.Join(d, "tmp/ro"))
		if err := os.WriteFile(filepath.Join(d, "tmp/ro/eval.sif"), []byte("image"), 0o600); err != nil {
			t.Fatal(err)
		}
		if job != "" {
			if err := os.WriteFile(filepath.Join(d, "job"), []byte(job+"\n"), 0o600); err != nil {
				t.Fatal(err)
			}
		}
		if err := os.Chmod(filepath.Join(d, "tmp/ro"), 0o500); err != nil { // a read-only cache tree
			t.Fatal(err)
		}
		return d
	}
	mkdirAll(t, tmp)
	dead := plant("nemorl-eval.dead01", "999999990")
	liveDir := plant("nemorl-train.live01", live)
	noMark := plant("nemorl-eval.nomark", "")
	other := plant("other-eval.dead02", "999999990")

	// squeue failing: nothing is removed.
	bin := filepath.Join(tr.Dir, "fakebin")
	mkdirAll(t, bin)
	if err := os.WriteFile(filepath.Join(bin, "squeue"), []byte("#!/bin/sh\nexit 1\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	out, code := runScript(t, tr, stages.Train, "TMPDIR="+tmp, "PATH="+bin+":/usr/bin:/bin")
	if code != 0 || !strings.Contains(out, "squeue failed") {
		t.Fatalf("squeue failing: exit %d\n%s", code, out)
	}
	for _, d := range []string{dead, liveDir, noMark, other} {
		if _, err := os.Stat(d); err != nil {
			t.Errorf("%s removed while squeue failed", d)
		}
	}

	out, code = runScript(t, tr, stages.Train, "TMPDIR="+tmp)
	if code != 0 {
		t.Fatalf("exit %d\n%s", code, out)
	}
	if _, err := os.Stat(dead); !os.IsNotExist(err) || !strings.Contains(out, "removing "+dead+", the scratch directory of job 999999990") {
		t.Errorf("stale %s not removed (%v):\n%s", dead, err, out)
	}
	for _, d := range []string{liveDir, noMark, other} {
		if _, err := os.Stat(d); err != nil {
			t.Errorf("%s removed: %v\n%s", d, err, out)
		}
	}
	entries, _ := os.ReadDir(tmp)
	if len(entries) != 3 {
		t.Errorf("want only the three kept directories left in %s, got %v", tmp, entries)
	}
}

// TestLabNoGPUNode plays a GPU-less node: cluster.gpu_devices matches no
// device file, so the train job Slurm gave a GPU exits 70 with "nemorl: no
// GPU:" before its payload; with the lab's setting (its fake GPU device
// files) the same job completes.
func TestLabNoGPUNode(t *testing.T) {
	lab := labtest.Env(t)
	if os.Geteuid() != 0 {
		t.Skip("submits as root, the user the lab registers for local jobs")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	for _, c := range []struct {
		devices, state string
	}{{"/dev/nemorl-no-gpu-here[0-9]*", "FAILED 70:0"}, {loadExample(t, "lab-none.yaml").Cluster.GPUDevices, "COMPLETED 0:0"}} {
		dir := t.TempDir()
		cfg := loadExample(t, "lab-none.yaml")
		cfg.Cluster.Workdir = dir
		cfg.Cluster.GPUDevices = c.devices
		cfg.Stages.Train.Command = []string{"/bin/echo", "payload-ran"}
		tr, err := Render(cfg, Input{Episode: "ep-gpu", Prompt: []byte("p"), Version: "test"})
		if err != nil {
			t.Fatal(err)
		}
		writeTree(t, tr)
		if err := os.WriteFile(filepath.Join(tr.Dir, "author/change.diff"), []byte("d"), 0o600); err != nil {
			t.Fatal(err)
		}
		state := labRun(ctx, t, lab, filepath.Join(tr.Dir, stages.Script(stages.Train)))
		// sacct may report the end before the job's output is all on disk
		// (seen once under a full make test): read until the script's last
		// line is there, a few seconds at most.
		var log []byte
		for range 40 {
			log, _ = os.ReadFile(filepath.Join(tr.Dir, stages.Output(stages.Train)))
			if strings.Contains(string(log), "nemorl: no GPU:") || strings.Contains(string(log), "payload exited with status") {
				break
			}
			time.Sleep(100 * time.Millisecond)
		}
		ran := strings.Contains(string(log), "payload-ran")
		if state != c.state || ran != (c.state == "COMPLETED 0:0") ||
			(c.state != "COMPLETED 0:0" && !regexp.MustCompile(`nemorl: no GPU: GPU [0-9]+: no device file matches `+regexp.QuoteMeta(c.devices)).Match(log)) {
			t.Errorf("gpu_devices %s: %s, want %s (payload ran %v)\n%s", c.devices, state, c.state, ran, log)
		}
	}
}
