package serve

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"maps"
	"math"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/nemorl/nemorl-slurm/episode"
	"github.com/nemorl/nemorl-slurm/internal/labtest"
	"github.com/nemorl/nemorl-slurm/ledger"
	"github.com/nemorl/nemorl-slurm/remote"
	"github.com/nemorl/nemorl-slurm/rules"
	"github.com/nemorl/nemorl-slurm/slurm"
	"github.com/nemorl/nemorl-slurm/stages"
)

// wantSeries are the series /metrics keeps from its hand-written days
// (names, types and labels unchanged) and those it added.
var wantSeries = map[string]struct {
	typ    dto.MetricType
	labels []string
}{
	"nemorl_serve_episodes_in_flight":             {dto.MetricType_GAUGE, nil},
	"nemorl_serve_queue_length":                   {dto.MetricType_GAUGE, nil},
	"nemorl_serve_episodes":                       {dto.MetricType_GAUGE, []string{"stage", "state"}},
	"nemorl_serve_outcomes_total":                 {dto.MetricType_COUNTER, []string{"outcome", "reason"}},
	"nemorl_serve_run_answers_total":              {dto.MetricType_COUNTER, []string{"code"}},
	"nemorl_serve_attached_total":                 {dto.MetricType_COUNTER, nil},
	"nemorl_serve_sacct_polls_total":              {dto.MetricType_COUNTER, nil},
	"nemorl_serve_sacct_poll_failures_total":      {dto.MetricType_COUNTER, nil},
	"nemorl_serve_sacct_poll_backoffs_total":      {dto.MetricType_COUNTER, nil},
	"nemorl_serve_poll_sacct_jobs_total":          {dto.MetricType_COUNTER, nil},
	"nemorl_serve_sacct_poll_seconds":             {dto.MetricType_GAUGE, nil},
	"nemorl_serve_sacct_poll_seconds_total":       {dto.MetricType_COUNTER, nil},
	"nemorl_serve_ssh_reconnects_total":           {dto.MetricType_COUNTER, nil},
	"nemorl_serve_remote_commands_total":          {dto.MetricType_COUNTER, []string{"program"}},
	"nemorl_serve_remote_file_operations_total":   {dto.MetricType_COUNTER, []string{"op"}},
	"nemorl_serve_stage_queue_wait_seconds":       {dto.MetricType_HISTOGRAM, []string{"stage"}},
	"nemorl_serve_stage_run_seconds":              {dto.MetricType_HISTOGRAM, []string{"stage"}},
	"nemorl_serve_episode_duration_seconds":       {dto.MetricType_HISTOGRAM, nil},
	"nemorl_serve_episode_reward":                 {dto.MetricType_HISTOGRAM, nil},
	"nemorl_serve_sacct_poll_duration_seconds":    {dto.MetricType_HISTOGRAM, nil},
	"nemorl_serve_slurm_command_duration_seconds": {dto.MetricType_HISTOGRAM, []string{"cluster", "kind"}},
	"nemorl_serve_slurm_slow_commands_total":      {dto.MetricType_COUNTER, []string{"cluster", "kind"}},
	"nemorl_serve_slurm_deadline_stopped_total":   {dto.MetricType_COUNTER, []string{"cluster", "kind"}},
	// collectors.NewGoCollector, collectors.NewProcessCollector
	"go_goroutines":                 {dto.MetricType_GAUGE, nil},
	"go_info":                       {dto.MetricType_GAUGE, []string{"version"}},
	"process_cpu_seconds_total":     {dto.MetricType_COUNTER, nil},
	"process_resident_memory_bytes": {dto.MetricType_GAUGE, nil},
}

// metricsServer is a server with something in every series: an episode
// followed, one ended (scored, its three stages timed), answers, an
// attach, the connection's counters (ops: the operations counted, nil for
// a few of each kind).
func metricsServer(t *testing.T, opt Options, ops func() map[string]int64) (*Server, *ledger.Entry) {
	t.Helper()
	if ops == nil {
		ops = func() map[string]int64 { return map[string]int64{"run sacct": 7, "run sbatch": 3, "stat": 2} }
	}
	s, d := newTestServer(t, opt, func(c *Cluster) {
		c.Reconnects, c.RemoteOps = func() int64 { return 2 }, ops
	})
	s.rows = func() []episode.Row {
		return []episode.Row{{Episode: "ep-a", Stage: stages.Train, State: "RUNNING"}, {Episode: "ep-b", Stage: stages.Train, State: "RUNNING"},
			{Episode: "ep-c", Stage: stages.Author, State: "PENDING"}}
	}
	e := timedEntry(t, d)
	ru := &run{done: make(chan struct{})}
	s.live[ru] = true
	s.end(ru, e, nil)
	s.count(http.StatusOK)
	// A quick squeue, and an sbatch that was slow (the cluster of a
	// config of one cluster: is named "").
	sc := s.SlurmCommands("")
	sc.ObserveSlurm(slurm.KindSqueue, 40*time.Millisecond, false)
	sc.ObserveSlurm(slurm.KindSbatch, 3*time.Second, false)
	sc.Slow(slurm.SlowCommand{Kind: slurm.KindSbatch, Took: 3 * time.Second, Deadline: time.Minute})
	s.mu.Lock()
	s.attached++
	s.mu.Unlock()
	return s, e
}

// t0 and the offsets below are the times timedEntry's episode carries.
var t0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

// timedEntry is a scored episode (reward 0.42) that took 6 h: author
// submitted at t0, queued 30 s, ran 20 min; train submitted at once with
// afterok on the author, started 90 s after the author ended, ran 2 h; eval
// submitted with afterok on train, started 10 min after train ended, ran
// 3 h 20 min.
func timedEntry(t *testing.T, d *episode.Driver) *ledger.Entry {
	t.Helper()
	at := func(d time.Duration) time.Time { return t0.Add(d) }
	o := rules.Outcome{Outcome: rules.Scored, Reward: f64(0.42), Completed: 1, Jobs: map[stages.Stage]rules.JobSummary{
		stages.Author: {ID: "101", State: "COMPLETED", Start: at(30 * time.Second), End: at(20*time.Minute + 30*time.Second)},
		stages.Train:  {ID: "102", State: "COMPLETED", Start: at(22 * time.Minute), End: at(2*time.Hour + 22*time.Minute)},
		stages.Eval:   {ID: "103", State: "COMPLETED", Start: at(2*time.Hour + 32*time.Minute), End: at(5*time.Hour + 52*time.Minute)},
	}}
	e := finalEntry(t, d, o, `{"id":"r"}`, "diff\n")
	e.Created = t0.Add(-10 * time.Second)
	e.Outcome.Decided = at(5*time.Hour + 59*time.Minute + 50*time.Second)
	e.Jobs = map[stages.Stage]*ledger.Submission{
		stages.Author: {JobID: "101", Submitted: t0},
		stages.Train:  {JobID: "102", Submitted: at(time.Second), After: "101"},
		stages.Eval:   {JobID: "103", Submitted: at(2 * time.Second), After: "102"},
	}
	return e
}

func scrape(t *testing.T, s *Server, hdr ...string) (string, map[string]*dto.MetricFamily) {
	t.Helper()
	req := httptest.NewRequest(http.MethodGet, "/metrics", nil)
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	w := httptest.NewRecorder()
	s.Handler().ServeHTTP(w, req)
	if w.Code != http.StatusOK {
		t.Fatalf("/metrics: %d %s", w.Code, w.Body)
	}
	if ct := w.Header().Get("Content-Type"); !strings.HasPrefix(ct, "text/plain") {
		t.Errorf("/metrics Content-Type %q, want the text format", ct)
	}
	body := w.Body.String()
	p := expfmt.NewTextParser(model.LegacyValidation)
	mfs, err := p.TextToMetricFamilies(strings.NewReader(body))
	if err != nil {
		t.Fatalf("/metrics does not parse: %v\n%s", err, body)
	}
	return body, mfs
}

func TestMetricsExposition(t *testing.T) {
	s, _ := metricsServer(t, Options{Token: "tok-metrics"}, nil)
	body, mfs := scrape(t, s, "Authorization", "Bearer tok-metrics")
	for name, want := range wantSeries {
		mf := mfs[name]
		if mf == nil {
			t.Errorf("/metrics lacks %s", name)
			continue
		}
		if mf.GetType() != want.typ {
			t.Errorf("%s is a %v, want a %v", name, mf.GetType(), want.typ)
		}
		if mf.GetHelp() == "" {
			t.Errorf("%s has no help", name)
		}
		for _, m := range mf.GetMetric() {
			var got []string
			for _, lp := range m.GetLabel() {
				got = append(got, lp.GetName())
			}
			if !slices.Equal(got, want.labels) {
				t.Errorf("%s has labels %v, want %v", name, got, want.labels)
			}
		}
	}
	value := func(name string, labels ...string) float64 {
		t.Helper()
		for _, m := range mfs[name].GetMetric() {
			ok := len(m.GetLabel()) == len(labels)/2
			for i, lp := range m.GetLabel() {
				ok = ok && lp.GetName() == labels[2*i] && lp.GetValue() == labels[2*i+1]
			}
			if ok {
				switch {
				case m.Gauge != nil:
					return m.GetGauge().GetValue()
				case m.Counter != nil:
					return m.GetCounter().GetValue()
				}
			}
		}
		t.Errorf("no %s%v in /metrics:\n%s", name, labels, body)
		return math.NaN()
	}
	for _, c := range []struct {
		name   string
		labels []string
		want   float64
	}{
		{"nemorl_serve_episodes", []string{"stage", "train", "state", "RUNNING"}, 2},
		{"nemorl_serve_episodes", []string{"stage", "author", "state", "PENDING"}, 1},
		{"nemorl_serve_outcomes_total", []string{"outcome", "scored", "reason", ""}, 1},
		{"nemorl_serve_run_answers_total", []string{"code", "200"}, 1},
		{"nemorl_serve_attached_total", nil, 1},
		{"nemorl_serve_ssh_reconnects_total", nil, 2},
		{"nemorl_serve_remote_commands_total", []string{"program", "sacct"}, 7},
		{"nemorl_serve_remote_file_operations_total", []string{"op", "stat"}, 2},
		{"nemorl_serve_sacct_polls_total", nil, 0},
		{"nemorl_serve_slurm_slow_commands_total", []string{"cluster", "", "kind", "sbatch"}, 1},
		{"nemorl_serve_slurm_slow_commands_total", []string{"cluster", "", "kind", "squeue"}, 0},
		{"nemorl_serve_slurm_deadline_stopped_total", []string{"cluster", "", "kind", "sbatch"}, 0},
	} {
		if got := value(c.name, c.labels...); got != c.want {
			t.Errorf("%s%v = %v, want %v", c.name, c.labels, got, c.want)
		}
	}
	// Only the token opens it.
	w := httptest.NewRecorder()
	s.Handler().ServeHTTP(w, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	if w.Code != http.StatusUnauthorized || strings.Contains(w.Body.String(), "nemorl_serve") {
		t.Errorf("/metrics without the token: %d %.200s", w.Code, w.Body)
	}
}

// The histograms are observed once per episode, when it ends, with the
// times its entry and outcome carry; their buckets fit hours-long stages.
func TestMetricsHistograms(t *testing.T) {
	s, _ := metricsServer(t, Options{}, nil)
	_, mfs := scrape(t, s)
	hist := func(name string, labels ...string) *dto.Histogram {
		t.Helper()
		for _, m := range mfs[name].GetMetric() {
			if len(labels) == 0 || (len(m.GetLabel()) == 1 && m.GetLabel()[0].GetValue() == labels[0]) {
				return m.GetHistogram()
			}
		}
		t.Fatalf("no %s%v", name, labels)
		return nil
	}
	bounds := func(h *dto.Histogram) []float64 {
		var b []float64
		for _, bk := range h.GetBucket() {
			if !math.IsInf(bk.GetUpperBound(), 1) {
				b = append(b, bk.GetUpperBound())
			}
		}
		return b
	}
	hours := []float64{1, 5, 15, 30, 60, 120, 300, 600, 1200, 1800, 3600, 7200, 10800, 14400, 21600, 43200, 86400}
	for _, c := range []struct {
		name  string
		stage stages.Stage
		want  float64 // the one observation, in seconds
	}{
		{"nemorl_serve_stage_queue_wait_seconds", stages.Author, 30},
		{"nemorl_serve_stage_queue_wait_seconds", stages.Train, 90},
		{"nemorl_serve_stage_queue_wait_seconds", stages.Eval, 600},
		{"nemorl_serve_stage_run_seconds", stages.Author, 1200},
		{"nemorl_serve_stage_run_seconds", stages.Train, 7200},
		{"nemorl_serve_stage_run_seconds", stages.Eval, 12000},
		{"nemorl_serve_episode_duration_seconds", "", 6 * 3600},
	} {
		var h *dto.Histogram
		if c.stage != "" {
			h = hist(c.name, string(c.stage))
		} else {
			h = hist(c.name)
		}
		if h.GetSampleCount() != 1 || h.GetSampleSum() != c.want {
			t.Errorf("%s{stage=%q}: %d observations summing to %v, want one of %v", c.name, c.stage, h.GetSampleCount(), h.GetSampleSum(), c.want)
		}
		if got := bounds(h); !slices.Equal(got, hours) {
			t.Errorf("%s buckets %v, want %v", c.name, got, hours)
		}
		for _, bk := range h.GetBucket() {
			if in := c.want <= bk.GetUpperBound(); in != (bk.GetCumulativeCount() == 1) {
				t.Errorf("%s{stage=%q} bucket le=%v holds %d", c.name, c.stage, bk.GetUpperBound(), bk.GetCumulativeCount())
			}
		}
	}
	r := hist("nemorl_serve_episode_reward")
	if r.GetSampleCount() != 1 || r.GetSampleSum() != 0.42 {
		t.Errorf("reward: %d observations summing to %v, want one of 0.42", r.GetSampleCount(), r.GetSampleSum())
	}
	rb := bounds(r)
	if len(rb) != 21 || rb[0] != 0 || rb[1] != 0.05 || rb[3] != 0.15 || rb[20] != 1 {
		t.Errorf("reward buckets %v, want 0, 0.05, 0.1, …, 1", rb)
	}
	if pb := bounds(hist("nemorl_serve_sacct_poll_duration_seconds")); pb[0] != 0.01 || pb[len(pb)-1] != 60 {
		t.Errorf("poll buckets %v, want 10 ms to 60 s", pb)
	}
}

// What is not known is not observed: a stage that never started, an
// adopted job (its submission time is when it was found, not sbatch's), a
// dependency whose end the outcome lacks, a failure's missing reward.
func TestMetricsUnknownTimes(t *testing.T) {
	s, d := newTestServer(t, Options{})
	e := timedEntry(t, d)
	e.Outcome.Outcome, e.Outcome.Reward, e.Outcome.MaskSample = rules.InfraFailure, nil, true
	author := e.Outcome.Jobs[stages.Author]
	author.End = time.Time{} // lost: no run time, and train's wait is unknown
	e.Outcome.Jobs[stages.Author] = author
	e.Jobs[stages.Author].Adopted = true
	delete(e.Outcome.Jobs, stages.Eval) // never ran
	e.Created = time.Time{}
	ru := &run{done: make(chan struct{})}
	s.live[ru] = true
	s.end(ru, e, nil)
	_, mfs := scrape(t, s)
	for _, name := range []string{"nemorl_serve_stage_queue_wait_seconds", "nemorl_serve_episode_reward", "nemorl_serve_episode_duration_seconds"} {
		for _, m := range mfs[name].GetMetric() {
			if n := m.GetHistogram().GetSampleCount(); n != 0 {
				t.Errorf("%s%v: %d observations, want none", name, m.GetLabel(), n)
			}
		}
	}
	runs := map[string]uint64{}
	for _, m := range mfs["nemorl_serve_stage_run_seconds"].GetMetric() {
		runs[m.GetLabel()[0].GetValue()] = m.GetHistogram().GetSampleCount()
	}
	if runs[string(stages.Train)] != 1 || runs[string(stages.Author)] != 0 || runs[string(stages.Eval)] != 0 {
		t.Errorf("run time observations %v, want train's only", runs)
	}
}

// A secret that reaches a label value (here a program name) is redacted,
// and the exposition still parses.
func TestMetricsRedacted(t *testing.T) {
	s, _ := metricsServer(t, Options{Token: "tok-redact-me"}, func() map[string]int64 {
		return map[string]int64{"run " + testKey: 1, "open tok-redact-me": 1}
	})
	body, mfs := scrape(t, s, "Authorization", "Bearer tok-redact-me")
	if strings.Contains(body, testKey) || strings.Contains(body, "tok-redact-me") {
		t.Fatalf("a secret leaked:\n%s", body)
	}
	var progs, ops []string
	for _, m := range mfs["nemorl_serve_remote_commands_total"].GetMetric() {
		progs = append(progs, m.GetLabel()[0].GetValue())
	}
	for _, m := range mfs["nemorl_serve_remote_file_operations_total"].GetMetric() {
		ops = append(ops, m.GetLabel()[0].GetValue())
	}
	if !slices.Equal(progs, []string{"<redacted>"}) || !slices.Equal(ops, []string{"open <redacted>"}) {
		t.Errorf("programs %v, ops %v: want the secrets redacted", progs, ops)
	}
}

// Every poll of the engine is observed, failed ones too (sacct is not on
// this machine: every poll fails).
func TestMetricsPollHistogram(t *testing.T) {
	s, d := newTestServer(t, Options{})
	e := &ledger.Entry{Episode: stages.NewID(time.Now()), Created: time.Now(), ConfigPath: d.ConfigPath, Dir: t.TempDir(), Isolation: "none",
		Jobs: map[stages.Stage]*ledger.Submission{stages.Author: {JobID: "4242", Submitted: time.Now()}}}
	if err := d.Ledger.Create(e, []byte("task")); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.clusters[0].Follower.Run(ctx) }()
	stop := func() {
		cancel()
		if err := <-done; err != nil && !errors.Is(err, context.Canceled) {
			t.Errorf("engine: %v", err)
		}
	}
	s.clusters[0].Follower.Recover(e, nil, func(*ledger.Entry) {})
	deadline := time.Now().Add(10 * time.Second)
	for {
		_, mfs := scrape(t, s)
		if mfs["nemorl_serve_sacct_poll_duration_seconds"].GetMetric()[0].GetHistogram().GetSampleCount() > 0 {
			break
		}
		if time.Now().After(deadline) {
			stop()
			t.Fatal("no poll observed in 10 s")
		}
		time.Sleep(20 * time.Millisecond)
	}
	// A scrape gathers its collectors concurrently, so a poll that ends
	// during one may show in one metric and not yet in the other: compare
	// them once the engine has stopped.
	stop()
	_, mfs := scrape(t, s)
	observed := mfs["nemorl_serve_sacct_poll_duration_seconds"].GetMetric()[0].GetHistogram().GetSampleCount()
	polls := mfs["nemorl_serve_sacct_polls_total"].GetMetric()[0].GetCounter().GetValue()
	if observed == 0 || float64(observed) != polls {
		t.Errorf("%d poll durations observed, %v polls counted: want one per poll", observed, polls)
	}
}

// promtool (Debian's prometheus package: /usr/bin/promtool) checks the
// exposition and lints it. Without promtool the test is skipped, unless
// NEMORL_REQUIRE_LAB=1: then it fails.
func TestMetricsPromtool(t *testing.T) {
	tool, err := exec.LookPath("promtool")
	if err != nil {
		err = fmt.Errorf("%w (apt-get install prometheus)", err)
	}
	labtest.Need(t, "promtool", err)
	s, _ := metricsServer(t, Options{}, nil)
	body, _ := scrape(t, s)
	cmd := exec.Command(tool, "check", "metrics")
	cmd.Stdin = strings.NewReader(body)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err = cmd.Run()
	t.Logf("promtool check metrics: %v\n%s", err, out.String())
	if err != nil || out.Len() > 0 {
		t.Errorf("promtool check metrics: %v\n%s", err, out.String())
	}
}

// Without promtool, TestMetricsPromtool fails under NEMORL_REQUIRE_LAB=1
// and skips otherwise (run in a child with an empty PATH).
func TestMetricsPromtoolRequired(t *testing.T) {
	if os.Getenv("PROMTOOL_CHILD") != "" {
		t.Skip("child")
	}
	bin, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		require  string
		fail     bool
		wantText string
	}{{"1", true, "promtool is required"}, {"", false, "no promtool"}} {
		cmd := exec.Command(bin, "-test.run=^TestMetricsPromtool$", "-test.v")
		cmd.Env = append(os.Environ(), "PATH="+t.TempDir(), "PROMTOOL_CHILD=1", "NEMORL_REQUIRE_LAB="+c.require)
		out, err := cmd.CombinedOutput()
		if failed := err != nil; failed != c.fail || !strings.Contains(string(out), c.wantText) {
			t.Errorf("NEMORL_REQUIRE_LAB=%q without promtool: err %v, want failure %v, output:\n%s", c.require, err, c.fail, out)
		}
	}
}

// observedRunner answers every Slurm command after delay[program] (a
// program not named answers at once; a negative delay never answers: it
// waits for its context), and tells feed of each (slurm.Observer), as
// serve's cluster host does.
type observedRunner struct {
	feed  *SlurmCommands
	delay map[string]time.Duration
}

func (r *observedRunner) Run(ctx context.Context, cmd remote.Command) (*remote.Result, error) {
	d := r.delay[remote.Program(cmd.Argv)]
	var wait <-chan time.Time
	if d >= 0 {
		wait = time.After(d)
	}
	select {
	case <-wait:
		return &remote.Result{}, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

func (r *observedRunner) ObserveSlurm(k slurm.Kind, took time.Duration, stopped bool) {
	r.feed.ObserveSlurm(k, took, stopped)
}

// The Slurm commands of each cluster are in /metrics by cluster and kind:
// every command's duration (one stopped at its deadline included, one cut
// short by its caller not), the slow ones (slurm.Client.Slow: SlowAfter or
// more, or stopped) and the stopped ones; the counters of every kind exist
// from the start, at 0; the buckets reach past the longest deadline.
func TestMetricsSlurmCommands(t *testing.T) {
	s, _ := newTestServer(t, Options{})
	east, west := s.SlurmCommands("east"), s.SlurmCommands("west")
	const slowAfter = 50 * time.Millisecond
	r := &observedRunner{feed: east, delay: map[string]time.Duration{"sacct": 2 * slowAfter, "sh": 2 * slowAfter, "scancel": -1, "scontrol": -1}}
	c := slurm.New(r)
	c.SlowAfter, c.Deadlines = slowAfter, slurm.Deadlines{Scancel: 4 * slowAfter}
	var logged []string
	c.Slow = func(sc slurm.SlowCommand) { east.Slow(sc); logged = append(logged, sc.String()) }
	ctx := context.Background()
	run := func(k slurm.Kind, argv ...string) error {
		_, err := c.RunVia(ctx, r, k, remote.Command{Argv: argv})
		return err
	}
	for range 3 {
		if err := run(slurm.KindSqueue, "squeue", "--me"); err != nil {
			t.Fatal(err)
		}
	}
	if err := run(slurm.KindSacct, "sacct", "--jobs=7"); err != nil {
		t.Fatal(err)
	}
	// A staged sbatch: a script (its log line is one line all the same).
	if err := run(slurm.KindSbatch, "sh", "-c", "#!/bin/sh\nsbatch --parsable \"$@\"\n", "sh", "--begin=now"); err != nil {
		t.Fatal(err)
	}
	if err := run(slurm.KindScancel, "scancel", "7"); !errors.Is(err, slurm.ErrDeadline) {
		t.Fatalf("a stalled scancel: %v, want stopped at its deadline", err)
	}
	// Cut short by its caller (serve shutting down): not observed.
	cctx, cancel := context.WithTimeout(ctx, slowAfter/2)
	if _, err := c.RunVia(cctx, r, slurm.KindScontrol, remote.Command{Argv: []string{"scontrol", "show", "config"}}); err == nil {
		t.Fatal("a scontrol cut short by its caller succeeded")
	}
	cancel()
	// A command of the other cluster.
	west.ObserveSlurm(slurm.KindSbatch, time.Second, false)

	_, mfs := scrape(t, s)
	labels := func(m *dto.Metric) (cluster, kind string) {
		for _, lp := range m.GetLabel() {
			switch lp.GetName() {
			case "cluster":
				cluster = lp.GetValue()
			case "kind":
				kind = lp.GetValue()
			}
		}
		return cluster, kind
	}
	counts := func(name string) map[string]float64 {
		got := map[string]float64{}
		for _, m := range mfs[name].GetMetric() {
			cl, k := labels(m)
			if m.GetHistogram() != nil {
				got[cl+"/"+k] = float64(m.GetHistogram().GetSampleCount())
			} else {
				got[cl+"/"+k] = m.GetCounter().GetValue()
			}
		}
		return got
	}
	zero := func(want map[string]float64) map[string]float64 {
		for _, cl := range []string{"east", "west"} {
			for _, k := range slurmKinds {
				if _, ok := want[cl+"/"+string(k)]; !ok {
					want[cl+"/"+string(k)] = 0
				}
			}
		}
		return want
	}
	for _, c := range []struct {
		name string
		want map[string]float64
	}{
		{"nemorl_serve_slurm_command_duration_seconds", map[string]float64{"east/squeue": 3, "east/sacct": 1, "east/sbatch": 1, "east/scancel": 1, "west/sbatch": 1}},
		{"nemorl_serve_slurm_slow_commands_total", zero(map[string]float64{"east/sacct": 1, "east/sbatch": 1, "east/scancel": 1})},
		{"nemorl_serve_slurm_deadline_stopped_total", zero(map[string]float64{"east/scancel": 1})},
	} {
		if got := counts(c.name); !maps.Equal(got, c.want) {
			t.Errorf("%s: %v, want %v", c.name, got, c.want)
		}
	}
	for _, m := range mfs["nemorl_serve_slurm_command_duration_seconds"].GetMetric() {
		cl, k := labels(m)
		h := m.GetHistogram()
		var bounds []float64
		for _, bk := range h.GetBucket() {
			bounds = append(bounds, bk.GetUpperBound())
		}
		if !slices.Contains(bounds, slurm.DefaultSlowAfter.Seconds()) || bounds[len(bounds)-1] <= slurm.DefaultDeadlines.For("").Seconds() {
			t.Errorf("%s/%s: buckets %v, want the slow mark (%v) among them and the last past the longest deadline", cl, k, bounds, slurm.DefaultSlowAfter)
		}
		switch cl + "/" + k {
		case "east/sacct":
			if h.GetSampleSum() < (2 * slowAfter).Seconds() {
				t.Errorf("the slow sacct observed as %v s, want its %v or more", h.GetSampleSum(), 2*slowAfter)
			}
		case "east/scancel":
			if h.GetSampleSum() < (4 * slowAfter).Seconds() {
				t.Errorf("the stopped scancel observed as %v s, want its deadline (%v) or more", h.GetSampleSum(), 4*slowAfter)
			}
		}
	}
	// Slow's log line is one line, and names the kind and the duration.
	if len(logged) != 3 || !strings.HasPrefix(logged[0], "slurm: sacct: sacct --jobs=7 took ") ||
		!strings.HasPrefix(logged[1], "slurm: sbatch: sh -c '#!/bin/sh … took ") ||
		!strings.HasPrefix(logged[2], "slurm: scancel: scancel 7 stopped at its deadline of 200ms after ") {
		t.Errorf("slow lines %q", logged)
	}
	for _, l := range logged {
		if strings.Contains(l, "\n") || !strings.HasSuffix(l, " s (deadline 1m0s): a throttled or busy controller") && !strings.HasSuffix(l, " s (outcome unknown): a throttled or busy controller") {
			t.Errorf("slow line %q: want one line ending with its duration and the cause", l)
		}
	}
}
