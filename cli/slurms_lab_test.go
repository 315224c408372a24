package cli

// The tool through the built binary on each Slurm of the lab
// (labtest.EachSlurm: cluster 1's 22.05 and cluster 3's 24.11, whose
// controller rate-limits the lab user's RPCs): the helpers that point a
// labCLI at one of them, and the crash recovery that only sacct can
// answer for.

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nemorl/nemorl-slurm/internal/labtest"
)

// on returns a copy of x pointed at s: its base config reaches s's login
// (port and known_hosts: labtest.Slurm.Lab), and Slurm's clients run here
// (slurmCmd, sacctOn, newEpisodeOn) are s's.
func (x *labCLI) on(t *testing.T, s labtest.Slurm) *labCLI {
	t.Helper()
	y := *x
	y.base = withLogin(t, x.base, x.lab, s.Lab)
	y.slurm = s
	y.slurmEnv = s.Env()
	return &y
}

// withLogin is config text whose cluster login (port, known_hosts) is
// from's, with to's instead.
func withLogin(t *testing.T, text string, from, to labtest.Lab) string {
	t.Helper()
	for _, r := range [][2]string{
		{fmt.Sprintf("    port: %d\n", from.SSHPort), fmt.Sprintf("    port: %d\n", to.SSHPort)},
		{"    known_hosts: " + from.KnownHosts + "\n", "    known_hosts: " + to.KnownHosts + "\n"},
	} {
		if strings.Count(text, r[0]) != 1 {
			t.Fatalf("the lab config has no single %q", strings.TrimSpace(r[0]))
		}
		text = strings.Replace(text, r[0], r[1], 1)
	}
	return text
}

// newEpisodeOn is newEpisode for an episode on s: its jobs are cancelled
// there when t ends.
func newEpisodeOn(t *testing.T, s labtest.Slurm, name string) string {
	t.Helper()
	ep := newEpisode(t, name) // (its cleanup's scancel on cluster 1 finds nothing there)
	t.Cleanup(func() {
		for _, st := range labStages {
			if out, err := s.Command("scancel", "--name="+jobName(ep, st)).CombinedOutput(); err != nil {
				t.Logf("cleanup: scancel --name=%s on %s: %v %s", jobName(ep, st), s.Name, err, out)
			}
		}
	})
	return ep
}

// TestCrashResumeForgottenLab, on each Slurm: run is killed right after
// the author's sbatch and the ledger put back to that instant (the intent
// on record, the job id not: crashWindow); resume runs only once the
// author job has ended and slurmctld has forgotten it (MinJobAge, 30 s in
// the lab). Then only the accounting database knows the job: resume finds
// it with sacct, proves it the tool's by the sha256 of the batch script
// sacct --batch-script gives back (which 24.11 frames otherwise than
// 22.05), adopts it instead of submitting a second author job, and
// finishes the episode.
func TestCrashResumeForgottenLab(t *testing.T) {
	t.Parallel()
	x := newLabCLI(t)
	requireStandIns(t)
	labtest.EachSlurm(t, func(t *testing.T, s labtest.Slurm) {
		x.on(t, s).testCrashResumeForgotten(t)
	})
}

func (x *labCLI) testCrashResumeForgotten(t *testing.T) {
	s := x.slurm
	state, cfg, ep := t.TempDir(), x.config(t, ""), newEpisodeOn(t, s, "forgotten")
	b := x.start(t, state, episodeTimeout, "run", "--json", "--config", cfg, "--episode", ep)
	authorID := waitLedgerJob(t, state, ep, "author", b)
	killGroup(t, b)
	crashWindow(t, state, ep, "author", authorID)

	// The author job ends (nobody watches it) and slurmctld forgets it:
	// squeue and scontrol no longer know the id.
	start := time.Now()
	eventually(t, 5*time.Minute, 2*time.Second, func() string {
		out, err := x.slurmCmd("squeue", "-h", "--states=all", "-j", authorID, "-o", "%i %T").CombinedOutput()
		switch {
		case err == nil && strings.Contains(string(out), authorID):
			return "slurmctld still holds the author job: " + strings.TrimSpace(string(out))
		case err != nil && !strings.Contains(string(out), "Invalid job id"):
			return fmt.Sprintf("squeue: %v: %s", err, out)
		}
		return ""
	})
	if out, err := x.slurmCmd("scontrol", "show", "job", authorID).CombinedOutput(); err == nil {
		t.Fatalf("squeue forgot author job %s, scontrol did not:\n%s", authorID, out)
	}
	t.Logf("%s: author job %s forgotten by slurmctld %s after the crash", s.Name, authorID, time.Since(start).Round(time.Second))

	r := x.run(t, state, episodeTimeout, "resume", "--json", "--config", cfg).want(t, ExitOK)
	o := watchedOutcome(t, r, ep)
	if o.Outcome != "scored" || o.Reward == nil {
		t.Fatalf("%s: resumed episode: %s (%s, %s) reward %s, want scored: %s\n%s", s.Name, o.Outcome, o.FailureStage, o.FailureReason, fmtReward(o.Reward), o.Detail, r)
	}
	wantJobs(t, o, allStates("COMPLETED", labStages...))
	e := readLedger(t, state, ep)
	if a := e.Jobs["author"]; a.JobID != authorID || !a.Adopted {
		t.Errorf("ledger author job %q adopted %v, want %s adopted", a.JobID, a.Adopted, authorID)
	}
	for _, st := range []string{"train", "eval"} {
		if e.Jobs[st].Adopted {
			t.Errorf("ledger %s job %s marked adopted; resume submitted it", st, e.Jobs[st].JobID)
		}
	}
	// One author job, the adopted one: Slurm's own view.
	waitSacctOn(t, s, ep, sacctWant{states: allStates("COMPLETED", labStages...), ids: idsOf(o), tags: true})
}
