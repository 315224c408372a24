package contamination

import (
	"encoding/json"
	"strconv"
	"strings"
	"testing"
)

func toks(s string) string {
	t, _ := tokenize(s)
	return strings.Join(t, " ")
}

func TestTokenize(t *testing.T) {
	cases := []struct{ in, want string }{
		{"Find the SUM, of all; integers!", "find the sum of all integers"},
		{`$\frac{m}{n}$`, "m n"},
		{`\dfrac{a+1}{b}`, "a 1 b"},
		{`$\tfrac mn$ and \frac12`, "m n and 1 2"},
		{`\boxed{70}`, "70"},
		{`\(x\) \[y\] \left( z \right)`, "x y z"},
		{`$\sqrt{3} \cdot 4^{2}$`, "sqrt 3 4 2"},
		{`r \neq s, \notin, \le`, "r s"},
		{`"\nFind the sum"`, "find the sum"},
		{`"\n\nLet $N$ be"`, "let n be"},
		{`\tThe \rrest`, "the rest"},
		{`\\triangle ABC`, "triangle abc"},
		{`\\\\frac{1}{2}`, "1 2"},
		{`caf\u00e9 \u0024x\u0024`, "cafe x"},
		{"Δ ≤ √2, π, 60°", "delta sqrt 2 pi 60 circ"},
		{"$12x^2$ x86 17-gon", "12 x 2 x 86 17 gon"},
		{"\x0crac{m}{n}", "m n"},          // a form feed that swallowed "\f"
		{"\triangle DEF", "triangle def"}, // a tab that swallowed "\t"
		{`\overarc{DE} \unknowncmd`, "overarc de unknowncmd"},
		{`\operatorname{if} \text{and} \mathcal{B}`, "if and b"},
		{"Ünïcödé WORDS", "unicode words"},
		// round two (issue 31): commands in upper case, encoded
		// backslashes, superscripts, invisible and compatibility forms
		{`\FRAC{m}{n} \SQRT{3} \Boxed{70} \LEFT( x \RIGHT)`, "m n sqrt 3 70 x"},
		{`\x5cfrac{1}{2} \x5c\x5ctriangle ABC \u005cboxed{7}`, "1 2 triangle abc 7"},
		{`\U0000005csqrt{2} \134frac{1}{3} &#92;frac{2}{5} &bsol;angle A`, "sqrt 2 1 3 2 5 angle a"},
		{`$3⁶$ x² y₁₂ 2ⁿ`, "3 6 x 2 y 12 2 n"},
		{"Fi\u200bnd F\u0303ind the\u00adsum", "find find thesum"},
		{"Ｆｉｎｄ 𝐭𝐡𝐞 ﬁve", "find the five"},
		{`&lt;x&gt; &amp; &#8730;2 &pi; &sup2;`, "x sqrt 2 pi 2"},
		{`\141\142c`, "abc"},
		// a command whose escape and control character were lost: "rac"
		// after whitespace is \frac, as the form feed + "rac" it came from
		{"the product rac{m}{n} and\nriangle ABC", "the product m n and triangle abc"},
		{"\x0crac{m}{n}", "m n"},
		{"bracket racket rac_id", "bracket racket id"},
	}
	for _, c := range cases {
		if got := toks(c.in); got != c.want {
			t.Errorf("tokenize(%q) = %q, want %q", c.in, got, c.want)
		}
	}
}

func TestStandaloneNumbers(t *testing.T) {
	_, nums := tokenize(`x86 70, [588] 12x "\n16" 1234567 007 \boxed{81}`)
	var got []int
	for _, n := range nums {
		if n != noNumber {
			got = append(got, n)
		}
	}
	want := []int{70, 588, 16, 7, 81}
	if len(got) != len(want) {
		t.Fatalf("numbers %v, want %v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("numbers %v, want %v", got, want)
		}
	}
}

// Every encoding a statement can take in a patch reads as the statement.
func TestEncodingsTokenizeAlike(t *testing.T) {
	for _, p := range standInProblems() {
		st := p.Statement + "\nSecond line with \\neq and \\nu."
		want := toks(st)
		j, _ := json.Marshal(st)
		jj, _ := json.Marshal(string(j))
		forms := map[string]string{
			"json":        string(j),
			"json-twice":  string(jj),
			"go-quote":    strconv.Quote(st),
			"ascii-quote": strconv.QuoteToASCII(st),
			"collapsed":   strings.Join(strings.Fields(st), " "),
		}
		for name, f := range forms {
			if got := toks(f); got != want {
				t.Errorf("problem %s %s:\n got %q\nwant %q", p.ID, name, got, want)
			}
		}
	}
}

func TestTokenTruncation(t *testing.T) {
	long := strings.Repeat("a", 500)
	got, _ := tokenize(long + " b")
	if len(got) != 2 || len(got[0]) != maxTokBytes || got[1] != "b" {
		t.Errorf("%d tokens, first %d bytes", len(got), len(got[0]))
	}
}
