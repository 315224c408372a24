package remote

import (
	"strconv"
	"strings"
	"testing"
	"unicode/utf8"
)

// TestBrief: a command line up to briefMax bytes is shown whole; a longer
// one as its head (cut at a rune boundary) and how many bytes were left
// out, and so are the errors that name it.
func TestBrief(t *testing.T) {
	short := Command{Argv: []string{"sacct", "--jobs=1,2"}}
	if got := short.Brief(); got != "sacct --jobs=1,2" {
		t.Errorf("short command: %q", got)
	}
	ids := make([]string, 5000)
	for i := range ids {
		ids[i] = strconv.Itoa(1000000 + i)
	}
	long := Command{Argv: []string{"sacct", "--jobs=" + strings.Join(ids, ",")}}
	full := long.String()
	got := long.Brief()
	head, rest, ok := strings.Cut(got, "… (")
	if !ok || len(head) != briefMax || !strings.HasPrefix(full, head) || rest != strconv.Itoa(len(full)-len(head))+" more bytes)" {
		t.Errorf("long command (%d bytes) briefed as %q", len(full), got)
	}
	multi := strings.Repeat("é", briefMax) // two bytes each: briefMax falls on a rune boundary or not
	for _, s := range []string{multi, "x" + multi} {
		b := Brief(s)
		if !utf8.ValidString(b) || !strings.Contains(b, " more bytes)") || len(b) > briefMax+len("… (99999 more bytes)") {
			t.Errorf("multibyte line briefed as %q", b)
		}
	}
	for _, err := range []error{
		&CommandError{Host: "h", Command: full, ExitStatus: 1, Stderr: "sacct: error: slurmdbd: Connection refused"},
		&OutcomeUnknownError{Host: "h", Command: full, Err: ErrOutcomeUnknown},
	} {
		msg := err.Error()
		if len(msg) > 1000 || !strings.Contains(msg, "sacct --jobs=1000000,") || !strings.Contains(msg, "more bytes") {
			t.Errorf("%T of a %d-byte command: %d bytes: %.200q", err, len(full), len(msg), msg)
		}
	}
}
