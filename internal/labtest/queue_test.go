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
	hold := func(dir string) string {
		t.Helper()
		if err := os.MkdirAll(dir, 0o777); err != nil {
			t.Fatal(err)
		}
		_ = os.Chmod(dir, 0o777)
		out, err := exec.Command("runuser", "-u", lab.User, "--", "sbatch", "--parsable", "--hold", "--chdir=/tmp",
			"--job-name=labtest-clear", "--output="+filepath.Join(dir, "%j.out"), "--wrap", "true").CombinedOutput()
		if err != nil {
			t.Fatalf("sbatch as %s: %v\n%s", lab.User, err, out)
		}
		id := strings.TrimSpace(string(out))
		t.Cleanup(func() { _ = exec.Command("scancel", id).Run() })
		return id
	}
	root := t.TempDir()
	left := hold(filepath.Join(root, "ended-test"))
	kept := hold(filepath.Join(root, "running-test"))
	if err := os.RemoveAll(filepath.Join(root, "ended-test")); err != nil {
		t.Fatal(err)
	}
	got := ClearLeftJobs(t, lab.User)
	if !slices.Contains(got, left) || slices.Contains(got, kept) {
		t.Fatalf("cancelled %v: want %s (its directory gone) and not %s", got, left, kept)
	}
	for _, j := range queueOf(lab.User) {
		if j.id == kept && j.state != "PENDING" {
			t.Errorf("the job of a running test: %+v", j)
		}
		if j.id == left && j.state == "PENDING" {
			t.Errorf("the left job is still pending: %+v", j)
		}
	}
}
