package configs

import (
	"fmt"
	"strings"

	"gopkg.in/yaml.v3"
)

// secretKeys may not be set on the command line: argv is visible to every
// user of the machine.
var secretKeys = map[string]bool{"policy_model.api_key": true, "serve.token": true}

// ApplySets returns the config data with each KEY=VALUE of sets written in
// (KEY a dotted path such as stages.train.train_seconds; VALUE YAML: 30,
// true, [a, b], "text"), creating the mappings it needs. The result is
// loaded and validated like any file.
func ApplySets(data []byte, sets []string) ([]byte, error) {
	if len(sets) == 0 {
		return data, nil
	}
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil {
		return nil, fmt.Errorf("the config is not YAML: %w", err)
	}
	if doc.Kind == 0 {
		doc = yaml.Node{Kind: yaml.DocumentNode, Content: []*yaml.Node{{Kind: yaml.MappingNode}}}
	}
	root := doc.Content[0]
	for _, kv := range sets {
		key, val, ok := strings.Cut(kv, "=")
		if !ok || key == "" {
			return nil, fmt.Errorf("--set %q: want KEY=VALUE (KEY a dotted path such as stages.train.train_seconds)", kv)
		}
		if secretKeys[key] {
			return nil, fmt.Errorf("--set %s: a secret is never given on the command line (others can read it); use ${VARIABLE} in the config", key)
		}
		var v yaml.Node
		if err := yaml.Unmarshal([]byte(val), &v); err != nil {
			return nil, fmt.Errorf("--set %s: the value is not YAML: %w", key, err)
		}
		value := &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!null", Value: ""}
		if len(v.Content) == 1 {
			value = v.Content[0]
		}
		node := root
		parts := strings.Split(key, ".")
		for i, part := range parts {
			if part == "" {
				return nil, fmt.Errorf("--set %q: an empty key in the path", kv)
			}
			if node.Kind != yaml.MappingNode {
				return nil, fmt.Errorf("--set %s: %s is not a mapping", key, strings.Join(parts[:i], "."))
			}
			var next *yaml.Node
			for j := 0; j+1 < len(node.Content); j += 2 {
				if node.Content[j].Value == part {
					next = node.Content[j+1]
					if i == len(parts)-1 {
						node.Content[j+1] = value
					}
				}
			}
			if next == nil {
				k := &yaml.Node{Kind: yaml.ScalarNode, Value: part}
				next = &yaml.Node{Kind: yaml.MappingNode}
				if i == len(parts)-1 {
					next = value
				}
				node.Content = append(node.Content, k, next)
			}
			node = next
		}
	}
	out, err := yaml.Marshal(&doc)
	if err != nil {
		return nil, fmt.Errorf("--set: %w", err)
	}
	return out, nil
}
