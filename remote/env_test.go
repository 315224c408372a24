package remote_test

import (
	"context"
	"strings"
	"testing"

	"github.com/nemorl/nemorl-slurm/remote"
)

func TestWithEnv(t *testing.T) {
	ctx := context.Background()
	counted := remote.NewCounted(remote.NewLocal())
	h := remote.WithEnv(counted, "SLURM_CLUSTERS=gpu-b", "NEMORL_X=a b")
	res, err := h.Run(ctx, remote.Command{Argv: []string{"sh", "-c", `printf '%s|%s' "$SLURM_CLUSTERS" "$NEMORL_X"`}})
	if err != nil {
		t.Fatal(err)
	}
	if got := string(res.Stdout); got != "gpu-b|a b" {
		t.Errorf("the command saw %q, want the variables set", got)
	}
	// What runs is counted by its program, not as env.
	if n := counted.Counts()["run sh"]; n != 1 {
		t.Errorf("counts %v, want run sh once", counted.Counts())
	}
	// A failed command's error names the whole command line, variables too.
	_, err = h.Run(ctx, remote.Command{Argv: []string{"sh", "-c", "echo no >&2; exit 3"}})
	if err == nil || !strings.Contains(err.Error(), "env SLURM_CLUSTERS=gpu-b") || !strings.Contains(err.Error(), "exit status 3") {
		t.Errorf("error %v", err)
	}
	// No variables: the host itself.
	if remote.WithEnv(counted) != remote.Host(counted) {
		t.Error("WithEnv with no variables should return the host")
	}
}
