package contamination

import (
	"bytes"
	"compress/flate"
	"encoding/ascii85"
	"encoding/base32"
	"encoding/binary"
	"io"
	"strings"
	"unicode/utf16"
	"unicode/utf8"

	"github.com/ulikunitz/xz/lzma"
)

// Decoders for what ordinary patches and scripts use to carry data as
// text (round three): base16, base32, the base85 alphabets, percent and
// quoted-printable encoding, UTF-16 and UTF-32, raw deflate and LZMA-alone
// streams, and containers found by their magic anywhere in a blob. Each is
// pure and bounded by its caller's budget; bad input yields nothing, never
// a panic.

// ---- base16, base32, base85 -------------------------------------------

// isHexRun tells a run of hex digits in one case (a digest, a hex dump)
// that holds both digits and letters.
func isHexRun(s []byte) bool {
	lower, upper, digits := 0, 0, 0
	for _, c := range s {
		switch {
		case c >= '0' && c <= '9':
			digits++
		case c >= 'a' && c <= 'f':
			lower++
		case c >= 'A' && c <= 'F':
			upper++
		default:
			return false
		}
	}
	return digits > 0 && (lower > 0) != (upper > 0)
}

// decodeHex decodes a hex run (an odd last digit is dropped).
func decodeHex(s []byte) []byte {
	out := make([]byte, len(s)/2)
	for i := range out {
		out[i] = byte(hexVal(s[2*i])<<4 | hexVal(s[2*i+1]))
	}
	return out
}

// isB32Run tells a run in the base32 alphabet (RFC 4648, one case, padding
// at the end only) that holds some of its digits 2-7.
func isB32Run(s []byte) bool {
	t := bytes.TrimRight(s, "=")
	lower, upper, digits := 0, 0, 0
	for _, c := range t {
		switch {
		case c >= '2' && c <= '7':
			digits++
		case c >= 'a' && c <= 'z':
			lower++
		case c >= 'A' && c <= 'Z':
			upper++
		default:
			return false
		}
	}
	return digits > 0 && (lower > 0) != (upper > 0)
}

// decodeB32 decodes base32 (either case, padded or not; a cut tail is
// dropped).
func decodeB32(s []byte) ([]byte, bool) {
	t := bytes.ToUpper(bytes.TrimRight(s, "="))
	t = t[:len(t)/8*8+max(0, validB32Tail(len(t)%8))]
	out := make([]byte, base32.StdEncoding.WithPadding(base32.NoPadding).DecodedLen(len(t)))
	n, err := base32.StdEncoding.WithPadding(base32.NoPadding).Decode(out, t)
	if err != nil || n == 0 {
		return nil, false
	}
	return out[:n], true
}

// validB32Tail is the longest valid unpadded tail length not above r.
func validB32Tail(r int) int {
	for ; r > 0; r-- {
		switch r {
		case 2, 4, 5, 7:
			return r
		}
	}
	return 0
}

// The base85 alphabets: RFC 1924 (Python's base64.b85encode, git's), Z85
// (ZeroMQ) and Ascii85 (Adobe's, Python's base64.a85encode).
const (
	b85Alphabet = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz!#$%&()*+-;<=>?@^_`{|}~"
	z85Alphabet = "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ.-:+=^!/*?&<>()[]{}@%$#"
)

var b85Dec, z85Dec = alphabetTable(b85Alphabet), alphabetTable(z85Alphabet)

func alphabetTable(a string) (t [256]byte) {
	for i := 0; i < len(a); i++ {
		t[a[i]] = byte(i + 1)
	}
	return t
}

// decode85 decodes a run in a base85 alphabet given by its table (a short
// last group is padded with the alphabet's last digit, as the encoders do);
// ok is false when a character is not in the alphabet or a group overflows.
func decode85(s []byte, tab *[256]byte) ([]byte, bool) {
	out := make([]byte, 0, len(s)/5*4+4)
	for i := 0; i < len(s); i += 5 {
		var acc uint64
		n := min(5, len(s)-i)
		if n == 1 {
			break
		}
		for j := 0; j < 5; j++ {
			d := uint64(84)
			if j < n {
				v := tab[s[i+j]]
				if v == 0 {
					return nil, false
				}
				d = uint64(v - 1)
			}
			acc = acc*85 + d
		}
		if acc > 0xffffffff {
			return nil, false
		}
		var b [4]byte
		binary.BigEndian.PutUint32(b[:], uint32(acc))
		out = append(out, b[:n-1]...)
	}
	return out, len(out) > 0
}

// decodeA85 decodes Ascii85, with or without its "<~" "~>" delimiters.
func decodeA85(s []byte) ([]byte, bool) {
	s = bytes.TrimPrefix(bytes.TrimSuffix(s, []byte("~>")), []byte("<~"))
	out := make([]byte, len(s)*4/5+8+4*bytes.Count(s, []byte("z")))
	n, _, err := ascii85.Decode(out, s, true)
	if err != nil || n == 0 {
		return nil, false
	}
	return out[:n], true
}

// ---- percent and quoted-printable -----------------------------------------

// countEscapes counts the escapes "<lead>XX" (two hex digits) in l.
func countEscapes(l []byte, lead byte) int {
	n := 0
	for i := 0; i+2 < len(l); i++ {
		if l[i] == lead && hexVal(l[i+1]) >= 0 && hexVal(l[i+2]) >= 0 {
			n++
			i += 2
		}
	}
	return n
}

// unescapeHex decodes "<lead>XX" escapes (percent-encoding with lead '%',
// quoted-printable with '='); with plus, '+' is a space (form encoding).
func unescapeHex(l []byte, lead byte, plus bool) []byte {
	out := make([]byte, 0, len(l))
	for i := 0; i < len(l); i++ {
		c := l[i]
		if c == lead && i+2 < len(l) && hexVal(l[i+1]) >= 0 && hexVal(l[i+2]) >= 0 {
			out = append(out, byte(hexVal(l[i+1])<<4|hexVal(l[i+2])))
			i += 2
			continue
		}
		if plus && c == '+' {
			c = ' '
		}
		out = append(out, c)
	}
	return out
}

// ---- UTF-16 and UTF-32 ----------------------------------------------------

// wideKind tells UTF-16 or UTF-32 text by its byte order mark, or by the
// zero bytes of mostly-ASCII text at every other (fourth) position: "" when
// b is neither.
func wideKind(b []byte) string {
	switch {
	case bytes.HasPrefix(b, []byte{0xff, 0xfe, 0, 0}):
		return "UTF-32LE"
	case bytes.HasPrefix(b, []byte{0, 0, 0xfe, 0xff}):
		return "UTF-32BE"
	case bytes.HasPrefix(b, []byte{0xff, 0xfe}):
		return "UTF-16LE"
	case bytes.HasPrefix(b, []byte{0xfe, 0xff}):
		return "UTF-16BE"
	}
	n := min(len(b), 4096) &^ 3
	if n < 16 {
		return ""
	}
	var zero [4]int
	for i := 0; i < n; i++ {
		if b[i] == 0 {
			zero[i&3]++
		}
	}
	q := n / 4
	switch {
	case zero[1] > q*7/10 && zero[2] > q*7/10 && zero[3] > q*7/10 && zero[0] < q/10:
		return "UTF-32LE"
	case zero[0] > q*7/10 && zero[1] > q*7/10 && zero[2] > q*7/10 && zero[3] < q/10:
		return "UTF-32BE"
	case zero[1]+zero[3] > 2*q*7/10 && zero[0]+zero[2] < 2*q/10:
		return "UTF-16LE"
	case zero[0]+zero[2] > 2*q*7/10 && zero[1]+zero[3] < 2*q/10:
		return "UTF-16BE"
	}
	return ""
}

// fromWide transcodes UTF-16 or UTF-32 text to UTF-8.
func fromWide(b []byte, kind string) []byte {
	var bo binary.ByteOrder = binary.LittleEndian
	if strings.HasSuffix(kind, "BE") {
		bo = binary.BigEndian
	}
	out := make([]byte, 0, len(b)/2)
	if strings.HasPrefix(kind, "UTF-32") {
		for i := 0; i+4 <= len(b); i += 4 {
			r := rune(bo.Uint32(b[i:]))
			if r == 0xfeff {
				continue
			}
			if !utf8.ValidRune(r) {
				r = utf8.RuneError
			}
			out = utf8.AppendRune(out, r)
		}
		return out
	}
	u := make([]uint16, 0, len(b)/2)
	for i := 0; i+2 <= len(b); i += 2 {
		if v := bo.Uint16(b[i:]); v != 0xfeff {
			u = append(u, v)
		}
	}
	for _, r := range utf16.Decode(u) {
		out = utf8.AppendRune(out, r)
	}
	return out
}

// ---- raw streams ------------------------------------------------------

// inflateRaw inflates a raw deflate stream (no zlib or gzip header), at
// most budget bytes; ok when it produced something.
func inflateRaw(b []byte, budget int64) ([]byte, bool) {
	r := flate.NewReader(bytes.NewReader(b))
	defer r.Close()
	out, err := readCapped(r, budget)
	if len(out) == 0 || (err != nil && err != io.ErrUnexpectedEOF && len(out) < 64) {
		return nil, false
	}
	return out, true
}

// isLZMAAlone tells an LZMA-alone (.lzma) header: properties below 225, a
// dictionary of 4 KiB to 1.5 GiB, a size unknown or below 1 GiB.
func isLZMAAlone(b []byte) bool {
	if len(b) < 14 || b[0] >= 225 {
		return false
	}
	dict := binary.LittleEndian.Uint32(b[1:])
	size := binary.LittleEndian.Uint64(b[5:])
	return dict >= 1<<12 && dict <= 3<<29 && (size == ^uint64(0) || size < 1<<30)
}

// unLZMA decodes an LZMA-alone stream, at most budget bytes.
func unLZMA(b []byte, budget int64) ([]byte, bool) {
	r, err := lzma.NewReader(bytes.NewReader(b))
	if err != nil {
		return nil, false
	}
	out, _ := readCapped(r, budget)
	return out, len(out) > 0
}

// magicAt finds the first container magic in b after offset 0 (a container
// behind a few bytes of header): its offset and format, or -1.
func magicAt(b []byte) (int, string) {
	best, kind := -1, ""
	for _, m := range magics {
		if m.name == "tar" {
			continue
		}
		from := 1
		for from < len(b) {
			i := bytes.Index(b[from:], []byte(m.prefix))
			if i < 0 {
				break
			}
			at := from + i
			if best >= 0 && at >= best {
				break
			}
			if strictMagic(b[at:], m.name) {
				best, kind = at, m.name
				break
			}
			from = at + 1
		}
	}
	if i := bytes.Index(b, []byte("ustar")); i > 257 && (best < 0 || i-257 < best) && sniff(b[i-257:]) == "tar" {
		best, kind = i-257, "tar"
	}
	return best, kind
}

// strictMagic is sniff's test with more of the header checked, for a
// magic found inside other bytes (two bytes match by chance every 64 KiB).
func strictMagic(b []byte, kind string) bool {
	if sniff(b) != kind {
		return false
	}
	switch kind {
	case "gzip":
		return len(b) > 3 && b[2] == 8 && b[3]&0xe0 == 0
	case "bzip2":
		return len(b) >= 10 && b[3] >= '1' && b[3] <= '9' && string(b[4:10]) == "1AY&SY"
	}
	return true
}
