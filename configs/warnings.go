package configs

import (
	"fmt"
	"net/url"
	"sort"
	"strings"
)

// Warnings are what a valid config says that is most likely a mistake:
// the example's placeholders left in (a digest of zeros, the host login1,
// a reserved .example name). config check prints them; they stop nothing.
func Warnings(cfg *Config) []Problem {
	var out []Problem
	warn := func(key, format string, args ...any) {
		out = append(out, Problem{Path: key, Line: cfg.Line(key), Msg: fmt.Sprintf(format, args...)})
	}
	for key, d := range map[string]string{"runtime.digests.author": cfg.Runtime.Digests.Author,
		"runtime.digests.train": cfg.Runtime.Digests.Train, "runtime.digests.eval": cfg.Runtime.Digests.Eval} {
		if h := strings.TrimPrefix(d, "sha256:"); h != d && strings.Count(h, h[:1]) == len(h) {
			warn(key, "%s is a placeholder, not an image's digest: the eval job will refuse every image (run nemorl-slurm images lock, or sha256sum the image)", d)
		}
	}
	if lg := cfg.Cluster.Login; lg != nil {
		if placeholderHost(lg.Host) {
			warn("cluster.login.host", "%q is the example's placeholder: set your login node's name or ~/.ssh/config alias", lg.Host)
		}
		if lg.User == "alice" {
			warn("cluster.login.user", "%q is the example's placeholder: set your user name on the cluster", lg.User)
		}
	}
	if strings.HasPrefix(cfg.Cluster.Workdir, "/scratch/alice/") {
		warn("cluster.workdir", "%q is the example's placeholder", cfg.Cluster.Workdir)
	}
	for key, p := range map[string]string{"runtime.images.author": cfg.Runtime.Images.Author,
		"runtime.images.train": cfg.Runtime.Images.Train, "runtime.images.eval": cfg.Runtime.Images.Eval} {
		if strings.HasPrefix(p, "/scratch/alice/") {
			warn(key, "%q is the example's placeholder: build the image (apptainer/*.def) and name it here", p)
		}
	}
	for i, u := range cfg.PolicyModel.BaseURL {
		key := "policy_model.base_url"
		if len(cfg.PolicyModel.BaseURL) > 1 {
			key = fmt.Sprintf("policy_model.base_url[%d]", i)
		}
		if pu, err := url.Parse(u); err == nil && placeholderHost(pu.Hostname()) {
			warn(key, "%q names a reserved example host: set the policy server's endpoint", u)
		}
	}
	sortProblems(out)
	return out
}

// placeholderHost: the example's login1, or a name under a reserved
// top-level domain (RFC 2606: .example, .invalid, .test).
func placeholderHost(h string) bool {
	h = strings.TrimSuffix(strings.ToLower(h), ".")
	if h == "login1" || h == "example" || h == "example.com" || h == "example.org" {
		return true
	}
	for _, tld := range []string{".example", ".invalid", ".test", ".example.com", ".example.org"} {
		if strings.HasSuffix(h, tld) {
			return true
		}
	}
	return false
}

func sortProblems(ps []Problem) {
	sort.SliceStable(ps, func(i, j int) bool {
		if ps[i].Line != ps[j].Line {
			return ps[i].Line < ps[j].Line
		}
		return ps[i].Path < ps[j].Path
	})
}
