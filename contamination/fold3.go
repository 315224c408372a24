package contamination

import (
	"bytes"
	"strings"
	"sync"
	"unicode"
	"unicode/utf8"

	"github.com/mtibben/confusables"
	"golang.org/x/text/unicode/runenames"
)

// Text folded before the n-grams (round three), on both sides alike
// (statements and added text go through the same lexer):
//
//   - look-alike letters of other scripts read as their Latin skeleton
//     (Unicode TR39 confusables, github.com/mtibben/confusables): a
//     Cyrillic "а" or a Greek "ο" inside a word is "a", "o"; a Greek
//     letter standing alone keeps its reading as a symbol ("π" is "pi");
//   - every default-ignorable code point dropped (format characters,
//     variation selectors, the Hangul fillers U+115F, U+1160, U+3164,
//     U+FFA0 and the rest of Other_Default_Ignorable_Code_Point);
//   - decimal digits of any script read as ASCII digits ("٧٠" is "70");
//   - HTML tags removed (inline ones such as <b>, <span ...> with no
//     trace, so "Fi<b>nd</b>" is "Find"; <br>, <p>, <div> as a space);
//   - Python's named escapes "\N{LATIN SMALL LETTER A}" read as the
//     character they name.

// inlineTags are removed without a trace; blockTags become a space.
var inlineTags = map[string]bool{
	"a": true, "b": true, "i": true, "u": true, "s": true, "em": true, "strong": true, "span": true,
	"sub": true, "sup": true, "small": true, "big": true, "mark": true, "font": true, "code": true,
	"tt": true, "wbr": true, "del": true, "ins": true, "abbr": true, "kbd": true, "var": true,
	"q": true, "cite": true, "bdi": true, "bdo": true, "dfn": true, "samp": true, "time": true,
}

var blockTags = map[string]bool{
	"br": true, "p": true, "div": true, "li": true, "ul": true, "ol": true, "td": true, "tr": true,
	"th": true, "table": true, "hr": true, "h1": true, "h2": true, "h3": true, "h4": true, "h5": true,
	"h6": true, "pre": true, "blockquote": true, "section": true, "article": true,
}

// tagAt returns the end of an HTML tag at s[i] ('<') and whether it is an
// inline one, or -1: "<" or "</", a known tag name, then ">" or "/>" or
// whitespace and attributes up to ">" (at most 200 bytes, no '$', '<' or
// line break: "a<b$ and c>d" is no tag).
func tagAt(s []byte, i int) (int, bool) {
	j := i + 1
	if j < len(s) && s[j] == '/' {
		j++
	}
	k := j
	for k < len(s) && k-j < 12 && (isASCIILetter(s[k]) || k > j && isDigit(s[k])) {
		k++
	}
	if k == j {
		return -1, false
	}
	name := strings.ToLower(string(s[j:k]))
	inline := inlineTags[name]
	if !inline && !blockTags[name] {
		return -1, false
	}
	if k < len(s) && s[k] == '>' {
		return k + 1, inline
	}
	if k+1 < len(s) && s[k] == '/' && s[k+1] == '>' {
		return k + 2, inline
	}
	if k >= len(s) || s[k] != ' ' && s[k] != '\t' {
		return -1, false
	}
	for m := k; m < len(s) && m-i < 200; m++ {
		switch s[m] {
		case '>':
			return m + 1, inline
		case '$', '<', '\n':
			return -1, false
		}
	}
	return -1, false
}

// unicodeNames maps the upper-case names of the characters of planes 0
// and 1 to them, for \N{...} (built on first use).
var unicodeNames = sync.OnceValue(func() map[string]rune {
	m := make(map[string]rune, 60000)
	for r := rune(0x20); r < 0x20000; r++ {
		if n := runenames.Name(r); n != "" && n[0] != '<' {
			m[n] = r
		}
	}
	return m
})

// prefold rewrites HTML tags and \N{...} escapes of s (ASCII rewrites,
// before foldText); s is returned as is when it has neither.
func (lx *lexer) prefold(s []byte) []byte {
	hasTag := bytes.IndexByte(s, '<') >= 0
	hasN := bytes.Contains(s, []byte(`\N{`))
	if !hasTag && !hasN {
		return s
	}
	out := lx.pre2[:0]
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c == '<' && hasTag {
			if end, inline := tagAt(s, i); end > 0 {
				if !inline {
					out = append(out, ' ')
				}
				i = end - 1
				continue
			}
		}
		if c == '\\' && hasN && i+3 < len(s) && s[i+1] == 'N' && s[i+2] == '{' {
			if j := bytes.IndexByte(s[i+3:min(len(s), i+3+90)], '}'); j > 0 {
				if r, ok := unicodeNames()[strings.ToUpper(string(s[i+3:i+3+j]))]; ok {
					out = utf8.AppendRune(out, r)
					i += 3 + j
					continue
				}
			}
		}
		out = append(out, c)
	}
	lx.pre2 = out
	return out
}

// ignorable tells the default-ignorable code points (and combining marks),
// which are nothing to a reader.
func ignorable(r rune) bool {
	return unicode.In(r, unicode.Cf, unicode.Mn, unicode.Me, unicode.Other_Default_Ignorable_Code_Point, unicode.Variation_Selector) ||
		r == 0x115f || r == 0x1160 || r == 0x3164 || r == 0xffa0
}

// digitValue is the value of a decimal digit of any script (Nd), or -1.
func digitValue(r rune) int {
	if !unicode.Is(unicode.Nd, r) {
		return -1
	}
	// the digits of a script are runs of ten code points from zero
	z := r
	for k := 0; k < 64 && z > 0 && unicode.Is(unicode.Nd, z-1); k++ {
		z--
	}
	return int(r-z) % 10
}

// skeleton is r's Latin skeleton (TR39) when that is one ASCII letter
// (lowercased), else 0.
func (lx *lexer) skeleton(r rune) byte {
	if v, ok := lx.skel[r]; ok {
		return v
	}
	var v byte
	if sk := confusables.Skeleton(string(r)); len(sk) == 1 && isASCIILetter(sk[0]) {
		v = sk[0] | 0x20
	}
	if lx.skel == nil {
		lx.skel = map[rune]byte{}
	}
	if len(lx.skel) < 4096 {
		lx.skel[r] = v
	}
	return v
}

// isLetterAt tells whether the rune of s at i (or before i, with back) is
// a letter.
func letterNeighbour(s []byte, i int, back bool) bool {
	if back {
		if i <= 0 {
			return false
		}
		r, _ := utf8.DecodeLastRune(s[:i])
		return unicode.IsLetter(r) && !ignorable(r)
	}
	if i >= len(s) {
		return false
	}
	r, _ := utf8.DecodeRune(s[i:])
	return unicode.IsLetter(r) && !ignorable(r)
}
