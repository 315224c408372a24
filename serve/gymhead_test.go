package serve

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nemorl/nemorl-slurm/configs"
)

// gymConfigYAML is a global config as NeMo RL hands it to Gym: one vLLM
// server per data-parallel rank, a dummy key, the model's name and a
// policy_model server entry.
const gymConfigYAML = `policy_base_url:
- http://10.0.0.5:41001/v1
- http://10.0.0.6:41001/v1
policy_api_key: dummy_key
policy_model_name: Qwen/Qwen3-8B
head_server:
  host: 10.0.0.4
  port: 11000
policy_model:
  responses_api_models:
    vllm_model:
      entrypoint: app.py
      uses_reasoning_parser: true
nemorl_env:
  responses_api_agents:
    nemorl_env:
      host: 127.0.0.1
      port: 8765
`

func TestParseGymConfig(t *testing.T) {
	// The head server answers with the YAML text JSON-encoded (FastAPI str).
	asJSON, _ := json.Marshal(gymConfigYAML)
	for name, body := range map[string][]byte{"json string": asJSON, "plain yaml": []byte(gymConfigYAML)} {
		p, err := ParseGymConfig(body)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if len(p.BaseURLs) != 2 || p.BaseURLs[1] != "http://10.0.0.6:41001/v1" || p.APIKey != "dummy_key" || p.Model != "Qwen/Qwen3-8B" ||
			p.UsesReasoningParser == nil || !*p.UsesReasoningParser {
			t.Errorf("%s: %+v", name, p)
		}
	}
	p, err := ParseGymConfig([]byte("policy_base_url: http://a/v1\npolicy_model_name: m\n"))
	if err != nil || len(p.BaseURLs) != 1 || p.APIKey != "" || p.UsesReasoningParser != nil {
		t.Errorf("one URL, no key: %+v %v", p, err)
	}
	for body, want := range map[string]string{
		"policy_base_url: 7\n":                         "policy_base_url: want a URL or a list of URLs",
		"policy_base_url: [http://a/v1, 3]\n":          "policy_base_url[1]: want a URL",
		"policy_base_url: ${oc.env:POLICY_BASE_URL}\n": "unresolved interpolation",
		"policy_model_name: [a]\n":                     "policy_model_name: want a string",
		"policy_api_key: ${oc.env:KEY}\n":              "policy_api_key is an unresolved interpolation",
		"[1, 2]\n":                                     "not YAML",
		"":                                             "empty",
		`"unterminated`:                                "not YAML",
	} {
		_, err := ParseGymConfig([]byte(body))
		var ce *GymConfigError
		if err == nil || !strings.Contains(err.Error(), want) || !errors.As(err, &ce) {
			t.Errorf("%q: %v, want a GymConfigError with %q", body, err, want)
		}
	}
}

func FuzzParseGymConfig(f *testing.F) {
	asJSON, _ := json.Marshal(gymConfigYAML)
	f.Add([]byte(gymConfigYAML))
	f.Add(asJSON)
	f.Add([]byte("policy_base_url: [a, b]\npolicy_model: {responses_api_models: {x: 1}}\n"))
	f.Fuzz(func(t *testing.T, body []byte) {
		p, err := ParseGymConfig(body)
		if (p == nil) == (err == nil) {
			t.Fatalf("policy %v and error %v", p, err)
		}
		if err == nil {
			for _, u := range p.BaseURLs {
				if strings.Contains(u, "${") {
					t.Fatalf("an unresolved URL passed: %q", u)
				}
			}
		}
	})
}

func TestFetchAndFill(t *testing.T) {
	var calls atomic.Int64
	var ready atomic.Bool
	head := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		if r.URL.Path != "/global_config_dict_yaml" {
			http.NotFound(w, r)
			return
		}
		if !ready.Load() {
			http.Error(w, "starting", http.StatusServiceUnavailable)
			return
		}
		b, _ := json.Marshal(gymConfigYAML)
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(b)
	}))
	defer head.Close()

	// serve waits for a head that is not up yet, logging why.
	var logged atomic.Int64
	go func() { time.Sleep(1500 * time.Millisecond); ready.Store(true) }()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	p, err := WaitGymPolicy(ctx, head.URL+"/", func(string, ...any) { logged.Add(1) })
	if err != nil {
		t.Fatal(err)
	}
	if calls.Load() < 2 || logged.Load() < 1 {
		t.Errorf("waited through %d calls and %d log lines, want ≥2 and ≥1", calls.Load(), logged.Load())
	}

	// The config's own keys win; the missing ones are filled and checked.
	data, err := configs.Example("lab-none.yaml")
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := configs.Load("lab-none.yaml", data, func(string) (string, bool) { return "", false })
	if err != nil {
		t.Fatal(err)
	}
	cfg.PolicyModel.BaseURL, cfg.PolicyModel.APIKey = nil, ""
	filled, err := p.Fill(cfg, head.URL)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(filled, ",") != "base_url,api_key" || len(cfg.PolicyModel.BaseURL) != 2 || cfg.PolicyModel.Model != "stand-in" ||
		cfg.PolicyModel.APIKey.Reveal() != "dummy_key" || *cfg.PolicyModel.UsesReasoningParser {
		t.Errorf("filled %v: %+v", filled, cfg.PolicyModel)
	}
	// A head whose config lacks the policy fails the check, naming both.
	bare := &GymPolicy{}
	cfg.PolicyModel.BaseURL, cfg.PolicyModel.Model = nil, ""
	if _, err := bare.Fill(cfg, head.URL); err == nil || !strings.Contains(err.Error(), "with the gym head server "+head.URL+": policy_model: missing base_url, model") {
		t.Errorf("fill from an empty head: %v", err)
	}

	// A wrong address (404) is not waited on.
	ctx2, cancel2 := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel2()
	_, err = WaitGymPolicy(ctx2, head.URL+"/nope", func(string, ...any) {})
	var ce *GymConfigError
	if !errors.As(err, &ce) || !strings.Contains(err.Error(), "HTTP 404") || ctx2.Err() != nil {
		t.Errorf("a 404 head: %v", err)
	}
}
