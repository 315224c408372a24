package serve

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"html/template"
	"io"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/nemorl/nemorl-slurm/configs"
	"github.com/nemorl/nemorl-slurm/ledger"
	"github.com/nemorl/nemorl-slurm/report"
	"github.com/nemorl/nemorl-slurm/stages"
)

// The live page: GET /ui is the figures of `nemorl-slurm report` over the
// episodes of this serve, and GET /ui/figures the part of it that the
// page's script fetches again every UIRefresh and swaps in. Nothing else
// is fetched (uiCSP).

// UIRefresh is how often the /ui page fetches /ui/figures.
const UIRefresh = 5 * time.Second

// UICookie is the cookie GET /ui?token=<serve.token> sets (HttpOnly,
// SameSite=Strict, Path=/ui, for the browser's session): the hex
// HMAC-SHA256 of uiCookieLabel under the token. It is not the token, and
// authorises /ui and /ui/figures only (every other endpoint wants the
// bearer token).
const UICookie = "nemorl_serve_ui"

const uiCookieLabel = "nemorl-slurm serve /ui cookie v1"

// uiEmpty is what the page says before this serve has an episode.
const uiEmpty = "No episodes yet: this serve has not run or re-attached to one since it started."

// ui serves the live page. known caches the ledger entries whose place on
// the page cannot change any more: nil for those that are not this
// serve's, the entry for this serve's final ones.
type ui struct {
	s     *Server
	mu    sync.Mutex
	known map[string]*ledger.Entry
}

// routeUI adds GET /ui, GET /ui/figures and GET /favicon.ico to mux.
func (s *Server) routeUI(mux *http.ServeMux) {
	u := &ui{s: s, known: map[string]*ledger.Entry{}}
	mux.HandleFunc("GET /ui", u.handlePage)
	mux.HandleFunc("GET /ui/figures", s.uiAuth(u.handleFigures))
	// A browser asks for an icon by itself; no content, rather than a 404
	// the page's console would show as an error.
	mux.HandleFunc("GET /favicon.ico", func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusNoContent) })
}

// uiCookie is UICookie's value under the token.
func (s *Server) uiCookie() string {
	m := hmac.New(sha256.New, []byte(s.opt.Token))
	m.Write([]byte(uiCookieLabel))
	return hex.EncodeToString(m.Sum(nil))
}

// uiAuthorized says whether r may see the page: no token is configured,
// or r carries it as a bearer token, or r carries UICookie.
func (s *Server) uiAuthorized(r *http.Request) bool {
	if s.opt.Token == "" || s.bearerOK(r) {
		return true
	}
	c, err := r.Cookie(UICookie)
	return err == nil && hmac.Equal([]byte(c.Value), []byte(s.uiCookie()))
}

func (s *Server) uiAuth(h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if !s.uiAuthorized(r) {
			s.uiUnauthorized(w)
			return
		}
		h(w, r)
	}
}

func (s *Server) uiUnauthorized(w http.ResponseWriter) {
	w.Header().Set("WWW-Authenticate", `Bearer realm="nemorl-slurm"`)
	_ = s.writeUI(w, http.StatusUnauthorized, "text/plain; charset=utf-8",
		"unauthorized: send Authorization: Bearer <serve.token>, or open /ui?token=<serve.token> once in the browser (it sets a cookie for /ui)\n")
}

// uiLogin answers GET /ui?token=: a right token sets UICookie; either way
// the browser goes to /ui, so the token leaves its address bar. A wrong
// one is refused.
func (s *Server) uiLogin(w http.ResponseWriter, r *http.Request) {
	if s.opt.Token != "" {
		got := r.URL.Query().Get("token")
		if subtle.ConstantTimeCompare([]byte(got), []byte(s.opt.Token)) != 1 {
			s.logf("/ui: a wrong token refused (from %s)", r.RemoteAddr)
			s.uiUnauthorized(w)
			return
		}
		http.SetCookie(w, &http.Cookie{Name: UICookie, Value: s.uiCookie(), Path: "/ui",
			HttpOnly: true, Secure: r.TLS != nil, SameSite: http.SameSiteStrictMode})
	}
	uiHeaders(w.Header())
	w.Header().Set("Location", "/ui")
	w.WriteHeader(http.StatusSeeOther)
}

func (u *ui) handlePage(w http.ResponseWriter, r *http.Request) {
	if r.URL.Query().Has("token") {
		u.s.uiLogin(w, r)
		return
	}
	u.s.uiAuth(u.servePage)(w, r)
}

func (u *ui) servePage(w http.ResponseWriter, r *http.Request) {
	frag, err := u.fragment(r.Context())
	if err != nil {
		u.fail(w, r, err)
		return
	}
	var b bytes.Buffer
	data := uiPageData{Started: u.s.started.UTC().Format(time.RFC3339), Every: UIRefresh.String(),
		RefreshMS: UIRefresh.Milliseconds(), Figures: template.HTML(frag)} //nolint:gosec // our own escaped HTML
	if err := uiPage.Execute(&b, data); err != nil {
		u.fail(w, r, fmt.Errorf("serve: /ui: %w", err))
		return
	}
	_ = u.s.writeUI(w, http.StatusOK, "text/html; charset=utf-8", b.String())
}

func (u *ui) handleFigures(w http.ResponseWriter, r *http.Request) {
	frag, err := u.fragment(r.Context())
	if err != nil {
		u.fail(w, r, err)
		return
	}
	_ = u.s.writeUI(w, http.StatusOK, "text/html; charset=utf-8", frag)
}

// fail answers err (500), unless the client has left.
func (u *ui) fail(w http.ResponseWriter, r *http.Request, err error) {
	if r.Context().Err() != nil {
		return
	}
	u.s.logf("%s: %v", r.URL.Path, err)
	_ = u.s.writeUI(w, http.StatusInternalServerError, "text/plain; charset=utf-8", "the figures failed: "+err.Error()+"\n")
}

// uiHeaders are the headers of every /ui answer: nothing may be fetched
// but /ui/figures, nothing kept or framed.
func uiHeaders(h http.Header) {
	h.Set("Content-Security-Policy", uiCSP)
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Referrer-Policy", "no-referrer")
	h.Set("Cache-Control", "no-store")
	h.Set("X-Frame-Options", "DENY")
}

// writeUI answers body, the secrets removed. The error says the answer
// did not reach the connection in full.
func (s *Server) writeUI(w http.ResponseWriter, status int, contentType, body string) error {
	uiHeaders(w.Header())
	w.Header().Set("Content-Type", contentType)
	w.WriteHeader(status)
	if _, err := io.WriteString(w, s.redactHTML(body)); err != nil {
		return fmt.Errorf("serve: /ui: %w", err)
	}
	return nil
}

// redactHTML removes the secrets, as they are and HTML-escaped, from an
// HTML (or plain) text, writing configs.Redacted escaped.
func (s *Server) redactHTML(str string) string {
	to := template.HTMLEscapeString(configs.Redacted)
	for _, k := range s.secret {
		str = strings.ReplaceAll(str, k, to)
		if esc := template.HTMLEscapeString(k); esc != k {
			str = strings.ReplaceAll(str, esc, to)
		}
	}
	return str
}

// fragment is /ui/figures: what is in flight now, then the report's
// figures of this serve's episodes.
func (u *ui) fragment(ctx context.Context) (string, error) {
	entries, unreadable, err := u.entries(ctx)
	if err != nil {
		return "", err
	}
	f := report.Build(entries, u.s.opt.Now())
	u.s.redactFigures(&f)
	var b strings.Builder
	if err := uiNow.Execute(&b, u.s.uiNowData(unreadable)); err != nil {
		return "", fmt.Errorf("serve: /ui: %w", err)
	}
	if err := ctx.Err(); err != nil {
		return "", fmt.Errorf("serve: /ui: %w", err)
	}
	if err := report.RenderFragment(&b, f, uiEmpty); err != nil {
		return "", fmt.Errorf("serve: /ui: %w", err)
	}
	return b.String(), nil
}

// uiNowData is the top of the fragment.
type uiNowData struct {
	InFlight, Queued, Concurrency int
	// Stages are the followed episodes by stage and Slurm state.
	Stages []uiStageCount
	// Unreadable counts the ledger entries left out; First says why the
	// first one was.
	Unreadable int
	First      string
	// Clusters, for a config of clusters: each one's state as placement
	// last saw it.
	Clusters []uiClusterNow
}

type uiClusterNow struct {
	Name                              string
	Up, Known                         bool
	InFlight, FreeGPUs, GPUs, Pending int
}

type uiStageCount struct {
	Stage, State string
	N            int
}

func (s *Server) uiNowData(unreadable []string) uiNowData {
	d := uiNowData{Concurrency: s.slots.n, Unreadable: len(unreadable)}
	d.InFlight, d.Queued = s.slots.counts()
	if len(unreadable) > 0 {
		d.First = s.redact(unreadable[0])
	}
	for _, c := range s.clusters {
		if c.Name == "" {
			continue
		}
		c.mu.Lock()
		d.Clusters = append(d.Clusters, uiClusterNow{Name: c.Name, Up: c.up, Known: c.known, InFlight: c.inFlight,
			FreeGPUs: c.room.FreeGPUs, GPUs: c.room.GPUs, Pending: c.room.Pending})
		c.mu.Unlock()
	}
	n := map[[2]string]int{}
	for _, r := range s.rows() {
		n[[2]string{string(r.Stage), r.State.String()}]++
	}
	for k, c := range n {
		d.Stages = append(d.Stages, uiStageCount{Stage: k[0], State: k[1], N: c})
	}
	sort.Slice(d.Stages, func(i, j int) bool {
		a, b := d.Stages[i], d.Stages[j]
		if a.Stage != b.Stage {
			return stageIndex(a.Stage) < stageIndex(b.Stage)
		}
		return a.State < b.State
	})
	return d
}

func stageIndex(s string) int {
	for i, st := range stages.All {
		if string(st) == s {
			return i
		}
	}
	return len(stages.All)
}

// redactFigures removes the secrets from every text of f that the page
// shows, before they are escaped (an escaped secret is another string).
// The entries' label maps are shared with the cache: they are replaced,
// not changed.
func (s *Server) redactFigures(f *report.Figures) {
	for i := range f.Rows {
		r := &f.Rows[i]
		r.Episode, r.Outcome, r.FailureStage = s.redact(r.Episode), s.redact(r.Outcome), stages.Stage(s.redact(string(r.FailureStage)))
		r.FailureReason, r.Detail = s.redact(r.FailureReason), s.redact(r.Detail)
		labels := make(map[string]string, len(r.Labels))
		for k, v := range r.Labels {
			labels[s.redact(k)] = s.redact(v)
		}
		r.Labels = labels
	}
	for i := range f.Reasons {
		r := &f.Reasons[i]
		r.Outcome, r.Stage, r.Reason = s.redact(r.Outcome), stages.Stage(s.redact(string(r.Stage))), s.redact(r.Reason)
	}
	for i := range f.Outcomes {
		f.Outcomes[i].Name = s.redact(f.Outcomes[i].Name)
	}
	for i := range f.RewardOverTime.Points {
		p := &f.RewardOverTime.Points[i]
		p.Episode, p.Outcome = s.redact(p.Episode), s.redact(p.Outcome)
	}
	for i, ep := range f.Tampering.Episodes {
		f.Tampering.Episodes[i] = s.redact(ep)
	}
}

// ofThisServe says whether e is one of this serve's episodes: of its
// config, and created since it started or not final when it started (Start
// re-attached to it); settled when the answer cannot change any more.
// (An episode another process submits with the same config meanwhile
// counts too: the ledger does not say who created an entry.)
func (s *Server) ofThisServe(e *ledger.Entry) (mine, settled bool) {
	switch {
	case e.ConfigPath != s.opt.ConfigPath:
		return false, true
	case !e.Final():
		return true, false
	case e.Created.Before(s.started) && e.Outcome.Decided.Before(s.started):
		return false, true
	}
	return true, true
}

// entries returns the ledger entries of this serve's episodes, and why
// those that could not be read were left out. Only the entries not
// settled yet are read again: after the first call, a call reads this
// serve's unfinished episodes and the new entries.
func (u *ui) entries(ctx context.Context) ([]*ledger.Entry, []string, error) {
	ids, err := u.ledgerIDs()
	if err != nil {
		return nil, nil, err
	}
	u.mu.Lock()
	defer u.mu.Unlock()
	u.forget(ids)
	var out []*ledger.Entry
	var unreadable []string
	for _, id := range ids {
		if err := ctx.Err(); err != nil {
			return nil, nil, fmt.Errorf("serve: /ui: %w", err)
		}
		e, err := u.entry(id)
		switch {
		case errors.Is(err, ledger.ErrNotInLedger):
			// Removed since it was listed.
		case err != nil:
			unreadable = append(unreadable, err.Error())
		case e != nil:
			out = append(out, e)
		}
	}
	return out, unreadable, nil
}

// entry returns id's entry when it is this serve's, else nil (u.mu held).
func (u *ui) entry(id string) (*ledger.Entry, error) {
	if e, ok := u.known[id]; ok {
		return e, nil
	}
	e, err := u.s.opt.Ledger.Load(id)
	if err != nil {
		return nil, err
	}
	mine, settled := u.s.ofThisServe(e)
	if !mine {
		e = nil
	}
	if settled {
		u.known[id] = e
	}
	return e, nil
}

// forget drops the cached entries no longer in the ledger (u.mu held).
func (u *ui) forget(ids []string) {
	listed := make(map[string]bool, len(ids))
	for _, id := range ids {
		listed[id] = true
	}
	for id := range u.known {
		if !listed[id] {
			delete(u.known, id)
		}
	}
}

// ledgerIDs lists the episodes of the ledger (the directory of its entry
// files), without reading them.
func (u *ui) ledgerIDs() ([]string, error) {
	dir := filepath.Dir(u.s.opt.Ledger.Path("ep-0"))
	des, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("serve: /ui: list the ledger: %w", err)
	}
	var ids []string
	for _, de := range des {
		id, ok := strings.CutSuffix(de.Name(), ".json")
		if ok && de.Type().IsRegular() && stages.ValidEpisode(id) {
			ids = append(ids, id)
		}
	}
	return ids, nil
}

// uiPageData fills uiPage.
type uiPageData struct {
	Started, Every string
	RefreshMS      int64
	Figures        template.HTML
}

// uiStyle is the page's own style, after the report's.
const uiStyle = `.now { margin: 1em 0 1.5em; padding: 0.75em 1em; border: 1px solid #c6dbef; background: #f3f8fc; }
.now .big { font-size: 1.8em; margin: 0; }
#inflight-now { font-weight: bold; font-variant-numeric: tabular-nums; }
.now p { margin: 0.25em 0; }
.warn { color: #a40000; }
#refresh-status { color: #666; }
`

// uiScript fetches the figures every data-refresh-ms and swaps them in;
// the table sorts by a click on its heading, and stays sorted across
// refreshes. uiCSP allows it by its hash.
const uiScript = `
(function () {
  "use strict";
  var box = document.getElementById("live");
  var status = document.getElementById("refresh-status");
  var every = Number(box.getAttribute("data-refresh-ms")) || 5000;
  var url = location.pathname.replace(/\/+$/, "") + "/figures";
  var order = null;
  function key(tr, col, num) {
    var td = tr.cells[col];
    var v = td.hasAttribute("data-v") ? td.getAttribute("data-v") : td.textContent;
    return num ? (v === "" ? null : Number(v)) : v;
  }
  function sortTable() {
    var table = document.getElementById("episodes");
    if (!table || !order) { return; }
    var heads = table.tHead.rows[0].cells, th = heads[order.col];
    var num = th.getAttribute("data-type") === "num", asc = order.asc;
    var body = table.tBodies[0];
    var rows = Array.prototype.slice.call(body.rows);
    rows.sort(function (a, b) {
      var x = key(a, order.col, num), y = key(b, order.col, num);
      if (x === null || y === null) { return (x === null) - (y === null); }
      var c = num ? x - y : x.localeCompare(y);
      return asc ? c : -c;
    });
    Array.prototype.forEach.call(heads, function (h) { h.removeAttribute("aria-sort"); });
    th.setAttribute("aria-sort", asc ? "ascending" : "descending");
    rows.forEach(function (tr) { body.appendChild(tr); });
  }
  box.addEventListener("click", function (ev) {
    var th = ev.target.closest ? ev.target.closest("#episodes th") : null;
    if (!th) { return; }
    order = {col: th.cellIndex, asc: th.getAttribute("aria-sort") !== "ascending"};
    sortTable();
  });
  function later() { setTimeout(refresh, every); }
  function refresh() {
    if (document.hidden) { later(); return; }
    fetch(url, {credentials: "same-origin", cache: "no-store"}).then(function (r) {
      if (!r.ok) { throw new Error("HTTP " + r.status); }
      return r.text();
    }).then(function (html) {
      box.innerHTML = html;
      sortTable();
      status.textContent = "(last at " + new Date().toLocaleTimeString() + ")";
    }).catch(function (e) {
      status.textContent = "(refresh failed: " + e.message + "; trying again)";
    }).then(later);
  }
  later();
})();
`

// uiCSP lets the page run its own script (by hash) and inline style (the
// charts' SVG style attributes), and fetch from this server only: no
// other script, style, font, image or frame, from anywhere.
var uiCSP = func() string {
	sum := sha256.Sum256([]byte(uiScript))
	return "default-src 'none'; script-src 'sha256-" + base64.StdEncoding.EncodeToString(sum[:]) + "'; " +
		"style-src 'unsafe-inline'; connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
}()

var uiPage = template.Must(template.New("ui").Parse(`<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>nemorl-slurm serve</title>
<style>
` + report.CSS + uiStyle + `</style>
</head>
<body>
<h1>nemorl-slurm serve</h1>
<p class="summary">The episodes this serve has run or re-attached to since it started ({{.Started}}), as <code>nemorl-slurm report</code> draws them from the ledger; refreshed every {{.Every}} <span id="refresh-status"></span></p>
<div id="live" data-refresh-ms="{{.RefreshMS}}">
{{.Figures}}
</div>
<script>` + uiScript + `</script>
</body>
</html>
`))

var uiNow = template.Must(template.New("now").Parse(`<section id="now" class="now">
<p class="big"><span id="inflight-now">{{.InFlight}}</span> episodes in flight</p>
<p>Of serve.concurrency {{.Concurrency}}; <span id="queued-now">{{.Queued}}</span> rows waiting for a slot.</p>
{{- if .Stages}}
<p id="stages-now">Followed now: {{range $i, $s := .Stages}}{{if $i}}, {{end}}{{$s.Stage}} {{$s.State}} {{$s.N}}{{end}}.</p>
{{- end}}
{{- if .Clusters}}
<p id="clusters-now">Clusters: {{range $i, $c := .Clusters}}{{if $i}}; {{end}}{{$c.Name}} {{if $c.Up}}answering{{else}}<span class="warn">not answering</span>{{end}}, {{$c.InFlight}} in flight{{if $c.Known}}, {{$c.FreeGPUs}} of {{$c.GPUs}} GPUs free, {{$c.Pending}} jobs pending{{end}}{{end}}.</p>
{{- end}}
{{- if .Unreadable}}
<p id="unreadable" class="warn">{{.Unreadable}} ledger entries could not be read and are left out (the first: {{.First}}).</p>
{{- end}}
</section>
`))
