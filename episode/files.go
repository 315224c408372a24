package episode

import (
	"bytes"
	"context"
	_ "embed"
	"errors"
	"fmt"
	"io/fs"
	"strconv"
	"strings"
	"time"

	"github.com/nemorl/nemorl-slurm/record"
	"github.com/nemorl/nemorl-slurm/remote"
	"github.com/nemorl/nemorl-slurm/rules"
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
	// Ctime, Inode and Links are set by readOutput only.
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
// none); readOutput does. A missing file is not an error.
func (c *collector) lstat(ctx context.Context, p string) (rules.File, error) {
	fi, err := c.host.Lstat(ctx, p)
	if errors.Is(err, fs.ErrNotExist) {
		return rules.File{}, nil
	}
	if err != nil {
		return rules.File{}, fmt.Errorf("inspect %s: %w", p, err)
	}
	return rules.File{Exists: true, Type: typeName(fi.Mode()), Size: fi.Size(), Perm: fi.Mode().Perm()}, nil
}

// file is the file as the rules see it.
func (f fileInfo) file() rules.File {
	return rules.File{Exists: f.Exists, Type: f.Type, Size: f.Size, Ctime: f.Ctime}
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

// parseLstat parses stat(1)'s --printf='%F|%s|%Z|%i|%h' (collectScript).
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

// collectScript inspects and filters a stage's output where it lies, in
// one command: sh -c collectScript sh FILE WINDOW [findings]. It prints
//
//	nemorl-collect absent                  no such file
//	nemorl-collect lstat F|s|Z|i|h         the file, without following a symlink
//	nemorl-collect unopenable              (after lstat) a regular file it cannot open
//	nemorl-collect replaced                (after lstat) the path changed while inspected
//	nemorl-collect tail START              then grep -n -b's lines of the last
//	                                       WINDOW bytes (from byte START) that start
//	                                       with NEMORL_ENV_ (and, with findings, the
//	                                       isolation guard's "nemorl: isolation: " lines)
//
// The file is opened read-write (<>: a FIFO opens without blocking, and
// nothing is written) before the path is lstat'ed and the open file is
// stat'ed; only when both are the same regular file is the tail read, from
// that open file: a FIFO or symlink swapped in between cannot stall the
// read or redirect it.
//
// It is scripts/collect.sh.
//
//go:embed scripts/collect.sh
var collectScript string

// outputTail is what collectScript found.
type outputTail struct {
	fi fileInfo
	// start is the file offset the tail window begins at; lines are the
	// window's lines starting with NEMORL_ENV_, numbered from its first
	// whole line, at their file offsets.
	start int64
	lines []record.Line
	// unopenable: a regular file that could not be opened; replaced: the
	// path changed between the open and the lstat.
	unopenable, replaced bool
	// findings are the guard's lines (readOutput with findings).
	findings []string
}

// readOutput inspects p and filters the last window bytes of it on the
// cluster: one command (two round trips over SSH), a few hundred bytes
// back for a normal log.
func (c *collector) readOutput(ctx context.Context, p string, window int64, findings ...bool) (*outputTail, error) {
	argv := []string{"sh", "-c", collectScript, "sh", p, strconv.FormatInt(window, 10)}
	if len(findings) > 0 && findings[0] {
		argv = append(argv, "findings")
	}
	cmd := remote.Command{Argv: argv, Idempotent: true, Label: "collect"}
	res, err := c.host.Run(ctx, cmd)
	if err != nil {
		if res != nil {
			return nil, fmt.Errorf("inspect %s: %w (%s)", p, err, remote.TrimStderr(res.Stderr))
		}
		return nil, fmt.Errorf("inspect %s: %w", p, err)
	}
	out, err := parseOutputTail(res.Stdout)
	if err != nil {
		return nil, fmt.Errorf("inspect %s: %w", p, err)
	}
	return out, nil
}

// parseOutputTail parses collectScript's output.
func parseOutputTail(b []byte) (*outputTail, error) {
	out := &outputTail{}
	rest := b
	next := func() (string, bool) {
		if len(rest) == 0 {
			return "", false
		}
		i := bytes.IndexByte(rest, '\n')
		if i < 0 {
			line := string(rest)
			rest = nil
			return line, true
		}
		line := string(rest[:i])
		rest = rest[i+1:]
		return line, true
	}
	for {
		line, ok := next()
		if !ok {
			return out, nil
		}
		word, arg, _ := strings.Cut(strings.TrimPrefix(line, "nemorl-collect "), " ")
		if !strings.HasPrefix(line, "nemorl-collect ") {
			return nil, fmt.Errorf("unexpected output %.80q", line)
		}
		switch word {
		case "absent":
			return out, nil
		case "lstat":
			fi, err := parseLstat(arg)
			if err != nil {
				return nil, err
			}
			out.fi = fi
		case "unopenable":
			out.unopenable = true
		case "replaced":
			out.replaced = true
		case "tail":
			start, err := strconv.ParseInt(arg, 10, 64)
			if err != nil || start < 0 || !out.fi.Exists {
				return nil, fmt.Errorf("bad tail line %.80q", line)
			}
			out.start = start
			for len(rest) > 0 {
				l, _ := next()
				no, l2, ok1 := strings.Cut(l, ":")
				off, body, ok2 := strings.Cut(l2, ":")
				n, err1 := strconv.Atoi(no)
				o, err2 := strconv.ParseInt(off, 10, 64)
				if !ok1 || !ok2 || err1 != nil || err2 != nil || n < 1 || o < 0 {
					return nil, fmt.Errorf("bad grep line %.80q", l)
				}
				if start > 0 {
					// The window's first line is partial: not a line of the file.
					if n == 1 {
						continue
					}
					n--
				}
				if f, ok := strings.CutPrefix(body, guardPrefix); ok {
					if len(out.findings) < maxFindings {
						out.findings = append(out.findings, abbreviate(f, 400))
					}
					continue
				}
				out.lines = append(out.lines, record.Line{No: n, Offset: start + o, Body: []byte(body)})
			}
			return out, nil
		default:
			return nil, fmt.Errorf("unexpected output %.80q", line)
		}
	}
}

// guardPrefix starts each finding of the isolation guard (guard.sh).
const guardPrefix = "nemorl: isolation: "

// maxFindings bounds the findings an outcome's detail carries.
const maxFindings = 10

func abbreviate(s string, n int) string {
	if len(s) > n {
		return s[:n] + "…"
	}
	return s
}
