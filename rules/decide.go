package rules

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/nemorl/nemorl-slurm/record"
	"github.com/nemorl/nemorl-slurm/slurm"
	"github.com/nemorl/nemorl-slurm/stages"
)

// Limits of patience with Slurm's account of a job.
const (
	// JobLostAfter: a submitted job that neither sacct nor squeue knows
	// for this long is lost (infra_failure job_lost). Unknown is not
	// failed: sacct lags submissions and ends by seconds.
	JobLostAfter = 10 * time.Minute
	// WithdrawnAfter: an author's array task that Slurm keeps no record
	// of while its array's other tasks have theirs
	// (slurm.SourceWithdrawn) for this long was cancelled while pending
	// in its array: slurmdbd's lag is seconds, a pending task is always
	// in squeue, and a loss of Slurm's state loses the array.
	WithdrawnAfter = 2 * time.Minute
	// RequeueGrace is how long a job ended NODE_FAIL, PREEMPTED or
	// BOOT_FAIL is given to be requeued by Slurm (it does so within
	// seconds) before its end counts.
	RequeueGrace = 2 * time.Minute
	// TimesUnknownAfter: an ended eval whose start (or train's end) sacct
	// has not reported for this long cannot be checked (times_unknown).
	TimesUnknownAfter = 5 * time.Minute
)

// EvalOutputSlack is how far eval's out.log may have last changed outside
// the eval job's start and end as sacct reports them (whole seconds, from
// slurmctld's clock, while the file's change time comes from the file
// server's clock).
const EvalOutputSlack = 2 * time.Second

// EvalOutputQuiet is how long before the end sacct reports for the eval
// job its honest out.log last changed, at least: the script writes
// nothing after the record and watches the file for
// stages.EvalOutputWatchSeconds (bash's whole seconds may make that one
// less), and sacct's End drops the fraction of a second (one more).
const EvalOutputQuiet = time.Duration(stages.EvalOutputWatchSeconds-2) * time.Second

// Who is who could have caused a failure: the column of docs/episode.md's
// attribution table a rule belongs to.
type Who string

const (
	ThePolicy  Who = "the policy"
	TheCluster Who = "the cluster or the operator"
	Nobody     Who = "nobody, if isolation holds"
	// Chain rules are the chain's own account (a cancel on record, the
	// ledger's seal) that stand before every other.
	Chain Who = "the tool's record"
)

// Rule is one row of the attribution table: Decide tries them in order
// and the first that matches decides. A rule matches only on facts it
// has; one that needs a fact the engine has not gathered stops Decide,
// which asks for it.
type Rule struct {
	// ID names the rule in outcomes (Verdict.Rule) and in docs/episode.md.
	ID  string
	Who Who
	// Match is what the rule makes of the facts: a pure function of them
	// (through view, which only reads). It reads nothing another rule
	// made, and writes nothing but the Result it returns.
	Match func(view) Result
}

// Result is what one row makes of the facts: its verdict, or the facts it
// still needs, or that Slurm must report more first (each of which stops
// Decide at this row), and what it found on the way.
type Result struct {
	// Verdict, when not nil, decides the episode (unless Need or Pending).
	Verdict *Verdict
	// Need is the facts the row asks for: nothing else of it holds.
	Need Need
	// Pending: the row cannot decide until Slurm reports more (sacct lags).
	Pending bool
	// Verified is the author's record, its patch verified by this row.
	Verified *record.Author
	// EvalChecked: eval's files were found as the tool left them.
	EvalChecked bool
	// Waits are the waits (keys of Facts.Waited) the row looked at, in
	// the order it looked.
	Waits []string
}

// with is r deciding v (read after v is made: what making it asked for
// is in r).
func (r *Result) with(v *Verdict) Result {
	r.Verdict = v
	return *r
}

// stops reports a result that ends Decide's walk of the table.
func (r Result) stops() bool { return r.Need != 0 || r.Pending || r.Verdict != nil }

// fold adds a row's result to the walk's: its needs, what it verified and
// checked, its waits after those before it; its verdict if none stopped
// the walk before.
func (r *Result) fold(row Result) {
	r.Need |= row.Need
	r.Pending = r.Pending || row.Pending
	if row.Verified != nil {
		r.Verified = row.Verified
	}
	r.EvalChecked = r.EvalChecked || row.EvalChecked
	for _, k := range row.Waits {
		r.wait(k)
	}
	if r.Verdict == nil && !row.Pending {
		r.Verdict = row.Verdict
	}
}

// wait adds key to the waits looked at.
func (r *Result) wait(key string) {
	if !slices.Contains(r.Waits, key) {
		r.Waits = append(r.Waits, key)
	}
}

// Decide is the attribution rule: from the facts the engine gathered, the
// episode's outcome (a Verdict), or the facts still needed, or the
// engine's next step. It does no I/O and keeps no state.
func Decide(f *Facts) Decision { return decide(f, table) }

// decide walks rows in order, folding each row's result into the walk's,
// until one stops it (the first verdict, need or wait decides), and makes
// the Decision of the walk.
func decide(f *Facts, rows []Rule) Decision {
	v := newView(f)
	var walk Result
	for _, row := range rows {
		r := row.Match(v)
		walk.fold(r)
		if r.Need != 0 || r.Pending {
			break
		}
		if r.Verdict != nil {
			v.settle(&walk, row)
			break
		}
	}
	var next Action
	var stage stages.Stage
	if !walk.stops() {
		next, stage = v.progress(&walk)
	}
	if walk.Need != 0 {
		return Decision{Need: walk.Need}
	}
	dec := Decision{Verdict: walk.Verdict, AuthorVerified: walk.Verified, EvalOutputChecked: walk.EvalChecked, Waits: walk.Waits}
	if walk.Verdict == nil && !walk.Pending {
		dec.Next, dec.Stage = next, stage
	}
	return dec
}

// settle completes the verdict row decided by: its rule, the outcome
// without isolation, whether a retry may cure it, and train's record.
func (v view) settle(walk *Result, row Rule) {
	vd := walk.Verdict
	vd.Rule = row.ID
	if !v.f.Isolated && vd.Kind == IntegrityViolation && row.Who == Nobody {
		// Without isolation the policy's code has the user's Slurm
		// rights and files: what only a deliberate act explains is its
		// doing, not a free mask.
		vd.Kind, vd.Tampering = PolicyFailure, true
		vd.Detail += "; without isolation the policy's code can do this"
	}
	vd.Retryable = retryable(vd)
	if vd.Train == nil && (v.f.Author != nil || walk.Verified != nil) {
		// Train's own account goes with every outcome once it has
		// ended (its train_reward), whichever rule decided.
		o, ok := v.f.Outputs[stages.Train]
		if _, ended := v.ended(walk, stages.Train); ended && !ok {
			walk.Need |= NeedOutputTrain
			return
		}
		if ok && o.RecordErr == nil {
			vd.Train, _ = o.Record.(*record.Train)
		}
	}
}

// view is the facts as the rows read them: it only reads, and what is
// derived from the facts alone is computed once, up front. What a row
// asks for or waits on as it reads goes into the Result it builds (r).
type view struct {
	f *Facts
	// verified is the author's record when it is not kept by the ledger
	// and the patch verifies against it (what patch-mismatch verifies).
	verified *record.Author
}

func newView(f *Facts) view {
	v := view{f: f}
	// What the rows ask for while reading it is theirs to ask (bad-patch
	// and patch-mismatch do, before any row uses it).
	var quiet Result
	if a := v.newAuthorRecord(&quiet); a != nil && f.Patch != nil && record.VerifyPatch(a, f.Patch.Data) == nil {
		v.verified = a
	}
	return v
}

// job is stage's job; ok is false when the stage was not submitted.
func (v view) job(stage stages.Stage) (slurm.JobInfo, bool) {
	j, ok := v.f.Jobs[stage]
	return j, ok && j.ID != ""
}

// waited keeps the wait key going and says how long it has lasted.
func (v view) waited(r *Result, key string) time.Duration {
	r.wait(key)
	return v.f.Waited[key]
}

// ended reports that stage's job has ended for good: terminal, and not a
// node failure, preemption or boot failure that Slurm may still requeue.
func (v view) ended(r *Result, stage stages.Stage) (slurm.JobInfo, bool) {
	j, ok := v.job(stage)
	if !ok || !j.State.Terminal() {
		return j, false
	}
	switch j.State.Failure {
	case slurm.FailureNodeFailure, slurm.FailurePreempted, slurm.FailureBootFailure:
		if stage != stages.Author && v.f.Requeues && v.f.CancelRequested == "" && v.waited(r, "requeue-"+j.ID) < RequeueGrace {
			return j, false
		}
	}
	return j, true
}

// output is stage's output, asking for it when not gathered.
func (v view) output(r *Result, stage stages.Stage) (Output, bool) {
	o, ok := v.f.Outputs[stage]
	if !ok {
		r.Need |= NeedOutput(stage)
	}
	return o, ok
}

// authorRecord is the author's verified record: kept by the ledger, or
// one whose patch verifies (the author rows and bad-patch decided
// otherwise before any row that reads it).
func (v view) authorRecord() *record.Author {
	if v.f.Author != nil {
		return v.f.Author
	}
	return v.verified
}

// trainRecord is train's record when train completed and its record was
// read and accepted; nil otherwise (the train rules decided already).
func (v view) trainRecord(r *Result) *record.Train {
	if v.authorRecord() == nil {
		return nil
	}
	t, ended := v.ended(r, stages.Train)
	if !ended || t.State.Class != slurm.Succeeded {
		return nil
	}
	o, ok := v.output(r, stages.Train)
	if !ok || o.RecordErr != nil || !o.File.Regular() || o.Unopenable || o.Replaced {
		return nil
	}
	tr, _ := o.Record.(*record.Train)
	if tr == nil || tr.Status.PolicyFailure() {
		return nil
	}
	return tr
}

func fail(k Kind, stage stages.Stage, reason, detail string) *Verdict {
	return &Verdict{Kind: k, Stage: stage, Reason: reason, Detail: detail}
}

func (v *Verdict) tampered() *Verdict {
	v.Tampering = true
	return v
}

// retryable: a failure of the cluster's in train or eval that running the
// stage again may cure.
func retryable(v *Verdict) bool {
	if v.Kind != InfraFailure || (v.Stage != stages.Train && v.Stage != stages.Eval) {
		return false
	}
	switch v.Reason {
	case string(slurm.FailureNodeFailure), string(slurm.FailurePreempted), string(slurm.FailureBootFailure),
		string(slurm.FailureLaunch), ReasonJobLost, ReasonNoGPU, ReasonRolloutsRejected:
		return true
	case string(record.ReasonMissingRecord):
		// The trusted evaluator died before its record (its vLLM, its
		// node); a missing train record is the policy's.
		return v.Stage == stages.Eval
	}
	return false
}

// progress is the engine's next step (and the stage it concerns) when no
// rule decided; walk is every row's result, folded.
func (v view) progress(walk *Result) (Action, stages.Stage) {
	f := v.f
	if !f.Staged {
		return Restage, ""
	}
	if _, ok := v.job(stages.Author); !ok {
		return SubmitStage, stages.Author
	}
	if _, ended := v.ended(walk, stages.Author); !ended || (f.Author == nil && walk.Verified == nil) {
		return Wait, ""
	}
	if _, ok := v.job(stages.Train); !ok {
		return SubmitStage, stages.Train
	}
	if _, ok := v.job(stages.Eval); !ok && f.CancelRequested == "" {
		if t, ended := v.ended(walk, stages.Train); !ended || t.State.Class == slurm.Succeeded {
			return SubmitStage, stages.Eval
		}
	}
	return Wait, ""
}

// live reports a submitted job that has not ended.
// withdrawn reports that j is an array task Slurm has withdrawn from its
// array (slurm.SourceWithdrawn) for longer than WithdrawnAfter.
func (v view) withdrawn(r *Result, j slurm.JobInfo) bool {
	return j.State.Class == slurm.Unknown && j.Source == slurm.SourceWithdrawn && v.waited(r, "withdrawn-"+j.ID) > WithdrawnAfter
}

// onlyWithdrawnLive reports that every job not ended is one withdrawn
// from its array (withdrawn): after a cancel on record, as good as ended.
func (v view) onlyWithdrawnLive(r *Result) bool {
	for _, s := range stages.All {
		j, ok := v.job(s)
		if !ok {
			continue
		}
		if _, ended := v.ended(r, s); !ended && !v.withdrawn(r, j) {
			return false
		}
	}
	return true
}

func (v view) live(r *Result) bool {
	for _, s := range stages.All {
		if _, ok := v.job(s); ok {
			if _, ended := v.ended(r, s); !ended {
				return true
			}
		}
	}
	return false
}

// firstUnfinished names the first stage that did not complete.
func (v view) firstUnfinished() stages.Stage {
	for _, s := range stages.All {
		j, ok := v.job(s)
		if !ok || j.State.Class != slurm.Succeeded {
			return s
		}
	}
	return stages.Eval
}

// cancelled attributes a CANCELLED job (not a dependency cancel). A
// cancel the tool issued is the operator's; one by another uid an
// administrator's; one by the user's own uid that the tool did not issue
// can only come from the policy's code (it runs as that user) or from a
// hand-typed scancel, which the README warns against: the policy's 0,
// flagged as tampering.
func (v view) cancelled(r *Result, stage stages.Stage, j slurm.JobInfo) *Verdict {
	f := v.f
	if slices.Contains(f.CancelsIssued, j.ID) {
		return fail(InfraFailure, stage, ReasonCancelled, fmt.Sprintf("%s job %s was cancelled by nemorl-slurm", stage, j.ID))
	}
	if j.State.ByUID < 0 {
		// sacct (22.05) sometimes drops the uid of a running job's
		// canceller. Without isolation the policy's code may have been it.
		if !f.Isolated {
			return fail(PolicyFailure, stage, ReasonForeignCancel,
				fmt.Sprintf("%s job %s ended %s and nemorl-slurm did not cancel it; Slurm does not say who did, and without isolation the policy's code can", stage, j.ID, j.State.Raw)).tampered()
		}
		return fail(InfraFailure, stage, ReasonCancelled,
			fmt.Sprintf("%s job %s ended %s: Slurm does not say who cancelled it, and the policy's code cannot reach Slurm from its container", stage, j.ID, j.State.Raw))
	}
	if !f.UIDKnown {
		r.Need |= NeedUID
		return nil
	}
	if j.State.ByUID != f.UID {
		return fail(InfraFailure, stage, ReasonCancelled,
			fmt.Sprintf("%s job %s was cancelled by uid %d, not by this user (uid %d): an administrator or the cluster", stage, j.ID, j.State.ByUID, f.UID))
	}
	return fail(PolicyFailure, stage, ReasonForeignCancel,
		fmt.Sprintf("%s job %s was cancelled by this user's uid %d, and not by nemorl-slurm: the policy's code can do that, the tool did not (cancel episodes with nemorl-slurm cancel)", stage, j.ID, f.UID)).tampered()
}

// verdictFailed is the outcome of a job whose batch script refused to run
// its payload, or found that the cluster failed it (exit 64–79).
func (v view) verdictFailed(r *Result, stage stages.Stage, j slurm.JobInfo) *Verdict {
	switch j.ExitCode.Code {
	case stages.ExitInputsTampered:
		if stage == stages.Eval {
			break
		}
		// A job array's task refused its episode's staged script: it
		// differs from the sha256 recorded at staging, or is gone. Only a
		// process of the user changes it: the policy's code (a sibling
		// episode's, the same user), or with isolation a breach.
		detail := fmt.Sprintf("%s job %s refused to run the episode's staged %s (exit %d): it was changed or removed after staging; see nemorl-slurm logs --stage %s",
			stage, j.ID, stages.Script(stage), stages.ExitInputsTampered, stage)
		if v.f.Isolated {
			return fail(IntegrityViolation, stage, ReasonScriptAltered, detail).tampered()
		}
		return fail(PolicyFailure, stage, ReasonScriptAltered, detail).tampered()
	case stages.ExitNoGPU:
		return fail(InfraFailure, stage, ReasonNoGPU,
			fmt.Sprintf("%s job %s found no GPU where Slurm gave it one (exit %d, node %s)", stage, j.ID, stages.ExitNoGPU, j.NodeList))
	case stages.ExitPolicyEndpoint:
		return fail(InfraFailure, stage, ReasonPolicyEndpointFailed,
			fmt.Sprintf("%s job %s: the policy's endpoint failed (exit %d): no model call succeeded, or the last one failed; see nemorl-slurm logs --stage author", stage, j.ID, stages.ExitPolicyEndpoint))
	case stages.ExitIsolation:
		out, ok := v.output(r, stage)
		if !ok {
			return nil
		}
		detail := fmt.Sprintf("%s job %s refused to start its payload (exit %d): its isolation guard found a way out of the container", stage, j.ID, stages.ExitIsolation)
		var keep []string
		for _, x := range out.Findings {
			// The script's own summary line says nothing the outcome does not.
			if !strings.HasPrefix(x, "the guard refused") && !strings.HasPrefix(x, "unverified:") {
				keep = append(keep, x)
			}
		}
		if len(keep) > 0 {
			detail += ": " + strings.Join(keep, "; ")
		} else {
			detail += "; see nemorl-slurm logs --stage " + string(stage) + " for each finding and its cause"
		}
		return fail(InfraFailure, stage, ReasonIsolationBreach, detail)
	}
	return fail(InfraFailure, stage, ReasonScriptRefused,
		fmt.Sprintf("%s job %s: its batch script refused to start the payload (exit %s); see nemorl-slurm logs --stage %s", stage, j.ID, j.ExitCode.Raw, stage))
}

// jobFailed is the outcome of a job Slurm ended for a reason of the
// cluster's, named after Slurm's account of it.
func jobFailed(stage stages.Stage, j slurm.JobInfo) *Verdict {
	reason := string(j.State.Failure)
	if reason == "" {
		reason = ReasonJobClass(j.State.Class)
	}
	return fail(InfraFailure, stage, reason, fmt.Sprintf("%s job %s ended %s, exit code %s", stage, j.ID, j.State.Raw, j.ExitCode.Raw))
}

// scriptVerdict: a FAILED job whose exit status is one the batch scripts
// keep for their own verdicts. The scripts end with one only when they
// decided it, and never with a status of 128 or more (stages.ScriptExit:
// a payload's status in 64–79 or of 128 or more is reported as 1), so no
// Slurm's reading of a status the policy chose is one: sacct before 25.11
// shows 128+N as N.
func scriptVerdict(j slurm.JobInfo) bool {
	return j.State.Failure == slurm.FailureExitCode && stages.ReservedExit(j.ExitCode.Code) && j.ExitCode.Signal == 0
}

// plantedOutput is the verdict on a stage output that is not a regular
// file the job could open, or nil. Eval's output is reachable by the
// policy only without isolation (the train container does not bind
// eval/): with isolation it is a breach.
func (v view) plantedOutput(stage stages.Stage, o Output) *Verdict {
	what := ""
	switch {
	case !o.File.Exists:
		return nil
	case !o.File.Regular():
		what = "a " + o.File.Type + ", not a regular file"
	case o.Unopenable:
		// The honest job writes its output 0600 and leaves it so.
		what = "a regular file that cannot be opened for reading and writing"
	case o.Replaced:
		// Outputs are read only after their job ended, and the honest job
		// never replaces its out.log.
		what = "a file replaced while it was read"
	default:
		return nil
	}
	return v.plantedVerdict(stage, fmt.Sprintf("the %s output %s is %s", stage, o.Path, what))
}

// plantedVerdict: a planted author or train output is the policy's; eval's
// is a breach of isolation, or, without it, the policy's.
func (v view) plantedVerdict(stage stages.Stage, detail string) *Verdict {
	if stage == stages.Eval && v.f.Isolated {
		return fail(IntegrityViolation, stages.Eval, ReasonEvalOutputTampered, detail).tampered()
	}
	return fail(PolicyFailure, stage, ReasonPlantedOutput, detail).tampered()
}

// recordRejected is the verdict on a stage's rejected record: the
// author's and train's are the policy's (anything but a missing record
// is tampering), eval's a forgery (a missing one: the evaluator died).
func recordRejected(stage stages.Stage, err error) *Verdict {
	reason := record.ReasonOf(err)
	if stage == stages.Eval {
		if reason == record.ReasonMissingRecord {
			return fail(InfraFailure, stages.Eval, string(reason), err.Error())
		}
		return fail(IntegrityViolation, stages.Eval, string(reason), err.Error()).tampered()
	}
	v := fail(PolicyFailure, stage, string(reason), err.Error())
	if reason != record.ReasonMissingRecord {
		v.tampered()
	}
	return v
}

// evalFilesModified is the verdict on eval's directory or output when
// they are not as the tool and the eval job leave them: the directory a
// directory its owner can write, the output (if any) a regular file its
// owner can read and write. slurmstepd cannot open an output it may not
// write, and the job fails before its script runs.
func (v view) evalFilesModified(ef *EvalFiles) *Verdict {
	switch {
	case !ef.Dir.Exists:
		return v.plantedVerdict(stages.Eval, fmt.Sprintf("eval's directory %s is gone", ef.DirPath))
	case ef.Dir.Type != "directory":
		return v.plantedVerdict(stages.Eval, fmt.Sprintf("eval's directory %s is a %s", ef.DirPath, ef.Dir.Type))
	case ef.Dir.Perm&0o700 != 0o700:
		return v.plantedVerdict(stages.Eval, fmt.Sprintf("eval's directory %s has mode %04o: its owner cannot write it (the tool makes it 0700)", ef.DirPath, ef.Dir.Perm))
	case !ef.Out.Exists:
		return nil
	case !ef.Out.Regular():
		return v.plantedVerdict(stages.Eval, fmt.Sprintf("the eval output %s is a %s, not a regular file", ef.OutPath, ef.Out.Type))
	case ef.Out.Perm&0o600 != 0o600:
		return v.plantedVerdict(stages.Eval, fmt.Sprintf("the eval output %s has mode %04o: its owner cannot write it (the eval job writes it 0600)", ef.OutPath, ef.Out.Perm))
	}
	return nil
}
