package slurm

import (
	"context"
	"errors"
	"io"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nemorl/nemorl-slurm/remote"
)

// fakeRunner answers each program (sbatch, sacct, squeue, scancel…, found
// behind an "env" prefix too) from a handler and records every call.
type fakeRunner struct {
	mu       sync.Mutex
	calls    []remote.Command
	stdin    []string
	handlers map[string]func(argv []string) (stdout, stderr string, exit int)
}

func (f *fakeRunner) Run(ctx context.Context, cmd remote.Command) (*remote.Result, error) {
	f.mu.Lock()
	f.calls = append(f.calls, cmd)
	if cmd.Stdin != nil {
		b, _ := io.ReadAll(cmd.Stdin)
		f.stdin = append(f.stdin, string(b))
	}
	f.mu.Unlock()
	prog := program(cmd.Argv)
	h := f.handlers[prog]
	if h == nil {
		return nil, errors.New("fake: no handler for " + prog)
	}
	out, errOut, exit := h(cmd.Argv)
	res := &remote.Result{Stdout: []byte(out), Stderr: []byte(errOut), ExitStatus: exit}
	if exit != 0 {
		return res, &remote.CommandError{Host: "fake", Command: cmd.String(), ExitStatus: exit, Stderr: remote.TrimStderr(res.Stderr)}
	}
	return res, nil
}

func (f *fakeRunner) count(prog string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	n := 0
	for _, c := range f.calls {
		if program(c.Argv) == prog {
			n++
		}
	}
	return n
}

func (f *fakeRunner) last(prog string) remote.Command {
	f.mu.Lock()
	defer f.mu.Unlock()
	for i := len(f.calls) - 1; i >= 0; i-- {
		if program(f.calls[i].Argv) == prog {
			return f.calls[i]
		}
	}
	return remote.Command{}
}

// program returns the Slurm program an argv runs, skipping env and its
// VAR=value words.
func program(argv []string) string {
	for i, a := range argv {
		if i == 0 && a == "env" {
			continue
		}
		if argv[0] == "env" && strings.Contains(a, "=") {
			continue
		}
		return a
	}
	return ""
}

func flagValue(argv []string, name string) (string, bool) {
	for _, a := range argv {
		if v, ok := strings.CutPrefix(a, name+"="); ok {
			return v, true
		}
	}
	return "", false
}

func sacctLine(fields ...string) string { return strings.Join(fields, Sep) + "\n" }

func TestSubmitArgsAndResult(t *testing.T) {
	f := &fakeRunner{handlers: map[string]func([]string) (string, string, int){
		"sbatch": func([]string) (string, string, int) {
			return "4242;lab\n", "sbatch: warning: can't honor --ntasks-per-node set to 2\n", 0
		},
	}}
	c := New(f)
	r, err := c.Submit(context.Background(), SubmitRequest{
		Script:           []byte("#!/bin/bash\ntrue\n"),
		Name:             "nemorl-train-ep1",
		Comment:          "nemorl:ep1:train",
		AfterOK:          []string{"11", "12"},
		Hold:             true,
		KillOnInvalidDep: true,
		Args:             []string{"--time=10", "--gres=gpu:h100:1"},
	})
	if err != nil {
		t.Fatal(err)
	}
	if r.JobID != "4242" || r.Cluster != "lab" || len(r.Warnings) != 1 || !strings.Contains(r.Warnings[0], "warning") {
		t.Fatalf("result %+v", r)
	}
	cmd := f.last("sbatch")
	want := []string{"sbatch", "--parsable", "--job-name=nemorl-train-ep1", "--comment=nemorl:ep1:train",
		"--dependency=afterok:11:12", "--hold", "--kill-on-invalid-dep=yes", "--time=10", "--gres=gpu:h100:1"}
	if strings.Join(cmd.Argv, " ") != strings.Join(want, " ") {
		t.Fatalf("argv %q\nwant %q", cmd.Argv, want)
	}
	if cmd.Idempotent {
		t.Fatal("sbatch must not be idempotent")
	}
	if len(f.stdin) != 1 || f.stdin[0] != "#!/bin/bash\ntrue\n" {
		t.Fatalf("stdin %q", f.stdin)
	}
}

func TestSubmitFailure(t *testing.T) {
	f := &fakeRunner{handlers: map[string]func([]string) (string, string, int){
		"sbatch": func([]string) (string, string, int) {
			return "", "sbatch: error: Memory specification can not be satisfied\nsbatch: error: Batch job submission failed: Requested node configuration is not available\n", 1
		},
	}}
	_, err := New(f).Submit(context.Background(), SubmitRequest{ScriptPath: "/scratch/ep/author.sbatch"})
	var ce *remote.CommandError
	if err == nil || !errors.As(err, &ce) {
		t.Fatalf("want CommandError, got %v", err)
	}
	for _, s := range []string{"sbatch", "/scratch/ep/author.sbatch", "Requested node configuration is not available"} {
		if !strings.Contains(err.Error(), s) {
			t.Errorf("error %q lacks %q", err, s)
		}
	}
}

func TestSubmitNoID(t *testing.T) {
	f := &fakeRunner{handlers: map[string]func([]string) (string, string, int){
		"sbatch": func([]string) (string, string, int) { return "Submitted batch job\n", "", 0 },
	}}
	if _, err := New(f).Submit(context.Background(), SubmitRequest{Wrap: "true"}); err == nil || !strings.Contains(err.Error(), "no job id") {
		t.Fatalf("got %v", err)
	}
}

func TestSbatchArgsRejects(t *testing.T) {
	bad := []SubmitRequest{
		{},
		{Wrap: "true", ScriptPath: "/x"},
		{Wrap: "true", Name: "a\nb"},
		{Wrap: "true", Comment: "a\x00b"},
		{Wrap: "true", AfterOK: []string{"12; rm -rf /"}},
		{Wrap: "true", Args: []string{"notanoption"}},
		{Wrap: "true", Args: []string{"--"}},
		{ScriptPath: "--wrap=evil"},
		{Wrap: "true", ScriptArgs: []string{"a"}},
	}
	for i, r := range bad {
		if _, err := SbatchArgs(r); err == nil {
			t.Errorf("case %d: %+v accepted", i, r)
		}
	}
	argv, err := SbatchArgs(SubmitRequest{ScriptPath: "/a b/s.sh", ScriptArgs: []string{"x", "-y"}})
	if err != nil || strings.Join(argv, "|") != "sbatch|--parsable|/a b/s.sh|x|-y" {
		t.Fatalf("%q %v", argv, err)
	}
}

// TestQueryOneSacctThenSqueueForMissing: one sacct for all ids, one squeue
// for those sacct lacks, Unknown for the rest.
func TestQueryOneSacctThenSqueueForMissing(t *testing.T) {
	f := &fakeRunner{handlers: map[string]func([]string) (string, string, int){
		"sacct": func(argv []string) (string, string, int) {
			return sacctLine("10", "10", "a", "COMPLETED", "0:0", "None", "1700000000", "1700000001", "1700000002", "00:00:01", "vm", "nemorl", "60", "c") +
				sacctLine("10.batch", "10.batch", "batch", "COMPLETED", "0:0", "", "1700000001", "1700000001", "1700000002", "00:00:01", "vm", "", "", ""), "", 0
		},
		"squeue": func(argv []string) (string, string, int) {
			return strings.Join([]string{"11", "b", "PENDING", "Dependency", "1700000000", "N/A", "N/A", "0:00", "", "nemorl", "1:00:00", "(null)"}, Sep) + "\n", "", 0
		},
	}}
	ids := []string{"10", "11", "12", "10"}
	got, err := New(f).Query(context.Background(), ids)
	if err != nil {
		t.Fatal(err)
	}
	if f.count("sacct") != 1 || f.count("squeue") != 1 {
		t.Fatalf("calls: %d sacct, %d squeue", f.count("sacct"), f.count("squeue"))
	}
	if v, _ := flagValue(f.last("sacct").Argv, "--jobs"); v != "10,11,12" {
		t.Errorf("sacct --jobs=%s", v)
	}
	if v, _ := flagValue(f.last("squeue").Argv, "--jobs"); v != "11,12" {
		t.Errorf("squeue --jobs=%s", v)
	}
	for _, c := range []remote.Command{f.last("sacct"), f.last("squeue")} {
		if !c.Idempotent || c.Argv[0] != "env" || c.Argv[1] != "SLURM_TIME_FORMAT=%s" {
			t.Errorf("command %q idempotent=%v", c.Argv, c.Idempotent)
		}
	}
	if len(got) != 3 {
		t.Fatalf("got %d jobs", len(got))
	}
	if j := got["10"]; j.Class() != Succeeded || j.Source != SourceSacct || len(j.Steps) != 1 || j.Comment != "c" || j.TimeLimit != time.Hour {
		t.Errorf("10: %+v", j)
	}
	if j := got["11"]; j.Class() != Pending || j.Source != SourceSqueue || j.Reason != "Dependency" || j.Comment != "" || j.TimeLimit != time.Hour {
		t.Errorf("11: %+v", j)
	}
	if j := got["12"]; j.Class() != Unknown || j.Source != SourceNone || j.Terminal() {
		t.Errorf("12: %+v", j)
	}
}

func TestQuerySacctDownFallsBackToSqueue(t *testing.T) {
	f := &fakeRunner{handlers: map[string]func([]string) (string, string, int){
		"sacct": func([]string) (string, string, int) {
			return "", "sacct: error: slurm_persist_conn_open_without_init: failed to open persistent connection to host:localhost:6819: Connection refused\nsacct: error: Problem talking to the database: Connection refused\n", 1
		},
		"squeue": func([]string) (string, string, int) {
			return strings.Join([]string{"7", "a", "RUNNING", "None", "1700000000", "1700000005", "1700003605", "1:00", "vm", "nemorl", "1:00:00", "tag"}, Sep) + "\n", "", 0
		},
	}}
	got, err := New(f).Query(context.Background(), []string{"7", "8"})
	if err != nil {
		t.Fatal(err)
	}
	if v, _ := flagValue(f.last("squeue").Argv, "--jobs"); v != "7,8" {
		t.Errorf("squeue --jobs=%s", v)
	}
	if j := got["7"]; j.Class() != Running || !j.End.IsZero() || j.Start.Unix() != 1700000005 || j.Comment != "tag" || j.TimeLimit != time.Hour {
		t.Errorf("7: %+v", j)
	}
	// Unknown, but sacct did not answer: its absence proves nothing.
	if got["8"].Class() != Unknown || got["8"].Source != SourceUnanswered {
		t.Errorf("8: %+v", got["8"])
	}
}

func TestQueryBothDown(t *testing.T) {
	f := &fakeRunner{handlers: map[string]func([]string) (string, string, int){
		"sacct": func([]string) (string, string, int) { return "", "sacct: error: Problem talking to the database", 1 },
		"squeue": func([]string) (string, string, int) {
			return "", "slurm_load_jobs error: Unable to contact slurm controller (connect failure)", 1
		},
	}}
	got, err := New(f).Query(context.Background(), []string{"7"})
	if err == nil || !strings.Contains(err.Error(), "database") || !strings.Contains(err.Error(), "controller") {
		t.Fatalf("err %v", err)
	}
	if got["7"].Class() != Unknown {
		t.Fatalf("7: %+v", got["7"])
	}
}

// squeue given a single id it does not know exits 1; that is "unknown".
func TestQuerySqueueInvalidID(t *testing.T) {
	f := &fakeRunner{handlers: map[string]func([]string) (string, string, int){
		"sacct": func([]string) (string, string, int) { return "", "", 0 },
		"squeue": func([]string) (string, string, int) {
			return "", "slurm_load_jobs error: Invalid job id specified\n", 1
		},
	}}
	got, err := New(f).Query(context.Background(), []string{"99999999"})
	if err != nil || got["99999999"].Class() != Unknown || got["99999999"].Source != SourceNone {
		t.Fatalf("%+v %v", got, err)
	}
}

func TestQueryValidatesAndEmpty(t *testing.T) {
	f := &fakeRunner{}
	if _, err := New(f).Query(context.Background(), []string{"1,2"}); err == nil {
		t.Error("bad id accepted")
	}
	got, err := New(f).Query(context.Background(), nil)
	if err != nil || len(got) != 0 || len(f.calls) != 0 {
		t.Errorf("empty query: %v %v %d calls", got, err, len(f.calls))
	}
}

func TestQueryChunks(t *testing.T) {
	f := &fakeRunner{handlers: map[string]func([]string) (string, string, int){
		"sacct":  func([]string) (string, string, int) { return "", "", 0 },
		"squeue": func([]string) (string, string, int) { return "", "", 0 },
	}}
	ids := make([]string, MaxIDsPerCall+1)
	for i := range ids {
		ids[i] = itoa(i + 1)
	}
	got, err := New(f).Query(context.Background(), ids)
	if err != nil || len(got) != len(ids) {
		t.Fatalf("%d %v", len(got), err)
	}
	if f.count("sacct") != 2 || f.count("squeue") != 2 {
		t.Fatalf("%d sacct %d squeue", f.count("sacct"), f.count("squeue"))
	}
}

func itoa(i int) string {
	const d = "0123456789"
	if i < 10 {
		return d[i : i+1]
	}
	return itoa(i/10) + d[i%10:i%10+1]
}

func TestCancel(t *testing.T) {
	var stderr string
	exit := 0
	f := &fakeRunner{handlers: map[string]func([]string) (string, string, int){
		"scancel": func([]string) (string, string, int) { return "", stderr, exit },
	}}
	c := New(f)
	if err := c.Cancel(context.Background(), []string{"5", "6", "5"}); err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(f.last("scancel").Argv, " "); got != "scancel 5 6" || !f.last("scancel").Idempotent {
		t.Fatalf("argv %q", got)
	}
	stderr, exit = "scancel: error: Kill job error on job id 5: Job/step already completing or completed\nscancel: error: Kill job error on job id 6: Invalid job id specified\n", 1
	if err := c.Cancel(context.Background(), []string{"5", "6"}); err != nil {
		t.Fatalf("ended jobs: %v", err)
	}
	stderr = "scancel: error: Kill job error on job id 5: Access/permission denied\n"
	if err := c.Cancel(context.Background(), []string{"5"}); err == nil || !strings.Contains(err.Error(), "permission denied") {
		t.Fatalf("got %v", err)
	}
	if err := c.Cancel(context.Background(), nil); err != nil || f.count("scancel") != 3 {
		t.Fatalf("empty cancel ran scancel: %v", err)
	}
}

func TestRelease(t *testing.T) {
	f := &fakeRunner{handlers: map[string]func([]string) (string, string, int){
		"scontrol": func([]string) (string, string, int) { return "", "", 0 },
	}}
	if err := New(f).Release(context.Background(), []string{"5", "6"}); err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(f.last("scontrol").Argv, " "); got != "scontrol release 5,6" {
		t.Fatal(got)
	}
}

func TestFindByComment(t *testing.T) {
	f := &fakeRunner{handlers: map[string]func([]string) (string, string, int){
		"sacct": func(argv []string) (string, string, int) {
			return sacctLine("20", "20", "nemorl-author-ep", "COMPLETED", "0:0", "None", "1", "2", "3", "00:00:01", "vm", "nemorl", "60", "nemorl:ep:author") +
				sacctLine("21", "21", "nemorl-train-ep", "RUNNING", "0:0", "None", "1", "2", "Unknown", "00:00:01", "vm", "nemorl", "60", "nemorl:ep:train") +
				sacctLine("22", "22", "other", "COMPLETED", "0:0", "None", "1", "2", "3", "00:00:01", "vm", "nemorl", "60", "nemorl:ep:author2"), "", 0
		},
		"squeue": func(argv []string) (string, string, int) {
			row := func(id, st, c string) string {
				return strings.Join([]string{id, "n", st, "None", "1", "2", "3", "0:01", "vm", "nemorl", "30:00", c}, Sep) + "\n"
			}
			return row("21", "COMPLETED", "nemorl:ep:train") + row("23", "PENDING", "nemorl:ep:train") + row("24", "PENDING", "x"), "", 0
		},
	}}
	c := New(f)
	got, err := c.FindByComment(context.Background(), "nemorl:ep:train")
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got[0].ID != "21" || got[1].ID != "23" {
		t.Fatalf("%+v", got)
	}
	if got[0].Source != SourceSqueue || got[0].Class() != Succeeded || got[0].TimeLimit != 30*time.Minute {
		t.Errorf("21 should take squeue's fresher end (and time limit): %+v", got[0])
	}
	sa := f.last("sacct").Argv
	if v, _ := flagValue(sa, "--starttime"); v != "now-10080minutes" {
		t.Errorf("starttime %q", v)
	}
	// The jobs' lines only: a look-up reads no steps (one slurmdbd query
	// per job with them).
	if !contains(sa, "--allocations") {
		t.Errorf("sacct argv %q: no --allocations", sa)
	}
	// A look-up since a moment reads that window only, rounded up.
	if _, err := c.FindWithin(context.Background(), 90*time.Minute+time.Second, func(JobInfo) bool { return true }); err != nil {
		t.Fatal(err)
	}
	if v, _ := flagValue(f.last("sacct").Argv, "--starttime"); v != "now-91minutes" {
		t.Errorf("FindWithin 90m1s: starttime %q", v)
	}
	for _, a := range sa {
		if a == "--allusers" || strings.HasPrefix(a, "--jobs") {
			t.Errorf("sacct argv %q", sa)
		}
	}
	if _, ok := flagValue(f.last("squeue").Argv, "--jobs"); ok {
		t.Error("squeue should list the user's jobs")
	}
	if !contains(f.last("squeue").Argv, "--me") {
		t.Errorf("squeue argv %q", f.last("squeue").Argv)
	}
	got, err = c.FindByComment(context.Background(), "nemorl:ep:author")
	if err != nil || len(got) != 1 || got[0].ID != "20" {
		t.Fatalf("%+v %v", got, err)
	}
	if _, err := c.FindByComment(context.Background(), ""); err == nil {
		t.Error("empty tag accepted")
	}
	f.handlers["sacct"] = func([]string) (string, string, int) { return "", "sacct: error: Problem talking to the database", 1 }
	if _, err := c.FindByComment(context.Background(), "nemorl:ep:train"); err == nil {
		t.Error("find must fail when sacct fails")
	}
}

func contains(ss []string, s string) bool {
	for _, x := range ss {
		if x == s {
			return true
		}
	}
	return false
}
