package contamination

import (
	"fmt"
	"math"
	"strings"
	"testing"
)

// patchLine is the patch line number of the added file's 0-based line i.
func patchLine(i int) int { return addedFileHeaderLines + i + 1 }

// margins records the lowest scores contaminated patches reach.
type margins struct {
	minStatement   float64
	minStatementAt string
	minPair        float64
	minPairAt      string
	maxPair        float64
	maxPairAt      string
	minAnswers     float64
	minAnswersAt   string
}

func newMargins() *margins { return &margins{minStatement: 2, minPair: 2, minAnswers: 2} }

// expectFinding checks that the patch is flagged with a finding of kind for
// problem (empty for answers) whose lines lie in the injected range, and no
// finding about any other problem.
func expectFinding(t *testing.T, label string, inj injection, problems []Problem, kind Kind, problem string, m *margins) {
	t.Helper()
	patch := []byte(addedFile("data/train.txt", inj.lines))
	rep := Check(patch, problems)
	if !rep.Contaminated || len(rep.Findings) == 0 {
		t.Errorf("%s/%s: not flagged", label, inj.name)
		return
	}
	var got *Finding
	for i := range rep.Findings {
		f := &rep.Findings[i]
		if f.Kind == kind && f.Problem == problem {
			got = f
			continue
		}
		if f.Problem != problem {
			t.Errorf("%s/%s: unexpected finding %s %q: %s", label, inj.name, f.Kind, f.Problem, f.Detail)
		}
	}
	if got == nil {
		t.Errorf("%s/%s: want a %s finding for problem %q, got %+v", label, inj.name, kind, problem, rep.Findings)
		return
	}
	lo, hi := patchLine(inj.from), patchLine(inj.to)
	if len(got.Lines) == 0 || len(got.Lines) > maxLines {
		t.Errorf("%s/%s: %d lines", label, inj.name, len(got.Lines))
	}
	for i, l := range got.Lines {
		if l < lo || l > hi {
			t.Errorf("%s/%s: line %d outside the injected lines %d-%d (%v)", label, inj.name, l, lo, hi, got.Lines)
			break
		}
		if i > 0 && got.Lines[i-1] >= l {
			t.Errorf("%s/%s: lines not sorted: %v", label, inj.name, got.Lines)
		}
	}
	if got.Overlap <= 0 || got.Overlap > 1 || got.Detail == "" {
		t.Errorf("%s/%s: overlap %v detail %q", label, inj.name, got.Overlap, got.Detail)
	}
	if rep.AddedLines != len(inj.lines) {
		t.Errorf("%s/%s: AddedLines %d, want %d", label, inj.name, rep.AddedLines, len(inj.lines))
	}
	if m != nil {
		at := label + "/" + inj.name
		switch kind {
		case KindStatement:
			if got.Overlap < m.minStatement {
				m.minStatement, m.minStatementAt = got.Overlap, at
			}
		case KindPair:
			if got.Overlap < m.minPair {
				m.minPair, m.minPairAt = got.Overlap, at
			}
			if got.Overlap > m.maxPair {
				m.maxPair, m.maxPairAt = got.Overlap, at
			}
		case KindAnswers:
			if got.Overlap < m.minAnswers {
				m.minAnswers, m.minAnswersAt = got.Overlap, at
			}
		}
	}
}

// runMustCatch runs every transform of every problem. With strictPairs
// false (the real set), a half statement made only of stock phrases (fewer
// than PairMinRare rare n-grams: no evidence that tells it from ordinary
// math text) may go unflagged; it is counted and logged.
func runMustCatch(t *testing.T, problems []Problem, strictPairs bool) *margins {
	m := newMargins()
	pairs, caught := 0, 0
	var stock []string
	for i, p := range problems {
		label := "problem " + p.ID
		for _, inj := range injections(p, uint64(i)) {
			expectFinding(t, label, inj, problems, KindStatement, p.ID, m)
		}
		for _, inj := range pairInjections(p, uint64(i)) {
			pairs++
			if !strictPairs {
				rep, sc := check([]byte(addedFile("data/train.txt", inj.lines)), problems, defaults, Options{})
				if !rep.Contaminated && sc.MaxRareOverlap[i] == 0 {
					stock = append(stock, p.ID+"/"+inj.name)
					continue
				}
			}
			caught++
			expectFinding(t, label, inj, problems, KindPair, p.ID, m)
		}
	}
	t.Logf("pairs: %d of %d caught; not flagged as made of stock phrases only: %v", caught, pairs, stock)
	for _, inj := range answerInjections(problems, 1) {
		expectFinding(t, "answers", inj, problems, KindAnswers, "", m)
	}
	t.Logf("lowest overlap of a caught statement %.3f (%s); caught pairs (half statements) %.3f (%s) to %.3f (%s); fraction of answers in a caught list %.3f (%s)",
		m.minStatement, m.minStatementAt, m.minPair, m.minPairAt, m.maxPair, m.maxPairAt, m.minAnswers, m.minAnswersAt)
	return m
}

func TestMustCatchStandIn(t *testing.T) {
	runMustCatch(t, standInProblems(), true)
}

func TestStandInSet(t *testing.T) {
	ps := standInProblems()
	if len(ps) != 30 {
		t.Fatalf("%d problems", len(ps))
	}
	small := 0
	seen := map[string]bool{}
	for _, p := range ps {
		w := len(strings.Fields(p.Statement))
		if w < 30 || w > 120 {
			t.Errorf("problem %s: %d words", p.ID, w)
		}
		v := answerValue(p.Answer)
		if v < 0 || v > 999 {
			t.Errorf("problem %s: answer %q", p.ID, p.Answer)
		}
		if v < 10 {
			small++
		}
		for _, want := range []string{"$"} {
			if !strings.Contains(p.Statement, want) {
				t.Errorf("problem %s lacks %q", p.ID, want)
			}
		}
		if seen[p.Statement] {
			t.Errorf("problem %s repeats", p.ID)
		}
		seen[p.Statement] = true
	}
	if small == 0 {
		t.Error("no answer below 10")
	}
	all := ""
	for _, p := range ps {
		all += p.Statement
	}
	for _, want := range []string{`\frac{`, `\sqrt{`, `\cdot`, `^`} {
		if !strings.Contains(all, want) {
			t.Errorf("no problem uses %s", want)
		}
	}
	// the set must be loadable as a problem file
	var b strings.Builder
	for _, p := range ps {
		b.WriteString(jsonRow("question", p.Statement, "expected_answer", p.Answer) + "\n")
	}
	got, err := LoadProblems(strings.NewReader(b.String()))
	if err != nil || len(got) != 30 || got[29].Statement != ps[29].Statement || got[29].ID != "30" {
		t.Fatalf("LoadProblems: %v %d", err, len(got))
	}
}

// Each problem verbatim, one per line, in one patch: 30 statement findings
// in dataset order, each on its own line.
func TestAllProblemsOnePatch(t *testing.T) {
	ps := standInProblems()
	var lines []string
	for _, p := range ps {
		lines = append(lines, jsonRow("prompt", p.Statement, "completion", p.Answer))
	}
	rep := Check([]byte(addedFile("train.jsonl", lines)), ps)
	var stmts []Finding
	for _, f := range rep.Findings {
		if f.Kind == KindStatement {
			stmts = append(stmts, f)
		}
	}
	if len(stmts) != 30 {
		t.Fatalf("%d statement findings, want 30: %+v", len(stmts), rep.Findings)
	}
	for i, f := range stmts {
		if f.Problem != ps[i].ID || len(f.Lines) != 1 || f.Lines[0] != patchLine(i) || f.Overlap != 1 {
			t.Errorf("finding %d: %+v", i, f)
		}
	}
	if len(rep.Findings) > 31 {
		t.Errorf("%d findings", len(rep.Findings))
	}
}

func TestCleanPatches(t *testing.T) {
	ps := standInProblems()
	cases := map[string][]byte{
		"empty":    nil,
		"code":     []byte(addedFile("a.py", filler(1, 3000))),
		"not-diff": []byte(strings.Join(statementLines(ps[0].Statement), "\n")),
	}
	// every number 0..999 in order, and shuffled, in a table
	var seq, shuf []string
	for i := 0; i < 1000; i++ {
		seq = append(seq, fmt.Sprintf("    %d,", i))
		shuf = append(shuf, fmt.Sprintf("%d", (i*379+17)%1000))
	}
	cases["range-table"] = []byte(addedFile("t.py", seq))
	cases["shuffled-table"] = []byte(addedFile("t.csv", []string{strings.Join(shuf, ",")}))
	// removed and context lines do not count, nor a binary section
	var b strings.Builder
	b.WriteString("diff --git a/x.txt b/x.txt\n--- a/x.txt\n+++ b/x.txt\n@@ -1,2 +1,2 @@\n")
	b.WriteString("-" + ps[3].Statement + "\n " + ps[4].Statement + "\n+fixed a typo\n")
	cases["removed-context"] = []byte(b.String())
	// a statement in the "+++ " header line is not an added line
	cases["header"] = []byte("diff --git a/x b/x\n--- a/x\n+++ b/" + ps[6].Statement + "\n@@ -1 +1 @@\n-a\n+b\n")
	for name, patch := range cases {
		rep := Check(patch, ps)
		if rep.Contaminated {
			t.Errorf("%s: flagged: %+v", name, rep.Findings)
		}
	}
	rep := Check(cases["removed-context"], ps)
	if rep.AddedLines != 1 {
		t.Errorf("AddedLines %d, want 1", rep.AddedLines)
	}
}

func TestHunkAddedLines(t *testing.T) {
	ps := standInProblems()
	st := ps[8].Statement
	// a "+++ " line inside a hunk (counts say so) is an added line
	patch := "diff --git a/x b/x\n--- a/x\n+++ b/x\n@@ -1,1 +1,2 @@\n ctx\n+++ " + st + "\n"
	rep := Check([]byte(patch), ps)
	if !rep.Contaminated || rep.Findings[0].Problem != "9" || rep.Findings[0].Lines[0] != 6 {
		t.Errorf("in-hunk +++ line: %+v", rep)
	}
	// CRLF line ends, and a hunk without counts
	patch = "diff --git a/x b/x\r\n--- a/x\r\n+++ b/x\r\n@@ -1 +1 @@\r\n-a\r\n+" + strings.ReplaceAll(st, "\n", " ") + "\r\n"
	rep = Check([]byte(patch), ps)
	if !rep.Contaminated || rep.Findings[0].Problem != "9" || rep.AddedLines != 1 {
		t.Errorf("CRLF: %+v", rep)
	}
	// lines past a hunk whose counts ran out still count when they look added
	patch = "diff --git a/x b/x\n--- a/x\n+++ b/x\n@@ -1,1 +1,1 @@\n-a\n+b\n+" + st + "\n"
	rep = Check([]byte(patch), ps)
	if !rep.Contaminated || rep.AddedLines != 2 {
		t.Errorf("lenient hunk: %+v", rep)
	}
}

func TestReportFields(t *testing.T) {
	ps := standInProblems()
	rep := Check([]byte(addedFile("x", []string{ps[0].Statement})), ps)
	if rep.N != defaults.N || rep.Threshold != defaults.Threshold || rep.AddedLines != 1 {
		t.Errorf("%+v", rep)
	}
	f := rep.Findings[0]
	if !strings.Contains(f.Detail, "problem 1:") || !strings.Contains(f.Detail, fmt.Sprintf("%d-grams", defaults.N)) {
		t.Errorf("detail %q", f.Detail)
	}
	if math.IsNaN(f.Overlap) {
		t.Error("NaN")
	}
	if r := Check([]byte(addedFile("x", []string{ps[0].Statement})), nil); r.Contaminated {
		t.Error("no problems: flagged")
	}
}

// Many answers but small ones only, or fewer than K: not a list finding.
func TestAnswersThreshold(t *testing.T) {
	ps := standInProblems()
	var big []string
	dup := map[int]bool{}
	for _, p := range ps {
		if v := answerValue(p.Answer); v >= defaults.AnswersMinValue && !dup[v] {
			dup[v] = true
			big = append(big, p.Answer)
		}
	}
	k := int(math.Ceil(defaults.AnswersFrac * float64(len(big))))
	few := "ANSWERS = [" + strings.Join(big[:k-1], ", ") + "]"
	if rep := Check([]byte(addedFile("x.py", []string{few})), ps); rep.Contaminated {
		t.Errorf("%d answers flagged: %+v", k-1, rep.Findings)
	}
	enough := "ANSWERS = [" + strings.Join(big[:k], ", ") + "]"
	if rep := Check([]byte(addedFile("x.py", []string{enough})), ps); !rep.Contaminated || rep.Findings[0].Kind != KindAnswers {
		t.Errorf("%d answers not flagged: %+v", k, rep.Findings)
	}
	// the same answers spread out beyond the 2x30-number window
	var spread []string
	for i, a := range big[:k] {
		spread = append(spread, a)
		if i%2 == 1 {
			spread = append(spread, strings.Repeat("1, ", 2*len(ps)))
		}
	}
	if rep := Check([]byte(addedFile("x.py", []string{strings.Join(spread, ", ")})), ps); rep.Contaminated {
		t.Errorf("spread answers flagged: %+v", rep.Findings)
	}
}

// Check may run concurrently, with different problem sets.
func TestConcurrentCheck(t *testing.T) {
	ps := standInProblems()
	other := ps[10:20]
	patch := []byte(addedFile("x", []string{ps[12].Statement, ps[2].Statement}))
	done := make(chan Report, 8)
	for i := 0; i < 8; i++ {
		go func(i int) {
			if i%2 == 0 {
				done <- Check(patch, ps)
			} else {
				done <- Check(patch, other)
			}
		}(i)
	}
	for i := 0; i < 8; i++ {
		rep := <-done
		switch len(rep.Findings) {
		case 2: // the full set: problems 3 and 13
			if rep.Findings[0].Problem != "3" || rep.Findings[1].Problem != "13" {
				t.Errorf("%+v", rep.Findings)
			}
		case 1: // the subset: problem 13 only
			if rep.Findings[0].Problem != "13" {
				t.Errorf("%+v", rep.Findings)
			}
		default:
			t.Errorf("%+v", rep.Findings)
		}
	}
}

// A problem repeated many times is one finding with at most 20 lines.
func TestRepeatedProblem(t *testing.T) {
	ps := standInProblems()
	var lines []string
	for i := 0; i < 500; i++ {
		lines = append(lines, jsonRow("question", ps[4].Statement))
	}
	rep := Check([]byte(addedFile("x.jsonl", lines)), ps)
	if len(rep.Findings) != 1 || rep.Findings[0].Problem != "5" || len(rep.Findings[0].Lines) != maxLines || rep.Findings[0].Lines[0] != patchLine(0) {
		t.Errorf("%+v", rep.Findings)
	}
}
