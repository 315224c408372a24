package main

import (
	"bytes"
	"crypto/rand"
	"crypto/sha256"
	"errors"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// TestMain runs main() when the test binary is re-executed as the proxy
// (TestSIGTERM).
func TestMain(m *testing.M) {
	if os.Getenv("DELAYPROXY_RUN_MAIN") == "1" {
		os.Args = append([]string{"delayproxy"}, strings.Fields(os.Getenv("DELAYPROXY_ARGS"))...)
		main()
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// server listens on 127.0.0.1 and runs handle for each connection until t
// ends.
func server(t *testing.T, handle func(*net.TCPConn)) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	t.Cleanup(func() { _ = ln.Close(); wg.Wait() })
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer c.Close()
				handle(c.(*net.TCPConn))
			}()
		}
	}()
	return ln.Addr().String()
}

// echo writes back everything it reads, then half-closes.
func echo(c *net.TCPConn) {
	_, _ = io.Copy(c, c)
	_ = c.CloseWrite()
}

// start runs a proxy to target with delay; it is closed when t ends.
func start(t *testing.T, target string, delay time.Duration) (*proxy, string) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := newProxy(target, delay)
	p.logf = t.Logf
	done := make(chan error, 1)
	go func() { done <- p.Serve(ln) }()
	t.Cleanup(func() {
		p.Close()
		if err := <-done; err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
	return p, ln.Addr().String()
}

func dial(t *testing.T, addr string) *net.TCPConn {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	_ = c.SetDeadline(time.Now().Add(30 * time.Second))
	return c.(*net.TCPConn)
}

// TestRoundTrip: a small message echoed through the proxy takes at least
// two delays, and (the fastest of several) not much more.
func TestRoundTrip(t *testing.T) {
	const d = 25 * time.Millisecond
	const margin = 40 * time.Millisecond
	_, addr := start(t, server(t, echo), d)
	c := dial(t, addr)
	best := time.Hour
	buf := make([]byte, 5)
	for i := range 6 {
		msg := []byte("ping" + strconv.Itoa(i))
		t0 := time.Now()
		if _, err := c.Write(msg); err != nil {
			t.Fatal(err)
		}
		if _, err := io.ReadFull(c, buf); err != nil {
			t.Fatal(err)
		}
		rtt := time.Since(t0)
		if !bytes.Equal(buf, msg) {
			t.Fatalf("echo %q, want %q", buf, msg)
		}
		if rtt < 2*d {
			t.Errorf("round trip %d took %v, less than 2×%v", i, rtt, d)
		}
		best = min(best, rtt)
	}
	t.Logf("fastest round trip %v (delay %v each way)", best, d)
	if best >= 2*d+margin {
		t.Errorf("fastest round trip %v, want < 2×%v + %v", best, d, margin)
	}
}

// TestBulkIsLatency: 4 MiB in one direction takes about one delay, far less
// than a delay per chunk (a per-write sleep would take chunks × delay), and
// arrives intact and in order; the client's half-close reaches the server,
// whose answer and EOF come back.
func TestBulkIsLatency(t *testing.T) {
	const d = 20 * time.Millisecond
	const size = 4 << 20
	data := make([]byte, size)
	_, _ = rand.Read(data)
	want := sha256.Sum256(data)
	// The server hashes everything up to EOF, answers the count and the
	// digest, and closes.
	target := server(t, func(c *net.TCPConn) {
		h := sha256.New()
		n, err := io.Copy(h, c)
		if err != nil {
			return
		}
		_, _ = c.Write(append([]byte(strconv.FormatInt(n, 10)+" "), h.Sum(nil)...))
	})
	_, addr := start(t, target, d)
	c := dial(t, addr)

	t0 := time.Now()
	for off := 0; off < size; off += 16 << 10 {
		if _, err := c.Write(data[off : off+16<<10]); err != nil {
			t.Fatal(err)
		}
	}
	if err := c.CloseWrite(); err != nil {
		t.Fatal(err)
	}
	got, err := io.ReadAll(c) // to EOF: the server's close came through
	elapsed := time.Since(t0)
	if err != nil {
		t.Fatal(err)
	}
	n, digest, _ := bytes.Cut(got, []byte(" "))
	if string(n) != strconv.Itoa(size) || !bytes.Equal(digest, want[:]) {
		t.Fatalf("server got %s bytes, digest %x; want %d, %x", n, digest, size, want)
	}
	chunks := size / chunkSize // at least this many reads in the proxy
	serialised := time.Duration(chunks) * d
	t.Logf("4 MiB + answer in %v (delay %v each way; a delay per chunk would take ≥ %v)", elapsed, d, serialised)
	if elapsed < 2*d {
		t.Errorf("took %v, less than a round trip 2×%v", elapsed, d)
	}
	if elapsed > serialised/8 {
		t.Errorf("took %v: not latency but serialisation (%d chunks × %v = %v)", elapsed, chunks, d, serialised)
	}
}

// TestBothWaysInOrder: bytes written in many small pieces both ways at once
// come back intact and in order.
func TestBothWaysInOrder(t *testing.T) {
	_, addr := start(t, server(t, echo), 5*time.Millisecond)
	c := dial(t, addr)
	data := make([]byte, 1<<20)
	_, _ = rand.Read(data)
	errc := make(chan error, 1)
	go func() {
		for off := 0; off < len(data); {
			n := min(1+off%997, len(data)-off)
			if _, err := c.Write(data[off : off+n]); err != nil {
				errc <- err
				return
			}
			off += n
		}
		errc <- c.CloseWrite()
	}()
	got, err := io.ReadAll(c)
	if err != nil {
		t.Fatal(err)
	}
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, data) {
		t.Fatalf("echo differs: %d bytes, want %d", len(got), len(data))
	}
}

// TestHalfClose: each side's EOF reaches the other, a delay later, while
// the other direction stays open.
func TestHalfClose(t *testing.T) {
	const d = 20 * time.Millisecond
	sent := make(chan time.Time, 1)
	gotc := make(chan string, 1)
	target := server(t, func(c *net.TCPConn) {
		_, _ = c.Write([]byte("hello"))
		sent <- time.Now()
		_ = c.CloseWrite()
		b, _ := io.ReadAll(c) // the client still writes after our EOF
		gotc <- string(b)
	})
	_, addr := start(t, target, d)
	c := dial(t, addr)
	b, err := io.ReadAll(c)
	eofAt := time.Now()
	if err != nil || string(b) != "hello" {
		t.Fatalf("read %q, %v; want hello and EOF", b, err)
	}
	if lag := eofAt.Sub(<-sent); lag < d {
		t.Errorf("EOF arrived %v after the server's write, want ≥ %v", lag, d)
	}
	if _, err := c.Write([]byte("after EOF")); err != nil {
		t.Fatal(err)
	}
	if err := c.CloseWrite(); err != nil {
		t.Fatal(err)
	}
	select {
	case s := <-gotc:
		if s != "after EOF" {
			t.Errorf("server read %q", s)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the client's EOF never reached the server")
	}
}

// TestServerGone: when the target closes, the client sees EOF; when the
// target cannot be reached, the client's connection is closed.
func TestServerGone(t *testing.T) {
	_, addr := start(t, server(t, func(*net.TCPConn) {}), time.Millisecond)
	c := dial(t, addr)
	if b, err := io.ReadAll(c); err != nil || len(b) != 0 {
		t.Errorf("read %q, %v; want EOF", b, err)
	}

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := ln.Addr().String()
	_ = ln.Close()
	_, addr = start(t, dead, time.Millisecond)
	c = dial(t, addr)
	if _, err := c.Read(make([]byte, 1)); err == nil {
		t.Error("read succeeded through a proxy whose target is down")
	}
}

// TestNoLeak: after connections end in every way (clean close, client
// vanishing mid-transfer, server vanishing), no goroutine or socket is left.
func TestNoLeak(t *testing.T) {
	p, addr := start(t, server(t, echo), 2*time.Millisecond)
	settle := func() int {
		var n int
		for range 100 {
			runtime.GC()
			n = runtime.NumGoroutine()
			time.Sleep(10 * time.Millisecond)
			if n == runtime.NumGoroutine() {
				break
			}
		}
		return n
	}
	// One connection first, so lazily started runtime goroutines exist.
	c := dial(t, addr)
	_ = c.CloseWrite()
	_, _ = io.ReadAll(c)
	_ = c.Close()
	waitFor(t, func() bool { return p.Active() == 0 })
	base := settle()

	var wg sync.WaitGroup
	for i := range 30 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c, err := net.Dial("tcp", addr)
			if err != nil {
				t.Error(err)
				return
			}
			defer c.Close()
			_, _ = c.Write(bytes.Repeat([]byte{byte(i)}, 100<<10))
			switch i % 3 {
			case 0: // clean: half-close, read all back
				_ = c.(*net.TCPConn).CloseWrite()
				_, _ = io.ReadAll(c)
			case 1: // reset without reading
				_ = c.(*net.TCPConn).SetLinger(0)
			case 2: // close with data in flight
			}
		}()
	}
	wg.Wait()
	waitFor(t, func() bool { return p.Active() == 0 })
	waitFor(t, func() bool { return settle() <= base })
}

// TestCloseEndsConnections: Close drops open connections and returns.
func TestCloseEndsConnections(t *testing.T) {
	p, addr := start(t, server(t, echo), time.Millisecond)
	c := dial(t, addr)
	if _, err := c.Write([]byte("x")); err != nil {
		t.Fatal(err)
	}
	if _, err := io.ReadFull(c, make([]byte, 1)); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { p.Close(); close(done) }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("Close hangs")
	}
	if _, err := c.Read(make([]byte, 1)); err == nil {
		t.Error("connection still open after Close")
	}
	if n := p.Active(); n != 0 {
		t.Errorf("%d sockets open after Close", n)
	}
}

// TestSIGTERM runs the command: it writes its pidfile once listening,
// forwards, and on SIGTERM closes everything and exits 0 without the pidfile.
func TestSIGTERM(t *testing.T) {
	target := server(t, echo)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	listen := ln.Addr().String()
	_ = ln.Close()
	pidfile := filepath.Join(t.TempDir(), "delayproxy.pid")
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), "DELAYPROXY_RUN_MAIN=1",
		"DELAYPROXY_ARGS=-listen "+listen+" -target "+target+" -delay 5ms -pidfile "+pidfile)
	var log bytes.Buffer
	cmd.Stdout, cmd.Stderr = &log, &log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-exited
	})
	waitFor(t, func() bool {
		b, err := os.ReadFile(pidfile)
		return err == nil && strings.TrimSpace(string(b)) == strconv.Itoa(cmd.Process.Pid)
	})
	c := dial(t, listen) // the pidfile means the port accepts
	if _, err := c.Write([]byte("hi")); err != nil {
		t.Fatal(err)
	}
	if _, err := io.ReadFull(c, make([]byte, 2)); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-exited:
		exited <- err // for the cleanup
		if err != nil {
			t.Fatalf("exit: %v\n%s", err, log.String())
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("still running 10 s after SIGTERM\n%s", log.String())
	}
	if _, err := c.Read(make([]byte, 1)); err == nil {
		t.Error("connection open after the proxy exited")
	}
	if _, err := os.Stat(pidfile); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("pidfile left behind: %v", err)
	}
	t.Logf("%s", log.String())
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("timed out")
		}
		time.Sleep(10 * time.Millisecond)
	}
}
