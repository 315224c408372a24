package author

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"strconv"

	"github.com/nemorl/nemorl-slurm/record"
)

// MaxLineBytes bounds one stream-json line. A longer line is counted in
// Transcript.Skipped and otherwise ignored.
const MaxLineBytes = 16 << 20

// ItemType is the type of one Responses-API output item.
type ItemType string

// Output item types.
const (
	ItemMessage            ItemType = "message"
	ItemFunctionCall       ItemType = "function_call"
	ItemFunctionCallOutput ItemType = "function_call_output"
)

// Item is one output item, in transcript order.
//
//   - ItemMessage: ID ("msg_<n>", n its index in the output) and Text, the
//     assistant text with any buffered thinking prefixed as
//     "<think>\n…\n</think>\n\n".
//   - ItemFunctionCall: ID and CallID (both the tool_use id), Name and
//     Arguments (the tool input as a JSON string). Emitted only when the
//     matching tool_result arrives, right before its output.
//   - ItemFunctionCallOutput: CallID (the tool_result's tool_use_id),
//     Output (its text) and IsError (its is_error flag; not part of the
//     Responses object).
type Item struct {
	Type      ItemType
	ID        string
	Text      string
	CallID    string
	Name      string
	Arguments string
	Output    string
	IsError   bool
}

// Usage is a token count as Claude Code reports it. InputTokens excludes
// the cache tokens, which are counted apart.
type Usage struct {
	InputTokens              int64
	OutputTokens             int64
	CacheCreationInputTokens int64
	CacheReadInputTokens     int64
}

// Transcript is what ParseStreamJSON read from Claude Code's stream-json
// stdout.
type Transcript struct {
	// Items are the output items, in order (see Item). Tool calls that
	// never got a result are not among them (see UnansweredCalls).
	Items []Item
	// Model is the model named by the init event, else by the first
	// assistant message that names one.
	Model string
	// SessionID is the session id of the init event (else of the result).
	SessionID string

	// ResultSeen is true when a final "result" event was read; a run killed
	// at the time limit has none. The Result* fields describe the last one.
	ResultSeen    bool
	ResultSubtype string // "success", "error_max_turns", "error_during_execution", …
	ResultIsError bool
	ResultText    string
	// NumTurns is the result event's num_turns, valid when HasNumTurns.
	NumTurns    int64
	HasNumTurns bool
	// ResultUsage is the result event's usage (Claude Code's total for the
	// session), valid when HasResultUsage.
	ResultUsage    Usage
	HasResultUsage bool

	// AssistantMessages counts distinct assistant messages (Claude Code
	// prints one event per content block, all with the message's id).
	AssistantMessages int
	// AssistantUsage sums the usage of the distinct assistant messages
	// (per message, the largest value of each field among its events).
	AssistantUsage Usage

	// Lines counts the non-blank lines read, Events the JSON objects among
	// them, Skipped the others (not JSON, not an object, truncated, longer
	// than MaxLineBytes).
	Lines, Events, Skipped int
	// UnansweredCalls counts tool_use blocks no tool_result answered.
	UnansweredCalls int
	// ToolErrors counts tool results flagged is_error.
	ToolErrors int
}

// Turns is the number of agent turns: the result event's num_turns when
// present, else the number of assistant messages, clamped to
// 0..record.MaxTurns.
func (t *Transcript) Turns() int {
	n := int64(t.AssistantMessages)
	if t.HasNumTurns {
		n = t.NumTurns
	}
	return int(min(max(n, 0), record.MaxTurns))
}

// Usage is the run's token usage: the result event's when it has one (it
// is Claude Code's own total), else the sum over the assistant messages
// (a run killed before its result event).
func (t *Transcript) Usage() Usage {
	if t.HasResultUsage {
		return t.ResultUsage
	}
	return t.AssistantUsage
}

// ParseStreamJSON reads the newline-delimited JSON events that
// `claude -p --output-format stream-json --verbose` prints. It never fails
// on content: a line that is not a JSON object (noise, a line cut short
// when the process was killed, a line longer than MaxLineBytes) is counted
// in Skipped; fields of unexpected types are ignored. Only an error reading
// r is returned.
func ParseStreamJSON(r io.Reader) (*Transcript, error) {
	return parseStream(r, MaxLineBytes)
}

func parseStream(r io.Reader, maxLine int) (*Transcript, error) {
	p := &parser{t: &Transcript{}, pending: map[string]pendingCall{}, usage: map[string]int{}}
	br := bufio.NewReaderSize(r, 64<<10)
	var line []byte
	tooLong := false
	first := true
	for {
		chunk, err := br.ReadSlice('\n')
		if !tooLong {
			if len(line)+len(chunk) > maxLine {
				tooLong, line = true, line[:0]
			} else {
				line = append(line, chunk...)
			}
		}
		if err == bufio.ErrBufferFull {
			continue
		}
		if err != nil && err != io.EOF {
			return nil, fmt.Errorf("read transcript: %w", err)
		}
		if tooLong {
			p.t.Lines++
			p.t.Skipped++
		} else if len(line) > 0 {
			if first {
				line = bytes.TrimPrefix(line, []byte("\xef\xbb\xbf"))
			}
			p.line(line)
		}
		first = false
		line, tooLong = line[:0], false
		if err == io.EOF {
			break
		}
	}
	p.finish()
	return p.t, nil
}

type pendingCall struct {
	name, arguments string
}

type parser struct {
	t        *Transcript
	pending  map[string]pendingCall // tool_use id → call, until its result
	think    string                 // thinking waiting for the next text
	usage    map[string]int         // assistant message id → index in msgUsage
	msgUsage []Usage
	anonCall int
}

func (p *parser) line(line []byte) {
	line = bytes.TrimSpace(line)
	if len(line) == 0 {
		return
	}
	p.t.Lines++
	ev, ok := parseObject(line)
	if !ok {
		p.t.Skipped++
		return
	}
	p.t.Events++
	typ, _ := ev.str("type")
	switch typ {
	case "system":
		if sub, _ := ev.str("subtype"); sub == "init" {
			if m, ok := ev.str("model"); ok && m != "" {
				p.t.Model = m
			}
			if s, ok := ev.str("session_id"); ok && s != "" {
				p.t.SessionID = s
			}
		}
	case "assistant":
		p.assistant(ev)
	case "user":
		p.user(ev)
	case "result":
		p.result(ev)
	}
}

func (p *parser) assistant(ev object) {
	msg, _ := ev.obj("message")
	if p.t.Model == "" {
		if m, ok := msg.str("model"); ok {
			p.t.Model = m
		}
	}
	// One API message arrives as several events sharing its id, each with
	// the message's usage: count it once.
	u, _ := msg.obj("usage")
	usage := usageOf(u)
	id, _ := msg.str("id")
	if i, seen := p.usage[id]; seen && id != "" {
		p.msgUsage[i] = maxUsage(p.msgUsage[i], usage)
	} else {
		p.usage[id] = len(p.msgUsage)
		p.msgUsage = append(p.msgUsage, usage)
	}

	content, _ := msg.arr("content")
	var text string
	var calls []object
	for _, raw := range content {
		b, ok := parseObject(raw)
		if !ok {
			continue
		}
		switch t, _ := b.str("type"); t {
		case "text":
			s, _ := b.str("text")
			text += s
		case "thinking", "reasoning":
			s, _ := b.str("thinking")
			if s == "" {
				s, _ = b.str("text")
			}
			if s != "" {
				if p.think != "" {
					p.think += "\n"
				}
				p.think += s
			}
		case "tool_use":
			calls = append(calls, b)
		}
	}
	if text != "" {
		if p.think != "" {
			text = "<think>\n" + p.think + "\n</think>\n\n" + text
			p.think = ""
		}
		p.addMessage(text)
	}
	for _, b := range calls {
		id, _ := b.str("id")
		if id == "" {
			p.anonCall++
			id = "call_" + strconv.Itoa(p.anonCall) // never answered
		}
		name, _ := b.str("name")
		p.pending[id] = pendingCall{name: name, arguments: arguments(b["input"])}
	}
}

func (p *parser) addMessage(text string) {
	p.t.Items = append(p.t.Items, Item{Type: ItemMessage, ID: "msg_" + strconv.Itoa(len(p.t.Items)), Text: text})
}

// arguments renders a tool input as the function call's arguments: an
// object as compact JSON (key order kept), a string as itself, nothing as
// "{}".
func arguments(raw json.RawMessage) string {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "null" {
		return "{}"
	}
	if raw[0] == '"' {
		var s string
		if json.Unmarshal(raw, &s) == nil {
			if s == "" {
				return "{}"
			}
			return s
		}
	}
	var b bytes.Buffer
	if json.Compact(&b, raw) != nil {
		return "{}"
	}
	return b.String()
}

func (p *parser) user(ev object) {
	msg, _ := ev.obj("message")
	content, _ := msg.arr("content")
	for _, raw := range content {
		b, ok := parseObject(raw)
		if !ok {
			continue
		}
		if t, _ := b.str("type"); t != "tool_result" {
			continue
		}
		id, _ := b.str("tool_use_id")
		if call, ok := p.pending[id]; ok {
			delete(p.pending, id)
			p.t.Items = append(p.t.Items, Item{Type: ItemFunctionCall, ID: id, CallID: id, Name: call.name, Arguments: call.arguments})
		}
		isErr, _ := b.bool("is_error")
		if isErr {
			p.t.ToolErrors++
		}
		p.t.Items = append(p.t.Items, Item{Type: ItemFunctionCallOutput, CallID: id, Output: resultText(b["content"]), IsError: isErr})
	}
}

// resultText renders a tool_result's content: a string as itself, a list
// of blocks as the concatenation of its text blocks (images dropped),
// anything else as compact JSON.
func resultText(raw json.RawMessage) string {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "null" {
		return ""
	}
	switch raw[0] {
	case '"':
		var s string
		if json.Unmarshal(raw, &s) == nil {
			return s
		}
	case '[':
		var blocks []json.RawMessage
		if json.Unmarshal(raw, &blocks) == nil {
			var out string
			for _, br := range blocks {
				if b, ok := parseObject(br); ok {
					if t, _ := b.str("type"); t == "text" {
						s, _ := b.str("text")
						out += s
					}
				}
			}
			return out
		}
	}
	var b bytes.Buffer
	if json.Compact(&b, raw) != nil {
		return ""
	}
	return b.String()
}

func (p *parser) result(ev object) {
	t := p.t
	t.ResultSeen = true
	t.ResultSubtype, _ = ev.str("subtype")
	t.ResultIsError, _ = ev.bool("is_error")
	t.ResultText, _ = ev.str("result")
	t.NumTurns, t.HasNumTurns = ev.int("num_turns")
	if u, ok := ev.obj("usage"); ok {
		t.ResultUsage, t.HasResultUsage = usageOf(u), true
	} else {
		t.ResultUsage, t.HasResultUsage = Usage{}, false
	}
	if t.SessionID == "" {
		t.SessionID, _ = ev.str("session_id")
	}
}

func (p *parser) finish() {
	var sum Usage
	for _, u := range p.msgUsage {
		sum = addUsage(sum, u)
	}
	p.t.AssistantUsage = sum
	p.t.AssistantMessages = len(p.msgUsage)
	p.t.UnansweredCalls = len(p.pending)
}

// usageOf reads a usage object (a nil object reads as zero usage).
func usageOf(u object) Usage {
	var out Usage
	out.InputTokens, _ = u.int("input_tokens")
	out.OutputTokens, _ = u.int("output_tokens")
	out.CacheCreationInputTokens, _ = u.int("cache_creation_input_tokens")
	out.CacheReadInputTokens, _ = u.int("cache_read_input_tokens")
	return clampUsage(out)
}

func clampUsage(u Usage) Usage {
	u.InputTokens = max(u.InputTokens, 0)
	u.OutputTokens = max(u.OutputTokens, 0)
	u.CacheCreationInputTokens = max(u.CacheCreationInputTokens, 0)
	u.CacheReadInputTokens = max(u.CacheReadInputTokens, 0)
	return u
}

func maxUsage(a, b Usage) Usage {
	return Usage{
		InputTokens:              max(a.InputTokens, b.InputTokens),
		OutputTokens:             max(a.OutputTokens, b.OutputTokens),
		CacheCreationInputTokens: max(a.CacheCreationInputTokens, b.CacheCreationInputTokens),
		CacheReadInputTokens:     max(a.CacheReadInputTokens, b.CacheReadInputTokens),
	}
}

func addUsage(a, b Usage) Usage {
	return Usage{
		InputTokens:              satAdd(a.InputTokens, b.InputTokens),
		OutputTokens:             satAdd(a.OutputTokens, b.OutputTokens),
		CacheCreationInputTokens: satAdd(a.CacheCreationInputTokens, b.CacheCreationInputTokens),
		CacheReadInputTokens:     satAdd(a.CacheReadInputTokens, b.CacheReadInputTokens),
	}
}

// maxCount bounds every token count (and sum), keeping it exact in a
// float64 for JSON consumers.
const maxCount = 1 << 53

// satAdd adds two counts in 0..maxCount, saturating at maxCount.
func satAdd(a, b int64) int64 {
	if a > maxCount-b {
		return maxCount
	}
	return a + b
}

// object is a JSON object whose members are decoded on demand, so that a
// member of an unexpected type spoils only itself.
type object map[string]json.RawMessage

// parseObject decodes raw as a JSON object; ok is false for anything else.
func parseObject(raw []byte) (object, bool) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || raw[0] != '{' {
		return nil, false
	}
	var o object
	if json.Unmarshal(raw, &o) != nil {
		return nil, false
	}
	return o, true
}

func (o object) str(k string) (string, bool) {
	raw := bytes.TrimSpace(o[k])
	if len(raw) == 0 || raw[0] != '"' {
		return "", false
	}
	var s string
	if json.Unmarshal(raw, &s) != nil {
		return "", false
	}
	return s, true
}

func (o object) obj(k string) (object, bool) {
	return parseObject(o[k])
}

func (o object) arr(k string) ([]json.RawMessage, bool) {
	raw := bytes.TrimSpace(o[k])
	if len(raw) == 0 || raw[0] != '[' {
		return nil, false
	}
	var a []json.RawMessage
	if json.Unmarshal(raw, &a) != nil {
		return nil, false
	}
	return a, true
}

func (o object) bool(k string) (bool, bool) {
	switch string(bytes.TrimSpace(o[k])) {
	case "true":
		return true, true
	case "false":
		return false, true
	}
	return false, false
}

// int decodes an integral JSON number (3, 3.0, 3e0), clamped to
// -maxCount..maxCount. A fraction or a non-number is not an int.
func (o object) int(k string) (int64, bool) {
	raw := bytes.TrimSpace(o[k])
	if len(raw) == 0 || (raw[0] != '-' && (raw[0] < '0' || raw[0] > '9')) {
		return 0, false
	}
	if n, err := strconv.ParseInt(string(raw), 10, 64); err == nil {
		return min(max(n, -maxCount), maxCount), true
	}
	f, err := strconv.ParseFloat(string(raw), 64)
	if (err != nil && !isRangeErr(err)) || math.IsNaN(f) || f != math.Trunc(f) {
		return 0, false
	}
	return int64(min(max(f, -maxCount), maxCount)), true
}

func isRangeErr(err error) bool {
	ne, ok := err.(*strconv.NumError)
	return ok && ne.Err == strconv.ErrRange
}
