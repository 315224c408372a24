package configs

import (
	"os"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"

	"github.com/nemorl/nemorl-slurm/stages"
)

var yamlUnmarshal = yaml.Unmarshal

func TestSetDigests(t *testing.T) {
	a := "sha256:" + strings.Repeat("a", 64)
	b := "sha256:" + strings.Repeat("b", 64)
	e := "sha256:" + strings.Repeat("e", 64)
	all := map[stages.Stage]string{stages.Author: a, stages.Train: b, stages.Eval: e}
	cases := []struct {
		name, in, want string
	}{
		{"replace one, add two, keep comments",
			"runtime:\n  kind: apptainer  # note\n  digests:\n    # pinned\n    eval: sha256:0000  # old\nother: 1\n",
			"runtime:\n  kind: apptainer  # note\n  digests:\n    # pinned\n    eval: " + e + "  # old\n    author: " + a + "\n    train: " + b + "\nother: 1\n"},
		{"quoted value",
			"runtime:\n    digests:\n        author: \"x\"\n        train: 'y'\n        eval: z\n",
			"runtime:\n    digests:\n        author: " + a + "\n        train: " + b + "\n        eval: " + e + "\n"},
		{"no digests key",
			"runtime:\n  kind: apptainer\n  binary: apptainer\n",
			"runtime:\n  digests:\n    author: " + a + "\n    train: " + b + "\n    eval: " + e + "\n  kind: apptainer\n  binary: apptainer\n"},
		{"empty digests, no final newline",
			"runtime:\n  kind: apptainer\n  digests:",
			"runtime:\n  kind: apptainer\n  digests:\n    author: " + a + "\n    train: " + b + "\n    eval: " + e + "\n"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, err := SetDigests("c.yaml", []byte(c.in), all)
			if err != nil {
				t.Fatal(err)
			}
			if string(got) != c.want {
				t.Fatalf("got:\n%s\nwant:\n%s", got, c.want)
			}
		})
	}
	for _, bad := range []struct{ in, want string }{
		{"runtime:\n  digests: {eval: x}\n", "c.yaml:2: runtime.digests is not a block mapping"},
		{"runtime: {kind: none}\n", "no block mapping runtime"},
		{"cluster: {}\n", "no block mapping runtime"},
	} {
		if _, err := SetDigests("c.yaml", []byte(bad.in), all); err == nil || !strings.Contains(err.Error(), bad.want) {
			t.Errorf("%q: %v, want %q", bad.in, err, bad.want)
		}
	}
	if _, err := SetDigests("c.yaml", []byte("runtime:\n  kind: x\n"), map[stages.Stage]string{stages.Eval: "sha256:xyz"}); err == nil {
		t.Error("a malformed digest was accepted")
	}
}

// TestSetDigestsExample locks the example cluster config: the result still
// loads, carries the three digests, and differs only in digest lines.
func TestSetDigestsExample(t *testing.T) {
	data, err := os.ReadFile("cluster-example.yaml")
	if err != nil {
		t.Fatal(err)
	}
	want := map[stages.Stage]string{stages.Author: "sha256:" + strings.Repeat("1", 64), stages.Train: "sha256:" + strings.Repeat("2", 64), stages.Eval: "sha256:" + strings.Repeat("3", 64)}
	got, err := SetDigests("cluster-example.yaml", data, want)
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := Load("cluster-example.yaml", got, func(string) (string, bool) { return "sk-test", true })
	if err != nil {
		t.Fatal(err)
	}
	d := cfg.Runtime.Digests
	if d.Author != want[stages.Author] || d.Train != want[stages.Train] || d.Eval != want[stages.Eval] {
		t.Fatalf("digests after SetDigests: %+v", d)
	}
	before, after := strings.Split(string(data), "\n"), strings.Split(string(got), "\n")
	if len(after) != len(before)+2 {
		t.Fatalf("%d lines became %d; want two added (author, train)", len(before), len(after))
	}
	changed := 0
	for _, l := range after {
		if !strings.Contains(string(data), l) {
			changed++
			if !strings.Contains(l, "sha256:") {
				t.Errorf("changed line without a digest: %q", l)
			}
		}
	}
	if changed != 3 {
		t.Errorf("%d lines changed, want 3", changed)
	}
}

// FuzzSetDigests: whatever the input, SetDigests either refuses it or
// returns YAML in which runtime.digests holds exactly the digests set.
func FuzzSetDigests(f *testing.F) {
	f.Add("runtime:\n  kind: apptainer  # note\n  digests:\n    eval: x  # old\n")
	f.Add("runtime:\n  kind: x\n")
	f.Add("runtime:\n  digests:\n")
	f.Add("runtime:\n  digests: {eval: x}\n")
	f.Add("a: [\n")
	f.Fuzz(func(t *testing.T, in string) {
		var probe map[string]any
		if yamlUnmarshal([]byte(in), &probe) != nil {
			return // not YAML a config could be: SetDigests may refuse or not
		}
		d := map[stages.Stage]string{stages.Author: "sha256:" + strings.Repeat("a", 64), stages.Eval: "sha256:" + strings.Repeat("e", 64)}
		out, err := SetDigests("f.yaml", []byte(in), d)
		if err != nil {
			return
		}
		var doc struct {
			Runtime struct {
				Digests map[string]any `yaml:"digests"`
			} `yaml:"runtime"`
		}
		if err := yamlUnmarshal(out, &doc); err != nil {
			t.Fatalf("output does not parse: %v\nin:\n%q\nout:\n%q", err, in, out)
		}
		for k, v := range d {
			if doc.Runtime.Digests[string(k)] != v {
				t.Fatalf("runtime.digests.%s = %v, want %s\nin:\n%q\nout:\n%q", k, doc.Runtime.Digests[string(k)], v, in, out)
			}
		}
	})
}
