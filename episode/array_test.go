package episode

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nemorl/nemorl-slurm/internal/shell"
	"github.com/nemorl/nemorl-slurm/ledger"
	"github.com/nemorl/nemorl-slurm/stages"
	"github.com/nemorl/nemorl-slurm/templates"
)

// arrayCase stages n stand-in episodes under a temporary parent: each
// author.sbatch is body(i) after #SBATCH lines shared by all, and returns
// the pendings and the array rendered for them.
func arrayCase(t *testing.T, n int, body func(i int) string) (string, []*pending, *jobArray) {
	t.Helper()
	parent := t.TempDir()
	var ps []*pending
	for i := range n {
		ep := "ep-" + string(rune('a'+i))
		dir := filepath.Join(parent, ep)
		script := "#!/bin/bash\n#SBATCH --job-name=nemorl-author-" + ep + "\n#SBATCH --time=01:10:00\n#SBATCH --output=" + dir + "/author/out.log\n" +
			"#SBATCH --open-mode=truncate\n#SBATCH --comment=nemorl:" + ep + ":author\n#SBATCH --signal=B:USR1@120\n" + body(i)
		if err := os.MkdirAll(filepath.Join(dir, "author"), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, stages.Script(stages.Author)), []byte(script), 0o600); err != nil {
			t.Fatal(err)
		}
		tree := &templates.Tree{Episode: ep, Dir: dir, Files: []templates.File{{Path: stages.Script(stages.Author), Mode: 0o600, Data: []byte(script)}}}
		ps = append(ps, &pending{i: i, e: &ledger.Entry{Episode: ep, Dir: dir}, tree: tree})
	}
	arr, err := renderArray(parent, stages.Author, ps, "test", time.Now())
	if err != nil || arr == nil {
		t.Fatalf("renderArray: %v, %v", arr, err)
	}
	if err := os.MkdirAll(filepath.Dir(arr.path), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(arr.path, arr.script, 0o600); err != nil {
		t.Fatal(err)
	}
	return parent, ps, arr
}

// runTask runs the array's script as Slurm would run task i (bash, with
// SLURM_ARRAY_TASK_ID set) and returns its exit status.
func runTask(t *testing.T, arr *jobArray, task string) int {
	t.Helper()
	cmd := exec.Command("/bin/bash", arr.path)
	// As under --export=NONE: nothing but Slurm's variables (no PATH).
	cmd.Env = []string{"SLURM_ARRAY_TASK_ID=" + task}
	out, err := cmd.CombinedOutput()
	if ee, ok := err.(*exec.ExitError); ok {
		t.Logf("task %s: exit %d: %s", task, ee.ExitCode(), out)
		return ee.ExitCode()
	}
	if err != nil {
		t.Fatal(err)
	}
	return 0
}

func readOut(t *testing.T, p *pending) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(p.e.Dir, stages.Output(stages.Author)))
	if err != nil {
		t.Fatalf("%s: %v", p.e.Episode, err)
	}
	return string(b)
}

// TestArrayScriptRunsEachTasksOwnScript: task i runs episode i's staged
// script, from memory (a script that rewrites its own file on disk goes
// on with what was checked), as its batch shell, its output in the
// episode's own out.log, its exit status the job's.
func TestArrayScriptRunsEachTasksOwnScript(t *testing.T) {
	_, ps, arr := arrayCase(t, 3, func(i int) string {
		return "printf 'echo REWRITTEN; exit 9\\n' >\"$0\"\necho \"episode " + string(rune('a'+i)) + " ran as $0 pid $$\"\nexit " + string(rune('3'+i)) + "\n"
	})
	for i, p := range ps {
		if got := runTask(t, arr, string(rune('0'+i))); got != 3+i {
			t.Errorf("task %d: exit %d, want %d (its script's own status)", i, got, 3+i)
		}
		out := readOut(t, p)
		want := "episode " + string(rune('a'+i)) + " ran as " + filepath.Join(p.e.Dir, stages.Script(stages.Author))
		if !strings.Contains(out, want) || strings.Contains(out, "REWRITTEN") {
			t.Errorf("task %d: out.log %q, want %q and not the rewritten file's line", i, out, want)
		}
		for j, q := range ps {
			if j != i && strings.Contains(out, q.e.Episode+" ran") {
				t.Errorf("task %d's out.log holds episode %s's output", i, q.e.Episode)
			}
		}
	}
	// The array asks Slurm for what its tasks' scripts ask, and names no
	// episode's job, output or comment.
	s := string(arr.script)
	for _, want := range []string{"#SBATCH --time=01:10:00", "#SBATCH --signal=B:USR1@120", "#SBATCH --job-name=" + arr.name, "#SBATCH --comment=" + arr.comment} {
		if !strings.Contains(s, want+"\n") {
			t.Errorf("the array's script lacks %q", want)
		}
	}
	for _, p := range ps {
		if strings.Contains(s, "--job-name=nemorl-author-"+p.e.Episode) || strings.Contains(s, "--comment=nemorl:"+p.e.Episode) || strings.Contains(s, "--output="+p.e.Dir) {
			t.Errorf("the array's script carries episode %s's own job name, comment or output", p.e.Episode)
		}
	}
}

// TestArrayScriptRefusesAlteredScript: a staged script changed after
// staging (the policy's code of a sibling episode can write it: the same
// user), or removed, is refused with exit 65 (rules: script_altered), its
// content never run; a task not in the table runs nothing.
func TestArrayScriptRefusesAlteredScript(t *testing.T) {
	_, ps, arr := arrayCase(t, 3, func(i int) string { return "echo honest-run\nexit 0\n" })
	script := func(p *pending) string { return filepath.Join(p.e.Dir, stages.Script(stages.Author)) }
	if err := os.WriteFile(script(ps[1]), []byte("#!/bin/bash\necho forged-run\nexit 0\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(script(ps[2])); err != nil {
		t.Fatal(err)
	}
	if got := runTask(t, arr, "0"); got != 0 || !strings.Contains(readOut(t, ps[0]), "honest-run") {
		t.Errorf("task 0 (untouched): exit %d, out.log %q", got, readOut(t, ps[0]))
	}
	for _, i := range []int{1, 2} {
		if got := runTask(t, arr, string(rune('0'+i))); got != stages.ExitInputsTampered {
			t.Errorf("task %d: exit %d, want %d", i, got, stages.ExitInputsTampered)
		}
		out := readOut(t, ps[i])
		if strings.Contains(out, "forged-run") || !strings.Contains(out, "refusing to run") {
			t.Errorf("task %d: out.log %q: want the refusal and no run", i, out)
		}
	}
	if got := runTask(t, arr, "7"); got != 1 {
		t.Errorf("task 7, not in the table: exit %d, want 1", got)
	}
}

// TestRenderArrayNeedsOneShape: episodes whose scripts ask Slurm for
// different resources are no one array (nil: each its own job); a single
// episode is a job of its own.
func TestRenderArrayNeedsOneShape(t *testing.T) {
	_, ps, _ := arrayCase(t, 2, func(int) string { return "exit 0\n" })
	f := ps[1].tree.Files[0]
	f.Data = []byte(strings.Replace(string(f.Data), "--time=01:10:00", "--time=02:00:00", 1))
	ps[1].tree.Files[0] = f
	if arr, err := renderArray(filepath.Dir(ps[0].e.Dir), stages.Author, ps, "test", time.Now()); arr != nil || err != nil {
		t.Errorf("two shapes: %v, %v; want nil, nil", arr, err)
	}
	if arr, err := renderArray(filepath.Dir(ps[0].e.Dir), stages.Author, ps[:1], "test", time.Now()); arr != nil || err != nil {
		t.Errorf("one episode: %v, %v; want nil, nil", arr, err)
	}
}

// TestArrayScriptShellcheck: the array's script, as rendered, is
// shellcheck clean (make shellcheck checks files; this one is rendered
// per array). lab/up installs shellcheck; without it the test skips
// unless the lab is required.
func TestArrayScriptShellcheck(t *testing.T) {
	sc, err := exec.LookPath("shellcheck")
	if err != nil {
		if os.Getenv("NEMORL_REQUIRE_LAB") == "1" {
			t.Fatal("shellcheck is not installed (lab/up installs it)")
		}
		t.Skip("no shellcheck")
	}
	_, _, arr := arrayCase(t, 3, func(int) string { return "exit 0\n" })
	if out, err := exec.Command(sc, "-s", "bash", arr.path).CombinedOutput(); err != nil {
		t.Errorf("shellcheck of the array's script: %v\n%s", err, out)
	}
}

// TestArrayScriptPassesEveryStatus: the array's task ends with exactly
// the status its episode's script ends with, for every status 0–255 and a
// death by signal (the task execs the script: it is the batch shell), so
// the scripts' exit rule (stages.ScriptExit, TestLabExitStatusTable) holds
// for array tasks as for jobs of their own.
func TestArrayScriptPassesEveryStatus(t *testing.T) {
	_, _, arr := arrayCase(t, 2, func(int) string { return "if [ \"$NEMORL_T\" = kill ]; then kill -TERM $$; fi\nexit \"$NEMORL_T\"\n" })
	run := func(v string) int {
		cmd := exec.Command("/bin/bash", arr.path)
		cmd.Env = []string{"SLURM_ARRAY_TASK_ID=1", "NEMORL_T=" + v}
		err := cmd.Run()
		var ee *exec.ExitError
		switch {
		case err == nil:
			return 0
		case errors.As(err, &ee) && ee.ExitCode() >= 0:
			return ee.ExitCode()
		case errors.As(err, &ee):
			return 128 + int(ee.Sys().(syscall.WaitStatus).Signal())
		}
		t.Fatal(err)
		return -1
	}
	for status := range 256 {
		if got := run(strconv.Itoa(status)); got != status {
			t.Errorf("the script exits %d, the task %d", status, got)
		}
	}
	if got := run("kill"); got != 128+int(syscall.SIGTERM) {
		t.Errorf("the script killed by TERM, the task ended %d, want %d", got, 128+int(syscall.SIGTERM))
	}
}

// TestStageArrayScriptsHoldNoSecret: the train and eval arrays' scripts,
// readable by every task of the user (a sibling episode's code among
// them), hold the tasks' table and nothing secret: rendered from real
// episode trees with a policy API key set, neither the key nor the
// secrets file's name appears; each names its tasks' staged scripts with
// the sha256s the ledger records, at the indexes given (an eval array's
// are its train tasks').
func TestStageArrayScriptsHoldNoSecret(t *testing.T) {
	d, _ := stageDriver(t)
	key := d.Config.PolicyModel.APIKey.Reveal()
	if key == "" {
		t.Fatal("the example config has no policy API key set here")
	}
	sg := d.parts().stager
	var ps []*pending
	for i := range 3 {
		id := fmt.Sprintf("ep-20261207T050000Z-0000000%d", i)
		tree, err := sg.render(id, []byte("prompt"), "", 0)
		if err != nil {
			t.Fatal(err)
		}
		ps = append(ps, &pending{e: &ledger.Entry{Episode: id, Dir: tree.Dir, Scripts: scriptHashes(tree)}, tree: tree})
	}
	for _, stage := range []stages.Stage{stages.Train, stages.Eval} {
		arr, err := renderArrayTasks(path.Dir(ps[0].e.Dir), stage, ps, []int{1, 4, 7}, "test", time.Now())
		if err != nil || arr == nil {
			t.Fatalf("%s: %v %v", stage, arr, err)
		}
		s := string(arr.script)
		if strings.Contains(s, key) || strings.Contains(s, "secrets.env") {
			t.Errorf("%s array's script holds the key or names the secrets file", stage)
		}
		for i, p := range ps {
			row := fmt.Sprintf("  %d) nemorl_episode=%s nemorl_script=%s nemorl_sha256=%s ;;", []int{1, 4, 7}[i], p.e.Episode, shell.Quote(path.Join(p.e.Dir, stages.Script(stage))), p.e.Scripts[stage])
			if !strings.Contains(s, row+"\n") {
				t.Errorf("%s array's script lacks the row %q", stage, row)
			}
		}
	}
	if _, err := renderArrayTasks(path.Dir(ps[0].e.Dir), stages.Eval, ps, []int{4, 1, 7}, "test", time.Now()); err == nil {
		t.Error("task indexes out of order: rendered")
	}
}
