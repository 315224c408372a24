package train

import (
	"bytes"
	"encoding/json"
	"math"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"unicode/utf8"
)

// refReward is the documented pattern as a regular expression: the
// scanner must agree with it on every input (RE2's leftmost-first matching
// of this pattern is Python's).
var refReward = regexp.MustCompile(`• Avg Reward:[\t\n\v\f\r ]*([+-]?[0-9]+(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?)`)

func refParse(text []byte) (float64, bool) {
	var last float64
	found := false
	for _, m := range refReward.FindAllSubmatch(text, -1) {
		v, err := strconv.ParseFloat(string(m[1]), 64)
		if math.IsInf(v, 0) || (err != nil && !strings.Contains(err.Error(), "out of range")) {
			continue
		}
		if v == 0 {
			v = 0
		}
		last, found = v, true
	}
	return last, found
}

func FuzzParseAvgReward(f *testing.F) {
	for _, s := range []string{
		"  • Avg Reward: 0.2500\n", "• Avg Reward: -1.5e-3 • Avg Reward: 2", "• Avg Reward:\n\n7",
		"• Avg Reward: 1e999", "• Avg Reward: 1.e5", "•• Avg Reward: +0", "• Avg Rew", "\xe2\x80• Avg Reward: 3",
		"• Avg Filtered/Total Reward: 0.5", "• Avg Reward: 0.5.5e5e5",
	} {
		f.Add([]byte(s), uint8(3))
	}
	f.Fuzz(func(t *testing.T, text []byte, split uint8) {
		if len(text) > maxNumberBytes {
			return // the scanner's number limit is not in the regex
		}
		want, wantOK := refParse(text)
		got, ok := ParseAvgReward(text)
		if ok != wantOK || got != want || math.Signbit(got) && got == 0 {
			t.Fatalf("ParseAvgReward(%q) = %v, %v; regex gives %v, %v", text, got, ok, want, wantOK)
		}
		// Written in pieces, the stream gives the same.
		var s rewardScanner
		step := int(split)%7 + 1
		for i := 0; i < len(text); i += step {
			s.Write(text[i:min(i+step, len(text))])
		}
		if g, o := s.Result(); g != got || o != ok {
			t.Fatalf("in pieces of %d: %v, %v; whole: %v, %v", step, g, o, got, ok)
		}
	})
}

func FuzzGymRows(f *testing.F) {
	f.Add([]byte(trainMath))
	f.Add([]byte(`{"input": "x", "output": "1"}`))
	f.Add([]byte("{\"input\": \"a\\u2028b\", \"output\": \"\\\\boxed{1}\"}\r\n{\"input\": \"é\", \"output\": \"<&>\", \"k\": null}\n"))
	f.Add([]byte(`{"input": "x", "output": 1}`))
	f.Add([]byte("\n"))
	f.Fuzz(func(t *testing.T, in []byte) {
		var out bytes.Buffer
		n, err := GymRows(bytes.NewReader(in), &out)
		if err != nil {
			if !strings.HasPrefix(err.Error(), "train data") {
				t.Fatalf("error without context: %v", err)
			}
			return
		}
		lines := strings.Split(strings.TrimSuffix(out.String(), "\n"), "\n")
		inLines := strings.Split(strings.TrimSuffix(string(in), "\n"), "\n")
		if n < 1 || len(lines) != n || len(inLines) != n {
			t.Fatalf("n=%d, %d output lines, %d input lines", n, len(lines), len(inLines))
		}
		for i, line := range lines {
			var src map[string]json.RawMessage
			if err := json.Unmarshal([]byte(inLines[i]), &src); err != nil {
				t.Fatalf("accepted line %d is not an object: %v", i+1, err)
			}
			var problem, answer string
			if json.Unmarshal(src["input"], &problem) != nil || json.Unmarshal(src["output"], &answer) != nil {
				t.Fatalf("accepted line %d without string input/output", i+1)
			}
			var row struct {
				AgentRef              map[string]string `json:"agent_ref"`
				Question              string            `json:"question"`
				ExpectedAnswer        string            `json:"expected_answer"`
				ResponsesCreateParams struct {
					Input []map[string]string `json:"input"`
				} `json:"responses_create_params"`
			}
			dec := json.NewDecoder(strings.NewReader(line))
			dec.DisallowUnknownFields()
			if err := dec.Decode(&row); err != nil || !utf8.ValidString(line) {
				t.Fatalf("output line %d: %v", i+1, err)
			}
			msgs := row.ResponsesCreateParams.Input
			if row.Question != problem || row.ExpectedAnswer != answer ||
				row.AgentRef["type"] != "responses_api_agents" || row.AgentRef["name"] != GymAgent ||
				len(msgs) != 1 || msgs[0]["role"] != "user" || msgs[0]["content"] != MathPrompt+problem {
				t.Fatalf("row %d: %+v from %q", i+1, row, inLines[i])
			}
		}
	})
}
