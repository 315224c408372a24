package episode

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nemorl/nemorl-slurm/ledger"
	"github.com/nemorl/nemorl-slurm/stages"
)

// TestSubmitStageArray: a poll's batch of trains as one array through
// array_submit.sh (the stand-in sbatch of stageDriver), then their evals
// as one aftercorr array at the train tasks' indexes. An sbatch that made
// no job (the rate limit) leaves no intent; one refused for good (an
// array Slurm will not take) sends the stage one by one from then on.
func TestSubmitStageArray(t *testing.T) {
	d, root := stageDriver(t)
	ctx := context.Background()
	specs := make([]Spec, 3)
	for i := range specs {
		specs[i] = Spec{Prompt: []byte(fmt.Sprintf("prompt %d\n", i))}
	}
	out := d.Submit(ctx, specs)
	for i, r := range out {
		if r.Err != nil {
			t.Fatalf("episode %d: %v", i, r.Err)
		}
		r.Lock.Unlock()
	}
	sb := d.parts().submitter
	batch := func(stage stages.Stage, of string) *stageBatch {
		b := &stageBatch{stage: stage, of: of}
		for i, r := range out {
			after := r.Entry.JobID(stages.Author)
			if stage == stages.Eval {
				after = r.Entry.JobID(stages.Train)
			}
			if !b.take(r.Entry, stage, change{}, after) {
				t.Fatalf("episode %d: not taken into the %s batch: %+v", i, stage, r.Entry.Jobs)
			}
		}
		return b
	}
	args := func() string {
		b, _ := os.ReadFile(filepath.Join(root, "sbatch.args"))
		return string(b)
	}

	// The rate limit: no job made, no intent left, nothing submitted.
	t.Setenv("FAKE_SBATCH_RC", "1")
	t.Setenv("FAKE_SBATCH_ERR", "sbatch: error: Batch job submission failed: RPC rate limit exceeded")
	if name, job, alone := sb.submitStageArray(ctx, batch(stages.Train, ""), ""); name != "" || job != "" || alone != nil {
		t.Fatalf("refused for now: %q %q %d alone", name, job, len(alone))
	}
	for i, r := range out {
		if r.Entry.Jobs[stages.Train] != nil {
			t.Fatalf("episode %d: train %+v after an sbatch that made no job", i, r.Entry.Jobs[stages.Train])
		}
	}

	// Trains: one array, each entry its task, each manifest its id.
	t.Setenv("FAKE_SBATCH_RC", "0")
	t.Setenv("FAKE_SBATCH_ERR", "")
	t.Setenv("FAKE_SBATCH_OUT", "5151")
	name, job, alone := sb.submitStageArray(ctx, batch(stages.Train, ""), "")
	if name == "" || job != "5151" || alone != nil {
		t.Fatalf("trains: %q %q %d alone", name, job, len(alone))
	}
	if a := args(); !strings.Contains(a, "--array=0,1,2\n") || strings.Contains(a, "--dependency") {
		t.Errorf("the train array's sbatch: %s", a)
	}
	for i, r := range out {
		tr := r.Entry.Jobs[stages.Train]
		if tr == nil || tr.JobID != fmt.Sprintf("5151_%d", tr.Array.Task) || tr.Array.Name != name || tr.After != r.Entry.JobID(stages.Author) {
			t.Fatalf("episode %d: train %+v", i, tr)
		}
		var m Manifest
		b, _ := os.ReadFile(filepath.Join(r.Entry.Dir, ManifestFile))
		if err := json.Unmarshal(b, &m); err != nil || m.Jobs[stages.Train] != tr.JobID || m.Jobs[stages.Author] != r.Entry.JobID(stages.Author) {
			t.Errorf("episode %d: manifest %s (%v), want train %s", i, b, err, tr.JobID)
		}
		script, err := os.ReadFile(tr.Array.Script)
		if sum := sha256.Sum256(script); err != nil || hex.EncodeToString(sum[:]) != tr.Array.ScriptSHA256 {
			t.Errorf("episode %d: the array's script %s: %v, sha256 %x, want %s", i, tr.Array.Script, err, sum, tr.Array.ScriptSHA256)
		}
		if !strings.Contains(string(script), r.Entry.Scripts[stages.Train]) {
			t.Errorf("episode %d: the array's script does not pin its train script's sha256", i)
		}
	}

	// Evals: one array after the trains', task for task.
	t.Setenv("FAKE_SBATCH_OUT", "5252")
	name2, job2, alone := sb.submitStageArray(ctx, batch(stages.Eval, name), job)
	if name2 == "" || name2 == name || job2 != "5252" || alone != nil {
		t.Fatalf("evals: %q %q %d alone", name2, job2, len(alone))
	}
	if a := args(); !strings.Contains(a, "--dependency=aftercorr:5151\n") || !strings.Contains(a, "--kill-on-invalid-dep=yes\n") {
		t.Errorf("the eval array's sbatch: %s", a)
	}
	for i, r := range out {
		ev, tr := r.Entry.Jobs[stages.Eval], r.Entry.Jobs[stages.Train]
		if ev == nil || ev.Array.Task != tr.Array.Task || ev.JobID != fmt.Sprintf("5252_%d", tr.Array.Task) || ev.After != tr.JobID {
			t.Fatalf("episode %d: eval %+v, train %+v: want the train task's index", i, ev, tr)
		}
	}

	// An array refused for good: its episodes go one by one, now and
	// from then on, with no intent left.
	for _, r := range out {
		delete(r.Entry.Jobs, stages.Eval)
	}
	t.Setenv("FAKE_SBATCH_RC", "1")
	t.Setenv("FAKE_SBATCH_ERR", "sbatch: error: Batch job submission failed: Invalid job array specification")
	if _, _, alone := sb.submitStageArray(ctx, batch(stages.Eval, name), job); len(alone) != 3 {
		t.Fatalf("refused for good: %d alone, want 3", len(alone))
	}
	for i, r := range out {
		if r.Entry.Jobs[stages.Eval] != nil {
			t.Errorf("episode %d: eval %+v left after a refusal", i, r.Entry.Jobs[stages.Eval])
		}
	}
	before := args()
	t.Setenv("FAKE_SBATCH_RC", "0")
	if _, _, alone := sb.submitStageArray(ctx, batch(stages.Eval, name), job); len(alone) != 3 || args() != before {
		t.Fatalf("after the refusal: %d alone, sbatch ran again: %v", len(alone), args() != before)
	}
}

// TestSubmitStageArrayLeavesOutAForeignScript: an episode whose train
// script does not render here with the sha256 its ledger recorded (staged
// under another config) is left out of the array, to go on its own; the
// others are one array.
func TestSubmitStageArrayLeavesOutAForeignScript(t *testing.T) {
	d, root := stageDriver(t)
	ctx := context.Background()
	out := d.Submit(ctx, []Spec{{Prompt: []byte("a")}, {Prompt: []byte("b")}, {Prompt: []byte("c")}})
	b := &stageBatch{stage: stages.Train}
	for i, r := range out {
		if r.Err != nil {
			t.Fatalf("episode %d: %v", i, r.Err)
		}
		r.Lock.Unlock()
		b.take(r.Entry, stages.Train, change{}, r.Entry.JobID(stages.Author))
	}
	foreign := b.items[0].e
	foreign.Scripts[stages.Train] = strings.Repeat("0", 64)
	t.Setenv("FAKE_SBATCH_OUT", "6161")
	name, job, alone := d.parts().submitter.submitStageArray(ctx, b, "")
	if name == "" || job != "6161" || len(alone) != 1 || alone[0] != foreign || foreign.Jobs[stages.Train] != nil {
		t.Fatalf("array %q job %q, alone %d (want the foreign episode alone, no intent: %+v)", name, job, len(alone), foreign.Jobs[stages.Train])
	}
	a, _ := os.ReadFile(filepath.Join(root, "sbatch.args"))
	if !strings.Contains(string(a), "--array=1,2\n") {
		t.Errorf("sbatch: %s: want tasks 1 and 2", a)
	}
}

// TestStageBatchInArray: after a train array's submission, only the
// episodes whose train is a task of it go on to the eval batch (those
// left out were advanced on their own already).
func TestStageBatchInArray(t *testing.T) {
	in := &ledger.Entry{Jobs: map[stages.Stage]*ledger.Submission{stages.Train: {JobID: "7_0", Array: &ledger.ArrayTask{Name: "a"}}}}
	other := &ledger.Entry{Jobs: map[stages.Stage]*ledger.Submission{stages.Train: {JobID: "8_0", Array: &ledger.ArrayTask{Name: "b"}}}}
	alone := &ledger.Entry{Jobs: map[stages.Stage]*ledger.Submission{stages.Train: {JobID: "9"}}}
	none := &ledger.Entry{Jobs: map[stages.Stage]*ledger.Submission{}}
	b := &stageBatch{stage: stages.Train}
	for _, e := range []*ledger.Entry{in, other, alone, none} {
		b.items = append(b.items, &batchItem{e: e})
	}
	if got := b.inArray("a"); len(got) != 1 || got[0] != in {
		t.Fatalf("inArray(a) = %d entries, want the one whose train is a task of a", len(got))
	}
}
