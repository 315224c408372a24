package rules

import (
	"io/fs"
	"time"

	"github.com/nemorl/nemorl-slurm/record"
	"github.com/nemorl/nemorl-slurm/slurm"
	"github.com/nemorl/nemorl-slurm/stages"
)

// Facts is what the engine gathered about one episode: the ledger's
// account of it, Slurm's account of its jobs, and what it found in the
// episode's files on the cluster. Decide reads nothing else.
type Facts struct {
	Episode string
	// Isolated is whether the stages ran in containers (runtime apptainer
	// or singularity): without isolation the policy's code runs as the
	// user, with the user's Slurm rights and files.
	Isolated bool
	// Requeues: train and eval are submitted --requeue (Slurm may run them
	// again after a node failure or a preemption).
	Requeues bool
	// Staged: every file of the episode is on the cluster.
	Staged bool
	// SealBroken, when set, is why the ledger entry failed its seal.
	SealBroken string
	// CancelRequested is why the tool cancelled the episode's jobs
	// (cancel, a deadline, an interrupt); CancelsIssued the job ids it
	// scancelled.
	CancelRequested string
	CancelsIssued   []string

	// Jobs is, by stage, the current attempt's job as Slurm reports it
	// (ID set as soon as the stage was submitted; State unknown while
	// neither sacct nor squeue knows it). A stage not submitted is absent.
	Jobs map[stages.Stage]slurm.JobInfo
	// TimeLimits is, by stage, the time limit its staged script asks for.
	TimeLimits map[stages.Stage]time.Duration
	// Submit is, by stage, sbatch's lasting refusal of the stage or the
	// impostor jobs found under its name.
	Submit map[stages.Stage]Submit
	// Waited is how long each wait Decide asked for (Decision.Waits) has
	// lasted, by key; a key asked for the first time is absent (0).
	Waited map[string]time.Duration
	// UID is the cluster user's uid; UIDKnown says it was looked up.
	UID      int
	UIDKnown bool

	// Author is the author's record once its patch was verified (kept by
	// the ledger); nil before.
	Author *record.Author
	// EvalOutputChecked: eval's files were found as the tool left them
	// once train had ended (kept by the ledger: not looked at again).
	EvalOutputChecked bool

	// Outputs is, by stage, what the engine found in the stage's output
	// (NeedOutput); absent: not looked at.
	Outputs map[stages.Stage]Output
	// Patch is the author's change.diff (NeedPatch); nil: not looked at.
	Patch *Patch
	// EvalFiles are eval's output directory and out.log as lstat sees them
	// (NeedEvalFiles); nil: not looked at.
	EvalFiles *EvalFiles
	// Queue is, by stage, the job as squeue shows it (NeedQueue): a
	// pending job's live reason; nil: not looked at; a stage absent:
	// squeue does not know its job.
	Queue map[stages.Stage]slurm.JobInfo
}

// Submit is what sbatch said of a stage for good.
type Submit struct {
	// Refused is sbatch's refusal, which it would repeat (a partition, an
	// account, GRES, a missing script).
	Refused string
	// Impostor describes jobs found under the stage's name or tag that
	// are not the tool's (their batch script, user or submit time differ).
	Impostor string
}

// File is what lstat(2) says of a file on the cluster.
type File struct {
	Exists bool
	// Type is as stat's %F: "regular file", "regular empty file", "fifo",
	// "symbolic link", "directory", …
	Type string
	Size int64
	// Perm is the file's permission bits (lstat over SFTP; not set by
	// readOutput).
	Perm fs.FileMode
	// Ctime is the last change of the file (readOutput only): no user can
	// set it.
	Ctime time.Time
}

// Regular reports a regular file (empty or not).
func (f File) Regular() bool { return f.Type == "regular file" || f.Type == "regular empty file" }

// Output is what the engine found in a stage's output file.
type Output struct {
	// Path is the file, for the outcome's detail.
	Path string
	File File
	// Unopenable: a regular file that could not be opened for reading and
	// writing; Replaced: the path changed while it was inspected.
	Unopenable, Replaced bool
	// Record is the stage's one record, or RecordErr (a *record.Rejection)
	// why there is none.
	Record    record.Record
	RecordErr error
	// Findings are the isolation guard's findings in the output.
	Findings []string
}

// Patch is the author's change.diff as the engine found it.
type Patch struct {
	Path string
	File File
	// Data is the file's content, read up to the size the author record
	// gives when the file is a regular file of that size within
	// stages.MaxPatchBytes; nil otherwise.
	Data []byte
}

// EvalFiles are the eval stage's directory and output as lstat sees them.
type EvalFiles struct {
	DirPath, OutPath string
	Dir, Out         File
}

// Need names the facts Decide needs before it can decide.
type Need uint

// The facts the engine gathers only when Decide asks for them.
const (
	NeedOutputAuthor Need = 1 << iota // Outputs[author]
	NeedOutputTrain                   // Outputs[train]
	NeedOutputEval                    // Outputs[eval]
	NeedPatch                         // Patch (after the author's record)
	NeedEvalFiles                     // EvalFiles
	NeedUID                           // UID
	NeedQueue                         // Queue
)

// NeedOutput is the Need of a stage's output.
func NeedOutput(stage stages.Stage) Need {
	switch stage {
	case stages.Author:
		return NeedOutputAuthor
	case stages.Train:
		return NeedOutputTrain
	}
	return NeedOutputEval
}

// Action is what the engine is to do next for an episode that is not
// final.
type Action int

const (
	// Wait: nothing to do until Slurm reports more.
	Wait Action = iota
	// Restage: stage the episode's files again (a crash cut staging short).
	Restage
	// SubmitStage: submit Decision.Stage.
	SubmitStage
)

// Decision is what Decide made of the facts.
type Decision struct {
	// Need, when not zero, is the facts to gather before deciding:
	// nothing else of the decision holds.
	Need Need
	// Verdict is the episode's outcome, or nil while it goes on.
	Verdict *Verdict
	// Next is the engine's next step while the episode goes on; Stage is
	// the stage it concerns.
	Next  Action
	Stage stages.Stage
	// AuthorVerified is the author's record, its patch verified: train
	// may be submitted (the ledger keeps it).
	AuthorVerified *record.Author
	// EvalOutputChecked: the ledger records that eval's files were found
	// as the tool left them once train ended.
	EvalOutputChecked bool
	// Waits are the waits under way (keys of Facts.Waited): the engine
	// keeps their clocks and drops every other.
	Waits []string
}

// Verdict is an episode's outcome as the rules decide it; the engine adds
// the jobs, attempts and paths every outcome carries.
type Verdict struct {
	Kind      Kind
	Stage     stages.Stage // "" for none (a broken ledger seal)
	Reason    string
	Detail    string
	Tampering bool
	// Retryable: a failure of the cluster's in train or eval that running
	// the stage again may cure (the engine runs it again while
	// episodes.retries allows).
	Retryable bool
	// Rule names the rule that decided (Rules).
	Rule string
	// Train and Eval are the verified records behind a score (Train also
	// behind a policy failure after train's record was read).
	Train *record.Train
	Eval  *record.Eval
}
