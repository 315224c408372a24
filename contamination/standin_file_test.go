package contamination

import (
	"bytes"
	"encoding/json"
	"flag"
	"os"
	"testing"
)

var update = flag.Bool("update", false, "rewrite the lab's stand-in problems file")

// standInFile is the stand-in eval set as the eval image's aime25.jsonl
// rows (question, expected_answer): the lab's eval stand-in and the
// payload tests check patches against it. It is generated, never real
// AIME25 text.
const standInFile = "../lab/stand-ins/aime25-stand-in.jsonl"

// TestStandInFile: the committed file is standInProblems(), row for row,
// and LoadProblems reads it back (go test ./contamination -run
// TestStandInFile -update rewrites it).
func TestStandInFile(t *testing.T) {
	var want bytes.Buffer
	for _, p := range standInProblems() {
		b, err := json.Marshal(map[string]string{"question": p.Statement, "expected_answer": p.Answer})
		if err != nil {
			t.Fatal(err)
		}
		want.Write(append(b, '\n'))
	}
	if *update {
		if err := os.WriteFile(standInFile, want.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	got, err := os.ReadFile(standInFile)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want.Bytes()) {
		t.Fatalf("%s differs from standInProblems() (go test ./contamination -run TestStandInFile -update)", standInFile)
	}
	ps, err := LoadProblems(bytes.NewReader(got))
	if err != nil || len(ps) != 30 {
		t.Fatalf("LoadProblems: %d problems, %v", len(ps), err)
	}
	for i, p := range ps {
		if w := standInProblems()[i]; p != w {
			t.Fatalf("row %d reads back as %+v, want %+v", i+1, p, w)
		}
	}
}
