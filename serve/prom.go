package serve

import (
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	dto "github.com/prometheus/client_model/go"

	"github.com/nemorl/nemorl-slurm/ledger"
	"github.com/nemorl/nemorl-slurm/rules"
	"github.com/nemorl/nemorl-slurm/slurm"
	"github.com/nemorl/nemorl-slurm/stages"
)

// Bucket bounds, in seconds. Stages queue and run for hours: client_golang's
// default buckets (5 ms to 10 s) would put every observation in +Inf.
var (
	// stageBuckets bound a stage's queue wait and run time, and an
	// episode's wall time: 1 s to 24 h.
	stageBuckets = []float64{1, 5, 15, 30, 60, 120, 300, 600, 1200, 1800, 3600, 7200, 10800, 14400, 21600, 43200, 86400}
	// pollBuckets bound one poll of the cluster: 10 ms to 60 s.
	pollBuckets = []float64{0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 20, 30, 60}
	// commandBuckets bound one Slurm command: 10 ms (a healthy
	// controller answers in tens to hundreds of milliseconds) to 120 s,
	// past the longest default deadline (a minute); 2 s is the slow mark
	// (slurm.DefaultSlowAfter), 30 s and 60 s the default deadlines.
	commandBuckets = []float64{0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 20, 30, 60, 120}
	// rewardBuckets split a scored episode's reward, in [0, 1], in steps
	// of 0.05; le="0" counts the scored episodes that got nothing right.
	rewardBuckets = func() []float64 {
		b := make([]float64, 21)
		for i := range b {
			b[i] = float64(i) / 20 // exact decimals (0.15, not 0.15000000000000002)
		}
		return b
	}()
)

// metrics are a server's Prometheus series, in a registry of its own (never
// the global one: tests, and several servers in one process, do not
// collide).
type metrics struct {
	reg *prometheus.Registry
	// Observed once per episode, when it ends (observeEnd).
	queueWait *prometheus.HistogramVec // by stage: submit (or the job waited for) → start
	runTime   *prometheus.HistogramVec // by stage: start → end
	wallTime  prometheus.Histogram     // ledger entry created → outcome decided
	reward    prometheus.Histogram     // scored episodes
	// Observed at every poll of the engine.
	pollTime prometheus.Histogram
	// Every Slurm command of a cluster (SlurmCommands), by cluster and
	// kind: its duration, and those slurm.Client.Slow is told of.
	slurmTime    *prometheus.HistogramVec
	slurmSlow    *prometheus.CounterVec
	slurmStopped *prometheus.CounterVec
}

func newMetrics(s *Server) (*metrics, error) {
	m := &metrics{
		reg: prometheus.NewRegistry(),
		queueWait: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "nemorl_serve_stage_queue_wait_seconds",
			Help:    "Time a stage's job waited in Slurm's queue: from its submission (or the end of the job it waited for, afterok) to its start; observed when the episode ends.",
			Buckets: stageBuckets,
		}, []string{"stage"}),
		runTime: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "nemorl_serve_stage_run_seconds",
			Help:    "Time a stage's job ran, from its start to its end as Slurm reports them; observed when the episode ends.",
			Buckets: stageBuckets,
		}, []string{"stage"}),
		wallTime: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "nemorl_serve_episode_duration_seconds",
			Help:    "Wall time of an episode, from its ledger entry to its outcome.",
			Buckets: stageBuckets,
		}),
		reward: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "nemorl_serve_episode_reward",
			Help:    "Reward of the scored episodes.",
			Buckets: rewardBuckets,
		}),
		pollTime: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "nemorl_serve_sacct_poll_duration_seconds",
			Help:    "Duration of each poll of the cluster (sacct and advancing the episodes), failed ones included.",
			Buckets: pollBuckets,
		}),
		slurmTime: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "nemorl_serve_slurm_command_duration_seconds",
			Help:    "Duration of each Slurm command run on the cluster (sbatch, squeue, sacct, sinfo, scancel, scontrol), by cluster and kind; those stopped at their deadline included, those cut short by serve's own shutdown not. cluster is the clusters: entry's name, empty for a config of one cluster:.",
			Buckets: commandBuckets,
		}, []string{"cluster", "kind"}),
		slurmSlow: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "nemorl_serve_slurm_slow_commands_total",
			Help: "Slurm commands that took 2 s or more, or were stopped at their deadline (each is one log line \"slurm: KIND: … a throttled or busy controller\"): under rl_enable Slurm's clients back off and retry silently, so this is how a throttled controller shows.",
		}, []string{"cluster", "kind"}),
		slurmStopped: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "nemorl_serve_slurm_deadline_stopped_total",
			Help: "Slurm commands stopped at their deadline, their outcome unknown (also counted as slow).",
		}, []string{"cluster", "kind"}),
	}
	for _, c := range []prometheus.Collector{
		m.queueWait, m.runTime, m.wallTime, m.reward, m.pollTime, m.slurmTime, m.slurmSlow, m.slurmStopped,
		&serverCollector{s: s},
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
	} {
		if err := m.reg.Register(c); err != nil {
			return nil, fmt.Errorf("serve: register metrics: %w", err)
		}
	}
	return m, nil
}

// handler serves the registry. Every label value is redacted first (see
// redactingGatherer); errors are answered 500 rather than half a scrape.
func (m *metrics) handler(redact func(string) string, logf func(string, ...any)) http.Handler {
	return promhttp.HandlerFor(redactingGatherer{g: m.reg, redact: redact}, promhttp.HandlerOpts{
		ErrorLog:      promLogger(logf),
		ErrorHandling: promhttp.HTTPErrorOnError,
	})
}

type promLogger func(string, ...any)

func (l promLogger) Println(v ...any) {
	l("/metrics: %s", strings.TrimSuffix(fmt.Sprintln(v...), "\n"))
}

// redactingGatherer removes the secrets (the policy API key, the serve
// token) from every label value before the exposition is written: the
// label values are the only text of the exposition that comes from outside
// (Slurm states, failure reasons, program names); names and help are
// constants. The old hand-written /metrics redacted its whole body; this
// keeps that guarantee without rewriting a name or a number that happens
// to contain a (short) secret.
type redactingGatherer struct {
	g      prometheus.Gatherer
	redact func(string) string
}

func (r redactingGatherer) Gather() ([]*dto.MetricFamily, error) {
	mfs, err := r.g.Gather()
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			for _, lp := range m.GetLabel() {
				if v := lp.GetValue(); v != "" {
					if red := r.redact(v); red != v {
						lp.Value = &red
					}
				}
			}
		}
	}
	return mfs, err
}

// serverCollector reads, at each scrape, the series that are state rather
// than events: the slots, the engine's rows and counters, the server's own
// counts of outcomes and answers, and the connection's.
type serverCollector struct{ s *Server }

var (
	descInFlight = prometheus.NewDesc("nemorl_serve_episodes_in_flight",
		"Episodes running (holding a slot of serve.concurrency).", nil, nil)
	descQueue = prometheus.NewDesc("nemorl_serve_queue_length",
		"Rows waiting for a slot, in arrival order.", nil, nil)
	descEpisodes = prometheus.NewDesc("nemorl_serve_episodes",
		"Episodes followed, by current stage and Slurm state.", []string{"stage", "state"}, nil)
	descOutcomes = prometheus.NewDesc("nemorl_serve_outcomes_total",
		"Episodes ended, by outcome and failure reason.", []string{"outcome", "reason"}, nil)
	descAnswers = prometheus.NewDesc("nemorl_serve_run_answers_total",
		"/run answers, by HTTP status.", []string{"code"}, nil)
	descAttached = prometheus.NewDesc("nemorl_serve_attached_total",
		"/run requests that joined an episode already running for the same rollout.", nil, nil)
	descPolls = prometheus.NewDesc("nemorl_serve_sacct_polls_total",
		"Polls of the cluster (each: one squeue for the jobs in flight, one sacct for those that left squeue).", nil, nil)
	descPollSacctJobs = prometheus.NewDesc("nemorl_serve_poll_sacct_jobs_total",
		"Job ids the polls asked of sacct: only jobs that left squeue or that squeue could not answer for.", nil, nil)
	descPollFailures = prometheus.NewDesc("nemorl_serve_sacct_poll_failures_total",
		"Polls that failed.", nil, nil)
	descPollBackoffs = prometheus.NewDesc("nemorl_serve_sacct_poll_backoffs_total",
		"Failed polls whose answer was the controller's busy or rate limit: each waited poll_max.", nil, nil)
	descLastPoll = prometheus.NewDesc("nemorl_serve_sacct_poll_seconds",
		"Duration of the last poll (sacct and advancing the episodes).", nil, nil)
	descPollSeconds = prometheus.NewDesc("nemorl_serve_sacct_poll_seconds_total",
		"Time spent polling.", nil, nil)
	descReconnects = prometheus.NewDesc("nemorl_serve_ssh_reconnects_total",
		"Reconnections of the SSH connection to the cluster.", nil, nil)
	descCommands = prometheus.NewDesc("nemorl_serve_remote_commands_total",
		"Commands run on the cluster, by program.", []string{"program"}, nil)
	descFileOps = prometheus.NewDesc("nemorl_serve_remote_file_operations_total",
		"File operations on the cluster (SFTP requests over SSH), by kind.", []string{"op"}, nil)

	// Per cluster, with clusters: in the config (a config of one cluster:
	// has only the series above).
	descClusterUp = prometheus.NewDesc("nemorl_serve_cluster_up",
		"1 while the cluster answers (its last room probe or submission reached it), else 0: it gets no new rows.", []string{"cluster"}, nil)
	descClusterInFlight = prometheus.NewDesc("nemorl_serve_cluster_episodes_in_flight",
		"This serve's episodes in flight on the cluster.", []string{"cluster"}, nil)
	descClusterPlaced = prometheus.NewDesc("nemorl_serve_cluster_placed_total",
		"Episodes placed and submitted on the cluster.", []string{"cluster"}, nil)
	descClusterFree = prometheus.NewDesc("nemorl_serve_cluster_free_gpus",
		"GPUs of the cluster's GRES type that no job holds, at the last room probe (sinfo).", []string{"cluster"}, nil)
	descClusterPending = prometheus.NewDesc("nemorl_serve_cluster_pending_jobs",
		"Jobs pending in the cluster's partition, at the last room probe (squeue).", []string{"cluster"}, nil)
	descClusterWait = prometheus.NewDesc("nemorl_serve_cluster_queue_wait_seconds",
		"Recent queue wait of this serve's train and eval jobs on the cluster (weighted mean), as placement uses it.", []string{"cluster"}, nil)
	descClusterRun = prometheus.NewDesc("nemorl_serve_cluster_job_run_seconds",
		"Recent run time of this serve's train and eval jobs on the cluster (weighted mean), as placement uses it.", []string{"cluster"}, nil)
	descClusterGPUs = prometheus.NewDesc("nemorl_serve_cluster_gpus",
		"GPUs of the cluster's GRES type on its nodes that take jobs, at the last room probe (sinfo).", []string{"cluster"}, nil)
	descClusterPolls = prometheus.NewDesc("nemorl_serve_cluster_polls_total",
		"Polls of the cluster.", []string{"cluster"}, nil)
	descClusterPollFailures = prometheus.NewDesc("nemorl_serve_cluster_poll_failures_total",
		"Polls of the cluster that failed.", []string{"cluster"}, nil)
	descClusterCommands = prometheus.NewDesc("nemorl_serve_cluster_remote_commands_total",
		"Commands run on the cluster, by program.", []string{"cluster", "program"}, nil)
)

func (c *serverCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descInFlight, descQueue, descEpisodes, descOutcomes, descAnswers, descAttached,
		descPolls, descPollSacctJobs, descPollFailures, descPollBackoffs, descLastPoll, descPollSeconds, descReconnects, descCommands, descFileOps,
		descClusterUp, descClusterInFlight, descClusterPlaced, descClusterFree, descClusterPending, descClusterWait,
		descClusterRun, descClusterGPUs, descClusterPolls, descClusterPollFailures, descClusterCommands} {
		ch <- d
	}
}

func (c *serverCollector) Collect(ch chan<- prometheus.Metric) {
	s := c.s
	gauge := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
	}
	counter := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, v, labels...)
	}
	inFlight, queued := s.slots.counts()
	gauge(descInFlight, float64(inFlight))
	gauge(descQueue, float64(queued))

	byStage := map[[2]string]int{}
	for _, row := range s.rows() {
		byStage[[2]string{string(row.Stage), row.State.String()}]++
	}
	for k, n := range byStage {
		gauge(descEpisodes, float64(n), k[0], k[1])
	}

	s.mu.Lock()
	outcomes := make(map[[2]string]int64, len(s.outcomes))
	for k, n := range s.outcomes {
		outcomes[k] = n
	}
	answers := make(map[int]int64, len(s.answers))
	for c, n := range s.answers {
		answers[c] = n
	}
	attached := s.attached
	s.mu.Unlock()
	for k, n := range outcomes {
		counter(descOutcomes, float64(n), k[0], k[1])
	}
	for code, n := range answers {
		counter(descAnswers, float64(n), fmt.Sprint(code))
	}
	counter(descAttached, float64(attached))

	st := s.engineStats()
	counter(descPolls, float64(st.Polls))
	counter(descPollSacctJobs, float64(st.Cost.SacctJobs))
	counter(descPollFailures, float64(st.PollFailures))
	counter(descPollBackoffs, float64(st.Backoffs))
	gauge(descLastPoll, st.LastPoll.Seconds())
	counter(descPollSeconds, st.PollSeconds)
	// Every cluster's connection and commands, summed; by cluster below.
	reconnects, haveReconnects := int64(0), false
	commands, fileOps := map[string]int64{}, map[string]int64{}
	for _, cl := range s.clusters {
		if cl.Reconnects != nil {
			reconnects += cl.Reconnects()
			haveReconnects = true
		}
		if cl.RemoteOps == nil {
			continue
		}
		for k, n := range cl.RemoteOps() {
			if prog, ok := strings.CutPrefix(k, "run "); ok {
				commands[prog] += n
				if cl.Name != "" {
					counter(descClusterCommands, float64(n), cl.Name, prog)
				}
			} else {
				fileOps[k] += n
			}
		}
	}
	if haveReconnects {
		counter(descReconnects, float64(reconnects))
	}
	for prog, n := range commands {
		counter(descCommands, float64(n), prog)
	}
	for op, n := range fileOps {
		counter(descFileOps, float64(n), op)
	}
	for _, cl := range s.clusters {
		if cl.Name == "" {
			continue
		}
		cst := cl.Follower.Stats()
		cl.mu.Lock()
		up, inFlight, placed, room, known, wait, run := cl.up, cl.inFlight, cl.placed, cl.room, cl.known, cl.wait, cl.run
		cl.mu.Unlock()
		gauge(descClusterUp, map[bool]float64{true: 1}[up], cl.Name)
		gauge(descClusterInFlight, float64(inFlight), cl.Name)
		counter(descClusterPlaced, float64(placed), cl.Name)
		if known {
			gauge(descClusterFree, float64(room.FreeGPUs), cl.Name)
			gauge(descClusterPending, float64(room.Pending), cl.Name)
			gauge(descClusterGPUs, float64(room.GPUs), cl.Name)
		}
		gauge(descClusterWait, wait.Seconds(), cl.Name)
		gauge(descClusterRun, run.Seconds(), cl.Name)
		counter(descClusterPolls, float64(cst.Polls), cl.Name)
		counter(descClusterPollFailures, float64(cst.PollFailures), cl.Name)
	}
}

// slurmKinds are the kinds of Slurm command whose counters exist at 0
// from the start (a series that appears only at its first event hides
// the rate before it).
var slurmKinds = []slurm.Kind{slurm.KindSbatch, slurm.KindSqueue, slurm.KindSacct, slurm.KindSinfo, slurm.KindScancel, slurm.KindScontrol}

// SlurmCommands feeds the /metrics series of one cluster's Slurm
// commands: its ObserveSlurm (a slurm.Observer: the runner of the
// cluster's Slurm client implements it by calling this one) observes
// every command's duration, and its Slow (set as, or called from, the
// client's slurm.Client.Slow) counts the slow and stopped ones.
type SlurmCommands struct {
	m       *metrics
	cluster string
}

// SlurmCommands returns the feed of cluster's Slurm commands (cluster:
// a Cluster's Name, "" for a config of one cluster:). Its counters
// start at 0 for every kind.
func (s *Server) SlurmCommands(cluster string) *SlurmCommands {
	for _, k := range slurmKinds {
		s.metrics.slurmSlow.WithLabelValues(cluster, string(k))
		s.metrics.slurmStopped.WithLabelValues(cluster, string(k))
	}
	return &SlurmCommands{m: s.metrics, cluster: cluster}
}

// ObserveSlurm observes one command's duration (slurm.Observer).
func (c *SlurmCommands) ObserveSlurm(kind slurm.Kind, took time.Duration, _ bool) {
	c.m.slurmTime.WithLabelValues(c.cluster, string(kind)).Observe(took.Seconds())
}

// Slow counts a command slurm.Client.Slow was told of: slow, and
// stopped at its deadline when it was.
func (c *SlurmCommands) Slow(sc slurm.SlowCommand) {
	c.m.slurmSlow.WithLabelValues(c.cluster, string(sc.Kind)).Inc()
	if sc.Stopped {
		c.m.slurmStopped.WithLabelValues(c.cluster, string(sc.Kind)).Inc()
	}
}

// observeEnd records an episode that ended (once: end is called once per
// run). Only what the entry knows is observed: a stage that never started,
// a job adopted after a crash (its submission time is not sbatch's), a time
// that is unknown, are left out rather than guessed.
func (m *metrics) observeEnd(e *ledger.Entry) {
	o := e.Outcome
	if o == nil {
		return
	}
	for _, stage := range stages.All {
		job, ok := o.Jobs[stage]
		if !ok || job.Start.IsZero() {
			continue
		}
		if !job.End.IsZero() && !job.End.Before(job.Start) {
			m.runTime.WithLabelValues(string(stage)).Observe(job.End.Sub(job.Start).Seconds())
		}
		if w, ok := queueWait(e, stage, job); ok {
			m.queueWait.WithLabelValues(string(stage)).Observe(w.Seconds())
		}
	}
	if !e.Created.IsZero() && !o.Decided.IsZero() && !o.Decided.Before(e.Created) {
		m.wallTime.Observe(o.Decided.Sub(e.Created).Seconds())
	}
	if o.Outcome == rules.Scored && o.Reward != nil {
		m.reward.Observe(*o.Reward)
	}
}

// queueWait is how long stage's job waited to start once it could: from
// its submission or, for a job submitted to wait for another (afterok),
// from that job's end, whichever is later. ok is false when that is not
// known: no submission time on record (or an adopted job's), a job waited
// for whose end the outcome does not carry, or a wait that the two clocks
// (this machine's for the submission, Slurm's for the start) make negative
// by more than sacct's one-second resolution.
func queueWait(e *ledger.Entry, stage stages.Stage, job rules.JobSummary) (time.Duration, bool) {
	sub := e.Jobs[stage]
	if sub == nil || sub.Submitted.IsZero() || sub.Adopted || sub.JobID == "" || sub.JobID != job.ID {
		return 0, false
	}
	eligible := sub.Submitted
	if sub.After != "" {
		end, ok := jobEnd(e.Outcome, sub.After)
		if !ok {
			return 0, false
		}
		if end.After(eligible) {
			eligible = end
		}
	}
	w := job.Start.Sub(eligible)
	switch {
	case w >= 0:
		return w, true
	case w > -time.Second:
		return 0, true // started at once; sacct keeps whole seconds
	}
	return 0, false
}

// jobEnd finds the end of job id among the outcome's jobs and the earlier
// attempts it keeps.
func jobEnd(o *rules.Outcome, id string) (time.Time, bool) {
	for _, j := range o.Jobs {
		if j.ID == id && !j.End.IsZero() {
			return j.End, true
		}
	}
	for _, as := range o.Retried {
		for _, a := range as {
			if a.JobID == id && !a.Job.End.IsZero() {
				return a.Job.End, true
			}
		}
	}
	return time.Time{}, false
}
