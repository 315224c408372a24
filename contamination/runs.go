package contamination

import (
	"bytes"
	"fmt"
	"strconv"
)

// Runs of encoded text and integer arrays in the added lines, assembled
// the ways code writes a long string or table: pieces of a base-N
// alphabet joined across string quotes ("ab" "cd", "ab" + "cd",
// ["ab", "cd"]), across JSON and Python string escapes ("ab\ncd"), across
// line ends (wrapped blobs, YAML list items "- ab"), and numbers joined
// across commas, brackets and line ends. A finished run of at least minRun
// characters (or minArray numbers) is decoded and read (feed.run,
// feed.array); what reads as nothing is opaque (opaque.go).

// minRun is the shortest assembled run that is decoded: shorter runs are
// identifiers, hashes and words.
const minRun = 64

// minBase64 is kept for the base64 blobs of round two (the same bound).
const minBase64 = minRun

// minArray is the shortest integer array that is decoded.
const minArray = 32

// maxRunBytes bounds one assembled run (a longer one is decoded in parts).
const maxRunBytes = 8 << 20

// isB64 tells the characters of standard and URL-safe base64.
func isB64(c byte) bool {
	return isASCIILetter(c) || isDigit(c) || c == '+' || c == '/' || c == '-' || c == '_'
}

// runAcc is a run being assembled at one decoding depth.
type runAcc struct {
	buf     []byte
	line    int
	open    bool // the run may go on at the start of the next line
	lastStr bool // its last piece was inside a string literal
	lastLen int  // the length of its last piece
}

// isB85Char tells the printable characters that base85 alphabets use.
func isB85Char(c byte) bool { return c > ' ' && c < 0x7f }

// scanRuns finds the data pieces of line l and assembles them into acc,
// calling done for each finished run. Two pieces of a line join when both
// are inside string literals and only quotes, commas, '+', brackets,
// spaces or string escapes lie between them, with a quote or an escape
// among them; the first piece of a line joins the run of the line before
// when nothing but such glue lies around the line break.
func scanRuns(l []byte, acc *runAcc, lineNo int, done func(run []byte, line int)) {
	flush := func() {
		if len(acc.buf) >= minRun {
			done(acc.buf, acc.line)
		}
		acc.buf = acc.buf[:0]
		acc.open = false
	}
	i := 0
	for i < len(l) && (l[i] == ' ' || l[i] == '\t') {
		i++
	}
	if i+1 < len(l) && l[i] == '-' && (l[i+1] == ' ' || l[i+1] == '\t') {
		i += 2 // a YAML list item: "- piece"
	}
	tail := -1 // where the run's last piece began in acc.buf
	var (
		inStr    byte // the quote of the string literal we are in
		pieces   int  // pieces of this line so far
		lastStr  bool // the last piece was inside a string
		gapOK    = true
		gapQuote bool
		gapEsc   bool
	)
	for i < len(l) {
		c := l[i]
		if isB64(c) {
			j := i
			for j < len(l) && isB64(l[j]) {
				j++
			}
			k := j
			for k < len(l) && k-j < 2 && l[k] == '=' {
				k++
			}
			in := inStr != 0
			join := false
			if pieces == 0 {
				// across a line break: a wrapped blob (long pieces) or a
				// string literal per line
				join = acc.open && gapOK && (acc.lastStr && in && acc.lastLen >= 4 || !acc.lastStr && !in && acc.lastLen >= 16 && k-i >= 4)
			} else {
				join = gapOK && lastStr && in && (gapQuote || gapEsc)
			}
			if !join || len(acc.buf)+k-i > maxRunBytes {
				flush()
			}
			if len(acc.buf) == 0 {
				acc.line = lineNo
			}
			tail = len(acc.buf)
			acc.buf = append(acc.buf, l[i:k]...)
			acc.lastStr, acc.lastLen = in, k-i
			pieces++
			lastStr = in
			gapOK, gapQuote, gapEsc = true, false, false
			i = k
			if k > j {
				flush() // padding ends a blob
				gapOK = false
			}
			continue
		}
		switch {
		case c == '\\' && i+1 < len(l):
			switch e := l[i+1]; e {
			case 'n', 'r', 't', 'f', 'b', 'v', '\\', '/':
				gapEsc = true
				i += 2
				continue
			case 'u':
				if _, ok := hexAt(l, i+2, 4); ok {
					gapEsc = true
					i += 6
					continue
				}
			}
			gapOK = false
			i++
		case c == '"' || c == '\'':
			if inStr == 0 {
				inStr = c
			} else if inStr == c {
				inStr = 0
			}
			gapQuote = true
			i++
		case c == ' ' || c == '\t' || c == ',' || c == '+' || c == '(' || c == ')' || c == '[' || c == ']' || c == ';':
			i++
		default:
			if tail >= 0 && i > 0 && isB64(l[i-1]) && tail > 0 {
				// a word glued to code ("sha256:", "key=") is no part of
				// the run it was joined to
				acc.buf = acc.buf[:tail]
			}
			gapOK = false
			i++
		}
		if !gapOK && len(acc.buf) > 0 {
			flush()
			tail = -1
		}
	}
	// the run may go on at the next line if only glue followed it
	if pieces > 0 && gapOK && len(acc.buf) > 0 {
		acc.open = true
		return
	}
	if pieces == 0 && acc.open && gapOK && len(bytesTrimGlue(l)) == 0 {
		return // a line of glue only (a closing quote): keep waiting
	}
	flush()
}

// bytesTrimGlue is l without the glue characters around runs.
func bytesTrimGlue(l []byte) []byte { return bytes.Trim(l, " \t\"',+()[];") }

// b85Runs calls f for the runs of base85-alphabet characters of l that
// hold symbols outside base64 (at least minRun characters, trimmed of the
// quotes and commas around them).
func b85Runs(l []byte, f func(run []byte)) {
	for i := 0; i < len(l); {
		if !isB85Char(l[i]) {
			i++
			continue
		}
		j := i
		for j < len(l) && isB85Char(l[j]) {
			j++
		}
		run := trimQuotes(l[i:j])
		if len(run) >= minRun && bytes.IndexFunc(run, func(r rune) bool { return r < 0x80 && !isB64(byte(r)) && r != '=' }) >= 0 {
			f(run)
		}
		i = j
	}
}

// ---- integer arrays ------------------------------------------------------

// intAcc is an integer array being assembled at one decoding depth.
type intAcc struct {
	vals []int64
	line int
	open bool
}

const maxArray = 1 << 20

// scanInts finds the arrays of integer literals (decimal, 0x hex, with a
// sign) of line l, separated by commas, spaces and brackets, and assembles
// them into acc across line ends, calling done for each finished array.
func scanInts(l []byte, acc *intAcc, lineNo int, done func(vals []int64, line int)) {
	flush := func() {
		if len(acc.vals) >= minArray {
			done(acc.vals, acc.line)
		}
		acc.vals = acc.vals[:0]
		acc.open = false
	}
	last := false // the last token was a number
	first := true
	for i := 0; i < len(l); {
		if isGlueNum(l[i]) {
			i++
			continue
		}
		v, k, ok := intLiteral(l, i)
		if !ok {
			flush()
			for i < len(l) && !isGlueNum(l[i]) {
				i++
			}
			last, first = false, false
			continue
		}
		if first && !acc.open {
			flush()
		}
		if len(acc.vals) == 0 {
			acc.line = lineNo
		}
		if len(acc.vals) < maxArray {
			acc.vals = append(acc.vals, v)
		}
		last, first = true, false
		i = k
	}
	if !last {
		flush()
		return
	}
	acc.open = true
}

// isGlueNum tells the characters between the numbers of an array.
func isGlueNum(c byte) bool {
	switch c {
	case ' ', '\t', ',', '[', ']', '(', ')', '{', '}', ';':
		return true
	}
	return false
}

// intLiteral parses an integer literal at l[i:] ending at glue or the
// line's end: it returns its value and the index after it.
func intLiteral(l []byte, i int) (int64, int, bool) {
	j := i
	neg := false
	if j < len(l) && l[j] == '-' {
		neg = true
		j++
	}
	if j >= len(l) || !isDigit(l[j]) {
		return 0, i, false
	}
	var v int64
	if l[j] == '0' && j+2 < len(l)+1 && j+1 < len(l) && (l[j+1] == 'x' || l[j+1] == 'X') {
		k := j + 2
		for k < len(l) && hexVal(l[k]) >= 0 && k-j < 18 {
			v = v<<4 | int64(hexVal(l[k]))
			k++
		}
		if k == j+2 || (k < len(l) && !isGlueNum(l[k])) {
			return 0, i, false
		}
		if neg {
			v = -v
		}
		return v, k, true
	}
	k := j
	for k < len(l) && isDigit(l[k]) && k-j < 18 {
		v = v*10 + int64(l[k]-'0')
		k++
	}
	if k < len(l) && !isGlueNum(l[k]) {
		return 0, i, false
	}
	if neg {
		v = -v
	}
	return v, k, true
}

// arrayBytes reads an integer array as bytes: each value as one byte
// (0..255, or -128..127), else as 16-bit or 32-bit words in both byte
// orders, else as code points. It calls try with each reading and its name
// until one returns true.
func arrayReadings(vals []int64, try func(b []byte, how string) bool) {
	lo, hi := vals[0], vals[0]
	for _, v := range vals {
		lo, hi = min(lo, v), max(hi, v)
	}
	switch {
	case lo >= -128 && hi <= 255:
		b := make([]byte, len(vals))
		for i, v := range vals {
			b[i] = byte(v)
		}
		try(b, "bytes")
		return
	case lo >= 0 && hi <= 0x10ffff:
		var s []byte
		for _, v := range vals {
			s = append(s, string(rune(v))...)
		}
		if try(s, "code points") {
			return
		}
	}
	if lo >= -(1<<31) && hi < 1<<32 {
		for _, w := range []int{2, 4} {
			if w == 2 && (lo < -(1<<15) || hi >= 1<<16) {
				continue
			}
			for _, big := range []bool{false, true} {
				b := make([]byte, 0, len(vals)*w)
				for _, v := range vals {
					for k := 0; k < w; k++ {
						sh := 8 * k
						if big {
							sh = 8 * (w - 1 - k)
						}
						b = append(b, byte(uint64(v)>>sh))
					}
				}
				order := "little-endian"
				if big {
					order = "big-endian"
				}
				if try(b, fmt.Sprintf("%d-bit %s words", 8*w, order)) {
					return
				}
			}
		}
	}
}

// arrayWidth is the bytes one value of the array takes at least.
func arrayWidth(vals []int64) int64 {
	var m int64
	for _, v := range vals {
		if v < 0 {
			v = -v
		}
		m = max(m, v)
	}
	switch {
	case m < 1<<8:
		return 1
	case m < 1<<16:
		return 2
	case m < 1<<32:
		return 4
	}
	return 8
}

var _ = strconv.Itoa
