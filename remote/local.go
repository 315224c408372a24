package remote

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"time"
)

// Local runs commands and touches files on this machine (the login node).
// The zero value is ready to use.
type Local struct {
	// WaitDelay bounds how long Run waits for the output pipes after the
	// process exited or was killed (a grandchild may hold them open).
	// Zero means 5s.
	WaitDelay time.Duration
}

var _ Host = (*Local)(nil)

// NewLocal returns a Host for this machine.
func NewLocal() *Local { return &Local{} }

// Name returns "local".
func (l *Local) Name() string { return "local" }

// Close does nothing.
func (l *Local) Close() error { return nil }

// Run runs cmd with os/exec in its own process group. When ctx is done the
// whole group is killed and Run returns an error matching ctx.Err().
func (l *Local) Run(ctx context.Context, cmd Command) (*Result, error) {
	if len(cmd.Argv) == 0 {
		return nil, errors.New("local: empty command")
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("local: %s: %w", cmd, err)
	}
	c := exec.CommandContext(ctx, cmd.Argv[0], cmd.Argv[1:]...)
	setProcessGroup(c)
	c.Cancel = func() error { return killProcessGroup(c) }
	c.WaitDelay = l.WaitDelay
	if c.WaitDelay == 0 {
		c.WaitDelay = 5 * time.Second
	}
	var stdout, stderr bytes.Buffer
	c.Stdin = cmd.Stdin
	c.Stdout = &stdout
	c.Stderr = &stderr
	err := c.Run()
	if ctx.Err() != nil {
		return nil, fmt.Errorf("local: %s: %w", cmd, ctx.Err())
	}
	res := &Result{Stdout: stdout.Bytes(), Stderr: stderr.Bytes()}
	var exitErr *exec.ExitError
	switch {
	case err == nil:
		return res, nil
	case errors.As(err, &exitErr) && exitErr.Exited():
		res.ExitStatus = exitErr.ExitCode()
		return res, &CommandError{Host: l.Name(), Command: cmd.String(), ExitStatus: res.ExitStatus, Stderr: TrimStderr(res.Stderr)}
	case errors.As(err, &exitErr):
		// Killed by a signal: report it like a shell would (128+n).
		res.ExitStatus = exitStatusFromSignal(exitErr)
		return res, &CommandError{Host: l.Name(), Command: cmd.String(), ExitStatus: res.ExitStatus,
			Stderr: TrimStderr(append(res.Stderr, []byte("\n"+exitErr.Error())...))}
	default:
		return nil, fmt.Errorf("local: %s: %w", cmd, err)
	}
}

// MkdirAll makes dir and its missing parents, each chmod-ed to mode so the
// umask does not narrow it. Existing directories are left as they are.
func (l *Local) MkdirAll(ctx context.Context, dir string, mode fs.FileMode) error {
	if err := checkPath(ctx, "mkdir", dir); err != nil {
		return err
	}
	var missing []string
	for p := filepath.Clean(dir); ; p = filepath.Dir(p) {
		fi, err := os.Stat(p)
		if err == nil {
			if !fi.IsDir() {
				return &fs.PathError{Op: "mkdir", Path: p, Err: fmt.Errorf("not a directory")}
			}
			break
		}
		if !errors.Is(err, fs.ErrNotExist) {
			return err
		}
		missing = append(missing, p)
		if p == filepath.Dir(p) {
			break
		}
	}
	for i := len(missing) - 1; i >= 0; i-- {
		p := missing[i]
		if err := os.Mkdir(p, mode.Perm()); err != nil {
			if errors.Is(err, fs.ErrExist) {
				if fi, serr := os.Stat(p); serr == nil && fi.IsDir() {
					continue // made concurrently; leave its mode alone
				}
			}
			return err
		}
		if err := os.Chmod(p, mode.Perm()); err != nil {
			return err
		}
	}
	return nil
}

// WriteFile writes data to a temp file in the same directory, fsyncs it,
// chmods it to mode and renames it over path, so readers see the old file or
// the new one, never a part. The directory is fsynced after the rename.
func (l *Local) WriteFile(ctx context.Context, path string, data []byte, mode fs.FileMode) (err error) {
	if err := checkPath(ctx, "write", path); err != nil {
		return err
	}
	dir, base := filepath.Split(path)
	f, err := os.CreateTemp(dir, "."+base+".tmp-*")
	if err != nil {
		return fmt.Errorf("local: write %s: %w", path, err)
	}
	tmp := f.Name()
	defer func() {
		if err != nil {
			_ = f.Close()
			_ = os.Remove(tmp)
			err = fmt.Errorf("local: write %s: %w", path, err)
		}
	}()
	if _, err = f.Write(data); err != nil {
		return err
	}
	if err = f.Sync(); err != nil {
		return err
	}
	if err = f.Chmod(mode.Perm()); err != nil {
		return err
	}
	if err = f.Close(); err != nil {
		return err
	}
	if err = ctx.Err(); err != nil {
		return err
	}
	if err = os.Rename(tmp, path); err != nil {
		return err
	}
	if d, derr := os.Open(dir); derr == nil {
		_ = d.Sync()
		_ = d.Close()
	}
	return nil
}

// ReadFile reads the whole file.
func (l *Local) ReadFile(ctx context.Context, path string) ([]byte, error) {
	if err := checkPath(ctx, "read", path); err != nil {
		return nil, err
	}
	return os.ReadFile(path)
}

// ReadTail returns at most the last n bytes of path, seeking past the rest.
func (l *Local) ReadTail(ctx context.Context, path string, n int64) ([]byte, error) {
	if err := checkPath(ctx, "read", path); err != nil {
		return nil, err
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return readTail(f, n)
}

// Stat returns the file's info; a missing file matches fs.ErrNotExist.
func (l *Local) Stat(ctx context.Context, path string) (fs.FileInfo, error) {
	if err := checkPath(ctx, "stat", path); err != nil {
		return nil, err
	}
	return os.Stat(path)
}

// Lstat is Stat without following a final symlink.
func (l *Local) Lstat(ctx context.Context, path string) (fs.FileInfo, error) {
	if err := checkPath(ctx, "lstat", path); err != nil {
		return nil, err
	}
	return os.Lstat(path)
}

// Remove removes a file or an empty directory.
func (l *Local) Remove(ctx context.Context, path string) error {
	if err := checkPath(ctx, "remove", path); err != nil {
		return err
	}
	return os.Remove(path)
}

// checkPath returns ctx's error, or an error for a path that is not absolute.
func checkPath(ctx context.Context, op, path string) error {
	if err := ctx.Err(); err != nil {
		return &fs.PathError{Op: op, Path: path, Err: err}
	}
	if !filepath.IsAbs(path) {
		return &fs.PathError{Op: op, Path: path, Err: errors.New("path is not absolute")}
	}
	return nil
}

// seekStatReader is what readTail needs: an *os.File or an *sftp.File.
type seekStatReader interface {
	io.ReadSeeker
	Stat() (fs.FileInfo, error)
}

// readTail seeks to the last n bytes of f and reads them.
func readTail(f seekStatReader, n int64) ([]byte, error) {
	if n <= 0 {
		return []byte{}, nil
	}
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	off := fi.Size() - n
	if off < 0 {
		off = 0
	}
	if _, err := f.Seek(off, io.SeekStart); err != nil {
		return nil, err
	}
	// The file may have grown since Stat: read no more than n.
	b, err := io.ReadAll(io.LimitReader(f, n))
	if err != nil {
		return nil, err
	}
	return b, nil
}
