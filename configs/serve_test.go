package configs

import (
	"strings"
	"testing"
)

func TestServeDefaultsAndChecks(t *testing.T) {
	base, err := Example("lab-none.yaml")
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := Load("lab-none.yaml", base, testEnv)
	if err != nil {
		t.Fatal(err)
	}
	if s := cfg.Serve; s.Listen != DefaultServeListen || s.Concurrency != DefaultServeConcurrency || s.Failures != ServeFailuresMask || s.Token != "" {
		t.Errorf("serve defaults %+v", s)
	}
	env := env(map[string]string{"POLICY_API_KEY": "k", "NEMORL_SERVE_TOKEN": "tok-9"})
	ok := string(base) + "serve:\n  listen: 0.0.0.0:9000\n  concurrency: 3\n  failures: error\n  token: ${NEMORL_SERVE_TOKEN}\n"
	cfg, err = Load("lab-none.yaml", []byte(ok), env)
	if err != nil {
		t.Fatal(err)
	}
	if s := cfg.Serve; s.Listen != "0.0.0.0:9000" || s.Concurrency != 3 || s.Failures != ServeFailuresError || s.Token.Reveal() != "tok-9" || s.Token.String() != Redacted {
		t.Errorf("serve %+v", s)
	}
	for body, key := range map[string]string{
		"serve:\n  listen: nowhere\n": "serve.listen",
		"serve:\n  listen: :99999\n":  "serve.listen",
		"serve:\n  concurrency: 0\n":  "serve.concurrency",
		"serve:\n  failures: maybe\n": "serve.failures",
		"serve:\n  token: \"a b\"\n":  "serve.token",
		"serve:\n  listen_port: 80\n": "listen_port",
	} {
		_, err := Load("lab-none.yaml", []byte(string(base)+body), env)
		if err == nil || !strings.Contains(err.Error(), key) {
			t.Errorf("%q: %v, want an error naming %s", body, err, key)
		}
	}
	for addr, want := range map[string]bool{"127.0.0.1:1": true, "[::1]:80": true, "localhost:8": true, "0.0.0.0:80": false, ":80": false, "10.0.0.1:80": false} {
		if Loopback(addr) != want {
			t.Errorf("Loopback(%q) = %v", addr, !want)
		}
	}
}
