package ledger

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// The helper process: the test binary run again with NEMORL_LOCK_HELPER_DIR
// set. It claims each episode of NEMORL_LOCK_HELPER_EPS (a comma list)
// from NEMORL_LOCK_HELPER_GOROUTINES goroutines at once (after reading one
// line from stdin when NEMORL_LOCK_HELPER_WAIT is set), prints "LOCK EP N"
// with N the number of goroutines that won, then "LOCK ready", and holds
// what it won until its stdin is closed (or it is killed).
const (
	helperDir        = "NEMORL_LOCK_HELPER_DIR"
	helperEps        = "NEMORL_LOCK_HELPER_EPS"
	helperGoroutines = "NEMORL_LOCK_HELPER_GOROUTINES"
	helperWait       = "NEMORL_LOCK_HELPER_WAIT"
)

func TestLockHelperProcess(t *testing.T) {
	dir := os.Getenv(helperDir)
	if dir == "" {
		return // not a helper: nothing to do
	}
	in := bufio.NewReader(os.Stdin)
	if os.Getenv(helperWait) != "" {
		fmt.Println("LOCK waiting")
		if _, err := in.ReadString('\n'); err != nil {
			t.Fatal(err)
		}
	}
	g, _ := strconv.Atoi(os.Getenv(helperGoroutines))
	g = max(g, 1)
	l := &Ledger{Dir: dir}
	for _, ep := range strings.Split(os.Getenv(helperEps), ",") {
		var won atomic.Int32
		var wg sync.WaitGroup
		for range g {
			wg.Go(func() {
				_, ok, err := l.TryLock(ep)
				if err != nil {
					fmt.Printf("LOCK error %v\n", err)
				}
				if ok {
					won.Add(1)
				}
			})
		}
		wg.Wait()
		fmt.Printf("LOCK %s %d\n", ep, won.Load())
	}
	fmt.Println("LOCK ready")
	_, _ = io.Copy(io.Discard, in)
}

type lockHelper struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser
	lines chan string
	done  bool
}

func startLockHelper(t *testing.T, dir string, eps []string, goroutines int, wait bool) *lockHelper {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestLockHelperProcess$", "-test.count=1")
	cmd.Env = append(os.Environ(), helperDir+"="+dir, helperEps+"="+strings.Join(eps, ","),
		helperGoroutines+"="+strconv.Itoa(goroutines))
	if wait {
		cmd.Env = append(cmd.Env, helperWait+"=1")
	}
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	h := &lockHelper{cmd: cmd, stdin: stdin, lines: make(chan string, 100)}
	go func() {
		defer close(h.lines)
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if s, ok := strings.CutPrefix(sc.Text(), "LOCK "); ok {
				h.lines <- s
			}
		}
	}()
	t.Cleanup(func() { h.kill(t) })
	return h
}

// waiting waits until the helper waits for start.
func (h *lockHelper) waiting(t *testing.T) {
	t.Helper()
	select {
	case s := <-h.lines:
		if s != "waiting" {
			t.Fatalf("helper %d said %q, want waiting", h.cmd.Process.Pid, s)
		}
	case <-time.After(time.Minute):
		t.Fatalf("helper %d not waiting after a minute", h.cmd.Process.Pid)
	}
}

// start lets a waiting helper go.
func (h *lockHelper) start(t *testing.T) {
	t.Helper()
	if _, err := io.WriteString(h.stdin, "go\n"); err != nil {
		t.Fatal(err)
	}
}

// results returns how many goroutines of the helper won each episode.
func (h *lockHelper) results(t *testing.T) map[string]int {
	t.Helper()
	won := map[string]int{}
	timeout := time.After(time.Minute)
	for {
		select {
		case s, ok := <-h.lines:
			if !ok {
				t.Fatalf("helper %d ended before it was ready", h.cmd.Process.Pid)
			}
			if s == "ready" {
				return won
			}
			ep, n, _ := strings.Cut(s, " ")
			if ep == "error" {
				t.Fatalf("helper %d: %s", h.cmd.Process.Pid, n)
			}
			won[ep], _ = strconv.Atoi(n)
		case <-timeout:
			t.Fatalf("helper %d not ready after a minute", h.cmd.Process.Pid)
		}
	}
}

// release closes the helper's stdin: it ends without unlocking.
func (h *lockHelper) release(t *testing.T) {
	t.Helper()
	if h.done {
		return
	}
	h.done = true
	h.stdin.Close()
	if err := h.cmd.Wait(); err != nil {
		t.Fatalf("helper %d: %v", h.cmd.Process.Pid, err)
	}
}

func (h *lockHelper) kill(t *testing.T) {
	t.Helper()
	if h.done {
		return
	}
	h.done = true
	_ = h.cmd.Process.Signal(syscall.SIGKILL)
	_ = h.cmd.Wait()
}

func openFDs(t *testing.T) int {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Skipf("no /proc/self/fd: %v", err)
	}
	return len(ents)
}

func episodes(prefix string, n int) []string {
	var eps []string
	for i := range n {
		eps = append(eps, fmt.Sprintf("%s-%03d", prefix, i))
	}
	return eps
}

func procFiles(t *testing.T, dir string) []string {
	t.Helper()
	m, err := filepath.Glob(filepath.Join(dir, locksDir, procPrefix+"*"+procSuffix))
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// TestLockFewDescriptors (issue #12): 200 episodes held by one process
// cost it one descriptor, not 200; releasing them all closes it.
func TestLockFewDescriptors(t *testing.T) {
	l, err := OpenLedger(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	before := openFDs(t)
	var locks []*Lock
	for _, ep := range episodes("ep-fd", 200) {
		k, ok, err := l.TryLock(ep)
		if err != nil || !ok {
			t.Fatalf("TryLock %s: ok=%v err=%v", ep, ok, err)
		}
		locks = append(locks, k)
	}
	held := openFDs(t)
	t.Logf("open descriptors: %d before, %d holding 200 episodes", before, held)
	if held-before >= 5 {
		t.Fatalf("holding 200 episodes opened %d descriptors (%d → %d), want fewer than 5", held-before, before, held)
	}
	if p := procFiles(t, l.Dir); len(p) != 1 {
		t.Fatalf("proc files %v, want one", p)
	}
	for _, k := range locks {
		k.Unlock()
	}
	if after := openFDs(t); after > before {
		t.Fatalf("open descriptors %d after every Unlock, %d before", after, before)
	}
	if p := procFiles(t, l.Dir); len(p) != 0 {
		t.Fatalf("proc files %v left after every Unlock", p)
	}
	if claims, _ := filepath.Glob(filepath.Join(l.Dir, locksDir, "*"+ownerSuffix)); len(claims) != 0 {
		t.Fatalf("%d claims left after every Unlock", len(claims))
	}
}

// TestLockOtherProcessAndKill: an episode another process holds is
// refused here and to a third process; once its owner is killed with
// SIGKILL, the next process takes it at once.
func TestLockOtherProcessAndKill(t *testing.T) {
	l, err := OpenLedger(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	const ep = "ep-owned"
	a := startLockHelper(t, l.Dir, []string{ep}, 1, false)
	if got := a.results(t); got[ep] != 1 {
		t.Fatalf("first process: %v, want it to win %s", got, ep)
	}
	if _, ok, err := l.TryLock(ep); err != nil || ok {
		t.Fatalf("TryLock of an episode another process holds: ok=%v err=%v", ok, err)
	}
	if locked, err := l.Locked(ep); err != nil || !locked {
		t.Fatalf("Locked: %v %v, want true", locked, err)
	}
	b := startLockHelper(t, l.Dir, []string{ep}, 1, false)
	if got := b.results(t); got[ep] != 0 {
		t.Fatalf("third process won %s while the first holds it", ep)
	}
	b.release(t)

	a.kill(t)
	killed := time.Now()
	if locked, err := l.Locked(ep); err != nil || locked {
		t.Fatalf("Locked after the owner's SIGKILL: %v %v, want false", locked, err)
	}
	c := startLockHelper(t, l.Dir, []string{ep}, 1, false)
	if got := c.results(t); got[ep] != 1 {
		t.Fatalf("after SIGKILL of the owner: %v, want the next process to take %s", got, ep)
	}
	t.Logf("taken over %v after the owner's SIGKILL (including the helper's start)", time.Since(killed).Round(time.Millisecond))
	c.release(t) // ends without Unlock: as good as killed

	k, ok, err := l.TryLock(ep)
	if err != nil || !ok {
		t.Fatalf("TryLock after its owners died: ok=%v err=%v", ok, err)
	}
	defer k.Unlock()
	// The dead processes' proc files were swept; only this one's is left.
	if p := procFiles(t, l.Dir); len(p) != 1 {
		t.Fatalf("proc files %v, want only this process's", p)
	}
}

// TestLockRace: many claims of the same episodes at once, from goroutines
// of one process and from processes: exactly one wins each episode.
func TestLockRace(t *testing.T) {
	dir := t.TempDir()
	if _, err := OpenLedger(dir); err != nil {
		t.Fatal(err)
	}
	t.Run("goroutines", func(t *testing.T) {
		for _, ep := range episodes("ep-g", 20) {
			var won atomic.Int32
			var wg sync.WaitGroup
			start := make(chan struct{})
			for range 16 {
				wg.Go(func() {
					<-start
					l := &Ledger{Dir: dir} // separate Ledger values of one directory share the process's claims
					_, ok, err := l.TryLock(ep)
					if err != nil {
						t.Error(err)
					}
					if ok {
						won.Add(1)
					}
				})
			}
			close(start)
			wg.Wait()
			if won.Load() != 1 {
				t.Fatalf("%s: %d of 16 goroutines won, want exactly 1", ep, won.Load())
			}
		}
	})
	t.Run("processes", func(t *testing.T) {
		eps := episodes("ep-p", 200)
		var hs []*lockHelper
		for range 4 {
			hs = append(hs, startLockHelper(t, dir, eps, 16, true))
		}
		for _, h := range hs {
			h.waiting(t)
		}
		for _, h := range hs { // every helper is ready: they race from the first episode
			h.start(t)
		}
		total := map[string]int{}
		var per []int // episodes won by each process
		for _, h := range hs {
			won := 0
			for ep, n := range h.results(t) {
				total[ep] += n
				won += n
			}
			per = append(per, won)
		}
		t.Logf("episodes won by each process: %v", per)
		for _, ep := range eps {
			if total[ep] != 1 {
				t.Errorf("%s: %d winners among 4 processes x 16 goroutines, want exactly 1", ep, total[ep])
			}
		}
		for _, h := range hs {
			h.release(t)
		}
	})
}

// TestLockUnlockOne: releasing one episode frees it, for other processes
// too, and leaves the others held.
func TestLockUnlockOne(t *testing.T) {
	l, err := OpenLedger(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	eps := episodes("ep-u", 10)
	locks := map[string]*Lock{}
	for _, ep := range eps {
		k, ok, err := l.TryLock(ep)
		if err != nil || !ok {
			t.Fatalf("TryLock %s: ok=%v err=%v", ep, ok, err)
		}
		locks[ep] = k
	}
	freed := eps[3]
	locks[freed].Unlock()
	locks[freed].Unlock() // a second Unlock does nothing
	var nilLock *Lock
	nilLock.Unlock() // callers Unlock the nil Lock of a refused TryLock

	h := startLockHelper(t, l.Dir, eps, 1, false)
	got := h.results(t)
	for _, ep := range eps {
		want := 0
		if ep == freed {
			want = 1
		}
		if got[ep] != want {
			t.Errorf("another process took %s %d times, want %d", ep, got[ep], want)
		}
	}
	h.release(t)
	for _, ep := range eps {
		locked, err := l.Locked(ep)
		if err != nil || locked != (ep != freed) {
			t.Errorf("Locked(%s) = %v %v after the helper ended", ep, locked, err)
		}
	}
	if _, ok, err := l.TryLock(eps[0]); err != nil || ok {
		t.Fatalf("TryLock of a held episode: ok=%v err=%v", ok, err)
	}
	k, ok, err := l.TryLock(freed)
	if err != nil || !ok {
		t.Fatalf("TryLock of the freed episode: ok=%v err=%v", ok, err)
	}
	k.Unlock()
	for _, k := range locks {
		k.Unlock()
	}
}

// TestLockLegacyAndStaleFiles: the previous scheme's episodes/EP.lock is
// ignored (and removed) unless an older process still holds it; stale
// claims, dead processes' proc files and temp files do not stop a claim
// and are cleaned up.
func TestLockLegacyAndStaleFiles(t *testing.T) {
	l, err := OpenLedger(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	ld := filepath.Join(l.Dir, locksDir)
	if err := os.MkdirAll(ld, 0o700); err != nil {
		t.Fatal(err)
	}
	write := func(p, s string) {
		t.Helper()
		if err := os.WriteFile(p, []byte(s), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	// A leftover old lock file, and one an older process holds.
	leftover := filepath.Join(l.Dir, "episodes", "ep-old.lock")
	write(leftover, "")
	held := filepath.Join(l.Dir, "episodes", "ep-held.lock")
	write(held, "")
	old, err := os.OpenFile(held, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := syscall.Flock(int(old.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		t.Fatal(err)
	}
	// What dead processes left: a proc file nobody holds, a claim naming
	// it, a temp file of an interrupted write.
	dead := procPrefix + "1-dead" + procSuffix
	write(filepath.Join(ld, dead), "pid 1\n")
	write(filepath.Join(ld, "ep-unused"+ownerSuffix), dead+"\n")
	write(filepath.Join(ld, ".ep-x"+ownerSuffix+".tmp-123"), "half")
	gone := func(p string) {
		t.Helper()
		if _, err := os.Stat(p); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s not removed: %v", p, err)
		}
	}

	if locked, err := l.Locked("ep-held"); err != nil || !locked {
		t.Fatalf("Locked of an episode an older process holds: %v %v", locked, err)
	}
	if _, ok, err := l.TryLock("ep-held"); err != nil || ok {
		t.Fatalf("TryLock of an episode an older process holds: ok=%v err=%v", ok, err)
	}
	var locks []*Lock
	lock := func(ep string) {
		t.Helper()
		k, ok, err := l.TryLock(ep)
		if err != nil || !ok {
			t.Fatalf("TryLock %s: ok=%v err=%v", ep, ok, err)
		}
		locks = append(locks, k)
	}
	lock("ep-old") // the first claim of this process sweeps
	gone(leftover)
	for _, name := range []string{dead, "ep-unused" + ownerSuffix, ".ep-x" + ownerSuffix + ".tmp-123"} {
		gone(filepath.Join(ld, name))
	}

	// Stale claims met by TryLock itself: garbage, a missing proc file, a
	// proc file nobody holds (removed on the takeover).
	write(filepath.Join(ld, dead), "pid 1\n")
	write(filepath.Join(ld, "ep-garbage"+ownerSuffix), "\x00\x01 not a claim")
	write(filepath.Join(ld, "ep-gone"+ownerSuffix), procPrefix+"2-gone"+procSuffix+"\n")
	write(filepath.Join(ld, "ep-dead"+ownerSuffix), dead+"\n")
	for _, ep := range []string{"ep-garbage", "ep-gone", "ep-dead"} {
		if locked, err := l.Locked(ep); err != nil || locked {
			t.Fatalf("Locked(%s) with a stale claim: %v %v", ep, locked, err)
		}
		lock(ep)
	}
	gone(filepath.Join(ld, dead))
	old.Close() // the older process ends
	k, ok, err := l.TryLock("ep-held")
	if err != nil || !ok {
		t.Fatalf("TryLock once the older process ended: ok=%v err=%v", ok, err)
	}
	locks = append(locks, k)
	for _, k := range locks {
		k.Unlock()
	}
}

// TestLockErrors: a bad id, and a locks directory that cannot be made:
// errors that wrap the cause and name the path.
func TestLockErrors(t *testing.T) {
	l, err := OpenLedger(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := l.TryLock("../ep-x"); err == nil || !strings.Contains(err.Error(), "bad episode id") {
		t.Fatalf("TryLock of a path-like id: %v", err)
	}
	p := filepath.Join(l.Dir, locksDir)
	if err := os.WriteFile(p, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	_, ok, err := l.TryLock("ep-x")
	if ok || !errors.Is(err, syscall.ENOTDIR) || !strings.Contains(err.Error(), p) {
		t.Fatalf("TryLock with %s a file: ok=%v err=%v, want ENOTDIR naming it", p, ok, err)
	}
}
