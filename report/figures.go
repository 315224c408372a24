// Package report is `nemorl-slurm report`: a picture of many episodes, over
// the ledger only (no cluster contact). Build turns the selected ledger
// entries into Figures, a pure function table-tested on gathered facts;
// RenderHTML draws them (gonum/plot SVG charts, a sortable table) into one
// self-contained HTML file.
//
// What is not known is left out, never taken as zero: a job never started
// has no queue wait or run time, an episode not final (or one whose jobs'
// ends sacct did not report) has no wall time, an unfinished episode has no
// reward. Each distribution counts what it left out (Unknown).
package report

import (
	"cmp"
	"math"
	"slices"
	"sort"
	"time"

	"github.com/nemorl/nemorl-slurm/ledger"
	"github.com/nemorl/nemorl-slurm/record"
	"github.com/nemorl/nemorl-slurm/rules"
	"github.com/nemorl/nemorl-slurm/stages"
)

// MedianWindow is how many rewarded episodes (the latest, by creation
// time) the running median of RewardOverTime is taken over.
const MedianWindow = 25

// Bins is how many histogram bins a distribution has.
const Bins = 20

// Unfinished is the outcome of an episode that has none yet; Cancelling
// is shown in its row when a cancel is on record.
const (
	Unfinished = "unfinished"
	Cancelling = "cancelling"
)

// Figures is everything the report shows (report --json prints it).
type Figures struct {
	Generated time.Time `json:"generated"`
	// Episodes is how many entries were selected; Finished of them have
	// their outcome.
	Episodes int `json:"episodes"`
	Finished int `json:"finished"`
	// Reward is the distribution of scored episodes' rewards; policy
	// failures (reward 0) are counted apart, not in it.
	Reward Rewards `json:"reward"`
	// RewardOverTime is every rewarded episode (scored and policy
	// failure) by creation time, with the running median.
	RewardOverTime RewardSeries `json:"reward_over_time"`
	// RewardByGPU is the scored episodes' rewards by the GPU model of
	// their eval job (as its trusted record names it; the train job ran
	// on the same cluster and gres), most episodes first, the episodes
	// whose outcome names no GPU last.
	RewardByGPU []GPURewards `json:"reward_by_gpu"`
	// Stages are the author, train and eval jobs' queue waits and run
	// times, in chain order.
	Stages []StageTimes `json:"stages"`
	// WallTime is each final episode's first submit → last job end, in
	// seconds.
	WallTime Distribution `json:"wall_time_s"`
	// Outcomes counts the episodes by outcome (unfinished included), in
	// a fixed order.
	Outcomes []Count `json:"outcomes"`
	// Reasons counts the failures by stage and reason, most first.
	Reasons   []ReasonCount `json:"failure_reasons"`
	Tampering Tampering     `json:"tampering"`
	InFlight  InFlight      `json:"in_flight"`
	// Rows are the episodes' table rows, oldest first.
	Rows []Row `json:"rows"`
}

// Rewards is the reward distribution of the scored episodes, and the
// policy failures (reward 0) counted apart.
type Rewards struct {
	Scored         Distribution `json:"scored"`
	PolicyFailures int          `json:"policy_failures"`
	// Unrewarded counts the final episodes with no reward (infra
	// failures and integrity violations: their samples are masked).
	Unrewarded int `json:"unrewarded"`
}

// Distribution summarises values (seconds for times). Min, Median, P90,
// Max and Mean are null when Count is 0. Percentiles interpolate linearly
// between the closest ranks.
type Distribution struct {
	Count  int      `json:"count"`
	Min    *float64 `json:"min"`
	Median *float64 `json:"median"`
	P90    *float64 `json:"p90"`
	Max    *float64 `json:"max"`
	Mean   *float64 `json:"mean"`
	// Unknown counts the items this figure would cover whose value is not
	// known (a job never started, an end sacct did not report) and
	// Inconsistent those whose times contradict each other (an end before
	// its start, a start before its submit): both left out.
	Unknown      int `json:"unknown"`
	Inconsistent int `json:"inconsistent,omitempty"`
	// Values are the values themselves, ascending.
	Values []float64 `json:"values"`
	// Bins is their histogram: Bins equal bins (the last one closed).
	Bins []Bin `json:"bins"`
}

// Bin is one histogram bin: the values in [Lo, Hi).
type Bin struct {
	Lo    float64 `json:"lo"`
	Hi    float64 `json:"hi"`
	Count int     `json:"count"`
}

// GPURewards are the rewards of the episodes whose eval job had one GPU
// model.
type GPURewards struct {
	// GPU is the model (record.GPU.Name); "" for the episodes whose
	// outcome names no GPU.
	GPU string `json:"gpu"`
	// Scored is the distribution of the scored episodes' rewards;
	// PolicyFailures counts the policy failures (reward 0) apart.
	Scored         Distribution `json:"scored"`
	PolicyFailures int          `json:"policy_failures"`
}

// RewardSeries is the reward by creation time.
type RewardSeries struct {
	Window int           `json:"window"`
	Points []RewardPoint `json:"points"`
}

// RewardPoint is one rewarded episode; RunningMedian is the median of its
// reward and those of the Window-1 rewarded episodes created before it.
type RewardPoint struct {
	Episode       string    `json:"episode"`
	Created       time.Time `json:"created"`
	Outcome       string    `json:"outcome"`
	Reward        float64   `json:"reward"`
	RunningMedian float64   `json:"running_median"`
}

// StageTimes are one stage's job times, in seconds. Queue is submit →
// start of the current attempt (for a job submitted to wait for the
// previous stage's job, from that job's end if later: the wait for the
// dependency is not queueing); Run is start → end of every attempt,
// retried ones included.
type StageTimes struct {
	Stage stages.Stage `json:"stage"`
	Queue Distribution `json:"queue_wait_s"`
	Run   Distribution `json:"run_time_s"`
}

// Count is how many episodes have an outcome.
type Count struct {
	Name  string `json:"name"`
	Count int    `json:"count"`
}

// ReasonCount is how many episodes failed for one reason at one stage.
type ReasonCount struct {
	Outcome   string       `json:"outcome"`
	Stage     stages.Stage `json:"stage,omitempty"`
	Reason    string       `json:"reason"`
	Count     int          `json:"count"`
	Tampering bool         `json:"tampering,omitempty"`
}

// Tampering lists the episodes whose outcome is flagged as tampering.
type Tampering struct {
	Count    int      `json:"count"`
	Episodes []string `json:"episodes"`
}

// InFlight is how many episodes had a job running, over time: from each
// step's instant on, Running episodes had one (an episode with two jobs
// running at once counts once).
type InFlight struct {
	Steps []Step     `json:"steps"`
	Max   int        `json:"max"`
	MaxAt *time.Time `json:"max_at"`
	// Open counts the jobs of unfinished episodes that started and have
	// no end on record: taken as running until Generated. Unknown counts
	// those of final episodes: left out.
	Open    int `json:"open"`
	Unknown int `json:"unknown"`
}

// Step is one change of InFlight.
type Step struct {
	At      time.Time `json:"at"`
	Running int       `json:"running"`
}

// Row is one episode of the table.
type Row struct {
	Episode       string            `json:"episode"`
	Cluster       string            `json:"cluster,omitempty"` // the clusters: entry it ran on
	Labels        map[string]string `json:"labels"`
	Outcome       string            `json:"outcome"`
	FailureStage  stages.Stage      `json:"failure_stage,omitempty"`
	FailureReason string            `json:"failure_reason,omitempty"`
	Detail        string            `json:"detail,omitempty"`
	Tampering     bool              `json:"tampering,omitempty"`
	Reward        *float64          `json:"reward"`
	// GPU is the eval job's GPU, TrainGPU the train job's, as their
	// records name them (OutcomeGPUs); absent when the outcome names none.
	GPU       *record.GPU `json:"gpu,omitempty"`
	TrainGPU  *record.GPU `json:"train_gpu,omitempty"`
	Created   time.Time   `json:"created"`
	WallTimeS *float64    `json:"wall_time_s"`
}

// job is one stage job's times as the ledger keeps them.
type job struct {
	stage   stages.Stage
	id      string
	current bool // the stage's current attempt (else a retried one)
	submit  time.Time
	after   string
	start   time.Time
	end     time.Time
}

// jobsOf gathers the entry's jobs: each stage's current attempt (its times
// from the outcome, else from Ended) and its retried ones.
func jobsOf(e *ledger.Entry) []job {
	var out []job
	for _, s := range stages.All {
		for _, a := range e.Retried[s] {
			out = append(out, job{stage: s, id: a.JobID, start: a.Job.Start, end: a.Job.End})
		}
		sub := e.Jobs[s]
		if sub == nil || sub.JobID == "" {
			continue
		}
		j := job{stage: s, id: sub.JobID, current: true, submit: sub.Submitted, after: sub.After}
		if sub.Adopted {
			// Submitted is when the job was found again after a crash;
			// the intent was written just before its sbatch ran.
			j.submit = sub.Intent
		}
		var sum rules.JobSummary
		if e.Outcome != nil {
			sum = e.Outcome.Jobs[s]
		}
		if en, ok := e.Ended[s]; ok && (sum.ID == "" || sum.ID == en.ID) {
			if sum.Start.IsZero() {
				sum.Start = en.Start
			}
			if sum.End.IsZero() {
				sum.End = en.End
			}
		}
		if sum.ID == "" || sum.ID == sub.JobID {
			j.start, j.end = sum.Start, sum.End
		}
		out = append(out, j)
	}
	return out
}

// wallTime is the final episode's first submit (its author job's) → last
// job end (retried attempts included), known when that submit is and every
// current job's end is.
func wallTime(e *ledger.Entry, jobs []job) (float64, bool) {
	if !e.Final() {
		return 0, false
	}
	var first, last time.Time
	for _, j := range jobs {
		if j.current && j.end.IsZero() {
			return 0, false
		}
		if j.current && j.stage == stages.Author {
			first = j.submit
		}
		if j.end.After(last) {
			last = j.end
		}
	}
	if first.IsZero() || last.Before(first) {
		return 0, false
	}
	return last.Sub(first).Seconds(), true
}

// outcomeOf is the entry's outcome kind, or "unfinished".
func outcomeOf(e *ledger.Entry) string {
	if e.Outcome == nil {
		return Unfinished
	}
	return string(e.Outcome.Outcome)
}

var outcomeOrder = []string{string(rules.Scored), string(rules.PolicyFailure), string(rules.InfraFailure), string(rules.IntegrityViolation), Unfinished}

type interval struct{ from, to time.Time }

// Build computes the figures of entries (in any order) at now.
func Build(entries []*ledger.Entry, now time.Time) Figures { return build(entries, now, OutcomeGPUs) }

// build is Build with the GPUs of an outcome read by gpus.
func build(entries []*ledger.Entry, now time.Time, gpus func(*rules.Outcome) (eval, train *record.GPU)) Figures {
	f := Figures{Generated: now, Episodes: len(entries), Rows: make([]Row, 0, len(entries)),
		Reasons: []ReasonCount{}, Tampering: Tampering{Episodes: []string{}}, InFlight: InFlight{Steps: []Step{}}}
	sorted := slices.Clone(entries)
	slices.SortStableFunc(sorted, func(a, b *ledger.Entry) int {
		return cmp.Or(a.Created.Compare(b.Created), cmp.Compare(a.Episode, b.Episode))
	})
	var scored, wall []float64
	var wallUnknown int
	queue := make([][]float64, len(stages.All))
	run := make([][]float64, len(stages.All))
	queueUnknown := make([]int, len(stages.All))
	queueBad := make([]int, len(stages.All))
	runUnknown := make([]int, len(stages.All))
	runBad := make([]int, len(stages.All))
	outcomes := map[string]int{}
	reasons := map[ReasonCount]int{}
	byGPU := map[string]*gpuGroup{}
	var events []event
	for _, e := range sorted {
		kind := outcomeOf(e)
		outcomes[kind]++
		row := Row{Episode: e.Episode, Cluster: e.Cluster, Labels: e.Labels, Outcome: kind, Created: e.Created}
		if row.Labels == nil {
			row.Labels = map[string]string{}
		}
		if kind == Unfinished && e.CancelRequested != "" {
			row.Outcome = Cancelling
		}
		if o := e.Outcome; o != nil {
			f.Finished++
			row.FailureStage, row.FailureReason, row.Detail, row.Tampering = o.FailureStage, o.FailureReason, o.Detail, o.Tampering
			row.GPU, row.TrainGPU = gpus(o)
			g := byGPU[gpuLabel(row.GPU)]
			if g == nil {
				g = &gpuGroup{}
				byGPU[gpuLabel(row.GPU)] = g
			}
			switch {
			case o.Reward == nil:
				f.Reward.Unrewarded++
			case o.Outcome == rules.Scored:
				scored = append(scored, *o.Reward)
				g.scored = append(g.scored, *o.Reward)
			case o.Outcome == rules.PolicyFailure:
				f.Reward.PolicyFailures++
				g.policyFailures++
			}
			if o.Reward != nil && (o.Outcome == rules.Scored || o.Outcome == rules.PolicyFailure) {
				r := *o.Reward
				row.Reward = &r
				f.RewardOverTime.Points = append(f.RewardOverTime.Points, RewardPoint{Episode: e.Episode, Created: e.Created, Outcome: kind, Reward: r})
			}
			if o.FailureReason != "" {
				reasons[ReasonCount{Outcome: kind, Stage: o.FailureStage, Reason: o.FailureReason, Tampering: o.Tampering}]++
			}
			if o.Tampering {
				f.Tampering.Count++
				f.Tampering.Episodes = append(f.Tampering.Episodes, e.Episode)
			}
		}
		jobs := jobsOf(e)
		var spans []interval
		for _, j := range jobs {
			i := slices.Index(stages.All, j.stage)
			// Run time, every attempt.
			switch {
			case j.start.IsZero() || j.end.IsZero():
				runUnknown[i]++
			case j.end.Before(j.start):
				runBad[i]++
			default:
				run[i] = append(run[i], j.end.Sub(j.start).Seconds())
			}
			// Queue wait, the current attempt.
			if j.current {
				ready, ok := j.submit, !j.submit.IsZero()
				if ok && j.after != "" {
					dep := slices.IndexFunc(jobs, func(d job) bool { return d.id == j.after })
					switch {
					case dep < 0 || jobs[dep].end.IsZero():
						ok = false
					case jobs[dep].end.After(ready):
						ready = jobs[dep].end
					}
				}
				switch {
				case !ok || j.start.IsZero():
					queueUnknown[i]++
				case j.start.Before(ready):
					queueBad[i]++
				default:
					queue[i] = append(queue[i], j.start.Sub(ready).Seconds())
				}
			}
			// In flight.
			switch {
			case j.start.IsZero():
			case j.end.IsZero() && !e.Final() && !j.start.After(now):
				f.InFlight.Open++
				spans = append(spans, interval{j.start, now})
			case j.end.IsZero():
				f.InFlight.Unknown++
			case j.end.After(j.start):
				spans = append(spans, interval{j.start, j.end})
			}
		}
		events = appendSpans(events, spans)
		if w, ok := wallTime(e, jobs); ok {
			wall = append(wall, w)
			row.WallTimeS = &w
		} else if e.Final() {
			wallUnknown++
		}
		f.Rows = append(f.Rows, row)
	}
	f.Reward.Scored = distribution(scored, 0, 1)
	f.RewardByGPU = gpuRewards(byGPU)
	f.RewardOverTime.Window = MedianWindow
	if f.RewardOverTime.Points == nil {
		f.RewardOverTime.Points = []RewardPoint{}
	}
	runningMedian(f.RewardOverTime.Points, MedianWindow)
	for i, s := range stages.All {
		st := StageTimes{Stage: s, Queue: distribution(queue[i], 0, math.NaN()), Run: distribution(run[i], 0, math.NaN())}
		st.Queue.Unknown, st.Queue.Inconsistent = queueUnknown[i], queueBad[i]
		st.Run.Unknown, st.Run.Inconsistent = runUnknown[i], runBad[i]
		f.Stages = append(f.Stages, st)
	}
	f.WallTime = distribution(wall, 0, math.NaN())
	f.WallTime.Unknown = wallUnknown
	for _, k := range outcomeOrder {
		f.Outcomes = append(f.Outcomes, Count{Name: k, Count: outcomes[k]})
	}
	var others []string
	for k := range outcomes {
		if !slices.Contains(outcomeOrder, k) {
			others = append(others, k)
		}
	}
	sort.Strings(others)
	for _, k := range others {
		f.Outcomes = append(f.Outcomes, Count{Name: k, Count: outcomes[k]})
	}
	for r, n := range reasons {
		r.Count = n
		f.Reasons = append(f.Reasons, r)
	}
	slices.SortFunc(f.Reasons, func(a, b ReasonCount) int {
		return cmp.Or(cmp.Compare(b.Count, a.Count), cmp.Compare(a.Outcome, b.Outcome), cmp.Compare(a.Stage, b.Stage), cmp.Compare(a.Reason, b.Reason))
	})
	f.InFlight.Steps, f.InFlight.Max, f.InFlight.MaxAt = steps(events)
	return f
}

// gpuGroup gathers the rewards of one GPU model.
type gpuGroup struct {
	scored         []float64
	policyFailures int
}

// gpuRewards orders the groups that hold a reward: most scored episodes
// first, then by model; the episodes whose outcome names no GPU last.
func gpuRewards(groups map[string]*gpuGroup) []GPURewards {
	out := []GPURewards{}
	for name, g := range groups {
		if len(g.scored) == 0 && g.policyFailures == 0 {
			continue
		}
		out = append(out, GPURewards{GPU: name, Scored: distribution(g.scored, 0, 1), PolicyFailures: g.policyFailures})
	}
	slices.SortFunc(out, func(a, b GPURewards) int {
		return cmp.Or(cmp.Compare(boolInt(a.GPU == ""), boolInt(b.GPU == "")), cmp.Compare(b.Scored.Count, a.Scored.Count), cmp.Compare(a.GPU, b.GPU))
	})
	return out
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

// event is +1 when an episode starts having a job running, -1 when it
// stops.
type event struct {
	at    time.Time
	delta int
}

// appendSpans adds one episode's running spans, merged (overlapping or
// touching spans are one), as events.
func appendSpans(events []event, spans []interval) []event {
	slices.SortFunc(spans, func(a, b interval) int { return a.from.Compare(b.from) })
	for i := 0; i < len(spans); {
		cur := spans[i]
		i++
		for i < len(spans) && !spans[i].from.After(cur.to) {
			if spans[i].to.After(cur.to) {
				cur.to = spans[i].to
			}
			i++
		}
		events = append(events, event{cur.from, +1}, event{cur.to, -1})
	}
	return events
}

// steps is the step series of events (one step per instant), its maximum
// and when it was first reached.
func steps(events []event) ([]Step, int, *time.Time) {
	slices.SortFunc(events, func(a, b event) int { return a.at.Compare(b.at) })
	out := []Step{}
	n, peak := 0, 0
	var peakAt *time.Time
	for i := 0; i < len(events); {
		at := events[i].at
		for ; i < len(events) && events[i].at.Equal(at); i++ {
			n += events[i].delta
		}
		out = append(out, Step{At: at, Running: n})
		if n > peak {
			peak = n
			t := at
			peakAt = &t
		}
	}
	return out, peak, peakAt
}

// runningMedian sets each point's median of the window ending at it.
func runningMedian(points []RewardPoint, window int) {
	buf := make([]float64, 0, window)
	for i := range points {
		buf = buf[:0]
		for j := max(0, i-window+1); j <= i; j++ {
			buf = append(buf, points[j].Reward)
		}
		slices.Sort(buf)
		points[i].RunningMedian = quantile(buf, 0.5)
	}
}

// distribution summarises vs (taken over: sorted in place). Its bins span
// [lo, hi] when every value is within (hi NaN: up to the largest value),
// else the values' range.
func distribution(vs []float64, lo, hi float64) Distribution {
	d := Distribution{Count: len(vs), Values: vs, Bins: []Bin{}}
	if d.Values == nil {
		d.Values = []float64{}
	}
	if len(vs) == 0 {
		return d
	}
	slices.Sort(vs)
	sum := 0.0
	for _, v := range vs {
		sum += v
	}
	d.Min, d.Max = ptr(vs[0]), ptr(vs[len(vs)-1])
	d.Median, d.P90, d.Mean = ptr(quantile(vs, 0.5)), ptr(quantile(vs, 0.9)), ptr(sum/float64(len(vs)))
	if math.IsNaN(hi) {
		hi = vs[len(vs)-1]
	}
	if vs[0] < lo || vs[len(vs)-1] > hi {
		lo, hi = vs[0], vs[len(vs)-1]
	}
	d.Bins = bins(vs, lo, hi, Bins)
	return d
}

// bins is the histogram of sorted vs over [lo, hi] in n equal bins (one
// when lo == hi).
func bins(vs []float64, lo, hi float64, n int) []Bin {
	if hi <= lo {
		return []Bin{{Lo: lo, Hi: hi, Count: len(vs)}}
	}
	w := (hi - lo) / float64(n)
	out := make([]Bin, n)
	for i := range out {
		out[i] = Bin{Lo: lo + float64(i)*w, Hi: lo + float64(i+1)*w}
	}
	out[n-1].Hi = hi
	for _, v := range vs {
		i := min(int((v-lo)/w), n-1)
		out[max(i, 0)].Count++
	}
	return out
}

// quantile of sorted vs (not empty), interpolating between closest ranks.
func quantile(vs []float64, q float64) float64 {
	h := q * float64(len(vs)-1)
	i := int(h)
	if i+1 >= len(vs) {
		return vs[len(vs)-1]
	}
	return vs[i] + (h-float64(i))*(vs[i+1]-vs[i])
}

func ptr(v float64) *float64 { return &v }
