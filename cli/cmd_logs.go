package cli

import (
	"bytes"
	"context"
	_ "embed"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/signal"
	"path"
	"slices"
	"strconv"
	"syscall"
	"time"

	ucli "github.com/urfave/cli/v2"

	"github.com/nemorl/nemorl-slurm/episode"
	"github.com/nemorl/nemorl-slurm/ledger"
	"github.com/nemorl/nemorl-slurm/remote"
	"github.com/nemorl/nemorl-slurm/stages"
)

func logsCommand(e *env) *ucli.Command {
	return &ucli.Command{
		Name: "logs",
		Description: `Examples:
   nemorl-slurm logs ep-20261129T214501Z-3f9a1c2b
   nemorl-slurm logs -f ep-20261129T214501Z-3f9a1c2b          # follow the current stage
   nemorl-slurm logs --stage author --tail 200 ep-20261129T214501Z-3f9a1c2b`,
		Usage:     "print the tail of a stage's output file (default: the current stage: the first whose job has not completed)",
		ArgsUsage: "EPISODE",
		Flags: withGlobals(
			&ucli.StringFlag{Name: "stage", Usage: "author, train or eval"},
			&ucli.IntFlag{Name: "tail", Value: 50, Usage: "lines to print"},
			&ucli.BoolFlag{Name: "follow", Aliases: []string{"f"}, Usage: "keep printing what the stage writes until its job ends (Ctrl-C stops)"},
		),
		Action: e.logs,
	}
}

func (e *env) logs(c *ucli.Context) error {
	if c.NArg() != 1 {
		return usageErr("logs takes one episode id")
	}
	n := c.Int("tail")
	if n <= 0 {
		return usageErr("--tail %d: want a positive number of lines", n)
	}
	var stage stages.Stage
	if name := c.String("stage"); name != "" {
		st, ok := stages.Parse(name)
		if !ok {
			return usageErr("--stage %q: want author, train or eval", name)
		}
		stage = st
	}
	if c.Bool("follow") && globalBool(c, "json") {
		return usageErr("--follow streams lines; it has no --json form")
	}
	lg, entries, err := ledgerEntries(c.Args().Slice(), nil)
	if err != nil {
		return err
	}
	en := entries[0]
	if !en.Cleaned.IsZero() {
		return &Error{Code: ExitUsage, Err: fmt.Errorf("episode %s was cleaned on %s: its logs went with its directory", en.Episode, en.Cleaned.Local().Format("2006-01-02 15:04")),
			Hint: "nemorl-slurm result " + en.Episode + " still shows its outcome"}
	}
	if en.Jobs[stages.Author] == nil {
		return usageErr("episode %s has no job yet", en.Episode)
	}
	sessions, _, err := e.sessionsFor(c.Context, c, lg, entries)
	if err != nil {
		return err
	}
	s := sessions[0]
	defer s.close()
	if stage == "" {
		if stage, err = currentStage(c.Context, s, en); err != nil {
			return withCode(ExitInfra, err, "name the stage with --stage")
		}
	}
	p := path.Join(en.Dir, stages.Output(stage))
	if c.Bool("follow") {
		return e.follow(c, s, en, stage, p, n)
	}
	// One command that reads only a regular file (SFTP would block on a
	// FIFO planted in the output's place).
	tail, _, err := readFrom(c.Context, s, p, -1, min(int64(n)*4096, episode.TailBytes))
	if errors.Is(err, fs.ErrNotExist) {
		return &Error{Code: ExitUsage, Err: fmt.Errorf("%s: the %s stage has no output yet (%s)", en.Episode, stage, p),
			Hint: "its job has not started: nemorl-slurm status " + en.Episode}
	}
	if err != nil {
		return withCode(ExitInfra, fmt.Errorf("%s: %s output %s on %s: %w", en.Episode, stage, p, s.Host.Name(), err), "")
	}
	lines := lastLines(tail, n)
	if globalBool(c, "json") {
		out := make([]string, 0, len(lines))
		for _, l := range lines {
			out = append(out, string(bytes.TrimSuffix(l, []byte("\n"))))
		}
		return e.writeJSON(map[string]any{"episode": en.Episode, "stage": stage, "path": p, "lines": out})
	}
	for _, l := range lines {
		_, _ = e.stdout.Write(l)
	}
	return nil
}

// currentStage is the episode's stage now: the first submitted whose job
// has not completed (one sacct), or for a finished episode the stage that
// decided its outcome.
func currentStage(ctx context.Context, s *session, en *ledger.Entry) (stages.Stage, error) {
	if o := en.Outcome; o != nil {
		if o.FailureStage != "" && en.Jobs[o.FailureStage] != nil {
			return o.FailureStage, nil
		}
		last := stages.Author
		for _, st := range stages.All {
			if en.Jobs[st] != nil {
				last = st
			}
		}
		return last, nil
	}
	var row episode.Row
	if _, err := s.Watch(ctx, []string{en.Episode}, episode.WatchOptions{Once: true, MaxPollFailures: 1,
		Observe: func(r []episode.Row) { row = r[0] }}); err != nil {
		return "", fmt.Errorf("%s: which stage runs: %w", en.Episode, err)
	}
	if !slices.Contains(stages.All, row.Stage) {
		return stages.Author, nil
	}
	return row.Stage, nil
}

// follow prints the last n lines of the stage's output, then what it
// writes, until the stage's job has ended and its output is read to the
// end (or Ctrl-C): one command per second reads the new bytes.
func (e *env) follow(c *ucli.Context, s *session, en *ledger.Entry, stage stages.Stage, p string, n int) error {
	ctx, stop := signal.NotifyContext(c.Context, os.Interrupt, syscall.SIGTERM)
	defer stop()
	id := en.JobID(stage)
	var off int64 = -1 // -1: the first read, the last n lines
	ended := false
	for {
		chunk, size, err := readFrom(ctx, s, p, off, int64(n)*4096)
		if ctx.Err() != nil {
			return nil
		}
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			return withCode(ExitInfra, fmt.Errorf("%s: %s output %s on %s: %w", en.Episode, stage, p, s.Host.Name(), err), "")
		}
		if off < 0 && err == nil {
			chunk = bytes.Join(lastLines(chunk, n), nil)
		}
		if err == nil {
			_, _ = e.stdout.Write(chunk)
			off = size
		}
		if ended {
			return nil
		}
		if id == "" {
			if id = en.JobID(stage); id == "" {
				if cur, lerr := s.Ledger.Load(en.Episode); lerr == nil {
					en = cur
					id = en.JobID(stage)
				}
			}
		}
		if id != "" {
			infos, qerr := s.Slurm.Query(ctx, []string{id})
			if qerr == nil && infos[id].State.Terminal() {
				ended = true // one more read for the last bytes
			}
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(time.Second):
		}
	}
}

// lastLines is the last n lines of b (a final line without a newline
// counts).
func lastLines(b []byte, n int) [][]byte {
	lines := bytes.SplitAfter(b, []byte("\n"))
	if len(lines) > 0 && len(lines[len(lines)-1]) == 0 {
		lines = lines[:len(lines)-1]
	}
	return lines[max(0, len(lines)-n):]
}

// followScript prints the size of a regular file and its bytes from
// offset $2 (or, with $2 = -1, its last $3 bytes). As the collector does,
// it opens the file read-write (a FIFO swapped in opens without blocking)
// and reads it only when the path, not followed, and the open file are the
// same regular file: a FIFO, a device or a symlink is never read.
//
// It is scripts/follow.sh.
//
//go:embed scripts/follow.sh
var followScript string

// readFrom reads p from off to its current end (off < 0: its last n
// bytes) in one command, and returns its size.
func readFrom(ctx context.Context, s *session, p string, off, n int64) ([]byte, int64, error) {
	res, err := s.Host.Run(ctx, remote.Command{Argv: []string{"sh", "-c", followScript, "sh", p, strconv.FormatInt(off, 10), strconv.FormatInt(n, 10)},
		Idempotent: true, Label: "logs"})
	if err != nil {
		if res != nil {
			return nil, 0, fmt.Errorf("%w: %s", err, remote.TrimStderr(res.Stderr))
		}
		return nil, 0, err
	}
	head, body, _ := bytes.Cut(res.Stdout, []byte("\n"))
	if string(head) == "absent" {
		return nil, 0, fs.ErrNotExist
	}
	size, err := strconv.ParseInt(string(head), 10, 64)
	if err != nil {
		return nil, 0, fmt.Errorf("unexpected output %.40q", head)
	}
	return body, size, nil
}
