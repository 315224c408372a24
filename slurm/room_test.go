package slurm

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

func TestParseRoom(t *testing.T) {
	for _, c := range []struct {
		name, out, gres string
		want            Room
		err             string
	}{
		{name: "lab node, one of two held", out: "mixed|gpu:h100:2|gpu:h100:1(IDX:0)|\n--\n3\n", gres: "gpu:h100:1", want: Room{Nodes: 1, GPUs: 2, FreeGPUs: 1, Pending: 3}},
		{name: "idle, nothing used", out: "idle|gpu:h100:2|gpu:h100:0(IDX:N/A)|\n--\n0\n", gres: "gpu:h100:1", want: Room{Nodes: 1, GPUs: 2, FreeGPUs: 2}},
		{name: "down and drained nodes take no jobs", out: "idle|gpu:h100:4|gpu:h100:0|\ndown*|gpu:h100:4|gpu:h100:0|\ndrained|gpu:h100:4|gpu:h100:0|\nmixed+drain|gpu:h100:4|gpu:h100:0|\n--\n7\n", gres: "gpu:h100:1", want: Room{Nodes: 1, GPUs: 4, FreeGPUs: 4, Pending: 7}},
		{name: "other types not counted", out: "mixed|gpu:a100:8(S:0-1),gpu:h100:2(S:0,1)|gpu:a100:8(IDX:0-7),gpu:h100:1(IDX:0)|\n--\n12\n", gres: "gpu:h100:1", want: Room{Nodes: 1, GPUs: 2, FreeGPUs: 1, Pending: 12}},
		{name: "untyped request counts every type", out: "mixed|gpu:a100:8,gpu:h100:2|gpu:a100:2,gpu:h100:1|\n--\n0\n", gres: "gpu:1", want: Room{Nodes: 1, GPUs: 10, FreeGPUs: 7}},
		{name: "no gres", out: "idle|(null)|(null)|\n--\n0\n", gres: "gpu:h100:1", want: Room{Nodes: 1}},
		{name: "empty partition", out: "--\n0\n", gres: "gpu:h100:1", want: Room{}},
		{name: "allocated", out: "allocated|gpu:h100:8|gpu:h100:8(IDX:0-7)|\n--\n40\n", gres: "gpu:h100:1", want: Room{Nodes: 1, GPUs: 8, Pending: 40}},
		{name: "no separator", out: "idle|gpu:h100:2|gpu:h100:0|\n", gres: "gpu:h100:1", err: `no "--" line`},
		{name: "count not a number", out: "--\nsqueue: error\n", gres: "gpu:h100:1", err: "pending count"},
		{name: "short line", out: "idle|gpu:h100:2\n--\n0\n", gres: "gpu:h100:1", err: "want state|gres|gres used"},
		{name: "bad count", out: "idle|gpu:h100:x|gpu:h100:0|\n--\n0\n", gres: "gpu:h100:1", err: "want a whole number"},
	} {
		t.Run(c.name, func(t *testing.T) {
			name, typ, _ := splitGres(c.gres)
			got, err := ParseRoom(c.out, name, typ)
			if c.err != "" {
				if err == nil || !strings.Contains(err.Error(), c.err) {
					t.Fatalf("err %v, want %q", err, c.err)
				}
				return
			}
			if err != nil || got != c.want {
				t.Fatalf("got %+v, %v; want %+v", got, err, c.want)
			}
		})
	}
}

// nodeStates is every string node_state_string() returns
// (src/common/slurm_protocol_defs.c, the union of its return statements
// at slurm-22-05-8-1 and slurm-26-05-3-1: 26.05 adds BLOCKED, EXTERNAL,
// UNDRAIN and DYNAMIC_*, drops PERFCTRS); sinfo's StateLong prints it in
// lower case.
var nodeStates = []string{"?", "ALLOCATED!", "ALLOCATED", "ALLOCATED#", "ALLOCATED$", "ALLOCATED%", "ALLOCATED*", "ALLOCATED+", "ALLOCATED@", "ALLOCATED^", "ALLOCATED~", "BLOCKED", "CANCEL_REBOOT", "CLOUD", "COMPLETING!", "COMPLETING", "COMPLETING#", "COMPLETING$", "COMPLETING%", "COMPLETING*", "COMPLETING@", "COMPLETING^", "COMPLETING~", "DOWN!", "DOWN", "DOWN#", "DOWN$", "DOWN%", "DOWN*", "DOWN@", "DOWN^", "DOWN~", "DRAINED!", "DRAINED", "DRAINED#", "DRAINED$", "DRAINED%", "DRAINED*", "DRAINED@", "DRAINED^", "DRAINED~", "DRAINING!", "DRAINING", "DRAINING#", "DRAINING$", "DRAINING%", "DRAINING*", "DRAINING@", "DRAINING^", "DRAINING~", "DYNAMIC_FUTURE", "DYNAMIC_NORM", "EXTERNAL", "FAIL", "FAIL*", "FAILING", "FAILING*", "FUTURE!", "FUTURE", "FUTURE#", "FUTURE$", "FUTURE%", "FUTURE*", "FUTURE@", "FUTURE^", "FUTURE~", "IDLE!", "IDLE", "IDLE#", "IDLE$", "IDLE%", "IDLE*", "IDLE@", "IDLE^", "IDLE~", "INVAL", "MAINT", "MAINT*", "MIXED!", "MIXED", "MIXED#", "MIXED$", "MIXED%", "MIXED*", "MIXED-", "MIXED@", "MIXED^", "MIXED~", "PERFCTRS", "PLANNED", "POWERED_DOWN", "POWERING_DOWN", "POWERING_UP", "POWER_DOWN", "POWER_UP", "REBOOT", "REBOOT*", "REBOOT^", "REBOOT_ISSUED", "RESERVED", "RESUME", "UNDRAIN", "UNKNOWN", "UNKNOWN*"}

// TestTakesJobs: of every state sinfo can print, only the plain available
// ones count; every suffix (powered down or powering up or down, power
// down pending, not responding, reboot, maintenance, planned, completing)
// and every other state does not.
func TestTakesJobs(t *testing.T) {
	plain := map[string]bool{"idle": true, "mixed": true, "allocated": true, "completing": true}
	suffixes := map[byte]bool{}
	for _, st := range nodeStates {
		long := strings.ToLower(st)
		if got := takesJobs(long); got != plain[long] {
			t.Errorf("takesJobs(%q) = %v", long, got)
		}
		if c := long[len(long)-1]; len(long) > 1 && strings.IndexByte("abcdefghijklmnopqrstuvwxyz_", c) < 0 {
			suffixes[c] = true
		}
	}
	// The suffixes the rule was checked against (takesJobs' comment).
	var got []string
	for c := range suffixes {
		got = append(got, string(c))
	}
	slices.Sort(got)
	if strings.Join(got, "") != "!#$%*+-@^~" {
		t.Errorf("node_state_string's suffixes are %q: check takesJobs' comment", strings.Join(got, ""))
	}
	for _, s := range []string{" idle ", "IDLE", "Mixed", "idle~ ", "idle+drain", "mixed+drain", "drng", "idle*~", "", "n/a", "idle-", "allocated+"} {
		want := plain[strings.ToLower(strings.TrimSpace(s))]
		if got := takesJobs(s); got != want {
			t.Errorf("takesJobs(%q) = %v, want %v", s, got, want)
		}
	}
}

// TestParseRoomUnavailable: GPUs of a node that cannot take a job now
// (powered down, powering up or down, power down pending, not responding,
// planned, rebooting, drained, failing…) are neither free nor counted.
func TestParseRoomUnavailable(t *testing.T) {
	for _, st := range nodeStates {
		long := strings.ToLower(st)
		out := "idle|gpu:h100:2|gpu:h100:1(IDX:0)|\n" + long + "|gpu:h100:4|gpu:h100:0(IDX:N/A)|\n--\n0\n"
		r, err := ParseRoom(out, "gpu", "h100")
		if err != nil {
			t.Fatalf("%s: %v", long, err)
		}
		want := Room{Nodes: 1, GPUs: 2, FreeGPUs: 1}
		if takesJobs(long) {
			want = Room{Nodes: 2, GPUs: 6, FreeGPUs: 5}
		}
		if r != want {
			t.Errorf("%s: %+v, want %+v", long, r, want)
		}
	}
}

func TestRoomCommand(t *testing.T) {
	f := &fakeRunner{handlers: map[string]func([]string) (string, string, int){}}
	f.handlers["sh"] = func(argv []string) (string, string, int) {
		if len(argv) != 5 || argv[4] != "gpu" || !strings.Contains(argv[2], "sinfo") || !strings.Contains(argv[2], "--states=PENDING") {
			return "", "bad argv", 2
		}
		return "mixed|gpu:h100:2|gpu:h100:1(IDX:0)|\n--\n5\n", "", 0
	}
	r, err := New(f).Room(context.Background(), "gpu", "gpu:h100:1")
	if err != nil || r != (Room{Nodes: 1, GPUs: 2, FreeGPUs: 1, Pending: 5}) {
		t.Fatalf("%+v %v", r, err)
	}
	f.handlers["sh"] = func([]string) (string, string, int) {
		return "", "sinfo: error: Unable to contact slurm controller (connect failure)", 1
	}
	if _, err := New(f).Room(context.Background(), "gpu", "gpu:h100:1"); err == nil || !strings.Contains(err.Error(), "Unable to contact") || !strings.Contains(err.Error(), `"gpu"`) {
		t.Fatalf("err %v", err)
	}
}

func FuzzParseRoom(f *testing.F) {
	f.Add("mixed|gpu:h100:2|gpu:h100:1(IDX:0)|\n--\n3\n", "gpu", "h100")
	f.Add("idle|gpu:a100:8(S:0-1),gpu:h100:2(S:0,1)|(null)|\n--\n0\n", "gpu", "")
	f.Fuzz(func(t *testing.T, out, name, typ string) {
		r, err := ParseRoom(out, name, typ)
		if err == nil && (r.FreeGPUs > r.GPUs || r.FreeGPUs < 0 || r.Pending < 0 || r.Nodes < 0) {
			t.Fatalf("%+v from %q", r, out)
		}
	})
}

// TestRoomScript runs roomScript under sh with stand-in sinfo and squeue
// on PATH: the pending count leaves out jobs that wait on a dependency, a
// hold or a begin time, and a failing squeue fails the script.
func TestRoomScript(t *testing.T) {
	if _, err := exec.LookPath("sh"); err != nil {
		t.Skip("no sh")
	}
	for _, tc := range []struct {
		name, reasons string
		squeueRC      int
		want          string
		fail          bool
	}{
		{name: "mixed reasons", reasons: "Priority\nResources\nDependency\nJobHeldUser\nBeginTime\nQOSMaxJobsPerUserLimit\nDependencyNeverSatisfied\nJobHeldAdmin\n", want: "3"},
		{name: "none pending", reasons: "", want: "0"},
		{name: "only dependencies", reasons: "Dependency\nDependency\n", want: "0"},
		{name: "squeue fails", squeueRC: 1, fail: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			bin := t.TempDir()
			write := func(name, body string) {
				if err := os.WriteFile(filepath.Join(bin, name), []byte("#!/bin/sh\n"+body), 0o755); err != nil {
					t.Fatal(err)
				}
			}
			write("sinfo", `[ "$3" = "--partition=gpu" ] || exit 9
echo 'mixed|gpu:h100:2|gpu:h100:1(IDX:0)|'
`)
			if err := os.WriteFile(filepath.Join(bin, "reasons"), []byte(tc.reasons), 0o644); err != nil {
				t.Fatal(err)
			}
			write("squeue", fmt.Sprintf(`[ "$2" = "--partition=gpu" ] && [ "$4" = "--format=%%r" ] || exit 9
cat %q
exit %d
`, filepath.Join(bin, "reasons"), tc.squeueRC))
			cmd := exec.Command("sh", "-c", roomScript, "sh", "gpu")
			cmd.Env = []string{"PATH=" + bin + ":/usr/bin:/bin"}
			out, err := cmd.Output()
			if tc.fail {
				if err == nil {
					t.Fatalf("a failing squeue: script succeeded with %q", out)
				}
				return
			}
			if err != nil {
				t.Fatalf("%v: %s", err, out)
			}
			r, err := ParseRoom(string(out), "gpu", "h100")
			if err != nil {
				t.Fatal(err)
			}
			if got := strconv.Itoa(r.Pending); got != tc.want || r.FreeGPUs != 1 {
				t.Errorf("pending %s, free %d from %q; want pending %s, free 1", got, r.FreeGPUs, out, tc.want)
			}
		})
	}
}
