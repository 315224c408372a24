package configs

import (
	"encoding/json"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"
)

// labWith is configs/lab-none.yaml with its policy_model block replaced.
func labWith(t *testing.T, policy, extra string) []byte {
	t.Helper()
	base, err := Example("lab-none.yaml")
	if err != nil {
		t.Fatal(err)
	}
	s := string(base)
	i := strings.Index(s, "policy_model:\n")
	j := strings.Index(s[i:], "\nstages:")
	if i < 0 || j < 0 {
		t.Fatal("lab-none.yaml: no policy_model block followed by stages")
	}
	return []byte(s[:i] + policy + s[i+j:] + extra)
}

func TestBaseURLOneOrList(t *testing.T) {
	one := labWith(t, "policy_model:\n  base_url: http://a:8000/v1\n  api_key: k\n  model: m\n  uses_reasoning_parser: false\n", "")
	cfg, err := Load("one.yaml", one, testEnv)
	if err != nil {
		t.Fatal(err)
	}
	if got := cfg.PolicyModel.BaseURL; len(got) != 1 || got.First() != "http://a:8000/v1" {
		t.Errorf("one URL: %q", got)
	}
	if b, _ := json.Marshal(cfg.PolicyModel.BaseURL); string(b) != `"http://a:8000/v1"` {
		t.Errorf("one URL as JSON: %s", b)
	}
	list := labWith(t, "policy_model:\n  base_url:\n    - http://a:8000/v1\n    - https://b:8000/v1\n  api_key: k\n  model: m\n  uses_reasoning_parser: false\n", "")
	cfg, err = Load("list.yaml", list, testEnv)
	if err != nil {
		t.Fatal(err)
	}
	if got := cfg.PolicyModel.BaseURL; len(got) != 2 || got[1] != "https://b:8000/v1" {
		t.Errorf("list: %q", got)
	}
	if b, _ := yaml.Marshal(cfg.PolicyModel.BaseURL); !strings.Contains(string(b), "- https://b:8000/v1") {
		t.Errorf("list as YAML: %s", b)
	}

	for _, c := range []struct{ policy, want string }{
		{"  base_url: [http://a/v1, ftp://b/v1]\n", "list.yaml:19: policy_model.base_url[1]: want an http:// or https:// URL"},
		{"  base_url: [http://a/v1, http://a/v1]\n", "policy_model.base_url[1]: \"http://a/v1\" is listed twice"},
		{"  base_url: {a: 1}\n", "policy_model.base_url: want a list, got a mapping"},
		{"  base_url: []\n", "missing base_url"},
		{"  base_url: http://u:p@a/v1\n", "policy_model.base_url: must not carry credentials"},
	} {
		data := labWith(t, "policy_model:\n"+c.policy+"  api_key: k\n  model: m\n  uses_reasoning_parser: false\n", "")
		_, err := Load("list.yaml", data, testEnv)
		if err == nil || !strings.Contains(err.Error(), strings.TrimPrefix(c.want, "list.yaml:19: ")) {
			t.Errorf("%q: %v, want %q", c.policy, err, c.want)
		}
		if strings.HasPrefix(c.want, "list.yaml:") && !strings.Contains(err.Error(), c.want) {
			t.Errorf("%q: %v, want the line: %q", c.policy, err, c.want)
		}
	}
}

func TestGymHead(t *testing.T) {
	noPolicy := labWith(t, "", "serve:\n  gym_head: http://gym:11000\n")
	// serve reads the policy from the head: the keys may be missing.
	cfg, err := LoadWith("h.yaml", noPolicy, testEnv, LoadOptions{PolicyFromGymHead: true})
	if err != nil {
		t.Fatalf("serve's load of a config without policy_model: %v", err)
	}
	if cfg.Serve.GymHead != "http://gym:11000" {
		t.Errorf("serve.gym_head = %q", cfg.Serve.GymHead)
	}
	if err := CheckPolicyModel(cfg, "h.yaml with the head"); err == nil || !strings.Contains(err.Error(), "h.yaml with the head: policy_model: missing base_url, api_key, model, uses_reasoning_parser") {
		t.Errorf("CheckPolicyModel of an unfilled policy: %v", err)
	}
	// Every other command needs them, and is told why.
	_, err = Load("h.yaml", noPolicy, testEnv)
	if err == nil || !strings.Contains(err.Error(), "serve.gym_head fills base_url, api_key and model for serve only") {
		t.Errorf("load without PolicyFromGymHead: %v", err)
	}
	// Without a head, the option changes nothing.
	_, err = LoadWith("h.yaml", labWith(t, "", ""), testEnv, LoadOptions{PolicyFromGymHead: true})
	if err == nil || !strings.Contains(err.Error(), "missing base_url") {
		t.Errorf("PolicyFromGymHead without serve.gym_head: %v", err)
	}
	for _, bad := range []string{"gym:11000", "ftp://gym:11000", "http://gym:11000/global_config_dict_yaml", "http://u:p@gym:11000", "http://gym:11000?x=1"} {
		data := labWith(t, "", "serve:\n  gym_head: "+bad+"\n")
		_, err := LoadWith("h.yaml", data, testEnv, LoadOptions{PolicyFromGymHead: true})
		if err == nil || !strings.Contains(err.Error(), "serve.gym_head") {
			t.Errorf("gym_head %q: %v, want an error naming serve.gym_head", bad, err)
		}
	}
}
