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
	return WriteFunc(path, mode, func(w io.Writer) error {
		_, err := w.Write(data)
		return err
	})
}

// WriteFunc replaces path with what fill writes (buffered), giving it
// mode. An error of fill is returned as is; the target is then untouched.
func WriteFunc(path string, mode fs.FileMode, fill func(io.Writer) error) (err error) {
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
	bw := bufio.NewWriterSize(f, 1<<20)
	if err = fill(bw); err != nil {
		fillErr = true
		return err
	}
	if err = bw.Flush(); err != nil {
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
