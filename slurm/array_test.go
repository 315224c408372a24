package slurm

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestTaskID(t *testing.T) {
	for _, c := range []struct {
		array string
		task  int
		want  string
	}{
		{"123", 4, "123_4"}, {"123", 0, "123_0"}, {"20002318", MaxArrayIndex, "20002318_4000000"},
		{"123", -1, ""}, {"123", MaxArrayIndex + 1, ""}, {"", 1, ""}, {"0123", 1, ""}, {"12a", 1, ""}, {"123_4", 1, ""},
	} {
		if got := TaskID(c.array, c.task); got != c.want {
			t.Errorf("TaskID(%q, %d) = %q, want %q", c.array, c.task, got, c.want)
		}
	}
}

func TestSplitTaskID(t *testing.T) {
	for _, c := range []struct {
		id    string
		array string
		task  int
		ok    bool
	}{
		{"123_4", "123", 4, true}, {"123_0", "123", 0, true}, {"7_4000000", "7", 4000000, true},
		{"123", "", 0, false}, {"123+0", "", 0, false}, {"123_[4-9]", "", 0, false}, {"123_04", "", 0, false},
		{"0123_4", "", 0, false}, {"123_+4", "", 0, false}, {"123_-4", "", 0, false}, {"123_4000001", "", 0, false},
		{"123_99999999999", "", 0, false}, {"_4", "", 0, false}, {"123_", "", 0, false}, {"123_4_5", "", 0, false},
	} {
		a, task, ok := SplitTaskID(c.id)
		if a != c.array || task != c.task || ok != c.ok {
			t.Errorf("SplitTaskID(%q) = %q, %d, %v; want %q, %d, %v", c.id, a, task, ok, c.array, c.task, c.ok)
		}
		if ok && TaskID(a, task) != c.id {
			t.Errorf("TaskID(SplitTaskID(%q)) = %q", c.id, TaskID(a, task))
		}
	}
}

// TestTaskIDsAccepted: a task id is a job id wherever one is taken; ids
// Slurm would not print as a task's are refused before any command runs.
func TestTaskIDsAccepted(t *testing.T) {
	for _, id := range []string{"123", "123_4", "123_0", "123+0", "0123"} {
		if !ValidJobID(id) {
			t.Errorf("ValidJobID(%q) = false", id)
		}
	}
	for _, id := range []string{"", "123_04", "123_[1-3]", "123_4_5", "123_", "x_1", "123_-1"} {
		if ValidJobID(id) {
			t.Errorf("ValidJobID(%q) = true", id)
		}
		f := &fakeRunner{handlers: map[string]func([]string) (string, string, int){}}
		c := New(f)
		ctx := context.Background()
		if _, err := c.Query(ctx, []string{"1", id}); err == nil {
			t.Errorf("Query accepted %q", id)
		}
		if err := c.Cancel(ctx, []string{id}); err == nil {
			t.Errorf("Cancel accepted %q", id)
		}
		if _, err := c.BatchScript(ctx, id); err == nil {
			t.Errorf("BatchScript accepted %q", id)
		}
		if len(f.calls) != 0 {
			t.Errorf("%q: %d commands run", id, len(f.calls))
		}
	}
	ids, err := cleanIDs([]string{"7_1", "7", "7_1", "8_0"})
	if err != nil || strings.Join(ids, ",") != "7_1,7,8_0" {
		t.Errorf("cleanIDs: %q %v", ids, err)
	}
}

// TestTaskCommands: scancel and scontrol release take task ids as they
// are ("scancel 123_4" cancels that task alone).
func TestTaskCommands(t *testing.T) {
	f := &fakeRunner{handlers: map[string]func([]string) (string, string, int){
		"scancel":  func([]string) (string, string, int) { return "", "", 0 },
		"scontrol": func([]string) (string, string, int) { return "", "", 0 },
	}}
	c := New(f)
	if err := c.Cancel(context.Background(), []string{"123_4", "123_5", "124"}); err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(f.last("scancel").Argv, " "); got != "scancel 123_4 123_5 124" {
		t.Errorf("scancel: %s", got)
	}
	if err := c.Release(context.Background(), []string{"123_4", "124"}); err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(f.last("scontrol").Argv, " "); got != "scontrol release 123_4,124" {
		t.Errorf("release: %s", got)
	}
}

func TestCompareIDsTasks(t *testing.T) {
	ids := []string{"8", "7_10", "7_2", "10", "7", "7_0", "9_1"}
	slices.SortFunc(ids, compareIDs)
	if got := strings.Join(ids, " "); got != "7 7_0 7_2 7_10 8 9_1 10" {
		t.Errorf("sorted %s", got)
	}
	for _, c := range []struct {
		a, b string
		want int
	}{{"7", "7_0", -1}, {"7_2", "7_10", -1}, {"7_10", "8", -1}, {"9", "10_0", -1}, {"10_0", "10_0", 0}, {"10_1", "10", 1},
		{"7+0", "7+1", -1}, {"7+1", "7_0", strings.Compare("7+1", "7_0")}} {
		if got := compareIDs(c.a, c.b); got != c.want {
			t.Errorf("compareIDs(%q, %q) = %d, want %d", c.a, c.b, got, c.want)
		}
	}
}

func TestSbatchArrayArgs(t *testing.T) {
	base := SubmitRequest{Wrap: "true", Name: "n"}
	for _, c := range []struct {
		name     string
		edit     func(*SubmitRequest)
		want     []string // argv between --job-name and --wrap
		errorHas string
	}{
		{"array", func(r *SubmitRequest) { r.Array = "0-49" }, []string{"--array=0-49"}, ""},
		{"list and throttle", func(r *SubmitRequest) { r.Array = "0,3,7-9%2" }, []string{"--array=0,3,7-9%2"}, ""},
		{"one task", func(r *SubmitRequest) { r.Array = "5" }, []string{"--array=5"}, ""},
		{"aftercorr", func(r *SubmitRequest) { r.Array = "0-3"; r.AfterCorr = []string{"100"}; r.KillOnInvalidDep = true },
			[]string{"--array=0-3", "--dependency=aftercorr:100", "--kill-on-invalid-dep=yes"}, ""},
		{"two arrays", func(r *SubmitRequest) { r.Array = "0-3"; r.AfterCorr = []string{"100", "101"} },
			[]string{"--array=0-3", "--dependency=aftercorr:100:101"}, ""},
		{"afterok and aftercorr: both must hold", func(r *SubmitRequest) {
			r.Array = "0-3"
			r.AfterOK = []string{"99", "98_2"}
			r.AfterCorr = []string{"100"}
		}, []string{"--array=0-3", "--dependency=afterok:99:98_2,aftercorr:100"}, ""},
		{"afterok on a task", func(r *SubmitRequest) { r.AfterOK = []string{"100_3"} }, []string{"--dependency=afterok:100_3"}, ""},
		{"aftercorr without array", func(r *SubmitRequest) { r.AfterCorr = []string{"100"} }, nil, "AfterCorr needs Array"},
		{"aftercorr on a task", func(r *SubmitRequest) { r.Array = "0-3"; r.AfterCorr = []string{"100_1"} }, nil, "bad aftercorr job id"},
		{"aftercorr empty id", func(r *SubmitRequest) { r.Array = "0-3"; r.AfterCorr = []string{""} }, nil, "bad aftercorr job id"},
	} {
		req := base
		c.edit(&req)
		argv, err := SbatchArgs(req)
		if c.errorHas != "" {
			if err == nil || !strings.Contains(err.Error(), c.errorHas) {
				t.Errorf("%s: %q, %v; want an error with %q", c.name, argv, err, c.errorHas)
			}
			continue
		}
		want := append(append([]string{"sbatch", "--parsable", "--job-name=n"}, c.want...), "--wrap=true")
		if err != nil || !slices.Equal(argv, want) {
			t.Errorf("%s: %q, %v\nwant %q", c.name, argv, err, want)
		}
	}
	for _, spec := range []string{"-1", "1-", "-", "3-1", "0-3:2", "0,,1", ",0", "0,", " 0-3", "0-3 ", "a", "0x1",
		"0-3%0", "0-3%", "%2", "0-3%-1", "0-3%2%2", "4000001", "0-4000001", "1;2", "0-3,5-x", "0..3", "[0-3]"} {
		req := base
		req.Array = spec
		if argv, err := SbatchArgs(req); err == nil || !strings.Contains(err.Error(), "array") {
			t.Errorf("Array %q accepted: %q, %v", spec, argv, err)
		}
	}
	req := base
	req.Array = "0-" + fmt.Sprint(MaxArrayIndex)
	if _, err := SbatchArgs(req); err != nil {
		t.Errorf("the largest index Slurm takes: %v", err)
	}
}

// TestParseSbatchArray: sbatch --parsable prints an array's id as it
// prints a job's.
func TestParseSbatchArray(t *testing.T) {
	for _, c := range []struct{ out, id, cluster string }{{"7281\n", "7281", ""}, {"20002318;nemorl-lab3\n", "20002318", "nemorl-lab3"}} {
		r, err := ParseSbatch([]byte(c.out), nil)
		if err != nil || r.JobID != c.id || r.Cluster != c.cluster || len(r.Warnings) != 0 {
			t.Errorf("%q: %+v %v", c.out, r, err)
		}
		if id := TaskID(r.JobID, 2); id != c.id+"_2" {
			t.Errorf("task 2 of %s: %q", r.JobID, id)
		}
	}
}

// arrayCapture is one Slurm's captures by testdata/lab/capture_array.sh.
type arrayCapture struct {
	dir     string
	A, B, C string // the arrays' ids
	v2411   bool
}

func arrayCaptures(t *testing.T) []arrayCapture {
	t.Helper()
	var out []arrayCapture
	for _, dir := range []string{"testdata/lab", "testdata/lab-24.11"} {
		b, err := os.ReadFile(filepath.Join(dir, "array_ids.txt"))
		if err != nil {
			t.Fatal(err)
		}
		c := arrayCapture{dir: dir, v2411: strings.HasSuffix(dir, "24.11")}
		if _, err := fmt.Sscanf(string(b), "A=%s B=%s C=%s", &c.A, &c.B, &c.C); err != nil {
			t.Fatalf("%s/array_ids.txt: %v", dir, err)
		}
		out = append(out, c)
	}
	return out
}

func (c arrayCapture) read(t *testing.T, name string) string {
	t.Helper()
	b, err := readCapture(filepath.Join(c.dir, name))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// arrayFake answers sacct and squeue from the captures of one moment.
func (c arrayCapture) fake(t *testing.T, moment string) *fakeRunner {
	sacct, squeue := c.read(t, "sacct_array_"+moment+".txt"), c.read(t, "squeue_array_"+moment+".txt")
	return &fakeRunner{handlers: map[string]func([]string) (string, string, int){
		"sacct":  func([]string) (string, string, int) { return sacct, "", 0 },
		"squeue": func([]string) (string, string, int) { return squeue, "", 0 },
	}}
}

func tasksOf(array string, n int) []string {
	var ids []string
	for i := range n {
		ids = append(ids, TaskID(array, i))
	}
	return ids
}

// TestParseArrayCaptures reads the real captures of both lab Slurms: every
// task under its own "A_T" id, its own job id in RawID, pending tasks
// listed from their array's record, steps folded into their task.
func TestParseArrayCaptures(t *testing.T) {
	for _, c := range arrayCaptures(t) {
		t.Run(c.dir, func(t *testing.T) {
			byID := func(jobs []JobInfo) map[string]JobInfo {
				m := map[string]JobInfo{}
				for _, j := range jobs {
					if _, dup := m[j.ID]; dup {
						t.Errorf("%s twice", j.ID)
					}
					m[j.ID] = j
				}
				return m
			}
			// Pending: A held in one record; squeue --array lists it task
			// by task, squeue without it as one line, and both read the same.
			acct, err := ParseSacct([]byte(c.read(t, "sacct_array_pending.txt")))
			if err != nil {
				t.Fatal(err)
			}
			sa := byID(acct)
			for i, id := range tasksOf(c.A, 4) {
				j := sa[id]
				if j.Class() != Pending || j.RawID != c.A || j.ArrayJobID != c.A || j.ArrayTask != i || !j.IsTask() || j.Source != SourceSacct || !j.Start.IsZero() {
					t.Errorf("sacct %s: %+v", id, j)
				}
			}
			for _, file := range []string{"squeue_array_pending.txt", "squeue_array_pending_ranges.txt"} {
				live, err := ParseSqueue([]byte(c.read(t, file)))
				if err != nil {
					t.Fatal(err)
				}
				sq := byID(live)
				if len(sq) != 4+4+2 {
					t.Errorf("%s: %d jobs: %v", file, len(sq), slices.Collect(mapsKeys(sq)))
				}
				for i, id := range tasksOf(c.A, 4) {
					if j := sq[id]; j.Class() != Pending || j.HeldBy() != "user" || j.RawID != c.A || j.ArrayTask != i {
						t.Errorf("%s %s: %+v", file, id, j)
					}
				}
				if _, ok := sq[TaskID(c.C, 1)]; ok {
					t.Errorf("%s: C_1, cancelled while pending in C's record, listed", file)
				}
				// B's tasks, split out for their aftercorr dependency, have
				// ids of their own (B_3, the last, keeps the array's).
				for i, id := range tasksOf(c.B, 4) {
					j := sq[id]
					if (i == 3) != (j.RawID == c.B) || j.ArrayJobID != c.B {
						t.Errorf("%s %s: raw id %s", file, id, j.RawID)
					}
					if i == 1 {
						// scancel of the pending task: squeue keeps reason
						// Dependency, sacct says CANCELLED by 0 (22.05).
						if j.State.Failure != FailureCancelled || j.Reason != "Dependency" {
							t.Errorf("%s B_1 cancelled by scancel: %+v", file, j.State)
						}
					} else if j.Class() != Pending || j.Reason != "Dependency" {
						t.Errorf("%s %s: %+v", file, id, j)
					}
				}
			}
			// Ended: A_2 exited 3, B_2's dependency never satisfied.
			acct, err = ParseSacct([]byte(c.read(t, "sacct_array_ended.txt")))
			if err != nil {
				t.Fatal(err)
			}
			sa = byID(acct)
			for i, id := range tasksOf(c.A, 4) {
				j := sa[id]
				want, code := Succeeded, 0
				if i == 2 {
					want, code = Failed, 3
				}
				if j.Class() != want || j.ExitCode.Code != code || len(j.Steps) != 1 || j.Steps[0].ID != "batch" || j.Steps[0].ExitCode.Code != code || j.Runs != 1 {
					t.Errorf("sacct %s: %+v", id, j)
				}
			}
			// 24.11 has no record of B_1 nor B_2: split out pending and
			// cancelled, slurmdbd never heard of them.
			for _, i := range []int{1, 2} {
				j, ok := sa[TaskID(c.B, i)]
				if ok == c.v2411 {
					t.Errorf("sacct B_%d: %+v", i, j)
				}
			}
			if !c.v2411 {
				if j := sa[TaskID(c.B, 2)]; j.State.Failure != FailureDependency || !j.Start.IsZero() {
					t.Errorf("sacct B_2: %+v", j)
				}
				if j := sa[TaskID(c.B, 1)]; j.State.Failure != FailureCancelled || j.State.ByUID != 0 {
					t.Errorf("sacct B_1: %+v", j)
				}
			}
			live, err := ParseSqueue([]byte(c.read(t, "squeue_array_ended.txt")))
			if err != nil {
				t.Fatal(err)
			}
			sq := byID(live)
			// squeue shows B_2's cancellation as its start; it never ran.
			if j := sq[TaskID(c.B, 2)]; j.State.Failure != FailureDependency || j.Reason != "DependencyNeverSatisfied" || !j.Start.IsZero() || j.End.IsZero() {
				t.Errorf("squeue B_2: %+v", j)
			}
			if j := sq[TaskID(c.B, 1)]; j.State.Failure != FailureCancelled {
				t.Errorf("squeue B_1: %+v", j)
			}
			// Requeued: C_2 (the array's own job id) ran once and waits again.
			acct, err = ParseSacct([]byte(c.read(t, "sacct_array_requeued.txt")))
			if err != nil {
				t.Fatal(err)
			}
			sa = byID(acct)
			if j := sa[TaskID(c.C, 2)]; j.Class() != Pending || j.Runs != 2 || !slices.Equal(j.EarlierRuns, []string{"REQUEUED"}) || j.RawID != c.C || j.ArrayTask != 2 {
				t.Errorf("sacct C_2 requeued: %+v", j)
			}
			if j := sa[TaskID(c.C, 0)]; j.Class() != Running || j.Runs != 1 {
				t.Errorf("sacct C_0: %+v", j)
			}
		})
	}
}

func mapsKeys(m map[string]JobInfo) func(func(string) bool) {
	return func(yield func(string) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}

// TestQueryArrayCaptures: Query of every task, over the real captures of
// each Slurm, in one sacct (of the arrays) and one squeue (of the tasks
// sacct does not show, or shows only in their array's record): the same
// class and failure for each task on both Slurms, though 24.11's sacct
// lacks some.
func TestQueryArrayCaptures(t *testing.T) {
	type want struct {
		class   Class
		failure Failure
	}
	for _, c := range arrayCaptures(t) {
		t.Run(c.dir, func(t *testing.T) {
			ids := append(append(tasksOf(c.A, 4), tasksOf(c.B, 4)...), tasksOf(c.C, 3)...)
			f := c.fake(t, "pending")
			got, err := New(f).Query(context.Background(), ids)
			if err != nil {
				t.Fatal(err)
			}
			if f.count("sacct") != 1 || f.count("squeue") != 1 {
				t.Errorf("%d sacct, %d squeue", f.count("sacct"), f.count("squeue"))
			}
			if v, _ := flagValue(f.last("sacct").Argv, "--jobs"); v != c.A+","+c.B+","+c.C {
				t.Errorf("sacct --jobs=%s, want the arrays", v)
			}
			sqIDs, _ := flagValue(f.last("squeue").Argv, "--jobs")
			for _, id := range append(tasksOf(c.A, 4), TaskID(c.C, 1)) {
				if !slices.Contains(strings.Split(sqIDs, ","), id) {
					t.Errorf("squeue --jobs=%s lacks %s", sqIDs, id)
				}
			}
			if !contains(f.last("squeue").Argv, "--array") {
				t.Errorf("squeue without --array: %q", f.last("squeue").Argv)
			}
			pending := want{Pending, NoFailure}
			for _, id := range ids {
				w := pending
				switch id {
				case TaskID(c.B, 1):
					w = want{Failed, FailureCancelled}
				case TaskID(c.C, 1):
					w = want{Unknown, NoFailure}
				}
				j := got[id]
				if j.ID != id || j.Class() != w.class || j.State.Failure != w.failure {
					t.Errorf("%s: %v/%s from %s, want %v/%s", id, j.Class(), j.State.Failure, j.Source, w.class, w.failure)
				}
				if array, task, _ := SplitTaskID(id); j.ArrayJobID != array || j.ArrayTask != task {
					t.Errorf("%s: array %s task %d", id, j.ArrayJobID, j.ArrayTask)
				}
			}
			// Tasks in the array's pending record are answered by squeue
			// (its reason, the hold); C_1, cancelled there, by nobody,
			// while its array is known: withdrawn.
			if j := got[TaskID(c.A, 2)]; j.Source != SourceSqueue || j.HeldBy() != "user" || j.RawID != c.A {
				t.Errorf("A_2: %+v", j)
			}
			if j := got[TaskID(c.C, 1)]; j.Source != SourceWithdrawn || j.RawID != "" {
				t.Errorf("C_1: %+v", j)
			}
			// B_3 is in sacct on both; B_0 only on 22.05.
			if j := got[TaskID(c.B, 3)]; j.Source != SourceSacct || j.RawID != c.B {
				t.Errorf("B_3: %+v", j)
			}
			wantSrc := SourceSacct
			if c.v2411 {
				wantSrc = SourceSqueue
			}
			if j := got[TaskID(c.B, 0)]; j.Source != wantSrc || j.RawID == c.B {
				t.Errorf("B_0: %+v, want from %s", j, wantSrc)
			}

			// Ended: the same classes on both, 24.11's B_1 and B_2 from squeue.
			f = c.fake(t, "ended")
			got, err = New(f).Query(context.Background(), append(tasksOf(c.A, 4), tasksOf(c.B, 4)...))
			if err != nil {
				t.Fatal(err)
			}
			for id, w := range map[string]want{
				TaskID(c.A, 0): {Succeeded, NoFailure}, TaskID(c.A, 1): {Succeeded, NoFailure},
				TaskID(c.A, 2): {Failed, FailureExitCode}, TaskID(c.A, 3): {Succeeded, NoFailure},
				TaskID(c.B, 0): {Succeeded, NoFailure}, TaskID(c.B, 1): {Failed, FailureCancelled},
				TaskID(c.B, 2): {Failed, FailureDependency}, TaskID(c.B, 3): {Succeeded, NoFailure},
			} {
				if j := got[id]; j.Class() != w.class || j.State.Failure != w.failure {
					t.Errorf("ended %s: %v/%s from %s", id, j.Class(), j.State.Failure, j.Source)
				}
			}
			if j := got[TaskID(c.A, 2)]; j.ExitCode.Code != 3 || j.Source != SourceSacct {
				t.Errorf("A_2: %+v", j)
			}
			if n := f.count("squeue"); (n == 1) != c.v2411 {
				t.Errorf("%d squeue: sacct shows every task on 22.05 only", n)
			}

			// The array's own id: the record Slurm keeps under it.
			f = c.fake(t, "pending")
			got, err = New(f).Query(context.Background(), []string{c.A})
			if j := got[c.A]; err != nil || j.ID != c.A || j.Class() != Pending || j.ArrayJobID != c.A || j.ArrayTask != -1 || j.IsTask() {
				t.Errorf("array %s by its own id: %+v %v", c.A, j, err)
			}
		})
	}
}

// TestPollArrayCaptures: Poll of an array's tasks costs one squeue and one
// sacct, as a poll of as many jobs; live tasks are squeue's, a task only
// sacct's stale record holds is Unknown.
func TestPollArrayCaptures(t *testing.T) {
	for _, c := range arrayCaptures(t) {
		t.Run(c.dir, func(t *testing.T) {
			ids := append(append(tasksOf(c.A, 4), tasksOf(c.B, 4)...), tasksOf(c.C, 3)...)
			var jobs []PollJob
			for _, id := range ids {
				jobs = append(jobs, PollJob{ID: id, Submitted: time.Now().Add(-time.Minute)})
			}
			f := c.fake(t, "pending")
			got, cost, err := New(f).Poll(context.Background(), jobs)
			if err != nil {
				t.Fatal(err)
			}
			// sacct only for B_1 (cancelled) and C_1 (gone), of their arrays.
			if cost != (PollCost{Squeue: 1, Sacct: 1, SacctJobs: 2}) || f.count("squeue") != 1 || f.count("sacct") != 1 {
				t.Errorf("cost %+v", cost)
			}
			if v, _ := flagValue(f.last("sacct").Argv, "--jobs"); v != c.B+","+c.C {
				t.Errorf("sacct --jobs=%s", v)
			}
			if v, _ := flagValue(f.last("squeue").Argv, "--jobs"); v != strings.Join(ids, ",") {
				t.Errorf("squeue --jobs=%s", v)
			}
			for _, id := range ids {
				j := got[id]
				switch id {
				case TaskID(c.B, 1):
					if j.State.Failure != FailureCancelled {
						t.Errorf("%s: %+v", id, j)
					}
				case TaskID(c.C, 1):
					if j.Class() != Unknown || j.Source != SourceWithdrawn {
						t.Errorf("%s: %+v", id, j)
					}
				default:
					if j.Class() != Pending || j.Source != SourceSqueue || j.ID != id {
						t.Errorf("%s: %+v", id, j)
					}
				}
			}

			f = c.fake(t, "requeued")
			got, _, err = New(f).Poll(context.Background(), jobs[8:])
			if err != nil {
				t.Fatal(err)
			}
			if j := got[TaskID(c.C, 2)]; j.Class() != Pending || j.Reason != "BeginTime" || j.Source != SourceSqueue {
				t.Errorf("requeued C_2: %+v", j)
			}
			if j := got[TaskID(c.C, 0)]; j.Class() != Running {
				t.Errorf("C_0: %+v", j)
			}
		})
	}
}

// TestPollTaskCost: a poll of N tasks of one array runs the commands of a
// poll of N plain jobs, naming the array once to sacct.
func TestPollTaskCost(t *testing.T) {
	const n = 50
	run := func(ids []string, sacctOut string) (*fakeRunner, PollCost) {
		f := &fakeRunner{handlers: map[string]func([]string) (string, string, int){
			"squeue": func([]string) (string, string, int) { return "", "", 0 },
			"sacct":  func([]string) (string, string, int) { return sacctOut, "", 0 },
		}}
		var jobs []PollJob
		for _, id := range ids {
			jobs = append(jobs, PollJob{ID: id, Submitted: time.Now()})
		}
		_, cost, err := New(f).Poll(context.Background(), jobs)
		if err != nil {
			t.Fatal(err)
		}
		return f, cost
	}
	var plain []string
	var acct strings.Builder
	for i := range n {
		plain = append(plain, fmt.Sprint(1000+i))
		acct.WriteString(sacctLine(fmt.Sprint(2000+i), TaskID("900", i), "n", "COMPLETED", "0:0", "None", "1", "2", "3", "00:00:01", "vm", "nemorl", "60", "c"))
	}
	fp, plainCost := run(plain, "")
	ft, taskCost := run(tasksOf("900", n), acct.String())
	if plainCost != taskCost || fp.count("squeue") != ft.count("squeue") || fp.count("sacct") != ft.count("sacct") || taskCost.Sacct != 1 {
		t.Errorf("plain %+v (%d squeue, %d sacct), tasks %+v (%d, %d)", plainCost, fp.count("squeue"), fp.count("sacct"), taskCost, ft.count("squeue"), ft.count("sacct"))
	}
	if v, _ := flagValue(ft.last("sacct").Argv, "--jobs"); v != "900" {
		t.Errorf("sacct --jobs=%s", v)
	}
}

// TestFindArrayTasks: FindByComment lists every task of an array as its
// own job (those still in the array's record one by one), with the
// array's name and comment, so that a caller finds its own task by index.
func TestFindArrayTasks(t *testing.T) {
	row := func(field, st, c string) string {
		return strings.Join([]string{field, "nemorl-author-arr", st, "None", "1", "2", "3", "0:01", "vm", "nemorl", "30:00", c}, Sep) + "\n"
	}
	f := &fakeRunner{handlers: map[string]func([]string) (string, string, int){
		"sacct": func([]string) (string, string, int) {
			return sacctLine("500", "500_[2-4]", "nemorl-author-arr", "PENDING", "0:0", "None", "1", "Unknown", "Unknown", "00:00:00", "None assigned", "nemorl", "60", "arr-tag") +
				sacctLine("501", "500_0", "nemorl-author-arr", "COMPLETED", "0:0", "None", "1", "2", "3", "00:00:01", "vm", "nemorl", "60", "arr-tag") +
				sacctLine("501.batch", "500_0.batch", "batch", "COMPLETED", "0:0", "", "1", "2", "3", "00:00:01", "vm", "", "", "") +
				sacctLine("502", "500_1", "nemorl-author-arr", "RUNNING", "0:0", "None", "1", "2", "Unknown", "00:00:01", "vm", "nemorl", "60", "arr-tag"), "", 0
		},
		"squeue": func([]string) (string, string, int) {
			// squeue --array: task by task; task 4 was cancelled while pending.
			return row("502=500_1", "RUNNING", "arr-tag") + row("500=500_2", "PENDING", "arr-tag") + row("500=500_3", "PENDING", "arr-tag") +
				row("503=503", "PENDING", "other"), "", 0
		},
	}}
	found, err := New(f).FindByComment(context.Background(), "arr-tag")
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, j := range found {
		got = append(got, fmt.Sprintf("%s:%s:%s:%d", j.ID, j.RawID, j.Class(), j.ArrayTask))
		if j.Comment != "arr-tag" || j.Name != "nemorl-author-arr" || j.ArrayJobID != "500" {
			t.Errorf("%+v", j)
		}
	}
	want := "500_0:501:succeeded:0 500_1:502:running:1 500_2:500:pending:2 500_3:500:pending:3"
	if strings.Join(got, " ") != want {
		t.Errorf("found %s\nwant  %s", strings.Join(got, " "), want)
	}
	if !contains(f.last("squeue").Argv, "--array") {
		t.Errorf("squeue without --array: %q", f.last("squeue").Argv)
	}
}

// TestParseRangeRecords: the records of an array's pending tasks as
// sacct and squeue print them without --array, steps, throttles and all.
func TestParseRangeRecords(t *testing.T) {
	line := func(id string) string {
		return sacctLine("9", id, "n", "PENDING", "0:0", "None", "1", "Unknown", "Unknown", "00:00:00", "None assigned", "u", "60", "c")
	}
	for _, c := range []struct {
		id   string
		want []int
	}{
		{"9_[0-3]", []int{0, 1, 2, 3}}, {"9_[0,2-3]", []int{0, 2, 3}}, {"9_[1-9:4]", []int{1, 5, 9}},
		{"9_[0-2%1]", []int{0, 1, 2}}, {"9_[7]", []int{7}},
	} {
		jobs, err := ParseSacct([]byte(line(c.id)))
		var tasks []int
		for _, j := range jobs {
			tasks = append(tasks, j.ArrayTask)
			if j.ID != TaskID("9", j.ArrayTask) || j.RawID != "9" || j.Runs != 1 {
				t.Errorf("%s: %+v", c.id, j)
			}
		}
		if err != nil || !slices.Equal(tasks, c.want) {
			t.Errorf("%s: tasks %v, %v; want %v", c.id, tasks, err, c.want)
		}
	}
	for _, bad := range []string{"9_[0,2,4,...]", "9_[]", "9_[3-1]", "09_[1]", "9_[a]", "9_[0-4000001]"} {
		if jobs, err := ParseSacct([]byte(line(bad))); err == nil || len(jobs) != 0 {
			t.Errorf("%s: %+v, %v", bad, jobs, err)
		}
	}
	// Too many tasks to list: ParseSacct refuses the record, the Client
	// looks a task up in it all the same.
	big := line("9_[0-4000000]")
	if jobs, err := ParseSacct([]byte(big)); err == nil || len(jobs) != 0 {
		t.Errorf("4,000,001 tasks listed: %d, %v", len(jobs), err)
	}
	set, err := parseSacctSet([]byte(big), nil)
	if j, ok := set.lookup("9_3999999"); err != nil || !ok || j.Class() != Pending {
		t.Errorf("lookup in a big record: %+v %v %v", j, ok, err)
	}
}

// TestJobInfoJSONTask: a task's JSON says its array and index (task 0
// included); a plain job's no array.
func TestJobInfoJSONTask(t *testing.T) {
	for _, j := range []JobInfo{
		{ID: "5_0", RawID: "5", ArrayJobID: "5", ArrayTask: 0},
		{ID: "5_3", RawID: "8", ArrayJobID: "5", ArrayTask: 3},
		{ID: "6", RawID: "6", ArrayTask: -1},
	} {
		b, err := json.Marshal(j)
		if err != nil {
			t.Fatal(err)
		}
		var back JobInfo
		if err := json.Unmarshal(b, &back); err != nil {
			t.Fatal(err)
		}
		if back.ID != j.ID || back.RawID != j.RawID || back.ArrayJobID != j.ArrayJobID || back.ArrayTask != j.ArrayTask || back.IsTask() != j.IsTask() {
			t.Errorf("%s → %s → %+v", j.ID, b, back)
		}
	}
}

// TestSacctBatchScriptTask: sacct frames a task's record under the task's
// id; asked for an array's own id, it frames one record per task.
func TestSacctBatchScriptTask(t *testing.T) {
	v := Version{Major: 24, Minor: 11, Raw: "24.11.5"}
	script := []byte("#!/bin/bash\necho task $SLURM_ARRAY_TASK_ID\nsleep 2")
	out := FrameSacctBatchScript(v, "20002203_1", script)
	got, err := ParseSacctBatchScript(v, "20002203_1", out)
	if err != nil || string(got) != string(script) {
		t.Errorf("%q %v", got, err)
	}
	all := append(FrameSacctBatchScript(v, "20002203_0", script), out...)
	if _, err := ParseSacctBatchScript(v, "20002203", all); err == nil || !strings.Contains(err.Error(), "one record per task") {
		t.Errorf("an array's own id: %v", err)
	}
}

// TestBatchScriptTask: a task's script is asked of slurmctld under the
// task's id, and of sacct under it once slurmctld has forgotten the job.
func TestBatchScriptTask(t *testing.T) {
	script := "#!/bin/bash\necho task $SLURM_ARRAY_TASK_ID\n"
	f := &fakeRunner{handlers: map[string]func([]string) (string, string, int){
		"scontrol": func([]string) (string, string, int) {
			return "", "job script retrieval failed: Invalid job id specified\n", 0
		},
		"sacct": func(argv []string) (string, string, int) {
			if contains(argv, "--version") {
				return "slurm-wlm 22.05.8\n", "", 0
			}
			return string(FrameSacctBatchScript(Version{Major: 22, Minor: 5, Micro: 8}, "12_1", []byte(script))), "", 0
		},
	}}
	got, err := New(f).BatchScript(context.Background(), "12_1")
	if err != nil || string(got) != script {
		t.Fatalf("%q %v", got, err)
	}
	if a := strings.Join(f.last("scontrol").Argv, " "); a != "scontrol write batch_script 12_1 -" {
		t.Errorf("scontrol: %s", a)
	}
	if v, _ := flagValue(f.last("sacct").Argv, "--jobs"); v != "12_1" {
		t.Errorf("sacct --jobs=%s", v)
	}
}

// TestCheckArray: an array fits a cluster whose MaxArraySize is above its
// largest index and whose max_array_tasks (when set) is at least its
// task count; the lab's captured configurations (MaxArraySize 10001).
func TestCheckArray(t *testing.T) {
	for _, path := range []string{"testdata/lab/scontrol_show_config.txt", "testdata/lab-24.11/scontrol_show_config.txt"} {
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		cfg, err := ParseConfig(b)
		if err != nil {
			t.Fatal(err)
		}
		if err := cfg.CheckArray("0-10000"); err != nil {
			t.Errorf("%s: %v", path, err)
		}
		if err := cfg.CheckArray("0-10001"); err == nil || !strings.Contains(err.Error(), "MaxArraySize is 10001") {
			t.Errorf("%s: index 10001 fits: %v", path, err)
		}
	}
	def := Config{MaxArraySize: DefaultMaxArraySize}
	for spec, ok := range map[string]bool{"0-49": true, "1000": true, "0,3,1001": false, "0-1000%10": true, "5-1001": false, "0:2": false} {
		if err := def.CheckArray(spec); (err == nil) != ok {
			t.Errorf("MaxArraySize 1001, %q: %v", spec, err)
		}
	}
	if err := (Config{MaxArraySize: 0}).CheckArray("0"); err == nil || !strings.Contains(err.Error(), "no arrays") {
		t.Errorf("arrays disabled: %v", err)
	}
	lim := Config{MaxArraySize: 100001, Values: map[string]string{"SchedulerParameters": "bf_interval=5,max_array_tasks=1000"}}
	for spec, ok := range map[string]bool{"0-999": true, "99000-99999": true, "0-1000": false, "0,2,100000": true, "0-999,0-999": true} {
		if err := lim.CheckArray(spec); (err == nil) != ok {
			t.Errorf("max_array_tasks 1000, %q: %v", spec, err)
		}
	}
}
