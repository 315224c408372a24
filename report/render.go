package report

import (
	"bytes"
	"fmt"
	"html/template"
	"image/color"
	"io"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgsvg"

	"github.com/nemorl/nemorl-slurm/record"
	"github.com/nemorl/nemorl-slurm/rules"
)

// ChartIDs are the ids of the report's chart elements
// (<figure id="chart-…">), in page order.
var ChartIDs = []string{"chart-reward", "chart-reward-time", "chart-reward-gpu", "chart-queue-wait", "chart-run-time", "chart-wall-time", "chart-outcomes", "chart-in-flight"}

const (
	chartW = 7 * vg.Inch
	chartH = 3.5 * vg.Inch
)

var (
	blue   = color.RGBA{R: 0x1f, G: 0x77, B: 0xb4, A: 0xff}
	orange = color.RGBA{R: 0xff, G: 0x7f, B: 0x0e, A: 0xff}
	red    = color.RGBA{R: 0xd6, G: 0x27, B: 0x28, A: 0xff}
	grey   = color.RGBA{R: 0x7f, G: 0x7f, B: 0x7f, A: 0xff}
)

// chart is one figure of the page: its SVG (nil: no data, Empty says
// why) and caption.
type chart struct {
	ID      string
	SVG     template.HTML
	Empty   string
	Caption string
}

type page struct {
	Title     string
	Generated string
	F         *Figures
	Charts    []chart
	Rows      []pageRow
	// NoEpisodes is what the page says when there are none.
	NoEpisodes string
}

// noEpisodes is what the report says when the selection is empty.
const noEpisodes = "No episodes: nothing in the ledger matches this selection."

type pageRow struct {
	Row
	LabelText, Reason, RewardText, WallText, CreatedText, GPUText string
	RewardKey, WallKey                                            string
	CreatedKey                                                    int64
}

// RenderHTML writes the figures as one self-contained HTML page (inline
// SVG charts, style and script; nothing fetched when it is opened). Every
// text from the ledger is escaped.
func RenderHTML(w io.Writer, f Figures, title string) error {
	p, err := newPage(&f, title, noEpisodes)
	if err != nil {
		return err
	}
	if err := pageTemplate.Execute(w, p); err != nil {
		return fmt.Errorf("report: write the HTML: %w", err)
	}
	return nil
}

// RenderFragment writes the figures as the body of RenderHTML's page
// without the page around it (no document, head, style or script): the
// summary, the charts (a figure for each of ChartIDs) and the table
// (id="episodes"), or, when there are no episodes, an element
// id="no-episodes" that says empty ("": the report's words). It is for a
// page that swaps it in as it changes (serve's /ui); that page brings CSS
// and, if it wants, sorts the table. Every text from the ledger is
// escaped.
func RenderFragment(w io.Writer, f Figures, empty string) error {
	if empty == "" {
		empty = noEpisodes
	}
	p, err := newPage(&f, "", empty)
	if err != nil {
		return err
	}
	if err := pageTemplate.ExecuteTemplate(w, "figures", p); err != nil {
		return fmt.Errorf("report: write the HTML fragment: %w", err)
	}
	return nil
}

// newPage draws f's charts and lays out its table rows.
func newPage(f *Figures, title, empty string) (*page, error) {
	p := &page{Title: title, Generated: f.Generated.UTC().Format(time.RFC3339), F: f, NoEpisodes: empty}
	if f.Episodes == 0 {
		return p, nil
	}
	charts, err := drawCharts(f)
	if err != nil {
		return nil, fmt.Errorf("report: %w", err)
	}
	p.Charts = charts
	p.Rows = make([]pageRow, len(f.Rows))
	for i, r := range f.Rows {
		p.Rows[i] = newPageRow(r)
	}
	return p, nil
}

// newPageRow is a table row's texts and sort keys.
func newPageRow(r Row) pageRow {
	pr := pageRow{Row: r, LabelText: labelText(r.Labels), RewardText: "-", WallText: "-",
		CreatedText: r.Created.UTC().Format("2006-01-02 15:04:05"), CreatedKey: r.Created.Unix()}
	if r.FailureReason != "" {
		pr.Reason = r.FailureReason
		if r.FailureStage != "" {
			pr.Reason = string(r.FailureStage) + ": " + r.FailureReason
		}
	}
	if r.Reward != nil {
		pr.RewardText, pr.RewardKey = strconv.FormatFloat(*r.Reward, 'f', 4, 64), strconv.FormatFloat(*r.Reward, 'g', -1, 64)
	}
	if r.WallTimeS != nil {
		pr.WallText, pr.WallKey = formatSeconds(*r.WallTimeS), strconv.FormatFloat(*r.WallTimeS, 'g', -1, 64)
	}
	pr.GPUText = GPUText(r.GPU, r.TrainGPU)
	return pr
}

// GPUText is an episode's GPU cell (the report's table, list's): the eval
// job's GPU, and the train job's where its record names another model;
// "-" when neither is named.
func GPUText(eval, train *record.GPU) string {
	switch {
	case eval == nil && train == nil:
		return "-"
	case eval == nil:
		return "train: " + train.String()
	case train != nil && train.Name != eval.Name:
		return eval.String() + " (train: " + train.String() + ")"
	}
	return eval.String()
}

func labelText(m map[string]string) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	var b strings.Builder
	for i, k := range keys {
		if i > 0 {
			b.WriteString(",")
		}
		b.WriteString(k + "=" + m[k])
	}
	return b.String()
}

// formatSeconds is a duration for people: 45s, 12m03s, 3h07m.
func formatSeconds(s float64) string {
	d := time.Duration(math.Round(s)) * time.Second
	switch {
	case d < time.Minute:
		return fmt.Sprintf("%ds", int(d/time.Second))
	case d < time.Hour:
		return fmt.Sprintf("%dm%02ds", int(d/time.Minute), int(d%time.Minute/time.Second))
	default:
		return fmt.Sprintf("%dh%02dm", int(d/time.Hour), int(d%time.Hour/time.Minute))
	}
}

func fmtP(v *float64, unit func(float64) string) string {
	if v == nil {
		return "-"
	}
	return unit(*v)
}

func fmtReward(v float64) string { return strconv.FormatFloat(v, 'f', 3, 64) }

func drawCharts(f *Figures) ([]chart, error) {
	type maker struct {
		id   string
		draw func(*Figures) (*plot.Plot, string, string, error)
	}
	makers := []maker{
		{"chart-reward", rewardChart},
		{"chart-reward-time", rewardTimeChart},
		{"chart-reward-gpu", gpuChart},
		{"chart-queue-wait", func(f *Figures) (*plot.Plot, string, string, error) { return stageChart(f, true) }},
		{"chart-run-time", func(f *Figures) (*plot.Plot, string, string, error) { return stageChart(f, false) }},
		{"chart-wall-time", wallChart},
		{"chart-outcomes", outcomesChart},
		{"chart-in-flight", inFlightChart},
	}
	out := make([]chart, 0, len(makers))
	for _, m := range makers {
		p, caption, empty, err := m.draw(f)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", m.id, err)
		}
		c := chart{ID: m.id, Caption: caption, Empty: empty}
		if p != nil {
			h := chartH
			if m.id == "chart-outcomes" {
				h = max(chartH, vg.Length(len(f.Outcomes)+len(f.Reasons))*0.22*vg.Inch+vg.Inch)
			}
			svg, err := toSVG(p, chartW, h)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", m.id, err)
			}
			c.SVG = svg
		}
		out = append(out, c)
	}
	return out, nil
}

// rightMargin is kept free right of every chart.
const rightMargin vg.Length = 14 // points

// toSVG draws p with vgsvg, without the XML prolog (the SVG goes inline).
// vgsvg escapes every text it draws.
func toSVG(p *plot.Plot, w, h vg.Length) (template.HTML, error) {
	c := vgsvg.New(w, h)
	// A right margin: gonum/plot centres the last tick's label on the
	// canvas's edge, and places a legend flush with it.
	p.Draw(draw.Crop(draw.New(c), 0, -rightMargin, 0, 0))
	var b bytes.Buffer
	if _, err := c.WriteTo(&b); err != nil {
		return "", fmt.Errorf("draw the SVG: %w", err)
	}
	s := b.String()
	if i := strings.Index(s, "<svg"); i >= 0 {
		s = s[i:]
	}
	// The chart scales with the page; the viewBox keeps its shape.
	s = strings.Replace(s, "<svg width=", `<svg class="chart" role="img" data-width=`, 1)
	s = strings.Replace(s, " height=", " data-height=", 1)
	return template.HTML(s), nil //nolint:gosec // vgsvg output, its text escaped
}

func newPlot(title, x, y string) *plot.Plot {
	p := plot.New()
	p.Title.Text, p.X.Label.Text, p.Y.Label.Text = title, x, y
	p.Add(plotter.NewGrid())
	return p
}

func histogram(bs []Bin, fill color.Color, scale float64) *plotter.Histogram {
	h := &plotter.Histogram{FillColor: fill, LineStyle: plotter.DefaultLineStyle}
	for _, b := range bs {
		h.Bins = append(h.Bins, plotter.HistogramBin{Min: b.Lo / scale, Max: b.Hi / scale, Weight: float64(b.Count)})
	}
	if len(h.Bins) > 0 {
		h.Width = h.Bins[0].Max - h.Bins[0].Min
	}
	if len(h.Bins) == 1 && h.Width == 0 {
		// One value only: a bar of some width around it.
		h.Bins[0].Min, h.Bins[0].Max, h.Width = h.Bins[0].Min-0.5, h.Bins[0].Max+0.5, 1
	}
	return h
}

func rewardChart(f *Figures) (*plot.Plot, string, string, error) {
	d := f.Reward.Scored
	caption := fmt.Sprintf("Reward of the %d scored episodes (median %s, p90 %s); %d policy failures (reward 0) counted apart, %d final episodes without a reward (masked).",
		d.Count, fmtP(d.Median, fmtReward), fmtP(d.P90, fmtReward), f.Reward.PolicyFailures, f.Reward.Unrewarded)
	if d.Count == 0 {
		return nil, caption, "no scored episodes", nil
	}
	p := newPlot("Reward of scored episodes", "reward", "episodes")
	p.Add(histogram(d.Bins, blue, 1))
	p.Y.Tick.Marker = countTicks{}
	return p, caption, "", nil
}

// timeXYs is a plotter.XYer over times (Unix seconds) and values.
type timeXYs struct {
	n  int
	xy func(int) (time.Time, float64)
}

func (t timeXYs) Len() int { return t.n }
func (t timeXYs) XY(i int) (float64, float64) {
	at, v := t.xy(i)
	return float64(at.UnixNano()) / 1e9, v
}

// countTicks labels a count axis with whole numbers only: a histogram of
// three episodes has no tick at 0.5 episodes.
type countTicks struct{}

func (countTicks) Ticks(min, max float64) []plot.Tick {
	var out []plot.Tick
	for _, t := range (plot.DefaultTicks{}).Ticks(min, max) {
		if t.Label != "" && t.Value != math.Trunc(t.Value) {
			continue // a fraction of an episode
		}
		out = append(out, t)
	}
	return out
}

func timeAxis(p *plot.Plot) { p.X.Tick.Marker = spanTimeTicks{} }

// spanTimeTicks labels a time axis with as much of the clock as its span
// needs: seconds for a run of minutes, the day for one of weeks.
type spanTimeTicks struct{}

func (spanTimeTicks) Ticks(min, max float64) []plot.Tick {
	return plot.TimeTicks{Format: timeTickFormat(max - min), Time: func(t float64) time.Time {
		return time.Unix(0, int64(t*1e9)).UTC()
	}}.Ticks(min, max)
}

func timeTickFormat(spanS float64) string {
	switch {
	case spanS < 10:
		return "15:04:05.00"
	case spanS <= 2*3600:
		return "15:04:05"
	case spanS <= 3*86400:
		return "01-02\n15:04"
	default:
		return "2006-01-02"
	}
}

func rewardTimeChart(f *Figures) (*plot.Plot, string, string, error) {
	pts := f.RewardOverTime.Points
	caption := fmt.Sprintf("Reward of the %d rewarded episodes by creation time (UTC), policy failures at 0; the line is the running median of the last %d.", len(pts), f.RewardOverTime.Window)
	if len(pts) == 0 {
		return nil, caption, "no rewarded episodes", nil
	}
	p := newPlot("Reward over time", "created (UTC)", "reward")
	timeAxis(p)
	var scoredIdx, failIdx []int
	for i, pt := range pts {
		if pt.Outcome == string(rules.PolicyFailure) {
			failIdx = append(failIdx, i)
		} else {
			scoredIdx = append(scoredIdx, i)
		}
	}
	sub := func(idx []int) timeXYs {
		return timeXYs{len(idx), func(i int) (time.Time, float64) { return pts[idx[i]].Created, pts[idx[i]].Reward }}
	}
	if len(scoredIdx) > 0 {
		s, err := plotter.NewScatter(sub(scoredIdx))
		if err != nil {
			return nil, "", "", err
		}
		s.GlyphStyle.Color, s.GlyphStyle.Radius, s.GlyphStyle.Shape = blue, vg.Points(1.5), draw.CircleGlyph{}
		p.Add(s)
		p.Legend.Add("scored", s)
	}
	if len(failIdx) > 0 {
		s, err := plotter.NewScatter(sub(failIdx))
		if err != nil {
			return nil, "", "", err
		}
		s.GlyphStyle.Color, s.GlyphStyle.Radius, s.GlyphStyle.Shape = red, vg.Points(2), draw.CrossGlyph{}
		p.Add(s)
		p.Legend.Add("policy failure", s)
	}
	l, err := plotter.NewLine(timeXYs{len(pts), func(i int) (time.Time, float64) { return pts[i].Created, pts[i].RunningMedian }})
	if err != nil {
		return nil, "", "", err
	}
	l.LineStyle.Color, l.LineStyle.Width = orange, vg.Points(1.5)
	p.Add(l)
	p.Legend.Add("running median", l)
	// Top left inside the axes, thumbnails first: a browser's font wider
	// than the one gonum measured runs into empty space, not the glyphs.
	p.Legend.Top, p.Legend.Left = true, true
	p.Legend.XOffs, p.Legend.YOffs = vg.Points(8), -vg.Points(4)
	p.Legend.TextStyle.Font.Size = vg.Points(10)
	p.Legend.Padding = vg.Points(2)
	p.Y.Min = 0 // rewards are read against 0 to 1, whatever the data's range
	if p.Y.Max <= 1 {
		p.Y.Max = 1.3 // room for the legend above the rewards
	}
	return p, caption, "", nil
}

// maxGPUBoxes is how many GPU models the reward-by-GPU chart shows (the
// rest are in the table and in report --json).
const maxGPUBoxes = 8

// noGPU names the episodes whose outcome names no GPU.
const noGPU = "GPU not named"

// gpuShort is a GPU model for an axis label: without the vendor's name
// every model of the figure shares.
func gpuShort(name string) string {
	if name == "" {
		return noGPU
	}
	if short, ok := strings.CutPrefix(name, "NVIDIA "); ok && short != "" {
		return short
	}
	return name
}

func gpuChart(f *Figures) (*plot.Plot, string, string, error) {
	groups := f.RewardByGPU
	var parts []string
	scored := 0
	for _, g := range groups {
		name := g.GPU
		if name == "" {
			name = noGPU
		}
		part := fmt.Sprintf("%s: %d scored (median %s)", name, g.Scored.Count, fmtP(g.Scored.Median, fmtReward))
		if g.PolicyFailures > 0 {
			part += fmt.Sprintf(", %d policy failures", g.PolicyFailures)
		}
		parts = append(parts, part)
		scored += g.Scored.Count
	}
	caption := "Reward of the scored episodes by the GPU model of their eval job, as its record names it (train ran on the same cluster and GRES): an hour of training is not the same on every GPU."
	if len(parts) > 0 {
		caption += " " + strings.Join(parts, "; ") + "."
	}
	if len(groups) > maxGPUBoxes {
		caption += fmt.Sprintf(" The %d models with the fewest episodes are left out of the chart.", len(groups)-maxGPUBoxes)
		groups = groups[:maxGPUBoxes]
	}
	if scored == 0 {
		return nil, caption, "no scored episodes", nil
	}
	p := newPlot("Reward by GPU model", "", "reward")
	names := make([]string, len(groups))
	for i, g := range groups {
		names[i] = fmt.Sprintf("%s\n%d scored", gpuShort(g.GPU), g.Scored.Count)
		if g.Scored.Count == 0 {
			continue
		}
		if err := addBox(p, i, plotter.Values(slices.Clone(g.Scored.Values))); err != nil {
			return nil, "", "", err
		}
	}
	p.NominalX(names...)
	p.X.Min, p.X.Max = -0.5, float64(len(names))-0.5
	p.Y.Min, p.Y.Max = 0, 1 // rewards are read against 0 to 1
	return p, caption, "", nil
}

// unitOf picks the unit for durations up to maxS seconds.
func unitOf(maxS float64) (float64, string) {
	switch {
	case maxS >= 3*3600:
		return 3600, "hours"
	case maxS >= 180:
		return 60, "minutes"
	default:
		return 1, "seconds"
	}
}

func stageChart(f *Figures, queue bool) (*plot.Plot, string, string, error) {
	what, title := "run time (start → end, every attempt)", "Run time per stage"
	if queue {
		what, title = "queue wait (submit, or the previous stage's end, → start)", "Queue wait per stage"
	}
	maxS := 0.0
	var parts []string
	have := false
	for _, s := range f.Stages {
		d := s.Run
		if queue {
			d = s.Queue
		}
		if d.Max != nil {
			maxS, have = math.Max(maxS, *d.Max), true
		}
		part := fmt.Sprintf("%s: %d jobs, median %s, p90 %s, max %s", s.Stage, d.Count, fmtP(d.Median, formatSeconds), fmtP(d.P90, formatSeconds), fmtP(d.Max, formatSeconds))
		if d.Unknown > 0 {
			part += fmt.Sprintf(", %d unknown", d.Unknown)
		}
		if d.Inconsistent > 0 {
			part += fmt.Sprintf(", %d inconsistent", d.Inconsistent)
		}
		parts = append(parts, part)
	}
	caption := "Each stage's " + what + ". " + strings.Join(parts, "; ") + "."
	if !have {
		return nil, caption, "no job times on record", nil
	}
	scale, unit := unitOf(maxS)
	p := newPlot(title, "", unit)
	names := make([]string, len(f.Stages))
	for i, s := range f.Stages {
		names[i] = string(s.Stage)
		d := s.Run
		if queue {
			d = s.Queue
		}
		if d.Count == 0 {
			continue
		}
		vs := make(plotter.Values, len(d.Values))
		for j, v := range d.Values {
			vs[j] = v / scale
		}
		if err := addBox(p, i, vs); err != nil {
			return nil, "", "", err
		}
	}
	p.NominalX(names...)
	p.X.Min, p.X.Max = -0.5, float64(len(names))-0.5
	return p, caption, "", nil
}

func wallChart(f *Figures) (*plot.Plot, string, string, error) {
	d := f.WallTime
	caption := fmt.Sprintf("Wall time (first submit → last job end) of the %d final episodes whose times are known: median %s, p90 %s, max %s; %d final episodes left out (times unknown).",
		d.Count, fmtP(d.Median, formatSeconds), fmtP(d.P90, formatSeconds), fmtP(d.Max, formatSeconds), d.Unknown)
	if d.Count == 0 {
		return nil, caption, "no final episode with known times", nil
	}
	scale, unit := unitOf(*d.Max)
	p := newPlot("Episode wall time", unit, "episodes")
	p.Y.Tick.Marker = countTicks{}
	p.Add(histogram(d.Bins, blue, scale))
	return p, caption, "", nil
}

// maxReasonBars is how many failure reasons the chart shows (the rest are
// in the table).
const maxReasonBars = 30

func outcomesChart(f *Figures) (*plot.Plot, string, string, error) {
	reasons := f.Reasons[:min(len(f.Reasons), maxReasonBars)]
	caption := fmt.Sprintf("Episodes by outcome (blue) and failures by stage and reason (orange; red: tampering, %d episodes).", f.Tampering.Count)
	if len(f.Reasons) > len(reasons) {
		caption += fmt.Sprintf(" The %d rarest reasons are left out of the chart.", len(f.Reasons)-len(reasons))
	}
	// Top to bottom: outcomes, then reasons; NominalY counts from the
	// bottom.
	var labels []string
	var outV, reasonV, tamperV plotter.Values
	for _, r := range slices.Backward(reasons) {
		label := r.Reason + " (" + r.Outcome + ")"
		if r.Stage != "" {
			label = string(r.Stage) + ": " + label
		}
		if r.Tampering {
			label += " [tampering]"
		}
		labels = append(labels, label)
		if r.Tampering {
			tamperV, reasonV = append(tamperV, float64(r.Count)), append(reasonV, 0)
		} else {
			reasonV, tamperV = append(reasonV, float64(r.Count)), append(tamperV, 0)
		}
	}
	for _, o := range slices.Backward(f.Outcomes) {
		labels = append(labels, o.Name)
		outV = append(outV, float64(o.Count))
	}
	p := newPlot("Outcomes and failure reasons", "episodes", "")
	add := func(vs plotter.Values, at int, c color.Color) error {
		if len(vs) == 0 {
			return nil
		}
		b, err := plotter.NewBarChart(vs, vg.Points(10))
		if err != nil {
			return err
		}
		b.Horizontal, b.XMin, b.Color = true, float64(at), c
		p.Add(b)
		return nil
	}
	if err := add(reasonV, 0, orange); err != nil {
		return nil, "", "", err
	}
	if err := add(tamperV, 0, red); err != nil {
		return nil, "", "", err
	}
	if err := add(outV, len(reasonV), blue); err != nil {
		return nil, "", "", err
	}
	p.NominalY(labels...)
	p.Y.Min, p.Y.Max = -0.5, float64(len(labels))-0.5
	p.X.Min = 0
	return p, caption, "", nil
}

func inFlightChart(f *Figures) (*plot.Plot, string, string, error) {
	in := f.InFlight
	caption := fmt.Sprintf("Episodes with a job running, over time (UTC): at most %d", in.Max)
	if in.MaxAt != nil {
		caption += " (first at " + in.MaxAt.UTC().Format("2006-01-02 15:04:05") + ")"
	}
	caption += fmt.Sprintf("; %d jobs of unfinished episodes taken as running until now, %d jobs of final episodes left out (end unknown).", in.Open, in.Unknown)
	if len(in.Steps) == 0 {
		return nil, caption, "no job start and end on record", nil
	}
	p := newPlot("Episodes in flight", "time (UTC)", "episodes running")
	timeAxis(p)
	l, err := plotter.NewLine(timeXYs{len(in.Steps), func(i int) (time.Time, float64) { return in.Steps[i].At, float64(in.Steps[i].Running) }})
	if err != nil {
		return nil, "", "", err
	}
	l.StepStyle, l.LineStyle.Color, l.LineStyle.Width = plotter.PostStep, blue, vg.Points(1)
	l.FillColor = color.RGBA{R: 0xc6, G: 0xdb, B: 0xef, A: 0xff}
	p.Add(l)
	p.Y.Min = 0
	return p, caption, "", nil
}

// CSS is the stylesheet of RenderHTML's page, which RenderFragment's
// markup expects: a page that embeds the fragment puts it in its <style>.
const CSS = `body { font-family: system-ui, sans-serif; margin: 1.5em auto; max-width: 80em; padding: 0 1em; color: #222; }
h1 { font-size: 1.4em; }
.summary { color: #444; }
.empty { font-size: 1.2em; padding: 2em; border: 1px dashed #999; text-align: center; }
.charts { display: grid; grid-template-columns: repeat(auto-fit, minmax(36em, 1fr)); gap: 1.5em; }
figure { margin: 0; }
svg.chart { width: 100%; height: auto; }
figcaption { font-size: 0.9em; color: #444; }
.nodata { padding: 2em; border: 1px dashed #bbb; text-align: center; color: #666; }
table { border-collapse: collapse; margin-top: 2em; font-size: 0.9em; width: 100%; }
th, td { border-bottom: 1px solid #ddd; padding: 0.25em 0.5em; text-align: left; vertical-align: top; }
th { cursor: pointer; user-select: none; background: #f4f4f4; position: sticky; top: 0; }
th[aria-sort=ascending]::after { content: " \25B2"; }
th[aria-sort=descending]::after { content: " \25BC"; }
td.num { text-align: right; font-variant-numeric: tabular-nums; }
tr.tampering td { background: #fde2e2; }
.detail { color: #666; font-size: 0.85em; }
`

// The page is pageHead, CSS and pageBody; pageBody draws the figures with
// figuresText (the template "figures": RenderFragment's markup), then the
// table's sorting.
const (
	pageHead = `<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{{.Title}}</title>
<style>
`
	pageBody = `</style>
</head>
<body>
<h1>{{.Title}}</h1>
{{template "figures" .}}
{{- if ne .F.Episodes 0}}
<script>
(function () {
  var table = document.getElementById("episodes");
  var heads = table.tHead.rows[0].cells;
  Array.prototype.forEach.call(heads, function (th, col) {
    th.addEventListener("click", function () {
      var asc = th.getAttribute("aria-sort") !== "ascending";
      var num = th.dataset.type === "num";
      var body = table.tBodies[0];
      var rows = Array.prototype.slice.call(body.rows);
      var key = function (tr) {
        var td = tr.cells[col];
        var v = td.dataset.v !== undefined ? td.dataset.v : td.textContent;
        return num ? (v === "" ? null : Number(v)) : v;
      };
      rows.sort(function (a, b) {
        var x = key(a), y = key(b);
        if (x === null || y === null) { return (x === null) - (y === null); }
        var c = num ? x - y : x.localeCompare(y);
        return asc ? c : -c;
      });
      Array.prototype.forEach.call(heads, function (h) { h.removeAttribute("aria-sort"); });
      th.setAttribute("aria-sort", asc ? "ascending" : "descending");
      rows.forEach(function (tr) { body.appendChild(tr); });
    });
  });
})();
</script>
{{- end}}
</body>
</html>
`
	figuresText = `<p class="summary">Generated {{.Generated}} from the ledger: {{.F.Episodes}} episodes, {{.F.Finished}} final{{if .F.Tampering.Count}}, <strong>{{.F.Tampering.Count}} flagged for tampering</strong>{{end}}.</p>
{{- if eq .F.Episodes 0}}
<p id="no-episodes" class="empty">{{.NoEpisodes}}</p>
{{- else}}
<section class="charts">
{{- range .Charts}}
<figure id="{{.ID}}">
{{- if .SVG}}
{{.SVG}}
{{- else}}
<p class="nodata">{{.Empty}}</p>
{{- end}}
<figcaption>{{.Caption}}</figcaption>
</figure>
{{- end}}
</section>
<table id="episodes">
<thead><tr><th data-type="text">episode</th><th data-type="text">labels</th><th data-type="text">outcome</th><th data-type="text">failure reason</th><th data-type="num">reward</th><th data-type="text">GPU</th><th data-type="num">created (UTC)</th><th data-type="num">wall time</th></tr></thead>
<tbody>
{{- range .Rows}}
<tr{{if .Tampering}} class="tampering"{{end}}><td>{{.Episode}}{{if .Cluster}} <span class="cluster">on {{.Cluster}}</span>{{end}}</td><td>{{.LabelText}}</td><td>{{.Outcome}}{{if .Tampering}} (tampering){{end}}</td><td>{{.Reason}}{{if .Detail}}<div class="detail">{{.Detail}}</div>{{end}}</td><td class="num" data-v="{{.RewardKey}}">{{.RewardText}}</td><td>{{.GPUText}}</td><td class="num" data-v="{{.CreatedKey}}">{{.CreatedText}}</td><td class="num" data-v="{{.WallKey}}">{{.WallText}}</td></tr>
{{- end}}
</tbody>
</table>
{{- end}}`
)

var pageTemplate = func() *template.Template {
	t := template.Must(template.New("report").Parse(pageHead + CSS + pageBody))
	template.Must(t.New("figures").Parse(figuresText))
	return t
}()

// addBox adds the report's box plot of vs at x position i to p.
func addBox(p *plot.Plot, i int, vs plotter.Values) error {
	b, err := plotter.NewBoxPlot(vg.Points(40), float64(i), vs)
	if err != nil {
		return err
	}
	b.FillColor = color.RGBA{R: 0xc6, G: 0xdb, B: 0xef, A: 0xff}
	b.GlyphStyle.Radius = vg.Points(1.5)
	p.Add(b)
	return nil
}
