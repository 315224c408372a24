package train

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"unicode/utf8"
)

// MathPrompt is put before each problem in the user message (reference
// launch_inner.py, and the eval stage's prompt).
const MathPrompt = "Solve the following math problem. Work step by step and put your final answer inside \\boxed{}.\n\n"

// GymAgent is the NeMo Gym agent every training row is routed to.
const GymAgent = "math_with_judge_simple_agent"

type agentRef struct {
	Type string `json:"type"`
	Name string `json:"name"`
}

type message struct {
	Role    string `json:"role"`
	Content string `json:"content"`
}

type createParams struct {
	Input []message `json:"input"`
}

// gymRow is one gym_train.jsonl row, fields in the reference's order.
type gymRow struct {
	AgentRef              agentRef     `json:"agent_ref"`
	Question              string       `json:"question"`
	ExpectedAnswer        string       `json:"expected_answer"`
	ResponsesCreateParams createParams `json:"responses_create_params"`
}

// GymRows rewrites train_math.jsonl into the gym_train.jsonl rows the
// trainer reads, as the reference launch_inner.py does: each input row
// {"input": problem, "output": answer, …} becomes
//
//	{"agent_ref": {"type": "responses_api_agents", "name": "math_with_judge_simple_agent"},
//	 "question": problem, "expected_answer": answer,
//	 "responses_create_params": {"input": [{"role": "user", "content": MathPrompt + problem}]}}
//
// It returns the number of rows written. It is strict where the reference
// would crash or write a useless row: every line (up to a final newline)
// must be valid UTF-8 holding one JSON object whose "input" and "output"
// are non-blank strings (other fields are ignored); the first bad line is
// an error naming it (1-based), and an input with no rows is an error.
// The reference's str(output) also accepted numbers; prepare.py writes
// strings, so only strings are accepted here. Non-ASCII text is written as
// UTF-8 rather than \u escapes (the same JSON values).
func GymRows(in io.Reader, out io.Writer) (int, error) {
	r := bufio.NewReader(in)
	w := bufio.NewWriter(out)
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	n := 0
	for line := 1; ; line++ {
		text, err := r.ReadBytes('\n')
		if err != nil && !errors.Is(err, io.EOF) {
			return n, fmt.Errorf("train data: read line %d: %w", line, err)
		}
		if len(text) == 0 && errors.Is(err, io.EOF) {
			break
		}
		row, rerr := parseMathRow(bytes.TrimSuffix(text, []byte("\n")))
		if rerr != nil {
			return n, fmt.Errorf("train data line %d: %w", line, rerr)
		}
		if werr := enc.Encode(gymRow{
			AgentRef:              agentRef{Type: "responses_api_agents", Name: GymAgent},
			Question:              row.problem,
			ExpectedAnswer:        row.answer,
			ResponsesCreateParams: createParams{Input: []message{{Role: "user", Content: MathPrompt + row.problem}}},
		}); werr != nil {
			return n, fmt.Errorf("write gym rows: %w", werr)
		}
		n++
		if errors.Is(err, io.EOF) {
			break
		}
	}
	if n == 0 {
		return 0, errors.New("train data: no rows")
	}
	if err := w.Flush(); err != nil {
		return n, fmt.Errorf("write gym rows: %w", err)
	}
	return n, nil
}

type problem struct{ problem, answer string }

func parseMathRow(b []byte) (problem, error) {
	if !utf8.Valid(b) {
		return problem{}, errors.New("not valid UTF-8")
	}
	t := bytes.TrimSpace(b)
	if len(t) == 0 {
		return problem{}, errors.New("blank line")
	}
	if t[0] != '{' {
		return problem{}, errors.New("not a JSON object")
	}
	// A map, not a struct: field names match exactly (encoding/json
	// matches struct fields case-insensitively) and, as in Python, the
	// last of duplicate keys wins.
	var m map[string]json.RawMessage
	if err := json.Unmarshal(t, &m); err != nil {
		return problem{}, fmt.Errorf("not a JSON object: %w", err)
	}
	problemText, err := rowString(m, "input", "the problem")
	if err != nil {
		return problem{}, err
	}
	answer, err := rowString(m, "output", "the answer")
	if err != nil {
		return problem{}, err
	}
	return problem{problemText, answer}, nil
}

func rowString(m map[string]json.RawMessage, key, what string) (string, error) {
	raw, ok := m[key]
	if !ok {
		return "", fmt.Errorf("no %q (%s)", key, what)
	}
	if len(raw) == 0 || raw[0] != '"' {
		return "", fmt.Errorf("%q (%s) is not a string", key, what)
	}
	var s string
	if err := json.Unmarshal(raw, &s); err != nil {
		return "", fmt.Errorf("%q (%s): %w", key, what, err)
	}
	if strings.TrimSpace(s) == "" {
		return "", fmt.Errorf("%q (%s) is blank", key, what)
	}
	return s, nil
}
