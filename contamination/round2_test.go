package contamination

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// Round two (issue 31): binary sections, the eval set named, answer keys
// with metadata, and the normalisation gaps.

// gitWork is a scratch git work tree driven by the real git.
type gitWork struct {
	t      *testing.T
	dir    string
	copies *bool // diff detects copies (round three)
}

func newGitWork(t *testing.T) *gitWork {
	t.Helper()
	if _, err := exec.LookPath("git"); err != nil {
		t.Fatalf("git is needed to build and apply binary patches: %v", err)
	}
	g := &gitWork{t: t, dir: t.TempDir()}
	g.git("init", "-q", ".")
	return g
}

func (g *gitWork) git(args ...string) []byte {
	g.t.Helper()
	cmd := exec.Command("git", append([]string{"-c", "user.name=t", "-c", "user.email=t@example.invalid", "-c", "core.autocrlf=false"}, args...)...)
	cmd.Dir = g.dir
	cmd.Env = append(os.Environ(), "GIT_CONFIG_NOSYSTEM=1", "HOME="+g.dir, "GIT_CONFIG_GLOBAL=/dev/null")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		g.t.Fatalf("git %s: %v: %s", strings.Join(args, " "), err, stderr.String())
	}
	return out
}

func (g *gitWork) write(name string, b []byte) {
	g.t.Helper()
	p := filepath.Join(g.dir, name)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		g.t.Fatal(err)
	}
	if err := os.WriteFile(p, b, 0o644); err != nil {
		g.t.Fatal(err)
	}
}

// problemsJSONL is the problems as the eval set's JSON Lines.
func problemsJSONL(ps []Problem) []byte {
	var b bytes.Buffer
	for _, p := range ps {
		row, _ := json.Marshal(map[string]string{"question": p.Statement, "expected_answer": p.Answer})
		b.Write(row)
		b.WriteByte('\n')
	}
	return b.Bytes()
}

// wantStatements fails unless every problem has a statement finding.
func wantStatements(t *testing.T, label string, rep Report, ps []Problem) {
	t.Helper()
	got := map[string]bool{}
	for _, f := range rep.Findings {
		if f.Kind == KindStatement {
			got[f.Problem] = true
		}
	}
	if len(got) != len(ps) {
		t.Errorf("%s: %d of %d statements found: %+v", label, len(got), len(ps), rep.Findings)
	}
}

func findingOf(rep Report, k Kind) *Finding {
	for i := range rep.Findings {
		if rep.Findings[i].Kind == k {
			return &rep.Findings[i]
		}
	}
	return nil
}

// TestBinaryPatchOfProblems: the problems written as a GIT binary patch
// (git diff --binary of a file git takes for binary), as a literal and as a
// delta against a pristine file. git apply writes the exact JSONL; the
// checker decodes the same bytes and finds every statement.
func TestBinaryPatchOfProblems(t *testing.T) {
	ps := standInProblems()
	data := problemsJSONL(ps)
	r := rand.New(rand.NewPCG(31, 1))
	pristineBin := make([]byte, 200<<10)
	for i := range pristineBin {
		pristineBin[i] = byte(r.IntN(256))
	}
	pristineBin[0] = 0 // binary to git
	g := newGitWork(t)
	g.write("NeMo-RL/assets/table.bin", pristineBin)
	g.write("recipe.yaml", []byte("grpo: {}\n"))
	g.git("add", "-A")
	g.git("commit", "-q", "-m", "pristine")
	// git takes .jsonl for binary (an attribute outside the diff)
	g.write(".git/info/attributes", []byte("*.jsonl -diff\n"))
	g.write("NeMo-RL/data/extra_math.jsonl", data)
	// and a delta: the pristine binary with the problems spliced in
	modified := append(append(append([]byte(nil), pristineBin[:100<<10]...), data...), pristineBin[100<<10:]...)
	g.write("NeMo-RL/assets/table.bin", modified)
	g.git("add", "-A")
	patch := g.git("diff", "--cached", "--binary")
	if !bytes.Contains(patch, []byte("GIT binary patch\nliteral ")) || !bytes.Contains(patch, []byte("GIT binary patch\ndelta ")) {
		t.Fatalf("git wrote no literal and delta sections:\n%.600s", patch)
	}
	if bytes.Contains(patch, []byte("Find")) || bytes.Contains(patch, []byte(ps[0].Statement[:20])) {
		t.Fatalf("the problems' text is in the patch in the clear")
	}

	// git apply, on a fresh copy of the pristine tree, writes both files
	h := newGitWork(t)
	h.write("NeMo-RL/assets/table.bin", pristineBin)
	h.write("recipe.yaml", []byte("grpo: {}\n"))
	pf := filepath.Join(t.TempDir(), "change.diff")
	if err := os.WriteFile(pf, patch, 0o600); err != nil {
		t.Fatal(err)
	}
	h.git("apply", "--check", pf)
	h.git("apply", pf)
	for name, want := range map[string][]byte{"NeMo-RL/data/extra_math.jsonl": data, "NeMo-RL/assets/table.bin": modified} {
		got, err := os.ReadFile(filepath.Join(h.dir, name))
		if err != nil || !bytes.Equal(got, want) {
			t.Fatalf("git apply wrote %s: %d bytes (%v), want %d", name, len(got), err, len(want))
		}
	}

	pristine := func(p string) ([]byte, error) {
		if p == "NeMo-RL/assets/table.bin" {
			return pristineBin, nil
		}
		return nil, os.ErrNotExist
	}
	rep := CheckWith(patch, ps, Options{Pristine: pristine})
	if rep.BinarySections != 2 || rep.DecodedBytes < int64(len(data)+len(modified)) {
		t.Fatalf("sections %d, decoded %d bytes", rep.BinarySections, rep.DecodedBytes)
	}
	if f := findingOf(rep, KindBinary); f != nil {
		t.Fatalf("refused: %s", f.Detail)
	}
	wantStatements(t, "literal and delta", rep, ps)
	if f := findingOf(rep, KindStatement); !strings.Contains(f.Detail, `decoded from the GIT binary patch of "NeMo-RL/`) {
		t.Errorf("detail does not name the binary section: %s", f.Detail)
	}

	// only the delta: its statements found through the pristine base
	var deltaOnly bytes.Buffer
	for _, sec := range bytes.SplitAfter(patch, []byte("diff --git ")) {
		if bytes.Contains(sec, []byte("table.bin")) {
			deltaOnly.WriteString("diff --git ")
			deltaOnly.Write(bytes.TrimSuffix(sec, []byte("diff --git ")))
		}
	}
	rep = CheckWith(deltaOnly.Bytes(), ps, Options{Pristine: pristine})
	wantStatements(t, "delta", rep, ps)
	// without the base the delta is refused, never passed
	rep = Check(deltaOnly.Bytes(), ps)
	if f := findingOf(rep, KindBinary); f == nil || !rep.Contaminated || !strings.Contains(f.Detail, "no pristine copy") {
		t.Errorf("a delta without its base: %+v", rep.Findings)
	}
	// a base that is not the one the index line names is refused
	other := append([]byte(nil), pristineBin...)
	other[5] ^= 1
	rep = CheckWith(deltaOnly.Bytes(), ps, Options{Pristine: func(string) ([]byte, error) { return other, nil }})
	if f := findingOf(rep, KindBinary); f == nil || !strings.Contains(f.Detail, "not the") {
		t.Errorf("a delta against another base: %+v", rep.Findings)
	}
	// beyond the decoding bound: refused
	rep = CheckWith(patch, ps, Options{Pristine: pristine, MaxDecoded: int64(len(data)) / 2})
	if f := findingOf(rep, KindBinary); f == nil || !rep.Contaminated {
		t.Errorf("over the bound: %+v", rep.Findings)
	}
}

// TestBinaryOrdinary: binary sections of ordinary files decode and are
// clean; a corrupt or truncated one is refused; text after a binary
// section is read again (a traditional hunk there is applied by git).
func TestBinaryOrdinary(t *testing.T) {
	ps := standInProblems()
	g := newGitWork(t)
	r := rand.New(rand.NewPCG(31, 2))
	img := make([]byte, 30000)
	for i := range img {
		img[i] = byte(r.IntN(256))
	}
	g.write("NeMo-RL/docs/logo.png", img)
	g.write("NeMo-RL/x.txt", []byte("a\n"))
	g.git("add", "-A")
	g.git("commit", "-q", "-m", "pristine")
	img2 := append([]byte(nil), img...)
	copy(img2[1000:], []byte("a small change"))
	g.write("NeMo-RL/docs/logo.png", img2)
	g.write("NeMo-RL/docs/new.bin", append([]byte{0}, []byte(strings.Join(ordinaryCode(r, 200), "\n"))...))
	g.git("add", "-A")
	patch := g.git("diff", "--cached", "--binary")
	rep := CheckWith(patch, ps, Options{Pristine: func(p string) ([]byte, error) {
		if p == "NeMo-RL/docs/logo.png" {
			return img, nil
		}
		return nil, os.ErrNotExist
	}})
	if rep.Contaminated || rep.BinarySections != 2 || rep.DecodedBytes == 0 {
		t.Fatalf("ordinary binary patch: sections %d, decoded %d, findings %+v", rep.BinarySections, rep.DecodedBytes, rep.Findings)
	}

	i := bytes.Index(patch, []byte("GIT binary patch\n"))
	j := bytes.IndexByte(patch[i+len("GIT binary patch\nliteral 1\n")+3:], '\n') + i + len("GIT binary patch\nliteral 1\n") + 3
	corrupt := append(append(append([]byte(nil), patch[:j-3]...), []byte("\x01\x02")...), patch[j:]...)
	for name, p := range map[string][]byte{
		"corrupt":   corrupt,
		"truncated": patch[:i+len("GIT binary patch\n")+20],
		"no hunk":   append(append([]byte(nil), patch[:i]...), []byte("GIT binary patch\nnot a hunk\n")...),
	} {
		rep := Check(p, ps)
		if f := findingOf(rep, KindBinary); f == nil || !rep.Contaminated {
			t.Errorf("%s binary section: not refused: %+v", name, rep.Findings)
		}
	}

	// a traditional patch after a binary section is git apply's too
	tail := "--- a/NeMo-RL/x.txt\n+++ b/NeMo-RL/x.txt\n@@ -1 +1,2 @@\n a\n+" + ps[3].Statement + "\n"
	rep = CheckWith(append(append([]byte(nil), patch...), tail...), ps, Options{Pristine: func(string) ([]byte, error) { return img, nil }})
	if f := findingOf(rep, KindStatement); f == nil || f.Problem != ps[3].ID {
		t.Errorf("the hunk after a binary section was not read: %+v", rep.Findings)
	}
}

// TestEvalSetNamed: an added line naming AIME 2025 (a dataset name, a
// Hugging Face id, a file) is a finding with the line quoted; other years,
// other words and removed or context lines are not.
func TestEvalSetNamed(t *testing.T) {
	ps := standInProblems()
	for _, l := range []string{
		"  dataset_name: AIME2025",
		`data = load_dataset("opencompass/AIME2025", split="test")`,
		`ds = load_dataset('MathArena/aime_2025')`,
		`HF_ID = "yentinglin/aime_2025"`,
		`name: math-ai/aime25`,
		`path: data/aime-25.jsonl`,
		`"dataset": "AIME_2025_I"`,
		`TRAIN = "AIME'25"`,
		`    "AIME2025": partial(AIMEDataset, variant="2025"),`,
		`  - dataset_name: nemo_rl.data.datasets.response_datasets.aime25.AIME2025Dataset`,
		`'data.validation=[{dataset_name: AIME2025, repeat: 4}]'`,
		`ds = load_dataset("MathArena/aime_2025_I")`,
		`jsonl_fpath: benchmarks/aime25/data/aime25_benchmark.jsonl`,
		`x = AIMEDataset(variant="2025")`,
		"  dataset_name: nemo_rl.data.datasets.response_datasets.aime.AIMEDataset\n  split: test\n  repeat: 16\n  variant: \"2025\"",
	} {
		block := strings.Split(l, "\n") // the year on the block's last line
		rep := Check([]byte(addedFile("examples/configs/grpo.yaml", append(append([]string{"grpo:"}, block...), "  lr: 1e-6"))), ps)
		f := findingOf(rep, KindName)
		if f == nil || !rep.Contaminated {
			t.Errorf("%q: not flagged: %+v", l, rep.Findings)
			continue
		}
		at, last := patchLine(len(block)), block[len(block)-1]
		if len(block) > 1 {
			// round three: the block rule names both lines of the block
			if len(f.Lines) != 2 || f.Lines[0] != patchLine(1) || f.Lines[1] != at || !strings.Contains(f.Detail, "one config block") {
				t.Errorf("%q: finding %+v", l, f)
			}
			continue
		}
		if len(f.Lines) != 1 || f.Lines[0] != at || !strings.Contains(f.Detail, fmt.Sprintf("added line %d", at)) || !strings.Contains(f.Detail, strconv.QuoteToASCII(last)) {
			t.Errorf("%q: finding %+v", l, f)
		}
	}
	for _, l := range []string{
		"dataset_name: AIME2024", "aime_2024", "AIMO 2025", "aimed 2025 targets", "aime250", "AIME 2.5",
		"year: 2025", "the 2025 release of NeMo RL", "we aimed 2025 units", "AIMEDataset(variant=\"2024\")",
		"HuggingFaceH4/aime_2024", "BytedTsinghua-SIA/AIME-2024",
		"AIME 2024 accuracy was 25 percent", "aime24: 25 problems",
		// round three: comments and prose name nothing a loader reads
		"# evaluate on AIME 2025 I and II", "The 2025 AIME II problems",
		"# problems of the American Invitational Mathematics Examination 2025",
		"# AIME 2025 is held out for evaluation", "dataset_name: AIME2024  # not AIME2025: held out",
	} {
		if rep := Check([]byte(addedFile("x.yaml", []string{l})), ps); rep.Contaminated {
			t.Errorf("%q: flagged: %+v", l, rep.Findings)
		}
	}
	// removed and context lines name nothing the patch adds
	p := "diff --git a/x.yaml b/x.yaml\n--- a/x.yaml\n+++ b/x.yaml\n@@ -1,3 +1,3 @@\n eval: aime2025\n-dataset_name: AIME2025\n+dataset_name: OpenMathInstruct-2\n"
	if rep := Check([]byte(p), ps); rep.Contaminated {
		t.Errorf("removed/context lines: %+v", rep.Findings)
	}
}

// answerKeyRows renders the answers as records with metadata in several
// forms; each form holds 4 to 6 other numbers per answer.
func answerKeyRows(ps []Problem, answers []string) map[string][]string {
	forms := map[string][]string{}
	for i, p := range ps {
		a := answers[i]
		exam := "I"
		if i >= 15 {
			exam = "II"
		}
		idx := i%15 + 1
		forms["jsonl"] = append(forms["jsonl"], fmt.Sprintf(`{"year": 2025, "exam": "%s", "idx": %d, "points": %d, "time_min": 180, "answer": %s, "id": "%s"}`, exam, idx, 10+idx, a, p.ID))
		forms["csv"] = append(forms["csv"], fmt.Sprintf("2025,%s,%d,%d,180,%s", exam, idx, 10+idx, a))
		forms["yaml"] = append(forms["yaml"], "- year: 2025", "  exam: "+exam, fmt.Sprintf("  idx: %d", idx), fmt.Sprintf("  points: %d", 10+idx), "  time_min: 180", "  answer: "+a)
		forms["py-tuples"] = append(forms["py-tuples"], fmt.Sprintf("    (2025, %q, %d, %d, 180, %s, 0.5),", exam, idx, 10+idx, a))
		forms["json-pretty"] = append(forms["json-pretty"], "  {", `    "year": 2025,`, fmt.Sprintf(`    "idx": %d,`, idx), fmt.Sprintf(`    "points": %d,`, 10+idx), `    "time_min": 180,`, `    "answer": `+a+",", `    "weight": 3`, "  },")
	}
	forms["csv"] = append([]string{"year,exam,idx,points,time_min,answer"}, forms["csv"]...)
	return forms
}

// TestAnswerKeyRecords: answers as records with metadata are found by
// column; the same records with other answers, and number matrices, are
// not.
func TestAnswerKeyRecords(t *testing.T) {
	ps := standInProblems()
	var answers []string
	for _, p := range ps {
		answers = append(answers, p.Answer)
	}
	for form, lines := range answerKeyRows(ps, answers) {
		rep := Check([]byte(addedFile("data/key.txt", lines)), ps)
		f := findingOf(rep, KindAnswers)
		if f == nil {
			t.Errorf("%s: not flagged: %+v", form, rep.Findings)
			continue
		}
		t.Logf("%s: %s", form, f.Detail)
	}
	r := rand.New(rand.NewPCG(31, 3))
	var other []string
	for range ps {
		other = append(other, fmt.Sprint(r.IntN(1000)))
	}
	for form, lines := range answerKeyRows(ps, other) {
		if rep := Check([]byte(addedFile("data/key.txt", lines)), ps); rep.Contaminated {
			t.Errorf("%s with other answers: flagged: %+v", form, rep.Findings)
		}
	}
	var matrix []string
	for i := 0; i < 400; i++ {
		var row []string
		for k := 0; k < 16; k++ {
			row = append(row, fmt.Sprint(r.IntN(1000)))
		}
		matrix = append(matrix, strings.Join(row, ", "))
	}
	if rep := Check([]byte(addedFile("data/matrix.csv", matrix)), ps); rep.Contaminated {
		t.Errorf("a random matrix: flagged: %+v", rep.Findings)
	}
}

var commandRE = regexp.MustCompile(`\\([a-zA-Z]+)`)

var superscript = map[rune]rune{'0': '⁰', '1': '¹', '2': '²', '3': '³', '4': '⁴', '5': '⁵', '6': '⁶', '7': '⁷', '8': '⁸', '9': '⁹'}

// supers rewrites x^2 and x^{22} with superscript digits.
func supers(s string) string {
	re := regexp.MustCompile(`\^\{?([0-9]+)\}?`)
	return re.ReplaceAllStringFunc(s, func(m string) string {
		var b strings.Builder
		for _, c := range re.FindStringSubmatch(m)[1] {
			b.WriteRune(superscript[c])
		}
		return b.String()
	})
}

// TestNormalisationGaps: statements with their LaTeX commands in upper
// case, with backslashes written as \x5c (and its relatives), or with
// superscript digits read exactly like the originals: every n-gram found.
func TestNormalisationGaps(t *testing.T) {
	ps := standInProblems()
	transforms := map[string]func(string) string{
		"upper-commands": func(s string) string {
			return commandRE.ReplaceAllStringFunc(s, strings.ToUpper)
		},
		"x5c":      func(s string) string { return strings.ReplaceAll(s, `\`, `\x5c`) },
		"u005c":    func(s string) string { return strings.ReplaceAll(s, `\`, `\\u005C`) },
		"html-92":  func(s string) string { return strings.ReplaceAll(s, `\`, `&#92;`) },
		"supers":   supers,
		"zwsp":     func(s string) string { return strings.ReplaceAll(s, "e", "e\u200b") },
		"fullwide": func(s string) string { return strings.ReplaceAll(strings.ReplaceAll(s, "a", "ａ"), "n", "ｎ") },
	}
	latexy := 0
	for _, p := range ps {
		if strings.Contains(p.Statement, `\`) {
			latexy++
		}
	}
	if latexy < 5 {
		t.Fatalf("only %d stand-in statements hold LaTeX", latexy)
	}
	for name, tr := range transforms {
		var lines []string
		for _, p := range ps {
			lines = append(lines, `    "`+tr(strings.ReplaceAll(p.Statement, "\n", " "))+`",`)
		}
		rep := Check([]byte(addedFile("data/train.py", lines)), ps)
		wantStatements(t, name, rep, ps)
		for _, f := range rep.Findings {
			if f.Kind == KindStatement && f.Overlap < 1 {
				t.Errorf("%s: problem %s: overlap %.3f, want every n-gram", name, f.Problem, f.Overlap)
			}
		}
	}
}

// TestPairAnswerPlacement: an answer written before its half statement
// ({"answer": A, "question": ...}) makes a pair; a number on another
// problem's row is not credited to this one.
func TestPairAnswerPlacement(t *testing.T) {
	ps := standInProblems()
	var lines []string
	for _, p := range ps {
		lines = append(lines, fmt.Sprintf(`{"answer": %s, "question": %q}`, p.Answer, halfStatement(p.Statement)))
	}
	rep := Check([]byte(addedFile("data/pairs.jsonl", lines)), ps)
	pairs := 0
	for _, f := range rep.Findings {
		if f.Kind == KindPair {
			pairs++
			if i := int(f.Lines[len(f.Lines)-1]); i < patchLine(0) {
				t.Errorf("pair %s lines %v", f.Problem, f.Lines)
			}
		}
	}
	if pairs < 20 {
		t.Errorf("answer-first pairs: %d of %d found: %+v", pairs, len(ps), rep.Findings)
	}
	// problem 2's answer on problem 1's row (as a number of its text) and
	// problem 2's half statement on the next row, with no answer: no pair
	// for problem 2
	row1 := fmt.Sprintf(`{"question": %q, "note": "see %s"}`, halfStatement(ps[0].Statement), ps[1].Answer)
	row2 := fmt.Sprintf(`{"question": %q}`, halfStatement(ps[1].Statement))
	rep = Check([]byte(addedFile("data/pairs.jsonl", []string{row1, row2})), ps)
	for _, f := range rep.Findings {
		if f.Problem == ps[1].ID {
			t.Errorf("problem 2 credited with a number of problem 1's row: %s", f.Detail)
		}
	}
}
