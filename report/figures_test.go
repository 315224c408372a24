package report

import (
	"encoding/json"
	"math"
	"slices"
	"testing"
	"time"

	"github.com/nemorl/nemorl-slurm/ledger"
	"github.com/nemorl/nemorl-slurm/rules"
	"github.com/nemorl/nemorl-slurm/stages"
)

var t0 = time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)

func at(min float64) time.Time { return t0.Add(time.Duration(min * float64(time.Minute))) }

// stageTimes are one stage job's times in minutes after t0 (NaN: unknown).
type stageTimes struct{ submit, start, end float64 }

var nan = math.NaN()

func tm(m float64) time.Time {
	if math.IsNaN(m) {
		return time.Time{}
	}
	return at(m)
}

// entry builds a ledger entry: created at minute c, jobs by stage (in
// chain order, each waiting for the one before), and an outcome (kind ""
// for none).
func entry(id string, c float64, kind rules.Kind, reward *float64, jobs ...stageTimes) *ledger.Entry {
	e := &ledger.Entry{Episode: id, Created: at(c), Jobs: map[stages.Stage]*ledger.Submission{}}
	sums := map[stages.Stage]rules.JobSummary{}
	for i, j := range jobs {
		s := stages.All[i]
		sub := &ledger.Submission{JobID: id + "-" + string(s), Submitted: tm(j.submit), Intent: tm(j.submit)}
		if i > 0 {
			sub.After = id + "-" + string(stages.All[i-1])
		}
		e.Jobs[s] = sub
		sums[s] = rules.JobSummary{ID: sub.JobID, State: "COMPLETED", Start: tm(j.start), End: tm(j.end)}
	}
	if kind != "" {
		e.Outcome = &rules.Outcome{Episode: id, Outcome: kind, Reward: reward, Jobs: sums}
	} else {
		// Unfinished: only the collected jobs' times are on record.
		e.Ended = map[stages.Stage]rules.JobSummary{}
		for s, sum := range sums {
			if !sum.End.IsZero() {
				e.Ended[s] = sum
			}
		}
	}
	return e
}

func rw(v float64) *float64 { return &v }

func failed(e *ledger.Entry, stage stages.Stage, reason string, tampering bool) *ledger.Entry {
	e.Outcome.FailureStage, e.Outcome.FailureReason, e.Outcome.Tampering = stage, reason, tampering
	return e
}

// full is an episode whose three jobs each queue 1 minute and run 10.
func full(id string, c float64, kind rules.Kind, reward *float64) *ledger.Entry {
	return entry(id, c, kind, reward, stageTimes{c, c + 1, c + 11}, stageTimes{c + 11, c + 12, c + 22}, stageTimes{c + 11, c + 23, c + 33})
}

func stageOf(f Figures, s stages.Stage) StageTimes {
	for _, st := range f.Stages {
		if st.Stage == s {
			return st
		}
	}
	return StageTimes{}
}

func outcomeCount(f Figures, name string) int {
	for _, o := range f.Outcomes {
		if o.Name == name {
			return o.Count
		}
	}
	return -1
}

func val(p *float64) float64 {
	if p == nil {
		return nan
	}
	return *p
}

func near(a, b float64) bool { return math.Abs(a-b) < 1e-9 || math.IsNaN(a) && math.IsNaN(b) }

// TestReportBuild: one case per decision Build makes, over gathered facts.
func TestReportBuild(t *testing.T) {
	now := at(1000)
	cases := []struct {
		name    string
		entries []*ledger.Entry
		check   func(t *testing.T, f Figures)
	}{
		{"empty selection: no invented numbers", nil, func(t *testing.T, f Figures) {
			if f.Episodes != 0 || len(f.Rows) != 0 || f.Reward.Scored.Count != 0 || f.InFlight.Max != 0 || f.InFlight.MaxAt != nil {
				t.Errorf("figures of nothing: %+v", f)
			}
			d := f.Reward.Scored
			if d.Min != nil || d.Median != nil || d.P90 != nil || d.Max != nil || d.Mean != nil {
				t.Errorf("statistics of no values are set: %+v", d)
			}
			b, _ := json.Marshal(f)
			var back map[string]any
			_ = json.Unmarshal(b, &back)
			if m := back["reward"].(map[string]any)["scored"].(map[string]any); m["median"] != nil || m["values"] == nil {
				t.Errorf("JSON of an empty distribution: %v (want median null, values [])", m)
			}
			if len(f.Stages) != 3 || len(f.Outcomes) != 5 {
				t.Errorf("stages %d outcomes %d, want 3 and 5 (all listed, counts 0)", len(f.Stages), len(f.Outcomes))
			}
		}},
		{"policy failures counted apart from the scored distribution", []*ledger.Entry{
			full("ep-1", 0, rules.Scored, rw(0.5)),
			full("ep-2", 1, rules.Scored, rw(0.25)),
			failed(full("ep-3", 2, rules.PolicyFailure, rw(0)), stages.Author, "no_patch", false),
			failed(full("ep-4", 3, rules.InfraFailure, nil), stages.Train, "node_fail", false),
		}, func(t *testing.T, f Figures) {
			d := f.Reward.Scored
			if d.Count != 2 || !near(val(d.Min), 0.25) || !near(val(d.Max), 0.5) || !near(val(d.Median), 0.375) {
				t.Errorf("scored = %+v, want 2 values 0.25..0.5, median 0.375 (the 0 of the policy failure not in it)", d)
			}
			if f.Reward.PolicyFailures != 1 || f.Reward.Unrewarded != 1 {
				t.Errorf("policy failures %d unrewarded %d, want 1 and 1", f.Reward.PolicyFailures, f.Reward.Unrewarded)
			}
			if n := len(f.RewardOverTime.Points); n != 3 {
				t.Fatalf("reward over time has %d points, want 3 (scored and policy failure, not infra)", n)
			}
			if p := f.RewardOverTime.Points[2]; p.Episode != "ep-3" || p.Reward != 0 || p.Outcome != "policy_failure" {
				t.Errorf("third point %+v, want ep-3's 0", p)
			}
			if f.Rows[3].Reward != nil {
				t.Errorf("infra failure's row has reward %v, want none", *f.Rows[3].Reward)
			}
			total := 0
			for _, b := range d.Bins {
				total += b.Count
				if b.Lo < 0 || b.Hi > 1 {
					t.Errorf("reward bin %+v outside [0,1]", b)
				}
			}
			if total != 2 || len(d.Bins) != Bins {
				t.Errorf("reward bins hold %d values in %d bins, want 2 in %d", total, len(d.Bins), Bins)
			}
		}},
		{"running median over the trailing window, by creation time", func() []*ledger.Entry {
			var es []*ledger.Entry
			// Created out of order: Build sorts them.
			for i := 30; i >= 1; i-- {
				es = append(es, full("ep-"+string(rune('A'+i)), float64(i), rules.Scored, rw(float64(i)/100)))
			}
			return es
		}(), func(t *testing.T, f Figures) {
			pts := f.RewardOverTime.Points
			if len(pts) != 30 || !pts[0].Created.Before(pts[29].Created) {
				t.Fatalf("points not in creation order")
			}
			// Point i (0-based) has rewards (i+1)/100: the window of the
			// last 25 ends at it.
			for _, c := range []struct {
				i    int
				want float64
			}{{0, 0.01}, {1, 0.015}, {24, 0.13}, {29, 0.18}} {
				if got := pts[c.i].RunningMedian; !near(got, c.want) {
					t.Errorf("running median at %d = %v, want %v", c.i, got, c.want)
				}
			}
		}},
		{"queue wait, run time and wall time per stage", []*ledger.Entry{
			full("ep-1", 0, rules.Scored, rw(1)),
			// Eval submitted with train, waiting for it: its queue wait
			// counts from train's end (22), not from its submit (11).
			entry("ep-2", 100, rules.Scored, rw(1), stageTimes{100, 105, 110}, stageTimes{110, 110, 130}, stageTimes{110, 140, 150}),
		}, func(t *testing.T, f Figures) {
			a, tr, ev := stageOf(f, stages.Author), stageOf(f, stages.Train), stageOf(f, stages.Eval)
			if !slices.Equal(a.Queue.Values, []float64{60, 300}) || !slices.Equal(a.Run.Values, []float64{300, 600}) {
				t.Errorf("author queue %v run %v, want [60 300] and [300 600]", a.Queue.Values, a.Run.Values)
			}
			if !slices.Equal(tr.Queue.Values, []float64{0, 60}) || !slices.Equal(tr.Run.Values, []float64{600, 1200}) {
				t.Errorf("train queue %v run %v", tr.Queue.Values, tr.Run.Values)
			}
			if !slices.Equal(ev.Queue.Values, []float64{60, 600}) {
				t.Errorf("eval queue %v, want [60 600] (from the end of train)", ev.Queue.Values)
			}
			if !slices.Equal(f.WallTime.Values, []float64{33 * 60, 50 * 60}) {
				t.Errorf("wall %v, want [1980 3000]", f.WallTime.Values)
			}
			if w := f.Rows[1].WallTimeS; w == nil || *w != 3000 {
				t.Errorf("row wall time %v, want 3000", w)
			}
			if !near(val(a.Queue.P90), 60+0.9*240) {
				t.Errorf("author queue p90 = %v, want %v", val(a.Queue.P90), 60+0.9*240)
			}
		}},
		{"unknown times are left out and counted, never zero", []*ledger.Entry{
			// Eval never started (cancelled while pending, sacct with no end).
			failed(entry("ep-1", 0, rules.InfraFailure, nil, stageTimes{0, 1, 11}, stageTimes{11, 12, 22}, stageTimes{11, nan, nan}), stages.Eval, "cancelled", false),
			// sacct reported nothing of train.
			failed(entry("ep-2", 50, rules.InfraFailure, nil, stageTimes{50, 51, 61}, stageTimes{61, nan, nan}), stages.Train, "job_lost", false),
			// Unfinished: train running, its times not yet on record.
			entry("ep-3", 900, "", nil, stageTimes{900, 901, 911}, stageTimes{911, nan, nan}),
		}, func(t *testing.T, f Figures) {
			ev, tr := stageOf(f, stages.Eval), stageOf(f, stages.Train)
			if ev.Queue.Count != 0 || ev.Queue.Unknown != 1 || ev.Run.Count != 0 || ev.Run.Unknown != 1 {
				t.Errorf("eval queue %+v run %+v: want nothing known, 1 unknown each", ev.Queue, ev.Run)
			}
			if tr.Run.Count != 1 || tr.Run.Unknown != 2 || tr.Queue.Count != 1 || tr.Queue.Unknown != 2 {
				t.Errorf("train run %d/%d queue %d/%d, want 1 known and 2 unknown", tr.Run.Count, tr.Run.Unknown, tr.Queue.Count, tr.Queue.Unknown)
			}
			for _, v := range append(slices.Clone(tr.Run.Values), tr.Queue.Values...) {
				if v == 0 {
					t.Errorf("a zero crept in: %v %v", tr.Run.Values, tr.Queue.Values)
				}
			}
			if f.WallTime.Count != 0 || f.WallTime.Unknown != 2 {
				t.Errorf("wall %d known, %d unknown; want 0 and 2 (the unfinished one not counted)", f.WallTime.Count, f.WallTime.Unknown)
			}
			for _, r := range f.Rows {
				if r.WallTimeS != nil {
					t.Errorf("%s has wall time %v", r.Episode, *r.WallTimeS)
				}
			}
			if outcomeCount(f, Unfinished) != 1 || outcomeCount(f, string(rules.InfraFailure)) != 2 || f.Finished != 2 {
				t.Errorf("outcomes %+v finished %d", f.Outcomes, f.Finished)
			}
		}},
		{"contradicting times are inconsistent, not values", []*ledger.Entry{
			entry("ep-1", 0, rules.Scored, rw(1), stageTimes{5, 1, 11}, stageTimes{11, 20, 15}),
		}, func(t *testing.T, f Figures) {
			a, tr := stageOf(f, stages.Author), stageOf(f, stages.Train)
			if a.Queue.Inconsistent != 1 || a.Queue.Count != 0 || tr.Run.Inconsistent != 1 || tr.Run.Count != 0 {
				t.Errorf("author queue %+v train run %+v", a.Queue, tr.Run)
			}
		}},
		{"adopted job: queue from the intent, not from the adoption", []*ledger.Entry{func() *ledger.Entry {
			e := full("ep-1", 0, rules.Scored, rw(1))
			e.Jobs[stages.Author].Adopted, e.Jobs[stages.Author].Submitted = true, at(500)
			return e
		}()}, func(t *testing.T, f Figures) {
			if v := stageOf(f, stages.Author).Queue.Values; !slices.Equal(v, []float64{60}) {
				t.Errorf("adopted author queue %v, want [60]", v)
			}
			if v := f.WallTime.Values; !slices.Equal(v, []float64{33 * 60}) {
				t.Errorf("wall %v, want [1980]", v)
			}
		}},
		{"retried attempts: their run time counted, wall time to the last end", []*ledger.Entry{func() *ledger.Entry {
			e := entry("ep-1", 0, rules.Scored, rw(1), stageTimes{0, 1, 11}, stageTimes{40, 41, 51}, stageTimes{51, 52, 62})
			e.Retried = map[stages.Stage][]rules.Attempt{stages.Train: {{Attempt: 1, JobID: "old", Job: rules.JobSummary{ID: "old", Start: at(12), End: at(30)}}}}
			return e
		}()}, func(t *testing.T, f Figures) {
			tr := stageOf(f, stages.Train)
			if !slices.Equal(tr.Run.Values, []float64{600, 18 * 60}) || tr.Queue.Count != 1 {
				t.Errorf("train run %v queue %v, want both attempts' runs and one queue", tr.Run.Values, tr.Queue.Values)
			}
			if !slices.Equal(f.WallTime.Values, []float64{62 * 60}) {
				t.Errorf("wall %v", f.WallTime.Values)
			}
			// The two train attempts and eval never overlap the author:
			// the episode is in flight once at a time.
			if f.InFlight.Max != 1 {
				t.Errorf("in flight max %d, want 1", f.InFlight.Max)
			}
		}},
		{"outcomes, reasons and tampering counted", []*ledger.Entry{
			failed(full("ep-1", 0, rules.PolicyFailure, rw(0)), stages.Author, "no_patch", false),
			failed(full("ep-2", 1, rules.PolicyFailure, rw(0)), stages.Author, "no_patch", false),
			failed(full("ep-3", 2, rules.IntegrityViolation, nil), stages.Eval, "foreign_record", true),
			failed(full("ep-4", 3, rules.IntegrityViolation, nil), "", rules.ReasonLedgerTampered, true),
			full("ep-5", 4, rules.Scored, rw(0.3)),
			func() *ledger.Entry { e := entry("ep-6", 5, "", nil); e.CancelRequested = "cancel"; return e }(),
		}, func(t *testing.T, f Figures) {
			want := map[string]int{"scored": 1, "policy_failure": 2, "infra_failure": 0, "integrity_violation": 2, "unfinished": 1}
			for k, n := range want {
				if got := outcomeCount(f, k); got != n {
					t.Errorf("%s: %d, want %d", k, got, n)
				}
			}
			if len(f.Reasons) != 3 || f.Reasons[0] != (ReasonCount{Outcome: "policy_failure", Stage: "author", Reason: "no_patch", Count: 2}) {
				t.Errorf("reasons %+v, want no_patch (2) first of 3", f.Reasons)
			}
			if f.Tampering.Count != 2 || !slices.Equal(f.Tampering.Episodes, []string{"ep-3", "ep-4"}) {
				t.Errorf("tampering %+v", f.Tampering)
			}
			if !f.Rows[2].Tampering || f.Rows[5].Outcome != Cancelling {
				t.Errorf("rows %+v", f.Rows)
			}
		}},
		{"in flight: a step series, overlaps per episode merged", []*ledger.Entry{
			// ep-1 runs 1–33 (three jobs back to back), ep-2 runs 5–15
			// and 20–25, ep-3 2–4 and 3–8 (overlapping jobs: once).
			entry("ep-1", 0, rules.Scored, rw(1), stageTimes{0, 1, 33}),
			entry("ep-2", 5, rules.Scored, rw(1), stageTimes{5, 5, 15}, stageTimes{15, 20, 25}),
			entry("ep-3", 2, rules.Scored, rw(1), stageTimes{2, 2, 4}, stageTimes{2, 3, 8}),
		}, func(t *testing.T, f Figures) {
			want := []Step{{at(1), 1}, {at(2), 2}, {at(5), 3}, {at(8), 2}, {at(15), 1}, {at(20), 2}, {at(25), 1}, {at(33), 0}}
			if !slices.EqualFunc(f.InFlight.Steps, want, func(a, b Step) bool { return a.At.Equal(b.At) && a.Running == b.Running }) {
				t.Errorf("steps\n got %v\nwant %v", f.InFlight.Steps, want)
			}
			if f.InFlight.Max != 3 || f.InFlight.MaxAt == nil || !f.InFlight.MaxAt.Equal(at(5)) {
				t.Errorf("max %d at %v, want 3 at minute 5", f.InFlight.Max, f.InFlight.MaxAt)
			}
		}},
		{"in flight: an unfinished job runs until now, a final one's unknown end is left out", []*ledger.Entry{
			func() *ledger.Entry {
				e := entry("ep-1", 900, "", nil, stageTimes{900, 901, 911})
				e.Ended = map[stages.Stage]rules.JobSummary{stages.Author: {ID: "ep-1-author", Start: at(901)}}
				return e
			}(),
			entry("ep-2", 0, rules.InfraFailure, nil, stageTimes{0, 1, nan}),
		}, func(t *testing.T, f Figures) {
			want := []Step{{at(901), 1}, {now, 0}}
			if !slices.EqualFunc(f.InFlight.Steps, want, func(a, b Step) bool { return a.At.Equal(b.At) && a.Running == b.Running }) {
				t.Errorf("steps %v, want %v", f.InFlight.Steps, want)
			}
			if f.InFlight.Open != 1 || f.InFlight.Unknown != 1 {
				t.Errorf("open %d unknown %d, want 1 and 1", f.InFlight.Open, f.InFlight.Unknown)
			}
		}},
		{"rows keep labels and reasons as they are, oldest first", []*ledger.Entry{
			func() *ledger.Entry {
				e := failed(full("ep-2", 10, rules.InfraFailure, nil), stages.Train, "<b>x</b>", false)
				e.Labels = map[string]string{"sweep": "<script>"}
				return e
			}(),
			full("ep-1", 0, rules.Scored, rw(0.7)),
		}, func(t *testing.T, f Figures) {
			if f.Rows[0].Episode != "ep-1" || f.Rows[1].Labels["sweep"] != "<script>" || f.Rows[1].FailureReason != "<b>x</b>" {
				t.Errorf("rows %+v", f.Rows)
			}
			if f.Rows[0].Labels == nil {
				t.Errorf("nil labels: want {} in the JSON")
			}
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			f := Build(c.entries, now)
			if f.Episodes != len(c.entries) || len(f.Rows) != len(c.entries) || !f.Generated.Equal(now) {
				t.Errorf("episodes %d rows %d generated %v", f.Episodes, len(f.Rows), f.Generated)
			}
			c.check(t, f)
		})
	}
}

// TestReportBuildDoesNotChangeEntries: the selection is read, not reordered or
// written.
func TestReportBuildDoesNotChangeEntries(t *testing.T) {
	es := []*ledger.Entry{full("ep-2", 5, rules.Scored, rw(1)), full("ep-1", 0, rules.Scored, rw(0.5))}
	before, _ := json.Marshal(es)
	Build(es, at(100))
	after, _ := json.Marshal(es)
	if string(before) != string(after) {
		t.Errorf("Build changed its input")
	}
}

func TestReportQuantileAndBins(t *testing.T) {
	vs := []float64{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}
	for _, c := range []struct{ q, want float64 }{{0, 1}, {0.5, 5.5}, {0.9, 9.1}, {1, 10}} {
		if got := quantile(vs, c.q); !near(got, c.want) {
			t.Errorf("quantile %v = %v, want %v", c.q, got, c.want)
		}
	}
	if got := quantile([]float64{7}, 0.9); got != 7 {
		t.Errorf("quantile of one = %v", got)
	}
	d := distribution([]float64{5, 5, 5}, 0, nan)
	if len(d.Bins) != Bins || d.Bins[len(d.Bins)-1].Count != 3 {
		t.Errorf("bins of equal values: %+v", d.Bins)
	}
	d = distribution([]float64{0, 0}, 0, nan)
	if len(d.Bins) != 1 || d.Bins[0].Count != 2 {
		t.Errorf("bins of zeros: %+v", d.Bins)
	}
	d = distribution([]float64{-1, 2}, 0, 1)
	if d.Bins[0].Lo != -1 || d.Bins[len(d.Bins)-1].Hi != 2 {
		t.Errorf("values out of [0,1] get their own range: %+v", d.Bins)
	}
}
