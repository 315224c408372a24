package slurm

// Integration tests against the local Slurm lab (lab/up), as the user
// running the tests, through remote.Local. They skip when the lab is
// absent; with NEMORL_REQUIRE_LAB=1 a missing lab fails them.

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nemorl/nemorl-slurm/internal/labtest"
	"github.com/nemorl/nemorl-slurm/remote"
)

// countingRunner counts the processes it runs, per program.
type countingRunner struct {
	inner remote.Runner
	mu    sync.Mutex
	n     map[string]int
	last  map[string][]string // the last argv per program
}

func (c *countingRunner) Run(ctx context.Context, cmd remote.Command) (*remote.Result, error) {
	c.mu.Lock()
	if c.n == nil {
		c.n = map[string]int{}
	}
	c.n[program(cmd.Argv)]++
	if c.last == nil {
		c.last = map[string][]string{}
	}
	c.last[program(cmd.Argv)] = cmd.Argv
	c.mu.Unlock()
	return c.inner.Run(ctx, cmd)
}

func (c *countingRunner) count(prog string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n[prog]
}

// lastArgv is the argv of the last process of prog run.
func (c *countingRunner) lastArgv(prog string) []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.last[prog]
}

func (c *countingRunner) reset() {
	c.mu.Lock()
	c.n = nil
	c.mu.Unlock()
}

// lab is one Slurm of the lab (labtest.Slurm: cluster 1's 22.05 or
// cluster 3's 24.11) as these tests reach it: its clients run here, as
// root, through remote.Local.
type lab struct {
	partition string
	slurm     labtest.Slurm
}

var (
	labProbeMu sync.Mutex
	labProbed  = map[string]error{} // by Slurm: its probe's error
)

// needLab returns cluster 1 (internal/labtest: skipped when absent, a
// failure under NEMORL_REQUIRE_LAB=1) once its Slurm answers. Tests of
// what every Slurm does use eachSlurm instead.
func needLab(t *testing.T) *lab {
	t.Helper()
	env := labtest.Env(t)
	return probed(t, env.Slurm1(t))
}

// eachSlurm runs f against each Slurm of the lab (labtest.EachSlurm:
// subtests "22.05" and "24.11", in parallel), once it answers.
func eachSlurm(t *testing.T, f func(t *testing.T, l *lab)) {
	t.Helper()
	labtest.EachSlurm(t, func(t *testing.T, s labtest.Slurm) {
		f(t, probed(t, s))
	})
}

// probed returns s once its sinfo and sacct answer (asked once per
// process and Slurm); a Slurm that does not answer skips t, or fails it
// under NEMORL_REQUIRE_LAB=1.
func probed(t *testing.T, s labtest.Slurm) *lab {
	t.Helper()
	labProbeMu.Lock()
	err, done := labProbed[s.Name]
	if !done {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		for _, argv := range [][]string{{"sinfo", "-h"}, {"sacct", "-n", "-X", "-S", "now-1minutes", "-o", "jobid"}} {
			if out, cerr := s.CommandContext(ctx, argv[0], argv[1:]...).CombinedOutput(); cerr != nil {
				err = fmt.Errorf("lab Slurm %s not answering (lab/status, lab/cluster3 status): %s: %v: %s", s.Name, argv[0], cerr, out)
				break
			}
		}
		cancel()
		labProbed[s.Name] = err
	}
	labProbeMu.Unlock()
	if err != nil {
		if labtest.Required() {
			t.Fatal(err)
		}
		t.Skip(err)
	}
	return &lab{partition: s.Lab.Partition, slurm: s}
}

// client is a Client of l's Slurm run here (its clients, its slurm.conf),
// counting the processes it runs.
func (l *lab) client(t *testing.T) (*Client, *countingRunner) {
	cr := &countingRunner{inner: remote.WithEnv(remote.NewLocal(), l.slurm.Vars()...)}
	return New(cr), cr
}

// command is exec.Command of l's Slurm client name, run here.
func (l *lab) command(ctx context.Context, name string, args ...string) *exec.Cmd {
	return l.slurm.CommandContext(ctx, name, args...)
}

// jobArgs are the options every lab job gets: the lab partition, a short
// limit, output to a directory of the test's (labtest.Slurm.JobDir).
func (l *lab) jobArgs(t *testing.T) []string {
	dir := l.slurm.JobDir(t)
	args := []string{"--time=5", "--output=" + filepath.Join(dir, "%j.out")}
	if l.partition != "" {
		args = append(args, "--partition="+l.partition)
	}
	return args
}

func uniqueTag(what string) string {
	return fmt.Sprintf("nemorl:test-%s-%d-%06d", what, time.Now().Unix(), rand.IntN(1e6))
}

func submit(t *testing.T, c *Client, req SubmitRequest) string {
	t.Helper()
	r, err := c.Submit(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Cancel(context.Background(), []string{r.JobID}) })
	return r.JobID
}

// waitFor polls Query until cond holds for every job, or fails after d.
func waitFor(t *testing.T, c *Client, ids []string, d time.Duration, cond func(JobInfo) bool) map[string]JobInfo {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		got, err := c.Query(context.Background(), ids)
		if err != nil {
			t.Logf("query: %v", err)
		}
		all := err == nil
		for _, id := range ids {
			if !cond(got[id]) {
				all = false
			}
		}
		if all {
			return got
		}
		if time.Now().After(deadline) {
			for _, id := range ids {
				t.Logf("%s: %+v", id, got[id])
			}
			t.Fatalf("jobs %v not there after %v", ids, d)
		}
		time.Sleep(time.Second)
	}
}

// terminalInSacct: ended, as the accounting database has it.
func terminalInSacct(j JobInfo) bool { return j.Terminal() && j.Source == SourceSacct }

const labWait = 6 * time.Minute // the lab is shared with other tests

func TestLabChainFailureCancelsDependents(t *testing.T) {
	t.Parallel()
	eachSlurm(t, testLabChainFailureCancelsDependents)
}

func testLabChainFailureCancelsDependents(t *testing.T, l *lab) {
	c, _ := l.client(t)
	tag := uniqueTag("failchain")
	j1 := submit(t, c, SubmitRequest{Wrap: "exit 3", Name: "nemorl-author-t", Comment: tag + ":author", KillOnInvalidDep: true, Args: l.jobArgs(t)})
	j2 := submit(t, c, SubmitRequest{Wrap: "echo never", Name: "nemorl-train-t", Comment: tag + ":train", AfterOK: []string{j1}, KillOnInvalidDep: true, Args: l.jobArgs(t)})
	j3 := submit(t, c, SubmitRequest{Wrap: "echo never", Name: "nemorl-eval-t", Comment: tag + ":eval", AfterOK: []string{j2}, KillOnInvalidDep: true, Args: l.jobArgs(t)})
	got := waitFor(t, c, []string{j1, j2, j3}, labWait, terminalInSacct)
	if j := got[j1]; j.Class() != Failed || j.State.Failure != FailureExitCode || j.ExitCode.Code != 3 || j.ExitCode.Signal != 0 || j.State.Name != "FAILED" {
		t.Errorf("job 1: %+v", j)
	}
	for _, id := range []string{j2, j3} {
		j := got[id]
		if j.Class() != Failed || j.State.Name != "CANCELLED" || j.State.Failure != FailureDependency {
			t.Errorf("dependent %s: %+v", id, j)
		}
		if !j.Start.IsZero() || len(j.Steps) != 0 || j.NodeList != "" {
			t.Errorf("dependent %s ran: %+v", id, j)
		}
	}
}

func TestLabChainSucceeds(t *testing.T) {
	t.Parallel()
	eachSlurm(t, testLabChainSucceeds)
}

func testLabChainSucceeds(t *testing.T, l *lab) {
	c, _ := l.client(t)
	dir := l.slurm.JobDir(t)
	script := filepath.Join(dir, "stage.sbatch")
	if err := os.WriteFile(script, []byte("#!/bin/bash\necho stage \"$1\"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	tag := uniqueTag("okchain")
	// one from stdin, one from a file with an argument, one --wrap
	j1 := submit(t, c, SubmitRequest{Script: []byte("#!/bin/bash\necho author\n"), Comment: tag + ":author", KillOnInvalidDep: true, Args: l.jobArgs(t)})
	j2 := submit(t, c, SubmitRequest{ScriptPath: script, ScriptArgs: []string{"train"}, Comment: tag + ":train", AfterOK: []string{j1}, KillOnInvalidDep: true, Args: l.jobArgs(t)})
	j3 := submit(t, c, SubmitRequest{Wrap: "echo eval", Comment: tag + ":eval", AfterOK: []string{j2}, KillOnInvalidDep: true, Args: l.jobArgs(t)})
	got := waitFor(t, c, []string{j1, j2, j3}, labWait, terminalInSacct)
	for _, id := range []string{j1, j2, j3} {
		j := got[id]
		if j.Class() != Succeeded || j.State.Raw != "COMPLETED" || !j.ExitCode.Zero() || j.Start.IsZero() || j.End.Before(j.Start) || j.NodeList == "" {
			t.Errorf("%s: %+v", id, j)
		}
	}
	if got[j2].Start.Before(got[j1].End) || got[j3].Start.Before(got[j2].End) {
		t.Errorf("chain order: %v %v / %v %v", got[j1].End, got[j2].Start, got[j2].End, got[j3].Start)
	}
}

// TestLabQuery300 asks about 300 ids — a few real jobs in different
// states, the rest ids no job has — and checks that it takes exactly one
// sacct and one squeue process.
func TestLabQuery300(t *testing.T) {
	t.Parallel()
	eachSlurm(t, testLabQuery300)
}

func testLabQuery300(t *testing.T, l *lab) {
	c, cr := l.client(t)
	done := submit(t, c, SubmitRequest{Wrap: "true", Args: l.jobArgs(t)})
	failed := submit(t, c, SubmitRequest{Wrap: "exit 3", Args: l.jobArgs(t)})
	waitFor(t, c, []string{done, failed}, labWait, terminalInSacct)
	held := submit(t, c, SubmitRequest{Wrap: "true", Hold: true, Args: l.jobArgs(t)})

	real := []string{done, failed, held}
	ids := append([]string(nil), real...)
	for i := 0; len(ids) < 300; i++ {
		ids = append(ids, fmt.Sprint(90000000+i))
	}
	cr.reset()
	got, err := c.Query(context.Background(), ids)
	if err != nil {
		t.Fatal(err)
	}
	if n := cr.count("sacct"); n != 1 {
		t.Errorf("%d sacct processes, want 1", n)
	}
	if n := cr.count("squeue"); n > 1 {
		t.Errorf("%d squeue processes, want at most 1", n)
	}
	if len(got) != 300 {
		t.Fatalf("%d results", len(got))
	}
	if j := got[done]; j.Class() != Succeeded {
		t.Errorf("done: %+v", j)
	}
	if j := got[failed]; j.Class() != Failed || j.ExitCode.Code != 3 {
		t.Errorf("failed: %+v", j)
	}
	// A held job's reason: squeue says JobHeldUser on every Slurm, and
	// so does 22.05's sacct; 24.11's sacct says None (measured on the
	// lab, every time, and still after an admin hold: TestLabTimeLimitAndHold
	// logs it). Holds are read from squeue.
	wantReason := "JobHeldUser"
	if got[held].Source == SourceSacct && l.slurm.AtLeast(24, 11) {
		wantReason = "None"
	}
	if j := got[held]; j.Class() != Pending || j.Reason != wantReason {
		t.Errorf("held, on Slurm %s: %+v; want pending, reason %s", l.slurm.Version, j, wantReason)
	}
	for _, id := range ids[3:] {
		if j := got[id]; j.Class() != Unknown || j.Source != SourceNone || j.Terminal() {
			t.Fatalf("%s: %+v", id, j)
		}
	}

	// The squeue fallback alone: a job sacct cannot show yet is reported
	// by squeue, again in one process each.
	fresh := submit(t, c, SubmitRequest{Wrap: "true", Hold: true, Args: l.jobArgs(t)})
	cr.reset()
	got, err = c.Query(context.Background(), append([]string{fresh}, ids[3:]...))
	if err != nil {
		t.Fatal(err)
	}
	if cr.count("sacct") != 1 || cr.count("squeue") != 1 {
		t.Errorf("%d sacct, %d squeue", cr.count("sacct"), cr.count("squeue"))
	}
	if j := got[fresh]; j.Class() != Pending {
		t.Errorf("fresh: %+v", j)
	}

	// A single id squeue does not know makes it exit 1: still Unknown.
	got, err = c.Query(context.Background(), []string{"99999999"})
	if err != nil || got["99999999"].Class() != Unknown {
		t.Errorf("unknown single: %+v %v", got, err)
	}
}

func TestLabCancel(t *testing.T) {
	t.Parallel()
	eachSlurm(t, testLabCancel)
}

func testLabCancel(t *testing.T, l *lab) {
	c, cr := l.client(t)
	a := submit(t, c, SubmitRequest{Wrap: "sleep 300", Args: l.jobArgs(t)})
	b := submit(t, c, SubmitRequest{Wrap: "sleep 300", Args: l.jobArgs(t)})
	cr.reset()
	if err := c.Cancel(context.Background(), []string{a, b}); err != nil {
		t.Fatal(err)
	}
	if cr.count("scancel") != 1 {
		t.Errorf("%d scancel processes", cr.count("scancel"))
	}
	got := waitFor(t, c, []string{a, b}, labWait, terminalInSacct)
	for _, id := range []string{a, b} {
		j := got[id]
		// sacct says "CANCELLED by UID" for a pending job, and mostly
		// for a running one too, but not always (State.ByUID).
		if j.Class() != Failed || j.State.Failure != FailureCancelled || (j.State.ByUID != os.Getuid() && j.State.ByUID != -1) {
			t.Errorf("%s: %+v", id, j)
		}
	}
	// Cancelling ended jobs and unknown ids is fine.
	if err := c.Cancel(context.Background(), []string{a, b, "99999999"}); err != nil {
		t.Errorf("cancel again: %v", err)
	}
}

func TestLabFindByComment(t *testing.T) {
	t.Parallel()
	eachSlurm(t, testLabFindByComment)
}

func testLabFindByComment(t *testing.T, l *lab) {
	c, _ := l.client(t)
	tag := uniqueTag("find")
	held := submit(t, c, SubmitRequest{Wrap: "true", Comment: tag, Hold: true, Args: l.jobArgs(t)})
	done := submit(t, c, SubmitRequest{Wrap: "true", Comment: tag, Args: l.jobArgs(t)})
	submit(t, c, SubmitRequest{Wrap: "true", Comment: tag + "-other", Hold: true, Args: l.jobArgs(t)})
	found, err := c.FindByComment(context.Background(), tag)
	if err != nil {
		t.Fatal(err)
	}
	if len(found) != 2 || found[0].ID != held || found[1].ID != done {
		t.Fatalf("found %+v, want %s and %s", found, held, done)
	}
	// Once ended, sacct holds the comment (AccountingStoreFlags=job_comment).
	got := waitFor(t, c, []string{done}, labWait, func(j JobInfo) bool { return terminalInSacct(j) && j.Comment == tag })
	if got[done].Class() != Succeeded {
		t.Errorf("done: %+v", got[done])
	}
	found, err = c.FindByComment(context.Background(), tag)
	if err != nil || len(found) != 2 || found[1].ID != done || found[1].Class() != Succeeded {
		t.Fatalf("after end: %+v %v", found, err)
	}
}

func TestLabSubmitFailure(t *testing.T) {
	eachSlurm(t, testLabSubmitFailure)
}

func testLabSubmitFailure(t *testing.T, l *lab) {
	c, _ := l.client(t)
	_, err := c.Submit(context.Background(), SubmitRequest{Wrap: "true", Args: append(l.jobArgs(t), "--mem=999999999")})
	if err == nil {
		t.Fatal("sbatch accepted an impossible --mem")
	}
	for _, s := range []string{"sbatch", "--mem=999999999", "Requested node configuration is not available"} {
		if !strings.Contains(err.Error(), s) {
			t.Errorf("error %q lacks %q", err, s)
		}
	}
}

// scontrol runs l's scontrol here with args, failing t if it fails.
func (l *lab) scontrol(t *testing.T, args ...string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if out, err := l.command(ctx, "scontrol", args...).CombinedOutput(); err != nil {
		t.Fatalf("scontrol %s: %v: %s", strings.Join(args, " "), err, out)
	}
}

// TestLabTimeLimitAndHold: a job changed behind the tool's back. Its time
// limit (sacct TimelimitRaw, squeue %l) follows scontrol update at once in
// both sources; its hold (Reason) is JobHeldUser from sbatch --hold in
// both. As root, a later scontrol hold (an admin hold) shows in squeue at
// once; sacct does not follow it (JobInfo.HeldBy), so Query's reason is
// only logged.
//
// The lab to itself: with other tests' episodes flooding the controller and
// slurmdbd, sacct kept the held job's reason None for over 6 minutes
// (twice in a full make test; seconds when the lab is idle).
func TestLabTimeLimitAndHold(t *testing.T) {
	eachSlurm(t, testLabTimeLimitAndHold)
}

func testLabTimeLimitAndHold(t *testing.T, l *lab) {
	c, _ := l.client(t)
	ctx := context.Background()
	id := submit(t, c, SubmitRequest{Wrap: "true", Name: "nemorl-timelimit-t", Comment: uniqueTag("timelimit"), Hold: true, Args: l.jobArgs(t)}) // --time=5
	live := func() JobInfo {
		t.Helper()
		set, err := c.squeue(ctx, "--jobs="+id)
		jobs, _ := set.list(0)
		if err != nil || len(jobs) != 1 {
			t.Fatalf("squeue: %+v %v", jobs, err)
		}
		return jobs[0]
	}
	if j := live(); j.TimeLimit != 5*time.Minute || j.HeldBy() != "user" || j.Class() != Pending {
		t.Errorf("squeue after sbatch --time=5 --hold: time limit %v, held by %q: %+v", j.TimeLimit, j.HeldBy(), j)
	}
	// sacct's reason for a held job is not to be relied on: JobHeldUser
	// within seconds on an idle lab, None for more than 6 minutes on a
	// busy one (twice in make test, once with the lab to this test), and
	// JobHeldUser for a job Slurm held after a failed launch. Holds are
	// read from squeue (rules' job-held, launch-held); sacct's record
	// gives the time limit.
	got := waitFor(t, c, []string{id}, labWait, func(j JobInfo) bool { return j.Source == SourceSacct })
	if j := got[id]; j.TimeLimit != 5*time.Minute || j.Class() != Pending {
		t.Errorf("Query after sbatch --time=5 --hold: time limit %v: %+v", j.TimeLimit, j)
	}
	t.Logf("sacct's reason for the held job: %q", got[id].Reason)

	l.scontrol(t, "update", "jobid="+id, "TimeLimit=1")
	got = waitFor(t, c, []string{id}, labWait, func(j JobInfo) bool { return j.TimeLimit != 5*time.Minute })
	if j := got[id]; j.TimeLimit != time.Minute || j.Source != SourceSacct {
		t.Errorf("Query after scontrol update TimeLimit=1: time limit %v: %+v", j.TimeLimit, j)
	}
	if j := live(); j.HeldBy() != "user" {
		t.Errorf("squeue after scontrol update TimeLimit=1: held by %q (reason %q), want user", j.HeldBy(), j.Reason)
	}
	if j := live(); j.TimeLimit != time.Minute {
		t.Errorf("squeue after scontrol update TimeLimit=1: %v", j.TimeLimit)
	}

	if os.Getuid() == 0 {
		// root's hold is an admin hold; only root may lift a limit.
		l.scontrol(t, "hold", id)
		if j := live(); j.HeldBy() != "admin" {
			t.Errorf("squeue after scontrol hold as root: held by %q (reason %q)", j.HeldBy(), j.Reason)
		}
		got, _ = c.Query(ctx, []string{id})
		t.Logf("Query after scontrol hold as root: reason %q (%s)", got[id].Reason, got[id].Source)
		l.scontrol(t, "update", "jobid="+id, "TimeLimit=UNLIMITED")
		got = waitFor(t, c, []string{id}, labWait, func(j JobInfo) bool { return j.TimeLimit != time.Minute })
		if j := got[id]; j.TimeLimit != Unlimited {
			t.Errorf("Query after scontrol update TimeLimit=UNLIMITED: %v: %+v", j.TimeLimit, j)
		}
		t.Logf("Query after scontrol update TimeLimit=UNLIMITED: reason %q (%s)", got[id].Reason, got[id].Source)
		if j := live(); j.TimeLimit != Unlimited || j.HeldBy() != "admin" {
			t.Errorf("squeue after TimeLimit=UNLIMITED: %v, held by %q", j.TimeLimit, j.HeldBy())
		}
	}

	if err := c.Cancel(ctx, []string{id}); err != nil {
		t.Fatal(err)
	}
	got = waitFor(t, c, []string{id}, labWait, terminalInSacct)
	if j := got[id]; j.State.Failure != FailureCancelled || j.HeldBy() != "" {
		t.Errorf("after scancel: %+v", j)
	}
}

// TestLabExitCodes: what sacct makes of a batch script's exit status and
// of the signal that killed it, on each Slurm. Before 25.11 sacct prints a
// status of 128 or more less 128 (exit 137 reads 9:0, exit 200 72:0, as
// measured on 22.05 and 24.11: a reader cannot tell them from 9 and 72);
// from 25.11 the status itself. A script killed by a signal reads 0:SIG.
func TestLabExitCodes(t *testing.T) {
	t.Parallel()
	eachSlurm(t, testLabExitCodes)
}

func testLabExitCodes(t *testing.T, l *lab) {
	c, _ := l.client(t)
	cases := []struct {
		body         string
		code, signal int
	}{{"exit 3", 3, 0}, {"exit 137", 137, 0}, {"exit 200", 200, 0}, {"kill -KILL $$", 0, 9}, {"kill -TERM $$", 0, 15}}
	folded := !l.slurm.AtLeast(25, 11)
	var ids []string
	for _, cs := range cases {
		ids = append(ids, submit(t, c, SubmitRequest{Wrap: cs.body, Name: "nemorl-exit-t", Args: l.jobArgs(t)}))
	}
	got := waitFor(t, c, ids, labWait, terminalInSacct)
	for i, cs := range cases {
		want := cs.code
		if folded && want >= 128 {
			want -= 128
		}
		j := got[ids[i]]
		if !j.ExitCode.Known || j.ExitCode.Code != want || j.ExitCode.Signal != cs.signal || j.Class() != Failed || j.State.Name != "FAILED" {
			t.Errorf("Slurm %s, %q (job %s): %s exit code %q (%d:%d), want FAILED %d:%d", l.slurm.Version, cs.body, ids[i], j.State.Name, j.ExitCode.Raw, j.ExitCode.Code, j.ExitCode.Signal, want, cs.signal)
		}
	}
}
