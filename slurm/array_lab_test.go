package slurm

import (
	"context"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestLabArray runs job arrays on each Slurm of the lab and follows every
// task through Query, Queue, Poll and FindByComment:
//   - A, 4 tasks (held at first): task 2 exits 3, the others 0;
//   - B, 4 tasks, aftercorr on A with KillOnInvalidDep: each task runs
//     after its counterpart, but B_2's dependency can never be met (A_2
//     failed) and Slurm cancels it; B_1 is cancelled (scancel B_1) while
//     it waits;
//   - C, 3 tasks (held): C_1 cancelled while still in C's record of
//     pending tasks, its siblings run.
//
// What each Slurm shows is asserted as measured (docs/slurm-versions.md):
// on 24.11 slurmdbd never hears of a task split out of its array and
// cancelled before it ran (B_1, B_2): squeue alone answers for it, until
// slurmctld forgets it (MinJobAge), then nobody does. A task cancelled
// while still in its array's record (C_1) leaves no record on either.
func TestLabArray(t *testing.T) {
	t.Parallel()
	eachSlurm(t, testLabArray)
}

func testLabArray(t *testing.T, l *lab) {
	c, cr := l.client(t)
	ctx := context.Background()
	tag := uniqueTag("array")
	script := "#!/bin/bash\nsleep 2\n[ \"$SLURM_ARRAY_TASK_ID\" = 2 ] && exit 3\nexit 0\n"
	a := submit(t, c, SubmitRequest{Script: []byte(script), Array: "0-3", Hold: true, Name: "nemorl-array-a", Comment: tag + ":a", Args: l.jobArgs(t)})
	b := submit(t, c, SubmitRequest{Wrap: "true", Array: "0-3", AfterCorr: []string{a}, KillOnInvalidDep: true, Name: "nemorl-array-b", Comment: tag + ":b", Args: l.jobArgs(t)})
	cc := submit(t, c, SubmitRequest{Wrap: "true", Array: "0-2", Hold: true, Name: "nemorl-array-c", Comment: tag + ":c", Args: l.jobArgs(t)})
	A, B, C := tasksOf(a, 4), tasksOf(b, 4), tasksOf(cc, 3)
	all := slices.Concat(A, B, C)
	uid := os.Getuid()

	// Pending. Slurm splits B's tasks out of B's record for their
	// aftercorr dependency: each gets a job id of its own but the last,
	// which keeps the array's.
	queue := waitQueue(t, c, B, func(j JobInfo) bool { return j.ArrayTask == 3 || j.RawID != b })
	for i, id := range B {
		j := queue[id]
		if j.Class() != Pending || j.Reason != "Dependency" || (i == 3) != (j.RawID == b) || j.ArrayJobID != b || j.ArrayTask != i {
			t.Errorf("squeue %s before A ran: %+v", id, j)
		}
	}
	got, err := c.Query(ctx, all)
	if err != nil {
		t.Fatal(err)
	}
	// A's tasks, still in A's record: squeue's answer (the hold), raw id
	// the array's.
	for _, id := range slices.Concat(A, C) {
		j := got[id]
		array, task, _ := SplitTaskID(id)
		if j.ID != id || j.Class() != Pending || j.HeldBy() != "user" || j.RawID != array || j.Source != SourceSqueue || j.ArrayJobID != array || j.ArrayTask != task {
			t.Errorf("Query %s, held in its array's record: %+v", id, j)
		}
	}
	for _, id := range B {
		if j := got[id]; j.Class() != Pending || j.ArrayJobID != b {
			t.Errorf("Query %s: %+v", id, j)
		}
	}
	cr.reset()
	polled, cost, err := c.Poll(ctx, pollJobs(all))
	if err != nil {
		t.Fatal(err)
	}
	if cost != (PollCost{Squeue: 1}) || cr.count("squeue") != 1 || cr.count("sacct") != 0 {
		t.Errorf("poll of %d pending tasks: cost %+v, %d squeue, %d sacct", len(all), cost, cr.count("squeue"), cr.count("sacct"))
	}
	for _, id := range all {
		if j := polled[id]; j.Class() != Pending || j.Source != SourceSqueue || j.ID != id {
			t.Errorf("Poll %s: %+v", id, j)
		}
	}
	found, err := c.FindByComment(ctx, tag+":a")
	if err != nil || !slices.Equal(ids(found), A) {
		t.Errorf("FindByComment of A, pending: %v %v", ids(found), err)
	}
	for _, id := range []string{A[2], a} {
		if s, err := c.BatchScript(ctx, id); err != nil || string(s) != script {
			t.Errorf("BatchScript(%s) from slurmctld: %q %v", id, s, err)
		}
	}

	// Cancel one task of each pending array: C_1 still in C's record, B_1
	// split out.
	if err := c.Cancel(ctx, []string{C[1], B[1]}); err != nil {
		t.Fatal(err)
	}
	live, err := c.Queue(ctx, []string{C[0], C[1], B[1]})
	if err != nil {
		t.Fatal(err)
	}
	if j, ok := live[C[1]]; ok {
		t.Errorf("squeue still shows %s, cancelled in its array's record: %+v", C[1], j)
	}
	if j := live[C[0]]; j.Class() != Pending {
		t.Errorf("%s, sibling of the cancelled task: %+v", C[0], j)
	}
	if j := live[B[1]]; j.State.Name != "CANCELLED" || j.State.Failure != FailureCancelled || j.Reason != "Dependency" {
		t.Errorf("squeue %s after scancel: %+v", B[1], j)
	}
	// B_1 in sacct on 22.05 (CANCELLED by the caller), never on 24.11.
	gotB1 := waitFor(t, c, []string{B[1]}, labWait, func(j JobInfo) bool { return j.Terminal() && (l.slurm.AtLeast(24, 11) || j.Source == SourceSacct) })
	if j := gotB1[B[1]]; l.slurm.AtLeast(24, 11) {
		if j.Source != SourceSqueue || j.State.Failure != FailureCancelled {
			t.Errorf("24.11, %s: %+v", B[1], j)
		}
	} else if j.State.Raw != "CANCELLED by "+strconv.Itoa(uid) || j.State.Failure != FailureCancelled || !j.Start.IsZero() || j.NodeList != "" {
		t.Errorf("22.05, %s: %+v", B[1], j)
	}
	got, err = c.Query(ctx, []string{C[1]})
	if j := got[C[1]]; err != nil || j.Class() != Unknown || j.Source != SourceWithdrawn || j.ArrayJobID != cc || j.ArrayTask != 1 {
		t.Errorf("Query %s, cancelled in its array's record: %+v %v", C[1], j, err)
	}

	// Running: the tasks split out, each with a job id of its own but the
	// last, which keeps the array's.
	if err := c.Release(ctx, []string{a, cc}); err != nil {
		t.Fatal(err)
	}
	running := waitQueue(t, c, A, func(j JobInfo) bool { return j.Class() == Running || j.Terminal() })
	raws := map[string]bool{}
	for _, id := range A {
		raws[running[id].RawID] = true
	}
	if len(raws) != 4 || !raws[a] {
		t.Errorf("A's tasks once started: raw ids %v, want 4 of them, one %s", raws, a)
	}
	cr.reset()
	polled, cost, err = c.Poll(ctx, pollJobs(A))
	if err != nil {
		t.Fatal(err)
	}
	if cost.Squeue != 1 || cost.Sacct > 1 {
		t.Errorf("poll of A's 4 tasks: %+v", cost)
	}
	for _, id := range A {
		if j := polled[id]; j.Class() == Unknown || j.Class() == Pending || j.RawID != running[id].RawID {
			t.Errorf("Poll %s while A runs: %+v (squeue: %+v)", id, j, running[id])
		}
	}

	// B_2 never runs: Slurm cancels it once A_2 has failed, reason
	// DependencyNeverSatisfied in squeue; in sacct (22.05 only) CANCELLED
	// with no uid. It is read first: on 24.11 only slurmctld knows it,
	// for MinJobAge.
	byCtld := waitQueue(t, c, []string{B[2]}, JobInfo.Terminal)[B[2]]
	if byCtld.State.Name != "CANCELLED" || byCtld.Reason != "DependencyNeverSatisfied" || byCtld.State.Failure != FailureDependency || !byCtld.Start.IsZero() {
		t.Errorf("squeue %s, its dependency never satisfied: %+v", B[2], byCtld)
	}
	if polled, _, err := c.Poll(ctx, pollJobs(B[2:3])); err != nil || polled[B[2]].State.Failure != FailureDependency {
		t.Errorf("Poll %s: %+v %v", B[2], polled[B[2]], err)
	}
	b2 := waitFor(t, c, []string{B[2]}, labWait, func(j JobInfo) bool { return j.Terminal() && (l.slurm.AtLeast(24, 11) || j.Source == SourceSacct) })[B[2]]
	if b2.State.Name != "CANCELLED" || b2.State.Failure != FailureDependency || !b2.Start.IsZero() || b2.NodeList != "" || b2.State.ByUID != -1 {
		t.Errorf("%s, its dependency never satisfied: %+v", B[2], b2)
	}
	if want := map[bool]Source{false: SourceSacct, true: SourceSqueue}[l.slurm.AtLeast(24, 11)]; b2.Source != want {
		t.Errorf("Slurm %s, %s from %s, want %s", l.slurm.Version, B[2], b2.Source, want)
	}
	// Every task of B by its comment. B_1 and B_2 never became eligible
	// (cancelled while pending; a dependency never satisfied): sacct's
	// time window (--starttime) leaves out a job never eligible, on 22.05
	// and 24.11 alike (sacct -j shows them, Eligible Unknown), so they are
	// found only while slurmctld holds them (MinJobAge after their end:
	// 30 s in the lab; a loaded run of make test went past it once). B_0
	// and B_3 ran: found always.
	found, err = c.FindByComment(ctx, tag+":b")
	if err != nil {
		t.Fatal(err)
	}
	if got := ids(found); !slices.Equal(got, B) {
		live, qerr := c.Queue(ctx, []string{B[1], B[2]})
		want := []string{B[0]}
		for _, id := range B[1:3] {
			if _, held := live[id]; held {
				want = append(want, id) // held now, so held when FindByComment ran
			} else if slices.Contains(got, id) {
				want = append(want, id)
			}
		}
		want = append(want, B[3])
		if qerr != nil || !slices.Equal(got, want) {
			t.Errorf("FindByComment of B: %v, want %v (B_1 and B_2 absent only once slurmctld has forgotten them; squeue: %v)", got, want, qerr)
		}
	}

	// Ended. A_2 exited 3; B_0 and B_3 ran after their counterparts.
	ended := waitFor(t, c, slices.Concat(A, []string{B[0], B[3], C[0], C[2]}), labWait, terminalInSacct)
	for i, id := range A {
		j := ended[id]
		want, code := Succeeded, 0
		if i == 2 {
			want, code = Failed, 3
		}
		if j.Class() != want || j.ExitCode.Code != code || j.ExitCode.Signal != 0 || j.RawID != running[id].RawID || !slices.ContainsFunc(j.Steps, func(s Step) bool { return s.ID == "batch" && s.ExitCode.Code == code }) {
			t.Errorf("%s ended: %+v", id, j)
		}
	}
	if j := ended[A[2]]; j.State.Name != "FAILED" || j.State.Failure != FailureExitCode {
		t.Errorf("%s: %+v", A[2], j.State)
	}
	for _, i := range []int{0, 3} {
		j := ended[B[i]]
		if j.Class() != Succeeded || j.Start.Before(ended[A[i]].End) {
			t.Errorf("%s: %+v (A_%d ended %v)", B[i], j, i, ended[A[i]].End)
		}
	}
	for _, id := range []string{C[0], C[2]} {
		if j := ended[id]; j.Class() != Succeeded {
			t.Errorf("%s, sibling of the cancelled task: %+v", id, j)
		}
	}
	cr.reset()
	done := slices.Concat(A, []string{B[0], B[3]})
	polled, cost, err = c.Poll(ctx, pollJobs(done))
	if err != nil {
		t.Fatal(err)
	}
	if cost != (PollCost{Squeue: 1, Sacct: 1, SacctJobs: len(done)}) || cr.count("sacct") != 1 {
		t.Errorf("poll of %d ended tasks: %+v", len(done), cost)
	}
	if v, _ := flagValue(cr.lastArgv("sacct"), "--jobs"); v != a+","+b {
		t.Errorf("poll's sacct --jobs=%s, want the two arrays", v)
	}
	for _, id := range done {
		if p, q := polled[id], ended[id]; p.Class() != q.Class() || p.ExitCode != q.ExitCode || p.RawID != q.RawID || p.Source != SourceSacct {
			t.Errorf("Poll %s: %+v, Query said %+v", id, p, q)
		}
	}
	found, err = c.FindByComment(ctx, tag+":c")
	if err != nil || !slices.Equal(ids(found), []string{C[0], C[2]}) {
		t.Errorf("FindByComment of C, C_1 cancelled while pending: %v %v", ids(found), err)
	}

	// Once slurmctld forgets B_2 (MinJobAge), 22.05's sacct still has it;
	// 24.11's never had it: Unknown, as an id never issued.
	deadline := time.Now().Add(3 * time.Minute)
	for {
		live, err := c.Queue(ctx, []string{B[2]})
		if _, held := live[B[2]]; err == nil && !held {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("slurmctld still holds %s after 3 minutes", B[2])
		}
		time.Sleep(2 * time.Second)
	}
	got, err = c.Query(ctx, []string{B[2]})
	j := got[B[2]]
	switch {
	case err != nil:
		t.Fatal(err)
	case l.slurm.AtLeast(24, 11) && (j.Class() != Unknown || j.Source != SourceWithdrawn):
		// No record of its own while its array's siblings have theirs:
		// withdrawn, which for a task with a dependency the dependency
		// explains too (the rules read it only for an author's task,
		// which has none).
		t.Errorf("24.11, %s forgotten by slurmctld: %+v; want Unknown, withdrawn (no record, its array known)", B[2], j)
	case !l.slurm.AtLeast(24, 11) && (j.State.Failure != FailureDependency || j.Source != SourceSacct):
		t.Errorf("22.05, %s forgotten by slurmctld: %+v; want sacct's dependency cancellation", B[2], j)
	}
}

// waitQueue asks squeue (Queue) about ids until cond holds for each, or
// fails after labWait.
func waitQueue(t *testing.T, c *Client, ids []string, cond func(JobInfo) bool) map[string]JobInfo {
	t.Helper()
	deadline := time.Now().Add(labWait)
	for {
		got, err := c.Queue(context.Background(), ids)
		ok := err == nil
		for _, id := range ids {
			if j, shown := got[id]; !shown || !cond(j) {
				ok = false
			}
		}
		if ok {
			return got
		}
		if time.Now().After(deadline) {
			t.Fatalf("squeue of %v: %+v %v", ids, got, err)
		}
		time.Sleep(500 * time.Millisecond)
	}
}

func pollJobs(ids []string) []PollJob {
	var jobs []PollJob
	for _, id := range ids {
		jobs = append(jobs, PollJob{ID: id, Submitted: time.Now().Add(-10 * time.Minute)})
	}
	return jobs
}

func ids(jobs []JobInfo) []string {
	var out []string
	for _, j := range jobs {
		out = append(out, j.ID)
	}
	return out
}

// TestLabArrayMaxSize: an array whose largest index is the cluster's
// MaxArraySize (read by Client.Config) is refused by CheckArray and by
// sbatch, for good (SubmitRefused); one index less is taken.
func TestLabArrayMaxSize(t *testing.T) {
	t.Parallel()
	eachSlurm(t, testLabArrayMaxSize)
}

func testLabArrayMaxSize(t *testing.T, l *lab) {
	c, _ := l.client(t)
	ctx := context.Background()
	cfg, err := c.Config(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.MaxArraySize < 2 {
		t.Fatalf("Slurm %s: MaxArraySize %d", l.slurm.Version, cfg.MaxArraySize)
	}
	top := strconv.Itoa(cfg.MaxArraySize - 1)
	over := strconv.Itoa(cfg.MaxArraySize)
	if err := cfg.CheckArray(top); err != nil {
		t.Errorf("CheckArray(%s): %v", top, err)
	}
	if err := cfg.CheckArray("0," + over); err == nil {
		t.Errorf("CheckArray(0,%s) passed", over)
	}
	_, err = c.Submit(ctx, SubmitRequest{Wrap: "true", Array: "0," + over, Hold: true, Args: l.jobArgs(t)})
	if reason, refused := SubmitRefused(err); !refused || !strings.Contains(reason, "Invalid job array specification") {
		t.Errorf("sbatch --array=0,%s: %v (refused %v)", over, err, refused)
	}
	id := submit(t, c, SubmitRequest{Wrap: "true", Array: top, Hold: true, Args: l.jobArgs(t)})
	got, err := c.Queue(ctx, []string{TaskID(id, cfg.MaxArraySize-1)})
	if j := got[TaskID(id, cfg.MaxArraySize-1)]; err != nil || j.Class() != Pending || j.HeldBy() != "user" {
		t.Errorf("task %s of %s: %+v %v", top, id, j, err)
	}
}
