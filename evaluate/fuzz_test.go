package evaluate

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nemorl/nemorl-slurm/record"
)

// FuzzCheckWeights: whatever the file holds, CheckWeights returns a report
// or a *Rejection (never another error for a readable file, never a
// panic), and a file it accepts re-checks the same.
func FuzzCheckWeights(f *testing.F) {
	var good bytes.Buffer
	if err := writeSTTo(&good, archTensors(TinyQwen2(), "BF16", false), nil); err != nil {
		f.Fatal(err)
	}
	f.Add(good.Bytes())
	f.Add(good.Bytes()[:40])
	f.Add([]byte{8, 0, 0, 0, 0, 0, 0, 0, '{', '}', ' ', ' ', ' ', ' ', ' ', ' '})
	f.Fuzz(func(t *testing.T, data []byte) {
		p := filepath.Join(t.TempDir(), "w.safetensors")
		if err := os.WriteFile(p, data, 0o600); err != nil {
			t.Fatal(err)
		}
		rep, err := CheckWeights(p, TinyQwen2())
		if err != nil {
			var rj *Rejection
			if !errors.As(err, &rj) {
				t.Fatalf("not a rejection: %v", err)
			}
			return
		}
		if !record.IsSHA256Hex(rep.SHA256) {
			t.Fatalf("accepted with sha %q", rep.SHA256)
		}
		again, err := CheckWeights(p, TinyQwen2())
		if err != nil || again.SHA256 != rep.SHA256 {
			t.Fatalf("second check differs: %v", err)
		}
	})
}

// FuzzScore: any rollouts text gives a record that validates, or a
// rejection; never a panic.
func FuzzScore(f *testing.F) {
	rows, _ := goodRows()
	f.Add(encodeRows(f, rows), "")
	f.Add(encodeRows(f, rows[:239]), "")
	f.Add(encodeRows(f, rows), "{}\n")
	f.Add("{\"reward\": 1}\n", "")
	f.Fuzz(func(t *testing.T, rollouts, failures string) {
		var fr *strings.Reader
		if failures != "" {
			fr = strings.NewReader(failures)
		}
		var rec record.Eval
		var err error
		if fr != nil {
			rec, err = Score(strings.NewReader(rollouts), fr, testOptions())
		} else {
			rec, err = Score(strings.NewReader(rollouts), nil, testOptions())
		}
		if err != nil {
			var rj *Rejection
			if !errors.As(err, &rj) {
				t.Fatalf("not a rejection: %v", err)
			}
			return
		}
		if err := rec.Validate(); err != nil {
			t.Fatalf("accepted rollouts gave an invalid record: %v", err)
		}
	})
}

// FuzzLoadQuestions: a questions file loads to unique, non-empty
// questions, or is rejected.
func FuzzLoadQuestions(f *testing.F) {
	f.Add("{\"question\": \"a\"}\n{\"question\": \"b\"}\n")
	f.Add("{\"question\": \"a\"}\n{\"question\": \"a\"}\n")
	f.Fuzz(func(t *testing.T, in string) {
		qs, err := LoadQuestions(strings.NewReader(in))
		if err != nil {
			return
		}
		seen := map[string]bool{}
		for _, q := range qs {
			if q == "" || seen[q] {
				t.Fatalf("questions %q", qs)
			}
			seen[q] = true
		}
	})
}
