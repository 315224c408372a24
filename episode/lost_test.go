package episode

import (
	"context"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nemorl/nemorl-slurm/configs"
	"github.com/nemorl/nemorl-slurm/ledger"
	"github.com/nemorl/nemorl-slurm/record"
	"github.com/nemorl/nemorl-slurm/remote"
	"github.com/nemorl/nemorl-slurm/rules"
	"github.com/nemorl/nemorl-slurm/slurm"
	"github.com/nemorl/nemorl-slurm/stages"
)

// A job is lost only after JobLostAfter of continuous evidence: polls that
// answered and did not know it. Seeing it, or a poll whose sacct failed
// (slurmdbd away), starts the count again (bug: two short slurmdbd outages
// ten minutes apart failed every episode as job_lost).
func TestLostNeedsContinuousEvidence(t *testing.T) {
	cfg := exampleConfig(t)
	lg, err := ledger.OpenLedger(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	now := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	host := remote.NewLocal()
	d := &Driver{Config: cfg, Host: host, Slurm: slurm.New(host), Ledger: lg, Now: func() time.Time { return now }}
	e := &ledger.Entry{Episode: "ep-lost", Staged: true, Dir: t.TempDir(), Jobs: map[stages.Stage]*ledger.Submission{stages.Author: {JobID: "41", Intent: now}}}
	if err := lg.Create(e, []byte("p")); err != nil {
		t.Fatal(err)
	}
	st := &watchState{since: map[string]time.Time{}}
	w := st.waitsFor(e.Episode, d.now, new(sync.Mutex))
	unknown := func(src slurm.Source) map[string]slurm.JobInfo {
		return map[string]slurm.JobInfo{"41": {ID: "41", State: slurm.State{Class: slurm.Unknown, ByUID: -1}, Source: src}}
	}
	step := func(after time.Duration, infos map[string]slurm.JobInfo) {
		t.Helper()
		now = now.Add(after)
		if err := d.advance(context.Background(), e, infos, w, nil); err != nil {
			t.Fatal(err)
		}
	}
	step(0, unknown(slurm.SourceNone))                                    // the count starts
	step(rules.JobLostAfter-time.Minute, unknown(slurm.SourceUnanswered)) // sacct failed: no evidence, the count restarts
	step(2*time.Minute, unknown(slurm.SourceNone))                        // starts again here
	step(rules.JobLostAfter-time.Minute, map[string]slurm.JobInfo{"41": {ID: "41", State: slurm.State{Raw: "RUNNING", Class: slurm.Running}, Source: slurm.SourceSqueue}})
	step(time.Minute, unknown(slurm.SourceNone))
	step(rules.JobLostAfter-time.Second, unknown(slurm.SourceNone))
	if e.Final() {
		t.Fatalf("lost after interrupted evidence: %+v", e.Outcome)
	}
	step(2*time.Second, unknown(slurm.SourceNone))
	if !e.Final() || e.Outcome.FailureReason != rules.ReasonJobLost {
		t.Fatalf("after %s of continuous evidence: %+v", rules.JobLostAfter, e.Outcome)
	}
}

type recordRunner struct{ cmds [][]string }

// args are the arguments of the last command of program prog, or nil.
func (r *recordRunner) args(prog string) []string {
	var out []string
	for _, c := range r.cmds {
		if c[0] == prog {
			out = c[1:]
		}
	}
	return out
}

func (r *recordRunner) Run(_ context.Context, c remote.Command) (*remote.Result, error) {
	r.cmds = append(r.cmds, c.Argv)
	return &remote.Result{}, nil
}

// An episode that ends cancels its jobs that still run or wait, on record
// first (bug: a lost author left train and eval running).
func TestFinishCancelsLiveJobs(t *testing.T) {
	lg, err := ledger.OpenLedger(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	rec := &recordRunner{}
	d := &Driver{Config: &configs.Config{}, Host: remote.NewLocal(), Slurm: slurm.New(rec), Ledger: lg}
	e := &ledger.Entry{Episode: "ep-fin", Staged: true, Dir: t.TempDir(), Jobs: map[stages.Stage]*ledger.Submission{
		stages.Author: {JobID: "1"}, stages.Train: {JobID: "2"}, stages.Eval: {JobID: "3"}}}
	if err := lg.Create(e, []byte("p")); err != nil {
		t.Fatal(err)
	}
	o := failed(&rules.Outcome{Episode: e.Episode, Jobs: map[stages.Stage]rules.JobSummary{
		stages.Author: {ID: "1", State: "COMPLETED"}, stages.Train: {ID: "2", State: "RUNNING"}, stages.Eval: {ID: "3", State: "PENDING"}}}, rules.InfraFailure, stages.Author, rules.ReasonJobLost, "x")
	infos := map[string]slurm.JobInfo{"1": {ID: "1", State: slurm.ParseState("COMPLETED", "")},
		"2": {ID: "2", State: slurm.ParseState("RUNNING", "")}, "3": {ID: "3", State: slurm.ParseState("PENDING", "")}}
	if err := d.finish(context.Background(), e, o, infos, change{}); err != nil {
		t.Fatal(err)
	}
	scancel := rec.args("scancel")
	if strings.Join(scancel, " ") != "2 3" {
		t.Errorf("scancel %v, want the running train and the pending eval (commands %v)", scancel, rec.cmds)
	}
	got, err := lg.Load(e.Episode)
	if err != nil || !got.Final() || strings.Join(got.CancelsIssued, " ") != "2 3" {
		t.Errorf("ledger: %+v %v", got, err)
	}
}

// A stage collected is never queried again: the poll asks sacct for the
// others only, and the stage's job is as the ledger keeps it.
func TestPollSkipsEndedStages(t *testing.T) {
	lg, err := ledger.OpenLedger(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	rec := &recordRunner{}
	d := &Driver{Config: &configs.Config{}, Host: remote.NewLocal(), Slurm: slurm.New(rec), Ledger: lg}
	start := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	e := &ledger.Entry{Episode: "ep-ended", Staged: true, Jobs: map[stages.Stage]*ledger.Submission{
		stages.Author: {JobID: "1"}, stages.Train: {JobID: "2"}, stages.Eval: {JobID: "3"}},
		Ended: map[stages.Stage]rules.JobSummary{stages.Author: {ID: "1", State: "COMPLETED", ExitCode: "0:0", Start: start, End: start.Add(time.Minute)}}}
	if err := lg.Create(e, []byte("p")); err != nil {
		t.Fatal(err)
	}
	st := &watchState{entries: map[string]*ledger.Entry{e.Episode: e}, order: []string{e.Episode}, locks: map[string]*ledger.Lock{}, since: map[string]time.Time{}}
	rows, err := d.poll(context.Background(), st, false)
	if err != nil {
		t.Fatal(err)
	}
	var jobs string
	for _, c := range rec.cmds {
		for _, a := range c {
			if v, ok := strings.CutPrefix(a, "--jobs="); ok && slices.Contains(c, "sacct") {
				jobs = v
			}
		}
	}
	if jobs != "2,3" {
		t.Errorf("sacct --jobs=%s, want 2,3 (not the collected author); commands %v", jobs, rec.cmds)
	}
	if len(rows) != 1 || rows[0].Stage != stages.Train {
		t.Errorf("rows %+v: want the train stage current (the author completed, as the ledger keeps it)", rows)
	}
}

// A train job that ended NODE_FAIL is given RequeueGrace to come back
// (Slurm requeues it itself, same job id); a requeue starts the grace
// again for a later failure.
func TestNodeFailSettles(t *testing.T) {
	cfg := exampleConfig(t)
	lg, err := ledger.OpenLedger(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	now := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	rec := &recordRunner{}
	d := &Driver{Config: cfg, Host: remote.NewLocal(), Slurm: slurm.New(rec), Ledger: lg, Now: func() time.Time { return now }}
	e := &ledger.Entry{Episode: "ep-nf", Staged: true, Dir: t.TempDir(), Author: &record.Author{PatchBytes: 1}, Jobs: map[stages.Stage]*ledger.Submission{
		stages.Author: {JobID: "1"}, stages.Train: {JobID: "2"}, stages.Eval: {JobID: "3"}}}
	if err := lg.Create(e, []byte("p")); err != nil {
		t.Fatal(err)
	}
	st := &watchState{since: map[string]time.Time{}}
	w := st.waitsFor(e.Episode, d.now, new(sync.Mutex))
	infos := func(train string) map[string]slurm.JobInfo {
		return map[string]slurm.JobInfo{
			"1": {ID: "1", State: slurm.ParseState("COMPLETED", ""), Source: slurm.SourceSacct},
			"2": {ID: "2", State: slurm.ParseState(train, ""), Source: slurm.SourceSacct},
			"3": {ID: "3", State: slurm.ParseState("PENDING", ""), Reason: "Dependency", Source: slurm.SourceSqueue},
		}
	}
	step := func(after time.Duration, train string) {
		t.Helper()
		now = now.Add(after)
		if err := d.advance(context.Background(), e, infos(train), w, nil); err != nil {
			t.Fatal(err)
		}
	}
	step(0, "NODE_FAIL")
	if _, ok := st.since[e.Episode+"/requeue-2"]; !ok || e.Final() {
		t.Fatalf("NODE_FAIL did not start the grace: %+v %v", e.Outcome, st.since)
	}
	step(rules.RequeueGrace/2, "PENDING") // requeued by Slurm: the grace ends
	if _, ok := st.since[e.Episode+"/requeue-2"]; ok {
		t.Fatalf("a requeue did not end the grace: %v", st.since)
	}
	step(rules.RequeueGrace, "NODE_FAIL") // its second run failed: a new grace
	if e.Final() {
		t.Fatalf("final %v after a requeue and a second NODE_FAIL just now", e.Outcome)
	}
	step(rules.RequeueGrace/2, "NODE_FAIL")
	if e.Final() {
		t.Fatalf("final within the grace: %+v", e.Outcome)
	}
	if e.Final() || len(e.Retried) > 0 {
		t.Fatal("advance went past train's NODE_FAIL within the grace")
	}
	step(rules.RequeueGrace, "NODE_FAIL") // not requeued within the grace: its end counts
	// advance went on to train's end: the cluster's failure is retried
	// (or, with no attempts left, the episode ends).
	if _, ok := st.since[e.Episode+"/requeue-2"]; ok || (len(e.Retried[stages.Train]) != 1 && !e.Final()) {
		t.Fatalf("after the grace, advance did not go past train's NODE_FAIL: %v (retried %v, outcome %+v)", st.since, e.Retried, e.Outcome)
	}
}

// exampleConfig is configs/lab-none.yaml as embedded, loaded without the
// environment.
func exampleConfig(t *testing.T) *configs.Config {
	t.Helper()
	data, err := configs.Example("lab-none.yaml")
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := configs.Load("lab-none.yaml", data, func(string) (string, bool) { return "", false })
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

func ptr[T any](v T) *T { return &v }

// failed is o with a failure written in, as the rules write a verdict.
func failed(o *rules.Outcome, k rules.Kind, stage stages.Stage, reason, detail string) *rules.Outcome {
	(&rules.Verdict{Kind: k, Stage: stage, Reason: reason, Detail: detail}).Apply(o)
	return o
}
