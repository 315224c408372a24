package cli

import (
	"errors"
	"fmt"

	ucli "github.com/urfave/cli/v2"

	"github.com/nemorl/nemorl-slurm/episode"
)

func submitCommand(e *env) *ucli.Command {
	return &ucli.Command{
		Name:      "submit",
		Usage:     "stage an episode on the cluster and submit its author job; watch, run or resume carry it on",
		ArgsUsage: " ",
		Flags: withGlobals(
			&ucli.StringFlag{Name: "episode", Usage: "episode id (default: a new one)"},
			&ucli.StringFlag{Name: "prompt-file", Usage: "the author's task prompt (default: the built-in one)"},
		),
		Action: e.submit,
	}
}

func (e *env) submit(c *ucli.Context) error {
	if c.NArg() > 0 {
		return usageErr("submit takes no arguments, got %q", c.Args().First())
	}
	s, en, err := e.submitEpisode(c)
	if err != nil {
		return err
	}
	defer s.close()
	jobs := map[string]string{}
	for _, st := range []string{episode.Author, episode.Train, episode.Eval} {
		if id := en.JobID(st); id != "" {
			jobs[st] = id
		}
	}
	if globalBool(c, "json") {
		return e.writeJSON(map[string]any{"episode": en.Episode, "host": en.Host, "dir": en.Dir, "isolation": en.Isolation, "jobs": jobs})
	}
	fmt.Fprintf(e.stdout, "%s author=%s\n", en.Episode, jobs[episode.Author])
	e.logf("train and eval are submitted once the author's patch is verified: run nemorl-slurm watch %s", en.Episode)
	return nil
}

// submitEpisode loads the config, connects, and submits a new episode. The
// returned session stays open; its episode lock is released.
func (e *env) submitEpisode(c *ucli.Context) (*session, *episode.Entry, error) {
	path := configPath(c)
	ledger, err := openLedger()
	if err != nil {
		return nil, nil, err
	}
	s, err := e.connect(c.Context, c, ledger, path, true)
	if err != nil {
		return nil, nil, err
	}
	prompt, err := readPrompt(c, s.Config)
	if err != nil {
		s.close()
		return nil, nil, err
	}
	id := c.String("episode")
	en, lock, err := s.Submit(c.Context, id, prompt)
	if err != nil {
		s.close()
		if en == nil {
			var pe *episode.PreflightError
			switch {
			case errors.As(err, &pe):
				return nil, nil, &Error{Code: ExitUsage, Err: fmt.Errorf("%s: %w", path, err), Hint: "fix the config: nothing was staged or submitted"}
			case errors.Is(err, episode.ErrEpisodeExists) || errors.Is(err, episode.ErrBadEpisodeID):
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
