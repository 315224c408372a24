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
	"batch.sh":      batchScript,
	"submit.sh":     submitScript,
	"collect.sh":    collectScript,
	"move_aside.sh": moveAsideScript,
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
