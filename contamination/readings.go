package contamination

import (
	"fmt"
	"strconv"
	"unicode/utf8"
)

// Alternative readings (round three). A string written backwards, or in
// ROT13, or with its words in reverse order, is undone by one call in a
// loader; so every added line (and what was decoded from it) is also read
// through ROT13, reversed character by character, and with its words in
// reverse order, each reading by a checker of its own (statements only:
// its n-grams, clusters and the pool). Reversed readings read a block of
// consecutive lines (up to maxReverseBlock bytes) backwards, so a text
// reversed as a whole reads forwards again. The paths of new files are
// read as a stream of their own (a statement or an answer key carried in
// file names), with the answers rules but not the name rule.

const maxReverseBlock = 1 << 20

type altReading struct {
	name string
	c    *checker
	lx   *lexer
}

type readings struct {
	rot13, rev, revWords *altReading
	paths                *altReading
	block                []byte // the lines of the block being collected, end to end
	blockEnds            []int  // where each line ends in block
	blockLines           []int
	blockBytes           int
	last                 int
	quiet                int // lines in a row that are no run of words
	buf                  []byte
}

// maxAltGap is how many lines that are not words a run of text goes on
// over (a formula, a short last line of a paragraph).
const maxAltGap = 3

func newReadings(pp *prepared, pr params, nProblems int, pl *pool) *readings {
	mk := func(name string, full bool) *altReading {
		c := newChecker(pp, pr, nProblems, full)
		c.pool = pl
		c.noNames = true
		return &altReading{name: name, c: c, lx: newLexer(c.token)}
	}
	return &readings{rot13: mk("read through ROT13", false), rev: mk("read backwards", false),
		revWords: mk("read with its words in reverse order", false), paths: mk("read from the paths of new files", true), last: -1}
}

func (a *altReading) line(lineNo int, text []byte) {
	a.c.line = lineNo
	a.c.text = text
	a.c.ordinal = 0
	a.c.pruneCands()
	a.lx.text(text)
}

// line reads one added line in every alternative reading: a run of text
// starts at a line of words (hasLetters) and goes on over the lines that
// follow it, up to maxAltGap lines in a row that are not.
func (rd *readings) line(lineNo int, text []byte) {
	consecutive := lineNo == rd.last || lineNo == rd.last+1
	if hasLetters(text) {
		rd.quiet = 0
	} else {
		rd.quiet++
		if rd.last < 0 || !consecutive || rd.quiet > maxAltGap {
			rd.flushBlock()
			rd.last = -1
			return
		}
	}
	rd.buf = append(rd.buf[:0], text...)
	for i, c := range rd.buf {
		switch {
		case c >= 'a' && c <= 'z':
			rd.buf[i] = 'a' + (c-'a'+13)%26
		case c >= 'A' && c <= 'Z':
			rd.buf[i] = 'A' + (c-'A'+13)%26
		}
	}
	rd.rot13.line(lineNo, rd.buf)
	if !consecutive || rd.blockBytes+len(text) > maxReverseBlock {
		rd.flushBlock()
	}
	rd.block = append(rd.block, text...)
	rd.blockEnds = append(rd.blockEnds, len(rd.block))
	rd.blockLines = append(rd.blockLines, lineNo)
	rd.blockBytes += len(text)
	rd.last = lineNo
}

// hasLetters tells a run of words: a line of at least minAltLetters
// letters and minAltSpaces spaces (a line of an encoded blob has no
// spaces; a line of a reflowed or one-line statement has both).
func hasLetters(b []byte) bool {
	if len(b) < minAltLetters {
		return false
	}
	n, sp := 0, 0
	for _, c := range b {
		switch {
		case c == ' ':
			sp++
		case isASCIILetter(c) || c >= 0x80:
			n++
		}
	}
	return n >= minAltLetters && sp >= minAltSpaces
}

// minAltLetters is the letters a line needs to be read again through
// ROT13, backwards and in reverse word order.
const (
	minAltLetters = 24
	minAltSpaces  = 3
)

// flushBlock reads the collected block backwards.
func (rd *readings) flushBlock() {
	for i := len(rd.blockEnds) - 1; i >= 0; i-- {
		start := 0
		if i > 0 {
			start = rd.blockEnds[i-1]
		}
		l := rd.block[start:rd.blockEnds[i]]
		rd.buf = reverseRunes(rd.buf[:0], l)
		rd.rev.line(rd.blockLines[i], rd.buf)
		rd.buf = reverseWords(rd.buf[:0], l)
		rd.revWords.line(rd.blockLines[i], rd.buf)
	}
	rd.block, rd.blockEnds, rd.blockLines, rd.blockBytes = rd.block[:0], rd.blockEnds[:0], rd.blockLines[:0], 0
}

// reverseRunes appends the characters of l in reverse order to dst.
func reverseRunes(dst, l []byte) []byte {
	for i := len(l); i > 0; {
		r, size := utf8.DecodeLastRune(l[:i])
		if r == utf8.RuneError && size <= 1 {
			dst = append(dst, l[i-1])
			i--
			continue
		}
		dst = append(dst, l[i-size:i]...)
		i -= size
	}
	return dst
}

// reverseWords appends the space-separated words of l in reverse order.
func reverseWords(dst, l []byte) []byte {
	end := len(l)
	for end > 0 {
		for end > 0 && (l[end-1] == ' ' || l[end-1] == '\t') {
			end--
		}
		start := end
		for start > 0 && l[start-1] != ' ' && l[start-1] != '\t' {
			start--
		}
		if start < end {
			if len(dst) > 0 {
				dst = append(dst, ' ')
			}
			dst = append(dst, l[start:end]...)
		}
		end = start
	}
	return dst
}

// path reads the path of a new file.
func (rd *readings) path(lineNo int, p string) {
	rd.paths.line(lineNo, []byte(p))
}

// finish ends every reading and returns the statement findings of the
// problems that have none in found (marking them found), and the answers
// of the paths.
func (rd *readings) finish(found map[string]bool, where func(int) string) []Finding {
	rd.flushBlock()
	var out []Finding
	for _, a := range []*altReading{rd.rot13, rd.rev, rd.revWords, rd.paths} {
		c := a.c
		c.finish()
		for _, p := range c.probs {
			if p.stmt == nil || found[p.id] {
				continue
			}
			r := p.stmt
			found[p.id] = true
			w := ""
			if len(r.lines) > 0 {
				w = where(r.lines[0])
			}
			out = append(out, Finding{Kind: KindStatement, Problem: p.id, Lines: r.lines, Overlap: r.overlap,
				Detail: fmt.Sprintf("problem %s: %.0f%% of its %d-grams (longest run %d of its %d words) in added %s of the patch, %s%s",
					p.id, 100*r.overlap, p.n, r.run, len(p.toks), lineRange(r.lines), a.name, w)})
		}
	}
	if c := rd.paths.c; c.ansK > 0 && !found["answers"] {
		best, lines, how := c.best, c.bestLine, fmt.Sprintf("within %d consecutive numbers", len(c.win))
		if c.cols.best > best {
			best, lines, how = c.cols.best, c.cols.bestLine, fmt.Sprintf("within %d consecutive records (%s)", len(c.win), columnName(c.cols.bestKey))
		}
		if best >= c.ansK {
			out = append(out, Finding{Kind: KindAnswers, Lines: lines, Overlap: float64(best) / float64(len(c.ansIdx)),
				Detail: fmt.Sprintf("%d of the %d answers of at least %d found %s in the paths of new files at %s of the patch",
					best, len(c.ansIdx), c.pr.AnswersMinValue, how, lineRange(lines))})
		}
	}
	return out
}

var _ = strconv.Itoa
