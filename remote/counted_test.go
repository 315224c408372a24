package remote_test

import (
	"context"
	"testing"

	"github.com/nemorl/nemorl-slurm/remote"
	"github.com/nemorl/nemorl-slurm/remote/remotetest"
)

// Counted passes the shared suite (it changes nothing) and counts what
// went through it.
func TestCounted(t *testing.T) {
	var all []*remote.Counted
	remotetest.Run(t, func(t *testing.T) (remote.Host, string) {
		c := remote.NewCounted(remote.NewLocal())
		all = append(all, c)
		t.Cleanup(func() { _ = c.Close() })
		return c, t.TempDir()
	})
	total := map[string]int64{}
	for _, c := range all {
		for k, v := range c.Counts() {
			total[k] += v
		}
	}
	for _, op := range []string{"mkdir", "write", "read", "read_tail", "stat", "lstat", "remove"} {
		if total[op] == 0 {
			t.Errorf("the suite made no %s through Counted (counts %v)", op, total)
		}
	}

	c := remote.NewCounted(remote.NewLocal())
	defer c.Close()
	ctx := context.Background()
	for range 3 {
		if _, err := c.Run(ctx, remote.Command{Argv: []string{"/bin/true"}}); err != nil {
			t.Fatal(err)
		}
	}
	_, _ = c.Run(ctx, remote.Command{Argv: []string{"env", "A=1", "B=2", "sh", "-c", "exit 3"}})
	lc := remote.NewCounted(remote.NewLocal())
	if _, err := lc.Run(ctx, remote.Command{Argv: []string{"sh", "-c", "true"}, Label: "check"}); err != nil || lc.Counts()["run check"] != 1 || len(lc.Counts()) != 1 {
		t.Errorf("a labelled command: %v %v", err, lc.Counts())
	}
	if _, err := c.Run(ctx, remote.Command{Argv: []string{"printf", "12345"}}); err != nil {
		t.Fatal(err)
	}
	if c.Received() != 5 {
		t.Errorf("received %d bytes, want 5", c.Received())
	}
	if got := c.Counts(); got["run true"] != 3 || got["run sh"] != 1 || got["run printf"] != 1 || len(got) != 3 {
		t.Errorf("counts %v, want run true 3, run sh 1 and run printf 1", got)
	}
	if ops := c.Ops(); len(ops) != 3 || ops[0] != "run printf" {
		t.Errorf("ops %v", ops)
	}
}

func TestProgram(t *testing.T) {
	for _, c := range []struct {
		argv []string
		want string
	}{
		{[]string{"env", "SLURM_TIME_FORMAT=%s", "sacct", "--parsable2"}, "sacct"},
		{[]string{"/usr/bin/sbatch", "--parsable"}, "sbatch"},
		{[]string{"env"}, "env"},
		{nil, "?"},
		{[]string{"env", "-i", "ls"}, "env"}, // env's own flags: not looked through
		{[]string{"env", "SLURM_CLUSTERS=b", "env", "SLURM_TIME_FORMAT=%s", "squeue"}, "squeue"}, // WithEnv over the Slurm client's own env
	} {
		if got := remote.Program(c.argv); got != c.want {
			t.Errorf("Program(%q) = %q, want %q", c.argv, got, c.want)
		}
	}
}
