// Package serve is `nemorl-slurm serve`: the NeMo Gym agent endpoint. Gym
// (and NeMo RL through it) POSTs each dataset row to /run; the server runs
// the row as one episode on the cluster (author → train → eval) and answers
// with the episode's verified outcome in the fields of nemorl_env's
// NeMoRLEnvResponse. All episodes share one connection to the cluster and
// one watch loop (episode.Follower: one squeue per poll for every job in
// flight, sacct only for the jobs that left squeue).
package serve

import (
	"context"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nemorl/nemorl-slurm/configs"
	"github.com/nemorl/nemorl-slurm/episode"
	"github.com/nemorl/nemorl-slurm/ledger"
	"github.com/nemorl/nemorl-slurm/record"
	"github.com/nemorl/nemorl-slurm/report"
	"github.com/nemorl/nemorl-slurm/rules"
	"github.com/nemorl/nemorl-slurm/stages"
)

// Options configure a Server.
type Options struct {
	// Clusters are the clusters behind serve: one for a config without
	// clusters:, named "".
	Clusters []Cluster
	// Ledger, ConfigPath and Config are every cluster's: serve keeps one
	// ledger of one config file (Config: its first cluster's view).
	Ledger     *ledger.Ledger
	ConfigPath string
	Config     *configs.Config
	// Concurrency bounds the episodes in flight (serve.concurrency).
	Concurrency int
	// Failures is serve.failures: "mask" (default) or "error".
	Failures string
	// Token, when set, is required as "Authorization: Bearer <token>" on
	// every endpoint but GET /.
	Token string
	// Prompt turns a row's task into the author prompt; nil: the task as is.
	Prompt func(task string) []byte
	// Logf receives one line per event; nil discards them. Secrets are
	// redacted before it sees a line.
	Logf func(format string, args ...any)
	// ResendWindow is serve.resend_window: how long an outcome that never
	// reached its caller waits for a re-send of its row (0: the default).
	ResendWindow time.Duration
	// Head, when set, is what GET /global_config_dict_yaml answers: serve
	// standing as Gym's head server (see gymhead.go).
	Head *HeadConfig
	// Now is the clock (tests); nil: time.Now.
	Now func() time.Time
}

// Server is the HTTP handler of serve.
type Server struct {
	opt Options
	// delivering counts the answers being written (deliver): an answer
	// reaches its caller before its line reaches the answer log, and
	// /aggregate_metrics waits for those lines (waitDeliveries).
	delivering atomic.Int64
	clusters   []*cluster
	keys       *keyStore
	log        *answerLog
	slots      *slots
	// submitq feeds the submitter (one goroutine, started by New).
	submitq *submitQueue
	// started is when this server started: an undelivered outcome's
	// re-send window counts from its episode's end or from here, whichever
	// is later (a caller cannot re-send while the server is down).
	started time.Time
	secret  []string // redacted from every response and log line

	// ctx outlives requests: episodes go on when a client leaves.
	ctx  context.Context
	stop context.CancelFunc

	mu       sync.Mutex
	runs     map[string]*run  // by idempotency key, while the episode runs
	live     map[*run]bool    // every run in progress
	parked   map[*parked]bool // requests waiting on a connection taken over (park.go)
	outcomes map[[2]string]int64
	answers  map[int]int64 // HTTP status → count of /run answers
	attached int64

	// metrics are the /metrics series (prom.go); rows is what the engine
	// follows (its Rows; tests replace it).
	metrics *metrics
	rows    func() []episode.Row
}

// run is one episode as the server drives it; requests wait on done.
type run struct {
	key      string
	task     string
	done     chan struct{}
	started  bool
	episode  string
	entry    *ledger.Entry // final
	err      error         // before an episode existed (or shutdown)
	attached bool          // re-attached on start
	// cluster is where the episode runs; tried names the clusters a
	// submission of it could not reach (it is placed elsewhere).
	cluster *cluster
	tried   map[string]bool
	// taskIndex is the row's _ng_task_index ("" without one): the rows of
	// one task index run on one GPU type. holds: the run was placed (or
	// re-attached), on a cluster of gpuType, and holds its task index to
	// that type while it is in progress (placeBatch, heldTypes).
	taskIndex string
	holds     bool
	gpuType   string
	// ended: end ran (it runs once: shutdown and the engine, or the
	// submitter, may both come to it).
	ended bool
	// parked are the requests waiting for it on connections taken over
	// from net/http (park.go), told at its end.
	parked []*parked
}

// New returns a server; call Start to re-attach to the episodes a previous
// server left running.
func New(opt Options) (*Server, error) {
	if len(opt.Clusters) == 0 || opt.Ledger == nil || opt.Config == nil {
		return nil, errors.New("serve: a cluster, the ledger and the config are required")
	}
	clusters := opt.Clusters
	if opt.Failures == "" {
		opt.Failures = configs.ServeFailuresMask
	}
	if opt.ResendWindow == 0 {
		opt.ResendWindow = configs.DefaultResendWindow
	}
	if opt.Now == nil {
		opt.Now = time.Now
	}
	scope := Scope(opt.ConfigPath, opt.Config)
	keys, err := openKeyStore(opt.Ledger.Dir, scope)
	if err != nil {
		return nil, err
	}
	log, err := openAnswerLog(opt.Ledger.Dir, scope)
	if err != nil {
		return nil, err
	}
	s := &Server{opt: opt, keys: keys, log: log, started: opt.Now(), slots: newSlots(opt.Concurrency),
		runs: map[string]*run{}, live: map[*run]bool{}, parked: map[*parked]bool{}, outcomes: map[[2]string]int64{}, answers: map[int]int64{}}
	if k := opt.Config.PolicyModel.APIKey.Reveal(); k != "" {
		s.secret = append(s.secret, k)
	}
	if opt.Token != "" {
		s.secret = append(s.secret, opt.Token)
	}
	for _, c := range clusters {
		if c.Runner == nil || c.Follower == nil || c.Config == nil || c.Room == nil {
			return nil, fmt.Errorf("serve: cluster %q: a runner, a follower, its config and its room are required", c.Name)
		}
		if c.Down != nil && len(clusters) == 1 {
			return nil, fmt.Errorf("serve: the only cluster is down: %w", c.Down)
		}
		s.clusters = append(s.clusters, &cluster{Cluster: c, up: c.Down == nil, lastErr: c.Down, unchecked: c.Down != nil && c.Preflight != nil})
	}
	s.rows = func() []episode.Row { rows, _ := s.clusterRows(); return rows }
	if s.metrics, err = newMetrics(s); err != nil {
		return nil, err
	}
	for _, c := range s.clusters {
		c.Follower.ObservePolls(func(took time.Duration, _ bool) { s.metrics.pollTime.Observe(took.Seconds()) })
	}
	s.ctx, s.stop = context.WithCancel(context.Background())
	s.submitq = newSubmitQueue()
	go s.submitter()
	go s.sweepParked()
	return s, nil
}

// Scope is the part of every rollout identity that a row does not carry:
// the config's absolute path and the policy's identity (its model and
// endpoints). Rows served under another config or for another policy are
// other rollouts, whatever they carry.
func Scope(configPath string, cfg *configs.Config) string {
	urls := append([]string(nil), cfg.PolicyModel.BaseURL...)
	sort.Strings(urls)
	return configPath + "\x00" + cfg.PolicyModel.Model + "\x00" + strings.Join(urls, "\x00")
}

func (s *Server) logf(format string, args ...any) {
	if s.opt.Logf != nil {
		s.opt.Logf("%s", s.redact(fmt.Sprintf(format, args...)))
	}
}

// redact removes the API key and the token from s.
func (s *Server) redact(str string) string {
	for _, k := range s.secret {
		str = strings.ReplaceAll(str, k, configs.Redacted)
	}
	return str
}

// Start re-attaches to every unfinished episode of this config in the
// ledger (as resume does): their rows, re-sent, attach to them. They hold
// slots until they end.
func (s *Server) Start() error {
	entries, err := s.opt.Ledger.List()
	if err != nil {
		return err
	}
	byEpisode := map[string]string{}
	mapped, err := s.keys.all()
	if err != nil {
		return err
	}
	for k, ep := range mapped {
		byEpisode[ep] = k
	}
	for _, e := range entries {
		if e.Final() || e.ConfigPath != s.opt.ConfigPath {
			continue
		}
		c := s.clusterOf(e)
		if c == nil {
			s.logf("%s: on cluster %q, which the config's clusters: no longer names: not followed (put the entry back, or cancel it with a config that names it)", e.Episode, e.Cluster)
			continue
		}
		c.started()
		key := byEpisode[e.Episode]
		r := &run{key: key, done: make(chan struct{}), started: true, episode: e.Episode, attached: true, cluster: c,
			taskIndex: taskOfKey(key), holds: true, gpuType: c.gpuType()}
		s.mu.Lock()
		if r.key != "" {
			s.runs[r.key] = r
		}
		s.live[r] = true
		s.mu.Unlock()
		s.slots.force()
		s.logf("re-attached to %s", e.Episode)
		s.follow(r, e, nil)
	}
	return nil
}

// Shutdown stops taking rows: waiting requests whose episode never
// started, and every request still open, are answered 503; running
// episodes go on on the cluster for the next server to re-attach.
func (s *Server) Shutdown() {
	s.slots.close()
	s.stop()
	// Every request still waiting is answered now, as a waiting handler
	// was on the server's end: its episode goes on, and the next serve
	// re-attaches to it.
	s.mu.Lock()
	live := make([]*run, 0, len(s.live))
	for ru := range s.live {
		live = append(live, ru)
	}
	s.mu.Unlock()
	for _, ru := range live {
		s.end(ru, nil, errClosed)
	}
	s.waitParked(10 * time.Second)
}

// Handler routes the endpoints.
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, r *http.Request) {
		_ = s.writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
	})
	mux.HandleFunc("POST /run", s.auth(s.handleRun))
	mux.HandleFunc("POST /aggregate_metrics", s.auth(s.handleAggregate))
	mux.HandleFunc("GET /episodes", s.auth(s.handleEpisodes))
	mux.HandleFunc("GET /metrics", s.auth(s.metrics.handler(s.redact, s.logf).ServeHTTP))
	if s.opt.Head != nil {
		mux.HandleFunc("GET /global_config_dict_yaml", s.auth(s.handleHead))
	}
	s.routeUI(mux) // GET /ui, GET /ui/figures (ui.go)
	return mux
}

func (s *Server) auth(h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if s.opt.Token != "" {
			if !s.bearerOK(r) {
				w.Header().Set("WWW-Authenticate", `Bearer realm="nemorl-slurm"`)
				_ = s.writeJSON(w, http.StatusUnauthorized, map[string]string{"error": "missing or wrong bearer token (Authorization: Bearer <serve.token>)"})
				return
			}
		}
		h(w, r)
	}
}

// bearerOK says whether r carries the token as "Authorization: Bearer
// <token>" (compared in constant time).
func (s *Server) bearerOK(r *http.Request) bool {
	got, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	return ok && subtle.ConstantTimeCompare([]byte(got), []byte(s.opt.Token)) == 1
}

// writeJSON answers v with status; the secrets never leave. The error
// says the answer did not reach the connection in full (written and
// flushed).
func (s *Server) writeJSON(w http.ResponseWriter, status int, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		status = http.StatusInternalServerError
		b = []byte(`{"error":"encoding the answer failed"}`)
	}
	out := s.redact(string(b))
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	if _, err := io.WriteString(w, out+"\n"); err != nil {
		return err
	}
	if err := http.NewResponseController(w).Flush(); err != nil && !errors.Is(err, http.ErrNotSupported) {
		return err
	}
	return nil
}

func (s *Server) badRequest(w http.ResponseWriter, e *requestError) {
	_ = s.writeJSON(w, e.status, map[string]string{"error": e.Error(), "field": e.field})
}

func (s *Server) handleRun(w http.ResponseWriter, r *http.Request) {
	body, rerr := readBody(w, r, MaxBodyBytes)
	var rw *row
	if rerr == nil {
		if rw, rerr = parseRow(body); rerr == nil {
			var key string
			if key, rerr = idempotencyKey(r.Header.Get("Idempotency-Key"), rw); rerr == nil {
				s.serveRow(w, r, rw, key)
				return
			}
		}
	}
	s.logf("/run: %d: %v", rerr.status, rerr)
	if s.opt.Failures == configs.ServeFailuresError {
		s.count(rerr.status)
		s.badRequest(w, rerr)
		return
	}
	// A malformed row is the data's failure, not the collection's: Gym
	// aborts a whole collection on any non-2xx answer.
	s.dataError(w, body, rw, rerr)
}

func (s *Server) count(status int) {
	s.mu.Lock()
	s.answers[status]++
	s.mu.Unlock()
}

// serveRow finds or starts the row's episode and answers with its outcome.
func (s *Server) serveRow(w http.ResponseWriter, r *http.Request, rw *row, key string) {
	ru, stored, err := s.claim(rw, key)
	if err != nil {
		s.count(http.StatusInternalServerError)
		_ = s.writeJSON(w, http.StatusInternalServerError, map[string]string{"error": err.Error()})
		return
	}
	if stored != nil {
		s.answer(w, r, rw, key, ending{final: stored, stored: true})
		return
	}
	if s.park(w, rw, key, ru) {
		return // answered at the run's end, from its connection alone
	}
	select {
	case <-ru.done:
		s.answer(w, r, rw, key, ending{final: ru.entry, err: ru.err})
	case <-r.Context().Done():
		// The client left; the episode goes on (a re-sent row attaches).
	case <-s.ctx.Done():
		s.answer(w, r, rw, key, ending{err: errClosed})
	}
}

// claim returns the run a row waits on, or the stored outcome it gets
// (the rule of the README's "Rollout identity" table):
//   - a key whose episode runs: that run (a re-send, or the same row twice
//     at once);
//   - a key whose episode is final, never delivered, within the re-send
//     window, and not an infrastructure failure: that entry (stored);
//   - anything else (no key, no episode, delivered, past the window, an
//     infrastructure failure): a new episode.
func (s *Server) claim(rw *row, key string) (ru *run, stored *ledger.Entry, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if key != "" {
		if ru := s.runs[key]; ru != nil {
			s.attached++
			s.logf("/run: %s: attached to %s", key, orPending(ru.episode))
			return ru, nil, nil
		}
		rec, err := s.keys.get(key)
		if err != nil {
			return nil, nil, err
		}
		if rec != nil {
			ep := rec.Episode
			e, err := s.opt.Ledger.Load(ep)
			switch {
			case errors.Is(err, ledger.ErrNotInLedger):
				// Mapped, never submitted (a crash before the ledger entry).
			case err != nil:
				return nil, nil, err
			case !e.Final():
				// Unfinished but not followed (its start failed to load it):
				// follow it now.
				ru := &run{key: key, task: rw.task, done: make(chan struct{}), started: true, episode: ep}
				if c := s.clusterOf(e); c != nil {
					ru.taskIndex, ru.holds, ru.gpuType = taskOf(rw), true, c.gpuType()
				}
				s.runs[key] = ru
				s.live[ru] = true
				s.slots.force()
				s.follow(ru, e, nil)
				return ru, nil, nil
			default:
				if why := s.reuse(rec, e); why != "" {
					s.logf("/run: %s: a new episode (%s was %s)", key, ep, why)
				} else {
					s.logf("/run: %s: the undelivered outcome of %s", key, ep)
					return nil, e, nil
				}
			}
		}
	}
	ru = &run{key: key, task: rw.task, taskIndex: taskOf(rw), done: make(chan struct{})}
	if key != "" {
		s.runs[key] = ru
	}
	s.live[ru] = true
	go s.execute(ru)
	return ru, nil, nil
}

// reuse says why a final episode's outcome may not answer a new request
// for its key, or "" when it may (it never reached a caller).
func (s *Server) reuse(rec *keyRecord, e *ledger.Entry) string {
	switch {
	case !rec.Delivered.IsZero():
		return "delivered at " + rec.Delivered.UTC().Format(time.RFC3339)
	case e.Outcome.Outcome == rules.InfraFailure:
		return "an infrastructure failure: a new attempt"
	}
	from := e.Outcome.Decided
	if s.started.After(from) {
		from = s.started
	}
	if s.opt.Now().Sub(from) > s.opt.ResendWindow {
		return fmt.Sprintf("never delivered, but its re-send window (serve.resend_window %s) is over", s.opt.ResendWindow)
	}
	return ""
}

func orPending(ep string) string {
	if ep == "" {
		return "(queued)"
	}
	return ep
}

// execute waits for a slot and hands the row to the submitter.
func (s *Server) execute(ru *run) {
	if err := s.slots.acquire(s.ctx); err != nil {
		s.end(ru, nil, errClosed)
		return
	}
	id := stages.NewID(s.opt.Now())
	s.mu.Lock()
	ru.started, ru.episode = true, id
	s.mu.Unlock()
	if ru.key != "" {
		// The mapping is on disk before anything is submitted.
		if err := s.keys.put(ru.key, id); err != nil {
			s.slots.release()
			s.end(ru, nil, err)
			return
		}
	}
	s.submitq.add(ru)
}

// submitQueue gathers the rows whose slots were granted, so that a burst
// (NeMo RL sends a whole step at once) is staged and submitted in batches
// (episode.Runner.Submit: one command per MaxBatch episodes, two at
// once) rather than one command per row.
type submitQueue struct {
	mu      sync.Mutex
	waiting []*run
	wake    chan struct{}
}

func newSubmitQueue() *submitQueue { return &submitQueue{wake: make(chan struct{}, 1)} }

func (q *submitQueue) add(ru *run) {
	q.mu.Lock()
	q.waiting = append(q.waiting, ru)
	q.mu.Unlock()
	select {
	case q.wake <- struct{}{}:
	default:
	}
}

func (q *submitQueue) take(n int) []*run {
	q.mu.Lock()
	defer q.mu.Unlock()
	n = min(n, len(q.waiting))
	out := q.waiting[:n:n]
	q.waiting = q.waiting[n:]
	return out
}

// submitGather is how long the submitter waits after the first row of a
// batch for others to join it; submitBatchMax bounds one Runner.Submit call.
const (
	submitGather   = 20 * time.Millisecond
	submitBatchMax = 4 * episode.MaxBatch
)

// submitter submits the queued rows until the server stops.
func (s *Server) submitter() {
	for {
		select {
		case <-s.ctx.Done():
			for _, ru := range s.submitq.take(math.MaxInt) {
				s.slots.release()
				s.end(ru, nil, errClosed)
			}
			return
		case <-s.submitq.wake:
		}
		select {
		case <-time.After(submitGather):
		case <-s.ctx.Done():
			continue // drained above: answered 503, nothing submitted
		}
		for {
			batch := s.submitq.take(submitBatchMax)
			if len(batch) == 0 {
				break
			}
			s.submit(batch)
		}
	}
}

// retryPlacement is how long rows that no cluster could take wait before
// they are placed again.
const retryPlacement = 5 * time.Second

// submit places a batch of rows on the clusters and submits each cluster's
// share (the clusters at once). Rows that no cluster can take now, or whose
// cluster could not be reached before anything was staged, are placed
// again after retryPlacement (elsewhere, where there is an elsewhere).
func (s *Server) submit(batch []*run) {
	groups, left := s.placeBatch(batch)
	var wg sync.WaitGroup
	var mu sync.Mutex
	for c, rows := range groups {
		wg.Add(1)
		go func() {
			defer wg.Done()
			again := s.submitOn(c, rows)
			mu.Lock()
			left = append(left, again...)
			mu.Unlock()
		}()
	}
	wg.Wait()
	if len(left) == 0 {
		return
	}
	var exhausted []*run
	var retry []*run
	for _, ru := range left {
		if len(ru.tried) > 0 && s.exhausted(ru) {
			exhausted = append(exhausted, ru)
		} else {
			retry = append(retry, ru)
		}
	}
	for _, ru := range exhausted {
		why := ""
		if len(ru.tried) < len(s.clusters) {
			why = fmt.Sprintf(" of GPU type %s, which the other rows of its task index %s run on", typeName(ru.gpuType), ru.taskIndex)
		}
		s.giveUp(ru, fmt.Errorf("submit: no cluster%s could be reached (tried %d)", why, len(ru.tried)))
	}
	if len(retry) == 0 {
		return
	}
	s.logf("%d rows wait for a cluster that answers (placed again in %s)", len(retry), retryPlacement)
	t := time.NewTimer(retryPlacement)
	go func() {
		defer t.Stop()
		select {
		case <-t.C:
			for _, ru := range retry {
				s.submitq.add(ru)
			}
		case <-s.ctx.Done():
			for _, ru := range retry {
				s.giveUp(ru, errClosed)
			}
		}
	}()
}

// giveUp ends a row that was never submitted: its mapping dropped, its slot
// given back.
func (s *Server) giveUp(ru *run, err error) {
	if ru.key != "" {
		s.keys.drop(ru.key, ru.episode)
	}
	s.slots.release()
	s.logf("%s: %v", ru.episode, err)
	s.end(ru, nil, err)
}

// submitOn stages and submits rows' episodes on c and follows each; it
// returns the rows to place again: nothing of them was staged because c
// could not be reached (several clusters only).
func (s *Server) submitOn(c *cluster, batch []*run) (again []*run) {
	specs := make([]episode.Spec, len(batch))
	for i, ru := range batch {
		prompt := []byte(ru.task)
		if s.opt.Prompt != nil {
			prompt = s.opt.Prompt(ru.task)
		}
		specs[i] = episode.Spec{ID: ru.episode, Prompt: prompt}
	}
	results := c.Runner.Submit(s.ctx, specs)
	for i, r := range results {
		ru := batch[i]
		id := ru.episode
		e, lock, err := r.Entry, r.Lock, r.Err
		if err != nil {
			if e == nil {
				// Nothing was staged or submitted.
				if len(s.clusters) > 1 && s.ctx.Err() == nil && unreachable(err) {
					if ru.tried == nil {
						ru.tried = map[string]bool{}
					}
					ru.tried[c.Name] = true
					s.down(c, err)
					again = append(again, ru)
					continue
				}
				s.giveUp(ru, fmt.Errorf("submit failed: %w", err))
				continue
			}
			// In the ledger: the engine carries it on, as resume would.
			s.logf("%s: submit interrupted (%v); the watcher carries it on", id, err)
			lock = nil
		} else {
			where := ""
			if c.Name != "" {
				where = " on cluster " + c.Name
			}
			s.logf("%s: submitted%s; author job %s", id, where, e.JobID(stages.Author))
		}
		ru.cluster = c
		c.started()
		c.mu.Lock()
		c.placed++
		c.mu.Unlock()
		s.follow(ru, e, lock)
	}
	return again
}

// follow hands the episode to its cluster's engine, which ends the run
// when the episode is final: no goroutine waits for it.
func (s *Server) follow(ru *run, e *ledger.Entry, lock *ledger.Lock) {
	c := ru.cluster
	if c == nil {
		c = s.clusterOf(e)
	}
	c.Follower.Recover(e, lock, func(final *ledger.Entry) {
		c.ended(final)
		s.slots.release()
		s.end(ru, final, nil)
	})
}

func (s *Server) end(ru *run, final *ledger.Entry, err error) {
	s.mu.Lock()
	if ru.ended {
		s.mu.Unlock()
		return
	}
	ru.ended = true
	ru.entry, ru.err = final, err
	var ps []*parked
	for _, p := range ru.parked {
		if !p.gone {
			p.gone = true
			ps = append(ps, p)
		}
	}
	ru.parked = nil
	if ru.key != "" && s.runs[ru.key] == ru {
		delete(s.runs, ru.key)
	}
	delete(s.live, ru)
	if final != nil {
		o := final.Outcome
		s.outcomes[[2]string{string(o.Outcome), o.FailureReason}]++
	}
	s.mu.Unlock()
	if final != nil {
		s.metrics.observeEnd(final)
		o := final.Outcome
		msg := string(o.Outcome)
		if o.FailureReason != "" {
			msg += " (" + string(o.FailureStage) + ": " + o.FailureReason + ")"
		}
		s.logf("%s: answered %s", final.Episode, msg)
	}
	close(ru.done)
	for _, p := range ps {
		go s.answerParked(p, final, err)
	}
}

func (s *Server) handleEpisodes(w http.ResponseWriter, r *http.Request) {
	rows, names := s.clusterRows()
	types := map[string]string{}
	for _, c := range s.clusters {
		types[c.Name] = c.gpuType()
	}
	out := make([]rowJSON, 0, len(rows))
	for i, r := range rows {
		row := rowJSON{Episode: r.Episode, Cluster: names[i], GPUType: types[names[i]], Stage: string(r.Stage), JobID: r.JobID, State: r.State.String(),
			ElapsedSeconds: int64(r.Elapsed / time.Second), Outcome: r.Outcome}
		row.GPU, row.TrainGPU = report.OutcomeGPUs(r.Outcome)
		out = append(out, row)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Episode < out[j].Episode })
	inFlight, queued := s.slots.counts()
	_ = s.writeJSON(w, http.StatusOK, map[string]any{"episodes": out, "in_flight": inFlight, "queued": queued})
}

// rowJSON is an episode as status --json shows it, with the GPU: the
// type of its cluster's gres (what it was placed on) and, once final, the
// GPUs its records name (the eval job's, trusted; the train job's, as the
// policy's code printed it).
type rowJSON struct {
	Episode        string         `json:"episode"`
	Cluster        string         `json:"cluster,omitempty"`
	GPUType        string         `json:"gpu_type,omitempty"`
	GPU            *record.GPU    `json:"gpu,omitempty"`
	TrainGPU       *record.GPU    `json:"train_gpu,omitempty"`
	Stage          string         `json:"stage"`
	JobID          string         `json:"job_id"`
	State          string         `json:"state"`
	ElapsedSeconds int64          `json:"elapsed_seconds"`
	Outcome        *rules.Outcome `json:"outcome,omitempty"`
}

// Redact removes the policy API key and the serve token from a line.
func (s *Server) Redact(str string) string { return s.redact(str) }
