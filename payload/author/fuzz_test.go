package author

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"testing"

	"github.com/nemorl/nemorl-slurm/record"
)

// FuzzParseStreamJSON feeds arbitrary stdout to the parser. Properties: no
// panic and no error (content never fails); the counts add up; every
// function_call is followed by its output; Turns is in range; Response
// always encodes to one line of valid JSON with at least one message,
// non-negative usage and num_turns equal to Turns.
func FuzzParseStreamJSON(f *testing.F) {
	files, _ := filepath.Glob(filepath.Join("testdata", "*.jsonl"))
	for _, p := range files {
		data, err := os.ReadFile(p)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data, false)
		f.Add(data[:len(data)/2], true)
	}
	f.Add([]byte(`{"type":"assistant","message":{"id":"a","content":[{"type":"tool_use","id":"x","input":{"a":[1,{"b":null}]}}]}}`+"\n"+
		`{"type":"user","message":{"content":[{"type":"tool_result","tool_use_id":"x","content":[{"type":"text","text":"\u0000\ud800"}]}]}}`), false)
	f.Add([]byte("{\"type\":\"result\",\"num_turns\":1e400,\"usage\":{\"input_tokens\":-1e400}}\n\xff\xfe{}"), true)
	f.Fuzz(func(t *testing.T, data []byte, timedOut bool) {
		tr, err := ParseStreamJSON(bytes.NewReader(data))
		if err != nil {
			t.Fatalf("error on content: %v", err)
		}
		if tr.Lines != tr.Events+tr.Skipped {
			t.Fatalf("lines %d != events %d + skipped %d", tr.Lines, tr.Events, tr.Skipped)
		}
		if n := tr.Turns(); n < 0 || n > record.MaxTurns {
			t.Fatalf("turns %d", n)
		}
		// Every call is followed by its output, but the unanswered ones,
		// which end the items.
		unanswered := 0
		for i, it := range tr.Items {
			if it.Type == ItemFunctionCall {
				if it.ID != it.CallID {
					t.Fatalf("function_call %d: id %q call id %q", i, it.ID, it.CallID)
				}
				if i+1 < len(tr.Items) && tr.Items[i+1].Type == ItemFunctionCallOutput && tr.Items[i+1].CallID == it.CallID {
					continue
				}
				unanswered++
				for _, later := range tr.Items[i+1:] {
					if later.Type != ItemFunctionCall {
						t.Fatalf("function_call %d not followed by its output: %+v", i, tr.Items)
					}
				}
			}
		}
		if unanswered != tr.UnansweredCalls {
			t.Fatalf("%d calls without output, UnansweredCalls %d", unanswered, tr.UnansweredCalls)
		}
		if tr.ModelCalls() < 0 || tr.Dropped() != tr.Skipped {
			t.Fatalf("model calls %d dropped %d skipped %d", tr.ModelCalls(), tr.Dropped(), tr.Skipped)
		}
		if !slices.Contains(record.TerminalReasons, tr.TerminalReason(timedOut)) {
			t.Fatalf("terminal reason %q", tr.TerminalReason(timedOut))
		}
		r := tr.Response("", goldenTime, "", timedOut)
		out, err := r.JSON()
		if err != nil {
			t.Fatalf("Response does not encode: %v", err)
		}
		if !json.Valid(out) || bytes.IndexByte(out, '\n') != len(out)-1 {
			t.Fatalf("response.json is not one line of valid JSON: %q", out)
		}
		var m struct {
			Status string `json:"status"`
			Output []struct {
				Type string `json:"type"`
			} `json:"output"`
			Usage struct {
				InputTokens  int64 `json:"input_tokens"`
				OutputTokens int64 `json:"output_tokens"`
				TotalTokens  int64 `json:"total_tokens"`
			} `json:"usage"`
			Metadata map[string]string `json:"metadata"`
		}
		if err := json.Unmarshal(out, &m); err != nil {
			t.Fatalf("response.json does not decode: %v", err)
		}
		hasMessage := false
		for _, o := range m.Output {
			hasMessage = hasMessage || o.Type == "message"
		}
		if !hasMessage {
			t.Fatal("no message in the output")
		}
		u := m.Usage
		if u.InputTokens < 0 || u.OutputTokens < 0 || u.TotalTokens < max(u.InputTokens, u.OutputTokens) {
			t.Fatalf("usage %+v", u)
		}
		if m.Metadata["num_turns"] != strconv.Itoa(tr.Turns()) {
			t.Fatalf("metadata num_turns %q, turns %d", m.Metadata["num_turns"], tr.Turns())
		}
		if timedOut && m.Status != "incomplete" {
			t.Fatalf("timed out but status %q", m.Status)
		}
	})
}
