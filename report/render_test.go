package report

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"regexp"
	"runtime"
	"runtime/metrics"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nemorl/nemorl-slurm/ledger"
	"github.com/nemorl/nemorl-slurm/rules"
	"github.com/nemorl/nemorl-slurm/stages"
)

// synthetic makes n ledger entries with mixed outcomes: mostly scored,
// some policy and infra failures, a few integrity violations (some of them
// tampering), a few unfinished; some jobs' times unknown.
func synthetic(n int, seed uint64) []*ledger.Entry {
	r := rand.New(rand.NewPCG(seed, 1))
	reasons := map[rules.Kind][]string{
		rules.PolicyFailure:      {"no_patch", "patch_does_not_apply", "trainer_crashed"},
		rules.InfraFailure:       {"node_fail", "preempted", "cancelled", "job_lost"},
		rules.IntegrityViolation: {"foreign_record", "forged_eval_record", rules.ReasonLedgerTampered},
	}
	out := make([]*ledger.Entry, 0, n)
	for i := range n {
		id := fmt.Sprintf("ep-%06d", i)
		c := t0.Add(time.Duration(i) * 37 * time.Second)
		e := &ledger.Entry{Episode: id, Created: c, Jobs: map[stages.Stage]*ledger.Submission{},
			Labels: map[string]string{"sweep": fmt.Sprintf("lr%d", i%4)}}
		kind := rules.Scored
		switch x := r.IntN(100); {
		case x < 12:
			kind = rules.PolicyFailure
		case x < 22:
			kind = rules.InfraFailure
		case x < 25:
			kind = rules.IntegrityViolation
		case x < 28:
			kind = ""
		}
		sums := map[stages.Stage]rules.JobSummary{}
		t := c
		for si, s := range stages.All {
			sub := &ledger.Submission{JobID: fmt.Sprint(1000000 + 3*i + si), Intent: t, Submitted: t.Add(time.Second)}
			if si > 0 {
				sub.After = e.Jobs[stages.All[si-1]].JobID
			}
			e.Jobs[s] = sub
			start := t.Add(time.Duration(r.ExpFloat64()*120) * time.Second)
			end := start.Add(time.Duration(600+r.IntN(3000)) * time.Second)
			sum := rules.JobSummary{ID: sub.JobID, State: "COMPLETED", Start: start, End: end}
			if r.IntN(50) == 0 {
				sum.Start, sum.End = time.Time{}, time.Time{} // sacct reported nothing
			}
			sums[s] = sum
			t = end
		}
		if kind == "" {
			e.Ended = map[stages.Stage]rules.JobSummary{stages.Author: sums[stages.Author]}
		} else {
			o := &rules.Outcome{Episode: id, Outcome: kind, Jobs: sums}
			switch kind {
			case rules.Scored:
				v := float64(r.IntN(241)) / 240
				o.Reward = &v
			case rules.PolicyFailure:
				v := 0.0
				o.Reward = &v
			}
			if rs := reasons[kind]; rs != nil {
				o.FailureReason = rs[r.IntN(len(rs))]
				o.FailureStage = stages.All[r.IntN(3)]
				o.Tampering = kind == rules.IntegrityViolation && r.IntN(2) == 0
			}
			e.Outcome = o
		}
		out = append(out, e)
	}
	return out
}

var reExternal = regexp.MustCompile(`(?i)(src|href)\s*=\s*["']?\s*(https?:)?//`)

func render(t *testing.T, f Figures, title string) string {
	t.Helper()
	var b bytes.Buffer
	if err := RenderHTML(&b, f, title); err != nil {
		t.Fatal(err)
	}
	return b.String()
}

func TestReportRenderHTML(t *testing.T) {
	es := synthetic(300, 1)
	es[0].Labels["note"] = `<script>alert("label")</script>`
	es[1].Outcome = &rules.Outcome{Episode: es[1].Episode, Outcome: rules.InfraFailure, FailureStage: "eval",
		FailureReason: `<img src=x onerror=alert(1)>`, Detail: `"><script>alert('detail')</script>`, Jobs: es[1].Outcome.Jobs}
	html := render(t, Build(es, t0.Add(30*24*time.Hour)), `runs <b>&</b>`)
	for _, id := range ChartIDs {
		i := strings.Index(html, `<figure id="`+id+`">`)
		if i < 0 {
			t.Errorf("no figure %s", id)
			continue
		}
		end := strings.Index(html[i:], "</figure>")
		if !strings.Contains(html[i:i+end], "<svg") {
			t.Errorf("figure %s has no SVG", id)
		}
	}
	if n := strings.Count(html, "<svg"); n != len(ChartIDs) {
		t.Errorf("%d SVGs, want %d", n, len(ChartIDs))
	}
	if m := reExternal.FindString(html); m != "" {
		t.Errorf("an external reference: %q", m)
	}
	for _, bad := range []string{`<script>alert`, `<img src=x`, `<b>&</b>`, `<?xml`, "<link", "@import", "url(http"} {
		if strings.Contains(html, bad) {
			t.Errorf("the page contains %q", bad)
		}
	}
	if strings.Count(html, "<script>") != 1 {
		t.Errorf("%d scripts, want only the table's", strings.Count(html, "<script>"))
	}
	for _, want := range []string{`&lt;script&gt;alert(&#34;label&#34;)`, `eval: &lt;img src=x onerror=alert(1)&gt;`, `<title>runs &lt;b&gt;&amp;&lt;/b&gt;</title>`, `<table id="episodes">`, `data-type="num"`} {
		if !strings.Contains(html, want) {
			t.Errorf("the page lacks %q", want)
		}
	}
	if n := strings.Count(html, "<tr"); n != 301 {
		t.Errorf("%d table rows, want 300 and the header", n)
	}
	if strings.Contains(html, "no-episodes") {
		t.Errorf("a full page says no episodes")
	}
}

// TestReportRenderHTMLEmpty: no episodes is a clear page, not an error; a
// selection with nothing to chart keeps every figure, saying why.
func TestReportRenderHTMLEmpty(t *testing.T) {
	html := render(t, Build(nil, t0), "report")
	if !strings.Contains(html, `id="no-episodes"`) || !strings.Contains(html, "No episodes") || strings.Contains(html, "<svg") {
		t.Errorf("empty page:\n%s", html)
	}
	// Only unfinished episodes, nothing ran yet.
	es := []*ledger.Entry{{Episode: "ep-1", Created: t0, Jobs: map[stages.Stage]*ledger.Submission{stages.Author: {JobID: "1", Submitted: t0}}}}
	html = render(t, Build(es, t0.Add(time.Hour)), "report")
	for _, id := range ChartIDs {
		if !strings.Contains(html, `<figure id="`+id+`">`) {
			t.Errorf("no figure %s", id)
		}
	}
	for _, want := range []string{"no scored episodes", "no rewarded episodes", "no job times on record", "no final episode with known times", "no job start and end on record"} {
		if !strings.Contains(html, want) {
			t.Errorf("the page lacks %q", want)
		}
	}
	if n := strings.Count(html, "<svg"); n != 1 {
		t.Errorf("%d SVGs, want 1 (the outcomes: one unfinished)", n)
	}
}

// BenchmarkReport10k builds the figures of 10,000 entries with mixed
// outcomes and renders their HTML; peak-heap-MB is the most heap the live
// objects took during the run (sampled every millisecond).
func BenchmarkReport10k(b *testing.B) {
	es := synthetic(10000, 7)
	now := t0.Add(30 * 24 * time.Hour)
	runtime.GC()
	stop, peak := heapSampler()
	var size int
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		var buf bytes.Buffer
		if err := RenderHTML(&buf, Build(es, now), "bench"); err != nil {
			b.Fatal(err)
		}
		size = buf.Len()
	}
	b.StopTimer()
	stop()
	b.ReportMetric(float64(*peak)/(1<<20), "peak-heap-MB")
	b.ReportMetric(float64(size)/(1<<20), "html-MB")
}

// heapSampler samples the heap's live objects until stop is called (which
// waits for the sampler to end).
func heapSampler() (stop func(), peak *uint64) {
	peak = new(uint64)
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		s := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}}
		tick := time.NewTicker(time.Millisecond)
		defer tick.Stop()
		for {
			metrics.Read(s)
			*peak = max(*peak, s[0].Value.Uint64())
			select {
			case <-done:
				return
			case <-tick.C:
			}
		}
	}()
	return func() { close(done); wg.Wait() }, peak
}

// TestReportRenderFragment: the fragment is the page's body below its
// title, without the page around it or its script; with no episodes it
// says what it is given.
func TestReportRenderFragment(t *testing.T) {
	es := synthetic(50, 3)
	es[0].Labels["note"] = `<script>alert("label")</script>`
	f := Build(es, t0.Add(30*24*time.Hour))
	var b bytes.Buffer
	if err := RenderFragment(&b, f, "unused: there are episodes"); err != nil {
		t.Fatal(err)
	}
	frag := b.String()
	page := render(t, f, "report")
	start := strings.Index(page, "</h1>\n") + len("</h1>\n")
	if !strings.Contains(page[start:], frag+"\n<script>") {
		t.Errorf("the fragment is not the page's body below its title:\n%.400s", frag)
	}
	for _, id := range ChartIDs {
		if !strings.Contains(frag, `<figure id="`+id+`">`) {
			t.Errorf("no figure %s", id)
		}
	}
	for _, bad := range []string{"<script", "<html", "<head", "<style", "<body", "<!DOCTYPE", "unused: there are episodes"} {
		if strings.Contains(frag, bad) {
			t.Errorf("the fragment contains %q", bad)
		}
	}
	if !strings.Contains(frag, `<table id="episodes">`) || !strings.Contains(frag, `&lt;script&gt;alert(&#34;label&#34;)`) {
		t.Errorf("the fragment lacks the table or its escaped label")
	}
	if m := reExternal.FindString(frag); m != "" {
		t.Errorf("an external reference: %q", m)
	}

	for empty, want := range map[string]string{"": "No episodes: nothing in the ledger matches this selection.", "Nothing <yet>.": "Nothing &lt;yet&gt;."} {
		b.Reset()
		if err := RenderFragment(&b, Build(nil, t0), empty); err != nil {
			t.Fatal(err)
		}
		if got := b.String(); !strings.Contains(got, `<p id="no-episodes" class="empty">`+want+`</p>`) || strings.Contains(got, "<figure") {
			t.Errorf("empty fragment (%q):\n%s", empty, got)
		}
	}
	if !strings.Contains(CSS, "svg.chart") || strings.Contains(CSS, "</style") || !strings.Contains(page, "<style>\n"+CSS+"</style>") {
		t.Errorf("CSS is not the page's stylesheet")
	}
}

func TestTimeTickFormat(t *testing.T) {
	for _, c := range []struct {
		span float64
		want string
	}{
		{0, "15:04:05.00"},
		{1.2, "15:04:05.00"},
		{10, "15:04:05"},
		{7 * 60, "15:04:05"},
		{2 * 3600, "15:04:05"},
		{2*3600 + 1, "01-02\n15:04"},
		{3 * 86400, "01-02\n15:04"},
		{30 * 86400, "2006-01-02"},
	} {
		if got := timeTickFormat(c.span); got != c.want {
			t.Errorf("timeTickFormat(%v) = %q, want %q", c.span, got, c.want)
		}
	}
	// The labelled ticks of a seven-minute run and of a batch submitted
	// within a second carry enough of the clock to differ.
	base := float64(time.Date(2026, 12, 3, 9, 29, 0, 0, time.UTC).Unix())
	for _, span := range []float64{1.2, 7 * 60, 5 * 3600, 20 * 86400} {
		seen := map[string]bool{}
		for _, tk := range (spanTimeTicks{}).Ticks(base, base+span) {
			if tk.Label != "" {
				if seen[tk.Label] {
					t.Errorf("tick label %q twice on an axis of %v s", tk.Label, span)
				}
				seen[tk.Label] = true
			}
		}
		if len(seen) < 2 {
			t.Errorf("axis of %v s has labels %v, want at least two", span, seen)
		}
	}
}

func TestCountTicks(t *testing.T) {
	for _, max := range []float64{1, 2, 3, 7, 250} {
		labels := 0
		for _, tk := range (countTicks{}).Ticks(0, max) {
			if tk.Label == "" {
				continue
			}
			labels++
			if tk.Value != float64(int(tk.Value)) {
				t.Errorf("count axis 0..%v labels %v (%q)", max, tk.Value, tk.Label)
			}
		}
		if labels < 2 {
			t.Errorf("count axis 0..%v has %d labels, want at least 2", max, labels)
		}
	}
}
