package contamination

import (
	"fmt"
	"math"
	"sort"
	"strings"
	"unicode/utf8"
)

// Readable or refused (round three). A patch edits a training stack: it
// has no need to carry data the checker cannot read, and a decoder list
// is a list an optimising policy can always step around. So every added
// byte is either read (text, or a container or encoding the checker
// decodes, and then read) or counted as opaque:
//
//   - decoded bytes that are not text (binary files and the forward hunks
//     of GIT binary patch sections, archive members, what a base-N run
//     decodes to), counted per 4 KiB block whose bytes are not mostly
//     printable UTF-8; for a delta, the bytes it inserts (what it copies
//     from the pristine file is not new);
//   - runs of added text in a base16, base32, base64 or base85 alphabet
//     that look like encoded data (the mix of cases, digits and symbols of
//     random bytes, not of identifiers or words) and decode to nothing
//     readable, counted at their decoded size; a run may be assembled from
//     short literals ("ab" "cd", ["ab", "cd"], "ab" + "cd"), JSON string
//     escapes ("ab\ncd"), YAML list items and wrapped lines;
//   - long integer arrays (32 numbers or more) whose values, read as bytes,
//     code points or 16/32-bit words, are not readable and look like data
//     (many distinct values, not a counting sequence), at their width.
//
// Above Options.MaxOpaque bytes in all (DefaultMaxOpaque) the patch is
// refused: a KindOpaque finding naming the largest opaque places, each with
// its decoding chain. Text copied or renamed from the pristine tree is not
// counted: it is not new.

// DefaultMaxOpaque is the opaque bytes a patch may carry. Measured on the
// false-positive corpus (doc.go, "Readable or refused"): the most any
// ordinary patch carried was far below; the problems alone, compressed
// with xz, are about 5 KiB (AIME25: 30 statements); their answers fit in
// 60 bytes, which no bound can refuse, and which the answers rule reads in
// every numeric form it knows.
const DefaultMaxOpaque = 1024

// opaqueBlock is the block size of the readability test.
const opaqueBlock = 4096

// opaquePlace is one place that added opaque bytes.
type opaquePlace struct {
	line  int
	bytes int64
	what  string
}

type opaqueState struct {
	total  int64
	places []opaquePlace // the largest, at most maxLines
}

// addOpaque counts n opaque bytes at patch line lineNo; what names them
// with their decoding chain.
func (f *feed) addOpaque(lineNo int, n int64, what string) {
	if f.noCount > 0 {
		return // a second reading of text already counted, or pristine text
	}
	if n <= 0 {
		return
	}
	o := &f.opq
	o.total += n
	for i := range o.places {
		if o.places[i].line == lineNo && o.places[i].what == what {
			o.places[i].bytes += n
			return
		}
	}
	o.places = append(o.places, opaquePlace{line: lineNo, bytes: n, what: what})
	if len(o.places) > 4*maxLines {
		o.trim()
	}
}

func (o *opaqueState) trim() {
	sort.SliceStable(o.places, func(i, j int) bool { return o.places[i].bytes > o.places[j].bytes })
	if len(o.places) > maxLines {
		o.places = o.places[:maxLines]
	}
}

// opaqueFinding is the refusal of a patch carrying more than max opaque
// bytes.
func (f *feed) opaqueFinding(max int64) *Finding {
	o := &f.opq
	f.rep.OpaqueBytes = o.total
	if o.total <= max {
		return nil
	}
	o.trim()
	var lines []int
	var parts []string
	for i, p := range o.places {
		lines = addLine(lines, p.line)
		if i < 3 {
			parts = append(parts, fmt.Sprintf("%d bytes of %s", p.bytes, p.what))
		}
	}
	more := ""
	if len(o.places) > 3 {
		more = fmt.Sprintf(" and %d more places", len(o.places)-3)
	}
	return &Finding{Kind: KindOpaque, Lines: lines, Overlap: 1,
		Detail: fmt.Sprintf("the patch carries %d bytes of data the check cannot read (the bound is %d), so it is refused: %s%s",
			o.total, max, strings.Join(parts, "; "), more)}
}

// unreadable counts the bytes of b in 4 KiB blocks that are not mostly
// text (printable UTF-8, tabs and line breaks: at least 90 %).
func unreadable(b []byte) int64 {
	var n int64
	for len(b) > 0 {
		k := min(opaqueBlock, len(b))
		if !isText(b[:k]) {
			n += int64(k)
		}
		b = b[k:]
	}
	return n
}

// isText tells whether at least 90 % of b's bytes are printable text.
func isText(b []byte) bool {
	if len(b) == 0 {
		return true
	}
	good := 0
	for i := 0; i < len(b); {
		c := b[i]
		if c < 0x80 {
			if c >= 0x20 && c < 0x7f || c == '\n' || c == '\r' || c == '\t' || c == '\f' {
				good++
			}
			i++
			continue
		}
		r, size := utf8.DecodeRune(b[i:])
		if r != utf8.RuneError && r >= 0xa0 {
			good += size
		}
		i += size
	}
	return good*10 >= len(b)*9
}

// runClass names the alphabet of an encoded-looking run: "hex",
// "base32", "base64", "base85", or "" for a run that looks like words,
// identifiers or numbers.
func runClass(s []byte) string {
	if len(s) < minRun {
		return ""
	}
	var upper, lower, digit, sym, trans int
	prev := -1
	for _, c := range s {
		k := 3
		switch {
		case c >= 'A' && c <= 'Z':
			upper++
			k = 0
		case c >= 'a' && c <= 'z':
			lower++
			k = 1
		case c >= '0' && c <= '9':
			digit++
			k = 2
		default:
			sym++
		}
		if prev >= 0 && k != prev {
			trans++
		}
		prev = k
	}
	n := len(s)
	t := float64(trans) / float64(n-1)
	switch {
	case isHexRun(s):
		if t >= 0.25 && digit*10 >= n*2 && spread(s, 16) {
			return "hex"
		}
	case isB32Run(s):
		if t >= 0.15 && digit*100 >= n*8 && spread(s, 32) {
			return "base32"
		}
	case sym*100 > n*12 && upper*10 >= n && lower*10 >= n && digit*100 >= n*4:
		if t >= 0.45 && spread(s, 85) {
			return "base85"
		}
	default:
		if upper*10 >= n && lower*10 >= n && digit*100 >= n*3 && t >= 0.35 && spread(s, 64) {
			return "base64"
		}
	}
	return ""
}

// spread tells whether s uses as many distinct characters as random bytes
// encoded in an alphabet of k characters would (at least 75 % of the
// expected count): text, code and LaTeX repeat a few characters far more.
func spread(s []byte, k int) bool {
	var seen [256]bool
	d := 0
	for _, c := range s {
		if !seen[c] {
			seen[c] = true
			d++
		}
	}
	expect := float64(k) * (1 - math.Pow(1-1/float64(k), float64(len(s))))
	return float64(d) >= 0.75*expect
}

// arrayOpaque decides whether an integer array that reads as nothing looks
// like data: many distinct values, and not a counting sequence.
func arrayLooksData(vals []int64) bool {
	seen := map[int64]bool{}
	up := 0
	for i, v := range vals {
		if len(seen) < 64 {
			seen[v] = true
		}
		if i > 0 && v > vals[i-1] {
			up++
		}
	}
	return len(seen) >= 24 && up*10 < len(vals)*9
}
