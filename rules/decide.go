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

// Who is who could have caused a failure: the column of the README's
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
	// ID names the rule in outcomes (Verdict.Rule) and in the README.
	ID  string
	Who Who
	// Match returns the verdict, or nil when the rule does not apply.
	Match func(*decider) *Verdict
}

// Decide is the attribution rule: from the facts the engine gathered, the
// episode's outcome (a Verdict), or the facts still needed, or the
// engine's next step. It does no I/O and keeps no state.
func Decide(f *Facts) Decision { return decide(f, Table) }

func decide(f *Facts, table []Rule) Decision {
	d := &decider{f: f}
	for _, r := range table {
		v := r.Match(d)
		if d.need != 0 {
			return Decision{Need: d.need}
		}
		if d.pending {
			// Slurm has not yet reported what the rule needs (sacct lags).
			return Decision{AuthorVerified: d.verified, EvalOutputChecked: d.evalChecked, Waits: d.waits}
		}
		if v != nil {
			v.Rule = r.ID
			if !f.Isolated && v.Kind == IntegrityViolation && r.Who == Nobody {
				// Without isolation the policy's code has the user's
				// Slurm rights and files: what only a deliberate act
				// explains is its doing, not a free mask.
				v.Kind, v.Tampering = PolicyFailure, true
				v.Detail += "; without isolation the policy's code can do this"
			}
			v.Retryable = retryable(v)
			if v.Train == nil && d.authorRecord() != nil {
				// Train's own account goes with every outcome once it has
				// ended (its train_reward), whichever rule decided.
				o, ok := f.Outputs[stages.Train]
				if _, ended := d.ended(stages.Train); ended && !ok {
					return Decision{Need: NeedOutputTrain}
				}
				if ok && o.RecordErr == nil {
					v.Train, _ = o.Record.(*record.Train)
				}
			}
			return Decision{Verdict: v, AuthorVerified: d.verified, Waits: d.waits}
		}
	}
	dec := d.progress()
	if d.need != 0 {
		return Decision{Need: d.need}
	}
	dec.AuthorVerified, dec.EvalOutputChecked, dec.Waits = d.verified, d.evalChecked, d.waits
	return dec
}

// decider is one run of Decide over the facts.
type decider struct {
	f           *Facts
	need        Need
	waits       []string
	verified    *record.Author
	evalChecked bool
	// pending: a rule cannot decide until Slurm reports more.
	pending bool
}

// job is stage's job; ok is false when the stage was not submitted.
func (d *decider) job(stage string) (slurm.JobInfo, bool) {
	j, ok := d.f.Jobs[stage]
	return j, ok && j.ID != ""
}

// waited keeps the wait key going and says how long it has lasted.
func (d *decider) waited(key string) time.Duration {
	if !slices.Contains(d.waits, key) {
		d.waits = append(d.waits, key)
	}
	return d.f.Waited[key]
}

// ended reports that stage's job has ended for good: terminal, and not a
// node failure, preemption or boot failure that Slurm may still requeue.
func (d *decider) ended(stage string) (slurm.JobInfo, bool) {
	j, ok := d.job(stage)
	if !ok || !j.State.Terminal() {
		return j, false
	}
	switch j.State.Failure {
	case slurm.FailureNodeFailure, slurm.FailurePreempted, slurm.FailureBootFailure:
		if stage != stages.Author && d.f.Requeues && d.f.CancelRequested == "" && d.waited("requeue-"+j.ID) < RequeueGrace {
			return j, false
		}
	}
	return j, true
}

// output is stage's output, asking for it when not gathered.
func (d *decider) output(stage string) (Output, bool) {
	o, ok := d.f.Outputs[stage]
	if !ok {
		d.need |= NeedOutput(stage)
	}
	return o, ok
}

// authorRecord is the author's verified record: kept by the ledger, or
// verified by this run of the author rules.
func (d *decider) authorRecord() *record.Author {
	if d.f.Author != nil {
		return d.f.Author
	}
	return d.verified
}

// trainRecord is train's record when train completed and its record was
// read and accepted; nil otherwise (the train rules decided already).
func (d *decider) trainRecord() *record.Train {
	if d.authorRecord() == nil {
		return nil
	}
	t, ended := d.ended(stages.Train)
	if !ended || t.State.Class != slurm.Succeeded {
		return nil
	}
	o, ok := d.output(stages.Train)
	if !ok || o.RecordErr != nil || !o.File.Regular() || o.Unopenable || o.Replaced {
		return nil
	}
	tr, _ := o.Record.(*record.Train)
	if tr == nil || tr.Status.PolicyFailure() {
		return nil
	}
	return tr
}

func fail(k Kind, stage, reason, detail string) *Verdict {
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

// progress is the engine's next step when no rule decided.
func (d *decider) progress() Decision {
	f := d.f
	if !f.Staged {
		return Decision{Next: Restage}
	}
	if _, ok := d.job(stages.Author); !ok {
		return Decision{Next: SubmitStage, Stage: stages.Author}
	}
	if _, ended := d.ended(stages.Author); !ended || d.authorRecord() == nil {
		return Decision{}
	}
	if _, ok := d.job(stages.Train); !ok {
		return Decision{Next: SubmitStage, Stage: stages.Train}
	}
	if _, ok := d.job(stages.Eval); !ok && f.CancelRequested == "" {
		if t, ended := d.ended(stages.Train); !ended || t.State.Class == slurm.Succeeded {
			return Decision{Next: SubmitStage, Stage: stages.Eval}
		}
	}
	return Decision{}
}

// live reports a submitted job that has not ended.
func (d *decider) live() bool {
	for _, s := range stages.All {
		if _, ok := d.job(s); ok {
			if _, ended := d.ended(s); !ended {
				return true
			}
		}
	}
	return false
}

// firstUnfinished names the first stage that did not complete.
func (d *decider) firstUnfinished() string {
	for _, s := range stages.All {
		j, ok := d.job(s)
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
func (d *decider) cancelled(stage string, j slurm.JobInfo) *Verdict {
	f := d.f
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
		d.need |= NeedUID
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
func (d *decider) verdictFailed(stage string, j slurm.JobInfo) *Verdict {
	switch j.ExitCode.Code {
	case stages.ExitNoGPU:
		return fail(InfraFailure, stage, ReasonNoGPU,
			fmt.Sprintf("%s job %s found no GPU where Slurm gave it one (exit %d, node %s)", stage, j.ID, stages.ExitNoGPU, j.NodeList))
	case stages.ExitPolicyEndpoint:
		return fail(InfraFailure, stage, ReasonPolicyEndpointFailed,
			fmt.Sprintf("%s job %s: the policy's endpoint failed (exit %d): no model call succeeded, or the last one failed; see nemorl-slurm logs --stage author", stage, j.ID, stages.ExitPolicyEndpoint))
	case stages.ExitIsolation:
		out, ok := d.output(stage)
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
			detail += "; see nemorl-slurm logs --stage " + stage + " for each finding and its cause"
		}
		return fail(InfraFailure, stage, ReasonIsolationBreach, detail)
	}
	return fail(InfraFailure, stage, ReasonScriptRefused,
		fmt.Sprintf("%s job %s: its batch script refused to start the payload (exit %s); see nemorl-slurm logs --stage %s", stage, j.ID, j.ExitCode.Raw, stage))
}

// jobFailed is the outcome of a job Slurm ended for a reason of the
// cluster's, named after Slurm's account of it.
func jobFailed(stage string, j slurm.JobInfo) *Verdict {
	reason := string(j.State.Failure)
	if reason == "" {
		reason = "job_" + j.State.Class.String()
	}
	return fail(InfraFailure, stage, reason, fmt.Sprintf("%s job %s ended %s, exit code %s", stage, j.ID, j.State.Raw, j.ExitCode.Raw))
}

// scriptVerdict: a FAILED job whose exit status is one the batch scripts
// keep for their own verdicts (the payload's are reported as 1).
func scriptVerdict(j slurm.JobInfo) bool {
	return j.State.Failure == slurm.FailureExitCode && stages.ReservedExit(j.ExitCode.Code) && j.ExitCode.Signal == 0
}

// plantedOutput is the verdict on a stage output that is not a regular
// file the job could open, or nil. Eval's output is reachable by the
// policy only without isolation (the train container does not bind
// eval/): with isolation it is a breach.
func (d *decider) plantedOutput(stage string, o Output) *Verdict {
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
	return d.plantedVerdict(stage, fmt.Sprintf("the %s output %s is %s", stage, o.Path, what))
}

// plantedVerdict: a planted author or train output is the policy's; eval's
// is a breach of isolation, or, without it, the policy's.
func (d *decider) plantedVerdict(stage, detail string) *Verdict {
	if stage == stages.Eval && d.f.Isolated {
		return fail(IntegrityViolation, stages.Eval, ReasonEvalOutputTampered, detail).tampered()
	}
	return fail(PolicyFailure, stage, ReasonPlantedOutput, detail).tampered()
}

// recordRejected is the verdict on a stage's rejected record: the
// author's and train's are the policy's (anything but a missing record
// is tampering), eval's a forgery (a missing one: the evaluator died).
func recordRejected(stage string, err error) *Verdict {
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
func (d *decider) evalFilesModified(ef *EvalFiles) *Verdict {
	switch {
	case !ef.Dir.Exists:
		return d.plantedVerdict(stages.Eval, fmt.Sprintf("eval's directory %s is gone", ef.DirPath))
	case ef.Dir.Type != "directory":
		return d.plantedVerdict(stages.Eval, fmt.Sprintf("eval's directory %s is a %s", ef.DirPath, ef.Dir.Type))
	case ef.Dir.Perm&0o700 != 0o700:
		return d.plantedVerdict(stages.Eval, fmt.Sprintf("eval's directory %s has mode %04o: its owner cannot write it (the tool makes it 0700)", ef.DirPath, ef.Dir.Perm))
	case !ef.Out.Exists:
		return nil
	case !ef.Out.Regular():
		return d.plantedVerdict(stages.Eval, fmt.Sprintf("the eval output %s is a %s, not a regular file", ef.OutPath, ef.Out.Type))
	case ef.Out.Perm&0o600 != 0o600:
		return d.plantedVerdict(stages.Eval, fmt.Sprintf("the eval output %s has mode %04o: its owner cannot write it (the eval job writes it 0600)", ef.OutPath, ef.Out.Perm))
	}
	return nil
}
