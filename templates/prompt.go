package templates

import (
	"bytes"
	_ "embed"
	"fmt"
	"text/template"

	"github.com/nemorl/nemorl-slurm/configs"
	"github.com/nemorl/nemorl-slurm/contamination"
)

//go:embed prompt.tmpl
var promptText string

var promptTmpl = template.Must(template.New("prompt").Option("missingkey=error").Parse(promptText))

// DefaultPrompt is the author's task prompt with the config's budgets
// filled in; submit --prompt-file replaces it.
func DefaultPrompt(cfg *configs.Config) ([]byte, error) {
	var b bytes.Buffer
	err := promptTmpl.Execute(&b, map[string]any{
		"NemoRL": configs.NemoRLCommit, "Gym": configs.GymCommit, "Model": configs.BaseModel,
		"TrainMinutes":    cfg.Stages.Train.TrainSeconds / 60,
		"InnerDeadline":   configs.InnerDeadlineSeconds(cfg.Stages.Train.TrainSeconds),
		"ResearchMinutes": cfg.Stages.Author.ResearchSeconds / 60,
		"MaxTurns":        cfg.Stages.Author.MaxTurns,
		"MaxOpaqueBytes":  contamination.DefaultMaxOpaque,
	})
	if err != nil {
		return nil, fmt.Errorf("template prompt.tmpl: %w", err)
	}
	return b.Bytes(), nil
}
