package cli

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/nemorl/nemorl-slurm/evaluate"
)

// standInProblem is a row of the lab's stand-in AIME25 set.
type standInProblem struct {
	Question string `json:"question"`
	Answer   string `json:"expected_answer"`
}

// standInProblems returns the absolute path and the rows of the lab's
// stand-in AIME25 set (lab/stand-ins/aime25-stand-in.jsonl).
func standInProblems(t *testing.T) (string, []standInProblem) {
	t.Helper()
	path, err := filepath.Abs("../lab/stand-ins/aime25-stand-in.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var rows []standInProblem
	for i, l := range bytes.Split(bytes.TrimSpace(raw), []byte("\n")) {
		var r standInProblem
		if err := json.Unmarshal(l, &r); err != nil {
			t.Fatalf("%s:%d: %v", path, i+1, err)
		}
		rows = append(rows, r)
	}
	return path, rows
}

// gitTree is a pristine tree as the eval image holds it (Dir), and
// patches to it written by the real git.
type gitTree struct {
	t     *testing.T
	Dir   string
	files map[string][]byte
	// attributes, when set, is the work trees' .git/info/attributes
	// ("*.bin -diff": git writes those files as binary patches).
	attributes string
}

// newGitTree writes files (path → content) into a new pristine directory.
func newGitTree(t *testing.T, files map[string][]byte, attributes string) *gitTree {
	t.Helper()
	g := &gitTree{t: t, Dir: t.TempDir(), files: files, attributes: attributes}
	g.write(g.Dir, files)
	return g
}

// write writes files under dir; a nil content removes the file.
func (g *gitTree) write(dir string, files map[string][]byte) {
	g.t.Helper()
	for name, b := range files {
		p := filepath.Join(dir, name)
		if b == nil {
			if err := os.Remove(p); err != nil {
				g.t.Fatal(err)
			}
			continue
		}
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			g.t.Fatal(err)
		}
		if err := os.WriteFile(p, b, 0o644); err != nil {
			g.t.Fatal(err)
		}
	}
}

// git runs git in dir with no user or system configuration.
func (g *gitTree) git(dir string, args ...string) []byte {
	g.t.Helper()
	cmd := exec.Command("git", append([]string{"-c", "user.name=t", "-c", "user.email=t@example.invalid", "-c", "core.autocrlf=false"}, args...)...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GIT_CONFIG_NOSYSTEM=1", "GIT_CONFIG_GLOBAL=/dev/null", "HOME="+dir)
	out, err := cmd.Output()
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			g.t.Fatalf("git %v in %s: %v: %s", args, dir, err, ee.Stderr)
		}
		g.t.Fatalf("git %v in %s: %v", args, dir, err)
	}
	return out
}

// diff returns what `git diff --cached --binary` prints for edits (path →
// new content, nil: removed) made on a copy of the pristine tree.
func (g *gitTree) diff(edits map[string][]byte) []byte {
	g.t.Helper()
	w := g.t.TempDir()
	g.git(w, "init", "-q", ".")
	g.write(w, g.files)
	g.git(w, "add", "-A")
	g.git(w, "commit", "-q", "-m", "pristine")
	if g.attributes != "" {
		if err := os.WriteFile(filepath.Join(w, ".git", "info", "attributes"), []byte(g.attributes), 0o644); err != nil {
			g.t.Fatal(err)
		}
	}
	g.write(w, edits)
	g.git(w, "add", "-A")
	return g.git(w, "diff", "--cached", "--binary")
}

// contaminationRun is one `evaluate contamination` of the built binary.
type contaminationRun struct {
	code    int
	stderr  string
	check   evaluate.ContaminationCheck
	loadErr error // reading its report
}

// checkContamination runs bin's `evaluate contamination` on patch against
// the problems and the pristine tree.
func checkContamination(t *testing.T, bin string, patch []byte, problemsPath, pristine string) contaminationRun {
	t.Helper()
	dir := t.TempDir()
	p := filepath.Join(dir, "change.diff")
	if err := os.WriteFile(p, patch, 0o600); err != nil {
		t.Fatal(err)
	}
	report := filepath.Join(dir, "report.json")
	run := exec.Command(bin, "evaluate", "contamination", "--patch", p, "--problems", problemsPath, "--pristine", pristine, "--report", report)
	var stderr bytes.Buffer
	run.Stderr = &stderr
	var r contaminationRun
	err := run.Run()
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		r.code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	r.stderr = stderr.String()
	r.check, r.loadErr = evaluate.LoadContaminationCheck(report)
	return r
}
