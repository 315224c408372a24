package episode

import (
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/nemorl/nemorl-slurm/ledger"
	"github.com/nemorl/nemorl-slurm/record"
	"github.com/nemorl/nemorl-slurm/rules"
	"github.com/nemorl/nemorl-slurm/slurm"
	"github.com/nemorl/nemorl-slurm/stages"
)

// applyBase is an entry mid-episode: author ended and verified, train
// submitted, eval's intent on record.
func applyBase() *ledger.Entry {
	t0 := time.Date(2026, 12, 7, 4, 0, 0, 0, time.UTC)
	return &ledger.Entry{
		Episode: "ep-20261207T040000Z-00000001", Staged: true,
		Scripts: map[stages.Stage]string{stages.Author: "a", stages.Train: "t", stages.Eval: "e"},
		Jobs: map[stages.Stage]*ledger.Submission{
			stages.Author: {Intent: t0, JobID: "10", Submitted: t0},
			stages.Train:  {Intent: t0, JobID: "11", Submitted: t0, After: "10"},
			stages.Eval:   {Intent: t0, After: "11"},
		},
		Ended:         map[stages.Stage]rules.JobSummary{stages.Author: {ID: "10", State: "COMPLETED"}},
		Author:        &record.Author{},
		CancelsIssued: []string{"9"},
	}
}

// TestChangeApplyTo: each part of a change, made on the entry, and only
// what it names changes.
func TestChangeApplyTo(t *testing.T) {
	t1 := time.Date(2026, 12, 7, 5, 0, 0, 0, time.UTC)
	outcome := &rules.Outcome{Outcome: rules.Scored}
	cases := []struct {
		name string
		c    change
		want func(e *ledger.Entry)
	}{
		{"nothing", change{}, func(*ledger.Entry) {}},
		{"eval's job id", change{stage: stages.Eval, job: &submittedJob{id: "12", at: t1}}, func(e *ledger.Entry) {
			e.Jobs[stages.Eval].JobID, e.Jobs[stages.Eval].Submitted = "12", t1
		}},
		{"eval's job adopted", change{stage: stages.Eval, job: &submittedJob{id: "12", at: t1, adopted: true}}, func(e *ledger.Entry) {
			e.Jobs[stages.Eval].JobID, e.Jobs[stages.Eval].Submitted, e.Jobs[stages.Eval].Adopted = "12", t1, true
		}},
		{"eval's intent withdrawn", change{stage: stages.Eval, withdraw: true}, func(e *ledger.Entry) { delete(e.Jobs, stages.Eval) }},
		{"a new intent", change{stage: stages.Eval, intent: &ledger.Submission{Intent: t1, Attempt: 2}}, func(e *ledger.Entry) {
			e.Jobs[stages.Eval] = &ledger.Submission{Intent: t1, Attempt: 2}
		}},
		{"eval's files checked", change{evalOutputChecked: true}, func(e *ledger.Entry) { e.EvalOutputChecked = true }},
		{"cancels, once each", change{cancels: []string{"9", "11", "11"}}, func(e *ledger.Entry) { e.CancelsIssued = []string{"9", "11"} }},
		{"a cancel request", change{cancelRequested: "operator"}, func(e *ledger.Entry) { e.CancelRequested = "operator" }},
		{"the outcome", change{outcome: outcome, cancels: []string{"12"}}, func(e *ledger.Entry) {
			e.Outcome, e.CancelsIssued = outcome, []string{"9", "12"}
		}},
		{"staged again keeps the scripts' sha256s", change{staged: true, scripts: map[stages.Stage]string{stages.Author: "other"}}, func(*ledger.Entry) {}},
		{"a retry of train with eval's check", change{evalOutputChecked: true, cancels: []string{"11"}, retire: []retired{
			{stages.Train, rules.Attempt{Attempt: 1, JobID: "11", Reason: "node_fail"}},
			{stages.Eval, rules.Attempt{Attempt: 1, Reason: rules.ReasonTrainRetried}},
		}}, func(e *ledger.Entry) {
			e.Retried = map[stages.Stage][]rules.Attempt{
				stages.Train: {{Attempt: 1, JobID: "11", Reason: "node_fail"}},
				stages.Eval:  {{Attempt: 1, Reason: rules.ReasonTrainRetried}},
			}
			delete(e.Jobs, stages.Train)
			delete(e.Jobs, stages.Eval)
			e.CancelsIssued = []string{"9", "11"}
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, want := applyBase(), applyBase()
			tc.c.applyTo(got)
			tc.want(want)
			if !reflect.DeepEqual(got, want) {
				t.Fatalf("%s:\n got %+v\nwant %+v", tc.c.what(), got, want)
			}
			if tc.c.empty() != (tc.name == "nothing") {
				t.Errorf("empty() = %v", tc.c.empty())
			}
		})
	}
	// What is recorded once stays: the author's record and the outcome.
	e := applyBase()
	first := e.Author
	change{author: &record.Author{}, authorJob: slurm.JobInfo{ID: "99"}, outcome: outcome}.applyTo(e)
	change{outcome: &rules.Outcome{Outcome: rules.PolicyFailure}}.applyTo(e)
	if e.Author != first || e.Ended[stages.Author].ID != "10" || e.Outcome != outcome {
		t.Fatalf("recorded twice: author %p (want %p), ended %+v, outcome %+v", e.Author, first, e.Ended[stages.Author], e.Outcome)
	}
	// The author's record on an entry without one ends the author's job.
	e = applyBase()
	e.Author, e.Ended = nil, nil
	change{author: first, authorJob: slurm.JobInfo{ID: "10", State: slurm.State{Raw: "COMPLETED"}}}.applyTo(e)
	if e.Author != first || e.Ended[stages.Author].ID != "10" {
		t.Fatalf("author record: %+v, ended %+v", e.Author, e.Ended)
	}
}

// TestApplySaveFails: a change whose save fails leaves the entry as it
// was in memory (nothing unrecorded is acted upon) and names the change.
func TestApplySaveFails(t *testing.T) {
	dir := t.TempDir()
	lg, err := ledger.OpenLedger(dir)
	if err != nil {
		t.Fatal(err)
	}
	w := &entries{ledger: lg}
	e := applyBase()
	if err := w.apply(e, change{evalOutputChecked: true}); err != nil {
		t.Fatal(err)
	}
	saved, err := lg.Load(e.Episode)
	if err != nil || !saved.EvalOutputChecked {
		t.Fatalf("after apply: %+v %v", saved, err)
	}
	before, err := json.Marshal(e)
	if err != nil {
		t.Fatal(err)
	}
	beforeEntry := snapshot(e)
	// The entry's file replaced by a directory: the next save fails.
	p := filepath.Join(dir, "episodes", e.Episode+".json")
	if err := os.Remove(p); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(p, "x"), 0o700); err != nil {
		t.Fatal(err)
	}
	err = w.apply(e, change{stage: stages.Eval, job: &submittedJob{id: "12", at: time.Now()}, outcome: &rules.Outcome{Outcome: rules.Scored}})
	if err == nil || !strings.Contains(err.Error(), "eval job 12") {
		t.Fatalf("apply over a failing save: %v, want an error naming the change", err)
	}
	after, _ := json.Marshal(e)
	if string(after) != string(before) || !reflect.DeepEqual(*e, beforeEntry) {
		t.Fatalf("entry after a failed save:\n got %s\nwant %s", after, before)
	}
}
