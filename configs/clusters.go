package configs

import (
	"fmt"
	"slices"
	"strings"
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
	// serve.concurrency bounds them); with members, each member's.
	MaxInFlight int `yaml:"max_in_flight"`
	// Members are the Slurm clusters this entry's login reaches with
	// --clusters (a Slurm federation, or clusters sharing one slurmdbd):
	// each member is a cluster of its own for placement, named
	// "NAME/MEMBER", and every Slurm command of its episodes is sent to
	// it (SLURM_CLUSTERS, sacct --clusters). Unset: the login's own
	// cluster.
	Members []string `yaml:"members"`
}

// MemberSep joins an entry's name and a member's in a cluster name
// ("site/gpu-a"): entry names cannot hold it.
const MemberSep = "/"

// ClusterNames are the clusters of the config in their order: the
// clusters: entries' names, or "" alone for a config of one cluster:.
func (c *Config) ClusterNames() []string {
	if len(c.Clusters) == 0 {
		return []string{""}
	}
	var names []string
	for _, e := range c.Clusters {
		if len(e.Members) == 0 {
			names = append(names, e.Name)
			continue
		}
		for _, m := range e.Members {
			names = append(names, e.Name+MemberSep+m)
		}
	}
	return names
}

// splitName is a cluster name's entry and member ("" for an entry without
// members).
func splitName(name string) (entry, member string) {
	entry, member, _ = strings.Cut(name, MemberSep)
	return entry, member
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
	if name == "" {
		name = c.ClusterNames()[0]
	}
	entry, member := splitName(name)
	i := slices.IndexFunc(c.Clusters, func(e ClusterEntry) bool { return e.Name == entry })
	if i < 0 || (member == "") != (len(c.Clusters[i].Members) == 0) || (member != "" && !slices.Contains(c.Clusters[i].Members, member)) {
		return nil, fmt.Errorf("config %s: clusters: has no cluster named %q (known: %v)", c.Source, name, c.ClusterNames())
	}
	cp := *c
	cp.withCluster(i, member)
	return &cp, nil
}

// withCluster makes entry i (its member, where it has members) the
// config's cluster (Cluster, images and digests, ClusterName).
func (c *Config) withCluster(i int, member string) {
	e := c.Clusters[i]
	c.Cluster = e.Cluster
	c.Cluster.Member = member
	c.ClusterName = e.Name
	if member != "" {
		c.ClusterName = e.Name + MemberSep + member
	}
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
	name, _ = splitName(name)
	for _, e := range c.Clusters {
		if e.Name == name {
			return e.MaxInFlight
		}
	}
	return 0
}
