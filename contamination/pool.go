package contamination

import (
	"fmt"
	"strings"
)

// Counted over the whole patch (round three). A statement split into
// parts across files, or into shuffled short rows, holds 60 % of its
// 10-grams in no one place; the pool holds, per problem, every distinct
// n-gram matched anywhere in the patch, in any reading (the text, the
// decoded forms, the alternative readings of readings.go, the paths of
// new files), and a problem whose pooled n-grams reach the statement
// rule's thresholds is a finding naming the places.
//
// Rows shorter than an n-gram (a statement cut into rows of a few words
// and shuffled) hold no 10-gram at all: for them the pool also counts the
// problem's distinctive short n-grams (shortN words, at least one of them
// neither common nor a number, found in no other problem), and a problem most of whose
// distinctive short n-grams (shortFrac of them, at least shortHits, on
// shortRows lines or more; only problems with shortMin of them or more) lie
// in the added text is a finding too. Measured on the stand-in set: rows of
// 5 to 8 words keep 62-100 % of a problem's distinctive 3-word phrases,
// rows of 4 to 7 words 46-87 %; a half statement on one line, up to 85 %
// (so one line is never enough: that is the pair rule's case).

const (
	poolFrac  = 0.5 // pooled 10-grams: this fraction of a problem's, with MinRare rare ones
	shortN    = 3
	shortFrac = 0.6
	shortMin  = 10 // a problem needs this many distinctive short n-grams
	shortHits = 6  // and a finding this many of them matched
	shortRows = 3  // on at least this many lines (a half statement on one line is the pair rule's)
)

type poolProb struct {
	bits        []uint64
	count, rare int
	lines       []int
	places      int // distinct lines with matches (counted up to 1<<20)
	lastLine    int
	bits2       []uint64
	count2      int
	lines2      []int
}

type pool struct {
	probs []poolProb
}

func newPool(pp *prepared) *pool {
	pl := &pool{probs: make([]poolProb, len(pp.probs))}
	for i, p := range pp.probs {
		pl.probs[i].bits = make([]uint64, (p.grams+63)/64)
		pl.probs[i].bits2 = make([]uint64, (p.grams2+63)/64)
		pl.probs[i].lastLine = -1
	}
	return pl
}

// add pools one matched n-gram of problem r.p on line.
func (pl *pool) add(r ref, line int) {
	p := &pl.probs[r.p]
	if w := &p.bits[r.d>>6]; *w&(1<<(r.d&63)) == 0 {
		*w |= 1 << (r.d & 63)
		p.count++
		if r.rare {
			p.rare++
		}
	}
	if line != p.lastLine {
		p.lastLine = line
		p.places++
		p.lines = addLine(p.lines, line)
	}
}

// add2 pools one matched short n-gram.
func (pl *pool) add2(r ref, line int) {
	p := &pl.probs[r.p]
	if w := &p.bits2[r.d>>6]; *w&(1<<(r.d&63)) == 0 {
		*w |= 1 << (r.d & 63)
		p.count2++
		p.lines2 = addLine(p.lines2, line)
	}
}

// findings are the pooled statements of the problems no single place
// flagged (found: the problems with a finding already).
func (pl *pool) findings(pp *prepared, pr params, found map[string]bool, where func([]int) string) []Finding {
	var out []Finding
	for i, p := range pp.probs {
		if found[p.id] || p.grams == 0 {
			continue
		}
		st := &pl.probs[i]
		ov := float64(st.count) / float64(p.grams)
		if ov >= poolFrac && st.rare >= pr.MinRare {
			out = append(out, Finding{Kind: KindStatement, Problem: p.id, Lines: st.lines, Overlap: ov,
				Detail: fmt.Sprintf("problem %s: %.0f%% of its %d-grams pooled over the whole patch (%s in %d places, none of which holds enough alone)%s",
					p.id, 100*ov, p.n, lineRange(st.lines), st.places, where(st.lines))})
			continue
		}
		if p.grams2 >= shortMin {
			ov2 := float64(st.count2) / float64(p.grams2)
			if ov2 >= shortFrac && st.count2 >= shortHits && len(st.lines2) >= shortRows {
				out = append(out, Finding{Kind: KindStatement, Problem: p.id, Lines: st.lines2, Overlap: ov2,
					Detail: fmt.Sprintf("problem %s: %.0f%% of its %d distinctive %d-word phrases pooled over the whole patch (%s; its text cut into parts shorter than %d words)%s",
						p.id, 100*ov2, p.grams2, shortN, lineRange(st.lines2), p.n, where(st.lines2))})
			}
		}
	}
	return out
}

// ---- the short n-grams ----------------------------------------------------

// prepareShort indexes each problem's distinctive short n-grams: shortN
// tokens, at least one of them neither common nor a number, found in no
// other problem.
func prepareShort(probs []*prob) nindex {
	ix := nindex{n: shortN, m: map[uint64][]ref{}}
	owners := map[string]int{}
	type g struct {
		p, start int
		key      uint64
		text     string
	}
	var all []g
	for pi, p := range probs {
		seen := map[string]bool{}
		for i := 0; i+shortN <= len(p.toks); i++ {
			rare := 0
			for _, w := range p.toks[i : i+shortN] {
				if !isCommon(w) && !isNumberToken(w) {
					rare++
				}
			}
			if rare < 1 {
				continue
			}
			t := strings.Join(p.toks[i:i+shortN], " ")
			if seen[t] {
				continue
			}
			seen[t] = true
			owners[t]++
			all = append(all, g{pi, i, ngramKey(p.ths[i : i+shortN]), t})
		}
	}
	next := make([]int, len(probs))
	for _, x := range all {
		if owners[x.text] > 1 {
			continue
		}
		d := next[x.p]
		next[x.p]++
		ix.m[x.key] = append(ix.m[x.key], ref{p: int32(x.p), start: int32(x.start), d: int32(d), rare: true})
	}
	for pi, p := range probs {
		p.grams2 = next[pi]
	}
	return ix
}

func isNumberToken(w string) bool {
	for i := 0; i < len(w); i++ {
		if !isDigit(w[i]) {
			return false
		}
	}
	return w != ""
}

// ---- number words -----------------------------------------------------

// numWords reads numbers written as words ("seventy", "two hundred and
// four", "nine hundred ninety-nine") for the answers rule.
type numWords struct {
	active bool
	phase  int // 1: a unit 1-9; 2: tens; 3: after "hundred"; 4: complete below a hundred
	val    int // hundreds
	cur    int // below a hundred
	and    bool
	key    []byte // the word before the number
}

var (
	unitWords = map[string]int{"zero": 0, "one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6, "seven": 7,
		"eight": 8, "nine": 9, "ten": 10, "eleven": 11, "twelve": 12, "thirteen": 13, "fourteen": 14,
		"fifteen": 15, "sixteen": 16, "seventeen": 17, "eighteen": 18, "nineteen": 19}
	tensWords = map[string]int{"twenty": 20, "thirty": 30, "forty": 40, "fifty": 50, "sixty": 60, "seventy": 70, "eighty": 80, "ninety": 90}
)

// step reads one token (prev: the token before it); when a number ended
// before it, it returns its value and the word before the number.
func (nw *numWords) step(tok, prev []byte) (int, []byte, bool) {
	w := string(tok)
	u, isU := unitWords[w]
	t, isT := tensWords[w]
	if nw.active {
		switch nw.phase {
		case 1:
			if w == "hundred" {
				nw.val, nw.cur, nw.phase = nw.cur*100, 0, 3
				return 0, nil, false
			}
		case 2:
			if isU && u >= 1 && u <= 9 {
				nw.cur += u
				nw.phase = 4
				return 0, nil, false
			}
		case 3:
			if w == "and" && !nw.and {
				nw.and = true
				return 0, nil, false
			}
			if isT {
				nw.cur, nw.phase = t, 2
				return 0, nil, false
			}
			if isU && u > 0 {
				nw.cur, nw.phase = u, 4
				return 0, nil, false
			}
		}
	}
	v, key, ok := nw.end()
	switch {
	case isT:
		nw.start(prev)
		nw.cur, nw.phase = t, 2
	case isU:
		nw.start(prev)
		nw.cur, nw.phase = u, 4
		if u >= 1 && u <= 9 {
			nw.phase = 1
		}
	}
	return v, key, ok
}

func (nw *numWords) start(prev []byte) {
	nw.active, nw.val, nw.cur, nw.and = true, 0, 0, false
	nw.key = append(nw.key[:0], prev...)
}

// end ends the number being read: its value, the word before it.
func (nw *numWords) end() (int, []byte, bool) {
	if !nw.active {
		return 0, nil, false
	}
	nw.active = false
	return nw.val + nw.cur, nw.key, true
}
