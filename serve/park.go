package serve

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"syscall"
	"time"

	"github.com/nemorl/nemorl-slurm/ledger"
)

// A /run request waits for its episode, an hour or more. Held in its
// handler, each waiting request keeps what net/http gives a connection in
// use: its goroutine and stack, a goroutine that watches for the client
// leaving, and about 10 KiB of read and write buffers (300 MiB at 10,000
// rows). Parked instead, it keeps its connection alone: the handler takes
// the connection over (http.Hijacker) and returns, the run's end writes
// the answer (a goroutine for the writing only), and one sweeper notices
// clients that left. Where the connection cannot be taken over (HTTP/2,
// a test's recorder), the handler waits as before.

// parked is a request waiting for its run's end on a connection taken over
// from net/http.
type parked struct {
	conn net.Conn
	rw   *row
	key  string
	// gone: the answer is being written or the client left (s.mu); its
	// run's end passes it by.
	gone bool
}

// parkSweep is how often the parked connections are looked at for clients
// that left (one peek that never waits each).
var parkSweep = 5 * time.Second

// parkAnswerTimeout bounds writing one parked answer (reading the author's
// files and the write to the connection).
const parkAnswerTimeout = 2 * time.Minute

// park takes the request's connection over and leaves it waiting for ru's
// end. It reports false, having changed nothing, where the connection
// cannot be taken over: the caller waits in the handler then.
func (s *Server) park(w http.ResponseWriter, rw *row, key string, ru *run) bool {
	conn, brw, err := http.NewResponseController(w).Hijack()
	if err != nil {
		return false
	}
	// Bytes the client sent after its request (a pipelined one) are left
	// unread: the answer says Connection: close.
	_ = brw
	_ = conn.SetDeadline(time.Time{})
	p := &parked{conn: conn, rw: rw, key: key}
	s.mu.Lock()
	ended, final, rerr := ru.ended, ru.entry, ru.err
	if ended {
		p.gone = true
	} else {
		ru.parked = append(ru.parked, p)
	}
	s.parked[p] = true
	s.mu.Unlock()
	if ended {
		s.answerParked(p, final, rerr)
	}
	return true
}

// answerParked writes p's answer (its run's final entry, or the error it
// ended with) and closes the connection.
func (s *Server) answerParked(p *parked, final *ledger.Entry, err error) {
	defer func() {
		s.mu.Lock()
		delete(s.parked, p)
		s.mu.Unlock()
	}()
	defer p.conn.Close()
	// A client that left since the last sweep gets nothing: its answer is
	// not delivered (a write into a closed peer's socket can succeed), so
	// a re-send of its row gets the outcome, as net/http's watch for a
	// departed client made it before parking.
	if peerGone(p.conn) {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), parkAnswerTimeout)
	defer cancel()
	w := &connWriter{conn: p.conn, header: http.Header{}}
	s.answer(w, (&http.Request{Method: http.MethodPost}).WithContext(ctx), p.rw, p.key, ending{final: final, err: err})
	_ = w.FlushError() // an answer not flushed by answer's writer
}

// sweepParked closes, every parkSweep until the server stops, the parked
// connections whose client left (read EOF or failed): their runs go on,
// and a re-sent row attaches to them.
func (s *Server) sweepParked() {
	t := time.NewTicker(parkSweep)
	defer t.Stop()
	for {
		select {
		case <-s.ctx.Done():
			return
		case <-t.C:
		}
		s.mu.Lock()
		ps := make([]*parked, 0, len(s.parked))
		for p := range s.parked {
			if !p.gone {
				ps = append(ps, p)
			}
		}
		s.mu.Unlock()
		for _, p := range ps {
			if !peerGone(p.conn) {
				continue
			}
			s.mu.Lock()
			left := !p.gone
			if left {
				p.gone = true
				delete(s.parked, p)
			}
			s.mu.Unlock()
			if left {
				p.conn.Close()
			}
		}
	}
}

// peerGone says whether c's client has closed its side or the connection
// failed: a peek that never waits (MSG_PEEK|MSG_DONTWAIT) reads EOF or an
// error. Bytes waiting (a pipelined request) stay unread.
func peerGone(c net.Conn) bool {
	sc, ok := c.(syscall.Conn)
	if !ok {
		return false
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return true // closed
	}
	gone := false
	var one [1]byte
	err = rc.Read(func(fd uintptr) bool {
		n, _, err := syscall.Recvfrom(int(fd), one[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
		switch {
		case errors.Is(err, syscall.EAGAIN), errors.Is(err, syscall.EINTR):
			// nothing to read: still there
		case err != nil, n == 0:
			gone = true // failed, or EOF
		}
		return true // never wait for readability
	})
	return gone || err != nil
}

// waitParked waits, up to d, until every parked request is answered or
// gone (at shutdown, after their runs ended).
func (s *Server) waitParked(d time.Duration) {
	deadline := time.Now().Add(d)
	for {
		s.mu.Lock()
		n := len(s.parked)
		s.mu.Unlock()
		if n == 0 || time.Now().After(deadline) {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// connWriter is an http.ResponseWriter over a connection taken over from
// net/http: it keeps the header and body and writes the whole response,
// with Content-Length and Connection: close, when flushed (writeJSON
// flushes; FlushError reports the write's error, as net/http's writer
// does).
type connWriter struct {
	conn   net.Conn
	header http.Header
	status int
	body   bytes.Buffer
	sent   bool
}

func (w *connWriter) Header() http.Header { return w.header }

func (w *connWriter) WriteHeader(code int) {
	if w.status == 0 {
		w.status = code
	}
}

func (w *connWriter) Write(b []byte) (int, error) {
	if w.sent {
		return 0, errors.New("serve: write after the answer was sent")
	}
	if w.status == 0 {
		w.status = http.StatusOK
	}
	return w.body.Write(b)
}

// FlushError writes the response, once.
func (w *connWriter) FlushError() error {
	if w.sent {
		return nil
	}
	w.sent = true
	if w.status == 0 {
		w.status = http.StatusOK
	}
	var b bytes.Buffer
	fmt.Fprintf(&b, "HTTP/1.1 %d %s\r\n", w.status, http.StatusText(w.status))
	w.header.Set("Content-Length", strconv.Itoa(w.body.Len()))
	w.header.Set("Connection", "close")
	w.header.Set("Date", time.Now().UTC().Format(http.TimeFormat))
	if err := w.header.Write(&b); err != nil {
		return err
	}
	b.WriteString("\r\n")
	b.Write(w.body.Bytes())
	_ = w.conn.SetWriteDeadline(time.Now().Add(time.Minute))
	if _, err := w.conn.Write(b.Bytes()); err != nil {
		return fmt.Errorf("serve: writing the answer: %w", err)
	}
	return nil
}
