package cli

import (
	"maps"
	"testing"
	"time"

	"github.com/nemorl/nemorl-slurm/ledger"
	"github.com/nemorl/nemorl-slurm/rules"
	"github.com/nemorl/nemorl-slurm/stages"
)

// TestArrayDirsDone: an array's directory goes once no episode that is
// not cleaned ran a task of it, in its current jobs or in a retired
// attempt (a train task retried as another array's task still holds the
// first array).
func TestArrayDirsDone(t *testing.T) {
	task := func(name string) *ledger.Submission {
		return &ledger.Submission{Array: &ledger.ArrayTask{Name: name, Script: "/w/.arrays/" + name + "/s.sh"}}
	}
	cleaned := time.Date(2026, 12, 7, 0, 0, 0, 0, time.UTC)
	retiredIn := func(name string) map[stages.Stage][]rules.Attempt {
		return map[stages.Stage][]rules.Attempt{stages.Train: {{Attempt: 1, JobID: "5_0", Array: name, ArrayScript: "/w/.arrays/" + name + "/s.sh"}}}
	}
	dirs := map[string]string{"A": "/w/.arrays/A", "T1": "/w/.arrays/T1", "T2": "/w/.arrays/T2"}
	for _, tc := range []struct {
		name string
		all  []*ledger.Entry
		want []string
	}{
		{"all cleaned", []*ledger.Entry{
			{Episode: "e1", Cleaned: cleaned, Jobs: map[stages.Stage]*ledger.Submission{stages.Author: task("A")}, Retried: retiredIn("T1")},
		}, []string{"A", "T1", "T2"}},
		{"a sibling of the author array not cleaned", []*ledger.Entry{
			{Episode: "e2", Jobs: map[stages.Stage]*ledger.Submission{stages.Author: task("A"), stages.Train: task("T2")}},
		}, []string{"T1"}},
		{"a retired train task in T1 not cleaned", []*ledger.Entry{
			{Episode: "e3", Jobs: map[stages.Stage]*ledger.Submission{stages.Train: task("T2")}, Retried: retiredIn("T1")},
		}, []string{"A"}},
		{"no arrays", []*ledger.Entry{{Episode: "e4", Jobs: map[stages.Stage]*ledger.Submission{stages.Author: {JobID: "9"}}}}, []string{"A", "T1", "T2"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := arrayDirsDone(dirs, tc.all)
			want := map[string]string{}
			for _, n := range tc.want {
				want[n] = dirs[n]
			}
			if !maps.Equal(got, want) {
				t.Errorf("got %v, want %v", got, want)
			}
		})
	}
	if len(dirs) != 3 {
		t.Errorf("arrayDirsDone changed its argument: %v", dirs)
	}
}
