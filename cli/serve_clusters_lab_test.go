package cli

// serve over two lab clusters through the built binary: the lab's cluster
// 1 (two fake H100s, sshd :2222) and cluster 2 (its own slurmctld and
// slurmd with one fake H100, sshd :2224; lab/README.md). Rows are placed
// by room; cluster 2's controller is stopped mid-run and started again.

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nemorl/nemorl-slurm/internal/labtest"
	"github.com/nemorl/nemorl-slurm/stages"
)

// TestServeClustersLab: NEMORL_CLUSTERS_ROWS rows (default 24) in three
// waves: the first with both clusters up, the second with cluster 2's
// controller stopped, the third after it is back. Every row is scored
// once; nothing is placed on cluster 2 while it is down; episodes already
// there finish when it returns; rows go to it again after.
func TestServeClustersLab(t *testing.T) {
	labtest.LockLab(t) // stops a controller: no other lab test may run
	x := newLabCLI(t)
	requireStandIns(t)
	west := x.lab.Cluster2(t)
	n := 24
	if v := os.Getenv("NEMORL_CLUSTERS_ROWS"); v != "" {
		var err error
		if n, err = strconv.Atoi(v); err != nil || n < 8 {
			t.Fatalf("NEMORL_CLUSTERS_ROWS=%q: want a number ≥ 8", v)
		}
	}
	cfg := x.clustersConfig(t, west.SSHPort, min(n, 64))
	state := t.TempDir()
	limit := 10*time.Minute + time.Duration(n)*6*time.Second
	srv := x.startServeFor(t, state, cfg, freeAddr(t), limit)
	b := srv.bgRun
	t.Cleanup(func() { srv.kill(t) })

	tag := randHex(t)
	type answer struct {
		wave int
		code int
		doc  map[string]any
	}
	answers := make([]answer, n)
	var wg sync.WaitGroup
	post := func(wave, from, to int) {
		for i := from; i < to; i++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				body := rowBody(i, tag)
				code, doc := srv.postWithin(t, limit, "/run", body, "") // the last rows wait for the first
				answers[i] = answer{wave: wave, code: code, doc: doc}
			}()
		}
	}
	w1, w2 := n/2, n/2+n/4
	post(1, 0, w1)
	// Wave 1 runs on both; once an episode of cluster 2 has a job
	// running, its controller stops.
	eventually(t, episodeTimeout, 300*time.Millisecond, func() string {
		for _, r := range srv.rows(t) {
			if r.Cluster == "west" && r.State == "RUNNING" {
				return ""
			}
		}
		return "no episode running on west yet"
	})
	var onWestAtStop []string
	for _, r := range srv.rows(t) {
		if r.Cluster == "west" && r.Outcome == nil {
			onWestAtStop = append(onWestAtStop, r.Episode)
		}
	}
	west.StopCluster2(t)
	down := time.Now()
	post(2, w1, w2)
	// While it is down: serve says so, and everything new goes to east.
	eventually(t, 2*time.Minute, 500*time.Millisecond, func() string {
		if !strings.Contains(b.stderr.String(), "cluster west: not answering") {
			return "serve has not seen west go"
		}
		return ""
	})
	time.Sleep(20 * time.Second)
	west.StartCluster2(t)
	up := time.Now()
	t.Logf("west's controller stopped for %s with %d of its episodes in flight", up.Sub(down).Round(time.Second), len(onWestAtStop))
	// The episodes west had when it stopped are followed to their ends now
	// that it answers again; then west is idle, and the third wave finds
	// its GPU free.
	eventually(t, episodeTimeout+time.Duration(len(onWestAtStop))*30*time.Second, time.Second, func() string {
		for _, ep := range onWestAtStop {
			raw, err := os.ReadFile(filepath.Join(state, "nemorl-slurm", "episodes", ep+".json"))
			var e struct {
				Outcome map[string]any `json:"outcome"`
			}
			if err != nil || json.Unmarshal(raw, &e) != nil || e.Outcome == nil {
				return ep + " on west not finished yet"
			}
		}
		return ""
	})
	t.Logf("west's %d episodes finished %s after its return", len(onWestAtStop), time.Since(up).Round(time.Second))
	post(3, w2, n)
	wg.Wait()

	// Every row scored, once, by an episode of its own.
	seen := map[string]int{}
	for i, a := range answers {
		ep := str(a.doc["episode"])
		if a.code != 200 || a.doc["outcome"] != "scored" || a.doc["_ng_failure_class"] != nil {
			t.Errorf("row %d (wave %d): %d %v", i, a.wave, a.code, a.doc)
		}
		if prev, ok := seen[ep]; ok {
			t.Errorf("rows %d and %d answered by the same episode %s", prev, i, ep)
		}
		seen[ep] = i
		t.Cleanup(func() { cleanupClusterEpisode(t, ep, west) })
	}
	// The ledger: one entry per row (none left by a submission that
	// failed on west and went east), each with its cluster.
	entries, err := filepath.Glob(filepath.Join(state, "nemorl-slurm", "episodes", "*.json"))
	if err != nil {
		t.Fatal(err)
	}
	type ent struct {
		Episode string    `json:"episode"`
		Cluster string    `json:"cluster"`
		Created time.Time `json:"created"`
		Host    string    `json:"host"`
		Dir     string    `json:"dir"`
	}
	byEpisode := map[string]ent{}
	for _, p := range entries {
		raw, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		var e ent
		if json.Unmarshal(raw, &e) != nil || e.Episode == "" {
			continue // not an episode entry (keys, answers)
		}
		byEpisode[e.Episode] = e
	}
	// A row not scored: its stages' output, for the reader of the log.
	for i, a := range answers {
		if a.doc["outcome"] == "scored" {
			continue
		}
		if e, ok := byEpisode[str(a.doc["episode"])]; ok && e.Dir != "" {
			for _, s := range labStages {
				if raw, err := os.ReadFile(filepath.Join(e.Dir, stages.Output(stages.Stage(s)))); err == nil {
					t.Logf("row %d on %s, %s: …%s", i, e.Cluster, stages.Output(stages.Stage(s)), tail(string(raw), 3000))
				}
			}
		}
	}
	if len(byEpisode) != n {
		t.Errorf("%d ledger entries for %d rows", len(byEpisode), n)
	}
	split := map[int]map[string]int{1: {}, 2: {}, 3: {}}
	for i, a := range answers {
		e, ok := byEpisode[str(a.doc["episode"])]
		if !ok {
			t.Errorf("row %d: episode %v not in the ledger", i, a.doc["episode"])
			continue
		}
		if e.Cluster != "east" && e.Cluster != "west" {
			t.Errorf("%s: cluster %q", e.Episode, e.Cluster)
		}
		if e.Cluster == "west" && !strings.HasSuffix(e.Host, ":"+strconv.Itoa(west.SSHPort)) {
			t.Errorf("%s: on west through %s", e.Episode, e.Host)
		}
		split[a.wave][e.Cluster]++
		if e.Cluster == "west" && e.Created.After(down.Add(2*time.Second)) && e.Created.Before(up) {
			t.Errorf("%s placed on west at %s, while its controller was down (%s..%s)", e.Episode, e.Created.Format(time.TimeOnly), down.Format(time.TimeOnly), up.Format(time.TimeOnly))
		}
	}
	t.Logf("placed: wave 1 (both up) %v; wave 2 (west down) %v; wave 3 (west back) %v", split[1], split[2], split[3])
	if split[1]["east"] == 0 || split[1]["west"] == 0 {
		t.Errorf("wave 1 not spread over both clusters: %v", split[1])
	}
	// By capacity: east has twice west's GPUs.
	if split[1]["east"] <= split[1]["west"] {
		t.Errorf("wave 1 put %d rows on east (twice west's GPUs) and %d on west: want more on east", split[1]["east"], split[1]["west"])
	}
	// (A row of wave 2 may still go to west: one that waited for a slot
	// until after west came back. The creation times above say none was
	// placed there while it was down.)
	if split[3]["west"] == 0 {
		t.Errorf("wave 3: nothing on west after it came back: %v", split[3])
	}
	if len(onWestAtStop) == 0 {
		t.Error("no episode was in flight on west when its controller stopped")
	}
	// Placement's reasons, as serve logged them.
	placed := regexp.MustCompile(`placed \d+ rows: \[.*\]`).FindAllString(b.stderr.String(), -1)
	if len(placed) == 0 || !strings.Contains(b.stderr.String(), "cluster west: answering") {
		t.Errorf("serve's log lacks the placements or west's return:\n%s", tail(b.stderr.String(), 4000))
	} else {
		t.Logf("first placement: %s; last: %s", placed[0], placed[len(placed)-1])
	}
	_, raw := srv.get(t, "/metrics")
	for _, want := range []string{`nemorl_serve_cluster_up{cluster="west"} 1`, `nemorl_serve_cluster_up{cluster="east"} 1`} {
		if !strings.Contains(string(raw), want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
	pe, pw := metricValue(t, raw, `nemorl_serve_cluster_placed_total{cluster="east"}`), metricValue(t, raw, `nemorl_serve_cluster_placed_total{cluster="west"}`)
	if pe+pw != int64(n) {
		t.Errorf("placed %d on east and %d on west, want %d in all", pe, pw, n)
	}
	// list shows the cluster of each.
	r := x.run(t, state, quickTimeout, "list", "--json")
	r.want(t, ExitOK)
	var listed struct {
		Episodes []struct {
			Cluster string `json:"cluster"`
		} `json:"episodes"`
	}
	if err := json.Unmarshal(r.stdout, &listed); err != nil {
		t.Fatalf("list --json: %v", err)
	}
	onWest := 0
	for _, e := range listed.Episodes {
		if e.Cluster == "west" {
			onWest++
		}
	}
	if want := split[1]["west"] + split[2]["west"] + split[3]["west"]; onWest != want {
		t.Errorf("list --json names west %d times, want %d:\n%s", onWest, want, r.stdout)
	}
}

// rows is serve's /episodes.
func (s *serveProc) rows(t *testing.T) []rowJSON {
	var doc struct {
		Episodes []rowJSON `json:"episodes"`
	}
	if code, raw := s.get(t, "/episodes"); code != 200 || json.Unmarshal(raw, &doc) != nil {
		return nil
	}
	return doc.Episodes
}

// clustersConfig is serveConfig's config with clusters: east (the lab's
// cluster 1, as configured) and west (cluster 2 through its sshd on
// westPort), the same user, key, workdir and stand-ins.
func (x *labCLI) clustersConfig(t *testing.T, westPort, concurrency int) string {
	t.Helper()
	return x.clustersConfigOf(t, concurrency, clusterSpec{name: "east", port: x.lab.SSHPort}, clusterSpec{name: "west", port: westPort})
}

// clusterSpec is one clusters: entry of clustersConfigOf: the lab's
// cluster: block with its own name, login port and extra keys.
type clusterSpec struct {
	name       string
	port       int
	knownHosts string   // "": the lab's
	extra      []string // "key: value" lines added to the entry
}

// clustersConfigOf is serveConfig's config with a clusters: entry per
// spec, each the lab's cluster: block (user, key, workdir, partition)
// with the spec's name, port and extra keys.
func (x *labCLI) clustersConfigOf(t *testing.T, concurrency int, specs ...clusterSpec) string {
	t.Helper()
	p := x.serveConfig(t, fmt.Sprintf("  concurrency: %d\n", concurrency), "")
	raw, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	data := string(raw)
	i := strings.Index(data, "\ncluster:\n")
	j := strings.Index(data, "\nruntime:")
	if i < 0 || j < i {
		t.Fatalf("%s: no cluster: block before runtime:", p)
	}
	block := strings.Split(strings.TrimRight(data[i+len("\ncluster:\n"):j], "\n"), "\n")
	var b strings.Builder
	for _, sp := range specs {
		fmt.Fprintf(&b, "  - name: %s\n", sp.name)
		for _, l := range block {
			switch k := strings.TrimSpace(l); {
			case strings.HasPrefix(k, "port:"):
				l = strings.Replace(l, k, fmt.Sprintf("port: %d", sp.port), 1)
			case strings.HasPrefix(k, "known_hosts:") && sp.knownHosts != "":
				l = strings.Replace(l, k, "known_hosts: "+sp.knownHosts, 1)
			}
			b.WriteString("  " + l + "\n")
		}
		for _, l := range sp.extra {
			b.WriteString("    " + l + "\n")
		}
	}
	data = data[:i] + "\nclusters:\n" + b.String() + data[j:]
	if err := os.WriteFile(p, []byte(data), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// cleanupClusterEpisode scancels an episode's jobs on both clusters.
func cleanupClusterEpisode(t *testing.T, ep string, west labtest.Lab) {
	if ep == "" {
		return
	}
	cleanupEpisode(t, ep)
	for _, s := range labStages {
		c := exec.Command("scancel", "--name="+jobName(ep, s))
		c.Env = west.Cluster2Env()
		_ = c.Run()
	}
}

func tail(s string, n int) string {
	if len(s) > n {
		return "…" + s[len(s)-n:]
	}
	return s
}
