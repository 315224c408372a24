package cli

import (
	"bytes"
	"compress/gzip"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"regexp"
	"strings"
	"testing"
)

// TestContaminationRoundTwo runs `evaluate contamination` of the built
// binary on the three holes of issue 31 and the normalisation gaps, each
// a patch built with the real git against the lab's stand-in AIME25 set:
// every one exits 4 with its finding in the report, and the ordinary
// patch of the same shape exits 0.
func TestContaminationRoundTwo(t *testing.T) {
	bin := buildBinary(t)
	problemsPath, rows := standInProblems(t)

	// a pristine tree as the eval image holds it, in a git work tree
	binBase := bytes.Repeat([]byte("\x00\x01pristine table\x02"), 8000)
	files := map[string][]byte{
		"recipe.yaml":                    []byte("grpo:\n  num_prompts_per_step: 8\ndata:\n  dataset_name: OpenMathInstruct-2\n"),
		"NeMo-RL/assets/lookup.bin":      binBase,
		"NeMo-RL/nemo_rl/data/x.py":      []byte("X = 1\n"),
		"NeMo-RL/examples/configs/a.yml": []byte("a: 1\n"),
		// a loader of the eval set, as NeMo RL ships one for evaluation
		"NeMo-RL/nemo_rl/data/eval_datasets/aime2025.py": []byte("class AIME2025Dataset:\n    def __init__(self):\n        self.ds = load_dataset(\"opencompass/AIME2025\", split=\"test\")\n"),
	}
	// git writes .jsonl and .bin files as binary patches
	tree := newGitTree(t, files, "*.jsonl -diff\n*.bin -diff\n")
	pristine, diff := tree.Dir, tree.diff

	var jsonl, answerKey, upper, x5c, supers bytes.Buffer
	sup := strings.NewReplacer("^2", "²", "^3", "³", "^{22}", "²²", "^6", "⁶", "^7", "⁷")
	cmd := regexp.MustCompile(`\\([a-z]+)`)
	for i, r := range rows {
		b, _ := json.Marshal(map[string]string{"question": r.Question, "expected_answer": r.Answer})
		jsonl.Write(append(b, '\n'))
		fmt.Fprintf(&answerKey, `{"year": 2025, "exam": "%s", "idx": %d, "points": %d, "time_min": 180, "answer": %s}`+"\n", []string{"I", "II"}[i/15], i%15+1, 10+i%15, r.Answer)
		fmt.Fprintf(&upper, "    %q,\n", cmd.ReplaceAllStringFunc(r.Question, strings.ToUpper))
		fmt.Fprintf(&x5c, "    \"%s\",\n", strings.ReplaceAll(r.Question, `\`, `\x5c`))
		fmt.Fprintf(&supers, "%s\n", sup.Replace(r.Question))
	}
	var gzJSONL bytes.Buffer
	zw := gzip.NewWriter(&gzJSONL)
	zw.Write(jsonl.Bytes())
	zw.Close()
	var b64 strings.Builder
	b64.WriteString("BLOB = \"\"\"\n")
	enc := base64.StdEncoding.EncodeToString(gzJSONL.Bytes())
	for len(enc) > 76 {
		b64.WriteString(enc[:76] + "\n")
		enc = enc[76:]
	}
	b64.WriteString(enc + "\n\"\"\"\nROWS = gzip.decompress(base64.b64decode(BLOB))\n")
	spliced := append(append(append([]byte(nil), binBase[:50000]...), jsonl.Bytes()...), binBase[50000:]...)

	for _, c := range []struct {
		name     string
		edits    map[string][]byte
		exit     int
		kind     string
		detail   string
		findings int // at least
	}{
		{"binary literal", map[string][]byte{"NeMo-RL/data/extra_math.jsonl": jsonl.Bytes()}, 4, "statement", `decoded from the GIT binary patch of "NeMo-RL/data/extra_math.jsonl"`, 30},
		{"binary delta", map[string][]byte{"NeMo-RL/assets/lookup.bin": spliced}, 4, "statement", `decoded from the GIT binary patch of "NeMo-RL/assets/lookup.bin"`, 30},
		{"binary ordinary", map[string][]byte{"NeMo-RL/assets/lookup.bin": append(append([]byte(nil), binBase...), "\x00new rows"...)}, 0, "", "", 0},
		{"gzip file in a binary section", map[string][]byte{"NeMo-RL/data/extra_math.jsonl.gz": gzJSONL.Bytes()}, 4, "statement", `decoded from the GIT binary patch of "NeMo-RL/data/extra_math.jsonl.gz" (gzip)`, 30},
		{"gzip and base64 in code", map[string][]byte{"NeMo-RL/nemo_rl/data/x.py": []byte(b64.String())}, 4, "statement", "decoded from base64 text at line 8 (gzip)", 30},
		{"a loader renamed into training", map[string][]byte{"NeMo-RL/nemo_rl/data/eval_datasets/aime2025.py": nil, "NeMo-RL/nemo_rl/data/datasets/math.py": files["NeMo-RL/nemo_rl/data/eval_datasets/aime2025.py"]}, 4, "name", `decoded from the rename of "NeMo-RL/nemo_rl/data/eval_datasets/aime2025.py" to "NeMo-RL/nemo_rl/data/datasets/math.py"`, 1},
		{"named in the recipe", map[string][]byte{"recipe.yaml": bytes.Replace(files["recipe.yaml"], []byte("OpenMathInstruct-2"), []byte("AIME2025"), 1)}, 4, "name", `the eval set is named in added line 10 of the patch: "  dataset_name: AIME2025"`, 1},
		{"named as a Hugging Face id", map[string][]byte{"NeMo-RL/nemo_rl/data/x.py": []byte("X = load_dataset(\"opencompass/AIME2025\", \"AIME2025-I\")\n")}, 4, "name", "opencompass/AIME2025", 1},
		{"answer key with metadata", map[string][]byte{"NeMo-RL/examples/configs/a.yml": answerKey.Bytes()}, 4, "answers", `consecutive records (the values of the key "answer")`, 1},
		{"upper-case commands", map[string][]byte{"NeMo-RL/nemo_rl/data/x.py": upper.Bytes()}, 4, "statement", "100% of its 10-grams", 30},
		{"x5c backslashes", map[string][]byte{"NeMo-RL/nemo_rl/data/x.py": x5c.Bytes()}, 4, "statement", "100% of its 10-grams", 30},
		{"superscripts", map[string][]byte{"NeMo-RL/nemo_rl/data/x.py": supers.Bytes()}, 4, "statement", "100% of its 10-grams", 30},
	} {
		t.Run(c.name, func(t *testing.T) {
			run := checkContamination(t, bin, diff(c.edits), problemsPath, pristine)
			code, stderr := run.code, run.stderr
			if code != c.exit {
				t.Fatalf("exit %d, want %d: %s", code, c.exit, stderr)
			}
			chk, err := run.check, run.loadErr
			if err != nil {
				t.Fatal(err)
			}
			n := 0
			var details []string
			for _, f := range chk.Report.Findings {
				if string(f.Kind) == c.kind {
					n++
					details = append(details, f.Detail)
				}
			}
			if n < c.findings || (c.exit == 0 && chk.Report.Contaminated) {
				t.Fatalf("%d %s findings, want at least %d: %+v", n, c.kind, c.findings, chk.Report.Findings)
			}
			if c.detail != "" && !strings.Contains(strings.Join(details, "\n"), c.detail) {
				t.Errorf("no %s finding holds %q: %q", c.kind, c.detail, details)
			}
			if c.exit == 4 && !strings.Contains(stderr, "contaminated: ") {
				t.Errorf("stderr names no evidence: %s", stderr)
			}
			if strings.HasPrefix(c.name, "binary") && chk.Report.BinarySections == 0 {
				t.Errorf("git wrote no binary section")
			}
			if len(details) > 0 {
				t.Logf("%s: exit %d, %d %s findings; first: %s", c.name, code, n, c.kind, details[0])
			} else {
				t.Logf("%s: exit %d, clean (%d binary sections, %d bytes decoded)", c.name, code, chk.Report.BinarySections, chk.Report.DecodedBytes)
			}
		})
	}
}
