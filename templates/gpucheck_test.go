package templates

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nemorl/nemorl-slurm/configs"
	"github.com/nemorl/nemorl-slurm/stages"
)

// The GPU check inlined into the exec line is scripts/gpu_check.sh: the
// same one-line program as before it was a file, and the same verdicts
// whether it runs inlined or as the file with its environment.
func TestGPUCheckScript(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("scripts", "gpu_check.sh"))
	if err != nil {
		t.Fatal(err)
	}
	if string(b) != gpuCheckScript || !strings.HasPrefix(gpuCheckScript, "#!/bin/sh\n") {
		t.Fatal("the embedded gpu_check.sh is not the file, or does not start with #!/bin/sh")
	}
	dev := configs.DefaultGPUDevices
	want := fmt.Sprintf(`for d in %s; do [ -e "$d" ] && exit 0; done; echo "nemorl: no GPU: no device file matches %s in the container after --nv" >&2; exit %d`, dev, dev, stages.ExitNoGPU)
	if got := gpuCheck(dev, stages.ExitNoGPU); got != want {
		t.Errorf("gpuCheck:\n got %s\nwant %s", got, want)
	}

	dir := t.TempDir()
	glob := filepath.Join(dir, "nemorl-fakegpu[0-9]*")
	inline := gpuCheck(glob, stages.ExitNoGPU)
	for _, c := range []struct {
		name string
		cmd  func() *exec.Cmd
	}{
		{"inlined", func() *exec.Cmd { return exec.Command("sh", "-c", inline) }},
		{"file", func() *exec.Cmd {
			cmd := exec.Command("sh", filepath.Join("scripts", "gpu_check.sh"))
			cmd.Env = append(os.Environ(), "NEMORL_GPU_DEVICES="+glob, fmt.Sprintf("NEMORL_NO_GPU_EXIT=%d", stages.ExitNoGPU))
			return cmd
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			_ = os.Remove(filepath.Join(dir, "nemorl-fakegpu0"))
			out, err := c.cmd().CombinedOutput()
			var ee *exec.ExitError
			if !errors.As(err, &ee) || ee.ExitCode() != stages.ExitNoGPU || !strings.Contains(string(out), "nemorl: no GPU: no device file matches "+glob+" in the container") {
				t.Errorf("no device: %v: %s", err, out)
			}
			if err := os.WriteFile(filepath.Join(dir, "nemorl-fakegpu0"), nil, 0o600); err != nil {
				t.Fatal(err)
			}
			if out, err := c.cmd().CombinedOutput(); err != nil || len(out) != 0 {
				t.Errorf("a device: %v: %s", err, out)
			}
		})
	}
}
