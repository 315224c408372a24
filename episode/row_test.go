package episode

import (
	"testing"
	"time"

	"github.com/nemorl/nemorl-slurm/ledger"
	"github.com/nemorl/nemorl-slurm/rules"
	"github.com/nemorl/nemorl-slurm/slurm"
	"github.com/nemorl/nemorl-slurm/stages"
)

// rowOf: a pending job shows its reason and no elapsed time; a job Slurm
// has not reported yet is PENDING (never a made-up state); a finished
// episode's row has the elapsed time its outcome recorded.
func TestRowOf(t *testing.T) {
	e := &ledger.Entry{Episode: "ep-r", Staged: true, Jobs: map[stages.Stage]*ledger.Submission{
		stages.Author: {JobID: "1"}, stages.Train: {JobID: "2"}, stages.Eval: {JobID: "3"}}}
	infos := map[string]slurm.JobInfo{
		"1": {ID: "1", State: slurm.ParseState("COMPLETED", ""), Elapsed: 5 * time.Second},
		"2": {ID: "2", State: slurm.ParseState("PENDING", ""), Reason: "Dependency", Elapsed: 3 * time.Second},
	}
	r := rowOf(e, infos)
	if r.Stage != stages.Train || r.State != "PENDING" || r.Reason != "Dependency" || r.Elapsed != 0 {
		t.Errorf("pending train: %+v", r)
	}
	infos["2"] = slurm.JobInfo{ID: "2", State: slurm.ParseState("PENDING", ""), Reason: "None"}
	if r := rowOf(e, infos); r.Reason != "" {
		t.Errorf("reason None shown: %+v", r)
	}
	delete(infos, "2")
	if r := rowOf(e, infos); r.State != "PENDING" || r.State == "SUBMITTED" {
		t.Errorf("a job not reported yet: %+v", r)
	}
	start := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	e.Outcome = &rules.Outcome{Outcome: rules.Scored, Jobs: map[stages.Stage]rules.JobSummary{
		stages.Author: {ID: "1", State: "COMPLETED"}, stages.Train: {ID: "2", State: "COMPLETED"},
		stages.Eval: {ID: "3", State: "COMPLETED", Start: start, End: start.Add(97 * time.Second)}}}
	if r := rowOf(e, map[string]slurm.JobInfo{}); r.Stage != stages.Eval || r.State != "COMPLETED" || r.Elapsed != 97*time.Second {
		t.Errorf("finished episode: %+v", r)
	}
}
