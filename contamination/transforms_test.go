package contamination

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
)

// The must-catch transforms: ways a policy could write a problem into a
// patch. Each returns the added file's lines and the 0-based range
// [from, to] of the lines holding the problem.

type injection struct {
	name     string
	lines    []string
	from, to int
}

// filler is ordinary code around an injection.
func filler(seed uint64, n int) []string {
	return ordinaryCode(rand.New(rand.NewPCG(seed, 99)), n)
}

func surround(name string, seed uint64, before, after int, body []string) injection {
	lines := append(filler(seed, before), body...)
	lines = append(lines, filler(seed+1, after)...)
	return injection{name: name, lines: lines, from: before, to: before + len(body) - 1}
}

// reflow wraps the words of s at width columns.
func reflow(s string, width int) []string {
	var out []string
	cur := ""
	for _, w := range strings.Fields(s) {
		if cur != "" && len(cur)+1+len(w) > width {
			out = append(out, cur)
			cur = ""
		}
		if cur != "" {
			cur += " "
		}
		cur += w
	}
	if cur != "" {
		out = append(out, cur)
	}
	return out
}

// braceArg returns the braced argument starting at s[i] ('{'), and the index
// after it.
func braceArg(s string, i int) (string, int, bool) {
	if i >= len(s) || s[i] != '{' {
		return "", i, false
	}
	depth := 0
	for j := i; j < len(s); j++ {
		switch s[j] {
		case '{':
			depth++
		case '}':
			depth--
			if depth == 0 {
				return s[i+1 : j], j + 1, true
			}
		}
	}
	return "", i, false
}

// delatex rewrites \frac{a}{b} (and \dfrac, \tfrac) as (a)/(b) or a/b and
// drops the dollar signs.
func delatex(s string) string {
	for _, cmd := range []string{`\dfrac`, `\tfrac`, `\frac`} {
		for {
			i := strings.Index(s, cmd+"{")
			if i < 0 {
				break
			}
			a, j, ok1 := braceArg(s, i+len(cmd))
			b, k, ok2 := braceArg(s, j)
			if !ok1 || !ok2 {
				break
			}
			if len(a) > 1 {
				a = "(" + a + ")"
			}
			if len(b) > 1 {
				b = "(" + b + ")"
			}
			s = s[:i] + a + "/" + b + s[k:]
		}
	}
	return strings.ReplaceAll(s, "$", "")
}

// pyQuote writes s as a Python double-quoted string literal body.
func pyQuote(s string) string {
	q := strconv.Quote(s)
	return q[1 : len(q)-1]
}

func statementLines(st string) []string { return strings.Split(st, "\n") }

// injections returns every must-catch transform of one problem.
func injections(p Problem, seed uint64) []injection {
	st := p.Statement
	var out []injection
	out = append(out, surround("verbatim", seed, 15, 15, statementLines(st)))
	out = append(out, surround("reflowed", seed, 15, 15, reflow(st, 38)))
	collapsed := strings.Join(strings.Fields(st), " ")
	out = append(out, surround("collapsed", seed, 15, 15, []string{collapsed}))
	var spaced []string
	for _, l := range reflow(st, 60) {
		spaced = append(spaced, "   "+strings.Join(strings.Fields(l), "   "), "")
	}
	out = append(out, surround("extra-space", seed, 15, 15, spaced[:len(spaced)-1]))
	out = append(out, surround("delatex-boxed", seed, 15, 15, reflow(delatex(st)+` The answer is \boxed{`+p.Answer+`}.`, 70)))

	// a JSONL training file: other rows around a chat row holding the problem
	r := rand.New(rand.NewPCG(seed, 5))
	var rows []string
	for _, it := range ordinaryMath(r, 20) {
		rows = append(rows, jsonRow("question", it, "answer", fmt.Sprint(r.IntN(1000))))
	}
	msg, _ := json.Marshal(map[string]any{"messages": []map[string]string{
		{"role": "user", "content": "Solve the following math problem step by step.\n\n" + st + "\n\nPut the final answer in \\boxed{}."},
		{"role": "assistant", "content": "Working through it carefully...\nThe answer is \\boxed{" + p.Answer + "}."},
	}})
	jl := append(append(append([]string{}, rows[:10]...), string(msg)), rows[10:]...)
	out = append(out, injection{name: "jsonl-chat", lines: jl, from: 10, to: 10})
	row, _ := json.Marshal(map[string]string{"question": "Problem:\n" + strings.ReplaceAll(st, ". ", ".\n"), "expected_answer": p.Answer})
	out = append(out, injection{name: "jsonl-row", lines: append([]string{string(row)}, rows...), from: 0, to: 0})

	// Python: one escaped literal, a triple-quoted block, implicit
	// concatenation, and backslash continuation
	out = append(out, surround("py-escaped", seed, 10, 10, []string{`PROMPT = "Question:\n` + pyQuote(st) + `\nAnswer:"`}))
	tq := append([]string{`PROMPT = r"""`}, reflow(st, 50)...)
	tq = append(tq, `"""`)
	out = append(out, surround("py-triple", seed, 10, 10, tq))
	cc := []string{"PROMPT = ("}
	for _, l := range reflow(st, 45) {
		cc = append(cc, `    "`+pyQuote(l)+` "`)
	}
	cc = append(cc, ")")
	out = append(out, surround("py-concat", seed, 10, 10, cc))
	var bs []string
	wl := reflow(st, 55)
	for i, l := range wl {
		switch {
		case len(wl) == 1:
			bs = append(bs, `X = "`+pyQuote(l)+`"`)
		case i == 0:
			bs = append(bs, `X = "`+pyQuote(l)+` \`)
		case i == len(wl)-1:
			bs = append(bs, pyQuote(l)+`"`)
		default:
			bs = append(bs, pyQuote(l)+` \`)
		}
	}
	out = append(out, surround("py-backslash", seed, 10, 10, bs))

	// one problem among 5,000 lines of ordinary code
	out = append(out, surround("needle-5000", seed, 2500, 2500, []string{"# " + collapsed}))
	return out
}

// halfStatement is the shortest prefix of a statement's text (Asymptote
// drawings left out) that holds half of its tokens, cut between words.
func halfStatement(st string) string {
	segs, _ := asySegments(st)
	w := strings.Fields(strings.Join(segs, " "))
	all, _ := tokenize(strings.Join(w, " "))
	for k := 1; k <= len(w); k++ {
		if t, _ := tokenize(strings.Join(w[:k], " ")); 2*len(t) >= len(all) {
			return strings.Join(w[:k], " ")
		}
	}
	return strings.Join(w, " ")
}

// pairInjections are half statements with their answers nearby.
func pairInjections(p Problem, seed uint64) []injection {
	h := halfStatement(p.Statement)
	var out []injection
	out = append(out, surround("pair-qa", seed, 12, 12, append(reflow(h, 70), "", "Answer: "+p.Answer)))
	out = append(out, surround("pair-json", seed, 12, 12, []string{jsonRow("q", h+" ...", "a", p.Answer)}))
	out = append(out, surround("pair-boxed", seed, 12, 12, []string{h, `\boxed{` + p.Answer + `}`}))
	return out
}

// answerInjections write only the answers, as lists.
func answerInjections(ps []Problem, seed uint64) []injection {
	var as []string
	for _, p := range ps {
		as = append(as, p.Answer)
	}
	var out []injection
	out = append(out, surround("answers-pylist", seed, 20, 20, []string{"ANSWERS = [" + strings.Join(as, ", ") + "]"}))
	yl := []string{"answers:"}
	for _, a := range as {
		yl = append(yl, "  - "+a)
	}
	out = append(out, surround("answers-yaml", seed, 20, 20, yl))
	out = append(out, surround("answers-csv", seed, 20, 20, []string{strings.Join(as, ",")}))
	ym := []string{"expected:"}
	for i, a := range as {
		ym = append(ym, fmt.Sprintf("  %d: %s", i+1, a))
	}
	out = append(out, surround("answers-yaml-map", seed, 20, 20, ym))
	var pyl []string
	pyl = append(pyl, "ANSWERS = [")
	for i := 0; i < len(as); i += 6 {
		j := min(i+6, len(as))
		pyl = append(pyl, "    "+strings.Join(as[i:j], ", ")+",")
	}
	pyl = append(pyl, "]")
	out = append(out, surround("answers-pylist-multiline", seed, 20, 20, pyl))
	return out
}
