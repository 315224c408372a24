package apptainer

import (
	"strings"
	"testing"

	"github.com/nemorl/nemorl-slurm/configs"
)

func TestLineApptainer(t *testing.T) {
	s := Spec{
		Kind: "singularity", Binary: "singularity", Image: "/img/eval.sif", GPU: true,
		Binds:   []Bind{{Host: "/w/ep/eval/work", Container: "/nemorl/out"}, {Host: "/w/ep/eval/bundle", Container: "/nemorl/bundle", ReadOnly: true}},
		Env:     map[string]string{"NEMORL_STAGE": "eval", "A_B": "x y"},
		PassEnv: []string{"SLURM_JOB_ID"},
		Argv:    []string{"/bin/bash", "/nemorl/bundle/eval.sh", "$(id)"},
	}
	got, err := s.Line()
	if err != nil {
		t.Fatal(err)
	}
	want := `singularity exec --containall --cleanenv --no-home --writable-tmpfs --no-mount hostfs,bind-paths --nv --bind /w/ep/eval/work:/nemorl/out --bind /w/ep/eval/bundle:/nemorl/bundle:ro --env 'A_B=x y' --env NEMORL_STAGE=eval --env "SLURM_JOB_ID=${SLURM_JOB_ID:-}" /img/eval.sif /bin/bash /nemorl/bundle/eval.sh '$(id)'`
	if got != want {
		t.Errorf("got  %s\nwant %s", got, want)
	}
	s.GPU = false
	got, _ = s.Line()
	if strings.Contains(got, "--nv") {
		t.Errorf("--nv without GPU: %s", got)
	}
	if strings.Contains(got, "--net") || strings.Contains(got, "--network") {
		t.Errorf("network flags without NoNetwork: %s", got)
	}
	s.NoNetwork = true
	got, _ = s.Line()
	if !strings.Contains(got, " --no-mount hostfs,bind-paths --net --network none --bind ") {
		t.Errorf("NoNetwork: %s", got)
	}
	// ImageVar: the image is the batch shell's variable, expanded when the
	// line runs, never the configured path.
	s.ImageVar = "NEMORL_EVAL_IMAGE"
	got, _ = s.Line()
	if !strings.Contains(got, ` "$NEMORL_EVAL_IMAGE" /bin/bash `) || strings.Contains(got, "/img/eval.sif") {
		t.Errorf("ImageVar: %s", got)
	}
}

// TestLineVariables: a bind from a variable and a variable's value in the
// environment are expanded by the batch shell when the line runs.
func TestLineVariables(t *testing.T) {
	s := Spec{Kind: "apptainer", Binary: "apptainer", Image: "/i.sif", WorkdirVar: "nemorl_scratch",
		Binds:   []Bind{{HostVar: "NEMORL_EVAL_BUNDLE", Container: "/nemorl/bundle", ReadOnly: true}},
		EnvVars: map[string]string{"B": "NEMORL_EVAL_BUNDLE"}, Argv: []string{"x"}}
	got, err := s.Line()
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(got, `--bind "$NEMORL_EVAL_BUNDLE:/nemorl/bundle:ro"`) || !strings.Contains(got, `--env "B=$NEMORL_EVAL_BUNDLE"`) ||
		!strings.Contains(got, `--writable-tmpfs --no-mount hostfs,bind-paths --workdir "$nemorl_scratch" `) {
		t.Errorf("apptainer: %s", got)
	}
	s.Kind = "none"
	if got, _ = s.Line(); !strings.Contains(got, ` "B=$NEMORL_EVAL_BUNDLE" x`) || strings.Contains(got, "workdir") {
		t.Errorf("none: %s", got)
	}
	for name, bad := range map[string]Spec{
		"bad bind variable": {Kind: "apptainer", Binary: "apptainer", Image: "/i", Argv: []string{"x"}, Binds: []Bind{{HostVar: "A B", Container: "/c"}}},
		"quote in target":   {Kind: "apptainer", Binary: "apptainer", Image: "/i", Argv: []string{"x"}, Binds: []Bind{{HostVar: "A", Container: "/c\"$(id)"}}},
		"bad env variable":  {Kind: "none", Argv: []string{"x"}, EnvVars: map[string]string{"A": "$(id)"}},
	} {
		if _, err := bad.Line(); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

// TestWithArgv: the guard's line is the payload's line with another
// command: same flags, binds and environment, and the original untouched.
func TestWithArgv(t *testing.T) {
	s := Spec{Kind: "apptainer", Binary: "apptainer", Image: "/i.sif", GPU: true, NoNetwork: true, WorkdirVar: "nemorl_scratch",
		Binds: []Bind{{Host: "/w/x", Container: "/nemorl/out"}}, Env: map[string]string{"A": "1"}, PassEnv: []string{"SLURM_JOB_ID"},
		Argv: []string{"/bin/bash", "/nemorl/bundle/train.sh"}}
	payload, err := s.Line()
	if err != nil {
		t.Fatal(err)
	}
	guard, err := s.WithArgv("/bin/bash", "/nemorl/bundle/guard.sh", "train").Line()
	if err != nil {
		t.Fatal(err)
	}
	if strings.TrimSuffix(payload, " /nemorl/bundle/train.sh") != strings.TrimSuffix(guard, " /nemorl/bundle/guard.sh train") {
		t.Errorf("payload and guard lines differ beyond argv:\n%s\n%s", payload, guard)
	}
	if again, _ := s.Line(); again != payload {
		t.Errorf("WithArgv changed the original: %s", again)
	}
	s.Kind = "none"
	if got, _ := s.Line(); strings.Contains(got, "--no-mount") || strings.Contains(got, "--network") {
		t.Errorf("none: %s", got)
	}
}

func TestLineNone(t *testing.T) {
	s := Spec{Kind: "none", Env: map[string]string{"NEMORL_STAGE": "train"}, PassEnv: []string{"CUDA_VISIBLE_DEVICES"}, Argv: []string{"/opt/stand-in"}}
	got, err := s.Line()
	if err != nil {
		t.Fatal(err)
	}
	want := `env -i PATH=/usr/local/bin:/usr/bin:/bin HOME=/nonexistent NEMORL_STAGE=train "CUDA_VISIBLE_DEVICES=${CUDA_VISIBLE_DEVICES:-}" /opt/stand-in`
	if got != want {
		t.Errorf("got  %s\nwant %s", got, want)
	}
}

func TestLineRejects(t *testing.T) {
	for name, s := range map[string]Spec{
		"empty argv":    {Kind: "none"},
		"bind colon":    {Kind: "apptainer", Binary: "apptainer", Image: "/i", Argv: []string{"x"}, Binds: []Bind{{Host: "/a:b", Container: "/c"}}},
		"relative bind": {Kind: "apptainer", Binary: "apptainer", Image: "/i", Argv: []string{"x"}, Binds: []Bind{{Host: "a", Container: "/c"}}},
		"bad env name":  {Kind: "none", Argv: []string{"x"}, Env: map[string]string{"A-B": "1"}},
		"bad pass name": {Kind: "none", Argv: []string{"x"}, PassEnv: []string{"X}; id; {"}},
		"bad image var": {Kind: "apptainer", Binary: "apptainer", ImageVar: "X; id", Argv: []string{"x"}},
	} {
		if _, err := s.Line(); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

// TestScratchEnvAndPwd: HOME and the caches under the scratch directory
// (the container's /tmp, or the scratch variable without a container), and
// --pwd on container lines only.
func TestScratchEnvAndPwd(t *testing.T) {
	base := Spec{Kind: configs.RuntimeApptainer, Binary: "apptainer", Image: "/i/t.sif", WorkdirVar: "nemorl_scratch",
		ScratchEnv: map[string]string{"HOME": "home", "UV_CACHE_DIR": "cache/uv"}, Pwd: "/tmp", Argv: []string{"/bin/true"}}
	line, err := base.Line()
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{" --pwd /tmp ", " --no-home --writable-tmpfs --no-mount hostfs,bind-paths --home /tmp/home ", " --env UV_CACHE_DIR=/tmp/cache/uv "} {
		if !strings.Contains(line, want) {
			t.Errorf("container line lacks %q:\n%s", want, line)
		}
	}
	// Apptainer refuses --env HOME= (APPTAINERENV_HOME): never on the line.
	if strings.Contains(line, "HOME=") {
		t.Errorf("container line sets HOME through the environment:\n%s", line)
	}
	none := base
	none.Kind = configs.RuntimeNone
	line, err = none.Line()
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(line, ` "HOME=$nemorl_scratch/home" `) || !strings.Contains(line, ` "UV_CACHE_DIR=$nemorl_scratch/cache/uv" `) ||
		strings.Contains(line, "--pwd") || strings.Contains(line, "HOME=/nonexistent") {
		t.Errorf("runtime none line:\n%s", line)
	}
	for _, bad := range []map[string]string{{"HOME": "/abs"}, {"HOME": "../up"}, {"HOME": "a b"}, {"HOME": `a"b`}, {"1X": "x"}} {
		s := base
		s.ScratchEnv = bad
		if _, err := s.Line(); err == nil {
			t.Errorf("scratch env %v accepted", bad)
		}
	}
	s := base
	s.WorkdirVar = ""
	if _, err := s.Line(); err == nil {
		t.Error("scratch env without a workdir variable accepted")
	}
	s = base
	s.Pwd = "tmp"
	if _, err := s.Line(); err == nil {
		t.Error("relative --pwd accepted")
	}
}
