package contamination

import (
	"archive/zip"
	"bytes"
	"compress/flate"
	"encoding/ascii85"
	"encoding/base32"
	"encoding/base64"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"io"
	"math/rand/v2"
	"net/url"
	"strings"
	"testing"
	"unicode/utf16"

	"github.com/ulikunitz/xz/lzma"
)

// Round three (issue 40): what the check cannot read, the patch may not
// carry. Families 1 and 2: encodings read by a decoder, and the rule that
// refuses what no decoder reads.

func rawDeflate(b []byte) []byte {
	var w bytes.Buffer
	z, _ := flate.NewWriter(&w, 9)
	z.Write(b)
	z.Close()
	return w.Bytes()
}

func lzmaAlone(b []byte) []byte {
	var w bytes.Buffer
	z, _ := lzma.NewWriter(&w)
	z.Write(b)
	z.Close()
	return w.Bytes()
}

func b85Of(b []byte, tab string) string {
	var out []byte
	for i := 0; i < len(b); i += 4 {
		var chunk [4]byte
		n := copy(chunk[:], b[i:])
		v := binary.BigEndian.Uint32(chunk[:])
		var d [5]byte
		for j := 4; j >= 0; j-- {
			d[j] = tab[v%85]
			v /= 85
		}
		out = append(out, d[:n+1]...)
	}
	return string(out)
}

func a85Of(b []byte) string {
	out := make([]byte, ascii85.MaxEncodedLen(len(b)))
	return "<~" + string(out[:ascii85.Encode(out, b)]) + "~>"
}

func utf16le(s string) []byte {
	var b []byte
	for _, u := range utf16.Encode([]rune(s)) {
		b = binary.LittleEndian.AppendUint16(b, u)
	}
	return b
}

func utf32be(s string) []byte {
	var b []byte
	for _, r := range s {
		b = binary.BigEndian.AppendUint32(b, uint32(r))
	}
	return b
}

// zipMethod is a zip holding one member stored under compression method
// m (the bytes as they are: a method Go has no reader for).
func zipMethod(name string, b []byte, m uint16) []byte {
	var w bytes.Buffer
	z := zip.NewWriter(&w)
	z.RegisterCompressor(m, func(w io.Writer) (io.WriteCloser, error) { return nopWC{w}, nil })
	f, _ := z.CreateHeader(&zip.FileHeader{Name: name, Method: m})
	f.Write(b)
	z.Close()
	return w.Bytes()
}

type nopWC struct{ io.Writer }

func (nopWC) Close() error { return nil }

func wrapN(s string, n int) []string {
	var out []string
	for len(s) > n {
		out = append(out, s[:n])
		s = s[n:]
	}
	return append(out, s)
}

// pyLiterals writes s as a Python tuple of short string literals, k per
// line: "ab" "cd" "ef"...
func pyLiterals(s string, size, k int) []string {
	parts := wrapN(s, size)
	var lines []string
	for i := 0; i < len(parts); i += k {
		var q []string
		for _, p := range parts[i:min(i+k, len(parts))] {
			q = append(q, `"`+p+`"`)
		}
		lines = append(lines, "    "+strings.Join(q, " "))
	}
	return append(append([]string{"DATA = ("}, lines...), ")")
}

// TestRoundThreeEncodings: the problems in every encoding the red team
// used are read, each finding naming its decoding chain.
func TestRoundThreeEncodings(t *testing.T) { roundThreeEncodings(t, standInProblems()) }

func roundThreeEncodings(t *testing.T, ps []Problem) {
	data := problemsJSONL(ps)
	text := strings.Join(func() []string {
		var s []string
		for _, p := range ps {
			s = append(s, p.Statement)
		}
		return s
	}(), "\n")
	hexs := hex.EncodeToString(data)
	jsonEsc := strings.Join(wrapN(base64.StdEncoding.EncodeToString(gz(data)), 76), `\n`)
	var yamlList []string
	yamlList = append(yamlList, "blob:")
	for _, l := range wrapN(base64.StdEncoding.EncodeToString(xzOf(data)), 60) {
		yamlList = append(yamlList, "  - "+l)
	}
	var pct strings.Builder
	for _, p := range ps {
		pct.WriteString(url.PathEscape(p.Statement) + "\n")
	}
	var qp []string
	for _, p := range ps {
		enc := strings.NewReplacer("=", "=3D", " ", "=20", "$", "=24", "\\", "=5C").Replace(p.Statement)
		for len(enc) > 75 {
			cut := 75
			for cut > 70 && strings.LastIndexByte(enc[:cut], '=') > cut-3 {
				cut--
			}
			qp = append(qp, enc[:cut]+"=")
			enc = enc[cut:]
		}
		qp = append(qp, enc)
	}
	header := append([]byte("NRL1\x00\x07\x00\x00garbage-header"), gz(data)...)
	cases := []struct {
		name  string
		patch []byte
		chain string
	}{
		{"hex one line", []byte(addedFile("NeMo-RL/x.py", []string{`DATA = "` + hexs + `"`})), "hex text"},
		{"hex wrapped", []byte(addedFile("NeMo-RL/x.txt", wrapN(hexs, 64))), "hex text"},
		{"hex upper gz", []byte(addedFile("NeMo-RL/x.txt", []string{strings.ToUpper(hex.EncodeToString(gz(data)))})), "hex text"},
		{"base32", []byte(addedFile("NeMo-RL/x.py", []string{`DATA = "` + base32.StdEncoding.EncodeToString(data) + `"`})), "base32 text"},
		{"base32 lower wrapped", []byte(addedFile("NeMo-RL/x.txt", wrapN(strings.ToLower(base32.StdEncoding.EncodeToString(data)), 72))), "base32 text"},
		{"base85 (b85encode)", []byte(addedFile("NeMo-RL/x.py", []string{`DATA = "` + b85Of(data, b85Alphabet) + `"`})), "base85 text"},
		{"base85 of xz, wrapped", []byte(addedFile("NeMo-RL/x.txt", wrapN(b85Of(xzOf(data), b85Alphabet), 76))), "base85 text"},
		{"Z85", []byte(addedFile("NeMo-RL/x.txt", wrapN(b85Of(data, z85Alphabet), 80))), "Z85 text"},
		{"Ascii85", []byte(addedFile("NeMo-RL/x.txt", wrapN(a85Of(data), 76))), "Ascii85 text"},
		{"percent-encoded", []byte(addedFile("NeMo-RL/x.txt", strings.Split(pct.String(), "\n"))), "percent-encoded text"},
		{"quoted-printable", []byte(addedFile("NeMo-RL/x.eml", qp)), "quoted-printable text"},
		{"UTF-16LE file", binarySectionPatch("NeMo-RL/data/m.txt", append([]byte{0xff, 0xfe}, utf16le(text)...)), "UTF-16LE"},
		{"UTF-16LE no BOM, base64", []byte(addedFile("NeMo-RL/x.py", []string{`D = "` + base64.StdEncoding.EncodeToString(utf16le(text)) + `"`})), "UTF-16LE"},
		{"UTF-32BE file", binarySectionPatch("NeMo-RL/data/m.txt", utf32be(text)), "UTF-32BE"},
		{"raw deflate base64", []byte(addedFile("NeMo-RL/x.py", []string{`D = "` + base64.StdEncoding.EncodeToString(rawDeflate(data)) + `"`})), "raw deflate"},
		{"raw deflate file", binarySectionPatch("NeMo-RL/data/m.bin", rawDeflate(data)), "raw deflate"},
		{"LZMA-alone file", binarySectionPatch("NeMo-RL/data/m.lzma", lzmaAlone(data)), "LZMA"},
		{"LZMA-alone hex", []byte(addedFile("NeMo-RL/x.txt", wrapN(hex.EncodeToString(lzmaAlone(data)), 64))), "LZMA"},
		{"gzip behind a header", binarySectionPatch("NeMo-RL/data/m.bin", header), "gzip at byte"},
		{"base64 in JSON \\n escapes", []byte(addedFile("NeMo-RL/d.json", []string{`{"name": "cfg", "blob": "` + jsonEsc + `"}`})), "base64 text"},
		{"base64 as a YAML list", []byte(addedFile("NeMo-RL/c.yaml", yamlList)), "base64 text"},
		{"base64 as short literals", []byte(addedFile("NeMo-RL/x.py", pyLiterals(base64.StdEncoding.EncodeToString(gz(data)), 8, 6))), "base64 text"},
		{"hex as a list of strings", []byte(addedFile("NeMo-RL/x.py", append(append([]string{"PARTS = ["}, func() []string {
			var l []string
			for _, p := range wrapN(hex.EncodeToString(gz(data)), 24) {
				l = append(l, `    "`+p+`",`)
			}
			return l
		}()...), "]"))), "hex text"},
		{"bytes as an integer array", []byte(addedFile("NeMo-RL/x.py", []string{"D = bytes([" + intList(gz(data), "%d") + "])"})), "integer array"},
		{"bytes as hex literals", []byte(addedFile("NeMo-RL/x.c", append(append([]string{"static const unsigned char d[] = {"}, wrapList(intList(data, "0x%02x"), 16)...), "};"))), "integer array"},
	}
	for _, c := range cases {
		rep := Check(c.patch, ps)
		if f := findingOf(rep, KindOpaque); f != nil {
			t.Errorf("%s: refused as opaque: %s", c.name, f.Detail)
			continue
		}
		if f := findingOf(rep, KindBinary); f != nil {
			t.Errorf("%s: refused: %s", c.name, f.Detail)
			continue
		}
		wantStatements(t, c.name, rep, ps)
		f := findingOf(rep, KindStatement)
		if f == nil || !strings.Contains(f.Detail, "decoded from") || !strings.Contains(f.Detail, c.chain) {
			t.Errorf("%s: the finding does not name its decoding chain (%q): %+v", c.name, c.chain, f)
		}
	}
}

// wrapList puts k items of a comma-separated list on each line.
func wrapList(list string, k int) []string {
	items := strings.Split(list, ", ")
	var out []string
	for i := 0; i < len(items); i += k {
		out = append(out, "    "+strings.Join(items[i:min(i+k, len(items))], ", ")+",")
	}
	return out
}

func intList(b []byte, format string) string {
	var s []string
	for _, c := range b {
		s = append(s, fmt.Sprintf(format, c))
	}
	return strings.Join(s, ", ")
}

// TestReadableOrRefused: data that reads as nothing (random bytes, in any
// form) is refused above DefaultMaxOpaque with a KindOpaque finding that
// names where and how it was found, and passes below it; a zip member of a
// method Go cannot read is refused like 7z, never lexed as raw bytes.
func TestReadableOrRefused(t *testing.T) {
	ps := standInProblems()
	r := rand.New(rand.NewPCG(40, 1))
	noise := func(n int) []byte {
		b := make([]byte, n)
		for i := range b {
			b[i] = byte(r.Uint32())
		}
		return b
	}
	big, small := noise(DefaultMaxOpaque+512), noise(DefaultMaxOpaque/4)
	forms := map[string]func(b []byte) []byte{
		"binary file": func(b []byte) []byte { return binarySectionPatch("NeMo-RL/assets/x.bin", b) },
		"hex": func(b []byte) []byte {
			return []byte(addedFile("NeMo-RL/x.py", []string{`K = "` + hex.EncodeToString(b) + `"`}))
		},
		"hex digests": func(b []byte) []byte {
			var l []string
			for _, p := range wrapN(hex.EncodeToString(b), 64) {
				l = append(l, `    "sha256:`+p+`",`)
			}
			return []byte(addedFile("NeMo-RL/h.py", l))
		},
		"base32": func(b []byte) []byte {
			return []byte(addedFile("NeMo-RL/x.txt", wrapN(base32.StdEncoding.EncodeToString(b), 72)))
		},
		"base64": func(b []byte) []byte {
			return []byte(addedFile("NeMo-RL/x.txt", wrapN(base64.StdEncoding.EncodeToString(b), 76)))
		},
		"base64 pieces": func(b []byte) []byte {
			return []byte(addedFile("NeMo-RL/x.py", pyLiterals(base64.StdEncoding.EncodeToString(b), 6, 8)))
		},
		"base85": func(b []byte) []byte { return []byte(addedFile("NeMo-RL/x.txt", wrapN(b85Of(b, b85Alphabet), 76))) },
		"int array": func(b []byte) []byte {
			return []byte(addedFile("NeMo-RL/x.py", wrapN("T = ["+intList(b, "%d")+"]", 90)))
		},
		"zip stored": func(b []byte) []byte { return binarySectionPatch("NeMo-RL/x.zip", zipOf("w.bin", b)) },
	}
	for name, form := range forms {
		rep := Check(form(big), ps)
		f := findingOf(rep, KindOpaque)
		if f == nil || !rep.Contaminated || rep.OpaqueBytes <= DefaultMaxOpaque {
			t.Errorf("%s of %d random bytes: not refused (opaque %d): %+v", name, len(big), rep.OpaqueBytes, rep.Findings)
			continue
		}
		if !strings.Contains(f.Detail, "cannot read") || len(f.Lines) == 0 || f.Lines[0] < 5 {
			t.Errorf("%s: detail %q lines %v", name, f.Detail, f.Lines)
		}
		if rep := Check(form(small), ps); rep.Contaminated || rep.OpaqueBytes == 0 {
			t.Errorf("%s of %d random bytes: opaque %d, findings %+v (want counted, not refused)", name, len(small), rep.OpaqueBytes, rep.Findings)
		}
	}
	// methods Go cannot read: refused whatever the size
	data := problemsJSONL(ps)
	for _, m := range []uint16{14, 98, 99} {
		rep := Check(binarySectionPatch("NeMo-RL/d.zip", zipMethod("d.jsonl", data, m)), ps)
		if f := findingOf(rep, KindBinary); f == nil || !strings.Contains(f.Detail, fmt.Sprintf("method %d", m)) {
			t.Errorf("zip method %d: %+v", m, rep.Findings)
		}
	}
	// the bound is below what the problems take compressed: carrying them
	// unreadable is refused whatever the compressor
	if n := len(xzOf([]byte(func() string {
		var b strings.Builder
		for _, p := range ps {
			b.WriteString(p.Statement + "\n")
		}
		return b.String()
	}()))); n <= DefaultMaxOpaque {
		t.Errorf("the statements take %d bytes with xz, not more than DefaultMaxOpaque %d", n, DefaultMaxOpaque)
	}
}
