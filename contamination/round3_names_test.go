package contamination

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// Round three, family 5: the quiet name rule on realistic NeMo RL patches,
// written by the real git over NeMo RL's own files (testdata/nemorl).

// nemoRLTree puts testdata/nemorl under NeMo-RL/ of a fresh git work tree,
// committed, and returns it with the pristine reader the eval job has.
func nemoRLTree(t *testing.T) (*gitWork, func(string) ([]byte, error)) {
	g := newGitWork(t)
	root := filepath.Join("testdata", "nemorl")
	files := map[string][]byte{}
	filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() || strings.HasSuffix(p, "README.md") {
			return nil
		}
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		rel, _ := filepath.Rel(root, p)
		files["NeMo-RL/"+filepath.ToSlash(rel)] = b
		g.write("NeMo-RL/"+rel, b)
		return nil
	})
	if len(files) < 8 {
		t.Fatalf("testdata/nemorl: %d files", len(files))
	}
	g.write("recipe.yaml", []byte("grpo:\n  max_num_steps: 20\ndata:\n  train:\n    dataset_name: OpenMathInstruct-2\n"))
	g.git("add", "-A")
	g.git("commit", "-q", "-m", "pristine")
	return g, func(p string) ([]byte, error) {
		if b, ok := files[p]; ok {
			return b, nil
		}
		return nil, os.ErrNotExist
	}
}

func (g *gitWork) read(name string) []byte {
	b, err := os.ReadFile(filepath.Join(g.dir, name))
	if err != nil {
		g.t.Fatal(err)
	}
	return b
}

func (g *gitWork) edit(name string, f func(string) string) {
	g.t.Helper()
	old := string(g.read(name))
	s := f(old)
	if s == old {
		g.t.Fatalf("edit of %s changed nothing", name)
	}
	g.write(name, []byte(s))
}

// diff is the staged change as `git diff --cached -M --binary` writes it,
// the tree then reset to pristine.
func (g *gitWork) diff() []byte {
	g.git("add", "-A")
	args := []string{"diff", "--cached", "-M", "--binary"}
	if g.copies != nil && *g.copies {
		args = append(args, "-C", "--find-copies-harder")
	}
	d := g.git(args...)
	g.git("reset", "-q", "--hard")
	g.git("clean", "-qfd")
	return d
}

const rdir = "NeMo-RL/nemo_rl/data/datasets/response_datasets/"

func TestNameRuleNeMoRL(t *testing.T) {
	ps := standInProblems()
	g, pristine := nemoRLTree(t)
	copies := false
	g.copies = &copies
	ordinary := map[string]func(){
		"aime.py renamed (a refactor), its import updated": func() {
			g.git("mv", rdir+"aime.py", rdir+"aime_dataset.py")
			g.edit(rdir+"__init__.py", func(s string) string {
				return strings.Replace(s, "response_datasets.aime import", "response_datasets.aime_dataset import", 1)
			})
		},
		"aime.py copied to a second AIME module (git diff -C)": func() {
			g.write(rdir+"aime_v2.py", g.read(rdir+"aime.py"))
			copies = true
		},
		"the registry reordered and reformatted": func() {
			g.edit(rdir+"__init__.py", func(s string) string {
				s = strings.Replace(s, `    "AIME2025": partial(AIMEDataset, variant="2025"),`+"\n", "", 1)
				s = strings.Replace(s, `    "AIME2026": partial(AIMEDataset, variant="2026"),`, `    "AIME2026": partial(AIMEDataset, variant="2026"),`+"\n"+`    "AIME2025": functools.partial(AIMEDataset, variant='2025'),`, 1)
				return s
			})
		},
		"the AIME eval config moved to a module of its own": func() {
			g.edit("NeMo-RL/nemo_rl/data/__init__.py", func(s string) string {
				i := strings.Index(s, "class AIMEEvalDataConfig(TypedDict):")
				j := strings.Index(s[i:], "\n\n\n") + i
				g.write("NeMo-RL/nemo_rl/data/aime_config.py", []byte("from typing import Literal, TypedDict\n\n\n"+s[i:j]+"\n"))
				return s[:i] + "from nemo_rl.data.aime_config import AIMEEvalDataConfig" + s[j:]
			})
		},
		"run_eval.py: the AIME names as a constant": func() {
			g.edit("NeMo-RL/examples/run_eval.py", func(s string) string {
				return strings.Replace(s, `if data_config["dataset_name"] in {"AIME2024", "AIME2025", "AIME2026"}:`,
					`if data_config["dataset_name"] in AIME_NAMES:`, 1) + "\nAIME_NAMES = (\"AIME2024\", \"AIME2025\", \"AIME2026\")\n"
			})
		},
		"docs: a sentence about the AIME keys": func() {
			g.edit("NeMo-RL/docs/guides/grpo.md", func(s string) string {
				return s + "\nNote: `AIME2025` (variant \"2025\", `opencompass/AIME2025`) is the held-out eval set of this recipe; train on `AIME2024`.\n"
			})
		},
		"recipe comment: AIME 2025 held out": func() {
			g.edit("recipe.yaml", func(s string) string {
				return strings.Replace(s, "data:\n", "# AIME 2025 (aime_2025, AIME2025) is held out: the eval set; never train on it\ndata:\n", 1) +
					"  validation:\n    - dataset_name: AIME2024  # not AIME2025\n      repeat: 16\n"
			})
		},
		"a config: AIME2024 validation beside the seed 2025": func() {
			g.edit("NeMo-RL/examples/configs/grpo_math_1B.yaml", func(s string) string {
				return strings.Replace(s, "  validation: null\n", "  validation:\n    dataset_name: AIME2024\n    repeat: 16\n    seed: 2025\n", 1)
			})
		},
		"a log message and a docstring": func() {
			g.edit("NeMo-RL/examples/run_eval.py", func(s string) string {
				return s + "\n\ndef note():\n    \"\"\"Scores AIME 2025 problems held out from training.\"\"\"\n    print(\"never train on AIME 2025 or aime_2025 data\")\n"
			})
		},
	}
	for name, change := range ordinary {
		copies = false
		change()
		patch := g.diff()
		for _, o := range []Options{{Pristine: pristine}, {}} {
			rep := CheckWith(patch, ps, o)
			if o.Pristine == nil && findingOf(rep, KindBinary) != nil {
				continue // a rename without the pristine tree is refused, as before
			}
			if rep.Contaminated {
				t.Errorf("%s (pristine %v): flagged: %+v\n%s", name, o.Pristine != nil, rep.Findings, patch)
			}
		}
	}
	dirty := map[string]func(){
		"the recipe trains on AIME2025": func() {
			g.edit("recipe.yaml", func(s string) string { return strings.Replace(s, "OpenMathInstruct-2", "AIME2025", 1) })
		},
		"a config's AIME block switched to 2025 (the loader a context line)": func() {
			g.edit("NeMo-RL/examples/configs/grpo_math_1B.yaml", func(s string) string {
				return strings.Replace(s, "  validation: null\n", "  validation: null\n  extra:\n    dataset_name: nemo_rl.data.datasets.response_datasets.aime.AIMEDataset\n    split: train\n    repeat: 16\n    variant: \"2024\"\n", 1)
			})
			g.git("add", "-A")
			g.git("commit", "-q", "-m", "an AIME 2024 block")
			g.edit("NeMo-RL/examples/configs/grpo_math_1B.yaml", func(s string) string {
				return strings.Replace(s, `variant: "2024"`, `variant: "2025"`, 1)
			})
		},
		"a new registry key for the 2025 loader": func() {
			g.edit(rdir+"__init__.py", func(s string) string {
				return strings.Replace(s, `    "AIME2026": partial(AIMEDataset, variant="2026"),`, `    "AIME2026": partial(AIMEDataset, variant="2026"),`+"\n"+`    "math_extra": partial(AIMEDataset, variant="2025"),`, 1)
			})
		},
		"aime.py renamed into a training module": func() {
			g.git("mv", rdir+"aime.py", rdir+"math_extra.py")
		},
		"a loader pointed at the eval image's data": func() {
			g.write("NeMo-RL/data/extra.yaml", []byte("train:\n  data_path: /opt/nemorl/eval/aime25.jsonl\n"))
		},
		"a loader given the eval image's data directory": func() {
			g.write("NeMo-RL/data/extra.py", []byte("from datasets import load_dataset\n"+`ds = load_dataset("json", data_dir="/opt/nemorl/eval/")`+"\n"))
		},
		"a symlink to the eval image's data": func() {
			os.MkdirAll(filepath.Join(g.dir, "NeMo-RL/data"), 0o755)
			if err := os.Symlink("/opt/nemorl/eval/aime25.jsonl", filepath.Join(g.dir, "NeMo-RL/data/train.jsonl")); err != nil {
				t.Fatal(err)
			}
		},
	}
	for name, change := range dirty {
		change()
		patch := g.diff()
		if bytes.Contains(patch, []byte("an AIME 2024 block")) {
			t.Fatal("diff holds a commit message")
		}
		rep := CheckWith(patch, ps, Options{Pristine: func(p string) ([]byte, error) {
			// the tree as committed (the block case commits a base first)
			out, err := os.ReadFile(filepath.Join(g.dir, p))
			if err != nil {
				return pristine(p)
			}
			return out, nil
		}})
		if f := findingOf(rep, KindName); f == nil || !rep.Contaminated {
			t.Errorf("%s: not flagged: %+v\n%s", name, rep.Findings, patch)
		} else {
			t.Logf("%s: %s", name, f.Detail)
		}
		g.git("reset", "-q", "--hard", "HEAD")
	}
}
