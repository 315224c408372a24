package labtest

import (
	"context"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// clearQueue is run by LockLab once it holds the lab exclusively and no
// other test of its process holds it: no lab test is running anywhere, so
// every job still in the lab user's queue was left by a test that has
// ended (a run killed on purpose, a job whose dependency can never be
// met, a stand-in still sleeping). On a 2-core lab node those jobs hold
// the CPUs, and the LockLab test's own jobs then wait behind them
// ("PENDING (Priority)") until its timeout: CI saw exactly that. They are
// named in t's log (to find the test that leaks them) and cancelled, and
// clearQueue waits, bounded, until the queue is empty. A variable for this
// package's own tests, which must not touch a real lab.
var clearQueue = func(t testing.TB) {
	t.Helper()
	lab, err := Load(Path())
	if err != nil || lab.User == "" {
		return // no lab: nothing to clear (Env decides skip or fail)
	}
	if _, err := exec.LookPath("squeue"); err != nil {
		return
	}
	left := queueOf(lab.User)
	if len(left) == 0 {
		return
	}
	for _, j := range left {
		t.Logf("lab queue: job left by an ended test, cancelled before %s takes the lab: %s", t.Name(), j)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	out, err := exec.CommandContext(ctx, "scancel", "-u", lab.User).CombinedOutput()
	cancel()
	if err != nil {
		t.Logf("lab queue: scancel -u %s: %v: %s", lab.User, err, strings.TrimSpace(string(out)))
	}
	deadline := time.Now().Add(60 * time.Second)
	for time.Now().Before(deadline) {
		if len(queueOf(lab.User)) == 0 {
			return
		}
		time.Sleep(500 * time.Millisecond)
	}
	t.Logf("lab queue: still not empty 60 s after scancel: %s", strings.Join(queueOf(lab.User), "; "))
}

// queueOf lists user's jobs in the lab queue, one line each (id, name,
// state, reason, workdir); nil when squeue fails.
func queueOf(user string) []string {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, "squeue", "-h", "-u", user, "-o", "%i %j %T %r %Z").Output()
	if err != nil {
		return nil
	}
	var jobs []string
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		if line = strings.TrimSpace(line); line != "" {
			jobs = append(jobs, line)
		}
	}
	return jobs
}
