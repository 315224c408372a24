package report

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nemorl/nemorl-slurm/internal/chromium"
	"github.com/nemorl/nemorl-slurm/internal/labtest"
	"github.com/nemorl/nemorl-slurm/ledger"
	"github.com/nemorl/nemorl-slurm/rules"
)

// browserOrSkip skips t when there is no Chromium, and fails it under
// NEMORL_REQUIRE_LAB=1 (CI, where lab/up installs Debian's chromium).
func browserOrSkip(t *testing.T) {
	t.Helper()
	_, err := chromium.Find()
	labtest.Need(t, "chromium", err)
}

// writeReport renders f to a file and returns its file:// URL.
func writeReport(t *testing.T, f Figures, title string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "report.html")
	if err := os.WriteFile(p, []byte(render(t, f, title)), 0o644); err != nil {
		t.Fatal(err)
	}
	return "file://" + p
}

// pageClean fails t on any error or warning the page logged, on stderr's
// console lines of the page too (Chromium's own lines, and the console of
// its chrome:// pages, are not the report's).
func pageClean(t *testing.T, p *chromium.Page, url string) {
	t.Helper()
	for _, m := range p.Messages {
		if m.Level == chromium.LevelError || m.Level == chromium.LevelWarning {
			t.Errorf("the browser logged: %s", m)
		} else {
			t.Logf("the browser logged: %s", m)
		}
	}
	for _, l := range p.Log {
		if m, ok := l.Console(); ok && m.URL == url {
			t.Errorf("console line on stderr: %s", l)
		}
	}
}

// inBrowser runs in the report page once it loaded: it measures the
// charts, then drives the table's sorting by clicks.
const inBrowser = `((ids) => {
  const charts = ids.map((id) => {
    const el = document.getElementById(id);
    const svg = el && el.tagName === "FIGURE" ? el.querySelector("svg") : null;
    const r = svg ? svg.getBoundingClientRect() : {width: 0, height: 0};
    return {id: id, present: !!el, svg: !!svg, width: r.width, height: r.height};
  });
  const table = document.getElementById("episodes");
  const heads = Array.from(table.tHead.rows[0].cells);
  const col = (name) => heads.findIndex((h) => h.textContent.trim() === name);
  const keys = (i) => Array.from(table.tBodies[0].rows).map((tr) => tr.cells[i].dataset.v !== undefined ? tr.cells[i].dataset.v : tr.cells[i].textContent);
  const out = {charts: charts, rows: table.tBodies[0].rows.length, cells: table.tBodies[0].rows[0].cells.length};
  const reward = col("reward"), episode = col("episode");
  heads[reward].click();
  out.ascending = keys(reward);
  out.ascendingSort = heads[reward].getAttribute("aria-sort");
  heads[reward].click();
  out.descending = keys(reward);
  out.descendingSort = heads[reward].getAttribute("aria-sort");
  heads[episode].click();
  out.episodes = keys(episode);
  out.rewardSortAfter = heads[reward].getAttribute("aria-sort");
  return out;
})(IDS)`

type browserResult struct {
	Charts []struct {
		ID            string
		Present, SVG  bool
		Width, Height float64
	}
	Rows, Cells                   int
	Ascending, Descending         []string
	AscendingSort, DescendingSort string
	Episodes                      []string
	RewardSortAfter               *string
}

// rewardsSorted says whether keys (data-v of the reward column) are
// sorted (descending: reversed), the rows without a reward last.
func rewardsSorted(keys []string, descending bool) bool {
	var vs []float64
	blank := false
	for _, k := range keys {
		if k == "" {
			blank = true
			continue
		}
		if blank {
			return false // a reward after a row without one
		}
		v, err := strconv.ParseFloat(k, 64)
		if err != nil {
			return false
		}
		vs = append(vs, v)
	}
	if descending {
		slices.Reverse(vs)
	}
	return slices.IsSorted(vs)
}

// mixedLedger is 150 entries of every outcome: scored with rewards,
// policy failures at 0, infra failures (no reward: masked), integrity
// violations (tampering among them), unfinished.
func mixedLedger() []*ledger.Entry {
	es := synthetic(150, 5)
	for _, e := range es { // one scored episode turned into tampering
		if o := e.Outcome; o != nil && o.Outcome == rules.Scored {
			o.Outcome, o.Reward = rules.IntegrityViolation, nil
			o.FailureStage, o.FailureReason, o.Tampering = "eval", rules.ReasonLedgerTampered, true
			break
		}
	}
	return es
}

// TestReportInBrowser: the report of a ledger of mixed outcomes, opened
// by headless Chromium from a file with the network off, has every chart
// laid out as an SVG, one table row per episode, a table that sorts on a
// click, and logs nothing wrong.
func TestReportInBrowser(t *testing.T) {
	browserOrSkip(t)
	es := mixedLedger()
	f := Build(es, t0.Add(30*24*time.Hour))
	for _, k := range []rules.Kind{rules.Scored, rules.PolicyFailure, rules.InfraFailure, rules.IntegrityViolation} {
		if outcomeCount(f, string(k)) < 1 {
			t.Fatalf("the synthetic ledger has no %s: %+v", k, f.Outcomes)
		}
	}
	if f.Tampering.Count < 1 || f.Reward.PolicyFailures < 1 || f.Reward.Unrewarded < 1 || f.Finished == f.Episodes {
		t.Fatalf("the synthetic ledger lacks tampering, policy failures, masked or unfinished episodes: tampering %d, policy failures %d, unrewarded %d, %d of %d final",
			f.Tampering.Count, f.Reward.PolicyFailures, f.Reward.Unrewarded, f.Finished, f.Episodes)
	}
	url := writeReport(t, f, "browser test")
	ids, _ := json.Marshal(ChartIDs)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	p, err := chromium.Load(ctx, url, chromium.Options{Width: 1100, Height: 1400, Script: strings.Replace(inBrowser, "IDS", string(ids), 1)})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("network namespace of its own: %v; %d messages", p.Isolated, len(p.Messages))
	pageClean(t, p, url)

	// The DOM, after the scripts ran: every chart's figure holds an SVG.
	for _, id := range ChartIDs {
		i := strings.Index(p.DOM, `<figure id="`+id+`">`)
		if i < 0 {
			t.Errorf("no figure %s in the DOM", id)
			continue
		}
		end := strings.Index(p.DOM[i:], "</figure>")
		if end < 0 || !strings.Contains(p.DOM[i:i+end], "<svg") {
			t.Errorf("figure %s has no SVG in the DOM", id)
		}
	}

	var r browserResult
	if err := json.Unmarshal(p.Result, &r); err != nil {
		t.Fatalf("the page's answer %s: %v", p.Result, err)
	}
	if len(r.Charts) != len(ChartIDs) {
		t.Fatalf("%d charts measured, want %d", len(r.Charts), len(ChartIDs))
	}
	for _, c := range r.Charts {
		if !c.Present || !c.SVG || c.Width < 300 || c.Height < 100 {
			t.Errorf("chart %s: present %v, SVG %v, laid out %.0f×%.0f px (want at least 300×100)", c.ID, c.Present, c.SVG, c.Width, c.Height)
		}
	}
	if r.Rows != len(es) || r.Rows != f.Episodes || r.Cells != 8 {
		t.Errorf("the table has %d rows of %d cells, want one row per episode (%d) of 8", r.Rows, r.Cells, len(es))
	}
	if len(r.Ascending) != len(es) || !rewardsSorted(r.Ascending, false) || r.AscendingSort != "ascending" {
		t.Errorf("after a click on reward (aria-sort %q): not ascending: %v", r.AscendingSort, r.Ascending)
	}
	if len(r.Descending) != len(es) || !rewardsSorted(r.Descending, true) || r.DescendingSort != "descending" {
		t.Errorf("after a second click on reward (aria-sort %q): not descending: %v", r.DescendingSort, r.Descending)
	}
	if !slices.IsSorted(r.Episodes) || len(r.Episodes) != len(es) || r.RewardSortAfter != nil {
		t.Errorf("after a click on episode: not sorted by episode (reward's aria-sort %v): %v", r.RewardSortAfter, r.Episodes)
	}
}

// TestReportInBrowserEmpty: a selection of no episodes is a clean page
// that says so.
func TestReportInBrowserEmpty(t *testing.T) {
	browserOrSkip(t)
	url := writeReport(t, Build(nil, t0), "empty")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	p, err := chromium.Load(ctx, url, chromium.Options{})
	if err != nil {
		t.Fatal(err)
	}
	pageClean(t, p, url)
	if !strings.Contains(p.DOM, `id="no-episodes"`) || strings.Contains(p.DOM, "<svg") {
		t.Errorf("the empty report's DOM:\n%s", p.DOM)
	}
}

// maxScreenshot is the most a screenshot may weigh.
const maxScreenshot = 300 << 10

// TestReportScreenshot writes a PNG of the report's top (its first
// charts, 1100 px wide) to $NEMORL_REPORT_SCREENSHOT; skipped without it.
func TestReportScreenshot(t *testing.T) {
	out := os.Getenv("NEMORL_REPORT_SCREENSHOT")
	if out == "" {
		t.Skip("set NEMORL_REPORT_SCREENSHOT=FILE.png for a screenshot of the report")
	}
	browserOrSkip(t)
	url := writeReport(t, Build(mixedLedger(), t0.Add(30*24*time.Hour)), "nemorl-slurm report")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := chromium.Screenshot(ctx, url, out, 1100, 1300); err != nil {
		t.Fatal(err)
	}
	st, err := os.Stat(out)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%s: %d bytes", out, st.Size())
	if st.Size() > maxScreenshot {
		t.Errorf("the screenshot is %d bytes, want at most %d", st.Size(), maxScreenshot)
	}
}
