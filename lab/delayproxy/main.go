// Command delayproxy is a TCP proxy, for the lab only, that puts a fixed
// one-way latency on every byte in both directions: the lab's "far" sshd
// endpoint (lab/up runs it on 127.0.0.1:2223 in front of the lab sshd on
// 127.0.0.1:2222 with -delay 10ms, a 20 ms round trip), so tests and
// benchmarks see the tool at a realistic distance from the cluster.
//
//	delayproxy -listen 127.0.0.1:2223 -target 127.0.0.1:2222 -delay 10ms [-pidfile FILE]
//
// The delay is latency, not a per-write pause: each direction of a
// connection is a reader goroutine that stamps every chunk it reads with
// the time it was read and queues it, and a writer goroutine that writes
// each chunk at its stamp + delay, in order (chunks due together go out in
// one writev). Bulk transfers therefore flow at full rate, only shifted by
// the delay. The queue holds at most maxQueued bytes per direction; a
// reader waits for room (backpressure, as a full TCP window would).
//
// An EOF from one side is passed on, after the delay, as a half-close
// (CloseWrite) to the other; a connection ends when both directions have
// ended, or at once when a write fails (both sockets are closed, so the
// other direction's reader stops too). Nothing outlives a connection.
//
// SIGTERM or SIGINT closes the listener and every open connection and exits
// 0. -pidfile is written once the listener is open (and removed on exit),
// so its presence means the port accepts.
package main

import (
	"errors"
	"flag"
	"io"
	"log"
	"net"
	"os"
	"os/signal"
	"strconv"
	"sync"
	"syscall"
	"time"
)

const (
	chunkSize = 32 << 10 // one read
	maxQueued = 8 << 20  // bytes queued per direction before the reader waits
)

func main() {
	listen := flag.String("listen", "127.0.0.1:2223", "address to listen on")
	target := flag.String("target", "127.0.0.1:2222", "address to forward to")
	delay := flag.Duration("delay", 10*time.Millisecond, "one-way delay added in each direction")
	pidfile := flag.String("pidfile", "", "write the pid here once listening")
	flag.Parse()
	if flag.NArg() > 0 || *delay < 0 || *listen == "" || *target == "" {
		flag.Usage()
		os.Exit(2)
	}
	log.SetFlags(log.LstdFlags | log.Lmicroseconds)
	log.SetPrefix("delayproxy: ")

	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		log.Fatal(err)
	}
	p := newProxy(*target, *delay)
	p.logf = log.Printf
	if *pidfile != "" {
		if err := writePidfile(*pidfile); err != nil {
			log.Fatal(err)
		}
		defer os.Remove(*pidfile)
	}

	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)
	done := make(chan error, 1)
	go func() { done <- p.Serve(ln) }()
	log.Printf("listening on %s, forwarding to %s, delay %v each way (pid %d)", ln.Addr(), *target, *delay, os.Getpid())

	select {
	case s := <-sig:
		log.Printf("%v: closing %d connection(s)", s, p.Active())
		p.Close()
		<-done
		log.Printf("stopped")
	case err := <-done:
		p.Close()
		log.Printf("accept: %v", err)
		if *pidfile != "" {
			_ = os.Remove(*pidfile)
		}
		os.Exit(1)
	}
}

// writePidfile writes the pid atomically (a reader never sees it half-written).
func writePidfile(path string) error {
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(strconv.Itoa(os.Getpid())+"\n"), 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

// proxy forwards accepted connections to target with delay each way.
type proxy struct {
	target string
	delay  time.Duration
	logf   func(string, ...any)

	mu     sync.Mutex
	ln     net.Listener
	conns  map[net.Conn]struct{}
	closed bool
	wg     sync.WaitGroup // one per connection handler
}

func newProxy(target string, delay time.Duration) *proxy {
	return &proxy{target: target, delay: delay, logf: func(string, ...any) {}, conns: map[net.Conn]struct{}{}}
}

// Serve accepts connections on ln until Close (then it returns nil, after
// every connection has ended) or an accept error.
func (p *proxy) Serve(ln net.Listener) error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		_ = ln.Close()
		return nil
	}
	p.ln = ln
	p.mu.Unlock()
	var tempDelay time.Duration
	for {
		c, err := ln.Accept()
		if err != nil {
			p.mu.Lock()
			closed := p.closed
			p.mu.Unlock()
			if closed {
				p.wg.Wait()
				return nil
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() || errors.Is(err, syscall.EMFILE) || errors.Is(err, syscall.ENFILE) {
				tempDelay = min(max(2*tempDelay, 5*time.Millisecond), time.Second)
				p.logf("accept: %v; retrying in %v", err, tempDelay)
				time.Sleep(tempDelay)
				continue
			}
			return err
		}
		tempDelay = 0
		if !p.track(c, true) {
			_ = c.Close()
			continue
		}
		go p.handle(c)
	}
}

// Close stops accepting, closes every connection and waits for their
// goroutines to end.
func (p *proxy) Close() {
	p.mu.Lock()
	p.closed = true
	if p.ln != nil {
		_ = p.ln.Close()
	}
	for c := range p.conns {
		_ = c.Close()
	}
	p.mu.Unlock()
	p.wg.Wait()
}

// Active is the number of open sockets (two per proxied connection).
func (p *proxy) Active() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.conns)
}

// track registers c (and, for an accepted one, its handler in wg); false
// once the proxy is closed.
func (p *proxy) track(c net.Conn, accepted bool) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return false
	}
	p.conns[c] = struct{}{}
	if accepted {
		p.wg.Add(1)
	}
	return true
}

func (p *proxy) untrack(c net.Conn) {
	p.mu.Lock()
	delete(p.conns, c)
	p.mu.Unlock()
	_ = c.Close()
}

func (p *proxy) handle(client net.Conn) {
	defer p.wg.Done()
	defer p.untrack(client)
	server, err := net.DialTimeout("tcp", p.target, 10*time.Second)
	if err != nil {
		p.logf("%s: dial %s: %v", client.RemoteAddr(), p.target, err)
		return
	}
	if !p.track(server, false) {
		_ = server.Close()
		return
	}
	defer p.untrack(server)

	abort := func() { _ = client.Close(); _ = server.Close() }
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); pipe(server, client, p.delay, abort) }()
	go func() { defer wg.Done(); pipe(client, server, p.delay, abort) }()
	wg.Wait()
}

// chunk is data read at some time, due to be written at due.
type chunk struct {
	buf *[]byte // from bufPool; data is (*buf)[:n]
	n   int
	due time.Time
}

var bufPool = sync.Pool{New: func() any { b := make([]byte, chunkSize); return &b }}

// queue is one direction's chunks in flight, oldest first.
type queue struct {
	mu     sync.Mutex
	cond   sync.Cond
	chunks []chunk
	bytes  int
	eof    bool  // the reader is done; no more chunks
	err    error // why, when not io.EOF
	dead   bool  // the writer is done; the reader must stop
}

// pipe copies src to dst, each byte written delay after it was read. At
// src's EOF it half-closes dst once everything queued is written; a write
// error calls abort (closing both sockets). It returns when both its reader
// and writer goroutines have ended.
func pipe(dst, src net.Conn, delay time.Duration, abort func()) {
	q := &queue{}
	q.cond.L = &q.mu
	done := make(chan struct{})
	go func() {
		defer close(done)
		read(src, q, delay)
	}()
	write(dst, q, abort)
	<-done
}

// read queues what src delivers, stamped with its due time, until EOF or an
// error, or until the writer is gone.
func read(src net.Conn, q *queue, delay time.Duration) {
	var rerr error
	defer func() {
		q.mu.Lock()
		q.eof = true
		if rerr != io.EOF {
			q.err = rerr
		}
		q.cond.Broadcast()
		q.mu.Unlock()
	}()
	for {
		q.mu.Lock()
		for q.bytes >= maxQueued && !q.dead {
			q.cond.Wait()
		}
		dead := q.dead
		q.mu.Unlock()
		if dead {
			return
		}
		b := bufPool.Get().(*[]byte)
		n, err := src.Read(*b)
		if n > 0 {
			c := chunk{buf: b, n: n, due: time.Now().Add(delay)}
			q.mu.Lock()
			if q.dead {
				q.mu.Unlock()
				bufPool.Put(b)
				return
			}
			q.chunks = append(q.chunks, c)
			q.bytes += n
			q.cond.Broadcast()
			q.mu.Unlock()
		} else {
			bufPool.Put(b)
		}
		if err != nil {
			rerr = err // io.EOF, or the socket failed or was closed
			return
		}
	}
}

// write writes each queued chunk to dst when it is due. After the reader's
// EOF it half-closes dst; after a read error, or on a write error, it
// aborts the connection.
func write(dst net.Conn, q *queue, abort func()) {
	timer := time.NewTimer(0)
	<-timer.C
	defer timer.Stop()
	var bufs net.Buffers
	var batch []chunk
	for {
		q.mu.Lock()
		for len(q.chunks) == 0 && !q.eof {
			q.cond.Wait()
		}
		if len(q.chunks) == 0 { // the reader ended and all is written
			rerr := q.err
			q.mu.Unlock()
			if rerr != nil || closeWrite(dst) != nil {
				abort()
			}
			return
		}
		first := q.chunks[0].due
		q.mu.Unlock()

		if wait := time.Until(first); wait > 0 {
			timer.Reset(wait)
			<-timer.C
		}

		// Everything due by now goes out in one writev, in order.
		now := time.Now()
		q.mu.Lock()
		i := 0
		for i < len(q.chunks) && !q.chunks[i].due.After(now) {
			i++
		}
		batch = append(batch[:0], q.chunks[:i]...)
		clear(q.chunks[:i])
		q.chunks = q.chunks[i:]
		q.mu.Unlock()

		bufs = bufs[:0]
		n := 0
		for _, c := range batch {
			bufs = append(bufs, (*c.buf)[:c.n])
			n += c.n
		}
		out := bufs // WriteTo consumes its receiver
		_, err := out.WriteTo(dst)
		clear(bufs)
		for _, c := range batch {
			bufPool.Put(c.buf)
		}
		clear(batch)

		q.mu.Lock()
		q.bytes -= n
		if err != nil {
			q.dead = true
			q.chunks = nil
		}
		q.cond.Broadcast()
		q.mu.Unlock()
		if err != nil {
			abort() // unblocks the reader (and the other direction)
			return
		}
	}
}

// closeWrite half-closes c (a *net.TCPConn), else closes it.
func closeWrite(c net.Conn) error {
	if cw, ok := c.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return c.Close()
}
