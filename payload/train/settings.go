package train

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/nemorl/nemorl-slurm/configs"
	"github.com/nemorl/nemorl-slurm/record"
)

// Settings is the train bundle's train.json, rendered by templates (the
// Train case of templates.Render).
type Settings struct {
	// TrainSeconds is the stage's training budget.
	TrainSeconds int `json:"train_seconds"`
	// InnerDeadlineSeconds is configs.InnerDeadlineSeconds(TrainSeconds):
	// the deadline, counted from the start of the stage, that the job script
	// exports as NEMORL_DEADLINE.
	InnerDeadlineSeconds int `json:"inner_deadline_seconds"`
	// PromptsPerStep × GenerationsPerPrompt is the GRPO batch (8 × 8).
	PromptsPerStep       int  `json:"prompts_per_step"`
	GenerationsPerPrompt int  `json:"generations_per_prompt"`
	Pins                 Pins `json:"pins"`
}

// Pins are the reference episode's pins.
type Pins struct {
	NemoRL            string `json:"nemo_rl"`
	Gym               string `json:"gym"`
	BaseModel         string `json:"base_model"`
	BaseModelRevision string `json:"base_model_revision"`
}

// LoadSettings reads and checks train.json. Decoding is strict: unknown
// fields, trailing data and missing or out-of-range values are errors.
func LoadSettings(path string) (Settings, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return Settings{}, fmt.Errorf("train settings: %w", err)
	}
	s, err := ParseSettings(b)
	if err != nil {
		return Settings{}, fmt.Errorf("train settings %s: %w", path, err)
	}
	return s, nil
}

// ParseSettings decodes and checks the content of train.json.
func ParseSettings(b []byte) (Settings, error) {
	var s Settings
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&s); err != nil {
		return Settings{}, err
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return Settings{}, errors.New("trailing data after the JSON object")
	}
	if err := s.Validate(); err != nil {
		return Settings{}, err
	}
	return s, nil
}

// Validate checks every field (all are required).
func (s Settings) Validate() error {
	switch {
	case s.TrainSeconds < 1:
		return fmt.Errorf("train_seconds %d: want at least 1", s.TrainSeconds)
	case s.InnerDeadlineSeconds != configs.InnerDeadlineSeconds(s.TrainSeconds):
		return fmt.Errorf("inner_deadline_seconds %d: want %d for train_seconds %d",
			s.InnerDeadlineSeconds, configs.InnerDeadlineSeconds(s.TrainSeconds), s.TrainSeconds)
	case s.PromptsPerStep < 1:
		return fmt.Errorf("prompts_per_step %d: want at least 1", s.PromptsPerStep)
	case s.GenerationsPerPrompt < 1:
		return fmt.Errorf("generations_per_prompt %d: want at least 1", s.GenerationsPerPrompt)
	case !isCommitID(s.Pins.NemoRL):
		return fmt.Errorf("pins.nemo_rl %q: want a 40-hex commit", s.Pins.NemoRL)
	case !isCommitID(s.Pins.Gym):
		return fmt.Errorf("pins.gym %q: want a 40-hex commit", s.Pins.Gym)
	case s.Pins.BaseModel == "" || !hydraPlain(s.Pins.BaseModel):
		return fmt.Errorf("pins.base_model %q: want a model id of letters, digits and ./_-", s.Pins.BaseModel)
	case !isCommitID(s.Pins.BaseModelRevision):
		return fmt.Errorf("pins.base_model_revision %q: want a 40-hex commit", s.Pins.BaseModelRevision)
	}
	return nil
}

// hydraPlain reports whether s can be a Hydra override value as it is,
// unquoted: letters, digits and / . _ - only (no quoting, escaping,
// interpolation, list or dict syntax, whitespace or '=').
func hydraPlain(s string) bool {
	for _, r := range s {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9':
		case r == '/', r == '.', r == '_', r == '-':
		default:
			return false
		}
	}
	return true
}

func isCommitID(s string) bool { return record.IsLowerHex(s, 40) }
