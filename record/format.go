package record

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
)

// Format validates r and returns its record line without the newline:
// the stage's prefix, then the JSON object with the fields in the order of
// the struct (stable). A record that Scan would reject is not formatted.
func Format(r Record) (string, error) {
	if err := r.Validate(); err != nil {
		if rej, ok := err.(*Rejection); ok {
			rej.Stage = r.Stage()
		}
		return "", err
	}
	var b strings.Builder
	b.WriteString(r.Stage().Prefix())
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(r); err != nil {
		return "", fmt.Errorf("record: %w", err)
	}
	return strings.TrimSuffix(b.String(), "\n"), nil
}

// Write formats r and writes its line, newline included, with one Write
// call, so the line is not interleaved with other output on an O_APPEND
// file.
func Write(w io.Writer, r Record) error {
	line, err := Format(r)
	if err != nil {
		return err
	}
	_, err = io.WriteString(w, line+"\n")
	return err
}
