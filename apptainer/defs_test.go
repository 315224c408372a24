package apptainer

import (
	"bufio"
	"fmt"
	"regexp"
	"strings"
	"testing"

	"github.com/nemorl/nemorl-slurm/configs"

	"github.com/nemorl/nemorl-slurm/stages"
)

// defFile is an Apptainer definition file split into its header (the
// "Key: value" lines and comments before the first section) and its
// sections ("%name args" lines and the lines up to the next section).
type defFile struct {
	header   map[string]string
	comments []string // header comment lines, "#" included
	sections map[string]*defSection
	order    []string
}

type defSection struct {
	args string   // what follows %name on its line ("-c /bin/bash")
	body []string // the section's lines, as written
}

// text is the section's body joined by newlines.
func (s *defSection) text() string { return strings.Join(s.body, "\n") }

// parseDef is a small section splitter: as in Apptainer's parser, a line
// whose first word starts with '%' opens a section (indentation does not
// hide it); before the first one only blank lines, '#' comments and
// "Key: value" header lines are allowed; a section may appear once.
func parseDef(data string) (*defFile, error) {
	d := &defFile{header: map[string]string{}, sections: map[string]*defSection{}}
	var cur *defSection
	sc := bufio.NewScanner(strings.NewReader(data))
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	n := 0
	for sc.Scan() {
		n++
		line := sc.Text()
		if strings.HasPrefix(strings.TrimLeft(line, " \t"), "%") {
			fields := strings.Fields(line)
			name := strings.TrimPrefix(fields[0], "%")
			if name == "" {
				return nil, fmt.Errorf("line %d: empty section name", n)
			}
			if _, dup := d.sections[name]; dup {
				return nil, fmt.Errorf("line %d: section %%%s appears twice", n, name)
			}
			cur = &defSection{args: strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(line), fields[0]))}
			d.sections[name] = cur
			d.order = append(d.order, name)
			continue
		}
		if cur != nil {
			cur.body = append(cur.body, line)
			continue
		}
		t := strings.TrimSpace(line)
		switch {
		case t == "":
		case strings.HasPrefix(t, "#"):
			d.comments = append(d.comments, t)
		default:
			k, v, ok := strings.Cut(t, ":")
			if !ok || strings.TrimSpace(k) == "" || strings.ContainsAny(strings.TrimSpace(k), " \t") {
				return nil, fmt.Errorf("line %d: %q is not a header line (Key: value)", n, t)
			}
			k = strings.TrimSpace(k)
			if _, dup := d.header[k]; dup {
				return nil, fmt.Errorf("line %d: header %s appears twice", n, k)
			}
			d.header[k] = strings.TrimSpace(v)
		}
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if len(d.sections) == 0 {
		return nil, fmt.Errorf("no sections")
	}
	return d, nil
}

// labels reads the %labels section: one "key value" pair per line.
func (d *defFile) labels(t *testing.T) map[string]string {
	t.Helper()
	s := d.sections["labels"]
	if s == nil {
		t.Fatal("no %labels section")
	}
	m := map[string]string{}
	for _, l := range s.body {
		l = strings.TrimSpace(l)
		if l == "" {
			continue
		}
		k, v, ok := strings.Cut(l, " ")
		if !ok || strings.TrimSpace(v) == "" {
			t.Fatalf("%%labels line %q is not \"key value\"", l)
		}
		if _, dup := m[k]; dup {
			t.Fatalf("label %s twice", k)
		}
		m[k] = strings.TrimSpace(v)
	}
	return m
}

func loadDef(t *testing.T, stage string) (*defFile, string) {
	t.Helper()
	b, err := Definition(stages.Stage(stage))
	if err != nil {
		t.Fatal(err)
	}
	d, err := parseDef(string(b))
	if err != nil {
		t.Fatalf("%s.def: %v", stage, err)
	}
	return d, string(b)
}

func TestParseDef(t *testing.T) {
	d, err := parseDef("# c\nBootstrap: docker\nFrom: x@sha256:00\n\n%post -c /bin/bash\n  echo '%s' hi\n%labels\n  a b\n")
	if err != nil {
		t.Fatal(err)
	}
	if d.header["Bootstrap"] != "docker" || d.header["From"] != "x@sha256:00" || len(d.comments) != 1 {
		t.Fatalf("header %v comments %v", d.header, d.comments)
	}
	if got := strings.Join(d.order, ","); got != "post,labels" {
		t.Fatalf("order %s", got)
	}
	if p := d.sections["post"]; p.args != "-c /bin/bash" || len(p.body) != 1 {
		t.Fatalf("post %+v", p)
	}
	for _, bad := range []string{
		"Bootstrap: docker\n",                 // no sections
		"Bootstrap docker\n%post\n",           // not Key: value
		"From: a\nFrom: b\n%post\n",           // header twice
		"From: a\n%post\ntrue\n%post\ntrue\n", // section twice
		"From: a\n%\n",                        // empty section name
		"From: a\nnot a header line\n%post\n", // junk before the sections
		"From: a\n%post\ntrue\n  %post\n",     // an indented section line still opens one
	} {
		if _, err := parseDef(bad); err == nil {
			t.Errorf("parseDef(%q) accepted", bad)
		}
	}
}

func TestDefinitionUnknownStage(t *testing.T) {
	for _, s := range []string{"", "lab", "Author", "../defs/author"} {
		if _, err := Definition(stages.Stage(s)); err == nil {
			t.Errorf("Definition(%q) succeeded", s)
		}
	}
}

var pinnedFrom = regexp.MustCompile(`^[a-z0-9][a-z0-9._/-]*(:[A-Za-z0-9._-]+)?@sha256:[0-9a-f]{64}$`)

func TestDefinitionsStructure(t *testing.T) {
	for _, st := range stages.All {
		stage := string(st)
		t.Run(stage, func(t *testing.T) {
			d, text := loadDef(t, stage)
			if d.header["Bootstrap"] != "docker" {
				t.Errorf("Bootstrap %q, want docker", d.header["Bootstrap"])
			}
			from := d.header["From"]
			if from == "" {
				t.Fatal("no From:")
			}
			if !pinnedFrom.MatchString(from) {
				pin := false
				for _, c := range d.comments {
					if strings.HasPrefix(c, "# PIN:") {
						pin = true
					}
				}
				if !pin {
					t.Errorf("From: %s is not pinned by @sha256:<64 hex> and there is no # PIN: comment", from)
				}
			}
			for _, s := range []string{"files", "post", "environment", "labels", "help", "test"} {
				sec := d.sections[s]
				if sec == nil || strings.TrimSpace(sec.text()) == "" {
					t.Errorf("no (or empty) %%%s section", s)
				}
			}
			if t.Failed() {
				return
			}
			// %files: exactly our binary, to the fixed path.
			var files [][]string
			for _, l := range d.sections["files"].body {
				if f := strings.Fields(l); len(f) > 0 {
					files = append(files, f)
				}
			}
			if len(files) != 1 || len(files[0]) != 2 || files[0][0] != "bin/nemorl-slurm" || files[0][1] != "/opt/nemorl/bin/nemorl-slurm" {
				t.Errorf("%%files %v, want [[bin/nemorl-slurm /opt/nemorl/bin/nemorl-slurm]]", files)
			}
			// %post: bash, failing on the first error.
			post := d.sections["post"]
			if post.args != "-c /bin/bash" {
				t.Errorf("%%post args %q, want -c /bin/bash", post.args)
			}
			first := ""
			for _, l := range post.body {
				if l = strings.TrimSpace(l); l != "" && !strings.HasPrefix(l, "#") {
					first = l
					break
				}
			}
			if first != "set -euo pipefail" {
				t.Errorf("%%post starts with %q, want set -euo pipefail", first)
			}
			// Apptainer would read {{ NAME }} as a build argument to fill in.
			if strings.Contains(text, "{{") {
				t.Error("{{ in the definition (Apptainer template syntax)")
			}
			// %test: the binary answers --version.
			if !strings.Contains(d.sections["test"].text(), "/opt/nemorl/bin/nemorl-slurm --version") {
				t.Errorf("%%test does not run /opt/nemorl/bin/nemorl-slurm --version")
			}
			if !strings.Contains(d.sections["help"].text(), stage) {
				t.Errorf("%%help does not name the %s stage", stage)
			}
		})
	}
}

func TestDefinitionsPinsAndLabels(t *testing.T) {
	for _, st := range stages.All {
		stage := string(st)
		t.Run(stage, func(t *testing.T) {
			d, _ := loadDef(t, stage)
			l := d.labels(t)
			want := map[string]string{
				"org.nemorl.stage":               stage,
				"org.nemorl.nemo_rl":             configs.NemoRLCommit,
				"org.nemorl.gym":                 configs.GymCommit,
				"org.nemorl.base_model":          configs.BaseModel,
				"org.nemorl.base_model_revision": configs.BaseModelRev,
			}
			for k, v := range want {
				if l[k] != v {
					t.Errorf("label %s = %q, want %q", k, l[k], v)
				}
			}
			post := d.sections["post"].text()
			test := d.sections["test"].text()
			for _, pin := range []string{"NEMO_RL_REV=" + configs.NemoRLCommit, "GYM_REV=" + configs.GymCommit} {
				if !strings.Contains(post, pin) {
					t.Errorf("%%post does not set %s", pin)
				}
			}
			for _, pin := range []string{configs.NemoRLCommit, configs.GymCommit} {
				if !strings.Contains(test, pin) {
					t.Errorf("%%test does not check the pin %s", pin)
				}
			}
			if stage != "author" {
				if !strings.Contains(post, "BASE_MODEL="+configs.BaseModel) || !strings.Contains(post, "BASE_MODEL_REV="+configs.BaseModelRev) {
					t.Errorf("%%post does not fetch the base model at the pinned revision")
				}
				if !strings.Contains(test, configs.BaseModelRev) {
					t.Errorf("%%test does not check the model revision")
				}
			}
			if stage == "author" {
				v := l["org.nemorl.claude_code"]
				if !regexp.MustCompile(`^\d+\.\d+\.\d+$`).MatchString(v) {
					t.Fatalf("label org.nemorl.claude_code %q is not a fixed version", v)
				}
				if !strings.Contains(post, "CLAUDE_CODE_VERSION="+v) || !strings.Contains(test, v) {
					t.Errorf("%%post/%%test do not use Claude Code %s", v)
				}
				if !strings.Contains(post, "NODE_VERSION=22.15.0") {
					t.Errorf("%%post does not install Node.js 22.15.0")
				}
			} else if _, ok := l["org.nemorl.claude_code"]; ok {
				t.Error("org.nemorl.claude_code on a GPU image")
			}
		})
	}
}

func TestDefinitionsLayout(t *testing.T) {
	const (
		nemoRL = "/opt/nemorl/src/NeMo-RL"
		gym    = "/opt/nemorl/src/NeMo-RL/3rdparty/Gym-workspace/Gym"
	)
	need := map[string][]string{
		"author": {nemoRL, gym, "/opt/nemorl/src/recipe.yaml", "/opt/nemorl/src/train_math.jsonl",
			"/opt/nemorl/gym-venv", "OMI2_REV=469216e3f46f4dacf476b382e192485ea51a143e", "-eq 512"},
		"train": {nemoRL, gym, "/opt/nemorl/src/recipe.yaml", "/opt/nemorl/src/train_math.jsonl",
			"/opt/nemorl/src/NeMo-RL/.venv", "uv sync --frozen --extra vllm --extra nemo_gym",
			"OMI2_REV=469216e3f46f4dacf476b382e192485ea51a143e", "-eq 512", "/opt/nemorl/model"},
		"eval": {nemoRL, gym, "/opt/nemorl/src/NeMo-RL/.venv", "uv sync --frozen --extra vllm --extra nemo_gym",
			"/opt/nemorl/eval/aime25.jsonl", "MathArena/aime_2025", "/opt/nemorl/model/config.json",
			"/opt/nemorl/model/tokenizer.json"},
	}
	for _, st := range stages.All {
		stage := string(st)
		t.Run(stage, func(t *testing.T) {
			d, text := loadDef(t, stage)
			for _, s := range need[stage] {
				if !strings.Contains(text, s) {
					t.Errorf("%s.def does not mention %q", stage, s)
				}
			}
			env := d.sections["environment"].text()
			if stage != "author" {
				want := []string{"UV_OFFLINE=1", "HF_HUB_OFFLINE=1", "HF_DATASETS_OFFLINE=1"}
				if stage == "train" { // the snapshot is loaded by name from the HF cache
					want = append(want, "HF_HOME=/opt/nemorl/model/")
				}
				for _, s := range want {
					if !strings.Contains(env, s) {
						t.Errorf("%%environment does not set %s", s)
					}
				}
				for _, p := range []string{"nvidia-cutlass-dsl-libs-base", "deep-ep", "deep-gemm", "mamba-ssm", "causal-conv1d"} {
					if !strings.Contains(d.sections["post"].text(), p) {
						t.Errorf("%%post lacks the run.sh --no-install-package %s", p)
					}
				}
			}
			if stage == "eval" {
				post := d.sections["post"].text()
				if !strings.Contains(post, `"$EV/aime25.jsonl")" -eq 30 ] || die`) {
					t.Errorf("%%post does not fail the build unless aime25.jsonl has exactly 30 rows")
				}
				if !strings.Contains(d.sections["test"].text(), `"$EV/aime25.jsonl")" -eq 30`) {
					t.Errorf("%%test does not check the 30 AIME25 rows")
				}
			}
		})
	}
}

// TestDefinitionsKeepStagesApart checks what each image must not know about:
// the eval image nothing of the author's work or the trainer, the author and
// train images nothing of the benchmark or its scoring. The train image's
// one exception is the generated check that it holds no copy of the set
// (EvalSetImageCheck, TestEvalSetCheckInTrainDef), which names it to look
// for it: it is left out here, and only when it is exactly the generated
// block.
func TestDefinitionsKeepStagesApart(t *testing.T) {
	forbidden := map[string][]string{
		"author": {"aime", "evaluate"},
		"train":  {"aime"},
		"eval":   {"recipe.yaml", "train_math", "change.diff", "launch"},
	}
	for _, st := range stages.All {
		stage := string(st)
		_, text := loadDef(t, stage)
		if stage == "train" {
			text = strings.Replace(text, EvalSetImageCheck(), "", 1)
		}
		low := strings.ToLower(text)
		for _, w := range forbidden[stage] {
			if i := strings.Index(low, w); i >= 0 {
				line := strings.Count(text[:i], "\n") + 1
				t.Errorf("%s.def mentions %q (line %d)", stage, w, line)
			}
		}
	}
}
