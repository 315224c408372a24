package serve

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"unicode/utf8"
)

// MaxBodyBytes bounds a /run request body (/aggregate_metrics is read as
// a stream, of any size).
const MaxBodyBytes = 4 << 20

// Gym's row keys (nemo_gym/global_config.py).
const (
	keyParams       = "responses_create_params"
	keyTaskIndex    = "_ng_task_index"
	keyRolloutIndex = "_ng_rollout_index"
	keyAttemptIndex = "_ng_attempt_index"
	keyRolloutID    = "_ng_rollout_id"
)

// row is a validated /run body.
type row struct {
	// params is responses_create_params as sent (echoed back).
	params json.RawMessage
	// task is the author's task: metadata.problem_statement, else the
	// last user message of input.
	task string
	// taskIndex and rolloutIndex are Gym's, when the row has them.
	taskIndex, rolloutIndex *int64
	// ng holds every top-level _ng_* key of the row as sent (Gym's and NeMo
	// RL's rollout stamps: indices, _ng_attempt_index, _ng_run_id,
	// _ng_rollout_id, …): all of them are part of the rollout's identity.
	ng map[string]json.RawMessage
}

// requestError is a 400 (or 413) naming the field at fault.
type requestError struct {
	status int
	field  string
	msg    string
}

func (e *requestError) Error() string { return e.field + ": " + e.msg }

func bad(field, format string, args ...any) *requestError {
	return &requestError{status: http.StatusBadRequest, field: field, msg: fmt.Sprintf(format, args...)}
}

// readBody reads at most limit bytes of r's body: more is a 413.
func readBody(w http.ResponseWriter, r *http.Request, limit int64) ([]byte, *requestError) {
	b, err := io.ReadAll(http.MaxBytesReader(w, r.Body, limit))
	if err != nil {
		var mb *http.MaxBytesError
		if errors.As(err, &mb) {
			return nil, &requestError{status: http.StatusRequestEntityTooLarge, field: "body", msg: fmt.Sprintf("larger than %d bytes", limit)}
		}
		return nil, bad("body", "unreadable: %v", err)
	}
	return b, nil
}

// decodeObject parses b as exactly one JSON object.
func decodeObject(b []byte, field string) (map[string]json.RawMessage, *requestError) {
	if !utf8.Valid(b) {
		return nil, bad(field, "not UTF-8")
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	var m map[string]json.RawMessage
	if err := dec.Decode(&m); err != nil {
		var te *json.UnmarshalTypeError
		if errors.As(err, &te) {
			return nil, bad(field, "want a JSON object, got %s", te.Value)
		}
		return nil, bad(field, "not JSON: %v", err)
	}
	if m == nil {
		return nil, bad(field, "want a JSON object, got null")
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, bad(field, "trailing data after the JSON object")
	}
	return m, nil
}

// parseRow validates a /run body: responses_create_params an object, the
// task found, Gym's indices integers when present. Every other key is
// allowed and ignored.

// rolloutIDPattern is Gym's ROLLOUT_ID_PATTERN for _ng_rollout_id.
var rolloutIDPattern = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]*$`)

func parseRow(b []byte) (*row, *requestError) {
	top, rerr := decodeObject(b, "body")
	if rerr != nil {
		return nil, rerr
	}
	rawParams, ok := top[keyParams]
	if !ok {
		return nil, bad(keyParams, "required")
	}
	var params map[string]json.RawMessage
	if err := json.Unmarshal(rawParams, &params); err != nil || params == nil {
		return nil, bad(keyParams, "want a JSON object")
	}
	rw := &row{params: rawParams, ng: map[string]json.RawMessage{}}
	for k, v := range top {
		if strings.HasPrefix(k, "_ng_") {
			rw.ng[k] = v
		}
	}
	if raw, ok := top[keyRolloutID]; ok && string(raw) != "null" {
		// Gym rejects a malformed explicit id rather than rewrite it
		// (nemo_gym's ROLLOUT_ID_PATTERN): it is a path segment and a
		// file name downstream.
		var id string
		if err := json.Unmarshal(raw, &id); err != nil || !rolloutIDPattern.MatchString(id) {
			return nil, bad(keyRolloutID, "must be a string of letters, digits, dots, dashes or underscores starting with a letter or digit; got %s", abbreviate(string(raw)))
		}
	}
	if raw, ok := top[keyAttemptIndex]; ok && string(raw) != "null" {
		if _, err := strconv.ParseInt(string(raw), 10, 64); err != nil {
			return nil, bad(keyAttemptIndex, "want an integer, got %s", abbreviate(string(raw)))
		}
	}
	for _, k := range []string{keyTaskIndex, keyRolloutIndex} {
		raw, ok := top[k]
		if !ok || string(raw) == "null" {
			continue
		}
		n, err := strconv.ParseInt(string(raw), 10, 64)
		if err != nil {
			return nil, bad(k, "want an integer, got %s", abbreviate(string(raw)))
		}
		if k == keyTaskIndex {
			rw.taskIndex = &n
		} else {
			rw.rolloutIndex = &n
		}
	}
	if raw, ok := params["metadata"]; ok && string(raw) != "null" {
		var md map[string]json.RawMessage
		if err := json.Unmarshal(raw, &md); err != nil {
			return nil, bad(keyParams+".metadata", "want a JSON object")
		}
		if ps, ok := md["problem_statement"]; ok && string(ps) != "null" {
			var s string
			if err := json.Unmarshal(ps, &s); err != nil {
				return nil, bad(keyParams+".metadata.problem_statement", "want a string")
			}
			if strings.TrimSpace(s) == "" {
				return nil, bad(keyParams+".metadata.problem_statement", "empty")
			}
			rw.task = s
		}
	}
	if rw.task == "" {
		task, rerr := lastUserMessage(params["input"])
		if rerr != nil {
			return nil, rerr
		}
		if task == "" {
			return nil, bad(keyParams+".metadata.problem_statement", "required: no problem_statement and no user message in "+keyParams+".input")
		}
		rw.task = task
	}
	if strings.ContainsRune(rw.task, 0) {
		return nil, bad(keyParams+".metadata.problem_statement", "contains NUL")
	}
	return rw, nil
}

// lastUserMessage is the text of the last user message of a Responses
// input: a string (itself a user message), or a list of items whose
// content is a string or a list of parts with text.
func lastUserMessage(raw json.RawMessage) (string, *requestError) {
	const field = keyParams + ".input"
	if len(raw) == 0 || string(raw) == "null" {
		return "", nil
	}
	var s string
	if err := json.Unmarshal(raw, &s); err == nil {
		return s, nil
	}
	var items []json.RawMessage
	if err := json.Unmarshal(raw, &items); err != nil {
		return "", bad(field, "want a string or a list of items")
	}
	for i := len(items) - 1; i >= 0; i-- {
		var it struct {
			Role    string          `json:"role"`
			Content json.RawMessage `json:"content"`
		}
		if err := json.Unmarshal(items[i], &it); err != nil {
			return "", bad(fmt.Sprintf("%s[%d]", field, i), "want an object")
		}
		if it.Role != "user" {
			continue
		}
		var text string
		if err := json.Unmarshal(it.Content, &text); err == nil {
			return text, nil
		}
		var parts []struct {
			Type string  `json:"type"`
			Text *string `json:"text"`
		}
		if err := json.Unmarshal(it.Content, &parts); err != nil {
			return "", bad(fmt.Sprintf("%s[%d].content", field, i), "want a string or a list of content parts")
		}
		var b strings.Builder
		for _, p := range parts {
			if p.Text != nil {
				if b.Len() > 0 {
					b.WriteString("\n")
				}
				b.WriteString(*p.Text)
			}
		}
		return b.String(), nil
	}
	return "", nil
}

// MaxIdempotencyKey bounds an Idempotency-Key header.
const MaxIdempotencyKey = 256

// idempotencyKey is the row's rollout identity within serve's scope (the
// config and the policy): the Idempotency-Key header, else, for a row
// that Gym or NeMo RL numbered (_ng_task_index and _ng_rollout_index), a
// hash of every _ng_* key it carries with the canonical
// responses_create_params; "" when the row has neither, and so no
// identity: every such request is a new rollout.
func idempotencyKey(header string, rw *row) (string, *requestError) {
	if header != "" {
		if len(header) > MaxIdempotencyKey {
			return "", bad("Idempotency-Key", "longer than %d bytes", MaxIdempotencyKey)
		}
		for _, r := range header {
			if r < 0x21 || r > 0x7e {
				return "", bad("Idempotency-Key", "want printable ASCII without spaces")
			}
		}
		return "h:" + header, nil
	}
	if rw.taskIndex == nil || rw.rolloutIndex == nil {
		return "", nil
	}
	ident := map[string]any{}
	for k, raw := range rw.ng {
		var v any
		if err := json.Unmarshal(raw, &v); err != nil {
			return "", bad(k, "not JSON")
		}
		ident[k] = v
	}
	var params any
	if err := json.Unmarshal(rw.params, &params); err != nil {
		return "", bad(keyParams, "want a JSON object")
	}
	ident[keyParams] = params
	canon, err := json.Marshal(ident) // map keys sorted: the same object, the same bytes
	if err != nil {
		return "", bad(keyParams, "%v", err)
	}
	sum := sha256.Sum256(canon)
	return fmt.Sprintf("g:%d:%d:%s", *rw.taskIndex, *rw.rolloutIndex, hex.EncodeToString(sum[:])), nil
}

// taskOf is the row's _ng_task_index as placement groups rows by it ("":
// none).
func taskOf(rw *row) string {
	if rw.taskIndex == nil {
		return ""
	}
	return strconv.FormatInt(*rw.taskIndex, 10)
}

// taskOfKey is the task index an identity key of a numbered row carries
// ("g:TASK:ROLLOUT:HASH"), "" for any other key: what a re-attached
// episode's row was, for placement.
func taskOfKey(key string) string {
	rest, ok := strings.CutPrefix(key, "g:")
	if !ok {
		return ""
	}
	task, _, _ := strings.Cut(rest, ":")
	if _, err := strconv.ParseInt(task, 10, 64); err != nil {
		return ""
	}
	return task
}

func abbreviate(s string) string {
	if len(s) > 40 {
		return s[:40] + "…"
	}
	return s
}
