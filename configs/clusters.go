package configs

import (
	"fmt"
	"slices"
)

// ClusterEntry is one entry of clusters:: a cluster one serve places
// episodes on. Its keys are cluster:'s, plus a name, the images on that
// cluster's file system and a bound on its episodes in flight.
type ClusterEntry struct {
	// Name names the cluster in the ledger, list, status, report, /ui and
	// /metrics ([A-Za-z0-9._-], unique).
	Name    string `yaml:"name"`
	Cluster `yaml:",inline"`
	// Images and Digests replace runtime.images and runtime.digests on this
	// cluster (each cluster has its own file system); unset: runtime's.
	Images  *Images  `yaml:"images"`
	Digests *Digests `yaml:"digests"`
	// MaxInFlight bounds this cluster's episodes in flight (0: only
	// serve.concurrency bounds them).
	MaxInFlight int `yaml:"max_in_flight"`
}

// ClusterNames are the clusters of the config in their order: the
// clusters: entries' names, or "" alone for a config of one cluster:.
func (c *Config) ClusterNames() []string {
	if len(c.Clusters) == 0 {
		return []string{""}
	}
	names := make([]string, len(c.Clusters))
	for i, e := range c.Clusters {
		names[i] = e.Name
	}
	return names
}

// For returns the config as the cluster name sees it: a copy whose Cluster
// and Runtime images are that entry's and whose ClusterName is name. ""
// is the config's only (or first) cluster. An unknown name is an error
// naming the known ones (a ledger entry of a cluster since removed from the
// config).
func (c *Config) For(name string) (*Config, error) {
	if len(c.Clusters) == 0 {
		if name != "" {
			return nil, fmt.Errorf("config %s has no clusters: list, so no cluster %q (its episodes were submitted under a config that had one)", c.Source, name)
		}
		return c, nil
	}
	i := 0
	if name != "" {
		i = slices.IndexFunc(c.Clusters, func(e ClusterEntry) bool { return e.Name == name })
		if i < 0 {
			return nil, fmt.Errorf("config %s: clusters: has no entry named %q (known: %v)", c.Source, name, c.ClusterNames())
		}
	}
	cp := *c
	cp.withCluster(i)
	return &cp, nil
}

// withCluster makes entry i the config's cluster (Cluster, images and
// digests, ClusterName).
func (c *Config) withCluster(i int) {
	e := c.Clusters[i]
	c.Cluster = e.Cluster
	c.ClusterName = e.Name
	if e.Images != nil {
		c.Runtime.Images = *e.Images
	}
	if e.Digests != nil {
		c.Runtime.Digests = *e.Digests
	}
}

// MaxInFlight is cluster name's bound on episodes in flight (0: none of its
// own).
func (c *Config) MaxInFlight(name string) int {
	for _, e := range c.Clusters {
		if e.Name == name {
			return e.MaxInFlight
		}
	}
	return 0
}
