package cli

import (
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// embeddedScripts are the cluster-side scripts of scripts/, by file name.
var embeddedScripts = map[string]string{
	"follow.sh":         followScript,
	"endpoint_probe.sh": endpointProbe,
	"endpoint_probe.py": endpointProbePy,

	"doctor_slurm_commands.sh": doctorSlurmCommands,
	"doctor_associations.sh":   doctorAssociations,
	"doctor_workdir.sh":        doctorWorkdir,
	"doctor_command_path.sh":   doctorCommandPath,
}

// TestEmbedScripts checks that every script of scripts/ is embedded, starts
// with its #! line and passes sh -n (Python: compiles) (make shellcheck
// lints the shell).
func TestEmbedScripts(t *testing.T) {
	files, err := filepath.Glob(filepath.Join("scripts", "*"))
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
			if strings.HasSuffix(name, ".py") {
				if !strings.HasPrefix(script, "#!/usr/bin/env python3\n") {
					t.Errorf("%s does not start with #!/usr/bin/env python3", name)
				}
				if _, err := exec.LookPath("python3"); err != nil {
					t.Skip("no python3")
				}
				if out, err := exec.Command("python3", "-c", "import sys; compile(sys.argv[1], sys.argv[2], 'exec')", script, name).CombinedOutput(); err != nil {
					t.Errorf("python3 compile %s: %v\n%s", name, err, out)
				}
				return
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

// TestEmbedEndpointProbe runs doctor's endpoint probe as srun does, with
// curl and, on a PATH without it, with python3 and endpointProbePy.
func TestEmbedEndpointProbe(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusUnauthorized)
	}))
	defer srv.Close()
	for _, tool := range []string{"curl", "python3"} {
		t.Run(tool, func(t *testing.T) {
			bin, err := exec.LookPath(tool)
			if err != nil {
				t.Skip("no " + tool)
			}
			if tool == "python3" {
				// The interpreter itself, not a wrapper (a pyenv shim needs bash).
				out, err := exec.Command(bin, "-c", "import sys; print(sys.executable)").Output()
				if err != nil || strings.TrimSpace(string(out)) == "" {
					t.Skipf("python3 names no interpreter (%v)", err)
				}
				bin = strings.TrimSpace(string(out))
			}
			sh, err := exec.LookPath("sh")
			if err != nil {
				t.Skip("no sh")
			}
			dir := t.TempDir()
			for name, p := range map[string]string{tool: bin, "sh": sh} {
				if err := os.Symlink(p, filepath.Join(dir, name)); err != nil {
					t.Fatal(err)
				}
			}
			cmd := exec.Command(sh, "-c", endpointProbe, "sh", srv.URL+"/models", endpointProbePy)
			cmd.Env = []string{"PATH=" + dir}
			out, err := cmd.Output()
			if err != nil || strings.TrimSpace(string(out)) != "401" {
				t.Fatalf("the probe with %s printed %q (%v), want 401", tool, out, err)
			}
		})
	}
}
