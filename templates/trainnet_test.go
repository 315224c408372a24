package templates

import (
	"fmt"
	"path"
	"slices"
	"strings"
	"testing"

	"github.com/nemorl/nemorl-slurm/apptainer"
	"github.com/nemorl/nemorl-slurm/configs"
	"github.com/nemorl/nemorl-slurm/stages"
)

// shellWords splits one line of a bash script into words as bash would
// before expansion: whitespace separates, single quotes are literal, double
// quotes keep $… as written (the batch shell expands it), a backslash
// escapes the next character. An unquoted redirection or control operator
// (> < & | ;, with a file descriptor number before it as in 2>&1) ends the
// command: it and what follows are returned in rest. A line whose quotes do
// not close is an error.
func shellWords(line string) (words []string, rest string, err error) {
	var cur strings.Builder
	inWord, quoted := false, false
	flush := func() {
		if inWord {
			words = append(words, cur.String())
		}
		cur.Reset()
		inWord, quoted = false, false
	}
	for i := 0; i < len(line); i++ {
		c := line[i]
		switch {
		case c == ' ' || c == '\t':
			flush()
		case c == '\'':
			j := strings.IndexByte(line[i+1:], '\'')
			if j < 0 {
				return nil, "", fmt.Errorf("unclosed ' at %d", i)
			}
			cur.WriteString(line[i+1 : i+1+j])
			i += j + 1
			inWord, quoted = true, true
		case c == '"':
			i++
			for ; i < len(line) && line[i] != '"'; i++ {
				if line[i] == '\\' && i+1 < len(line) && strings.IndexByte("\"\\$`", line[i+1]) >= 0 {
					i++
				}
				cur.WriteByte(line[i])
			}
			if i >= len(line) {
				return nil, "", fmt.Errorf("unclosed \"")
			}
			inWord, quoted = true, true
		case c == '\\' && i+1 < len(line):
			i++
			cur.WriteByte(line[i])
			inWord = true
		case strings.IndexByte("><&|;", c) >= 0:
			if w := cur.String(); inWord && (quoted || strings.Trim(w, "0123456789") != "" || c != '>' && c != '<') {
				words = append(words, w) // not a descriptor number: a word
			}
			return words, line[i:], nil
		default:
			cur.WriteByte(c)
			inWord = true
		}
	}
	flush()
	return words, "", nil
}

// containerExec is one `<binary> exec` command of a rendered script, parsed.
type containerExec struct {
	line  int                 // 1-based line number in the script
	flags map[string][]string // --flag → its values ("" for a switch), in order
	image string
	argv  []string
}

// execFlagTakesValue are the `apptainer exec` options the tool renders,
// with whether each takes a value. Any other option fails the parse: a new
// one must be looked at here for what it opens.
var execFlagTakesValue = map[string]bool{
	"--containall": false, "--cleanenv": false, "--no-home": false, "--writable-tmpfs": false,
	"--net": false, "--nv": false,
	"--no-mount": true, "--home": true, "--workdir": true, "--network": true, "--pwd": true,
	"--bind": true, "--env": true,
}

// containerExecs parses every command of script whose words begin (after an
// optional setsid) with binary exec.
func containerExecs(t *testing.T, script []byte, binary string) []containerExec {
	t.Helper()
	var out []containerExec
	for n, l := range strings.Split(string(script), "\n") {
		if strings.HasPrefix(strings.TrimSpace(l), "#") {
			continue
		}
		words, _, err := shellWords(l)
		if err != nil {
			t.Fatalf("line %d: %v: %s", n+1, err, l)
		}
		if len(words) > 0 && words[0] == "setsid" {
			words = words[1:]
		}
		if len(words) < 2 || words[0] != binary || words[1] != "exec" {
			continue
		}
		e := containerExec{line: n + 1, flags: map[string][]string{}}
		i := 2
		for ; i < len(words) && strings.HasPrefix(words[i], "-"); i++ {
			takes, known := execFlagTakesValue[words[i]]
			if !known {
				t.Fatalf("line %d: exec option %s is not one this test knows (what does it open?)", n+1, words[i])
			}
			name, v := words[i], ""
			if takes {
				if i+1 >= len(words) {
					t.Fatalf("line %d: %s without a value", n+1, name)
				}
				i++
				v = words[i]
			}
			e.flags[name] = append(e.flags[name], v)
		}
		if i >= len(words) {
			t.Fatalf("line %d: exec without an image", n+1)
		}
		e.image, e.argv = words[i], words[i+1:]
		out = append(out, e)
	}
	return out
}

// imageEnvironment reads the exports of a definition file's %environment.
func imageEnvironment(t *testing.T, def []byte) map[string]string {
	t.Helper()
	env := map[string]string{}
	in := false
	for _, l := range strings.Split(string(def), "\n") {
		s := strings.TrimSpace(l)
		if strings.HasPrefix(s, "%") {
			in = strings.Fields(s)[0] == "%environment"
			continue
		}
		if !in || s == "" || strings.HasPrefix(s, "#") {
			continue
		}
		kv, ok := strings.CutPrefix(s, "export ")
		if !ok {
			t.Fatalf("%%environment line %q is not an export", s)
		}
		k, v, _ := strings.Cut(kv, "=")
		env[k] = strings.Trim(v, `"`)
	}
	return env
}

// networkishEnv says whether a variable set on the exec line could give the
// container a way out or undo the image's offline settings.
func networkishEnv(k string) bool {
	u := strings.ToUpper(k)
	return strings.Contains(u, "PROXY") || strings.HasPrefix(u, "HF_") || strings.HasPrefix(u, "HUGGINGFACE") ||
		strings.HasPrefix(u, "TRANSFORMERS_") || strings.HasPrefix(u, "APPTAINER") || strings.HasPrefix(u, "SINGULARITY") ||
		u == "UV_OFFLINE" || strings.HasPrefix(u, "UV_INDEX") || u == "PIP_INDEX_URL" || u == "NO_PROXY"
}

// TestTrainJobOffline: under isolation (runtime.kind apptainer or
// singularity) the rendered train job runs the policy's code, and the
// guard and GPU check that share its flags, in a container with its own
// network namespace (--net --network none, loopback only), --containall
// --cleanenv, binds of the episode's files alone (nothing network-ish: no
// resolv.conf, sockets, /run), no variable that undoes the image's offline
// settings, in the train image, whose %environment sets HF_HUB_OFFLINE=1,
// HF_DATASETS_OFFLINE=1 and an HF_HOME that holds the model alone (the
// image's %test: no dataset cache, no copy of the eval set). So a config
// line such as dataset_name: AIME2025 finds nothing to load.
func TestTrainJobOffline(t *testing.T) {
	def, err := apptainer.Definition(stages.Train)
	if err != nil {
		t.Fatal(err)
	}
	imgEnv := imageEnvironment(t, def)
	for k, want := range map[string]string{"HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "UV_OFFLINE": "1", "HF_HOME": "/opt/nemorl/model/hf"} {
		if imgEnv[k] != want {
			t.Errorf("train.def %%environment: %s=%q, want %q", k, imgEnv[k], want)
		}
	}
	for k := range imgEnv {
		if u := strings.ToUpper(k); strings.Contains(u, "PROXY") || u == "HF_ENDPOINT" {
			t.Errorf("train.def %%environment sets %s", k)
		}
	}
	if !strings.Contains(string(def), apptainer.EvalSetImageCheck()) {
		t.Error("train.def's test section lacks the eval-set check")
	}

	type variant struct {
		example, kind, binary string
	}
	for _, v := range []variant{
		{"cluster-example.yaml", "", ""},
		{"cluster-example.yaml", configs.RuntimeSingularity, "singularity"},
		{"lab.yaml", "", ""},
	} {
		name := strings.TrimSuffix(v.example, ".yaml")
		if v.kind != "" {
			name += "/" + v.kind
		}
		t.Run(name, func(t *testing.T) {
			cfg := loadExample(t, v.example)
			if v.kind != "" {
				cfg.Runtime.Kind, cfg.Runtime.Binary = v.kind, v.binary
			}
			if cfg.Runtime.Kind != configs.RuntimeApptainer && cfg.Runtime.Kind != configs.RuntimeSingularity {
				t.Fatalf("%s: runtime %s is not isolation", v.example, cfg.Runtime.Kind)
			}
			if cfg.Stages.Train.Network {
				t.Fatalf("%s gives train the network", v.example)
			}
			f, ok := render(t, cfg).Lookup(stages.Script(stages.Train))
			if !ok {
				t.Fatal("no train script")
			}
			execs := containerExecs(t, f.Data, cfg.Runtime.Binary)
			if len(execs) != 3 {
				t.Fatalf("%d container commands in the train script, want 3 (guard, GPU check, payload)", len(execs))
			}
			guard, gpuCheck, payload := execs[0], execs[1], execs[2]
			if !slices.Equal(guard.argv, []string{"/bin/bash", "/nemorl/bundle/guard.sh", string(stages.Train)}) {
				t.Errorf("guard argv %q (no --host-network: it refuses any interface but lo)", guard.argv)
			}
			if len(gpuCheck.argv) < 2 || gpuCheck.argv[0] != "/bin/sh" {
				t.Errorf("GPU check argv %q", gpuCheck.argv)
			}
			wantArgv := cfg.Stages.Train.Command
			if len(wantArgv) == 0 {
				wantArgv = []string{"/bin/bash", "/nemorl/bundle/train.sh"}
			}
			if !slices.Equal(payload.argv, wantArgv) {
				t.Errorf("payload argv %q, want %q", payload.argv, wantArgv)
			}
			if !strings.HasPrefix(strings.Split(string(f.Data), "\n")[payload.line-1], "setsid ") {
				t.Errorf("line %d is not the payload's setsid line", payload.line)
			}
			for i, e := range execs {
				what := fmt.Sprintf("line %d (the %s)", e.line, []string{"guard", "GPU check", "payload"}[i])
				if e.image != cfg.Runtime.Images.Train {
					t.Errorf("%s: image %s, want the train image %s", what, e.image, cfg.Runtime.Images.Train)
				}
				for _, sw := range []string{"--containall", "--cleanenv", "--no-home", "--net"} {
					if !slices.Equal(e.flags[sw], []string{""}) {
						t.Errorf("%s: %s %d times, want once", what, sw, len(e.flags[sw]))
					}
				}
				if !slices.Equal(e.flags["--network"], []string{"none"}) {
					t.Errorf("%s: --network %q, want exactly none", what, e.flags["--network"])
				}
				if nm := e.flags["--no-mount"]; len(nm) != 1 || !slices.Contains(strings.Split(nm[0], ","), "hostfs") || !slices.Contains(strings.Split(nm[0], ","), "bind-paths") {
					t.Errorf("%s: --no-mount %q, want hostfs and bind-paths", what, nm)
				}
				for _, b := range e.flags["--bind"] {
					parts := strings.Split(b, ":")
					if len(parts) < 2 || len(parts) > 3 || (len(parts) == 3 && parts[2] != "ro") {
						t.Errorf("%s: bind %q is not host:container[:ro]", what, b)
						continue
					}
					host, ctr := parts[0], parts[1]
					if !strings.HasPrefix(ctr, "/nemorl/") || path.Clean(ctr) != ctr {
						t.Errorf("%s: bind %q puts something at %s, outside /nemorl/", what, b, ctr)
					}
					if host != "$"+TrainOutVar && !strings.HasPrefix(host, cfg.Cluster.Workdir+"/") {
						t.Errorf("%s: bind %q binds %s, neither the episode's files nor the node-local output", what, b, host)
					}
					for _, n := range []string{"/etc", "/run", "/var/run", "/dev", "/proc", "/sys", "/tmp/.X11-unix", ".sock", "resolv.conf", "munge", "slurm"} {
						if strings.Contains(host, n) || strings.Contains(ctr, n) {
							t.Errorf("%s: bind %q names %s", what, b, n)
						}
					}
				}
				for _, kv := range e.flags["--env"] {
					k, val, ok := strings.Cut(kv, "=")
					if !ok {
						t.Errorf("%s: --env %q is not NAME=value", what, kv)
						continue
					}
					if networkishEnv(k) {
						t.Errorf("%s: --env %s=%s: the line must leave such variables to the image (its %s=%q)", what, k, val, k, imgEnv[k])
					}
				}
				// --cleanenv: nothing else of the job's environment goes in.
				if e.flags["--home"] == nil || !slices.Equal(e.flags["--workdir"], []string{"$" + ScratchVar}) {
					t.Errorf("%s: --home %q --workdir %q", what, e.flags["--home"], e.flags["--workdir"])
				}
			}
			// Same container for all three: only the command differs.
			for _, e := range execs[:2] {
				if fmt.Sprint(e.flags) != fmt.Sprint(payload.flags) {
					t.Errorf("line %d's flags differ from the payload's:\n%v\n%v", e.line, e.flags, payload.flags)
				}
			}
			// Apptainer takes APPTAINERENV_*, APPTAINER_BIND and options from
			// the job's environment whatever --cleanenv says: the script clears
			// them before the first container command.
			lines := strings.Split(string(f.Data), "\n")
			clear := slices.Index(lines, `for nemorl_v in ${!APPTAINER@} ${!SINGULARITY@}; do`)
			unset := slices.Index(lines, `unset APPTAINER_BIND APPTAINER_BINDPATH SINGULARITY_BIND SINGULARITY_BINDPATH`)
			if clear < 0 || unset < 0 || clear+1 > guard.line || unset+1 > guard.line {
				t.Errorf("the APPTAINER*/SINGULARITY* variables are not cleared before line %d (loop at %d, unset at %d)", guard.line, clear+1, unset+1)
			}
		})
	}

	// The parse is not vacuous: stages.train.network gives train the host
	// network, and the flags go (the guard then allows the interfaces).
	cfg := loadExample(t, "cluster-example.yaml")
	cfg.Stages.Train.Network = true
	f, _ := render(t, cfg).Lookup(stages.Script(stages.Train))
	execs := containerExecs(t, f.Data, cfg.Runtime.Binary)
	if len(execs) != 3 {
		t.Fatalf("network: %d container commands", len(execs))
	}
	for _, e := range execs {
		if e.flags["--net"] != nil || e.flags["--network"] != nil {
			t.Errorf("network: line %d still has --net/--network: %v", e.line, e.flags)
		}
	}
	if !slices.Contains(execs[0].argv, "--host-network") {
		t.Errorf("network: guard argv %q lacks --host-network", execs[0].argv)
	}
}

func TestShellWords(t *testing.T) {
	for line, want := range map[string][]string{
		`a 'b c' "d $X" e\ f`:                       {"a", "b c", "d $X", "e f"},
		`x --bind "$V:/nemorl/out" y > "$f" 2>&1 &`: {"x", "--bind", "$V:/nemorl/out", "y"},
		`a 'it''s' "q\"q" >&2 || z`:                 {"a", "its", `q"q`},
		`a b2>x`:                                    {"a", "b2"},
		`a 2>&1`:                                    {"a"},
		`a "2">x`:                                   {"a", "2"},
		`a;b`:                                       {"a"},
	} {
		got, _, err := shellWords(line)
		if err != nil || !slices.Equal(got, want) {
			t.Errorf("shellWords(%q) = %q, %v; want %q", line, got, err, want)
		}
	}
	if _, _, err := shellWords(`a 'b`); err == nil {
		t.Error("unclosed quote accepted")
	}
}
