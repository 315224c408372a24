package cli

import (
	"context"
	"errors"
	"os"
	"os/signal"
	"path/filepath"
	"sync"
	"syscall"

	ucli "github.com/urfave/cli/v2"

	"github.com/nemorl/nemorl-slurm/episode"
	"github.com/nemorl/nemorl-slurm/ledger"
	"github.com/nemorl/nemorl-slurm/rules"
)

func watchCommand(e *env) *ucli.Command {
	return &ucli.Command{
		Name:      "watch",
		Usage:     "follow the episodes (default: every unfinished one) until each has its outcome, carrying them on",
		ArgsUsage: "[EPISODE…]",
		Flags:     withGlobals(),
		Action:    func(c *ucli.Context) error { return e.watchVerb(c, c.Args().Slice()) },
	}
}

func resumeCommand(e *env) *ucli.Command {
	return &ucli.Command{
		Name:      "resume",
		Usage:     "re-attach to every unfinished episode of the ledger after a crash (adopting jobs already submitted) and see each to its outcome",
		ArgsUsage: " ",
		Flags:     withGlobals(),
		Action: func(c *ucli.Context) error {
			if c.NArg() > 0 {
				return usageErr("resume takes no arguments; to follow some episodes, use watch EPISODE…")
			}
			return e.watchVerb(c, nil)
		},
	}
}

// keepUnfinished selects the unfinished episodes, of the explicit config
// only when one is named.
func keepUnfinished(c *ucli.Context) func(*ledger.Entry) bool {
	explicit := explicitConfig(c)
	abs := ""
	if explicit != "" {
		abs, _ = filepath.Abs(explicit)
	}
	return func(en *ledger.Entry) bool {
		return !en.Final() && (abs == "" || en.ConfigPath == abs)
	}
}

// watchVerb is watch and resume: follow the episodes to their outcomes,
// advancing those no other process holds. SIGINT stops watching; the jobs
// keep running.
func (e *env) watchVerb(c *ucli.Context, names []string) error {
	lg, entries, err := ledgerEntries(names, keepUnfinished(c))
	if err != nil {
		return err
	}
	if len(entries) == 0 {
		if globalBool(c, "json") {
			return e.writeJSON(map[string]any{"episodes": []any{}})
		}
		e.logf("no unfinished episodes in %s", lg.Dir)
		return nil
	}
	ctx, stop := signal.NotifyContext(c.Context, os.Interrupt, syscall.SIGTERM)
	defer stop()
	sessions, skipped, err := e.sessionsFor(ctx, c, lg, entries)
	if err != nil {
		return err
	}
	final, err := e.watchSessions(ctx, sessions)
	if ctx.Err() != nil && c.Context.Err() == nil {
		e.logf("stopped watching; the jobs keep running: nemorl-slurm resume picks them up")
	}
	// The episodes whose config could not be opened stay unfinished.
	for _, en := range entries {
		if _, ok := skipped[en.Episode]; ok {
			final = append(final, en)
		}
	}
	return e.reportEntries(c, final, errors.Join(err, skippedError(skipped)))
}

// watchSessions watches every session's episodes at once and returns the
// entries as last seen.
func (e *env) watchSessions(ctx context.Context, sessions []*session) ([]*ledger.Entry, error) {
	p := newProgress(e.stderr)
	var (
		mu   sync.Mutex
		wg   sync.WaitGroup
		out  []*ledger.Entry
		errs []error
		rows = make([][]episode.Row, len(sessions))
	)
	for i, s := range sessions {
		// The driver's log lines go above the live table.
		s.setup.Logf = p.logf
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer s.close()
			var names userNames
			got, err := s.Watch(ctx, s.episodes, episode.WatchOptions{Act: true, Observe: func(r []episode.Row) {
				names.rename(ctx, s.setup.UserNames, r)
				mu.Lock()
				defer mu.Unlock()
				rows[i] = r
				var all []episode.Row
				for _, rs := range rows {
					all = append(all, rs...)
				}
				p.update(all)
			}})
			mu.Lock()
			defer mu.Unlock()
			for _, ep := range s.episodes {
				if en := got[ep]; en != nil {
					out = append(out, en)
				}
			}
			if err != nil {
				errs = append(errs, err)
			}
		}()
	}
	wg.Wait()
	return out, errors.Join(errs...)
}

// reportEntries prints the episodes' outcomes and returns the worst exit
// code among them; unfinished episodes count as 3.
func (e *env) reportEntries(c *ucli.Context, entries []*ledger.Entry, werr error) error {
	if globalBool(c, "json") {
		type item struct {
			Episode string         `json:"episode"`
			Final   bool           `json:"final"`
			Outcome *rules.Outcome `json:"outcome,omitempty"`
		}
		items := []item{}
		for _, en := range entries {
			items = append(items, item{Episode: en.Episode, Final: en.Final(), Outcome: en.Outcome})
		}
		doc := map[string]any{"episodes": items}
		if werr != nil {
			doc["error"] = werr.Error()
		}
		if err := e.writeJSON(doc); err != nil {
			return err
		}
	} else {
		for _, en := range entries {
			if en.Final() {
				e.printOutcome(en.Outcome)
			} else {
				e.logf("%s: not finished", en.Episode)
			}
		}
	}
	if werr != nil && !errors.Is(werr, context.Canceled) {
		return withCode(ExitInfra, werr, "the jobs keep running on the cluster: nemorl-slurm resume re-attaches")
	}
	if code := worstExit(entries); code != ExitOK {
		return ucli.Exit("", code)
	}
	return nil
}
