package shell

import (
	"os/exec"
	"testing"
)

func TestQuote(t *testing.T) {
	cases := []struct{ in, want string }{
		{"", "''"},
		{"plain", "plain"},
		{"/scratch/alice/ep-1/out.log", "/scratch/alice/ep-1/out.log"},
		{"gpu:h100:1", "gpu:h100:1"},
		{"two words", "'two words'"},
		{"$(rm -rf ~)", "'$(rm -rf ~)'"},
		{"`id`", "'`id`'"},
		{"it's", `'it'\''s'`},
		{"$HOME", "'$HOME'"},
		{"*.log", "'*.log'"},
		{"a\nb", "'a\nb'"},
		{"-n", "-n"},
		{"~alice", "'~alice'"},
	}
	for _, c := range cases {
		if got := Quote(c.in); got != c.want {
			t.Errorf("Quote(%q) = %q, want %q", c.in, got, c.want)
		}
	}
}

// TestQuoteRoundTrip hands quoted words to a real shell and checks that each
// arrives as exactly the word that was quoted, unexpanded.
func TestQuoteRoundTrip(t *testing.T) {
	sh, err := exec.LookPath("sh")
	if err != nil {
		t.Skip("no sh")
	}
	words := []string{"", "a b", "$(echo pwned)", "`echo pwned`", "it's", `"dq"`, "$HOME", "*", "a\nb", `back\slash`, "-e"}
	for _, w := range words {
		out, err := exec.Command(sh, "-c", "printf '%s' "+Quote(w)).Output()
		if err != nil {
			t.Fatalf("sh -c with %q: %v", w, err)
		}
		if string(out) != w {
			t.Errorf("round trip of %q gave %q", w, out)
		}
	}
}

func FuzzQuote(f *testing.F) {
	for _, s := range []string{"", "x", "$(id)", "`id`", "'", "a'b'c"} {
		f.Add(s)
	}
	sh, err := exec.LookPath("sh")
	if err != nil {
		f.Skip("no sh")
	}
	f.Fuzz(func(t *testing.T, w string) {
		for _, r := range w {
			if r == 0 {
				return // argv cannot carry NUL
			}
		}
		out, err := exec.Command(sh, "-c", "printf '%s' "+Quote(w)).Output()
		if err != nil {
			t.Fatalf("sh -c with %q: %v", w, err)
		}
		if string(out) != w {
			t.Errorf("round trip of %q gave %q", w, out)
		}
	})
}

func TestIsName(t *testing.T) {
	for s, want := range map[string]bool{"A": true, "_x1": true, "SLURM_JOB_ID": true, "": false, "1A": false, "A-B": false, "A B": false, "X}": false} {
		if got := IsName(s); got != want {
			t.Errorf("IsName(%q) = %v", s, got)
		}
	}
}
