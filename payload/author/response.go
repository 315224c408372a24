package author

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"strconv"
	"time"
	"unicode/utf8"
)

// Response statuses and incomplete reasons.
const (
	StatusCompleted  = "completed"
	StatusIncomplete = "incomplete"

	// ReasonTimeout: the research time limit killed Claude Code.
	ReasonTimeout = "timeout"
	// ReasonMaxTurns: Claude Code stopped at --max-turns.
	ReasonMaxTurns = "max_turns"
	// ReasonError: the stream has no final result event (Claude Code died
	// or its output was cut).
	ReasonError = "error"
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
// transcript's). Status is "incomplete" with incomplete_details.reason
// "timeout" when timedOut, else "max_turns" when Claude Code's result
// subtype is error_max_turns, else "error" when the stream has no result
// event; otherwise it is "completed" (also for a result of subtype
// error_during_execution, whose subtype metadata.result_subtype keeps).
//
// If the transcript holds no assistant message, one empty message is
// appended. Usage is Transcript.Usage (input and output tokens; cached and
// reasoning tokens are 0). Metadata holds num_turns (Transcript.Turns, the
// record's turns) and, when known, session_id and result_subtype.
func (t *Transcript) Response(id string, created time.Time, model string, timedOut bool) *Response {
	if id == "" {
		id = NewResponseID()
	}
	if model == "" {
		model = t.Model
	}
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
		Metadata:          map[string]string{"num_turns": strconv.Itoa(t.Turns())},
	}
	switch {
	case timedOut:
		r.IncompleteDetails = &IncompleteDetails{Reason: ReasonTimeout}
	case t.ResultSubtype == "error_max_turns":
		r.IncompleteDetails = &IncompleteDetails{Reason: ReasonMaxTurns}
	case !t.ResultSeen:
		r.IncompleteDetails = &IncompleteDetails{Reason: ReasonError}
	}
	if r.IncompleteDetails != nil {
		r.Status = StatusIncomplete
	}

	hasMessage := false
	for _, it := range t.Items {
		switch it.Type {
		case ItemMessage:
			hasMessage = true
			r.Output = append(r.Output, message(it.ID, it.Text))
		case ItemFunctionCall:
			r.Output = append(r.Output, &FunctionCall{Type: string(ItemFunctionCall), ID: it.ID, CallID: it.CallID,
				Name: it.Name, Arguments: it.Arguments, Status: StatusCompleted})
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
