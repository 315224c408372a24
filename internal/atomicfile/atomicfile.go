// Package atomicfile replaces local files so that a crash leaves the old
// content or the new, never a mix: write a temp file in the same directory,
// fsync it, rename it over the target, fsync the directory.
package atomicfile

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
)

// Write replaces path with data, giving it mode.
func Write(path string, data []byte, mode fs.FileMode) error {
	return write(path, mode, func(f *os.File) error {
		_, err := f.Write(data)
		return err
	})
}

// bufSize is WriteFunc's buffer: small files (ledger entries, keys) are
// written by the thousand, so not a buffer per write of a megabyte.
const bufSize = 64 << 10

// WriteFunc replaces path with what fill writes (buffered), giving it
// mode. An error of fill is returned as is; the target is then untouched.
func WriteFunc(path string, mode fs.FileMode, fill func(io.Writer) error) error {
	return write(path, mode, func(f *os.File) error {
		bw := bufio.NewWriterSize(f, bufSize)
		if err := fill(bw); err != nil {
			return &fillError{err}
		}
		return bw.Flush()
	})
}

// fillError is an error of WriteFunc's fill, returned as is.
type fillError struct{ err error }

func (e *fillError) Error() string { return e.err.Error() }

// writers bounds the writes in progress at once. A write blocks a thread
// in fsync; serve writes a burst of thousands of ledger and key files from
// as many goroutines, and Go would start a thread for each one blocked.
var writers = make(chan struct{}, 8)

func write(path string, mode fs.FileMode, fill func(*os.File) error) (err error) {
	writers <- struct{}{}
	defer func() { <-writers }()
	dir := filepath.Dir(path)
	f, err := os.CreateTemp(dir, "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	fillErr := false
	defer func() {
		if err != nil {
			f.Close()
			os.Remove(f.Name())
			if !fillErr {
				err = fmt.Errorf("write %s: %w", path, err)
			}
		}
	}()
	if err = f.Chmod(mode.Perm()); err != nil {
		return err
	}
	if err = fill(f); err != nil {
		var fe *fillError
		if errors.As(err, &fe) {
			fillErr = true
			err = fe.err
		}
		return err
	}
	if err = f.Sync(); err != nil {
		return err
	}
	if err = f.Close(); err != nil {
		return err
	}
	if err = os.Rename(f.Name(), path); err != nil {
		return err
	}
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	// Some file systems cannot fsync a directory; the rename stands.
	if err = d.Sync(); errors.Is(err, syscall.EINVAL) || errors.Is(err, syscall.ENOTSUP) {
		err = nil
	}
	return err
}
