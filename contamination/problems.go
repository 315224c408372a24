package contamination

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
)

// Problem is one eval problem, in dataset order.
type Problem struct {
	ID        string // "1".."30": its 1-based row number in the dataset
	Statement string
	Answer    string // as in the dataset, e.g. "70"
}

// maxProblemLine bounds one JSONL row of the problem file.
const maxProblemLine = 16 << 20

// LoadProblems reads JSONL rows {"question": ..., "expected_answer": ...}
// (other keys ignored). Errors name the line number; empty lines are errors;
// it requires at least one row and unique questions.
func LoadProblems(r io.Reader) ([]Problem, error) {
	br := bufio.NewReader(r)
	var out []Problem
	seen := map[string]int{}
	for lineNo := 1; ; lineNo++ {
		line, err := readLine(br)
		if err == io.EOF && line == nil {
			break
		}
		if err != nil && err != io.EOF {
			return nil, fmt.Errorf("line %d: %w", lineNo, err)
		}
		if lineNo == 1 {
			line = bytes.TrimPrefix(line, []byte("\xef\xbb\xbf"))
		}
		line = bytes.TrimSuffix(line, []byte("\r"))
		if len(bytes.TrimSpace(line)) == 0 {
			return nil, fmt.Errorf("line %d: empty line", lineNo)
		}
		var row map[string]json.RawMessage
		if e := json.Unmarshal(line, &row); e != nil {
			return nil, fmt.Errorf("line %d: %v", lineNo, e)
		}
		if row == nil {
			return nil, fmt.Errorf("line %d: not a JSON object", lineNo)
		}
		qraw, ok := row["question"]
		if !ok {
			return nil, fmt.Errorf("line %d: no \"question\"", lineNo)
		}
		var q string
		if e := json.Unmarshal(qraw, &q); e != nil {
			return nil, fmt.Errorf("line %d: \"question\" is not a string", lineNo)
		}
		if strings.TrimSpace(q) == "" {
			return nil, fmt.Errorf("line %d: empty \"question\"", lineNo)
		}
		araw, ok := row["expected_answer"]
		if !ok {
			return nil, fmt.Errorf("line %d: no \"expected_answer\"", lineNo)
		}
		a, e := answerText(araw)
		if e != nil {
			return nil, fmt.Errorf("line %d: \"expected_answer\": %v", lineNo, e)
		}
		if prev, dup := seen[q]; dup {
			return nil, fmt.Errorf("line %d: question repeats line %d", lineNo, prev)
		}
		seen[q] = lineNo
		out = append(out, Problem{ID: strconv.Itoa(lineNo), Statement: q, Answer: a})
		if err == io.EOF {
			break
		}
	}
	if len(out) == 0 {
		return nil, errors.New("no problems")
	}
	return out, nil
}

// readLine returns the next line without its '\n'; at the end it returns
// (nil, io.EOF), or the unterminated last line with io.EOF.
func readLine(br *bufio.Reader) ([]byte, error) {
	var buf []byte
	for {
		part, err := br.ReadSlice('\n')
		if len(buf)+len(part) > maxProblemLine {
			return nil, fmt.Errorf("line longer than %d bytes", maxProblemLine)
		}
		buf = append(buf, part...)
		switch err {
		case nil:
			return buf[:len(buf)-1], nil
		case bufio.ErrBufferFull:
			continue
		case io.EOF:
			if len(buf) == 0 {
				return nil, io.EOF
			}
			return buf, io.EOF
		default:
			return nil, err
		}
	}
}

// answerText accepts a JSON string or number.
func answerText(raw json.RawMessage) (string, error) {
	var s string
	if err := json.Unmarshal(raw, &s); err == nil {
		return s, nil
	}
	var n json.Number
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	if err := dec.Decode(&n); err == nil {
		return n.String(), nil
	}
	return "", errors.New("not a string or number")
}

// answerValue is the integer an answer denotes ("70", "070", " 70 ",
// "70.0"), or noNumber.
func answerValue(a string) int {
	a = strings.TrimSpace(a)
	if i := strings.IndexByte(a, '.'); i >= 0 && strings.Trim(a[i+1:], "0") == "" {
		a = a[:i]
	}
	if a == "" || len(a) > 6 {
		return noNumber
	}
	v := 0
	for i := 0; i < len(a); i++ {
		if !isDigit(a[i]) {
			return noNumber
		}
		v = v*10 + int(a[i]-'0')
	}
	return v
}
