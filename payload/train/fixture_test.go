package train

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nemorl/nemorl-slurm/internal/shell"
	"github.com/nemorl/nemorl-slurm/record"
)

const pristineRecipe = `defaults: NeMo-RL/examples/configs/grpo_math_1B.yaml
grpo:
  normalize_rewards: true
`

// goodPatch changes recipe.yaml, changes a NeMo RL file and adds one, as an
// author's `git diff --cached --binary` would.
const goodPatch = `diff --git a/recipe.yaml b/recipe.yaml
index 0000001..0000002 100644
--- a/recipe.yaml
+++ b/recipe.yaml
@@ -1,3 +1,3 @@
 defaults: NeMo-RL/examples/configs/grpo_math_1B.yaml
 grpo:
-  normalize_rewards: true
+  normalize_rewards: false
diff --git a/NeMo-RL/nemo_rl/loss.py b/NeMo-RL/nemo_rl/loss.py
--- a/NeMo-RL/nemo_rl/loss.py
+++ b/NeMo-RL/nemo_rl/loss.py
@@ -1 +1 @@
-clip = 0.2
+clip = 0.28
diff --git a/NeMo-RL/nemo_rl/new_loss.py b/NeMo-RL/nemo_rl/new_loss.py
new file mode 100644
--- /dev/null
+++ b/NeMo-RL/nemo_rl/new_loss.py
@@ -0,0 +1 @@
+print("new")
`

const trainMath = `{"input": "What is 1+1?", "output": "2"}
{"input": "What is 2+2?", "output": "4"}
`

// fixture is a work tree, inputs and a stand-in python in a temp dir.
type fixture struct {
	t    *testing.T
	root string
	plan Plan
}

// The stand-in trainer and exporter bodies are bash; they see
// $FIX (the fixture root), $WORK, $CKPT (results/grpo) and, for the
// exporter, the arguments --dcp DIR --out FILE as $1..$4.
func newFixture(t *testing.T, trainer, exporter string) *fixture {
	t.Helper()
	root := t.TempDir()
	// t.TempDir names may hold characters Hydra overrides do not allow.
	if !hydraPlain(root) {
		t.Skipf("temp dir %q has characters a work dir may not", root)
	}
	f := &fixture{t: t, root: root}
	work := filepath.Join(root, "work")
	f.write("work/recipe.yaml", pristineRecipe, 0o644)
	f.write("work/NeMo-RL/examples/nemo_gym/run_grpo_nemo_gym.py", "# stand-in\n", 0o644)
	f.write("work/NeMo-RL/nemo_rl/loss.py", "clip = 0.2\n", 0o644)
	f.write("work/train_math.jsonl", trainMath, 0o644)
	f.write("in/change.diff", goodPatch, 0o644)
	f.write("bundle/export_dcp.py", "# stand-in\n", 0o644)
	if err := os.MkdirAll(filepath.Join(root, "out"), 0o755); err != nil {
		t.Fatal(err)
	}
	script := "#!/bin/bash\n" +
		"FIX=" + shell.Quote(root) + "\n" +
		"WORK=" + shell.Quote(work) + "\n" +
		"CKPT=\"$WORK/results/grpo\"\n" +
		"case \"$1\" in\n" +
		"examples/nemo_gym/run_grpo_nemo_gym.py)\n" +
		"  shift\n" +
		"  printf '%s\\n' \"$@\" > \"$FIX/trainer.args\"\n" +
		"  pwd > \"$FIX/trainer.cwd\"\n" +
		"  env > \"$FIX/trainer.env\"\n" +
		"  echo $$ > \"$FIX/trainer.pid.tmp\" && mv \"$FIX/trainer.pid.tmp\" \"$FIX/trainer.pid\"\n" +
		trainer + "\n" +
		"  ;;\n" +
		"*/export_dcp.py)\n" +
		"  shift\n" +
		"  touch \"$FIX/exporter.ran\"\n" +
		exporter + "\n" +
		"  ;;\n" +
		"*) echo \"stand-in python: unexpected $1\" >&2; exit 99 ;;\n" +
		"esac\n"
	f.write("bin/python", script, 0o755)
	// A stand-in nvidia-smi: the query's arguments to $FIX/smi.args, one
	// H100 for GPU 0, no device for any other.
	f.write("bin/nvidia-smi", "#!/bin/sh\necho \"$*\" > "+shell.Quote(filepath.Join(root, "smi.args"))+"\n"+
		"case \"$*\" in *'-i 0') echo 'NVIDIA H100 80GB HBM3, 81559' ;; *) echo 'No devices were found'; exit 6 ;; esac\n", 0o755)
	f.plan = Plan{
		WorkDir:      work,
		Patch:        filepath.Join(root, "in/change.diff"),
		Python:       filepath.Join(root, "bin/python"),
		TrainData:    filepath.Join(work, "train_math.jsonl"),
		OutDir:       filepath.Join(root, "out"),
		ExportScript: filepath.Join(root, "bundle/export_dcp.py"),
		Deadline:     time.Now().Add(50 * time.Minute),
		Grace:        200 * time.Millisecond,
		KillAfter:    500 * time.Millisecond,
		ExportMargin: 10 * time.Second,
		Settings:     validSettings(),
		SMI:          filepath.Join(root, "bin/nvidia-smi"),
		GPUs:         "0",
	}
	return f
}

// fixtureGPU is the GPU the fixture's nvidia-smi reports for GPU 0.
var fixtureGPU = record.GPU{Name: "NVIDIA H100 80GB HBM3", MemoryMiB: 81559, Count: 1}

func (f *fixture) path(rel string) string { return filepath.Join(f.root, rel) }

func (f *fixture) write(rel, data string, mode os.FileMode) {
	f.t.Helper()
	p := f.path(rel)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		f.t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(data), mode); err != nil {
		f.t.Fatal(err)
	}
}

func (f *fixture) read(rel string) string {
	f.t.Helper()
	b, err := os.ReadFile(f.path(rel))
	if err != nil {
		f.t.Fatal(err)
	}
	return string(b)
}

func (f *fixture) exists(rel string) bool {
	_, err := os.Lstat(f.path(rel))
	return err == nil
}

// result is one Run.
type result struct {
	rec    *record.Train
	code   int
	err    error
	stdout string
	log    string
}

func (f *fixture) run(ctx context.Context) result {
	f.t.Helper()
	var stdout, log bytes.Buffer
	rec, code, err := Run(ctx, f.plan, &stdout, &log)
	f.t.Logf("log:\n%s", log.String())
	return result{rec, code, err, stdout.String(), log.String()}
}

// checkRecord checks that stdout holds exactly the one record Run returned,
// that record.Scan accepts it, and the status and exit code.
func (r result) checkRecord(t *testing.T, status record.TrainStatus) *record.Train {
	t.Helper()
	if r.err != nil {
		t.Fatalf("Run: %v", r.err)
	}
	if strings.Count(r.stdout, "\n") != 1 || !strings.HasSuffix(r.stdout, "\n") {
		t.Fatalf("stdout is not one line: %q", r.stdout)
	}
	got, err := record.Scan(record.StageTrain, []byte(r.stdout))
	if err != nil {
		t.Fatalf("record.Scan: %v\n%s", err, r.stdout)
	}
	tr := got.(*record.Train)
	if *tr != *r.rec {
		t.Errorf("printed %+v, returned %+v", *tr, *r.rec)
	}
	if tr.Status != status {
		t.Fatalf("status %s, want %s", tr.Status, status)
	}
	want := ExitPolicyFailure
	if status == record.StatusOK {
		want = ExitOK
	}
	if r.code != want {
		t.Errorf("exit code %d, want %d", r.code, want)
	}
	return tr
}

// pid reads a pid file the stand-in wrote.
func (f *fixture) pid(rel string) int {
	f.t.Helper()
	n, err := strconv.Atoi(strings.TrimSpace(f.read(rel)))
	if err != nil {
		f.t.Fatal(err)
	}
	return n
}

// liveGroupMembers lists the processes of group pgid that are not zombies.
// (A zombie is dead; whether it is reaped depends on this machine's init,
// which is why kill(-pgid, 0) is not the test.)
func liveGroupMembers(pgid int) []int {
	dirs, _ := filepath.Glob("/proc/[0-9]*/stat")
	var live []int
	for _, stat := range dirs {
		b, err := os.ReadFile(stat)
		if err != nil {
			continue
		}
		// pid (comm) state ppid pgrp …; comm may hold spaces and parens.
		s := string(b)
		i := strings.LastIndexByte(s, ')')
		if i < 0 {
			continue
		}
		fields := strings.Fields(s[i+1:])
		if len(fields) < 3 || fields[0] == "Z" || fields[0] == "X" {
			continue
		}
		if g, _ := strconv.Atoi(fields[2]); g == pgid {
			pid, _ := strconv.Atoi(strings.Fields(s)[0])
			live = append(live, pid)
		}
	}
	return live
}

// processAlive reports whether pid is a process that is not a zombie.
func processAlive(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	fields := strings.Fields(s[i+1:])
	return len(fields) > 0 && fields[0] != "Z" && fields[0] != "X"
}

// checkGroupGone fails unless no live process is left in group pgid.
// Run returns after KILL has been sent; the kernel may take a moment.
func checkGroupGone(t *testing.T, pgid int, others ...int) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		live := liveGroupMembers(pgid)
		for _, p := range others {
			if processAlive(p) {
				live = append(live, p)
			}
		}
		if len(live) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("process group %d: still alive: %v", pgid, live)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
