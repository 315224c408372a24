package serve

import (
	"context"
	"errors"
	"sync"
)

// errClosed: the server is shutting down; a waiting request never started.
var errClosed = errors.New("server shutting down")

// slots bounds the episodes in flight; waiters are served in arrival order.
type slots struct {
	mu      sync.Mutex
	n, used int
	waiting []chan bool
	closed  bool
}

func newSlots(n int) *slots { return &slots{n: max(n, 1)} }

// acquire takes a slot, waiting behind everyone who came first.
func (s *slots) acquire(ctx context.Context) error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return errClosed
	}
	if s.used < s.n && len(s.waiting) == 0 {
		s.used++
		s.mu.Unlock()
		return nil
	}
	ch := make(chan bool, 1)
	s.waiting = append(s.waiting, ch)
	s.mu.Unlock()
	select {
	case ok := <-ch:
		if !ok {
			return errClosed
		}
		return nil
	case <-ctx.Done():
		s.mu.Lock()
		defer s.mu.Unlock()
		for i, w := range s.waiting {
			if w == ch {
				s.waiting = append(s.waiting[:i], s.waiting[i+1:]...)
				return ctx.Err()
			}
		}
		// Granted (or closed) meanwhile.
		if ok := <-ch; ok {
			s.releaseLocked()
		}
		return ctx.Err()
	}
}

// force takes a slot without waiting (an episode already running, found
// again on start).
func (s *slots) force() {
	s.mu.Lock()
	s.used++
	s.mu.Unlock()
}

func (s *slots) release() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.releaseLocked()
}

func (s *slots) releaseLocked() {
	s.used--
	for s.used < s.n && len(s.waiting) > 0 && !s.closed {
		w := s.waiting[0]
		s.waiting = s.waiting[1:]
		s.used++
		w <- true
	}
}

// close refuses every waiter and every later acquire.
func (s *slots) close() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closed = true
	for _, w := range s.waiting {
		w <- false
	}
	s.waiting = nil
}

// counts returns the slots in use and the waiters.
func (s *slots) counts() (inFlight, queued int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.used, len(s.waiting)
}
