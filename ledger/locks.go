package ledger

// Episode locks: who may advance an episode.
//
// Only the process that owns an episode submits its jobs or writes its
// outcome. The first scheme held one flock per episode (episodes/EP.lock)
// for as long as the episode was driven, so a watch of 1,000 episodes kept
// ~1,000 descriptors open and failed under a login node's `ulimit -n` of
// 1024 (issue #12). This scheme keeps the same guarantees with at most one
// descriptor per process and ledger, however many episodes it owns.
//
// Files, all in DIR/locks (0700):
//
//   - proc-PID-RANDOM.lock: a process's liveness token. The process holds an
//     exclusive flock on it from its first claim until it owns no episode
//     of this ledger any more (then it removes the file and closes it), or
//     until it dies: the kernel drops the flock of a dead process at once,
//     kill -9 included. The file gets its final name only once the flock is
//     held (it is created under a temp name, locked, then renamed), so a
//     proc file that anyone else can flock belongs to a dead process.
//   - EP.owner: the claim on episode EP, naming the owner's proc file. A
//     claim is live while its proc file is flocked; a claim whose proc file
//     is missing or can be flocked, and an unreadable claim, are stale: the
//     episode is free, with no timeout.
//   - .claims: the claim mutex. Every creation, takeover and removal of a
//     claim happens under an exclusive flock of this file, taken for the few
//     system calls of the decision (read the claim, test its owner, write
//     the new claim by temp file and rename) and released at once: no
//     descriptor stays open. So two processes racing for an episode are
//     serialized and exactly one of them sees it free.
//
// TryLock first reads the claim without the mutex: a claim of a live
// process is a refusal whatever happens next, so a watch that only observes
// episodes other processes own never takes the mutex. Otherwise it takes
// the mutex and decides again. Within a process, one lockOwner per ledger
// directory (shared by every Ledger value of that directory) keeps the
// episodes held in a map under its own mutex: two TryLocks of one episode
// in one process never both succeed, and the process never opens its own
// proc file a second time. (Where flock is emulated with POSIX locks, as on
// NFS, closing any descriptor of a file drops the process's lock on it, and
// a process's own POSIX locks never conflict with each other.)
//
// Unlock removes the claim under the mutex if it still names this process,
// and drops the proc file when the process holds no episode of the ledger
// any more. Dead processes' proc files, stale claims and temp files left by
// a crash are removed the first time a process creates its proc file.
//
// The previous scheme's episodes/EP.lock files are not part of this one:
// a leftover file is removed when the episode is next claimed. One that is
// flocked belongs to a running older nemorl-slurm, and the episode is
// refused while it is (a new process cannot stop an older one from taking
// an episode it owns, though: do not mix versions on one ledger).
//
// Claims are not fsynced: they only matter while their owner lives, and a
// machine crash ends every owner. Every descriptor here is close-on-exec
// (Go's default), so a child (ssh, sbatch) never keeps a dead owner alive.

import (
	"bufio"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/nemorl/nemorl-slurm/stages"
)

const (
	locksDir    = "locks"
	claimsFile  = ".claims"
	ownerSuffix = ".owner"
	procPrefix  = "proc-"
	procSuffix  = ".lock"
)

// Lock is an exclusive claim on one episode: only its holder submits jobs
// or writes the outcome. Other processes may still read and display. It
// costs no descriptor of its own (see the comment at the top of locks.go).
type Lock struct {
	o  *lockOwner
	ep string
}

// lockOwner is this process's side of the locks of one ledger directory.
type lockOwner struct {
	dir       string // DIR/locks
	legacyDir string // DIR/episodes, where the old EP.lock files are

	mu       sync.Mutex
	held     map[string]*Lock
	proc     *os.File // flocked while held is not empty, else nil
	procName string   // base name of proc, "" without one
	swept    bool     // dead processes' files were removed once
}

var lockOwners = struct {
	sync.Mutex
	m map[string]*lockOwner
}{m: map[string]*lockOwner{}}

func (l *Ledger) lockOwner() (*lockOwner, error) {
	dir, err := filepath.Abs(l.Dir)
	if err != nil {
		return nil, fmt.Errorf("ledger: locks of %s: %w", l.Dir, err)
	}
	lockOwners.Lock()
	defer lockOwners.Unlock()
	o := lockOwners.m[dir]
	if o == nil {
		o = &lockOwner{dir: filepath.Join(dir, locksDir), legacyDir: filepath.Join(dir, "episodes"), held: map[string]*Lock{}}
		lockOwners.m[dir] = o
	}
	return o, nil
}

// TryLock claims the episode without waiting; ok is false when another
// process, or another Lock of this process, holds it. The claim ends with
// Unlock or with the process.
func (l *Ledger) TryLock(ep string) (lock *Lock, ok bool, err error) {
	if !stages.ValidEpisode(ep) {
		return nil, false, fmt.Errorf("ledger: lock: %w %q", ErrBadEpisodeID, ep)
	}
	o, err := l.lockOwner()
	if err != nil {
		return nil, false, err
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.held[ep] != nil {
		return nil, false, nil
	}
	if err := os.MkdirAll(o.dir, 0o700); err != nil {
		return nil, false, fmt.Errorf("ledger: lock %s: %w", ep, err)
	}
	claim := o.claimPath(ep)
	// Without the mutex: a live owner's claim is a refusal.
	if live, err := o.liveClaim(claim); err != nil || live {
		return nil, false, err
	}
	release, err := o.lockClaims()
	if err != nil {
		return nil, false, err
	}
	defer release()
	owner, err := readClaim(claim)
	if err != nil {
		return nil, false, err
	}
	if owner != "" && owner != o.procName {
		if live, err := o.procAlive(owner); err != nil || live {
			return nil, false, err
		}
		o.removeDeadProc(owner) // its claim is replaced below
	}
	if held, err := o.legacyHeld(ep); err != nil || held {
		return nil, false, err
	}
	if err := o.startProc(); err != nil {
		return nil, false, err
	}
	if err := o.writeClaim(ep); err != nil {
		if len(o.held) == 0 {
			o.stopProc()
		}
		return nil, false, err
	}
	k := &Lock{o: o, ep: ep}
	o.held[ep] = k
	return k, true, nil
}

// Unlock releases the claim; the other episodes the process holds stay
// held. It may be called on a nil Lock, and more than once.
func (k *Lock) Unlock() {
	if k == nil || k.o == nil {
		return
	}
	o := k.o
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.held[k.ep] != k {
		return
	}
	delete(o.held, k.ep)
	// Only this process writes a claim of its own while it lives, so the
	// claim could be removed without the mutex; with it, every change of
	// a claim is serialized, which is simpler to reason about. Unlock
	// cannot report an error: if the claim cannot be removed it names a
	// proc file that is removed below once nothing is held (or at exit),
	// and the episode is free then.
	if release, err := o.lockClaims(); err == nil {
		defer release()
	}
	claim := o.claimPath(k.ep)
	if owner, err := readClaim(claim); err == nil && owner == o.procName {
		_ = os.Remove(claim)
	}
	if len(o.held) == 0 {
		o.stopProc()
	}
}

// Locked reports whether a live process (this one included) holds the
// episode: for tests and diagnostics; TryLock is the way to take it.
func (l *Ledger) Locked(ep string) (bool, error) {
	if !stages.ValidEpisode(ep) {
		return false, fmt.Errorf("ledger: lock: %w %q", ErrBadEpisodeID, ep)
	}
	o, err := l.lockOwner()
	if err != nil {
		return false, err
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.held[ep] != nil {
		return true, nil
	}
	if live, err := o.liveClaim(o.claimPath(ep)); err != nil || live {
		return live, err
	}
	p := filepath.Join(o.legacyDir, ep+".lock")
	f, err := os.OpenFile(p, os.O_RDWR, 0)
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("ledger: lock %s: %w", ep, err)
	}
	defer f.Close()
	switch err := flock(f, syscall.LOCK_SH|syscall.LOCK_NB); {
	case errors.Is(err, syscall.EWOULDBLOCK):
		return true, nil
	case err != nil:
		return false, fmt.Errorf("ledger: lock: flock %s: %w", p, err)
	}
	return false, nil
}

func (o *lockOwner) claimPath(ep string) string {
	return filepath.Join(o.dir, ep+ownerSuffix)
}

// liveClaim reports whether the claim at path names a live process other
// than this one. A claim of this process that is not in held is a
// leftover of a failed Unlock: free.
func (o *lockOwner) liveClaim(path string) (bool, error) {
	owner, err := readClaim(path)
	if err != nil || owner == "" || owner == o.procName {
		return false, err
	}
	return o.procAlive(owner)
}

// procAlive reports whether the proc file name (never this process's own)
// is flocked by its process. A missing file is a dead process's.
func (o *lockOwner) procAlive(name string) (bool, error) {
	p := filepath.Join(o.dir, name)
	// O_RDWR: flock over NFS is a POSIX lock, which needs write access
	// for an exclusive one (the sweep's) and read access for a shared one.
	f, err := os.OpenFile(p, os.O_RDWR, 0)
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("ledger: lock: %w", err)
	}
	defer f.Close()
	// Shared: two processes testing the same owner at once do not take
	// each other for it.
	switch err := flock(f, syscall.LOCK_SH|syscall.LOCK_NB); {
	case errors.Is(err, syscall.EWOULDBLOCK):
		return true, nil
	case err != nil:
		return false, fmt.Errorf("ledger: lock: flock %s: %w", p, err)
	}
	return false, nil
}

// readClaim returns the proc file a claim names, "" for no claim or one
// that names none (a live owner always writes a whole, valid claim).
func readClaim(path string) (string, error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("ledger: lock: %w", err)
	}
	name, _, _ := strings.Cut(string(b), "\n")
	if !validProcName(name) {
		return "", nil
	}
	return name, nil
}

func validProcName(name string) bool {
	return strings.HasPrefix(name, procPrefix) && strings.HasSuffix(name, procSuffix) &&
		len(name) > len(procPrefix)+len(procSuffix) && filepath.Base(name) == name && !strings.ContainsAny(name, "/\\")
}

// lockClaims takes the claim mutex and returns its release.
func (o *lockOwner) lockClaims() (func(), error) {
	p := filepath.Join(o.dir, claimsFile)
	f, err := os.OpenFile(p, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("ledger: lock: %w", err)
	}
	if err := flock(f, syscall.LOCK_EX); err != nil {
		f.Close()
		return nil, fmt.Errorf("ledger: lock: flock %s: %w", p, err)
	}
	return func() { f.Close() }, nil
}

// legacyHeld reports whether an older nemorl-slurm holds the episode by
// the previous scheme's flock on episodes/EP.lock; a file nobody holds is
// removed. Called with the claim mutex held.
func (o *lockOwner) legacyHeld(ep string) (bool, error) {
	p := filepath.Join(o.legacyDir, ep+".lock")
	f, err := os.OpenFile(p, os.O_RDWR, 0)
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("ledger: lock %s: %w", ep, err)
	}
	defer f.Close()
	switch err := flock(f, syscall.LOCK_EX|syscall.LOCK_NB); {
	case errors.Is(err, syscall.EWOULDBLOCK):
		return true, nil
	case err != nil:
		return false, fmt.Errorf("ledger: lock: flock %s: %w", p, err)
	}
	_ = os.Remove(p) // while locked: an old process that opened it before finds it held
	return false, nil
}

// startProc creates and flocks this process's proc file unless it has
// one. Called with the claim mutex held.
func (o *lockOwner) startProc() error {
	if o.proc != nil {
		return nil
	}
	var rnd [8]byte
	if _, err := rand.Read(rnd[:]); err != nil {
		return fmt.Errorf("ledger: lock: %w", err)
	}
	name := fmt.Sprintf("%s%d-%s%s", procPrefix, os.Getpid(), hex.EncodeToString(rnd[:]), procSuffix)
	f, err := os.CreateTemp(o.dir, ".proc-*.tmp")
	if err != nil {
		return fmt.Errorf("ledger: lock: %w", err)
	}
	fail := func(err error) error {
		f.Close()
		os.Remove(f.Name())
		return err
	}
	if err := flock(f, syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		return fail(fmt.Errorf("ledger: lock: flock %s: %w", f.Name(), err))
	}
	host, _ := os.Hostname()
	if _, err := fmt.Fprintf(f, "pid %d host %s since %s\n", os.Getpid(), host, time.Now().UTC().Format(time.RFC3339)); err != nil {
		return fail(fmt.Errorf("ledger: lock: write %s: %w", f.Name(), err))
	}
	final := filepath.Join(o.dir, name)
	if err := os.Rename(f.Name(), final); err != nil {
		return fail(fmt.Errorf("ledger: lock: %w", err))
	}
	o.proc, o.procName = f, name
	if !o.swept {
		o.swept = true
		o.sweep()
	}
	return nil
}

// stopProc removes and closes the proc file. Called with the claim mutex
// held when possible (Unlock goes on without it).
func (o *lockOwner) stopProc() {
	if o.proc == nil {
		return
	}
	_ = os.Remove(filepath.Join(o.dir, o.procName)) // before the flock goes
	_ = o.proc.Close()
	o.proc, o.procName = nil, ""
}

// sweep removes what dead processes left: proc files nobody holds, claims
// naming no live process, temp files of an interrupted write (every temp
// file is made under the claim mutex, which the caller holds). Best effort.
func (o *lockOwner) sweep() {
	entries, err := os.ReadDir(o.dir)
	if err != nil {
		return
	}
	alive := map[string]bool{o.procName: true}
	isAlive := func(name string) bool {
		a, ok := alive[name]
		if !ok {
			var err error
			if a, err = o.procAlive(name); err != nil {
				a = true // unsure: keep
			}
			alive[name] = a
		}
		return a
	}
	for _, de := range entries {
		name, p := de.Name(), filepath.Join(o.dir, de.Name())
		switch {
		case strings.HasPrefix(name, ".") && strings.Contains(name, ".tmp"):
			_ = os.Remove(p)
		case strings.HasSuffix(name, ownerSuffix):
			if owner, err := readClaim(p); err == nil && (owner == "" || !isAlive(owner)) {
				_ = os.Remove(p)
			}
		case validProcName(name) && name != o.procName:
			if o.removeDeadProc(name) {
				alive[name] = false
			}
		}
	}
}

// removeDeadProc removes the proc file name if no process holds it, and
// reports whether it did. Best effort.
func (o *lockOwner) removeDeadProc(name string) bool {
	if name == o.procName {
		return false
	}
	p := filepath.Join(o.dir, name)
	f, err := os.OpenFile(p, os.O_RDWR, 0)
	if err != nil {
		return false
	}
	defer f.Close()
	if flock(f, syscall.LOCK_EX|syscall.LOCK_NB) != nil {
		return false
	}
	// While locked: a process testing it sees it held or gone, never a
	// live process's file free.
	return os.Remove(p) == nil
}

// writeClaim makes this process the owner of ep: a temp file renamed over
// the claim. Called with the claim mutex held.
func (o *lockOwner) writeClaim(ep string) error {
	f, err := os.CreateTemp(o.dir, "."+ep+ownerSuffix+".tmp-*")
	if err != nil {
		return fmt.Errorf("ledger: lock %s: %w", ep, err)
	}
	host, _ := os.Hostname()
	w := bufio.NewWriter(f)
	fmt.Fprintf(w, "%s\npid %d host %s\n", o.procName, os.Getpid(), host)
	err = w.Flush()
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(f.Name(), o.claimPath(ep))
	}
	if err != nil {
		os.Remove(f.Name())
		return fmt.Errorf("ledger: lock %s: write %s: %w", ep, o.claimPath(ep), err)
	}
	return nil
}

// flock is syscall.Flock on f, retried when a signal interrupts it.
func flock(f *os.File, how int) error {
	for {
		err := syscall.Flock(int(f.Fd()), how)
		if !errors.Is(err, syscall.EINTR) {
			return err
		}
	}
}
