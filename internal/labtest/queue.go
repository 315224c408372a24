package labtest

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// clearQueue is run by LockLab once it holds the lab exclusively: it
// cancels the jobs that tests which have ended left in the lab user's
// queue (a run killed on purpose, a job whose dependency can never be
// met, a stand-in still sleeping). On a 2-core lab node those jobs hold
// the CPUs, and the LockLab test's own jobs then wait behind them
// ("PENDING (Priority)") until its timeout: CI saw exactly that.
//
// A job is left behind when the directory of its output file is gone:
// every lab test writes its jobs' output under a directory of its own
// (labtest.TestWorkdir, a t.TempDir) that is removed when it ends. The
// lock alone would not prove it: flock converts a shared lock to an
// exclusive one by dropping it first, and in that moment another process
// may take the lab while the converting process's other tests still run.
// The jobs cancelled are named in t's log (to find the test that leaks
// them), and clearQueue waits, bounded, until they are gone. A variable
// for this package's own lock tests, which must not touch a real lab.
var clearQueue = func(t testing.TB) {
	t.Helper()
	lab, err := Load(Path())
	if err != nil || lab.User == "" {
		return // no lab: nothing to clear (Env decides skip or fail)
	}
	if _, err := exec.LookPath("squeue"); err != nil {
		return
	}
	ClearLeftJobs(t, lab.User)
	// Cluster 2 as well, when its controller is up (a stopped one would
	// make squeue wait for Slurm's MessageTimeout).
	if lab.HasCluster2() && lab.ctld2Accepts() {
		clearLeftJobs(t, "lab queue (cluster 2)", lab.Cluster2Env(), lab.User)
	}
	if lab.ctld3Accepts() {
		clearLeftJobs(t, "lab queue (cluster 3)", lab.Cluster3Env(), lab.User)
	}
}

// ClearLeftJobs cancels user's jobs whose output directory no longer
// exists (see clearQueue) and waits up to a minute for them to leave the
// queue; it returns their ids. Cluster 1's queue.
func ClearLeftJobs(t testing.TB, user string) []string {
	t.Helper()
	return clearLeftJobs(t, "lab queue", nil, user)
}

// clearLeftJobs is ClearLeftJobs with the Slurm clients run in env (nil:
// this process's; Lab.Cluster2Env: cluster 2), logging as what.
func clearLeftJobs(t testing.TB, what string, env []string, user string) []string {
	t.Helper()
	var ids []string
	for _, j := range queueIn(env, user) {
		if !j.orphan() {
			continue
		}
		t.Logf("%s: job %s (%s, %s, output %s) was left by a test that has ended: cancelled before %s goes on", what, j.id, j.name, j.state, j.stdout, t.Name())
		ids = append(ids, j.id)
	}
	if len(ids) == 0 {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	cmd := exec.CommandContext(ctx, client(env, "scancel"), ids...)
	cmd.Env = env
	out, err := cmd.CombinedOutput()
	cancel()
	if err != nil {
		t.Logf("%s: scancel %s: %v: %s", what, strings.Join(ids, " "), err, strings.TrimSpace(string(out)))
	}
	deadline := time.Now().Add(time.Minute)
	for {
		left := 0
		live := map[string]bool{}
		for _, j := range queueIn(env, user) {
			live[j.id] = j.state != "CANCELLED" && j.state != "COMPLETED" && j.state != "FAILED"
		}
		for _, id := range ids {
			if live[id] {
				left++
			}
		}
		if left == 0 {
			return ids
		}
		if time.Now().After(deadline) {
			t.Logf("%s: %d of the jobs cancelled still in the queue after a minute", what, left)
			return ids
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// queuedJob is one line of queueOf.
type queuedJob struct{ id, stdout, name, state string }

// orphan reports a job whose output file's directory is gone.
func (j queuedJob) orphan() bool {
	if !filepath.IsAbs(j.stdout) {
		return false
	}
	_, err := os.Stat(filepath.Dir(j.stdout))
	return errors.Is(err, fs.ErrNotExist)
}

// queueOf lists user's jobs in the lab queue (cluster 1's); nil when
// squeue fails.
func queueOf(user string) []queuedJob { return queueIn(nil, user) }

// queueIn is queueOf with squeue run in env (nil: this process's).
func queueIn(env []string, user string) []queuedJob {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, client(env, "squeue"), "-h", "-u", user, "-O", "JobID:|,StdOut:|,Name:|,State:|")
	cmd.Env = env
	out, err := cmd.Output()
	if err != nil {
		return nil
	}
	var jobs []queuedJob
	for _, line := range strings.Split(string(out), "\n") {
		f := strings.Split(line, "|")
		if len(f) < 4 || strings.TrimSpace(f[0]) == "" {
			continue
		}
		jobs = append(jobs, queuedJob{id: strings.TrimSpace(f[0]), stdout: strings.TrimSpace(f[1]), name: strings.TrimSpace(f[2]), state: strings.TrimSpace(f[3])})
	}
	return jobs
}

// client is the Slurm client name as env's PATH finds it (name itself, for
// this process's PATH, when env sets none: cluster 1, cluster 2).
func client(env []string, name string) string {
	if p := lookPathIn(env, name); p != "" {
		return p
	}
	return name
}
