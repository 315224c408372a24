package cli

import (
	"errors"
	"fmt"

	ucli "github.com/urfave/cli/v2"

	"github.com/nemorl/nemorl-slurm/episode"
	"github.com/nemorl/nemorl-slurm/ledger"
	"github.com/nemorl/nemorl-slurm/stages"
)

func submitCommand(e *env) *ucli.Command {
	return &ucli.Command{
		Name: "submit",
		Description: `Examples:
   nemorl-slurm submit --prompt-file task.txt --label sweep=a
   nemorl-slurm submit --count 100 --json > batch.json
   nemorl-slurm watch        # carries every unfinished episode on`,
		Usage:     "stage an episode on the cluster and submit its author job; watch, run or resume carry it on",
		ArgsUsage: " ",
		Flags: withGlobals(
			&ucli.StringFlag{Name: "episode", Usage: "episode id (default: a new one)"},
			&ucli.StringFlag{Name: "prompt-file", Usage: "the author's task prompt (default: the built-in one)"},
			&ucli.IntFlag{Name: "count", Value: 1, Usage: "submit `N` episodes of the same prompt over one connection, each with its own ledger entry"},
			labelFlag("attach a `KEY=VALUE` label to the episodes (repeatable); list shows and filters them"),
			setFlag(),
			clusterFlag(),
		),
		Action: e.submit,
	}
}

func (e *env) submit(c *ucli.Context) error {
	if c.NArg() > 0 {
		return usageErr("submit takes no arguments, got %q", c.Args().First())
	}
	switch n := c.Int("count"); {
	case n < 1 || n > MaxSubmitCount:
		return usageErr("--count: want 1..%d, got %d", MaxSubmitCount, n)
	case n > 1 && c.String("episode") != "":
		return usageErr("--episode names one episode; --count %d makes new ids", n)
	case n > 1:
		return e.submitMany(c, n)
	}
	s, en, err := e.submitEpisode(c, false)
	if err != nil {
		return err
	}
	defer s.close()
	if globalBool(c, "json") {
		return e.writeJSON(submittedJSON(en))
	}
	fmt.Fprintf(e.stdout, "%s author=%s\n", en.Episode, en.JobID(stages.Author))
	e.logf("train and eval are submitted once the author's patch is verified: run nemorl-slurm watch %s", en.Episode)
	return nil
}

// MaxSubmitCount bounds submit --count.
const MaxSubmitCount = 10000

func submittedJSON(en *ledger.Entry) map[string]any {
	jobs := map[stages.Stage]string{}
	for _, st := range stages.All {
		if id := en.JobID(st); id != "" {
			jobs[st] = id
		}
	}
	doc := map[string]any{"episode": en.Episode, "host": en.Host, "dir": en.Dir, "isolation": en.Isolation, "jobs": jobs}
	if len(en.Labels) > 0 {
		doc["labels"] = en.Labels
	}
	return doc
}

// submitMany submits n episodes of one prompt over one connection, up to
// episode.MaxBatch per command (episode.Driver.SubmitBatch). Each has its
// own ledger entry and crash safety; a preflight refusal refuses them all,
// any other failure is reported and the others go on.
func (e *env) submitMany(c *ucli.Context, n int) error {
	path := configPath(c)
	lg, err := openLedger()
	if err != nil {
		return err
	}
	labels, err := parseLabels(c)
	if err != nil {
		return err
	}
	s, err := e.connect(c.Context, c, lg, path, c.String("cluster"), true, c.StringSlice("set"))
	if err != nil {
		return err
	}
	defer s.close()
	s.setup.Labels = labels
	prompt, err := readPrompt(c, s.Config)
	if err != nil {
		return err
	}
	specs := make([]episode.Spec, n)
	for i := range specs {
		specs[i] = episode.Spec{Prompt: prompt}
	}
	results := s.Submit(c.Context, specs)
	for _, r := range results {
		r.Lock.Unlock()
		var pe *episode.PreflightError
		if errors.As(r.Err, &pe) {
			return &Error{Code: ExitUsage, Err: fmt.Errorf("%s: %w", path, r.Err), Hint: "fix the config: nothing was staged or submitted"}
		}
	}
	var done []map[string]any
	var failed []map[string]any
	var firstErr error
	for i, r := range results {
		switch {
		case r.Err == nil:
			done = append(done, submittedJSON(r.Entry))
			if !globalBool(c, "json") {
				fmt.Fprintf(e.stdout, "%s author=%s\n", r.Entry.Episode, r.Entry.JobID(stages.Author))
			}
		default:
			f := map[string]any{"index": i, "error": r.Err.Error()}
			if r.Entry != nil {
				f["episode"] = r.Entry.Episode
				f["hint"] = "nothing was lost: nemorl-slurm resume " + r.Entry.Episode + " carries it on"
			}
			failed = append(failed, f)
			e.logf("submit %d of %d: %v", i+1, n, r.Err)
			if firstErr == nil {
				firstErr = r.Err
			}
		}
	}
	if globalBool(c, "json") {
		if err := e.writeJSON(map[string]any{"episodes": done, "failed": failed}); err != nil {
			return err
		}
	}
	e.logf("submitted %d of %d episodes over one connection to %s; run nemorl-slurm watch to carry them on", len(done), n, s.Host.Name())
	if firstErr != nil {
		return &Error{Code: ExitInfra, Err: fmt.Errorf("%d of %d episodes not submitted; first: %w", n-len(done), n, firstErr)}
	}
	return nil
}

// submitEpisode loads the config, connects, and submits a new episode. The
// returned session stays open; its episode lock is released.
//
// carryOn (run): an episode in the ledger whose author sbatch failed is
// returned without an error, for the watch to carry on.
func (e *env) submitEpisode(c *ucli.Context, carryOn bool) (*session, *ledger.Entry, error) {
	path := configPath(c)
	lg, err := openLedger()
	if err != nil {
		return nil, nil, err
	}
	labels, err := parseLabels(c)
	if err != nil {
		return nil, nil, err
	}
	s, err := e.connect(c.Context, c, lg, path, c.String("cluster"), true, c.StringSlice("set"))
	if err != nil {
		return nil, nil, err
	}
	s.setup.Labels = labels
	prompt, err := readPrompt(c, s.Config)
	if err != nil {
		s.close()
		return nil, nil, err
	}
	id := c.String("episode")
	r := s.Submit(c.Context, []episode.Spec{{ID: id, Prompt: prompt}})[0]
	en, lock, err := r.Entry, r.Lock, r.Err
	if err != nil && en != nil && carryOn {
		// In the ledger, its author not submitted (slurmctld away, the
		// connection lost): the watch that follows submits it again at
		// every poll, as it does train and eval, and ends the episode if
		// sbatch refuses it for good.
		lock.Unlock()
		e.logf("%s: the author's sbatch failed (%v); trying again at every poll", en.Episode, err)
		s.episodes = []string{en.Episode}
		return s, en, nil
	}
	if err != nil {
		s.close()
		if en == nil {
			var pe *episode.PreflightError
			switch {
			case errors.As(err, &pe):
				return nil, nil, &Error{Code: ExitUsage, Err: fmt.Errorf("%s: %w", path, err), Hint: "fix the config: nothing was staged or submitted"}
			case errors.Is(err, ledger.ErrEpisodeExists) || errors.Is(err, ledger.ErrBadEpisodeID):
				return nil, nil, withCode(ExitUsage, err, "pick another --episode, or none for a new id")
			}
			return nil, nil, withCode(ExitInfra, err, "")
		}
		return nil, nil, &Error{Code: ExitInfra, Err: err, Hint: "nothing was lost: nemorl-slurm resume retries episode " + en.Episode}
	}
	lock.Unlock()
	s.episodes = []string{en.Episode}
	return s, en, nil
}
