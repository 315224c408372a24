package ledger

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
)

// Discard removes the entry and prompt of an episode that never reached
// the cluster (its staging command refused before writing anything: a
// preflight failure, its directory already there). Only Submit calls it,
// holding the episode's lock; an entry with a job id is never discarded.
func (l *Ledger) Discard(ep string) error {
	e, err := l.Load(ep)
	if err != nil {
		return err
	}
	for stage, sub := range e.Jobs {
		if sub.JobID != "" {
			return fmt.Errorf("ledger: episode %s has a %s job (%s): not discarded", ep, stage, sub.JobID)
		}
	}
	for _, p := range []string{l.path(ep), l.PromptPath(ep)} {
		if err := os.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("ledger: discard %s: %w", ep, err)
		}
	}
	return nil
}
