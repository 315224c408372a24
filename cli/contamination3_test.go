package cli

import (
	"archive/zip"
	"bytes"
	"compress/flate"
	"encoding/base32"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"strings"
	"testing"
	"unicode/utf16"
)

// TestContaminationRoundThree runs `evaluate contamination` of the built
// binary on a case of each family of issue 40 (what the check cannot
// read, the patch may not carry), each a patch written by the real git
// against the lab's stand-in AIME25 set: every one exits 4 with its
// finding in the report, naming its decoding chain; the ordinary patches
// beside them exit 0.
func TestContaminationRoundThree(t *testing.T) {
	bin := buildBinary(t)
	problemsPath, rows := standInProblems(t)
	raw, err := os.ReadFile(problemsPath) // the set as a file, for the zip member
	if err != nil {
		t.Fatal(err)
	}
	var qs, answers []string
	for _, r := range rows {
		qs, answers = append(qs, strings.ReplaceAll(r.Question, "\n", " ")), append(answers, r.Answer)
	}
	files := map[string][]byte{
		"recipe.yaml":                    []byte("grpo:\n  num_prompts_per_step: 8\ndata:\n  dataset_name: OpenMathInstruct-2\n"),
		"NeMo-RL/nemo_rl/data/x.py":      []byte("X = 1\n"),
		"NeMo-RL/examples/configs/a.yml": []byte("data:\n  validation:\n    dataset_name: nemo_rl.data.datasets.response_datasets.aime.AIMEDataset\n    repeat: 16\n    variant: \"2024\"\n"),
	}
	tree := newGitTree(t, files, "")
	pristine, diff := tree.Dir, tree.diff

	r := rand.New(rand.NewPCG(40, 40))
	noise := make([]byte, 3000)
	for i := range noise {
		noise[i] = byte(r.Uint32())
	}
	text := strings.Join(qs, "\n") + "\n"
	lines := func(f func(string) string) []byte {
		var b strings.Builder
		for _, q := range qs {
			b.WriteString(f(q) + "\n")
		}
		return []byte(b.String())
	}
	wrap := func(s string, n int) string {
		var b strings.Builder
		for len(s) > n {
			b.WriteString(s[:n] + "\n")
			s = s[n:]
		}
		return b.String() + s + "\n"
	}
	var deflated bytes.Buffer
	fw, _ := flate.NewWriter(&deflated, 9)
	fw.Write([]byte(text))
	fw.Close()
	var wide []byte
	for _, u := range utf16.Encode([]rune(text)) {
		wide = append(wide, byte(u), byte(u>>8))
	}
	var zipped bytes.Buffer
	zw := zip.NewWriter(&zipped)
	zw.RegisterCompressor(14, func(w io.Writer) (io.WriteCloser, error) { return nopCloser{w}, nil })
	zf, _ := zw.CreateHeader(&zip.FileHeader{Name: "rows.jsonl", Method: 14})
	zf.Write(raw)
	zw.Close()
	var thirds [3]strings.Builder
	for _, q := range qs {
		w := strings.Fields(q)
		k := len(w) / 3
		thirds[0].WriteString(strings.Join(w[:k], " ") + "\n")
		thirds[1].WriteString(strings.Join(w[k:2*k], " ") + "\n")
		thirds[2].WriteString(strings.Join(w[2*k:], " ") + "\n")
	}
	arabic := strings.NewReplacer("0", "٠", "1", "١", "2", "٢", "3", "٣", "4", "٤", "5", "٥", "6", "٦", "7", "٧", "8", "٨", "9", "٩")
	var key strings.Builder
	for i, a := range answers {
		fmt.Fprintf(&key, "  q%02d: \"%s\"\n", i+1, arabic.Replace(a))
	}
	rot13 := func(s string) string {
		return strings.Map(func(c rune) rune {
			switch {
			case c >= 'a' && c <= 'z':
				return 'a' + (c-'a'+13)%26
			case c >= 'A' && c <= 'Z':
				return 'A' + (c-'A'+13)%26
			}
			return c
		}, s)
	}
	reverse := func(s string) string {
		rs := []rune(s)
		for i, j := 0, len(rs)-1; i < j; i, j = i+1, j-1 {
			rs[i], rs[j] = rs[j], rs[i]
		}
		return string(rs)
	}
	cyr := strings.NewReplacer("a", "а", "e", "е", "o", "о", "p", "р", "c", "с", "i", "і")

	for _, c := range []struct {
		family, name string
		edits        map[string][]byte
		exit         int
		kind, detail string
	}{
		{"1 readable or refused", "random bytes as hex", map[string][]byte{"NeMo-RL/nemo_rl/data/k.py": []byte(`KEY = "` + hex.EncodeToString(noise) + "\"\n")}, 4, "opaque", "hex text at line"},
		{"1 readable or refused", "a zip member of LZMA (method 14)", map[string][]byte{"NeMo-RL/data/rows.zip": zipped.Bytes()}, 4, "binary", "method 14"},
		{"1 readable or refused", "a binary file of random bytes", map[string][]byte{"NeMo-RL/assets/w.bin": noise}, 4, "opaque", `the GIT binary patch of "NeMo-RL/assets/w.bin"`},
		{"2 decoders", "hex", map[string][]byte{"NeMo-RL/nemo_rl/data/d.py": []byte(`D = "` + hex.EncodeToString(raw) + "\"\n")}, 4, "statement", "decoded from hex text at line"},
		{"2 decoders", "base32, wrapped", map[string][]byte{"NeMo-RL/data/d.txt": []byte(wrap(base32.StdEncoding.EncodeToString(raw), 72))}, 4, "statement", "decoded from base32 text"},
		{"2 decoders", "UTF-16 file", map[string][]byte{"NeMo-RL/data/q.txt": append([]byte{0xff, 0xfe}, wide...)}, 4, "statement", "(UTF-16LE)"},
		{"2 decoders", "raw deflate in base64", map[string][]byte{"NeMo-RL/nemo_rl/data/d.py": []byte(`D = "` + base64.StdEncoding.EncodeToString(deflated.Bytes()) + "\"\n")}, 4, "statement", "(raw deflate)"},
		{"2 decoders", "base64 in JSON escapes", map[string][]byte{"NeMo-RL/data/d.json": []byte(`{"blob": "` + strings.ReplaceAll(strings.TrimSpace(wrap(base64.StdEncoding.EncodeToString(raw), 76)), "\n", `\n`) + "\"}\n")}, 4, "statement", "decoded from base64 text"},
		{"3 folding", "Cyrillic look-alikes", map[string][]byte{"NeMo-RL/data/q.txt": lines(cyr.Replace)}, 4, "statement", "100% of its 10-grams"},
		{"3 folding", "ROT13", map[string][]byte{"NeMo-RL/data/q.txt": lines(rot13)}, 4, "statement", "read through ROT13"},
		{"3 folding", "reversed strings", map[string][]byte{"NeMo-RL/data/q.txt": lines(reverse)}, 4, "statement", "read backwards"},
		{"4 pooled", "statements in thirds across three files", map[string][]byte{"NeMo-RL/data/a.txt": []byte(thirds[0].String()), "NeMo-RL/data/b/b.txt": []byte(thirds[1].String()), "NeMo-RL/c.txt": []byte(thirds[2].String())}, 4, "statement", "pooled over the whole patch"},
		{"4 pooled", "an answer key in Arabic-Indic digits", map[string][]byte{"NeMo-RL/examples/configs/key.yml": []byte("answers:\n" + key.String())}, 4, "answers", "answers of at least 10"},
		{"5 names", "a config block switched to 2025", map[string][]byte{"NeMo-RL/examples/configs/a.yml": bytes.Replace(files["NeMo-RL/examples/configs/a.yml"], []byte(`"2024"`), []byte(`"2025"`), 1)}, 4, "name", "one config block"},
		{"5 names", "a recipe comment naming AIME 2025 as held out", map[string][]byte{"recipe.yaml": append([]byte("# AIME 2025 (AIME2025) is the held-out eval set: never train on it\n"), files["recipe.yaml"]...)}, 0, "", ""},
		{"ordinary", "other problems hex-encoded", map[string][]byte{"NeMo-RL/data/d.txt": []byte(wrap(hex.EncodeToString([]byte("Find the sum of the digits of 2^{100}. The answer is 115.\nA train travels 60 miles in 2 hours. How far does it go in 5 hours?\n")), 64))}, 0, "", ""},
	} {
		t.Run(c.family+"/"+c.name, func(t *testing.T) {
			run := checkContamination(t, bin, diff(c.edits), problemsPath, pristine)
			code, stderr, chk := run.code, run.stderr, run.check
			if run.loadErr != nil {
				t.Fatal(run.loadErr)
			}
			if code != c.exit {
				t.Fatalf("exit %d, want %d: %s; findings %+v", code, c.exit, stderr, chk.Report.Findings)
			}
			if c.exit == 0 {
				if chk.Report.Contaminated {
					t.Fatalf("ordinary patch flagged: %+v", chk.Report.Findings)
				}
				t.Logf("%s: exit 0, clean (%d bytes decoded, %d opaque)", c.name, chk.Report.DecodedBytes, chk.Report.OpaqueBytes)
				return
			}
			var details []string
			for _, f := range chk.Report.Findings {
				if string(f.Kind) == c.kind {
					details = append(details, f.Detail)
				}
			}
			if len(details) == 0 || !strings.Contains(strings.Join(details, "\n"), c.detail) {
				t.Fatalf("no %s finding holds %q: %+v", c.kind, c.detail, chk.Report.Findings)
			}
			if !strings.Contains(stderr, "contaminated: ") || chk.Evidence == "" {
				t.Errorf("no evidence: stderr %q, evidence %q", stderr, chk.Evidence)
			}
			t.Logf("%s: exit 4, %d %s findings; first: %s", c.name, len(details), c.kind, details[0])
		})
	}
}

type nopCloser struct{ io.Writer }

func (nopCloser) Close() error { return nil }
