package rules

import (
	"maps"
	"math/rand/v2"
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/nemorl/nemorl-slurm/slurm"
	"github.com/nemorl/nemorl-slurm/stages"
)

// independent are the tiers of rows whose order carries nothing: on any
// facts at most one row of a tier stops Decide (a verdict, a need or a
// wait), and every row of it looks at the same waits in the same order
// and verifies or checks nothing, so whichever of them runs first decides
// the same. Each tier is consecutive in the table; every row not named
// here is a tier of its own (its order against its neighbours is
// priority: author-failed after author-script-verdict, scored last, …).
var independent = [][]string{
	// A job cancelled (its failure CANCELLED) or refused by its script
	// (FAILED with a reserved exit status): one failure each.
	{"author-cancelled", "author-script-verdict"},
	// Train's failure CANCELLED, TIMEOUT, OUT_OF_MEMORY, or FAILED with
	// exit 71; each looks at train's end only (its requeue wait).
	{"train-cancelled", "train-timeout", "train-out-of-memory", "train-output-bound"},
	// Eval ended by the cluster (not by its exit status), or FAILED with
	// exit 65, 67, 66 or 68, 69 or 70, 4: one exit status each; each looks
	// at train's record and eval's end in the same order.
	{"eval-slurm-failure", "eval-inputs-tampered", "eval-output-redirected", "eval-bad-weights", "eval-script-verdict", "eval-rollouts-rejected"},
	// Eval's out.log there but not a regular file it can open, or not
	// there at all.
	{"eval-output-planted", "eval-output-gone"},
}

// tiers is the table cut into its tiers, in order.
func tiers(t *testing.T) [][]Rule {
	t.Helper()
	rows := Rules()
	var out [][]Rule
	for i := 0; i < len(rows); {
		n := 1
		for _, tier := range independent {
			if tier[0] == rows[i].ID {
				n = len(tier)
				for k, id := range tier {
					if i+k >= len(rows) || rows[i+k].ID != id {
						t.Fatalf("tier %v is not consecutive in the table", tier)
					}
				}
			}
		}
		out = append(out, rows[i:i+n])
		i += n
	}
	return out
}

// permuteFacts are the property tests' facts, and the same with the facts
// Decide asks for not yet gathered, with waits under way and short, and
// with eval still running: every way a row stops Decide.
func permuteFacts() []*Facts {
	var all []*Facts
	g := gen{rand.New(rand.NewPCG(21, 22))}
	for i := range 400 {
		for _, f := range []*Facts{g.policyFacts(i%2 == 0), g.clusterFacts(), healthy(i%2 == 0)} {
			all = append(all, f)
			lazy := *f
			lazy.Outputs, lazy.Patch, lazy.EvalFiles, lazy.Queue, lazy.UIDKnown = map[stages.Stage]Output{}, nil, nil, nil, false
			all = append(all, &lazy)
			// A requeue, a job unknown, eval's times within their grace;
			// eval not ended, its files not yet checked.
			short := *f
			short.Waited = map[string]time.Duration{}
			short.Jobs = maps.Clone(f.Jobs)
			for _, s := range stages.All {
				if j, ok := short.Jobs[s]; ok && g.chance(0.3) {
					j.State = slurm.ParseState([]string{"NODE_FAIL", "PREEMPTED", "RUNNING", "PENDING"}[g.pick(4)], "")
					if g.chance(0.3) {
						j.Start, j.End = time.Time{}, time.Time{}
					}
					short.Jobs[s] = j
				}
			}
			short.Requeues, short.EvalOutputChecked = g.chance(0.7), g.chance(0.3)
			all = append(all, &short)
		}
	}
	return all
}

const permutations = 200

// Rows are pure and independent rows' order carries nothing: the table
// with its independent rows shuffled decides every facts as the table.
func TestPermuteIndependentRows(t *testing.T) {
	facts := permuteFacts()
	want := make([]Decision, len(facts))
	for i, f := range facts {
		want[i] = Decide(f)
	}
	ts := tiers(t)
	r := rand.New(rand.NewPCG(31, 32))
	moved := 0
	for p := range permutations {
		var rows []Rule
		for _, tier := range ts {
			tier = slices.Clone(tier)
			r.Shuffle(len(tier), func(i, j int) { tier[i], tier[j] = tier[j], tier[i] })
			rows = append(rows, tier...)
		}
		if !slices.EqualFunc(rows, table, func(a, b Rule) bool { return a.ID == b.ID }) {
			moved++
		}
		for i, f := range facts {
			if got := decide(f, rows); !reflect.DeepEqual(got, want[i]) {
				t.Fatalf("permutation %d, facts %d: %+v (verdict %+v), want %+v (verdict %+v)\nfacts: %s", p, i, got, got.Verdict, want[i], want[i].Verdict, describe(f))
			}
		}
	}
	if moved < permutations/2 {
		t.Fatalf("only %d of %d permutations moved a row", moved, permutations)
	}
	t.Logf("%d rows in %d tiers, %d permutations (%d moved a row) over %d facts", len(table), len(ts), permutations, moved, len(facts))
}

// The permutation test sees order that carries something: rows of
// different tiers swapped decide some facts otherwise.
func TestPermuteCatchesDependentRows(t *testing.T) {
	facts := permuteFacts()
	for _, pair := range [][2]string{{"author-script-verdict", "author-failed"}, {"patch-mismatch", "no-patch"}, {"eval-slurm-failure", "eval-exit-code"}} {
		rows := Rules()
		i := slices.IndexFunc(rows, func(r Rule) bool { return r.ID == pair[0] })
		j := slices.IndexFunc(rows, func(r Rule) bool { return r.ID == pair[1] })
		rows[i], rows[j] = rows[j], rows[i]
		differ := 0
		for _, f := range facts {
			if !reflect.DeepEqual(decide(f, rows), Decide(f)) {
				differ++
			}
		}
		if differ == 0 {
			t.Errorf("%s and %s swapped: no facts decided otherwise", pair[0], pair[1])
		}
	}
}

// Rules is a copy: changing it changes nothing Decide does.
func TestRulesIsACopy(t *testing.T) {
	rows := Rules()
	rows[0].ID, rows[0].Match = "changed", nil
	rows = rows[:1]
	if table[0].ID != "ledger-seal" || table[0].Match == nil || len(Rules()) != len(table) {
		t.Fatal("Rules returned the table itself")
	}
	f := healthy(true)
	f.SealBroken = "edited"
	if v := Decide(f).Verdict; v == nil || v.Rule != "ledger-seal" {
		t.Fatalf("after changing Rules' copy: %+v", v)
	}
}
