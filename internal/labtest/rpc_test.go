package labtest

import (
	"errors"
	"maps"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func readFixture(t testing.TB, name string) []byte {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	return raw
}

// The counters of sdiag (slurmctld) and sacctmgr show stats (slurmdbd) as
// Slurm 22.05 (cluster 1) and 24.11 (cluster 3) print them, captured on
// the lab: the two stamps, every type and user line of the two RPC
// sections (and nothing of the sections around them: 24.11's "Pending
// RPC statistics", the backfill and rollup figures). Each daemon counts
// every RPC once by type and once by user, so the two totals agree.
func TestParseRPCStats(t *testing.T) {
	for _, c := range []struct {
		file        string
		at, since   int64
		types       int
		users       map[string]int64
		uids        map[string]int
		someTypes   map[string]int64
		notCounters []string // names in the file that are not RPC counters
	}{
		{file: "sdiag-22.05.txt", at: 1796605141, since: 1796604746, types: 16,
			users: map[string]int64{"root": 668, "nemorl": 31}, uids: map[string]int{"root": 0, "nemorl": 1001},
			someTypes: map[string]int64{"REQUEST_SUBMIT_BATCH_JOB": 7, "REQUEST_STATS_INFO": 7, "REQUEST_BUILD_INFO": 109}},
		{file: "sdiag-24.11.txt", at: 1796605141, since: 1796604750, types: 15,
			users: map[string]int64{"root": 664, "nemorl": 78}, uids: map[string]int{"root": 0, "nemorl": 1001},
			someTypes:   map[string]int64{"REQUEST_SUBMIT_BATCH_JOB": 18, "REQUEST_PING": 113, "REQUEST_UPDATE_JOB": 1},
			notCounters: []string{"Pending", "No"}},
		{file: "sacctmgr-stats-22.05.txt", at: 1796605141, since: 1796604743, types: 20,
			users: map[string]int64{"slurm": 464, "root": 290, "nemorl": 12}, uids: map[string]int{"slurm": 64030, "root": 0, "nemorl": 1001},
			someTypes: map[string]int64{"DBD_GET_STATS": 5}},
		{file: "sacctmgr-stats-24.11.txt", at: 1796605141, since: 1796604749, types: 19,
			users: map[string]int64{"slurm": 742, "root": 350, "nemorl": 12}, uids: map[string]int{"slurm": 64030, "root": 0, "nemorl": 1001},
			someTypes: map[string]int64{"DBD_REGISTER_CTLD": 1}},
	} {
		t.Run(c.file, func(t *testing.T) {
			raw := readFixture(t, c.file)
			s, err := ParseRPCStats(raw)
			if err != nil {
				t.Fatal(err)
			}
			if seed, err := ParseRPCStats(shortSeed(raw)); err != nil || len(seed.ByType) != 2 || len(seed.ByUser) != 2 || !seed.Since.Equal(s.Since) {
				t.Errorf("the fuzz seed of %s: %+v (%v), want two types and two users of it", c.file, seed, err)
			}
			if s.At.Unix() != c.at || s.Since.Unix() != c.since {
				t.Errorf("output at %d, data since %d; want %d, %d", s.At.Unix(), s.Since.Unix(), c.at, c.since)
			}
			if !maps.Equal(s.ByUser, c.users) || !maps.Equal(s.UID, c.uids) {
				t.Errorf("by user %v (uids %v), want %v (%v)", s.ByUser, s.UID, c.users, c.uids)
			}
			if len(s.ByType) != c.types {
				t.Errorf("%d message types, want %d: %v", len(s.ByType), c.types, s.ByType)
			}
			for k, n := range c.someTypes {
				if s.ByType[k] != n {
					t.Errorf("%s: %d, want %d", k, s.ByType[k], n)
				}
			}
			for _, k := range c.notCounters {
				if _, ok := s.ByType[k]; ok {
					t.Errorf("%q read as a message type", k)
				}
			}
			if sum(s.ByType) != s.Total() {
				t.Errorf("by type %d RPCs, by user %d: the daemon counts each once in both", sum(s.ByType), s.Total())
			}
			// String prints what Parse reads back.
			back, err := ParseRPCStats([]byte(s.String()))
			if err != nil || !equalStats(back, s) {
				t.Errorf("String does not read back (%v):\n%s", err, s.String())
			}
		})
	}
}

func equalStats(a, b RPCStats) bool {
	return a.At.Equal(b.At) && a.Since.Equal(b.Since) && maps.Equal(a.ByType, b.ByType) && maps.Equal(a.ByUser, b.ByUser) && maps.Equal(a.UID, b.UID)
}

// What is not sdiag's output is refused, with a reason.
func TestParseRPCStatsRefuses(t *testing.T) {
	good := string(readFixture(t, "sdiag-24.11.txt"))
	for _, c := range []struct{ name, in, want string }{
		{"empty", "", "Data since"},
		{"an error message", "sdiag: error: Unable to contact slurm controller (connect failure)\n", "Data since"},
		{"no user section", good[:strings.Index(good, rpcByUser)], "sections"},
		{"no type section", strings.Replace(good, rpcByType, "Something else", 1), "sections"},
		{"a section twice", good + "\n" + rpcByUser + "\n", "second"},
		{"a type twice", strings.Replace(good, "\tREQUEST_PING ", "\tREQUEST_FED_INFO ", 1), "twice"},
		{"a count past int64", strings.Replace(good, "count:113 ", "count:99999999999999999999 ", 1), "count:"},
	} {
		if _, err := ParseRPCStats([]byte(c.in)); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want an error naming %q", c.name, err, c.want)
		}
	}
}

// Sub counts what happened between two readings, by type and by user;
// a reset in between (Data since moved, a count went down or a user
// went away) is ErrStatsReset, never a negative or a wrong count.
func TestRPCStatsSub(t *testing.T) {
	before, err := ParseRPCStats(readFixture(t, "sdiag-24.11.txt"))
	if err != nil {
		t.Fatal(err)
	}
	after := clone(before)
	after.At = before.At.Add(90 * time.Second)
	after.ByType["REQUEST_SUBMIT_BATCH_JOB"] += 200
	after.ByType["REQUEST_JOB_USER_INFO"] += 9
	after.ByType["REQUEST_STATS_INFO"]++
	after.ByType["REQUEST_CANCEL_JOB_STEP"] = 1 // a type new since
	after.ByUser["nemorl"] += 209
	after.ByUser["root"] += 2
	d, err := after.Sub(before)
	if err != nil {
		t.Fatal(err)
	}
	wantTypes := map[string]int64{"REQUEST_SUBMIT_BATCH_JOB": 200, "REQUEST_JOB_USER_INFO": 9, "REQUEST_STATS_INFO": 1, "REQUEST_CANCEL_JOB_STEP": 1}
	if !maps.Equal(d.ByType, wantTypes) || !maps.Equal(d.ByUser, map[string]int64{"nemorl": 209, "root": 2}) || d.Total() != 211 || d.Took != 90*time.Second {
		t.Errorf("delta %+v, want types %v, users nemorl 209 and root 2, 90 s", d, wantTypes)
	}

	for name, reset := range map[string]func(*RPCStats){
		"data since moved": func(s *RPCStats) { s.Since = s.Since.Add(time.Hour) },
		"a type went down": func(s *RPCStats) { s.ByType["REQUEST_PING"] = 1 },
		"a user went down": func(s *RPCStats) { s.ByUser["nemorl"] = 0 },
		"a user is gone":   func(s *RPCStats) { delete(s.ByUser, "nemorl") },
	} {
		r := clone(after)
		reset(&r)
		if _, err := r.Sub(before); !errors.Is(err, ErrStatsReset) {
			t.Errorf("%s: %v, want ErrStatsReset", name, err)
		}
	}
}

func clone(s RPCStats) RPCStats {
	s.ByType, s.ByUser, s.UID = maps.Clone(s.ByType), maps.Clone(s.ByUser), maps.Clone(s.UID)
	return s
}

// slurmctld's refusals under rl_enable (a stretch of cluster 3's log,
// captured during a burst) are counted by message type, for the uid
// asked about only.
func TestParseRefusals(t *testing.T) {
	log := string(readFixture(t, "slurmctld-rl.log"))
	want := map[string]int{}
	for _, l := range strings.Split(log, "\n") {
		if _, rest, ok := strings.Cut(l, "RPC rate limit exceeded by uid 1001 with "); ok {
			want[strings.Fields(rest)[0]]++
		}
	}
	if len(want) == 0 {
		t.Fatal("the fixture has no refusal")
	}
	other := "[2026-12-07T00:09:12.000] RPC rate limit exceeded by uid 1002 with REQUEST_SUBMIT_BATCH_JOB from 127.0.0.1:1, telling to back off\n"
	got, err := ParseRefusals(strings.NewReader(log+other), 1001)
	if err != nil || !maps.Equal(got, want) {
		t.Errorf("uid 1001: %v (%v), want %v", got, err, want)
	}
	got, err = ParseRefusals(strings.NewReader(log+other), 1002)
	if err != nil || !maps.Equal(got, map[string]int{"REQUEST_SUBMIT_BATCH_JOB": 1}) {
		t.Errorf("uid 1002: %v (%v), want its one sbatch", got, err)
	}
	if got, _ := ParseRefusals(strings.NewReader(log), 100); len(got) != 0 {
		t.Errorf("uid 100 (a prefix of 1001): %v, want none", got)
	}
}

func TestBucketFloor(t *testing.T) {
	for _, c := range []struct {
		rpcs           int64
		bucket, refill int
		want           time.Duration
	}{
		{400, 30, 2, 185 * time.Second},
		{31, 30, 2, 500 * time.Millisecond},
		{30, 30, 2, 0},
		{5, 30, 2, 0},
		{100, 30, 0, 0}, // no refill: no limit known
	} {
		if got := BucketFloor(c.rpcs, c.bucket, c.refill); got != c.want {
			t.Errorf("BucketFloor(%d, %d, %d) = %v, want %v", c.rpcs, c.bucket, c.refill, got, c.want)
		}
	}
}

// shortSeed is a captured reading cut to what the parser reads, its
// first two lines of each RPC section, and a line of the section that
// follows: a few hundred bytes (the fuzzer minimizes every input it finds
// interesting, for up to a minute each, and the whole files of several
// KB kept it minimizing).
func shortSeed(raw []byte) []byte {
	var out []string
	kept := -1 // lines kept of the current section; -1: outside one
	for _, l := range strings.Split(string(raw), "\n") {
		switch t := strings.TrimSpace(l); {
		case strings.Contains(l, "output at") || strings.HasPrefix(l, "Data since"):
			out = append(out, l)
		case t == rpcByType || t == rpcByUser || t == "Pending RPC statistics":
			out, kept = append(out, "", l), 0
		case kept >= 0 && kept < 2 && t != "":
			out, kept = append(out, l), kept+1
		}
	}
	return []byte(strings.Join(out, "\n") + "\n")
}

// FuzzParseRPCStats: no input panics the parser, and what it accepts
// String prints so that it reads back the same (the counts, users, uids
// and stamps), with both totals non-negative.
func FuzzParseRPCStats(f *testing.F) {
	for _, name := range []string{"sdiag-22.05.txt", "sdiag-24.11.txt", "sacctmgr-stats-22.05.txt", "sacctmgr-stats-24.11.txt"} {
		f.Add(shortSeed(readFixture(f, name)))
	}
	f.Add([]byte("Data since x (0)\n" + rpcByType + "\n\tA ( 1) count:1 \n" + rpcByUser + "\n\tu (2) count:1 \n"))
	f.Fuzz(func(t *testing.T, in []byte) {
		s, err := ParseRPCStats(in)
		if err != nil {
			return
		}
		if s.Total() < 0 || sum(s.ByType) < 0 {
			t.Fatalf("negative totals: %d by user, %d by type", s.Total(), sum(s.ByType))
		}
		back, err := ParseRPCStats([]byte(s.String()))
		if err != nil {
			t.Fatalf("String of an accepted reading does not parse: %v\n%s", err, s.String())
		}
		if !equalStats(back, s) {
			t.Fatalf("read back %+v, want %+v\n%s", back, s, s.String())
		}
	})
}
