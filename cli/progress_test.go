package cli

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/nemorl/nemorl-slurm/episode"
	"github.com/nemorl/nemorl-slurm/rules"
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
		Outcome: &rules.Outcome{Outcome: rules.Scored, Reward: &reward}}
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
	if len(lines) != 3 || !strings.HasSuffix(lines[0], "ep-a eval job 13 COMPLETED") ||
		!strings.Contains(lines[2], "ep-b author job 10 RUNNING") || strings.Contains(plain.String(), "\x1b") {
		t.Fatalf("plain lines:\n%s", plain.String())
	}
}

// TestProgressLogLines: a log line printed while the table is up goes above
// it, and the table is drawn again below: one table on screen, every line
// kept (bug: tables piled up and log lines were wiped).
func TestProgressLogLines(t *testing.T) {
	rows := []episode.Row{{Episode: "ep-a", Stage: "author", JobID: "10", State: "PENDING", Reason: "Dependency"}}
	var tty bytes.Buffer
	p := &progress{w: &tty, tty: true, last: map[string]string{}}
	p.update(rows)
	p.logf("ep-a: staged on %s", "lab")
	p.update(rows)
	p.logf("second line")
	screen := render(tty.String())
	if n := strings.Count(screen, "EPISODE"); n != 1 {
		t.Errorf("%d tables on screen, want 1:\n%s", n, screen)
	}
	if !strings.Contains(screen, "ep-a: staged on lab\nsecond line\nEPISODE") || !strings.Contains(screen, "PENDING (Dependency)") {
		t.Errorf("screen:\n%s", screen)
	}
}

// render plays the output on a minimal terminal: lines, "ESC[nA" moves
// the cursor up n lines, "ESC[J" clears from the cursor to the end.
func render(out string) string {
	var lines []string
	cur := 0
	for len(out) > 0 {
		if strings.HasPrefix(out, "\x1b[") {
			end := strings.IndexAny(out, "AJ")
			code, arg := out[end], out[2:end]
			out = out[end+1:]
			switch code {
			case 'A':
				n := 0
				for _, c := range arg {
					n = n*10 + int(c-'0')
				}
				cur -= n
			case 'J':
				lines = lines[:cur]
			}
			continue
		}
		i := strings.IndexAny(out, "\n\x1b")
		if i < 0 {
			i = len(out)
		}
		text := out[:i]
		out = out[i:]
		if strings.HasPrefix(out, "\n") {
			out = out[1:]
			if cur < len(lines) {
				lines[cur] = text
			} else {
				lines = append(lines, text)
			}
			cur++
		}
	}
	return strings.Join(lines, "\n")
}

func TestFormatReward(t *testing.T) {
	r, c := 0.45416666666666666, 109
	for _, tc := range []struct {
		o    rules.Outcome
		want string
	}{
		{rules.Outcome{Outcome: rules.Scored, Reward: &r, Correct: &c, Samples: 240}, "0.4542 (109/240)"},
		{rules.Outcome{Outcome: rules.Scored, Reward: &r}, "0.4542"},
		{rules.Outcome{Outcome: rules.InfraFailure}, "-"},
	} {
		if got := formatReward(&tc.o); got != tc.want {
			t.Errorf("formatReward(%+v) = %q, want %q", tc.o, got, tc.want)
		}
	}
	// A cancelled outcome shows no train reward (bug: "train_reward … after 2 inner steps").
	tr, steps := 0.3, 2
	s := summary(&rules.Outcome{Episode: "ep-x", Outcome: rules.InfraFailure, FailureReason: "cancelled", FailureStage: "train", TrainReward: &tr, InnerSteps: &steps})
	if strings.Contains(s, "train_reward") {
		t.Errorf("summary of a cancelled episode: %s", s)
	}
}
