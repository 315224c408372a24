package remote

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"

	"github.com/pkg/sftp"
)

// withSFTP is one attempt at a file operation: it runs op with the
// connection's SFTP client (made first if there is none). A connection
// that could not be made or was lost, or an SFTP session that ended, comes
// back as a *ConnError (under the *fs.PathError): file operations are
// idempotent, and WithRetry tries them again (SSH.MkdirAll and the rest).
// ctx is checked between steps and ends the wait for a step in flight
// (which then finishes in the background).
func (s *SSH) withSFTP(ctx context.Context, op, p string, fn func(*sftp.Client) error) error {
	wrap := func(err error) error {
		var pe *fs.PathError
		if errors.As(err, &pe) {
			return fmt.Errorf("%s: %w", s.name, err)
		}
		return fmt.Errorf("%s: %w", s.name, &fs.PathError{Op: op, Path: p, Err: err})
	}
	if !path.IsAbs(p) {
		return wrap(errors.New("path is not absolute"))
	}
	if err := ctx.Err(); err != nil {
		return wrap(err)
	}
	c, err := s.conn(ctx)
	if err != nil {
		if ctx.Err() != nil {
			return wrap(ctx.Err())
		}
		if isPermanent(err) {
			return wrap(err)
		}
		return wrap(&ConnError{Stage: NotConnected, Err: err})
	}
	cl, err := c.sftpClient(ctx)
	if err == nil {
		err = callCtx(ctx, func() error { return fn(cl) })
	}
	if err == nil {
		return nil
	}
	if ctx.Err() != nil {
		return wrap(ctx.Err())
	}
	if isFileError(err) {
		return wrap(err)
	}
	if c.lost(err) {
		return wrap(&ConnError{Stage: LostAfterStart, Err: err})
	}
	if c.sftpEnded(cl) {
		return wrap(&ConnError{Stage: SessionEnded, Err: err})
	}
	return wrap(err)
}

// isFileError says whether err is the server's answer about the file
// (missing, not allowed, …) rather than a transport failure.
func isFileError(err error) bool {
	var se *sftp.StatusError
	return errors.Is(err, fs.ErrNotExist) || errors.Is(err, fs.ErrPermission) || errors.Is(err, fs.ErrExist) ||
		errors.As(err, &se)
}

// callCtx runs fn, returning early with ctx's error when ctx ends first.
func callCtx(ctx context.Context, fn func() error) error {
	errc := make(chan error, 1)
	go func() { errc <- fn() }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// mkdirAll is one attempt at MkdirAll: parents are made one by one, each
// chmod-ed to mode.
func (s *SSH) mkdirAll(ctx context.Context, dir string, mode fs.FileMode) error {
	dir = path.Clean(dir)
	return s.withSFTP(ctx, "mkdir", dir, func(cl *sftp.Client) error {
		var missing []string
		for p := dir; ; p = path.Dir(p) {
			fi, err := cl.Stat(p)
			if err == nil {
				if !fi.IsDir() {
					return &fs.PathError{Op: "mkdir", Path: p, Err: errors.New("not a directory")}
				}
				break
			}
			if !errors.Is(err, fs.ErrNotExist) {
				return &fs.PathError{Op: "stat", Path: p, Err: err}
			}
			missing = append(missing, p)
			if p == "/" {
				break
			}
		}
		for i := len(missing) - 1; i >= 0; i-- {
			p := missing[i]
			if err := ctx.Err(); err != nil {
				return err
			}
			if err := cl.Mkdir(p); err != nil {
				if fi, serr := cl.Stat(p); serr == nil && fi.IsDir() {
					continue // made meanwhile (or by a retried call)
				}
				return &fs.PathError{Op: "mkdir", Path: p, Err: err}
			}
			if err := cl.Chmod(p, mode.Perm()); err != nil {
				return &fs.PathError{Op: "chmod", Path: p, Err: err}
			}
		}
		return nil
	})
}

// writeFile is one attempt at WriteFile: a temp file in the same
// directory, chmod-ed before any data goes in, fsync-ed, then renamed over p.
func (s *SSH) writeFile(ctx context.Context, p string, data []byte, mode fs.FileMode) error {
	return s.withSFTP(ctx, "write", p, func(cl *sftp.Client) (err error) {
		var rnd [8]byte
		_, _ = rand.Read(rnd[:])
		dir, base := path.Split(p)
		tmp := path.Join(dir, "."+base+".tmp-"+hex.EncodeToString(rnd[:]))
		f, err := cl.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL)
		if err != nil {
			return &fs.PathError{Op: "create", Path: tmp, Err: err}
		}
		defer func() {
			if err != nil {
				_ = f.Close()
				_ = cl.Remove(tmp)
			}
		}()
		if err = f.Chmod(mode.Perm()); err != nil {
			return &fs.PathError{Op: "chmod", Path: tmp, Err: err}
		}
		if _, err = f.ReadFrom(bytes.NewReader(data)); err != nil {
			return &fs.PathError{Op: "write", Path: tmp, Err: err}
		}
		if serr := f.Sync(); serr != nil {
			var se *sftp.StatusError
			if !errors.As(serr, &se) {
				err = serr
				return &fs.PathError{Op: "fsync", Path: tmp, Err: err}
			}
			// fsync@openssh.com unsupported: the rename still makes it atomic
		}
		if err = f.Close(); err != nil {
			return &fs.PathError{Op: "close", Path: tmp, Err: err}
		}
		if err = ctx.Err(); err != nil {
			return err // cancelled while writing: leave the old file
		}
		if err = cl.PosixRename(tmp, p); err != nil {
			return &fs.PathError{Op: "rename", Path: tmp, Err: err}
		}
		return nil
	})
}

// readFile is one attempt at ReadFile.
func (s *SSH) readFile(ctx context.Context, p string) ([]byte, error) {
	return s.read(ctx, p, func(f *sftp.File) ([]byte, error) {
		var buf bytes.Buffer
		if _, err := f.WriteTo(&buf); err != nil {
			return nil, err
		}
		return buf.Bytes(), nil
	})
}

// readTail is one attempt at ReadTail: it seeks past all but the last n
// bytes.
func (s *SSH) readTail(ctx context.Context, p string, n int64) ([]byte, error) {
	return s.read(ctx, p, func(f *sftp.File) ([]byte, error) { return readTail(f, n) })
}

// read opens p over SFTP and hands it to fn.
func (s *SSH) read(ctx context.Context, p string, fn func(*sftp.File) ([]byte, error)) ([]byte, error) {
	var out []byte
	err := s.withSFTP(ctx, "read", p, func(cl *sftp.Client) error {
		f, err := cl.Open(p)
		if err != nil {
			return err
		}
		defer f.Close()
		out, err = fn(f)
		return err
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// stat is one attempt at Stat.
func (s *SSH) stat(ctx context.Context, p string) (fs.FileInfo, error) {
	var fi fs.FileInfo
	err := s.withSFTP(ctx, "stat", p, func(cl *sftp.Client) error {
		var err error
		fi, err = cl.Stat(p)
		return err
	})
	if err != nil {
		return nil, err
	}
	return fi, nil
}

// lstat is one attempt at Lstat.
func (s *SSH) lstat(ctx context.Context, p string) (fs.FileInfo, error) {
	var fi fs.FileInfo
	err := s.withSFTP(ctx, "lstat", p, func(cl *sftp.Client) error {
		var err error
		fi, err = cl.Lstat(p)
		return err
	})
	if err != nil {
		return nil, err
	}
	return fi, nil
}

// remove is one attempt at Remove.
func (s *SSH) remove(ctx context.Context, p string) error {
	return s.withSFTP(ctx, "remove", p, func(cl *sftp.Client) error {
		return cl.Remove(p)
	})
}
