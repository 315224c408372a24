package contamination

import (
	"bytes"
	"encoding/base64"
	"encoding/hex"
	"testing"
	"unicode/utf8"
)

// Fuzz targets of round three's parsers and decoders: none panics, each
// stays within its bound, and what it returns has the shape it promises.

// FuzzDecoders: the base16/32/85 decoders, Ascii85, percent and
// quoted-printable escapes, UTF-16/32, raw deflate, LZMA-alone and the
// magic search on any bytes.
func FuzzDecoders(f *testing.F) {
	data := problemsJSONL(standInProblems()[:2])
	for _, b := range [][]byte{
		[]byte(hex.EncodeToString(data)), []byte(b85Of(data, b85Alphabet)), []byte(a85Of(data)),
		rawDeflate(data), lzmaAlone(data), utf16le("Find the sum"), append([]byte("hdr"), gz(data)...),
		[]byte("Find%20the%20sum=3D=20of"), []byte("MZXW6YTBOI======"),
	} {
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		const budget = 1 << 16
		if isHexRun(b) {
			if out := decodeHex(b); len(out) != len(b)/2 {
				t.Fatalf("hex: %d bytes from %d digits", len(out), len(b))
			}
		}
		if out, ok := decodeB32(b); ok && len(out) > len(b)*5/8+1 {
			t.Fatalf("base32: %d bytes from %d", len(out), len(b))
		}
		for _, tab := range []*[256]byte{&b85Dec, &z85Dec} {
			if out, ok := decode85(b, tab); ok && len(out) > len(b)*4/5+4 {
				t.Fatalf("base85: %d bytes from %d", len(out), len(b))
			}
		}
		if out, ok := decodeA85(b); ok && len(out) > 4*len(b)+8 {
			t.Fatalf("Ascii85: %d bytes from %d", len(out), len(b))
		}
		for _, lead := range []byte{'%', '='} {
			if out := unescapeHex(b, lead, lead == '%'); len(out) > len(b) {
				t.Fatalf("unescape: %d bytes from %d", len(out), len(b))
			}
		}
		if k := wideKind(b); k != "" {
			if out := fromWide(b, k); len(out) > 2*len(b)+4 {
				t.Fatalf("%s: %d bytes from %d", k, len(out), len(b))
			}
		}
		if out, ok := inflateRaw(b, budget); ok && len(out) > budget {
			t.Fatalf("raw deflate: %d bytes past the budget", len(out))
		}
		if isLZMAAlone(b) {
			if out, _ := unLZMA(b, budget); len(out) > budget {
				t.Fatalf("LZMA: %d bytes past the budget", len(out))
			}
		}
		if i, kind := magicAt(b); i >= 0 && (i == 0 || i >= len(b) || !strictMagic(b[i:], kind)) {
			t.Fatalf("magicAt %d %q", i, kind)
		}
		_ = isText(b)
		_ = runClass(b)
	})
}

// FuzzScanRuns: the run and array assemblers over any lines: every run
// handed on is at least minRun characters of the data alphabets, every
// array at least minArray values, and nothing is handed on twice.
func FuzzScanRuns(f *testing.F) {
	enc := base64.StdEncoding.EncodeToString(problemsJSONL(standInProblems()[:1]))
	f.Add([]byte(`X = ("` + enc[:40] + `" "` + enc[40:90] + `"` + "\n" + `  "` + enc[90:200] + `",`))
	f.Add([]byte("blob:\n  - " + enc[:60] + "\n  - " + enc[60:120] + "\n"))
	f.Add([]byte(`{"b": "` + enc[:70] + `\n` + enc[70:150] + `"}`))
	f.Add([]byte("T = [1, 2, 0x41,\n 255, -3, 70, 204]\n"))
	f.Fuzz(func(t *testing.T, text []byte) {
		var acc runAcc
		var ints intAcc
		runs, arrays := 0, 0
		for i, l := range bytes.Split(text, []byte("\n")) {
			scanRuns(l, &acc, i+1, func(run []byte, line int) {
				runs++
				if len(run) < minRun || len(run) > maxRunBytes || line < 1 || line > i+1 {
					t.Fatalf("run of %d at line %d (line %d)", len(run), line, i+1)
				}
				for _, c := range run {
					if !isB64(c) && c != '=' {
						t.Fatalf("run holds %q", c)
					}
				}
			})
			scanInts(l, &ints, i+1, func(vals []int64, line int) {
				arrays++
				if len(vals) < minArray || len(vals) > maxArray || line < 1 || line > i+1 {
					t.Fatalf("array of %d at line %d", len(vals), line)
				}
				arrayReadings(vals, func(b []byte, how string) bool {
					if len(b) > 8*len(vals) || how == "" {
						t.Fatalf("reading %q of %d bytes from %d values", how, len(b), len(vals))
					}
					return false
				})
			})
			b85Runs(l, func(run []byte) {
				if len(run) < minRun {
					t.Fatalf("base85 run of %d", len(run))
				}
			})
		}
		if runs > len(text)/minRun+1 || arrays > len(text)/minArray+1 {
			t.Fatalf("%d runs, %d arrays from %d bytes", runs, arrays, len(text))
		}
	})
}

// FuzzNameRule: the name rule's parsers on any line: matches lie inside
// the line, comments only shorten it, a year value points at "2025",
// and the rule's state stays bounded whatever the lines.
func FuzzNameRule(f *testing.F) {
	for _, s := range []string{
		`    "AIME2025": partial(AIMEDataset, variant="2025"),  # the eval set`,
		"  dataset_name: nemo_rl.data.datasets.response_datasets.aime.AIMEDataset",
		`print("never train on AIME 2025")`, "x = 2025_aime // c", "variant == \"2025\"",
		"- dataset_name: AIME'25", "data_path: /opt/nemorl/eval/aime25.jsonl",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, l []byte) {
		for _, m := range findNames(l) {
			if m.start < 0 || m.end > len(l) || m.start > m.end || m.key == "" {
				t.Fatalf("match %+v of a line of %d", m, len(l))
			}
			_ = prose(l, m.start, m.end)
		}
		for _, k := range []fileKind{kindData, kindHash, kindSlash} {
			if c := stripComment(l, k); len(c) > len(l) || !bytes.HasPrefix(l, c) {
				t.Fatalf("stripComment made %q of %q", c, l)
			}
		}
		if i := yearValue(l); i >= 0 && string(l[i:i+4]) != "2025" {
			t.Fatalf("yearValue %d in %q", i, l)
		}
		parts, ok := literalParts(l)
		if !ok && parts != nil {
			t.Fatal("parts of a line that is no literals")
		}
		for _, p := range parts {
			if len(p) > len(l) {
				t.Fatal("a part longer than the line")
			}
		}
		var n nameRule
		n.setFile(fileHeader{newPath: "c.yaml"})
		for i := 0; i < 200; i++ {
			n.added(l, i+1, "")
			n.other(l, i+1, i%2 == 0)
		}
		if len(n.cands) > maxNameCands {
			t.Fatalf("%d candidates", len(n.cands))
		}
		_ = n.finding(Options{})
	})
}

// FuzzFold: the folds and the alternative readings on any text: the
// lexer never panics on what they make, and reversing twice is the
// identity on valid UTF-8.
func FuzzFold(f *testing.F) {
	for _, s := range []string{"Fі<b>nd</b> thе ѕum", `F\N{LATIN SMALL LETTER I}nd`, "٧٠ 0x46 seventy two hundred and four", "a<b$ and $c>d", "\u3164\ufe0f\u200b"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		lx := newLexer(func(tok []byte, _ uint64, num int) {
			if len(tok) == 0 || len(tok) > maxTokBytes || num < noNumber {
				t.Fatalf("token %q num %d", tok, num)
			}
		})
		lx.text(b)
		if p := lx.prefold(b); len(p) > 4*len(b)+8 {
			t.Fatalf("prefold grew %d to %d", len(b), len(p))
		}
		if r := reverseRunes(nil, reverseRunes(nil, b)); utf8.Valid(b) && !bytes.Equal(r, b) {
			t.Fatalf("reversed twice: %q of %q", r, b)
		}
		_ = reverseWords(nil, b)
		var nw numWords
		for _, w := range bytes.Fields(b) {
			if v, _, ok := nw.step(bytes.ToLower(w), nil); ok && (v < 0 || v > 999) {
				t.Fatalf("number word %d", v)
			}
		}
	})
}
