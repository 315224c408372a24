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
		var many struct {
			Episode  string `json:"episode"` // --count 1: one object
			Episodes []struct {
				Episode string `json:"episode"`
			} `json:"episodes"`
		}
		oneJSON(t, r, &many)
		if many.Episode != "" {
			many.Episodes = append(many.Episodes, struct {
				Episode string `json:"episode"`
			}{many.Episode})
		}
		if len(many.Episodes) == 0 {
			t.Fatalf("submit --count %d: no episodes\n%s", m.count, r)
		}
		for _, e := range many.Episodes {
			eps = append(eps, e.Episode)
			t.Cleanup(func() { cleanupEpisode(t, e.Episode) })
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
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	page, err := chromium.Load(ctx, "file://"+out, chromium.Options{Script: chartsScript})
	if err != nil {
		t.Fatalf("chromium: %v", err)
	}
	var seen struct {
		Charts map[string]bool `json:"charts"`
		Rows   int             `json:"rows"`
	}
	if err := json.Unmarshal(page.Result, &seen); err != nil {
		t.Fatalf("the page's answer %s: %v", page.Result, err)
	}
	for _, id := range rpt.ChartIDs {
		if !seen.Charts[id] {
			t.Errorf("the report in Chromium has no chart #%s with an SVG", id)
		}
	}
	if seen.Rows != n {
		t.Errorf("the report's table has %d rows in Chromium, want %d", seen.Rows, n)
	}
	browserClean(t, page)
	if png := os.Getenv("NEMORL_REPORT_SCREENSHOT"); png != "" {
		if err := chromium.Screenshot(ctx, "file://"+out, png, 1100, 2400); err != nil {
			t.Errorf("screenshot: %v", err)
		}
	}
	b, err := json.Marshal(outcomes)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("report of %d lab episodes: outcomes %s, %d charts present, no console error", n, b, len(rpt.ChartIDs))
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
