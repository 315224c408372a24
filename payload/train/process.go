package train

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"sync"
	"syscall"
	"time"
)

// stopReason says why a child was stopped.
type stopReason uint8

const (
	notStopped stopReason = iota
	stoppedAtDeadline
	stoppedCancelled
)

func (r stopReason) String() string {
	return [...]string{"not stopped", "deadline", "cancelled"}[r]
}

// childResult is how a child process ended.
type childResult struct {
	// ExitStatus is the exit status, -1 when a signal ended it.
	ExitStatus int
	Stopped    stopReason
}

// drainWait bounds the wait for the output pipe to close after the group
// was killed (a process that left the group may still hold it).
const drainWait = 5 * time.Second

// child describes one command to run in its own process group.
type child struct {
	argv []string
	dir  string
	env  []string
	// out receives stdout and stderr, from one goroutine. Its errors
	// stop the copy; use tolerant writers.
	out io.Writer
	// stopAt: TERM to the group if it is still running then.
	stopAt time.Time
	// killAfter: KILL to the group this long after TERM.
	killAfter time.Duration
	// started, if set, is called with the pgid once the child runs.
	started func(pgid int)
}

// run starts c in a new process group, copies its output, and waits for
// it. At c.stopAt, or when ctx is done, it sends TERM to the whole group,
// then KILL after c.killAfter if the leader is still running. Once the
// leader has exited, whatever is left of the group gets KILL. run returns
// only after both of its goroutines have ended. An error means the child
// could not be started.
func (c child) run(ctx context.Context) (childResult, error) {
	pr, pw, err := os.Pipe()
	if err != nil {
		return childResult{}, err
	}
	cmd := exec.Command(c.argv[0], c.argv[1:]...)
	cmd.Dir = c.dir
	cmd.Env = c.env
	cmd.Stdout = pw // *os.File: passed as is, no copying goroutine in exec
	cmd.Stderr = pw
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		pr.Close()
		pw.Close()
		return childResult{}, fmt.Errorf("start %s: %w", c.argv[0], err)
	}
	pw.Close() // the child holds its own copy
	pgid := cmd.Process.Pid
	if c.started != nil {
		c.started(pgid)
	}

	var wg sync.WaitGroup
	copied := make(chan struct{})
	wg.Add(2)
	go func() {
		defer wg.Done()
		defer close(copied)
		io.Copy(c.out, pr) // ends at EOF or when pr is closed
	}()
	exited := make(chan struct{})
	go func() {
		defer wg.Done()
		defer close(exited)
		cmd.Wait() // the status is read from cmd.ProcessState
	}()

	var res childResult
	timer := time.NewTimer(time.Until(c.stopAt))
	select {
	case <-exited:
	case <-timer.C:
		res.Stopped = stoppedAtDeadline
	case <-ctx.Done():
		res.Stopped = stoppedCancelled
	}
	timer.Stop()
	if res.Stopped != notStopped {
		signalGroup(pgid, syscall.SIGTERM)
		kill := time.NewTimer(c.killAfter)
		select {
		case <-exited:
		case <-kill.C:
		}
		kill.Stop()
	}
	// Whatever is left of the group gets KILL: the leader if it outlived
	// killAfter, and any process it left behind (Ray daemons, workers).
	signalGroup(pgid, syscall.SIGKILL)
	<-exited

	drain := time.NewTimer(drainWait)
	select {
	case <-copied:
	case <-drain.C:
	}
	drain.Stop()
	pr.Close() // unblocks the copy if something outside the group holds the pipe
	wg.Wait()

	res.ExitStatus = -1
	if st := cmd.ProcessState; st != nil {
		res.ExitStatus = st.ExitCode() // -1 when signalled
	}
	return res, nil
}

// signalGroup signals every process of the group; ESRCH (the group is
// gone) is the expected error and there is nothing to do about others.
func signalGroup(pgid int, sig syscall.Signal) {
	if pgid > 1 {
		_ = syscall.Kill(-pgid, sig)
	}
}

// tolerantWriter forwards writes until the first error, then drops them,
// always reporting success: a failing log sink must not block the child's
// output pipe.
type tolerantWriter struct {
	w   io.Writer
	err error
}

func (t *tolerantWriter) Write(p []byte) (int, error) {
	if t.err == nil {
		if _, err := t.w.Write(p); err != nil {
			t.err = err
		}
	}
	return len(p), nil
}

// lockedWriter serializes writes to a shared log.
type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}
