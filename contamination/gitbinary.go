package contamination

// Decoding of the "GIT binary patch" sections that `git diff --binary` writes
// and `git apply` accepts, so that a checker can read the bytes git apply
// would write. The formats follow git's base85.c (decode_85), apply.c
// (parse_binary_hunk, inflate_it, apply_binary_fragment) and patch-delta.c
// (patch_delta).
//
// A section is
//
//	GIT binary patch
//	literal N | delta N      (the forward hunk)
//	<data lines>
//	<empty line>
//	literal N | delta N      (optional reverse hunk, same form)
//	<data lines>
//	<empty line>
//
// where N is the size of the hunk's data after zlib inflation (for "literal"
// the new content itself, for "delta" the delta instructions) and each data
// line is a length byte ('A'..'Z' = 1..26, 'a'..'z' = 27..52 decoded bytes)
// followed by ceil(len/4)*5 characters of git's base85 alphabet.
//
// Everything here is pure and bounded by the caller's maxSize; malformed
// input yields an error, never a panic.

import (
	"bytes"
	"compress/zlib"
	"crypto/sha1"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"strconv"
)

// binaryHunk is one decoded hunk of a GIT binary patch section.
type binaryHunk struct {
	Delta bool   // "delta N" (else "literal N")
	Size  int64  // N from the header: the inflated size
	Data  []byte // the inflated bytes (for a delta: the delta instructions)
}

// git85Alphabet is the alphabet of git's base85 (base85.c en85).
const git85Alphabet = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz!#$%&()*+-;<=>?@^_`{|}~"

// git85Decode maps a byte to its base85 digit plus one; 0 means not in the
// alphabet.
var git85Decode = func() (t [256]byte) {
	for i := 0; i < len(git85Alphabet); i++ {
		t[git85Alphabet[i]] = byte(i + 1)
	}
	return t
}()

// gitDeltaSizeMin is patch-delta.c's DELTA_SIZE_MIN: git rejects any delta
// shorter than this.
const gitDeltaSizeMin = 4

// trimNL drops one trailing '\n'; lines may be given with or without it.
// A '\r' is not dropped: git apply does not accept CRLF binary hunks either.
func trimNL(l []byte) []byte {
	if n := len(l); n > 0 && l[n-1] == '\n' {
		return l[:n-1]
	}
	return l
}

// parseBinaryHunkHeader parses "literal N" or "delta N" (N decimal, no sign,
// no leading '+'; reject anything else, as git's parse_binary_hunk does).
//
// The line is given without its newline (one trailing '\n' is tolerated).
// Exactly one space separates the word from N, and N is one or more ASCII
// digits that fit in an int64. Leading zeros are accepted. Note that git
// itself reads N with strtoul and so is laxer ("literal 12x" is 12 to git);
// those forms are rejected here, as no git writes them.
func parseBinaryHunkHeader(line []byte) (delta bool, size int64, ok bool) {
	line = trimNL(line)
	var num []byte
	switch {
	case bytes.HasPrefix(line, []byte("literal ")):
		num = line[len("literal "):]
	case bytes.HasPrefix(line, []byte("delta ")):
		delta, num = true, line[len("delta "):]
	default:
		return false, 0, false
	}
	if len(num) == 0 || len(num) > 19 {
		return false, 0, false
	}
	for _, c := range num {
		if c < '0' || c > '9' {
			return false, 0, false
		}
	}
	n, err := strconv.ParseInt(string(num), 10, 64)
	if err != nil {
		return false, 0, false
	}
	return delta, n, true
}

// hunkLineLen returns the number of decoded bytes a data line's length byte
// declares, or 0 if the byte is not a length byte.
func hunkLineLen(c byte) int {
	switch {
	case 'A' <= c && c <= 'Z':
		return int(c-'A') + 1
	case 'a' <= c && c <= 'z':
		return int(c-'a') + 27
	}
	return 0
}

// decodeGit85Line appends to dst the bytes of one base85 data line (length
// byte and digits, no newline). lineNo (1-based) is used in errors.
func decodeGit85Line(dst, line []byte, lineNo int) ([]byte, error) {
	if len(line) == 0 {
		return dst, fmt.Errorf("binary hunk data line %d: empty (an empty line ends a hunk)", lineNo)
	}
	n := hunkLineLen(line[0])
	if n == 0 {
		return dst, fmt.Errorf("binary hunk data line %d: bad length byte %q (want 'A'-'Z' or 'a'-'z')", lineNo, line[0])
	}
	digits := line[1:]
	groups := (n + 3) / 4
	if len(digits) != groups*5 {
		return dst, fmt.Errorf("binary hunk data line %d: length byte %q declares %d bytes, which take %d base85 characters, but the line has %d",
			lineNo, line[0], n, groups*5, len(digits))
	}
	for g := 0; g < groups; g++ {
		var acc uint64
		for j := 0; j < 5; j++ {
			c := digits[g*5+j]
			d := git85Decode[c]
			if d == 0 {
				return dst, fmt.Errorf("binary hunk data line %d: bad base85 character %q at column %d", lineNo, c, 1+g*5+j+1)
			}
			acc = acc*85 + uint64(d-1)
		}
		if acc > 0xffffffff {
			return dst, fmt.Errorf("binary hunk data line %d: base85 group %q (columns %d-%d) overflows 32 bits",
				lineNo, digits[g*5:g*5+5], 1+g*5+1, 1+g*5+5)
		}
		k := n - g*4
		if k > 4 {
			k = 4
		}
		for j := 0; j < k; j++ {
			dst = append(dst, byte(acc>>(24-8*j)))
		}
	}
	return dst, nil
}

// decodeBinaryHunk decodes the base85 lines of one hunk (each line: a length
// byte 'A'..'Z' = 1..26, 'a'..'z' = 27..52 decoded bytes, then exactly
// ceil(len/4)*5 chars of git's base85 alphabet), then zlib-inflates the
// result; the inflated data must be exactly size bytes. maxSize bounds size
// (size > maxSize is rejected before inflating; inflation goes through a
// limit so a zip bomb can't allocate more than size+1). Errors name what is
// wrong (which line of the hunk, bad length char, bad base85 char, overflow
// of a base85 group, zlib error, size mismatch).
//
// lines are the data lines after the header, without the empty line that
// ends the hunk; each is given without its newline (one trailing '\n' is
// tolerated). Data lines are numbered from 1 in errors. As in git (inflate_it),
// the zlib stream must end and its checksum must match; bytes after the end
// of the stream are ignored.
func decodeBinaryHunk(delta bool, size int64, lines [][]byte, maxSize int64) (binaryHunk, error) {
	if size < 0 {
		return binaryHunk{}, fmt.Errorf("binary hunk: negative size %d", size)
	}
	if size > maxSize {
		return binaryHunk{}, fmt.Errorf("binary hunk: size %d exceeds the limit of %d bytes", size, maxSize)
	}
	total := 0
	for _, l := range lines {
		total += len(l)
	}
	deflated := make([]byte, 0, total/5*4+4)
	for i, l := range lines {
		var err error
		deflated, err = decodeGit85Line(deflated, trimNL(l), i+1)
		if err != nil {
			return binaryHunk{}, err
		}
	}
	zr, err := zlib.NewReader(bytes.NewReader(deflated))
	if err != nil {
		if errors.Is(err, io.EOF) { // no data at all
			err = io.ErrUnexpectedEOF
		}
		return binaryHunk{}, fmt.Errorf("binary hunk: inflating: %w", err)
	}
	defer zr.Close()
	data, err := inflateLimited(zr, size, len(deflated))
	if err != nil {
		return binaryHunk{}, fmt.Errorf("binary hunk: inflating: %w (after %d bytes)", err, len(data))
	}
	if int64(len(data)) > size {
		return binaryHunk{}, fmt.Errorf("binary hunk: data inflates to more than the %d bytes the header declares", size)
	}
	if int64(len(data)) != size {
		return binaryHunk{}, fmt.Errorf("binary hunk: data inflates to %d bytes, the header declares %d", len(data), size)
	}
	return binaryHunk{Delta: delta, Size: size, Data: data}, nil
}

// inflateLimited reads r to its end, but no more than size+1 bytes, so that
// data longer than size shows without inflating (or allocating) it all. The
// buffer starts at the least of size+1 and what deflate could make of
// deflatedLen bytes (at most about 1032 to 1), so a header that declares
// much more than the data holds allocates little. The buffer never grows
// past size+1 bytes.
func inflateLimited(r io.Reader, size int64, deflatedLen int) ([]byte, error) {
	limit := size + 1
	if limit < 0 {
		limit = size
	}
	capHint := limit
	if m := int64(deflatedLen)*1032 + 1024; m < capHint {
		capHint = m
	}
	data := make([]byte, 0, capHint)
	for int64(len(data)) < limit {
		if len(data) == cap(data) { // grow, but never past limit
			nd := make([]byte, len(data), min(limit, 2*int64(cap(data))+1024))
			copy(nd, data)
			data = nd
		}
		room := cap(data) - len(data)
		if left := limit - int64(len(data)); left < int64(room) {
			room = int(left)
		}
		n, err := r.Read(data[len(data) : len(data)+room])
		data = data[:len(data)+n]
		if err == io.EOF {
			break
		}
		if err != nil {
			return data, err
		}
	}
	return data, nil
}

// deltaVarint reads one of a delta header's sizes (little-endian base-128).
// Unlike git's get_delta_hdr_size it rejects a varint cut off by the end of
// the delta and one wider than 63 bits.
func deltaVarint(d []byte, pos int, what string) (int64, int, error) {
	var v uint64
	for i := 0; ; i++ {
		if i == 10 {
			return 0, pos, fmt.Errorf("delta: %s longer than 10 bytes", what)
		}
		if pos >= len(d) {
			return 0, pos, fmt.Errorf("delta: truncated %s", what)
		}
		c := d[pos]
		pos++
		p, shift := uint64(c&0x7f), uint(7*i)
		if shift >= 63 && p != 0 || shift < 63 && p>>(63-shift) != 0 {
			return 0, pos, fmt.Errorf("delta: %s does not fit in 63 bits", what)
		}
		if shift < 63 {
			v |= p << shift
		}
		if c&0x80 == 0 {
			return int64(v), pos, nil
		}
	}
}

// walkDelta validates a git delta and reports its ops. srcSize < 0 means the
// source is unknown: the delta's declared source size is then used for the
// copy range checks; otherwise the declared size must equal srcSize.
// copyFn and insertFn may be nil. It returns the declared source and result
// sizes.
func walkDelta(delta []byte, srcSize, maxSize int64, copyFn func(off, n int64), insertFn func(b []byte)) (src, dst int64, err error) {
	if len(delta) < gitDeltaSizeMin {
		return 0, 0, fmt.Errorf("delta: %d bytes, shorter than git's minimum of %d", len(delta), gitDeltaSizeMin)
	}
	src, pos, err := deltaVarint(delta, 0, "source size")
	if err != nil {
		return 0, 0, err
	}
	if srcSize >= 0 && src != srcSize {
		return 0, 0, fmt.Errorf("delta: source size %d, but the base has %d bytes", src, srcSize)
	}
	dst, pos, err = deltaVarint(delta, pos, "result size")
	if err != nil {
		return 0, 0, err
	}
	if dst > maxSize {
		return 0, 0, fmt.Errorf("delta: result size %d exceeds the limit of %d bytes", dst, maxSize)
	}
	left := dst
	for pos < len(delta) {
		opAt := pos
		cmd := delta[pos]
		pos++
		switch {
		case cmd&0x80 != 0:
			var off, n int64
			for bit := 0; bit < 7; bit++ {
				if cmd&(1<<bit) == 0 {
					continue
				}
				if pos >= len(delta) {
					return 0, 0, fmt.Errorf("delta: copy op at byte %d truncated", opAt)
				}
				b := int64(delta[pos])
				pos++
				if bit < 4 {
					off |= b << (8 * bit)
				} else {
					n |= b << (8 * (bit - 4))
				}
			}
			if n == 0 {
				n = 0x10000
			}
			if off+n > src {
				return 0, 0, fmt.Errorf("delta: copy op at byte %d copies source bytes [%d, %d) of a %d-byte source", opAt, off, off+n, src)
			}
			if n > left {
				return 0, 0, fmt.Errorf("delta: copy op at byte %d writes %d bytes past the declared result size %d", opAt, n-left, dst)
			}
			if copyFn != nil {
				copyFn(off, n)
			}
			left -= n
		case cmd != 0:
			n := int64(cmd)
			if n > int64(len(delta)-pos) {
				return 0, 0, fmt.Errorf("delta: insert op at byte %d of %d bytes truncated (%d left)", opAt, n, len(delta)-pos)
			}
			if n > left {
				return 0, 0, fmt.Errorf("delta: insert op at byte %d writes %d bytes past the declared result size %d", opAt, n-left, dst)
			}
			if insertFn != nil {
				insertFn(delta[pos : pos+int(n)])
			}
			pos += int(n)
			left -= n
		default:
			return 0, 0, fmt.Errorf("delta: unexpected op byte 0 at byte %d", opAt)
		}
	}
	if left != 0 {
		return 0, 0, fmt.Errorf("delta: ops write %d bytes, the header declares %d", dst-left, dst)
	}
	return src, dst, nil
}

// applyGitDelta applies a git delta (as in git's patch-delta.c: varint source
// size, varint result size, then ops: byte with MSB set = copy with offset
// bytes (bits 0-3) and size bytes (bits 4-6), size 0 meaning 0x10000; byte
// 1..127 = insert that many literal bytes; byte 0 = error) to base. It rejects
// a source size that differs from len(base), a result size > maxSize,
// out-of-range copies, truncated input, and a result whose length differs
// from the header. Like git it also rejects a delta shorter than 4 bytes.
func applyGitDelta(base, delta []byte, maxSize int64) ([]byte, error) {
	// Validate first so that nothing is allocated for a bad delta.
	_, dst, err := walkDelta(delta, int64(len(base)), maxSize, nil, nil)
	if err != nil {
		return nil, err
	}
	out := make([]byte, 0, dst)
	_, _, err = walkDelta(delta, int64(len(base)), maxSize,
		func(off, n int64) { out = append(out, base[off:off+n]...) },
		func(b []byte) { out = append(out, b...) })
	if err != nil { // cannot happen: the same walk succeeded above
		return nil, err
	}
	return out, nil
}

// deltaInserts returns the literal bytes a delta inserts (in order) and the
// number of copy ops; it validates the delta's structure as applyGitDelta
// does except the source-range check needs srcSize. srcSize is the base's
// length, which the delta's declared source size must equal; a negative
// srcSize means the base is unknown, and copies are then checked against the
// delta's own declared source size. The inserts total at most the declared
// result size, so at most maxSize.
func deltaInserts(delta []byte, srcSize int64, maxSize int64) (inserts []byte, copies int, err error) {
	_, _, err = walkDelta(delta, srcSize, maxSize, func(int64, int64) { copies++ }, func(b []byte) { inserts = append(inserts, b...) })
	if err != nil {
		return nil, 0, err
	}
	return inserts, copies, nil
}

// gitBlobID is the hex SHA-1 git gives a blob of these bytes
// ("blob <len>\x00" + bytes).
func gitBlobID(b []byte) string {
	h := sha1.New()
	h.Write([]byte("blob " + strconv.Itoa(len(b)) + "\x00"))
	h.Write(b)
	return hex.EncodeToString(h.Sum(nil))
}
