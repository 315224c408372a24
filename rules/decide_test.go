package rules

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nemorl/nemorl-slurm/record"
	"github.com/nemorl/nemorl-slurm/slurm"
	"github.com/nemorl/nemorl-slurm/stages"
)

const (
	uid        = 1001
	weightsSHA = "1111111111111111111111111111111111111111111111111111111111111111"
	otherSHA   = "9999999999999999999999999999999999999999999999999999999999999999"
)

var t0 = time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)

func job(id, state, exit string, start, end time.Time) slurm.JobInfo {
	return slurm.JobInfo{ID: id, State: slurm.ParseState(state, ""), ExitCode: slurm.ParseExitCode(exit), Start: start, End: end, Source: slurm.SourceSacct}
}

var patch = []byte("diff --git a/recipe.yaml b/recipe.yaml\n--- a/recipe.yaml\n+++ b/recipe.yaml\n@@ -1 +1 @@\n-a: 1\n+a: 2\n")

func authorRecordOf(p []byte) *record.Author {
	sum := sha256.Sum256(p)
	return &record.Author{PatchSHA256: hex.EncodeToString(sum[:]), PatchBytes: int64(len(p))}
}

func goodEval(jobID string) *record.Eval {
	return &record.Eval{Reward: 0.25, AIME25Exact: 0.25, AIME25AvgAt8: 0.25, Completed: 1, SlurmJobID: jobID, WeightsSHA256: weightsSHA,
		Problems: record.Problems, SamplesPerProblem: record.SamplesPerProblem, Correct: 60, PatchSHA256: authorRecordOf(patch).PatchSHA256}
}

// contaminatedEval is the eval record of a patch the contamination check
// flagged: not scored, the evidence with it.
func contaminatedEval(jobID string) *record.Eval {
	ev := goodEval(jobID)
	ev.Reward, ev.AIME25Exact, ev.AIME25AvgAt8, ev.Correct = 0, 0, 0, 0
	ev.Contaminated, ev.Contamination = true, "the eval problems are in the patch: problem 7: 100% of its 10-grams in added lines 12-19 of the patch"
	return ev
}

func out(stage stages.Stage, r record.Record, ctime time.Time) Output {
	return Output{Path: "/w/ep/" + stages.Output(stage), File: File{Exists: true, Type: "regular file", Size: 100, Ctime: ctime}, Record: r}
}

func rejected(stage stages.Stage, reason record.Reason) error {
	return &record.Rejection{Stage: record.Stage(stage), Reason: reason, Offset: -1, Detail: string(reason)}
}

// healthy is the facts of an honest episode on a healthy cluster, every
// fact gathered: it scores.
func healthy(isolated bool) *Facts {
	aEnd, tEnd := t0.Add(time.Hour), t0.Add(3*time.Hour)
	eEnd := t0.Add(4 * time.Hour)
	return &Facts{
		Episode: "ep", Isolated: isolated, Requeues: true, Staged: true, UID: uid, UIDKnown: true,
		Jobs: map[stages.Stage]slurm.JobInfo{
			stages.Author: job("1", "COMPLETED", "0:0", t0, aEnd),
			stages.Train:  job("2", "COMPLETED", "0:0", aEnd.Add(time.Minute), tEnd),
			stages.Eval:   job("3", "COMPLETED", "0:0", tEnd.Add(time.Minute), eEnd),
		},
		TimeLimits: map[stages.Stage]time.Duration{stages.Author: time.Hour, stages.Train: 2 * time.Hour, stages.Eval: time.Hour},
		Submit:     map[stages.Stage]Submit{}, Waited: map[string]time.Duration{},
		Outputs: map[stages.Stage]Output{
			stages.Author: out(stages.Author, authorRecordOf(patch), aEnd),
			stages.Train:  out(stages.Train, &record.Train{Status: record.StatusOK, WeightsSHA256: weightsSHA, TrainReward: 0.3}, tEnd),
			stages.Eval:   out(stages.Eval, goodEval("3"), eEnd.Add(-30*time.Second)),
		},
		Patch:     &Patch{Path: "/w/ep/author/change.diff", File: File{Exists: true, Type: "regular file", Size: int64(len(patch))}, Data: patch},
		EvalFiles: &EvalFiles{DirPath: "/w/ep/eval", OutPath: "/w/ep/eval/out.log", Dir: File{Exists: true, Type: "directory", Perm: 0o700}, Out: File{Exists: true, Type: "regular file", Perm: 0o600}},
		Queue:     map[stages.Stage]slurm.JobInfo{},
	}
}

func decideAll(t *testing.T, f *Facts) Decision {
	t.Helper()
	dec := Decide(f)
	if dec.Need != 0 {
		t.Fatalf("Decide asked for %b with every fact gathered", dec.Need)
	}
	return dec
}

// One case per row of the table (and of the README's): each starts from
// the healthy episode and changes what the row is about.
func TestTableRows(t *testing.T) {
	type w struct {
		kind      Kind
		stage     stages.Stage
		reason    string
		tampering bool
	}
	policy := func(stage stages.Stage, reason string, tampering bool) w {
		return w{PolicyFailure, stage, reason, tampering}
	}
	infra := func(stage stages.Stage, reason string) w { return w{InfraFailure, stage, reason, false} }
	integrity := func(stage stages.Stage, reason string) w { return w{IntegrityViolation, stage, reason, true} }
	set := func(f *Facts, stage stages.Stage, state, exit string) {
		j := f.Jobs[stage]
		j.State, j.ExitCode = slurm.ParseState(state, ""), slurm.ParseExitCode(exit)
		f.Jobs[stage] = j
	}
	setOut := func(f *Facts, stage stages.Stage, r record.Record, err error) {
		o := f.Outputs[stage]
		o.Record, o.RecordErr = r, err
		f.Outputs[stage] = o
	}
	cases := []struct {
		rule     string
		name     string
		isolated bool
		mutate   func(f *Facts)
		want     w
	}{
		{"ledger-seal", "entry edited", true, func(f *Facts) { f.SealBroken = "does not match its seal" }, integrity("", ReasonLedgerTampered)},
		{"cancel-on-record", "deadline", true, func(f *Facts) {
			f.CancelRequested = ReasonDeadline
			set(f, stages.Eval, "CANCELLED by 1001", "0:15")
		}, infra(stages.Eval, ReasonDeadline)},
		{"submit-refused", "bad partition", true, func(f *Facts) {
			delete(f.Jobs, stages.Eval)
			f.Submit[stages.Eval] = Submit{Refused: "invalid partition"}
		}, infra(stages.Eval, ReasonSubmitRefused)},
		{"impostor-job", "impostor eval", true, func(f *Facts) {
			delete(f.Jobs, stages.Eval)
			f.Submit[stages.Eval] = Submit{Impostor: "job 9 runs another script"}
		}, integrity(stages.Eval, ReasonImpostorJob)},
		{"impostor-job", "impostor eval without isolation", false, func(f *Facts) {
			delete(f.Jobs, stages.Eval)
			f.Submit[stages.Eval] = Submit{Impostor: "job 9 runs another script"}
		}, policy(stages.Eval, ReasonImpostorJob, true)},
		{"job-held", "eval held by the user", false, func(f *Facts) {
			set(f, stages.Eval, "PENDING", "0:0")
			f.Queue[stages.Eval] = slurm.JobInfo{ID: "3", State: slurm.ParseState("PENDING", ""), Reason: "JobHeldUser"}
		}, policy(stages.Eval, ReasonJobHeld, true)},
		{"job-held", "eval held, seen by the poll's squeue", false, func(f *Facts) {
			set(f, stages.Eval, "PENDING", "0:0")
			j := f.Jobs[stages.Eval]
			j.Reason, j.Source = "JobHeldUser", slurm.SourceSqueue
			f.Jobs[stages.Eval] = j
		}, policy(stages.Eval, ReasonJobHeld, true)},
		{"job-modified", "eval's time limit cut", false, func(f *Facts) {
			j := f.Jobs[stages.Eval]
			j.TimeLimit = time.Minute
			f.Jobs[stages.Eval] = j
			set(f, stages.Eval, "TIMEOUT", "0:0")
		}, policy(stages.Eval, ReasonJobModified, true)},
		{"task-withdrawn", "a sibling's code scancelled the author's pending task, no isolation", false, withdrawnAuthor,
			policy(stages.Author, ReasonForeignCancel, true)},
		{"task-withdrawn", "the author's pending task withdrawn under isolation: an administrator", true, withdrawnAuthor,
			infra(stages.Author, ReasonCancelled)},
		{"task-withdrawn", "a sibling's code scancelled the train task, no isolation", false, func(f *Facts) { withdrawnTask(f, stages.Train) },
			policy(stages.Train, ReasonForeignCancel, true)},
		{"task-withdrawn", "the eval task withdrawn after train completed, under isolation", true, func(f *Facts) { withdrawnTask(f, stages.Eval) },
			infra(stages.Eval, ReasonCancelled)},
		{"train-failed-record-ok", "the eval task withdrawn by its dependency on a failed train task: train's end decides", false, func(f *Facts) {
			withdrawnTask(f, stages.Eval)
			set(f, stages.Train, "FAILED", "1:0")
		}, policy(stages.Train, ReasonTrainFailed, false)},
		{"cancel-on-record", "the tool cancelled the author's pending task: no record of it remains", false, func(f *Facts) {
			withdrawnAuthor(f)
			f.CancelRequested = ReasonCancelled
		}, infra(stages.Author, ReasonCancelled)},
		{"job-lost", "eval forgotten", true, func(f *Facts) {
			f.Jobs[stages.Eval] = slurm.JobInfo{ID: "3", State: slurm.State{ByUID: -1}, Source: slurm.SourceNone}
			f.Waited["unknown-3"] = JobLostAfter + time.Second
		}, infra(stages.Eval, ReasonJobLost)},
		{"launch-held", "train held after its launch failed", true, func(f *Facts) {
			j := f.Jobs[stages.Train]
			j.State, j.Reason, j.Source = slurm.ParseState("PENDING", ""), slurm.ReasonLaunchHeld, slurm.SourceSqueue
			f.Jobs[stages.Train] = j
			set(f, stages.Eval, "PENDING", "0:0")
		}, infra(stages.Train, string(slurm.FailureLaunch))},
		{"launch-held", "eval held after its launch failed: sacct says JobHeldUser, squeue tells", false, func(f *Facts) {
			set(f, stages.Eval, "PENDING", "0:0")
			j := f.Jobs[stages.Eval]
			j.Reason = "JobHeldUser"
			f.Jobs[stages.Eval] = j
			f.Queue[stages.Eval] = slurm.JobInfo{ID: "3", State: slurm.ParseState("PENDING", ""), Reason: "(" + slurm.ReasonLaunchHeld + ")", Source: slurm.SourceSqueue}
		}, infra(stages.Eval, string(slurm.FailureLaunch))},
		{"author-foreign-record", "train record in the author output", true, func(f *Facts) {
			f.Outputs[stages.Author] = Output{File: File{Exists: true, Type: "regular file"}, RecordErr: rejected(stages.Author, record.ReasonForeignRecord)}
		}, policy(stages.Author, string(record.ReasonForeignRecord), true)},
		{"author-planted-output", "author out.log a fifo", true, func(f *Facts) {
			f.Outputs[stages.Author] = Output{File: File{Exists: true, Type: "fifo"}}
		}, policy(stages.Author, ReasonPlantedOutput, true)},
		{"author-cancelled", "author cancelled by the user's uid", true, func(f *Facts) {
			set(f, stages.Author, "CANCELLED by 1001", "0:15")
		}, policy(stages.Author, ReasonForeignCancel, true)},
		{"author-cancelled", "author cancelled by an administrator", true, func(f *Facts) {
			set(f, stages.Author, "CANCELLED by 0", "0:15")
		}, infra(stages.Author, ReasonCancelled)},
		{"author-script-verdict", "policy endpoint failed", true, func(f *Facts) { set(f, stages.Author, "FAILED", "75:0") }, infra(stages.Author, ReasonPolicyEndpointFailed)},
		{"author-failed", "Claude Code crashed", true, func(f *Facts) { set(f, stages.Author, "FAILED", "1:0") }, policy(stages.Author, ReasonAuthorFailed, false)},
		{"author-slurm-failure", "author's node failed", true, func(f *Facts) { set(f, stages.Author, "NODE_FAIL", "0:0") }, infra(stages.Author, "node_failure")},
		{"author-record", "no author record", true, func(f *Facts) {
			setOut(f, stages.Author, nil, rejected(stages.Author, record.ReasonMissingRecord))
		}, policy(stages.Author, "missing_record", false)},
		{"bad-patch", "patch a fifo", true, func(f *Facts) { f.Patch.File = File{Exists: true, Type: "fifo"} }, policy(stages.Author, ReasonBadPatch, true)},
		{"patch-mismatch", "patch differs", true, func(f *Facts) {
			f.Patch.Data = append([]byte("X"), patch[1:]...)
		}, policy(stages.Author, string(record.ReasonPatchMismatch), true)},
		{"no-patch", "empty patch", true, func(f *Facts) {
			setOut(f, stages.Author, authorRecordOf(nil), nil)
			f.Patch = &Patch{}
		}, policy(stages.Author, ReasonNoPatch, false)},
		{"train-cancelled", "train cancelled by the user's uid", true, func(f *Facts) { set(f, stages.Train, "CANCELLED by 1001", "0:15") }, policy(stages.Train, ReasonForeignCancel, true)},
		{"train-timeout", "train ran into its limit", true, func(f *Facts) { set(f, stages.Train, "TIMEOUT", "0:0") }, policy(stages.Train, ReasonTrainTimeout, false)},
		{"train-out-of-memory", "train OOM", true, func(f *Facts) { set(f, stages.Train, "OUT_OF_MEMORY", "0:125") }, policy(stages.Train, ReasonTrainOutOfMemory, false)},
		{"train-output-bound", "weights past the architecture's size", true, func(f *Facts) { set(f, stages.Train, "FAILED", "71:0") }, policy(stages.Train, ReasonOutputTooLarge, false)},
		{"train-script-verdict", "no GPU on the train node", true, func(f *Facts) { set(f, stages.Train, "FAILED", "70:0") }, infra(stages.Train, ReasonNoGPU)},
		{"train-slurm-failure", "train preempted", true, func(f *Facts) { f.Requeues = false; set(f, stages.Train, "PREEMPTED", "0:0") }, infra(stages.Train, "preempted")},
		{"train-slurm-failure", "train killed by Slurm before its script ran (lab sacct)", true, func(f *Facts) {
			// No record: the script never ran to write one.
			f.Jobs[stages.Train] = labSacctJob(t, "../slurm/testdata/lab/sacct_killed_before_script.txt", "5712")
			setOut(f, stages.Train, nil, rejected(stages.Train, record.ReasonMissingRecord))
		}, infra(stages.Train, string(slurm.FailureLaunch))},
		{"train-record", "train's own user killed its script (lab sacct)", true, func(f *Facts) {
			f.Jobs[stages.Train] = labSacctJob(t, "../slurm/testdata/lab/sacct_killed_before_script.txt", "9951")
			setOut(f, stages.Train, nil, rejected(stages.Train, record.ReasonMissingRecord))
		}, policy(stages.Train, string(record.ReasonMissingRecord), false)},
		{"train-planted-output", "train out.log a symlink", true, func(f *Facts) {
			f.Outputs[stages.Train] = Output{File: File{Exists: true, Type: "symbolic link"}}
		}, policy(stages.Train, ReasonPlantedOutput, true)},
		{"train-record", "two train records", true, func(f *Facts) {
			setOut(f, stages.Train, nil, rejected(stages.Train, record.ReasonDuplicateRecord))
		}, policy(stages.Train, "duplicate_record", true)},
		{"train-status", "trainer failed", true, func(f *Facts) {
			set(f, stages.Train, "FAILED", "1:0")
			setOut(f, stages.Train, &record.Train{Status: record.StatusTrainerFailed}, nil)
		}, policy(stages.Train, ReasonTrainFailed, false)},
		{"train-status", "patch does not apply", true, func(f *Facts) {
			setOut(f, stages.Train, &record.Train{Status: record.StatusPatchFailed}, nil)
		}, policy(stages.Train, ReasonPatchRejected, false)},
		{"train-failed-record-ok", "failed job, ok record", true, func(f *Facts) { set(f, stages.Train, "FAILED", "1:0") }, policy(stages.Train, ReasonTrainFailed, false)},
		{"eval-files", "eval dir read-only (no isolation)", false, func(f *Facts) {
			set(f, stages.Eval, "FAILED", "0:53")
			f.EvalFiles.Dir.Perm = 0o500
		}, policy(stages.Eval, ReasonPlantedOutput, true)},
		{"eval-files", "eval out.log read-only (no isolation)", false, func(f *Facts) {
			set(f, stages.Eval, "FAILED", "0:53")
			f.EvalFiles.Out.Perm = 0o400
		}, policy(stages.Eval, ReasonPlantedOutput, true)},
		{"eval-files", "eval out.log a fifo (isolated)", true, func(f *Facts) {
			set(f, stages.Eval, "PENDING", "0:0")
			f.EvalFiles.Out.Type = "fifo"
		}, integrity(stages.Eval, ReasonEvalOutputTampered)},
		{"eval-cancelled", "eval cancelled by an administrator", true, func(f *Facts) { set(f, stages.Eval, "CANCELLED by 0", "0:15") }, infra(stages.Eval, ReasonCancelled)},
		{"eval-slurm-failure", "eval's node failed", true, func(f *Facts) { f.Requeues = false; set(f, stages.Eval, "NODE_FAIL", "0:0") }, infra(stages.Eval, "node_failure")},
		{"eval-inputs-tampered", "eval image differs", true, func(f *Facts) { set(f, stages.Eval, "FAILED", "65:0") }, integrity(stages.Eval, ReasonEvalInputsTampered)},
		{"eval-output-redirected", "eval stdout not its out.log", true, func(f *Facts) { set(f, stages.Eval, "FAILED", "67:0") }, integrity(stages.Eval, ReasonEvalOutputRedirected)},
		{"eval-bad-weights", "weights rejected", true, func(f *Facts) { set(f, stages.Eval, "FAILED", "68:0") }, policy(stages.Eval, ReasonBadWeights, false)},
		{"eval-script-verdict", "no GPU on the eval node", true, func(f *Facts) { set(f, stages.Eval, "FAILED", "70:0") }, infra(stages.Eval, ReasonNoGPU)},
		{"eval-rollouts-rejected", "rollouts rejected", true, func(f *Facts) { set(f, stages.Eval, "FAILED", "4:0") }, infra(stages.Eval, ReasonRolloutsRejected)},
		{"eval-exit-code", "vLLM never ready", true, func(f *Facts) { set(f, stages.Eval, "FAILED", "1:0") }, infra(stages.Eval, "exit_code")},
		{"times-unknown", "sacct never gave eval's start", true, func(f *Facts) {
			j := f.Jobs[stages.Eval]
			j.Start = time.Time{}
			f.Jobs[stages.Eval] = j
			f.Waited["times"] = TimesUnknownAfter + time.Second
		}, infra(stages.Eval, ReasonTimesUnknown)},
		{"eval-before-train-end", "eval started early", true, func(f *Facts) {
			j := f.Jobs[stages.Eval]
			j.Start = f.Jobs[stages.Train].End.Add(-time.Minute)
			f.Jobs[stages.Eval] = j
		}, integrity(stages.Eval, ReasonEvalBeforeTrainEnd)},
		{"eval-output-planted", "eval out.log replaced while read", true, func(f *Facts) {
			o := f.Outputs[stages.Eval]
			o.Replaced, o.Record = true, nil
			f.Outputs[stages.Eval] = o
		}, integrity(stages.Eval, ReasonEvalOutputTampered)},
		{"eval-output-gone", "eval out.log gone", true, func(f *Facts) {
			f.Outputs[stages.Eval] = Output{RecordErr: rejected(stages.Eval, record.ReasonMissingRecord)}
		}, integrity(stages.Eval, ReasonEvalOutputTampered)},
		{"eval-output-changed", "eval out.log rewritten after the job", true, func(f *Facts) {
			o := f.Outputs[stages.Eval]
			o.File.Ctime = f.Jobs[stages.Eval].End.Add(time.Minute)
			f.Outputs[stages.Eval] = o
		}, integrity(stages.Eval, ReasonEvalOutputTampered)},
		{"eval-output-changed", "eval out.log rewritten, no isolation", false, func(f *Facts) {
			o := f.Outputs[stages.Eval]
			o.File.Ctime = f.Jobs[stages.Eval].End.Add(time.Minute)
			f.Outputs[stages.Eval] = o
		}, policy(stages.Eval, ReasonEvalOutputTampered, true)},
		{"eval-record", "no eval record (the evaluator died)", true, func(f *Facts) {
			setOut(f, stages.Eval, nil, rejected(stages.Eval, record.ReasonMissingRecord))
		}, infra(stages.Eval, "missing_record")},
		{"eval-record", "eval record of another job", true, func(f *Facts) { setOut(f, stages.Eval, goodEval("99"), nil) }, integrity(stages.Eval, string(record.ReasonJobIDMismatch))},
		{"weights-mismatch", "train record names other weights", true, func(f *Facts) {
			ev := goodEval("3")
			ev.WeightsSHA256 = otherSHA
			setOut(f, stages.Eval, ev, nil)
		}, policy(stages.Train, string(record.ReasonWeightsMismatch), true)},
		{"eval-checked-patch", "eval checked another patch", true, func(f *Facts) {
			ev := goodEval("3")
			ev.PatchSHA256 = otherSHA
			setOut(f, stages.Eval, ev, nil)
		}, integrity(stages.Eval, string(record.ReasonCheckedPatchMismatch))},
		{"eval-checked-patch", "eval checked another patch, no isolation", false, func(f *Facts) {
			ev := contaminatedEval("3")
			ev.PatchSHA256 = otherSHA
			setOut(f, stages.Eval, ev, nil)
		}, policy(stages.Eval, string(record.ReasonCheckedPatchMismatch), true)},
		{"eval-contaminated", "the patch holds the eval problems", true, func(f *Facts) { setOut(f, stages.Eval, contaminatedEval("3"), nil) },
			policy(stages.Eval, ReasonContaminated, true)},
		{"eval-contaminated", "the patch holds the eval problems, no isolation", false, func(f *Facts) { setOut(f, stages.Eval, contaminatedEval("3"), nil) },
			policy(stages.Eval, ReasonContaminated, true)},
		{"eval-contaminated", "the patch carries data the check cannot read", true, func(f *Facts) {
			ev := contaminatedEval("3")
			ev.Contamination = record.EvidenceOpaque + "2,048 bytes of base64 that decode to nothing readable in NeMo-RL/x.py lines 3-40"
			setOut(f, stages.Eval, ev, nil)
		}, policy(stages.Eval, ReasonUnreadablePatch, false)},
		{"eval-contaminated", "the patch holds an archive the check cannot open", true, func(f *Facts) {
			ev := contaminatedEval("3")
			ev.Contamination = record.EvidenceUncheckable + "NeMo-RL/data.7z: a 7z archive"
			setOut(f, stages.Eval, ev, nil)
		}, policy(stages.Eval, ReasonUnreadablePatch, false)},
		{"scored", "honest", true, func(f *Facts) {}, w{Scored, "", "", false}},
		{"scored", "honest, no isolation", false, func(f *Facts) {}, w{Scored, "", "", false}},
	}
	covered := map[string]bool{}
	for _, c := range cases {
		t.Run(c.rule+"/"+c.name, func(t *testing.T) {
			f := healthy(c.isolated)
			c.mutate(f)
			dec := decideAll(t, f)
			v := dec.Verdict
			if v == nil {
				t.Fatalf("no verdict: %+v", dec)
			}
			if got := (w{v.Kind, v.Stage, v.Reason, v.Tampering}); got != c.want {
				t.Fatalf("%+v (rule %s), want %+v; detail: %s", got, v.Rule, c.want, v.Detail)
			}
			if v.Rule != c.rule {
				t.Errorf("decided by rule %s, want %s", v.Rule, c.rule)
			}
			checkVocabulary(t, v)
			covered[v.Rule] = true
		})
	}
	for _, r := range Rules() {
		if !covered[r.ID] {
			t.Errorf("rule %s has no case", r.ID)
		}
	}
}

func checkVocabulary(t *testing.T, v *Verdict) {
	t.Helper()
	if v.Kind == Scored {
		if v.Reason != "" {
			t.Errorf("scored with reason %q", v.Reason)
		}
		return
	}
	kinds, ok := Vocabulary[v.Reason]
	if !ok || !slices.Contains(kinds, v.Kind) {
		t.Errorf("reason %q with outcome %s is not in the vocabulary (%v)", v.Reason, v.Kind, kinds)
	}
}

// Rules is the README's table: every rule ID in the code is a row there,
// in the same order.
func TestREADMETable(t *testing.T) {
	b, err := readREADME()
	if err != nil {
		t.Skip(err)
	}
	_, b, _ = strings.Cut(b, "#### Attribution")
	b, _, _ = strings.Cut(b, "#### Retries")
	var ids []string
	for _, line := range strings.Split(b, "\n") {
		if strings.HasPrefix(line, "| `") {
			id, _, _ := strings.Cut(strings.TrimPrefix(line, "| `"), "`")
			if slices.ContainsFunc(Rules(), func(r Rule) bool { return r.ID == id }) {
				ids = append(ids, id)
			}
		}
	}
	var want []string
	for _, r := range Rules() {
		want = append(want, r.ID)
	}
	if !slices.Equal(ids, want) {
		t.Errorf("README's rule rows %v, want the table's order %v", ids, want)
	}
}

// gen makes random facts: rng picks everything the policy controls;
// cluster faults are added only when fault is set.
type gen struct{ r *rand.Rand }

func (g gen) pick(n int) int { return g.r.IntN(n) }

func (g gen) chance(p float64) bool { return g.r.Float64() < p }

// policyJob is a job end the policy's code can cause: its payload's exit
// status, any of 0–255, as its script reports it (stages.ScriptExit) and
// as any Slurm's sacct shows that (stages.SacctReadings: folded by 128
// before 25.11), a signal, its time limit, its memory, a cancel by the
// user's uid (without isolation; with it, the policy cannot reach Slurm).
func (g gen) policyJob(j slurm.JobInfo, isolated bool) slurm.JobInfo {
	states := []string{"COMPLETED", "FAILED", "TIMEOUT", "OUT_OF_MEMORY"}
	if !isolated {
		states = append(states, "CANCELLED by 1001")
	}
	st := states[g.pick(len(states))]
	exit := "0:0"
	if st == "FAILED" {
		code := stages.ScriptExit(stages.Train, 1+g.pick(255))
		readings := stages.SacctReadings(code)
		exit = fmt.Sprintf("%d:0", readings[g.pick(len(readings))])
		if g.chance(0.2) {
			exit = fmt.Sprintf("0:%d", 1+g.pick(31))
		}
	}
	j.State, j.ExitCode = slurm.ParseState(st, ""), slurm.ParseExitCode(exit)
	return j
}

func (g gen) policyOutput(stage stages.Stage, good record.Record, isolated bool) Output {
	o := Output{Path: "/w/ep/" + stages.Output(stage), File: File{Exists: true, Type: "regular file", Size: 100}}
	switch g.pick(6) {
	case 0:
		o.Record = good
	case 1:
		o.RecordErr = rejected(stage, record.Reasons[g.pick(len(record.Reasons))])
	case 2:
		o.File = File{Exists: true, Type: []string{"fifo", "symbolic link", "directory", "character special file"}[g.pick(4)]}
	case 3:
		o.File.Exists = false
		o.RecordErr = rejected(stage, record.ReasonMissingRecord)
	case 4:
		o.Unopenable, o.Replaced = g.chance(0.5), true
	default:
		o.Record = good
		if tr, ok := good.(*record.Train); ok {
			bad := *tr
			bad.Status = []record.TrainStatus{record.StatusOK, record.StatusTrainerFailed, record.StatusPatchFailed, record.StatusNoCheckpoint}[g.pick(4)]
			if g.chance(0.5) {
				bad.WeightsSHA256 = otherSHA
			}
			o.Record = &bad
		}
	}
	return o
}

// policyFacts are a healthy cluster's facts with everything the policy
// controls at random.
func (g gen) policyFacts(isolated bool) *Facts {
	f := healthy(isolated)
	f.Jobs[stages.Author] = g.policyJob(f.Jobs[stages.Author], isolated)
	f.Jobs[stages.Train] = g.policyJob(f.Jobs[stages.Train], isolated)
	if isolated && g.chance(0.05) {
		// Weights past the bound: the script's verdict on the payload's output.
		j := f.Jobs[stages.Train]
		j.State, j.ExitCode = slurm.ParseState("FAILED", ""), slurm.ParseExitCode("71:0")
		f.Jobs[stages.Train] = j
	}
	p := patch
	if g.chance(0.2) {
		p = nil
	}
	a := authorRecordOf(p)
	if g.chance(0.2) {
		a.PatchBytes = stages.MaxPatchBytes + int64(g.pick(10))
	}
	f.Outputs[stages.Author] = g.policyOutput(stages.Author, a, isolated)
	f.Patch = &Patch{Path: "/w/ep/author/change.diff", File: File{Exists: len(p) > 0, Type: "regular file", Size: int64(len(p))}, Data: p}
	switch g.pick(5) {
	case 0:
		f.Patch.File.Type = "fifo"
		f.Patch.Data = nil
	case 1:
		f.Patch.File.Size = 64 << 30
		f.Patch.Data = nil
	case 2:
		if len(p) > 0 {
			f.Patch.Data = append([]byte("X"), p[1:]...)
		}
	}
	f.Outputs[stages.Train] = g.policyOutput(stages.Train, &record.Train{Status: record.StatusOK, WeightsSHA256: weightsSHA}, isolated)
	// The trusted eval scores the weights it is given, or rejects them.
	switch g.pick(4) {
	case 0:
		f.Jobs[stages.Eval] = job("3", "FAILED", fmt.Sprintf("%d:0", []int{stages.ExitInputBad, stages.ExitWeightsRejected}[g.pick(2)]), f.Jobs[stages.Eval].Start, f.Jobs[stages.Eval].End)
	case 1:
		o := f.Outputs[stages.Eval]
		ev := goodEval("3")
		ev.WeightsSHA256 = otherSHA // train exported other weights than its record names
		o.Record = ev
		f.Outputs[stages.Eval] = o
	case 2:
		// The trusted check found the eval set in the policy's patch.
		o := f.Outputs[stages.Eval]
		o.Record = contaminatedEval("3")
		f.Outputs[stages.Eval] = o
	}
	// The eval record names the patch the author's record does, unless
	// the policy showed eval another (it reaches author/ without
	// isolation).
	if ev, ok := f.Outputs[stages.Eval].Record.(*record.Eval); ok {
		ev.PatchSHA256 = a.PatchSHA256
		if !isolated && g.chance(0.5) {
			ev.PatchSHA256 = otherSHA
		}
	}
	if !isolated {
		// Without isolation the train job also reaches Slurm and eval's files.
		if g.chance(0.2) {
			j := f.Jobs[stages.Eval]
			j.TimeLimit = time.Duration(1+g.pick(30)) * time.Minute
			j.State, j.ExitCode = slurm.ParseState([]string{"TIMEOUT", "COMPLETED", "RUNNING"}[g.pick(3)], ""), slurm.ParseExitCode("0:0")
			f.Jobs[stages.Eval] = j
		}
		if g.chance(0.2) {
			j := f.Jobs[stages.Eval]
			j.State = slurm.ParseState("PENDING", "")
			f.Jobs[stages.Eval] = j
			f.Queue[stages.Eval] = slurm.JobInfo{ID: "3", State: j.State, Reason: "JobHeldUser"}
		}
		if g.chance(0.2) {
			j := f.Jobs[stages.Eval]
			j.State, j.ExitCode = slurm.ParseState("FAILED", ""), slurm.ParseExitCode("0:53")
			f.Jobs[stages.Eval] = j
			if g.chance(0.5) {
				f.EvalFiles.Dir.Perm = fsPerm(g.pick(8) << 6)
			} else {
				f.EvalFiles.Out.Perm = fsPerm(g.pick(4) << 7)
			}
			if f.EvalFiles.Dir.Perm&0o700 == 0o700 && f.EvalFiles.Out.Perm&0o600 == 0o600 {
				f.EvalFiles.Out.Perm = 0o400
			}
		}
		if g.chance(0.1) {
			j := f.Jobs[stages.Eval]
			j.State, j.ExitCode = slurm.ParseState("CANCELLED by 1001", ""), slurm.ParseExitCode("0:15")
			f.Jobs[stages.Eval] = j
		}
	}
	return f
}

// settled reports whether every submitted job has ended (a verdict is
// due) in f.
func settled(f *Facts) bool {
	for _, j := range f.Jobs {
		if !j.State.Terminal() {
			return false
		}
	}
	return true
}

const propertyRuns = 200000

// Everything the policy controls at random, the cluster healthy: the
// outcome is the policy's (a score or its 0), never masked.
func TestPolicyNeverMasked(t *testing.T) {
	g := gen{rand.New(rand.NewPCG(1, 2))}
	kinds := map[string]int{}
	for i := range propertyRuns {
		isolated := i%2 == 0
		f := g.policyFacts(isolated)
		if err := neverMasked(Rules(), f); err != nil {
			t.Fatalf("run %d (isolated %v): %v\nfacts: %s", i, isolated, err, describe(f))
		}
		v := Decide(f).Verdict
		if v != nil {
			kinds[string(v.Kind)+"/"+v.Reason]++
		}
	}
	t.Logf("%d runs: %v", propertyRuns, kinds)
}

func neverMasked(table []Rule, f *Facts) error {
	dec := decide(f, table)
	if dec.Need != 0 {
		return fmt.Errorf("asked for %b with every fact gathered", dec.Need)
	}
	v := dec.Verdict
	if v == nil {
		if settled(f) || hasHold(f) {
			return errors.New("no verdict on an episode whose jobs all ended")
		}
		return nil
	}
	if v.Kind != Scored && v.Kind != PolicyFailure {
		return fmt.Errorf("masked: %s/%s by rule %s: %s", v.Kind, v.Reason, v.Rule, v.Detail)
	}
	if v.Kind == Scored && (v.Train == nil || v.Eval == nil || v.Eval.WeightsSHA256 != v.Train.WeightsSHA256 || v.Train.Status != record.StatusOK) {
		return fmt.Errorf("scored other weights than train's record names (rule %s)", v.Rule)
	}
	if v.Kind == Scored && v.Eval.Contaminated {
		return fmt.Errorf("scored a contaminated patch (rule %s)", v.Rule)
	}
	if a := f.Author; v.Kind == Scored && a != nil && v.Eval.PatchSHA256 != a.PatchSHA256 {
		return fmt.Errorf("scored after checking another patch than the author's (rule %s)", v.Rule)
	}
	if a := dec.AuthorVerified; v.Kind == Scored && a != nil && v.Eval.PatchSHA256 != a.PatchSHA256 {
		return fmt.Errorf("scored after checking another patch than the author's (rule %s)", v.Rule)
	}
	return nil
}

func hasHold(f *Facts) bool { _, ok := f.Queue[stages.Eval]; return ok }

// clusterFaults are an honest policy's facts with one fault of the
// cluster's or the operator's.
func (g gen) clusterFacts() *Facts {
	f := healthy(g.chance(0.5))
	stage := stages.All[g.pick(3)]
	set := func(state, exit string) {
		j := f.Jobs[stage]
		j.State, j.ExitCode = slurm.ParseState(state, ""), slurm.ParseExitCode(exit)
		f.Jobs[stage] = j
	}
	f.Requeues = g.chance(0.5)
	f.Waited["requeue-1"], f.Waited["requeue-2"], f.Waited["requeue-3"] = RequeueGrace+time.Second, RequeueGrace+time.Second, RequeueGrace+time.Second
	switch g.pick(11) {
	case 0:
		set([]string{"NODE_FAIL", "PREEMPTED", "BOOT_FAIL", "DEADLINE", "REVOKED"}[g.pick(5)], "0:0")
	case 1:
		j := f.Jobs[stage]
		j.State = slurm.ParseState("FAILED", "SystemFailure")
		f.Jobs[stage] = j
	case 2:
		code := []int{stages.ExitNoGPU, stages.ExitIsolation, stages.ExitSecretsMissing, stages.ExitReservedMin}[g.pick(4)]
		if stage == stages.Author && g.chance(0.5) {
			code = stages.ExitPolicyEndpoint
		}
		set("FAILED", fmt.Sprintf("%d:0", code))
	case 3:
		set("CANCELLED by 0", "0:15")
	case 4:
		f.CancelRequested = []string{ReasonDeadline, ReasonInterrupted, ReasonCancelled}[g.pick(3)]
		set("CANCELLED by 1001", "0:15")
		f.CancelsIssued = []string{f.Jobs[stage].ID}
	case 5:
		delete(f.Jobs, stage)
		for _, s := range stages.All[slices.Index(stages.All, stage):] {
			delete(f.Jobs, s)
		}
		f.Submit[stage] = Submit{Refused: "invalid account"}
	case 6:
		f.Jobs[stage] = slurm.JobInfo{ID: f.Jobs[stage].ID, State: slurm.State{ByUID: -1}, Source: slurm.SourceNone}
		f.Waited["unknown-"+f.Jobs[stage].ID] = JobLostAfter + time.Second
	case 7:
		stage = stages.Eval
		set("FAILED", fmt.Sprintf("%d:0", []int{stages.EvalRejectedExit, 1, 2, 137}[g.pick(4)]))
	case 8:
		o := f.Outputs[stages.Eval]
		o.Record, o.RecordErr = nil, rejected(stages.Eval, record.ReasonMissingRecord)
		f.Outputs[stages.Eval] = o
	case 9:
		j := f.Jobs[stages.Eval]
		j.Start = time.Time{}
		f.Jobs[stages.Eval] = j
		f.Waited["times"] = TimesUnknownAfter + time.Second
	case 10:
		set("CANCELLED", "0:15") // Slurm did not say who
		if !f.Isolated {
			return g.clusterFacts() // without isolation that is the policy's
		}
	}
	return f
}

// A fault of the cluster's or the operator's alone never yields a reward
// (no score, no 0).
func TestClusterFaultNeverRewarded(t *testing.T) {
	g := gen{rand.New(rand.NewPCG(3, 4))}
	for i := range propertyRuns / 4 {
		f := g.clusterFacts()
		dec := Decide(f)
		if dec.Need != 0 {
			t.Fatalf("run %d: asked for %b", i, dec.Need)
		}
		if v := dec.Verdict; v != nil && (v.Kind == Scored || v.Kind == PolicyFailure) {
			t.Fatalf("run %d: a cluster fault rewarded: %s/%s by rule %s: %s\nfacts: %s", i, v.Kind, v.Reason, v.Rule, v.Detail, describe(f))
		}
	}
}

// The generator is strong enough to catch a policy rule removed on
// purpose: without each of these rules some random policy facts end
// masked.
func TestPropertyCatchesRemovedRules(t *testing.T) {
	for _, id := range []string{"author-failed", "train-output-bound", "train-timeout", "train-out-of-memory", "train-planted-output", "train-record", "eval-bad-weights", "job-held", "job-modified", "eval-files", "weights-mismatch", "eval-checked-patch", "eval-contaminated"} {
		table := slices.DeleteFunc(slices.Clone(Rules()), func(r Rule) bool { return r.ID == id })
		if len(table) == len(Rules()) {
			t.Fatalf("no rule %s", id)
		}
		g := gen{rand.New(rand.NewPCG(5, 6))}
		caught := -1
		for i := range propertyRuns {
			if err := neverMasked(table, g.policyFacts(i%2 == 0)); err != nil {
				caught = i
				t.Logf("without %s, run %d: %v", id, i, err)
				break
			}
		}
		if caught < 0 {
			t.Errorf("without rule %s the property held over %d runs", id, propertyRuns)
		}
	}
}

// Decide asks for a fact before it uses it: deciding with the facts
// gathered as it asks gives what deciding with every fact gathered gives.
func TestLazyFactsSameVerdict(t *testing.T) {
	g := gen{rand.New(rand.NewPCG(7, 8))}
	for i := range propertyRuns / 10 {
		full := g.policyFacts(i%2 == 0)
		if i%3 == 0 {
			full = g.clusterFacts()
		}
		lazy := *full
		lazy.Outputs, lazy.Patch, lazy.EvalFiles, lazy.Queue, lazy.UIDKnown = map[stages.Stage]Output{}, nil, nil, nil, false
		var dec Decision
		for range 10 {
			dec = Decide(&lazy)
			if dec.Need == 0 {
				break
			}
			for _, s := range stages.All {
				if dec.Need&NeedOutput(s) != 0 {
					lazy.Outputs[s] = full.Outputs[s]
				}
			}
			if dec.Need&NeedPatch != 0 {
				lazy.Patch = full.Patch
			}
			if dec.Need&NeedEvalFiles != 0 {
				lazy.EvalFiles = full.EvalFiles
			}
			if dec.Need&NeedQueue != 0 {
				lazy.Queue = full.Queue
			}
			if dec.Need&NeedUID != 0 {
				lazy.UID, lazy.UIDKnown = full.UID, true
			}
		}
		want := Decide(full)
		key := func(v *Verdict) string {
			if v == nil {
				return "none"
			}
			return fmt.Sprint(v.Kind, v.Stage, v.Reason, v.Tampering, v.Rule)
		}
		if key(dec.Verdict) != key(want.Verdict) || dec.Next != want.Next {
			t.Fatalf("run %d: lazy %+v, full %+v", i, dec.Verdict, want.Verdict)
		}
	}
}

// Progress: the chain submits each stage in turn.
func TestProgress(t *testing.T) {
	f := healthy(true)
	f.Staged = false
	f.Jobs = map[stages.Stage]slurm.JobInfo{}
	if d := decideAll(t, f); d.Next != Restage {
		t.Fatalf("unstaged: %+v", d)
	}
	f.Staged = true
	if d := decideAll(t, f); d.Next != SubmitStage || d.Stage != stages.Author {
		t.Fatalf("nothing submitted: %+v", d)
	}
	f.Jobs[stages.Author] = job("1", "RUNNING", "0:0", t0, time.Time{})
	if d := decideAll(t, f); d.Next != Wait || d.Verdict != nil {
		t.Fatalf("author running: %+v", d)
	}
	f.Jobs[stages.Author] = job("1", "COMPLETED", "0:0", t0, t0.Add(time.Hour))
	d := decideAll(t, f)
	if d.Next != SubmitStage || d.Stage != stages.Train || d.AuthorVerified == nil {
		t.Fatalf("author completed: %+v", d)
	}
	f.Author = d.AuthorVerified
	f.Jobs[stages.Train] = slurm.JobInfo{ID: "2", State: slurm.State{ByUID: -1}, Source: slurm.SourceNone}
	if d := decideAll(t, f); d.Next != SubmitStage || d.Stage != stages.Eval || !slices.Contains(d.Waits, "unknown-2") {
		t.Fatalf("train submitted: %+v", d)
	}
	f.Jobs[stages.Train] = job("2", "NODE_FAIL", "0:0", t0, t0.Add(time.Hour))
	f.Jobs[stages.Eval] = job("3", "PENDING", "0:0", time.Time{}, time.Time{})
	if d := decideAll(t, f); d.Verdict != nil || !slices.Contains(d.Waits, "requeue-2") {
		t.Fatalf("train NODE_FAIL within the requeue grace: %+v", d)
	}
	f.Waited["requeue-2"] = RequeueGrace + time.Second
	if d := decideAll(t, f); d.Verdict == nil || d.Verdict.Reason != "node_failure" || !d.Verdict.Retryable {
		t.Fatalf("train NODE_FAIL after the grace: %+v", d)
	}
}

// A cancel on record decides nothing until every cancelled job has ended:
// sacct reports each end seconds apart, and the first CANCELLED seen must
// not decide the episode by another rule (the lab's interrupt showed train
// CANCELLED while eval was still PENDING in sacct). A job Slurm forgot is
// still job-lost.
func TestCancelWaitsForEveryJob(t *testing.T) {
	f := healthy(true)
	f.CancelRequested = ReasonInterrupted
	f.CancelsIssued = []string{"1", "2", "3"}
	f.Jobs[stages.Train] = job("2", "CANCELLED by 1001", "0:15", t0.Add(time.Hour), t0.Add(2*time.Hour))
	f.Jobs[stages.Eval] = job("3", "PENDING", "0:0", time.Time{}, time.Time{})
	delete(f.Outputs, stages.Eval)
	if d := decideAll(t, f); d.Verdict != nil || d.Next == SubmitStage {
		t.Fatalf("eval still pending after the cancel: want a wait, got %+v (verdict %+v)", d, d.Verdict)
	}
	f.Jobs[stages.Eval] = job("3", "CANCELLED by 1001", "0:0", time.Time{}, t0.Add(2*time.Hour))
	d := decideAll(t, f)
	if d.Verdict == nil || d.Verdict.Reason != ReasonInterrupted || d.Verdict.Stage != stages.Train || d.Verdict.Rule != "cancel-on-record" {
		t.Fatalf("every job cancelled: want infra_failure interrupted at train by cancel-on-record, got %+v", d.Verdict)
	}
	f.Jobs[stages.Eval] = slurm.JobInfo{ID: "3", State: slurm.State{ByUID: -1}, Source: slurm.SourceNone}
	if d := decideAll(t, f); d.Verdict != nil || !slices.Contains(d.Waits, "unknown-3") {
		t.Fatalf("eval unknown after the cancel: want a wait that counts, got %+v", d)
	}
	f.Waited["unknown-3"] = JobLostAfter + time.Second
	if d := decideAll(t, f); d.Verdict == nil || d.Verdict.Reason != ReasonJobLost {
		t.Fatalf("eval unknown for %s after the cancel: want job_lost, got %+v", JobLostAfter, d.Verdict)
	}
}

// Every outcome decided after train ended carries train's record (its
// train_reward), whichever rule decided: an eval held by the policy too.
func TestVerdictCarriesTrain(t *testing.T) {
	f := healthy(false)
	f.Jobs[stages.Eval] = job("3", "PENDING", "0:0", time.Time{}, time.Time{})
	f.Queue[stages.Eval] = slurm.JobInfo{ID: "3", State: slurm.ParseState("PENDING", ""), Reason: "JobHeldUser"}
	delete(f.Outputs, stages.Eval)
	train := f.Outputs[stages.Train]
	delete(f.Outputs, stages.Train)
	f.Author = authorRecordOf(patch)
	if d := Decide(f); d.Need&NeedOutputTrain == 0 {
		t.Fatalf("eval held, train's output not read: want NeedOutputTrain, got %+v", d)
	}
	f.Outputs[stages.Train] = train
	d := decideAll(t, f)
	if d.Verdict == nil || d.Verdict.Reason != ReasonJobHeld || d.Verdict.Train == nil || d.Verdict.Train.TrainReward != 0.3 {
		t.Fatalf("eval held: want job_held with train's record, got %+v", d.Verdict)
	}
}

func TestRetryable(t *testing.T) {
	for _, c := range []struct {
		kind   Kind
		stage  stages.Stage
		reason string
		want   bool
	}{
		{InfraFailure, stages.Train, string(slurm.FailureNodeFailure), true},
		{InfraFailure, stages.Eval, string(slurm.FailurePreempted), true},
		{InfraFailure, stages.Train, string(slurm.FailureBootFailure), true},
		{InfraFailure, stages.Train, string(slurm.FailureLaunch), true},
		{InfraFailure, stages.Train, ReasonJobLost, true},
		{InfraFailure, stages.Eval, ReasonNoGPU, true},
		{InfraFailure, stages.Eval, string(record.ReasonMissingRecord), true},
		{InfraFailure, stages.Eval, ReasonRolloutsRejected, true},
		{InfraFailure, stages.Author, string(slurm.FailureNodeFailure), false}, // the author is never run twice
		{InfraFailure, stages.Author, ReasonPolicyEndpointFailed, false},
		{InfraFailure, stages.Train, ReasonCancelled, false},       // an administrator's cancel
		{InfraFailure, stages.Train, ReasonDeadline, false},        // the operator's
		{InfraFailure, stages.Train, ReasonSubmitRefused, false},   // sbatch will refuse again
		{InfraFailure, stages.Train, ReasonIsolationBreach, false}, // the site's setup: again
		{InfraFailure, stages.Eval, ReasonTimesUnknown, false},     // accounting, not the job
		{PolicyFailure, stages.Train, ReasonTrainFailed, false},    // the policy's 0
		{PolicyFailure, stages.Train, string(record.ReasonMissingRecord), false},
		{IntegrityViolation, stages.Eval, ReasonEvalOutputTampered, false},
	} {
		if got := retryable(&Verdict{Kind: c.kind, Stage: c.stage, Reason: c.reason}); got != c.want {
			t.Errorf("%s %s %s: retryable %v, want %v", c.kind, c.stage, c.reason, got, c.want)
		}
	}
}

func describe(f *Facts) string {
	var b strings.Builder
	fmt.Fprintf(&b, "isolated=%v", f.Isolated)
	for _, s := range stages.All {
		if j, ok := f.Jobs[s]; ok {
			fmt.Fprintf(&b, " %s=%s/%s limit=%s", s, j.State.Raw, j.ExitCode.Raw, j.TimeLimit)
		}
		if o, ok := f.Outputs[s]; ok {
			fmt.Fprintf(&b, " %s.out=%s rec=%T err=%v", s, o.File.Type, o.Record, record.ReasonOf(o.RecordErr))
		}
	}
	if f.Patch != nil {
		fmt.Fprintf(&b, " patch=%s/%d", f.Patch.File.Type, f.Patch.File.Size)
	}
	if f.EvalFiles != nil {
		fmt.Fprintf(&b, " evaldir=%o evalout=%o", f.EvalFiles.Dir.Perm, f.EvalFiles.Out.Perm)
	}
	return b.String()
}

// FuzzDecide: random facts from any seeds keep the property.
func FuzzDecide(f *testing.F) {
	f.Add(uint64(1), uint64(2), true)
	f.Add(uint64(3), uint64(4), false)
	f.Fuzz(func(t *testing.T, a, b uint64, isolated bool) {
		g := gen{rand.New(rand.NewPCG(a, b))}
		facts := g.policyFacts(isolated)
		if err := neverMasked(Rules(), facts); err != nil {
			t.Fatalf("%v\nfacts: %s", err, describe(facts))
		}
		facts = g.clusterFacts()
		if v := Decide(facts).Verdict; v != nil && (v.Kind == Scored || v.Kind == PolicyFailure) {
			t.Fatalf("a cluster fault rewarded: %s/%s by %s", v.Kind, v.Reason, v.Rule)
		}
	})
}

// TestHoldNeedsNoSecondSqueue: a pending eval the poll took from squeue
// (slurmctld's live view, the one a hold shows in) is not asked of squeue
// again; one known from sacct only is.
func TestHoldNeedsNoSecondSqueue(t *testing.T) {
	for _, src := range []slurm.Source{slurm.SourceSqueue, slurm.SourceSacct} {
		f := healthy(false)
		j := job("3", "PENDING", "0:0", time.Time{}, time.Time{})
		j.Reason, j.Source = "Priority", src
		f.Jobs[stages.Eval] = j
		f.Queue = nil
		d := Decide(f)
		if asked := d.Need&NeedQueue != 0; asked != (src == slurm.SourceSacct) {
			t.Errorf("eval pending from %s: NeedQueue %v", src, asked)
		}
		if d.Verdict != nil {
			t.Errorf("eval pending from %s: %+v", src, d.Verdict)
		}
	}
}

// labSacctJob is job id as slurm.ParseSacct reads it from a lab capture.
func labSacctJob(t *testing.T, path, id string) slurm.JobInfo {
	t.Helper()
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	jobs, err := slurm.ParseSacct(raw)
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	for _, j := range jobs {
		if j.ID == id {
			return j
		}
	}
	t.Fatalf("%s: no job %s", path, id)
	return slurm.JobInfo{}
}

// withdrawnAuthor: the author's job-array task withdrawn from its array
// before it ran (slurm.SourceWithdrawn) for longer than WithdrawnAfter;
// train and eval never submitted.
func withdrawnAuthor(f *Facts) {
	f.Jobs[stages.Author] = slurm.JobInfo{ID: "7_1", ArrayJobID: "7", ArrayTask: 1, State: slurm.State{ByUID: -1}, Source: slurm.SourceWithdrawn}
	delete(f.Jobs, stages.Train)
	delete(f.Jobs, stages.Eval)
	delete(f.Outputs, stages.Author)
	delete(f.Outputs, stages.Train)
	delete(f.Outputs, stages.Eval)
	f.Waited["withdrawn-7_1"] = WithdrawnAfter + time.Second
}

// withdrawnTask: stage's job is an array task withdrawn before it ran
// for longer than WithdrawnAfter (train: eval then never submitted);
// the stages before it ended as healthy has them.
func withdrawnTask(f *Facts, stage stages.Stage) {
	f.Jobs[stage] = slurm.JobInfo{ID: "8_2", ArrayJobID: "8", ArrayTask: 2, State: slurm.State{ByUID: -1}, Source: slurm.SourceWithdrawn}
	delete(f.Outputs, stage)
	if stage == stages.Train {
		delete(f.Jobs, stages.Eval)
		delete(f.Outputs, stages.Eval)
	}
	f.Waited["withdrawn-8_2"] = WithdrawnAfter + time.Second
}

// TestEvalRecordNamesTheTasksOwnJob: an eval that ran as an array task
// ("8_2") names in its record the job it ran in, the task's own id
// (sacct's JobIDRaw, $SLURM_JOB_ID in the task): that is scored; its
// ARRAY_TASK or a sibling's id is rejected; an unknown own id waits.
func TestEvalRecordNamesTheTasksOwnJob(t *testing.T) {
	asTask := func(f *Facts, raw, named string) {
		j := f.Jobs[stages.Eval]
		j.ID, j.RawID, j.ArrayJobID, j.ArrayTask = "8_2", raw, "8", 2
		f.Jobs[stages.Eval] = j
		o := f.Outputs[stages.Eval]
		ev := *o.Record.(*record.Eval)
		ev.SlurmJobID = named
		o.Record = &ev
		f.Outputs[stages.Eval] = o
	}
	for _, isolated := range []bool{false, true} {
		f := healthy(isolated)
		asTask(f, "11", "11")
		if dec := decideAll(t, f); dec.Verdict == nil || dec.Verdict.Kind != Scored {
			t.Errorf("isolated %v: the task's own id: %+v, want scored", isolated, dec.Verdict)
		}
		for _, named := range []string{"8", "12"} {
			f = healthy(isolated)
			asTask(f, "11", named)
			if dec := decideAll(t, f); dec.Verdict == nil || dec.Verdict.Reason != string(record.ReasonJobIDMismatch) {
				t.Errorf("isolated %v: record names %s for task 8_2 (own id 11): %+v, want %s", isolated, named, dec.Verdict, record.ReasonJobIDMismatch)
			}
		}
		f = healthy(isolated)
		asTask(f, "", "11")
		if dec := decideAll(t, f); dec.Verdict != nil {
			t.Errorf("isolated %v: own id unknown: %+v, want no verdict yet", isolated, dec.Verdict)
		}
	}
}

// TestWithdrawnNeedsContinuousEvidence: an author task withdrawn for less
// than WithdrawnAfter (slurmdbd may not have heard yet) decides nothing.
func TestWithdrawnNeedsContinuousEvidence(t *testing.T) {
	for _, isolated := range []bool{false, true} {
		f := healthy(isolated)
		withdrawnAuthor(f)
		f.Waited["withdrawn-7_1"] = WithdrawnAfter - time.Second
		if dec := decideAll(t, f); dec.Verdict != nil {
			t.Errorf("isolated %v: withdrawn for %s → %+v, want no verdict yet", isolated, WithdrawnAfter-time.Second, dec.Verdict)
		}
	}
}
