package report

import (
	"reflect"

	"github.com/nemorl/nemorl-slurm/record"
	"github.com/nemorl/nemorl-slurm/rules"
)

// OutcomeGPUs are the GPUs an episode's outcome names, nil where it names
// none: the eval job's, from its record (written by the trusted
// evaluator), and the train job's, from the train record (what the
// policy's code printed: informational). The records reach the ledger
// only through the outcome, as rules.Outcome's fields GPU and TrainGPU
// (*record.GPU, JSON "gpu" and "train_gpu"); an Outcome type without them
// names no GPU, and every figure then counts its episodes under "GPU not
// named".
func OutcomeGPUs(o *rules.Outcome) (eval, train *record.GPU) {
	if o == nil {
		return nil, nil
	}
	return structGPUs(o)
}

// structGPUs reads the fields GPU and TrainGPU of the struct v points to,
// where it has them as a record.GPU or a *record.GPU that names a model.
func structGPUs(v any) (eval, train *record.GPU) {
	rv := reflect.ValueOf(v)
	if rv.Kind() != reflect.Pointer || rv.IsNil() || rv.Elem().Kind() != reflect.Struct {
		return nil, nil
	}
	field := func(name string) *record.GPU {
		f := rv.Elem().FieldByName(name)
		if !f.IsValid() || !f.CanInterface() {
			return nil
		}
		var g record.GPU
		switch x := f.Interface().(type) {
		case *record.GPU:
			if x == nil {
				return nil
			}
			g = *x
		case record.GPU:
			g = x
		default:
			return nil
		}
		if g.Name == "" {
			return nil
		}
		return &g
	}
	return field("GPU"), field("TrainGPU")
}

// gpuLabel is a row's GPU for the table and the figure: the model, or ""
// when the outcome names none.
func gpuLabel(g *record.GPU) string {
	if g == nil {
		return ""
	}
	return g.Name
}
