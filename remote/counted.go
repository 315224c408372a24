package remote

import (
	"context"
	"io/fs"
	"path"
	"sort"
	"strings"
	"sync"
)

// Counted is a Host that counts the operations made through it: commands
// by program ("run sacct") and file operations by kind ("stat"). serve
// exports the counts as metrics; tests and benchmarks count round trips
// with it. It is safe for concurrent use.
type Counted struct {
	Host

	mu       sync.Mutex
	counts   map[string]int64
	received int64
}

// NewCounted wraps h.
func NewCounted(h Host) *Counted { return &Counted{Host: h, counts: map[string]int64{}} }

func (c *Counted) add(op string) {
	c.mu.Lock()
	c.counts[op]++
	c.mu.Unlock()
}

// Counts returns a copy of the counts by operation.
func (c *Counted) Counts() map[string]int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make(map[string]int64, len(c.counts))
	for k, v := range c.counts {
		out[k] = v
	}
	return out
}

// Received is how many bytes came back: commands' stdout and stderr, and
// the data of file reads.
func (c *Counted) Received() int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.received
}

func (c *Counted) got(n int) {
	c.mu.Lock()
	c.received += int64(n)
	c.mu.Unlock()
}

// Ops returns the operation names counted so far, sorted.
func (c *Counted) Ops() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	ops := make([]string, 0, len(c.counts))
	for k := range c.counts {
		ops = append(ops, k)
	}
	sort.Strings(ops)
	return ops
}

// Run counts "run <program>": the command's Label, else the base name of
// argv[0], or of the program an "env VAR=value …" prefix runs.
func (c *Counted) Run(ctx context.Context, cmd Command) (*Result, error) {
	name := cmd.Label
	if name == "" {
		name = Program(cmd.Argv)
	}
	c.add("run " + name)
	res, err := c.Host.Run(ctx, cmd)
	if res != nil {
		c.got(len(res.Stdout) + len(res.Stderr))
	}
	return res, err
}

// Program is the base name of the program argv runs, looking through an
// "env NAME=value …" prefix; "?" for an empty argv.
func Program(argv []string) string {
	for len(argv) > 0 && path.Base(argv[0]) == "env" { // env A=1 env B=2 prog: prog
		rest := argv[1:]
		for len(rest) > 0 && strings.Contains(rest[0], "=") && !strings.HasPrefix(rest[0], "-") {
			rest = rest[1:]
		}
		if len(rest) == 0 || strings.HasPrefix(rest[0], "-") {
			break
		}
		argv = rest
	}
	if len(argv) == 0 {
		return "?"
	}
	return path.Base(argv[0])
}

func (c *Counted) MkdirAll(ctx context.Context, dir string, mode fs.FileMode) error {
	c.add("mkdir")
	return c.Host.MkdirAll(ctx, dir, mode)
}

func (c *Counted) WriteFile(ctx context.Context, p string, data []byte, mode fs.FileMode) error {
	c.add("write")
	return c.Host.WriteFile(ctx, p, data, mode)
}

func (c *Counted) ReadFile(ctx context.Context, p string) ([]byte, error) {
	c.add("read")
	b, err := c.Host.ReadFile(ctx, p)
	c.got(len(b))
	return b, err
}

func (c *Counted) ReadTail(ctx context.Context, p string, n int64) ([]byte, error) {
	c.add("read_tail")
	b, err := c.Host.ReadTail(ctx, p, n)
	c.got(len(b))
	return b, err
}

func (c *Counted) Stat(ctx context.Context, p string) (fs.FileInfo, error) {
	c.add("stat")
	return c.Host.Stat(ctx, p)
}

func (c *Counted) Lstat(ctx context.Context, p string) (fs.FileInfo, error) {
	c.add("lstat")
	return c.Host.Lstat(ctx, p)
}

func (c *Counted) Remove(ctx context.Context, p string) error {
	c.add("remove")
	return c.Host.Remove(ctx, p)
}
