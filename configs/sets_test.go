package configs

import (
	"strings"
	"testing"
)

func TestApplySets(t *testing.T) {
	base, err := Example("lab-none.yaml")
	if err != nil {
		t.Fatal(err)
	}
	data, err := ApplySets(base, []string{"stages.train.train_seconds=120", "cluster.extra_sbatch=[--constraint=h100_80gb]", "serve.concurrency=3", "cluster.qos=high"})
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := Load("lab-none.yaml with --set", data, testEnv)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Stages.Train.TrainSeconds != 120 || len(cfg.Cluster.ExtraSbatch) != 1 || cfg.Serve.Concurrency != 3 || cfg.Cluster.QOS != "high" {
		t.Errorf("sets not applied: %+v %+v %+v", cfg.Stages.Train, cfg.Cluster, cfg.Serve)
	}
	if cfg.Stages.Author.ResearchSeconds != 60 {
		t.Errorf("a key not set changed: %d", cfg.Stages.Author.ResearchSeconds)
	}
	// Validated like the file.
	data, _ = ApplySets(base, []string{"stages.train.train_seconds=30"})
	if _, err := Load("lab-none.yaml with --set stages.train.train_seconds=30", data, testEnv); err == nil || !strings.Contains(err.Error(), "stages.train.train_seconds: want 60..3600, got 30") {
		t.Errorf("a bad value: %v", err)
	}
	for _, c := range []struct{ set, want string }{
		{"nokey", "want KEY=VALUE"},
		{"=3", "want KEY=VALUE"},
		{"a..b=3", "an empty key"},
		{"policy_model.api_key=sk-1", "a secret is never given on the command line"},
		{"serve.token=t", "a secret"},
		{"cluster.partition.x=1", "cluster.partition is not a mapping"},
		{"cluster.qos=[unclosed", "not YAML"},
	} {
		if _, err := ApplySets(base, []string{c.set}); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("--set %s: %v, want %q", c.set, err, c.want)
		}
	}
}

func FuzzApplySets(f *testing.F) {
	base, _ := Example("lab-none.yaml")
	f.Add("stages.train.train_seconds=120")
	f.Add("a.b.c=[1, 2]")
	f.Add("cluster={x: 1}")
	f.Fuzz(func(t *testing.T, set string) {
		out, err := ApplySets(base, []string{set})
		if err == nil && len(out) == 0 {
			t.Fatal("no config and no error")
		}
	})
}
