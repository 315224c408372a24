package record

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
	"unicode/utf8"
)

// MaxRecordBytes bounds one record line (prefix + JSON). Real records are a
// few hundred bytes.
const MaxRecordBytes = 64 << 10

// Scan finds and parses the one record of stage in output, the whole of
// the stage's output file. It returns *Author, *Train or *Eval.
//
// Rules, in the order they are applied:
//  1. a line starting with another stage's prefix: foreign_record;
//  2. no line starting with the stage's prefix: missing_record;
//  3. more than one: duplicate_record;
//  4. the one line must hold exactly one JSON object with exactly the
//     record's fields (the optional ones may be left out), each of the
//     right type and finite, and the values must pass the record's
//     Validate.
//
// Only whole prefixes at the start of a line count; a prefix elsewhere in a
// line (a shell trace, a quoted log line) is ignored. A final line without
// a newline counts as a line.
func Scan(stage Stage, output []byte) (Record, error) {
	return ScanTail(stage, output, 0)
}

// ScanTail is Scan for the tail of a stage's output file: tail holds the
// file's bytes from byte offset onward. When offset > 0 the text up to and
// including the first newline of tail may be a partial line and is skipped
// (if the tail holds no newline at all, nothing is scanned). Rejections
// report line numbers counted from the first whole line of the tail and
// byte offsets in the file.
//
// A tail cannot prove the absence of records before it: the collector
// chooses a tail long enough for the stage's expected output after its
// record (the record is printed last).
func ScanTail(stage Stage, tail []byte, offset int64) (Record, error) {
	own := stage.Prefix()
	if own == "" {
		return nil, fmt.Errorf("record: unknown stage %q", stage)
	}
	if offset < 0 {
		return nil, fmt.Errorf("record: negative offset %d", offset)
	}
	text := tail
	base := offset
	if offset > 0 {
		i := bytes.IndexByte(text, '\n')
		if i < 0 {
			text = nil
		} else {
			text = text[i+1:]
			base += int64(i + 1)
		}
	}

	var lines []Line
	lineNo := 0
	for pos := 0; pos < len(text); {
		lineNo++
		end := bytes.IndexByte(text[pos:], '\n')
		var line []byte
		next := len(text)
		if end < 0 {
			line = text[pos:]
		} else {
			line = text[pos : pos+end]
			next = pos + end + 1
		}
		if bytes.HasPrefix(line, []byte(linePrefix)) {
			lines = append(lines, Line{No: lineNo, Offset: base + int64(pos), Body: line})
		}
		pos = next
	}
	return ScanLines(stage, lines)
}

// linePrefix starts every stage's record prefix.
const linePrefix = "NEMORL_ENV_"

// Line is one line of a stage's output: its number (counted from the first
// whole line of the tail), its byte offset in the file and its text
// without the newline.
type Line struct {
	No     int
	Offset int64
	Body   []byte
}

// ScanLines applies Scan's rules to the lines of a tail that start with
// "NEMORL_ENV_" (others are ignored), in file order: for a collector that
// filtered the tail where the file is (grep) instead of reading it all.
func ScanLines(stage Stage, lines []Line) (Record, error) {
	own := stage.Prefix()
	if own == "" {
		return nil, fmt.Errorf("record: unknown stage %q", stage)
	}
	type hit struct {
		line   int
		offset int64
		body   []byte
	}
	var mine []hit
	for _, l := range lines {
		if !bytes.HasPrefix(l.Body, []byte(linePrefix)) {
			continue
		}
		for _, s := range Stages {
			p := s.Prefix()
			if !bytes.HasPrefix(l.Body, []byte(p)) {
				continue
			}
			if s != stage {
				return nil, &Rejection{
					Stage: stage, Reason: ReasonForeignRecord, Line: l.No, Offset: l.Offset,
					Detail: fmt.Sprintf("a %s record (%s) in the %s stage's output", s, strings.TrimSuffix(p, "="), stage),
				}
			}
			mine = append(mine, hit{l.No, l.Offset, l.Body})
		}
	}

	switch len(mine) {
	case 0:
		return nil, &Rejection{Stage: stage, Reason: ReasonMissingRecord, Offset: -1,
			Detail: fmt.Sprintf("no line starts with %s", own)}
	case 1:
	default:
		var where []string
		for _, h := range mine {
			where = append(where, fmt.Sprintf("line %d", h.line))
		}
		return nil, &Rejection{Stage: stage, Reason: ReasonDuplicateRecord, Line: mine[1].line, Offset: mine[1].offset,
			Detail: fmt.Sprintf("%d %s records: %s", len(mine), stage, strings.Join(where, ", "))}
	}
	h := mine[0]
	rec, err := ParseLine(stage, h.body)
	if err != nil {
		var r *Rejection
		if errors.As(err, &r) {
			r.Line, r.Offset = h.line, h.offset
		}
		return nil, err
	}
	return rec, nil
}

// ScanAuthor is ScanTail for the author stage, typed.
func ScanAuthor(tail []byte, offset int64) (*Author, error) {
	r, err := ScanTail(StageAuthor, tail, offset)
	if err != nil {
		return nil, err
	}
	return r.(*Author), nil
}

// ScanTrain is ScanTail for the train stage, typed.
func ScanTrain(tail []byte, offset int64) (*Train, error) {
	r, err := ScanTail(StageTrain, tail, offset)
	if err != nil {
		return nil, err
	}
	return r.(*Train), nil
}

// ScanEval is ScanTail for the eval stage, typed.
func ScanEval(tail []byte, offset int64) (*Eval, error) {
	r, err := ScanTail(StageEval, tail, offset)
	if err != nil {
		return nil, err
	}
	return r.(*Eval), nil
}

// ParseLine parses one record line (with its prefix, without its newline)
// of the given stage and validates it.
func ParseLine(stage Stage, line []byte) (Record, error) {
	prefix := stage.Prefix()
	if prefix == "" {
		return nil, fmt.Errorf("record: unknown stage %q", stage)
	}
	rec, err := parseLine(stage, prefix, line)
	if err != nil {
		err.Stage = stage
		return nil, err
	}
	return rec, nil
}

func parseLine(stage Stage, prefix string, line []byte) (Record, *Rejection) {
	if !bytes.HasPrefix(line, []byte(prefix)) {
		return nil, reject(ReasonMissingRecord, "", "line does not start with %s", prefix)
	}
	if len(line) > MaxRecordBytes {
		return nil, reject(ReasonOversizedRecord, "", "%d bytes, limit %d", len(line), MaxRecordBytes)
	}
	payload := line[len(prefix):]
	if !utf8.Valid(payload) {
		return nil, reject(ReasonMalformedJSON, "", "not valid UTF-8")
	}
	if len(payload) == 0 || payload[0] != '{' {
		return nil, reject(ReasonMalformedJSON, "", "the prefix must be followed directly by a JSON object")
	}
	fields, rej := splitObject(payload)
	if rej != nil {
		return nil, rej
	}

	spec := specs[stage]
	known := make(map[string]fieldKind, len(spec))
	for _, f := range spec {
		known[f.name] = f.kind
	}
	for _, f := range fields {
		if _, ok := known[f.key]; !ok {
			return nil, reject(ReasonUnknownField, f.key, "not a field of the %s record", stage)
		}
	}
	present := make(map[string]json.RawMessage, len(fields))
	for _, f := range fields {
		present[f.key] = f.value
	}
	for _, f := range spec {
		raw, ok := present[f.name]
		if !ok && f.optional {
			continue
		}
		if !ok {
			return nil, reject(ReasonMissingField, f.name, "required%s", missingHint(stage, f.name))
		}
		if rej := checkKind(f, raw); rej != nil {
			return nil, rej
		}
	}

	rec, _ := New(stage)
	dec := json.NewDecoder(bytes.NewReader(payload))
	dec.DisallowUnknownFields()
	if err := dec.Decode(rec); err != nil {
		var te *json.UnmarshalTypeError
		if errors.As(err, &te) {
			return nil, reject(ReasonWrongType, te.Field, "%s does not fit %s", te.Value, te.Type)
		}
		return nil, reject(ReasonMalformedJSON, "", "%v", err)
	}
	if err := rec.Validate(); err != nil {
		var r *Rejection
		if errors.As(err, &r) {
			return nil, r
		}
		return nil, reject(ReasonInvalidValue, "", "%v", err)
	}
	return rec, nil
}

type member struct {
	key   string
	value json.RawMessage
}

// splitObject reads payload as exactly one JSON object followed only by
// JSON whitespace, returning its members in order and rejecting duplicate
// keys (which encoding/json would silently resolve to the last one).
func splitObject(payload []byte) ([]member, *Rejection) {
	dec := json.NewDecoder(bytes.NewReader(payload))
	dec.UseNumber()
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return nil, reject(ReasonMalformedJSON, "", "not a JSON object")
	}
	var out []member
	seen := map[string]bool{}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, reject(ReasonMalformedJSON, "", "%v", err)
		}
		key, ok := tok.(string)
		if !ok {
			return nil, reject(ReasonMalformedJSON, "", "object key expected")
		}
		var raw json.RawMessage
		if err := dec.Decode(&raw); err != nil {
			return nil, reject(ReasonMalformedJSON, key, "%v", err)
		}
		if seen[key] {
			return nil, reject(ReasonDuplicateField, key, "appears more than once")
		}
		seen[key] = true
		out = append(out, member{key, raw})
	}
	if tok, err := dec.Token(); err != nil || tok != json.Delim('}') {
		return nil, reject(ReasonMalformedJSON, "", "unterminated object")
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, reject(ReasonTrailingData, "", "data after the JSON object")
	}
	return out, nil
}

// checkKind checks the JSON type of one raw value against its field's kind,
// catching what encoding/json would accept silently (null) or report
// vaguely (a number too large for float64).
func checkKind(f fieldSpec, raw json.RawMessage) *Rejection {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 {
		return reject(ReasonMalformedJSON, f.name, "empty value")
	}
	got := jsonKind(raw[0])
	if got == "null" {
		return reject(ReasonWrongType, f.name, "null, want %s", f.kind)
	}
	switch f.kind {
	case kindString:
		if got != "string" {
			return reject(ReasonWrongType, f.name, "%s, want %s", got, f.kind)
		}
	case kindBool:
		if got != "boolean" {
			return reject(ReasonWrongType, f.name, "%s, want %s", got, f.kind)
		}
	case kindInt, kindFloat:
		if got != "number" {
			return reject(ReasonWrongType, f.name, "%s, want %s", got, f.kind)
		}
		return checkNumber(f, raw)
	case kindIntArray:
		if got != "array" {
			return reject(ReasonWrongType, f.name, "%s, want %s", got, f.kind)
		}
		var elems []json.RawMessage
		if err := json.Unmarshal(raw, &elems); err != nil {
			return reject(ReasonMalformedJSON, f.name, "%v", err)
		}
		for i, e := range elems {
			e = bytes.TrimSpace(e)
			if len(e) == 0 || jsonKind(e[0]) != "number" {
				return reject(ReasonWrongType, f.name, "entry %d is not an integer", i)
			}
			if rej := checkNumber(fieldSpec{name: f.name, kind: kindInt}, e); rej != nil {
				rej.Detail = fmt.Sprintf("entry %d: %s", i, rej.Detail)
				return rej
			}
		}
	}
	return nil
}

func checkNumber(f fieldSpec, raw []byte) *Rejection {
	v, err := strconv.ParseFloat(string(raw), 64)
	if math.IsInf(v, 0) {
		return reject(ReasonNonFinite, f.name, "%s overflows float64", raw)
	}
	if err != nil && !errors.Is(err, strconv.ErrRange) {
		return reject(ReasonMalformedJSON, f.name, "%s is not a number", raw)
	}
	if f.kind == kindInt {
		if _, err := strconv.ParseInt(string(raw), 10, 64); err != nil {
			return reject(ReasonWrongType, f.name, "%s is not an integer", raw)
		}
	}
	return nil
}

func jsonKind(c byte) string {
	switch {
	case c == '"':
		return "string"
	case c == 't' || c == 'f':
		return "boolean"
	case c == 'n':
		return "null"
	case c == '[':
		return "array"
	case c == '{':
		return "object"
	case c == '-' || (c >= '0' && c <= '9'):
		return "number"
	}
	return "invalid"
}
