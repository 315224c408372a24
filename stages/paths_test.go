package stages

import "testing"

func TestPaths(t *testing.T) {
	for _, c := range []struct{ got, want string }{
		{Bundle(Train), "train/bundle"},
		{BundleFile(Eval, "eval.json"), "eval/bundle/eval.json"},
		{PromptFile, "author/prompt.txt"},
		{SecretsFile, "author/secrets.env"},
		{PatchFile, "author/change.diff"},
		{ResponseFile, "author/response.json"},
		{CheckpointDir, "train/checkpoint"},
		{WeightsFile, "train/checkpoint/model.safetensors"},
		{EvalWorkDir, "eval/work"},
	} {
		if c.got != c.want {
			t.Errorf("got %q, want %q", c.got, c.want)
		}
	}
}
