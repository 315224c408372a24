// Package procfs reads the process table from Linux's /proc: each
// process's pid, state, parent and process group, from /proc/PID/stat.
package procfs

import (
	"bytes"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// Proc is one process of /proc.
type Proc struct {
	PID, PPID, PGRP int
	// State is stat's state letter: R, S, D, Z (zombie), X (dead), …
	State string
}

// Gone reports a process that has exited (a zombie not yet reaped, or
// dead).
func (p Proc) Gone() bool { return p.State == "Z" || p.State == "X" }

// List returns the processes of /proc; one that ends while it is read is
// left out. The error is /proc's own (none mounted).
func List() ([]Proc, error) {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return nil, err
	}
	var out []Proc
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		raw, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue
		}
		if p, ok := parseStat(pid, raw); ok {
			out = append(out, p)
		}
	}
	return out, nil
}

// parseStat reads "pid (comm) state ppid pgrp …"; comm may hold anything,
// spaces and parentheses included, so the fields are those after its
// last ')'.
func parseStat(pid int, raw []byte) (Proc, bool) {
	i := bytes.LastIndexByte(raw, ')')
	if i < 0 {
		return Proc{}, false
	}
	f := strings.Fields(string(raw[i+1:]))
	if len(f) < 3 {
		return Proc{}, false
	}
	ppid, err1 := strconv.Atoi(f[1])
	pgrp, err2 := strconv.Atoi(f[2])
	if err1 != nil || err2 != nil {
		return Proc{}, false
	}
	return Proc{PID: pid, PPID: ppid, PGRP: pgrp, State: f[0]}, true
}

// Descendants returns the pids of pid's children, theirs, and so on.
func Descendants(procs []Proc, pid int) []int {
	children := map[int][]int{}
	for _, p := range procs {
		children[p.PPID] = append(children[p.PPID], p.PID)
	}
	var out []int
	for queue := []int{pid}; len(queue) > 0; queue = queue[1:] {
		for _, c := range children[queue[0]] {
			out = append(out, c)
			queue = append(queue, c)
		}
	}
	return out
}
