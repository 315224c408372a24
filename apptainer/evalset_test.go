package apptainer

import (
	"flag"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite the generated eval-set check in defs/train.def")

// evalSetBlock returns the generated eval-set block of a definition's
// %test section text: from the BEGIN line to the END line, both included,
// each line as written ("" when there is none).
func evalSetBlock(t *testing.T, test string) string {
	t.Helper()
	lines := strings.SplitAfter(test, "\n")
	begin, end := -1, -1
	for i, l := range lines {
		switch strings.TrimSpace(l) {
		case evalSetBegin:
			if begin >= 0 {
				t.Fatal("two BEGIN lines of the eval-set check")
			}
			begin = i
		case evalSetEnd:
			if end >= 0 {
				t.Fatal("two END lines of the eval-set check")
			}
			end = i
		}
	}
	if begin < 0 && end < 0 {
		return ""
	}
	if begin < 0 || end < begin {
		t.Fatalf("eval-set check markers out of order (BEGIN line %d, END line %d)", begin, end)
	}
	b := strings.Join(lines[begin:end+1], "")
	if !strings.HasSuffix(b, "\n") {
		b += "\n"
	}
	return b
}

// TestEvalSetCheckInTrainDef: train.def's %test carries exactly the check
// EvalSetImageCheck generates from the Go lists (the ids, the path pattern,
// the roots, the source list), once; go test ./apptainer -update rewrites it
// (and places it before the layout line the first time).
func TestEvalSetCheckInTrainDef(t *testing.T) {
	want := EvalSetImageCheck()
	if *update {
		path := filepath.Join("defs", "train.def")
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		text := string(b)
		if old := evalSetBlock(t, text); old != "" {
			text = strings.Replace(text, old, want, 1)
		} else {
			const anchor = "    echo \"train image: layout OK\"\n"
			if strings.Count(text, anchor) != 1 {
				t.Fatalf("no single %q line to put the check before", strings.TrimSpace(anchor))
			}
			text = strings.Replace(text, anchor, want+anchor, 1)
		}
		if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
		t.Log("rewrote the eval-set check in", path, "(rebuild: the embedded copy is the one compiled in)")
		return
	}
	d, text := loadDef(t, "train")
	test := d.sections["test"].text() + "\n"
	got := evalSetBlock(t, test)
	if got == "" {
		t.Fatalf("train.def %%test has no eval-set check (go test ./apptainer -update adds it); want:\n%s", want)
	}
	if got != want {
		t.Errorf("train.def's eval-set check differs from apptainer/evalset.go (go test ./apptainer -update rewrites it)\ngot:\n%s\nwant:\n%s", got, want)
	}
	if n := strings.Count(text, evalSetBegin); n != 1 {
		t.Errorf("train.def has %d eval-set checks, want 1", n)
	}
	// It runs before the section's last line, under the section's fail.
	if i, j := strings.Index(test, evalSetBegin), strings.Index(test, "fail() {"); j < 0 || i < j {
		t.Errorf("the eval-set check comes before the %%test section's fail function")
	}
	if !strings.HasSuffix(strings.TrimSpace(test), `echo "train image: layout OK"`) {
		t.Errorf("%%test does not end with %s", `echo "train image: layout OK"`)
	}
	// The other images carry no such check (the eval image holds the set).
	for _, stage := range []string{"author", "eval"} {
		if _, text := loadDef(t, stage); strings.Contains(text, evalSetBegin) {
			t.Errorf("%s.def carries the train image's eval-set check", stage)
		}
	}
	// %post writes the list of the pinned sources' files the check exempts,
	// from every archive it unpacks.
	post := d.sections["post"].text()
	if !strings.Contains(post, `tar -tf "$B/archive.tar" | sed -e "s|^|$3/|" -e 's|/$||' >> "$PINS/source-files.txt"`) ||
		EvalSetSourceList != "/opt/nemorl/pins/source-files.txt" || !strings.Contains(post, "PINS=/opt/nemorl/pins") {
		t.Errorf("%%post does not list the archives' files in %s", EvalSetSourceList)
	}
	// HF_HOME holds no dataset cache at all.
	for _, s := range []string{
		`test "${HF_DATASETS_OFFLINE:-}" = 1 || fail`,
		`test ! -e /opt/nemorl/model/hf/datasets || fail`,
		`for d in /opt/nemorl/model/hf/hub/datasets--*; do`,
	} {
		if !strings.Contains(test, s) {
			t.Errorf("%%test lacks %q", s)
		}
	}
}

// TestEvalSetLists: the ids are org/name with nothing to quote, every one's
// cache names fall under the path pattern too, and the pattern picks the
// set's file names and not its neighbours'.
func TestEvalSetLists(t *testing.T) {
	idRe := regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]*/[A-Za-z0-9][A-Za-z0-9._-]*$`)
	seen := map[string]bool{}
	for _, id := range EvalSetDatasets {
		if !idRe.MatchString(id) {
			t.Errorf("id %q is not org/name", id)
		}
		if seen[strings.ToLower(id)] {
			t.Errorf("id %q twice", id)
		}
		seen[strings.ToLower(id)] = true
	}
	for _, id := range []string{"opencompass/AIME2025", "MathArena/aime_2025"} {
		if !seen[strings.ToLower(id)] {
			t.Errorf("%s (NeMo RL's and Gym's source) is not listed", id)
		}
	}
	re := regexp.MustCompile(`(?i)^` + EvalSetPathRegex + `$`)
	names := EvalSetCacheNames()
	if len(names) != 2*len(EvalSetDatasets) {
		t.Fatalf("%d cache names for %d ids", len(names), len(EvalSetDatasets))
	}
	for _, n := range names {
		for _, p := range []string{"/root/.cache/huggingface/hub/" + n + "/blobs/0a1b", "/opt/x/datasets/" + strings.ToLower(n) + "/default/0.0.0/f/x.arrow"} {
			if !re.MatchString(p) {
				t.Errorf("pattern misses %s", p)
			}
		}
	}
	for _, p := range []string{
		"/opt/nemorl/eval/aime25.jsonl",
		"/opt/nemorl/src/NeMo-RL/3rdparty/Gym-workspace/Gym/benchmarks/aime25/data/aime25_benchmark.jsonl",
		"/opt/nemorl/src/NeMo-RL/3rdparty/Gym-workspace/Gym/resources_servers/math_with_judge/data/aime25_validation.jsonl",
		"/opt/nemorl/src/NeMo-RL/nemo_rl/data/datasets/response_datasets/aime25.py",
		"/opt/data/AIME_2025.parquet", "/opt/data/aime-2025-II.csv", "/opt/data/aime_2024_2025.jsonl", "/opt/d/AIME25-x/r.json",
	} {
		if !re.MatchString(p) {
			t.Errorf("pattern misses %s", p)
		}
	}
	for _, p := range []string{
		"/opt/nemorl/src/NeMo-RL/nemo_rl/data/datasets/response_datasets/aime.py",
		"/opt/x/resources_servers/math_with_judge/data/aime24_validation_metrics.json",
		"/opt/x/claimed_2025.txt", "/opt/x/disclaimer-v25.md", "/opt/x/aime/2025/notes", "/opt/x/lib/python3.12/site-packages/x-2.25.0.dist-info/RECORD",
	} {
		if re.MatchString(p) {
			t.Errorf("pattern matches %s", p)
		}
	}
}

// TestEvalSetCheckRuns runs the generated block under sh (GNU find, awk,
// grep, as in the image) on a fake image tree: it passes on the pristine
// sources' own files and Python loaders, and fails, naming the path, on a
// cache of a copy, a prepared JSONL, and a data file among the sources.
func TestEvalSetCheckRuns(t *testing.T) {
	sh, err := exec.LookPath("sh")
	if err != nil {
		t.Skip("no sh")
	}
	if out, err := exec.Command("find", "/dev/null", "-regextype", "posix-extended", "-iregex", ".*").CombinedOutput(); err != nil {
		t.Skipf("no GNU find: %v %s", err, out)
	}
	if _, err := os.Stat("/proc/self/mountinfo"); err != nil {
		t.Skip("no /proc/self/mountinfo")
	}
	root := t.TempDir()
	opt := filepath.Join(root, "opt")
	gym := filepath.Join(opt, "nemorl/src/NeMo-RL/3rdparty/Gym-workspace/Gym")
	tracked := []string{
		filepath.Join(opt, "nemorl/src/NeMo-RL/nemo_rl/data/datasets/response_datasets/aime.py"),
		filepath.Join(opt, "nemorl/src/NeMo-RL/examples/configs/evals/eval.yaml"),
		filepath.Join(gym, "benchmarks/aime25/config.yaml"),
		filepath.Join(gym, "benchmarks/aime25/manifest.yaml"),
		filepath.Join(gym, "benchmarks/aime25/data/aime25_benchmark_metrics.json"),
	}
	write := func(p string) {
		t.Helper()
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte("x\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for _, p := range tracked {
		write(p)
	}
	list := filepath.Join(opt, "nemorl/pins/source-files.txt")
	write(list)
	if err := os.WriteFile(list, []byte(strings.Join(tracked, "\n")+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	// Python loaders outside the sources (an installed package) and their
	// bytecode are code, not data.
	write(filepath.Join(opt, "nemorl/src/NeMo-RL/nemo_rl/data/datasets/response_datasets/__pycache__/aime25.cpython-312.pyc"))
	write(filepath.Join(opt, "nemorl/gym_venvs/x/.venv/lib/python3.12/site-packages/pkg/tasks/aime25.py"))
	other := filepath.Join(root, "usr")
	write(filepath.Join(other, "share/doc/claimed_2025.txt"))

	run := func() (string, error) {
		block := evalSetCheck([]string{opt, other, filepath.Join(root, "absent")}, list)
		script := "set -eu\nfail() { echo \"train image test: $*\" >&2; exit 1; }\n" + block + "echo clean\n"
		out, err := exec.Command(sh, "-c", script).CombinedOutput()
		return string(out), err
	}
	if out, err := run(); err != nil || strings.TrimSpace(out) != "clean" {
		t.Fatalf("the pristine tree fails the check: %v\n%s", err, out)
	}
	for _, c := range []struct{ file, named, clean string }{
		{ // a hub cache of a copy: the check names its directory
			filepath.Join(other, "lib/hf/hub/datasets--opencompass--AIME2025/snapshots/s/AIME2025-I/test.jsonl"),
			filepath.Join(other, "lib/hf/hub/datasets--opencompass--AIME2025"), filepath.Join(other, "lib"),
		},
		{ // the datasets library's cache
			filepath.Join(opt, "nemorl/model/hf/datasets/matharena___aime_2025/default/0.0.0/h/aime_2025-train.arrow"),
			filepath.Join(opt, "nemorl/model/hf/datasets/matharena___aime_2025"), filepath.Join(opt, "nemorl/model"),
		},
		{ // the Gym prepare script's output, beside the sources' own files
			filepath.Join(gym, "benchmarks/aime25/data/aime25_benchmark.jsonl"), "", "",
		},
		{filepath.Join(opt, "nemorl/src/extra/AIME_2025.parquet"), "", filepath.Join(opt, "nemorl/src/extra")},
		{filepath.Join(opt, "nemorl/src/aime25_problems.txt"), "", ""},
		{filepath.Join(opt, "conda/share/aime_2024_2025/p.json"), "", filepath.Join(opt, "conda")},
	} {
		write(c.file)
		named := c.named
		if named == "" {
			named = c.file
		}
		out, err := run()
		if err == nil || !strings.Contains(out, "train image test: ") || !strings.Contains(out, named) {
			t.Errorf("%s: the check passed or did not name %s: %v\n%s", c.file, named, err, out)
		}
		clean := c.clean
		if clean == "" {
			clean = c.file
		}
		if err := os.RemoveAll(clean); err != nil {
			t.Fatal(err)
		}
		if out, err := run(); err != nil {
			t.Fatalf("after removing %s: %v\n%s", clean, err, out)
		}
	}
	// An empty cache directory of a copy fails too.
	empty := filepath.Join(opt, "conda/.cache/huggingface/hub/datasets--TIGER-Lab--AIME25")
	if err := os.MkdirAll(empty, 0o755); err != nil {
		t.Fatal(err)
	}
	if out, err := run(); err == nil || !strings.Contains(out, "Hugging Face caches of the eval set") || !strings.Contains(out, empty) {
		t.Errorf("empty cache directory: %v\n%s", err, out)
	}
	if err := os.RemoveAll(filepath.Join(opt, "conda")); err != nil {
		t.Fatal(err)
	}
	// A data file among the pinned sources' own files is not exempt.
	data := filepath.Join(gym, "benchmarks/aime25/data/aime25_validation.jsonl")
	write(data)
	if err := os.WriteFile(list, []byte(strings.Join(append(tracked, data), "\n")+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := run(); err == nil || !strings.Contains(out, data) {
		t.Errorf("a tracked JSONL of the set passed: %v\n%s", err, out)
	}
	if err := os.Remove(list); err != nil {
		t.Fatal(err)
	}
	if out, err := run(); err == nil || !strings.Contains(out, "source-files.txt") {
		t.Errorf("no source list passed: %v\n%s", err, out)
	}
}
