package evaluate

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/nemorl/nemorl-slurm/contamination"
	"github.com/nemorl/nemorl-slurm/record"
	"github.com/nemorl/nemorl-slurm/stages"
)

// standInProblems is the lab's generated stand-in problem set (never real
// AIME25 text).
const standInProblems = "../lab/stand-ins/aime25-stand-in.jsonl"

// addedFile is a git "new file" patch of lines.
func addedFile(name string, lines []string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "diff --git a/%s b/%s\nnew file mode 100644\n--- /dev/null\n+++ b/%s\n@@ -0,0 +1,%d @@\n", name, name, name, len(lines))
	for _, l := range lines {
		b.WriteString("+" + l + "\n")
	}
	return b.String()
}

func writeFile(t *testing.T, name, data string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte(data), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// CheckContamination binds what it read: the patch's and the problems'
// sha256 and size; a clean patch has no evidence, the problem set added as
// a data file is contaminated with evidence naming problems and lines.
func TestCheckContamination(t *testing.T) {
	raw, err := os.ReadFile(standInProblems)
	if err != nil {
		t.Fatal(err)
	}
	rows := strings.Split(strings.TrimSuffix(string(raw), "\n"), "\n")
	clean := "diff --git a/recipe.yaml b/recipe.yaml\n--- a/recipe.yaml\n+++ b/recipe.yaml\n@@ -1 +1 @@\n-lr: 5.0e-6\n+lr: 3.0e-6\n"
	for _, c := range []struct {
		name, patch string
		dirty       bool
		evidence    []string
	}{
		{"clean", clean, false, nil},
		{"empty", "", false, nil},
		{"the problem set as data/train.jsonl", clean + addedFile("data/train.jsonl", rows), true,
			[]string{"the eval problems are in the patch: ", "problem 1: 100% of its 10-grams", "in added line 12 of the patch", "problem 30:"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			p := writeFile(t, "change.diff", c.patch)
			chk, err := CheckContamination(p, standInProblems, "")
			if err != nil {
				t.Fatal(err)
			}
			if chk.PatchSHA256 != sha256Hex([]byte(c.patch)) || chk.PatchBytes != int64(len(c.patch)) || chk.ProblemsSHA256 != sha256Hex(raw) || chk.Problems != 30 {
				t.Errorf("check binds patch %s (%d bytes), problems %s (%d): not what was read", chk.PatchSHA256, chk.PatchBytes, chk.ProblemsSHA256, chk.Problems)
			}
			if chk.Report.Contaminated != c.dirty || (chk.Evidence != "") != c.dirty {
				t.Fatalf("contaminated %v, evidence %q; want %v", chk.Report.Contaminated, chk.Evidence, c.dirty)
			}
			for _, w := range c.evidence {
				if !strings.Contains(chk.Evidence, w) {
					t.Errorf("evidence %q lacks %q", chk.Evidence, w)
				}
			}
			if len(chk.Evidence) > record.MaxEvidenceBytes {
				t.Errorf("evidence of %d bytes", len(chk.Evidence))
			}
		})
	}
}

// The inputs are read as regular files within their bounds, and the
// errors name the file.
func TestCheckContaminationInputs(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	big := filepath.Join(dir, "big.diff")
	if err := os.WriteFile(big, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(big, stages.MaxPatchBytes+1); err != nil {
		t.Fatal(err)
	}
	badRows := writeFile(t, "problems.jsonl", "{\"question\": \"q\", \"expected_answer\": \"1\"}\nnot json\n")
	for _, c := range []struct{ name, patch, problems, want string }{
		{"missing patch", filepath.Join(dir, "none.diff"), standInProblems, "patch: open "},
		{"patch a directory", dir, standInProblems, "not a regular file"},
		{"patch over the bound", big, standInProblems, fmt.Sprintf("more than %d bytes", stages.MaxPatchBytes)},
		{"problems a FIFO", writeFile(t, "p.diff", ""), fifo, "problems: " + fifo + ": not a regular file"},
		{"problems malformed", writeFile(t, "p.diff", ""), badRows, "problems " + badRows + ": line 2"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := CheckContamination(c.patch, c.problems, "")
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("err %v, want one containing %q", err, c.want)
			}
		})
	}
}

// Evidence fits the record however many findings there are, on one line.
func TestEvidenceBound(t *testing.T) {
	var rep contamination.Report
	rep.Contaminated = true
	for i := range 200 {
		rep.Findings = append(rep.Findings, contamination.Finding{Kind: contamination.KindStatement, Problem: fmt.Sprint(i),
			Detail: fmt.Sprintf("problem %d: 100%% of its 10-grams (longest run 60 of its 60 words) in added line %d of the patch\n", i, i)})
	}
	ev := Evidence(rep)
	if len(ev) > record.MaxEvidenceBytes || !strings.HasSuffix(ev, "more findings") || strings.ContainsAny(ev, "\n\r") {
		t.Fatalf("evidence of %d bytes ending %q", len(ev), ev[max(0, len(ev)-40):])
	}
	if Evidence(contamination.Report{}) != "" {
		t.Error("evidence for a clean report")
	}
}

// The report round-trips through its file; a report that contradicts
// itself, or names no hashes, is refused.
func TestLoadContaminationCheck(t *testing.T) {
	p := writeFile(t, "change.diff", addedFile("data/x.jsonl", strings.Split(strings.TrimSpace(mustRead(t, standInProblems)), "\n")))
	chk, err := CheckContamination(p, standInProblems, "")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := json.Marshal(chk)
	got, err := LoadContaminationCheck(writeFile(t, "r.json", string(b)))
	if err != nil || got.PatchSHA256 != chk.PatchSHA256 || got.Evidence != chk.Evidence || !got.Report.Contaminated {
		t.Fatalf("round trip: %+v, %v", got, err)
	}
	for _, c := range []struct{ name, doc, want string }{
		{"no hashes", `{"evidence": ""}`, "64 lowercase hex"},
		{"evidence without contamination", strings.Replace(string(b), `"contaminated":true`, `"contaminated":false`, 1), "contaminated is false but the evidence is"},
		{"unknown field", strings.Replace(string(b), `{"patch_sha256"`, `{"bonus":1,"patch_sha256"`, 1), "unknown field"},
		{"not JSON", "nope", "invalid character"},
	} {
		t.Run(c.name, func(t *testing.T) {
			if _, err := LoadContaminationCheck(writeFile(t, "r.json", c.doc)); err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("err %v, want %q", err, c.want)
			}
		})
	}
}

// A contaminated patch's record: reward 0, no rollouts, the evidence; it
// formats and scans back; Score refuses a contaminated check.
func TestContaminatedRecord(t *testing.T) {
	p := writeFile(t, "change.diff", addedFile("data/x.jsonl", strings.Split(strings.TrimSpace(mustRead(t, standInProblems)), "\n")))
	chk, err := CheckContamination(p, standInProblems, "")
	if err != nil {
		t.Fatal(err)
	}
	ev, err := ContaminatedRecord(chk, "777", testWeights, "")
	if err != nil {
		t.Fatal(err)
	}
	if !ev.Contaminated || ev.Reward != 0 || ev.Correct != 0 || ev.RolloutsSHA256 != sha256Hex(nil) || ev.PatchSHA256 != chk.PatchSHA256 || ev.Contamination != chk.Evidence {
		t.Fatalf("record %+v", ev)
	}
	line, err := record.Format(&ev)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := record.Scan(record.StageEval, []byte(line+"\n")); err != nil {
		t.Fatal(err)
	}
	opts := testOptions()
	opts.Contamination = chk
	if _, err := Score(strings.NewReader(""), nil, opts); err == nil || !strings.Contains(err.Error(), "contaminated") {
		t.Errorf("Score of a contaminated patch: %v", err)
	}
	clean := chk
	clean.Report.Contaminated, clean.Evidence = false, ""
	if _, err := ContaminatedRecord(clean, "777", testWeights, ""); err == nil {
		t.Error("a contaminated record for a clean patch")
	}
}

func mustRead(t *testing.T, p string) string {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// FuzzLoadContaminationCheck: whatever the report file holds, the loader
// returns a check whose hashes are hex and whose evidence agrees with its
// verdict and fits the record, or an error; never a panic.
func FuzzLoadContaminationCheck(f *testing.F) {
	f.Add([]byte(`{"patch_sha256":"` + strings.Repeat("a", 64) + `","patch_bytes":1,"problems_sha256":"` + strings.Repeat("b", 64) + `","problems":30,"evidence":"","report":{"contaminated":false,"added_lines":1,"ngram":10,"threshold":0.6}}`))
	f.Add([]byte(`{"patch_sha256":"` + strings.Repeat("a", 64) + `","problems_sha256":"` + strings.Repeat("b", 64) + `","evidence":"problem 1","report":{"contaminated":true,"findings":[{"kind":"statement","problem":"1","lines":[3],"overlap":1,"detail":"x"}]}}`))
	f.Add([]byte(`{}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		p := filepath.Join(t.TempDir(), "r.json")
		if err := os.WriteFile(p, data, 0o600); err != nil {
			t.Fatal(err)
		}
		c, err := LoadContaminationCheck(p)
		if err != nil {
			return
		}
		if !record.IsSHA256Hex(c.PatchSHA256) || !record.IsSHA256Hex(c.ProblemsSHA256) || c.Report.Contaminated != (c.Evidence != "") || len(c.Evidence) > record.MaxEvidenceBytes {
			t.Fatalf("accepted %+v", c)
		}
	})
}
