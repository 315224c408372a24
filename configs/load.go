package configs

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"reflect"
	"sort"
	"strings"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/nemorl/nemorl-slurm/internal/shell"
)

// Problem is one thing wrong with a config, located by key path and line.
type Problem struct {
	Path string // dotted key path, e.g. "cluster.login.port"
	Line int    // 1-based YAML line; 0 when the key is absent
	Msg  string
}

// Error lists every problem found in one config file.
type Error struct {
	File     string
	Problems []Problem
}

func (e *Error) Error() string {
	lines := make([]string, len(e.Problems))
	for i, p := range e.Problems {
		loc := e.File
		if p.Line > 0 {
			loc = fmt.Sprintf("%s:%d", e.File, p.Line)
		}
		if p.Path != "" {
			lines[i] = fmt.Sprintf("%s: %s: %s", loc, p.Path, p.Msg)
		} else {
			lines[i] = fmt.Sprintf("%s: %s", loc, p.Msg)
		}
	}
	return strings.Join(lines, "\n")
}

// LoadFile reads, expands, defaults and validates the config at path.
func LoadFile(path string) (*Config, error) { return LoadFileWith(path, LoadOptions{}) }

// LoadFileWith is LoadFile with options.
func LoadFileWith(path string, opt LoadOptions) (*Config, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("config %s: %w", path, err)
		}
		return nil, fmt.Errorf("config %s: %w", path, err)
	}
	return LoadWith(path, data, os.LookupEnv, opt)
}

// Load parses data (named file in messages). lookup resolves ${VAR}.
func Load(file string, data []byte, lookup func(string) (string, bool)) (*Config, error) {
	return LoadWith(file, data, lookup, LoadOptions{})
}

// LoadOptions change what Load requires.
type LoadOptions struct {
	// SecretsOptional lets a secret (policy_model.api_key) name an unset
	// variable: the secret is left empty and Config.SecretUnset names the
	// variable. For the commands that never stage an episode (cancel,
	// status, result, logs, clean, render): only submitting needs the key.
	SecretsOptional bool
	// EvalDigestOptional accepts a container runtime without
	// runtime.digests.eval: for `images lock`, which writes it.
	EvalDigestOptional bool
	// PolicyFromGymHead lets policy_model.{base_url,api_key,model,
	// uses_reasoning_parser} be missing when serve.gym_head is set: serve
	// reads them from Gym's head server and checks them with
	// CheckPolicyModel.
	PolicyFromGymHead bool
}

// LoadWith is Load with options.
func LoadWith(file string, data []byte, lookup func(string) (string, bool), opt LoadOptions) (*Config, error) {
	l := &loader{file: file, lines: map[string]int{}, opt: opt}
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil {
		return nil, l.yamlError(err)
	}
	if doc.Kind == 0 || len(doc.Content) == 0 {
		return nil, &Error{File: file, Problems: []Problem{{Msg: "empty config"}}}
	}
	l.walk(doc.Content[0], reflect.TypeOf(Config{}), "")
	if len(l.problems) > 0 {
		return nil, l.err()
	}
	cfg := &Config{}
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	if err := dec.Decode(cfg); err != nil {
		// The walk above accepts only what decodes; this is a backstop.
		return nil, l.yamlError(err)
	}
	cfg.Source = file
	cfg.lines = l.lines
	l.cfg = cfg
	l.expand(reflect.ValueOf(cfg).Elem(), "", lookup)
	if len(l.problems) > 0 {
		return nil, l.err()
	}
	if l.present("cluster") && l.present("clusters") {
		l.add("clusters", l.line("clusters"), "set cluster: (one cluster) or clusters: (several), not both")
		return nil, l.err()
	}
	if l.present("clusters") && len(cfg.Clusters) == 0 {
		l.add("clusters", l.line("clusters"), "an empty list: name at least one cluster, or use cluster:")
		return nil, l.err()
	}
	applyDefaults(cfg, l.present)
	l.expandLogin("cluster", cfg.Cluster.Login)
	for i := range cfg.Clusters {
		pre := fmt.Sprintf("clusters[%d]", i)
		applyClusterDefaults(pre, &cfg.Clusters[i].Cluster, l.present)
		l.expandLogin(pre, cfg.Clusters[i].Login)
	}
	if g := &cfg.Serve.GymConfig; *g != "" {
		var err error
		if *g, err = expandHome(*g); err != nil {
			l.add("serve.gym_config", l.line("serve.gym_config"), "%v", err)
		}
	}
	l.problems = append(l.problems, validate(cfg, l.line, l.opt)...)
	if len(l.problems) > 0 {
		return nil, l.err()
	}
	if len(cfg.Clusters) > 0 {
		var first string // commands that name no cluster use the first
		if m := cfg.Clusters[0].Members; len(m) > 0 {
			first = m[0]
		}
		cfg.withCluster(0, first)
	}
	return cfg, nil
}

// expandLogin expands ~ in a login's identity_file and known_hosts.
func (l *loader) expandLogin(pre string, lg *Login) {
	if lg == nil {
		return
	}
	for _, f := range []struct {
		key string
		v   *string
	}{{pre + ".login.identity_file", &lg.IdentityFile}, {pre + ".login.known_hosts", &lg.KnownHosts}} {
		var err error
		if *f.v, err = expandHome(*f.v); err != nil {
			l.add(f.key, l.line(f.key), "%v", err)
		}
	}
}

type loader struct {
	opt      LoadOptions
	cfg      *Config
	file     string
	lines    map[string]int // key path -> line
	problems []Problem
}

func (l *loader) add(path string, line int, format string, args ...any) {
	l.problems = append(l.problems, Problem{Path: path, Line: line, Msg: fmt.Sprintf(format, args...)})
}

func (l *loader) err() error {
	sort.SliceStable(l.problems, func(i, j int) bool { return l.problems[i].Line < l.problems[j].Line })
	return &Error{File: l.file, Problems: l.problems}
}

// line is the YAML line of path, or of its nearest parent that is present.
func (l *loader) line(path string) int {
	for path != "" {
		if n, ok := l.lines[path]; ok {
			return n
		}
		i := strings.LastIndexAny(path, ".[")
		if i < 0 {
			break
		}
		path = path[:i]
	}
	return 0
}

func (l *loader) present(path string) bool {
	_, ok := l.lines[path]
	return ok
}

func (l *loader) yamlError(err error) error {
	var te *yaml.TypeError
	if errors.As(err, &te) {
		for _, m := range te.Errors {
			l.problems = append(l.problems, problemFromYAML(m))
		}
		return l.err()
	}
	l.problems = append(l.problems, problemFromYAML(err.Error()))
	return l.err()
}

// problemFromYAML turns "yaml: line 3: did not find …" into a located problem.
func problemFromYAML(msg string) Problem {
	msg = strings.TrimPrefix(msg, "yaml: ")
	var line int
	if n, _ := fmt.Sscanf(msg, "line %d:", &line); n == 1 {
		msg = strings.TrimSpace(msg[strings.Index(msg, ":")+1:])
	}
	return Problem{Line: line, Msg: "invalid YAML: " + msg}
}

var (
	durationType = reflect.TypeOf(Duration{})
	secretType   = reflect.TypeOf(Secret(""))
	urlsType     = reflect.TypeOf(URLs(nil))
)

// walk checks node against the schema type t: unknown keys, node kinds and
// scalar types, recording the line of every key path it meets.
func (l *loader) walk(n *yaml.Node, t reflect.Type, path string) {
	if n.Kind == yaml.AliasNode {
		n = n.Alias
	}
	if n.Kind == yaml.ScalarNode && n.Tag == "!!null" {
		return
	}
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t == durationType {
		if n.Kind != yaml.ScalarNode {
			l.add(path, n.Line, "want a duration such as 5s or 1m30s")
			return
		}
		if _, err := time.ParseDuration(n.Value); err != nil {
			l.add(path, n.Line, "want a duration such as 5s or 1m30s, got %q", n.Value)
		}
		return
	}
	if t == urlsType && n.Kind == yaml.ScalarNode {
		return // one URL; a list is walked as a slice below
	}
	switch t.Kind() {
	case reflect.Struct:
		if n.Kind != yaml.MappingNode {
			l.add(path, n.Line, "want a mapping of keys (%s), got %s", strings.Join(keysOf(t), ", "), kindName(n))
			return
		}
		fields := fieldsOf(t)
		for i := 0; i+1 < len(n.Content); i += 2 {
			k, v := n.Content[i], n.Content[i+1]
			p := join(path, k.Value)
			f, ok := fields[k.Value]
			if !ok {
				hint := ""
				if s := closest(k.Value, keysOf(t)); s != "" {
					hint = fmt.Sprintf("; did you mean %q?", s)
				}
				l.add(p, k.Line, "unknown key%s (known here: %s)", hint, strings.Join(keysOf(t), ", "))
				continue
			}
			l.lines[p] = k.Line
			l.walk(v, f.Type, p)
		}
	case reflect.Slice:
		if n.Kind != yaml.SequenceNode {
			l.add(path, n.Line, "want a list, got %s", kindName(n))
			return
		}
		for i, c := range n.Content {
			p := fmt.Sprintf("%s[%d]", path, i)
			l.lines[p] = c.Line
			l.walk(c, t.Elem(), p)
		}
	case reflect.String:
		if n.Kind != yaml.ScalarNode {
			l.add(path, n.Line, "want a string, got %s", kindName(n))
		}
	case reflect.Int:
		if n.Kind != yaml.ScalarNode || n.Tag != "!!int" {
			l.add(path, n.Line, "want a whole number, got %s", kindName(n))
		}
	case reflect.Bool:
		if n.Kind != yaml.ScalarNode || n.Tag != "!!bool" {
			l.add(path, n.Line, "want true or false, got %s", kindName(n))
		}
	}
}

func kindName(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	case yaml.ScalarNode:
		return fmt.Sprintf("%q", n.Value)
	}
	return "something else"
}

type field struct {
	Type  reflect.Type
	Index []int
}

// fieldsOf maps yaml keys to struct fields, flattening ",inline" structs.
func fieldsOf(t reflect.Type) map[string]field {
	out := map[string]field{}
	for i := 0; i < t.NumField(); i++ {
		sf := t.Field(i)
		tag := sf.Tag.Get("yaml")
		name, opts, _ := strings.Cut(tag, ",")
		if name == "-" || !sf.IsExported() {
			continue
		}
		if opts == "inline" {
			for k, f := range fieldsOf(sf.Type) {
				out[k] = field{Type: f.Type, Index: append([]int{i}, f.Index...)}
			}
			continue
		}
		out[name] = field{Type: sf.Type, Index: []int{i}}
	}
	return out
}

func keysOf(t reflect.Type) []string {
	var keys []string
	for k := range fieldsOf(t) {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

func join(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

// closest returns the known key within edit distance 2 of k, if any.
func closest(k string, known []string) string {
	best, bestD := "", 3
	for _, c := range known {
		if d := editDistance(k, c); d < bestD {
			best, bestD = c, d
		}
	}
	return best
}

func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}

// expand replaces ${VAR} in every string value from lookup.
func (l *loader) expand(v reflect.Value, path string, lookup func(string) (string, bool)) {
	switch v.Kind() {
	case reflect.Pointer:
		if !v.IsNil() {
			l.expand(v.Elem(), path, lookup)
		}
	case reflect.Struct:
		if v.Type() == durationType {
			return
		}
		for k, f := range fieldsOf(v.Type()) {
			l.expand(v.FieldByIndex(f.Index), join(path, k), lookup)
		}
	case reflect.Slice:
		for i := 0; i < v.Len(); i++ {
			l.expand(v.Index(i), fmt.Sprintf("%s[%d]", path, i), lookup)
		}
	case reflect.String:
		s, err := ExpandEnv(v.String(), lookup)
		if err != nil && v.Type() == secretType && l.opt.SecretsOptional && l.cfg != nil {
			var unset *UnsetError
			if errors.As(err, &unset) {
				l.cfg.SecretUnset = "${" + unset.Name + "}"
				v.SetString("")
				return
			}
		}
		if err != nil {
			l.add(path, l.line(path), "%v", err)
			return
		}
		v.SetString(s)
	}
}

// ExpandEnv replaces each ${NAME} in s with its value from lookup. An unset
// variable is an error naming it; "$$" stands for a literal "$".
func ExpandEnv(s string, lookup func(string) (string, bool)) (string, error) {
	if !strings.Contains(s, "$") {
		return s, nil
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c != '$' {
			b.WriteByte(c)
			continue
		}
		if i+1 < len(s) && s[i+1] == '$' {
			b.WriteByte('$')
			i++
			continue
		}
		if i+1 < len(s) && s[i+1] == '{' {
			end := strings.IndexByte(s[i+2:], '}')
			if end < 0 {
				return "", fmt.Errorf("unterminated ${ in %q", s)
			}
			name := s[i+2 : i+2+end]
			if !shell.IsName(name) {
				return "", fmt.Errorf("${%s}: not a valid environment variable name", name)
			}
			val, ok := lookup(name)
			if !ok {
				return "", &UnsetError{Name: name}
			}
			b.WriteString(val)
			i += 2 + end
			continue
		}
		b.WriteByte(c)
	}
	return b.String(), nil
}

// UnsetError is a ${NAME} whose variable is not set.
type UnsetError struct{ Name string }

func (e *UnsetError) Error() string { return "${" + e.Name + "} is not set in the environment" }
