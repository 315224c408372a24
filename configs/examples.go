package configs

import (
	"bytes"
	"embed"
	"encoding/json"
	"fmt"
	"os"

	"gopkg.in/yaml.v3"
)

// Examples holds the example configs shipped in the binary.
//
//go:embed lab-none.yaml lab.yaml lab-real-author.yaml cluster-example.yaml
var Examples embed.FS

// Example returns one embedded example's bytes by file name.
func Example(name string) ([]byte, error) {
	b, err := Examples.ReadFile(name)
	if err != nil {
		return nil, fmt.Errorf("example config %s: %w", name, err)
	}
	return b, nil
}

// EffectiveYAML renders the loaded config with defaults filled in and
// secrets redacted.
func (c *Config) EffectiveYAML() ([]byte, error) {
	v := c
	if len(c.Clusters) > 0 {
		// The first entry stands in Cluster once loaded: clusters: alone.
		cp := *c
		cp.Cluster = Cluster{}
		v = &cp
	}
	b, err := yaml.Marshal(v)
	if err != nil {
		return nil, fmt.Errorf("render effective config: %w", err)
	}
	return b, nil
}

// EffectiveJSON is EffectiveYAML as JSON.
func (c *Config) EffectiveJSON() ([]byte, error) {
	y, err := c.EffectiveYAML()
	if err != nil {
		return nil, err
	}
	var m map[string]any
	if err := yaml.Unmarshal(y, &m); err != nil {
		return nil, fmt.Errorf("render effective config: %w", err)
	}
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(m); err != nil {
		return nil, fmt.Errorf("render effective config: %w", err)
	}
	return bytes.TrimSpace(b.Bytes()), nil
}

// DefaultPath is where the config is looked for without --config.
func DefaultPath() string {
	if p := os.Getenv("NEMORL_SLURM_CONFIG"); p != "" {
		return p
	}
	return DefaultFile
}

// DefaultFile is the config read when neither --config nor
// $NEMORL_SLURM_CONFIG names one.
const DefaultFile = "nemorl-slurm.yaml"
