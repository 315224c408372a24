package cli

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	ucli "github.com/urfave/cli/v2"

	"github.com/nemorl/nemorl-slurm/configs"
	"github.com/nemorl/nemorl-slurm/stages"
	"github.com/nemorl/nemorl-slurm/templates"
)

func renderCommand(e *env) *ucli.Command {
	return &ucli.Command{
		Name:      "render",
		Usage:     "write the three sbatch scripts and the bundle tree to a local directory; contacts no cluster",
		ArgsUsage: " ",
		Flags: withGlobals(
			&ucli.StringFlag{Name: "out", Usage: "directory to write (must not exist or be empty)", Required: true},
			&ucli.StringFlag{Name: "episode", Usage: "episode id (default: a new one)"},
			&ucli.StringFlag{Name: "prompt-file", Usage: "the author's task prompt (default: the built-in one)"},
		),
		Action: e.render,
	}
}

// readPrompt reads --prompt-file, or renders the default prompt.
func readPrompt(c *ucli.Context, cfg *configs.Config) ([]byte, error) {
	if p := c.String("prompt-file"); p != "" {
		b, err := os.ReadFile(p)
		if err != nil {
			return nil, withCode(ExitUsage, fmt.Errorf("--prompt-file: %w", err), "")
		}
		if len(b) == 0 {
			return nil, usageErr("--prompt-file %s is empty", p)
		}
		return b, nil
	}
	return templates.DefaultPrompt(cfg)
}

func (e *env) render(c *ucli.Context) error {
	if c.NArg() > 0 {
		return usageErr("render takes no arguments, got %q", c.Args().First())
	}
	cfg, err := loadConfig(c, configs.LoadOptions{SecretsOptional: true})
	if err != nil {
		return err
	}
	prompt, err := readPrompt(c, cfg)
	if err != nil {
		return err
	}
	id := c.String("episode")
	if id == "" {
		id = stages.NewID(time.Now())
	}
	tree, err := templates.Render(cfg, templates.Input{Episode: id, Prompt: prompt, Version: Version})
	if err != nil {
		return withCode(ExitUsage, err, "")
	}
	out := c.String("out")
	if err := ensureEmptyDir(out); err != nil {
		return err
	}
	files, err := tree.Write(out)
	if err != nil {
		return fmt.Errorf("render: %w", err)
	}
	if globalBool(c, "json") {
		return e.writeJSON(map[string]any{
			"episode": tree.Episode, "out": out, "cluster_dir": tree.Dir,
			"isolation": tree.Isolation, "files": files,
		})
	}
	e.logf("rendered episode %s to %s (on the cluster: %s; isolation: %s)", tree.Episode, out, tree.Dir, tree.Isolation)
	for _, f := range files {
		fmt.Fprintln(e.stdout, filepath.Join(out, filepath.FromSlash(f)))
	}
	e.logf("secrets.env (the policy API key) is written only when the episode is submitted")
	return nil
}

// ensureEmptyDir refuses to write over anything: it loses nothing.
func ensureEmptyDir(dir string) error {
	entries, err := os.ReadDir(dir)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return nil
	case err != nil:
		return withCode(ExitUsage, fmt.Errorf("--out %s: %w", dir, err), "")
	case len(entries) > 0:
		return &Error{Code: ExitUsage, Err: fmt.Errorf("--out %s is not empty", dir), Hint: "name a new directory; render never overwrites"}
	}
	return nil
}
