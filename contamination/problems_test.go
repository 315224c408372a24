package contamination

import (
	"strings"
	"testing"
)

func TestLoadProblems(t *testing.T) {
	in := "\xef\xbb\xbf{\"question\": \"What is $1+1$?\", \"expected_answer\": \"2\", \"id\": 9}\r\n" +
		`{"question": "Find $n$.", "expected_answer": 70}` + "\n" +
		`{"question": "Third", "expected_answer": "070"}`
	ps, err := LoadProblems(strings.NewReader(in))
	if err != nil {
		t.Fatal(err)
	}
	want := []Problem{{"1", "What is $1+1$?", "2"}, {"2", "Find $n$.", "70"}, {"3", "Third", "070"}}
	if len(ps) != len(want) {
		t.Fatalf("%+v", ps)
	}
	for i := range want {
		if ps[i] != want[i] {
			t.Errorf("row %d: %+v, want %+v", i, ps[i], want[i])
		}
	}
	if answerValue(ps[2].Answer) != 70 {
		t.Error("070 is 70")
	}
}

func TestLoadProblemsErrors(t *testing.T) {
	row := `{"question": "q1", "expected_answer": "1"}`
	cases := map[string]string{
		"":                                       "no problems",
		row + "\n\n":                             "line 2: empty line",
		row + "\n   \n" + row:                    "line 2: empty line",
		"\n" + row:                               "line 1: empty line",
		row + "\n" + row:                         "line 2: question repeats line 1",
		row + "\n{":                              "line 2:",
		`["q"]`:                                  "line 1:",
		`null`:                                   "line 1: not a JSON object",
		`{"expected_answer":1}`:                  `line 1: no "question"`,
		`{"question":"q"}`:                       `line 1: no "expected_answer"`,
		`{"question":3,"expected_answer":1}`:     `line 1: "question" is not a string`,
		`{"question":" ","expected_answer":1}`:   `line 1: empty "question"`,
		`{"question":"q","expected_answer":[1]}`: `line 1: "expected_answer"`,
		row + "\n" + `{"question":"q2"} trailing`: "line 2:",
	}
	for in, want := range cases {
		_, err := LoadProblems(strings.NewReader(in))
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("LoadProblems(%q) error %v, want %q", in, err, want)
		}
	}
}

func TestAnswerValue(t *testing.T) {
	for in, want := range map[string]int{"70": 70, " 070 ": 70, "0": 0, "70.0": 70, "70.5": noNumber, "-3": noNumber, "": noNumber, "x": noNumber, "1234567": noNumber} {
		if got := answerValue(in); got != want {
			t.Errorf("answerValue(%q) = %d, want %d", in, got, want)
		}
	}
}
