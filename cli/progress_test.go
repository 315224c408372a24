package cli

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/nemorl/nemorl-slurm/episode"
)

// TestProgress: on a terminal the table is redrawn in place (cursor up over
// the previous table, clear, draw); elsewhere one line per change.
func TestProgress(t *testing.T) {
	reward := 0.4375
	rows := []episode.Row{
		{Episode: "ep-a", Stage: "train", JobID: "12", State: "RUNNING", Elapsed: 75 * time.Second},
		{Episode: "ep-b", Stage: "author", JobID: "10", State: "PENDING"},
	}
	var tty bytes.Buffer
	p := &progress{w: &tty, tty: true, last: map[string]string{}}
	p.update(rows)
	first := tty.String()
	if !strings.HasPrefix(first, "EPISODE") || !strings.Contains(first, "ep-a") || !strings.Contains(first, "0:01:15") || strings.Contains(first, "\x1b[") {
		t.Fatalf("first table:\n%q", first)
	}
	rows[0] = episode.Row{Episode: "ep-a", Stage: "eval", JobID: "13", State: "COMPLETED",
		Outcome: &episode.Outcome{Outcome: episode.Scored, Reward: &reward}}
	p.update(rows)
	redraw := strings.TrimPrefix(tty.String(), first)
	if !strings.HasPrefix(redraw, "\x1b[3A\x1b[J") || !strings.Contains(redraw, "scored reward 0.4375") {
		t.Fatalf("redraw: %q", redraw)
	}

	var plain bytes.Buffer
	q := &progress{w: &plain, last: map[string]string{}}
	q.update(rows)
	q.update(rows) // nothing changed: nothing printed
	rows[1].State = "RUNNING"
	q.update(rows)
	lines := strings.Split(strings.TrimSpace(plain.String()), "\n")
	if len(lines) != 3 || !strings.Contains(lines[0], "ep-a eval job 13 COMPLETED → scored reward 0.4375") ||
		!strings.Contains(lines[2], "ep-b author job 10 RUNNING") || strings.Contains(plain.String(), "\x1b") {
		t.Fatalf("plain lines:\n%s", plain.String())
	}
}
