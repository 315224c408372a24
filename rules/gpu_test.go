package rules

import (
	"testing"

	"github.com/nemorl/nemorl-slurm/record"
)

// TestOutcomeCarriesGPUs: a scored outcome names the GPU of the eval
// job's record and of the train record; a record that names none leaves
// the outcome's nil.
func TestOutcomeCarriesGPUs(t *testing.T) {
	f := healthy(true)
	ev := goodEval("3")
	ev.GPUName, ev.GPUMemoryMiB, ev.GPUCount = "NVIDIA H100 80GB HBM3", 81559, 1
	f.Outputs["eval"] = out("eval", ev, f.Outputs["eval"].File.Ctime)
	v := decideAll(t, f).Verdict
	if v == nil || v.Kind != Scored {
		t.Fatalf("verdict %+v, want scored", v)
	}
	var o Outcome
	v.Apply(&o)
	if o.GPU == nil || *o.GPU != (record.GPU{Name: "NVIDIA H100 80GB HBM3", MemoryMiB: 81559, Count: 1}) {
		t.Errorf("outcome GPU %+v, want the eval record's", o.GPU)
	}
	if o.TrainGPU != nil {
		t.Errorf("a train record naming no GPU gave the outcome %+v", o.TrainGPU)
	}
}
