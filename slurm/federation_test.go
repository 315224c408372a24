package slurm

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"
)

// sacctRow is one sacct job line of job id: its state and submit time.
func sacctRow(id, state, submit string) string {
	return sacctLine(id, id, "nemorl-train-ep", state, "0:0", "None", submit, submit, "", "00:00:01", "vm", "nemorl", "60", "c")
}

// TestParseSacctRevoked: sacct --duplicates shows a federated job's
// copies on the clusters that did not run it as REVOKED: such a row never
// stands for the job when another row does (whatever their order and
// submit times), is not a run of it, and alone leaves the job Unknown,
// never failed.
func TestParseSacctRevoked(t *testing.T) {
	for _, c := range []struct {
		name, out string
		class     Class
		state     string
		runs      int
		earlier   []string
	}{
		{"revoked after", sacctRow("70000001", "RUNNING", "1700000000") + sacctRow("70000001", "REVOKED", "1700000001"), Running, "RUNNING", 1, nil},
		{"revoked before", sacctRow("70000001", "REVOKED", "1700000005") + sacctRow("70000001", "COMPLETED", "1700000000"), Succeeded, "COMPLETED", 1, nil},
		{"two revoked", sacctRow("70000001", "REVOKED", "1700000000") + sacctRow("70000001", "FAILED", "1700000000") + sacctRow("70000001", "REVOKED", "1700000009"), Failed, "FAILED", 1, nil},
		{"revoked alone", sacctRow("70000001", "REVOKED", "1700000000"), Unknown, "REVOKED", 1, nil},
		{"requeued, and revoked", sacctRow("70000001", "NODE_FAIL", "1700000000") + sacctRow("70000001", "REVOKED", "1700000001") + sacctRow("70000001", "RUNNING", "1700000002"), Running, "RUNNING", 2, []string{"NODE_FAIL"}},
	} {
		jobs, err := ParseSacct([]byte(c.out))
		if err != nil || len(jobs) != 1 {
			t.Fatalf("%s: %v, %d jobs", c.name, err, len(jobs))
		}
		j := jobs[0]
		if j.Class() != c.class || j.State.Name != c.state || j.Runs != c.runs || !slices.Equal(j.EarlierRuns, c.earlier) || j.State.Failure == FailureRevoked {
			t.Errorf("%s: %s %v runs %d earlier %v", c.name, j.State.Raw, j.Class(), j.Runs, j.EarlierRuns)
		}
		if j.Revoked() != (c.state == "REVOKED") {
			t.Errorf("%s: Revoked %v", c.name, j.Revoked())
		}
	}
}

// TestPollRevoked: a job that the login's own cluster shows REVOKED (a
// federated job a sibling runs; a config without members:) is asked of
// sacct --federation, once for all such jobs, and read from the copy that
// runs; where that shows none, or fails, it stays Unknown, never failed.
// With members: (Cluster set) no such look-up is made.
func TestPollRevoked(t *testing.T) {
	now := time.Now()
	jobs := []PollJob{{ID: "70000001", Submitted: now}, {ID: "70000002", Submitted: now}, {ID: "3", Submitted: now}}
	squeue := func([]string) (string, string, int) {
		return squeueLine("70000001", "REVOKED", "None") + squeueLine("70000002", "REVOKED", "None") + squeueLine("3", "RUNNING", "None"), "", 0
	}
	for _, c := range []struct {
		name      string
		member    string
		federated func() (string, string, int)
		want      map[string]string // id → state name
		fedCalls  int
	}{
		{"found on the sibling", "", func() (string, string, int) {
			return sacctRow("70000001", "REVOKED", "1700000000") + sacctRow("70000001", "RUNNING", "1700000000") +
				sacctRow("70000002", "COMPLETED", "1700000000"), "", 0
		}, map[string]string{"70000001": "RUNNING", "70000002": "COMPLETED", "3": "RUNNING"}, 1},
		{"no other copy", "", func() (string, string, int) { return sacctRow("70000001", "REVOKED", "1700000000"), "", 0 },
			map[string]string{"70000001": "REVOKED", "70000002": "REVOKED", "3": "RUNNING"}, 1},
		{"federated sacct fails", "", func() (string, string, int) { return "", "sacct: error: slurmdbd: Connection refused", 1 },
			map[string]string{"70000001": "REVOKED", "70000002": "REVOKED", "3": "RUNNING"}, 1},
		{"members", "gpu-a", nil, map[string]string{"70000001": "REVOKED", "70000002": "REVOKED", "3": "RUNNING"}, 0},
	} {
		fed := 0
		f := &fakeRunner{handlers: map[string]func([]string) (string, string, int){
			"squeue": squeue,
			"sacct": func(argv []string) (string, string, int) {
				if slices.Contains(argv, "--federation") {
					fed++
					if v, _ := flagValue(argv, "--jobs"); v != "70000001,70000002" || !slices.Contains(argv, "--duplicates") {
						return "", "bad argv " + strings.Join(argv, " "), 2
					}
					if _, ok := flagValue(argv, "--starttime"); !ok {
						return "", "unbounded " + strings.Join(argv, " "), 2
					}
					return c.federated()
				}
				return sacctRow("70000001", "REVOKED", "1700000000") + sacctRow("70000002", "REVOKED", "1700000000"), "", 0
			},
		}}
		cl := New(f)
		cl.Cluster = c.member
		got, cost, err := cl.Poll(context.Background(), jobs)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		for id, want := range c.want {
			j := got[id]
			if j.State.Name != want || j.Class() == Failed {
				t.Errorf("%s: job %s %s (%v)", c.name, id, j.State.Raw, j.Class())
			}
			if want == "REVOKED" && (j.Class() != Unknown || j.Source != SourceSacct) {
				t.Errorf("%s: job %s: %+v", c.name, id, j)
			}
		}
		if fed != c.fedCalls || cost.Sacct != 1+c.fedCalls {
			t.Errorf("%s: %d federated sacct, cost %+v", c.name, fed, cost)
		}
	}

	// Query does the same.
	f := &fakeRunner{handlers: map[string]func([]string) (string, string, int){
		"sacct": func(argv []string) (string, string, int) {
			if slices.Contains(argv, "--federation") {
				return sacctRow("70000001", "COMPLETED", "1700000000"), "", 0
			}
			return sacctRow("70000001", "REVOKED", "1700000000"), "", 0
		},
	}}
	got, err := New(f).Query(context.Background(), []string{"70000001"})
	if err != nil || got["70000001"].State.Name != "COMPLETED" || f.count("squeue") != 0 {
		t.Errorf("query: %+v, %v", got, err)
	}
}
