package contamination

import (
	"bytes"
	"crypto/sha256"
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"
	"sync"
)

// Kind names what a finding matched.
type Kind string

const (
	KindStatement Kind = "statement" // a problem's statement, or most of it, in the added lines
	KindAnswers   Kind = "answers"   // many of the answers together, as a list
	KindPair      Kind = "pair"      // part of a statement with its answer nearby
	KindName      Kind = "name"      // the eval set named (a dataset name or id)
	KindBinary    Kind = "binary"    // a binary section the checker cannot decode or rebuild: refused
	KindOpaque    Kind = "opaque"    // more added data than Options.MaxOpaque that reads as nothing: refused
)

// Finding is one piece of evidence of contamination.
type Finding struct {
	Kind    Kind    `json:"kind"`
	Problem string  `json:"problem,omitempty"` // Problem.ID; empty for KindAnswers
	Lines   []int   `json:"lines"`             // 1-based patch lines where the matched text lies (sorted, deduplicated, at most 20 kept)
	Overlap float64 `json:"overlap"`           // statement/pair: fraction of the problem's n-grams found; answers: fraction of the answers found
	Detail  string  `json:"detail"`            // one human sentence
}

// Report is the outcome of Check.
type Report struct {
	Contaminated bool      `json:"contaminated"`
	Findings     []Finding `json:"findings,omitempty"` // answers first, then by problem in dataset order; at most one per problem
	AddedLines   int       `json:"added_lines"`
	// BinarySections is how many "GIT binary patch" sections the patch
	// has; DecodedBytes what their forward hunks decoded to (read as added
	// text, in DecodedLines lines).
	BinarySections int   `json:"binary_sections,omitempty"`
	DecodedBytes   int64 `json:"decoded_bytes,omitempty"`
	DecodedLines   int   `json:"decoded_lines,omitempty"`
	// OpaqueBytes is the added data that read as nothing the check
	// reads (opaque.go); above Options.MaxOpaque the patch is refused.
	OpaqueBytes int64 `json:"opaque_bytes,omitempty"`
	// the parameters used, for the record
	N         int     `json:"ngram"`
	Threshold float64 `json:"threshold"`
}

// maxLines is how many line numbers a finding keeps.
const maxLines = 20

// params are the detector's knobs; defaults holds the values chosen from the
// measurements described in doc.go.
type params struct {
	N         int     // word n-gram length
	MinN      int     // smallest n, for problems of fewer than N+5 words
	Threshold float64 // statement: fraction of the problem's n-grams in one cluster
	RunFrac   float64 // statement: or one contiguous matched run covering this fraction of its words
	RunMin    int     // ... and at least this many words and MinRare rare n-grams
	MinRare   int     // statement: at least this many rare n-grams matched (or all there are)

	PairThreshold float64 // pair: weaker fraction of n-grams ...
	PairRunFrac   float64 // ... or run fraction ...
	PairMinRare   int     // ... with at least this many rare n-grams matched ...
	PairLines     int     // ... and its answer within this many lines

	RareWords int // an n-gram is not generic when it has at least this many non-common words

	AnswersFrac     float64 // answers: this fraction of the eligible answers in one window ...
	AnswersMinValue int     // ... counting only answers >= this value ...
	AnswersMinCount int     // ... and only when at least this many answers are eligible
}

var defaults = params{
	N:               10,
	MinN:            6,
	Threshold:       0.6,
	RunFrac:         0.6,
	RunMin:          12,
	PairThreshold:   0.25,
	PairRunFrac:     0.25,
	PairMinRare:     2,
	PairLines:       3,
	MinRare:         2,
	RareWords:       1,
	AnswersFrac:     0.5,
	AnswersMinValue: 10,
	AnswersMinCount: 6,
}

// Check inspects the added lines of a unified diff: lines starting with '+'
// inside hunks (not the "+++ " file header), and what the forward hunks of
// "GIT binary patch" sections decode to (a delta is refused: Check has no
// pristine files; CheckWith does). It never panics.
func Check(patch []byte, problems []Problem) Report {
	return CheckWith(patch, problems, Options{})
}

// CheckWith is Check with the pristine files that binary deltas apply to.
func CheckWith(patch []byte, problems []Problem, o Options) Report {
	r, _ := check(patch, problems, defaults, o)
	return r
}

// scores are the raw per-patch maxima, for calibration.
type scores struct {
	RawOverlap     []float64 // per problem: best cluster overlap, evidence or not
	MaxOverlap     []float64 // per problem: best overlap of a cluster with enough rare n-grams
	MaxRareOverlap []float64 // per problem: best overlap of a cluster with PairMinRare rare n-grams
	MaxRun         []float64 // per problem: best run fraction of its words
	MaxRunWords    []int     // per problem: best run in words
	MaxPairOverlap []float64 // per problem: best weak-cluster overlap with its answer nearby
	AnswersFound   int       // best window: distinct eligible answers
	AnswersElig    int       // eligible answers
	ColumnAnswers  int       // best column window: distinct eligible answers
	Opaque         int64     // opaque bytes (opaque.go)
}

// ---- preparation -------------------------------------------------------

type ref struct {
	p     int32 // problem index
	start int32 // token index of the n-gram in the problem
	d     int32 // n-gram id within the problem
	rare  bool  // neither generic nor shared with another problem
}

type nindex struct {
	n int
	m map[uint64][]ref
}

// prob is the prepared, read-only form of one problem.
type prob struct {
	id     string
	toks   []string
	ths    []uint64
	n      int
	gap    int64
	grams  int // distinct n-grams used (the denominator of Overlap)
	rare   int // how many of them are neither generic nor shared
	answer int
	grams2 int // distinctive short n-grams (pool.go)
}

// pstate is one Check call's state for one problem.
type pstate struct {
	*prob
	pi         int32 // its index
	cl         cluster
	lastAnswer int // line of the last uncovered answer occurrence
	pend       []ansOcc
	inPend     bool
	cands      []result
	stmt       *result
	pair       *result

	rawOverlap, maxOverlap, rareOverlap, maxRun, maxPair float64
	maxRunWords                                          int
}

// prepared is what Check derives from the problems (cached).
type prepared struct {
	probs  []*prob
	index  []nindex
	index2 []nindex // the distinctive short n-grams (pool.go)
	bloom  []uint64
}

var prepCache struct {
	sync.Mutex
	key [sha256.Size]byte
	p   *prepared
}

// prepareCached returns the prepared problems, reusing the last result when
// the same problems and parameters come again.
func prepareCached(problems []Problem, pr params) *prepared {
	h := sha256.New()
	fmt.Fprintf(h, "%+v\x00", pr)
	for _, p := range problems {
		fmt.Fprintf(h, "%d:%s\x00%d:%s\x00%d:%s\x00", len(p.ID), p.ID, len(p.Statement), p.Statement, len(p.Answer), p.Answer)
	}
	var key [sha256.Size]byte
	h.Sum(key[:0])
	prepCache.Lock()
	if prepCache.p != nil && prepCache.key == key {
		p := prepCache.p
		prepCache.Unlock()
		return p
	}
	prepCache.Unlock()
	probs, index := prepare(problems, pr)
	pp := &prepared{probs: probs, index: index, bloom: make([]uint64, bloomBits/64)}
	pp.index2 = []nindex{prepareShort(probs)}
	for _, ix := range append(append([]nindex(nil), index...), pp.index2...) {
		for k := range ix.m {
			b := k & (bloomBits - 1)
			pp.bloom[b>>6] |= 1 << (b & 63)
		}
	}
	prepCache.Lock()
	prepCache.key, prepCache.p = key, pp
	prepCache.Unlock()
	return pp
}

type ansOcc struct {
	pos  int64
	line int
}

type cluster struct {
	active              bool
	bits                []uint64
	count, rare         int
	firstPos, lastPos   int64
	firstLine, lastLine int
	runStart            int64
	maxRun              int
	near                bool
	ansLine             int
	lines               []int // lines of the rare n-grams matched
	allLines            []int // lines of all n-grams matched
}

type result struct {
	overlap   float64
	run       int
	firstLine int
	lastLine  int
	lines     []int
	ansLine   int
}

func ngramKey(ths []uint64) uint64 {
	h := uint64(len(ths)) * 0x9e3779b97f4a7c15
	for _, t := range ths {
		h = (h ^ t) * 0x100000001b3
		h = h<<23 | h>>41
	}
	return mix(h)
}

// asySegments splits a statement around its Asymptote blocks
// ("[asy] ... [/asy]"): n-grams are taken within the text segments only, as
// drawing code is no evidence and a copy without it must still match. It
// also returns how many tokens the blocks held.
func asySegments(s string) ([]string, int) {
	low := strings.ToLower(s)
	var segs []string
	removed := 0
	for {
		i := strings.Index(low, "[asy]")
		if i < 0 {
			break
		}
		end := len(s)
		if j := strings.Index(low[i:], "[/asy]"); j >= 0 {
			end = i + j + len("[/asy]")
		}
		segs = append(segs, s[:i])
		t, _ := tokenize(s[i:end])
		removed += len(t)
		s, low = s[end:], low[end:]
	}
	return append(segs, s), removed
}

type gramInfo struct {
	p, start int
	key      uint64
	text     string
	generic  bool
}

func prepare(problems []Problem, pr params) ([]*prob, []nindex) {
	probs := make([]*prob, len(problems))
	var grams [][]gramInfo
	owners := map[string]map[int]bool{}
	for pi, p := range problems {
		segs, asy := asySegments(p.Statement)
		var toks []string
		var ths []uint64
		var segEnd []int // token index where each segment ends
		lx := newLexer(func(tok []byte, h uint64, _ int) {
			toks = append(toks, string(tok))
			ths = append(ths, h)
		})
		for _, sg := range segs {
			lx.text([]byte(sg))
			segEnd = append(segEnd, len(toks))
		}
		T := len(toks)
		n := pr.N
		if T < pr.N+5 {
			n = T - 5
			if n < pr.MinN {
				n = pr.MinN
			}
		}
		if n > T {
			n = T
		}
		if n > ringSize-1 {
			n = ringSize - 1
		}
		pb := &prob{id: p.ID, toks: toks, ths: ths, n: n, answer: answerValue(p.Answer),
			gap: int64(2*n + 16 + asy)}
		probs[pi] = pb
		var gs []gramInfo
		if n > 0 {
			seen := map[string]bool{}
			seg := 0
			for i := 0; i+n <= T; i++ {
				for segEnd[seg] <= i {
					seg++
				}
				if i+n > segEnd[seg] {
					continue // spans an Asymptote block
				}
				t := strings.Join(toks[i:i+n], " ")
				if seen[t] {
					continue
				}
				seen[t] = true
				rare := 0
				for _, w := range toks[i : i+n] {
					if !isCommon(w) {
						rare++
					}
				}
				gs = append(gs, gramInfo{p: pi, start: i, key: ngramKey(ths[i : i+n]), text: t, generic: rare < pr.RareWords})
				if owners[t] == nil {
					owners[t] = map[int]bool{}
				}
				owners[t][pi] = true
			}
		}
		grams = append(grams, gs)
	}
	idx := map[int]*nindex{}
	for pi, gs := range grams {
		pb := probs[pi]
		// n-grams that two problems share (stock phrases of the set) count
		// towards the overlap of both, but are no evidence for either
		pb.grams = len(gs)
		for _, g := range gs {
			if !g.generic && len(owners[g.text]) == 1 {
				pb.rare++
			}
		}
		for d, g := range gs {
			ix := idx[pb.n]
			if ix == nil {
				ix = &nindex{n: pb.n, m: map[uint64][]ref{}}
				idx[pb.n] = ix
			}
			ix.m[g.key] = append(ix.m[g.key], ref{p: int32(pi), start: int32(g.start), d: int32(d), rare: !g.generic && len(owners[g.text]) == 1})
		}
	}
	var out []nindex
	for _, ix := range idx {
		out = append(out, *ix)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].n > out[j].n })
	return probs, out
}

// newChecker is one reading's checker over the prepared problems: full
// ones keep the answers windows, columns and names; the others (the
// alternative readings of readings.go) the statements only.
func newChecker(pp *prepared, pr params, nProblems int, full bool) *checker {
	c := &checker{pr: pr, byAns: map[int][]int32{}, ansIdx: map[int]int{}, lineHas: map[int][]uint64{}, noNames: !full}
	c.index, c.bloom = pp.index, pp.bloom
	if full {
		c.index2 = pp.index2 // the alternative readings pool 10-grams only
	}
	for pi, p := range pp.probs {
		c.probs = append(c.probs, &pstate{prob: p, pi: int32(pi), lastAnswer: math.MinInt32,
			cl: cluster{bits: make([]uint64, (p.grams+63)/64)}})
	}
	c.keys = make([]uint64, len(c.index))
	if !full {
		return c
	}
	for pi, p := range c.probs {
		if p.answer >= 0 {
			c.byAns[p.answer] = append(c.byAns[p.answer], int32(pi))
			if p.answer >= pr.AnswersMinValue {
				if _, ok := c.ansIdx[p.answer]; !ok {
					c.ansIdx[p.answer] = len(c.ansIdx)
				}
			}
		}
	}
	if len(c.ansIdx) >= pr.AnswersMinCount {
		c.ansK = int(math.Ceil(pr.AnswersFrac * float64(len(c.ansIdx))))
		c.counts = make([]int, len(c.ansIdx))
		w := 2 * nProblems
		c.win = make([]numSlot, w)
		c.cols = columns{m: map[string]*column{}, w: w, na: len(c.ansIdx)}
	}
	return c
}

// ---- streaming ---------------------------------------------------------

const ringSize = 32

type slot struct {
	h    uint64
	line int
	n    uint8
	b    [maxTokBytes]byte
}

type numSlot struct {
	a    int // eligible answer index or -1
	line int
}

type checker struct {
	pr     params
	probs  []*pstate
	index  []nindex
	bloom  []uint64
	ring   [ringSize]slot
	pos    int64
	line   int
	keys   []uint64
	npend  int
	pendP  []*pstate
	byAns  map[int][]int32
	ansIdx map[int]int
	// answers window
	win      []numSlot
	winN     int
	winHead  int
	counts   []int
	distinct int
	ansK     int
	best     int
	bestLine []int
	// round two
	text     []byte           // the added line being lexed, for excerpts
	cols     columns          // answers per column
	ordinal  int              // standalone numbers so far in this line
	covered  [64]bool         // token positions inside a matched n-gram (a ring)
	lineHas  map[int][]uint64 // recent lines: the problems with matched text on them
	binLines map[int]string   // patch lines whose text was decoded: from what
	refused  []Finding        // binary sections refused
	// round three
	pristineText bool     // the text being read is the pristine tree's (a copy or rename)
	noNames      bool     // an alternative reading: no name rule
	pool         *pool    // coverage pooled over the whole patch (shared by the readings)
	index2       []nindex // the short distinctive n-grams, pooled only
	words        numWords // number words being read
}

const bloomBits = 1 << 20

func check(patch []byte, problems []Problem, pr params, o Options) (Report, scores) {
	rep := Report{N: pr.N, Threshold: pr.Threshold}
	var sc scores
	pp := prepareCached(problems, pr)
	pl := newPool(pp)
	c := newChecker(pp, pr, len(problems), true)
	c.pool = pl

	maxDecoded := o.MaxDecoded
	if maxDecoded <= 0 {
		maxDecoded = DefaultMaxDecoded
	}
	fd := &feed{c: c, lx: newLexer(c.token), rep: &rep, o: o, max: maxDecoded}
	fd.rd = newReadings(pp, pr, len(problems), pl)
	forEachAdded(patch, func(lineNo int, text []byte) {
		rep.AddedLines++
		fd.line(lineNo, text, 0)
	}, fd.section, fd.copied, fd.file, fd.other)
	fd.flushRuns(0)
	c.finish()
	maxOpaque := o.MaxOpaque
	if maxOpaque <= 0 {
		maxOpaque = DefaultMaxOpaque
	}
	opq := fd.opaqueFinding(maxOpaque)
	sc.Opaque = fd.opq.total

	sc.AnswersElig = len(c.ansIdx)
	sc.AnswersFound = c.best
	sc.ColumnAnswers = c.cols.best
	rep.Findings = append(rep.Findings, c.refused...)
	if opq != nil {
		rep.Findings = append(rep.Findings, *opq)
	}
	if f := fd.nr.finding(o); f != nil {
		rep.Findings = append(rep.Findings, *f)
	}
	switch {
	case c.ansK > 0 && c.best >= c.ansK && c.best >= c.cols.best:
		lines := c.bestLine
		rep.Findings = append(rep.Findings, Finding{
			Kind:    KindAnswers,
			Lines:   lines,
			Overlap: float64(c.best) / float64(len(c.ansIdx)),
			Detail: fmt.Sprintf("%d of the %d answers of at least %d found within %d consecutive numbers in added %s of the patch%s",
				c.best, len(c.ansIdx), pr.AnswersMinValue, len(c.win), lineRange(lines), c.whereLines(lines)),
		})
	case c.ansK > 0 && c.cols.best >= c.ansK:
		lines := c.cols.bestLine
		rep.Findings = append(rep.Findings, Finding{
			Kind:    KindAnswers,
			Lines:   lines,
			Overlap: float64(c.cols.best) / float64(len(c.ansIdx)),
			Detail: fmt.Sprintf("%d of the %d answers of at least %d found within %d consecutive records (%s) in added %s of the patch%s",
				c.cols.best, len(c.ansIdx), pr.AnswersMinValue, len(c.win), columnName(c.cols.bestKey), lineRange(lines), c.whereLines(lines)),
		})
	}
	for _, p := range c.probs {
		sc.RawOverlap = append(sc.RawOverlap, p.rawOverlap)
		sc.MaxOverlap = append(sc.MaxOverlap, p.maxOverlap)
		sc.MaxRareOverlap = append(sc.MaxRareOverlap, p.rareOverlap)
		sc.MaxRun = append(sc.MaxRun, p.maxRun)
		sc.MaxRunWords = append(sc.MaxRunWords, p.maxRunWords)
		sc.MaxPairOverlap = append(sc.MaxPairOverlap, p.maxPair)
		switch {
		case p.stmt != nil:
			r := p.stmt
			rep.Findings = append(rep.Findings, Finding{
				Kind: KindStatement, Problem: p.id, Lines: r.lines, Overlap: r.overlap,
				Detail: fmt.Sprintf("problem %s: %.0f%% of its %d-grams (longest run %d of its %d words) in added %s of the patch%s",
					p.id, 100*r.overlap, p.n, r.run, len(p.toks), lineRange(r.lines), c.whereLines(r.lines)),
			})
		case p.pair != nil:
			r := p.pair
			lines := addLine(append([]int(nil), r.lines...), r.ansLine)
			rep.Findings = append(rep.Findings, Finding{
				Kind: KindPair, Problem: p.id, Lines: lines, Overlap: r.overlap,
				Detail: fmt.Sprintf("problem %s: %.0f%% of its %d-grams (run of %d of its %d words) in added %s, with its answer %d on line %d%s",
					p.id, 100*r.overlap, p.n, r.run, len(p.toks), lineRange(r.lines), p.answer, r.ansLine, c.whereLines(lines)),
			})
		}
	}
	// round three: the alternative readings and the pool, for the
	// problems no reading of a single place flagged
	found := map[string]bool{}
	for _, f := range rep.Findings {
		if f.Problem != "" {
			found[f.Problem] = true
		}
		if f.Kind == KindAnswers {
			found["answers"] = true
		}
	}
	alt := fd.rd.finish(found, c.where)
	rep.Findings = append(rep.Findings, alt...)
	rep.Findings = append(rep.Findings, pl.findings(pp, pr, found, c.whereLines)...)
	rep.Contaminated = len(rep.Findings) > 0
	return rep, sc
}

// where names the binary section a patch line's text was decoded from
// ("" for a text line).
func (c *checker) where(line int) string {
	if f, ok := c.binLines[line]; ok {
		return " (decoded from " + f + ")"
	}
	return ""
}

// whereLines is where for the first decoded line among lines.
func (c *checker) whereLines(lines []int) string {
	for _, l := range lines {
		if w := c.where(l); w != "" {
			return w
		}
	}
	return ""
}

// addLine inserts l into sorted lines (deduplicated, capped at maxLines).
func addLine(lines []int, l int) []int {
	lines = addLineUncapped(lines, l)
	if len(lines) > maxLines {
		lines = lines[:maxLines]
	}
	return lines
}

// lineRange names the patch lines a finding spans: "line 7", "lines 7-19".
func lineRange(lines []int) string {
	if len(lines) == 0 {
		return "lines ?"
	}
	a, b := lines[0], lines[len(lines)-1]
	if a == b {
		return "line " + strconv.Itoa(a)
	}
	return "lines " + strconv.Itoa(a) + "-" + strconv.Itoa(b)
}

// forEachAdded calls f for each added line of a unified diff, and bin for
// each "GIT binary patch" section (read, not decoded).
func forEachAdded(patch []byte, f func(lineNo int, text []byte), bin func(sec *binSection), copied func(h fileHeader), file func(h fileHeader, lineNo int), other func(lineNo int, text []byte, removed bool)) {
	const (
		outside = iota
		hunk    // counts known and not yet exhausted
		soft    // after a hunk whose counts ran out, or with unparsable counts
		binStart
		binHunk
		binAfter
	)
	state := outside
	oldLeft, newLeft := 0, 0
	lineNo := 0
	var hdr fileHeader
	var sec *binSection
	announced := false
	announce := func(lineNo int) {
		if !announced && file != nil {
			announced = true
			file(hdr, lineNo)
		}
	}
	emit := func() {
		if sec != nil {
			bin(sec)
			sec = nil
		}
	}
	for len(patch) > 0 {
		var l []byte
		if i := bytes.IndexByte(patch, '\n'); i >= 0 {
			l, patch = patch[:i], patch[i+1:]
		} else {
			l, patch = patch, nil
		}
		lineNo++
		if n := len(l); n > 0 && l[n-1] == '\r' {
			l = l[:n-1]
		}
		switch state {
		case binStart:
			if d, size, ok := parseBinaryHunkHeader(l); ok {
				sec.hunks = append(sec.hunks, secHunk{line: lineNo, delta: d, size: size})
				state = binHunk
				continue
			}
			sec.err = fmt.Sprintf("line %d after it is not a literal or delta line", lineNo)
			emit()
			state = outside
		case binHunk:
			if len(l) == 0 {
				if len(sec.hunks) == 2 {
					emit()
					state = outside
				} else {
					state = binAfter
				}
				continue
			}
			h := &sec.hunks[len(sec.hunks)-1]
			h.body = append(h.body, l)
			continue
		case binAfter:
			if d, size, ok := parseBinaryHunkHeader(l); ok {
				sec.hunks = append(sec.hunks, secHunk{line: lineNo, delta: d, size: size})
				state = binHunk
				continue
			}
			emit()
			state = outside
		}
		if bytes.HasPrefix(l, []byte("diff ")) {
			state = outside
			if hdr.copyKind != "" {
				announce(lineNo - 1)
				copied(hdr)
			}
			headerLine(l, lineNo, &hdr)
			announced = false
			continue
		}
		if bytes.HasPrefix(l, []byte("@@ ")) {
			announce(lineNo)
			o, n, ok := hunkCounts(l)
			if ok {
				state, oldLeft, newLeft = hunk, o, n
			} else {
				state = soft
			}
			continue
		}
		if state == hunk && oldLeft <= 0 && newLeft <= 0 {
			state = soft
		}
		switch state {
		case hunk:
			if len(l) == 0 {
				oldLeft--
				newLeft--
				continue
			}
			switch l[0] {
			case '+':
				newLeft--
				f(lineNo, l[1:])
				continue
			case '-':
				oldLeft--
				if other != nil {
					other(lineNo, l[1:], true)
				}
				continue
			case ' ':
				oldLeft--
				newLeft--
				if other != nil {
					other(lineNo, l[1:], false)
				}
				continue
			case '\\':
				continue
			}
			state = outside
		case soft:
			if len(l) > 0 {
				switch {
				case l[0] == '+' && !bytes.HasPrefix(l, []byte("+++ ")):
					f(lineNo, l[1:])
					continue
				case l[0] == '-' && !bytes.HasPrefix(l, []byte("--- ")), l[0] == ' ', l[0] == '\\':
					continue
				}
			}
			state = outside
		}
		if bytes.HasPrefix(l, []byte("GIT binary patch")) {
			announce(lineNo)
			sec = &binSection{line: lineNo, file: hdr}
			state = binStart
			continue
		}
		if state == outside {
			if bytes.HasPrefix(l, []byte("--- ")) && announced {
				// a traditional patch's next file
				hdr, announced = fileHeader{}, false
			}
			headerLine(l, lineNo, &hdr)
		}
	}
	if sec != nil && state == binStart {
		sec.err = "the patch ends before its literal or delta line"
	}
	emit()
	if hdr.copyKind != "" {
		announce(lineNo)
		copied(hdr)
	}
}

// hunkCounts parses "@@ -a[,b] +c[,d] @@".
func hunkCounts(l []byte) (oldN, newN int, ok bool) {
	s := string(l[3:])
	end := strings.Index(s, " @@")
	if end < 0 {
		return 0, 0, false
	}
	parts := strings.Fields(s[:end])
	if len(parts) != 2 || !strings.HasPrefix(parts[0], "-") || !strings.HasPrefix(parts[1], "+") {
		return 0, 0, false
	}
	count := func(r string) (int, bool) {
		i := strings.IndexByte(r, ',')
		if i < 0 {
			if _, err := strconv.Atoi(r); err != nil {
				return 0, false
			}
			return 1, true
		}
		if _, err := strconv.Atoi(r[:i]); err != nil {
			return 0, false
		}
		v, err := strconv.Atoi(r[i+1:])
		return v, err == nil && v >= 0
	}
	o, ok1 := count(parts[0][1:])
	n, ok2 := count(parts[1][1:])
	return o, n, ok1 && ok2
}

// token receives each token of the added text.
func (c *checker) token(tok []byte, h uint64, num int) {
	s := &c.ring[c.pos&(ringSize-1)]
	s.h = h
	s.line = c.line
	s.n = uint8(copy(s.b[:], tok))
	c.covered[c.pos&63] = false
	c.pos++
	cur := c.pos - 1
	if c.win != nil && len(tok) >= 3 && isASCIILetter(tok[0]) || c.words.active {
		var prev []byte
		if c.pos >= 2 {
			ps := &c.ring[(c.pos-2)&(ringSize-1)]
			prev = ps.b[:ps.n]
		}
		if v, key, ok := c.words.step(tok, prev); ok && v >= c.pr.AnswersMinValue && c.win != nil {
			// a number written as words, which ended before this token
			c.number(v, cur)
			if c.cols.m != nil {
				a := -1
				if i, ok := c.ansIdx[v]; ok {
					a = i
				}
				c.columnNumber(a, key, maxPositions)
			}
		}
	}
	for ii := range c.index {
		c.lookup(&c.index[ii], func(r ref, n int) { c.event(r, n, cur) })
	}
	if c.pool != nil {
		for ii := range c.index2 {
			c.lookup(&c.index2[ii], func(r ref, n int) { c.pool.add2(r, c.line) })
		}
	}
	if num >= 0 {
		c.number(num, cur)
		var prev []byte
		if c.pos >= 2 {
			ps := &c.ring[(c.pos-2)&(ringSize-1)]
			prev = ps.b[:ps.n]
		}
		if c.cols.m != nil {
			a := -1
			if i, ok := c.ansIdx[num]; ok {
				a = i
			}
			c.columnNumber(a, prev, c.ordinal)
		}
		c.ordinal++
	}
	if c.npend > 0 {
		c.resolve(cur, false)
	}
}

func (c *checker) verify(r ref, n int) bool {
	p := c.probs[r.p]
	for k := 0; k < n; k++ {
		s := &c.ring[(c.pos-int64(n)+int64(k))&(ringSize-1)]
		i := int(r.start) + k
		if s.h != p.ths[i] {
			return false
		}
		t := p.toks[i]
		if len(t) > maxTokBytes {
			t = t[:maxTokBytes]
		}
		if string(s.b[:s.n]) != t {
			return false
		}
	}
	return true
}

func (c *checker) event(r ref, n int, cur int64) {
	p := c.probs[r.p]
	cl := &p.cl
	if cl.active && cur > cl.lastPos+p.gap {
		c.close(p)
	}
	first := c.ring[(c.pos-int64(n))&(ringSize-1)].line
	if !cl.active {
		cl.active = true
		for i := range cl.bits {
			cl.bits[i] = 0
		}
		cl.count, cl.rare = 0, 0
		cl.firstPos, cl.firstLine = cur, first
		cl.runStart = cur
		cl.lastPos = cur - 1
		cl.maxRun = 0
		cl.lines = cl.lines[:0]
		cl.allLines = cl.allLines[:0]
		cl.near = false
		if p.lastAnswer >= first-c.pr.PairLines {
			cl.near, cl.ansLine = true, p.lastAnswer
		}
	}
	if w := &cl.bits[r.d>>6]; *w&(1<<(r.d&63)) == 0 {
		*w |= 1 << (r.d & 63)
		cl.count++
		if r.rare {
			cl.rare++
		}
	}
	if cur != cl.lastPos+1 {
		cl.runStart = cur
	}
	if run := int(cur-cl.runStart) + n; run > cl.maxRun {
		cl.maxRun = run
	}
	cl.lastPos = cur
	cl.lastLine = c.line
	if c.pool != nil {
		c.pool.add(r, c.line)
	}
	for k := 0; k < n; k++ {
		c.covered[(c.pos-int64(n)+int64(k))&63] = true
		l := c.ring[(c.pos-int64(n)+int64(k))&(ringSize-1)].line
		c.markLine(l, r.p)
		cl.allLines = appendLine(cl.allLines, l)
		if r.rare {
			cl.lines = appendLine(cl.lines, l)
		}
	}
}

// close ends p's open cluster and judges it.
func (c *checker) close(p *pstate) {
	cl := &p.cl
	cl.active = false
	if p.grams == 0 {
		return
	}
	ov := float64(cl.count) / float64(p.grams)
	runFrac := float64(cl.maxRun) / float64(len(p.toks))
	if runFrac > 1 {
		runFrac = 1
	}
	lines := cl.lines
	if len(lines) == 0 {
		lines = cl.allLines
	}
	res := result{overlap: ov, run: cl.maxRun, firstLine: cl.firstLine, lastLine: cl.lastLine,
		lines: append([]int(nil), lines...), ansLine: cl.ansLine}
	if ov > p.rawOverlap {
		p.rawOverlap = ov
	}
	if cl.rare >= c.pr.PairMinRare && ov > p.rareOverlap {
		p.rareOverlap = ov
	}
	pr := c.pr
	if cl.rare < min(pr.MinRare, p.rare) {
		return // stock phrases only
	}
	if ov > p.maxOverlap {
		p.maxOverlap = ov
	}
	if runFrac > p.maxRun {
		p.maxRun = runFrac
	}
	if cl.maxRun > p.maxRunWords {
		p.maxRunWords = cl.maxRun
	}
	runRule := runFrac >= pr.RunFrac && cl.maxRun >= pr.RunMin && cl.rare >= pr.MinRare
	if ov >= pr.Threshold || runRule {
		if p.stmt == nil || ov > p.stmt.overlap {
			p.stmt = &res
		}
		return
	}
	if (ov >= pr.PairThreshold || runFrac >= pr.PairRunFrac) && cl.rare >= pr.PairMinRare {
		if cl.near {
			c.setPair(p, res)
			return
		}
		if len(p.cands) >= 16 {
			p.cands = p.cands[1:]
		}
		p.cands = append(p.cands, res)
	}
}

func (c *checker) setPair(p *pstate, res result) {
	if res.overlap > p.maxPair {
		p.maxPair = res.overlap
	}
	if p.pair == nil || res.overlap > p.pair.overlap {
		r := res
		p.pair = &r
	}
}

// markLine notes that line l holds matched text of problem p.
func (c *checker) markLine(l int, p int32) {
	bits := c.lineHas[l]
	if bits == nil {
		bits = make([]uint64, (len(c.probs)+63)/64)
		c.lineHas[l] = bits
	}
	bits[p>>6] |= 1 << (p & 63)
}

// foreignLine tells whether line l holds matched text of another problem
// than p and none of p's: an answer there belongs to that problem's row.
func (c *checker) foreignLine(l int, p int32) bool {
	bits := c.lineHas[l]
	if bits == nil || bits[p>>6]&(1<<(p&63)) != 0 {
		return false
	}
	for _, w := range bits {
		if w != 0 {
			return true
		}
	}
	return false
}

// pruneCands drops weak clusters whose answer window has passed.
func (c *checker) pruneCands() {
	for l := range c.lineHas {
		if l < c.line-2*c.pr.PairLines-2 {
			delete(c.lineHas, l)
		}
	}
	for _, p := range c.probs {
		if len(p.cands) == 0 {
			continue
		}
		k := 0
		for _, r := range p.cands {
			if r.lastLine+c.pr.PairLines >= c.line {
				p.cands[k] = r
				k++
			}
		}
		p.cands = p.cands[:k]
	}
}

// number handles a standalone number at stream position cur.
func (c *checker) number(v int, cur int64) {
	for _, pi := range c.byAns[v] {
		p := c.probs[pi]
		p.pend = append(p.pend, ansOcc{pos: cur, line: c.line})
		c.npend++
		if !p.inPend {
			p.inPend = true
			c.pendP = append(c.pendP, p)
		}
	}
	if c.win == nil {
		return
	}
	a := -1
	if i, ok := c.ansIdx[v]; ok {
		a = i
	}
	w := len(c.win)
	if c.winN == w {
		old := c.win[c.winHead]
		if old.a >= 0 {
			c.counts[old.a]--
			if c.counts[old.a] == 0 {
				c.distinct--
			}
		}
	} else {
		c.winN++
	}
	c.win[c.winHead] = numSlot{a: a, line: c.line}
	c.winHead = (c.winHead + 1) % w
	if a >= 0 {
		c.counts[a]++
		if c.counts[a] == 1 {
			c.distinct++
		}
	}
	if c.distinct > c.best {
		c.best = c.distinct
		if c.best >= c.ansK {
			// the lines of the shortest tail of the window that holds
			// all the distinct answers found
			var lines []int
			seen := make([]bool, len(c.counts))
			found := 0
			for k := 1; k <= c.winN && found < c.best; k++ {
				s := c.win[(c.winHead-k+w)%w]
				if s.a < 0 {
					continue
				}
				lines = addLineUncapped(lines, s.line)
				if !seen[s.a] {
					seen[s.a] = true
					found++
				}
			}
			if len(lines) > maxLines {
				lines = lines[:maxLines]
			}
			c.bestLine = lines
		}
	}
}

// addLineUncapped inserts l into sorted lines, deduplicated.
func addLineUncapped(lines []int, l int) []int {
	i := sort.SearchInts(lines, l)
	if i < len(lines) && lines[i] == l {
		return lines
	}
	lines = append(lines, 0)
	copy(lines[i+1:], lines[i:])
	lines[i] = l
	return lines
}

// resolve settles pending answer occurrences once the n-grams that could
// cover them have been seen (all of them when final).
func (c *checker) resolve(cur int64, final bool) {
	keep := c.pendP[:0]
	for _, p := range c.pendP {
		k := 0
		for _, o := range p.pend {
			if !final && o.pos+int64(p.n)-1 > cur {
				p.pend[k] = o
				k++
				continue
			}
			c.npend--
			if c.covered[o.pos&63] {
				continue // part of a matched copy of a statement
			}
			if c.foreignLine(o.line, p.pi) {
				continue // on another problem's row
			}
			c.answerAt(p, o.line)
		}
		p.pend = p.pend[:k]
		if k > 0 {
			keep = append(keep, p)
		} else {
			p.inPend = false
		}
	}
	c.pendP = keep
}

func (c *checker) answerAt(p *pstate, line int) {
	p.lastAnswer = line
	pl := c.pr.PairLines
	if cl := &p.cl; cl.active && line <= cl.lastLine+pl && line >= cl.firstLine-pl {
		cl.near, cl.ansLine = true, line
	}
	k := 0
	for _, r := range p.cands {
		if line <= r.lastLine+pl && line >= r.firstLine-pl {
			r.ansLine = line
			c.setPair(p, r)
			continue
		}
		p.cands[k] = r
		k++
	}
	p.cands = p.cands[:k]
}

func (c *checker) finish() {
	if v, key, ok := c.words.end(); ok && v >= c.pr.AnswersMinValue && c.win != nil {
		c.number(v, c.pos-1)
		if a, ok := c.ansIdx[v]; ok {
			c.columnNumber(a, key, maxPositions)
		} else {
			c.columnNumber(-1, key, maxPositions)
		}
	}
	c.resolve(c.pos, true)
	for _, p := range c.probs {
		if p.cl.active {
			c.close(p)
		}
	}
}

// appendLine appends l to ascending lines unless present or full.
func appendLine(lines []int, l int) []int {
	if m := len(lines); m >= maxLines || (m > 0 && lines[m-1] >= l) {
		return lines
	}
	return append(lines, l)
}

// lookup calls hit for every verified reference of ix's n-gram that ends
// at the current position (the Bloom filter first, then the index).
func (c *checker) lookup(ix *nindex, hit func(r ref, n int)) {
	n := ix.n
	if c.pos < int64(n) {
		return
	}
	var ths [ringSize]uint64
	for k := 0; k < n; k++ {
		ths[k] = c.ring[(c.pos-int64(n)+int64(k))&(ringSize-1)].h
	}
	key := ngramKey(ths[:n])
	b := key & (bloomBits - 1)
	if c.bloom[b>>6]&(1<<(b&63)) == 0 {
		return
	}
	for _, r := range ix.m[key] {
		if c.verify(r, n) {
			hit(r, n)
		}
	}
}
