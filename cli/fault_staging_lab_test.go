package cli

import (
	"os"
	"os/exec"
	osuser "os/user"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestStagingUnwritable (#14, fault 6): the episode's directory cannot be
// written during staging. submit fails with a clear error naming the
// directory, nothing is submitted, and the ledger keeps an entry that
// resume finishes once the directory is writable again.
func TestStagingUnwritable(t *testing.T) {
	t.Parallel() // with the package's other shared-lab tests, after its LockLab ones
	x := newLabCLI(t)
	requireStandIns(t)
	// The test's workdir, made by root: the lab user cannot write in it.
	if err := os.MkdirAll(x.lab.Workdir, 0o755); err != nil {
		t.Fatal(err)
	}
	state := t.TempDir()
	cfg := x.config(t, "")
	r := x.run(t, state, quickTimeout, "--json", "--config", cfg, "submit")
	r.want(t, ExitInfra)
	var doc struct {
		Error struct {
			Message, Hint string
		} `json:"error"`
	}
	oneJSON(t, r, &doc)
	if !strings.Contains(doc.Error.Message, x.lab.Workdir) || !strings.Contains(doc.Error.Hint, "resume") {
		t.Fatalf("submit into an unwritable workdir: want an error naming %s and a hint to resume:\n%s", x.lab.Workdir, r)
	}
	list := x.run(t, state, quickTimeout, "--json", "list")
	var l struct {
		Episodes []struct {
			Episode  string `json:"episode"`
			Finished bool   `json:"finished"`
		} `json:"episodes"`
	}
	oneJSON(t, list, &l)
	if len(l.Episodes) != 1 || l.Episodes[0].Finished {
		t.Fatalf("ledger after the failed staging: %s", list)
	}
	ep := l.Episodes[0].Episode
	t.Cleanup(func() { cleanupEpisode(t, ep) })
	if out := sacctNames(t, ep); out != "" {
		t.Fatalf("a job was submitted for %s: %s", ep, out)
	}
	// The directory writable again: resume stages and submits it, once.
	if err := os.Chown(x.lab.Workdir, labUID(t, x.lab.User), -1); err != nil {
		t.Fatal(err)
	}
	rr := x.run(t, state, episodeTimeout, "--json", "resume")
	rr.want(t, ExitOK)
	if o := watchedOutcome(t, rr, ep); o.Outcome != "scored" {
		t.Errorf("after resume: %+v", o)
	}
	waitSacct(t, ep, sacctWant{states: allStates("COMPLETED", labStages...), tags: true})
}

// sacctNames lists the jobs sacct knows under the episode's job names.
func sacctNames(t *testing.T, ep string) string {
	t.Helper()
	var names []string
	for _, s := range labStages {
		names = append(names, jobName(ep, s))
	}
	time.Sleep(time.Second) // sacct lags a submission by moments
	out, err := execOutput("sacct", "-X", "-n", "-P", "--starttime=now-1hour", "--format=JobID", "--name="+strings.Join(names, ","))
	if err != nil {
		t.Fatalf("sacct: %v", err)
	}
	return strings.TrimSpace(out)
}

func labUID(t *testing.T, user string) int {
	t.Helper()
	u, err := osuser.Lookup(user)
	if err != nil {
		t.Fatal(err)
	}
	uid, err := strconv.Atoi(u.Uid)
	if err != nil {
		t.Fatal(err)
	}
	return uid
}

func execOutput(name string, args ...string) (string, error) {
	out, err := exec.Command(name, args...).Output()
	return string(out), err
}
