package cli

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/rogpeppe/go-internal/testscript"
	ucli "github.com/urfave/cli/v2"

	"github.com/nemorl/nemorl-slurm/ledger"
)

func TestMain(m *testing.M) {
	testscript.Main(m, map[string]func(){
		"nemorl-slurm": func() { os.Exit(Main(os.Args, os.Stdin, os.Stdout, os.Stderr)) },
	})
}

// TestScripts runs the CLI scripts under testdata/script (testscript).
func TestScripts(t *testing.T) {
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	testscript.Run(t, testscript.Params{
		Dir: "testdata/script",
		Setup: func(e *testscript.Env) error {
			e.Setenv("REPO", root)
			return nil
		},
		Cmds: map[string]func(ts *testscript.TestScript, neg bool, args []string){
			// exitcode N PROGRAM ARGS…: run it (stdout and stderr kept for
			// the next checks) and want exit status N.
			"exitcode": func(ts *testscript.TestScript, neg bool, args []string) {
				if neg || len(args) < 2 {
					ts.Fatalf("usage: exitcode N program [args...]")
				}
				want, err := strconv.Atoi(args[0])
				if err != nil {
					ts.Fatalf("exitcode: %v", err)
				}
				got := 0
				if err := ts.Exec(args[1], args[2:]...); err != nil {
					var ee *exec.ExitError
					if !errors.As(err, &ee) {
						ts.Fatalf("exitcode: %v", err)
					}
					got = ee.ExitCode()
				}
				if got != want {
					ts.Fatalf("%s exited %d, want %d", strings.Join(args[1:], " "), got, want)
				}
			},
			// seal-ledger DIR: seal every entry of the ledger in DIR that
			// carries no seal (as nemorl-slurm would have written it);
			// entries with one, forged or not, are left as they are.
			"seal-ledger": func(ts *testscript.TestScript, neg bool, args []string) {
				if neg || len(args) != 1 {
					ts.Fatalf("usage: seal-ledger DIR")
				}
				lg, err := ledger.OpenLedger(ts.MkAbs(args[0]))
				ts.Check(err)
				files, err := filepath.Glob(filepath.Join(lg.Dir, "episodes", "*.json"))
				ts.Check(err)
				for _, f := range files {
					var en ledger.Entry
					ts.Check(json.Unmarshal([]byte(ts.ReadFile(f)), &en))
					if en.Seal == "" {
						ts.Check(lg.Save(&en))
					}
				}
			},
		},
	})
}

// TestBadConfigsExit2 runs config check through the binary on every bad
// config kept as a test case; each must exit 2 and name its file, line and
// key on stderr, and print nothing on stdout.
func TestBadConfigsExit2(t *testing.T) {
	bin := buildBinary(t)
	files, _ := filepath.Glob("../configs/testdata/bad/*.yaml")
	if len(files) < 15 {
		t.Fatalf("only %d bad configs", len(files))
	}
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		first, _, _ := strings.Cut(string(data), "\n")
		want := strings.Fields(strings.TrimPrefix(first, "# want:"))
		loc := f + ":" + want[0] + ":"
		if len(want) > 1 {
			loc += " " + want[1] + ":"
		}
		var stdout, stderr bytes.Buffer
		cmd := exec.Command(bin, "config", "check", "--config", f)
		cmd.Env = append(os.Environ(), "POLICY_API_KEY=sk-test")
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		err = cmd.Run()
		code := 0
		if ee, ok := err.(*exec.ExitError); ok {
			code = ee.ExitCode()
		}
		if code != ExitUsage {
			t.Errorf("%s: exit %d, want 2; stderr: %s", f, code, stderr.String())
		}
		if !strings.Contains(stderr.String(), loc) {
			t.Errorf("%s: stderr lacks %q:\n%s", f, loc, stderr.String())
		}
		if stdout.Len() != 0 {
			t.Errorf("%s: stdout not empty: %s", f, stdout.String())
		}
	}
}

func buildBinary(t testing.TB) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "nemorl-slurm")
	out, err := exec.Command("go", "build", "-o", bin, "../cmd/nemorl-slurm").CombinedOutput()
	if err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

func TestExitCodesDocumented(t *testing.T) {
	readme, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []int{ExitOK, ExitInternal, ExitUsage, ExitInfra, ExitIntegrity} {
		if !bytes.Contains(readme, []byte("| "+strconv.Itoa(c)+" |")) {
			t.Errorf("README has no row for exit code %d", c)
		}
	}
}

// TestInterspersed: flags after a command's arguments are read as flags,
// values stay with their flags, and "--" still ends the flags.
func TestInterspersed(t *testing.T) {
	app := &ucli.App{Flags: globalFlags(), Commands: []*ucli.Command{logsCommand(nil), configCommand(nil), evaluateCommand(nil)}}
	for _, c := range []struct{ in, want string }{
		{"logs EP --stage eval --json", "logs --stage eval --json EP"},
		{"--config c.yaml logs EP --tail 5", "--config c.yaml logs --tail 5 EP"},
		{"logs --stage=eval EP -v", "logs --stage=eval -v EP"},
		{"logs EP -- --stage", "logs EP -- --stage"},
		{"config check --json", "config check --json"},
		{"evaluate check-weights w.safetensors --arch tiny-qwen2", "evaluate check-weights --arch tiny-qwen2 w.safetensors"},
		{"nosuch EP --json", "nosuch EP --json"},
	} {
		got := strings.Join(interspersed(app, append([]string{"nemorl-slurm"}, strings.Fields(c.in)...))[1:], " ")
		if got != c.want {
			t.Errorf("%q: got %q, want %q", c.in, got, c.want)
		}
	}
}
