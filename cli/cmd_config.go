package cli

import (
	"errors"
	"fmt"

	ucli "github.com/urfave/cli/v2"

	"github.com/nemorl/nemorl-slurm/configs"
)

func configCommand(e *env) *ucli.Command {
	return &ucli.Command{
		Name:  "config",
		Usage: "inspect the configuration",
		Subcommands: []*ucli.Command{{
			Name:   "check",
			Usage:  "load and validate the config; print it with defaults filled in and secrets redacted",
			Flags:  withGlobals(),
			Action: e.configCheck,
		}},
	}
}

// problemJSON is one config problem in --json output.
type problemJSON struct {
	File    string `json:"file"`
	Line    int    `json:"line,omitempty"`
	Key     string `json:"key,omitempty"`
	Message string `json:"message"`
}

func (e *env) configCheck(c *ucli.Context) error {
	asJSON := globalBool(c, "json")
	cfg, err := loadConfig(c)
	if err != nil {
		var ce *configs.Error
		if asJSON && errors.As(err, &ce) {
			probs := make([]problemJSON, len(ce.Problems))
			for i, p := range ce.Problems {
				probs[i] = problemJSON{File: ce.File, Line: p.Line, Key: p.Path, Message: p.Msg}
			}
			if werr := e.writeJSON(map[string]any{"ok": false, "problems": probs}); werr != nil {
				return werr
			}
		}
		return err
	}
	warnings := configs.Warnings(cfg)
	if asJSON {
		js, err := cfg.EffectiveJSON()
		if err != nil {
			return err
		}
		ws := make([]problemJSON, 0, len(warnings))
		for _, w := range warnings {
			ws = append(ws, problemJSON{File: cfg.Source, Line: w.Line, Key: w.Path, Message: w.Msg})
		}
		return e.writeJSON(map[string]any{"ok": true, "file": cfg.Source, "warnings": ws, "config": rawJSON(js)})
	}
	y, err := cfg.EffectiveYAML()
	if err != nil {
		return err
	}
	for _, w := range warnings {
		e.logf("warning: %s:%d: %s: %s", cfg.Source, w.Line, w.Path, w.Msg)
	}
	fmt.Fprintf(e.stdout, "# %s: ok (defaults filled in, secrets redacted)\n%s", cfg.Source, y)
	return nil
}

type rawJSON []byte

func (r rawJSON) MarshalJSON() ([]byte, error) { return r, nil }
