package serve

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"time"

	"github.com/nemorl/nemorl-slurm/configs"
	"github.com/nemorl/nemorl-slurm/episode"
	"github.com/nemorl/nemorl-slurm/ledger"
	"github.com/nemorl/nemorl-slurm/remote"
	"github.com/nemorl/nemorl-slurm/slurm"
	"github.com/nemorl/nemorl-slurm/stages"
)

// Cluster is one cluster behind a serve: the engine's Runner that submits
// there and its Follower that follows the episodes there (one SSH
// connection, one poll loop each), with what placement reads of it. A
// config of clusters: gives several; a config of one cluster: gives one,
// named "". DriverCluster builds one from an episode.Driver.
type Cluster struct {
	Name     string
	Runner   episode.Runner
	Follower episode.Follower
	// Config is the cluster's config (cluster:, episodes.poll_min).
	Config *configs.Config
	// Room reads the cluster's free GPUs and pending depth
	// (slurm.Client.Room: one sinfo and one squeue).
	Room func(ctx context.Context, partition, gres string) (slurm.Room, error)
	// MaxInFlight bounds this serve's episodes there (0: none of its own).
	MaxInFlight int
	// RemoteOps and Reconnects count what was run on the cluster and how
	// often its connection was made again (metrics); nil: not exported.
	RemoteOps  func() map[string]int64
	Reconnects func() int64
	// Down, when set, is why the cluster did not answer at start: it gets
	// no rows until a probe reaches it and Preflight (when set) passes.
	Down      error
	Preflight func(context.Context) error
}

// DriverCluster is the Cluster of driver d, named name: d as its Runner,
// a new Engine of d as its Follower, d's config and its Slurm client's
// room.
func DriverCluster(name string, d *episode.Driver) Cluster {
	return Cluster{Name: name, Runner: d, Follower: d.Follower(episode.EngineOptions{}), Config: d.Config, Room: d.Slurm.Room}
}

// ErrMisconfigured marks a Preflight error that no later try mends (a
// path of the config missing on the cluster): the cluster stays down.
var ErrMisconfigured = errors.New("misconfigured")

// probeTimeout bounds one room probe of a cluster: a controller that does
// not answer in it is taken as down for placement.
const probeTimeout = 30 * time.Second

// cluster is a Cluster as the server keeps it: what placement knows.
type cluster struct {
	Cluster
	mu sync.Mutex
	// up is false after a probe or a submission could not reach the
	// cluster, until a probe reaches it again.
	up       bool
	room     slurm.Room
	roomAt   time.Time
	known    bool
	lastErr  error
	inFlight int
	// wait and run are the recent queue wait and run time of the train
	// and eval jobs there (exponentially weighted means over the episodes
	// that ended).
	wait, run time.Duration
	placed    int64
	// unchecked: Preflight has not passed yet; broken: it failed for
	// good (ErrMisconfigured).
	unchecked bool
	broken    error
}

// gpuType is the type of the cluster's gres ("" when it names none).
func (c *cluster) gpuType() string { return configs.GPUType(c.Config.Cluster.Gres) }

func (c *cluster) label() string {
	if c.Name == "" {
		return "cluster"
	}
	return c.Name
}

// facts reads each cluster's room (one sinfo+squeue per cluster, at most
// once per its poll_min: cached), in parallel, and returns what placement
// decides from.
func (s *Server) facts() []clusterFacts {
	var wg sync.WaitGroup
	now := s.opt.Now()
	for _, c := range s.clusters {
		c.mu.Lock()
		fresh := !c.roomAt.IsZero() && now.Sub(c.roomAt) < c.Config.Episodes.PollMin.Duration
		c.mu.Unlock()
		if fresh {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			s.probe(c)
		}()
	}
	wg.Wait()
	out := make([]clusterFacts, len(s.clusters))
	for i, c := range s.clusters {
		c.mu.Lock()
		out[i] = clusterFacts{Name: c.label(), Up: c.up, InFlight: c.inFlight, MaxInFlight: c.MaxInFlight,
			Known: c.known, GPUs: c.room.GPUs, FreeGPUs: c.room.FreeGPUs, Pending: c.room.Pending, Run: c.run, Wait: c.wait, GPUType: c.gpuType()}
		c.mu.Unlock()
	}
	return out
}

// probe asks c for its room and records whether it answered.
func (s *Server) probe(c *cluster) {
	ctx, cancel := context.WithTimeout(s.ctx, probeTimeout)
	defer cancel()
	cl := c.Config.Cluster
	c.mu.Lock()
	unchecked, broken := c.unchecked, c.broken
	c.mu.Unlock()
	if broken != nil {
		return
	}
	room, err := c.Room(ctx, cl.Partition, cl.Gres)
	if err == nil && unchecked {
		// First answer of a cluster that was down at start: its paths are
		// checked before it takes a row.
		if err = c.Preflight(ctx); err == nil {
			s.logf("cluster %s: preflight passed", c.label())
		} else if errors.Is(err, ErrMisconfigured) {
			s.logf("cluster %s: answers, but takes no rows: %v", c.label(), err)
		}
	}
	c.mu.Lock()
	if err == nil {
		c.unchecked = false
	} else if errors.Is(err, ErrMisconfigured) {
		c.broken = err
	}
	was := c.up
	c.roomAt = s.opt.Now()
	c.lastErr = err
	if err == nil {
		c.up, c.known, c.room = true, true, room
	} else {
		c.up = false
	}
	c.mu.Unlock()
	switch {
	case err != nil && was:
		s.logf("cluster %s: not answering, no new rows placed there: %v", c.label(), err)
	case err != nil:
	case !was:
		s.logf("cluster %s: answering: %d of %d GPUs free, %d jobs pending", c.label(), room.FreeGPUs, room.GPUs, room.Pending)
	}
}

// down marks c as not answering after a submission could not reach it.
func (s *Server) down(c *cluster, err error) {
	c.mu.Lock()
	was := c.up
	c.up, c.lastErr, c.roomAt = false, err, s.opt.Now()
	c.mu.Unlock()
	if was {
		s.logf("cluster %s: not answering, its rows go elsewhere: %v", c.label(), err)
	}
}

// clusterOf is the cluster of an episode (its ledger entry's), nil when the
// config has no such cluster (any more).
func (s *Server) clusterOf(e *ledger.Entry) *cluster {
	for _, c := range s.clusters {
		if c.Name == e.Cluster {
			return c
		}
	}
	return nil
}

// started counts an episode in flight on c.
func (c *cluster) started() {
	c.mu.Lock()
	c.inFlight++
	c.mu.Unlock()
}

// ended counts an episode of c out and folds its GPU jobs' queue waits
// into the cluster's recent wait.
func (c *cluster) ended(final *ledger.Entry) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.inFlight = max(0, c.inFlight-1)
	if final == nil || final.Outcome == nil {
		return
	}
	for _, stage := range []stages.Stage{stages.Train, stages.Eval} {
		job, ok := final.Outcome.Jobs[stage]
		if !ok || job.Start.IsZero() {
			continue
		}
		if w, ok := queueWait(final, stage, job); ok {
			c.wait = ewma(c.wait, w)
		}
		if !job.End.IsZero() && job.End.After(job.Start) {
			c.run = ewma(c.run, job.End.Sub(job.Start))
		}
	}
}

// ewma folds v into the weighted mean m (0: none yet; a mean is at least
// a second, so that 0 keeps meaning none).
func ewma(m, v time.Duration) time.Duration {
	if m == 0 {
		return max(v, time.Second)
	}
	return max((7*m+3*v)/10, time.Second)
}

// clusterRows are the engines' rows, with the cluster of each.
func (s *Server) clusterRows() ([]episode.Row, []string) {
	var rows []episode.Row
	var names []string
	for _, c := range s.clusters {
		for _, r := range c.Follower.Rows() {
			rows = append(rows, r)
			names = append(names, c.Name)
		}
	}
	return rows, names
}

// engineStats sums the engines' counters (one poll loop per cluster).
func (s *Server) engineStats() episode.EngineStats {
	var sum episode.EngineStats
	for _, c := range s.clusters {
		st := c.Follower.Stats()
		sum.Polls += st.Polls
		sum.PollFailures += st.PollFailures
		sum.Backoffs += st.Backoffs
		sum.LastPoll = max(sum.LastPoll, st.LastPoll)
		sum.PollSeconds += st.PollSeconds
		sum.Followed += st.Followed
		sum.Cost.Add(st.Cost)
	}
	return sum
}

// placeBatch places a batch of rows on the clusters: rows by cluster, and
// the rows no cluster can take now. A row is not placed again where its
// submission failed, and the rows of one task go to clusters of one GPU
// type (place): each placed row holds its task's type until it ends.
func (s *Server) placeBatch(batch []*run) (map[*cluster][]*run, []*run) {
	if len(s.clusters) == 1 {
		return map[*cluster][]*run{s.clusters[0]: batch}, nil
	}
	facts := s.facts()
	rows := make([]placeRow, len(batch))
	for i, ru := range batch {
		rows[i].Task = ru.taskIndex
		if len(ru.tried) > 0 {
			rows[i].Tried = make([]bool, len(s.clusters))
			for j, c := range s.clusters {
				rows[i].Tried[j] = ru.tried[c.Name]
			}
		}
	}
	p := place(facts, rows, s.heldTypes(batch))
	groups := map[*cluster][]*run{}
	var left []*run
	s.mu.Lock()
	for i, ru := range batch {
		ci := p.Cluster[i]
		if ci < 0 {
			left = append(left, ru)
			continue
		}
		ru.holds, ru.gpuType = true, facts[ci].GPUType
		groups[s.clusters[ci]] = append(groups[s.clusters[ci]], ru)
	}
	s.mu.Unlock()
	s.logf("placed %d rows: %v", len(batch)-len(left), p.Why)
	return groups, left
}

// heldTypes maps each task to the GPU type its placed rows hold (the
// runs in progress but those of except): the type most of them run on,
// should a restart have left them on several.
func (s *Server) heldTypes(except []*run) map[string]string {
	skip := make(map[*run]bool, len(except))
	for _, ru := range except {
		skip[ru] = true
	}
	counts := map[string]map[string]int{}
	s.mu.Lock()
	for ru := range s.live {
		if ru.taskIndex == "" || !ru.holds || skip[ru] {
			continue
		}
		if counts[ru.taskIndex] == nil {
			counts[ru.taskIndex] = map[string]int{}
		}
		counts[ru.taskIndex][ru.gpuType]++
	}
	s.mu.Unlock()
	held := make(map[string]string, len(counts))
	for task, byType := range counts {
		best, n := "", -1
		for t, c := range byType {
			if c > n || (c == n && t < best) {
				best, n = t, c
			}
		}
		held[task] = best
	}
	return held
}

// exhausted says whether ru has been tried on every cluster it may go to:
// every cluster, or, while other rows of its task hold a GPU type, every
// cluster of that type.
func (s *Server) exhausted(ru *run) bool {
	want, held := s.heldTypes([]*run{ru})[ru.taskIndex]
	held = held && ru.taskIndex != ""
	for _, c := range s.clusters {
		if !ru.tried[c.Name] && (!held || c.gpuType() == want) {
			return false
		}
	}
	return true
}

// String names the cluster for logs.
func (c *cluster) String() string { return fmt.Sprintf("cluster %s", c.label()) }

// unreachable says a submission failed because its cluster could not take
// it, with nothing of it left there: the controller did not answer or
// refused for its rate limit (slurm.SubmitNotCreated), or the connection
// to the login node could not be made or dropped. Such a row is placed on
// another cluster; any other failure is the row's answer.
func unreachable(err error) bool {
	var op *net.OpError
	return slurm.SubmitNotCreated(err) || errors.Is(err, remote.ErrConnectionLost) || errors.As(err, &op)
}
