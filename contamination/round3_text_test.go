package contamination

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"unicode/utf8"
)

// Round three, families 3 and 4: text folded before the n-grams, the
// alternative readings, and coverage pooled over the whole patch.

func rot13(s string) string {
	return strings.Map(func(r rune) rune {
		switch {
		case r >= 'a' && r <= 'z':
			return 'a' + (r-'a'+13)%26
		case r >= 'A' && r <= 'Z':
			return 'A' + (r-'A'+13)%26
		}
		return r
	}, s)
}

func reverseString(s string) string {
	r := []rune(s)
	for i, j := 0, len(r)-1; i < j; i, j = i+1, j-1 {
		r[i], r[j] = r[j], r[i]
	}
	return string(r)
}

func reverseWordOrder(s string) string {
	f := strings.Fields(s)
	for i, j := 0, len(f)-1; i < j; i, j = i+1, j-1 {
		f[i], f[j] = f[j], f[i]
	}
	return strings.Join(f, " ")
}

// tagLetters wraps the second letter of every word of four letters or more
// in an HTML tag: "Find" is "F<b>i</b>nd".
func tagLetters(s, open, close string) string {
	f := strings.Split(s, " ")
	for i, w := range f {
		if len(w) >= 4 && isASCIILetter(w[0]) && isASCIILetter(w[1]) {
			f[i] = w[:1] + open + w[1:2] + close + w[2:]
		}
	}
	return strings.Join(f, " ")
}

// splitLiterals writes s as Python string literals of 3 characters,
// concatenated, so that words are split between literals.
func splitLiterals(s string) []string {
	s = strings.NewReplacer(`\`, `\\`, `"`, `\"`).Replace(s)
	var parts []string
	for len(s) > 0 {
		k := min(3, len(s))
		for k < len(s) && s[k-1] == '\\' {
			k++
		}
		parts = append(parts, `"`+s[:k]+`"`)
		s = s[k:]
	}
	var lines []string
	for i := 0; i < len(parts); i += 8 {
		lines = append(lines, "    "+strings.Join(parts[i:min(i+8, len(parts))], " "))
	}
	return append(append([]string{"TEXT = ("}, lines...), ")")
}

// TestRoundThreeText: every statement written with look-alike letters,
// invisible letters, HTML tags inside words, \N{...} escapes, in ROT13,
// backwards, with its words reversed, or split between short literals is
// found, every 10-gram of it.
func TestRoundThreeText(t *testing.T) { roundThreeText(t, standInProblems()) }

func roundThreeText(t *testing.T, ps []Problem) {
	cyr := strings.NewReplacer("a", "а", "e", "е", "o", "о", "p", "р", "c", "с", "x", "х", "i", "і", "y", "у", "T", "Т", "A", "А")
	greek := strings.NewReplacer("o", "ο", "i", "ι", "v", "ν", "A", "Α", "T", "Τ")
	perLine := map[string]func(string) string{
		"cyrillic look-alikes": cyr.Replace,
		"greek look-alikes":    greek.Replace,
		"hangul filler":        func(s string) string { return strings.ReplaceAll(s, "n", "n\u3164") },
		"variation selectors":  func(s string) string { return strings.ReplaceAll(s, "e", "e\ufe0f") },
		"html tags in words":   func(s string) string { return tagLetters(s, "<b>", "</b>") },
		"span with attributes": func(s string) string { return tagLetters(s, `<span class="x">`, "</span>") },
		"python named escapes": func(s string) string { return strings.ReplaceAll(s, "e", `\N{LATIN SMALL LETTER E}`) },
		"rot13":                rot13,
		"reversed":             reverseString,
		"reversed words":       reverseWordOrder,
	}
	for name, tr := range perLine {
		var lines []string
		for _, p := range ps {
			lines = append(lines, `    "`+tr(strings.ReplaceAll(p.Statement, "\n", " "))+`",`)
		}
		rep := Check([]byte(addedFile("NeMo-RL/data/train.py", lines)), ps)
		wantStatements(t, name, rep, ps)
		for _, f := range rep.Findings {
			if f.Kind == KindStatement && f.Overlap < 0.9 {
				t.Errorf("%s: problem %s at %.2f", name, f.Problem, f.Overlap)
			}
			if f.Kind == KindOpaque || f.Kind == KindBinary {
				t.Errorf("%s: refused: %s", name, f.Detail)
			}
		}
		if strings.HasPrefix(name, "r") && !strings.Contains(findingOf(rep, KindStatement).Detail, "read") {
			t.Errorf("%s: the finding does not say how it was read: %s", name, findingOf(rep, KindStatement).Detail)
		}
	}
	// the whole file reversed, reflowed: read backwards as a block
	var all []string
	for _, p := range ps {
		all = append(all, reflow(p.Statement, 60)...)
	}
	var rev []string
	for i := len(all) - 1; i >= 0; i-- {
		rev = append(rev, reverseString(all[i]))
	}
	wantStatements(t, "file reversed", Check([]byte(addedFile("NeMo-RL/data/r.txt", rev)), ps), ps)
	// words split between short literals
	var lit []string
	for _, p := range ps {
		lit = append(lit, splitLiterals(strings.ReplaceAll(p.Statement, "\n", " "))...)
	}
	rep := Check([]byte(addedFile("NeMo-RL/x.py", lit)), ps)
	wantStatements(t, "split literals", rep, ps)
	if f := findingOf(rep, KindStatement); f == nil || !strings.Contains(f.Detail, "concatenated string literals") {
		t.Errorf("split literals: %+v", f)
	}
}

// TestFoldingUnit: the folds on their own.
func TestFoldingUnit(t *testing.T) {
	for in, want := range map[string]string{
		"Fіnd thе ѕum":         "find the sum",  // Cyrillic і, е, ѕ
		"F\u3164ind t\u115fhe": "find the",      // Hangul fillers
		"a\ufe0fb\u180ec":      "abc",           // variation selector, Mongolian vowel separator
		"π r and 2π":           "pi r and 2 pi", // a Greek letter alone keeps its reading
		"Fi<b>nd</b> <i>the</i> s<span class=\"k\">u</span>m": "find the sum",
		"line<br>break":               "line break",
		"$a<b$ and $c>d$":             "a b and c d", // no tag
		`F\N{LATIN SMALL LETTER I}nd`: "find",
		"answer ٧٠ and ۲۰۴":           "answer 70 and 204", // Arabic-Indic and Persian digits
		"0x46, 0xcc and 0x3e7":        "70 204 and 999",
	} {
		toks, _ := tokenize(in)
		if got := strings.Join(toks, " "); got != want {
			t.Errorf("%q: %q, want %q", in, got, want)
		}
	}
	if !utf8.ValidString(reverseString("Fiñd")) {
		t.Fatal("reverse")
	}
}

// TestRoundThreePooled: a statement in parts across files, in shuffled
// short rows, or in the names of new files is found over the whole patch;
// answer keys in non-ASCII digits, hex literals, words, or file names are
// found; the same forms of other problems are not.
func TestRoundThreePooled(t *testing.T) {
	ps := standInProblems()
	r := rand.New(rand.NewPCG(40, 3))
	// thirds of each statement in three files, far apart
	var files [3][]string
	for _, p := range ps {
		w := strings.Fields(p.Statement)
		k := len(w) / 3
		files[0] = append(files[0], strings.Join(w[:k], " "))
		files[1] = append(files[1], strings.Join(w[k:2*k], " "))
		files[2] = append(files[2], strings.Join(w[2*k:], " "))
	}
	var patch string
	for i, f := range files {
		patch += addedFile(fmt.Sprintf("NeMo-RL/data/part%d.txt", i), append(filler(uint64(i), 300), f...))
	}
	rep := Check([]byte(patch), ps)
	// a short statement (42 words, 6 distinctive phrases: problem 6) cut
	// in three keeps too few 10-grams in any third: the one miss allowed
	if n := countKind(rep, KindStatement); n < len(ps)-1 {
		t.Errorf("thirds in three files: %d of %d found: %+v", n, len(ps), rep.Findings)
	}
	if f := findingOf(rep, KindStatement); f == nil || !strings.Contains(f.Detail, "pooled over the whole patch") {
		t.Errorf("thirds: %+v", f)
	}
	// shuffled rows of 5 to 8 words
	var rows []string
	for _, p := range ps {
		w := strings.Fields(p.Statement)
		for len(w) > 0 {
			k := min(len(w), 5+r.IntN(4))
			rows = append(rows, fmt.Sprintf(`{"text": %q}`, strings.Join(w[:k], " ")))
			w = w[k:]
		}
	}
	r.Shuffle(len(rows), func(i, j int) { rows[i], rows[j] = rows[j], rows[i] })
	rep = Check([]byte(addedFile("NeMo-RL/data/rows.jsonl", rows)), ps)
	// a problem with fewer than shortMin distinctive 3-word phrases (the
	// stand-in set's templates share most of theirs) cannot be told from
	// its rows; of the others, nearly all are found
	pp := prepareCached(ps, defaults)
	eligible, got := 0, 0
	for i, p := range pp.probs {
		if p.grams2 < shortMin {
			continue
		}
		eligible++
		for _, f := range rep.Findings {
			if f.Kind == KindStatement && f.Problem == ps[i].ID {
				got++
			}
		}
	}
	if eligible < 20 || got*10 < eligible*9 {
		t.Errorf("shuffled rows: %d of %d eligible problems found: %+v", got, eligible, rep.Findings)
	}
	t.Logf("shuffled rows of 5-8 words: %d of %d eligible problems found (%d of 30 have fewer than %d distinctive phrases)", got, eligible, 30-eligible, shortMin)
	// the statements in the names of new files (a directory per 12 words)
	patch = ""
	for i, p := range ps {
		w := strings.Fields(delatex(p.Statement))
		var dirs []string
		for len(w) > 0 {
			k := min(len(w), 12)
			dirs = append(dirs, strings.Join(w[:k], "_"))
			w = w[k:]
		}
		patch += addedFile("NeMo-RL/data/"+strings.Join(dirs, "/")+fmt.Sprintf("/%d.txt", i), []string{"x"})
	}
	rep = Check([]byte(patch), ps)
	if n := countKind(rep, KindStatement); n < len(ps)*9/10 {
		t.Errorf("statements in file names: %d of %d found: %+v", n, len(ps), rep.Findings)
	}
	if f := findingOf(rep, KindStatement); f == nil || !strings.Contains(f.Detail, "paths of new files") && !strings.Contains(f.Detail, "pooled") {
		t.Errorf("file names: %+v", f)
	}

	// answer keys
	digits := map[rune]rune{'0': '٠', '1': '١', '2': '٢', '3': '٣', '4': '٤', '5': '٥', '6': '٦', '7': '٧', '8': '٨', '9': '٩'}
	ones := []string{"zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten", "eleven", "twelve", "thirteen", "fourteen", "fifteen", "sixteen", "seventeen", "eighteen", "nineteen"}
	tens := []string{"", "", "twenty", "thirty", "forty", "fifty", "sixty", "seventy", "eighty", "ninety"}
	words := func(n int) string {
		var s []string
		if n >= 100 {
			s = append(s, ones[n/100], "hundred")
			n %= 100
			if n == 0 {
				return strings.Join(s, " ")
			}
			s = append(s, "and")
		}
		if n < 20 {
			s = append(s, ones[n])
		} else if n%10 == 0 {
			s = append(s, tens[n/10])
		} else {
			s = append(s, tens[n/10]+"-"+ones[n%10])
		}
		return strings.Join(s, " ")
	}
	key := func(answers []string) map[string][]byte {
		var arabic, hexs, wordl []string
		patch := ""
		for i, a := range answers {
			v := answerValue(a)
			arabic = append(arabic, fmt.Sprintf(`  "%d": "%s",`, i+1, strings.Map(func(r rune) rune { return digits[r] }, a)))
			hexs = append(hexs, fmt.Sprintf("0x%x", v))
			wordl = append(wordl, fmt.Sprintf("Problem %d: the answer is %s.", i+1, words(v)))
			patch += addedFile(fmt.Sprintf("NeMo-RL/data/key/answer-%03d.txt", v), []string{"x"})
		}
		return map[string][]byte{
			"arabic-indic digits": []byte(addedFile("NeMo-RL/k.json", arabic)),
			"hex literals":        []byte(addedFile("NeMo-RL/k.py", []string{"KEY = [" + strings.Join(hexs, ", ") + "]"})),
			"number words":        []byte(addedFile("NeMo-RL/k.txt", wordl)),
			"file names":          []byte(patch),
		}
	}
	var answers, other []string
	for _, p := range ps {
		answers = append(answers, p.Answer)
		other = append(other, fmt.Sprint(10+r.IntN(990)))
	}
	for form, patch := range key(answers) {
		rep := Check(patch, ps)
		if f := findingOf(rep, KindAnswers); f == nil {
			t.Errorf("answers as %s: not found: %+v", form, rep.Findings)
		}
	}
	for form, patch := range key(other) {
		if rep := Check(patch, ps); rep.Contaminated {
			t.Errorf("other answers as %s: flagged: %+v", form, rep.Findings)
		}
	}
}
