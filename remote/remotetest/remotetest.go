// Package remotetest is the behaviour suite every remote.Host must pass.
// Each implementation's tests call Run with a way to make the host.
package remotetest

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io/fs"
	"path"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nemorl/nemorl-slurm/remote"
)

// Factory makes the host under test and a scratch directory on it: an
// absolute path to an existing, empty directory the host's user may write.
// It registers its own cleanup (closing the host, removing the directory).
type Factory func(t *testing.T) (h remote.Host, scratch string)

// Run runs the suite against one host made by newHost.
func Run(t *testing.T, newHost Factory) {
	h, dir := newHost(t)
	if h.Name() == "" {
		t.Error("Name() is empty")
	}
	for _, c := range []struct {
		name string
		fn   func(*testing.T, remote.Host, string)
	}{
		{"RunStdout", testRunStdout},
		{"RunQuoting", testRunQuoting},
		{"RunStdin", testRunStdin},
		{"RunStdinUnread", testRunStdinUnread},
		{"RunExitStatus", testRunExitStatus},
		{"RunStderrTrimmed", testRunStderrTrimmed},
		{"RunNotFound", testRunNotFound},
		{"RunEmpty", testRunEmpty},
		{"RunCancelKills", testRunCancelKills},
		{"RunCancelledBefore", testRunCancelledBefore},
		{"RunConcurrent64", testRunConcurrent},
		{"WriteFileAtomic", testWriteFileAtomic},
		{"WriteFileOverwrite", testWriteFileOverwrite},
		{"WriteFileMissingDir", testWriteFileMissingDir},
		{"MkdirAllMode", testMkdirAllMode},
		{"MkdirAllOverFile", testMkdirAllOverFile},
		{"ReadFile", testReadFile},
		{"ReadTail", testReadTail},
		{"StatMissing", testStatMissing},
		{"LstatTypes", testLstatTypes},
		{"Remove", testRemove},
		{"RelativePath", testRelativePath},
		{"FilesCancelled", testFilesCancelled},
		{"FilesConcurrent", testFilesConcurrent},
	} {
		sub := path.Join(dir, c.name)
		t.Run(c.name, func(t *testing.T) {
			ctx := t.Context()
			if err := h.MkdirAll(ctx, sub, 0o700); err != nil {
				t.Fatalf("MkdirAll(%s): %v", sub, err)
			}
			c.fn(t, h, sub)
		})
	}
}

func run(t *testing.T, h remote.Host, argv ...string) *remote.Result {
	t.Helper()
	res, err := h.Run(t.Context(), remote.Command{Argv: argv})
	if err != nil {
		t.Fatalf("Run(%q): %v", argv, err)
	}
	return res
}

func testRunStdout(t *testing.T, h remote.Host, _ string) {
	res := run(t, h, "echo", "hello")
	if string(res.Stdout) != "hello\n" || res.ExitStatus != 0 || len(res.Stderr) != 0 {
		t.Errorf("Run(echo hello) = %+v", res)
	}
}

// testRunQuoting: words reach the program as they were, unexpanded.
func testRunQuoting(t *testing.T, h remote.Host, _ string) {
	words := []string{"two words", "$(echo pwned)", "`id`", "it's", `"dq"`, "$HOME", "*", "", "a\nb", "-n"}
	res := run(t, h, append([]string{"printf", `%s\0`}, words...)...)
	got := strings.Split(strings.TrimSuffix(string(res.Stdout), "\x00"), "\x00")
	if len(got) != len(words) {
		t.Fatalf("got %d words %q, want %q", len(got), got, words)
	}
	for i := range words {
		if got[i] != words[i] {
			t.Errorf("word %d = %q, want %q", i, got[i], words[i])
		}
	}
}

func testRunStdin(t *testing.T, h remote.Host, _ string) {
	data := make([]byte, 1<<20+17)
	_, _ = rand.Read(data)
	for _, idem := range []bool{false, true} {
		res, err := h.Run(t.Context(), remote.Command{Argv: []string{"cat"}, Stdin: bytes.NewReader(data), Idempotent: idem})
		if err != nil {
			t.Fatalf("cat (idempotent=%v): %v", idem, err)
		}
		if !bytes.Equal(res.Stdout, data) {
			t.Errorf("cat (idempotent=%v) returned %d bytes, want the %d sent", idem, len(res.Stdout), len(data))
		}
	}
}

// testRunStdinUnread: a command that exits without reading its stdin is
// not an error.
func testRunStdinUnread(t *testing.T, h remote.Host, _ string) {
	data := bytes.Repeat([]byte("x"), 4<<20)
	res, err := h.Run(t.Context(), remote.Command{Argv: []string{"true"}, Stdin: bytes.NewReader(data)})
	if err != nil || res.ExitStatus != 0 {
		t.Errorf("true with unread stdin: %+v, %v", res, err)
	}
}

func testRunExitStatus(t *testing.T, h remote.Host, _ string) {
	res, err := h.Run(t.Context(), remote.Command{Argv: []string{"sh", "-c", "echo out; echo oops >&2; exit 3"}})
	var ce *remote.CommandError
	if !errors.As(err, &ce) {
		t.Fatalf("err = %v (%T), want *remote.CommandError", err, err)
	}
	if ce.ExitStatus != 3 || ce.Stderr != "oops" || ce.Host != h.Name() || !strings.Contains(ce.Command, "exit 3") {
		t.Errorf("CommandError = %+v", ce)
	}
	if !strings.Contains(err.Error(), "exit status 3") || !strings.Contains(err.Error(), h.Name()) {
		t.Errorf("message %q lacks the status or host", err)
	}
	if res == nil || res.ExitStatus != 3 || string(res.Stdout) != "out\n" {
		t.Errorf("Result = %+v, want status 3 with stdout", res)
	}
}

func testRunStderrTrimmed(t *testing.T, h remote.Host, _ string) {
	_, err := h.Run(t.Context(), remote.Command{Argv: []string{"sh", "-c", `i=0; while [ $i -lt 50 ]; do echo "line $i" >&2; i=$((i+1)); done; exit 1`}})
	var ce *remote.CommandError
	if !errors.As(err, &ce) {
		t.Fatalf("err = %v", err)
	}
	if want := "line 45\nline 46\nline 47\nline 48\nline 49"; ce.Stderr != want {
		t.Errorf("Stderr = %q, want the last five lines %q", ce.Stderr, want)
	}
}

func testRunNotFound(t *testing.T, h remote.Host, _ string) {
	_, err := h.Run(t.Context(), remote.Command{Argv: []string{"nemorl-no-such-command"}})
	if err == nil {
		t.Fatal("running a missing program succeeded")
	}
	if !strings.Contains(err.Error(), "nemorl-no-such-command") {
		t.Errorf("error %q does not name the program", err)
	}
}

func testRunEmpty(t *testing.T, h remote.Host, _ string) {
	if _, err := h.Run(t.Context(), remote.Command{}); err == nil {
		t.Error("empty command succeeded")
	}
}

// testRunCancelKills cancels a running `sleep 1000` and checks that Run
// returns promptly with ctx's error and that the process is gone.
func testRunCancelKills(t *testing.T, h remote.Host, dir string) {
	pidFile := path.Join(dir, "pid")
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	errc := make(chan error, 1)
	go func() {
		_, err := h.Run(ctx, remote.Command{Argv: []string{"sh", "-c", `echo $$ > "$1"; exec sleep 1000`, "sh", pidFile}})
		errc <- err
	}()
	var pid string
	waitFor(t, 10*time.Second, "the pid file", func() bool {
		b, err := h.ReadFile(t.Context(), pidFile)
		pid = strings.TrimSpace(string(b))
		return err == nil && pid != ""
	})
	if _, err := strconv.Atoi(pid); err != nil {
		t.Fatalf("pid file holds %q", pid)
	}
	// Still running before the cancel.
	if _, err := h.Run(t.Context(), remote.Command{Argv: []string{"kill", "-0", pid}}); err != nil {
		t.Fatalf("sleep is not running before cancel: %v", err)
	}
	start := time.Now()
	cancel()
	select {
	case err := <-errc:
		if !errors.Is(err, context.Canceled) {
			t.Errorf("err = %v, want context.Canceled", err)
		}
		if d := time.Since(start); d > 5*time.Second {
			t.Errorf("Run returned %v after cancel", d)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("Run did not return after cancel")
	}
	waitFor(t, 10*time.Second, "sleep "+pid+" to die", func() bool {
		_, err := h.Run(t.Context(), remote.Command{Argv: []string{"kill", "-0", pid}})
		return err != nil
	})
}

func testRunCancelledBefore(t *testing.T, h remote.Host, _ string) {
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if _, err := h.Run(ctx, remote.Command{Argv: []string{"true"}}); !errors.Is(err, context.Canceled) {
		t.Errorf("Run with a cancelled ctx: %v", err)
	}
	ctx, cancel2 := context.WithTimeout(t.Context(), 300*time.Millisecond)
	defer cancel2()
	start := time.Now()
	if _, err := h.Run(ctx, remote.Command{Argv: []string{"sleep", "30"}}); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Run past its deadline: %v", err)
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Errorf("deadline honoured after %v", d)
	}
}

// testRunConcurrent runs 64 commands at once, as a batch of episodes would.
func testRunConcurrent(t *testing.T, h remote.Host, _ string) {
	const n = 64
	var wg sync.WaitGroup
	errs := make([]error, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			res, err := h.Run(t.Context(), remote.Command{Argv: []string{"sh", "-c", `sleep 0.2; echo "$1"`, "sh", strconv.Itoa(i)}, Idempotent: i%2 == 0})
			if err == nil && strings.TrimSpace(string(res.Stdout)) != strconv.Itoa(i) {
				err = fmt.Errorf("stdout %q", res.Stdout)
			}
			errs[i] = err
		}()
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Errorf("run %d: %v", i, err)
		}
	}
}

func listDir(t *testing.T, h remote.Host, dir string) []string {
	t.Helper()
	res := run(t, h, "ls", "-A", dir)
	return strings.Fields(string(res.Stdout))
}

func testWriteFileAtomic(t *testing.T, h remote.Host, dir string) {
	ctx := t.Context()
	p := path.Join(dir, "secrets.env")
	if err := h.WriteFile(ctx, p, []byte("KEY=v\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	fi, err := h.Stat(ctx, p)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o600 || fi.Size() != 6 || !fi.Mode().IsRegular() {
		t.Errorf("Stat = mode %v size %d, want 0600, 6", fi.Mode(), fi.Size())
	}
	p2 := path.Join(dir, "script.sbatch")
	// 0664 is wider than the usual umask: the mode must be applied as asked.
	if err := h.WriteFile(ctx, p2, []byte("#!/bin/bash\n"), 0o664); err != nil {
		t.Fatal(err)
	}
	if fi, err := h.Stat(ctx, p2); err != nil || fi.Mode().Perm() != 0o664 {
		t.Errorf("Stat(%s) = %v, %v; want mode 0664", p2, fi.Mode(), err)
	}
	if got := listDir(t, h, dir); strings.Join(got, " ") != "script.sbatch secrets.env" {
		t.Errorf("directory holds %q; want only the two files (no temp files)", got)
	}
}

func testWriteFileOverwrite(t *testing.T, h remote.Host, dir string) {
	ctx := t.Context()
	p := path.Join(dir, "f")
	for i, c := range []struct {
		data string
		mode fs.FileMode
	}{{"first version, longer", 0o644}, {"second", 0o600}} {
		if err := h.WriteFile(ctx, p, []byte(c.data), c.mode); err != nil {
			t.Fatalf("write %d: %v", i, err)
		}
		got, err := h.ReadFile(ctx, p)
		if err != nil || string(got) != c.data {
			t.Errorf("after write %d: %q, %v", i, got, err)
		}
		if fi, err := h.Stat(ctx, p); err != nil || fi.Mode().Perm() != c.mode {
			t.Errorf("after write %d: mode %v, %v; want %v", i, fi.Mode(), err, c.mode)
		}
	}
	if got := listDir(t, h, dir); len(got) != 1 {
		t.Errorf("directory holds %q; want just f", got)
	}
}

func testWriteFileMissingDir(t *testing.T, h remote.Host, dir string) {
	err := h.WriteFile(t.Context(), path.Join(dir, "nope", "f"), []byte("x"), 0o600)
	if !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("WriteFile into a missing dir: %v, want fs.ErrNotExist", err)
	}
}

func testMkdirAllMode(t *testing.T, h remote.Host, dir string) {
	ctx := t.Context()
	deep := path.Join(dir, "a", "b", "c")
	if err := h.MkdirAll(ctx, deep, 0o770); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{path.Join(dir, "a"), path.Join(dir, "a", "b"), deep} {
		fi, err := h.Stat(ctx, p)
		if err != nil || !fi.IsDir() || fi.Mode().Perm() != 0o770 {
			t.Errorf("Stat(%s) = %v, %v; want a 0770 directory", p, fi.Mode(), err)
		}
	}
	if err := h.MkdirAll(ctx, deep, 0o700); err != nil {
		t.Errorf("MkdirAll on an existing dir: %v", err)
	}
	// An existing directory keeps its mode.
	if fi, err := h.Stat(ctx, deep); err != nil || fi.Mode().Perm() != 0o770 {
		t.Errorf("existing dir mode changed to %v (%v)", fi.Mode(), err)
	}
}

func testMkdirAllOverFile(t *testing.T, h remote.Host, dir string) {
	ctx := t.Context()
	f := path.Join(dir, "file")
	if err := h.WriteFile(ctx, f, []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := h.MkdirAll(ctx, path.Join(f, "sub"), 0o700); err == nil {
		t.Error("MkdirAll under a regular file succeeded")
	}
}

func testReadFile(t *testing.T, h remote.Host, dir string) {
	ctx := t.Context()
	data := make([]byte, 3<<20+5)
	_, _ = rand.Read(data)
	p := path.Join(dir, "big")
	if err := h.WriteFile(ctx, p, data, 0o644); err != nil {
		t.Fatal(err)
	}
	got, err := h.ReadFile(ctx, p)
	if err != nil || !bytes.Equal(got, data) {
		t.Errorf("ReadFile returned %d bytes (%v), want %d", len(got), err, len(data))
	}
	if _, err := h.ReadFile(ctx, path.Join(dir, "missing")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("ReadFile(missing) = %v, want fs.ErrNotExist", err)
	}
}

func testReadTail(t *testing.T, h remote.Host, dir string) {
	ctx := t.Context()
	var b bytes.Buffer
	for i := 0; b.Len() < 2<<20; i++ {
		fmt.Fprintf(&b, "log line %d\n", i)
	}
	data := b.Bytes()
	p := path.Join(dir, "out.log")
	if err := h.WriteFile(ctx, p, data, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, n := range []int64{1, 100, 64 << 10} {
		got, err := h.ReadTail(ctx, p, n)
		if err != nil || !bytes.Equal(got, data[len(data)-int(n):]) {
			t.Errorf("ReadTail(%d) = %d bytes %q…, %v", n, len(got), got[:min(len(got), 20)], err)
		}
	}
	if got, err := h.ReadTail(ctx, p, int64(len(data))+1000); err != nil || !bytes.Equal(got, data) {
		t.Errorf("ReadTail(more than size) = %d bytes, %v; want the whole file", len(got), err)
	}
	if got, err := h.ReadTail(ctx, p, 0); err != nil || len(got) != 0 {
		t.Errorf("ReadTail(0) = %q, %v", got, err)
	}
	if _, err := h.ReadTail(ctx, path.Join(dir, "missing"), 10); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("ReadTail(missing) = %v, want fs.ErrNotExist", err)
	}
}

func testStatMissing(t *testing.T, h remote.Host, dir string) {
	p := path.Join(dir, "no-such-file")
	_, err := h.Stat(t.Context(), p)
	if !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("Stat(missing) = %v, want fs.ErrNotExist", err)
	}
	if !strings.Contains(err.Error(), p) {
		t.Errorf("error %q does not name the path", err)
	}
}

func testRemove(t *testing.T, h remote.Host, dir string) {
	ctx := t.Context()
	f := path.Join(dir, "f")
	d := path.Join(dir, "d")
	if err := h.WriteFile(ctx, f, []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := h.MkdirAll(ctx, d, 0o700); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{f, d} {
		if err := h.Remove(ctx, p); err != nil {
			t.Errorf("Remove(%s): %v", p, err)
		}
		if _, err := h.Stat(ctx, p); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("Stat after Remove(%s): %v", p, err)
		}
	}
	if err := h.Remove(ctx, f); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("Remove(missing) = %v, want fs.ErrNotExist", err)
	}
	// A directory that is not empty stays.
	if err := h.WriteFile(ctx, path.Join(d+"2", "x"), nil, 0o600); err == nil {
		t.Error("write into missing dir succeeded")
	}
	if err := h.MkdirAll(ctx, d+"2", 0o700); err != nil {
		t.Fatal(err)
	}
	if err := h.WriteFile(ctx, path.Join(d+"2", "x"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := h.Remove(ctx, d+"2"); err == nil {
		t.Error("Remove of a non-empty directory succeeded")
	}
}

func testRelativePath(t *testing.T, h remote.Host, _ string) {
	ctx := t.Context()
	if err := h.WriteFile(ctx, "relative/f", []byte("x"), 0o600); err == nil {
		t.Error("WriteFile with a relative path succeeded")
	}
	if _, err := h.Stat(ctx, "relative"); err == nil {
		t.Error("Stat with a relative path succeeded")
	}
}

func testFilesCancelled(t *testing.T, h remote.Host, dir string) {
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	p := path.Join(dir, "f")
	if err := h.WriteFile(ctx, p, []byte("x"), 0o600); !errors.Is(err, context.Canceled) {
		t.Errorf("WriteFile with cancelled ctx: %v", err)
	}
	if _, err := h.Stat(ctx, dir); !errors.Is(err, context.Canceled) {
		t.Errorf("Stat with cancelled ctx: %v", err)
	}
	if err := h.MkdirAll(ctx, path.Join(dir, "x"), 0o700); !errors.Is(err, context.Canceled) {
		t.Errorf("MkdirAll with cancelled ctx: %v", err)
	}
	if _, err := h.Stat(t.Context(), p); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("cancelled WriteFile left %s: %v", p, err)
	}
}

func testFilesConcurrent(t *testing.T, h remote.Host, dir string) {
	const n = 32
	var wg sync.WaitGroup
	errs := make([]error, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx := t.Context()
			sub := path.Join(dir, "ep-"+strconv.Itoa(i), "author")
			if err := h.MkdirAll(ctx, sub, 0o700); err != nil {
				errs[i] = err
				return
			}
			p := path.Join(sub, "prompt.txt")
			want := []byte(strings.Repeat(strconv.Itoa(i), 1000))
			if err := h.WriteFile(ctx, p, want, 0o600); err != nil {
				errs[i] = err
				return
			}
			got, err := h.ReadFile(ctx, p)
			if err == nil && !bytes.Equal(got, want) {
				err = fmt.Errorf("read back %d bytes", len(got))
			}
			errs[i] = err
		}()
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Errorf("episode %d: %v", i, err)
		}
	}
}

func waitFor(t *testing.T, limit time.Duration, what string, ok func() bool) {
	t.Helper()
	deadline := time.Now().Add(limit)
	for !ok() {
		if time.Now().After(deadline) {
			t.Fatalf("gave up waiting %v for %s", limit, what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// testLstatTypes: Lstat reports a FIFO and a symlink as themselves (never
// opening or following them), a regular file with its size, and a missing
// file as fs.ErrNotExist naming the path.
func testLstatTypes(t *testing.T, h remote.Host, dir string) {
	ctx := t.Context()
	reg, fifo, link := path.Join(dir, "regular"), path.Join(dir, "fifo"), path.Join(dir, "link")
	if err := h.WriteFile(ctx, reg, []byte("12345"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := h.Run(ctx, remote.Command{Argv: []string{"mkfifo", fifo}}); err != nil {
		t.Fatal(err)
	}
	if _, err := h.Run(ctx, remote.Command{Argv: []string{"ln", "-s", "/dev/zero", link}}); err != nil {
		t.Fatal(err)
	}
	if fi, err := h.Lstat(ctx, reg); err != nil || !fi.Mode().IsRegular() || fi.Size() != 5 {
		t.Errorf("Lstat(regular) = %v, %v; want a regular file of 5 bytes", fi, err)
	}
	if fi, err := h.Lstat(ctx, fifo); err != nil || fi.Mode()&fs.ModeNamedPipe == 0 {
		t.Errorf("Lstat(fifo) = %v, %v; want a named pipe", fi, err)
	}
	if fi, err := h.Lstat(ctx, link); err != nil || fi.Mode()&fs.ModeSymlink == 0 {
		t.Errorf("Lstat(symlink to /dev/zero) = %v, %v; want the symlink itself", fi, err)
	}
	missing := path.Join(dir, "missing")
	if _, err := h.Lstat(ctx, missing); !errors.Is(err, fs.ErrNotExist) || !strings.Contains(err.Error(), missing) {
		t.Errorf("Lstat(missing) = %v, want fs.ErrNotExist naming the path", err)
	}
}
