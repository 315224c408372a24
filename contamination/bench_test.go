package contamination

import (
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
)

var bench32 struct {
	once  sync.Once
	patch []byte
	lines []int // patch lines of the injected problems
}

// bench32MiB builds a 32 MiB patch of ordinary added code and text (files of
// 2,000 lines each) with three stand-in problems injected.
func bench32MiB() ([]byte, []int) {
	bench32.once.Do(func() {
		ps := standInProblems()
		r := rand.New(rand.NewPCG(32, 32))
		var b strings.Builder
		const size = 32 << 20
		b.Grow(size + 1<<20)
		line := 0
		file := 0
		for b.Len() < size {
			lines := ordinaryCode(r, 2000)
			if file%3 == 1 {
				for i, it := range ordinaryMath(r, 200) {
					lines[i*10] = jsonRow("question", it, "answer", fmt.Sprint(r.IntN(1000)))
				}
			}
			if file == 2 || file == 80 || file == 150 {
				k := len(bench32.lines)
				lines[1000] = jsonRow("question", ps[10*k+3].Statement, "answer", ps[10*k+3].Answer)
				bench32.lines = append(bench32.lines, line+addedFileHeaderLines+1001)
			}
			s := addedFile(fmt.Sprintf("pkg/f%04d.py", file), lines)
			b.WriteString(s)
			line += strings.Count(s, "\n")
			file++
		}
		bench32.patch = []byte(b.String())
	})
	return bench32.patch, bench32.lines
}

func BenchmarkCheck32MiB(b *testing.B) {
	patch, want := bench32MiB()
	ps := standInProblems()
	Check(nil, ps) // prepare the problems outside the timing, as the cache would
	b.SetBytes(int64(len(patch)))
	b.ReportAllocs()
	b.ResetTimer()
	var rep Report
	for i := 0; i < b.N; i++ {
		rep = Check(patch, ps)
	}
	b.StopTimer()
	if len(rep.Findings) != len(want) {
		b.Fatalf("findings %+v, want problems on lines %v", rep.Findings, want)
	}
	for i, f := range rep.Findings {
		if f.Kind != KindStatement || len(f.Lines) != 1 || f.Lines[0] != want[i] {
			b.Errorf("finding %d: %+v, want line %d", i, f, want[i])
		}
	}
}

// binarySectionPatch renders content as a new file's GIT binary patch, as
// git diff --binary writes it (forward literal, empty reverse).
func binarySectionPatch(name string, content []byte) []byte {
	var b strings.Builder
	fmt.Fprintf(&b, "diff --git a/%s b/%s\nnew file mode 100644\nindex 0000000000000000000000000000000000000000..%s\nGIT binary patch\n", name, name, gitBlobID(content))
	b.WriteString(hunkText(false, content))
	b.WriteString(hunkText(false, nil))
	return []byte(b.String())
}

var benchBin struct {
	once                  sync.Once
	noise, text, b64, hex []byte
	noiseLen, textSize    int
}

// BenchmarkCheck32MiBBinary: the check of patches whose bulk is one GIT
// binary patch section: "noise", a 32 MiB section of incompressible bytes
// (what a binary file costs: base85 + zlib decoded, then lexed; refused as
// opaque since round three); "text", the 32 MiB ordinary patch of
// BenchmarkCheck32MiB (up to the decoding bound) compressed into one
// literal, its three problems found in it; and the patch's text as one
// 32 MiB run of "base64" (wrapped at 76 columns) or of "hex" (64 digits a
// line), decoded and its problems found.
func BenchmarkCheck32MiBBinary(b *testing.B) {
	benchBin.once.Do(func() {
		r := rand.New(rand.NewPCG(32, 33))
		// 32 MiB of section: base85 lines carry 52 bytes in 66 characters
		raw := make([]byte, (32<<20)/66*52)
		for i := range raw {
			raw[i] = byte(r.Uint32())
		}
		benchBin.noise = binarySectionPatch("NeMo-RL/assets/noise.bin", raw)
		benchBin.noiseLen = len(raw)
		text, _ := bench32MiB()
		text = text[:DefaultMaxDecoded-1<<10]
		benchBin.text = binarySectionPatch("NeMo-RL/data/code.jsonl", text)
		benchBin.textSize = len(text)
		// the text as one base64 blob wrapped at 76 columns, filling 32 MiB
		enc := base64.StdEncoding.EncodeToString(text[:(32<<20)/77*76/4*3])
		var w strings.Builder
		w.Grow(len(enc) + len(enc)/76*2 + 200)
		w.WriteString("diff --git a/NeMo-RL/blob.py b/NeMo-RL/blob.py\nnew file mode 100644\nindex 0000000..1111111\n--- /dev/null\n+++ b/NeMo-RL/blob.py\n")
		n := (len(enc) + 75) / 76
		fmt.Fprintf(&w, "@@ -0,0 +1,%d @@\n", n)
		for len(enc) > 0 {
			k := min(76, len(enc))
			w.WriteString("+" + enc[:k] + "\n")
			enc = enc[k:]
		}
		benchBin.b64 = []byte(w.String())
		// round three: the text as hex, 64 digits a line, filling 32 MiB
		hx := hex.EncodeToString(text[:(32<<20)/65*64/2])
		w.Reset()
		w.WriteString("diff --git a/NeMo-RL/hex.txt b/NeMo-RL/hex.txt\nnew file mode 100644\nindex 0000000..1111111\n--- /dev/null\n+++ b/NeMo-RL/hex.txt\n")
		fmt.Fprintf(&w, "@@ -0,0 +1,%d @@\n", (len(hx)+63)/64)
		for len(hx) > 0 {
			k := min(64, len(hx))
			w.WriteString("+" + hx[:k] + "\n")
			hx = hx[k:]
		}
		benchBin.hex = []byte(w.String())
	})
	ps := standInProblems()
	Check(nil, ps)
	for _, c := range []struct {
		name     string
		patch    []byte
		findings int
	}{{"noise", benchBin.noise, 1}, {"text", benchBin.text, 3}, {"base64", benchBin.b64, -1}, {"hex", benchBin.hex, -1}} {
		b.Run(c.name, func(b *testing.B) {
			b.SetBytes(int64(len(c.patch)))
			b.ReportAllocs()
			var rep Report
			for i := 0; i < b.N; i++ {
				rep = Check(c.patch, ps)
			}
			b.StopTimer()
			b.ReportMetric(float64(rep.DecodedBytes)/(1<<20), "decoded-MiB")
			if c.findings < 0 { // base64, hex: no binary section; the problems in the text they encode
				if rep.BinarySections != 0 || len(rep.Findings) == 0 || rep.DecodedBytes < 15<<20 || findingOf(rep, KindStatement) == nil {
					b.Fatalf("%s: %d bytes decoded, findings %+v", c.name, rep.DecodedBytes, rep.Findings)
				}
				return
			}
			if c.name == "noise" && findingOf(rep, KindOpaque) == nil {
				// round three: 25 MiB of bytes that read as nothing are refused
				b.Fatalf("noise: not refused as opaque: %+v", rep.Findings)
			}
			if rep.BinarySections != 1 || len(rep.Findings) != c.findings {
				b.Fatalf("%s: %d sections, %d bytes decoded, findings %+v", c.name, rep.BinarySections, rep.DecodedBytes, rep.Findings)
			}
		})
	}
}
