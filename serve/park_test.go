package serve

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"runtime"
	"testing"
	"time"

	"github.com/nemorl/nemorl-slurm/rules"
)

// rawPost sends a /run request on a connection of its own, with nothing
// on the client's side but the connection (no goroutine).
func rawPost(t *testing.T, addr, body string) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	if _, err := fmt.Fprintf(c, "POST /run HTTP/1.1\r\nHost: serve\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", len(body), body); err != nil {
		t.Fatal(err)
	}
	return c
}

func (s *Server) parkedNow() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.parked)
}

func waitFor(t *testing.T, what string, d time.Duration, ok func() bool) {
	t.Helper()
	for deadline := time.Now().Add(d); !ok(); {
		if time.Now().After(deadline) {
			t.Fatalf("after %s: %s", d, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// readAnswer reads one HTTP answer from c.
func readAnswer(t *testing.T, c net.Conn) (*http.Response, map[string]any) {
	t.Helper()
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatalf("reading the answer: %v", err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	var doc map[string]any
	if err := json.Unmarshal(raw, &doc); err != nil {
		t.Fatalf("answer %q: %v", raw, err)
	}
	return resp, doc
}

// TestParkedRequests: requests waiting for their episode hold their
// connection alone (no goroutine each, net/http's included); a client that
// leaves is noticed by the sweep; the run's end answers every request on
// it; serve's shutdown answers the rest as a waiting handler would
// (_ng_no_persist).
func TestParkedRequests(t *testing.T) {
	old := parkSweep
	parkSweep = 50 * time.Millisecond
	t.Cleanup(func() { parkSweep = old })
	s, d := newTestServer(t, Options{})
	s.slots.force() // no slot: nothing is submitted
	body := `{"responses_create_params": {"input": "x"}, "_ng_task_index": 3, "_ng_rollout_index": 0}`
	rw, k := keyOf(t, body)
	ru, st, err := s.claim(rw, k) // every request below attaches to it
	if err != nil || st != nil {
		t.Fatal(err, st)
	}
	hs := httptest.NewServer(s.Handler())
	defer hs.Close()
	addr := hs.Listener.Addr().String()

	before := runtime.NumGoroutine()
	const n = 200
	conns := make([]net.Conn, n)
	for i := range conns {
		conns[i] = rawPost(t, addr, body)
	}
	waitFor(t, "every request parked", 10*time.Second, func() bool { return s.parkedNow() == n })
	waitFor(t, "no goroutine per parked request", 5*time.Second, func() bool { return runtime.NumGoroutine() < before+10 })

	// A client that leaves: the sweep closes its connection; the run goes on.
	conns[0].Close()
	waitFor(t, "the sweep to notice the client that left", 5*time.Second, func() bool { return s.parkedNow() == n-1 })

	// The run ends: every request still there gets its outcome, and the
	// connection closes after it.
	final := finalEntry(t, d, rules.Outcome{Outcome: rules.Scored, Reward: f64(0.25)}, `{"id":"resp_parked"}`, "")
	s.end(ru, final, nil)
	for i := 1; i < n; i++ {
		resp, doc := readAnswer(t, conns[i])
		if resp.StatusCode != http.StatusOK || doc["reward"] != 0.25 || doc["episode"] != final.Episode || !resp.Close {
			t.Fatalf("request %d: %d close=%v %v", i, resp.StatusCode, resp.Close, doc)
		}
		if resp.ContentLength <= 0 || resp.Header.Get("Content-Type") != "application/json" {
			t.Fatalf("request %d: headers %v", i, resp.Header)
		}
		if _, err := conns[i].Read(make([]byte, 1)); err != io.EOF {
			t.Fatalf("request %d: after the answer: %v, want EOF", i, err)
		}
	}
	waitFor(t, "no request parked after the run's end", 5*time.Second, func() bool { return s.parkedNow() == 0 })

	// Shutdown answers the requests parked on runs that have not ended.
	body2 := `{"responses_create_params": {"input": "x"}, "_ng_task_index": 4, "_ng_rollout_index": 0}`
	rw2, k2 := keyOf(t, body2)
	if _, _, err := s.claim(rw2, k2); err != nil {
		t.Fatal(err)
	}
	late := []net.Conn{rawPost(t, addr, body2), rawPost(t, addr, body2)}
	waitFor(t, "the late requests parked", 5*time.Second, func() bool { return s.parkedNow() == 2 })
	s.Shutdown()
	for i, c := range late {
		resp, doc := readAnswer(t, c)
		if resp.StatusCode != http.StatusOK || doc["_ng_no_persist"] != true || doc["_ng_failure_class"] != "infra_failure/serve_shutdown" {
			t.Errorf("late request %d on shutdown: %d %v", i, resp.StatusCode, doc)
		}
	}
	if n := s.parkedNow(); n != 0 {
		t.Errorf("%d requests still parked after shutdown", n)
	}
}

// TestConnWriter: the answer's bytes as an HTTP/1.1 client reads them.
func TestConnWriter(t *testing.T) {
	a, b := net.Pipe()
	defer a.Close()
	defer b.Close()
	w := &connWriter{conn: a, header: http.Header{}}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusInternalServerError)
	if _, err := w.Write([]byte(`{"error":"x"}` + "\n")); err != nil {
		t.Fatal(err)
	}
	errc := make(chan error, 1)
	go func() { errc <- http.NewResponseController(w).Flush() }()
	resp, err := http.ReadResponse(bufio.NewReader(b), nil)
	if err != nil {
		t.Fatal(err)
	}
	raw, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 500 || string(raw) != `{"error":"x"}`+"\n" || !resp.Close || resp.ContentLength != int64(len(raw)) {
		t.Errorf("%d close=%v length=%d %q", resp.StatusCode, resp.Close, resp.ContentLength, raw)
	}
	if err := <-errc; err != nil {
		t.Errorf("flush: %v", err)
	}
	if _, err := w.Write([]byte("more")); err == nil {
		t.Error("a write after the answer was sent succeeded")
	}
	// A connection that is gone: the flush says so (deliver takes the
	// delivery back).
	c, d := net.Pipe()
	d.Close()
	w2 := &connWriter{conn: c, header: http.Header{}}
	_, _ = w2.Write([]byte("{}"))
	if err := w2.FlushError(); err == nil {
		t.Error("flush to a closed connection reported no error")
	}
	c.Close()
}
