package cli

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"path"
	"strings"
	"time"

	ucli "github.com/urfave/cli/v2"

	"github.com/nemorl/nemorl-slurm/episode"
	"github.com/nemorl/nemorl-slurm/ledger"
	"github.com/nemorl/nemorl-slurm/remote"
)

func cleanCommand(e *env) *ucli.Command {
	return &ucli.Command{
		Name:      "clean",
		Usage:     "remove finished episodes' directories from the cluster (weights, logs, transcripts); the ledger keeps their outcomes",
		ArgsUsage: "EPISODE…",
		Flags:     withGlobals(),
		Action:    e.clean,
	}
}

// clean removes WORKDIR/EPISODE of final episodes, after checking that the
// directory is the episode's (its manifest names it). An unfinished episode
// is refused: its jobs may still write there.
func (e *env) clean(c *ucli.Context) error {
	if c.NArg() == 0 {
		return usageErr("clean takes one or more episode ids")
	}
	lg, entries, err := ledgerEntries(c.Args().Slice(), nil)
	if err != nil {
		return err
	}
	for _, en := range entries {
		if !en.Final() {
			return &Error{Code: ExitUsage, Err: fmt.Errorf("episode %s is not finished; nothing was removed", en.Episode),
				Hint: "wait for it (nemorl-slurm watch " + en.Episode + ") or cancel it first"}
		}
	}
	cleaned := []string{}
	already := []string{}
	var todo []*ledger.Entry
	for _, en := range entries {
		if !en.Cleaned.IsZero() {
			already = append(already, en.Episode)
			e.logf("%s: already cleaned on %s; nothing to remove", en.Episode, en.Cleaned.Local().Format("2006-01-02 15:04"))
			continue
		}
		todo = append(todo, en)
	}
	var sessions []*session
	skipped := map[string]error{}
	if len(todo) > 0 {
		if sessions, skipped, err = e.sessionsFor(c.Context, c, lg, todo); err != nil {
			return err
		}
	}
	var failed []string
	for ep, err := range skipped {
		failed = append(failed, ep+": "+err.Error())
	}
	for _, s := range sessions {
		arrays := map[string]string{} // the cleaned episodes' job arrays: name → directory
		for _, ep := range s.episodes {
			en, err := lg.Load(ep)
			if err == nil {
				if err = removeEpisodeDir(c, s, en); err == nil {
					en.Cleaned = time.Now().UTC()
					err = lg.Save(en)
				}
			}
			if err != nil {
				failed = append(failed, err.Error())
				continue
			}
			cleaned = append(cleaned, ep)
			e.logf("%s: removed %s on %s", ep, en.Dir, s.Host.Name())
			for name, script := range en.ArrayScripts() {
				arrays[name] = path.Dir(script)
			}
		}
		if err := removeArrayDirs(c, s, lg, arrays); err != nil {
			failed = append(failed, err.Error())
		}
		s.close()
	}
	if globalBool(c, "json") {
		if err := e.writeJSON(map[string]any{"cleaned": cleaned, "already_cleaned": already, "errors": failed}); err != nil {
			return err
		}
	} else {
		for _, ep := range cleaned {
			fmt.Fprintln(e.stdout, ep)
		}
	}
	if len(failed) > 0 {
		return withCode(ExitInfra, errors.New("clean: "+strings.Join(failed, "; ")), "")
	}
	return nil
}

func removeEpisodeDir(c *ucli.Context, s *session, en *ledger.Entry) error {
	want := path.Join(s.Config.Cluster.Workdir, en.Episode)
	if en.Dir != want {
		return fmt.Errorf("%s: the ledger names %s, the config's workdir gives %s; remove it by hand", en.Episode, en.Dir, want)
	}
	b, err := s.Host.ReadFile(c.Context, path.Join(en.Dir, episode.ManifestFile))
	if err != nil {
		return fmt.Errorf("%s: %s: %w", en.Episode, path.Join(en.Dir, episode.ManifestFile), err)
	}
	var m episode.Manifest
	if err := json.Unmarshal(b, &m); err != nil || m.Episode != en.Episode {
		return fmt.Errorf("%s: %s does not name this episode; nothing removed", en.Episode, path.Join(en.Dir, episode.ManifestFile))
	}
	if _, err := s.Host.Run(c.Context, remote.Command{Argv: []string{"rm", "-rf", "--one-file-system", "--", en.Dir}, Idempotent: true}); err != nil {
		return fmt.Errorf("%s: %w", en.Episode, err)
	}
	return nil
}

// removeArrayDirs removes, from s's cluster, the directory of each job
// array in dirs (name → WORKDIR/.arrays/ID: its script, Slurm's own output
// of its tasks: those the episodes just cleaned ran a stage in)
// once every episode of the ledger in that array is cleaned: an array's
// script stays while any of its episodes' directories does.
func removeArrayDirs(c *ucli.Context, s *session, lg *ledger.Ledger, dirs map[string]string) error {
	if len(dirs) == 0 {
		return nil
	}
	all, err := lg.List()
	if err != nil {
		return err
	}
	var errs []error
	for name, dir := range arrayDirsDone(dirs, all) {
		if path.Dir(dir) != path.Join(s.Config.Cluster.Workdir, episode.ArraysDir) {
			errs = append(errs, fmt.Errorf("array %s: the ledger names %s, not a directory under %s; remove it by hand", name, dir, path.Join(s.Config.Cluster.Workdir, episode.ArraysDir)))
			continue
		}
		if _, err := s.Host.Run(c.Context, remote.Command{Argv: []string{"rm", "-rf", "--one-file-system", "--", dir}, Idempotent: true}); err != nil {
			errs = append(errs, fmt.Errorf("array %s: %w", name, err))
			continue
		}
	}
	return errors.Join(errs...)
}

// arrayDirsDone is dirs (array name → its directory) less the arrays that
// an episode of all not cleaned yet ran a task of, in its current jobs or
// a retired attempt: those whose directories can go.
func arrayDirsDone(dirs map[string]string, all []*ledger.Entry) map[string]string {
	out := maps.Clone(dirs)
	for _, en := range all {
		if !en.Cleaned.IsZero() {
			continue
		}
		for name := range en.ArrayScripts() {
			delete(out, name)
		}
	}
	return out
}
