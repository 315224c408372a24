package author

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"testing/iotest"
	"time"

	"github.com/nemorl/nemorl-slurm/record"
)

var update = flag.Bool("update", false, "rewrite the golden response.json files in testdata")

const (
	goldenID    = "resp_00112233445566778899aabbccddeeff"
	goldenModel = "" // the transcript's
)

var goldenTime = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

func parseFile(t *testing.T, name string) *Transcript {
	t.Helper()
	f, err := os.Open(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	tr, err := ParseStreamJSON(f)
	if err != nil {
		t.Fatalf("ParseStreamJSON(%s): %v", name, err)
	}
	return tr
}

func parseString(t *testing.T, s string) *Transcript {
	t.Helper()
	tr, err := ParseStreamJSON(strings.NewReader(s))
	if err != nil {
		t.Fatalf("ParseStreamJSON: %v", err)
	}
	return tr
}

// decoded is response.json decoded generically, as a consumer sees it.
func decoded(t *testing.T, r *Response) map[string]any {
	t.Helper()
	data, err := r.JSON()
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(data, &m); err != nil {
		t.Fatalf("response.json does not decode: %v", err)
	}
	return m
}

type itemSummary struct {
	Type, ID, CallID, Name string
}

func summarize(items []Item) []itemSummary {
	var out []itemSummary
	for _, it := range items {
		out = append(out, itemSummary{string(it.Type), it.ID, it.CallID, it.Name})
	}
	return out
}

// TestGolden compares each fixture's response.json with its golden file
// (go test -run TestGolden -update rewrites them).
// The fixtures (testdata/*.jsonl) are stream-json as Claude Code prints it:
// full (init, thinking split from its text, Bash, Task with list content,
// an error result, success with num_turns), truncated (noise, an
// unanswered call, a half line at the end, no result) and max_turns (tool
// calls only, error_max_turns).
func TestGolden(t *testing.T) {
	for _, name := range []string{"full", "truncated", "max_turns"} {
		t.Run(name, func(t *testing.T) {
			tr := parseFile(t, name+".jsonl")
			data, err := tr.Response(goldenID, goldenTime, goldenModel, false).JSON()
			if err != nil {
				t.Fatal(err)
			}
			// response.json is one compact line; the golden file holds it
			// indented, for review.
			if bytes.IndexByte(data, '\n') != len(data)-1 {
				t.Fatalf("response.json is not one line")
			}
			var ind bytes.Buffer
			if err := json.Indent(&ind, data, "", "  "); err != nil {
				t.Fatal(err)
			}
			got := ind.Bytes()
			golden := filepath.Join("testdata", name+".response.json")
			if *update {
				if err := os.WriteFile(golden, got, 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(golden)
			if err != nil {
				t.Fatalf("%v (run go test -update)", err)
			}
			if !bytes.Equal(got, want) {
				t.Errorf("response.json differs from %s (run go test -update and review the diff)\ngot:\n%s", golden, got)
			}
		})
	}
}

func TestFullTranscript(t *testing.T) {
	tr := parseFile(t, "full.jsonl")
	wantItems := []itemSummary{
		{"message", "msg_0", "", ""},
		{"function_call", "toolu_01Bash", "toolu_01Bash", "Bash"},
		{"function_call_output", "", "toolu_01Bash", ""},
		{"function_call", "toolu_02Task", "toolu_02Task", "Task"},
		{"function_call_output", "", "toolu_02Task", ""},
		{"message", "msg_5", "", ""},
		{"function_call", "toolu_03Bash", "toolu_03Bash", "Bash"},
		{"function_call_output", "", "toolu_03Bash", ""},
		{"message", "msg_8", "", ""},
	}
	if got := summarize(tr.Items); !reflect.DeepEqual(got, wantItems) {
		t.Fatalf("items:\n got %v\nwant %v", got, wantItems)
	}
	it := tr.Items
	if want := "<think>\nThe recipe controls the GRPO run. I should read it before changing anything.\n</think>\n\nI'll look at the recipe first."; it[0].Text != want {
		t.Errorf("first message %q, want %q", it[0].Text, want)
	}
	if it[5].Text != "Let me run the unit tests." {
		t.Errorf("second message %q (thinking must not leak into it)", it[5].Text)
	}
	if !strings.HasPrefix(it[8].Text, "<think>\nThe import error") || !strings.HasSuffix(it[8].Text, "</think>\n\nI raised the learning rate in recipe.yaml to 3e-6 & kept the 8×8 batch <unchanged>.") {
		t.Errorf("last message %q", it[8].Text)
	}
	if want := `{"command":"cat recipe.yaml","description":"Show the training recipe"}`; it[1].Arguments != want {
		t.Errorf("arguments %s, want %s (key order kept)", it[1].Arguments, want)
	}
	if !strings.HasPrefix(it[2].Output, "grpo:\n  num_prompts_per_step: 8\n") || it[2].IsError {
		t.Errorf("Bash output %q error %v", it[2].Output, it[2].IsError)
	}
	if want := "The GRPO loss lives in NeMo-RL/nemo_rl/algorithms/loss_functions.py.\nClippedPGLossFn is used by default."; it[4].Output != want {
		t.Errorf("list content output %q, want %q", it[4].Output, want)
	}
	if !it[7].IsError || !strings.HasPrefix(it[7].Output, "Exit code 1\nImportError") {
		t.Errorf("error tool result: %+v", it[7])
	}

	checks := []struct {
		name      string
		got, want any
	}{
		{"Model", tr.Model, "nvidia/qwen/qwen3.8-27b"},
		{"SessionID", tr.SessionID, "3f8a2c1e-7b4d-4e2a-9c61-0d5e8f7a1b23"},
		{"ResultSeen", tr.ResultSeen, true},
		{"ResultSubtype", tr.ResultSubtype, "success"},
		{"ResultIsError", tr.ResultIsError, false},
		{"NumTurns", tr.NumTurns, int64(5)},
		{"Turns", tr.Turns(), 4}, // num_turns 5 counts one more than the model calls
		{"ModelCalls", tr.ModelCalls(), 4},
		{"AssistantMessages", tr.AssistantMessages, 4},
		// Per message the largest usage of its events: 1200/85 + 1500/60 +
		// 1800/70 + 2000/120, not the sum over the 7 assistant events.
		{"AssistantUsage", tr.AssistantUsage, Usage{InputTokens: 6500, OutputTokens: 335}},
		{"ResultUsage", tr.ResultUsage, Usage{InputTokens: 6500, OutputTokens: 335}},
		{"Lines", tr.Lines, 12},
		{"Events", tr.Events, 12},
		{"Skipped", tr.Skipped, 0},
		{"UnansweredCalls", tr.UnansweredCalls, 0},
		{"ToolErrors", tr.ToolErrors, 1},
	}
	for _, c := range checks {
		if !reflect.DeepEqual(c.got, c.want) {
			t.Errorf("%s = %#v, want %#v", c.name, c.got, c.want)
		}
	}

	r := tr.Response(goldenID, goldenTime, "", false)
	m := decoded(t, r)
	if m["status"] != "completed" || m["incomplete_details"] != nil {
		t.Errorf("status %v, incomplete_details %v", m["status"], m["incomplete_details"])
	}
	if m["object"] != "response" || m["id"] != goldenID || m["created_at"] != float64(goldenTime.Unix()) || m["model"] != "nvidia/qwen/qwen3.8-27b" {
		t.Errorf("header fields: %v %v %v %v", m["object"], m["id"], m["created_at"], m["model"])
	}
	wantUsage := map[string]any{"input_tokens": 6500.0, "output_tokens": 335.0, "total_tokens": 6835.0,
		"input_tokens_details": map[string]any{"cached_tokens": 0.0}, "output_tokens_details": map[string]any{"reasoning_tokens": 0.0}}
	if !reflect.DeepEqual(m["usage"], wantUsage) {
		t.Errorf("usage %v, want %v", m["usage"], wantUsage)
	}
	wantMeta := map[string]any{"num_turns": "4", "model_calls": "4", "claude_num_turns": "5", "terminal_reason": "success",
		"dropped_events": "0", "session_id": "3f8a2c1e-7b4d-4e2a-9c61-0d5e8f7a1b23", "result_subtype": "success"}
	if !reflect.DeepEqual(m["metadata"], wantMeta) {
		t.Errorf("metadata %v, want %v", m["metadata"], wantMeta)
	}
	out := m["output"].([]any)
	fc := out[1].(map[string]any)
	fco := out[2].(map[string]any)
	if fc["type"] != "function_call" || fc["id"] != "toolu_01Bash" || fc["call_id"] != "toolu_01Bash" || fc["status"] != "completed" {
		t.Errorf("function_call item %v", fc)
	}
	if fco["type"] != "function_call_output" || fco["call_id"] != "toolu_01Bash" {
		t.Errorf("function_call_output item %v", fco)
	}
	if _, ok := fco["is_error"]; ok {
		t.Error("is_error leaked into the Responses object")
	}
	msg := out[0].(map[string]any)
	if msg["role"] != "assistant" || msg["status"] != "completed" {
		t.Errorf("message item %v", msg)
	}
	part := msg["content"].([]any)[0].(map[string]any)
	if part["type"] != "output_text" || !reflect.DeepEqual(part["annotations"], []any{}) {
		t.Errorf("content part %v", part)
	}
	// HTML characters are written as they are.
	data, _ := r.JSON()
	if !bytes.Contains(data, []byte("<think>")) || !bytes.Contains(data, []byte("3e-6 & kept")) || !bytes.HasSuffix(data, []byte("}\n")) {
		t.Errorf("unexpected encoding: %.200s", data)
	}
}

func TestTruncatedTranscript(t *testing.T) {
	tr := parseFile(t, "truncated.jsonl")
	want := []itemSummary{
		{"message", "msg_0", "", ""},
		{"function_call", "toolu_01Grep", "toolu_01Grep", "Grep"},
		{"function_call_output", "", "toolu_01Grep", ""},
		{"function_call", "toolu_02Edit", "toolu_02Edit", "Edit"}, // never answered: at the end, no output
	}
	if got := summarize(tr.Items); !reflect.DeepEqual(got, want) {
		t.Fatalf("items:\n got %v\nwant %v", got, want)
	}
	// The npm noise and the half line are skipped; the Edit call never got
	// its result.
	if tr.Lines != 6 || tr.Events != 4 || tr.Skipped != 2 {
		t.Errorf("lines %d events %d skipped %d, want 6 4 2", tr.Lines, tr.Events, tr.Skipped)
	}
	if tr.ResultSeen || tr.HasNumTurns || tr.HasResultUsage {
		t.Errorf("result seen %v, num_turns %v, result usage %v", tr.ResultSeen, tr.HasNumTurns, tr.HasResultUsage)
	}
	if tr.UnansweredCalls != 1 || tr.AssistantMessages != 2 || tr.Turns() != 2 {
		t.Errorf("unanswered %d, assistant messages %d, turns %d", tr.UnansweredCalls, tr.AssistantMessages, tr.Turns())
	}
	if u := tr.Usage(); u != (Usage{InputTokens: 2000, OutputTokens: 96}) {
		t.Errorf("usage %+v, want the assistant sum 2000/96", u)
	}
	m := decoded(t, tr.Response(goldenID, goldenTime, "", false))
	if m["status"] != "incomplete" || !reflect.DeepEqual(m["incomplete_details"], map[string]any{"reason": "error"}) {
		t.Errorf("status %v %v, want incomplete/error", m["status"], m["incomplete_details"])
	}
	if md := m["metadata"].(map[string]any); md["num_turns"] != "2" || md["result_subtype"] != nil || md["dropped_events"] != "2" ||
		md["terminal_reason"] != "error" || md["unanswered_calls"] != "1" {
		t.Errorf("metadata %v", md)
	}
	m = decoded(t, tr.Response(goldenID, goldenTime, "", true))
	if m["status"] != "incomplete" || !reflect.DeepEqual(m["incomplete_details"], map[string]any{"reason": "timeout"}) {
		t.Errorf("timed out: status %v %v, want incomplete/timeout", m["status"], m["incomplete_details"])
	}
}

func TestMaxTurnsTranscript(t *testing.T) {
	tr := parseFile(t, "max_turns.jsonl")
	// No assistant text at all: one empty message is appended.
	want := []itemSummary{
		{"function_call", "toolu_01Read", "toolu_01Read", "Read"},
		{"function_call_output", "", "toolu_01Read", ""},
		{"function_call", "toolu_02Bash", "toolu_02Bash", "Bash"},
		{"function_call_output", "", "toolu_02Bash", ""},
	}
	if got := summarize(tr.Items); !reflect.DeepEqual(got, want) {
		t.Fatalf("items:\n got %v\nwant %v", got, want)
	}
	if tr.ResultSubtype != "error_max_turns" || tr.Turns() != 2 || tr.NumTurns != 3 || tr.Usage() != (Usage{InputTokens: 1750, OutputTokens: 55}) {
		t.Errorf("subtype %q turns %d usage %+v", tr.ResultSubtype, tr.Turns(), tr.Usage())
	}
	r := tr.Response(goldenID, goldenTime, "override-model", false)
	m := decoded(t, r)
	if m["status"] != "incomplete" || !reflect.DeepEqual(m["incomplete_details"], map[string]any{"reason": "max_turns"}) {
		t.Errorf("status %v %v, want incomplete/max_turns", m["status"], m["incomplete_details"])
	}
	if m["model"] != "override-model" {
		t.Errorf("model %v, want the caller's", m["model"])
	}
	out := m["output"].([]any)
	last := out[len(out)-1].(map[string]any)
	if len(out) != 5 || last["type"] != "message" || last["id"] != "msg_4" || last["content"].([]any)[0].(map[string]any)["text"] != "" {
		t.Errorf("padding message: %d items, last %v", len(out), last)
	}
}

func TestResponseStatus(t *testing.T) {
	const text = `{"type":"assistant","message":{"id":"m1","content":[{"type":"text","text":"hi"}]}}` + "\n"
	const synthetic = `{"type":"assistant","message":{"id":"s1","model":"<synthetic>","content":[{"type":"text","text":"API Error: 500"}]},"is_api_error_message":true}` + "\n"
	cases := []struct {
		name     string
		stream   string
		timedOut bool
		status   string
		reason   string
	}{
		{"success", text + `{"type":"result","subtype":"success","num_turns":1}`, false, "completed", ""},
		{"success but timed out", text + `{"type":"result","subtype":"success","num_turns":1}`, true, "incomplete", "timeout"},
		{"max turns", text + `{"type":"result","subtype":"error_max_turns","num_turns":1}`, false, "incomplete", "max_turns"},
		{"max turns and timed out", text + `{"type":"result","subtype":"error_max_turns"}`, true, "incomplete", "timeout"},
		{"error during execution", text + `{"type":"result","subtype":"error_during_execution","is_error":true}`, false, "incomplete", "error"},
		{"api error", text + synthetic + `{"type":"result","subtype":"success","is_error":true,"terminal_reason":"api_error","num_turns":2}`, false, "incomplete", "api_error"},
		{"api error, no terminal_reason", text + synthetic + `{"type":"result","subtype":"success","is_error":true,"num_turns":2}`, false, "incomplete", "api_error"},
		{"prompt too long", text + synthetic + `{"type":"result","subtype":"success","is_error":true,"terminal_reason":"prompt_too_long"}`, false, "incomplete", "prompt_too_long"},
		{"max turns by terminal_reason", text + `{"type":"result","subtype":"success","terminal_reason":"max_turns"}`, false, "incomplete", "max_turns"},
		{"no result", text, false, "incomplete", "error"},
		{"empty stream", "", false, "incomplete", "error"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := parseString(t, c.stream).Response("", goldenTime, "m", c.timedOut)
			if r.Status != c.status {
				t.Errorf("status %q, want %q", r.Status, c.status)
			}
			switch {
			case c.reason == "" && r.IncompleteDetails != nil:
				t.Errorf("incomplete_details %+v, want null", r.IncompleteDetails)
			case c.reason != "" && (r.IncompleteDetails == nil || r.IncompleteDetails.Reason != c.reason):
				t.Errorf("incomplete_details %+v, want reason %q", r.IncompleteDetails, c.reason)
			}
			if !strings.HasPrefix(r.ID, "resp_") || len(r.ID) != len("resp_")+32 {
				t.Errorf("generated id %q", r.ID)
			}
			decoded(t, r)
		})
	}
}

func TestEmptyTranscript(t *testing.T) {
	tr := parseString(t, "\n\n  \n")
	if tr.Lines != 0 || tr.Skipped != 0 || len(tr.Items) != 0 || tr.Turns() != 0 {
		t.Fatalf("%+v", tr)
	}
	m := decoded(t, tr.Response(goldenID, goldenTime, "m", false))
	out := m["output"].([]any)
	if len(out) != 1 || out[0].(map[string]any)["id"] != "msg_0" {
		t.Errorf("output %v, want one empty message", out)
	}
	if md := m["metadata"].(map[string]any); md["num_turns"] != "0" {
		t.Errorf("metadata %v", md)
	}
}

func TestParseTolerance(t *testing.T) {
	lines := []string{
		"\ufeff" + `{"type":"system","subtype":"init","model":"m0","session_id":"s0"}`, // BOM
		"not json at all",
		"42",
		`["type","assistant"]`,
		`{"type":"assistant","message":"a string"}`,
		`{"type":"assistant","message":{"content":"a string","usage":"x"}}`,
		`{"type":"assistant","message":{"id":"m1","content":[1,null,{"type":"text","text":7},{"type":"text","text":"ok"}],"usage":{"input_tokens":-5,"output_tokens":2.0}}}` + "\r",
		`{"type":"user","message":{"content":"the prompt echoed as a string"}}`,
		`{"type":"user","message":{"content":[{"type":"tool_result","tool_use_id":"nope","content":{"k":[1,2]}}]}}`,
		`{"a":1}{"b":2}`,
		`{"type":"unknown_future_event","x":1}`,
		`{"type":"result","subtype":"success","num_turns":"7","usage":[]}`,
		``,
	}
	tr := parseString(t, strings.Join(lines, "\n"))
	if tr.Lines != 12 || tr.Events != 8 || tr.Skipped != 4 {
		t.Errorf("lines %d events %d skipped %d, want 12 8 4", tr.Lines, tr.Events, tr.Skipped)
	}
	if tr.Model != "m0" || tr.SessionID != "s0" {
		t.Errorf("model %q session %q", tr.Model, tr.SessionID)
	}
	if !tr.ResultSeen || tr.HasNumTurns || tr.HasResultUsage {
		t.Errorf("result seen %v, num_turns %v, usage %v", tr.ResultSeen, tr.HasNumTurns, tr.HasResultUsage)
	}
	// Three assistant events; two have no id, so each counts as a message.
	if tr.AssistantMessages != 3 || tr.Turns() != 3 {
		t.Errorf("assistant messages %d turns %d", tr.AssistantMessages, tr.Turns())
	}
	if tr.AssistantUsage != (Usage{OutputTokens: 2}) {
		t.Errorf("usage %+v (negative clamped, 2.0 accepted)", tr.AssistantUsage)
	}
	want := []Item{
		{Type: ItemMessage, ID: "msg_0", Text: "ok"},
		{Type: ItemFunctionCall, ID: "nope", CallID: "nope", Name: "unknown", Arguments: "{}"}, // its call was never read
		{Type: ItemFunctionCallOutput, CallID: "nope", Output: `{"k":[1,2]}`},                  // orphan result kept
	}
	if tr.UnknownCalls != 1 {
		t.Errorf("unknown calls %d, want 1", tr.UnknownCalls)
	}
	if !reflect.DeepEqual(tr.Items, want) {
		t.Errorf("items %+v, want %+v", tr.Items, want)
	}
}

func TestNumTurns(t *testing.T) {
	for _, c := range []struct {
		raw   string
		turns int
		has   bool
	}{
		{"12", 12, true},
		{"3.0", 3, true},
		{"4e1", 40, true},
		{"-3", -3, true},
		{"1e300", maxCount, true},
		{"999999999999999999999999", maxCount, true},
		{"2.5", 0, false},
		{"null", 0, false},
		{"true", 0, false},
	} {
		tr := parseString(t, `{"type":"result","subtype":"success","num_turns":`+c.raw+`}`)
		// num_turns is kept as Claude Code's count; turns are model calls.
		if int(tr.NumTurns) != c.turns || tr.HasNumTurns != c.has || tr.Turns() != 0 {
			t.Errorf("num_turns %s: %d has %v turns %d, want %d %v 0", c.raw, tr.NumTurns, tr.HasNumTurns, tr.Turns(), c.turns, c.has)
		}
	}
	// Assistant messages are counted, clamped to MaxTurns.
	var b strings.Builder
	for i := range record.MaxTurns + 5 {
		b.WriteString(`{"type":"assistant","message":{"id":"m` + string(rune('a'+i%26)) + strings.Repeat("x", i/26) + `","content":[]}}` + "\n")
	}
	if tr := parseString(t, b.String()); tr.AssistantMessages != record.MaxTurns+5 || tr.Turns() != record.MaxTurns || tr.ModelCalls() != record.MaxTurns+5 {
		t.Errorf("assistant messages %d turns %d", tr.AssistantMessages, tr.Turns())
	}
}

func TestUsageDedupAndResultPrecedence(t *testing.T) {
	stream := strings.Join([]string{
		`{"type":"assistant","message":{"id":"a","content":[{"type":"thinking","thinking":"t"}],"usage":{"input_tokens":100,"output_tokens":1,"cache_read_input_tokens":50}}}`,
		`{"type":"assistant","message":{"id":"a","content":[{"type":"text","text":"x"}],"usage":{"input_tokens":100,"output_tokens":30,"cache_read_input_tokens":50}}}`,
		`{"type":"assistant","message":{"id":"b","content":[{"type":"text","text":"y"}],"usage":{"input_tokens":10,"output_tokens":5,"cache_creation_input_tokens":7}}}`,
	}, "\n")
	tr := parseString(t, stream)
	want := Usage{InputTokens: 110, OutputTokens: 35, CacheReadInputTokens: 50, CacheCreationInputTokens: 7}
	if tr.AssistantUsage != want || tr.Usage() != want {
		t.Errorf("assistant usage %+v, want %+v", tr.AssistantUsage, want)
	}
	if tr.AssistantMessages != 2 {
		t.Errorf("assistant messages %d, want 2", tr.AssistantMessages)
	}
	tr = parseString(t, stream+"\n"+`{"type":"result","subtype":"success","usage":{"input_tokens":999,"output_tokens":77}}`)
	if tr.Usage() != (Usage{InputTokens: 999, OutputTokens: 77}) {
		t.Errorf("usage %+v, want the result's", tr.Usage())
	}
	r := tr.Response(goldenID, goldenTime, "m", false)
	if r.Usage.InputTokens != 999 || r.Usage.OutputTokens != 77 || r.Usage.TotalTokens != 1076 {
		t.Errorf("response usage %+v", r.Usage)
	}
	// Sums saturate.
	big := `{"type":"assistant","message":{"content":[],"usage":{"input_tokens":9007199254740992,"output_tokens":9007199254740992}}}` + "\n"
	tr = parseString(t, big+big)
	if r := tr.Response("", goldenTime, "m", false); r.Usage.InputTokens != maxCount || r.Usage.TotalTokens != maxCount {
		t.Errorf("saturated usage %+v", r.Usage)
	}
}

func TestThinkingAndCalls(t *testing.T) {
	stream := strings.Join([]string{
		`{"type":"assistant","message":{"content":[{"type":"reasoning","text":"r1"},{"type":"redacted_thinking","data":"xx"}]}}`,
		`{"type":"assistant","message":{"content":[{"type":"thinking","thinking":"r2"},{"type":"tool_use","id":"c1","name":"Write","input":"raw string"}]}}`,
		`{"type":"assistant","message":{"content":[{"type":"tool_use","name":"NoID","input":{}},{"type":"tool_use","id":"c2","name":"LS"},{"type":"tool_use","id":"c3","name":"X","input":[1, 2]}]}}`,
		`{"type":"user","message":{"content":[{"type":"tool_result","tool_use_id":"c3","content":[{"type":"image","source":{}},{"type":"text","text":"img"}]},{"type":"tool_result","tool_use_id":"c1","content":null},{"type":"tool_result","tool_use_id":"c2","content":12}]}}`,
		`{"type":"user","message":{"content":[{"type":"tool_result","tool_use_id":"c1","content":"again"}]}}`,
		`{"type":"assistant","message":{"content":[{"type":"text","text":"a"},{"type":"text","text":"b"}]}}`,
		`{"type":"assistant","message":{"content":[{"type":"thinking","thinking":"not followed by text"}]}}`,
	}, "\n")
	tr := parseString(t, stream)
	// The thinking before the Write call stays before it; the thinking that
	// no text follows is kept at the end; the call without an id, never
	// answered, comes last.
	want := []Item{
		{Type: ItemMessage, ID: "msg_0", Text: "<think>\nr1\nr2\n</think>\n\n"},
		{Type: ItemFunctionCall, ID: "c3", CallID: "c3", Name: "X", Arguments: "[1,2]"},
		{Type: ItemFunctionCallOutput, CallID: "c3", Output: "img"},
		{Type: ItemFunctionCall, ID: "c1", CallID: "c1", Name: "Write", Arguments: "raw string"},
		{Type: ItemFunctionCallOutput, CallID: "c1", Output: ""},
		{Type: ItemFunctionCall, ID: "c2", CallID: "c2", Name: "LS", Arguments: "{}"},
		{Type: ItemFunctionCallOutput, CallID: "c2", Output: "12"},
		{Type: ItemFunctionCallOutput, CallID: "c1", Output: "again"}, // a second result: output only
		{Type: ItemMessage, ID: "msg_8", Text: "ab"},
		{Type: ItemMessage, ID: "msg_9", Text: "<think>\nnot followed by text\n</think>\n\n"},
		{Type: ItemFunctionCall, ID: "call_1", CallID: "call_1", Name: "NoID", Arguments: "{}"},
	}
	if !reflect.DeepEqual(tr.Items, want) {
		t.Errorf("items:\n got %+v\nwant %+v", tr.Items, want)
	}
	if tr.UnansweredCalls != 1 { // the call without an id
		t.Errorf("unanswered %d, want 1", tr.UnansweredCalls)
	}
}

func TestLongLines(t *testing.T) {
	valid := `{"type":"assistant","message":{"content":[{"type":"text","text":"after"}]}}`
	long := `{"type":"assistant","message":{"content":[{"type":"text","text":"` + strings.Repeat("x", 1000) + `"}]}}`
	broken := `{"type":"assistant","message":{"content":[{"type":"text","text":"` + strings.Repeat("x", 500)
	for _, c := range []struct {
		name, stream              string
		skipped, long, items, cut int
	}{
		{"long line, then a line", long + "\n" + valid + "\n", 0, 1, 2, 1},
		{"long line at the end", long, 0, 1, 1, 1},
		{"broken long line, then a line", broken + "\n" + valid + "\n", 1, 0, 1, 0},
		{"broken long line at the end", broken, 1, 0, 0, 0},
		{"two objects on a long line", long + long + "\n" + valid, 1, 0, 1, 0},
	} {
		tr, err := parseStream(iotest.OneByteReader(strings.NewReader(c.stream)), 200)
		if err != nil {
			t.Fatal(err)
		}
		if tr.Skipped != c.skipped || tr.LongLines != c.long || len(tr.Items) != c.items || tr.CutStrings != c.cut || tr.Lines != tr.Events+tr.Skipped {
			t.Errorf("%s: skipped %d long %d items %d cut %d lines %d events %d", c.name, tr.Skipped, tr.LongLines, len(tr.Items), tr.CutStrings, tr.Lines, tr.Events)
		}
		// Long lines are read from 200 bytes on; strings in them are cut at 4 × 200.
		if c.cut > 0 && tr.Items[0].Text != strings.Repeat("x", 800)+"\n[nemorl: 200 more bytes cut]" {
			t.Errorf("%s: cut text %.300q", c.name, tr.Items[0].Text)
		}
	}
	// A line just under the limit is read whole.
	line := `{"type":"x","pad":"` + strings.Repeat("y", MaxLineBytes-100) + `"}`
	if tr, err := ParseStreamJSON(strings.NewReader(line)); err != nil || tr.Skipped != 0 || tr.Events != 1 || tr.LongLines != 0 {
		t.Errorf("a %d-byte line: %+v %v", len(line), tr, err)
	}
}

// TestHugeEditLine: the shape Claude Code 2.1.332 printed for an Edit of a
// 17 MB file: the tool_result event carries the whole file (and the patch)
// in its top-level tool_use_result, 34 MB on one line. The call, its output
// and everything after it reach response.json; nothing is dropped.
func TestHugeEditLine(t *testing.T) {
	file := strings.Repeat("a: 1\n", 17<<20/5)
	edit, _ := json.Marshal(map[string]any{"type": "user", "message": map[string]any{"role": "user", "content": []any{map[string]any{
		"type": "tool_result", "tool_use_id": "toolu_big", "content": "The file /w/NeMo-RL/big.yaml has been updated."}}},
		"tool_use_result": map[string]any{"filePath": "/w/NeMo-RL/big.yaml", "oldString": "a: 1", "newString": "a: 2",
			"originalFile": file, "structuredPatch": []any{map[string]any{"lines": []string{"-a: 1", "+a: 2", file}}}}})
	if len(edit) < 34<<20 {
		t.Fatalf("the edit line is %d bytes, want 34 MB", len(edit))
	}
	stream := strings.Join([]string{
		`{"type":"system","subtype":"init","model":"policy","session_id":"s"}`,
		`{"type":"assistant","message":{"id":"m1","model":"policy","content":[{"type":"thinking","thinking":"edit the big file"}]}}`,
		`{"type":"assistant","message":{"id":"m1","model":"policy","content":[{"type":"tool_use","id":"toolu_big","name":"Edit","input":{"file_path":"/w/NeMo-RL/big.yaml","old_string":"a: 1","new_string":"a: 2"}}]}}`,
		string(edit),
		`{"type":"assistant","message":{"id":"m2","model":"policy","content":[{"type":"text","text":"Done."}]}}`,
		`{"type":"result","subtype":"success","is_error":false,"num_turns":3,"terminal_reason":"completed"}`,
	}, "\n") + "\n"
	tr, err := ParseStreamJSON(strings.NewReader(stream))
	if err != nil {
		t.Fatal(err)
	}
	want := []itemSummary{
		{"message", "msg_0", "", ""},
		{"function_call", "toolu_big", "toolu_big", "Edit"},
		{"function_call_output", "", "toolu_big", ""},
		{"message", "msg_3", "", ""},
	}
	if got := summarize(tr.Items); !reflect.DeepEqual(got, want) {
		t.Fatalf("items:\n got %v\nwant %v", got, want)
	}
	if tr.Items[2].Output != "The file /w/NeMo-RL/big.yaml has been updated." || tr.Items[0].Text != "<think>\nedit the big file\n</think>\n\n" {
		t.Errorf("items %.200q %.200q", tr.Items[0].Text, tr.Items[2].Output)
	}
	if tr.Skipped != 0 || tr.LongLines != 1 || tr.Dropped() != 0 || tr.ModelCalls() != 2 || tr.TerminalReason(false) != record.TerminalSuccess {
		t.Errorf("skipped %d long %d model calls %d reason %q", tr.Skipped, tr.LongLines, tr.ModelCalls(), tr.TerminalReason(false))
	}
	data, err := tr.Response(goldenID, goldenTime, "", false).JSON()
	if err != nil || len(data) > 1<<20 {
		t.Fatalf("response.json: %d bytes, %v", len(data), err)
	}

	// The same 34 MB as the tool's output text: kept up to the bound, with
	// the count of what was cut.
	big, _ := json.Marshal(map[string]any{"type": "user", "message": map[string]any{"content": []any{map[string]any{
		"type": "tool_result", "tool_use_id": "toolu_cat", "content": []any{map[string]any{"type": "text", "text": file + file}}}}}})
	stream = `{"type":"assistant","message":{"id":"m1","model":"policy","content":[{"type":"tool_use","id":"toolu_cat","name":"Bash","input":{"command":"cat big.yaml big.yaml"}}]}}` +
		"\n" + string(big) + "\n"
	tr, err = ParseStreamJSON(strings.NewReader(stream))
	if err != nil {
		t.Fatal(err)
	}
	if len(tr.Items) != 2 || tr.Items[0].Name != "Bash" || tr.Items[1].CallID != "toolu_cat" {
		t.Fatalf("items %v", summarize(tr.Items))
	}
	out := tr.Items[1].Output
	cut := int64(2*len(file) - MaxToolOutputBytes)
	if !strings.HasPrefix(out, file[:MaxToolOutputBytes]) || !strings.HasSuffix(out, "\n[nemorl: "+strconv.FormatInt(cut, 10)+" more bytes cut]") ||
		tr.TruncatedOutputs != 1 || tr.TruncatedBytes != cut || tr.Skipped != 0 {
		t.Errorf("output %d bytes ending %q; truncated %d (%d bytes), skipped %d", len(out), out[len(out)-40:], tr.TruncatedOutputs, tr.TruncatedBytes, tr.Skipped)
	}
	md := tr.Response(goldenID, goldenTime, "", true).Metadata
	if md["truncated_outputs"] != "1" || md["truncated_bytes"] != strconv.FormatInt(cut, 10) || md["long_lines"] != "1" {
		t.Errorf("metadata %v", md)
	}
}

// TestAPIError: Claude Code 2.1.332 after the endpoint failed: a synthetic
// assistant message ("<synthetic>", is_api_error_message, "API Error: …"),
// then a result that says success but is_error, terminal_reason api_error
// (or prompt_too_long), num_turns one more than the model calls. The
// synthetic text never reaches response.json; the run is not completed.
func TestAPIError(t *testing.T) {
	for _, reason := range []string{record.TerminalAPIError, record.TerminalPromptTooLong} {
		text := "API Error: 500 {\"type\":\"error\",\"error\":{\"type\":\"api_error\",\"message\":\"Internal Server Error\"}}"
		if reason == record.TerminalPromptTooLong {
			text = "API Error: 400 prompt is too long: 270000 tokens > 262144 maximum"
		}
		synthetic, _ := json.Marshal(map[string]any{"type": "assistant", "message": map[string]any{"id": "0b1c", "type": "message",
			"role": "assistant", "model": "<synthetic>", "content": []any{map[string]any{"type": "text", "text": text}},
			"usage": map[string]any{"input_tokens": 0, "output_tokens": 0}}, "parent_tool_use_id": nil, "session_id": "s",
			"is_api_error_message": true})
		stream := strings.Join([]string{
			`{"type":"system","subtype":"init","model":"policy","session_id":"s"}`,
			`{"type":"assistant","message":{"id":"m1","model":"policy","content":[{"type":"text","text":"Reading."},{"type":"tool_use","id":"t1","name":"Read","input":{"file_path":"recipe.yaml"}}],"usage":{"input_tokens":10,"output_tokens":5}}}`,
			`{"type":"user","message":{"content":[{"type":"tool_result","tool_use_id":"t1","content":"grpo: {}"}]}}`,
			string(synthetic),
			`{"type":"result","subtype":"success","is_error":true,"num_turns":2,"terminal_reason":"` + reason + `","result":` + strconv.Quote(text) + `}`,
		}, "\n") + "\n"
		tr := parseString(t, stream)
		if tr.ModelCalls() != 1 || tr.Turns() != 1 || tr.APIErrors != 1 || tr.Model != "policy" || tr.TerminalReason(false) != reason {
			t.Errorf("%s: model calls %d turns %d api errors %d model %q reason %q", reason, tr.ModelCalls(), tr.Turns(), tr.APIErrors, tr.Model, tr.TerminalReason(false))
		}
		r := tr.Response(goldenID, goldenTime, "", false)
		data, _ := r.JSON()
		if bytes.Contains(data, []byte("API Error")) && !strings.Contains(r.Metadata["api_error"], "API Error") {
			t.Errorf("%s: the synthetic text is in the output: %s", reason, data)
		}
		for _, o := range r.Output {
			if m, ok := o.(*OutputMessage); ok && strings.Contains(m.Content[0].Text, "API Error") {
				t.Errorf("%s: synthetic message in the output: %q", reason, m.Content[0].Text)
			}
		}
		if r.Status != StatusIncomplete || r.IncompleteDetails == nil || r.IncompleteDetails.Reason != reason ||
			r.Metadata["terminal_reason"] != reason || r.Metadata["model_calls"] != "1" || r.Metadata["claude_num_turns"] != "2" {
			t.Errorf("%s: status %s %+v metadata %v", reason, r.Status, r.IncompleteDetails, r.Metadata)
		}
	}
}

func TestReadError(t *testing.T) {
	boom := errors.New("boom")
	r := io.MultiReader(strings.NewReader(`{"type":"system"}`+"\n"), iotest.ErrReader(boom))
	if _, err := ParseStreamJSON(r); !errors.Is(err, boom) {
		t.Fatalf("error %v, want boom", err)
	}
}

func TestTruncateUTF8(t *testing.T) {
	for _, c := range []struct {
		s    string
		n    int
		want string
	}{
		{"abc", 5, "abc"},
		{"abc", 2, "ab"},
		{"a×b", 2, "a"},
		{"a×b", 3, "a×"},
		{"××", 1, ""},
	} {
		if got := truncateUTF8(c.s, c.n); got != c.want {
			t.Errorf("truncateUTF8(%q, %d) = %q, want %q", c.s, c.n, got, c.want)
		}
	}
	long := `{"type":"system","subtype":"init","session_id":"` + strings.Repeat("é", 400) + `"}`
	r := parseString(t, long).Response("", goldenTime, "m", false)
	if len(r.Metadata["session_id"]) != maxMetadataValue {
		t.Errorf("session_id metadata %d bytes", len(r.Metadata["session_id"]))
	}
}
