package labtest

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nemorl/nemorl-slurm/internal/shell"
)

func TestParse(t *testing.T) {
	in := "# lab\n\nA=1\nexport B='two words'\nC=\"x=y\"\nD=\n"
	got, err := Parse(strings.NewReader(in))
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"A": "1", "B": "two words", "C": "x=y", "D": ""}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s = %q, want %q", k, got[k], v)
		}
	}
	for _, bad := range []string{"novalue\n", "1A=x\n", "A='x\n", "A B=c\n"} {
		if _, err := Parse(strings.NewReader(bad)); err == nil {
			t.Errorf("Parse(%q) succeeded", bad)
		}
	}
}

func TestLoad(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "lab.env")
	full := "NEMORL_LAB_SSH_HOST=127.0.0.1\nNEMORL_LAB_SSH_PORT=2222\nNEMORL_LAB_USER=nemorl\nNEMORL_LAB_KEY=/k\n" +
		"NEMORL_LAB_KNOWN_HOSTS=/kh\nNEMORL_LAB_HOST_KEY_PUB=/h.pub\nNEMORL_LAB_WORKDIR=/w\n"
	if err := os.WriteFile(p, []byte(full), 0o600); err != nil {
		t.Fatal(err)
	}
	lab, err := Load(p)
	if err != nil {
		t.Fatal(err)
	}
	if lab.SSHPort != 2222 || lab.User != "nemorl" || lab.Workdir != "/w" {
		t.Errorf("Load = %+v", lab)
	}
	if err := os.WriteFile(p, []byte(strings.Replace(full, "NEMORL_LAB_USER=nemorl\n", "", 1)), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := Load(p); err == nil || !strings.Contains(err.Error(), "NEMORL_LAB_USER") {
		t.Errorf("missing user: err = %v", err)
	}
	if err := os.WriteFile(p, []byte(strings.Replace(full, "2222", "ssh", 1)), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := Load(p); err == nil {
		t.Error("bad port accepted")
	}
}

func TestLoadFar(t *testing.T) {
	p := filepath.Join(t.TempDir(), "lab.env")
	base := "NEMORL_LAB_SSH_HOST=127.0.0.1\nNEMORL_LAB_SSH_PORT=2222\nNEMORL_LAB_USER=nemorl\nNEMORL_LAB_KEY=/k\n" +
		"NEMORL_LAB_KNOWN_HOSTS=/kh\nNEMORL_LAB_HOST_KEY_PUB=/h.pub\nNEMORL_LAB_WORKDIR=/w\n"
	load := func(extra string) (Lab, error) {
		t.Helper()
		if err := os.WriteFile(p, []byte(base+extra), 0o600); err != nil {
			t.Fatal(err)
		}
		return Load(p)
	}
	// An older lab.env: no far endpoint.
	lab, err := load("")
	if err != nil || lab.FarSSHPort != 0 || lab.FarRTT != 0 {
		t.Errorf("no far endpoint: %+v, %v", lab, err)
	}
	lab, err = load("NEMORL_LAB_FAR_SSH_PORT=2223\nNEMORL_LAB_FAR_RTT_MS=20\n")
	if err != nil || lab.FarSSHPort != 2223 || lab.FarRTT != 20*time.Millisecond || lab.SSHPort != 2222 {
		t.Errorf("far endpoint: %+v, %v", lab, err)
	}
	if far := lab.Far(t); far.SSHPort != 2223 || far.SSHHost != lab.SSHHost || far.User != lab.User {
		t.Errorf("Far() = %+v", far)
	}
	for _, bad := range []string{
		"NEMORL_LAB_FAR_SSH_PORT=far\nNEMORL_LAB_FAR_RTT_MS=20\n",
		"NEMORL_LAB_FAR_SSH_PORT=70000\nNEMORL_LAB_FAR_RTT_MS=20\n",
		"NEMORL_LAB_FAR_SSH_PORT=2223\n",
		"NEMORL_LAB_FAR_SSH_PORT=2223\nNEMORL_LAB_FAR_RTT_MS=20ms\n",
		"NEMORL_LAB_FAR_SSH_PORT=2223\nNEMORL_LAB_FAR_RTT_MS=-1\n",
	} {
		if lab, err := load(bad); err == nil {
			t.Errorf("%q accepted: %+v", bad, lab)
		}
	}
}

// TestFarSkip: without a far endpoint, Far skips (TestFarRequired: fails
// under NEMORL_REQUIRE_LAB=1).
func TestFarSkip(t *testing.T) {
	t.Setenv("NEMORL_REQUIRE_LAB", "")
	skipped := true
	t.Run("inner", func(t *testing.T) {
		Lab{File: "old.env", SSHPort: 2222}.Far(t)
		skipped = false
	})
	if !skipped {
		t.Error("Far did not skip without a far endpoint")
	}
}

func TestFarRequired(t *testing.T) {
	if os.Getenv("LABTEST_CHILD") == "1" {
		Lab{File: "old.env", SSHPort: 2222}.Far(t)
		return
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestFarRequired$", "-test.v")
	cmd.Env = append(os.Environ(), "LABTEST_CHILD=1", "NEMORL_REQUIRE_LAB=1")
	out, err := cmd.CombinedOutput()
	if err == nil || !strings.Contains(string(out), "has no NEMORL_LAB_FAR_SSH_PORT; run lab/up") {
		t.Errorf("child: %v\n%s", err, out)
	}
}

// TestEnvSkipOrFail checks the skip/fail switch in a subprocess-free way:
// with a missing file and the requirement off, Env skips.
func TestEnvSkip(t *testing.T) {
	t.Setenv("NEMORL_LAB_ENV", filepath.Join(t.TempDir(), "absent.env"))
	t.Setenv("NEMORL_REQUIRE_LAB", "")
	skipped := true
	t.Run("inner", func(t *testing.T) {
		Env(t)
		skipped = false
	})
	if !skipped {
		t.Error("Env did not skip without a lab")
	}
}

func FuzzParse(f *testing.F) {
	f.Add("A=1\n# c\nexport B='x'\n")
	f.Add("=\n")
	f.Add("A=\"\n")
	f.Fuzz(func(t *testing.T, s string) {
		vars, err := Parse(strings.NewReader(s))
		if err != nil {
			return
		}
		for k := range vars {
			if !shell.IsName(k) {
				t.Errorf("bad key %q accepted", k)
			}
		}
	})
}

// TestEnvRequired runs Env in a child test process with NEMORL_REQUIRE_LAB=1
// and no lab: the child must fail, not skip.
func TestEnvRequired(t *testing.T) {
	if os.Getenv("LABTEST_CHILD") == "1" {
		Env(t)
		return
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestEnvRequired$", "-test.v")
	cmd.Env = append(os.Environ(), "LABTEST_CHILD=1", "NEMORL_REQUIRE_LAB=1",
		"NEMORL_LAB_ENV="+filepath.Join(t.TempDir(), "absent.env"))
	out, err := cmd.CombinedOutput()
	if err == nil || !strings.Contains(string(out), "lab required (NEMORL_REQUIRE_LAB=1) but absent") {
		t.Errorf("child: %v\n%s", err, out)
	}
}
