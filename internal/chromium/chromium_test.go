package chromium

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"image/png"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/nemorl/nemorl-slurm/internal/labtest"
)

// browserOrSkip returns the browser, or skips t when there is none (fails
// it under NEMORL_REQUIRE_LAB=1). It also checks, when t ends, that every
// browser t started is gone and its profile removed.
func browserOrSkip(t *testing.T) string {
	t.Helper()
	bin, err := Find()
	labtest.Need(t, "chromium", err)
	// Where the profiles go: short, for the browser's socket (see
	// maxTmpDir).
	tmp, err := os.MkdirTemp("", "chromium-test-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(tmp) })
	t.Setenv("TMPDIR", tmp)
	type started struct {
		pgid int
		dir  string
	}
	var mu sync.Mutex
	var browsers []started
	testHookStarted = func(pgid int, dir string) {
		mu.Lock()
		defer mu.Unlock()
		browsers = append(browsers, started{pgid, dir})
	}
	t.Cleanup(func() {
		testHookStarted = nil
		mu.Lock()
		defer mu.Unlock()
		for _, b := range browsers {
			if pids := alive(b.pgid, b.dir); len(pids) > 0 {
				t.Errorf("processes %v of the browser (group %d) are alive after Load returned", pids, b.pgid)
				waitGone(b.pgid, b.dir, 5*time.Second)
			}
		}
		if ents, _ := os.ReadDir(tmp); len(ents) > 0 {
			t.Errorf("left in TMPDIR after Load: %v", ents)
		}
	})
	return bin
}

// filePage writes html to a file and returns its file:// URL.
func filePage(t *testing.T, html string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "page.html")
	if err := os.WriteFile(p, []byte(html), 0o644); err != nil {
		t.Fatal(err)
	}
	return "file://" + p
}

func load(t *testing.T, url string, opt Options) *Page {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	p, err := Load(ctx, url, opt)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func hasMessage(p *Page, source string, level Level, text string) bool {
	for _, m := range p.Messages {
		if m.Source == source && m.Level == level && strings.Contains(m.Text, text) {
			return true
		}
	}
	return false
}

func logMessages(t *testing.T, p *Page) {
	t.Helper()
	for _, m := range p.Messages {
		t.Logf("message: %s", m)
	}
}

// TestFind: $NEMORL_CHROMIUM first and alone, then Names on PATH; the
// error names what was searched.
func TestFind(t *testing.T) {
	dir := t.TempDir()
	fake := filepath.Join(dir, "chromium-headless-shell")
	if err := os.WriteFile(fake, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PATH", dir)
	t.Setenv(EnvBinary, "")
	if got, err := Find(); err != nil || got != fake {
		t.Errorf("Find on PATH = %q, %v; want %q", got, err, fake)
	}
	t.Setenv(EnvBinary, filepath.Join(dir, "nope"))
	if got, err := Find(); err == nil || !strings.Contains(err.Error(), EnvBinary) || !strings.Contains(err.Error(), "nope") {
		t.Errorf("Find with a missing $%s = %q, %v; want an error naming it", EnvBinary, got, err)
	}
	t.Setenv(EnvBinary, fake)
	if got, err := Find(); err != nil || got != fake {
		t.Errorf("Find with $%s = %q, %v", EnvBinary, got, err)
	}
	t.Setenv(EnvBinary, "")
	t.Setenv("PATH", t.TempDir())
	_, err := Find()
	if err == nil {
		t.Fatal("Find with nothing on PATH: no error")
	}
	for _, want := range append([]string{EnvBinary, "apt-get install chromium"}, Names...) {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("Find's error %q does not say %q", err, want)
		}
	}
}

// Without a browser the browser tests skip, and fail under
// NEMORL_REQUIRE_LAB=1 (run in a child whose $NEMORL_CHROMIUM is missing).
func TestChromiumRequired(t *testing.T) {
	if os.Getenv("CHROMIUM_CHILD") != "" {
		t.Skip("child")
	}
	bin, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		require  string
		fail     bool
		wantText string
	}{{"1", true, "chromium is required (NEMORL_REQUIRE_LAB=1) but not found"}, {"", false, "no chromium"}} {
		cmd := exec.Command(bin, "-test.run=^TestLoadMessages$", "-test.v")
		cmd.Env = append(os.Environ(), EnvBinary+"="+filepath.Join(t.TempDir(), "none"), "CHROMIUM_CHILD=1", "NEMORL_REQUIRE_LAB="+c.require)
		out, err := cmd.CombinedOutput()
		if failed := err != nil; failed != c.fail || !strings.Contains(string(out), c.wantText) {
			t.Errorf("NEMORL_REQUIRE_LAB=%q without chromium: err %v, want failure %v, output:\n%s", c.require, err, c.fail, out)
		}
	}
}

// TestLoadMessages: the DOM after the scripts ran, and every kind of
// message with its level: console levels, uncaught exceptions and
// rejections, a failed load. Chromium's stderr has the console too, but
// every level as INFO.
func TestLoadMessages(t *testing.T) {
	browserOrSkip(t)
	url := filePage(t, `<!DOCTYPE html>
<html><head><title>t</title></head><body><p id="x">before</p>
<script>console.log("logged"); console.warn("warned"); console.error("erred", 42); console.info("two\nlines"); console.assert(1 === 2, "asserted");</script>
<script>throw new Error("thrown");</script>
<script>Promise.reject(new Error("rejected"));</script>
<img src="missing.png">
<script>document.getElementById("x").textContent = "after";</script>
</body></html>`)
	p := load(t, url, Options{})
	logMessages(t, p)
	if !strings.Contains(p.DOM, `<p id="x">after</p>`) || !strings.HasPrefix(p.DOM, "<!DOCTYPE html>") {
		t.Errorf("the DOM is not the scripts' result:\n%s", p.DOM)
	}
	if p.URL != url {
		t.Errorf("URL %q, want %q", p.URL, url)
	}
	for _, w := range []struct {
		source string
		level  Level
		text   string
	}{
		{"console-api", LevelInfo, "logged"},
		{"console-api", LevelWarning, "warned"},
		{"console-api", LevelError, "erred 42"},
		{"console-api", LevelInfo, "two\nlines"},
		{"console-api", LevelError, "Assertion failed: asserted"},
		{"exception", LevelError, "Uncaught Error: thrown"},
		{"exception", LevelError, "Uncaught (in promise) Error: rejected"},
		{"network", LevelError, "net::ERR_FILE_NOT_FOUND"},
	} {
		if !hasMessage(p, w.source, w.level, w.text) {
			t.Errorf("no %s message of level %s with %q", w.source, w.level, w.text)
		}
	}
	if n := len(p.Errors()); n != 5 {
		t.Errorf("%d errors, want 5: %v", n, p.Errors())
	}
	// The same console on stderr: each level as INFO, "Uncaught" telling
	// the exceptions.
	var console []Message
	for _, l := range p.Log {
		if m, ok := l.Console(); ok && m.URL == url {
			console = append(console, m)
		}
	}
	if len(console) != 7 {
		t.Errorf("%d console lines of the page on stderr, want 7: %+v", len(console), console)
	}
	var uncaught int
	for _, m := range console {
		if m.Level == LevelError {
			uncaught++
		}
		if m.Text == "two\nlines" && m.Line != 3 {
			t.Errorf("two-line console message: %+v", m)
		}
	}
	if uncaught != 2 {
		t.Errorf("%d errors (Uncaught) among the console lines on stderr, want 2: %+v", uncaught, console)
	}
}

// counter is a loopback HTTP server that counts connections and requests.
type counter struct {
	*httptest.Server
	conns atomic.Int64
	mu    sync.Mutex
	paths []string
}

func newCounter(t *testing.T, h http.HandlerFunc) *counter {
	c := &counter{}
	c.Server = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c.mu.Lock()
		c.paths = append(c.paths, r.URL.Path)
		c.mu.Unlock()
		if h != nil {
			h(w, r)
		}
	}))
	c.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			c.conns.Add(1)
		}
	}
	c.Start()
	t.Cleanup(c.Close)
	return c
}

func (c *counter) seen() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]string(nil), c.paths...)
}

// TestLoadNetworkOff: a file:// page reaches no network: not the
// internet, not even a server on loopback, whether by subresource, fetch,
// beacon, WebSocket or frame; each refused load is an error message. Both
// with a network namespace and with the flags alone.
func TestLoadNetworkOff(t *testing.T) {
	browserOrSkip(t)
	for _, c := range []struct {
		name      string
		flagsOnly bool
	}{{"namespace", false}, {"flags only", true}} {
		t.Run(c.name, func(t *testing.T) {
			if !c.flagsOnly && !canUnshare() {
				t.Skip("no network namespace here (not root, or unshare --net refused): the flags alone are tested")
			}
			srv := newCounter(t, nil)
			loop := srv.URL // http://127.0.0.1:port
			port := srv.Listener.Addr().(*net.TCPAddr).Port
			url := filePage(t, fmt.Sprintf(`<!DOCTYPE html><html><head>
<link rel="stylesheet" href="%[1]s/style.css">
<link rel="preconnect" href="https://example.com">
<script src="%[1]s/script.js"></script>
<script src="https://example.com/x.js"></script>
</head><body>
<img src="%[1]s/img.png"><img src="http://localhost:%[2]d/localhost.png"><img src="https://example.com/x.png">
<iframe src="%[1]s/frame"></iframe>
<script>
fetch("%[1]s/fetch", {mode: "no-cors"}).catch(function () {});
navigator.sendBeacon("%[1]s/beacon", "x");
try { new WebSocket("ws://127.0.0.1:%[2]d/ws"); } catch (e) {}
fetch("https://example.com/fetch", {mode: "no-cors"}).catch(function () {});
</script></body></html>`, loop, port))
			p := load(t, url, Options{flagsOnly: c.flagsOnly})
			logMessages(t, p)
			if p.Isolated == c.flagsOnly {
				t.Errorf("Isolated = %v, want %v", p.Isolated, !c.flagsOnly)
			}
			if n := srv.conns.Load(); n != 0 {
				t.Errorf("the loopback server got %d connections (requests %v), want none", n, srv.seen())
			}
			for _, u := range []string{loop + "/script.js", loop + "/img.png", fmt.Sprintf("http://localhost:%d/localhost.png", port), "https://example.com/x.js", "https://example.com/x.png"} {
				found := false
				for _, m := range p.Errors() {
					found = found || m.Source == "network" && m.URL == u && strings.Contains(m.Text, "net::ERR_")
				}
				if !found {
					t.Errorf("no network error for %s", u)
				}
			}
			// Navigating to the loopback server fails too.
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			_, err := Load(ctx, loop+"/page", Options{flagsOnly: c.flagsOnly})
			var nav *NavigationError
			if !errors.As(err, &nav) || !strings.Contains(nav.Text, "net::ERR_") {
				t.Errorf("Load of %s without AllowLoopback: %v, want a navigation error", loop, err)
			}
			if n := srv.conns.Load(); n != 0 {
				t.Errorf("the loopback server got %d connections (requests %v), want none", n, srv.seen())
			}
		})
	}
}

// TestLoadAllowLoopback: a live page on 127.0.0.1 loads, with what it
// fetches from its server; the internet stays off.
func TestLoadAllowLoopback(t *testing.T) {
	browserOrSkip(t)
	srv := newCounter(t, func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/favicon.ico": // the browser asks for it: a 404 would be an error message
			w.WriteHeader(http.StatusNoContent)
		case "/":
			w.Header().Set("Content-Type", "text/html")
			fmt.Fprint(w, `<!DOCTYPE html><html><body><p id="n">?</p><img src="/pic.svg">
<script src="https://example.com/x.js"></script>
<script>fetch("/api").then(function (r) { return r.json(); }).then(function (v) { document.getElementById("n").textContent = "n=" + v.n; });</script>
</body></html>`)
		case "/pic.svg":
			w.Header().Set("Content-Type", "image/svg+xml")
			fmt.Fprint(w, `<svg xmlns="http://www.w3.org/2000/svg" width="10" height="10"/>`)
		case "/api":
			w.Header().Set("Content-Type", "application/json")
			fmt.Fprint(w, `{"n": 7}`)
		default:
			http.NotFound(w, r)
		}
	})
	p := load(t, srv.URL+"/", Options{AllowLoopback: true})
	logMessages(t, p)
	if p.Isolated {
		t.Error("Isolated with AllowLoopback")
	}
	if !strings.Contains(p.DOM, `<p id="n">n=7</p>`) {
		t.Errorf("the page did not fetch from its server:\n%s", p.DOM)
	}
	seen := strings.Join(srv.seen(), " ")
	for _, want := range []string{"/", "/pic.svg", "/api"} {
		if !strings.Contains(" "+seen+" ", " "+want+" ") {
			t.Errorf("the server saw %q, not %s", seen, want)
		}
	}
	if !hasMessage(p, "network", LevelError, "net::ERR_") {
		t.Error("no network error for https://example.com/x.js")
	}
	for _, m := range p.Errors() {
		if !strings.HasPrefix(m.URL, "https://example.com/") {
			t.Errorf("an error that is not example.com's: %s", m)
		}
	}
}

// TestLoadScript: Options.Script runs after the load, promises awaited;
// its exception is Load's error.
func TestLoadScript(t *testing.T) {
	browserOrSkip(t)
	url := filePage(t, `<!DOCTYPE html><html><body><button id="b" onclick="this.textContent='clicked'">click</button></body></html>`)
	p := load(t, url, Options{Script: `(async () => { document.getElementById("b").click(); await new Promise(r => setTimeout(r, 10)); return {text: document.getElementById("b").textContent, n: 2}; })()`})
	var got struct {
		Text string
		N    int
	}
	if err := json.Unmarshal(p.Result, &got); err != nil || got.Text != "clicked" || got.N != 2 {
		t.Errorf("Result %s (%v), want clicked and 2", p.Result, err)
	}
	if !strings.Contains(p.DOM, ">clicked</button>") {
		t.Errorf("the DOM is not after the script:\n%s", p.DOM)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if _, err := Load(ctx, url, Options{Script: `throw new Error("script broke")`}); err == nil || !strings.Contains(err.Error(), "script broke") {
		t.Errorf("a throwing script: %v, want its error", err)
	}
}

// TestLoadErrors: a missing file is a NavigationError; a context that ends
// kills the browser (no process, no profile left: browserOrSkip checks).
func TestLoadErrors(t *testing.T) {
	browserOrSkip(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	_, err := Load(ctx, "file://"+filepath.Join(t.TempDir(), "none.html"), Options{})
	var nav *NavigationError
	if !errors.As(err, &nav) || nav.Text != "net::ERR_FILE_NOT_FOUND" {
		t.Errorf("a missing file: %v, want net::ERR_FILE_NOT_FOUND", err)
	}

	done, stop := context.WithCancel(context.Background())
	stop()
	if _, err := Load(done, "about:blank", Options{}); !errors.Is(err, context.Canceled) {
		t.Errorf("a cancelled context: %v", err)
	}

	// A page that never finishes loading.
	hang := filePage(t, `<!DOCTYPE html><html><body><script>for (;;) {}</script></body></html>`)
	short, cancelShort := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancelShort()
	start := time.Now()
	_, err = Load(short, hang, Options{})
	took := time.Since(start)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("a page that hangs: %v, want the deadline", err)
	}
	if took > 15*time.Second {
		t.Errorf("Load returned %v after its context ended", took-3*time.Second)
	}
}

// TestScreenshot: a PNG of the viewport's size.
func TestScreenshot(t *testing.T) {
	browserOrSkip(t)
	url := filePage(t, `<!DOCTYPE html><html><body style="margin:0"><div style="width:200px;height:100px;background:#1f77b4"></div></body></html>`)
	out := filepath.Join(t.TempDir(), "shot.png")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if err := Screenshot(ctx, url, out, 400, 300); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(out)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	img, err := png.Decode(f)
	if err != nil {
		t.Fatal(err)
	}
	if b := img.Bounds(); b.Dx() != 400 || b.Dy() != 300 {
		t.Errorf("screenshot %v, want 400×300", b)
	}
	if r, g, b, _ := img.At(10, 10).RGBA(); r>>8 != 0x1f || g>>8 != 0x77 || b>>8 != 0xb4 {
		t.Errorf("pixel (10,10) = %x %x %x, want the div's 1f77b4", r>>8, g>>8, b>>8)
	}
	if r, g, b, _ := img.At(300, 200).RGBA(); r>>8 != 0xff || g>>8 != 0xff || b>>8 != 0xff {
		t.Errorf("pixel (300,200) = %x %x %x, want white", r>>8, g>>8, b>>8)
	}
}

// TestTempDir: under $TMPDIR, unless that is too long for the browser's
// socket: then under /tmp.
func TestTempDir(t *testing.T) {
	short := t.TempDir()
	long := filepath.Join(short, strings.Repeat("d", maxTmpDir))
	if err := os.Mkdir(long, 0o700); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ tmpdir, under string }{{"/tmp", "/tmp/"}, {long, "/tmp/"}} {
		t.Setenv("TMPDIR", c.tmpdir)
		dir, err := tempDir()
		if err != nil {
			t.Fatal(err)
		}
		_ = os.Remove(dir)
		if !strings.HasPrefix(dir, c.under) || len(dir)+len("/t") > maxTmpDir || strings.HasPrefix(dir, long) {
			t.Errorf("TMPDIR=%s: tempDir %s (%d bytes), want under %s and at most %d", c.tmpdir, dir, len(dir), c.under, maxTmpDir-2)
		}
	}
}

// TestWaitGone: a process that left the browser's group (as
// chrome_crashpad_handler does, setsid) but names its directory is killed
// too.
func TestWaitGone(t *testing.T) {
	dir := t.TempDir()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	defer w.Close()
	cmd := exec.Command("sh", "-c", "read x", "sh", "--database="+dir+"/Crash Reports")
	cmd.Stdin = r
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	const noGroup = 1 << 22 // above pid_max: no such group
	deadline := time.Now().Add(5 * time.Second)
	for !slices.Contains(alive(noGroup, dir), cmd.Process.Pid) {
		if time.Now().After(deadline) {
			t.Fatalf("alive does not list %d, whose command line names %s", cmd.Process.Pid, dir)
		}
		time.Sleep(10 * time.Millisecond)
	}
	waitGone(noGroup, dir, 5*time.Second)
	select {
	case err := <-exited:
		if err == nil {
			t.Errorf("the process exited by itself, not killed")
		}
	case <-time.After(5 * time.Second):
		_ = cmd.Process.Kill()
		t.Fatal("waitGone left the process alive")
	}
	if pids := alive(noGroup, dir); len(pids) > 0 {
		t.Errorf("alive after waitGone: %v", pids)
	}
}

// realLog is what Chromium 156 on Debian 12 printed to stderr for a page
// that logs, throws and fails a load (abridged).
const realLog = `/usr/bin/chromium: 9: [: 25275973632: unexpected operator
[16497:16528:1203/085023.321670:ERROR:dbus/bus.cc:405] Failed to connect to the bus: Failed to connect to socket /run/dbus/system_bus_socket: No such file or directory
[16551:16551:1203/085023.647855:WARNING:media/gpu/vaapi/vaapi_wrapper.cc:1655] drmGetDevices2() has not found any devices
[16497:16497:1203/085023.694986:ERROR:dbus/object_proxy.cc:572] Failed to call method: org.freedesktop.DBus.NameHasOwner: object_path= /org/freedesktop/DBus: unknown error type: 
[16497:16497:1203/085024.044421:INFO:CONSOLE:2] "logmsg", source: file:///tmp/exp/err.html (2)
[16497:16497:1203/085024.044475:INFO:CONSOLE:2] "two
lines", source: file:///tmp/exp/err.html (2)
[16497:16497:1203/085024.044496:INFO:CONSOLE:3] "Uncaught Error: boom thrown", source: file:///tmp/exp/err.html (3)
[16861:16861:1203/085049.521968:VERBOSE1:components/update_client/update_checker.cc:298] RequestSender failed -105
Histogram: Net.DNS.ResolveFailureTime recorded 10 samples, mean = 3.2 (flags = 0x1)
`

// TestParseLog: one case per format and decision of the parser.
func TestParseLog(t *testing.T) {
	cases := []struct {
		name string
		in   string
		want []LogLine
	}{
		{"error with pid, tid, time", `[16497:16528:1203/085023.321670:ERROR:dbus/bus.cc:405] Failed to connect: x`,
			[]LogLine{{PID: 16497, TID: 16528, hasIDs: true, Time: "1203/085023.321670", Severity: "ERROR", File: "dbus/bus.cc", Line: 405, Text: "Failed to connect: x"}}},
		{"console, Chromium 15x", `[1:2:1203/085024.044421:INFO:CONSOLE:2] "x", source: file:///p.html (2)`,
			[]LogLine{{PID: 1, TID: 2, hasIDs: true, Time: "1203/085024.044421", Severity: "INFO", File: "CONSOLE", Line: 2, Text: `"x", source: file:///p.html (2)`}}},
		{"console, older Chromium", `[1203/085024.044:INFO:CONSOLE(12)] "Uncaught TypeError: y", source: http://127.0.0.1:80/a.js (12)`,
			[]LogLine{{Time: "1203/085024.044", Severity: "INFO", File: "CONSOLE", Line: 12, Text: `"Uncaught TypeError: y", source: http://127.0.0.1:80/a.js (12)`}}},
		{"severity and place only", `[WARNING:a.cc:1] w`, []LogLine{{Severity: "WARNING", File: "a.cc", Line: 1, Text: "w"}}},
		{"verbose, no text", `[VERBOSE2:a.cc(7)]`, []LogLine{{Severity: "VERBOSE2", File: "a.cc", Line: 7}}},
		{"multi-line console message", "[INFO:CONSOLE:3] \"a\n\nb\", source: f (3)\n[ERROR:x.cc:1] e",
			[]LogLine{{Severity: "INFO", File: "CONSOLE", Line: 3, Text: "\"a\n\nb\", source: f (3)"}, {Severity: "ERROR", File: "x.cc", Line: 1, Text: "e"}}},
		{"console that never ends", "[INFO:CONSOLE:3] \"a\nb", []LogLine{{Severity: "INFO", File: "CONSOLE", Line: 3, Text: "\"a\nb"}}},
		{"a message with brackets and colons", `[ERROR:a.cc:1] [x:y] z: w]`, []LogLine{{Severity: "ERROR", File: "a.cc", Line: 1, Text: "[x:y] z: w]"}}},
		{"lines not in the format stand alone", "Histogram: x (flags = 0x1)\n\n[ERROR:a.cc:1] e\nafter\r\n",
			[]LogLine{{Text: "Histogram: x (flags = 0x1)"}, {Severity: "ERROR", File: "a.cc", Line: 1, Text: "e"}, {Text: "after"}}},
		{"not a severity", `[1:2:1203/0850.1:NOTICE:a.cc:1] x`, []LogLine{{Text: `[1:2:1203/0850.1:NOTICE:a.cc:1] x`}}},
		{"one id", `[1:INFO:a.cc:1] x`, []LogLine{{Text: `[1:INFO:a.cc:1] x`}}},
		{"negative line", `[INFO:a.cc:-1] x`, []LogLine{{Text: `[INFO:a.cc:-1] x`}}},
		{"no space after the header", `[INFO:a.cc:1]x`, []LogLine{{Text: `[INFO:a.cc:1]x`}}},
		{"no location", `[INFO] x`, []LogLine{{Text: `[INFO] x`}}},
		{"empty", "", nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got := ParseLog(c.in); !reflect.DeepEqual(got, c.want) {
				t.Errorf("ParseLog(%q)\n got %#v\nwant %#v", c.in, got, c.want)
			}
		})
	}
	ls := ParseLog(realLog)
	if len(ls) != 9 {
		t.Fatalf("the real log: %d entries, want 9: %#v", len(ls), ls)
	}
	var console []Message
	for _, l := range ls {
		if m, ok := l.Console(); ok {
			console = append(console, m)
		}
	}
	want := []Message{
		{Source: "stderr", Level: LevelInfo, Text: "logmsg", URL: "file:///tmp/exp/err.html", Line: 2},
		{Source: "stderr", Level: LevelInfo, Text: "two\nlines", URL: "file:///tmp/exp/err.html", Line: 2},
		{Source: "stderr", Level: LevelError, Text: "Uncaught Error: boom thrown", URL: "file:///tmp/exp/err.html", Line: 3},
	}
	if !reflect.DeepEqual(console, want) {
		t.Errorf("console of the real log\n got %#v\nwant %#v", console, want)
	}
	if _, ok := ls[1].Console(); ok {
		t.Errorf("an ERROR line taken for the console: %+v", ls[1])
	}
}

// FuzzParseLog: the parser takes anything; what it parses prints back to
// a log that parses the same; a console message comes out of its printed
// form.
func FuzzParseLog(f *testing.F) {
	f.Add(realLog)
	f.Add("[INFO:CONSOLE(3)] \"a\nb\", source: f (3)\n[1:2:INFO:CONSOLE:4] \"x")
	f.Add("[ERROR:a.cc:1]\n[]\n[:::]\n[INFO:(1)] x")
	f.Fuzz(func(t *testing.T, s string) {
		ls := ParseLog(s)
		var b strings.Builder
		for _, l := range ls {
			if l.Severity == "" && (l.File != "" || l.Line != 0 || l.hasIDs || l.Time != "") {
				t.Fatalf("a line not in the format has fields: %#v", l)
			}
			if l.Severity == "" && (l.Text == "" || strings.Contains(l.Text, "\n")) {
				t.Fatalf("a stray line %q", l.Text)
			}
			b.WriteString(l.String() + "\n")
		}
		if again := ParseLog(b.String()); !reflect.DeepEqual(again, ls) {
			t.Fatalf("printed and parsed again:\n got %#v\nwant %#v\nprinted %q", again, ls, b.String())
		}
		// A console message of one line, whatever its text, comes back out.
		if strings.Contains(s, "\n") {
			return
		}
		line := LogLine{Severity: "INFO", File: "CONSOLE", Line: 1, Text: `"` + s + `", source: file:///p.html (1)`}
		got := ParseLog(line.String() + "\n")
		if len(got) != 1 {
			t.Fatalf("console line %q: %#v", line.String(), got)
		}
		if m, ok := got[0].Console(); !ok || m.URL != "file:///p.html" || m.Line != 1 || m.Text != s {
			t.Fatalf("console line %q: %#v %v", line.String(), m, ok)
		}
	})
}
