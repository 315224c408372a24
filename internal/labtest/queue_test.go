package labtest

import (
	"errors"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// TestClearLeftJobs leaves two held jobs of the lab user in the queue: one
// whose output directory is gone (as when the test that submitted it has
// ended) and one whose directory exists (a test still running).
// ClearLeftJobs, what LockLab runs, cancels the first and keeps the second.
func TestClearLeftJobs(t *testing.T) {
	lab, err := Load(Path())
	switch {
	case errors.Is(err, fs.ErrNotExist) && !Required():
		t.Skipf("no lab: %v", err)
	case err != nil:
		t.Fatalf("lab: %v", err)
	}
	UseLab(t)
	t.Run("cluster 1", func(t *testing.T) { testClearLeftJobs(t, lab.User, nil, ClearLeftJobs) })
	t.Run("cluster 2", func(t *testing.T) {
		if !lab.HasCluster2() {
			t.Skipf("%s has no cluster 2", lab.File)
		}
		// What clearQueue runs for cluster 2.
		testClearLeftJobs(t, lab.User, lab.Cluster2Env(), func(t testing.TB, user string) []string {
			return clearLeftJobs(t, "lab queue (cluster 2)", lab.Cluster2Env(), user)
		})
	})
	t.Run("cluster 3", func(t *testing.T) {
		lab.Cluster3(t) // skips (fails when Required) without it; holds it shared
		// What clearQueue runs for cluster 3.
		testClearLeftJobs(t, lab.User, lab.Cluster3Env(), func(t testing.TB, user string) []string {
			return clearLeftJobs(t, "lab queue (cluster 3)", lab.Cluster3Env(), user)
		})
	})
}

// testClearLeftJobs is TestClearLeftJobs on the cluster the Slurm clients
// reach in env (nil: this process's), clear cancelling.
func testClearLeftJobs(t *testing.T, user string, env []string, clear func(testing.TB, string) []string) {
	hold := func(dir string) string {
		t.Helper()
		if err := os.MkdirAll(dir, 0o777); err != nil {
			t.Fatal(err)
		}
		_ = os.Chmod(dir, 0o777)
		cmd := exec.Command("runuser", "-u", user, "--", client(env, "sbatch"), "--parsable", "--hold", "--chdir=/tmp",
			"--job-name=labtest-clear", "--output="+filepath.Join(dir, "%j.out"), "--wrap", "true")
		cmd.Env = env
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("sbatch as %s: %v\n%s", user, err, out)
		}
		id, _, _ := strings.Cut(strings.TrimSpace(string(out)), ";")
		t.Cleanup(func() {
			cmd := exec.Command(client(env, "scancel"), id)
			cmd.Env = env
			_ = cmd.Run()
		})
		return id
	}
	root := t.TempDir()
	left := hold(filepath.Join(root, "ended-test"))
	kept := hold(filepath.Join(root, "running-test"))
	if err := os.RemoveAll(filepath.Join(root, "ended-test")); err != nil {
		t.Fatal(err)
	}
	got := clear(t, user)
	if !slices.Contains(got, left) || slices.Contains(got, kept) {
		t.Fatalf("cancelled %v: want %s (its directory gone) and not %s", got, left, kept)
	}
	for _, j := range queueIn(env, user) {
		if j.id == kept && j.state != "PENDING" {
			t.Errorf("the job of a running test: %+v", j)
		}
		if j.id == left && j.state == "PENDING" {
			t.Errorf("the left job is still pending: %+v", j)
		}
	}
}
