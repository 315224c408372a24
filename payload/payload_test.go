package payload

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

func TestSettings(t *testing.T) {
	got, err := Settings(strings.NewReader(`{"concurrency": 30, "top_p": 1, "temperature": 0.7, "benchmark": "aime25",
		"policy_model": {"model": "it's $(id)", "uses_reasoning_parser": false}, "list": [1], "none": null}`))
	if err != nil {
		t.Fatal(err)
	}
	want := "NEMORL_SETTING_BENCHMARK=aime25\nNEMORL_SETTING_CONCURRENCY=30\n" +
		"NEMORL_SETTING_POLICY_MODEL_MODEL='it'\\''s $(id)'\nNEMORL_SETTING_POLICY_MODEL_USES_REASONING_PARSER=false\n" +
		"NEMORL_SETTING_TEMPERATURE=0.7\nNEMORL_SETTING_TOP_P=1\n"
	if got != want {
		t.Fatalf("got:\n%s\nwant:\n%s", got, want)
	}
	// What bash makes of it: the values, never a command run.
	out, err := exec.Command("bash", "-c", got+`printf '%s|%s' "$NEMORL_SETTING_POLICY_MODEL_MODEL" "$NEMORL_SETTING_TEMPERATURE"`).Output()
	if err != nil || string(out) != "it's $(id)|0.7" {
		t.Fatalf("bash read %q, %v", out, err)
	}
	for _, bad := range []string{`{"a-b": 1}`, `{"a": "x\ny"}`, `[1]`, `{"a": 1} {"b": 2}`, `{"a": `} {
		if _, err := Settings(strings.NewReader(bad)); err == nil {
			t.Errorf("%s accepted", bad)
		}
	}
}

func FuzzSettings(f *testing.F) {
	f.Add(`{"a": {"b": "c"}, "n": 1.5e3}`)
	f.Add(`{"x": "'\n$(id)"}`)
	f.Fuzz(func(t *testing.T, in string) {
		out, err := Settings(strings.NewReader(in))
		if err != nil {
			return
		}
		for _, line := range strings.Split(strings.TrimSuffix(out, "\n"), "\n") {
			if line != "" && !strings.HasPrefix(line, SettingsPrefix) {
				t.Fatalf("line %q", line)
			}
		}
	})
}

func TestFreePort(t *testing.T) {
	p, err := FreePort()
	if err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(p)))
	if err != nil {
		t.Fatalf("port %d is not free: %v", p, err)
	}
	l.Close()
}

func TestWaitHTTP(t *testing.T) {
	var calls atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if calls.Add(1) < 3 {
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		w.WriteHeader(http.StatusOK)
	}))
	defer srv.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := WaitHTTP(ctx, srv.URL+"/health", WaitOptions{WantStatus: 200, Interval: 10 * time.Millisecond}); err != nil {
		t.Fatal(err)
	}
	if n := calls.Load(); n != 3 {
		t.Fatalf("%d calls, want 3 (ready on the third)", n)
	}
	// Any answer is enough without WantStatus.
	calls.Store(0)
	if err := WaitHTTP(ctx, srv.URL, WaitOptions{Interval: 10 * time.Millisecond}); err != nil || calls.Load() != 1 {
		t.Fatalf("%v after %d calls", err, calls.Load())
	}
}

// TestWaitHTTPServerDies: a server process that exits ends the wait at
// once, with an error naming it; a deadline ends it too.
func TestWaitHTTPServerDies(t *testing.T) {
	p, err := FreePort()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("sleep", "0.2")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go cmd.Wait()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	start := time.Now()
	err = WaitHTTP(ctx, "http://127.0.0.1:"+strconv.Itoa(p)+"/health", WaitOptions{WantStatus: 200, PID: cmd.Process.Pid, Interval: 20 * time.Millisecond})
	if err == nil || !strings.Contains(err.Error(), "exited") {
		t.Fatalf("err %v, want the server process exited", err)
	}
	if time.Since(start) > 10*time.Second {
		t.Fatalf("took %s to notice", time.Since(start))
	}
	short, cancel2 := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel2()
	if err := WaitHTTP(short, "http://127.0.0.1:"+strconv.Itoa(p)+"/", WaitOptions{Interval: 20 * time.Millisecond}); err == nil || !strings.Contains(err.Error(), "deadline") {
		t.Fatalf("err %v, want deadline exceeded", err)
	}
}
