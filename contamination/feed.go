package contamination

import (
	"bytes"
	"errors"
	"fmt"
	"strconv"
	"unicode"
	"unicode/utf8"
)

// feed turns the patch's added text, and everything decoded from it, into
// the lexer's token stream: text lines as they are; binary sections
// decoded; containers unpacked; encoded runs and integer arrays decoded (a
// run may be assembled over several lines, as wrapped strings are). Every
// decoded byte counts against max; what cannot be decoded within it is
// refused; what decodes to nothing readable is opaque (opaque.go).
type feed struct {
	c    *checker
	lx   *lexer
	rep  *Report
	o    Options
	max  int64
	runs [maxUnpackDepth + 1]runAcc
	ints [maxUnpackDepth + 1]intAcc
	b85  [maxUnpackDepth + 1]runAcc
	b85q []byte // the base85 run with its lines' quotes taken off
	// readBytes are the bytes of second readings (percent, quoted-
	// printable, joined literals) read so far
	readBytes int64
	qp        [maxUnpackDepth + 1]runAcc
	opq       opaqueState
	// noCount > 0 while a second reading of counted text (percent or
	// quoted-printable decoded) or pristine text is read: nothing opaque
	// is counted in it
	noCount int
	rd      *readings // the alternative readings (readings.go)
	lits    [maxUnpackDepth + 1]runAcc
	hdr     fileHeader // the file whose lines are being read
	hdrLine int
	nr      nameRule // the eval set named (names.go)
}

// line lexes one line of text at patch line lineNo (depth: how many
// decodings produced it), then decodes its encoded runs, arrays and
// escapes.
func (f *feed) line(lineNo int, text []byte, depth int) {
	c := f.c
	c.line = lineNo
	c.text = text
	c.ordinal = 0
	c.pruneCands()
	f.lx.text(text)
	if f.noCount == 0 || f.nr.inCopy != "" {
		f.nr.added(text, lineNo, c.where(lineNo))
	}
	if f.rd != nil && f.noCount == 0 {
		f.rd.line(lineNo, text)
	}
	if depth >= maxUnpackDepth {
		return
	}
	scanRuns(text, &f.runs[depth], lineNo, func(run []byte, at int) { f.run(at, run, depth) })
	scanInts(text, &f.ints[depth], lineNo, func(vals []int64, at int) { f.array(at, vals, depth) })
	f.lineB85(lineNo, text, depth)
	f.escapes(lineNo, text, depth)
	if f.noCount == 0 {
		f.literals(lineNo, text, depth)
	}
}

// literals reads string literals concatenated over a line or lines
// ("Fi" "nd th" "e sum", "Fi" + "nd") a second time, their contents
// joined: words split between short literals are words again.
func (f *feed) literals(lineNo int, text []byte, depth int) {
	acc := &f.lits[depth]
	parts, ok := literalParts(text)
	if ok && (len(parts) >= 2 || len(acc.buf) > 0 && len(parts) == 1) {
		if len(acc.buf) == 0 {
			acc.line = lineNo
		}
		for _, p := range parts {
			if len(acc.buf) > 0 && len(p) > 0 && letterEnd(acc.buf) && letterStart(p) {
				acc.open = true // a word split between two literals
			}
			if len(acc.buf)+len(p) < maxRunBytes {
				acc.buf = append(acc.buf, p...)
			}
		}
		return
	}
	f.flushLiterals(depth)
	if ok && len(parts) == 1 {
		acc.buf = append(acc.buf[:0], parts[0]...)
		acc.line = lineNo
	}
}

// flushLiterals reads the joined literals when a word was split between
// two of them (acc.open); otherwise the plain reading had it all.
func (f *feed) flushLiterals(depth int) {
	acc := &f.lits[depth]
	if acc.open && len(acc.buf) > 0 {
		buf := append([]byte(nil), acc.buf...)
		acc.buf, acc.open = acc.buf[:0], false
		f.reading(acc.line, buf, "concatenated string literals", depth)
		return
	}
	acc.buf, acc.open = acc.buf[:0], false
}

func letterEnd(b []byte) bool {
	r, _ := utf8.DecodeLastRune(b)
	return unicode.IsLetter(r)
}

func letterStart(b []byte) bool {
	r, _ := utf8.DecodeRune(b)
	return unicode.IsLetter(r)
}

// literalParts splits a line that is string literals and the glue of
// their concatenation (spaces, '+', '(', ')', ',', a leading "NAME =")
// into the literals' contents; ok is false for any other line.
func literalParts(l []byte) ([][]byte, bool) {
	i := 0
	// a leading assignment: NAME = ( or NAME:
	if j := bytes.IndexAny(l, "\"'"); j > 0 {
		pre := bytes.TrimSpace(l[:j])
		pre = bytes.TrimRight(pre, "( ")
		pre = bytes.TrimSuffix(pre, []byte("="))
		pre = bytes.TrimSuffix(pre, []byte(":"))
		pre = bytes.TrimSpace(pre)
		if len(pre) > 0 && bytes.IndexFunc(pre, func(r rune) bool {
			return !(r == '_' || r == '.' || r < 0x80 && (isASCIILetter(byte(r)) || isDigit(byte(r))))
		}) >= 0 {
			if !bytes.HasPrefix(bytes.TrimSpace(l), []byte("+")) {
				return nil, false
			}
		}
		i = j
	}
	var parts [][]byte
	for i < len(l) {
		c := l[i]
		switch c {
		case ' ', '\t', '+', '(', ')', ',', '\\':
			i++
			continue
		case '"', '\'':
			j := i + 1
			for j < len(l) && l[j] != c {
				if l[j] == '\\' {
					j++
				}
				j++
			}
			if j >= len(l) {
				return nil, false
			}
			parts = append(parts, l[i+1:j])
			i = j + 1
			continue
		}
		return nil, false
	}
	return parts, len(parts) > 0
}

// flushRuns ends the runs and arrays pending at depth.
func (f *feed) flushRuns(depth int) {
	if depth > maxUnpackDepth {
		return
	}
	if r := &f.runs[depth]; len(r.buf) >= minRun {
		buf := append([]byte(nil), r.buf...)
		r.buf, r.open = r.buf[:0], false
		f.run(r.line, buf, depth)
	} else {
		r.buf, r.open = r.buf[:0], false
	}
	if a := &f.ints[depth]; len(a.vals) >= minArray {
		vals := append([]int64(nil), a.vals...)
		a.vals, a.open = a.vals[:0], false
		f.array(a.line, vals, depth)
	} else {
		a.vals, a.open = a.vals[:0], false
	}
	if r := &f.b85[depth]; len(r.buf) >= minRun {
		buf := append([]byte(nil), r.buf...)
		if r.open {
			buf = append(buf[:0], f.b85q...)
		}
		r.buf = r.buf[:0]
		f.base85(r.line, buf, depth)
	} else {
		r.buf = r.buf[:0]
	}
	f.flushLiterals(depth)
	if q := &f.qp[depth]; len(q.buf) > 0 {
		buf := append([]byte(nil), q.buf...)
		q.buf = q.buf[:0]
		f.reading(q.line, unescapeHex(buf, '=', false), "quoted-printable text", depth)
	}
}

// flushB64 is flushRuns (the name of round two).
func (f *feed) flushB64(depth int) { f.flushRuns(depth) }

// run decodes one assembled run of a base16/32/64 alphabet found at patch
// line lineNo: the first decoding that reads as text or a container is
// read; when none does and the run looks encoded, its decoded size is
// opaque.
func (f *feed) run(lineNo int, s []byte, depth int) {
	class := runClass(s)
	type dec struct {
		name string
		b    []byte
	}
	var decs []dec
	if isHexRun(s) {
		decs = append(decs, dec{"hex", decodeHex(s)})
	}
	if isB32Run(s) {
		if b, ok := decodeB32(s); ok {
			decs = append(decs, dec{"base32", b})
		}
	}
	if b, ok := decodeB64(s); ok {
		decs = append(decs, dec{"base64", b})
	}
	for _, d := range decs {
		if len(d.b) == 0 || !f.readable(d.b) {
			continue
		}
		if !f.spend(lineNo, int64(len(d.b)), d.name+" text") {
			return
		}
		f.content(lineNo, d.b, fmt.Sprintf("%s text at line %d", d.name, lineNo), depth+1, true)
		return
	}
	if class != "" && class != "base85" {
		size := int64(len(s)) * 3 / 4
		for _, d := range decs {
			if d.name == class {
				size = int64(len(d.b))
			}
		}
		f.addOpaque(lineNo, size, fmt.Sprintf("%s text at line %d that decodes to neither text nor a container the check reads", class, lineNo))
	}
}

// lineB85 collects the base85 runs of a line: a line that is one such run
// (wrapped, quoted or not) goes on from the line before.
func (f *feed) lineB85(lineNo int, text []byte, depth int) {
	acc := &f.b85[depth]
	raw := bytes.TrimSpace(text)
	t := trimQuotes(raw)
	whole := len(t) >= 16 && bytes.IndexFunc(t, func(r rune) bool { return !isB85Char(byte(r)) || r >= 0x80 }) < 0
	if whole && (len(acc.buf) > 0 || hasB85Symbol(t)) {
		if len(acc.buf) == 0 {
			acc.line = lineNo
			acc.open = true // every line a quoted string so far
			acc.lastLen = 0
		}
		if len(t) == len(raw) {
			acc.open = false
		}
		if len(acc.buf)+len(raw) <= maxRunBytes {
			// both forms are kept: the quotes may be the data's own
			acc.buf = append(acc.buf, raw...)
			f.b85q = append(f.b85q[:min(len(f.b85q), acc.lastLen)], t...)
			acc.lastLen = len(f.b85q)
			return
		}
	}
	if len(acc.buf) >= minRun {
		buf := append([]byte(nil), acc.buf...)
		if acc.open {
			buf = append(buf[:0], f.b85q...)
		}
		acc.buf = acc.buf[:0]
		f.base85(acc.line, buf, depth)
	}
	acc.buf = acc.buf[:0]
	if !whole {
		b85Runs(text, func(run []byte) { f.base85(lineNo, run, depth) })
	}
}

// trimQuotes strips the string quotes (and a comma after them) around a
// line that is one string literal.
func trimQuotes(t []byte) []byte {
	if len(t) < 2 || t[0] != '"' && t[0] != '\'' {
		return t
	}
	u := bytes.TrimSuffix(t, []byte(","))
	if len(u) >= 2 && u[len(u)-1] == t[0] {
		return u[1 : len(u)-1]
	}
	return t
}

func hasB85Symbol(t []byte) bool {
	return bytes.IndexFunc(t, func(r rune) bool { return r < 0x80 && !isB64(byte(r)) && r != '=' }) >= 0
}

// base85 decodes a run in one of the base85 alphabets.
func (f *feed) base85(lineNo int, s []byte, depth int) {
	var first []byte
	for _, a := range []struct {
		name string
		dec  func([]byte) ([]byte, bool)
	}{
		{"Ascii85", decodeA85},
		{"base85", func(b []byte) ([]byte, bool) { return decode85(b, &b85Dec) }},
		{"Z85", func(b []byte) ([]byte, bool) { return decode85(b, &z85Dec) }},
	} {
		b, ok := a.dec(s)
		if !ok {
			continue
		}
		if first == nil {
			first = b
		}
		if !f.readable(b) {
			continue
		}
		if !f.spend(lineNo, int64(len(b)), a.name+" text") {
			return
		}
		f.content(lineNo, b, fmt.Sprintf("%s text at line %d", a.name, lineNo), depth+1, true)
		return
	}
	if runClass(s) == "base85" {
		size := int64(len(s)) * 4 / 5
		if first != nil {
			size = int64(len(first))
		}
		f.addOpaque(lineNo, size, fmt.Sprintf("base85 text at line %d that decodes to neither text nor a container the check reads", lineNo))
	}
}

// array reads an integer array as bytes, code points or words: the first
// reading that is text or a container is read; when none is and the array
// looks like data, it is opaque at its width.
func (f *feed) array(lineNo int, vals []int64, depth int) {
	done := false
	arrayReadings(vals, func(b []byte, how string) bool {
		if !f.readable(b) {
			return false
		}
		if f.spend(lineNo, int64(len(b)), "an integer array") {
			f.content(lineNo, b, fmt.Sprintf("an integer array at line %d read as %s", lineNo, how), depth+1, true)
		}
		done = true
		return true
	})
	if !done && arrayLooksData(vals) {
		f.addOpaque(lineNo, int64(len(vals))*arrayWidth(vals), fmt.Sprintf("an integer array of %d values at line %d that reads as neither text nor a container", len(vals), lineNo))
	}
}

// escapes reads a line written in percent-encoding or quoted-printable
// (at least 4 escapes) a second time, decoded; quoted-printable's soft
// line breaks ("=" at the end) join lines.
func (f *feed) escapes(lineNo int, text []byte, depth int) {
	if n := countEscapes(text, '%'); n >= 4 && n*15 >= len(text) {
		f.reading(lineNo, unescapeHex(text, '%', true), "percent-encoded text", depth)
	}
	q := &f.qp[depth]
	if n := countEscapes(text, '='); n >= 4 && n*15 >= len(text) || len(q.buf) > 0 {
		if len(q.buf) == 0 {
			q.line = lineNo
		}
		if t := bytes.TrimRight(text, " \t"); len(t) > 0 && t[len(t)-1] == '=' && len(q.buf)+len(t) < maxRunBytes {
			q.buf = append(q.buf, t[:len(t)-1]...)
			return
		}
		q.buf = append(q.buf, text...)
		buf := unescapeHex(q.buf, '=', false)
		q.buf = q.buf[:0]
		f.reading(q.line, buf, "quoted-printable text", depth)
	}
}

// reading reads a decoded form of added text as added text. Second
// readings of text already read have a budget of their own (max bytes in
// all): past it they are skipped, not refused.
func (f *feed) reading(lineNo int, b []byte, what string, depth int) {
	if f.readBytes+int64(len(b)) > f.max {
		return
	}
	f.readBytes += int64(len(b))
	f.noCount++
	f.content(lineNo, b, fmt.Sprintf("%s at line %d", what, lineNo), depth+1, false)
	f.noCount--
}

// readable tells whether decoded bytes are worth reading: a container,
// UTF-16/32 text, text, or a raw deflate or LZMA stream of such.
func (f *feed) readable(b []byte) bool {
	if sniff(b) != "" || wideKind(b) != "" {
		return true
	}
	head := b[:min(len(b), opaqueBlock)]
	if isText(head) && unreadable(b) == 0 {
		return true
	}
	if i, _ := magicAt(b); i >= 0 {
		return true
	}
	if out, ok := inflateRaw(b, min(f.max-f.rep.DecodedBytes, 1<<16)); ok && (isText(out) || sniff(out) != "") {
		return true
	}
	if isLZMAAlone(b) {
		if out, ok := unLZMA(b, min(f.max-f.rep.DecodedBytes, 1<<16)); ok && (isText(out) || sniff(out) != "") {
			return true
		}
	}
	return false
}

// blob decodes one base64 blob found at patch line lineNo (round two's
// entry point; runs are read by run).
func (f *feed) blob(lineNo int, s []byte, depth int) { f.run(lineNo, s, depth) }

// spend counts n decoded bytes; past the bound it refuses and says false.
func (f *feed) spend(lineNo int, n int64, what string) bool {
	if f.rep.DecodedBytes+n > f.max {
		f.refuse(lineNo, fmt.Sprintf("%s at line %d of the patch decodes to more than the %d bytes the check reads, so the patch is refused", what, lineNo, f.max))
		return false
	}
	f.rep.DecodedBytes += n
	return true
}

func (f *feed) refuse(lineNo int, detail string) {
	if len(f.c.refused) >= maxLines {
		return
	}
	for _, r := range f.c.refused {
		if r.Lines[0] == lineNo {
			return
		}
	}
	f.c.refused = append(f.c.refused, Finding{Kind: KindBinary, Lines: []int{lineNo}, Overlap: 1, Detail: detail})
}

// section decodes a binary section and reads what it decodes to.
func (f *feed) section(sec *binSection) {
	f.rep.BinarySections++
	out, inserted, used, err := decodeSection(sec, f.o, f.max-f.rep.DecodedBytes)
	f.rep.DecodedBytes += used
	if err != nil {
		f.refuse(sec.line, fmt.Sprintf("the GIT binary patch of %s at line %d of the patch cannot be checked, so it is refused: %v",
			strconv.QuoteToASCII(sec.name()), sec.line, err))
		return
	}
	what := "the GIT binary patch of " + strconv.QuoteToASCII(sec.name())
	if len(sec.hunks) > 0 && sec.hunks[0].delta && len(inserted) > 0 {
		// a delta: what it copies from the pristine file is not new
		f.addOpaque(sec.hunks[0].line, unreadable(inserted), what+" (bytes its delta inserts)")
		f.content(sec.hunks[0].line, out, what, 1, false)
		return
	}
	f.content(sec.hunks[0].line, out, what, 1, true)
}

// content reads decoded bytes: a container is unpacked and its parts
// read in turn; UTF-16/32 is transcoded; text is read as lines; bytes that
// are none of these are searched for a container behind a header, tried
// as raw deflate and LZMA-alone, and otherwise, when count is set, their
// unreadable blocks are opaque (and they are still lexed as they are).
func (f *feed) content(at int, data []byte, origin string, depth int, count bool) {
	c := f.c
	if len(c.binLines) < 1<<16 {
		if c.binLines == nil {
			c.binLines = map[int]string{}
		}
		c.binLines[at] = origin // the innermost decoding names it
	}
	if depth <= maxUnpackDepth {
		if kind := sniff(data); kind != "" {
			if f.unpackParts(at, data, kind, origin, depth, count) {
				return
			}
		}
		if kind := wideKind(data); kind != "" {
			f.content(at, fromWide(data, kind), origin+" ("+kind+")", depth+1, count)
			return
		}
		if bad := unreadable(data); bad > 0 {
			if f.rawStreams(at, data, origin, depth, count) {
				return
			}
			if count {
				f.addOpaque(at, bad, origin+", which is neither text nor a container the check reads")
			}
		}
	}
	forEachLine(data, func(l []byte) {
		f.rep.DecodedLines++
		f.line(at, l, depth)
	})
	f.flushRuns(min(depth, maxUnpackDepth))
}

// unpackParts unpacks a container and reads its parts; false when nothing
// came out (the bytes are then read as they are).
func (f *feed) unpackParts(at int, data []byte, kind, origin string, depth int, count bool) bool {
	parts, err := unpack(kind, data, f.max-f.rep.DecodedBytes)
	got := 0
	for _, p := range parts {
		got += len(p.data)
	}
	switch {
	case errors.Is(err, errBudget) || errors.Is(err, errUnreadable):
		f.refuse(at, fmt.Sprintf("%s at line %d of the patch is %s data the check cannot read (%v), so the patch is refused", origin, at, kind, err))
		return true
	case err != nil && got == 0:
		// nothing came out: read the bytes as they are (two bytes are
		// a weak magic for zlib; so is a damaged header)
		return false
	}
	for _, p := range parts {
		f.rep.DecodedBytes += int64(len(p.data))
		what := origin + " (" + kind + ")"
		if p.name != "" {
			what = origin + " (" + kind + " member " + strconv.QuoteToASCII(p.name) + ")"
		}
		f.content(at, p.data, what, depth+1, count)
	}
	return true
}

// rawStreams reads bytes that are not text as a container behind a
// header, a raw deflate stream or an LZMA-alone stream: true when one of
// them read.
func (f *feed) rawStreams(at int, data []byte, origin string, depth int, count bool) bool {
	if i, kind := magicAt(data); i > 0 {
		if count {
			f.addOpaque(at, unreadable(data[:i]), origin+" before its "+kind+" data")
		}
		f.content(at, data[i:], fmt.Sprintf("%s (%s at byte %d)", origin, kind, i), depth+1, count)
		return true
	}
	budget := f.max - f.rep.DecodedBytes
	try := func(out []byte, what string) bool {
		if !(isText(out[:min(len(out), opaqueBlock)]) || sniff(out) != "") {
			return false
		}
		if !f.spend(at, int64(len(out)), origin) {
			return true
		}
		f.content(at, out, origin+" ("+what+")", depth+1, count)
		return true
	}
	if out, ok := inflateRaw(data, budget); ok && try(out, "raw deflate") {
		return true
	}
	if isLZMAAlone(data) {
		if out, ok := unLZMA(data, budget); ok && try(out, "LZMA") {
			return true
		}
	}
	return false
}

// copied reads the source of a copy or rename as added text: git apply
// puts the pristine file's content at the new path without a single '+'
// line (a loader copied over a training module, say). Without the
// pristine file the patch is refused.
func (f *feed) copied(h fileHeader) {
	src := h.oldPath
	if src == "" {
		f.refuse(h.copyLine, fmt.Sprintf("the %s at line %d of the patch names no file it comes from, so the patch is refused", h.copyKind, h.copyLine))
		return
	}
	if f.o.Pristine == nil {
		f.refuse(h.copyLine, fmt.Sprintf("the %s of %s at line %d of the patch cannot be checked without the pristine tree, so the patch is refused", h.copyKind, strconv.QuoteToASCII(src), h.copyLine))
		return
	}
	b, err := f.o.Pristine(src)
	if err != nil {
		f.refuse(h.copyLine, fmt.Sprintf("the %s of %s at line %d of the patch cannot be checked: %v (%v), so the patch is refused", h.copyKind, strconv.QuoteToASCII(src), h.copyLine, errNoBase, err))
		return
	}
	if !f.spend(h.copyLine, int64(len(b)), "the "+h.copyKind+" of "+strconv.QuoteToASCII(src)) {
		return
	}
	f.c.pristineText = true
	f.nr.setFile(h)
	f.nr.inCopy = fmt.Sprintf("the %s of %s", h.copyKind, strconv.QuoteToASCII(src))
	f.noCount++
	f.content(h.copyLine, b, fmt.Sprintf("the %s of %s to %s", h.copyKind, strconv.QuoteToASCII(src), strconv.QuoteToASCII(h.newPath)), 1, false)
	f.noCount--
	f.nr.inCopy = ""
	f.c.pristineText = false
}

// file is told of each file of the patch as its content begins: the path
// of a new (or renamed, or copied) file is read as added text of its own.
func (f *feed) file(h fileHeader, lineNo int) {
	f.hdr, f.hdrLine = h, lineNo
	f.nr.setFile(h)
	if f.rd != nil && h.newPath != "" && (h.newFile || h.oldPath == "" || h.copyKind != "" || h.oldPath != h.newPath) {
		f.rd.path(lineNo, h.newPath)
	}
}

// other is told of the context and removed lines of hunks (the name rule's
// blocks and its pristine text).
func (f *feed) other(lineNo int, text []byte, removed bool) {
	f.nr.other(text, lineNo, removed)
}
