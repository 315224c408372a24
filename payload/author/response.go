package author

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"strconv"
	"time"
	"unicode/utf8"

	"github.com/nemorl/nemorl-slurm/record"
)

// Response statuses and incomplete reasons. An incomplete response's
// reason is the run's terminal reason (Transcript.TerminalReason).
const (
	StatusCompleted  = "completed"
	StatusIncomplete = "incomplete"

	// ReasonTimeout: the research time limit killed Claude Code.
	ReasonTimeout = record.TerminalTimeout
	// ReasonMaxTurns: Claude Code stopped at --max-turns.
	ReasonMaxTurns = record.TerminalMaxTurns
	// ReasonAPIError: the policy endpoint kept failing; Claude Code gave up.
	ReasonAPIError = record.TerminalAPIError
	// ReasonPromptTooLong: the endpoint refused the context as too long.
	ReasonPromptTooLong = record.TerminalPromptTooLong
	// ReasonError: the stream has no final result event (Claude Code died
	// or its output was cut), or its result is flagged is_error for another
	// reason.
	ReasonError = record.TerminalError
)

// Response is response.json: a Responses-API response object, with the
// fields NeMo Gym's NeMoGymResponse requires (tool_choice, tools and
// parallel_tool_calls carry the Responses defaults).
type Response struct {
	ID                string             `json:"id"`
	Object            string             `json:"object"`
	CreatedAt         int64              `json:"created_at"`
	Model             string             `json:"model"`
	Status            string             `json:"status"`
	IncompleteDetails *IncompleteDetails `json:"incomplete_details"`
	// Output holds *OutputMessage, *FunctionCall and *FunctionCallOutput.
	Output            []any             `json:"output"`
	ParallelToolCalls bool              `json:"parallel_tool_calls"`
	ToolChoice        string            `json:"tool_choice"`
	Tools             []any             `json:"tools"`
	Usage             ResponseUsage     `json:"usage"`
	Metadata          map[string]string `json:"metadata"`
}

// IncompleteDetails says why a response is incomplete.
type IncompleteDetails struct {
	Reason string `json:"reason"`
}

// OutputMessage is an assistant message item.
type OutputMessage struct {
	Type    string       `json:"type"` // "message"
	ID      string       `json:"id"`
	Role    string       `json:"role"`   // "assistant"
	Status  string       `json:"status"` // "completed"
	Content []OutputText `json:"content"`
}

// OutputText is the one content part of an OutputMessage.
type OutputText struct {
	Type        string `json:"type"` // "output_text"
	Text        string `json:"text"`
	Annotations []any  `json:"annotations"`
}

// FunctionCall is a tool call item.
type FunctionCall struct {
	Type      string `json:"type"` // "function_call"
	ID        string `json:"id"`
	CallID    string `json:"call_id"`
	Name      string `json:"name"`
	Arguments string `json:"arguments"`
	Status    string `json:"status"` // "completed"
}

// FunctionCallOutput is a tool result item.
type FunctionCallOutput struct {
	Type   string `json:"type"` // "function_call_output"
	CallID string `json:"call_id"`
	Output string `json:"output"`
	Status string `json:"status"` // "completed"
}

// ResponseUsage is the Responses-API usage block.
type ResponseUsage struct {
	InputTokens         int64               `json:"input_tokens"`
	OutputTokens        int64               `json:"output_tokens"`
	TotalTokens         int64               `json:"total_tokens"`
	InputTokensDetails  InputTokensDetails  `json:"input_tokens_details"`
	OutputTokensDetails OutputTokensDetails `json:"output_tokens_details"`
}

// InputTokensDetails is always zero cached tokens, as in the reference.
type InputTokensDetails struct {
	CachedTokens int64 `json:"cached_tokens"`
}

// OutputTokensDetails is always zero reasoning tokens, as in the reference.
type OutputTokensDetails struct {
	ReasoningTokens int64 `json:"reasoning_tokens"`
}

// maxMetadataValue is the Responses API's bound on a metadata value.
const maxMetadataValue = 512

// Response builds response.json from the transcript.
//
// id is the response id ("" draws a random "resp_<32 hex>"); created gives
// created_at (unix seconds); model names the model ("" uses the
// transcript's). Status is "completed" only when the run's terminal reason
// (Transcript.TerminalReason) is success; otherwise it is "incomplete" with
// incomplete_details.reason the terminal reason: timeout, max_turns,
// api_error, prompt_too_long or error.
//
// Claude Code's synthetic API-error messages are never in the output. If
// the transcript holds no assistant message, one empty message is appended.
// Usage is Transcript.Usage (input and output tokens; cached and reasoning
// tokens are 0). Metadata holds num_turns and model_calls (the model calls,
// Transcript.Turns and ModelCalls), terminal_reason and dropped_events (as
// in the author record), and, when known or non-zero: session_id,
// result_subtype, claude_num_turns (Claude Code's own count, one more than
// its model calls), api_error (the text of Claude Code's last API-error
// message), long_lines, truncated_outputs and truncated_bytes, unknown_calls
// and unanswered_calls.
func (t *Transcript) Response(id string, created time.Time, model string, timedOut bool) *Response {
	if id == "" {
		id = NewResponseID()
	}
	if model == "" {
		model = t.Model
	}
	reason := t.TerminalReason(timedOut)
	r := &Response{
		ID:                id,
		Object:            "response",
		CreatedAt:         created.Unix(),
		Model:             model,
		Status:            StatusCompleted,
		Output:            make([]any, 0, len(t.Items)+1),
		ParallelToolCalls: true,
		ToolChoice:        "auto",
		Tools:             []any{},
		Metadata: map[string]string{
			"num_turns":       strconv.Itoa(t.Turns()),
			"model_calls":     strconv.Itoa(t.ModelCalls()),
			"terminal_reason": reason,
			"dropped_events":  strconv.Itoa(t.Dropped()),
		},
	}
	if reason != record.TerminalSuccess {
		r.Status = StatusIncomplete
		r.IncompleteDetails = &IncompleteDetails{Reason: reason}
	}
	counts := map[string]int64{"long_lines": int64(t.LongLines), "truncated_outputs": int64(t.TruncatedOutputs),
		"truncated_bytes": t.TruncatedBytes, "unknown_calls": int64(t.UnknownCalls), "unanswered_calls": int64(t.UnansweredCalls)}
	for k, n := range counts {
		if n > 0 {
			r.Metadata[k] = strconv.FormatInt(n, 10)
		}
	}
	if t.HasNumTurns {
		r.Metadata["claude_num_turns"] = strconv.FormatInt(t.NumTurns, 10)
	}
	if t.APIErrors > 0 {
		r.Metadata["api_error"] = truncateUTF8(t.APIErrorText, maxMetadataValue)
	}

	answered := map[string]bool{}
	for _, it := range t.Items {
		if it.Type == ItemFunctionCallOutput {
			answered[it.CallID] = true
		}
	}
	hasMessage := false
	for _, it := range t.Items {
		switch it.Type {
		case ItemMessage:
			hasMessage = true
			r.Output = append(r.Output, message(it.ID, it.Text))
		case ItemFunctionCall:
			// A call no result answered (the run ended first) is incomplete.
			status := StatusIncomplete
			if answered[it.CallID] {
				status = StatusCompleted
			}
			r.Output = append(r.Output, &FunctionCall{Type: string(ItemFunctionCall), ID: it.ID, CallID: it.CallID,
				Name: it.Name, Arguments: it.Arguments, Status: status})
		case ItemFunctionCallOutput:
			r.Output = append(r.Output, &FunctionCallOutput{Type: string(ItemFunctionCallOutput), CallID: it.CallID,
				Output: it.Output, Status: StatusCompleted})
		}
	}
	if !hasMessage {
		r.Output = append(r.Output, message("msg_"+strconv.Itoa(len(r.Output)), ""))
	}

	u := t.Usage()
	r.Usage = ResponseUsage{InputTokens: u.InputTokens, OutputTokens: u.OutputTokens,
		TotalTokens: satAdd(u.InputTokens, u.OutputTokens)}

	if t.SessionID != "" {
		r.Metadata["session_id"] = truncateUTF8(t.SessionID, maxMetadataValue)
	}
	if t.ResultSubtype != "" {
		r.Metadata["result_subtype"] = truncateUTF8(t.ResultSubtype, maxMetadataValue)
	}
	return r
}

func message(id, text string) *OutputMessage {
	return &OutputMessage{Type: string(ItemMessage), ID: id, Role: "assistant", Status: StatusCompleted,
		Content: []OutputText{{Type: "output_text", Text: text, Annotations: []any{}}}}
}

// JSON encodes the response as written to response.json: compact, HTML
// characters not escaped, one trailing newline. Invalid UTF-8 in the
// transcript becomes U+FFFD.
func (r *Response) JSON() ([]byte, error) {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(r); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}

// NewResponseID returns a random "resp_<32 hex>" id.
func NewResponseID() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails
	return "resp_" + hex.EncodeToString(b[:])
}

// truncateUTF8 cuts s to at most n bytes without splitting a character.
func truncateUTF8(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}
