package contamination

import (
	"bytes"
	"html"
	"unicode"
	"unicode/utf8"

	"golang.org/x/text/unicode/norm"
)

// maxTokBytes bounds the bytes of one token that are kept for verification;
// longer tokens are compared on their first maxTokBytes bytes plus a hash of
// the whole token.
const maxTokBytes = 48

// noNumber marks a token that is not a standalone integer.
const noNumber = -1

// lexer turns text into the normalised token stream: lowercase runs of
// letters or of ASCII digits (a letter/digit boundary splits a token), with
// LaTeX markup and JSON/Python string escapes removed. The same lexer is run
// over the problem statements and over every added line of a patch, so that
// any rule it applies applies to both sides alike.
//
// For each token it calls emit with the token's bytes (lowercase, valid only
// during the call), a 64-bit hash of the whole token, and its integer value
// when the token is a standalone number (a digit run with no letter glued to
// either side, at most 6 digits), else noNumber.
type lexer struct {
	emit func(tok []byte, h uint64, num int)

	buf     []byte          // current token, truncated to maxTokBytes
	h       uint64          // FNV-1a over the whole current token
	blen    int             // length of the whole current token
	kind    uint8           // 0 none, 1 letters, 2 digits
	numOK   bool            // current digit run did not start right after a letter
	digits  int             // digits in the current run
	val     int             // value of the current digit run
	prevLet bool            // the previous raw character was (part of) a letter token
	split   int             // pending single-character arguments of an unbraced \frac
	script  bool            // the current token is superscript or subscript characters ("3⁶" is "3 6")
	fold    map[rune]string // compatibility decompositions seen (NFKD, marks dropped)
	pre     []byte          // foldText's buffer
	pre2    []byte          // prefold's buffer
	skel    map[rune]byte   // confusable skeletons seen
}

const (
	fnvOffset = 14695981039346656037
	fnvPrime  = 1099511628211
)

func newLexer(emit func(tok []byte, h uint64, num int)) *lexer {
	return &lexer{emit: emit, buf: make([]byte, 0, maxTokBytes)}
}

// mix finalises a hash (splitmix64 finaliser).
func mix(x uint64) uint64 {
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	x ^= x >> 31
	return x
}

// flush ends the current token. followedByLetter tells a digit run whether a
// letter comes right after it (then it is not a standalone number).
func (lx *lexer) flush(followedByLetter bool) {
	if lx.kind == 0 {
		lx.script = false
		return
	}
	num := noNumber
	if lx.kind == 2 && lx.numOK && !followedByLetter && lx.digits <= 6 {
		num = lx.val
	}
	lx.emit(lx.buf, mix(lx.h^uint64(lx.blen)), num)
	lx.buf = lx.buf[:0]
	lx.h = fnvOffset
	lx.blen = 0
	lx.kind = 0
	lx.digits = 0
	lx.val = 0
	lx.script = false
}

func (lx *lexer) addByte(b byte) {
	if len(lx.buf) < maxTokBytes {
		lx.buf = append(lx.buf, b)
	}
	lx.h ^= uint64(b)
	lx.h *= fnvPrime
	lx.blen++
}

// sep handles a separator character.
func (lx *lexer) sep() {
	lx.flush(false)
	lx.prevLet = false
	if lx.split > 0 {
		lx.split = 0
	}
}

// letter appends one lowercase letter (as UTF-8 bytes).
func (lx *lexer) letterBytes(p []byte) {
	lx.scriptBoundary(false)
	if lx.kind == 2 {
		lx.flush(true)
	}
	if lx.split > 0 {
		lx.flush(false)
	}
	if lx.kind == 0 {
		lx.h = fnvOffset
		lx.kind = 1
	}
	for _, b := range p {
		lx.addByte(b)
	}
	if lx.split > 0 {
		lx.split--
		lx.flush(false)
	}
	lx.prevLet = true
}

func (lx *lexer) digit(c byte) {
	lx.scriptBoundary(false)
	if lx.kind == 1 {
		lx.flush(false)
	}
	if lx.split > 0 {
		lx.flush(false)
	}
	if lx.kind == 0 {
		lx.h = fnvOffset
		lx.kind = 2
		lx.numOK = !lx.prevLet
	}
	lx.addByte(c)
	lx.digits++
	if lx.digits <= 6 {
		lx.val = lx.val*10 + int(c-'0')
	}
	if lx.split > 0 {
		lx.split--
		lx.flush(false)
	}
	lx.prevLet = false
}

// scriptBoundary ends the current token where superscript or subscript
// characters begin or end: "3⁶" reads like "3^6", "xⁿ" like "x^n".
func (lx *lexer) scriptBoundary(script bool) {
	if lx.script != script {
		if lx.kind != 0 {
			lx.flush(false)
		}
		lx.prevLet = false
		lx.script = script
	}
}

// word emits w as a token of its own.
func (lx *lexer) word(w string) {
	lx.flush(false)
	lx.split = 0
	lx.h = fnvOffset
	lx.kind = 1
	for i := 0; i < len(w); i++ {
		lx.addByte(w[i])
	}
	lx.flush(false)
	lx.prevLet = false
}

func isOctal(c byte) bool { return c >= '0' && c <= '7' }

func isSpace(c byte) bool {
	switch c {
	case ' ', '\t', '\n', '\r', '\f', '\v':
		return true
	}
	return false
}

func isASCIILetter(c byte) bool { return c|0x20 >= 'a' && c|0x20 <= 'z' }
func isDigit(c byte) bool       { return c >= '0' && c <= '9' }

func hexVal(c byte) int {
	switch {
	case c >= '0' && c <= '9':
		return int(c - '0')
	case c >= 'a' && c <= 'f':
		return int(c-'a') + 10
	case c >= 'A' && c <= 'F':
		return int(c-'A') + 10
	}
	return -1
}

func hexAt(s []byte, i, n int) (rune, bool) {
	if i+n > len(s) {
		return 0, false
	}
	var r rune
	for k := 0; k < n; k++ {
		v := hexVal(s[i+k])
		if v < 0 {
			return 0, false
		}
		r = r<<4 | rune(v)
	}
	return r, true
}

// escLetter maps the control characters that a string escape produces to
// the escape's letter: a "\t" or "\f" that swallowed the first letter of a
// LaTeX command (e.g. a tab followed by "riangle") is read as that command.
func escLetter(c byte) byte {
	switch c {
	case '\t':
		return 't'
	case '\n':
		return 'n'
	case '\r':
		return 'r'
	case '\f':
		return 'f'
	case '\b':
		return 'b'
	case '\v':
		return 'v'
	case 7:
		return 'a'
	}
	return 0
}

func isEscapeLetter(c byte) bool {
	switch c {
	case 'n', 't', 'r', 'f', 'b', 'v', 'a':
		return true
	}
	return false
}

func letterRun(s []byte, i int) int {
	j := i
	for j < len(s) && isASCIILetter(s[j]) {
		j++
	}
	return j
}

// command handles a known LaTeX command name.
func (lx *lexer) command(name string) {
	lx.flush(false)
	lx.prevLet = false
	lx.split = 0
	act, ok := latexCommand(name)
	if !ok {
		lx.word(lowerASCII(name))
		return
	}
	switch {
	case act == "":
		// dropped
	case act == fracArgs:
		lx.split = -1 // armed: decided by the next non-space character
	default:
		lx.word(act)
	}
}

// latexCommand looks a command name up as written, then in lower case
// ("\FRAC", "\Sqrt"): LaTeX itself is case-sensitive, but a copy written
// with the case changed is the same text to a reader or a tokenizer.
func latexCommand(name string) (string, bool) {
	if act, ok := latex[name]; ok {
		return act, true
	}
	act, ok := latex[lowerASCII(name)]
	return act, ok
}

func lowerASCII(s string) string {
	for i := 0; i < len(s); i++ {
		if s[i] >= 'A' && s[i] <= 'Z' {
			b := []byte(s)
			for k := range b {
				if b[k] >= 'A' && b[k] <= 'Z' {
					b[k] += 'a' - 'A'
				}
			}
			return string(b)
		}
	}
	return s
}

// fold rewrites the non-ASCII characters of s that stand for ASCII ones
// before lexing, so that they cannot split a word or a LaTeX command name
// wherever they sit ("\\fr\u200bac", "\\ｆrac", "Fi\u0301nd"): invisible format
// characters and combining marks are dropped, and characters whose
// compatibility decomposition is ASCII letters or digits (fullwidth forms,
// mathematical alphanumerics, ligatures, accented letters) are replaced by
// it. Superscripts and subscripts, and the symbols with a reading of their
// own, are left for runeText. s is returned as is when it is all ASCII.
func (lx *lexer) foldText(s []byte) []byte {
	ascii := true
	for _, c := range s {
		if c >= 0x80 {
			ascii = false
			break
		}
	}
	if ascii {
		return s
	}
	out := lx.pre[:0]
	for i := 0; i < len(s); {
		c := s[i]
		if c < 0x80 {
			out = append(out, c)
			i++
			continue
		}
		r, size := utf8.DecodeRune(s[i:])
		raw := s[i : i+size]
		at := i
		i += size
		if r == utf8.RuneError && size == 1 {
			out = append(out, raw...)
			continue
		}
		if ignorable(r) {
			continue
		}
		if d := digitValue(r); d >= 0 {
			out = append(out, byte('0'+d))
			continue
		}
		if _, ok := scriptChar(r); ok {
			out = append(out, raw...)
			continue
		}
		inWord := unicode.IsLetter(r) && (letterNeighbour(s, at, true) || letterNeighbour(s, i, false))
		if _, ok := symbols[r]; ok && !inWord && !lookalikeGreek[r] {
			out = append(out, raw...)
			continue
		}
		if f := lx.compat(r); f != "" && isASCIIWord(f) {
			out = append(out, f...)
			continue
		}
		if unicode.IsLetter(r) {
			if v := lx.skeleton(r); v != 0 {
				// a look-alike letter of another script (TR39)
				out = append(out, v)
				continue
			}
		}
		out = append(out, raw...)
	}
	lx.pre = out
	return out
}

func isASCIIWord(s string) bool {
	for i := 0; i < len(s); i++ {
		if !isASCIILetter(s[i]) && !isDigit(s[i]) {
			return false
		}
	}
	return s != ""
}

// text lexes s (one patch line, or a whole statement).
func (lx *lexer) text(s []byte) {
	s = lx.foldText(lx.prefold(s))
	i := 0
	for i < len(s) {
		c := s[i]
		if lx.split < 0 { // an unbraced \frac: "\frac mn", "\frac12"
			if c == ' ' || c == '\t' || c == '"' || c == '\'' { // spaces, and quotes of concatenated literals
				i++
				continue
			}
			if c == '\\' && len(bytes.Trim(s[i:], "\\ \t")) == 0 {
				break // a line continuation: the arguments follow on the next line
			}
			if isASCIILetter(c) || isDigit(c) {
				lx.split = 2
			} else {
				lx.split = 0
			}
		}
		switch {
		case isASCIILetter(c):
			if lx.kind == 0 && (i == 0 || isSpace(s[i-1]) || s[i-1] == '"' || s[i-1] == '\'') {
				// a command whose escape letter and control character were
				// lost ("rac{m}{n}" after a reflow of "\x0crac{m}{n}"),
				// after whitespace or the quote of a string literal
				if j := letterRun(s, i); j-i >= 3 {
					if cmd, ok := orphanTails[string(s[i:j])]; ok {
						lx.command(cmd)
						i = j
						continue
					}
				}
			}
			lx.letterBytes([]byte{c | 0x20})
			i++
		case isDigit(c):
			if c == '0' && lx.kind == 0 && !lx.prevLet && i+2 < len(s) && s[i+1]|0x20 == 'x' && hexVal(s[i+2]) >= 0 {
				// a hex literal ("0x46") reads as its value
				if k, v, ok := hexLiteral(s, i+2); ok {
					for _, d := range []byte(itoa10(v)) {
						lx.digit(d)
					}
					lx.flush(false)
					i = k
					continue
				}
			}
			lx.digit(c)
			i++
		case c == '\\':
			i = lx.backslash(s, i+1)
		case c == '&':
			i = lx.entity(s, i)
		case c < 0x80:
			if e := escLetter(c); e != 0 {
				j := letterRun(s, i+1)
				if j > i+1 {
					name := string(e) + string(s[i+1:j])
					if _, ok := latexCommand(name); ok {
						lx.command(name)
						i = j
						continue
					}
				}
			}
			lx.sep()
			i++
		default:
			r, size := utf8.DecodeRune(s[i:])
			lx.runeText(r)
			i += size
		}
	}
	lx.flush(false)
	lx.prevLet = false
	// an armed unbraced \frac stays armed across a line break
}

// backslash handles the text after a backslash at s[j:]: a run of
// backslashes, written as themselves or encoded ("\x5c", "\u005c",
// "\134", "&#92;", "&bsol;"), is one backslash, whatever the escaping
// level; then the escape or command that follows. It returns the index
// from which normal lexing resumes.
func (lx *lexer) backslash(s []byte, j int) int {
	for j < len(s) {
		if s[j] == '\\' {
			j++
			continue
		}
		if k := encodedBackslash(s, j); k > j {
			j = k
			continue
		}
		break
	}
	return lx.escape(s, j)
}

// encodedBackslash returns the index after an encoded backslash at s[i:]
// (the escape's own backslash already consumed: "x5c", "u005c",
// "U0000005c", "134"; or an HTML reference "&#92;", "&#x5c;", "&bsol;"),
// else i.
func encodedBackslash(s []byte, i int) int {
	if i >= len(s) {
		return i
	}
	switch s[i] {
	case 'x':
		if r, ok := hexAt(s, i+1, 2); ok && r == '\\' {
			return i + 3
		}
	case 'u':
		if r, ok := hexAt(s, i+1, 4); ok && r == '\\' {
			return i + 5
		}
	case 'U':
		if r, ok := hexAt(s, i+1, 8); ok && r == '\\' {
			return i + 9
		}
	case '1':
		if i+3 <= len(s) && string(s[i:i+3]) == "134" {
			return i + 3
		}
	case '&':
		if r, k := entityAt(s, i); k > i && r == "\\" {
			return k
		}
	}
	return i
}

// entityAt decodes an HTML character reference at s[i:] ('&'): it returns
// the decoded text and the index after the ';', or i when there is none.
func entityAt(s []byte, i int) (string, int) {
	const maxEntity = 34 // "&CounterClockwiseContourIntegral;" is the longest name
	end := -1
	for k := i + 1; k < len(s) && k-i <= maxEntity; k++ {
		c := s[k]
		if c == ';' {
			end = k
			break
		}
		if !isASCIILetter(c) && !isDigit(c) && c != '#' {
			break
		}
	}
	if end <= i+1 {
		return "", i
	}
	ref := string(s[i : end+1])
	dec := html.UnescapeString(ref)
	if dec == ref {
		return "", i
	}
	return dec, end + 1
}

// entity handles an '&' at s[i]: an HTML character reference is read as the
// characters it stands for ("&lt;", "&#8730;", "&sup2;"), anything else is
// a separator.
func (lx *lexer) entity(s []byte, i int) int {
	dec, k := entityAt(s, i)
	if k == i {
		lx.sep()
		return i + 1
	}
	if dec == "\\" {
		return lx.backslash(s, k)
	}
	for _, r := range dec {
		lx.runeText(r)
	}
	return k
}

// escape handles what follows a run of backslashes at s[j:]; it returns the
// index from which normal lexing resumes.
func (lx *lexer) escape(s []byte, j int) int {
	if j >= len(s) {
		lx.sep()
		return j
	}
	c := s[j]
	switch c {
	case 'u':
		if r, ok := hexAt(s, j+1, 4); ok {
			k := j + 5
			if r >= 0xD800 && r < 0xDC00 && k+6 <= len(s) && s[k] == '\\' && s[k+1] == 'u' {
				if r2, ok2 := hexAt(s, k+2, 4); ok2 && r2 >= 0xDC00 && r2 < 0xE000 {
					r = 0x10000 + (r-0xD800)<<10 + (r2 - 0xDC00)
					k += 6
				}
			}
			lx.runeText(r)
			return k
		}
	case 'U':
		if r, ok := hexAt(s, j+1, 8); ok {
			lx.runeText(r)
			return j + 9
		}
	case 'x':
		if r, ok := hexAt(s, j+1, 2); ok {
			lx.runeText(r)
			return j + 3
		}
	case '0', '1', '2', '3':
		// an octal escape of three digits ("\141" is "a"), as C, Python
		// and git's quoted paths write bytes
		if j+3 <= len(s) && isOctal(s[j+1]) && isOctal(s[j+2]) {
			lx.runeText(rune(c-'0')<<6 | rune(s[j+1]-'0')<<3 | rune(s[j+2]-'0'))
			return j + 3
		}
	}
	lx.sep() // a backslash is a separator unless it encodes a character
	if !isASCIILetter(c) {
		return j // "\(", "\[", "\$", "\"", "\ ", ...
	}
	k := letterRun(s, j)
	name := string(s[j:k])
	if _, ok := latexCommand(name); ok {
		lx.command(name)
		return k
	}
	if isEscapeLetter(c) {
		// "\nFind", "\tThe": a string escape followed by a word.
		return j + 1
	}
	lx.command(name) // unknown command: kept as its letters
	return k
}

// runeText handles one non-ASCII (or decoded) character.
func (lx *lexer) runeText(r rune) {
	if r < 0x80 {
		c := byte(r)
		switch {
		case isASCIILetter(c):
			lx.letterBytes([]byte{c | 0x20})
		case isDigit(c):
			lx.digit(c)
		default:
			lx.sep()
		}
		return
	}
	if w, ok := symbols[r]; ok {
		if w == "" {
			lx.sep()
		} else {
			lx.word(w)
		}
		return
	}
	if ignorable(r) {
		// invisible format characters (zero-width space and joiners, soft
		// hyphen, BOM) and combining marks are nothing: "Fi\u200bnd" and
		// "F\u0303ind" are "find"
		return
	}
	if d, ok := scriptChar(r); ok {
		lx.scriptBoundary(true)
		lx.script = true
		lx.scriptByte(d)
		return
	}
	if f := lx.compat(r); f != "" {
		// a compatibility form: fullwidth "Ｆｉｎｄ", mathematical
		// alphanumerics, ligatures, precomposed letters with their marks
		// dropped ("é" is "e")
		for _, fr := range f {
			lx.runeText(fr)
		}
		return
	}
	if d := digitValue(r); d >= 0 {
		lx.digit(byte('0' + d))
		return
	}
	if unicode.IsLetter(r) {
		if v := lx.skeleton(r); v != 0 {
			lx.letterBytes([]byte{v})
			return
		}
	}
	if unicode.IsLetter(r) || unicode.IsDigit(r) {
		var b [utf8.UTFMax]byte
		n := utf8.EncodeRune(b[:], unicode.ToLower(r))
		lx.letterBytes(b[:n])
		return
	}
	lx.sep()
}

// scriptByte adds an ASCII digit or letter to a superscript or subscript
// token; a digit run and a letter run are tokens of their own.
func (lx *lexer) scriptByte(c byte) {
	kind := uint8(1)
	if isDigit(c) {
		kind = 2
	}
	if lx.kind != 0 && lx.kind != kind {
		lx.flush(kind == 1) // a digit run followed by a letter is no number
		lx.script = true
	}
	if lx.kind == 0 {
		lx.h = fnvOffset
		lx.kind = kind
		lx.numOK = true
	}
	lx.addByte(c)
	if kind == 2 {
		lx.digits++
		if lx.digits <= 6 {
			lx.val = lx.val*10 + int(c-'0')
		}
	}
	lx.prevLet = kind == 1
}

// scriptChar maps superscript and subscript digits and letters to their
// ASCII character.
func scriptChar(r rune) (byte, bool) {
	switch r {
	case '¹':
		return '1', true
	case '²':
		return '2', true
	case '³':
		return '3', true
	}
	if r >= 0x2070 && r <= 0x209f || r >= 0x1d2c && r <= 0x1d6a || r >= 0x02b0 && r <= 0x02b8 || r == 0x2071 || r == 0x207f {
		d := norm.NFKD.String(string(r))
		if len(d) == 1 && (isDigit(d[0]) || isASCIILetter(d[0])) {
			return d[0] | lowerBit(d[0]), true
		}
	}
	return 0, false
}

func lowerBit(c byte) byte {
	if isASCIILetter(c) {
		return 0x20
	}
	return 0
}

// compat returns r's compatibility decomposition with combining marks
// dropped, when that differs from r ("" when it does not).
func (lx *lexer) compat(r rune) string {
	if f, ok := lx.fold[r]; ok {
		return f
	}
	d := norm.NFKD.String(string(r))
	var b []rune
	for _, x := range d {
		if !unicode.In(x, unicode.Mn, unicode.Me, unicode.Cf) {
			b = append(b, x)
		}
	}
	f := string(b)
	if f == string(r) || len(b) == 0 {
		f = ""
	}
	for _, x := range b {
		if x == r {
			f = "" // no progress: avoid a loop
		}
	}
	if lx.fold == nil {
		lx.fold = map[rune]string{}
	}
	if len(lx.fold) < 4096 {
		lx.fold[r] = f
	}
	return f
}

// tokenize returns the tokens of s (for statements; tests).
func tokenize(s string) (toks []string, nums []int) {
	lx := newLexer(func(tok []byte, _ uint64, num int) {
		toks = append(toks, string(tok))
		nums = append(nums, num)
	})
	lx.text([]byte(s))
	return toks, nums
}

// hexLiteral reads the hex digits of a literal at s[i:] (after "0x"): its
// end and value, when it has at most 5 digits and no letter or digit
// follows.
func hexLiteral(s []byte, i int) (int, int, bool) {
	v, k := 0, i
	for k < len(s) && hexVal(s[k]) >= 0 && k-i <= 5 {
		v = v<<4 | hexVal(s[k])
		k++
	}
	if k-i > 5 || k < len(s) && (isASCIILetter(s[k]) || isDigit(s[k]) || s[k] == '_') {
		return i, 0, false
	}
	return k, v, true
}

func itoa10(v int) string {
	if v == 0 {
		return "0"
	}
	var b [12]byte
	n := len(b)
	for v > 0 {
		n--
		b[n] = byte('0' + v%10)
		v /= 10
	}
	return string(b[n:])
}

// lookalikeGreek are the Greek letters that mathematics rarely uses as
// symbols and that look like Latin ones: standing alone they read as
// their Latin skeleton ("ν" is "v"), not as their names.
var lookalikeGreek = map[rune]bool{'ο': true, 'ι': true, 'ν': true, 'κ': true, 'ρ': true, 'τ': true, 'υ': true, 'χ': true}
