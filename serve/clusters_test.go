package serve

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nemorl/nemorl-slurm/episode"
	"github.com/nemorl/nemorl-slurm/ledger"
	"github.com/nemorl/nemorl-slurm/remote"
	"github.com/nemorl/nemorl-slurm/rules"
	"github.com/nemorl/nemorl-slurm/slurm"
	"github.com/nemorl/nemorl-slurm/stages"
)

// roomRunner answers the room probe (sh -c roomScript) with out, or fails
// as a controller that is down; it counts the probes.
type roomRunner struct {
	mu     sync.Mutex
	out    string
	down   bool
	probes int
}

func (r *roomRunner) Run(_ context.Context, cmd remote.Command) (*remote.Result, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(cmd.Argv) < 3 || cmd.Argv[0] != "sh" || !strings.Contains(cmd.Argv[2], "sinfo") {
		return nil, fmt.Errorf("unexpected command %v", cmd.Argv)
	}
	r.probes++
	if r.down {
		const msg = "sinfo: error: Unable to contact slurm controller (connect failure)"
		return &remote.Result{Stderr: []byte(msg), ExitStatus: 1}, &remote.CommandError{Host: "fake", Command: "sh", ExitStatus: 1, Stderr: msg}
	}
	return &remote.Result{Stdout: []byte(r.out)}, nil
}

// TestClusterFacts: placement reads each cluster's room once per poll_min
// (cached), a cluster whose probe fails gets no rows until a probe reaches
// it again, and a row is not placed again where its submission failed.
func TestClusterFacts(t *testing.T) {
	s, d := newTestServer(t, Options{})
	now := time.Unix(1_700_000_000, 0)
	s.opt.Now = func() time.Time { return now }
	east, west := &roomRunner{out: "mixed|gpu:h100:2|gpu:h100:0(IDX:N/A)|\n--\n0\n"}, &roomRunner{out: "idle|gpu:h100:1|gpu:h100:0|\n--\n0\n"}
	mk := func(name string, r remote.Runner) *cluster {
		dd := &episode.Driver{Config: d.Config, ConfigPath: d.ConfigPath, Host: d.Host, Slurm: slurm.New(r), Ledger: d.Ledger}
		return &cluster{Cluster: DriverCluster(name, dd), up: true}
	}
	s.clusters = []*cluster{mk("east", east), mk("west", west)}

	rows := func(n int) []*run {
		out := make([]*run, n)
		for i := range out {
			out[i] = &run{episode: fmt.Sprintf("ep-%d", i)}
		}
		return out
	}
	split := func(groups map[*cluster][]*run, left []*run) string {
		return fmt.Sprintf("east:%d west:%d left:%d", len(groups[s.clusters[0]]), len(groups[s.clusters[1]]), len(left))
	}
	if got := split(s.placeBatch(rows(3))); got != "east:2 west:1 left:0" {
		t.Errorf("by free GPUs: %s", got)
	}
	if east.probes != 1 || west.probes != 1 {
		t.Errorf("probes %d %d, want one each", east.probes, west.probes)
	}
	// Within poll_min: the cached room, no second probe.
	s.placeBatch(rows(1))
	if east.probes != 1 || west.probes != 1 {
		t.Errorf("probes %d %d within poll_min, want the cached room", east.probes, west.probes)
	}
	// West's controller stops: after poll_min its probe fails, it gets
	// nothing, and /metrics says it is down.
	west.mu.Lock()
	west.down = true
	west.mu.Unlock()
	now = now.Add(d.Config.Episodes.PollMin.Duration)
	if got := split(s.placeBatch(rows(4))); got != "east:4 west:0 left:0" {
		t.Errorf("west down: %s", got)
	}
	if s.clusters[1].up || s.clusters[1].lastErr == nil || !strings.Contains(s.clusters[1].lastErr.Error(), "Unable to contact") {
		t.Errorf("west should be down with the controller's answer: up %v, %v", s.clusters[1].up, s.clusters[1].lastErr)
	}
	req := httptest.NewRequest(http.MethodGet, "/metrics", nil)
	w := httptest.NewRecorder()
	s.Handler().ServeHTTP(w, req)
	for _, want := range []string{`nemorl_serve_cluster_up{cluster="west"} 0`, `nemorl_serve_cluster_up{cluster="east"} 1`, `nemorl_serve_cluster_free_gpus{cluster="east"} 2`} {
		if !strings.Contains(w.Body.String(), want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
	// /ui says it too, per cluster.
	ui := uiGet(t, s.Handler(), "/ui/figures")
	for _, want := range []string{`<p id="clusters-now">Clusters: east answering, `, `, 2 of 2 GPUs free, 0 jobs pending; west <span class="warn">not answering</span>, `} {
		if ui.Code != http.StatusOK || !strings.Contains(ui.Body.String(), want) {
			t.Errorf("/ui/figures: %d, lacks %q:\n%.2000s", ui.Code, want, ui.Body.String())
		}
	}
	// Both down: nothing placed.
	east.mu.Lock()
	east.down = true
	east.mu.Unlock()
	now = now.Add(d.Config.Episodes.PollMin.Duration)
	if got := split(s.placeBatch(rows(2))); got != "east:0 west:0 left:2" {
		t.Errorf("both down: %s", got)
	}
	// West returns: it takes the rows, but not one whose submission
	// already failed there.
	west.mu.Lock()
	west.down = false
	west.mu.Unlock()
	now = now.Add(d.Config.Episodes.PollMin.Duration)
	rs := rows(2)
	rs[1].tried = map[string]bool{"west": true}
	groups, left := s.placeBatch(rs)
	if got := split(groups, left); got != "east:0 west:1 left:1" || len(left) != 1 || left[0] != rs[1] {
		t.Errorf("west back: %s", got)
	}
	// A submission that could not reach a cluster marks it down.
	s.down(s.clusters[1], fmt.Errorf("ssh: %w", remote.ErrConnectionLost))
	if s.clusters[1].up {
		t.Error("down did not mark west down")
	}
}

// TestDownAtStart: a cluster that did not answer when serve started gets
// no rows; at its first answer its preflight runs, and only a passed one
// lets rows go there; a preflight that finds the config wrong keeps it
// out for good (and is not run again), one that fails for the connection
// is tried at the next answer.
func TestDownAtStart(t *testing.T) {
	s, d := newTestServer(t, Options{})
	now := time.Unix(1_700_000_000, 0)
	s.opt.Now = func() time.Time { return now }
	free := "idle|gpu:h100:1|gpu:h100:0|\n--\n0\n"
	east, west, north := &roomRunner{out: free}, &roomRunner{out: free, down: true}, &roomRunner{out: free}
	var preflights = map[string]int{}
	preflightErr := map[string]error{"west": fmt.Errorf("stat /w: %w", remote.ErrConnectionLost), "north": fmt.Errorf("%w: runtime.images.eval /n/e.sif: no such file", ErrMisconfigured)}
	mk := func(name string, r remote.Runner, downAtStart bool) *cluster {
		dd := &episode.Driver{Config: d.Config, ConfigPath: d.ConfigPath, Host: d.Host, Slurm: slurm.New(r), Ledger: d.Ledger}
		c := DriverCluster(name, dd)
		if downAtStart {
			c.Down = errors.New("dial tcp: connection refused")
			c.Preflight = func(context.Context) error { preflights[name]++; return preflightErr[name] }
		}
		return &cluster{Cluster: c, up: c.Down == nil, lastErr: c.Down, unchecked: c.Down != nil}
	}
	s.clusters = []*cluster{mk("east", east, false), mk("west", west, true), mk("north", north, true)}
	split := func(groups map[*cluster][]*run, left []*run) string {
		return fmt.Sprintf("east:%d west:%d north:%d left:%d", len(groups[s.clusters[0]]), len(groups[s.clusters[1]]), len(groups[s.clusters[2]]), len(left))
	}
	rows := func(n int) []*run {
		out := make([]*run, n)
		for i := range out {
			out[i] = &run{episode: fmt.Sprintf("ep-%d", i)}
		}
		return out
	}
	// West still down, north answers but its paths are wrong: east alone.
	if got := split(s.placeBatch(rows(3))); got != "east:3 west:0 north:0 left:0" {
		t.Errorf("at start: %s", got)
	}
	if preflights["west"] != 0 || preflights["north"] != 1 {
		t.Errorf("preflights %v: west has not answered, north's ran once", preflights)
	}
	if s.clusters[2].broken == nil || s.clusters[2].up {
		t.Errorf("north should be out for good: up %v broken %v", s.clusters[2].up, s.clusters[2].broken)
	}
	// West answers, but its preflight loses the connection: still down,
	// tried again at the next answer.
	west.mu.Lock()
	west.down = false
	west.mu.Unlock()
	now = now.Add(d.Config.Episodes.PollMin.Duration)
	if got := split(s.placeBatch(rows(2))); got != "east:2 west:0 north:0 left:0" {
		t.Errorf("west's preflight failed: %s", got)
	}
	delete(preflightErr, "west")
	now = now.Add(d.Config.Episodes.PollMin.Duration)
	if got := split(s.placeBatch(rows(2))); got != "east:1 west:1 north:0 left:0" {
		t.Errorf("west checked: %s", got)
	}
	now = now.Add(d.Config.Episodes.PollMin.Duration)
	s.placeBatch(rows(1))
	if preflights["west"] != 2 || preflights["north"] != 1 || north.probes != 1 {
		t.Errorf("preflights %v, north probes %d: a passed preflight is not run again, a broken cluster is not probed again", preflights, north.probes)
	}
}

func TestUnreachable(t *testing.T) {
	ctl := &remote.CommandError{Host: "h", Command: "sh", ExitStatus: 1, Stderr: "sbatch: error: Batch job submission failed: Unable to contact slurm controller (connect failure)"}
	timeout := &remote.CommandError{Host: "h", Command: "sh", ExitStatus: 1, Stderr: "sbatch: error: Batch job submission failed: Socket timed out on send/recv operation"}
	other := &remote.CommandError{Host: "h", Command: "sh", ExitStatus: 1, Stderr: "sbatch: error: invalid partition specified"}
	for _, c := range []struct {
		err  error
		want bool
	}{
		{fmt.Errorf("episode x: submit author: %w", ctl), true},
		{fmt.Errorf("dial: %w", remote.ErrConnectionLost), true},
		{timeout, false}, // the job may exist: never placed twice
		{other, false},
		{fmt.Errorf("plain"), false},
	} {
		if got := unreachable(c.err); got != c.want {
			t.Errorf("unreachable(%v) = %v, want %v", c.err, got, c.want)
		}
	}
}

// TestFollowWithoutGoroutine: a followed episode's request waits on its
// engine with no goroutine of its own; serve's shutdown answers it once
// (errClosed), and the engine's later word on it changes nothing.
func TestFollowWithoutGoroutine(t *testing.T) {
	s, d := newTestServer(t, Options{})
	e := &ledger.Entry{Episode: stages.NewID(time.Now()), Created: time.Now(), ConfigPath: d.ConfigPath, Dir: t.TempDir(), Isolation: "none",
		Jobs: map[stages.Stage]*ledger.Submission{stages.Author: {JobID: "4242", Submitted: time.Now()}}}
	if err := d.Ledger.Create(e, []byte("task")); err != nil {
		t.Fatal(err)
	}
	const rows = 200
	before := runtime.NumGoroutine()
	runs := make([]*run, rows)
	for i := range runs {
		runs[i] = &run{done: make(chan struct{}), started: true, episode: e.Episode}
		s.mu.Lock()
		s.live[runs[i]] = true
		s.mu.Unlock()
		s.follow(runs[i], e, nil)
	}
	if n := runtime.NumGoroutine(); n > before+10 {
		t.Errorf("%d goroutines after following %d runs, %d before: want none per run", n, rows, before)
	}
	if !s.clusters[0].Follower.Following(e.Episode) {
		t.Fatal("the engine does not follow the episode")
	}
	s.Shutdown()
	for i, ru := range runs {
		select {
		case <-ru.done:
		default:
			t.Fatalf("run %d not ended by shutdown", i)
		}
		if !errors.Is(ru.err, errClosed) {
			t.Fatalf("run %d: err %v, want errClosed", i, ru.err)
		}
	}
	// The engine's word after shutdown: no second close, no change.
	final := *e
	final.Outcome = &rules.Outcome{Outcome: rules.Scored, Reward: f64(0.5)}
	s.end(runs[0], &final, nil)
	if runs[0].entry != nil || !errors.Is(runs[0].err, errClosed) {
		t.Errorf("a second end changed the run: %v %v", runs[0].entry, runs[0].err)
	}
}

// rowsFollower is a follower whose rows are given.
type rowsFollower struct {
	episode.Follower
	rows []episode.Row
}

func (f rowsFollower) Rows() []episode.Row { return f.rows }

// TestPlaceBatchGPUTypes: with clusters of two GPU types
// (serve.mix_gpu_types), the rows of a task index go where the rows of it
// in progress run; a row that could reach no cluster of its type gives up
// (one of another type would not do), one of a task index held by none
// goes on to the other type; /episodes names each cluster's type.
func TestPlaceBatchGPUTypes(t *testing.T) {
	s, d := newTestServer(t, Options{})
	now := time.Unix(1_700_000_000, 0)
	s.opt.Now = func() time.Time { return now }
	mk := func(name, gres string, r remote.Runner) *cluster {
		cfg := *d.Config
		cfg.Cluster.Gres = gres
		dd := &episode.Driver{Config: &cfg, ConfigPath: d.ConfigPath, Host: d.Host, Slurm: slurm.New(r), Ledger: d.Ledger}
		return &cluster{Cluster: DriverCluster(name, dd), up: true}
	}
	east := mk("east", "gpu:h100:1", &roomRunner{out: "idle|gpu:h100:8|gpu:h100:0|\n--\n0\n"})
	west := mk("west", "gpu:a100:1", &roomRunner{out: "idle|gpu:a100:1|gpu:a100:0|\n--\n0\n"})
	s.clusters = []*cluster{east, west}
	// Task 3's first rows run on west (a100), as serve placed them or
	// re-attached to them.
	for _, ep := range []string{"ep-held-1", "ep-held-2"} {
		s.live[&run{episode: ep, taskIndex: "3", holds: true, gpuType: "a100", cluster: west, done: make(chan struct{})}] = true
	}
	var batch []*run
	for i, task := range []string{"3", "4", "3", "4", ""} {
		ru := &run{episode: fmt.Sprintf("ep-%d", i), taskIndex: task, done: make(chan struct{})}
		s.live[ru] = true
		batch = append(batch, ru)
	}
	groups, left := s.placeBatch(batch)
	where := map[string]string{}
	for c, rs := range groups {
		for _, ru := range rs {
			where[ru.episode] = c.Name
			if !ru.holds || ru.gpuType != c.gpuType() {
				t.Errorf("%s on %s holds %v %q", ru.episode, c.Name, ru.holds, ru.gpuType)
			}
		}
	}
	// West has one GPU, east eight: only task 3 goes to west anyway.
	if len(left) != 0 || where["ep-0"] != "west" || where["ep-2"] != "west" || where["ep-1"] != "east" || where["ep-3"] != "east" || where["ep-4"] != "east" {
		t.Errorf("placed %v, left %d: want task 3 on west (a100, where its rows run), the rest on east", where, len(left))
	}
	if held := s.heldTypes(nil); held["3"] != "a100" || held["4"] != "h100" {
		t.Errorf("held %v", held)
	}

	// A row of task 3 that could not reach west: no other a100 cluster,
	// so it has no cluster left, even though east answers.
	r3 := &run{episode: "ep-r3", taskIndex: "3", holds: true, gpuType: "a100", tried: map[string]bool{"west": true}, done: make(chan struct{})}
	s.live[r3] = true
	if !s.exhausted(r3) {
		t.Error("a task 3 row tried on west has an a100 cluster left?")
	}
	// A row of a task index nobody else holds may go to the other type.
	r9 := &run{episode: "ep-r9", taskIndex: "9", holds: true, gpuType: "a100", tried: map[string]bool{"west": true}, done: make(chan struct{})}
	s.live[r9] = true
	if s.exhausted(r9) {
		t.Error("a task 9 row (no other row of it) tried on west should still have east")
	}
	now = now.Add(d.Config.Episodes.PollMin.Duration)
	if groups, left := s.placeBatch([]*run{r9}); len(left) != 0 || len(groups[east]) != 1 {
		t.Errorf("task 9 placed %v, left %d: want east", groups, len(left))
	}
	// Once task 3's rows end, it holds no type.
	s.mu.Lock()
	for ru := range s.live {
		if ru.taskIndex == "3" {
			delete(s.live, ru)
		}
	}
	s.mu.Unlock()
	if _, held := s.heldTypes(nil)["3"]; held {
		t.Error("task 3 still held after its rows ended")
	}

	// /episodes names each episode's cluster and its GPU type.
	east.Follower = rowsFollower{Follower: east.Follower, rows: []episode.Row{{Episode: "ep-e", Stage: stages.Train}}}
	west.Follower = rowsFollower{Follower: west.Follower, rows: []episode.Row{{Episode: "ep-w", Stage: stages.Eval}}}
	w := httptest.NewRecorder()
	s.Handler().ServeHTTP(w, httptest.NewRequest(http.MethodGet, "/episodes", nil))
	for _, want := range []string{`"episode":"ep-e","cluster":"east","gpu_type":"h100"`, `"episode":"ep-w","cluster":"west","gpu_type":"a100"`} {
		if !strings.Contains(w.Body.String(), want) {
			t.Errorf("/episodes lacks %s:\n%s", want, w.Body)
		}
	}
}
