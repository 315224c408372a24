package episode

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nemorl/nemorl-slurm/ledger"
	"github.com/nemorl/nemorl-slurm/record"
	"github.com/nemorl/nemorl-slurm/remote"
	"github.com/nemorl/nemorl-slurm/rules"
	"github.com/nemorl/nemorl-slurm/slurm"
	"github.com/nemorl/nemorl-slurm/stages"
)

// recordHost records the commands run on it and runs none.
type recordHost struct {
	remote.Host
	cmds [][]string
}

func (h *recordHost) Run(_ context.Context, c remote.Command) (*remote.Result, error) {
	h.cmds = append(h.cmds, c.Argv)
	return &remote.Result{}, nil
}

// A train that ended NODE_FAIL (submitted --no-requeue: Slurm will not
// rerun it) is retired with the eval that waited on it, on record with the
// cancels first; both are submitted again as attempt 2, tagged so; the
// second failure ends the episode once episodes.retries is spent, and the
// outcome counts the attempts.
func TestRetryTrain(t *testing.T) {
	cfg := exampleConfig(t)
	cfg.Episodes.Retries, cfg.Episodes.NoRequeue = 1, true
	lg, err := ledger.OpenLedger(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	now := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	sl := &recordRunner{}
	host := &recordHost{Host: remote.NewLocal()}
	d := &Driver{Config: cfg, Host: host, Slurm: slurm.New(sl), Ledger: lg, Now: func() time.Time { return now }}
	dir := "/work/nemorl/ep-retry"
	// The train was a task of a job array (its script under .arrays/).
	trainArray := &ledger.ArrayTask{Name: "nemorl-train-arr-1", Script: "/work/nemorl/.arrays/arr-1/train.sh", Task: 0}
	e := &ledger.Entry{Episode: "ep-retry", Staged: true, Dir: dir, Author: &record.Author{PatchBytes: 10}, Jobs: map[stages.Stage]*ledger.Submission{
		stages.Author: {JobID: "1"}, stages.Train: {JobID: "2", Array: trainArray}, stages.Eval: {JobID: "3"}},
		Ended: map[stages.Stage]rules.JobSummary{stages.Author: {ID: "1", State: "COMPLETED", ExitCode: "0:0"}}}
	if err := lg.Create(e, []byte("p")); err != nil {
		t.Fatal(err)
	}
	st := &watchState{since: map[string]time.Time{}}
	w := st.waitsFor(e.Episode, d.now, new(sync.Mutex))
	infos := map[string]slurm.JobInfo{
		"1": {ID: "1", State: slurm.ParseState("COMPLETED", ""), Source: slurm.SourceSacct},
		"2": {ID: "2", State: slurm.ParseState("NODE_FAIL", ""), Runs: 1, Source: slurm.SourceSacct},
		"3": {ID: "3", State: slurm.ParseState("CANCELLED", "DependencyNeverSatisfied"), Runs: 1, Source: slurm.SourceSacct},
	}
	if err := d.advance(context.Background(), e, infos, w, nil); err != nil {
		t.Fatal(err)
	}
	if e.Final() {
		t.Fatalf("a NODE_FAIL train with a retry left ended the episode: %+v", e.Outcome)
	}
	got, err := lg.Load(e.Episode)
	if err != nil {
		t.Fatal(err)
	}
	tr, ev := got.Retried[stages.Train], got.Retried[stages.Eval]
	if len(tr) != 1 || tr[0].JobID != "2" || tr[0].Attempt != 1 || tr[0].Reason != string(slurm.FailureNodeFailure) || tr[0].Job.State != "NODE_FAIL" {
		t.Errorf("ledger's retired train: %+v", tr)
	}
	if len(ev) != 1 || ev[0].JobID != "3" || ev[0].Reason != rules.ReasonTrainRetried {
		t.Errorf("ledger's retired eval: %+v", ev)
	}
	// The retired task keeps its array's name and script: clean removes
	// the array's directory only once this episode is cleaned too.
	if tr[0].Array != trainArray.Name || tr[0].ArrayScript != trainArray.Script || ev[0].Array != "" {
		t.Errorf("retired attempts' arrays: train %q %q, eval %q", tr[0].Array, tr[0].ArrayScript, ev[0].Array)
	}
	if a := got.ArrayScripts(); len(a) != 1 || a[trainArray.Name] != trainArray.Script {
		t.Errorf("ArrayScripts after the retry: %v, want the retired train's array", a)
	}
	if got.Jobs[stages.Train] != nil || got.Jobs[stages.Eval] != nil || !slices.Contains(got.CancelsIssued, "2") || !slices.Contains(got.CancelsIssued, "3") {
		t.Errorf("ledger after the retry: jobs %v, cancels %v", got.Jobs, got.CancelsIssued)
	}
	if tr[0].Output != dir+"/train/out.attempt-1.log" || ev[0].Output != dir+"/eval/out.attempt-1.log" {
		t.Errorf("outputs kept as %q and %q", tr[0].Output, ev[0].Output)
	}
	scancel, moved := sl.args("scancel"), []string(nil)
	for _, c := range host.cmds {
		if len(c) > 4 && c[0] == "sh" && c[2] == moveAsideScript {
			moved = c[4:]
		}
	}
	if strings.Join(scancel, " ") != "2 3" {
		t.Errorf("scancel %v, want the retired train and eval", scancel)
	}
	if !slices.Contains(moved, dir+"/train/out.log") || !slices.Contains(moved, dir+"/train/out.attempt-1.log") {
		t.Errorf("outputs moved: %v", moved)
	}

	// The manifest on the cluster lists the retired jobs too.
	if m, err := d.parts().stager.manifest(got, ""); err != nil || !strings.Contains(string(m), `"retried":{"eval":["3"],"train":["2"]}`) {
		t.Errorf("manifest %s (%v): want the retired jobs", m, err)
	}

	// The next submission is attempt 2: its tag says so, it cancels the
	// retired jobs first (a crash may have kept the first scancel from
	// running), and it waits for the author again.
	req := submitRequest(e, stages.Train, "1")
	if req.Comment != stages.Comment(e.Episode, stages.Train)+":2" || req.Name != stages.JobName(e.Episode, stages.Train) {
		t.Errorf("attempt 2's sbatch: comment %q, name %q", req.Comment, req.Name)
	}
	if n := e.AttemptNumber(stages.Train); n != 2 {
		t.Errorf("attempt number %d", n)
	}

	e.Jobs[stages.Train] = &ledger.Submission{JobID: "4", Attempt: 2, After: "1"}
	infos["4"] = slurm.JobInfo{ID: "4", State: slurm.ParseState("RUNNING", ""), Runs: 1, Source: slurm.SourceSacct}
	if r := rowOf(e, infos); r.Stage != stages.Train || r.JobID != "4" || r.Attempt != 2 {
		t.Errorf("row of attempt 2: %+v", r)
	}

	// Attempt 2 of train failed the same way: no retry is left.
	e.Jobs[stages.Train] = &ledger.Submission{JobID: "4", Attempt: 2, After: "1"}
	e.Jobs[stages.Eval] = &ledger.Submission{JobID: "5", Attempt: 2, After: "4"}
	infos["4"] = slurm.JobInfo{ID: "4", State: slurm.ParseState("NODE_FAIL", ""), Runs: 1, Source: slurm.SourceSacct}
	infos["5"] = slurm.JobInfo{ID: "5", State: slurm.ParseState("CANCELLED", "DependencyNeverSatisfied"), Runs: 1, Source: slurm.SourceSacct}
	if err := d.advance(context.Background(), e, infos, w, nil); err != nil {
		t.Fatal(err)
	}
	if !e.Final() || e.Outcome.FailureReason != string(slurm.FailureNodeFailure) || !e.Outcome.MaskSample {
		t.Fatalf("after the last attempt: %+v", e.Outcome)
	}
	if e.Outcome.Attempts[stages.Train] != 2 || e.Outcome.Attempts[stages.Eval] != 2 || e.Outcome.Attempts[stages.Author] != 1 || len(e.Outcome.Retried[stages.Train]) != 1 {
		t.Errorf("outcome attempts %v, retried %+v", e.Outcome.Attempts, e.Outcome.Retried)
	}
	if !strings.Contains(e.Outcome.Detail, "ran 2 times, the last allowed (episodes.retries: 1)") {
		t.Errorf("detail %q does not say the retries ran out", e.Outcome.Detail)
	}
}

// Runs Slurm made itself (a requeue) count as attempts: a job that ran
// twice has used up one retry.
func TestRequeueRunsCount(t *testing.T) {
	e := &ledger.Entry{Jobs: map[stages.Stage]*ledger.Submission{stages.Train: {JobID: "7"}},
		Retried: map[stages.Stage][]rules.Attempt{stages.Train: {{Attempt: 1, JobID: "6", Job: rules.JobSummary{ID: "6", Runs: 2}}}}}
	infos := map[string]slurm.JobInfo{"7": {ID: "7", Runs: 2}}
	if n := e.Attempts(stages.Train, infos); n != 4 {
		t.Errorf("attempts %d, want 4 (2 runs of each job)", n)
	}
	if n := e.Attempts(stages.Eval, infos); n != 0 {
		t.Errorf("eval never submitted: attempts %d", n)
	}
	if n := e.AttemptNumber(stages.Train); n != 2 {
		t.Errorf("attempt number %d, want 2 (one tool attempt retired)", n)
	}
}

// A cancel on record stops retrying: the failure ends the episode.
func TestNoRetryAfterCancel(t *testing.T) {
	cfg := exampleConfig(t)
	lg, err := ledger.OpenLedger(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	d := &Driver{Config: cfg, Host: &recordHost{Host: remote.NewLocal()}, Slurm: slurm.New(&recordRunner{}), Ledger: lg}
	e := &ledger.Entry{Episode: "ep-c", Jobs: map[stages.Stage]*ledger.Submission{stages.Train: {JobID: "2"}}, CancelRequested: rules.ReasonDeadline}
	o := failed(&rules.Outcome{Jobs: map[stages.Stage]rules.JobSummary{}}, rules.InfraFailure, stages.Train, string(slurm.FailureNodeFailure), "")
	if ok, err := d.retry(context.Background(), e, o, nil, change{}); ok || err != nil || e.Retried != nil {
		t.Errorf("retried after a cancel: %v %v %+v", ok, err, e.Retried)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	e.CancelRequested = ""
	if ok, err := d.retry(ctx, e, o, nil, change{}); ok || err != nil {
		t.Errorf("retried after SIGINT (context ended): %v %v", ok, err)
	}
}

// The retired attempts' outputs are renamed aside, never followed and
// never moved into a directory planted under the new name.
func TestMoveAside(t *testing.T) {
	dir := t.TempDir()
	d := &Driver{Host: remote.NewLocal(), Logf: t.Logf}
	for _, s := range []string{"train", "eval"} {
		if err := os.MkdirAll(filepath.Join(dir, s), 0o700); err != nil {
			t.Fatal(err)
		}
	}
	write := func(p, data string) {
		if err := os.WriteFile(filepath.Join(dir, p), []byte(data), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write("train/out.log", "attempt 1")
	// A directory where eval's kept output goes: mv must not move into it.
	if err := os.Mkdir(filepath.Join(dir, "eval/out.attempt-1.log"), 0o700); err != nil {
		t.Fatal(err)
	}
	write("eval/out.log", "eval 1")
	e := &ledger.Entry{Episode: "ep-m", Dir: dir}
	d.moveAside(context.Background(), e, map[string]string{
		filepath.Join(dir, "train/out.log"): filepath.Join(dir, "train/out.attempt-1.log"),
	})
	if b, err := os.ReadFile(filepath.Join(dir, "train/out.attempt-1.log")); err != nil || string(b) != "attempt 1" {
		t.Errorf("train output kept: %q %v", b, err)
	}
	if _, err := os.Lstat(filepath.Join(dir, "train/out.log")); !os.IsNotExist(err) {
		t.Errorf("train/out.log still there: %v", err)
	}
	d.moveAside(context.Background(), e, map[string]string{
		filepath.Join(dir, "eval/out.log"): filepath.Join(dir, "eval/out.attempt-1.log"),
	})
	if _, err := os.Lstat(filepath.Join(dir, "eval/out.attempt-1.log/out.log")); !os.IsNotExist(err) {
		t.Errorf("eval/out.log was moved into the planted directory: %v", err)
	}
	// Nothing to move is no error.
	d.moveAside(context.Background(), e, map[string]string{filepath.Join(dir, "nope"): filepath.Join(dir, "nope.1")})
}
