package report

import (
	"github.com/nemorl/nemorl-slurm/record"
	"github.com/nemorl/nemorl-slurm/rules"
)

// OutcomeGPUs are the GPUs an episode's outcome names, nil where it names
// none: the eval job's (rules.Outcome.GPU, from its record, written by the
// trusted evaluator), and the train job's (TrainGPU, from the train
// record: what the policy's code printed, informational). Episodes whose
// outcome names none count under "GPU not named" in every figure.
func OutcomeGPUs(o *rules.Outcome) (eval, train *record.GPU) {
	if o == nil {
		return nil, nil
	}
	return named(o.GPU), named(o.TrainGPU)
}

// named is g where it names a model, else nil.
func named(g *record.GPU) *record.GPU {
	if g == nil || g.Name == "" {
		return nil
	}
	return g
}

// gpuLabel is a row's GPU for the table and the figure: the model, or ""
// when the outcome names none.
func gpuLabel(g *record.GPU) string {
	if g == nil {
		return ""
	}
	return g.Name
}
