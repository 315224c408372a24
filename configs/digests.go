package configs

import (
	"fmt"
	"regexp"
	"slices"
	"strings"

	"github.com/nemorl/nemorl-slurm/stages"

	"gopkg.in/yaml.v3"
)

var digestRE = regexp.MustCompile(`^sha256:[0-9a-f]{64}$`)

// SetDigests returns the config text data with runtime.digests.<stage> set
// to each of digests (a stage → "sha256:<hex>"). Only the
// lines that hold those values change (or are added), so comments and
// layout survive. It edits block-style YAML; a flow-style digests mapping
// is refused with a hint to edit it by hand.
func SetDigests(file string, data []byte, digests map[stages.Stage]string) ([]byte, error) {
	for stage, d := range digests {
		if !slices.Contains(stages.All, stage) {
			return nil, fmt.Errorf("%s: runtime.digests.%s: no such stage", file, stage)
		}
		if !digestRE.MatchString(d) {
			return nil, fmt.Errorf("%s: runtime.digests.%s: %q is not sha256:<64 hex>", file, stage, d)
		}
	}
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil {
		return nil, fmt.Errorf("%s: %w", file, err)
	}
	if len(doc.Content) == 0 || doc.Content[0].Kind != yaml.MappingNode {
		return nil, fmt.Errorf("%s: not a YAML mapping", file)
	}
	runtimeKey, runtime := mapLookup(doc.Content[0], "runtime")
	if runtime == nil || runtime.Kind != yaml.MappingNode || runtime.Style&yaml.FlowStyle != 0 || len(runtime.Content) == 0 {
		return nil, fmt.Errorf("%s: no block mapping runtime: to hold the digests", file)
	}
	lines := strings.SplitAfter(string(data), "\n")
	childIndent := runtime.Content[0].Column - 1
	dKey, dig := mapLookup(runtime, "digests")

	set := func(n *yaml.Node, value string) {
		l := lines[n.Line-1]
		start := n.Column - 1
		end := len(strings.TrimRight(l, "\r\n"))
		if i := strings.Index(l[start:], " #"); i >= 0 {
			end = start + i
			for end > start && (l[end-1] == ' ' || l[end-1] == '\t') {
				end--
			}
		}
		lines[n.Line-1] = l[:start] + value + l[end:]
	}
	var add []string // lines to insert
	var after int    // insert after this line (1-based)
	switch {
	case dig == nil:
		after = runtimeKey.Line
		add = append(add, strings.Repeat(" ", childIndent)+"digests:\n")
		for _, stage := range stages.All {
			if d, ok := digests[stage]; ok {
				add = append(add, strings.Repeat(" ", childIndent+2)+string(stage)+": "+d+"\n")
			}
		}
	case dig.Kind == yaml.ScalarNode && dig.Tag == "!!null":
		after = dKey.Line
		for _, stage := range stages.All {
			if d, ok := digests[stage]; ok {
				add = append(add, strings.Repeat(" ", childIndent+2)+string(stage)+": "+d+"\n")
			}
		}
	case dig.Kind == yaml.MappingNode && dig.Style&yaml.FlowStyle == 0:
		indent := dig.Content[0].Column - 1
		after = dig.Content[len(dig.Content)-1].Line
		for _, stage := range stages.All {
			d, ok := digests[stage]
			if !ok {
				continue
			}
			if _, v := mapLookup(dig, string(stage)); v != nil {
				if v.Kind != yaml.ScalarNode {
					return nil, fmt.Errorf("%s:%d: runtime.digests.%s: not a scalar; edit it by hand", file, v.Line, stage)
				}
				set(v, d)
			} else {
				add = append(add, strings.Repeat(" ", indent)+string(stage)+": "+d+"\n")
			}
		}
	default:
		return nil, fmt.Errorf("%s:%d: runtime.digests is not a block mapping; write it as one (one \"stage: sha256:…\" per line) or edit it by hand", file, dKey.Line)
	}
	if len(add) > 0 {
		if !strings.HasSuffix(lines[after-1], "\n") {
			lines[after-1] += "\n"
		}
		rest := append(add, lines[after:]...)
		lines = append(lines[:after], rest...)
	}
	return []byte(strings.Join(lines, "")), nil
}

func mapLookup(m *yaml.Node, key string) (k, v *yaml.Node) {
	for i := 0; i+1 < len(m.Content); i += 2 {
		if m.Content[i].Value == key {
			return m.Content[i], m.Content[i+1]
		}
	}
	return nil, nil
}
