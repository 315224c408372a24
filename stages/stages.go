// Package stages is the episode's vocabulary, shared by the templates that
// render the jobs, the records the jobs print and the engine that runs
// them: the three stage names in chain order, the episode id rule, the
// names and tags a stage's job carries on the cluster, the paths of its
// files in the episode directory, and the exit statuses the batch scripts
// keep for their own verdicts.
package stages

import (
	"fmt"
	"strings"
)

// Stage names one of the three stages. A string from outside (a flag, a
// decoded file, a record) becomes a Stage once, at the boundary, through
// Parse (or after Valid); a map keyed by Stage encodes in JSON as one
// keyed by its name.
type Stage string

// The three stages, in chain order.
const (
	Author Stage = "author"
	Train  Stage = "train"
	Eval   Stage = "eval"
)

// All lists the stages in chain order.
var All = []Stage{Author, Train, Eval}

// Valid reports whether s names a stage (s a Stage, or a string from
// outside).
func Valid[S ~string](s S) bool {
	return Stage(s) == Author || Stage(s) == Train || Stage(s) == Eval
}

// Names are the stages' names, in chain order.
func Names() []string {
	out := make([]string, len(All))
	for i, s := range All {
		out[i] = string(s)
	}
	return out
}

// Parse is the stage s names; ok is false when it names none.
func Parse(s string) (st Stage, ok bool) {
	if !Valid(s) {
		return "", false
	}
	return Stage(s), true
}

// Valid reports whether s is one of the three stages.
func (s Stage) Valid() bool { return Valid(s) }

// String is the stage's name.
func (s Stage) String() string { return string(s) }

// Script is a stage's sbatch script, relative to the episode directory.
func Script(stage Stage) string { return string(stage) + "/" + string(stage) + ".sbatch" }

// Output is a stage's job output (--output), relative to the episode
// directory: the batch script's and the payload's stdout and stderr.
func Output(stage Stage) string { return string(stage) + "/out.log" }

// The bounds of the author's files (under isolation the batch script copies
// no larger one out of the container's node-local directory, and the engine
// never reads more): a larger change.diff is bad_patch; a larger
// response.json is not served.
const (
	MaxPatchBytes    = 32 << 20
	MaxResponseBytes = 64 << 20
)

// JobName is the Slurm job name of a stage.
func JobName(episode string, stage Stage) string { return "nemorl-" + string(stage) + "-" + episode }

// Comment is the --comment tag that finds a stage's job again after a crash.
func Comment(episode string, stage Stage) string { return "nemorl:" + episode + ":" + string(stage) }

// AttemptComment is the --comment tag of a stage's attempt: the script's
// own (Comment) for the first, with the attempt's number after it for a
// retry (nemorl:EP:train:2), given on sbatch's command line.
func AttemptComment(episode string, stage Stage, attempt int) string {
	if attempt <= 1 {
		return Comment(episode, stage)
	}
	return fmt.Sprintf("%s:%d", Comment(episode, stage), attempt)
}

// ValidEpisode reports whether s is a usable episode id: letters, digits and
// ._- only, not starting with . or -, at most 100 bytes.
func ValidEpisode(s string) bool {
	if s == "" || len(s) > 100 || s[0] == '.' || s[0] == '-' {
		return false
	}
	for _, r := range s {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("._-", r)) {
			return false
		}
	}
	return true
}

// EvalOutputWatchSeconds is how long the eval script watches, after its
// record, that out.log is still its stdout. A file renamed over out.log
// after the script's last look (as the job ends, or just after) changed
// less than this quiet period before the job's end, which the collector
// refuses (its change time must lie before the job's end by the quiet
// period, less sacct's and bash's rounding and the clocks' slack).
const EvalOutputWatchSeconds = 8
