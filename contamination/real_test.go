package contamination

import (
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
)

// The calibration against the real AIME25 problems, which are not part of
// the repository: it runs only when NEMORL_AIME25_REAL names a JSONL file of
// them (the eval's format: {"question", "expected_answer"}). It runs the
// must-catch transforms and the false-positive corpus against the real set.
// NEMORL_CONTAM_EXTRA_NEG may name a directory of further ordinary files
// (e.g. other years' problems, math training data) that must stay clean.

func realProblems(t *testing.T) []Problem {
	path := os.Getenv("NEMORL_AIME25_REAL")
	if path == "" {
		t.Skip("NEMORL_AIME25_REAL not set: no real AIME25 calibration")
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	ps, err := LoadProblems(f)
	if err != nil {
		t.Fatal(err)
	}
	return ps
}

func TestRealMustCatch(t *testing.T) {
	runMustCatch(t, realProblems(t), false)
}

func TestRealFalsePositives(t *testing.T) {
	ps := realProblems(t)
	st := runCorpus(t, ps, 120e9)
	if dir := os.Getenv("NEMORL_CONTAM_EXTRA_NEG"); dir != "" {
		// the files are a pristine tree's (NeMo RL's own sources): each is
		// read as a patch that writes it whole, with the file as its own
		// pristine copy, as the eval job has the tree
		self := Options{Pristine: func(p string) ([]byte, error) { return os.ReadFile("/" + p) }}
		extra := &fprStats{opts: self}
		var files []string
		filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
			if err == nil && d.Type().IsRegular() {
				files = append(files, p)
			}
			return nil
		})
		sort.Strings(files)
		for _, p := range files {
			data, err := os.ReadFile(p)
			if err != nil {
				continue
			}
			name := strings.TrimPrefix(p, "/")
			extra.add(t, p, filePatch(name, data), ps, false)
			st.opts = self
			st.add(t, p, filePatch(name, data), ps, false)
			st.opts = Options{}
		}
		extra.log(t, "source extra-negatives")
	}
	var seq []string
	for i := 0; i < 1000; i++ {
		seq = append(seq, strconv.Itoa(i)+",")
	}
	st.add(t, "range-table", []byte(addedFile("t.py", seq)), ps, false)
	if len(st.flagged) > 0 {
		t.Errorf("%d of %d ordinary patches flagged against the real set: %v", len(st.flagged), st.n, st.flagged)
	}
	t.Logf("real set FPR %d/%d", len(st.flagged), st.n)
}

// TestRealRoundThree: round three's encodings, foldings and readings of
// the real set (every statement found).
func TestRealRoundThree(t *testing.T) {
	ps := realProblems(t)
	roundThreeEncodings(t, ps)
	roundThreeText(t, ps)
}
