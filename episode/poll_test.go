package episode

import (
	"testing"
	"time"
)

// TestNextInterval: a busy controller's answer backs the poll off to
// pollMax at once; a change brings it back to pollMin; otherwise it
// doubles up to pollMax.
func TestNextInterval(t *testing.T) {
	const lo, hi = 5 * time.Second, 60 * time.Second
	for _, c := range []struct {
		last time.Duration
		step pollStep
		want time.Duration
	}{
		{lo, pollStep{busy: true}, hi},
		{lo, pollStep{busy: true, changed: true}, hi},
		{hi, pollStep{changed: true}, lo},
		{lo, pollStep{}, 2 * lo},
		{40 * time.Second, pollStep{}, hi},
		{hi, pollStep{}, hi},
	} {
		if got := nextInterval(c.last, c.step, lo, hi); got != c.want {
			t.Errorf("nextInterval(%v, %+v) = %v, want %v", c.last, c.step, got, c.want)
		}
	}
}

// TestJitter: every wait lies within 0 to +20 % of the interval (never
// shorter: poll_max stays a floor for a quiet controller), and the waits
// differ (many watchers of one controller do not poll in step).
func TestJitter(t *testing.T) {
	const d = 10 * time.Second
	seen := map[time.Duration]bool{}
	for i := 0; i < 1000; i++ {
		j := jitter(d)
		if j < d || j > d*12/10 {
			t.Fatalf("jitter(%v) = %v, outside [d, 1.2 d]", d, j)
		}
		seen[j] = true
	}
	if len(seen) < 100 {
		t.Errorf("only %d distinct waits in 1000", len(seen))
	}
	if jitter(0) != 0 {
		t.Error("jitter(0) != 0")
	}
}
