package slurm

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	"github.com/nemorl/nemorl-slurm/remote"
)

// Room is what a cluster's partition has for one more GPU job now: the
// GPUs of a GRES type that no job holds on its nodes that can run jobs,
// and the jobs waiting in its queue (everyone's). serve places rows by it.
type Room struct {
	// Nodes are the partition's nodes that take jobs now (a plain idle,
	// mixed, allocated or completing: not down, drained, failing, powered
	// down or powering up or down, not responding, rebooting, planned or
	// reserved; takesJobs); GPUs are theirs of the type, FreeGPUs the ones
	// no job holds.
	Nodes, GPUs, FreeGPUs int
	// Pending is the number of the partition's jobs that wait (PENDING)
	// for its resources (not for a dependency, a hold or a begin time).
	Pending int
}

// roomScript prints sinfo's nodes of the partition (state|gres|gres used)
// and, after a line "--", the count of its pending jobs that wait for the
// partition's resources: a job held by a dependency, a hold or a begin
// time claims nothing yet (an episode's train job waits on its author's,
// which holds the GPU it will take). One command, the jobs counted where
// they are (never sent over SSH); a failed squeue fails the script.
const roomScript = `set -eu
sinfo --noheader --Node --partition="$1" --Format='StateLong:|,Gres:|,GresUsed:|'
echo --
reasons=$(squeue --noheader --partition="$1" --states=PENDING --format=%r)
printf '%s\n' "$reasons" | grep -Evc '^(Dependency|DependencyNeverSatisfied|JobHeldUser|JobHeldAdmin|BeginTime|)$' || true
`

// Room asks the cluster what partition has for jobs of gres (the
// cluster.gres form, name[:type]:count): one sh running sinfo and squeue,
// under the KindSinfo deadline. An error (one stopped at its deadline: a
// *DeadlineError) is no answer, never an empty cluster.
func (c *Client) Room(ctx context.Context, partition, gres string) (Room, error) {
	name, typ, _ := splitGres(gres)
	res, err := c.run(ctx, KindSinfo, remote.Command{Argv: []string{"sh", "-c", roomScript, "sh", partition}, Idempotent: true, Label: "sinfo+squeue"})
	if err != nil {
		return Room{}, fmt.Errorf("room of partition %q: %w", partition, err)
	}
	r, err := ParseRoom(string(res.Stdout), name, typ)
	if err != nil {
		return Room{}, fmt.Errorf("room of partition %q: %w", partition, err)
	}
	return r, nil
}

// splitGres splits name[:type]:count.
func splitGres(g string) (name, typ string, count int) {
	parts := strings.Split(g, ":")
	count, _ = strconv.Atoi(parts[len(parts)-1])
	name = parts[0]
	if len(parts) == 3 {
		typ = parts[1]
	}
	return name, typ, count
}

// ParseRoom reads roomScript's output: nodes, "--", the pending count.
// GRES of another name or type are not counted; a type-less name counts
// every type.
func ParseRoom(out, name, typ string) (Room, error) {
	nodes, count, ok := strings.Cut(out, "--\n")
	if !ok {
		return Room{}, fmt.Errorf("no %q line in the answer %q", "--", trim(out))
	}
	var r Room
	n, err := strconv.Atoi(strings.TrimSpace(count))
	if err != nil || n < 0 {
		return Room{}, fmt.Errorf("pending count %q: want a whole number", trim(count))
	}
	r.Pending = n
	for _, line := range strings.Split(strings.TrimSpace(nodes), "\n") {
		if strings.TrimSpace(line) == "" {
			continue
		}
		f := strings.Split(strings.TrimSuffix(strings.TrimSpace(line), "|"), "|")
		if len(f) != 3 {
			return Room{}, fmt.Errorf("sinfo line %q: want state|gres|gres used", trim(line))
		}
		if !takesJobs(strings.TrimSpace(f[0])) {
			continue
		}
		total, err := gresCount(f[1], name, typ)
		if err != nil {
			return Room{}, fmt.Errorf("sinfo line %q: gres: %w", trim(line), err)
		}
		used, err := gresCount(f[2], name, typ)
		if err != nil {
			return Room{}, fmt.Errorf("sinfo line %q: gres used: %w", trim(line), err)
		}
		r.Nodes++
		r.GPUs += total
		r.FreeGPUs += max(0, total-used)
	}
	return r, nil
}

// takesJobs says whether a node in sinfo's long state (StateLong:
// node_state_string() in lower case) can start a job now. The rule: only
// a plain available state counts — idle, mixed, allocated, completing —
// with no flag at all. Any suffix is a flag that the node cannot take a
// job now, or not one to count on (node_state_string in
// src/common/slurm_protocol_defs.c, the same suffixes at slurm-22-05-8-1
// and slurm-26-05-3-1): "*" not responding, "~" powered down, "#"
// powering up, "%" powering down, "!" power down pending, "@" reboot
// requested, "^" reboot issued, "$" maintenance reservation, "-" planned
// (mixed-: held by the backfill scheduler for a pending job), "+"
// completing (allocated+). Every other state is unavailable: down,
// drained, draining, fail, failing, maint, reboot, reserved, planned,
// blocked (24.05+), future, perfctrs, resume, cloud, power_*, inval,
// unknown, and any name this package does not know.
func takesJobs(state string) bool {
	switch strings.ToLower(strings.TrimSpace(state)) {
	case "idle", "mixed", "allocated", "completing":
		return true
	}
	return false
}

// gresCount sums the GRES of name (and typ, when set) in a sinfo Gres or
// GresUsed field: "gpu:h100:2(S:0-1),gpu:a100:1", "gpu:h100:1(IDX:0)",
// "(null)".
func gresCount(field, name, typ string) (int, error) {
	field = strings.TrimSpace(field)
	if field == "" || field == "(null)" {
		return 0, nil
	}
	sum := 0
	for _, g := range splitTop(field) {
		if i := strings.IndexByte(g, '('); i >= 0 {
			g = g[:i]
		}
		parts := strings.Split(g, ":")
		if parts[0] != name || len(parts) < 2 {
			continue
		}
		if len(parts) == 3 && typ != "" && parts[1] != typ {
			continue
		}
		if len(parts) == 2 && typ != "" {
			continue // untyped GRES: not of the type asked for
		}
		n, err := strconv.Atoi(parts[len(parts)-1])
		if err != nil || n < 0 {
			return 0, fmt.Errorf("count of %q: want a whole number", g)
		}
		sum += n
	}
	return sum, nil
}

// splitTop splits a GRES list at the commas outside parentheses
// ("gpu:h100:2(S:0,1)" keeps its socket list).
func splitTop(s string) []string {
	var out []string
	depth, start := 0, 0
	for i, c := range s {
		switch c {
		case '(':
			depth++
		case ')':
			depth = max(0, depth-1)
		case ',':
			if depth == 0 {
				out = append(out, s[start:i])
				start = i + 1
			}
		}
	}
	return append(out, s[start:])
}

func trim(s string) string {
	s = strings.TrimSpace(s)
	if len(s) > 200 {
		return s[:200] + "…"
	}
	return s
}
