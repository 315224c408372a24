package author

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nemorl/nemorl-slurm/record"
)

func requireGit(t *testing.T) {
	t.Helper()
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("git not installed")
	}
}

// testGit runs git for the test itself (the "policy" or a checker), with
// an environment of its own.
func testGit(t *testing.T, dir string, args ...string) string {
	t.Helper()
	cmd := exec.Command("git", args...)
	cmd.Dir = dir
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + t.TempDir(), "GIT_CONFIG_NOSYSTEM=1",
		"GIT_CEILING_DIRECTORIES=" + filepath.Dir(dir),
		"GIT_AUTHOR_NAME=policy", "GIT_AUTHOR_EMAIL=p@x", "GIT_COMMITTER_NAME=policy", "GIT_COMMITTER_EMAIL=p@x"}
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("git %v: %v\n%s", args, err, out)
	}
	return string(out)
}

func writeFiles(t *testing.T, root string, files map[string]string) {
	t.Helper()
	for name, content := range files {
		p := filepath.Join(root, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

func binary(seed byte, n int) string {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(i*7) ^ seed
	}
	b[3] = 0 // a NUL: git sees binary data
	return string(b)
}

// newWorkDir lays out a small work dir (recipe.yaml, NeMo-RL/ with a
// binary file and the vendored Gym path, other.txt) and returns it.
func newWorkDir(t *testing.T) string {
	t.Helper()
	work := filepath.Join(t.TempDir(), "work")
	writeFiles(t, work, map[string]string{
		"recipe.yaml":        "grpo:\n  num_prompts_per_step: 8\npolicy:\n  lr: 1.0e-6\n",
		"train_math.jsonl":   `{"problem":"1+1","expected_answer":"2"}` + "\n",
		"other.txt":          "not part of the patch\n",
		"NeMo-RL/a.py":       "def loss(x):\n    return x\n",
		"NeMo-RL/b.py":       "# to be deleted\nimport os\nprint(os.getcwd())\n",
		"NeMo-RL/c.py":       "# to be renamed\nVALUE = 42\nOTHER = 'unchanged'\nMORE = [1, 2, 3]\n",
		"NeMo-RL/bin.dat":    binary(1, 4096),
		"NeMo-RL/.gitignore": "__pycache__/\n",
		"NeMo-RL/3rdparty/Gym-workspace/Gym/nemo_gym/env.py": "class Env:\n    pass\n",
	})
	return work
}

// copyTree copies src to dst, without .git.
func copyTree(t *testing.T, src, dst string) {
	t.Helper()
	err := filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, p)
		if d.IsDir() && d.Name() == ".git" {
			return filepath.SkipDir
		}
		target := filepath.Join(dst, rel)
		if d.IsDir() {
			return os.MkdirAll(target, 0o755)
		}
		data, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		info, _ := d.Info()
		return os.WriteFile(target, data, info.Mode().Perm())
	})
	if err != nil {
		t.Fatal(err)
	}
}

// treeFiles maps the files under root/sub (relative to root) to their
// content and mode.
func treeFiles(t *testing.T, root string, subs ...string) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, sub := range subs {
		base := filepath.Join(root, sub)
		if _, err := os.Lstat(base); err != nil {
			continue
		}
		filepath.WalkDir(base, func(p string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() {
				return err
			}
			rel, _ := filepath.Rel(root, p)
			data, err := os.ReadFile(p)
			if err != nil {
				t.Fatal(err)
			}
			info, _ := d.Info()
			out[rel] = info.Mode().String() + " " + string(data)
			return nil
		})
	}
	return out
}

// diffFiles lists the "a/" names of a patch's "diff --git" lines.
func diffFiles(patch []byte) []string {
	var out []string
	for _, line := range strings.Split(string(patch), "\n") {
		if rest, ok := strings.CutPrefix(line, "diff --git a/"); ok {
			name, _, _ := strings.Cut(rest, " b/")
			out = append(out, name)
		}
	}
	slices.Sort(out)
	return out
}

func writeTranscript(t *testing.T, fixture string) string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("testdata", fixture))
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(t.TempDir(), "claude.stdout")
	if err := os.WriteFile(p, data, 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func fixedNow() time.Time { return goldenTime }

// checkOutputs checks the files Finish wrote against its record.
func checkOutputs(t *testing.T, rec *record.Author, out string) []byte {
	t.Helper()
	if err := rec.Validate(); err != nil {
		t.Fatalf("record does not validate: %v", err)
	}
	if _, err := record.Format(rec); err != nil {
		t.Fatalf("record does not format: %v", err)
	}
	patch, err := os.ReadFile(filepath.Join(out, PatchFile))
	if err != nil {
		t.Fatal(err)
	}
	if err := record.VerifyPatch(rec, patch); err != nil {
		t.Fatalf("VerifyPatch: %v", err)
	}
	resp, err := os.ReadFile(filepath.Join(out, ResponseFile))
	if err != nil {
		t.Fatal(err)
	}
	if sum := sha256.Sum256(resp); hex.EncodeToString(sum[:]) != rec.ResponseSHA256 {
		t.Fatalf("response_sha256 %s is not that of response.json", rec.ResponseSHA256)
	}
	var m map[string]any
	if err := json.Unmarshal(resp, &m); err != nil || m["object"] != "response" {
		t.Fatalf("response.json: %v %v", err, m["object"])
	}
	entries, _ := os.ReadDir(out)
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
		if info, _ := e.Info(); info.Mode().Perm() != 0o600 {
			t.Errorf("%s has mode %v, want 0600", e.Name(), info.Mode())
		}
	}
	if !reflect.DeepEqual(names, []string{PatchFile, ResponseFile}) {
		t.Errorf("output dir holds %v (temporary files left?)", names)
	}
	return patch
}

func TestFinish(t *testing.T) {
	requireGit(t)
	ctx := context.Background()
	work := newWorkDir(t)
	base, err := Baseline(ctx, work)
	if err != nil {
		t.Fatal(err)
	}
	if !isObjectID(base) {
		t.Fatalf("Baseline returned %q", base)
	}
	pristine := filepath.Join(t.TempDir(), "pristine")
	copyTree(t, work, pristine)
	indexBefore, _ := os.ReadFile(filepath.Join(work, ".git", "index"))

	// The policy's edits.
	writeFiles(t, work, map[string]string{
		"recipe.yaml":     "grpo:\n  num_prompts_per_step: 8\npolicy:\n  lr: 3.0e-6\n",
		"NeMo-RL/new.py":  "def clipped_loss(ratio, adv, eps=0.2):\n    return -min(ratio * adv, clip(ratio, eps) * adv)\n",
		"NeMo-RL/bin.dat": binary(9, 4096),
		"NeMo-RL/3rdparty/Gym-workspace/Gym/nemo_gym/env.py": "class Env:\n    reward_scale = 2.0\n",
		"NeMo-RL/nested/deep/added.bin":                      binary(3, 100),
		"other.txt":                                          "touched, but outside the patch\n",
		"notes.md":                                           "a new top-level file, outside the patch\n",
		"train_math.jsonl":                                   "{}\n",
		"NeMo-RL/__pycache__/a.cpython-312.pyc":              "ignored by NeMo-RL/.gitignore",
	})
	if err := os.Remove(filepath.Join(work, "NeMo-RL/b.py")); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(filepath.Join(work, "NeMo-RL/c.py"), filepath.Join(work, "NeMo-RL/d.py")); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(filepath.Join(work, "NeMo-RL/a.py"), 0o755); err != nil {
		t.Fatal(err)
	}

	out := filepath.Join(t.TempDir(), "out", "author")
	rec, err := Finish(ctx, FinishInput{WorkDir: work, Baseline: base, TranscriptPath: writeTranscript(t, "full.jsonl"),
		OutDir: out, ExitStatus: 0, Model: "policy-model", Now: fixedNow})
	if err != nil {
		t.Fatal(err)
	}
	patch := checkOutputs(t, rec, out)

	wantFiles := []string{
		"NeMo-RL/3rdparty/Gym-workspace/Gym/nemo_gym/env.py",
		"NeMo-RL/a.py", // mode change only
		"NeMo-RL/b.py", // deleted
		"NeMo-RL/bin.dat",
		"NeMo-RL/c.py", // renamed to d.py: one section
		"NeMo-RL/nested/deep/added.bin",
		"NeMo-RL/new.py",
		"recipe.yaml",
	}
	if got := diffFiles(patch); !reflect.DeepEqual(got, wantFiles) {
		t.Errorf("files in change.diff:\n got %v\nwant %v\n%s", got, wantFiles, patch)
	}
	if rec.FilesChanged != len(wantFiles) || rec.PatchBytes != int64(len(patch)) || rec.Turns != 4 || rec.ModelCalls != 4 ||
		rec.TerminalReason != record.TerminalSuccess || rec.DroppedEvents != 0 || rec.ExitStatus != 0 || rec.TimedOut {
		t.Errorf("record %+v", rec)
	}
	for _, want := range []string{"GIT binary patch", "deleted file mode 100644", "rename from NeMo-RL/c.py", "old mode 100644\nnew mode 100755", "new file mode 100644"} {
		if !bytes.Contains(patch, []byte(want)) {
			t.Errorf("change.diff lacks %q", want)
		}
	}

	// The patch applies to a fresh copy of the baseline tree and reproduces
	// the policy's recipe.yaml and NeMo-RL/, and nothing else.
	diffPath := filepath.Join(out, PatchFile)
	testGit(t, pristine, "apply", "--check", diffPath)
	testGit(t, pristine, "apply", diffPath)
	want := treeFiles(t, work, "recipe.yaml", "NeMo-RL")
	delete(want, "NeMo-RL/__pycache__/a.cpython-312.pyc")
	if got := treeFiles(t, pristine, "recipe.yaml", "NeMo-RL"); !reflect.DeepEqual(got, want) {
		t.Errorf("patched tree differs from the work dir:\n got %v\nwant %v", keys(got), keys(want))
	}
	if got, _ := os.ReadFile(filepath.Join(pristine, "other.txt")); string(got) != "not part of the patch\n" {
		t.Errorf("other.txt changed by the patch: %q", got)
	}
	if _, err := os.Stat(filepath.Join(pristine, "notes.md")); err == nil {
		t.Error("notes.md created by the patch")
	}

	// Finish leaves the work dir's repository alone.
	if indexAfter, _ := os.ReadFile(filepath.Join(work, ".git", "index")); !bytes.Equal(indexBefore, indexAfter) {
		t.Error("Finish changed the work dir's .git/index")
	}

	var resp map[string]any
	data, _ := os.ReadFile(filepath.Join(out, ResponseFile))
	json.Unmarshal(data, &resp)
	if resp["model"] != "policy-model" || resp["status"] != "completed" || resp["created_at"] != float64(goldenTime.Unix()) {
		t.Errorf("response.json: model %v status %v created_at %v", resp["model"], resp["status"], resp["created_at"])
	}

	// Running Finish again (the same outputs) gives the same patch.
	rec2, err := Finish(ctx, FinishInput{WorkDir: work, Baseline: base, TranscriptPath: writeTranscript(t, "full.jsonl"),
		OutDir: out, Now: fixedNow})
	if err != nil {
		t.Fatal(err)
	}
	if rec2.PatchSHA256 != rec.PatchSHA256 || rec2.FilesChanged != rec.FilesChanged {
		t.Errorf("second Finish: %+v, first %+v", rec2, rec)
	}
}

func keys(m map[string]string) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

func TestFinishNoEdits(t *testing.T) {
	requireGit(t)
	ctx := context.Background()
	work := newWorkDir(t)
	base, err := Baseline(ctx, work)
	if err != nil {
		t.Fatal(err)
	}
	// Edits outside recipe.yaml and NeMo-RL/ only, and an ignored file.
	writeFiles(t, work, map[string]string{
		"other.txt":                 "changed\n",
		"scratch/x.py":              "print(1)\n",
		"NeMo-RL/__pycache__/a.pyc": "ignored",
		"train_math.jsonl":          "",
		"notes-outside.txt":         "outside\n",
	})
	for _, baseline := range []string{base, "", "HEAD"} {
		out := t.TempDir()
		rec, err := Finish(ctx, FinishInput{WorkDir: work, Baseline: baseline, TranscriptPath: writeTranscript(t, "truncated.jsonl"),
			OutDir: out, ExitStatus: -1, TimedOut: true, Now: fixedNow})
		if err != nil {
			t.Fatalf("baseline %q: %v", baseline, err)
		}
		patch := checkOutputs(t, rec, out)
		if len(patch) != 0 || rec.PatchBytes != 0 || rec.PatchSHA256 != record.EmptySHA256 || rec.FilesChanged != 0 {
			t.Errorf("baseline %q: record %+v, patch %q", baseline, rec, patch)
		}
		if rec.Turns != 2 || rec.ExitStatus != -1 || !rec.TimedOut {
			t.Errorf("record %+v", rec)
		}
		data, _ := os.ReadFile(filepath.Join(out, ResponseFile))
		if !bytes.Contains(data, []byte(`"status":"incomplete","incomplete_details":{"reason":"timeout"}`)) {
			t.Errorf("response.json: %.300s", data)
		}
	}
}

// TestFinishPolicyGitState: the policy committed its edits, planted hooks,
// a hostile repository config, an info/exclude hiding everything and a
// corrupt index. None of it runs or changes the patch.
func TestFinishPolicyGitState(t *testing.T) {
	requireGit(t)
	ctx := context.Background()
	work := newWorkDir(t)
	base, err := Baseline(ctx, work)
	if err != nil {
		t.Fatal(err)
	}
	pristine := filepath.Join(t.TempDir(), "pristine")
	copyTree(t, work, pristine)

	markers := t.TempDir()
	script := func(name string) string {
		p := filepath.Join(t.TempDir(), name)
		body := "#!/bin/sh\ntouch '" + filepath.Join(markers, name) + "'\ncat\n"
		if err := os.WriteFile(p, []byte(body), 0o755); err != nil {
			t.Fatal(err)
		}
		return p
	}
	hookDir := filepath.Join(work, ".git", "hooks")
	os.MkdirAll(hookDir, 0o755)
	evilHooks := t.TempDir()
	for _, h := range []string{"pre-commit", "post-commit", "post-index-change", "reference-transaction", "post-checkout", "pre-auto-gc"} {
		for _, dir := range []string{hookDir, evilHooks} {
			body := "#!/bin/sh\ntouch '" + filepath.Join(markers, "hook-"+h) + "'\n"
			if err := os.WriteFile(filepath.Join(dir, h), []byte(body), 0o755); err != nil {
				t.Fatal(err)
			}
		}
	}

	// The policy edits and commits with git (HEAD moves off the baseline).
	writeFiles(t, work, map[string]string{
		"recipe.yaml":              "grpo:\n  num_prompts_per_step: 8\npolicy:\n  lr: 5.0e-6\n",
		"NeMo-RL/new_loss.py":      "def loss(): pass\n",
		"NeMo-RL/.gitattributes":   "*.py filter=evil diff=evil\n",
		"NeMo-RL/uncommitted.py":   "x = 1\n",
		"NeMo-RL/3rdparty/keep.md": "kept\n",
	})
	testGit(t, work, "add", "-A", "--", "recipe.yaml", "NeMo-RL/new_loss.py", "NeMo-RL/.gitattributes")
	testGit(t, work, "commit", "-q", "--no-verify", "-m", "policy")
	os.RemoveAll(markers) // the policy's own commit may run its hooks
	os.Mkdir(markers, 0o755)

	attrs := filepath.Join(t.TempDir(), "attributes")
	os.WriteFile(attrs, []byte("* filter=evil diff=evil\n"), 0o644)
	include := filepath.Join(t.TempDir(), "included")
	os.WriteFile(include, []byte("[diff]\n\tnoprefix = true\n"), 0o644)
	cfg := "\n[core]\n\thooksPath = " + evilHooks + "\n\tfsmonitor = " + script("fsmonitor") +
		"\n\tattributesFile = " + attrs + "\n\tpager = " + script("pager") + "\n\tautocrlf = true\n\tquotePath = true\n" +
		"[filter \"evil\"]\n\tclean = " + script("clean") + "\n\tsmudge = " + script("smudge") + "\n\trequired = true\n" +
		"[diff \"evil\"]\n\ttextconv = " + script("textconv") + "\n\tcommand = " + script("diffcmd") + "\n" +
		"[diff]\n\texternal = " + script("external") + "\n\tmnemonicPrefix = true\n\tcontext = 0\n\trelative = true\n" +
		"[color]\n\tui = always\n\tdiff = always\n" +
		"[include]\n\tpath = " + include + "\n"
	f, err := os.OpenFile(filepath.Join(work, ".git", "config"), os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.WriteString(cfg)
	f.Close()
	os.MkdirAll(filepath.Join(work, ".git", "info"), 0o755)
	os.WriteFile(filepath.Join(work, ".git", "info", "exclude"), []byte("*\n"), 0o644)
	os.WriteFile(filepath.Join(work, ".git", "index"), []byte("garbage"), 0o644)

	// The caller's environment and home do not leak into git either.
	home := t.TempDir()
	os.WriteFile(filepath.Join(home, ".gitconfig"), []byte(cfg), 0o644)
	t.Setenv("HOME", home)
	t.Setenv("GIT_DIR", "/nonexistent")
	t.Setenv("GIT_INDEX_FILE", "/nonexistent/index")
	t.Setenv("GIT_EXTERNAL_DIFF", script("env-external"))
	t.Setenv("GIT_CONFIG_PARAMETERS", "'diff.noprefix'='true'")

	out := t.TempDir()
	rec, err := Finish(ctx, FinishInput{WorkDir: work, Baseline: base, TranscriptPath: writeTranscript(t, "max_turns.jsonl"),
		OutDir: out, ExitStatus: 1, Now: fixedNow})
	if err != nil {
		t.Fatal(err)
	}
	patch := checkOutputs(t, rec, out)
	if entries, _ := os.ReadDir(markers); len(entries) != 0 {
		var names []string
		for _, e := range entries {
			names = append(names, e.Name())
		}
		t.Errorf("policy-planted programs ran: %v", names)
	}
	wantFiles := []string{"NeMo-RL/.gitattributes", "NeMo-RL/3rdparty/keep.md", "NeMo-RL/new_loss.py", "NeMo-RL/uncommitted.py", "recipe.yaml"}
	if got := diffFiles(patch); !reflect.DeepEqual(got, wantFiles) || rec.FilesChanged != len(wantFiles) {
		t.Errorf("files %v (record %d), want %v\n%s", got, rec.FilesChanged, wantFiles, patch)
	}
	if bytes.Contains(patch, []byte("\x1b[")) {
		t.Error("colour in change.diff")
	}
	testGit(t, pristine, "apply", "--check", filepath.Join(out, PatchFile))
	if rec.Turns != 2 || rec.ModelCalls != 2 || rec.TerminalReason != record.TerminalMaxTurns || rec.ExitStatus != 1 {
		t.Errorf("record %+v", rec)
	}

	// Baseline "" means the work repository's HEAD: the policy's commit,
	// so its committed edits drop out of the patch (documented).
	out2 := t.TempDir()
	rec2, err := Finish(ctx, FinishInput{WorkDir: work, TranscriptPath: writeTranscript(t, "max_turns.jsonl"), OutDir: out2, Now: fixedNow})
	if err != nil {
		t.Fatal(err)
	}
	patch2 := checkOutputs(t, rec2, out2)
	if got := diffFiles(patch2); !reflect.DeepEqual(got, []string{"NeMo-RL/3rdparty/keep.md", "NeMo-RL/uncommitted.py"}) {
		t.Errorf("against HEAD: files %v", got)
	}
	if entries, _ := os.ReadDir(markers); len(entries) != 0 {
		t.Errorf("policy-planted programs ran resolving HEAD: %d", len(entries))
	}
}

func TestBaseline(t *testing.T) {
	requireGit(t)
	ctx := context.Background()
	// A hostile home and git environment of the caller change nothing.
	markers := t.TempDir()
	evil := t.TempDir()
	tmpl := filepath.Join(evil, "template")
	os.MkdirAll(filepath.Join(tmpl, "hooks"), 0o755)
	for _, h := range []string{"pre-commit", "post-commit", "commit-msg", "reference-transaction", "post-index-change"} {
		body := "#!/bin/sh\ntouch '" + filepath.Join(markers, h) + "'\n"
		os.WriteFile(filepath.Join(tmpl, "hooks", h), []byte(body), 0o755)
		os.MkdirAll(filepath.Join(evil, "hooks"), 0o755)
		os.WriteFile(filepath.Join(evil, "hooks", h), []byte(body), 0o755)
	}
	os.WriteFile(filepath.Join(evil, ".gitconfig"), []byte("[init]\n\ttemplateDir = "+tmpl+
		"\n[core]\n\thooksPath = "+filepath.Join(evil, "hooks")+"\n[commit]\n\tgpgSign = true\n[user]\n\tuseConfigOnly = true\n\tname = evil\n"), 0o644)
	t.Setenv("HOME", evil)
	t.Setenv("GIT_DIR", "/nonexistent")
	t.Setenv("GIT_AUTHOR_DATE", "2011-01-01T00:00:00Z")

	w1, w2 := newWorkDir(t), newWorkDir(t)
	id1, err := Baseline(ctx, w1)
	if err != nil {
		t.Fatal(err)
	}
	id2, err := Baseline(ctx, w2)
	if err != nil {
		t.Fatal(err)
	}
	if id1 != id2 {
		t.Errorf("the same tree gave baselines %s and %s (identity and date must be fixed)", id1, id2)
	}
	if entries, _ := os.ReadDir(markers); len(entries) != 0 {
		t.Errorf("hooks ran: %d", len(entries))
	}
	if _, err := os.Stat(filepath.Join(w1, ".git", "hooks")); err == nil {
		t.Error("the new repository has a hooks directory (template copied)")
	}
	log := testGit(t, w1, "log", "--format=%an <%ae> %s")
	if log != gitName+" <"+gitEmail+"> baseline\n" {
		t.Errorf("log %q", log)
	}
	// The baseline holds every file but the ignored ones.
	files := testGit(t, w1, "ls-files")
	for _, want := range []string{"NeMo-RL/bin.dat", "NeMo-RL/3rdparty/Gym-workspace/Gym/nemo_gym/env.py", "other.txt", "recipe.yaml", "train_math.jsonl"} {
		if !strings.Contains(files, want+"\n") {
			t.Errorf("baseline lacks %s:\n%s", want, files)
		}
	}
	// The policy can commit with the repository's identity.
	if cfg := testGit(t, w1, "config", "user.email"); cfg != gitEmail+"\n" {
		t.Errorf("user.email %q", cfg)
	}

	if _, err := Baseline(ctx, w1); err == nil || !strings.Contains(err.Error(), "already exists") {
		t.Errorf("second Baseline: %v", err)
	}
	if _, err := Baseline(ctx, filepath.Join(t.TempDir(), "missing")); err == nil {
		t.Error("Baseline of a missing dir succeeded")
	}
}

func TestFinishErrors(t *testing.T) {
	requireGit(t)
	ctx := context.Background()
	work := newWorkDir(t)
	base, err := Baseline(ctx, work)
	if err != nil {
		t.Fatal(err)
	}
	tr := writeTranscript(t, "full.jsonl")
	good := FinishInput{WorkDir: work, Baseline: base, TranscriptPath: tr, OutDir: t.TempDir()}
	noGit := newWorkDir(t)
	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	cases := []struct {
		name   string
		ctx    context.Context
		edit   func(*FinishInput)
		substr []string
	}{
		{"missing transcript", ctx, func(in *FinishInput) { in.TranscriptPath = filepath.Join(work, "nope.jsonl") }, []string{"transcript", "nope.jsonl"}},
		{"exit status", ctx, func(in *FinishInput) { in.ExitStatus = 256 }, []string{"exit status 256"}},
		{"no work dir", ctx, func(in *FinishInput) { in.WorkDir = "" }, []string{"no work dir"}},
		{"no repository", ctx, func(in *FinishInput) { in.WorkDir = noGit }, []string{filepath.Join(noGit, ".git", "objects")}},
		{"unknown commit", ctx, func(in *FinishInput) { in.Baseline = strings.Repeat("ab", 20) }, []string{"baseline", "git ", "rev-parse", "fatal"}},
		{"unknown ref", ctx, func(in *FinishInput) { in.Baseline = "no-such-branch" }, []string{"baseline \"no-such-branch\"", "rev-parse", "fatal"}},
		{"option as baseline", ctx, func(in *FinishInput) { in.Baseline = "--output=/tmp/x" }, []string{"bad baseline"}},
		{"cancelled", cancelled, func(*FinishInput) {}, []string{"context canceled"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			in := good
			in.OutDir = t.TempDir()
			c.edit(&in)
			rec, err := Finish(c.ctx, in)
			if err == nil {
				t.Fatalf("no error, record %+v", rec)
			}
			for _, s := range c.substr {
				if !strings.Contains(err.Error(), s) {
					t.Errorf("error %q lacks %q", err, s)
				}
			}
			if entries, _ := os.ReadDir(in.OutDir); len(entries) != 0 && c.name != "cancelled" {
				t.Errorf("outputs left after the error: %d", len(entries))
			}
		})
	}
}

// TestFinishAddProblems: paths git add refuses (named paths a top-level
// .gitignore of the policy ignores, a new nested repository without a
// commit) are left out with a warning; the rest of the patch is made.
func TestFinishAddProblems(t *testing.T) {
	requireGit(t)
	ctx := context.Background()
	for _, c := range []struct {
		name  string
		files map[string]string
		setup func(t *testing.T, work string)
		want  []string
		log   string
	}{
		{
			name: "top-level gitignore",
			files: map[string]string{
				".gitignore":         "*\n",
				"recipe.yaml":        "changed: true\n",
				"NeMo-RL/a.py":       "def loss(x):\n    return 2 * x\n",
				"NeMo-RL/ignored.py": "new, but ignored by the top-level .gitignore\n",
			},
			want: []string{"NeMo-RL/a.py", "recipe.yaml"},
			log:  "are ignored",
		},
		{
			name: "nested repository without a commit",
			files: map[string]string{
				"recipe.yaml":          "changed: true\n",
				"NeMo-RL/new.py":       "n = 1\n",
				"NeMo-RL/nested/q.py":  "q = 1\n",
				"NeMo-RL/nested/r.txt": "r\n",
			},
			setup: func(t *testing.T, work string) { testGit(t, filepath.Join(work, "NeMo-RL", "nested"), "init", "-q") },
			want:  []string{"NeMo-RL/new.py", "recipe.yaml"},
			log:   "does not have a commit checked out",
		},
	} {
		t.Run(c.name, func(t *testing.T) {
			work := newWorkDir(t)
			base, err := Baseline(ctx, work)
			if err != nil {
				t.Fatal(err)
			}
			writeFiles(t, work, c.files)
			if c.setup != nil {
				c.setup(t, work)
			}
			var log bytes.Buffer
			out := t.TempDir()
			rec, err := Finish(ctx, FinishInput{WorkDir: work, Baseline: base, TranscriptPath: writeTranscript(t, "full.jsonl"),
				OutDir: out, Now: fixedNow, Log: &log})
			if err != nil {
				t.Fatal(err)
			}
			patch := checkOutputs(t, rec, out)
			if got := diffFiles(patch); !reflect.DeepEqual(got, c.want) {
				t.Errorf("files %v, want %v", got, c.want)
			}
			if !strings.Contains(log.String(), "warning") || !strings.Contains(log.String(), c.log) {
				t.Errorf("log %q lacks %q", log.String(), c.log)
			}
		})
	}
}
