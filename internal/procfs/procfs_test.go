package procfs

import (
	"os"
	"os/exec"
	"slices"
	"testing"
	"time"
)

func TestParseStat(t *testing.T) {
	for _, c := range []struct {
		raw  string
		want Proc
		ok   bool
	}{
		{"42 (sshd) S 1 42 42 0 -1", Proc{PID: 42, PPID: 1, PGRP: 42, State: "S"}, true},
		{"43 (a ) b) (c) Z 42 40 40 0", Proc{PID: 43, PPID: 42, PGRP: 40, State: "Z"}, true},
		{"44 (x) R", Proc{}, false},
		{"45 no parenthesis", Proc{}, false},
		{"46 (x) S one 2", Proc{}, false},
	} {
		pid := 0
		if c.ok {
			pid = c.want.PID
		}
		got, ok := parseStat(pid, []byte(c.raw))
		if ok != c.ok || got != c.want {
			t.Errorf("%q: %+v %v, want %+v %v", c.raw, got, ok, c.want, c.ok)
		}
	}
}

func FuzzParseStat(f *testing.F) {
	f.Add([]byte("42 (sshd) S 1 42 42 0 -1"))
	f.Add([]byte("43 (a ) b) (c) Z 42 40 40"))
	f.Fuzz(func(t *testing.T, raw []byte) {
		if p, ok := parseStat(7, raw); ok && p.PID != 7 {
			t.Fatalf("pid %d", p.PID)
		}
	})
}

// TestDescendants: a child and its grandchild (sh runs sleep) are this
// process's descendants, found in the real /proc.
func TestDescendants(t *testing.T) {
	cmd := exec.Command("sh", "-c", "sleep 30 & wait")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	for range 200 {
		procs, err := List()
		if err != nil {
			t.Skipf("no /proc: %v", err)
		}
		d := Descendants(procs, os.Getpid())
		if slices.Contains(d, cmd.Process.Pid) && len(Descendants(procs, cmd.Process.Pid)) >= 1 {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatal("sh and its sleep not found among this process's descendants")
}
