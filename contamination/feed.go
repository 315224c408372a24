package contamination

import (
	"errors"
	"fmt"
	"strconv"
)

// feed turns the patch's added text, and everything decoded from it, into
// the lexer's token stream: text lines as they are; binary sections
// decoded; containers unpacked; base64 blobs decoded (a blob may run over
// several lines, as wrapped strings do). Every decoded byte counts against
// max; what cannot be decoded within it is refused.
type feed struct {
	c   *checker
	lx  *lexer
	rep *Report
	o   Options
	max int64
	b64 [maxUnpackDepth + 1]b64Acc
}

// b64Acc collects a base64 blob that runs over lines.
type b64Acc struct {
	buf  []byte
	line int
}

// line lexes one line of text at patch line lineNo (depth: how many
// decodings produced it), then decodes its base64 blobs.
func (f *feed) line(lineNo int, text []byte, depth int) {
	c := f.c
	c.line = lineNo
	c.text = text
	c.ordinal = 0
	c.pruneCands()
	f.lx.text(text)
	if depth >= maxUnpackDepth {
		return
	}
	acc := &f.b64[depth]
	continued := false
	b64Runs(text, 16, func(run []byte, atEnd, atStart bool) {
		switch {
		case len(acc.buf) > 0 && atStart && !continued:
			// the blob goes on from the line before
			acc.buf = append(acc.buf, run...)
			continued = true
			if !atEnd {
				f.flushB64(depth)
			}
		default:
			if len(acc.buf) > 0 {
				f.flushB64(depth)
			}
			if atEnd {
				acc.buf = append(acc.buf[:0], run...)
				acc.line = lineNo
				continued = true
			} else if len(run) >= minBase64 {
				f.blob(lineNo, run, depth)
			}
		}
	})
	if !continued && len(acc.buf) > 0 {
		f.flushB64(depth)
	}
}

// flushB64 decodes the pending blob of depth.
func (f *feed) flushB64(depth int) {
	acc := &f.b64[depth]
	if len(acc.buf) >= minBase64 {
		f.blob(acc.line, acc.buf, depth)
	}
	acc.buf = acc.buf[:0]
}

// blob decodes one base64 blob found at patch line lineNo; what is not
// base64 is left alone (it was read as text already).
func (f *feed) blob(lineNo int, s []byte, depth int) {
	data, ok := decodeB64(s)
	if !ok || len(data) == 0 {
		return
	}
	if !f.spend(lineNo, int64(len(data)), "base64 text") {
		return
	}
	f.content(lineNo, data, fmt.Sprintf("base64 text at line %d", lineNo), depth+1)
}

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
	out, used, err := decodeSection(sec, f.o, f.max-f.rep.DecodedBytes)
	f.rep.DecodedBytes += used
	if err != nil {
		f.refuse(sec.line, fmt.Sprintf("the GIT binary patch of %s at line %d of the patch cannot be checked, so it is refused: %v",
			strconv.QuoteToASCII(sec.name()), sec.line, err))
		return
	}
	f.content(sec.hunks[0].line, out, "the GIT binary patch of "+strconv.QuoteToASCII(sec.name()), 1)
}

// content reads decoded bytes: a container is unpacked and its parts read
// in turn; anything else is read as lines of text.
func (f *feed) content(at int, data []byte, origin string, depth int) {
	c := f.c
	if len(c.binLines) < 1<<16 {
		if c.binLines == nil {
			c.binLines = map[int]string{}
		}
		c.binLines[at] = origin // the innermost decoding names it
	}
	if kind := sniff(data); kind != "" && depth <= maxUnpackDepth {
		parts, err := unpack(kind, data, f.max-f.rep.DecodedBytes)
		got := 0
		for _, p := range parts {
			got += len(p.data)
		}
		switch {
		case errors.Is(err, errBudget) || errors.Is(err, errUnreadable):
			f.refuse(at, fmt.Sprintf("%s at line %d of the patch is %s data the check cannot read (%v), so the patch is refused", origin, at, kind, err))
			return
		case err != nil && got == 0:
			// nothing came out: read the bytes as they are (two bytes are
			// a weak magic for zlib; so is a damaged header)
		default:
			for _, p := range parts {
				f.rep.DecodedBytes += int64(len(p.data))
				what := origin + " (" + kind + ")"
				if p.name != "" {
					what = origin + " (" + kind + " member " + strconv.QuoteToASCII(p.name) + ")"
				}
				f.content(at, p.data, what, depth+1)
			}
			return
		}
	}
	forEachLine(data, func(l []byte) {
		f.rep.DecodedLines++
		f.line(at, l, depth)
	})
	if depth <= maxUnpackDepth {
		f.flushB64(min(depth, maxUnpackDepth))
	}
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
	f.content(h.copyLine, b, fmt.Sprintf("the %s of %s to %s", h.copyKind, strconv.QuoteToASCII(src), strconv.QuoteToASCII(h.newPath)), 1)
}
