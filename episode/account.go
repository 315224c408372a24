package episode

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"

	"github.com/nemorl/nemorl-slurm/remote"
)

// account is the cluster user the jobs run as, asked once (id on the
// cluster) and kept, and the names of other users there.
type account struct {
	host remote.Host

	mu   sync.Mutex
	uid  *int   // the cluster user's uid, once asked
	user string // and name
}

// clusterUser is the name and uid of the user the jobs run as (id on the
// cluster), asked once.
func (a *account) clusterUser(ctx context.Context) (string, int, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.uid != nil {
		return a.user, *a.uid, nil
	}
	res, err := a.host.Run(ctx, remote.Command{Argv: []string{"id"}, Idempotent: true})
	if err != nil {
		return "", 0, fmt.Errorf("ask the cluster user: %w", err)
	}
	user, uid, err := parseID(string(res.Stdout))
	if err != nil {
		return "", 0, fmt.Errorf("ask the cluster user: %w", err)
	}
	a.user, a.uid = user, &uid
	return user, uid, nil
}

// parseID reads "uid=1001(nemorl) gid=…" as printed by id(1).
func parseID(s string) (string, int, error) {
	f, _, _ := strings.Cut(strings.TrimSpace(s), " ")
	num, name, ok := strings.Cut(strings.TrimPrefix(f, "uid="), "(")
	uid, err := strconv.Atoi(num)
	if !strings.HasPrefix(f, "uid=") || !ok || !strings.HasSuffix(name, ")") || err != nil || uid < 0 {
		return "", 0, fmt.Errorf("id printed %q", s)
	}
	return strings.TrimSuffix(name, ")"), uid, nil
}

// userNames returns the names of the given uids on the cluster (for
// "CANCELLED by 1001"): one `getent passwd` for all of them; a uid with no
// name is left out.
func (a *account) userNames(ctx context.Context, uids []int) (map[int]string, error) {
	out := map[int]string{}
	if len(uids) == 0 {
		return out, nil
	}
	argv := []string{"getent", "passwd"}
	for _, u := range uids {
		argv = append(argv, strconv.Itoa(u))
	}
	res, err := a.host.Run(ctx, remote.Command{Argv: argv, Idempotent: true})
	if res == nil {
		return out, fmt.Errorf("user names: %w", err)
	}
	// getent exits 2 when some key is unknown; the lines it printed hold.
	for _, line := range strings.Split(string(res.Stdout), "\n") {
		f := strings.Split(line, ":")
		if len(f) < 3 {
			continue
		}
		if uid, err := strconv.Atoi(f[2]); err == nil && f[0] != "" {
			out[uid] = f[0]
		}
	}
	return out, nil
}
