package episode

// The attribution table (README "Attribution"), one case per row: real
// files in a temporary episode directory, inspected through remote.Local
// with the real stat(1) and id(1), and Slurm's account of the jobs given
// as sacct would report it.

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nemorl/nemorl-slurm/ledger"
	"github.com/nemorl/nemorl-slurm/record"
	"github.com/nemorl/nemorl-slurm/remote"
	"github.com/nemorl/nemorl-slurm/rules"
	"github.com/nemorl/nemorl-slurm/slurm"
	"github.com/nemorl/nemorl-slurm/stages"
)

const (
	weightsSHA = "1111111111111111111111111111111111111111111111111111111111111111"
	otherSHA   = "9999999999999999999999999999999999999999999999999999999999999999"
	authorID   = "101"
	trainID    = "102"
	evalID     = "103"
)

type fixture struct {
	t     *testing.T
	d     *Driver
	e     *ledger.Entry
	infos map[string]slurm.JobInfo
	uid   int
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	dir := t.TempDir()
	for _, s := range []stages.Stage{stages.Author, stages.Train, stages.Eval} {
		if err := os.MkdirAll(filepath.Join(dir, string(s)), 0o700); err != nil {
			t.Fatal(err)
		}
	}
	l, err := ledger.OpenLedger(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	f := &fixture{
		t: t,
		d: &Driver{Host: remote.NewLocal(), Ledger: l},
		e: &ledger.Entry{Episode: "ep-test", Dir: dir, Isolation: "none", Staged: true, Jobs: map[stages.Stage]*ledger.Submission{
			stages.Author: {JobID: authorID}, stages.Train: {JobID: trainID}, stages.Eval: {JobID: evalID},
		}, Author: &record.Author{PatchSHA256: weightsSHA, PatchBytes: 100}},
		uid: os.Getuid(),
	}
	now := time.Now()
	f.infos = map[string]slurm.JobInfo{
		authorID: job(authorID, "COMPLETED", "0:0", now.Add(-3*time.Hour), now.Add(-2*time.Hour)),
		trainID:  job(trainID, "COMPLETED", "0:0", now.Add(-2*time.Hour), now.Add(-time.Hour)),
		// The honest eval job ends its quiet watch after its record.
		evalID: job(evalID, "COMPLETED", "0:0", now.Add(-time.Hour), now.Add(time.Duration(stages.EvalOutputWatchSeconds)*time.Second)),
	}
	f.write(stages.Train, goodTrainLine(t))
	f.write(stages.Eval, goodEvalLine(t, evalID, weightsSHA))
	return f
}

func job(id, state, exit string, start, end time.Time) slurm.JobInfo {
	return slurm.JobInfo{ID: id, State: slurm.ParseState(state, ""), ExitCode: slurm.ParseExitCode(exit), Start: start, End: end}
}

func (f *fixture) set(id, state, exit string) {
	j := f.infos[id]
	j.State, j.ExitCode = slurm.ParseState(state, ""), slurm.ParseExitCode(exit)
	f.infos[id] = j
}

func (f *fixture) out(stage stages.Stage) string {
	return filepath.Join(f.e.Dir, string(stage), "out.log")
}

func (f *fixture) write(stage stages.Stage, lines ...string) {
	f.t.Helper()
	data := "nemorl: episode ep-test stage " + string(stage) + " job 1 on vm\n" + strings.Join(lines, "\n") + "\nnemorl: stage payload exited with status 0\n"
	if err := os.WriteFile(f.out(stage), []byte(data), 0o600); err != nil {
		f.t.Fatal(err)
	}
}

func (f *fixture) fifo(stage stages.Stage) {
	f.t.Helper()
	_ = os.Remove(f.out(stage))
	if err := syscall.Mkfifo(f.out(stage), 0o600); err != nil {
		f.t.Fatal(err)
	}
}

func (f *fixture) classify() *rules.Outcome {
	f.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	fa := f.d.parts().collector.facts(f.e, f.infos, nil)
	fa.Requeues = false // a node failure's end counts at once
	dec, err := f.d.parts().collector.decide(ctx, f.e, fa)
	if err != nil {
		f.t.Fatalf("decide: %v", err)
	}
	if dec.Verdict == nil {
		f.t.Fatalf("decide: no outcome (%+v)", dec)
	}
	return f.d.parts().collector.outcome(f.e, f.infos, dec.Verdict)
}

// collectAuthor decides an episode whose author job ended: the outcome,
// or nil when train may go ahead (the verified record kept in f.e).
func (f *fixture) collectAuthor(ctx context.Context) (*rules.Outcome, error) {
	f.e.Author = nil
	delete(f.e.Jobs, stages.Train)
	delete(f.e.Jobs, stages.Eval)
	dec, err := f.d.parts().collector.decide(ctx, f.e, f.d.parts().collector.facts(f.e, f.infos, nil))
	if err != nil || dec.Verdict != nil {
		if err != nil {
			return nil, err
		}
		return f.d.parts().collector.outcome(f.e, f.infos, dec.Verdict), nil
	}
	f.e.Author = dec.AuthorVerified
	return nil, nil
}

func goodTrainLine(t *testing.T) string {
	return mustFormat(t, &record.Train{Status: record.StatusOK, TrainReward: 0.31, InnerSteps: 4, WeightsSHA256: weightsSHA, WeightsBytes: 1 << 20})
}

func goodEvalLine(t *testing.T, jobID, weights string) string {
	per := make([]int, record.Problems)
	correct := 0
	for i := range per {
		per[i] = i % 5
		correct += per[i]
	}
	r := record.RewardFor(correct)
	return mustFormat(t, &record.Eval{Reward: r, AIME25Exact: r, AIME25AvgAt8: r, Completed: 1, SlurmJobID: jobID,
		WeightsSHA256: weights, RolloutsSHA256: otherSHA, Problems: record.Problems, SamplesPerProblem: record.SamplesPerProblem,
		Correct: correct, PerQuestionCorrect: per, PatchSHA256: weightsSHA, ProblemsSHA256: otherSHA}) // the fixture's author record names patch weightsSHA
}

func mustFormat(t *testing.T, r record.Record) string {
	t.Helper()
	s, err := record.Format(r)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

type want struct {
	kind      rules.Kind
	stage     stages.Stage
	reason    string
	tampering bool
}

func check(t *testing.T, o *rules.Outcome, w want) {
	t.Helper()
	if o.Outcome != w.kind || o.FailureStage != w.stage || o.FailureReason != w.reason || o.Tampering != w.tampering {
		t.Fatalf("outcome %s (%s: %s, tampering %v), want %s (%s: %s, tampering %v); detail: %s",
			o.Outcome, o.FailureStage, o.FailureReason, o.Tampering, w.kind, w.stage, w.reason, w.tampering, o.Detail)
	}
	switch w.kind {
	case rules.PolicyFailure:
		if o.Reward == nil || *o.Reward != 0 || o.MaskSample {
			t.Fatalf("policy failure: reward %v mask %v, want 0 and not masked", o.Reward, o.MaskSample)
		}
	case rules.InfraFailure, rules.IntegrityViolation:
		if o.Reward != nil || !o.MaskSample {
			t.Fatalf("%s: reward %v mask %v, want null and masked", w.kind, o.Reward, o.MaskSample)
		}
	}
}

func TestAttributionTrainAndEval(t *testing.T) {
	uid := os.Getuid()
	other := uid + 4242
	policy := func(stage stages.Stage, reason string, tampering bool) want {
		return want{rules.PolicyFailure, stage, reason, tampering}
	}
	infra := func(stage stages.Stage, reason string) want { return want{rules.InfraFailure, stage, reason, false} }
	// The fixture runs without isolation: what only a deliberate act
	// explains is the policy's there (rules_test.go holds the isolated
	// rows: integrity_violation).
	integrity := func(stage stages.Stage, reason string) want { return want{rules.PolicyFailure, stage, reason, true} }
	cases := []struct {
		name  string
		setup func(f *fixture)
		want  want
	}{
		{"scored", func(f *fixture) {}, want{rules.Scored, "", "", false}},

		// The train job: everything it does is the policy's.
		{"train record trainer_failed", func(f *fixture) {
			f.set(trainID, "FAILED", "1:0")
			f.write(stages.Train, mustFormat(t, &record.Train{Status: record.StatusTrainerFailed, TrainerExitStatus: 1}))
		}, policy(stages.Train, rules.ReasonTrainFailed, false)},
		{"train record patch_failed", func(f *fixture) {
			f.set(trainID, "FAILED", "1:0")
			f.write(stages.Train, mustFormat(t, &record.Train{Status: record.StatusPatchFailed, TrainerExitStatus: 0}))
		}, policy(stages.Train, rules.ReasonPatchRejected, false)},
		{"train failed without a record", func(f *fixture) {
			f.set(trainID, "FAILED", "1:0")
			f.write(stages.Train, "Traceback: the policy's trainer crashed")
		}, policy(stages.Train, "missing_record", false)},
		{"train completed without a record", func(f *fixture) { f.write(stages.Train) }, policy(stages.Train, "missing_record", false)},
		{"train output missing", func(f *fixture) { _ = os.Remove(f.out(stages.Train)) }, policy(stages.Train, "missing_record", false)},
		{"train prints an eval record", func(f *fixture) {
			f.write(stages.Train, goodTrainLine(t), goodEvalLine(t, evalID, weightsSHA))
		}, policy(stages.Train, "foreign_record", true)},
		{"train prints two records", func(f *fixture) { f.write(stages.Train, goodTrainLine(t), goodTrainLine(t)) }, policy(stages.Train, "duplicate_record", true)},
		{"train floods its record out of the tail window", func(f *fixture) {
			f.write(stages.Train, goodTrainLine(t), strings.Repeat(strings.Repeat("x", 1023)+"\n", 2048))
		}, policy(stages.Train, "missing_record", false)},
		{"train malformed record", func(f *fixture) {
			f.write(stages.Train, record.StageTrain.Prefix()+`{"status":"ok"`)
		}, policy(stages.Train, "malformed_json", true)},
		{"train out.log is a fifo", func(f *fixture) { f.fifo(stages.Train) }, policy(stages.Train, rules.ReasonPlantedOutput, true)},
		{"train time limit", func(f *fixture) { f.set(trainID, "TIMEOUT", "0:15") }, policy(stages.Train, rules.ReasonTrainTimeout, false)},
		{"train out of memory", func(f *fixture) { f.set(trainID, "OUT_OF_MEMORY", "0:125") }, policy(stages.Train, rules.ReasonTrainOutOfMemory, false)},
		{"train cancelled by the user's uid, not the tool", func(f *fixture) {
			f.set(trainID, fmt.Sprintf("CANCELLED by %d", uid), "0:15")
		}, policy(stages.Train, rules.ReasonForeignCancel, true)},
		{"train cancelled by another uid", func(f *fixture) {
			f.set(trainID, fmt.Sprintf("CANCELLED by %d", other), "0:15")
		}, infra(stages.Train, rules.ReasonCancelled)},
		{"train cancelled by the tool", func(f *fixture) {
			f.set(trainID, fmt.Sprintf("CANCELLED by %d", uid), "0:15")
			f.e.CancelsIssued = []string{trainID}
		}, infra(stages.Train, rules.ReasonCancelled)},
		{"a recorded cancel wins over a duplicate record", func(f *fixture) {
			f.set(trainID, fmt.Sprintf("CANCELLED by %d", uid), "0:15")
			f.set(evalID, "CANCELLED", "0:0")
			f.e.CancelRequested = rules.ReasonDeadline
			f.write(stages.Train, goodTrainLine(t), goodTrainLine(t))
		}, infra(stages.Train, rules.ReasonDeadline)},
		{"train cancelled, canceller unknown, no isolation", func(f *fixture) {
			f.set(trainID, "CANCELLED", "0:15")
		}, policy(stages.Train, rules.ReasonForeignCancel, true)},
		{"train cancelled, canceller unknown, container", func(f *fixture) {
			f.e.Isolation = "apptainer"
			f.set(trainID, "CANCELLED", "0:15")
		}, infra(stages.Train, rules.ReasonCancelled)},
		{"train node failure", func(f *fixture) { f.set(trainID, "NODE_FAIL", "0:0") }, infra(stages.Train, "node_failure")},
		{"train preempted", func(f *fixture) { f.set(trainID, "PREEMPTED", "0:0") }, infra(stages.Train, "preempted")},
		{"train guard found slurm", func(f *fixture) { f.set(trainID, "FAILED", "69:0") }, infra(stages.Train, rules.ReasonIsolationBreach)},
		{"train found no GPU", func(f *fixture) { f.set(trainID, "FAILED", "70:0") }, infra(stages.Train, rules.ReasonNoGPU)},
		{"eval found no GPU", func(f *fixture) { f.set(evalID, "FAILED", "70:0") }, infra(stages.Eval, rules.ReasonNoGPU)},
		{"train script found no patch", func(f *fixture) { f.set(trainID, "FAILED", "66:0") }, infra(stages.Train, rules.ReasonScriptRefused)},

		// The eval job: the trusted evaluator.
		{"weights rejected by the trusted check", func(f *fixture) { f.set(evalID, "FAILED", "68:0") }, policy(stages.Eval, rules.ReasonBadWeights, false)},
		{"weights missing or not a regular file", func(f *fixture) { f.set(evalID, "FAILED", "66:0") }, policy(stages.Eval, rules.ReasonBadWeights, false)},
		{"eval weights differ from train's record", func(f *fixture) {
			f.write(stages.Eval, goodEvalLine(t, evalID, otherSHA))
		}, policy(stages.Train, "weights_mismatch", true)},
		{"eval stdout redirected", func(f *fixture) { f.set(evalID, "FAILED", "67:0") }, integrity(stages.Eval, rules.ReasonEvalOutputRedirected)},
		{"eval inputs tampered", func(f *fixture) { f.set(evalID, "FAILED", "65:0") }, integrity(stages.Eval, rules.ReasonEvalInputsTampered)},
		{"eval rollouts rejected", func(f *fixture) { f.set(evalID, "FAILED", "4:0") }, infra(stages.Eval, rules.ReasonRolloutsRejected)},
		{"eval crashed (vLLM never ready)", func(f *fixture) { f.set(evalID, "FAILED", "1:0") }, infra(stages.Eval, "exit_code")},
		{"eval guard found slurm", func(f *fixture) { f.set(evalID, "FAILED", "69:0") }, infra(stages.Eval, rules.ReasonIsolationBreach)},
		{"eval node failure", func(f *fixture) { f.set(evalID, "NODE_FAIL", "0:0") }, infra(stages.Eval, "node_failure")},
		{"eval cancelled by the user's uid, not the tool", func(f *fixture) {
			f.set(evalID, fmt.Sprintf("CANCELLED by %d", uid), "0:15")
		}, policy(stages.Eval, rules.ReasonForeignCancel, true)},
		{"eval out.log planted as a fifo (no isolation)", func(f *fixture) {
			f.set(evalID, "TIMEOUT", "0:0")
			f.fifo(stages.Eval)
		}, policy(stages.Eval, rules.ReasonPlantedOutput, true)},
		{"eval out.log planted as a fifo (container)", func(f *fixture) {
			f.e.Isolation = "apptainer"
			f.set(evalID, "TIMEOUT", "0:0")
			f.fifo(stages.Eval)
		}, want{rules.IntegrityViolation, stages.Eval, rules.ReasonEvalOutputTampered, true}},
		{"eval record without its job", func(f *fixture) { f.write(stages.Eval) }, infra(stages.Eval, "missing_record")},
		{"eval out.log gone", func(f *fixture) { _ = os.Remove(f.out(stages.Eval)) }, integrity(stages.Eval, rules.ReasonEvalOutputTampered)},
		{"eval out.log written before eval started", func(f *fixture) {
			j := f.infos[evalID]
			j.Start, j.End = time.Now().Add(time.Minute), time.Now().Add(2*time.Minute)
			f.infos[evalID] = j
		}, integrity(stages.Eval, rules.ReasonEvalOutputTampered)},
		{"eval out.log changed after eval ended", func(f *fixture) {
			j := f.infos[evalID]
			j.Start, j.End = time.Now().Add(-2*time.Hour), time.Now().Add(-time.Hour)
			f.infos[evalID] = j
			tj := f.infos[trainID]
			tj.End = j.Start
			f.infos[trainID] = tj
		}, integrity(stages.Eval, rules.ReasonEvalOutputTampered)},
		{"eval out.log renamed over as the eval job ended (after the script's last look)", func(f *fixture) {
			// The file changed a moment before the job's end: the honest
			// script wrote nothing in its last EvalOutputWatchSeconds.
			j := f.infos[evalID]
			j.End = time.Now().Add(500 * time.Millisecond)
			f.infos[evalID] = j
		}, integrity(stages.Eval, rules.ReasonEvalOutputTampered)},
		{"eval out.log renamed over just after the eval job ended", func(f *fixture) {
			j := f.infos[evalID]
			j.End = time.Now().Add(-1500 * time.Millisecond)
			f.infos[evalID] = j
		}, integrity(stages.Eval, rules.ReasonEvalOutputTampered)},
		{"eval record names another job", func(f *fixture) { f.write(stages.Eval, goodEvalLine(t, "999", weightsSHA)) }, integrity(stages.Eval, "job_id_mismatch")},
		{"eval two records", func(f *fixture) {
			f.write(stages.Eval, goodEvalLine(t, evalID, weightsSHA), goodEvalLine(t, evalID, weightsSHA))
		}, integrity(stages.Eval, "duplicate_record")},
		{"eval started before train ended", func(f *fixture) {
			j := f.infos[trainID]
			j.End = f.infos[evalID].Start.Add(time.Minute)
			f.infos[trainID] = j
		}, integrity(stages.Eval, rules.ReasonEvalBeforeTrainEnd)},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			f := newFixture(t)
			c.setup(f)
			o := f.classify()
			check(t, o, c.want)
			if c.want.kind == rules.Scored && (o.Reward == nil || o.MaskSample || o.CheckpointSHA256 != weightsSHA) {
				t.Fatalf("scored: reward %v mask %v checkpoint %s", o.Reward, o.MaskSample, o.CheckpointSHA256)
			}
		})
	}
}

// authorFixture writes the author's output and patch.
func (f *fixture) author(patch []byte, rec *record.Author) {
	f.t.Helper()
	f.write(stages.Author, mustFormat(f.t, rec))
	if patch != nil {
		if err := os.WriteFile(filepath.Join(f.e.Dir, "author", "change.diff"), patch, 0o600); err != nil {
			f.t.Fatal(err)
		}
	}
}

func authorRecord(patch []byte) *record.Author {
	a := &record.Author{PatchBytes: int64(len(patch)), Turns: 3, ResponseSHA256: weightsSHA}
	sum := sha256.Sum256(patch)
	a.PatchSHA256 = hex.EncodeToString(sum[:])
	if len(patch) > 0 {
		a.FilesChanged = 1
	}
	return a
}

func TestAttributionAuthor(t *testing.T) {
	patch := []byte("diff --git a/recipe.yaml b/recipe.yaml\n--- a/recipe.yaml\n+++ b/recipe.yaml\n@@ -1 +1 @@\n-a: 1\n+a: 2\n")
	cases := []struct {
		name  string
		setup func(f *fixture)
		want  want // kind "" means: train may go ahead
	}{
		{"a good patch", func(f *fixture) { f.author(patch, authorRecord(patch)) }, want{}},
		{"no patch", func(f *fixture) { f.author([]byte{}, authorRecord(nil)) }, want{rules.PolicyFailure, stages.Author, rules.ReasonNoPatch, false}},
		{"no record", func(f *fixture) { f.write(stages.Author) }, want{rules.PolicyFailure, stages.Author, "missing_record", false}},
		{"a train record in the author output", func(f *fixture) {
			f.write(stages.Author, mustFormat(t, authorRecord(patch)), goodTrainLine(t))
		}, want{rules.PolicyFailure, stages.Author, "foreign_record", true}},
		{"patch differs from the record", func(f *fixture) {
			bad := append([]byte{}, patch...)
			bad[0] = 'D'
			f.author(bad, authorRecord(patch))
		}, want{rules.PolicyFailure, stages.Author, "patch_mismatch", true}},
		{"patch is a fifo", func(f *fixture) {
			f.author(nil, authorRecord(patch))
			if err := syscall.Mkfifo(filepath.Join(f.e.Dir, "author", "change.diff"), 0o600); err != nil {
				t.Fatal(err)
			}
		}, want{rules.PolicyFailure, stages.Author, rules.ReasonBadPatch, true}},
		{"patch is a symlink to /dev/zero", func(f *fixture) {
			f.author(nil, authorRecord(patch))
			if err := os.Symlink("/dev/zero", filepath.Join(f.e.Dir, "author", "change.diff")); err != nil {
				t.Fatal(err)
			}
		}, want{rules.PolicyFailure, stages.Author, rules.ReasonBadPatch, true}},
		{"patch is a 64 GiB sparse file", func(f *fixture) {
			f.author(nil, authorRecord(patch))
			p := filepath.Join(f.e.Dir, "author", "change.diff")
			if err := os.WriteFile(p, nil, 0o600); err != nil {
				t.Fatal(err)
			}
			if err := os.Truncate(p, 64<<30); err != nil {
				t.Fatal(err)
			}
		}, want{rules.PolicyFailure, stages.Author, rules.ReasonBadPatch, true}},
		{"patch larger than its record says", func(f *fixture) {
			f.author(append(append([]byte{}, patch...), patch...), authorRecord(patch))
		}, want{rules.PolicyFailure, stages.Author, rules.ReasonBadPatch, true}},
		{"record claims more than a patch may have", func(f *fixture) {
			a := authorRecord(patch)
			a.PatchBytes = stages.MaxPatchBytes + 1
			f.author(patch, a)
		}, want{rules.PolicyFailure, stages.Author, rules.ReasonBadPatch, true}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			f := newFixture(t)
			c.setup(f)
			var before, after runtime.MemStats
			runtime.ReadMemStats(&before)
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			o, err := f.collectAuthor(ctx)
			runtime.ReadMemStats(&after)
			if err != nil {
				t.Fatalf("collectAuthor: %v", err)
			}
			if alloc := after.TotalAlloc - before.TotalAlloc; alloc > 100<<20 {
				t.Errorf("collectAuthor allocated %d MiB, want under 100 MiB", alloc>>20)
			}
			if c.want.kind == "" {
				if o != nil {
					t.Fatalf("outcome %s (%s: %s), want train to go ahead", o.Outcome, o.FailureReason, o.Detail)
				}
				if f.e.Author == nil || f.e.Author.PatchBytes != int64(len(patch)) {
					t.Fatalf("author record not kept: %+v", f.e.Author)
				}
				return
			}
			if o == nil {
				t.Fatal("no outcome, want one")
			}
			check(t, o, c.want)
		})
	}
}

func TestAttributionAuthorJob(t *testing.T) {
	uid := os.Getuid()
	cases := []struct {
		state, exit string
		want        want
	}{
		{"FAILED", "1:0", want{rules.PolicyFailure, stages.Author, rules.ReasonAuthorFailed, false}},
		{"FAILED", "0:9", want{rules.PolicyFailure, stages.Author, rules.ReasonAuthorFailed, false}},
		{"TIMEOUT", "0:0", want{rules.PolicyFailure, stages.Author, rules.ReasonAuthorFailed, false}},
		{"OUT_OF_MEMORY", "0:125", want{rules.PolicyFailure, stages.Author, rules.ReasonAuthorFailed, false}},
		{"FAILED", "78:0", want{rules.InfraFailure, stages.Author, rules.ReasonScriptRefused, false}},
		{"FAILED", "69:0", want{rules.InfraFailure, stages.Author, rules.ReasonIsolationBreach, false}},
		{"FAILED", "75:0", want{rules.InfraFailure, stages.Author, rules.ReasonPolicyEndpointFailed, false}},
		{"NODE_FAIL", "0:0", want{rules.InfraFailure, stages.Author, "node_failure", false}},
		{"BOOT_FAIL", "0:0", want{rules.InfraFailure, stages.Author, "boot_failure", false}},
		{fmt.Sprintf("CANCELLED by %d", uid), "0:15", want{rules.PolicyFailure, stages.Author, rules.ReasonForeignCancel, true}},
		{fmt.Sprintf("CANCELLED by %d", uid+1), "0:15", want{rules.InfraFailure, stages.Author, rules.ReasonCancelled, false}},
	}
	for _, c := range cases {
		t.Run(c.state+"/"+c.exit, func(t *testing.T) {
			f := newFixture(t)
			f.set(authorID, c.state, c.exit)
			o, err := f.collectAuthor(context.Background())
			if err != nil || o == nil {
				t.Fatal(o, err)
			}
			check(t, o, c.want)
		})
	}
}

func TestParseLstat(t *testing.T) {
	fi, err := parseLstat("regular file|12|1700000000|42|1")
	if err != nil || !fi.Exists || !fi.Regular() || fi.Size != 12 || fi.Ctime.Unix() != 1700000000 || fi.Inode != 42 || fi.Links != 1 {
		t.Fatalf("parseLstat: %+v, %v", fi, err)
	}
	for _, bad := range []string{"", "fifo|1|2|3", "fifo|x|2|3|1", "|1|2|3|1", "fifo|-1|2|3|1"} {
		if _, err := parseLstat(bad); err == nil {
			t.Errorf("parseLstat(%q): no error", bad)
		}
	}
}

func FuzzParseLstat(f *testing.F) {
	f.Add("regular file|12|1700000000|42|1")
	f.Add("fifo|0|1|2|1")
	f.Fuzz(func(t *testing.T, s string) {
		fi, err := parseLstat(s)
		if err == nil && (!fi.Exists || fi.Size < 0 || fi.Links < 0 || fi.Type == "") {
			t.Fatalf("parseLstat(%q) = %+v without error", s, fi)
		}
	})
}

func TestParseID(t *testing.T) {
	user, uid, err := parseID("uid=1001(nemorl) gid=1001(nemorl) groups=1001(nemorl)\n")
	if err != nil || user != "nemorl" || uid != 1001 {
		t.Fatalf("parseID: %q %d %v", user, uid, err)
	}
	for _, bad := range []string{"", "uid=x(a)", "uid=1(a", "gid=1(a)"} {
		if _, _, err := parseID(bad); err == nil {
			t.Errorf("parseID(%q): no error", bad)
		}
	}
}
