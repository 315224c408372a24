package apptainer

import (
	"embed"
	"fmt"
)

// The Apptainer definition files of the three stage images. Build them from
// the repository root, after `make build`, with
//
//	apptainer build <stage>.sif apptainer/defs/<stage>.def
//
// (their %files copy bin/nemorl-slurm into /opt/nemorl/bin/nemorl-slurm).
//
//go:embed defs/*.def
var defsFS embed.FS

// defStages are the stages that have a definition file, in episode order.
var defStages = []string{"author", "train", "eval"}

// Definition returns the embedded Apptainer definition file of stage
// ("author", "train" or "eval").
func Definition(stage string) ([]byte, error) {
	for _, s := range defStages {
		if s == stage {
			return defsFS.ReadFile("defs/" + stage + ".def")
		}
	}
	return nil, fmt.Errorf("apptainer: no definition file for stage %q (want author, train or eval)", stage)
}
