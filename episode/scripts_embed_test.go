package episode

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// embeddedScripts are the cluster-side scripts of scripts/, by file name.
var embeddedScripts = map[string]string{
	"batch.sh":        batchScript,
	"submit.sh":       submitScript,
	"collect.sh":      collectScript,
	"move_aside.sh":   moveAsideScript,
	"array_submit.sh": arraySubmitScript,
}

// TestEmbedScripts checks that every script of scripts/ is embedded, starts
// with its #!/bin/sh line and passes sh -n (make shellcheck lints them).
func TestEmbedScripts(t *testing.T) {
	files, err := filepath.Glob(filepath.Join("scripts", "*.sh"))
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		if _, ok := embeddedScripts[filepath.Base(f)]; !ok {
			t.Errorf("%s is embedded by no test entry: add it to embeddedScripts", f)
		}
	}
	for name, script := range embeddedScripts {
		t.Run(name, func(t *testing.T) {
			b, err := os.ReadFile(filepath.Join("scripts", name))
			if err != nil {
				t.Fatal(err)
			}
			if script == "" || script != string(b) {
				t.Fatalf("the embedded %s is empty or not the file", name)
			}
			if !strings.HasPrefix(script, "#!/bin/sh\n") {
				t.Errorf("%s does not start with #!/bin/sh", name)
			}
			if out, err := exec.Command("sh", "-n", "-c", script).CombinedOutput(); err != nil {
				t.Errorf("sh -n %s: %v\n%s", name, err, out)
			}
		})
	}
}

// TestSubmitScriptWritesManifestWithoutReader: the tool gone while sbatch
// runs (its end of stdout closed): submit.sh still writes the new job id
// into the manifest, which adopt reads back (manifestJob). Without
// ignoring SIGPIPE the script died at printing sbatch's answer, before the
// manifest: a crash there left no trace of the job but Slurm's, which
// lags.
func TestSubmitScriptWritesManifestWithoutReader(t *testing.T) {
	dir := t.TempDir()
	sbatch := filepath.Join(dir, "sbatch")
	// sbatch answers only after the reader is gone.
	if err := os.WriteFile(sbatch, []byte("#!/bin/sh\nsleep 0.5\necho 4242\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	manifest := filepath.Join(dir, "manifest.json")
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("sh", "-c", submitScript, "sh", manifest, `{"jobs":{"train":"`, `"}}`, sbatch, "x.sbatch")
	cmd.Stdout = w
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	w.Close()
	r.Close() // the tool is gone before sbatch answers
	_ = cmd.Wait()
	b, err := os.ReadFile(manifest)
	if err != nil {
		t.Fatalf("manifest after the reader went away: %v", err)
	}
	if got := manifestJobID(b, "train"); got != "4242" {
		t.Fatalf("manifest %q names train job %q, want 4242", b, got)
	}
}
