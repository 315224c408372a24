package contamination

import (
	"archive/tar"
	"archive/zip"
	"bytes"
	"compress/gzip"
	"encoding/base64"
	"math/rand/v2"
	"os"
	"strings"
	"testing"

	"github.com/klauspost/compress/zstd"
	"github.com/ulikunitz/xz"
)

func gz(b []byte) []byte {
	var w bytes.Buffer
	z := gzip.NewWriter(&w)
	z.Write(b)
	z.Close()
	return w.Bytes()
}

func xzOf(b []byte) []byte {
	var w bytes.Buffer
	z, _ := xz.NewWriter(&w)
	z.Write(b)
	z.Close()
	return w.Bytes()
}

func zstdOf(b []byte) []byte {
	e, _ := zstd.NewWriter(nil)
	defer e.Close()
	return e.EncodeAll(b, nil)
}

func zipOf(name string, b []byte) []byte {
	var w bytes.Buffer
	z := zip.NewWriter(&w)
	f, _ := z.Create(name)
	f.Write(b)
	z.Close()
	return w.Bytes()
}

func tarOf(name string, b []byte) []byte {
	var w bytes.Buffer
	t := tar.NewWriter(&w)
	t.WriteHeader(&tar.Header{Name: name, Mode: 0o644, Size: int64(len(b)), Typeflag: tar.TypeReg})
	t.Write(b)
	t.Close()
	return w.Bytes()
}

// wrap76 splits s into lines of 76 characters, as base64 tools wrap.
func wrap76(s string) []string {
	var out []string
	for len(s) > 76 {
		out = append(out, s[:76])
		s = s[76:]
	}
	return append(out, s)
}

// TestEncodedProblems: the problems compressed or base64-encoded, in a
// binary section or in the added text, are decoded and every statement
// found; a truncated stream still yields what came before the cut.
func TestEncodedProblems(t *testing.T) {
	ps := standInProblems()
	data := problemsJSONL(ps)
	b64 := base64.StdEncoding.EncodeToString(data)
	gzb64 := base64.StdEncoding.EncodeToString(gz(data))
	cases := map[string][]byte{
		"binary .jsonl.gz":       binarySectionPatch("NeMo-RL/data/m.jsonl.gz", gz(data)),
		"binary .jsonl.xz":       binarySectionPatch("NeMo-RL/data/m.jsonl.xz", xzOf(data)),
		"binary .jsonl.zst":      binarySectionPatch("NeMo-RL/data/m.jsonl.zst", zstdOf(data)),
		"binary .zip":            binarySectionPatch("NeMo-RL/data/m.zip", zipOf("m.jsonl", data)),
		"binary .tar.gz":         binarySectionPatch("NeMo-RL/data/m.tar.gz", gz(tarOf("m.jsonl", data))),
		"binary truncated .gz":   binarySectionPatch("NeMo-RL/data/m.jsonl.gz", gz(data)[:len(gz(data))*9/10]),
		"base64 one line":        []byte(addedFile("NeMo-RL/x.py", []string{`DATA = "` + b64 + `"`})),
		"base64 wrapped":         []byte(addedFile("NeMo-RL/x.py", append(append([]string{`DATA = """`}, wrap76(b64)...), `"""`))),
		"base64 concatenated":    []byte(addedFile("NeMo-RL/x.py", concatLines(wrap76(b64)))),
		"gzip+base64 wrapped":    []byte(addedFile("NeMo-RL/x.py", append(append([]string{`DATA = """`}, wrap76(gzb64)...), `"""`))),
		"gzip+base64 url-safe":   []byte(addedFile("NeMo-RL/x.py", []string{`DATA = "` + base64.RawURLEncoding.EncodeToString(gz(data)) + `"`})),
		"base64 in a binary zip": binarySectionPatch("NeMo-RL/data/m.zip", zipOf("m.b64", []byte(b64))),
	}
	for name, patch := range cases {
		rep := Check(patch, ps)
		if f := findingOf(rep, KindBinary); f != nil {
			t.Errorf("%s: refused: %s", name, f.Detail)
			continue
		}
		if strings.Contains(name, "truncated") {
			if n := countKind(rep, KindStatement); n < len(ps)/2 {
				t.Errorf("%s: %d statements found", name, n)
			}
			continue
		}
		wantStatements(t, name, rep, ps)
		if f := findingOf(rep, KindStatement); f != nil && !strings.Contains(f.Detail, "decoded from") {
			t.Errorf("%s: the finding does not say what it was decoded from: %s", name, f.Detail)
		}
	}
	// a 7z archive cannot be read: refused
	rep := Check(binarySectionPatch("NeMo-RL/data/m.7z", append([]byte("7z\xbc\xaf\x27\x1c\x00\x04"), data...)), ps)
	if f := findingOf(rep, KindBinary); f == nil || !strings.Contains(f.Detail, "7z") {
		t.Errorf("7z: %+v", rep.Findings)
	}
	// a gzip bomb past the bound: refused
	rep = CheckWith(binarySectionPatch("NeMo-RL/data/b.gz", gz(make([]byte, 8<<20))), ps, Options{MaxDecoded: 4 << 20})
	if f := findingOf(rep, KindBinary); f == nil || !strings.Contains(f.Detail, "more than") {
		t.Errorf("gzip bomb: %+v", rep.Findings)
	}
}

func countKind(rep Report, k Kind) int {
	n := 0
	for _, f := range rep.Findings {
		if f.Kind == k {
			n++
		}
	}
	return n
}

func concatLines(parts []string) []string {
	out := []string{"DATA = ("}
	for _, p := range parts {
		out = append(out, `    "`+p+`"`)
	}
	return append(out, ")")
}

// TestEncodedOrdinary: ordinary files compressed, archived or base64
// encoded (an image, random bytes, code) are clean.
func TestEncodedOrdinary(t *testing.T) {
	ps := standInProblems()
	r := rand.New(rand.NewPCG(31, 9))
	code := []byte(strings.Join(ordinaryCode(r, 3000), "\n"))
	noise := make([]byte, 200000)
	for i := range noise {
		noise[i] = byte(r.Uint32())
	}
	var hashes []string
	for i := 0; i < 500; i++ {
		hashes = append(hashes, base64.StdEncoding.EncodeToString(noise[i*48:i*48+48]))
	}
	for name, patch := range map[string][]byte{
		"gz code":          binarySectionPatch("a/code.py.gz", gz(code)),
		"zip code":         binarySectionPatch("a/code.zip", zipOf("code.py", code)),
		"base64 gz code":   []byte(addedFile("a/x.py", []string{`X = "` + base64.StdEncoding.EncodeToString(gz(code)) + `"`})),
		"a few hashes":     []byte(addedFile("a/h.txt", hashes[:10])),
		"long identifiers": []byte(addedFile("a/id.go", []string{strings.Repeat("abcdefghij", 30), strings.Repeat("Zq9", 50)})),
	} {
		if rep := Check(patch, ps); rep.Contaminated {
			t.Errorf("%s: flagged: %+v", name, rep.Findings)
		}
	}
	// round three: random bytes read as nothing, so beyond
	// DefaultMaxOpaque they are refused (readable or refused), as opaque
	for name, patch := range map[string][]byte{
		"noise":         binarySectionPatch("a/noise.bin", noise),
		"base64 noise":  []byte(addedFile("a/img.py", wrap76(base64.StdEncoding.EncodeToString(noise)))),
		"base64 hashes": []byte(addedFile("a/h.txt", hashes)),
	} {
		rep := Check(patch, ps)
		if f := findingOf(rep, KindOpaque); f == nil || len(rep.Findings) != 1 {
			t.Errorf("%s: want one opaque refusal: %+v", name, rep.Findings)
		}
	}
}

// TestCopyAndRename: a copy or rename puts a pristine file's content at a
// new path without a '+' line; the checker reads the source (a loader that
// names the eval set is found), and refuses without the pristine tree.
func TestCopyAndRename(t *testing.T) {
	ps := standInProblems()
	loader := []byte("class AIME2025Dataset:\n    def __init__(self):\n        self.ds = load_dataset(\"opencompass/AIME2025\")\n")
	pristine := func(p string) ([]byte, error) {
		switch p {
		case "NeMo-RL/nemo_rl/data/eval_datasets/aime2025.py":
			return loader, nil
		case "NeMo-RL/nemo_rl/data/x.py":
			return []byte("X = 1\n"), nil
		}
		return nil, os.ErrNotExist
	}
	for _, kind := range []string{"copy", "rename"} {
		patch := []byte("diff --git a/NeMo-RL/nemo_rl/data/eval_datasets/aime2025.py b/NeMo-RL/nemo_rl/data/datasets/math.py\nsimilarity index 100%\n" +
			kind + " from NeMo-RL/nemo_rl/data/eval_datasets/aime2025.py\n" + kind + " to NeMo-RL/nemo_rl/data/datasets/math.py\n")
		rep := CheckWith(patch, ps, Options{Pristine: pristine})
		f := findingOf(rep, KindName)
		if f == nil || f.Lines[0] != 3 || !strings.Contains(f.Detail, "decoded from the "+kind+" of") {
			t.Errorf("%s of a loader: %+v", kind, rep.Findings)
		}
		if rep := Check(patch, ps); findingOf(rep, KindBinary) == nil {
			t.Errorf("%s without the pristine tree: not refused: %+v", kind, rep.Findings)
		}
		ok := []byte("diff --git a/NeMo-RL/nemo_rl/data/x.py b/NeMo-RL/nemo_rl/data/y.py\nsimilarity index 100%\n" + kind + " from NeMo-RL/nemo_rl/data/x.py\n" + kind + " to NeMo-RL/nemo_rl/data/y.py\ndiff --git a/r b/r\n--- a/r\n+++ b/r\n@@ -1 +1 @@\n-a\n+b\n")
		if rep := CheckWith(ok, ps, Options{Pristine: pristine}); rep.Contaminated {
			t.Errorf("ordinary %s: %+v", kind, rep.Findings)
		}
	}
}

// FuzzUnpack: containers of any bytes never panic and stay in the budget.
func FuzzUnpack(f *testing.F) {
	data := problemsJSONL(standInProblems()[:3])
	for _, b := range [][]byte{gz(data), xzOf(data), zstdOf(data), zipOf("a", data), tarOf("a", data), gz(data)[:40], []byte("BZh91AY&SY")} {
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		const budget = 1 << 20
		kind := sniff(b)
		if kind == "" {
			return
		}
		parts, _ := unpack(kind, b, budget)
		n := 0
		for _, p := range parts {
			n += len(p.data)
		}
		if n > budget {
			t.Fatalf("%s: %d bytes out of a budget of %d", kind, n, budget)
		}
	})
}
