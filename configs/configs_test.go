package configs

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

func env(m map[string]string) func(string) (string, bool) {
	return func(k string) (string, bool) { v, ok := m[k]; return v, ok }
}

var testEnv = env(map[string]string{"POLICY_API_KEY": "sk-live-0123456789"})

func TestExamplesLoad(t *testing.T) {
	for _, name := range []string{"lab-none.yaml", "lab-real-author.yaml", "cluster-example.yaml"} {
		data, err := Example(name)
		if err != nil {
			t.Fatal(err)
		}
		cfg, err := Load(name, data, testEnv)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if cfg.Cluster.Gres != "gpu:h100:1" {
			t.Errorf("%s: gres = %q", name, cfg.Cluster.Gres)
		}
		out, err := cfg.EffectiveYAML()
		if err != nil {
			t.Fatal(err)
		}
		if bytes.Contains(out, []byte(cfg.PolicyModel.APIKey.Reveal())) {
			t.Errorf("%s: effective config leaks the API key:\n%s", name, out)
		}
		if !bytes.Contains(out, []byte(Redacted)) {
			t.Errorf("%s: effective config does not show the key as redacted", name)
		}
		js, err := cfg.EffectiveJSON()
		if err != nil {
			t.Fatal(err)
		}
		if bytes.Contains(js, []byte(cfg.PolicyModel.APIKey.Reveal())) || !bytes.Contains(js, []byte(`"research_seconds"`)) {
			t.Errorf("%s: bad effective JSON: %s", name, js)
		}
		// The effective config is itself a valid config (secret aside).
		again := bytes.ReplaceAll(out, []byte(Redacted), []byte("k"))
		if _, err := Load(name+" (effective)", again, testEnv); err != nil {
			t.Errorf("%s: effective config does not load again: %v", name, err)
		}
	}
	cfg, _ := Load("x", mustExample(t, "cluster-example.yaml"), testEnv)
	if cfg.PolicyModel.APIKey.Reveal() != "sk-live-0123456789" {
		t.Errorf("api_key not expanded from the environment")
	}
}

func mustExample(t *testing.T, name string) []byte {
	t.Helper()
	b, err := Example(name)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestDefaults(t *testing.T) {
	cfg, err := Load("min.yaml", []byte(`
cluster: {workdir: /w}
runtime: {kind: none}
policy_model: {base_url: "http://p/v1", api_key: k, model: m, uses_reasoning_parser: true}
`), testEnv)
	if err != nil {
		t.Fatal(err)
	}
	s := cfg.Stages
	checks := []struct {
		name      string
		got, want any
	}{
		{"research_seconds", s.Author.ResearchSeconds, 3600},
		{"max_turns", s.Author.MaxTurns, 200},
		{"train_seconds", s.Train.TrainSeconds, 3600},
		{"eval concurrency", s.Eval.Concurrency, 30},
		{"episodes concurrency", cfg.Episodes.Concurrency, 32},
		{"poll_min", cfg.Episodes.PollMin.Duration, 5 * time.Second},
		{"poll_max", cfg.Episodes.PollMax.Duration, 60 * time.Second},
		{"retries", cfg.Episodes.Retries, 2},
		{"no_requeue", cfg.Episodes.NoRequeue, false},
		{"gres", cfg.Cluster.Gres, "gpu:h100:1"},
		{"login", cfg.Cluster.Login == nil, true},
		{"binary", cfg.Runtime.Binary, ""},
		{"gpu_devices", cfg.Cluster.GPUDevices, "/dev/nvidia[0-9]*"},
		{"train network", s.Train.Network, false},
		{"eval network", s.Eval.Network, false},
	}
	for _, c := range checks {
		if c.got != c.want {
			t.Errorf("%s = %v, want %v", c.name, c.got, c.want)
		}
	}
	if AIME25Problems*AIME25Samples != 240 || EvalTemperature != 0.7 || EvalTopP != 1.0 {
		t.Errorf("evaluation protocol drifted from the reference")
	}
}

// TestNetworkAndEvalDigestOptional: stages.{train,eval}.network take a
// YAML boolean; EvalDigestOptional (images lock) accepts a container
// runtime without runtime.digests.eval, which Load refuses.
func TestNetworkAndEvalDigestOptional(t *testing.T) {
	cfg, err := Load("n.yaml", []byte(`
cluster: {workdir: /w, gpu_devices: "/dev/nemorl-fakegpu[0-9]*"}
runtime: {kind: none}
policy_model: {base_url: "http://p/v1", api_key: k, model: m, uses_reasoning_parser: true}
stages: {train: {network: true}, eval: {network: false}}
`), testEnv)
	if err != nil {
		t.Fatal(err)
	}
	if !cfg.Stages.Train.Network || cfg.Stages.Eval.Network || cfg.Cluster.GPUDevices != "/dev/nemorl-fakegpu[0-9]*" {
		t.Errorf("network train=%v eval=%v gpu_devices=%q", cfg.Stages.Train.Network, cfg.Stages.Eval.Network, cfg.Cluster.GPUDevices)
	}
	noDigest := []byte(`
cluster: {workdir: /w}
runtime:
  kind: apptainer
  images: {author: /i/a.sif, train: /i/t.sif, eval: /i/e.sif}
policy_model: {base_url: "http://p/v1", api_key: k, model: m, uses_reasoning_parser: true}
`)
	if _, err := Load("d.yaml", noDigest, testEnv); err == nil || !strings.Contains(err.Error(), "runtime.digests.eval") {
		t.Errorf("Load without the eval digest: %v", err)
	}
	if _, err := LoadWith("d.yaml", noDigest, testEnv, LoadOptions{EvalDigestOptional: true}); err != nil {
		t.Errorf("LoadWith EvalDigestOptional: %v", err)
	}
}

func TestSingularityBinaryDefault(t *testing.T) {
	cfg, err := Load("s.yaml", []byte(`
cluster: {workdir: /w}
runtime:
  kind: singularity
  images: {author: /i/a.sif, train: /i/t.sif, eval: /i/e.sif}
  digests: {eval: "sha256:`+strings.Repeat("ab", 32)+`"}
policy_model: {base_url: "http://p/v1", api_key: k, model: m, uses_reasoning_parser: true}
`), testEnv)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Runtime.Binary != "singularity" {
		t.Errorf("binary = %q", cfg.Runtime.Binary)
	}
}

// TestBadConfigs loads every file under testdata/bad; each names, in its
// first line "# want: LINE PATH", the problem it must produce.
func TestBadConfigs(t *testing.T) {
	files, _ := filepath.Glob("testdata/bad/*.yaml")
	if len(files) < 15 {
		t.Fatalf("only %d bad configs", len(files))
	}
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) {
			data, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			line, path := wantOf(t, data)
			_, err = Load(f, data, testEnv)
			var ce *Error
			if !errors.As(err, &ce) {
				t.Fatalf("want a config error, got %v", err)
			}
			found := false
			for _, p := range ce.Problems {
				if p.Line == line && p.Path == path {
					found = true
				}
			}
			if !found {
				t.Fatalf("want a problem at line %d for %q, got:\n%v", line, path, err)
			}
			msg := err.Error()
			loc := f + ":" + strconv.Itoa(line) + ":"
			if !strings.Contains(msg, loc) {
				t.Errorf("message lacks %q:\n%s", loc, msg)
			}
			if strings.Contains(msg, "sk-test-secret-value") {
				t.Errorf("message leaks the API key:\n%s", msg)
			}
		})
	}
}

func wantOf(t *testing.T, data []byte) (int, string) {
	first, _, _ := bytes.Cut(data, []byte("\n"))
	f := strings.Fields(strings.TrimPrefix(string(first), "# want:"))
	if len(f) < 1 {
		t.Fatalf("no '# want: LINE PATH' header")
	}
	n, err := strconv.Atoi(f[0])
	if err != nil {
		t.Fatal(err)
	}
	if len(f) == 1 {
		return n, ""
	}
	return n, f[1]
}

func TestPolicyModelMissingListsAll(t *testing.T) {
	_, err := Load("p.yaml", []byte("cluster: {workdir: /w}\nruntime: {kind: none}\npolicy_model: {model: m}\n"), testEnv)
	if err == nil || !strings.Contains(err.Error(), "missing base_url, api_key, uses_reasoning_parser") {
		t.Fatalf("got %v", err)
	}
}

func TestUnknownKeySuggests(t *testing.T) {
	_, err := Load("u.yaml", []byte("cluster: {workdir: /w, partiton: gpu}\n"), testEnv)
	if err == nil || !strings.Contains(err.Error(), `did you mean "partition"`) {
		t.Fatalf("got %v", err)
	}
}

func TestExpandEnv(t *testing.T) {
	look := env(map[string]string{"A": "x", "EMPTY": ""})
	for in, want := range map[string]string{"${A}/b": "x/b", "$$HOME": "$HOME", "a$b": "a$b", "${EMPTY}z": "z"} {
		got, err := ExpandEnv(in, look)
		if err != nil || got != want {
			t.Errorf("ExpandEnv(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	for _, in := range []string{"${UNSET}", "${A", "${1X}"} {
		if _, err := ExpandEnv(in, look); err == nil {
			t.Errorf("ExpandEnv(%q): want an error", in)
		}
	}
}

func TestSecretNeverFormats(t *testing.T) {
	s := Secret("sk-abc")
	for i, got := range []string{fmt.Sprintf("%v", s), fmt.Sprint(s), fmt.Sprintf("%#v", s), fmt.Sprintf("%+v", struct{ K Secret }{s}), fmt.Sprintf("%q", s)} {
		if strings.Contains(got, "sk-abc") {
			t.Errorf("format %d prints the secret: %s", i, got)
		}
	}
}

func FuzzLoad(f *testing.F) {
	for _, name := range []string{"lab-none.yaml", "cluster-example.yaml"} {
		b, _ := Example(name)
		f.Add(b)
	}
	files, _ := filepath.Glob("testdata/bad/*.yaml")
	for _, p := range files {
		b, _ := os.ReadFile(p)
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		cfg, err := Load("fuzz.yaml", data, testEnv)
		if err == nil {
			if cfg == nil {
				t.Fatal("nil config without error")
			}
			if _, err := cfg.EffectiveYAML(); err != nil {
				t.Fatal(err)
			}
			return
		}
		var ce *Error
		if !errors.As(err, &ce) || len(ce.Problems) == 0 {
			t.Fatalf("error is not a located config error: %v", err)
		}
	})
}

func TestHomeExpanded(t *testing.T) {
	home, err := os.UserHomeDir()
	if err != nil {
		t.Skip(err)
	}
	cfg, err := Load("x", mustExample(t, "cluster-example.yaml"), testEnv)
	if err != nil {
		t.Fatal(err)
	}
	lg := cfg.Cluster.Login
	if lg.IdentityFile != filepath.Join(home, ".ssh/id_ed25519") || lg.KnownHosts != filepath.Join(home, ".ssh/known_hosts") {
		t.Errorf("identity_file %q, known_hosts %q: ~/ not expanded", lg.IdentityFile, lg.KnownHosts)
	}
}

// TestClusters: clusters: entries are clusters of their own; For gives
// the config as each sees it, the first stands in Cluster, and the
// effective config keeps clusters: alone.
func TestClusters(t *testing.T) {
	data := []byte(`clusters:
  - name: east
    workdir: /east/episodes
    partition: gpu
    login: {host: login.east, user: u}
  - name: west
    workdir: /west/episodes
    gres: gpu:a100:1
    max_in_flight: 50
    images: {author: /west/a.sif, train: /west/t.sif, eval: /west/e.sif}
    digests: {eval: 'sha256:1111111111111111111111111111111111111111111111111111111111111111'}
runtime:
  kind: apptainer
  images: {author: /east/a.sif, train: /east/t.sif, eval: /east/e.sif}
  digests: {eval: 'sha256:0000000000000000000000000000000000000000000000000000000000000000'}
policy_model: {base_url: 'http://p/v1', api_key: k, model: m, uses_reasoning_parser: false}
serve: {mix_gpu_types: true}
`)
	cfg, err := Load("c.yaml", data, testEnv)
	if err != nil {
		t.Fatal(err)
	}
	if got := cfg.ClusterNames(); len(got) != 2 || got[0] != "east" || got[1] != "west" {
		t.Fatalf("ClusterNames %v", got)
	}
	if cfg.Cluster.Workdir != "/east/episodes" || cfg.ClusterName != "east" || cfg.Cluster.Login.KnownHosts == "" {
		t.Errorf("the first entry should stand in cluster: %+v (%q)", cfg.Cluster, cfg.ClusterName)
	}
	west, err := cfg.For("west")
	if err != nil {
		t.Fatal(err)
	}
	if west.Cluster.Workdir != "/west/episodes" || west.Cluster.Gres != "gpu:a100:1" || west.Runtime.Images.Eval != "/west/e.sif" ||
		west.Runtime.Digests.Eval[7] != '1' || west.ClusterName != "west" || west.Cluster.GPUDevices != DefaultGPUDevices || west.Cluster.Login != nil {
		t.Errorf("For(west): %+v %+v %q", west.Cluster, west.Runtime, west.ClusterName)
	}
	if cfg.Runtime.Images.Eval != "/east/e.sif" || cfg.Cluster.Gres != DefaultGres {
		t.Errorf("For must not change the config: %+v", cfg.Runtime.Images)
	}
	if cfg.MaxInFlight("west") != 50 || cfg.MaxInFlight("east") != 0 {
		t.Errorf("max_in_flight %d %d", cfg.MaxInFlight("west"), cfg.MaxInFlight("east"))
	}
	if _, err := cfg.For("north"); err == nil || !strings.Contains(err.Error(), `"north"`) || !strings.Contains(err.Error(), "west") {
		t.Errorf("For(north): %v", err)
	}
	y, err := cfg.EffectiveYAML()
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(y), "\ncluster:") || !strings.Contains(string(y), "clusters:") {
		t.Errorf("effective config:\n%s", y)
	}
	again, err := LoadWith("effective", y, testEnv, LoadOptions{SecretsOptional: true})
	if err != nil {
		t.Fatalf("effective config does not load again: %v\n%s", err, y)
	}
	if w, _ := again.For("west"); w == nil || w.Cluster.Workdir != "/west/episodes" {
		t.Errorf("effective config lost west: %+v", w)
	}
	// An entry with members: a cluster per member, named entry/member,
	// each sending its Slurm commands to its member; the entry's limits are
	// each member's.
	fed, err := Load("fed.yaml", []byte(`clusters:
  - name: site
    workdir: /site/episodes
    max_in_flight: 7
    members: [gpu-a, gpu-b]
  - name: west
    workdir: /west/episodes
runtime: {kind: none}
policy_model: {base_url: 'http://p/v1', api_key: k, model: m, uses_reasoning_parser: false}
`), testEnv)
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(fed.ClusterNames(), " "); got != "site/gpu-a site/gpu-b west" {
		t.Errorf("ClusterNames %q", got)
	}
	if fed.ClusterName != "site/gpu-a" || fed.Cluster.Member != "gpu-a" {
		t.Errorf("the first member should stand in cluster: %q %q", fed.ClusterName, fed.Cluster.Member)
	}
	b, err := fed.For("site/gpu-b")
	if err != nil || b.Cluster.Member != "gpu-b" || b.ClusterName != "site/gpu-b" || b.Cluster.Workdir != "/site/episodes" {
		t.Errorf("For(site/gpu-b): %+v %v", b, err)
	}
	if w, err := fed.For("west"); err != nil || w.Cluster.Member != "" {
		t.Errorf("For(west): member %q, %v", w.Cluster.Member, err)
	}
	for _, bad := range []string{"site", "site/gpu-c", "west/gpu-a", "site/"} {
		if _, err := fed.For(bad); err == nil || !strings.Contains(err.Error(), "site/gpu-b") {
			t.Errorf("For(%q): %v, want an error naming the clusters", bad, err)
		}
	}
	if fed.MaxInFlight("site/gpu-b") != 7 || fed.MaxInFlight("west") != 0 {
		t.Errorf("max_in_flight %d %d", fed.MaxInFlight("site/gpu-b"), fed.MaxInFlight("west"))
	}
	if y, err := fed.EffectiveYAML(); err != nil || !strings.Contains(string(y), "- gpu-b") || strings.Contains(string(y), "member:") {
		t.Errorf("effective config: %v\n%s", err, y)
	}
	one, err := Load("one.yaml", []byte("cluster: {workdir: /w}\nruntime: {kind: none}\npolicy_model: {base_url: 'http://p/v1', api_key: k, model: m, uses_reasoning_parser: false}\n"), testEnv)
	if err != nil {
		t.Fatal(err)
	}
	if n := one.ClusterNames(); len(n) != 1 || n[0] != "" {
		t.Errorf("one cluster: names %q", n)
	}
	if c, err := one.For(""); err != nil || c != one {
		t.Errorf("For(\"\") of one cluster: %v", err)
	}
	if _, err := one.For("east"); err == nil {
		t.Error("For(east) of a config without clusters: should fail")
	}
}

// TestClustersGPUTypes: the clusters: entries share one GPU type unless
// serve.mix_gpu_types is set; every gres in conflict is a problem at its
// own line (or its entry's, where it is the default) naming the other's
// key and line, and an untyped gres is refused.
func TestClustersGPUTypes(t *testing.T) {
	const tail = "runtime: {kind: none}\npolicy_model: {base_url: 'http://p/v1', api_key: k, model: m, uses_reasoning_parser: false}\n"
	entries := func(gres ...string) string {
		var b strings.Builder
		b.WriteString("clusters:\n")
		for i, g := range gres {
			fmt.Fprintf(&b, "  - name: c%d\n    workdir: /w%d\n", i, i)
			if g != "" {
				fmt.Fprintf(&b, "    gres: %s\n", g)
			}
		}
		return b.String()
	}
	for _, c := range []struct {
		name string
		data string
		want []string // "LINE PATH: words of the message", in order
	}{
		{"one type", entries("gpu:h100:1", "", "gpu:H100:2"), nil},
		{"one cluster, any gres", entries("gpu:1"), nil},
		{"members share their entry's", "clusters:\n  - name: site\n    workdir: /w\n    gres: gpu:a100:1\n    members: [a, b]\n", nil},
		{"two types", entries("gpu:h100:1", "gpu:a100:1"), []string{
			"4 clusters[0].gres: gpu:h100:1 names GPU type h100, but clusters[1].gres gpu:a100:1 (line 7) names another",
			"7 clusters[1].gres: gpu:a100:1 names GPU type a100, but clusters[0].gres gpu:h100:1 (line 4) names h100",
		}},
		{"the default against another", entries("", "gpu:a100:1"), []string{
			"2 clusters[0].gres: gpu:h100:1 (the default) names GPU type h100, but clusters[1].gres gpu:a100:1 (line 6) names another",
			"6 clusters[1].gres: gpu:a100:1 names GPU type a100, but clusters[0].gres gpu:h100:1 (the default; clusters[0] at line 2) names h100",
		}},
		{"three, two of them off", entries("gpu:h100:1", "gpu:a100:1", "gpu:l40s:1"), []string{
			"4 clusters[0].gres: clusters[1].gres gpu:a100:1 (line 7), clusters[2].gres gpu:l40s:1 (line 10) name another",
			"7 clusters[1].gres: names GPU type a100",
			"10 clusters[2].gres: names GPU type l40s",
		}},
		{"untyped", entries("gpu:h100:1", "gpu:1"), []string{"7 clusters[1].gres: gpu:1 names no GPU type"}},
		{"every one untyped", entries("gpu:1", "gpu:2"), []string{"4 clusters[0].gres: gpu:1 names no GPU type", "7 clusters[1].gres: gpu:2 names no GPU type"}},
		{"a malformed gres is reported once, as malformed", entries("gpu:h100:1", "h100"), []string{"7 clusters[1].gres: want name[:type]:count"}},
		{"mixing on purpose", entries("gpu:h100:1", "gpu:a100:1", "gpu:1") + "serve: {mix_gpu_types: true}\n", nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			cfg, err := Load("g.yaml", []byte(c.data+tail), testEnv)
			if c.want == nil {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			var ce *Error
			if !errors.As(err, &ce) {
				t.Fatalf("want a config error, got %v (config %v)", err, cfg)
			}
			if len(ce.Problems) != len(c.want) {
				t.Fatalf("%d problems, want %d:\n%v", len(ce.Problems), len(c.want), err)
			}
			for i, w := range c.want {
				loc, words, _ := strings.Cut(w, ": ")
				p := ce.Problems[i]
				if got := fmt.Sprintf("%d %s", p.Line, p.Path); got != loc || !strings.Contains(p.Msg, words) {
					t.Errorf("problem %d: %s: %s\nwant %s: …%s…", i, got, p.Msg, loc, words)
				}
				if strings.Contains(words, "GPU type") && !strings.Contains(p.Msg, "serve.mix_gpu_types: true") {
					t.Errorf("problem %d does not name the setting that allows mixing: %s", i, p.Msg)
				}
			}
			if !strings.Contains(err.Error(), "g.yaml:"+strings.Fields(c.want[0])[0]+": clusters[") {
				t.Errorf("not located as FILE:LINE: key: %v", err)
			}
		})
	}
	if GPUType("gpu:H100:1") != "h100" || GPUType("gpu:1") != "" || GPUType("gpu:mig-3g.40gb:1") != "mig-3g.40gb" {
		t.Errorf("GPUType: %q %q %q", GPUType("gpu:H100:1"), GPUType("gpu:1"), GPUType("gpu:mig-3g.40gb:1"))
	}
}
