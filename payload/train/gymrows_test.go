package train

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
)

func TestGymRows(t *testing.T) {
	in := `{"input": "What is 1+1?", "output": "2"}
{"output": "\\frac{1}{2}", "input": "Half of 1 <b>&</b>?", "extra": [1, 2]}
{"input": "Ünïcödé π", "output": "3.14"}`
	var out bytes.Buffer
	n, err := GymRows(strings.NewReader(in), &out)
	if err != nil || n != 3 {
		t.Fatalf("n=%d err=%v", n, err)
	}
	want := `{"agent_ref":{"type":"responses_api_agents","name":"math_with_judge_simple_agent"},"question":"What is 1+1?","expected_answer":"2","responses_create_params":{"input":[{"role":"user","content":"Solve the following math problem. Work step by step and put your final answer inside \\boxed{}.\n\nWhat is 1+1?"}]}}
{"agent_ref":{"type":"responses_api_agents","name":"math_with_judge_simple_agent"},"question":"Half of 1 <b>&</b>?","expected_answer":"\\frac{1}{2}","responses_create_params":{"input":[{"role":"user","content":"Solve the following math problem. Work step by step and put your final answer inside \\boxed{}.\n\nHalf of 1 <b>&</b>?"}]}}
{"agent_ref":{"type":"responses_api_agents","name":"math_with_judge_simple_agent"},"question":"Ünïcödé π","expected_answer":"3.14","responses_create_params":{"input":[{"role":"user","content":"Solve the following math problem. Work step by step and put your final answer inside \\boxed{}.\n\nÜnïcödé π"}]}}
`
	if out.String() != want {
		t.Errorf("got\n%s\nwant\n%s", out.String(), want)
	}
	// The same rows as the reference builds them, compared as JSON values
	// (json.dumps escapes non-ASCII; the values are equal).
	ref := `{"agent_ref": {"type": "responses_api_agents", "name": "math_with_judge_simple_agent"}, "question": "What is 1+1?", "expected_answer": "2", "responses_create_params": {"input": [{"role": "user", "content": "Solve the following math problem. Work step by step and put your final answer inside \\boxed{}.\n\nWhat is 1+1?"}]}}`
	var a, b any
	if err := json.Unmarshal([]byte(ref), &a); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal([]byte(strings.SplitN(out.String(), "\n", 2)[0]), &b); err != nil {
		t.Fatal(err)
	}
	if ja, _ := json.Marshal(a); string(ja) != mustJSON(t, b) {
		t.Errorf("row differs from the reference's:\n%s\n%s", ja, mustJSON(t, b))
	}
}

func mustJSON(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestGymRowsTrailingNewlineAndCRLF(t *testing.T) {
	for _, in := range []string{
		"{\"input\": \"a\", \"output\": \"1\"}\n",
		"{\"input\": \"a\", \"output\": \"1\"}\r\n",
		"{\"input\": \"a\", \"output\": \"1\"}",
	} {
		var out bytes.Buffer
		if n, err := GymRows(strings.NewReader(in), &out); err != nil || n != 1 {
			t.Errorf("%q: n=%d err=%v", in, n, err)
		}
	}
}

func TestGymRowsRejects(t *testing.T) {
	good := `{"input": "p", "output": "a"}` + "\n"
	for name, c := range map[string]struct {
		in, want string
	}{
		"empty input":      {"", "no rows"},
		"blank line":       {good + "\n" + good, "line 2: blank line"},
		"final blank line": {good + "\n", "line 2: blank line"},
		"spaces line":      {good + "   \n", "line 2: blank line"},
		"no input":         {good + `{"output": "a"}`, `line 2: no "input"`},
		"no output":        {good + good + `{"input": "p"}`, `line 3: no "output"`},
		"old field names":  {`{"problem": "p", "answer": "a"}`, `line 1: no "input"`},
		"case differs":     {`{"Input": "p", "output": "a"}`, `line 1: no "input"`},
		"null input":       {`{"input": null, "output": "a"}`, `line 1: "input" (the problem) is not a string`},
		"number output":    {`{"input": "p", "output": 42}`, `line 1: "output" (the answer) is not a string`},
		"blank problem":    {`{"input": " \n", "output": "a"}`, `line 1: "input" (the problem) is blank`},
		"empty answer":     {`{"input": "p", "output": ""}`, `line 1: "output" (the answer) is blank`},
		"array":            {`[1]`, "line 1: not a JSON object"},
		"null row":         {`null`, "line 1: not a JSON object"},
		"bad json":         {`{"input": "p", "output": "a"`, "line 1: not a JSON object"},
		"two objects":      {`{"input": "p", "output": "a"} {}`, "line 1: not a JSON object"},
		"bad utf8":         {"{\"input\": \"p\xff\", \"output\": \"a\"}", "line 1: not valid UTF-8"},
	} {
		var out bytes.Buffer
		_, err := GymRows(strings.NewReader(c.in), &out)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: got %v, want an error containing %q", name, err, c.want)
		}
	}
}

func TestGymRowsDuplicateKeyLastWins(t *testing.T) {
	var out bytes.Buffer
	if _, err := GymRows(strings.NewReader(`{"input": "first", "input": "second", "output": "a"}`), &out); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), `"question":"second"`) {
		t.Errorf("got %s", out.String())
	}
}
