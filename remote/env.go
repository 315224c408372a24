package remote

import (
	"context"
	"slices"
)

// WithEnv is h with every command run under env(1) with vars
// ("NAME=value") set. A member of a Slurm federation is reached this way
// through its login's connection: SLURM_CLUSTERS=member sends sbatch,
// squeue, sinfo, scancel and scontrol there, in the tool's own scripts as
// well. File operations are h's.
func WithEnv(h Host, vars ...string) Host {
	if len(vars) == 0 {
		return h
	}
	return &envHost{Host: h, prefix: append([]string{"env"}, vars...)}
}

type envHost struct {
	Host
	prefix []string
}

func (e *envHost) Run(ctx context.Context, cmd Command) (*Result, error) {
	cmd.Argv = append(slices.Clone(e.prefix), cmd.Argv...)
	return e.Host.Run(ctx, cmd)
}
