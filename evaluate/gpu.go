package evaluate

import (
	"context"
	"fmt"
	"io"
	"os"

	"github.com/nemorl/nemorl-slurm/record"
)

// SMI is the nvidia-smi JobGPU runs: from PATH, where --nv binds the
// node's into the eval container.
const SMI = "nvidia-smi"

// JobGPU reads the GPU of the job it runs in, for the eval record:
// nvidia-smi's name and memory of the GPUs of CUDA_VISIBLE_DEVICES
// (record.QueryGPU). A GPU it cannot read does not fail the evaluation
// (the eval script already refused a job without a GPU): the record then
// names none, and the reason goes to warn (nil: standard error).
func JobGPU(ctx context.Context, warn io.Writer) record.GPU {
	g, err := record.QueryGPU(ctx, SMI, os.Getenv("CUDA_VISIBLE_DEVICES"))
	if err != nil {
		if warn == nil {
			warn = os.Stderr
		}
		fmt.Fprintf(warn, "nemorl-slurm evaluate: the eval job's GPU could not be read, the record names none: %v\n", err)
		return record.GPU{}
	}
	return g
}
