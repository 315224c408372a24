package episode

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"strconv"
	"strings"
	"time"

	"github.com/nemorl/nemorl-slurm/remote"
)

// fileInfo is what lstat(2) says of a file on the cluster, as far as the
// collector needs it: the policy's jobs run as the same user and can put a
// FIFO, a symlink to /dev/zero or a 64 GiB sparse file where an output is
// expected, and can rewrite a file after the job that owned it ended. The
// change time (ctime) cannot be set by a user: every write, rename, chmod
// or touch moves it to the current time.
type fileInfo struct {
	Exists bool
	// Type is as stat's %F: "regular file", "regular empty file", "fifo",
	// "symbolic link", "directory", "character special file", …
	Type string
	Size int64
	// Ctime, Inode and Links are set by statCtime only.
	Ctime time.Time
	Inode uint64
	Links int
}

// Regular reports a regular file (empty or not).
func (f fileInfo) Regular() bool {
	return f.Type == "regular file" || f.Type == "regular empty file"
}

// lstat inspects p on the cluster without following a symlink: one SFTP
// request. It gives the type and size, not the change time (SFTP has
// none); statCtime does. A missing file is not an error.
func (d *Driver) lstat(ctx context.Context, p string) (fileInfo, error) {
	fi, err := d.Host.Lstat(ctx, p)
	if errors.Is(err, fs.ErrNotExist) {
		return fileInfo{}, nil
	}
	if err != nil {
		return fileInfo{}, fmt.Errorf("inspect %s: %w", p, err)
	}
	return fileInfo{Exists: true, Type: typeName(fi.Mode()), Size: fi.Size()}, nil
}

// typeName names a file type as stat(1)'s %F does.
func typeName(m fs.FileMode) string {
	switch t := m.Type(); {
	case t == 0:
		return "regular file"
	case t&fs.ModeDir != 0:
		return "directory"
	case t&fs.ModeSymlink != 0:
		return "symbolic link"
	case t&fs.ModeNamedPipe != 0:
		return "fifo"
	case t&fs.ModeSocket != 0:
		return "socket"
	case t&fs.ModeCharDevice != 0:
		return "character special file"
	case t&fs.ModeDevice != 0:
		return "block special file"
	}
	return "weird file"
}

// lstatFormat is stat(1)'s --printf format for fileInfo; %F never holds '|'.
const lstatFormat = "%F|%s|%Z|%i|%h"

// statCtime is lstat with the change time, inode and link count: one stat(1)
// command on the cluster (a command session: more round trips than an SFTP
// request, so only where the change time is needed).
func (d *Driver) statCtime(ctx context.Context, p string) (fileInfo, error) {
	cmd := remote.Command{Argv: []string{"env", "LC_ALL=C", "stat", "--printf=" + lstatFormat, "--", p}, Idempotent: true}
	res, err := d.Host.Run(ctx, cmd)
	if err != nil {
		var ce *remote.CommandError
		if errors.As(err, &ce) && res != nil && strings.Contains(string(res.Stderr), "No such file or directory") {
			return fileInfo{}, nil
		}
		return fileInfo{}, fmt.Errorf("inspect %s: %w", p, err)
	}
	fi, err := parseLstat(string(res.Stdout))
	if err != nil {
		return fileInfo{}, fmt.Errorf("inspect %s: %w", p, err)
	}
	return fi, nil
}

// parseLstat parses one line of lstatFormat output.
func parseLstat(s string) (fileInfo, error) {
	f := strings.Split(strings.TrimSuffix(s, "\n"), "|")
	if len(f) != 5 {
		return fileInfo{}, fmt.Errorf("stat printed %q, want 5 fields", s)
	}
	size, err1 := strconv.ParseInt(f[1], 10, 64)
	ctime, err2 := strconv.ParseInt(f[2], 10, 64)
	inode, err3 := strconv.ParseUint(f[3], 10, 64)
	links, err4 := strconv.Atoi(f[4])
	if err := errors.Join(err1, err2, err3, err4); err != nil || f[0] == "" || size < 0 || links < 0 {
		return fileInfo{}, fmt.Errorf("stat printed %q: %v", s, err)
	}
	return fileInfo{Exists: true, Type: f[0], Size: size, Ctime: time.Unix(ctime, 0), Inode: inode, Links: links}, nil
}

// plantedError is an output file that is not a regular file: a FIFO, a
// symlink, a device or a directory planted where a stage's output belongs.
type plantedError struct {
	Stage, Path, Type string
}

func (e *plantedError) Error() string {
	return fmt.Sprintf("the %s output %s is a %s, not a regular file", e.Stage, e.Path, e.Type)
}
