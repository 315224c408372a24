package cli

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nemorl/nemorl-slurm/remote"
	"github.com/nemorl/nemorl-slurm/slurm"
)

// showConfigRunner answers scontrol show config with the lab's 24.11
// capture, KillWait set to killWait (negative: exit 1; hang: until the
// command's deadline).
type showConfigRunner struct {
	killWait int
	hang     bool
}

func (r showConfigRunner) Run(ctx context.Context, cmd remote.Command) (*remote.Result, error) {
	if strings.Join(cmd.Argv, " ") != "scontrol show config" {
		return nil, fmt.Errorf("unexpected %q", cmd.Argv)
	}
	if r.hang {
		<-ctx.Done()
		return nil, ctx.Err()
	}
	if r.killWait < 0 {
		res := &remote.Result{Stderr: []byte("scontrol: command not found\n"), ExitStatus: 127}
		return res, &remote.CommandError{Host: "fake", Command: cmd.String(), ExitStatus: 127, Stderr: "scontrol: command not found"}
	}
	b, err := os.ReadFile(filepath.Join("..", "slurm", "testdata", "lab-24.11", "scontrol_show_config.txt"))
	if err != nil {
		return nil, err
	}
	out := strings.Replace(string(b), "KillWait                = 5 sec", fmt.Sprintf("KillWait                = %d sec", r.killWait), 1)
	return &remote.Result{Stdout: []byte(out)}, nil
}

// TestDoctorSlurmConfig: doctor shows the KillWait an episode writes into
// its scripts, and MaxArraySize; a KillWait below 2 s warns, scontrol
// failing or stopped at its deadline fails with a fix.
func TestDoctorSlurmConfig(t *testing.T) {
	for _, c := range []struct {
		name   string
		r      showConfigRunner
		status string
		detail string
		fix    string
	}{
		{"lab", showConfigRunner{killWait: 5}, "ok", "KillWait 5 s (written into the scripts: they wait 3 s for a payload after TERM), MaxArraySize 10001", ""},
		{"default", showConfigRunner{killWait: 30}, "ok", "KillWait 30 s (written into the scripts: they wait 20 s for a payload after TERM), MaxArraySize 10001", ""},
		{"kill at once", showConfigRunner{killWait: 0}, "warn", "KillWait 0 s (", "ask the admins for a KillWait"},
		{"no scontrol", showConfigRunner{killWait: -1}, "fail", "scontrol: command not found", "put scontrol on the PATH"},
		{"throttled", showConfigRunner{hang: true}, "fail", "scontrol show config: no answer within 0.2s (a throttled or overloaded controller?)", pastDeadlineFix},
	} {
		t.Run(c.name, func(t *testing.T) {
			sl := slurm.New(c.r)
			sl.Deadlines = slurm.Deadlines{Scontrol: 200 * time.Millisecond}
			var got []check
			checkSlurmConfig(context.Background(), sl, func(name, status, detail, fix string) {
				got = append(got, check{Name: name, Status: status, Detail: detail, Fix: fix})
			})
			if len(got) != 1 {
				t.Fatalf("checks %+v", got)
			}
			ch := got[0]
			if ch.Name != "slurm config" || ch.Status != c.status || !strings.Contains(ch.Detail, c.detail) || !strings.Contains(ch.Fix, c.fix) || (c.fix == "") != (ch.Fix == "") {
				t.Errorf("%+v, want status %s, detail with %q, fix with %q", ch, c.status, c.detail, c.fix)
			}
		})
	}
}
