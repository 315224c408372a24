package configs

import (
	"encoding/json"
	"fmt"

	"gopkg.in/yaml.v3"
)

// URLs is a key that takes one string or a list of strings
// (policy_model.base_url: "http://a/v1" or ["http://a/v1", "http://b/v1"]).
type URLs []string

// UnmarshalYAML accepts a scalar or a sequence of scalars.
func (u *URLs) UnmarshalYAML(n *yaml.Node) error {
	switch n.Kind {
	case yaml.ScalarNode:
		if n.Tag == "!!null" {
			*u = nil
			return nil
		}
		*u = URLs{n.Value}
		return nil
	case yaml.SequenceNode:
		var list []string
		if err := n.Decode(&list); err != nil {
			return err
		}
		*u = list
		return nil
	}
	return fmt.Errorf("line %d: want a URL or a list of URLs", n.Line)
}

// MarshalYAML writes one URL as a string, several as a list.
func (u URLs) MarshalYAML() (any, error) {
	if len(u) == 1 {
		return u[0], nil
	}
	return []string(u), nil
}

// First is the first URL, or "".
func (u URLs) First() string {
	if len(u) == 0 {
		return ""
	}
	return u[0]
}

// MarshalJSON writes one URL as a string, several as a list.
func (u URLs) MarshalJSON() ([]byte, error) {
	if len(u) == 1 {
		return json.Marshal(u[0])
	}
	return json.Marshal([]string(u))
}
