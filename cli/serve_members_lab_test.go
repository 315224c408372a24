package cli

// serve over one clusters: entry with two members (the lab's two Slurm
// clusters, reached from cluster 1's login with --clusters, as the members
// of a federation are) and a second entry whose login does not answer
// when serve starts, through the built binary.

import (
	"encoding/json"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nemorl/nemorl-slurm/internal/labtest"
)

// TestServeMembersLab: entry "fed" names both lab clusters as members of
// cluster 1's login (at most 2 episodes each); entry "late" is cluster 2
// through a port that nobody listens on when serve starts. Wave 1 (4
// rows) goes to fed's members only, 2 and 2, and every job of an episode
// of member nemorl-lab2 is that cluster's (its ids, its sacct); once
// late's port answers, wave 2 finds fed full and goes to late after its
// preflight. Every row is scored once.
func TestServeMembersLab(t *testing.T) {
	labtest.UseLab(t)
	x := newLabCLI(t)
	requireStandIns(t)
	west := x.lab.Cluster2(t)
	c1, c2 := x.lab.Cluster, x.lab.Lab2Cluster
	if c1 == "" || c2 == "" {
		t.Fatalf("lab.env names no cluster names (NEMORL_LAB_CLUSTER %q, NEMORL_LAB2_CLUSTER %q): run lab/up", c1, c2)
	}

	// late's login: a port that refuses until the test forwards it to
	// cluster 2's sshd, pinned with cluster 2's host key.
	lateAddr := freeAddr(t)
	_, latePort, _ := net.SplitHostPort(lateAddr)
	known := filepath.Join(t.TempDir(), "known_hosts")
	raw, err := os.ReadFile(x.lab.KnownHosts)
	if err != nil {
		t.Fatal(err)
	}
	var line string
	for _, l := range strings.Split(string(raw), "\n") {
		if strings.HasPrefix(l, fmt.Sprintf("[127.0.0.1]:%d ", west.SSHPort)) {
			line = strings.Replace(l, strconv.Itoa(west.SSHPort), latePort, 1)
		}
	}
	if line == "" {
		t.Fatalf("%s has no key of cluster 2's sshd", x.lab.KnownHosts)
	}
	if err := os.WriteFile(known, []byte(line+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	lp, _ := strconv.Atoi(latePort)
	cfg := x.clustersConfigOf(t, 16,
		clusterSpec{name: "fed", port: x.lab.SSHPort, extra: []string{fmt.Sprintf("members: [%s, %s]", c1, c2), "max_in_flight: 2"}},
		clusterSpec{name: "late", port: lp, knownHosts: known})

	state := t.TempDir()
	limit := 12 * time.Minute
	srv := x.startServeFor(t, state, cfg, freeAddr(t), limit)
	b := srv.bgRun
	t.Cleanup(func() { srv.kill(t) })
	if !strings.Contains(b.stderr.String(), "cluster late: not answering at start") {
		t.Errorf("serve's log does not say late is down at start:\n%s", tail(b.stderr.String(), 3000))
	}

	tag := randHex(t)
	type answer struct {
		wave int
		code int
		doc  map[string]any
	}
	const n1, n2 = 4, 3
	answers := make([]answer, n1+n2)
	var wg sync.WaitGroup
	post := func(wave, from, to int) {
		for i := from; i < to; i++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				body := rowBody(i, tag)
				code, doc := srv.postWithin(t, limit, "/run", body, "")
				answers[i] = answer{wave: wave, code: code, doc: doc}
			}()
		}
	}
	post(1, 0, n1)
	inFlight := func() map[string]int {
		m := map[string]int{}
		for _, r := range srv.rows(t) {
			if r.Outcome == nil {
				m[r.Cluster]++
			}
		}
		return m
	}
	eventually(t, episodeTimeout, 200*time.Millisecond, func() string {
		if m := inFlight(); m["fed/"+c1]+m["fed/"+c2] < n1 {
			return fmt.Sprintf("wave 1 not all placed: %v", m)
		}
		return ""
	})
	wave1 := inFlight()
	t.Logf("wave 1 in flight: %v", wave1)
	if wave1["fed/"+c1] != 2 || wave1["fed/"+c2] != 2 || wave1["late"] != 0 {
		t.Errorf("wave 1: want 2 on each member of fed (max_in_flight 2) and none on late (down): %v", wave1)
	}

	// late's port answers now.
	ln, err := net.Listen("tcp", lateAddr)
	if err != nil {
		t.Fatalf("listen %s: %v", lateAddr, err)
	}
	t.Cleanup(func() { ln.Close() })
	go forward(ln, fmt.Sprintf("127.0.0.1:%d", west.SSHPort))
	fullAtPost := inFlight()
	post(2, n1, n1+n2)
	wg.Wait()

	// Every row scored, once, by an episode of its own.
	seen := map[string]int{}
	for i, a := range answers {
		ep := str(a.doc["episode"])
		if a.code != 200 || a.doc["outcome"] != "scored" {
			t.Errorf("row %d (wave %d): %d %v", i, a.wave, a.code, a.doc)
		}
		if prev, ok := seen[ep]; ok {
			t.Errorf("rows %d and %d answered by the same episode %s", prev, i, ep)
		}
		seen[ep] = i
		t.Cleanup(func() { cleanupClusterEpisode(t, ep, west) })
	}

	// The ledger: each episode's cluster, and its jobs on that cluster.
	type sub struct {
		JobID string `json:"job_id"`
	}
	type ent struct {
		Episode string          `json:"episode"`
		Cluster string          `json:"cluster"`
		Jobs    map[string]*sub `json:"jobs"`
	}
	split := map[int]map[string]int{1: {}, 2: {}}
	for i, a := range answers {
		ep := str(a.doc["episode"])
		raw, err := os.ReadFile(filepath.Join(state, "nemorl-slurm", "episodes", ep+".json"))
		var e ent
		if err != nil || json.Unmarshal(raw, &e) != nil {
			t.Errorf("row %d: episode %q not in the ledger: %v", i, ep, err)
			continue
		}
		split[a.wave][e.Cluster]++
		for _, stage := range labStages {
			j := e.Jobs[stage]
			if j == nil || j.JobID == "" {
				t.Errorf("%s: no %s job", ep, stage)
				continue
			}
			// An array task's id ("A_T") is numbered by its array's.
			array, _, _ := strings.Cut(j.JobID, "_")
			id, _ := strconv.Atoi(array)
			// Cluster 2 numbers its jobs from 10,000,000 (lab/README.md).
			if onC2 := e.Cluster == "fed/"+c2 || e.Cluster == "late"; onC2 != (id >= 10_000_000) {
				t.Errorf("%s on %s: %s job %s is the other cluster's", ep, e.Cluster, stage, j.JobID)
			}
			if e.Cluster == "fed/"+c2 {
				// Slurm's own accounting of that cluster has it, completed.
				out, err := exec.Command("sacct", "--clusters="+c2, "-X", "-n", "-P", "--format=JobID,State,Cluster", "--jobs="+j.JobID).Output()
				if err != nil || !strings.Contains(string(out), j.JobID+"|COMPLETED|"+c2) {
					t.Errorf("sacct --clusters=%s --jobs=%s: %q %v", c2, j.JobID, out, err)
				}
			}
		}
	}
	t.Logf("placed: wave 1 (late down) %v; wave 2 (late answering; fed in flight then %v) %v", split[1], fullAtPost, split[2])
	if split[1]["late"] != 0 {
		t.Errorf("wave 1 placed %d rows on late while it was down", split[1]["late"])
	}
	if fullAtPost["fed/"+c1]+fullAtPost["fed/"+c2] == n1 && split[2]["late"] == 0 {
		t.Errorf("wave 2 found fed full (%v) and late answering, but put nothing on late: %v", fullAtPost, split[2])
	}
	for _, l := range strings.Split(b.stderr.String(), "\n") {
		if strings.Contains(l, "cluster late") || strings.Contains(l, "placed ") {
			t.Logf("serve: %s", l)
		}
	}
	for _, want := range []string{"cluster late: preflight passed", "cluster late: answering"} {
		if !strings.Contains(b.stderr.String(), want) {
			t.Errorf("serve's log lacks %q:\n%s", want, tail(b.stderr.String(), 3000))
		}
	}
	_, mraw := srv.get(t, "/metrics")
	for _, want := range []string{`nemorl_serve_cluster_up{cluster="late"} 1`, fmt.Sprintf(`nemorl_serve_cluster_up{cluster="fed/%s"} 1`, c2)} {
		if !strings.Contains(string(mraw), want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
}

// forward accepts on ln until it is closed and copies each connection to
// and from target.
func forward(ln net.Listener, target string) {
	for {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		go func() {
			defer c.Close()
			u, err := net.Dial("tcp", target)
			if err != nil {
				return
			}
			defer u.Close()
			done := make(chan struct{}, 2)
			go func() { _, _ = io.Copy(u, c); done <- struct{}{} }()
			go func() { _, _ = io.Copy(c, u); done <- struct{}{} }()
			<-done
		}()
	}
}
