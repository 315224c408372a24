package train

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

func TestApplyPatch(t *testing.T) {
	f := newFixture(t, "", "")
	if err := ApplyPatch(context.Background(), f.plan); err != nil {
		t.Fatal(err)
	}
	if got := f.read("work/recipe.yaml"); !strings.Contains(got, "normalize_rewards: false") {
		t.Errorf("recipe.yaml not patched:\n%s", got)
	}
	if got := f.read("work/NeMo-RL/nemo_rl/loss.py"); got != "clip = 0.28\n" {
		t.Errorf("loss.py: %q", got)
	}
	if got := f.read("work/NeMo-RL/nemo_rl/new_loss.py"); got != "print(\"new\")\n" {
		t.Errorf("new_loss.py: %q", got)
	}
}

// TestApplyPatchRefused: a patch that does not apply is a *PatchError and
// changes nothing, even where some of its files would apply.
func TestApplyPatchRefused(t *testing.T) {
	for name, patch := range map[string]string{
		"wrong context": strings.Replace(goodPatch, "-clip = 0.2", "-clip = 0.3", 1),
		"missing file":  strings.ReplaceAll(goodPatch, "nemo_rl/loss.py", "nemo_rl/gone.py"),
		"leaves the work dir": `diff --git a/../escaped.txt b/../escaped.txt
new file mode 100644
--- /dev/null
+++ b/../escaped.txt
@@ -0,0 +1 @@
+escaped
`,
		"not a patch": "hello\n",
	} {
		t.Run(name, func(t *testing.T) {
			f := newFixture(t, "", "")
			f.write("in/change.diff", patch, 0o644)
			err := ApplyPatch(context.Background(), f.plan)
			var pe *PatchError
			if !errors.As(err, &pe) {
				t.Fatalf("got %v, want a *PatchError", err)
			}
			t.Logf("%v", err)
			if f.read("work/recipe.yaml") != pristineRecipe || f.read("work/NeMo-RL/nemo_rl/loss.py") != "clip = 0.2\n" {
				t.Error("the tree changed")
			}
			if f.exists("escaped.txt") || f.exists("work/NeMo-RL/nemo_rl/new_loss.py") {
				t.Error("a file was created")
			}
		})
	}
}

func TestApplyPatchEmptyOrMissing(t *testing.T) {
	for _, data := range []string{"", " \n\t\n"} {
		f := newFixture(t, "", "")
		f.write("in/change.diff", data, 0o644)
		if err := ApplyPatch(context.Background(), f.plan); !errors.Is(err, ErrEmptyPatch) {
			t.Errorf("%q: got %v, want ErrEmptyPatch", data, err)
		}
	}
	f := newFixture(t, "", "")
	f.plan.Patch = f.path("in/none.diff")
	err := ApplyPatch(context.Background(), f.plan)
	var pe *PatchError
	if err == nil || errors.As(err, &pe) {
		t.Errorf("missing patch: got %v", err)
	}
	f.plan.Patch = f.path("in/change.diff")
	f.plan.Git = f.path("no-such-git")
	if err := ApplyPatch(context.Background(), f.plan); err == nil || errors.As(err, &pe) {
		t.Errorf("missing git: got %v", err)
	}
}

// TestApplyPatchIgnoresSurroundings: a repository around the work dir and
// the user's git configuration do not change what is applied.
func TestApplyPatchIgnoresSurroundings(t *testing.T) {
	f := newFixture(t, "", "")
	// A repository enclosing the work dir: git apply run in its
	// subdirectory would resolve the paths from the repository's root and
	// silently skip those outside the subdirectory.
	git(t, f.root, "init", "-q")
	// A user configuration that would refuse the patch.
	home := t.TempDir()
	if err := os.WriteFile(filepath.Join(home, ".gitconfig"), []byte("[apply]\n\twhitespace = error\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Setenv("HOME", home)
	t.Setenv("GIT_DIR", f.path(".git"))
	f.write("in/change.diff", strings.Replace(goodPatch, "+clip = 0.28\n", "+clip = 0.28   \n", 1), 0o644)
	if err := ApplyPatch(context.Background(), f.plan); err != nil {
		t.Fatal(err)
	}
	if got := f.read("work/NeMo-RL/nemo_rl/loss.py"); got != "clip = 0.28   \n" {
		t.Errorf("loss.py: %q", got)
	}
	if !strings.Contains(f.read("work/recipe.yaml"), "normalize_rewards: false") {
		t.Error("recipe.yaml not patched")
	}
}

// TestApplyPatchBinary applies a `git diff --cached --binary` made by git,
// with a binary file and a deletion, as the author stage writes it.
func TestApplyPatchBinary(t *testing.T) {
	f := newFixture(t, "", "")
	gen := t.TempDir()
	for _, rel := range []string{"recipe.yaml", "NeMo-RL/nemo_rl/loss.py", "NeMo-RL/examples/nemo_gym/run_grpo_nemo_gym.py"} {
		b, err := os.ReadFile(filepath.Join(f.plan.WorkDir, rel))
		if err != nil {
			t.Fatal(err)
		}
		writeFile(t, filepath.Join(gen, rel), b)
	}
	git(t, gen, "init", "-q")
	git(t, gen, "add", "-A")
	git(t, gen, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "baseline")
	blob := make([]byte, 4096)
	for i := range blob {
		blob[i] = byte(i * 7)
	}
	writeFile(t, filepath.Join(gen, "NeMo-RL/nemo_rl/table.bin"), blob)
	if err := os.Remove(filepath.Join(gen, "NeMo-RL/nemo_rl/loss.py")); err != nil {
		t.Fatal(err)
	}
	git(t, gen, "add", "-A", "--", "recipe.yaml", "NeMo-RL")
	patch := git(t, gen, "diff", "--cached", "--binary", "HEAD", "--", "recipe.yaml", "NeMo-RL")
	if !strings.Contains(patch, "GIT binary patch") {
		t.Fatalf("no binary hunk:\n%s", patch)
	}
	f.write("in/change.diff", patch, 0o644)
	if err := ApplyPatch(context.Background(), f.plan); err != nil {
		t.Fatal(err)
	}
	if got := f.read("work/NeMo-RL/nemo_rl/table.bin"); got != string(blob) {
		t.Error("binary file differs")
	}
	if f.exists("work/NeMo-RL/nemo_rl/loss.py") {
		t.Error("deleted file still there")
	}
}

func git(t *testing.T, dir string, args ...string) string {
	t.Helper()
	cmd := exec.Command("git", args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GIT_CONFIG_NOSYSTEM=1", "GIT_CONFIG_GLOBAL=/dev/null")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("git %v: %v\n%s", args, err, out)
	}
	return string(out)
}

func writeFile(t *testing.T, path string, data []byte) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
}
