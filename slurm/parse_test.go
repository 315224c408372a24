package slurm

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nemorl/nemorl-slurm/remote"
)

// labIDs maps the roles in testdata/lab/ids.txt (ok=333 …) to job ids.
func labIDs(t *testing.T) map[string]string {
	b, err := os.ReadFile("testdata/lab/ids.txt")
	if err != nil {
		t.Fatal(err)
	}
	m := map[string]string{}
	for _, w := range strings.Fields(string(b)) {
		k, v, _ := strings.Cut(w, "=")
		if k == "chain" {
			for i, id := range strings.Split(v, ",") {
				m["chain"+string(rune('1'+i))] = id
			}
			continue
		}
		m[k] = v
	}
	return m
}

// legacyCaptureUser is the user that ran testdata/lab/capture.sh for the
// captures made before User joined SacctFields and SqueueFields (its
// scancels read "CANCELLED by 0").
const legacyCaptureUser = "root"

// Columns that joined SacctFields and SqueueFields after lab captures were
// made, oldest first; each went in just before the comment.
var (
	addedSacct  = []string{"User", "TimelimitRaw"}
	addedSqueue = []string{"%u", "%l"}
)

// readCapture reads a captured or synthetic sacct/squeue output file. Real
// lab captures made before a column existed get it inserted before the
// comment, so that they parse in today's layout: User (sacct User, squeue
// %u) as the job's user on job lines, empty on sacct step lines, as sacct
// prints it; the time limit (TimelimitRaw, %l) empty: not captured, so
// TimeLimit 0. Files already in today's layout are returned as they are.
func readCapture(path string) ([]byte, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	base := filepath.Base(path)
	var (
		width int
		added []string
	)
	switch {
	case strings.HasPrefix(base, "sacct_"):
		width, added = len(SacctFields), addedSacct
	case strings.HasPrefix(base, "squeue_"):
		width, added = len(SqueueFields), addedSqueue
	default:
		return b, nil
	}
	lines := strings.Split(string(b), "\n")
	for i, l := range lines {
		f := strings.Split(l, Sep)
		missing := width - len(f)
		if l == "" || missing <= 0 || missing > len(added) {
			continue
		}
		step := strings.HasPrefix(base, "sacct_") && strings.Contains(f[0], ".")
		var ins []string
		for _, col := range added[len(added)-missing:] {
			v := ""
			if (col == "User" && !step) || col == "%u" {
				v = legacyCaptureUser
			}
			ins = append(ins, v)
		}
		last := len(f) - 1
		f = append(append(f[:last:last], ins...), f[last])
		lines[i] = strings.Join(f, Sep)
	}
	return []byte(strings.Join(lines, "\n")), nil
}

func parseFile(t *testing.T, parse func([]byte) ([]JobInfo, error), path string) map[string]JobInfo {
	t.Helper()
	b, err := readCapture(path)
	if err != nil {
		t.Fatal(err)
	}
	jobs, err := parse(b)
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	m := map[string]JobInfo{}
	for _, j := range jobs {
		m[j.ID] = j
	}
	return m
}

type want struct {
	raw     string
	class   Class
	failure Failure
	exit    string // "" = don't care
	byUID   int    // -2 = don't care
	started bool
	ended   bool
	steps   int // -1 = don't care
}

func check(t *testing.T, file, role string, j JobInfo, w want) {
	t.Helper()
	bad := j.State.Raw != w.raw || j.State.Class != w.class || j.State.Failure != w.failure ||
		(w.exit != "" && j.ExitCode.Raw != w.exit) || (w.byUID != -2 && j.State.ByUID != w.byUID) ||
		j.Start.IsZero() == w.started || j.End.IsZero() == w.ended || (w.steps >= 0 && len(j.Steps) != w.steps)
	if bad {
		t.Errorf("%s %s (%s): got %+v\nwant %+v", file, role, j.ID, j, w)
	}
}

// TestParseSacctLab: real sacct output of the lab (22.05.8), captured by
// testdata/lab/capture.sh at three moments.
func TestParseSacctLab(t *testing.T) {
	ids := labIDs(t)
	ended := map[string]want{
		"ok":      {"COMPLETED", Succeeded, "", "0:0", -1, true, true, 1},
		"exit3":   {"FAILED", Failed, FailureExitCode, "3:0", -1, true, true, 1},
		"exit137": {"FAILED", Failed, FailureExitCode, "9:0", -1, true, true, 1}, // 137 folds to 9:0 in 22.05
		"sigkill": {"FAILED", Failed, FailureExitCode, "0:9", -1, true, true, 1},
		"sigterm": {"FAILED", Failed, FailureExitCode, "0:15", -1, true, true, 1},
		"steps":   {"COMPLETED", Succeeded, "", "0:0", -1, true, true, 3},
		"sleeper": {"CANCELLED", Failed, FailureCancelled, "0:15", -1, true, true, 1},
		"timeout": {"TIMEOUT", Failed, FailureTimeout, "0:0", -1, true, true, 1}, // batch step: CANCELLED 0:15
		"dep":     {"PENDING", Pending, "", "0:0", -1, false, false, 0},
		"chain1":  {"FAILED", Failed, FailureExitCode, "3:0", -1, true, true, 1},
		"chain2":  {"CANCELLED", Failed, FailureDependency, "0:0", -1, false, true, 0},
		"chain3":  {"CANCELLED", Failed, FailureDependency, "0:0", -1, false, true, 0},
	}
	got := parseFile(t, ParseSacct, "testdata/lab/sacct_ended.txt")
	for role, w := range ended {
		check(t, "sacct_ended", role, got[ids[role]], w)
	}
	final := parseFile(t, ParseSacct, "testdata/lab/sacct_final.txt")
	// scancel of pending jobs: "CANCELLED by 0", reason left at Dependency.
	check(t, "sacct_final", "blocked", final[ids["blocked"]], want{"CANCELLED by 0", Failed, FailureCancelled, "0:0", 0, false, true, 0})
	check(t, "sacct_final", "held", final[ids["held"]], want{"CANCELLED by 0", Failed, FailureCancelled, "0:0", 0, false, true, 0})
	if j := final[ids["chain2"]]; j.Comment != "capture" || j.Name != "cap-chain2" || j.Reason != "Dependency" || j.NodeList != "" || j.Source != SourceSacct {
		t.Errorf("chain2 fields: %+v", j)
	}
	if j := final[ids["timeout"]]; j.Elapsed != 73*time.Second || j.End.Sub(j.Start) != 73*time.Second || j.NodeList != "vm" {
		t.Errorf("timeout times: %+v", j)
	}
	if j := final[ids["steps"]]; j.Steps[2].ID != "1" || j.Steps[2].Name != "false" || j.Steps[2].ExitCode.Code != 1 || j.Steps[2].State.Class != Failed {
		t.Errorf("steps: %+v", j.Steps)
	}

	run := parseFile(t, ParseSacct, "testdata/lab/sacct_running.txt")
	check(t, "sacct_running", "sleeper", run[ids["sleeper"]], want{"RUNNING", Running, "", "0:0", -1, true, false, 1})
	check(t, "sacct_running", "held", run[ids["held"]], want{"PENDING", Pending, "", "0:0", -1, false, false, 0})
	if j := run[ids["held"]]; j.Reason != "JobHeldUser" || j.Submit.Unix() != 1795986530 {
		t.Errorf("held: %+v", j)
	}
	if j := run[ids["sleeper"]]; j.Comment != "" { // sacct stores the comment at the end
		t.Errorf("running comment %q", j.Comment)
	}

	// Right after sbatch, sacct knew none of the jobs.
	if sub := parseFile(t, ParseSacct, "testdata/lab/sacct_submitted.txt"); len(sub) != 0 {
		t.Errorf("sacct_submitted: %d jobs", len(sub))
	}
}

// TestParseSacctStandardTime: the same columns with Slurm's default time
// format (local time), as a Client without env(1) would get.
func TestParseSacctStandardTime(t *testing.T) {
	b, err := readCapture("testdata/lab/sacct_running_standard_time.txt")
	if err != nil {
		t.Fatal(err)
	}
	std, err := parseSacct(b, time.UTC) // the lab runs in UTC
	if err != nil {
		t.Fatal(err)
	}
	epoch := parseFile(t, ParseSacct, "testdata/lab/sacct_running.txt")
	if len(std) != len(epoch) {
		t.Fatalf("%d vs %d jobs", len(std), len(epoch))
	}
	for _, j := range std {
		e := epoch[j.ID]
		if !j.Submit.Equal(e.Submit) || !j.Start.Equal(e.Start) || !j.End.Equal(e.End) || j.State != e.State {
			t.Errorf("%s: %+v vs %+v", j.ID, j, e)
		}
	}
}

func TestParseSqueueLab(t *testing.T) {
	ids := labIDs(t)
	run := parseFile(t, ParseSqueue, "testdata/lab/squeue_running.txt")
	cases := map[string]want{
		"ok":      {"COMPLETED", Succeeded, "", "", -1, true, true, -1},
		"exit3":   {"FAILED", Failed, FailureExitCode, "", -1, true, true, -1},
		"sigkill": {"FAILED", Failed, FailureExitCode, "", -1, true, true, -1}, // reason JobLaunchFailure
		"sleeper": {"RUNNING", Running, "", "", -1, true, false, -1},           // %e NONE
		"timeout": {"RUNNING", Running, "", "", -1, true, false, -1},           // %e expected end dropped
		"chain1":  {"PENDING", Pending, "", "", -1, false, false, -1},          // %S expected start dropped
		"blocked": {"PENDING", Pending, "", "", -1, false, false, -1},
		"held":    {"PENDING", Pending, "", "", -1, false, false, -1},
	}
	for role, w := range cases {
		check(t, "squeue_running", role, run[ids[role]], w)
	}
	if j := run[ids["blocked"]]; !j.Blocked() || j.Reason != "DependencyNeverSatisfied" {
		t.Errorf("blocked: %+v", j)
	}
	if j := run[ids["sleeper"]]; j.Elapsed != 4*time.Second || j.Comment != "capture" || j.NodeList != "vm" || j.Source != SourceSqueue || j.ExitCode.Known {
		t.Errorf("sleeper: %+v", j)
	}
	end := parseFile(t, ParseSqueue, "testdata/lab/squeue_ended.txt")
	check(t, "squeue_ended", "timeout", end[ids["timeout"]], want{"TIMEOUT", Failed, FailureTimeout, "", -1, true, true, -1})
	if j := end[ids["dep"]]; !j.Blocked() {
		t.Errorf("dep should be blocked once its dependency was cancelled: %+v", j)
	}
	sub := parseFile(t, ParseSqueue, "testdata/lab/squeue_submitted.txt")
	if len(sub) != 14 {
		t.Errorf("squeue_submitted: %d jobs", len(sub))
	}
	for _, j := range sub {
		if j.Class() != Pending {
			t.Errorf("submitted %s: %+v", j.ID, j)
		}
	}
}

func TestParseSynthetic(t *testing.T) {
	oom := parseFile(t, ParseSacct, "testdata/synthetic/sacct_oom.txt")
	check(t, "sacct_oom", "job", oom["501"], want{"OUT_OF_MEMORY", Failed, FailureOutOfMemory, "0:125", -1, true, true, 2})
	// FAILED with 0:0 on the job line: the OOM step explains it, the batch
	// step's exit code stands in.
	check(t, "sacct_oom", "step", oom["502"], want{"FAILED", Failed, FailureOutOfMemory, "1:0", -1, true, true, 2})

	rq := parseFile(t, ParseSacct, "testdata/synthetic/sacct_requeue_duplicates.txt")
	check(t, "requeue", "601", rq["601"], want{"RUNNING", Running, "", "0:0", -1, true, false, 1})
	if s := rq["601"].Steps[0]; s.State.Class != Running {
		t.Errorf("requeue kept the older run's step: %+v", s)
	}
	if j := rq["601"]; j.Runs != 2 || len(j.EarlierRuns) != 1 || j.EarlierRuns[0] != "NODE_FAIL" {
		t.Errorf("requeue: runs %d, earlier %q; want 2 runs, the first NODE_FAIL", j.Runs, j.EarlierRuns)
	}
	// A job id Slurm handed out again (its counter reset): another job, not a run.
	if j := parseFile(t, ParseSacct, "testdata/synthetic/sacct_id_reused.txt")["602"]; j.Name != "nemorl-train-ep" || j.Runs != 1 || j.EarlierRuns != nil {
		t.Errorf("reused id: %+v, want the latest job with one run", j)
	}
	if j := oom["502"]; j.Runs != 1 || j.EarlierRuns != nil {
		t.Errorf("a job that ran once: runs %d, earlier %q", j.Runs, j.EarlierRuns)
	}

	sq := parseFile(t, ParseSqueue, "testdata/synthetic/squeue_states.txt")
	for id, w := range map[string]struct {
		class   Class
		failure Failure
	}{
		"701": {Running, ""}, "702": {Failed, FailureDependency}, "703": {Failed, FailureNodeFailure},
		"704": {Failed, FailurePreempted}, "705": {Pending, ""}, "706": {Failed, FailureBootFailure},
		"707": {Failed, FailureDeadline}, "708": {Failed, FailureOutOfMemory},
	} {
		if j := sq[id]; j.Class() != w.class || j.State.Failure != w.failure {
			t.Errorf("squeue %s: %+v", id, j)
		}
	}
	if sq["705"].Start.IsZero() == false || sq["704"].Elapsed != 24*time.Hour {
		t.Errorf("705 %+v / 704 %+v", sq["705"], sq["704"])
	}
}

func TestParseSacctMalformed(t *testing.T) {
	in := sacctLine("1", "1", "a", "COMPLETED", "0:0", "None", "1", "2", "3", "00:00:01", "vm", "nemorl", "60", "c") +
		"sacct: error: something on stdout\n" +
		sacctLine("x1", "x1", "a", "COMPLETED", "0:0", "None", "1", "2", "3", "00:00:01", "vm", "nemorl", "60", "c") +
		sacctLine("2.", "2.", "a", "COMPLETED", "0:0", "None", "1", "2", "3", "00:00:01", "vm", "", "", "c") +
		sacctLine("3", "3", "a", "RUNNING", "0:0", "None", "1", "2", "Unknown", "00:00:01", "vm", "nemorl", "60:00:00:00", "has"+Sep+"sep") +
		// a line from before TimelimitRaw joined SacctFields: one column short
		sacctLine("4", "4", "a", "COMPLETED", "0:0", "None", "1", "2", "3", "00:00:01", "vm", "nemorl", "c")
	jobs, err := ParseSacct([]byte(in))
	if err == nil || !strings.Contains(err.Error(), "line 2") || !strings.Contains(err.Error(), "line 3") || !strings.Contains(err.Error(), "line 4") ||
		!strings.Contains(err.Error(), "line 6: 13 fields, want 14") {
		t.Errorf("err %v", err)
	}
	// A malformed time limit is unknown (0); the line still counts.
	if len(jobs) != 2 || jobs[0].ID != "1" || jobs[0].TimeLimit != time.Hour || jobs[1].Comment != "has"+Sep+"sep" || jobs[1].TimeLimit != 0 {
		t.Errorf("jobs %+v", jobs)
	}
	// steps before (or without) their job line
	jobs, err = ParseSacct([]byte(sacctLine("9.batch", "9.batch", "batch", "FAILED", "2:0", "", "1", "2", "3", "00:00:01", "vm", "", "", "")))
	if err != nil || len(jobs) != 1 || jobs[0].Class() != Failed || jobs[0].ExitCode.Code != 2 || jobs[0].TimeLimit != 0 {
		t.Errorf("steps only: %+v %v", jobs, err)
	}
}

func TestParseSqueueMalformed(t *testing.T) {
	jobs, err := ParseSqueue([]byte("slurm_load_jobs error: Invalid job id specified\n\n" +
		strings.Join([]string{"5", "n", "PENDING", "None", "1", "N/A", "N/A", "0:00", "", "nemorl", "INVALID", "(null)"}, Sep) + "\r\n" +
		// from before %l joined SqueueFields: one column short
		strings.Join([]string{"6", "n", "PENDING", "None", "1", "N/A", "N/A", "0:00", "", "nemorl", "(null)"}, Sep) + "\n"))
	if err == nil || !strings.Contains(err.Error(), "line 4: 11 fields, want 12") || len(jobs) != 1 || jobs[0].ID != "5" || jobs[0].Comment != "" || jobs[0].TimeLimit != 0 {
		t.Errorf("%+v %v", jobs, err)
	}
}

func TestParseSbatchFiles(t *testing.T) {
	cases := []struct {
		dir, name, id, cluster string
		warnings               int
		ok                     bool
	}{
		{"lab", "sbatch_ok", "", "", 0, true},
		{"lab", "sbatch_fail", "", "", 1, false},
		{"lab", "sbatch_fail_mem", "", "", 2, false},
		{"synthetic", "sbatch_warning", "4242", "", 1, true},
		{"synthetic", "sbatch_cluster", "4243", "nemorl-lab", 0, true},
	}
	for _, c := range cases {
		out, _ := os.ReadFile(filepath.Join("testdata", c.dir, c.name+".stdout"))
		errb, _ := os.ReadFile(filepath.Join("testdata", c.dir, c.name+".stderr"))
		r, err := ParseSbatch(out, errb)
		if (err == nil) != c.ok || len(r.Warnings) != c.warnings || (c.id != "" && r.JobID != c.id) || r.Cluster != c.cluster {
			t.Errorf("%s: %+v %v", c.name, r, err)
		}
		if c.ok && !isDigits(r.JobID) {
			t.Errorf("%s: job id %q", c.name, r.JobID)
		}
	}
}

func TestParseSbatchTable(t *testing.T) {
	cases := []struct {
		stdout, stderr string
		id, cluster    string
		warnings       []string
	}{
		{"17\n", "", "17", "", nil},
		{"17", "", "17", "", nil},
		{"  17;c1  \n", "", "17", "c1", nil},
		{"17\r\n", "sbatch: warning: x\n\n", "17", "", []string{"sbatch: warning: x"}},
		{"job_submit: note\n18\n", "", "18", "", []string{"job_submit: note"}},
		{"", "sbatch: error: Batch job submission failed", "", "", nil},
		{"Submitted batch job 19\n", "", "", "", nil},
		{"17;a b\n", "", "", "", nil},
	}
	for _, c := range cases {
		r, err := ParseSbatch([]byte(c.stdout), []byte(c.stderr))
		if c.id == "" {
			if err == nil {
				t.Errorf("%q accepted: %+v", c.stdout, r)
			}
			continue
		}
		if err != nil || r.JobID != c.id || r.Cluster != c.cluster || strings.Join(r.Warnings, "|") != strings.Join(c.warnings, "|") {
			t.Errorf("%q: %+v %v", c.stdout, r, err)
		}
	}
}

func TestParseSacctTransientAllocation(t *testing.T) {
	got := parseFile(t, ParseSacct, "testdata/synthetic/sacct_transient_allocation.txt")
	check(t, "transient", "408", got["408"], want{"CANCELLED", Failed, FailureDependency, "0:0", -1, false, true, 0})
	check(t, "transient", "407", got["407"], want{"FAILED", Failed, FailureExitCode, "3:0", -1, true, true, 1})
}

func TestSubmitRefused(t *testing.T) {
	ce := func(stderr string) error {
		return fmt.Errorf("slurm: submit: %w", &remote.CommandError{Host: "h", Command: "sbatch x", ExitStatus: 1, Stderr: stderr})
	}
	for stderr, want := range map[string]bool{
		"sbatch: error: invalid partition specified: nosuch\nsbatch: error: Batch job submission failed: Invalid partition name specified": true,
		"sbatch: error: Batch job submission failed: Invalid account or account/partition combination specified":                           true,
		"sbatch: error: Batch job submission failed: Requested node configuration is not available":                                        true,
		"sbatch: error: Unable to open file /w/ep/train/train.sbatch":                                                                      true,
		"sbatch: error: QOSMaxSubmitJobPerUserLimit\nsbatch: error: Batch job submission failed: Job violates accounting/QOS policy":       false,
		"sbatch: error: Batch job submission failed: Socket timed out on send/recv operation":                                              false,
		"sbatch: error: Batch job submission failed: Unable to contact slurm controller (connect failure)":                                 false,
	} {
		if _, got := SubmitRefused(ce(stderr)); got != want {
			t.Errorf("%q: refused=%v, want %v", stderr, got, want)
		}
	}
	if _, got := SubmitRefused(fmt.Errorf("x: %w", remote.ErrConnectionLost)); got {
		t.Error("a lost connection counted as a refusal")
	}
}

// TestParseSacctCancelUID: real sacct output (lab, 22.05.8, today's
// SacctFields) of jobs owned by nemorl (uid 1001): a held job cancelled by
// its owner (7) and by root (16), a running job cancelled by its owner (8)
// and by root (15), and a --kill-on-invalid-dep job (18) whose parent (17)
// failed. slurmctld records no uid for its own cancellation.
func TestParseSacctCancelUID(t *testing.T) {
	got := parseFile(t, ParseSacct, "testdata/lab/sacct_cancel_uid.txt")
	cases := []struct {
		id      string
		raw     string
		by      int
		failure Failure
		started bool
	}{
		{"7", "CANCELLED by 1001", 1001, FailureCancelled, false},
		{"16", "CANCELLED by 0", 0, FailureCancelled, false},
		{"8", "CANCELLED by 1001", 1001, FailureCancelled, true},
		{"15", "CANCELLED by 0", 0, FailureCancelled, true},
		{"18", "CANCELLED", -1, FailureDependency, false},
		{"17", "FAILED", -1, FailureExitCode, true},
	}
	for _, c := range cases {
		j := got[c.id]
		if j.State.Raw != c.raw || j.State.ByUID != c.by || j.State.Failure != c.failure || j.Start.IsZero() == c.started {
			t.Errorf("job %s: %+v", c.id, j)
		}
		if j.User != "nemorl" {
			t.Errorf("job %s: user %q", c.id, j.User)
		}
	}
}

// TestParseUser: the job's user from sacct (User) and squeue (%u); step
// lines carry none; squeue's "(null)" is empty.
func TestParseUser(t *testing.T) {
	ids := labIDs(t)
	final := parseFile(t, ParseSacct, "testdata/lab/sacct_final.txt")
	if j := final[ids["steps"]]; j.User != legacyCaptureUser || len(j.Steps) != 3 {
		t.Errorf("sacct user %q", j.User)
	}
	jobs, err := ParseSacct([]byte(sacctLine("5.batch", "5.batch", "batch", "COMPLETED", "0:0", "", "1", "2", "3", "00:00:01", "vm", "", "", "")))
	if err != nil || len(jobs) != 1 || jobs[0].User != "" {
		t.Errorf("steps only: %+v %v", jobs, err)
	}
	jobs, err = ParseSacct([]byte(sacctLine("6", "6", "n", "COMPLETED", "0:0", "None", "1", "2", "3", "00:00:01", "vm", " alice ", "60", "c"+Sep+"d")))
	if err != nil || len(jobs) != 1 || jobs[0].User != "alice" || jobs[0].Comment != "c"+Sep+"d" {
		t.Errorf("sacct user with a separator in the comment: %+v %v", jobs, err)
	}
	sq, err := ParseSqueue([]byte(strings.Join([]string{"5", "n", "PENDING", "None", "1", "N/A", "N/A", "0:00", "", "bob", "UNLIMITED", "(null)"}, Sep) + "\n" +
		strings.Join([]string{"6", "n", "PENDING", "None", "1", "N/A", "N/A", "0:00", "", "(null)", "5:00", "x"}, Sep) + "\n"))
	if err != nil || len(sq) != 2 || sq[0].User != "bob" || sq[1].User != "" || sq[1].Comment != "x" {
		t.Errorf("squeue users: %+v %v", sq, err)
	}
	run := parseFile(t, ParseSqueue, "testdata/lab/squeue_running.txt")
	if j := run[ids["sleeper"]]; j.User != legacyCaptureUser {
		t.Errorf("squeue user %q", j.User)
	}
}

// TestParseTimeLimitLab: real sacct and squeue output (lab, 22.05.8,
// today's layout, as root) of jobs whose time limit and hold were changed
// after submission:
//   - 1: --time=5 --hold, then scontrol update TimeLimit=1;
//   - 2: --hold without --time, then scontrol hold (admin) and scontrol
//     update TimeLimit=UNLIMITED;
//   - 3: --time=1-02:03:00 --hold, released, ran (sacct keeps its reason);
//   - 4: --time=30 --hold, then scontrol hold (admin): sacct still says
//     JobHeldUser, squeue JobHeldAdmin;
//   - 5: --time=0:45 (rounded up to 1 minute) --hold, then scontrol update
//     TimeLimit=1-02:03:00;
//   - 28: --time=5 --begin=now+1hour, held by root and released;
//   - 36: --hold without --time: sacct Partition_Limit, squeue the
//     partition's UNLIMITED;
//   - 37: --time=90 --hold.
func TestParseTimeLimitLab(t *testing.T) {
	const (
		m = time.Minute
		d = 24 * time.Hour
	)
	type tl struct {
		limit  time.Duration
		heldBy string
	}
	acct := parseFile(t, ParseSacct, "testdata/lab/sacct_timelimit.txt")
	for id, w := range map[string]tl{
		"1": {m, "user"}, "2": {Unlimited, "admin"}, "3": {d + 123*m, ""}, "4": {30 * m, "user"},
		"5": {d + 123*m, "user"}, "28": {5 * m, ""}, "36": {0, "user"}, "37": {90 * m, "user"},
	} {
		if j := acct[id]; j.TimeLimit != w.limit || j.HeldBy() != w.heldBy || j.User != "root" {
			t.Errorf("sacct %s: time limit %v, held by %q; want %v, %q (%+v)", id, j.TimeLimit, j.HeldBy(), w.limit, w.heldBy, j)
		}
	}
	if j := acct["3"]; j.Class() != Succeeded || len(j.Steps) != 1 || j.Steps[0].ID != "batch" || j.Reason != "JobHeldUser" {
		t.Errorf("sacct 3: %+v", j)
	}
	live := parseFile(t, ParseSqueue, "testdata/lab/squeue_timelimit.txt")
	for id, w := range map[string]tl{
		"1": {m, "user"}, "2": {Unlimited, "admin"}, "4": {30 * m, "admin"},
		"5": {d + 123*m, "user"}, "28": {5 * m, ""}, "36": {Unlimited, "user"}, "37": {90 * m, "user"},
	} {
		if j := live[id]; j.TimeLimit != w.limit || j.HeldBy() != w.heldBy || j.Class() != Pending {
			t.Errorf("squeue %s: time limit %v, held by %q; want %v, %q (%+v)", id, j.TimeLimit, j.HeldBy(), w.limit, w.heldBy, j)
		}
	}
	if len(live) != 7 {
		t.Errorf("squeue: %d jobs, want 7 (3 had left slurmctld)", len(live))
	}
}

// TestParseTimeLimitFiles: the time limit of the synthetic files (today's
// layout) comes from the job line, never a step line; the lab captures
// made before the column existed have none (0).
func TestParseTimeLimitFiles(t *testing.T) {
	oom := parseFile(t, ParseSacct, "testdata/synthetic/sacct_oom.txt")
	if j := oom["501"]; j.TimeLimit != time.Hour || len(j.Steps) != 2 {
		t.Errorf("501: %v, %d steps", j.TimeLimit, len(j.Steps))
	}
	if j := oom["502"]; j.TimeLimit != 0 { // Partition_Limit
		t.Errorf("502: %v", j.TimeLimit)
	}
	if j := parseFile(t, ParseSacct, "testdata/synthetic/sacct_requeue_duplicates.txt")["601"]; j.TimeLimit != 12*time.Hour || j.Runs != 2 {
		t.Errorf("601: %v, %d runs", j.TimeLimit, j.Runs)
	}
	if j := parseFile(t, ParseSacct, "testdata/synthetic/sacct_id_reused.txt")["602"]; j.TimeLimit != 12*time.Hour {
		t.Errorf("602: %v, want the latest job's", j.TimeLimit)
	}
	sq := parseFile(t, ParseSqueue, "testdata/synthetic/squeue_states.txt")
	for id, want := range map[string]time.Duration{
		"701": 2 * time.Hour, "702": 30 * time.Minute, "704": 48 * time.Hour, "705": Unlimited, "706": 5 * time.Minute,
	} {
		if got := sq[id].TimeLimit; got != want {
			t.Errorf("squeue %s: %v, want %v", id, got, want)
		}
	}
	for _, f := range []string{"sacct_final.txt", "squeue_running.txt", "sacct_cancel_uid.txt"} {
		parse := ParseSacct
		if strings.HasPrefix(f, "squeue_") {
			parse = ParseSqueue
		}
		for id, j := range parseFile(t, parse, "testdata/lab/"+f) {
			if j.TimeLimit != 0 {
				t.Errorf("%s %s: time limit %v from a capture without the column", f, id, j.TimeLimit)
			}
		}
	}

	// A step line never sets the job's limit, whatever it holds; a job
	// known from its steps only has none.
	in := sacctLine("9", "9", "n", "COMPLETED", "0:0", "None", "1", "2", "3", "00:00:01", "vm", "nemorl", "60", "c") +
		sacctLine("9.batch", "9.batch", "batch", "COMPLETED", "0:0", "", "1", "2", "3", "00:00:01", "vm", "", "5", "") +
		sacctLine("10.batch", "10.batch", "batch", "COMPLETED", "0:0", "", "1", "2", "3", "00:00:01", "vm", "", "5", "") +
		sacctLine("10", "10", "n", "COMPLETED", "0:0", "None", "1", "2", "3", "00:00:01", "vm", "nemorl", "UNLIMITED", "c") +
		sacctLine("11.batch", "11.batch", "batch", "COMPLETED", "0:0", "", "1", "2", "3", "00:00:01", "vm", "", "5", "")
	jobs, err := ParseSacct([]byte(in))
	if err != nil || len(jobs) != 3 {
		t.Fatalf("%+v %v", jobs, err)
	}
	for i, want := range []time.Duration{time.Hour, Unlimited, 0} {
		if jobs[i].TimeLimit != want {
			t.Errorf("job %s: %v, want %v", jobs[i].ID, jobs[i].TimeLimit, want)
		}
	}
}

// TestParseSacctKilledBeforeScript: real sacct output (lab, 22.05.8,
// today's SacctFields, --duplicates) of batch jobs that ended FAILED
// without their script ending by itself:
//
//   - 5712: the fault suite's requeued train job, started again 0.15 s
//     after `scontrol update StartTime=now`; slurmctld: "Killing
//     non-startable batch JobId=5712: Job credential revoked". Its latest
//     run: FAILED 1:0, batch step CANCELLED with no exit code, 0 s. Its
//     script never ran: Slurm's launch failed (the cluster's).
//   - 9948, 9949: --output a file mode 000 and a directory (what a planted
//     output does): slurmstepd could not open it, 0:53.
//   - 9950, 9951: the script killed by its own user, `scancel --batch -s
//     KILL` and `kill -9 $$`: 0:9.
//   - 9953: requeued by root, then cancelled while pending.
//
// Only 5712 is a launch failure; the others keep the exit code's verdict.
func TestParseSacctKilledBeforeScript(t *testing.T) {
	got := parseFile(t, ParseSacct, "testdata/lab/sacct_killed_before_script.txt")
	for id, want := range map[string]Failure{
		"5712": FailureLaunch,
		"9948": FailureExitCode, "9949": FailureExitCode,
		"9950": FailureExitCode, "9951": FailureExitCode,
		"9953": FailureCancelled,
	} {
		j, ok := got[id]
		if !ok {
			t.Errorf("job %s not parsed", id)
			continue
		}
		if j.State.Failure != want {
			t.Errorf("job %s (%s, exit %s): failure %q, want %q", id, j.State.Raw, j.ExitCode.Raw, j.State.Failure, want)
		}
	}
	j := got["5712"]
	if j.Runs != 2 || j.State.Raw != "FAILED" || j.ExitCode.Raw != "1:0" || len(j.Steps) != 1 {
		t.Fatalf("5712: %+v", j)
	}
	if b := j.Steps[0]; !b.NeverReported() || b.Start.IsZero() || !b.Start.Equal(b.End) {
		t.Errorf("5712's batch step of its latest run: %+v", b)
	}
	for _, id := range []string{"9948", "9950"} {
		if b := got[id].Steps[0]; b.NeverReported() {
			t.Errorf("%s: batch step %+v counted as never reported", id, b)
		}
	}
}
