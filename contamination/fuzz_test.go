package contamination

import (
	"bytes"
	"strings"
	"testing"
)

func FuzzCheck(f *testing.F) {
	ps := standInProblems()
	f.Add([]byte(addedFile("a.txt", []string{ps[0].Statement, "Answer: " + ps[0].Answer})), "")
	f.Add([]byte("diff --git a/x b/x\n--- a/x\n+++ b/x\n@@ -1,2 +1,3 @@\n ctx\n-old\n+\\frac \\\n+mn \\u00e9\\\\\\n\n"), `Let $x=\frac12$ be [asy] draw((0,0)); [/asy] so.`)
	f.Add([]byte("GIT binary patch\nliteral 5\n+abc\n@@ -a +b @@\n+ANSWERS = [1, 2, 3]\n"), "\t\x0c\\")
	f.Add([]byte("diff --git a/a b/b\nsimilarity index 100%\nrename from a\nrename to b\n"), "")
	f.Add([]byte(addedFile("x.py", []string{`X = """`, "SGVsbG8gd29ybGQsIHRoaXMgaXMgYSBiYXNlNjQgYmxvYiB0aGF0IHJ1bnMgb3ZlciBzZXZlcmFsIGxp", "bmVzIG9mIHRleHQ=", `"""`})), "")
	f.Fuzz(func(t *testing.T, patch []byte, extra string) {
		problems := ps
		if extra != "" {
			problems = append(append([]Problem(nil), ps...), Problem{ID: "31", Statement: extra, Answer: "7"})
		}
		rep := Check(patch, problems)
		checkReport(t, rep, patch, len(problems))
	})
}

// checkReport asserts the Report invariants.
func checkReport(t *testing.T, rep Report, patch []byte, nProblems int) {
	t.Helper()
	nLines := bytes.Count(patch, []byte("\n"))
	if len(patch) > 0 && patch[len(patch)-1] != '\n' {
		nLines++
	}
	if rep.Contaminated != (len(rep.Findings) > 0) {
		t.Fatalf("Contaminated %v with %d findings", rep.Contaminated, len(rep.Findings))
	}
	if rep.AddedLines < 0 || rep.AddedLines > nLines {
		t.Fatalf("AddedLines %d of %d lines", rep.AddedLines, nLines)
	}
	if len(rep.Findings) > nProblems+2+maxLines {
		t.Fatalf("%d findings", len(rep.Findings))
	}
	if rep.DecodedBytes < 0 || rep.DecodedBytes > DefaultMaxDecoded || rep.DecodedLines < 0 || rep.BinarySections < 0 {
		t.Fatalf("decoded %d bytes in %d lines from %d sections", rep.DecodedBytes, rep.DecodedLines, rep.BinarySections)
	}
	seen := map[string]bool{}
	binary := 0
	for _, f := range rep.Findings {
		switch f.Kind {
		case KindBinary:
			binary++
			// refusals: binary sections, encoded content, copies
			if f.Problem != "" || binary > maxLines {
				t.Fatalf("refusal %d (%d binary sections), problem %q", binary, rep.BinarySections, f.Problem)
			}
		case KindAnswers, KindName:
			if f.Problem != "" {
				t.Fatalf("%s finding names problem %q", f.Kind, f.Problem)
			}
			if seen[string(f.Kind)] {
				t.Fatalf("two %s findings", f.Kind)
			}
			seen[string(f.Kind)] = true
		case KindStatement, KindPair:
			if f.Problem == "" {
				t.Fatalf("%s finding without a problem", f.Kind)
			}
			if seen["problem "+f.Problem] {
				t.Fatalf("two findings for problem %q", f.Problem)
			}
			seen["problem "+f.Problem] = true
		default:
			t.Fatalf("kind %q", f.Kind)
		}
		if !(f.Overlap >= 0 && f.Overlap <= 1) {
			t.Fatalf("overlap %v", f.Overlap)
		}
		if len(f.Lines) == 0 || len(f.Lines) > maxLines {
			t.Fatalf("%d lines", len(f.Lines))
		}
		for i, l := range f.Lines {
			if l < 1 || l > nLines || (i > 0 && f.Lines[i-1] >= l) {
				t.Fatalf("lines %v of %d", f.Lines, nLines)
			}
		}
		if f.Detail == "" || strings.Contains(f.Detail, "\n") {
			t.Fatalf("detail %q", f.Detail)
		}
	}
}

func FuzzLoadProblems(f *testing.F) {
	f.Add([]byte(`{"question": "q", "expected_answer": "1"}` + "\n"))
	f.Add([]byte("{\"question\": \"a\\u0000\", \"expected_answer\": 2}\r\n{\"question\": \"b\", \"expected_answer\": \"x\"}"))
	f.Add([]byte("\n\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		ps, err := LoadProblems(bytes.NewReader(data))
		if err != nil {
			if ps != nil {
				t.Fatal("problems with an error")
			}
			if !strings.HasPrefix(err.Error(), "line ") && err.Error() != "no problems" {
				t.Fatalf("error %q names no line", err)
			}
			return
		}
		if len(ps) == 0 {
			t.Fatal("no problems, no error")
		}
		seen := map[string]bool{}
		for i, p := range ps {
			if p.ID != strings.TrimSpace(p.ID) || p.ID == "" || p.ID != itoa(i+1) {
				t.Fatalf("row %d: ID %q", i, p.ID)
			}
			if strings.TrimSpace(p.Statement) == "" || seen[p.Statement] {
				t.Fatalf("row %d: statement %q", i, p.Statement)
			}
			seen[p.Statement] = true
		}
		Check([]byte(addedFile("x", []string{ps[0].Statement})), ps)
	})
}

func itoa(i int) string {
	var b [20]byte
	n := len(b)
	for {
		n--
		b[n] = byte('0' + i%10)
		i /= 10
		if i == 0 {
			return string(b[n:])
		}
	}
}
