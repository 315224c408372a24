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

// MaxLineBytes is the longest stream-json line read whole. A longer line
// (an Edit of a large file makes one: Claude Code echoes the whole file in
// the event's tool_use_result) is skimmed instead: its top-level
// tool_use_result (Claude Code's own copy of the tool's result, which
// response.json never shows) is skipped, any other string longer than
// 4 × MaxLineBytes is cut (Transcript.CutStrings), and what is left is read
// as any other event (Transcript.LongLines counts them).
const MaxLineBytes = 16 << 20

// MaxToolOutputBytes bounds one tool output in response.json: a longer one
// keeps its first MaxToolOutputBytes bytes and ends with a line saying how
// many bytes were cut (Transcript.TruncatedOutputs).
const MaxToolOutputBytes = 1 << 20

// SyntheticModel is the model Claude Code names in the assistant message it
// makes up after an API failure ("API Error: …"): no model wrote it.
const SyntheticModel = "<synthetic>"

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
//     Arguments (the tool input as a JSON string). Emitted when the matching
//     tool_result arrives, right before its output; thinking that preceded
//     the tool_use is emitted where the tool_use appeared, as a message of
//     its own, so it stays before the call. A call no result answered is
//     emitted at the end, without an output (Transcript.UnansweredCalls). A
//     tool_result whose tool_use was never read (its line was dropped) gets
//     a call named "unknown" with arguments "{}" (Transcript.UnknownCalls),
//     so no call goes missing silently.
//   - ItemFunctionCallOutput: CallID (the tool_result's tool_use_id),
//     Output (its text, cut to MaxToolOutputBytes) and IsError (its
//     is_error flag; not part of the Responses object).
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
	// never got a result are at the end, without an output (see
	// UnansweredCalls).
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
	// ResultTerminalReason is the result event's terminal_reason
	// ("api_error", "prompt_too_long", …; "" when absent).
	ResultTerminalReason string
	// NumTurns is the result event's num_turns, valid when HasNumTurns.
	NumTurns    int64
	HasNumTurns bool
	// ResultUsage is the result event's usage (Claude Code's total for the
	// session), valid when HasResultUsage.
	ResultUsage    Usage
	HasResultUsage bool

	// AssistantMessages counts distinct assistant messages from a real
	// model (Claude Code prints one event per content block, all with the
	// message's id): the run's model calls. Synthetic messages are not
	// among them.
	AssistantMessages int
	// APIErrors counts Claude Code's synthetic assistant messages (model
	// "<synthetic>" or is_api_error_message): they never enter Items.
	// APIErrorText is the text of the last one.
	APIErrors    int
	APIErrorText string
	// AssistantUsage sums the usage of the distinct assistant messages
	// (per message, the largest value of each field among its events).
	AssistantUsage Usage

	// Lines counts the non-blank lines read, Events the JSON objects among
	// them, Skipped the others (not JSON, not an object, cut short): the
	// dropped events.
	Lines, Events, Skipped int
	// LongLines counts the lines longer than MaxLineBytes that were
	// skimmed (see MaxLineBytes); CutStrings the strings cut in them.
	LongLines, CutStrings int
	// UnansweredCalls counts tool_use blocks no tool_result answered.
	UnansweredCalls int
	// UnknownCalls counts tool results whose tool_use was never read.
	UnknownCalls int
	// TruncatedOutputs counts the tool outputs cut to MaxToolOutputBytes,
	// TruncatedBytes the bytes cut from them.
	TruncatedOutputs int
	TruncatedBytes   int64
	// ToolErrors counts tool results flagged is_error.
	ToolErrors int
}

// ModelCalls is the number of model calls: the distinct assistant messages
// from a real model. Claude Code's num_turns counts one more than its model
// calls, and its synthetic API-error messages are no calls.
func (t *Transcript) ModelCalls() int { return min(t.AssistantMessages, record.MaxModelCalls) }

// Turns is ModelCalls clamped to record.MaxTurns.
func (t *Transcript) Turns() int { return min(t.ModelCalls(), record.MaxTurns) }

// Dropped is the number of events the converter could not read.
func (t *Transcript) Dropped() int { return min(t.Skipped, record.MaxModelCalls) }

// TerminalReason says why the run ended (one of record.TerminalReasons):
// timeout when timedOut (the research time limit killed Claude Code);
// error without a result event; else the result event's terminal_reason
// when it is api_error, prompt_too_long or max_turns; max_turns for the
// subtype error_max_turns; success for a result not flagged is_error; error
// otherwise. A run that wrote a synthetic API-error message and then ended
// with an error says api_error.
func (t *Transcript) TerminalReason(timedOut bool) string {
	switch {
	case timedOut:
		return record.TerminalTimeout
	case !t.ResultSeen:
		return record.TerminalError
	}
	switch t.ResultTerminalReason {
	case record.TerminalAPIError, record.TerminalPromptTooLong, record.TerminalMaxTurns:
		return t.ResultTerminalReason
	}
	switch {
	case t.ResultSubtype == "error_max_turns":
		return record.TerminalMaxTurns
	case !t.ResultIsError && (t.ResultSubtype == "success" || t.ResultSubtype == ""):
		return record.TerminalSuccess
	case t.APIErrors > 0:
		return record.TerminalAPIError
	}
	return record.TerminalError
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
	p := &parser{t: &Transcript{}, pending: map[string]pendingCall{}, calls: map[string]bool{}, msgs: map[string]int{}}
	br := bufio.NewReaderSize(r, 64<<10)
	var line []byte
	first := true
	for {
		chunk, err := br.ReadSlice('\n')
		if err != nil && err != io.EOF && err != bufio.ErrBufferFull {
			return nil, fmt.Errorf("read transcript: %w", err)
		}
		if len(line)+len(chunk) > maxLine {
			lr := &lineReader{br: br, head: append(line, chunk...), done: err != bufio.ErrBufferFull, eof: err == io.EOF}
			if first {
				lr.head = bytes.TrimPrefix(lr.head, []byte("\xef\xbb\xbf"))
			}
			p.longLine(lr, 4*maxLine)
			if _, derr := io.Copy(io.Discard, lr); derr != nil {
				return nil, fmt.Errorf("read transcript: %w", derr)
			}
			first, line = false, line[:0]
			if lr.eof {
				break
			}
			continue
		}
		line = append(line, chunk...)
		if err == bufio.ErrBufferFull {
			continue
		}
		if len(line) > 0 {
			if first {
				line = bytes.TrimPrefix(line, []byte("\xef\xbb\xbf"))
			}
			p.line(line)
		}
		first = false
		line = line[:0]
		if err == io.EOF {
			break
		}
	}
	p.finish()
	return p.t, nil
}

// lineReader reads the rest of one line from br: head first, then br up to
// and including the next newline (or the end of the input).
type lineReader struct {
	br        *bufio.Reader
	head      []byte
	done, eof bool
}

func (l *lineReader) Read(b []byte) (int, error) {
	for len(l.head) == 0 {
		if l.done {
			return 0, io.EOF
		}
		chunk, err := l.br.ReadSlice('\n')
		switch err {
		case nil:
			l.done = true
		case io.EOF:
			l.done, l.eof = true, true
		case bufio.ErrBufferFull:
		default:
			return 0, err
		}
		l.head = append(l.head[:0], chunk...)
	}
	n := copy(b, l.head)
	l.head = l.head[n:]
	return n, nil
}

// longLine reads a long line token by token: the top-level tool_use_result
// is skipped, other strings longer than maxString are cut,
// and the rest, rebuilt as a JSON object, is read as any event. A line that
// is not one JSON object is dropped (Skipped).
func (p *parser) longLine(r io.Reader, maxString int) {
	maxLine := maxString
	cuts := p.t.CutStrings
	dec := json.NewDecoder(r)
	dec.UseNumber()
	var b bytes.Buffer
	ok := false
	if tok, err := dec.Token(); err == nil && tok == json.Delim('{') {
		b.WriteByte('{')
		ok = p.skimObject(dec, &b, maxLine, true)
	}
	if ok {
		// Nothing but blanks may follow the object on its line.
		if _, err := dec.Token(); err != io.EOF {
			ok = false
		}
	}
	if !ok {
		p.t.CutStrings = cuts
		p.t.Lines++
		p.t.Skipped++
		return
	}
	p.t.LongLines++
	p.line(b.Bytes())
}

// skimObject copies the members of an object whose '{' was read (and
// written) to b, up to and including its '}'.
func (p *parser) skimObject(dec *json.Decoder, b *bytes.Buffer, maxLine int, top bool) bool {
	n := 0
	for {
		tok, err := dec.Token()
		if err != nil {
			return false
		}
		if tok == json.Delim('}') {
			b.WriteByte('}')
			return true
		}
		key, ok := tok.(string)
		if !ok {
			return false
		}
		if top && (key == "tool_use_result" || key == "toolUseResult") {
			if !skipValue(dec) {
				return false
			}
			continue
		}
		if n > 0 {
			b.WriteByte(',')
		}
		n++
		writeJSONString(b, key)
		b.WriteByte(':')
		if !p.skimValue(dec, b, maxLine) {
			return false
		}
	}
}

func (p *parser) skimValue(dec *json.Decoder, b *bytes.Buffer, maxLine int) bool {
	tok, err := dec.Token()
	if err != nil {
		return false
	}
	switch v := tok.(type) {
	case json.Delim:
		switch v {
		case '{':
			b.WriteByte('{')
			return p.skimObject(dec, b, maxLine, false)
		case '[':
			b.WriteByte('[')
			for i := 0; dec.More(); i++ {
				if i > 0 {
					b.WriteByte(',')
				}
				if !p.skimValue(dec, b, maxLine) {
					return false
				}
			}
			if end, err := dec.Token(); err != nil || end != json.Delim(']') {
				return false
			}
			b.WriteByte(']')
			return true
		}
		return false
	case string:
		if len(v) > maxLine {
			p.t.CutStrings++
			cut := len(v) - maxLine
			v = truncateUTF8(v, maxLine) + cutNote(int64(cut))
		}
		writeJSONString(b, v)
	case json.Number:
		b.WriteString(v.String())
	case bool:
		b.WriteString(strconv.FormatBool(v))
	case nil:
		b.WriteString("null")
	default:
		return false
	}
	return true
}

// skipValue reads one value without keeping it.
func skipValue(dec *json.Decoder) bool {
	depth := 0
	for {
		tok, err := dec.Token()
		if err != nil {
			return false
		}
		if d, ok := tok.(json.Delim); ok {
			if d == '{' || d == '[' {
				depth++
			} else {
				depth--
			}
		}
		if depth == 0 {
			return true
		}
	}
}

func writeJSONString(b *bytes.Buffer, s string) {
	enc, _ := json.Marshal(s) // a string always encodes
	b.Write(enc)
}

// cutNote is the line that ends a text cut by n bytes.
func cutNote(n int64) string {
	return "\n[nemorl: " + strconv.FormatInt(n, 10) + " more bytes cut]"
}

type pendingCall struct {
	name, arguments string
}

type parser struct {
	t        *Transcript
	pending  map[string]pendingCall // tool_use id → call, until its result
	order    []string               // tool_use ids in the order read
	calls    map[string]bool        // every tool_use id read
	think    string                 // thinking waiting for the next text or call
	msgs     map[string]int         // assistant message id → index in msgUsage
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
	model, _ := msg.str("model")
	apiErr, _ := ev.bool("is_api_error_message")
	if !apiErr {
		apiErr, _ = msg.bool("is_api_error_message")
	}
	if apiErr || model == SyntheticModel {
		// Claude Code's own "API Error: …" after a failed call: no model
		// wrote it, so it is neither output nor a model call.
		p.t.APIErrors++
		content, _ := msg.arr("content")
		var text string
		for _, raw := range content {
			if b, ok := parseObject(raw); ok {
				if t, _ := b.str("type"); t == "text" {
					s, _ := b.str("text")
					text += s
				}
			}
		}
		p.t.APIErrorText = text
		return
	}
	if p.t.Model == "" && model != "" {
		p.t.Model = model
	}
	// One API message arrives as several events sharing its id, each with
	// the message's usage: count it once.
	u, _ := msg.obj("usage")
	usage := usageOf(u)
	id, _ := msg.str("id")
	if i, seen := p.msgs[id]; seen && id != "" {
		p.msgUsage[i] = maxUsage(p.msgUsage[i], usage)
	} else {
		p.msgs[id] = len(p.msgUsage)
		p.msgUsage = append(p.msgUsage, usage)
	}

	// Blocks in order: thinking waits for the next text or tool call, so a
	// thought stays before the call it led to.
	content, _ := msg.arr("content")
	var text string
	flushText := func() {
		if text != "" {
			p.addMessage(p.takeThink() + text)
			text = ""
		}
	}
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
			flushText()
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
			flushText()
			if p.think != "" {
				p.addMessage(p.takeThink())
			}
			p.call(b)
		}
	}
	flushText()
}

// takeThink returns the buffered thinking as a "<think>" prefix ("" when
// there is none) and clears it.
func (p *parser) takeThink() string {
	if p.think == "" {
		return ""
	}
	s := "<think>\n" + p.think + "\n</think>\n\n"
	p.think = ""
	return s
}

// call keeps a tool_use block until its result, once per id.
func (p *parser) call(b object) {
	id, _ := b.str("id")
	if id == "" {
		p.anonCall++
		id = "call_" + strconv.Itoa(p.anonCall) // never answered
	} else if p.calls[id] {
		return // the same block printed again
	}
	name, _ := b.str("name")
	p.calls[id] = true
	p.pending[id] = pendingCall{name: name, arguments: arguments(b["input"])}
	p.order = append(p.order, id)
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
		} else if !p.calls[id] {
			// Its tool_use was never read (its line was dropped): say so
			// rather than leave an output without its call.
			p.t.UnknownCalls++
			p.calls[id] = true
			p.t.Items = append(p.t.Items, Item{Type: ItemFunctionCall, ID: id, CallID: id, Name: "unknown", Arguments: "{}"})
		}
		isErr, _ := b.bool("is_error")
		if isErr {
			p.t.ToolErrors++
		}
		out := resultText(b["content"])
		if len(out) > MaxToolOutputBytes {
			kept := truncateUTF8(out, MaxToolOutputBytes)
			cut := int64(len(out) - len(kept))
			p.t.TruncatedOutputs++
			p.t.TruncatedBytes = satAdd(p.t.TruncatedBytes, cut)
			out = kept + cutNote(cut)
		}
		p.t.Items = append(p.t.Items, Item{Type: ItemFunctionCallOutput, CallID: id, Output: out, IsError: isErr})
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
	t.ResultTerminalReason, _ = ev.str("terminal_reason")
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
	if p.think != "" {
		p.addMessage(p.takeThink())
	}
	for _, id := range p.order {
		if call, ok := p.pending[id]; ok {
			p.t.Items = append(p.t.Items, Item{Type: ItemFunctionCall, ID: id, CallID: id, Name: call.name, Arguments: call.arguments})
		}
	}
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
