package ledger

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nemorl/nemorl-slurm/record"
	"github.com/nemorl/nemorl-slurm/rules"
	"github.com/nemorl/nemorl-slurm/stages"
)

func TestLedgerRoundTrip(t *testing.T) {
	l, err := OpenLedger(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	ids := []string{stages.NewID(time.Date(2026, 11, 29, 10, 0, 0, 0, time.UTC)), stages.NewID(time.Date(2026, 11, 29, 9, 0, 0, 0, time.UTC))}
	for _, id := range ids {
		e := &Entry{Episode: id, Dir: "/w/" + id, Jobs: map[stages.Stage]*Submission{}}
		if err := l.Create(e, []byte("prompt of "+id)); err != nil {
			t.Fatal(err)
		}
	}
	if err := l.Create(&Entry{Episode: ids[0]}, nil); !errors.Is(err, ErrEpisodeExists) || !strings.Contains(err.Error(), l.Path(ids[0])) {
		t.Fatalf("second Create of %s: %v, want ErrEpisodeExists naming the file", ids[0], err)
	}
	e, err := l.Load(ids[0])
	if err != nil {
		t.Fatal(err)
	}
	e.Jobs[stages.Author] = &Submission{Intent: time.Now().UTC(), JobID: "101"}
	e.Author = &record.Author{PatchSHA256: record.EmptySHA256}
	e.Outcome = &rules.Outcome{Episode: ids[0], Outcome: rules.PolicyFailure, Reward: ptr(0.0), FailureReason: rules.ReasonNoPatch}
	if err := l.Save(e); err != nil {
		t.Fatal(err)
	}
	got, err := l.Load(ids[0])
	if err != nil {
		t.Fatal(err)
	}
	if got.JobID(stages.Author) != "101" || !got.Final() || got.Outcome.FailureReason != rules.ReasonNoPatch || *got.Outcome.Reward != 0 || got.Author.PatchSHA256 != record.EmptySHA256 {
		t.Fatalf("reloaded entry differs: %+v", got)
	}
	if p, _ := os.ReadFile(l.PromptPath(ids[1])); string(p) != "prompt of "+ids[1] {
		t.Fatalf("prompt kept as %q", p)
	}
	all, err := l.List()
	if err != nil {
		t.Fatal(err)
	}
	if len(all) != 2 || all[0].Episode != ids[1] || all[1].Episode != ids[0] {
		t.Fatalf("List order: got %v, want oldest first", []string{all[0].Episode, all[1].Episode})
	}
	// Saves leave no temp files behind, and entries are private.
	files, _ := filepath.Glob(filepath.Join(l.Dir, "episodes", ".*"))
	if len(files) != 0 {
		t.Fatalf("temp files left: %v", files)
	}
	fi, err := os.Stat(l.Path(ids[0]))
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("entry mode %v, %v; want 0600", fi.Mode(), err)
	}
}

func TestLedgerLoadErrors(t *testing.T) {
	l, err := OpenLedger(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := l.Load("ep-nope"); !errors.Is(err, ErrNotInLedger) {
		t.Fatalf("unknown episode: %v", err)
	}
	if _, err := l.Load("../etc/passwd"); err == nil || !strings.Contains(err.Error(), "bad episode id") {
		t.Fatalf("path-like id: %v", err)
	}
	if err := os.WriteFile(l.Path("ep-broken"), []byte("{\"format\": 1, \"episode\": "), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := l.Load("ep-broken"); err == nil || !strings.Contains(err.Error(), l.Path("ep-broken")) {
		t.Fatalf("truncated entry: %v, want an error naming the file", err)
	}
	if err := os.WriteFile(l.Path("ep-other"), []byte(`{"format": 1, "episode": "ep-else"}`), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := l.Load("ep-other"); err == nil || !strings.Contains(err.Error(), `"ep-else"`) {
		t.Fatalf("entry naming another episode: %v", err)
	}
}

// TestLedgerLock: one holder at a time (a second claim in the same process
// is refused too), free again after Unlock. More in locks_test.go.
func TestLedgerLock(t *testing.T) {
	l, err := OpenLedger(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	a, ok, err := l.TryLock("ep-x")
	if err != nil || !ok {
		t.Fatalf("first claim: %v %v", ok, err)
	}
	if _, ok, err := l.TryLock("ep-x"); err != nil || ok {
		t.Fatalf("second claim while held: ok=%v err=%v, want refused", ok, err)
	}
	if _, ok, err := l.TryLock("ep-y"); err != nil || !ok {
		t.Fatalf("claim of another episode: ok=%v err=%v", ok, err)
	}
	a.Unlock()
	b, ok, err := l.TryLock("ep-x")
	if err != nil || !ok {
		t.Fatalf("claim after Unlock: ok=%v err=%v", ok, err)
	}
	b.Unlock()
}

func TestOutcomeExitCodes(t *testing.T) {
	for kind, want := range map[rules.Kind]int{rules.Scored: 0, rules.PolicyFailure: 0, rules.InfraFailure: 3, rules.IntegrityViolation: 4} {
		if got := (&rules.Outcome{Outcome: kind}).ExitCode(); got != want {
			t.Errorf("%s: exit %d, want %d", kind, got, want)
		}
	}
}

// TestOutcomeSeal: a final entry whose outcome is edited after it was
// decided (a job rewriting the ledger) loads as an integrity violation, as
// does one whose seal or key is gone, or an unfinished one whose job id was
// pointed elsewhere.
func TestOutcomeSeal(t *testing.T) {
	edits := map[string]func(t *testing.T, l *Ledger, path string){
		"reward edited": func(t *testing.T, l *Ledger, p string) {
			rewrite(t, p, `"reward": 0.25`, `"reward": 1`)
		},
		"outcome edited": func(t *testing.T, l *Ledger, p string) {
			rewrite(t, p, `"outcome": "policy_failure"`, `"outcome": "scored"`)
		},
		"seal removed": func(t *testing.T, l *Ledger, p string) {
			b, _ := os.ReadFile(p)
			var m map[string]any
			if err := json.Unmarshal(b, &m); err != nil {
				t.Fatal(err)
			}
			delete(m, "seal")
			b, _ = json.Marshal(m)
			if err := os.WriteFile(p, b, 0o600); err != nil {
				t.Fatal(err)
			}
		},
		"job id edited": func(t *testing.T, l *Ledger, p string) {
			rewrite(t, p, `"job_id": "7"`, `"job_id": "8"`)
		},
		"key replaced": func(t *testing.T, l *Ledger, p string) {
			if err := os.Remove(filepath.Join(l.Dir, OutcomeKeyFile)); err != nil {
				t.Fatal(err)
			}
			if _, err := l.sealKey(true); err != nil {
				t.Fatal(err)
			}
		},
	}
	for name, edit := range edits {
		t.Run(name, func(t *testing.T) {
			l, err := OpenLedger(t.TempDir())
			if err != nil {
				t.Fatal(err)
			}
			e := &Entry{Episode: "ep-seal", Jobs: map[stages.Stage]*Submission{"eval": {JobID: "7"}}, Isolation: "none"}
			if err := l.Create(e, []byte("p")); err != nil {
				t.Fatal(err)
			}
			e.Outcome = &rules.Outcome{Episode: e.Episode, Outcome: rules.Scored, Reward: ptr(0.25), Jobs: map[stages.Stage]rules.JobSummary{"eval": {ID: "7", State: "COMPLETED"}},
				Decided: time.Now().UTC()}
			if strings.Contains(name, "outcome") {
				failed(e.Outcome, rules.PolicyFailure, stages.Train, rules.ReasonTrainFailed, "x")
				e.Outcome.Reward = ptr(0.25) // so the reward edit is not needed
			}
			if err := l.Save(e); err != nil {
				t.Fatal(err)
			}
			if fi, err := os.Stat(filepath.Join(l.Dir, OutcomeKeyFile)); err != nil || fi.Mode().Perm() != 0o600 {
				t.Fatalf("seal key: %v %v, want a 0600 file", fi, err)
			}
			got, err := l.Load(e.Episode)
			if err != nil || got.Outcome.Outcome != e.Outcome.Outcome || got.Outcome.FailureReason == rules.ReasonLedgerTampered {
				t.Fatalf("untouched entry: %+v, %v", got.Outcome, err)
			}
			edit(t, l, l.Path(e.Episode))
			got, err = l.Load(e.Episode)
			if err != nil {
				t.Fatal(err)
			}
			o := got.Outcome
			if o.Outcome != rules.IntegrityViolation || o.FailureReason != rules.ReasonLedgerTampered || o.Reward != nil || !o.MaskSample || !o.Tampering || o.ExitCode() != 4 {
				t.Fatalf("edited entry loads as %+v, want integrity_violation/ledger_tampered, no reward, exit 4", o)
			}
		})
	}
}

func rewrite(t *testing.T, p, old, new string) {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), old) {
		t.Fatalf("%s has no %q:\n%s", p, old, b)
	}
	if err := os.WriteFile(p, []byte(strings.Replace(string(b), old, new, 1)), 0o600); err != nil {
		t.Fatal(err)
	}
}

// TestCancelMarkerSeal: a cancel marker nemorl-slurm wrote is honoured; one
// planted by anything else (to turn a 0 into a masked sample) is ignored.
func TestCancelMarkerSeal(t *testing.T) {
	l, err := OpenLedger(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	if got, err := l.RequestCancel("ep-a", rules.ReasonCancelled); err != nil || got != rules.ReasonCancelled || l.CancelRequest("ep-a") != rules.ReasonCancelled {
		t.Fatalf("RequestCancel: %q %v; CancelRequest %q", got, err, l.CancelRequest("ep-a"))
	}
	for name, data := range map[string]string{
		"bare reason":      "cancelled\n",
		"another's seal":   "cancelled\n" + strings.Split(readFile(t, l.cancelPath("ep-a")), "\n")[1] + "\n",
		"edited reason":    "deadline\n" + strings.Split(readFile(t, l.cancelPath("ep-a")), "\n")[1] + "\n",
		"garbage for seal": "cancelled\nzz\n",
	} {
		if err := os.WriteFile(l.cancelPath("ep-b"), []byte(data), 0o600); err != nil {
			t.Fatal(err)
		}
		if r := l.CancelRequest("ep-b"); r != "" {
			t.Errorf("%s: planted marker honoured as %q", name, r)
		}
	}
}

func readFile(t *testing.T, p string) string {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestSealKeyConcurrent: processes saving their first entries at once all
// end up with the same, whole key (a reader never sees a partly written one).
func TestSealKeyConcurrent(t *testing.T) {
	for range 20 {
		l, err := OpenLedger(t.TempDir())
		if err != nil {
			t.Fatal(err)
		}
		keys := make(chan []byte, 16)
		errs := make(chan error, 16)
		for range 16 {
			go func() {
				k, err := l.sealKey(true)
				keys <- k
				errs <- err
			}()
		}
		var first []byte
		for range 16 {
			if err := <-errs; err != nil {
				t.Fatal(err)
			}
			k := <-keys
			if first == nil {
				first = k
			} else if !bytes.Equal(first, k) || len(k) != 32 {
				t.Fatalf("keys differ: %x %x", first, k)
			}
		}
		if fi, err := os.Stat(filepath.Join(l.Dir, OutcomeKeyFile)); err != nil || fi.Mode().Perm() != 0o600 {
			t.Fatalf("key file: %v %v", fi, err)
		}
	}
}

func ptr[T any](v T) *T { return &v }

// failed is o with a failure written in, as the rules write a verdict.
func failed(o *rules.Outcome, k rules.Kind, stage stages.Stage, reason, detail string) *rules.Outcome {
	(&rules.Verdict{Kind: k, Stage: stage, Reason: reason, Detail: detail}).Apply(o)
	return o
}
