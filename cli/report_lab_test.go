package cli

// Issue #23 on the lab, through the binary: episodes of mixed outcomes
// (scored, the policy's failures, masked) watched to the end, then `report`
// over their ledger, opened in headless Chromium with the network off.

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/nemorl/nemorl-slurm/internal/chromium"
	"github.com/nemorl/nemorl-slurm/internal/labtest"
	rpt "github.com/nemorl/nemorl-slurm/report"
)

func TestReportLab(t *testing.T) {
	t.Parallel() // with the package's other shared-lab tests, after its LockLab ones
	x := newLabCLI(t)
	requireStandIns(t)
	requireChromium(t)
	state := t.TempDir()
	// 70 % scored, 15 % no_patch, 10 % evals without a record (masked),
	// 5 % with two (the policy's 0 without isolation): n episodes, 20 by
	// default (the lab runs two jobs at a time), NEMORL_REPORT_EPISODES=100
	// for the README's picture.
	n := 20
	if v := os.Getenv("NEMORL_REPORT_EPISODES"); v != "" {
		var err error
		if n, err = strconv.Atoi(v); err != nil || n < 20 || n%20 != 0 {
			t.Fatalf("NEMORL_REPORT_EPISODES=%q: want a multiple of 20, at least 20", v)
		}
	}
	mix := []struct {
		label  string
		count  int
		config string
		set    []string
	}{
		{"scored", n * 70 / 100, x.config(t, ""), nil},
		{"no-patch", n * 15 / 100, x.config(t, "author", "--no-patch"), nil},
		{"no-record", n * 10 / 100, x.config(t, "eval", "--no-record"), []string{"--set", "episodes.retries=0"}},
		{"two-records", n * 5 / 100, x.config(t, "eval", "--two-records"), nil},
	}
	// In n/20 rounds of 14, 3, 2 and 1, so the outcomes are spread over
	// the creation times as in a real run.
	var eps []string
	rounds := n / 20
	for i := 0; i < rounds*len(mix); i++ {
		m := mix[i%len(mix)]
		args := append([]string{"--json", "--config", m.config, "submit", "--count", strconv.Itoa(m.count / rounds), "--label", "mix=" + m.label}, m.set...)
		r := x.run(t, state, 2*quickTimeout, args...)
		r.want(t, ExitOK)
		for _, ep := range submittedIDs(t, r) {
			eps = append(eps, ep)
			t.Cleanup(func() { cleanupEpisode(t, ep) })
		}
	}
	if len(eps) != n {
		t.Fatalf("submitted %d episodes, want %d", len(eps), n)
	}
	start := time.Now()
	// No --config: each episode with its own (with one, watch and report
	// take that config's episodes only).
	w := x.run(t, state, 15*time.Minute, "watch")
	if w.code != ExitInfra {
		t.Fatalf("watch of the mix: exit %d, want %d (the masked episodes')\n%s", w.code, ExitInfra, w)
	}
	t.Logf("%d episodes watched to the end in %s", n, time.Since(start).Round(time.Second))

	// The figures as data: every episode, each part of the mix.
	r := x.run(t, state, quickTimeout, "--json", "report")
	r.want(t, ExitOK)
	var fig rpt.Figures
	oneJSON(t, r, &fig)
	if fig.Episodes != n || len(fig.Rows) != n {
		t.Fatalf("report --json: %d episodes, %d rows, want %d", fig.Episodes, len(fig.Rows), n)
	}
	outcomes := map[string]int{}
	for _, e := range fig.Rows {
		outcomes[e.Outcome]++
	}
	// The two-records evals are the policy's 0 here (no isolation).
	wantScored, wantPolicy, wantMasked := mix[0].count, mix[1].count+mix[3].count, mix[2].count
	if outcomes["scored"] != wantScored || outcomes["policy_failure"] != wantPolicy || outcomes["infra_failure"] != wantMasked {
		t.Errorf("report --json outcomes %v, want %d scored, %d policy_failure, %d infra_failure", outcomes, wantScored, wantPolicy, wantMasked)
	}
	sel := x.run(t, state, quickTimeout, "--json", "report", "--label", "mix=no-patch")
	sel.want(t, ExitOK)
	var only rpt.Figures
	oneJSON(t, sel, &only)
	if only.Episodes != mix[1].count || only.Reward.PolicyFailures != mix[1].count {
		t.Errorf("report --label mix=no-patch: %d episodes (%d policy failures), want %d", only.Episodes, only.Reward.PolicyFailures, mix[1].count)
	}

	// The page, in a real browser with the network off.
	out := filepath.Join(t.TempDir(), "report.html")
	x.run(t, state, quickTimeout, "report", "--out", out, "--title", fmt.Sprintf("%d lab episodes", n)).want(t, ExitOK)
	seen := loadPage(t, "the report", "file://"+out, chromium.Options{}, true, os.Getenv("NEMORL_REPORT_SCREENSHOT"), 2400)
	if seen.Rows != n {
		t.Errorf("the report's table has %d rows in Chromium, want %d", seen.Rows, n)
	}
	b, err := json.Marshal(outcomes)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("report of %d lab episodes: outcomes %s, %d charts present, no console error", n, b, len(rpt.ChartIDs))
}

// submittedIDs are the episodes a submit --json printed: one object, or
// with --count N > 1 {"episodes": [...]}.
func submittedIDs(t *testing.T, r cliRun) []string {
	t.Helper()
	var doc struct {
		Episode  string `json:"episode"`
		Episodes []struct {
			Episode string `json:"episode"`
		} `json:"episodes"`
	}
	oneJSON(t, r, &doc)
	var ids []string
	if doc.Episode != "" {
		ids = append(ids, doc.Episode)
	}
	for _, e := range doc.Episodes {
		ids = append(ids, e.Episode)
	}
	if len(ids) == 0 {
		t.Fatalf("submit printed no episode\n%s", r)
	}
	return ids
}

// pageView is what chartsScript saw of a report or /ui page.
type pageView struct {
	Charts   map[string]bool `json:"charts"`
	Rows     int             `json:"rows"`
	Inflight string          `json:"inflight"`
}

// loadPage opens url in headless Chromium under opt with chartsScript:
// every chart of report.ChartIDs present (and drawn, with drawn), nothing
// logged wrong. png, when set, gets a screenshot 1100 wide and height high.
func loadPage(t *testing.T, what, url string, opt chromium.Options, drawn bool, png string, height int) pageView {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	opt.Script = chartsScript
	if png != "" { // a PNG of the page, for the README
		opt.Width, opt.Height, opt.Screenshot = 1100, height, png
	}
	page, err := chromium.Load(ctx, url, opt)
	if err != nil {
		t.Fatalf("chromium, %s: %v", what, err)
	}
	var v pageView
	if err := json.Unmarshal(page.Result, &v); err != nil {
		t.Fatalf("%s in Chromium answered %s: %v", what, page.Result, err)
	}
	for _, id := range rpt.ChartIDs {
		if has, present := v.Charts[id]; !present || drawn && !has {
			t.Errorf("%s in Chromium: chart #%s present %v, drawn %v", what, id, present, has)
		}
	}
	browserClean(t, page)
	return v
}

// chartsScript runs in a report or /ui page once it loaded: which of the
// charts hold an SVG, and the rows of the episodes table.
const chartsScript = `(() => {
  const charts = {};
  document.querySelectorAll("figure[id]").forEach((f) => { charts[f.id] = !!f.querySelector("svg"); });
  const table = document.getElementById("episodes");
  const now = document.getElementById("inflight-now");
  return {charts: charts, rows: table ? table.tBodies[0].rows.length : -1, inflight: now ? now.textContent.trim() : null};
})()`

// requireChromium skips t when there is no Chromium, and fails it under
// NEMORL_REQUIRE_LAB=1 (CI, where lab/up installs Debian's chromium).
func requireChromium(t *testing.T) {
	t.Helper()
	_, err := chromium.Find()
	labtest.Need(t, "chromium", err)
}

// browserClean fails t on any error or warning the page logged.
func browserClean(t *testing.T, p *chromium.Page) {
	t.Helper()
	for _, m := range p.Messages {
		if m.Level == chromium.LevelError || m.Level == chromium.LevelWarning {
			t.Errorf("the browser logged: %s", m)
		}
	}
}
