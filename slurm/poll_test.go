package slurm

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

func squeueLine(id, state, reason string) string {
	start := "N/A"
	if state != "PENDING" {
		start = "1700000005"
	}
	return strings.Join([]string{id, "n", state, reason, "1700000000", start, "N/A", "0:05", "vm", "nemorl", "1:00:00", "(null)"}, Sep) + "\n"
}

func sacctJobLine(id, state, exit string) string {
	return sacctLine(id, id, "n", state, exit, "None", "1700000000", "1700000001", "1700000002", "00:00:01", "vm", "nemorl", "60", "c")
}

// TestPollSqueueFirst: the live jobs are answered by one squeue alone; only
// the jobs squeue shows ended or no longer shows go to sacct, with
// --starttime bounded by their earliest submission; sacct's record wins
// for them, squeue's ended state stands in for a job sacct does not show
// yet, and a job neither knows is Unknown, not Failed.
func TestPollSqueueFirst(t *testing.T) {
	f := &fakeRunner{handlers: map[string]func([]string) (string, string, int){
		"squeue": func([]string) (string, string, int) {
			return squeueLine("1", "PENDING", "JobHeldUser") + squeueLine("2", "RUNNING", "None") +
				squeueLine("3", "COMPLETED", "None") + squeueLine("5", "FAILED", "NonZeroExitCode") + squeueLine("99", "RUNNING", "None"), "", 0
		},
		"sacct": func([]string) (string, string, int) {
			// 3 ended (sacct has its exit code); 4 left squeue long ago.
			return sacctJobLine("3", "COMPLETED", "0:0") + sacctJobLine("4", "FAILED", "3:0"), "", 0
		},
	}}
	now := time.Now()
	jobs := []PollJob{{"1", now.Add(-time.Hour)}, {"2", now.Add(-2 * time.Hour)}, {"3", now.Add(-3 * time.Hour)},
		{"4", now.Add(-26 * time.Hour)}, {"5", now.Add(-time.Minute)}, {"6", now.Add(-time.Minute)}}
	got, cost, err := New(f).Poll(context.Background(), jobs)
	if err != nil {
		t.Fatal(err)
	}
	if f.count("squeue") != 1 || f.count("sacct") != 1 || cost != (PollCost{Squeue: 1, Sacct: 1, SacctJobs: 4}) {
		t.Fatalf("%d squeue, %d sacct, cost %+v", f.count("squeue"), f.count("sacct"), cost)
	}
	if v, _ := flagValue(f.last("squeue").Argv, "--jobs"); v != "1,2,3,4,5,6" {
		t.Errorf("squeue --jobs=%s", v)
	}
	sa := f.last("sacct").Argv
	if v, _ := flagValue(sa, "--jobs"); v != "3,4,5,6" {
		t.Errorf("sacct --jobs=%s, want the ended and the absent only", v)
	}
	// The earliest of 3, 4, 5, 6 is 4's, 26 h ago: 26 h + the hour's margin.
	v, _ := flagValue(sa, "--starttime")
	mins, err := strconv.Atoi(strings.TrimSuffix(strings.TrimPrefix(v, "now-"), "minutes"))
	if err != nil || mins < 27*60 || mins > 27*60+3 {
		t.Errorf("sacct --starttime=%s, want about now-%dminutes", v, 27*60)
	}
	if !strings.Contains(strings.Join(sa, " "), "--duplicates") {
		t.Errorf("sacct without --duplicates: %q", sa)
	}
	want := map[string]struct {
		class  Class
		source Source
	}{
		"1": {Pending, SourceSqueue}, "2": {Running, SourceSqueue}, "3": {Succeeded, SourceSacct},
		"4": {Failed, SourceSacct}, "5": {Failed, SourceSqueue}, "6": {Unknown, SourceNone},
	}
	if len(got) != len(want) {
		t.Fatalf("got %d jobs: %+v", len(got), got)
	}
	for id, w := range want {
		if j := got[id]; j.State.Class != w.class || j.Source != w.source {
			t.Errorf("job %s: %v from %s, want %v from %s", id, j.State.Class, j.Source, w.class, w.source)
		}
	}
	if got["1"].HeldBy() != "user" {
		t.Errorf("job 1's hold, seen by squeue: %+v", got["1"])
	}
	if got["4"].ExitCode.Code != 3 {
		t.Errorf("job 4's exit code from sacct: %+v", got["4"].ExitCode)
	}
}

// TestPollAllLive: every job live, no sacct at all.
func TestPollAllLive(t *testing.T) {
	f := &fakeRunner{handlers: map[string]func([]string) (string, string, int){
		"squeue": func([]string) (string, string, int) {
			return squeueLine("1", "PENDING", "Priority") + squeueLine("2", "RUNNING", "None"), "", 0
		},
	}}
	got, cost, err := New(f).Poll(context.Background(), []PollJob{{ID: "1"}, {ID: "2"}})
	if err != nil || f.count("sacct") != 0 || cost != (PollCost{Squeue: 1}) || got["1"].Reason != "Priority" {
		t.Fatalf("%v, %d sacct, %+v, %+v", err, f.count("sacct"), cost, got)
	}
}

// TestPollFailures: squeue down → sacct for every job (no time bound for
// one without a submission time); sacct down → squeue's answer, and the
// jobs neither showed are Unanswered; both down → an error.
func TestPollFailures(t *testing.T) {
	down := func([]string) (string, string, int) {
		return "", "slurm_load_jobs error: Unable to contact slurm controller (connect failure)", 1
	}
	t.Run("squeue down", func(t *testing.T) {
		f := &fakeRunner{handlers: map[string]func([]string) (string, string, int){
			"squeue": down,
			"sacct":  func([]string) (string, string, int) { return sacctJobLine("1", "RUNNING", "0:0"), "", 0 },
		}}
		got, _, err := New(f).Poll(context.Background(), []PollJob{{"1", time.Now()}, {ID: "2"}})
		if err != nil {
			t.Fatal(err)
		}
		if v, _ := flagValue(f.last("sacct").Argv, "--jobs"); v != "1,2" {
			t.Errorf("sacct --jobs=%s", v)
		}
		if _, bounded := flagValue(f.last("sacct").Argv, "--starttime"); bounded {
			t.Errorf("a job without a submission time must lift the bound: %q", f.last("sacct").Argv)
		}
		if got["1"].Source != SourceSacct || got["2"].Source != SourceUnanswered || got["2"].State.Class != Unknown {
			t.Errorf("%+v", got)
		}
	})
	t.Run("sacct down", func(t *testing.T) {
		f := &fakeRunner{handlers: map[string]func([]string) (string, string, int){
			"squeue": func([]string) (string, string, int) { return squeueLine("1", "COMPLETED", "None"), "", 0 },
			"sacct":  func([]string) (string, string, int) { return "", "sacct: error: slurmdbd: Connection refused", 1 },
		}}
		got, _, err := New(f).Poll(context.Background(), []PollJob{{ID: "1"}, {ID: "2"}})
		if err != nil {
			t.Fatal(err)
		}
		if got["1"].Source != SourceSqueue || got["1"].State.Class != Succeeded || got["2"].Source != SourceUnanswered {
			t.Errorf("%+v", got)
		}
	})
	t.Run("both down", func(t *testing.T) {
		f := &fakeRunner{handlers: map[string]func([]string) (string, string, int){"squeue": down, "sacct": down}}
		_, _, err := New(f).Poll(context.Background(), []PollJob{{ID: "1"}})
		if err == nil || !strings.Contains(err.Error(), "squeue") || !strings.Contains(err.Error(), "sacct") {
			t.Fatalf("got %v", err)
		}
	})
	t.Run("both down, many jobs", func(t *testing.T) {
		// The error names each command, cut: not the 2,000 ids twice.
		f := &fakeRunner{handlers: map[string]func([]string) (string, string, int){"squeue": down, "sacct": down}}
		var jobs []PollJob
		for i := range 2000 {
			jobs = append(jobs, PollJob{ID: strconv.Itoa(1000000 + i)})
		}
		_, _, err := New(f).Poll(context.Background(), jobs)
		if err == nil || len(err.Error()) > 2000 || !strings.Contains(err.Error(), "sacct") || !strings.Contains(err.Error(), "more bytes") {
			t.Fatalf("%d bytes: %.300v", len(fmt.Sprint(err)), err)
		}
	})
	t.Run("bad id", func(t *testing.T) {
		_, _, err := New(&fakeRunner{}).Poll(context.Background(), []PollJob{{ID: "1;reboot"}})
		if err == nil {
			t.Fatal("a bad id was accepted")
		}
	})
	t.Run("context", func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		f := &fakeRunner{handlers: map[string]func([]string) (string, string, int){
			"squeue": func([]string) (string, string, int) { cancel(); return "", "", 0 },
		}}
		if _, _, err := New(f).Poll(ctx, []PollJob{{ID: "1"}}); !errors.Is(err, context.Canceled) || f.count("sacct") != 0 {
			t.Fatalf("%v, %d sacct", err, f.count("sacct"))
		}
	})
}

// TestPollListsAboveBound: up to squeueListMax jobs, squeue is asked for
// the user's jobs by id; above it, for the user's jobs whole (no --jobs),
// of which the poll keeps those it asked about; either way one squeue.
func TestPollListsAboveBound(t *testing.T) {
	for _, n := range []int{1, squeueListMax, squeueListMax + 1} {
		f := &fakeRunner{handlers: map[string]func([]string) (string, string, int){
			"squeue": func([]string) (string, string, int) {
				var b strings.Builder
				for i := range n + 5 { // the user's jobs: those asked about, and 5 others
					b.WriteString(squeueLine(strconv.Itoa(1000+i), "PENDING", "Priority"))
				}
				return b.String(), "", 0
			},
		}}
		var jobs []PollJob
		for i := range n {
			jobs = append(jobs, PollJob{ID: strconv.Itoa(1000 + i)})
		}
		got, cost, err := New(f).Poll(context.Background(), jobs)
		if err != nil || len(got) != n || cost != (PollCost{Squeue: 1}) {
			t.Fatalf("%d jobs: %v: %d answers, %+v", n, err, len(got), cost)
		}
		argv := f.last("squeue").Argv
		if !slices.Contains(argv, "--me") {
			t.Errorf("%d jobs: squeue without --me: %q", n, argv)
		}
		v, named := flagValue(argv, "--jobs")
		if named != (n <= squeueListMax) || (named && len(strings.Split(v, ",")) != n) {
			t.Errorf("%d jobs: squeue --jobs named %v (%d ids), want named %v", n, named, len(strings.Split(v, ",")), n <= squeueListMax)
		}
		if _, ok := got[strconv.Itoa(1000+n)]; ok {
			t.Errorf("%d jobs: a job of the user's that was not asked about came back", n)
		}
	}
}

// TestPollChunks: more than MaxIDsPerCall jobs: one squeue for all, and
// one sacct per MaxIDsPerCall for the jobs squeue no longer shows (here
// one in each chunk).
func TestPollChunks(t *testing.T) {
	gone := map[string]bool{"1000": true, strconv.Itoa(1000 + MaxIDsPerCall): true}
	f := &fakeRunner{handlers: map[string]func(argv []string) (string, string, int){
		"squeue": func(argv []string) (string, string, int) {
			var b strings.Builder
			for i := range MaxIDsPerCall + 10 {
				if id := strconv.Itoa(1000 + i); !gone[id] {
					b.WriteString(squeueLine(id, "PENDING", "Priority"))
				}
			}
			return b.String(), "", 0
		},
		"sacct": func(argv []string) (string, string, int) {
			v, _ := flagValue(argv, "--jobs")
			return sacctJobLine(v, "COMPLETED", "0:0"), "", 0
		},
	}}
	var jobs []PollJob
	for i := range MaxIDsPerCall + 10 {
		jobs = append(jobs, PollJob{ID: strconv.Itoa(1000 + i)})
	}
	got, cost, err := New(f).Poll(context.Background(), jobs)
	if err != nil || len(got) != len(jobs) || cost != (PollCost{Squeue: 1, Sacct: 2, SacctJobs: 2}) {
		t.Fatalf("%v: %d jobs, %+v", err, len(got), cost)
	}
	for id := range gone {
		if j := got[id]; j.Source != SourceSacct || j.State.Class != Succeeded {
			t.Errorf("job %s, gone from squeue: %+v", id, j)
		}
	}
	if j := got["1001"]; j.Source != SourceSqueue || j.State.Class != Pending {
		t.Errorf("job 1001: %+v", j)
	}
}
