package train

import (
	"math"
	"strings"
	"testing"
	"testing/iotest"
)

func TestParseAvgReward(t *testing.T) {
	for _, c := range []struct {
		text string
		want float64
		ok   bool
	}{
		{"", 0, false},
		{"no reward here", 0, false},
		{"  • Avg Reward: 0.2500\n", 0.25, true},
		{"  • Avg Reward: 0.25\nstep\n  • Avg Reward: 0.3125\n", 0.3125, true},
		{"• Avg Reward:0.5", 0.5, true},
		{"• Avg Reward:\t \n 0.75 tail", 0.75, true},
		{"• Avg Reward: -0.125", -0.125, true},
		{"• Avg Reward: +2", 2, true},
		{"• Avg Reward: 1.5e-3", 0.0015, true},
		{"• Avg Reward: 2E+2", 200, true},
		{"• Avg Reward: 1.5e", 1.5, true},
		{"• Avg Reward: 1.e5", 1, true},
		{"• Avg Reward: 1.5.3", 1.5, true},
		{"• Avg Reward: -0.0000", 0, true},
		{"• Avg Reward: 0.5\n• Avg Reward: nan\n", 0.5, true},
		{"• Avg Reward: 0.5\n• Avg Reward: 1e999\n", 0.5, true},
		{"• Avg Reward: 1e-999", 0, true},
		{"• Avg Reward: .5", 0, false},
		{"• Avg Reward: -", 0, false},
		{"• Avg Reward: abc 0.5", 0, false},
		{"• Avg Filtered/Total Reward: 0.5", 0, false},
		{"Avg Reward: 0.5", 0, false},
		{"•• Avg Reward: 0.5", 0.5, true},
		{"• Avg • Avg Reward: 0.7", 0.7, true},
		{"• Avg Reward: 0.1• Avg Reward: 0.2", 0.2, true},
		{"• Avg Reward: 1" + strings.Repeat("0", 5000), 0, false},
		{"• Avg Reward: 0.5\n• Avg Reward: 1" + strings.Repeat("0", 5000), 0.5, true},
	} {
		got, ok := ParseAvgReward([]byte(c.text))
		if ok != c.ok || got != c.want || (got == 0 && math.Signbit(got)) {
			t.Errorf("ParseAvgReward(%.60q) = %v, %v; want %v, %v", c.text, got, ok, c.want, c.ok)
		}
	}
}

// TestRewardScannerPieces feeds the scanner one byte at a time: a marker or
// number split across writes is still found.
func TestRewardScannerPieces(t *testing.T) {
	text := "x • Avg Reward: 0.25\n• Avg Rew• Avg Reward:  0.3125e0 and more"
	got, ok, err := LastAvgReward(iotest.OneByteReader(strings.NewReader(text)))
	if err != nil || !ok || got != 0.3125 {
		t.Errorf("got %v, %v, %v", got, ok, err)
	}
	var s rewardScanner
	for _, piece := range []string{"• Avg Re", "ward: 0.", "5"} {
		s.Write([]byte(piece))
	}
	if v, ok := s.Result(); !ok || v != 0.5 {
		t.Errorf("got %v, %v", v, ok)
	}
	// Result ends the input; calling it again changes nothing.
	if v, ok := s.Result(); !ok || v != 0.5 {
		t.Errorf("second Result: %v, %v", v, ok)
	}
}
