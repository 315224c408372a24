package episode

import (
	"testing"

	"github.com/nemorl/nemorl-slurm/configs"
)

// Episodes of one process go round the endpoints of policy_model.base_url.
func TestPickPolicyBaseURL(t *testing.T) {
	urls := configs.URLs{"http://a/v1", "http://b/v1", "http://c/v1"}
	d := &Driver{Config: &configs.Config{PolicyModel: configs.PolicyModel{BaseURL: urls}}}
	count := map[string]int{}
	prev := ""
	for range 30 {
		u := d.parts().stager.pickPolicyBaseURL()
		if u == prev {
			t.Fatalf("%s twice in a row", u)
		}
		prev = u
		count[u]++
	}
	for _, u := range urls {
		if count[u] != 10 {
			t.Errorf("%s got %d of 30 episodes, want 10 (%v)", u, count[u], count)
		}
	}
	one := &Driver{Config: &configs.Config{PolicyModel: configs.PolicyModel{BaseURL: urls[:1]}}}
	if got := one.parts().stager.pickPolicyBaseURL(); got != urls[0] {
		t.Errorf("one endpoint: %q", got)
	}
}
