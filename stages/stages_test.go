package stages

import (
	"strings"
	"testing"
)

func TestValidEpisode(t *testing.T) {
	for s, want := range map[string]bool{
		"ep-20261201T000000Z-abc": true, "a": true, "A.b_c-1": true,
		"": false, ".hidden": false, "-flag": false, "a/b": false, "a b": false, "a;b": false,
		"é": false, strings.Repeat("x", 100): true, strings.Repeat("x", 101): false,
	} {
		if got := ValidEpisode(s); got != want {
			t.Errorf("ValidEpisode(%q) = %v, want %v", s, got, want)
		}
	}
}

func TestNames(t *testing.T) {
	if got := strings.Join(Names(), ","); got != "author,train,eval" {
		t.Errorf("All = %s", got)
	}
	for _, c := range []struct{ got, want string }{
		{JobName("ep1", Train), "nemorl-train-ep1"},
		{Comment("ep1", Eval), "nemorl:ep1:eval"},
		{AttemptComment("ep1", Eval, 0), "nemorl:ep1:eval"},
		{AttemptComment("ep1", Eval, 1), "nemorl:ep1:eval"},
		{AttemptComment("ep1", Train, 3), "nemorl:ep1:train:3"},
		{Output(Author), "author/out.log"},
		{Script(Eval), "eval/eval.sbatch"},
	} {
		if c.got != c.want {
			t.Errorf("got %q, want %q", c.got, c.want)
		}
	}
	if !Valid(Author) || Valid("Author") || Valid("") {
		t.Error("Valid")
	}
}

func TestReservedExit(t *testing.T) {
	for code := 0; code < 256; code++ {
		if ReservedExit(code) != (code >= 64 && code <= 79) {
			t.Errorf("ReservedExit(%d)", code)
		}
	}
	for _, c := range []int{ExitInputsTampered, ExitInputBad, ExitOutputNotOwn, ExitWeightsRejected, ExitIsolation, ExitNoGPU, ExitPolicyEndpoint, ExitSecretsMissing} {
		if !ReservedExit(c) {
			t.Errorf("verdict %d outside the reserved range", c)
		}
	}
	if ReservedExit(EvalRejectedExit) || ReservedExit(ExitPayloadReserved) {
		t.Error("payload statuses inside the reserved range")
	}
}
