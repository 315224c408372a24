package report

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/nemorl/nemorl-slurm/ledger"
	"github.com/nemorl/nemorl-slurm/record"
	"github.com/nemorl/nemorl-slurm/rules"
)

var (
	h100 = &record.GPU{Name: "NVIDIA H100 80GB HBM3", MemoryMiB: 81559, Count: 1}
	a100 = &record.GPU{Name: "NVIDIA A100-SXM4-80GB", MemoryMiB: 81920, Count: 1}
)

// gpusOf stands for rules.Outcome's GPU fields: the GPUs by episode.
func gpusOf(eval, train map[string]*record.GPU) func(*rules.Outcome) (*record.GPU, *record.GPU) {
	return func(o *rules.Outcome) (*record.GPU, *record.GPU) { return eval[o.Episode], train[o.Episode] }
}

// TestReportRewardByGPU: the scored episodes' rewards by their eval job's
// GPU model, policy failures counted apart, the episodes whose outcome
// names no GPU last; each row carries its GPUs.
func TestReportRewardByGPU(t *testing.T) {
	es := []*ledger.Entry{
		full("h1", 0, rules.Scored, rw(0.5)),
		full("h2", 1, rules.Scored, rw(0.25)),
		full("h3", 2, rules.Scored, rw(0.75)),
		failed(full("h4", 3, rules.PolicyFailure, rw(0)), "train", "trainer_failed", false),
		full("a1", 4, rules.Scored, rw(0.125)),
		full("n1", 5, rules.Scored, rw(1)),
		failed(full("m1", 6, rules.InfraFailure, nil), "eval", "node_fail", false),
		full("u1", 7, "", nil),
	}
	eval := map[string]*record.GPU{"h1": h100, "h2": h100, "h3": h100, "a1": a100, "m1": a100}
	train := map[string]*record.GPU{"h1": h100, "h4": h100, "a1": h100}
	f := build(es, t0.Add(time.Hour), gpusOf(eval, train))
	type got struct {
		gpu            string
		scored, failed int
		median         float64
	}
	var gs []got
	for _, g := range f.RewardByGPU {
		gs = append(gs, got{g.GPU, g.Scored.Count, g.PolicyFailures, val(g.Scored.Median)})
	}
	want := []got{{"NVIDIA H100 80GB HBM3", 3, 0, 0.5}, {"NVIDIA A100-SXM4-80GB", 1, 0, 0.125}, {"", 1, 1, 1}}
	if len(gs) != len(want) {
		t.Fatalf("reward by GPU %+v, want %+v", gs, want)
	}
	for i := range want {
		if gs[i] != want[i] {
			t.Errorf("group %d: %+v, want %+v", i, gs[i], want[i])
		}
	}
	rows := map[string]Row{}
	for _, r := range f.Rows {
		rows[r.Episode] = r
	}
	if r := rows["a1"]; r.GPU != a100 || r.TrainGPU != h100 {
		t.Errorf("row a1: GPU %v, train GPU %v", r.GPU, r.TrainGPU)
	}
	if r := rows["n1"]; r.GPU != nil || r.TrainGPU != nil {
		t.Errorf("row n1 names a GPU: %v %v", r.GPU, r.TrainGPU)
	}
	b, err := json.Marshal(f)
	if err != nil {
		t.Fatal(err)
	}
	for _, w := range []string{`"reward_by_gpu":[{"gpu":"NVIDIA H100 80GB HBM3","scored":{"count":3`, `"gpu":{"name":"NVIDIA A100-SXM4-80GB","memory_mib":81920,"count":1},"train_gpu":{"name":"NVIDIA H100 80GB HBM3"`} {
		if !strings.Contains(string(b), w) {
			t.Errorf("report --json lacks %s", w)
		}
	}

	// The page: the chart with a box per model, the caption naming each,
	// the table's GPU column (the train GPU where it differs), escaped.
	eval["h2"] = &record.GPU{Name: `<script>alert("gpu")</script>`, MemoryMiB: 1024, Count: 2}
	var page bytes.Buffer
	if err := RenderHTML(&page, build(es, t0.Add(time.Hour), gpusOf(eval, train)), "gpus"); err != nil {
		t.Fatal(err)
	}
	html := page.String()
	i := strings.Index(html, `<figure id="chart-reward-gpu">`)
	if i < 0 {
		t.Fatal("no reward-by-GPU figure")
	}
	fig := html[i : i+strings.Index(html[i:], "</figure>")]
	for _, w := range []string{"<svg", "Reward by GPU model", "NVIDIA H100 80GB HBM3: 2 scored (median 0.625)", "GPU not named: 1 scored (median 1.000), 1 policy failures", "H100 80GB HBM3"} {
		if !strings.Contains(fig, w) {
			t.Errorf("the figure lacks %q:\n%.3000s", w, fig)
		}
	}
	for _, w := range []string{"<td>NVIDIA A100-SXM4-80GB (81920 MiB) (train: NVIDIA H100 80GB HBM3 (81559 MiB))</td>", "<td>NVIDIA H100 80GB HBM3 (81559 MiB)</td>", "<td>train: NVIDIA H100 80GB HBM3 (81559 MiB)</td>",
		`<td>2 × &lt;script&gt;alert(&#34;gpu&#34;)&lt;/script&gt; (1024 MiB)</td>`, `<th data-type="text">GPU</th>`} {
		if !strings.Contains(html, w) {
			t.Errorf("the page lacks %q", w)
		}
	}
	if strings.Contains(html, `<script>alert("gpu")`) {
		t.Error("a GPU name reached the page unescaped")
	}
}

// TestReportRewardByGPUNoneNamed: without GPUs on record (an outcome that
// does not carry them) the figure still draws, one box of "GPU not named";
// with no scored episode it says so.
func TestReportRewardByGPUNoneNamed(t *testing.T) {
	f := Build([]*ledger.Entry{full("s1", 0, rules.Scored, rw(0.5)), full("s2", 1, rules.Scored, rw(0.25))}, t0.Add(time.Hour))
	if len(f.RewardByGPU) != 1 || f.RewardByGPU[0].GPU != "" || f.RewardByGPU[0].Scored.Count != 2 {
		t.Fatalf("reward by GPU %+v", f.RewardByGPU)
	}
	html := render(t, f, "none named")
	if !strings.Contains(html, "GPU not named") || !strings.Contains(html, "<td>-</td>") {
		t.Errorf("the page does not say no GPU was named")
	}
	f = Build([]*ledger.Entry{failed(full("p1", 0, rules.PolicyFailure, rw(0)), "author", "no_patch", false)}, t0.Add(time.Hour))
	html = render(t, f, "no scores")
	i := strings.Index(html, `<figure id="chart-reward-gpu">`)
	if i < 0 || !strings.Contains(html[i:], `<p class="nodata">no scored episodes</p>`) {
		t.Errorf("a report without scores: the GPU figure does not say so")
	}
}

// TestOutcomeGPUs: the GPUs are the outcome's GPU and TrainGPU, where they
// name a model; an outcome without them (or with an empty one) names none.
func TestOutcomeGPUs(t *testing.T) {
	if e, tr := OutcomeGPUs(&rules.Outcome{GPU: h100, TrainGPU: a100}); e != h100 || tr != a100 {
		t.Errorf("both: %v %v", e, tr)
	}
	if e, tr := OutcomeGPUs(&rules.Outcome{GPU: h100, TrainGPU: &record.GPU{}}); e != h100 || tr != nil {
		t.Errorf("an empty train GPU: %v %v", e, tr)
	}
	if e, tr := OutcomeGPUs(nil); e != nil || tr != nil {
		t.Errorf("nil outcome: %v %v", e, tr)
	}
	if e, tr := OutcomeGPUs(&rules.Outcome{Outcome: rules.Scored}); e != nil || tr != nil {
		t.Errorf("an outcome with no GPU on it names %v %v", e, tr)
	}
}
