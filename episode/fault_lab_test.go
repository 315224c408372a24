package episode

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nemorl/nemorl-slurm/internal/labtest"
	"github.com/nemorl/nemorl-slurm/remote"
	"github.com/nemorl/nemorl-slurm/rules"
	"github.com/nemorl/nemorl-slurm/stages"
)

// replyLost is the lab host with one fault: the first train sbatch runs
// on the cluster, then the sshd (the test's own) is restarted before its reply is
// read, so the tool sees what a connection dropped between a command and
// its answer gives: remote.ErrOutcomeUnknown.
type replyLost struct {
	remote.Host
	t     *testing.T
	sshd  *labtest.SSHD
	once  sync.Once
	fired bool
}

func (h *replyLost) Run(ctx context.Context, c remote.Command) (*remote.Result, error) {
	if c.Label != "sbatch" || !strings.Contains(strings.Join(c.Argv, " "), "nemorl-train-") {
		return h.Host.Run(ctx, c)
	}
	var err error
	h.once.Do(func() {
		h.fired = true
		res, rerr := h.Host.Run(ctx, c)
		var stdout []byte
		if res != nil {
			stdout = res.Stdout
		}
		h.t.Logf("sbatch ran (%v): %q; restarting sshd before the reply is read", rerr, strings.TrimSpace(string(stdout)))
		if xerr := h.sshd.RestartErr(); xerr != nil {
			err = fmt.Errorf("restarting the test's sshd: %w", xerr)
			return
		}
		err = fmt.Errorf("%s: %w", h.Name(), remote.ErrOutcomeUnknown)
	})
	if h.fired && err != nil {
		return nil, err
	}
	return h.Host.Run(ctx, c)
}

// TestFaultReplyLost (#14, fault 5): sshd restarted between a train
// sbatch and its reply. The tool does not know whether the job was made;
// it looks it up by its name and tag, adopts it (its batch script, user
// and submit time prove it the tool's), and never submits a second one.
func TestFaultReplyLost(t *testing.T) {
	start := time.Now()
	lab, sshd := labtest.Env(t).PrivateSSHD(t) // restarted: the test's own
	d, _ := dialLabAt(t, lab, nil, 0)
	h := &replyLost{Host: d.Host, t: t, sshd: sshd}
	d.Host = h
	fin := submitOneWatched(t, d)
	if !h.fired {
		t.Fatal("the fault never fired: no train sbatch went through the host")
	}
	if o := fin.Outcome; o == nil || o.Outcome != rules.Scored {
		t.Fatalf("outcome %+v, want scored", o)
	}
	if sub := fin.Jobs[stages.Train]; !sub.Adopted || sub.JobID == "" {
		t.Fatalf("ledger train %+v: want the job adopted after the lost reply", sub)
	}
	// Slurm's view: exactly one train job under the episode's name.
	out, err := exec.Command("sacct", "-a", "-X", "-n", "-P", "--starttime=now-1hour", "--duplicates",
		"--name=nemorl-train-"+fin.Episode, "--format=JobIDRaw,State,Comment").Output()
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			t.Logf("sacct: %s", ee.Stderr)
		}
		t.Fatal(err)
	}
	lines := strings.Fields(strings.TrimSpace(string(out)))
	if len(lines) != 1 || !strings.HasPrefix(lines[0], fin.Jobs[stages.Train].JobID+"|COMPLETED|") {
		t.Fatalf("sacct's train jobs for %s:\n%s\nwant exactly job %s COMPLETED", fin.Episode, out, fin.Jobs[stages.Train].JobID)
	}
	t.Logf("fault 5: sbatch reply lost to an sshd restart; train job %s adopted, one train job in sacct (%s); %s",
		fin.Jobs[stages.Train].JobID, strings.TrimSpace(string(out)), time.Since(start).Round(time.Second))
}
