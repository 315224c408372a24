package apptainer

import (
	"embed"
	"fmt"
	"slices"

	"github.com/nemorl/nemorl-slurm/stages"
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

// Definition returns the embedded Apptainer definition file of stage
// (every stage has one).
func Definition(stage stages.Stage) ([]byte, error) {
	if slices.Contains(stages.All, stage) {
		return defsFS.ReadFile("defs/" + string(stage) + ".def")
	}
	return nil, fmt.Errorf("apptainer: no definition file for stage %q (want author, train or eval)", stage)
}
