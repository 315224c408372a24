package labtest

// Counting a Slurm's RPCs between two points: what slurmctld answered
// (sdiag), what slurmdbd answered (sacctmgr show stats) and what
// slurmctld refused under rl_enable (its log). For the benchmarks that
// count what an episode, a poll or a burst asks of Slurm
// (cli/bench_ratelimit_lab_test.go, docs/BENCHMARKS.md).
//
// What the counters can and cannot tell:
//   - sdiag counts the RPCs slurmctld answered by message type (every
//     user's) and by user (every type): no type-by-user split. A user's
//     total is exact; the types are everyone's, the daemons' (slurmd runs
//     as root) and the readings' own (REQUEST_STATS_INFO) included.
//   - An RPC refused under rl_enable is not counted by sdiag (the client
//     backs off and sends it again: the one answered is counted); the
//     refusals are only in slurmctld's log, one line each, by uid and type.
//   - Both daemons reset their counters (sdiag --reset; slurmctld at
//     midnight UTC; a restart): a reading whose "Data since" moved is not
//     comparable with the one before (ErrStatsReset).

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/user"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"
)

// RPCStats is one reading of a Slurm daemon's RPC counters: sdiag's
// (slurmctld) or sacctmgr show stats' (slurmdbd), which print them alike.
type RPCStats struct {
	// At is when the reading was made ("sdiag output at …"); Since when
	// the counters last started from zero ("Data since …").
	At, Since time.Time
	// ByType counts the RPCs answered by message type, every user's
	// ("REQUEST_SUBMIT_BATCH_JOB": 7); ByUser by user name, every
	// type's; UID is each user name's uid as printed.
	ByType map[string]int64
	ByUser map[string]int64
	UID    map[string]int
}

// The two sections ParseRPCStats reads, and the lines it takes from them:
// "\tREQUEST_PING    ( 1008) count:3    ave_time:43 total_time:131".
const (
	rpcByType = "Remote Procedure Call statistics by message type"
	rpcByUser = "Remote Procedure Call statistics by user"
)

var (
	rpcLine   = regexp.MustCompile(`^\s+(\S+)\s+\(\s*(\d+)\)\s+count:(\d+)\s`)
	stampLine = regexp.MustCompile(`^(.*? output at|Data since)\s.*\((\d+)\)\s*$`)
)

// ParseRPCStats reads sdiag's or sacctmgr show stats' output. It wants
// the "Data since" line and both RPC sections (a section may be empty);
// a line in a section that is not a counter ends it.
func ParseRPCStats(out []byte) (RPCStats, error) {
	s := RPCStats{ByType: map[string]int64{}, ByUser: map[string]int64{}, UID: map[string]int{}}
	section := ""
	seen := map[string]bool{}
	for n, line := range strings.Split(string(out), "\n") {
		line = strings.TrimRight(line, "\r")
		if m := stampLine.FindStringSubmatch(line); m != nil && section == "" {
			sec, err := strconv.ParseInt(m[2], 10, 64)
			if err != nil {
				return RPCStats{}, fmt.Errorf("line %d: %q: %v", n+1, line, err)
			}
			if m[1] == "Data since" {
				s.Since = time.Unix(sec, 0)
			} else {
				s.At = time.Unix(sec, 0)
			}
			continue
		}
		switch strings.TrimSpace(line) {
		case rpcByType, rpcByUser:
			section = strings.TrimSpace(line)
			if seen[section] {
				return RPCStats{}, fmt.Errorf("line %d: a second %q section", n+1, section)
			}
			seen[section] = true
			continue
		}
		if section == "" {
			continue
		}
		m := rpcLine.FindStringSubmatch(line)
		if m == nil {
			section = ""
			continue
		}
		count, err1 := strconv.ParseInt(m[3], 10, 64)
		id, err2 := strconv.Atoi(m[2])
		if err := errors.Join(err1, err2); err != nil {
			return RPCStats{}, fmt.Errorf("line %d: %q: %v", n+1, line, err)
		}
		if section == rpcByType {
			if _, dup := s.ByType[m[1]]; dup {
				return RPCStats{}, fmt.Errorf("line %d: message type %s twice", n+1, m[1])
			}
			s.ByType[m[1]] = count
		} else {
			if _, dup := s.ByUser[m[1]]; dup {
				return RPCStats{}, fmt.Errorf("line %d: user %s twice", n+1, m[1])
			}
			s.ByUser[m[1]], s.UID[m[1]] = count, id
		}
	}
	switch {
	case s.Since.IsZero():
		return RPCStats{}, errors.New("no \"Data since\" line: not sdiag's or sacctmgr show stats' output")
	case !seen[rpcByType] || !seen[rpcByUser]:
		return RPCStats{}, fmt.Errorf("no %q and %q sections", rpcByType, rpcByUser)
	}
	return s, nil
}

// Total is the RPCs counted, every user's.
func (s RPCStats) Total() int64 { return sum(s.ByUser) }

// String prints s as sdiag prints it (the stamps and the two RPC
// sections, counts only), in the order sdiag sorts them: by count, most
// first, then by name.
func (s RPCStats) String() string {
	var b strings.Builder
	stamp := func(label string, t time.Time) {
		fmt.Fprintf(&b, "%-15s %s (%d)\n", label, t.UTC().Format("Mon Jan 02 15:04:05 2006"), t.Unix())
	}
	if !s.At.IsZero() {
		stamp("sdiag output at", s.At)
	}
	stamp("Data since", s.Since)
	section := func(title string, counts map[string]int64, id func(string) int) {
		fmt.Fprintf(&b, "\n%s\n", title)
		names := make([]string, 0, len(counts))
		for k := range counts {
			names = append(names, k)
		}
		sort.Slice(names, func(i, j int) bool {
			if counts[names[i]] != counts[names[j]] {
				return counts[names[i]] > counts[names[j]]
			}
			return names[i] < names[j]
		})
		for _, k := range names {
			fmt.Fprintf(&b, "\t%-39s ( %4d) count:%-6d ave_time:0      total_time:0\n", k, id(k), counts[k])
		}
	}
	section(rpcByType, s.ByType, func(string) int { return 0 })
	section(rpcByUser, s.ByUser, func(u string) int { return s.UID[u] })
	return b.String()
}

// ErrStatsReset: the daemon's counters started again between two
// readings (their "Data since" moved, or a count went down), so their
// difference counts nothing.
var ErrStatsReset = errors.New("the RPC counters were reset between the two readings")

// RPCDelta is what a daemon counted between two readings.
type RPCDelta struct {
	ByType map[string]int64 // every user's, by message type
	ByUser map[string]int64 // by user name
	Took   time.Duration    // between the readings
}

// Sub is what s counted since prev, an earlier reading of the same
// daemon; ErrStatsReset when its counters were reset in between.
func (s RPCStats) Sub(prev RPCStats) (RPCDelta, error) {
	if !s.Since.Equal(prev.Since) {
		return RPCDelta{}, fmt.Errorf("%w (data since %s, then %s)", ErrStatsReset, prev.Since.UTC().Format(time.RFC3339), s.Since.UTC().Format(time.RFC3339))
	}
	d := RPCDelta{ByType: map[string]int64{}, ByUser: map[string]int64{}, Took: s.At.Sub(prev.At)}
	diff := func(now, before, out map[string]int64, what string) error {
		for k, n := range now {
			if dn := n - before[k]; dn < 0 {
				return fmt.Errorf("%w (%s %s: %d, then %d)", ErrStatsReset, what, k, before[k], n)
			} else if dn > 0 {
				out[k] = dn
			}
		}
		for k, n := range before {
			if _, ok := now[k]; !ok && n > 0 {
				return fmt.Errorf("%w (%s %s: %d, then gone)", ErrStatsReset, what, k, n)
			}
		}
		return nil
	}
	if err := errors.Join(diff(s.ByType, prev.ByType, d.ByType, "type"), diff(s.ByUser, prev.ByUser, d.ByUser, "user")); err != nil {
		return RPCDelta{}, err
	}
	return d, nil
}

// Total is the RPCs counted, every user's.
func (d RPCDelta) Total() int64 { return sum(d.ByUser) }

func sum(m map[string]int64) int64 {
	var n int64
	for _, v := range m {
		n += v
	}
	return n
}

// Sdiag reads s's slurmctld counters: sdiag run here as this process's
// user (root in make test and make bench: sdiag's statistics need an
// operator), with s's clients and SLURM_CONF (Env).
func (s Slurm) Sdiag(ctx context.Context) (RPCStats, error) { return s.readStats(ctx, "sdiag") }

// DBDStats reads the counters of s's slurmdbd: sacctmgr show stats, run
// as Sdiag runs sdiag (it asks slurmctld nothing).
func (s Slurm) DBDStats(ctx context.Context) (RPCStats, error) {
	return s.readStats(ctx, "sacctmgr", "show", "stats")
}

func (s Slurm) readStats(ctx context.Context, name string, args ...string) (RPCStats, error) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	cmd := s.CommandContext(ctx, name, args...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return RPCStats{}, fmt.Errorf("%s: %v: %s", strings.Join(cmd.Args, " "), err, strings.TrimSpace(stderr.String()))
	}
	st, err := ParseRPCStats(out)
	if err != nil {
		return RPCStats{}, fmt.Errorf("%s: %w", strings.Join(cmd.Args, " "), err)
	}
	return st, nil
}

// refusalLine is slurmctld's line for an RPC refused under rl_enable:
// "RPC rate limit exceeded by uid 1001 with REQUEST_SUBMIT_BATCH_JOB from
// 127.0.0.1:40488, telling to back off".
var refusalLine = regexp.MustCompile(`RPC rate limit exceeded by uid (\d+) with (\S+)`)

// ParseRefusals counts the RPCs of uid that slurmctld's log (r) says it
// refused under rl_enable, by message type.
func ParseRefusals(r io.Reader, uid int) (map[string]int, error) {
	out := map[string]int{}
	want := strconv.Itoa(uid)
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		if m := refusalLine.FindSubmatch(sc.Bytes()); m != nil && string(m[1]) == want {
			out[string(m[2])]++
		}
	}
	return out, sc.Err()
}

// Refusals counts uid's RPCs that s's slurmctld refused (rl_enable), by
// message type, in its log from byte offset from (CtldLogSize, earlier).
func (s Slurm) Refusals(from int64, uid int) (map[string]int, error) {
	f, err := os.Open(s.CtldLog)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	if _, err := f.Seek(from, io.SeekStart); err != nil {
		return nil, err
	}
	return ParseRefusals(f, uid)
}

// CtldLogSize is the size of s's slurmctld log: the offset Refusals
// counts from.
func (s Slurm) CtldLogSize() (int64, error) {
	fi, err := os.Stat(s.CtldLog)
	if err != nil {
		return 0, err
	}
	return fi.Size(), nil
}

// RPCMark is a point to count s's RPCs from (MarkRPCs): the readings of
// both daemons' counters and the size of slurmctld's log.
type RPCMark struct {
	s         Slurm
	ctld, dbd RPCStats
	log       int64
}

// MarkRPCs reads s's counters now (t fails when it cannot). Count, later,
// counts from here.
func (s Slurm) MarkRPCs(t testing.TB) RPCMark {
	t.Helper()
	m := RPCMark{s: s}
	var err error
	ctx := context.Background()
	if m.log, err = s.CtldLogSize(); err != nil {
		t.Fatalf("slurmctld's log: %v", err)
	}
	if m.ctld, err = s.Sdiag(ctx); err != nil {
		t.Fatal(err)
	}
	if m.dbd, err = s.DBDStats(ctx); err != nil {
		t.Fatal(err)
	}
	return m
}

// RPCCount is what a Slurm counted of one user's RPCs between a mark and
// Count.
type RPCCount struct {
	User string
	// Ctld is the user's RPCs slurmctld answered; CtldAll every user's,
	// by type and by user (the types are not split by user: see the
	// package comment at the top of rpc.go).
	Ctld    int64
	CtldAll RPCDelta
	// Others is the other users' slurmctld RPCs, the readings' own
	// (REQUEST_STATS_INFO) left out: the daemons' messages (slurmd's
	// job completions, as root) and anyone else's. When it is 0, CtldAll's
	// types are the user's alone.
	Others int64
	// DBD is the user's slurmdbd RPCs (sacct, sacctmgr); DBDAll every
	// user's (slurmctld's own job records, as SlurmUser, among them).
	DBD    int64
	DBDAll RPCDelta
	// Refused counts the user's RPCs slurmctld refused (rl_enable), by
	// message type; empty on a Slurm without the limit.
	Refused map[string]int
}

// Count counts user's RPCs from m to now (t fails when it cannot, or
// when a daemon's counters were reset in between: ErrStatsReset).
func (m RPCMark) Count(t testing.TB, userName string) RPCCount {
	t.Helper()
	ctx := context.Background()
	u, err := user.Lookup(userName)
	if err != nil {
		t.Fatal(err)
	}
	uid, err := strconv.Atoi(u.Uid)
	if err != nil {
		t.Fatalf("user %s: uid %q", userName, u.Uid)
	}
	ctld, err := m.s.Sdiag(ctx)
	if err != nil {
		t.Fatal(err)
	}
	dbd, err := m.s.DBDStats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	c := RPCCount{User: userName}
	if c.CtldAll, err = ctld.Sub(m.ctld); err != nil {
		t.Fatalf("slurmctld (sdiag): %v", err)
	}
	if c.DBDAll, err = dbd.Sub(m.dbd); err != nil {
		t.Fatalf("slurmdbd (sacctmgr show stats): %v", err)
	}
	c.Ctld, c.DBD = c.CtldAll.ByUser[userName], c.DBDAll.ByUser[userName]
	c.Others = max(0, c.CtldAll.Total()-c.Ctld-c.CtldAll.ByType["REQUEST_STATS_INFO"])
	if m.s.RateLimited {
		if c.Refused, err = m.s.Refusals(m.log, uid); err != nil {
			t.Fatalf("slurmctld's log: %v", err)
		}
	}
	return c
}

// Refusals is the number of the user's RPCs refused.
func (c RPCCount) Refusals() int {
	n := 0
	for _, v := range c.Refused {
		n += v
	}
	return n
}

// BucketFloor is the least time a token bucket of size bucket, refilled at
// refill a second, takes to let rpcs RPCs through, starting full: the
// first bucket at once, then refill a second. 0 when rpcs fit.
func BucketFloor(rpcs int64, bucket, refill int) time.Duration {
	if refill <= 0 || rpcs <= int64(bucket) {
		return 0
	}
	return time.Duration(float64(rpcs-int64(bucket)) / float64(refill) * float64(time.Second))
}
