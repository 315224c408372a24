package cli

import (
	"bytes"
	"compress/gzip"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/nemorl/nemorl-slurm/evaluate"
)

// TestContaminationRoundTwo runs `evaluate contamination` of the built
// binary on the three holes of issue 31 and the normalisation gaps, each
// a patch built with the real git against the lab's stand-in AIME25 set:
// every one exits 4 with its finding in the report, and the ordinary
// patch of the same shape exits 0.
func TestContaminationRoundTwo(t *testing.T) {
	bin := buildBinary(t)
	problemsPath, err := filepath.Abs("../lab/stand-ins/aime25-stand-in.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	problems, err := os.ReadFile(problemsPath)
	if err != nil {
		t.Fatal(err)
	}
	var rows []struct {
		Question string `json:"question"`
		Answer   string `json:"expected_answer"`
	}
	for _, l := range bytes.Split(bytes.TrimSpace(problems), []byte("\n")) {
		var r struct {
			Question string `json:"question"`
			Answer   string `json:"expected_answer"`
		}
		if err := json.Unmarshal(l, &r); err != nil {
			t.Fatal(err)
		}
		rows = append(rows, r)
	}

	// a pristine tree as the eval image holds it, in a git work tree
	pristine := t.TempDir()
	binBase := bytes.Repeat([]byte("\x00\x01pristine table\x02"), 8000)
	files := map[string][]byte{
		"recipe.yaml":                    []byte("grpo:\n  num_prompts_per_step: 8\ndata:\n  dataset_name: OpenMathInstruct-2\n"),
		"NeMo-RL/assets/lookup.bin":      binBase,
		"NeMo-RL/nemo_rl/data/x.py":      []byte("X = 1\n"),
		"NeMo-RL/examples/configs/a.yml": []byte("a: 1\n"),
		// a loader of the eval set, as NeMo RL ships one for evaluation
		"NeMo-RL/nemo_rl/data/eval_datasets/aime2025.py": []byte("class AIME2025Dataset:\n    def __init__(self):\n        self.ds = load_dataset(\"opencompass/AIME2025\", split=\"test\")\n"),
	}
	for name, b := range files {
		p := filepath.Join(pristine, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	git := func(dir string, args ...string) []byte {
		t.Helper()
		cmd := exec.Command("git", append([]string{"-c", "user.name=t", "-c", "user.email=t@example.invalid"}, args...)...)
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "GIT_CONFIG_NOSYSTEM=1", "GIT_CONFIG_GLOBAL=/dev/null", "HOME="+dir)
		out, err := cmd.Output()
		if err != nil {
			var ee *exec.ExitError
			if errors.As(err, &ee) {
				t.Fatalf("git %v: %v: %s", args, err, ee.Stderr)
			}
			t.Fatalf("git %v: %v", args, err)
		}
		return out
	}
	// diff returns what `git diff --binary` prints for the edits, made on a
	// copy of the pristine tree (.jsonl and .bin taken for binary).
	diff := func(edits map[string][]byte) []byte {
		t.Helper()
		w := t.TempDir()
		git(w, "init", "-q", ".")
		for name, b := range files {
			p := filepath.Join(w, name)
			os.MkdirAll(filepath.Dir(p), 0o755)
			os.WriteFile(p, b, 0o644)
		}
		git(w, "add", "-A")
		git(w, "commit", "-q", "-m", "pristine")
		os.WriteFile(filepath.Join(w, ".git", "info", "attributes"), []byte("*.jsonl -diff\n*.bin -diff\n"), 0o644)
		for name, b := range edits {
			p := filepath.Join(w, name)
			if b == nil {
				os.Remove(p)
				continue
			}
			os.MkdirAll(filepath.Dir(p), 0o755)
			if err := os.WriteFile(p, b, 0o644); err != nil {
				t.Fatal(err)
			}
		}
		git(w, "add", "-A")
		return git(w, "diff", "--cached", "--binary")
	}

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
			dir := t.TempDir()
			patch := filepath.Join(dir, "change.diff")
			if err := os.WriteFile(patch, diff(c.edits), 0o600); err != nil {
				t.Fatal(err)
			}
			report := filepath.Join(dir, "report.json")
			run := exec.Command(bin, "evaluate", "contamination", "--patch", patch, "--problems", problemsPath, "--pristine", pristine, "--report", report)
			var stderr bytes.Buffer
			run.Stderr = &stderr
			err := run.Run()
			code := 0
			var ee *exec.ExitError
			if errors.As(err, &ee) {
				code = ee.ExitCode()
			} else if err != nil {
				t.Fatal(err)
			}
			if code != c.exit {
				t.Fatalf("exit %d, want %d: %s", code, c.exit, stderr.String())
			}
			chk, err := evaluate.LoadContaminationCheck(report)
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
			if c.exit == 4 && !strings.Contains(stderr.String(), "contaminated: ") {
				t.Errorf("stderr names no evidence: %s", stderr.String())
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
