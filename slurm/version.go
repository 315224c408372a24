package slurm

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	"github.com/nemorl/nemorl-slurm/remote"
)

// Version is a Slurm release as its commands' --version prints it.
type Version struct {
	Major, Minor, Micro int
	// Raw is the version word as printed: "22.05.8", "24.11.0-0rc1".
	Raw string
}

func (v Version) String() string { return v.Raw }

// AtLeast reports whether v is release major.minor or later.
func (v Version) AtLeast(major, minor int) bool {
	return v.Major > major || (v.Major == major && v.Minor >= minor)
}

// ParseVersion reads what a Slurm command prints for --version:
// "PACKAGE VERSION" (src/common/proc_args.c print_slurm_version, 22.05 to
// 26.05), where PACKAGE is "slurm" ("slurm-wlm" in Debian's packages) and
// VERSION is "MAJOR.MINOR.MICRO", possibly with a suffix ("24.11.0-0rc1").
func ParseVersion(out string) (Version, error) {
	f := strings.Fields(out)
	if len(f) != 2 || !strings.HasPrefix(f[0], "slurm") {
		return Version{}, fmt.Errorf("slurm: version: want %q, got %.80q", "slurm MAJOR.MINOR.MICRO", strings.TrimSpace(out))
	}
	word := f[1]
	num, _, _ := strings.Cut(word, "-")
	parts := strings.Split(num, ".")
	if len(parts) < 2 || len(parts) > 3 {
		return Version{}, fmt.Errorf("slurm: version: bad version %.40q", word)
	}
	n := make([]int, 3)
	for i, p := range parts {
		if !isDigits(p) || len(p) > 4 {
			return Version{}, fmt.Errorf("slurm: version: bad version %.40q", word)
		}
		n[i], _ = strconv.Atoi(p)
	}
	return Version{Major: n[0], Minor: n[1], Micro: n[2], Raw: word}, nil
}

// SacctVersion is the version of the cluster's sacct client (sacct
// --version, asked once and kept; a failed ask is asked again next time).
// How sacct frames --batch-script depends on it.
func (c *Client) SacctVersion(ctx context.Context) (Version, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.sacctVersion != nil {
		return *c.sacctVersion, nil
	}
	cmd := remote.Command{Argv: []string{"sacct", "--version"}, Idempotent: true}
	res, err := c.run(ctx, KindSacct, cmd)
	if err != nil {
		return Version{}, commandError("version", cmd, res, err)
	}
	v, err := ParseVersion(string(res.Stdout))
	if err != nil {
		return Version{}, fmt.Errorf("%w (%s)", err, cmd.Brief())
	}
	c.sacctVersion = &v
	return v, nil
}
