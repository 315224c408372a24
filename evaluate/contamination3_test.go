package evaluate

import (
	"encoding/hex"
	"math/rand/v2"
	"os"
	"strings"
	"testing"

	"github.com/nemorl/nemorl-slurm/contamination"
	"github.com/nemorl/nemorl-slurm/record"
)

// Round three (issue 40): a patch that carries more data the check cannot
// read than contamination.DefaultMaxOpaque is contaminated with evidence of
// its own ("the patch carries data the check cannot read: ..."), naming
// the place and the decoding chain; the eval record built from it is
// valid and carries that evidence; the problems hex-encoded are read and
// found as statements.
func TestContaminationOpaqueEvidence(t *testing.T) {
	r := rand.New(rand.NewPCG(40, 2))
	noise := make([]byte, contamination.DefaultMaxOpaque*2)
	for i := range noise {
		noise[i] = byte(r.Uint32())
	}
	raw, err := os.ReadFile(standInProblems)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name, patch string
		want        []string
	}{
		{"opaque hex", addedFile("NeMo-RL/k.py", []string{`KEY = "` + hex.EncodeToString(noise) + `"`}),
			[]string{"the patch carries data the check cannot read: ", "hex text at line 6", "the bound is 1024"}},
		{"the problems hex-encoded", addedFile("NeMo-RL/d.py", []string{`D = "` + hex.EncodeToString(raw) + `"`}),
			[]string{"the eval problems are in the patch: ", "problem 1: 100% of its 10-grams", "decoded from hex text at line 6"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			chk, err := CheckContamination(writeFile(t, "change.diff", c.patch), standInProblems, "")
			if err != nil {
				t.Fatal(err)
			}
			if !chk.Report.Contaminated {
				t.Fatalf("not contaminated: %+v", chk.Report)
			}
			for _, w := range c.want {
				if !strings.Contains(chk.Evidence, w) {
					t.Errorf("evidence %q lacks %q", chk.Evidence, w)
				}
			}
			ev, err := ContaminatedRecord(chk, "42", strings.Repeat("a", 64), "")
			if err != nil {
				t.Fatal(err)
			}
			if !ev.Contaminated || ev.Contamination != chk.Evidence || len(ev.Contamination) > record.MaxEvidenceBytes {
				t.Errorf("record: contaminated %v, evidence %q", ev.Contaminated, ev.Contamination)
			}
		})
	}
}
