package serve

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"html/template"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nemorl/nemorl-slurm/configs"
	"github.com/nemorl/nemorl-slurm/episode"
	"github.com/nemorl/nemorl-slurm/ledger"
	"github.com/nemorl/nemorl-slurm/report"
	"github.com/nemorl/nemorl-slurm/rules"
	"github.com/nemorl/nemorl-slurm/stages"
)

// uiToken has characters that HTML escapes, so that a leak of its escaped
// form would be seen too.
const uiToken = `tok&ui+42"<x>`

// uiGet answers GET target; hdr are header names and values.
func uiGet(t *testing.T, h http.Handler, target string, hdr ...string) *httptest.ResponseRecorder {
	t.Helper()
	req := httptest.NewRequest(http.MethodGet, target, nil)
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, req)
	return w
}

// logLines collects a server's log.
type logLines struct {
	mu    sync.Mutex
	lines []string
}

func (l *logLines) logf(format string, args ...any) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.lines = append(l.lines, fmt.Sprintf(format, args...))
}

func (l *logLines) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.Join(l.lines, "\n")
}

// uiEntry writes an episode of d's config created at c into the ledger:
// author, train and eval submitted 10 minutes apart, each started a
// minute after its submission and ended at the next one's; with o, final.
func uiEntry(t *testing.T, d *episode.Driver, c time.Time, o *rules.Outcome) *ledger.Entry {
	t.Helper()
	e := &ledger.Entry{Episode: stages.NewID(c), Created: c, ConfigPath: d.ConfigPath, Jobs: map[stages.Stage]*ledger.Submission{}}
	at := c
	jobs := map[stages.Stage]rules.JobSummary{}
	for i, st := range stages.All {
		id := strconv.Itoa(500 + i)
		e.Jobs[st] = &ledger.Submission{JobID: id, Submitted: at}
		jobs[st] = rules.JobSummary{ID: id, State: "COMPLETED", Start: at.Add(time.Minute), End: at.Add(10 * time.Minute)}
		at = at.Add(10 * time.Minute)
	}
	if o != nil {
		o.Episode, o.Jobs = e.Episode, jobs
		if o.Decided.IsZero() {
			o.Decided = at
		}
		e.Outcome = o
	}
	if err := d.Ledger.Create(e, []byte("task")); err != nil {
		t.Fatal(err)
	}
	return e
}

func scored(reward float64) *rules.Outcome {
	return &rules.Outcome{Outcome: rules.Scored, Reward: f64(reward), Completed: 1}
}

var reInFlight = regexp.MustCompile(`<span id="inflight-now">(\d+)</span>`)

// inFlightNow is the in-flight count a page or fragment shows.
func inFlightNow(t *testing.T, html string) int {
	t.Helper()
	m := reInFlight.FindStringSubmatch(html)
	if m == nil {
		t.Fatalf("no inflight-now element in:\n%.600s", html)
	}
	n, _ := strconv.Atoi(m[1])
	return n
}

func wantCode(t *testing.T, what string, w *httptest.ResponseRecorder, code int) {
	t.Helper()
	if w.Code != code {
		t.Errorf("%s: %d %.300s, want %d", what, w.Code, w.Body, code)
	}
}

func TestUIAuth(t *testing.T) {
	logs := &logLines{}
	s, _ := newTestServer(t, Options{Token: uiToken, Logf: logs.logf})
	h := s.Handler()
	bearer := []string{"Authorization", "Bearer " + uiToken}

	// Refused: nothing, a wrong bearer token, the token without "Bearer",
	// a wrong ?token=. The answer says how to authenticate, echoes nothing.
	for _, c := range []struct {
		target string
		hdr    []string
	}{
		{"/ui", nil}, {"/ui/figures", nil},
		{"/ui", []string{"Authorization", "Bearer not-the-token"}},
		{"/ui/figures", []string{"Authorization", "Bearer not-the-token"}},
		{"/ui", []string{"Authorization", uiToken}},
		{"/ui?token=not-the-token", nil},
		{"/ui?token=", nil},
		{"/ui/figures?token=" + url.QueryEscape(uiToken), nil}, // only /ui takes ?token=
	} {
		w := uiGet(t, h, c.target, c.hdr...)
		what := fmt.Sprintf("GET %s %v", c.target, c.hdr)
		wantCode(t, what, w, http.StatusUnauthorized)
		body := w.Body.String()
		if !strings.Contains(body, "Authorization: Bearer <serve.token>") || !strings.Contains(body, "/ui?token=<serve.token>") {
			t.Errorf("%s: the 401 does not say how to authenticate: %q", what, body)
		}
		if strings.Contains(body, "not-the-token") || strings.Contains(body, "tok&") || len(w.Result().Cookies()) != 0 {
			t.Errorf("%s: the 401 echoes a token or sets a cookie: %q %v", what, body, w.Result().Cookies())
		}
		if w.Header().Get("WWW-Authenticate") == "" {
			t.Errorf("%s: no WWW-Authenticate", what)
		}
	}

	// The bearer token opens both.
	wantCode(t, "/ui with the bearer token", uiGet(t, h, "/ui", bearer...), http.StatusOK)
	wantCode(t, "/ui/figures with the bearer token", uiGet(t, h, "/ui/figures", bearer...), http.StatusOK)

	// ?token= sets a cookie and sends the browser to /ui.
	w := uiGet(t, h, "/ui?token="+url.QueryEscape(uiToken))
	wantCode(t, "/ui?token=", w, http.StatusSeeOther)
	if loc := w.Header().Get("Location"); loc != "/ui" {
		t.Errorf("/ui?token= redirects to %q, want /ui", loc)
	}
	cs := w.Result().Cookies()
	if len(cs) != 1 {
		t.Fatalf("/ui?token= set %d cookies, want 1", len(cs))
	}
	c := cs[0]
	m := hmac.New(sha256.New, []byte(uiToken))
	m.Write([]byte(uiCookieLabel))
	if c.Name != UICookie || c.Value != hex.EncodeToString(m.Sum(nil)) || !c.HttpOnly || c.SameSite != http.SameSiteStrictMode || c.Path != "/ui" || c.MaxAge != 0 {
		t.Errorf("the cookie is %+v, want %s=HMAC-SHA256(token, label), HttpOnly, SameSite=Strict, Path=/ui, for the session", c, UICookie)
	}
	if strings.Contains(c.Value, uiToken) || strings.Contains(c.Value, url.QueryEscape(uiToken)) || strings.Contains(w.Body.String(), "tok") {
		t.Errorf("the token is in the cookie or the answer: %q %q", c.Value, w.Body)
	}
	cookie := []string{"Cookie", UICookie + "=" + c.Value}
	wantCode(t, "/ui with the cookie", uiGet(t, h, "/ui", cookie...), http.StatusOK)
	wantCode(t, "/ui/figures with the cookie", uiGet(t, h, "/ui/figures", cookie...), http.StatusOK)

	// Another value, one made under another token, the token itself: refused.
	other := hmac.New(sha256.New, []byte("another-token"))
	other.Write([]byte(uiCookieLabel))
	for _, v := range []string{c.Value[:len(c.Value)-1] + "0", hex.EncodeToString(other.Sum(nil)), url.QueryEscape(uiToken), ""} {
		if v == c.Value {
			continue
		}
		wantCode(t, "/ui with cookie "+v, uiGet(t, h, "/ui/figures", "Cookie", UICookie+"="+v), http.StatusUnauthorized)
	}

	// The cookie is the page's only: every other endpoint wants the token.
	wantCode(t, "/episodes with the cookie", uiGet(t, h, "/episodes", cookie...), http.StatusUnauthorized)
	wantCode(t, "/metrics with the cookie", uiGet(t, h, "/metrics", cookie...), http.StatusUnauthorized)
	wantCode(t, "POST /run with the cookie", post(t, h, "/run", `{}`, cookie...), http.StatusUnauthorized)
	// GET / stays Gym's liveness answer.
	if w := uiGet(t, h, "/"); w.Code != http.StatusOK || strings.TrimSpace(w.Body.String()) != `{"status":"ok"}` {
		t.Errorf("GET /: %d %s", w.Code, w.Body)
	}

	if l := logs.String(); !strings.Contains(l, "/ui: a wrong token refused") || strings.Contains(l, "not-the-token") || strings.Contains(l, "tok&") {
		t.Errorf("the log does not say a token was refused, or names one:\n%s", l)
	}
}

func TestUIOpenWithoutToken(t *testing.T) {
	s, _ := newTestServer(t, Options{})
	h := s.Handler()
	wantCode(t, "/ui", uiGet(t, h, "/ui"), http.StatusOK)
	wantCode(t, "/ui/figures", uiGet(t, h, "/ui/figures"), http.StatusOK)
	w := uiGet(t, h, "/ui?token=anything")
	wantCode(t, "/ui?token=", w, http.StatusSeeOther)
	if w.Header().Get("Location") != "/ui" || len(w.Result().Cookies()) != 0 {
		t.Errorf("/ui?token= without serve.token: Location %q, cookies %v; want /ui and none", w.Header().Get("Location"), w.Result().Cookies())
	}
	if w := uiGet(t, h, "/ui/"); w.Code != http.StatusNotFound {
		t.Errorf("/ui/: %d, want 404", w.Code)
	}
}

var (
	reScript   = regexp.MustCompile(`(?s)<script>(.*?)</script>`)
	reExternal = regexp.MustCompile(`(?i)(src|href|action|poster)\s*=\s*["']?\s*(https?:)?//`)
	reURL      = regexp.MustCompile(`(?i)https?://`)
)

// TestUIPage: the page shows this serve's episodes (created since it
// started, or re-attached to), in every chart of the report and with what
// is in flight now; its one script is allowed by the CSP, which allows
// nothing else; nothing is fetched from elsewhere.
func TestUIPage(t *testing.T) {
	s, d := newTestServer(t, Options{Concurrency: 3})
	st := s.started
	mine := []*ledger.Entry{
		uiEntry(t, d, st.Add(time.Second), scored(0.75)),
		uiEntry(t, d, st.Add(2*time.Second), &rules.Outcome{Outcome: rules.PolicyFailure, Reward: f64(0), FailureStage: stages.Train, FailureReason: "train_failed"}),
		uiEntry(t, d, st.Add(-2*time.Hour), nil), // re-attached, unfinished
		uiEntry(t, d, st.Add(-3*time.Hour), &rules.Outcome{Outcome: rules.Scored, Reward: f64(0.5), Decided: st.Add(time.Minute)}), // re-attached, ended since
	}
	old := uiEntry(t, d, st.Add(-5*time.Hour), &rules.Outcome{Outcome: rules.Scored, Reward: f64(0.1), Decided: st.Add(-4 * time.Hour)})
	elsewhere := &ledger.Entry{Episode: stages.NewID(st.Add(3 * time.Second)), Created: st.Add(3 * time.Second), ConfigPath: "/elsewhere/other.yaml", Jobs: map[stages.Stage]*ledger.Submission{}}
	if err := d.Ledger.Create(elsewhere, []byte("task")); err != nil {
		t.Fatal(err)
	}
	s.slots.force()
	s.rows = func() []episode.Row {
		return []episode.Row{{Episode: mine[2].Episode, Stage: stages.Eval, State: "RUNNING"}}
	}

	w := uiGet(t, s.Handler(), "/ui")
	wantCode(t, "/ui", w, http.StatusOK)
	page := w.Body.String()
	if ct := w.Header().Get("Content-Type"); ct != "text/html; charset=utf-8" {
		t.Errorf("Content-Type %q", ct)
	}
	for _, id := range report.ChartIDs {
		i := strings.Index(page, `<figure id="`+id+`">`)
		if i < 0 {
			t.Errorf("no figure %s", id)
			continue
		}
		if end := strings.Index(page[i:], "</figure>"); !strings.Contains(page[i:i+end], "<svg") {
			t.Errorf("figure %s has no chart", id)
		}
	}
	if n := inFlightNow(t, page); n != 1 {
		t.Errorf("inflight-now %d, want 1", n)
	}
	for _, want := range []string{`<div id="live" data-refresh-ms="` + strconv.FormatInt(UIRefresh.Milliseconds(), 10) + `">`,
		`<table id="episodes">`, `Of serve.concurrency 3;`, `<span id="queued-now">0</span>`, `Followed now: eval RUNNING 1.`,
		"4 episodes, 3 final", "train: train_failed"} {
		if !strings.Contains(page, want) {
			t.Errorf("the page lacks %q", want)
		}
	}
	for _, e := range mine {
		if !strings.Contains(page, "<td>"+e.Episode+"</td>") {
			t.Errorf("the page lacks this serve's %s", e.Episode)
		}
	}
	for _, e := range []*ledger.Entry{old, elsewhere} {
		if strings.Contains(page, e.Episode) {
			t.Errorf("the page shows %s, not this serve's", e.Episode)
		}
	}

	// The CSP: this script by its hash, inline style, fetches to self only.
	scripts := reScript.FindAllStringSubmatch(page, -1)
	if len(scripts) != 1 || strings.Count(page, "<script") != 1 {
		t.Fatalf("%d scripts, want the page's one", len(scripts))
	}
	sum := sha256.Sum256([]byte(scripts[0][1]))
	csp := w.Header().Get("Content-Security-Policy")
	for _, want := range []string{"default-src 'none'", "script-src 'sha256-" + base64.StdEncoding.EncodeToString(sum[:]) + "';",
		"style-src 'unsafe-inline'", "connect-src 'self'", "frame-ancestors 'none'"} {
		if !strings.Contains(csp, want) {
			t.Errorf("the CSP %q lacks %q", csp, want)
		}
	}
	for _, bad := range []string{"*", "http", "unsafe-eval", "data:"} {
		if strings.Contains(csp, bad) {
			t.Errorf("the CSP %q allows %q", csp, bad)
		}
	}
	if !strings.Contains(scripts[0][1], `"/figures"`) || !strings.Contains(scripts[0][1], "data-refresh-ms") {
		t.Errorf("the script does not fetch the figures every data-refresh-ms")
	}
	noExternal(t, "/ui", page)
}

// noExternal fails when html refers to anything outside it: only the SVG
// namespaces name a URL.
func noExternal(t *testing.T, what, html string) {
	t.Helper()
	if m := reExternal.FindString(html); m != "" {
		t.Errorf("%s: an external reference %q", what, m)
	}
	for _, bad := range []string{"@import", "url(", "<link", "<img", "<iframe", "<object", "<embed", "@font-face"} {
		if strings.Contains(strings.ToLower(html), bad) {
			t.Errorf("%s contains %q", what, bad)
		}
	}
	for _, loc := range reURL.FindAllStringIndex(html, -1) {
		before := html[max(0, loc[0]-20):loc[0]]
		if !strings.HasSuffix(before, `xmlns="`) && !strings.HasSuffix(before, `xmlns:xlink="`) {
			t.Errorf("%s: a URL that is not an SVG namespace: %q", what, html[max(0, loc[0]-20):min(len(html), loc[1]+30)])
		}
	}
}

// TestUIFiguresRefresh: each fetch of /ui/figures says what is in flight
// then: a re-attached episode takes a slot, and once it ends the next
// fetch shows none and its outcome.
func TestUIFiguresRefresh(t *testing.T) {
	s, d := newTestServer(t, Options{Concurrency: 2})
	h := s.Handler()
	fetch := func(what string) string {
		t.Helper()
		w := uiGet(t, h, "/ui/figures")
		wantCode(t, what, w, http.StatusOK)
		frag := w.Body.String()
		if strings.Contains(frag, "<script") || strings.Contains(frag, "<html") || strings.Contains(frag, "<style") {
			t.Errorf("%s: the fragment has a script, a document or a style", what)
		}
		if w.Header().Get("Content-Security-Policy") != uiCSP || w.Header().Get("Cache-Control") != "no-store" {
			t.Errorf("%s: headers %v", what, w.Header())
		}
		noExternal(t, what, frag)
		return frag
	}

	first := fetch("before")
	if n := inFlightNow(t, first); n != 0 || !strings.Contains(first, `id="no-episodes"`) || !strings.Contains(first, uiEmpty) {
		t.Errorf("before any episode: in flight %d, want 0 and no episodes:\n%.600s", n, first)
	}

	// An episode a previous serve left running: Start re-attaches to it.
	e := uiEntry(t, d, s.started.Add(-time.Hour), nil)
	if err := s.Start(); err != nil {
		t.Fatal(err)
	}
	s.rows = func() []episode.Row {
		return []episode.Row{{Episode: e.Episode, Stage: stages.Train, State: "RUNNING"}}
	}
	second := fetch("running")
	if n := inFlightNow(t, second); n != 1 {
		t.Errorf("running: in flight %d, want 1", n)
	}
	for _, want := range []string{"<td>" + e.Episode + "</td>", "<td>unfinished</td>", "Followed now: train RUNNING 1.", "1 episodes, 0 final"} {
		if !strings.Contains(second, want) {
			t.Errorf("running: the fragment lacks %q", want)
		}
	}
	for _, id := range report.ChartIDs {
		if !strings.Contains(second, `<figure id="`+id+`">`) {
			t.Errorf("running: no figure %s", id)
		}
	}

	// It ends: its outcome in the ledger, its slot given back (as follow
	// does when the engine says it is final).
	e.Outcome = scored(0.625)
	e.Outcome.Episode, e.Outcome.Decided = e.Episode, time.Now()
	if err := d.Ledger.Save(e); err != nil {
		t.Fatal(err)
	}
	s.slots.release()
	s.rows = func() []episode.Row { return nil }
	third := fetch("ended")
	if n := inFlightNow(t, third); n != 0 {
		t.Errorf("ended: in flight %d, want 0", n)
	}
	for _, want := range []string{"<td>scored</td>", `data-v="0.625">0.6250</td>`, "1 episodes, 1 final"} {
		if !strings.Contains(third, want) {
			t.Errorf("ended: the fragment lacks %q", want)
		}
	}
	if strings.Contains(third, "Followed now") || third == second {
		t.Errorf("ended: the fragment did not change")
	}
}

// TestUIRedacts: the token and the policy API key, in any text of the
// ledger, reach neither the page nor the fragment, as they are or escaped.
func TestUIRedacts(t *testing.T) {
	logs := &logLines{}
	s, d := newTestServer(t, Options{Token: uiToken, Logf: logs.logf})
	leak := "key " + testKey + " token " + uiToken
	e := &ledger.Entry{Episode: stages.NewID(time.Now()), Created: time.Now(), ConfigPath: d.ConfigPath,
		Labels: map[string]string{"note": leak, uiToken: "x"}, Jobs: map[stages.Stage]*ledger.Submission{}}
	e.Outcome = &rules.Outcome{Episode: e.Episode, Outcome: rules.InfraFailure, FailureStage: stages.Author,
		FailureReason: "reason " + testKey, Detail: leak, Decided: time.Now()}
	if err := d.Ledger.Create(e, []byte("task")); err != nil {
		t.Fatal(err)
	}
	h := s.Handler()
	for _, target := range []string{"/ui", "/ui/figures"} {
		w := uiGet(t, h, target, "Authorization", "Bearer "+uiToken)
		wantCode(t, target, w, http.StatusOK)
		body := w.Body.String()
		for _, secret := range []string{testKey, uiToken, template.HTMLEscapeString(uiToken), "tok&amp;ui", "tok&ui"} {
			if strings.Contains(body, secret) {
				t.Errorf("%s shows %q", target, secret)
			}
		}
		if !strings.Contains(body, template.HTMLEscapeString(configs.Redacted)) || !strings.Contains(body, e.Episode) {
			t.Errorf("%s does not show the episode with its secrets redacted", target)
		}
	}
	wantCode(t, "wrong token", uiGet(t, h, "/ui?token=x"+url.QueryEscape(uiToken)), http.StatusUnauthorized)
	if l := logs.String(); strings.Contains(l, testKey) || strings.Contains(l, "tok&") {
		t.Errorf("the log names a secret:\n%s", l)
	}
}

// TestUIUnreadableEntry: an entry that cannot be read is left out and
// said so, the others still shown; an entry removed from the ledger
// leaves the page (the settled ones are kept between fetches, not for
// good).
func TestUIUnreadableEntry(t *testing.T) {
	s, d := newTestServer(t, Options{})
	h := s.Handler()
	good := uiEntry(t, d, s.started.Add(time.Second), scored(0.5))
	gone := uiEntry(t, d, s.started.Add(2*time.Second), scored(0.25))
	bad := filepath.Join(filepath.Dir(d.Ledger.Path(good.Episode)), "ep-broken.json")
	if err := os.WriteFile(bad, []byte("{not json"), 0o600); err != nil {
		t.Fatal(err)
	}
	w := uiGet(t, h, "/ui/figures")
	wantCode(t, "/ui/figures", w, http.StatusOK)
	frag := w.Body.String()
	for _, want := range []string{`<p id="unreadable" class="warn">1 ledger entries could not be read`, "ep-broken", good.Episode, gone.Episode, "2 episodes, 2 final"} {
		if !strings.Contains(frag, want) {
			t.Errorf("the fragment lacks %q", want)
		}
	}
	if err := os.Remove(d.Ledger.Path(gone.Episode)); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(bad); err != nil {
		t.Fatal(err)
	}
	frag = uiGet(t, h, "/ui/figures").Body.String()
	if strings.Contains(frag, gone.Episode) || strings.Contains(frag, "unreadable") || !strings.Contains(frag, "1 episodes, 1 final") {
		t.Errorf("after the removals:\n%.800s", frag)
	}
}
