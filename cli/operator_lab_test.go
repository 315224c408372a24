package cli

// Issue #13 on the lab, through the binary: a mixed run of five labelled
// episodes, then what an operator does with them: list (filters, --json),
// status --all, logs (the current stage, -f, after clean), clean twice,
// cancel, --set.

import (
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

func TestOperatorLab(t *testing.T) {
	t.Parallel() // with the package's other shared-lab tests, after its LockLab ones
	x := newLabCLI(t)
	requireStandIns(t)
	lab := x.lab
	state := t.TempDir()
	cfg := x.config(t, "")
	noPatch := x.config(t, "author", "--no-patch")
	slowTrain := x.config(t, "train", "--sleep-forever")

	// Five episodes: three scored (one with --set), one no_patch, one cancelled.
	r := x.run(t, state, quickTimeout, "--json", "--config", cfg, "submit", "--count", "2", "--label", "sweep=a", "--label", "lr=3e-6")
	r.want(t, ExitOK)
	var many struct {
		Episodes []struct {
			Episode string            `json:"episode"`
			Labels  map[string]string `json:"labels"`
		} `json:"episodes"`
	}
	oneJSON(t, r, &many)
	if len(many.Episodes) != 2 || many.Episodes[0].Labels["sweep"] != "a" {
		t.Fatalf("submit --count 2 --label: %s", r)
	}
	r = x.run(t, state, quickTimeout, "--json", "--config", cfg, "submit", "--label", "sweep=b", "--set", "stages.train.train_seconds=120")
	r.want(t, ExitOK)
	var one struct {
		Episode string `json:"episode"`
		Dir     string `json:"dir"`
	}
	oneJSON(t, r, &one)
	setEp := one.Episode
	if e := readLedgerRaw(t, state, setEp); !strings.Contains(e, `"stages.train.train_seconds=120"`) {
		t.Errorf("--set not in the ledger entry:\n%s", e)
	}
	if b, err := os.ReadFile(filepath.Join(one.Dir, "train", "train.sbatch")); err != nil || !strings.Contains(string(b), "#SBATCH --time=00:12:00\n") {
		t.Errorf("--set stages.train.train_seconds=120: train.sbatch (%v) has no --time=00:12:00 (120 s + 600 s margin)", err)
	}
	r = x.run(t, state, quickTimeout, "--config", cfg, "submit", "--set", "stages.train.train_seconds=30")
	r.want(t, ExitUsage)
	if !strings.Contains(r.stderr, "with --set stages.train.train_seconds=30") || !strings.Contains(r.stderr, "stages.train.train_seconds: want 60..3600, got 30") {
		t.Errorf("a bad --set: %s", r)
	}
	r = x.run(t, state, quickTimeout, "--json", "--config", noPatch, "submit", "--label", "sweep=b")
	r.want(t, ExitOK)
	oneJSON(t, r, &one)
	noPatchEp := one.Episode
	r = x.run(t, state, quickTimeout, "--json", "--config", slowTrain, "submit", "--label", "sweep=c")
	r.want(t, ExitOK)
	oneJSON(t, r, &one)
	slowEp := one.Episode
	for _, ep := range []string{many.Episodes[0].Episode, many.Episodes[1].Episode, setEp, noPatchEp, slowEp} {
		t.Cleanup(func() { cleanupEpisode(t, ep) })
	}

	// The four that end by themselves, watched together.
	w := x.start(t, state, episodeTimeout, "watch", many.Episodes[0].Episode, many.Episodes[1].Episode, setEp, noPatchEp)
	// Meanwhile: the slow one's train runs (its own watch); logs -f follows it.
	w2 := x.start(t, state, episodeTimeout, "watch", slowEp)
	x.waitTrainRunning(t, state, slowEp, w2)
	f := x.start(t, state, time.Minute, "logs", "-f", slowEp)
	eventually(t, 30*time.Second, 200*time.Millisecond, func() string {
		if f.exited() {
			t.Fatalf("logs -f ended while train runs: %s", f.res)
		}
		if !strings.Contains(f.stdout.String(), "stand-in train") {
			return "logs -f printed nothing of the train stage yet"
		}
		return ""
	})
	r = x.run(t, state, quickTimeout, "logs", slowEp)
	r.want(t, ExitOK)
	if !strings.Contains(string(r.stdout), "stand-in train") {
		t.Errorf("logs without --stage while train runs is not train's (bug: it picked eval):\n%s", r)
	}
	r = x.run(t, state, quickTimeout, "cancel", slowEp)
	r.want(t, ExitOK)
	f.wait(t, time.Minute).want(t, ExitOK) // -f ends with the job
	wr := w.wait(t, episodeTimeout)
	wr.want(t, ExitOK)
	if n := strings.Count(wr.stderr, "scored"); n > 3 {
		t.Errorf("watch printed %d outcome mentions for 3 scored episodes (bug: each three times):\n%s", n, wr.stderr)
	}
	if strings.Contains(wr.stderr, "SUBMITTED") {
		t.Errorf("watch shows a made-up state SUBMITTED:\n%s", wr.stderr)
	}
	w2.wait(t, 2*time.Minute).want(t, ExitInfra) // it records the cancel

	// list: all five, filters, labels, --json.
	r = x.run(t, state, quickTimeout, "--json", "list")
	r.want(t, ExitOK)
	var list struct {
		Episodes []struct {
			Episode string            `json:"episode"`
			Labels  map[string]string `json:"labels"`
			Outcome *struct {
				Outcome       string   `json:"outcome"`
				FailureReason string   `json:"failure_reason"`
				Reward        *float64 `json:"reward"`
				Correct       *int     `json:"correct"`
				Samples       int      `json:"samples"`
			} `json:"outcome"`
		} `json:"episodes"`
	}
	oneJSON(t, r, &list)
	got := map[string]string{}
	for _, e := range list.Episodes {
		if e.Outcome == nil {
			t.Fatalf("%s unfinished in list: %s", e.Episode, r)
		}
		got[e.Episode] = e.Outcome.Outcome + "/" + e.Outcome.FailureReason + " " + e.Labels["sweep"]
		if e.Outcome.Outcome == "scored" && (e.Outcome.Correct == nil || e.Outcome.Samples != 240) {
			t.Errorf("%s: scored without its count: %+v", e.Episode, e.Outcome)
		}
	}
	want := map[string]string{
		many.Episodes[0].Episode: "scored/ a", many.Episodes[1].Episode: "scored/ a", setEp: "scored/ b",
		noPatchEp: "policy_failure/no_patch b", slowEp: "infra_failure/cancelled c",
	}
	for ep, w := range want {
		if got[ep] != w {
			t.Errorf("list: %s is %q, want %q", ep, got[ep], w)
		}
	}
	t.Logf("list --json:\n%s", r.stdout)
	t.Logf("list:\n%s", x.run(t, state, quickTimeout, "list").stdout)
	r = x.run(t, state, quickTimeout, "list", "--label", "sweep=b", "--outcome", "policy_failure")
	r.want(t, ExitOK)
	if !strings.Contains(string(r.stdout), noPatchEp) || strings.Count(string(r.stdout), "\n") != 2 {
		t.Errorf("list --label sweep=b --outcome policy_failure:\n%s", r)
	}
	if !regexp.MustCompile(`scored\s+0\.\d{4} \(\d+/240\)`).Match(x.run(t, state, quickTimeout, "list", "--outcome", "scored").stdout) {
		t.Errorf("list: rewards not shown as 0.4542 (109/240)")
	}
	if r := x.run(t, state, quickTimeout, "list", "--since", "nonsense"); r.code != ExitUsage || !strings.Contains(r.stderr, "--since") {
		t.Errorf("list --since nonsense: %s", r)
	}

	// status --all: finished episodes with their elapsed time; the
	// cancelled job by the user's name.
	r = x.run(t, state, quickTimeout, "--json", "status", "--all")
	r.want(t, ExitOK)
	var st struct {
		Episodes []struct {
			Episode        string `json:"episode"`
			State          string `json:"state"`
			ElapsedSeconds int64  `json:"elapsed_seconds"`
		} `json:"episodes"`
	}
	oneJSON(t, r, &st)
	if len(st.Episodes) != 5 {
		t.Errorf("status --all shows %d episodes, want 5: %s", len(st.Episodes), r)
	}
	for _, e := range st.Episodes {
		if e.Episode == setEp {
			// Its eval's run, as the outcome recorded it (bug: 0).
			var res struct {
				Jobs map[string]struct {
					Start time.Time `json:"start"`
					End   time.Time `json:"end"`
				} `json:"jobs"`
			}
			oneJSON(t, x.run(t, state, quickTimeout, "--json", "result", setEp), &res)
			j := res.Jobs["eval"]
			if want := int64(j.End.Sub(j.Start) / time.Second); j.End.IsZero() || e.ElapsedSeconds != want {
				t.Errorf("status --all: %s elapsed %d s, its eval ran %d s (%v to %v)", e.Episode, e.ElapsedSeconds, want, j.Start, j.End)
			}
		}
		if e.Episode == slowEp && e.State != "CANCELLED by "+lab.User {
			t.Errorf("status --all: the cancelled train's state %q, want CANCELLED by %s", e.State, lab.User)
		}
	}

	// logs of a finished episode: the stage that decided it; clean, twice.
	r = x.run(t, state, quickTimeout, "logs", noPatchEp)
	r.want(t, ExitOK)
	if !strings.Contains(string(r.stdout), "stand-in author") {
		t.Errorf("logs of a no_patch episode: not the author's:\n%s", r)
	}
	x.run(t, state, quickTimeout, "clean", noPatchEp).want(t, ExitOK)
	r = x.run(t, state, quickTimeout, "clean", noPatchEp)
	r.want(t, ExitOK)
	if !strings.Contains(r.stderr, "already cleaned") || strings.Contains(r.stderr, "removed") {
		t.Errorf("a second clean: %s", r)
	}
	r = x.run(t, state, quickTimeout, "logs", noPatchEp)
	r.want(t, ExitUsage)
	if !strings.Contains(r.stderr, "was cleaned on") {
		t.Errorf("logs after clean: %s", r)
	}
	// A second submit with the same id: one clear message.
	r = x.run(t, state, quickTimeout, "--config", cfg, "submit", "--episode", setEp)
	r.want(t, ExitUsage)
	if strings.Count(r.stderr, "exists") != 1 || !strings.Contains(r.stderr, "episode "+setEp+" already exists") {
		t.Errorf("submit of an existing id: %s", r)
	}
}

func readLedgerRaw(t *testing.T, state, ep string) string {
	t.Helper()
	b, err := os.ReadFile(ledgerPath(state, ep))
	if err != nil {
		t.Fatal(err)
	}
	var v map[string]any
	if json.Unmarshal(b, &v) != nil {
		t.Fatalf("ledger %s", ep)
	}
	return string(b)
}
