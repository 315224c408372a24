// Package chromium opens a page in a real, headless Chromium (Debian's
// chromium, or chromium-headless-shell) and tells what the browser made of
// it: the DOM after the page's scripts ran, every console message, uncaught
// exception and failed load, optionally a screenshot.
//
// Every call starts its own browser, in its own process group, with a
// fresh temporary directory for its profile (--user-data-dir), its $HOME
// and its $TMPDIR, and talks to it over the DevTools protocol on a pair of
// pipes (--remote-debugging-pipe: file descriptors 3 and 4, no port
// opened). When the call returns, or its context ends, the process group
// is killed, and so is any process whose command line names the directory
// (chrome_crashpad_handler runs in a session of its own); once none is
// left the directory is removed: no browser process, and no file of it,
// outlives the call.
//
// The page's console, exceptions and failed loads are Page.Messages. A
// browser-initiated load counts too: a live page whose server answers 404
// to /favicon.ico gets an error message for it.
//
// Why DevTools and not --dump-dom: Chromium 156's stderr log
// (--enable-logging=stderr) prints a page's console messages as
// "INFO:CONSOLE:<line>" whatever their level (console.error is not told
// from console.log), and prints nothing for a failed resource load. The
// DevTools events (Runtime.consoleAPICalled, Runtime.exceptionThrown,
// Log.entryAdded) carry the level and report failed loads. The stderr log
// is still kept, parsed (ParseLog), in Page.Log.
//
// # Network off
//
// Load forbids the network in two layers:
//
//   - Unless Options.AllowLoopback, when running as root and `unshare --net`
//     works, the browser runs in a fresh network namespace: it has only a
//     loopback interface, and that is down (Page.Isolated tells).
//   - Always, flags that route every request to a proxy that does not
//     exist (--proxy-server=127.0.0.1:9) and make every host name fail to
//     resolve (--host-resolver-rules), WebRTC kept off non-proxied UDP, and
//     Chromium's own background traffic (component updates, sync, field
//     trials, safe browsing…) disabled. Without AllowLoopback, loopback goes
//     to the dead proxy too (--proxy-bypass-list=<-loopback>); with it,
//     loopback addresses (127.0.0.1, [::1], localhost) are reached directly
//     and nothing else is.
//
// A load the rules stop shows as a message of Source "network", Level
// "error" ("Failed to load resource: net::ERR_…") in Page.Messages.
package chromium

import (
	"bufio"
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/nemorl/nemorl-slurm/internal/procfs"
)

// EnvBinary names the environment variable that, when set, is the browser
// to run (a path, or a name looked up on PATH); Find then looks nowhere
// else.
const EnvBinary = "NEMORL_CHROMIUM"

// Names are the browsers Find looks for on PATH, in order.
var Names = []string{"chromium", "chromium-headless-shell"}

// Find returns the browser to run: $NEMORL_CHROMIUM when set, else the
// first of Names on PATH. Its error names what was searched.
func Find() (string, error) {
	if p := os.Getenv(EnvBinary); p != "" {
		found, err := exec.LookPath(p)
		if err != nil {
			return "", fmt.Errorf("chromium: $%s=%q is not an executable: %w", EnvBinary, p, err)
		}
		return found, nil
	}
	for _, n := range Names {
		if p, err := exec.LookPath(n); err == nil {
			return p, nil
		}
	}
	return "", fmt.Errorf("chromium: no browser: $%s is unset and none of %s is on PATH (%q); install Debian's chromium (apt-get install chromium) or set $%s",
		EnvBinary, strings.Join(Names, ", "), os.Getenv("PATH"), EnvBinary)
}

// Options tune Load. The zero value is a file:// page with the network off
// and a 1280×800 viewport.
type Options struct {
	// Binary is the browser to run; "" is Find's.
	Binary string
	// AllowLoopback lets the page reach loopback addresses (a live page
	// served on 127.0.0.1). The browser then shares the host's network
	// namespace; the proxy and resolver rules still stop every other
	// address.
	AllowLoopback bool
	// Width and Height are the viewport in CSS pixels (0: 1280 and 800).
	Width, Height int
	// Script, when set, is a JavaScript expression evaluated once the page
	// loaded and settled, before the DOM is taken; its value (a promise is
	// awaited) is Page.Result, as JSON. An exception it throws is Load's
	// error.
	Script string
	// Settle is how long to wait, after the load event, for the network to
	// go idle (no request for 500 ms); 0 is 3 s. A page that keeps polling
	// never goes idle: Load goes on after Settle.
	Settle time.Duration
	// Screenshot, when set, is where a PNG of the viewport is written
	// (after Script ran).
	Screenshot string

	// flagsOnly keeps the browser in the host's network namespace even
	// when a fresh one could be made (tests of the flags alone).
	flagsOnly bool
}

// Level is a message's severity, as DevTools names it.
type Level string

// The levels.
const (
	LevelVerbose Level = "verbose"
	LevelInfo    Level = "info"
	LevelWarning Level = "warning"
	LevelError   Level = "error"
)

// A Message is one thing the page logged, or the browser logged about it.
type Message struct {
	// Source is "console-api" (console.log and friends), "exception" (an
	// uncaught exception or unhandled rejection), or DevTools' Log source:
	// "network" (a failed load), "javascript", "security", "violation",
	// "intervention", "deprecation", "other"…
	Source string `json:"source"`
	Level  Level  `json:"level"`
	Text   string `json:"text"`
	URL    string `json:"url,omitempty"`
	Line   int    `json:"line,omitempty"` // 1-based; 0: unknown
}

func (m Message) String() string {
	s := fmt.Sprintf("%s %s: %s", m.Level, m.Source, m.Text)
	if m.URL != "" {
		s += " (" + m.URL
		if m.Line > 0 {
			s += ":" + strconv.Itoa(m.Line)
		}
		s += ")"
	}
	return s
}

// Page is what the browser made of a page.
type Page struct {
	URL string // where the page ended up
	// DOM is the document, serialized after its scripts ran (doctype
	// included).
	DOM string
	// Messages are the console messages, exceptions and the browser's log
	// entries about the page, in the order they came.
	Messages []Message
	// Result is Options.Script's value as JSON (nil without a script).
	Result json.RawMessage
	// Isolated says the browser ran in its own network namespace.
	Isolated bool
	// Log is the browser's stderr, parsed. Chromium logs ERROR lines of its
	// own that are no fault of the page (no D-Bus in a container, no GPU…);
	// page errors are in Messages.
	Log []LogLine
}

// Errors are the messages of level error: console.error and
// console.assert, uncaught exceptions, failed loads.
func (p *Page) Errors() []Message {
	var out []Message
	for _, m := range p.Messages {
		if m.Level == LevelError {
			out = append(out, m)
		}
	}
	return out
}

// Load opens url in a fresh headless browser and returns the page once it
// loaded, its network went idle (or Options.Settle passed) and
// Options.Script ran. A navigation that fails (a missing file, a blocked
// address) is an error; failed subresources are messages. When ctx ends
// the browser is killed and Load returns ctx's error.
func Load(ctx context.Context, url string, opt Options) (*Page, error) {
	if opt.Width <= 0 {
		opt.Width = 1280
	}
	if opt.Height <= 0 {
		opt.Height = 800
	}
	if opt.Settle <= 0 {
		opt.Settle = 3 * time.Second
	}
	b, err := start(ctx, opt)
	if err != nil {
		return nil, err
	}
	p, err := b.load(ctx, url, opt)
	b.close()
	if p != nil {
		p.Log = ParseLog(b.stderr.String())
		p.Isolated = b.isolated
	}
	if err != nil {
		var nav *NavigationError
		switch {
		case errors.As(err, &nav):
			return nil, err // the page's fault, not the browser's
		case ctx.Err() != nil:
			return nil, fmt.Errorf("chromium: open %s: %w", url, ctx.Err())
		}
		return nil, withLog(err, b.stderr.String())
	}
	return p, nil
}

// A NavigationError is a page that could not be opened at all: a missing
// file, an address the network rules stop (net::ERR_PROXY_CONNECTION_FAILED).
type NavigationError struct {
	URL  string
	Text string // Chromium's net error, net::ERR_…
}

func (e *NavigationError) Error() string { return "chromium: open " + e.URL + ": " + e.Text }

// Screenshot writes a PNG of url's first width×height CSS pixels to
// pngPath, the network off as for Load (use Load with Options.Screenshot
// for a live page on loopback).
func Screenshot(ctx context.Context, url, pngPath string, width, height int) error {
	_, err := Load(ctx, url, Options{Width: width, Height: height, Screenshot: pngPath})
	return err
}

// withLog adds the end of the browser's stderr to an error, for diagnosis.
func withLog(err error, stderr string) error {
	stderr = strings.TrimSpace(stderr)
	if stderr == "" {
		return err
	}
	const keep = 2000
	if len(stderr) > keep {
		stderr = "…" + stderr[len(stderr)-keep:]
	}
	return fmt.Errorf("%w\nchromium's stderr:\n%s", err, stderr)
}

// flags are the browser's command line (after the binary).
func flags(dir string, opt Options) []string {
	resolver := "MAP * ~NOTFOUND"
	if opt.AllowLoopback {
		resolver += " , EXCLUDE localhost , EXCLUDE 127.0.0.1 , EXCLUDE [::1]"
	}
	f := []string{
		"--headless",
		"--remote-debugging-pipe",
		"--user-data-dir=" + dir,
		"--no-first-run",
		"--no-default-browser-check",
		"--disable-gpu",
		"--disable-extensions",
		"--disable-default-apps",
		"--disable-sync",
		"--disable-background-networking",
		"--disable-component-update",
		"--disable-domain-reliability",
		"--disable-client-side-phishing-detection",
		"--disable-breakpad",
		"--disable-field-trial-config",
		"--disable-features=Translate,MediaRouter,OptimizationHints,AutofillServerCommunication,CertificateTransparencyComponentUpdater,InterestFeedContentSuggestions",
		"--safebrowsing-disable-auto-update",
		"--no-pings",
		"--metrics-recording-only",
		"--password-store=basic",
		"--mute-audio",
		"--hide-scrollbars",
		"--force-webrtc-ip-handling-policy=disable_non_proxied_udp",
		"--proxy-server=127.0.0.1:9",
		"--host-resolver-rules=" + resolver,
		"--enable-logging=stderr",
		"--v=0",
		fmt.Sprintf("--window-size=%d,%d", opt.Width, opt.Height),
	}
	if !opt.AllowLoopback {
		f = append(f, "--proxy-bypass-list=<-loopback>")
	}
	if os.Geteuid() == 0 {
		f = append(f, "--no-sandbox") // Chromium refuses to run as root with its sandbox
	}
	return append(f, "about:blank")
}

var netns struct {
	once sync.Once
	ok   bool
}

// canUnshare says whether `unshare --net` works here (root, and a kernel
// and container that allow it); asked once.
func canUnshare() bool {
	netns.once.Do(func() {
		if os.Geteuid() != 0 {
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		netns.ok = exec.CommandContext(ctx, "unshare", "--net", "--", "true").Run() == nil
	})
	return netns.ok
}

// testHookStarted, when set, is told each browser's process group and
// directory.
var testHookStarted func(pgid int, dir string)

// browser is one running browser.
type browser struct {
	cmd      *exec.Cmd
	pgid     int
	dir      string
	isolated bool
	conn     *conn
	stderr   *capBuffer
	errDone  chan struct{} // closed when stderr reached EOF
	exited   chan struct{} // closed once the browser process was waited for
	stop     func() bool   // stops the kill on ctx's end
	once     sync.Once
}

func start(ctx context.Context, opt Options) (*browser, error) {
	bin := opt.Binary
	if bin == "" {
		var err error
		if bin, err = Find(); err != nil {
			return nil, err
		}
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	dir, err := tempDir()
	if err != nil {
		return nil, fmt.Errorf("chromium: the profile directory: %w", err)
	}
	b := &browser{dir: dir, stderr: &capBuffer{max: 4 << 20}, errDone: make(chan struct{}), exited: make(chan struct{})}
	// Everything the browser writes goes under dir: its profile, its
	// temporary files (shared memory when /dev/shm is small, left behind
	// when it is killed), its $HOME (~/.pki, caches).
	profile, tmp := filepath.Join(dir, "profile"), filepath.Join(dir, "t")
	for _, d := range []string{profile, tmp} {
		if err := os.Mkdir(d, 0o700); err != nil {
			_ = os.RemoveAll(dir)
			return nil, fmt.Errorf("chromium: %w", err)
		}
	}
	args := flags(profile, opt)
	name := bin
	if !opt.AllowLoopback && !opt.flagsOnly && canUnshare() {
		// unshare(1) without --fork execs the browser in its own process:
		// same pid, same process group.
		name, args, b.isolated = "unshare", append([]string{"--net", "--", bin}, args...), true
	}
	// fd 3: commands to the browser; fd 4: its answers and events.
	toR, toW, err := os.Pipe()
	if err != nil {
		_ = os.RemoveAll(dir)
		return nil, fmt.Errorf("chromium: %w", err)
	}
	fromR, fromW, err := os.Pipe()
	if err != nil {
		closeAll(toR, toW)
		_ = os.RemoveAll(dir)
		return nil, fmt.Errorf("chromium: %w", err)
	}
	errR, errW, err := os.Pipe()
	if err != nil {
		closeAll(toR, toW, fromR, fromW)
		_ = os.RemoveAll(dir)
		return nil, fmt.Errorf("chromium: %w", err)
	}
	cmd := exec.Command(name, args...)
	cmd.ExtraFiles = []*os.File{toR, fromW}
	cmd.Stderr = errW
	cmd.Env = append(os.Environ(), "HOME="+dir, "TMPDIR="+tmp)
	cmd.Dir = dir
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	err = cmd.Start()
	closeAll(toR, fromW, errW)
	if err != nil {
		closeAll(toW, fromR, errR)
		_ = os.RemoveAll(dir)
		return nil, fmt.Errorf("chromium: start %s: %w", name, err)
	}
	b.cmd, b.pgid = cmd, cmd.Process.Pid
	if testHookStarted != nil {
		testHookStarted(b.pgid, dir)
	}
	go func() {
		_ = cmd.Wait()
		close(b.exited)
	}()
	go func() {
		_, _ = io.Copy(b.stderr, errR)
		_ = errR.Close()
		close(b.errDone)
	}()
	b.conn = newConn(toW, fromR)
	b.stop = context.AfterFunc(ctx, b.kill)
	return b, nil
}

// maxTmpDir is the longest $TMPDIR the browser can take: its
// SingletonSocket, $TMPDIR/org.chromium.Chromium.XXXXXX/SingletonSocket,
// must fit a Unix socket's 107 bytes (else: "FATAL … Socket path too
// long").
const maxTmpDir = 107 - len("/org.chromium.Chromium.XXXXXX/SingletonSocket")

// tempDir makes the browser's directory under $TMPDIR, or under /tmp when
// $TMPDIR is too long for the browser's socket.
func tempDir() (string, error) {
	dir, err := os.MkdirTemp("", "nemorl-chromium-")
	if err != nil || len(dir)+len("/t") <= maxTmpDir {
		return dir, err
	}
	_ = os.Remove(dir)
	return os.MkdirTemp("/tmp", "nemorl-chromium-")
}

func closeAll(fs ...*os.File) {
	for _, f := range fs {
		_ = f.Close()
	}
}

// kill kills the browser's whole process group.
func (b *browser) kill() { _ = syscall.Kill(-b.pgid, syscall.SIGKILL) }

// close ends the browser: politely (Browser.close), then by killing its
// process group and any process that names its directory; waits until
// none is left, then removes the directory.
func (b *browser) close() {
	b.once.Do(func() {
		b.stop()
		select {
		case <-b.exited:
		default:
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			_ = b.conn.call(ctx, "", "Browser.close", nil, nil)
			select {
			case <-b.exited:
			case <-ctx.Done():
			}
			cancel()
		}
		b.kill()
		<-b.exited
		waitGone(b.pgid, b.dir, 10*time.Second)
		b.conn.close()
		select {
		case <-b.errDone:
		case <-time.After(5 * time.Second):
		}
		_ = os.RemoveAll(b.dir)
	})
}

// alive lists the live processes (zombies aside) of the browser: those of
// its process group, and those whose command line names its directory
// (chrome_crashpad_handler leaves the group for a session of its own; its
// --database is under $HOME, that is dir). By /proc; without /proc, only
// the group, by kill(-pgid, 0), reported as -pgid.
func alive(pgid int, dir string) []int {
	procs, err := procfs.List()
	if err != nil {
		if syscall.Kill(-pgid, 0) == nil {
			return []int{-pgid}
		}
		return nil
	}
	var out []int
	for _, p := range procs {
		if p.Gone() {
			continue
		}
		if p.PGRP == pgid {
			out = append(out, p.PID)
			continue
		}
		if cmdline, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(p.PID), "cmdline")); err == nil && bytes.Contains(cmdline, []byte(dir+"/")) {
			out = append(out, p.PID)
		}
	}
	return out
}

// waitGone kills the browser's processes until none is left (or limit
// passed).
func waitGone(pgid int, dir string, limit time.Duration) {
	deadline := time.Now().Add(limit)
	for {
		pids := alive(pgid, dir)
		if len(pids) == 0 || time.Now().After(deadline) {
			return
		}
		_ = syscall.Kill(-pgid, syscall.SIGKILL)
		for _, p := range pids {
			if p > 0 {
				_ = syscall.Kill(p, syscall.SIGKILL)
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// capBuffer keeps the first max bytes written to it.
type capBuffer struct {
	mu  sync.Mutex
	b   bytes.Buffer
	max int
}

func (c *capBuffer) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if room := c.max - c.b.Len(); room > 0 {
		c.b.Write(p[:min(len(p), room)])
	}
	return len(p), nil
}

func (c *capBuffer) String() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.b.String()
}

// pageState gathers a page's events as the reader goroutine gets them.
type pageState struct {
	mu        sync.Mutex
	msgs      []Message
	lifecycle map[string]map[string]bool // loader id → lifecycle events seen
	crashed   bool
	changed   chan struct{} // a token when something came
}

func (s *pageState) notify() {
	select {
	case s.changed <- struct{}{}:
	default:
	}
}

// remoteObject is DevTools' Runtime.RemoteObject, as far as it is read.
type remoteObject struct {
	Type                string          `json:"type"`
	Subtype             string          `json:"subtype"`
	Value               json.RawMessage `json:"value"`
	UnserializableValue string          `json:"unserializableValue"`
	Description         string          `json:"description"`
}

func (o remoteObject) text() string {
	switch {
	case o.Type == "string":
		var s string
		if json.Unmarshal(o.Value, &s) == nil {
			return s
		}
	case o.Type == "undefined":
		return "undefined"
	case o.UnserializableValue != "":
		return o.UnserializableValue
	case o.Description != "":
		return o.Description
	case len(o.Value) > 0:
		return string(o.Value)
	}
	return o.Type
}

type callFrame struct {
	URL        string `json:"url"`
	LineNumber int    `json:"lineNumber"`
}

type stackTrace struct {
	CallFrames []callFrame `json:"callFrames"`
}

func (st *stackTrace) top() (string, int) {
	if st == nil || len(st.CallFrames) == 0 {
		return "", 0
	}
	return st.CallFrames[0].URL, st.CallFrames[0].LineNumber + 1
}

func (s *pageState) event(method string, params json.RawMessage) {
	s.mu.Lock()
	defer s.mu.Unlock()
	defer s.notify()
	switch method {
	case "Runtime.consoleAPICalled":
		var e struct {
			Type       string         `json:"type"`
			Args       []remoteObject `json:"args"`
			StackTrace *stackTrace    `json:"stackTrace"`
		}
		if json.Unmarshal(params, &e) != nil {
			return
		}
		parts := make([]string, len(e.Args))
		for i, a := range e.Args {
			parts[i] = a.text()
		}
		level := LevelInfo
		switch e.Type {
		case "error", "assert":
			level = LevelError
		case "warning":
			level = LevelWarning
		case "debug":
			level = LevelVerbose
		}
		text := strings.Join(parts, " ")
		if e.Type == "assert" {
			text = "Assertion failed: " + text
		}
		url, line := e.StackTrace.top()
		s.msgs = append(s.msgs, Message{Source: "console-api", Level: level, Text: text, URL: url, Line: line})
	case "Runtime.exceptionThrown":
		var e struct {
			Details struct {
				Text       string        `json:"text"`
				URL        string        `json:"url"`
				LineNumber int           `json:"lineNumber"`
				Exception  *remoteObject `json:"exception"`
				StackTrace *stackTrace   `json:"stackTrace"`
			} `json:"exceptionDetails"`
		}
		if json.Unmarshal(params, &e) != nil {
			return
		}
		d := e.Details
		text := d.Text
		if d.Exception != nil {
			text += " " + d.Exception.text()
		}
		url, line := d.URL, d.LineNumber+1
		if url == "" {
			url, line = d.StackTrace.top()
		}
		s.msgs = append(s.msgs, Message{Source: "exception", Level: LevelError, Text: text, URL: url, Line: line})
	case "Log.entryAdded":
		var e struct {
			Entry struct {
				Source     string `json:"source"`
				Level      Level  `json:"level"`
				Text       string `json:"text"`
				URL        string `json:"url"`
				LineNumber *int   `json:"lineNumber"`
			} `json:"entry"`
		}
		if json.Unmarshal(params, &e) != nil {
			return
		}
		m := Message{Source: e.Entry.Source, Level: e.Entry.Level, Text: e.Entry.Text, URL: e.Entry.URL}
		if e.Entry.LineNumber != nil {
			m.Line = *e.Entry.LineNumber + 1
		}
		s.msgs = append(s.msgs, m)
	case "Page.lifecycleEvent":
		var e struct {
			LoaderID string `json:"loaderId"`
			Name     string `json:"name"`
		}
		if json.Unmarshal(params, &e) != nil {
			return
		}
		if e.Name == "init" {
			s.lifecycle[e.LoaderID] = map[string]bool{}
		}
		if s.lifecycle[e.LoaderID] == nil {
			s.lifecycle[e.LoaderID] = map[string]bool{}
		}
		s.lifecycle[e.LoaderID][e.Name] = true
	case "Inspector.targetCrashed", "Target.targetCrashed":
		s.crashed = true
	}
}

var errCrashed = errors.New("chromium: the page crashed")

// wait waits until cond (called with s.mu held) holds.
func (s *pageState) wait(ctx context.Context, c *conn, cond func() bool) error {
	for {
		s.mu.Lock()
		ok, crashed := cond(), s.crashed
		s.mu.Unlock()
		switch {
		case crashed:
			return errCrashed
		case ok:
			return nil
		}
		select {
		case <-s.changed:
		case <-ctx.Done():
			return ctx.Err()
		case <-c.done:
			return c.err()
		}
	}
}

func (b *browser) load(ctx context.Context, url string, opt Options) (*Page, error) {
	c := b.conn
	st := &pageState{lifecycle: map[string]map[string]bool{}, changed: make(chan struct{}, 1)}
	var target struct {
		TargetID string `json:"targetId"`
	}
	if err := c.call(ctx, "", "Target.createTarget", map[string]any{"url": "about:blank"}, &target); err != nil {
		return nil, err
	}
	var attached struct {
		SessionID string `json:"sessionId"`
	}
	if err := c.call(ctx, "", "Target.attachToTarget", map[string]any{"targetId": target.TargetID, "flatten": true}, &attached); err != nil {
		return nil, err
	}
	sid := attached.SessionID
	c.subscribe(sid, st.event)
	for _, m := range []struct {
		method string
		params any
	}{
		{"Page.enable", nil},
		{"Page.setLifecycleEventsEnabled", map[string]any{"enabled": true}},
		{"Runtime.enable", nil},
		{"Log.enable", nil},
		{"Emulation.setDeviceMetricsOverride", map[string]any{"width": opt.Width, "height": opt.Height, "deviceScaleFactor": 1, "mobile": false}},
	} {
		if err := c.call(ctx, sid, m.method, m.params, nil); err != nil {
			return nil, err
		}
	}
	var nav struct {
		LoaderID  string `json:"loaderId"`
		ErrorText string `json:"errorText"`
	}
	if err := c.call(ctx, sid, "Page.navigate", map[string]any{"url": url}, &nav); err != nil {
		return nil, err
	}
	if nav.ErrorText != "" {
		return nil, &NavigationError{URL: url, Text: nav.ErrorText}
	}
	if nav.LoaderID != "" {
		seen := func(name string) bool { return st.lifecycle[nav.LoaderID][name] }
		if err := st.wait(ctx, c, func() bool { return seen("load") }); err != nil {
			return nil, fmt.Errorf("chromium: open %s: wait for the load event: %w", url, err)
		}
		settle, cancel := context.WithTimeout(ctx, opt.Settle)
		err := st.wait(settle, c, func() bool { return seen("networkIdle") })
		cancel()
		if err != nil && ctx.Err() == nil && !errors.Is(err, context.DeadlineExceeded) {
			return nil, fmt.Errorf("chromium: open %s: %w", url, err)
		}
	}
	p := &Page{}
	if opt.Script != "" {
		v, err := c.eval(ctx, sid, opt.Script)
		if err != nil {
			return nil, fmt.Errorf("chromium: %s: the script: %w", url, err)
		}
		p.Result = v
	}
	if opt.Screenshot != "" {
		var shot struct {
			Data string `json:"data"`
		}
		if err := c.call(ctx, sid, "Page.captureScreenshot", map[string]any{"format": "png"}, &shot); err != nil {
			return nil, fmt.Errorf("chromium: %s: screenshot: %w", url, err)
		}
		png, err := base64.StdEncoding.DecodeString(shot.Data)
		if err != nil {
			return nil, fmt.Errorf("chromium: %s: screenshot: %w", url, err)
		}
		if err := os.WriteFile(opt.Screenshot, png, 0o644); err != nil {
			return nil, fmt.Errorf("chromium: %w", err)
		}
	}
	dom, err := c.eval(ctx, sid, `(document.doctype ? new XMLSerializer().serializeToString(document.doctype) + "\n" : "") + document.documentElement.outerHTML`)
	if err != nil {
		return nil, fmt.Errorf("chromium: %s: take the DOM: %w", url, err)
	}
	loc, err := c.eval(ctx, sid, `location.href`)
	if err != nil {
		return nil, fmt.Errorf("chromium: %s: %w", url, err)
	}
	if err := json.Unmarshal(dom, &p.DOM); err != nil {
		return nil, fmt.Errorf("chromium: %s: the DOM: %w", url, err)
	}
	_ = json.Unmarshal(loc, &p.URL)
	st.mu.Lock()
	p.Messages = append([]Message(nil), st.msgs...)
	st.mu.Unlock()
	return p, nil
}

// conn is a DevTools protocol connection over the browser's pipes: JSON
// messages, each ended by a NUL byte.
type conn struct {
	w      *os.File
	r      *os.File
	wmu    sync.Mutex
	mu     sync.Mutex
	id     int64
	calls  map[int64]chan reply
	subs   map[string]func(method string, params json.RawMessage)
	done   chan struct{} // closed when the reader ended
	rerr   error
	closed sync.Once
}

type reply struct {
	result json.RawMessage
	err    error
}

func newConn(w, r *os.File) *conn {
	c := &conn{w: w, r: r, calls: map[int64]chan reply{}, subs: map[string]func(string, json.RawMessage){}, done: make(chan struct{})}
	go c.read()
	return c
}

func (c *conn) err() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.rerr == nil || errors.Is(c.rerr, io.EOF) {
		return errors.New("chromium: the browser went away")
	}
	return fmt.Errorf("chromium: read from the browser: %w", c.rerr)
}

func (c *conn) close() {
	c.closed.Do(func() {
		_ = c.w.Close()
		_ = c.r.Close()
		<-c.done
	})
}

func (c *conn) subscribe(session string, f func(string, json.RawMessage)) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.subs[session] = f
}

func (c *conn) read() {
	defer close(c.done)
	br := bufio.NewReaderSize(c.r, 1<<16)
	for {
		msg, err := br.ReadBytes(0)
		if err != nil {
			c.mu.Lock()
			c.rerr = err
			c.mu.Unlock()
			return
		}
		var m struct {
			ID        int64           `json:"id"`
			Method    string          `json:"method"`
			SessionID string          `json:"sessionId"`
			Params    json.RawMessage `json:"params"`
			Result    json.RawMessage `json:"result"`
			Error     *struct {
				Code    int    `json:"code"`
				Message string `json:"message"`
				Data    string `json:"data"`
			} `json:"error"`
		}
		if json.Unmarshal(msg[:len(msg)-1], &m) != nil {
			continue
		}
		c.mu.Lock()
		if m.ID != 0 {
			ch := c.calls[m.ID]
			delete(c.calls, m.ID)
			c.mu.Unlock()
			if ch != nil {
				r := reply{result: m.Result}
				if m.Error != nil {
					r.err = fmt.Errorf("%s (%d) %s", m.Error.Message, m.Error.Code, m.Error.Data)
				}
				ch <- r
			}
			continue
		}
		f := c.subs[m.SessionID]
		c.mu.Unlock()
		if f != nil {
			f(m.Method, m.Params)
		}
	}
}

// call sends method and decodes its result into result (when not nil).
func (c *conn) call(ctx context.Context, session, method string, params, result any) error {
	c.mu.Lock()
	c.id++
	id := c.id
	ch := make(chan reply, 1)
	c.calls[id] = ch
	c.mu.Unlock()
	defer func() {
		c.mu.Lock()
		delete(c.calls, id)
		c.mu.Unlock()
	}()
	msg := map[string]any{"id": id, "method": method}
	if params != nil {
		msg["params"] = params
	}
	if session != "" {
		msg["sessionId"] = session
	}
	b, err := json.Marshal(msg)
	if err != nil {
		return fmt.Errorf("chromium: %s: %w", method, err)
	}
	c.wmu.Lock()
	_, err = c.w.Write(append(b, 0))
	c.wmu.Unlock()
	if err != nil {
		return fmt.Errorf("chromium: %s: %w", method, err)
	}
	select {
	case r := <-ch:
		if r.err != nil {
			return fmt.Errorf("chromium: %s: %w", method, r.err)
		}
		if result != nil {
			if err := json.Unmarshal(r.result, result); err != nil {
				return fmt.Errorf("chromium: %s: %w", method, err)
			}
		}
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-c.done:
		return fmt.Errorf("%w (waiting for %s)", c.err(), method)
	}
}

// eval evaluates expr in the page (awaiting a promise) and returns its
// value as JSON.
func (c *conn) eval(ctx context.Context, session, expr string) (json.RawMessage, error) {
	var r struct {
		Result           remoteObject `json:"result"`
		ExceptionDetails *struct {
			Text      string        `json:"text"`
			Exception *remoteObject `json:"exception"`
		} `json:"exceptionDetails"`
	}
	if err := c.call(ctx, session, "Runtime.evaluate", map[string]any{"expression": expr, "returnByValue": true, "awaitPromise": true}, &r); err != nil {
		return nil, err
	}
	if d := r.ExceptionDetails; d != nil {
		text := d.Text
		if d.Exception != nil {
			text += " " + d.Exception.text()
		}
		return nil, errors.New(text)
	}
	if r.Result.Type == "undefined" || len(r.Result.Value) == 0 {
		return json.RawMessage("null"), nil
	}
	return r.Result.Value, nil
}

// A LogLine is one entry of Chromium's stderr log, such as
//
//	[16497:16528:1203/085023.321670:ERROR:dbus/bus.cc:405] Failed to connect to the bus: …
//	[16497:16497:1203/085024.044421:INFO:CONSOLE:2] "x", source: file:///tmp/p.html (2)
//	[1203/085024.044:INFO:CONSOLE(2)] "x", source: file:///tmp/p.html (2)
//
// (the last the format of Chromium before 13x). A line that is not in
// this format (the Debian launcher's complaints, say) is an entry of its
// own with only Text set.
type LogLine struct {
	PID, TID int    // 0 when not printed
	hasIDs   bool   // the pid:tid fields were printed
	Time     string // MMDD/HHMMSS.fraction as printed; "" when not
	Severity string // INFO, WARNING, ERROR, FATAL, VERBOSE1…; "" for a line not in the format
	File     string // the source file that logged; CONSOLE for a page's console
	Line     int
	Text     string // the message; a console message's lines joined by \n
}

// String is the line as Chromium prints it now.
func (l LogLine) String() string {
	if l.Severity == "" {
		return l.Text
	}
	var b strings.Builder
	b.WriteByte('[')
	if l.hasIDs {
		b.WriteString(strconv.Itoa(l.PID) + ":" + strconv.Itoa(l.TID) + ":")
	}
	if l.Time != "" {
		b.WriteString(l.Time + ":")
	}
	b.WriteString(l.Severity + ":" + l.File + ":" + strconv.Itoa(l.Line) + "]")
	if l.Text != "" {
		b.WriteString(" " + l.Text)
	}
	return b.String()
}

// Console parses a page's console message ("text", source: URL (line))
// out of a CONSOLE line. Chromium logs every level as INFO: the level is
// a guess, error for an uncaught exception ("Uncaught …"), info else.
func (l LogLine) Console() (Message, bool) {
	if l.File != "CONSOLE" || l.Severity == "" {
		return Message{}, false
	}
	text, url, line, ok := splitConsole(l.Text)
	if !ok {
		return Message{}, false
	}
	level := LevelInfo
	if strings.HasPrefix(text, "Uncaught") {
		level = LevelError
	}
	return Message{Source: "stderr", Level: level, Text: text, URL: url, Line: line}, true
}

const sourceSep = `", source: `

// splitConsole splits `"text", source: url (line)`.
func splitConsole(s string) (text, url string, line int, ok bool) {
	if !strings.HasPrefix(s, `"`) || !strings.HasSuffix(s, ")") {
		return "", "", 0, false
	}
	i := strings.LastIndex(s[1:], sourceSep) + 1 // not the opening quote
	if i < 1 {
		return "", "", 0, false
	}
	rest := s[i+len(sourceSep) : len(s)-1]
	j := strings.LastIndex(rest, " (")
	if j < 0 {
		return "", "", 0, false
	}
	n, ok := digits(rest[j+2:])
	if !ok {
		return "", "", 0, false
	}
	return s[1:i], rest[:j], n, true
}

// digits parses a non-negative decimal of at most 9 digits.
func digits(s string) (int, bool) {
	if s == "" || len(s) > 9 {
		return 0, false
	}
	n := 0
	for _, c := range []byte(s) {
		if c < '0' || c > '9' {
			return 0, false
		}
		n = n*10 + int(c-'0')
	}
	return n, true
}

func isSeverity(s string) bool {
	switch s {
	case "INFO", "WARNING", "ERROR", "FATAL":
		return true
	}
	n, ok := strings.CutPrefix(s, "VERBOSE")
	_, isNum := digits(n)
	return ok && isNum
}

func isTime(s string) bool {
	d, t, ok := strings.Cut(s, "/")
	if !ok {
		return false
	}
	t, frac, _ := strings.Cut(t, ".")
	_, ok1 := digits(d)
	_, ok2 := digits(t)
	_, ok3 := digits(frac)
	return ok1 && ok2 && (ok3 || frac == "" && !strings.Contains(s, "."))
}

// parseHeader parses one line's "[…] " prefix.
func parseHeader(s string) (LogLine, bool) {
	if !strings.HasPrefix(s, "[") {
		return LogLine{}, false
	}
	end := strings.IndexByte(s, ']')
	if end < 0 {
		return LogLine{}, false
	}
	head, text := s[1:end], s[end+1:]
	if text != "" {
		var ok bool
		if text, ok = strings.CutPrefix(text, " "); !ok {
			return LogLine{}, false
		}
	}
	f := strings.Split(head, ":")
	var l LogLine
	// The location: file:line or file(line).
	last := f[len(f)-1]
	if i := strings.IndexByte(last, '('); i > 0 && strings.HasSuffix(last, ")") {
		n, ok := digits(last[i+1 : len(last)-1])
		if !ok {
			return LogLine{}, false
		}
		l.File, l.Line, f = last[:i], n, f[:len(f)-1]
	} else {
		if len(f) < 3 {
			return LogLine{}, false
		}
		n, ok := digits(last)
		if !ok {
			return LogLine{}, false
		}
		l.File, l.Line, f = f[len(f)-2], n, f[:len(f)-2]
	}
	if l.File == "" || strings.ContainsAny(l.File, "() \t\n") || len(f) == 0 || !isSeverity(f[len(f)-1]) {
		return LogLine{}, false
	}
	l.Severity, f = f[len(f)-1], f[:len(f)-1]
	if len(f) > 0 && isTime(f[len(f)-1]) {
		l.Time, f = f[len(f)-1], f[:len(f)-1]
	}
	switch len(f) {
	case 0:
	case 2:
		pid, ok1 := digits(f[0])
		tid, ok2 := digits(f[1])
		if !ok1 || !ok2 {
			return LogLine{}, false
		}
		l.PID, l.TID, l.hasIDs = pid, tid, true
	default:
		return LogLine{}, false
	}
	l.Text = text
	return l, true
}

// ParseLog parses Chromium's stderr into its entries. A console message
// of several lines is one entry: the lines that follow a CONSOLE line
// whose `", source: URL (line)` tail has not come yet are its.
func ParseLog(s string) []LogLine {
	var out []LogLine
	open := false // the last entry is a console message still open
	for line := range strings.Lines(s) {
		line = strings.TrimRight(strings.TrimSuffix(line, "\n"), "\r")
		if open {
			l := &out[len(out)-1]
			l.Text += "\n" + line
			_, _, _, done := splitConsole(l.Text)
			open = !done
			continue
		}
		l, ok := parseHeader(line)
		if !ok {
			if line != "" {
				out = append(out, LogLine{Text: line})
			}
			continue
		}
		out = append(out, l)
		if l.File == "CONSOLE" && strings.HasPrefix(l.Text, `"`) {
			_, _, _, done := splitConsole(l.Text)
			open = !done
		}
	}
	return out
}
