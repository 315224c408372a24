package labtest

import (
	"errors"
	"io/fs"
	"os/exec"
	"strings"
	"testing"
)

// TestLockLabClearsLeftJobs leaves a job in the lab queue as an ended test
// would (a stand-in sleeping ten minutes, submitted as the lab user), then
// takes the lab: LockLab cancels it before the test goes on, so the test's
// own jobs do not wait behind it.
func TestLockLabClearsLeftJobs(t *testing.T) {
	lab, err := Load(Path())
	switch {
	case errors.Is(err, fs.ErrNotExist) && !Required():
		t.Skipf("no lab: %v", err)
	case err != nil:
		t.Fatalf("lab: %v", err)
	}
	out, err := exec.Command("runuser", "-u", lab.User, "--", "sbatch", "--parsable", "--chdir=/tmp",
		"--job-name=labtest-left-behind", "--output=/dev/null", "--wrap", "sleep 600").CombinedOutput()
	if err != nil {
		t.Fatalf("sbatch as %s: %v\n%s", lab.User, err, out)
	}
	id := strings.TrimSpace(string(out))
	t.Cleanup(func() { _ = exec.Command("scancel", id).Run() })
	LockLab(t)
	for _, j := range queueOf(lab.User) {
		if strings.HasPrefix(j, id+" ") {
			t.Fatalf("job %s is still in the queue after LockLab: %s", id, j)
		}
	}
	out, err = exec.Command("sacct", "-n", "-X", "-P", "-j", id, "-o", "State").Output()
	if err != nil {
		t.Fatalf("sacct -j %s: %v", id, err)
	}
	if st := strings.TrimSpace(string(out)); !strings.HasPrefix(st, "CANCELLED") {
		t.Errorf("job %s after LockLab: sacct says %q, want CANCELLED", id, st)
	}
}
