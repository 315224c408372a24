package episode

// Job arrays. The authors of episodes submitted together (serve's batch,
// submit --count N) are one job array: one sbatch, one
// REQUEST_SUBMIT_BATCH_JOB charged to the user's rate limit for up to
// MaxBatch episodes, where each author job cost one. The array's batch
// script (arrayScript) is the table of its tasks: task i runs episode i's
// staged author script, whose sha256 the table holds (the ledger recorded
// it at staging). The task reads the script into memory, checks its
// sha256, and runs it from memory, as its batch shell (exec), with its
// output in the episode's own out.log: every episode runs exactly the
// script it would run as a job of its own, and a script changed on disk
// after staging (the policy, as the same user, can write a sibling's
// files) is refused (stages.ExitInputsTampered), never run. Slurm keeps
// the array's script as submitted: the table cannot change once
// submitted, and the ledger holds its sha256 (ledger.ArrayTask), which is
// how the array is recognised after a crash (adopt) as single jobs are by
// theirs.
//
// Each task is its own job to Slurm ("ARRAY_TASK"): polled, cancelled and
// decided alone; nothing a task does reaches its siblings' records.

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"path"
	"strings"
	"time"

	"github.com/nemorl/nemorl-slurm/internal/shell"
	"github.com/nemorl/nemorl-slurm/ledger"
	"github.com/nemorl/nemorl-slurm/stages"
)

// ArraysDir is the directory, beside the episodes', that holds the job
// arrays' scripts and Slurm's own output of their tasks (empty unless a
// task could not reach its episode's out.log).
const ArraysDir = ".arrays"

// minArray is the fewest episodes submitted as an array: one is a job of
// its own.
const minArray = 2

// jobArray is one array of a stage's jobs, as staged and submitted.
type jobArray struct {
	id      string // the array's id in the tool: arr-<time>-<random>
	stage   stages.Stage
	name    string // --job-name
	comment string // --comment
	path    string // the batch script on the cluster
	script  []byte
	sum     string // the script's sha256
}

// newArrayID is a new array's id: sortable by time, like an episode's.
func newArrayID(now time.Time) string {
	var b [4]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic("episode: crypto/rand failed: " + err.Error())
	}
	return "arr-" + now.UTC().Format("20060102T150405Z") + "-" + hex.EncodeToString(b[:])
}

// arrayJobName and arrayComment are an array's job name and --comment tag.
func arrayJobName(id string, stage stages.Stage) string { return "nemorl-" + string(stage) + "-" + id }
func arrayComment(id string, stage stages.Stage) string {
	return "nemorl-array:" + id + ":" + string(stage)
}

// arrayDirectives are the #SBATCH lines an array takes from its tasks'
// scripts: all but those that name one episode (its job name, comment and
// output), which the array sets for itself.
func arrayDirectives(script []byte) []string {
	var out []string
	for line := range strings.SplitSeq(string(script), "\n") {
		opt, ok := strings.CutPrefix(line, "#SBATCH ")
		if !ok {
			continue
		}
		switch {
		case strings.HasPrefix(opt, "--job-name="), strings.HasPrefix(opt, "--comment="),
			strings.HasPrefix(opt, "--output="), strings.HasPrefix(opt, "--error="), strings.HasPrefix(opt, "--open-mode="):
			continue
		}
		out = append(out, line)
	}
	return out
}

// renderArray renders the array of stage's jobs of the episodes ps (task i
// is ps[i]), staged in parent, their trees rendered (p.tree). It returns
// nil when the episodes' scripts ask Slurm for different resources (no one
// array can run them all): they are then submitted one by one.
func renderArray(parent string, stage stages.Stage, ps []*pending, version string, now time.Time) (*jobArray, error) {
	tasks := make([]int, len(ps))
	for i := range tasks {
		tasks[i] = i
	}
	return renderArrayTasks(parent, stage, ps, tasks, version, now)
}

// renderArrayTasks is renderArray with ps[i] as task tasks[i] (an eval
// array's tasks take their train tasks' indexes: aftercorr pairs them).
func renderArrayTasks(parent string, stage stages.Stage, ps []*pending, tasks []int, version string, now time.Time) (*jobArray, error) {
	if len(ps) < minArray {
		return nil, nil
	}
	if len(tasks) != len(ps) {
		return nil, fmt.Errorf("job array of %d episodes with %d task indexes", len(ps), len(tasks))
	}
	id := newArrayID(now)
	a := &jobArray{id: id, stage: stage, name: arrayJobName(id, stage), comment: arrayComment(id, stage),
		path: path.Join(parent, ArraysDir, id, path.Base(stages.Script(stage)))}
	var common []string
	rel := stages.Script(stage)
	var b strings.Builder
	var table strings.Builder
	for i, p := range ps {
		f, ok := p.tree.Lookup(rel)
		if !ok {
			return nil, fmt.Errorf("episode %s: no %s in its tree", p.e.Episode, rel)
		}
		d := arrayDirectives(f.Data)
		if i == 0 {
			common = d
		} else if strings.Join(d, "\n") != strings.Join(common, "\n") {
			return nil, nil
		}
		if path.Dir(p.e.Dir) != parent {
			return nil, fmt.Errorf("episode %s: %s is not in %s with the others of its array", p.e.Episode, p.e.Dir, parent)
		}
		sum := sha256.Sum256(f.Data)
		if i > 0 && tasks[i] <= tasks[i-1] || tasks[i] < 0 {
			return nil, fmt.Errorf("job array task indexes %v: not increasing from 0", tasks)
		}
		fmt.Fprintf(&table, "  %d) nemorl_episode=%s nemorl_script=%s nemorl_sha256=%s ;;\n",
			tasks[i], shell.Quote(p.e.Episode), shell.Quote(path.Join(p.e.Dir, rel)), hex.EncodeToString(sum[:]))
	}
	b.WriteString("#!/bin/bash\n")
	fmt.Fprintf(&b, "#SBATCH --job-name=%s\n", a.name)
	for _, l := range common {
		b.WriteString(l + "\n")
	}
	fmt.Fprintf(&b, "#SBATCH --output=%s\n", path.Join(parent, ArraysDir, id, "task-%a.log"))
	fmt.Fprintf(&b, "#SBATCH --comment=%s\n", a.comment)
	fmt.Fprintf(&b, `# nemorl-slurm %s: job array %s, the %s jobs of %d episodes. Do not
# edit: the ledger records this script's sha256. Task i runs the staged %s
# script of episode i of the table below, and nothing else: it reads the
# script into memory, checks its sha256 against the table's (recorded at
# staging), and runs it from memory as this job's batch shell, its output
# in the episode's own %s. A script that is missing or differs
# is refused (exit %d): only a process of this user changes a staged file.
set -u
export PATH="${PATH:-/usr/local/bin:/usr/bin:/bin}"
case ${SLURM_ARRAY_TASK_ID:-} in
%s  *) echo "nemorl: array task ${SLURM_ARRAY_TASK_ID:-none} is not in the table of array %s" >&2; exit 1 ;;
esac
nemorl_out=${nemorl_script%%/*}/out.log
if ! { : >"$nemorl_out"; } 2>/dev/null; then
  echo "nemorl: episode $nemorl_episode: cannot write $nemorl_out: refusing to run its script" >&2
  exit %d
fi
exec >>"$nemorl_out" 2>&1
if ! nemorl_body=$(cat -- "$nemorl_script" && echo x); then
  echo "nemorl: episode $nemorl_episode: $nemorl_script cannot be read: refusing to run it" >&2
  exit %d
fi
nemorl_body=${nemorl_body%%x}
nemorl_got=$(printf '%%s' "$nemorl_body" | sha256sum)
nemorl_got=${nemorl_got%%%% *}
if [ "$nemorl_got" != "$nemorl_sha256" ]; then
  echo "nemorl: episode $nemorl_episode: $nemorl_script has sha256 $nemorl_got, not the $nemorl_sha256 staged: it was changed after staging; refusing to run it" >&2
  exit %d
fi
exec /bin/bash -c "$nemorl_body" "$nemorl_script"
`, version, id, stage, len(ps), rel, stages.Output(stage), stages.ExitInputsTampered,
		table.String(), id, stages.ExitInputsTampered, stages.ExitInputsTampered, stages.ExitInputsTampered)
	a.script = []byte(b.String())
	sum := sha256.Sum256(a.script)
	a.sum = hex.EncodeToString(sum[:])
	return a, nil
}

// taskOf is the place of the episode of task i in array a, for its
// ledger entry.
func (a *jobArray) taskOf(i int) *ledger.ArrayTask {
	return &ledger.ArrayTask{Name: a.name, Comment: a.comment, ScriptSHA256: a.sum, Script: a.path, Task: i}
}
