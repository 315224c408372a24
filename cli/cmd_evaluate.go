package cli

import (
	"errors"
	"fmt"
	"os"

	ucli "github.com/urfave/cli/v2"

	"github.com/nemorl/nemorl-slurm/evaluate"
	"github.com/nemorl/nemorl-slurm/record"
)

// evaluateCommand holds the trusted in-job checks the eval payload runs
// inside the eval image. A rejected input exits 4 (integrity).
func evaluateCommand(e *env) *ucli.Command {
	return &ucli.Command{
		Name:  "evaluate",
		Usage: "the trusted checks the eval job runs (inside the eval image)",
		Subcommands: []*ucli.Command{
			{
				Name:      "check-weights",
				Usage:     "check a safetensors file against the pinned architecture: float dtypes, finite values, exact names and shapes; print its sha256",
				ArgsUsage: "FILE",
				Flags: withGlobals(
					&ucli.StringFlag{Name: "arch", Value: "qwen2.5-1.5b-instruct", Usage: "pinned architecture (qwen2.5-1.5b-instruct, or tiny-qwen2 for tests and the lab)"},
				),
				Action: e.checkWeights,
			},
			{
				Name:  "score",
				Usage: "turn AIME25 rollouts into the NEMORL_ENV_RESULT record after strict checks",
				Flags: withGlobals(
					&ucli.StringFlag{Name: "rollouts", Required: true, Usage: "Gym rollouts (JSON Lines)"},
					&ucli.StringFlag{Name: "failures", Usage: "Gym failed-rollouts file; absent or empty means none"},
					&ucli.StringFlag{Name: "questions", Required: true, Usage: "the AIME25 questions file (JSON Lines, dataset order)"},
					&ucli.StringFlag{Name: "weights-sha256", Required: true, Usage: "sha256 of the weights scored (from check-weights)"},
					&ucli.StringFlag{Name: "job-id", EnvVars: []string{"SLURM_JOB_ID"}, Required: true, Usage: "this eval job's Slurm id"},
					&ucli.StringFlag{Name: "wandb-url", Usage: "W&B run URL, if any"},
				),
				Action: e.score,
			},
		},
	}
}

func (e *env) checkWeights(c *ucli.Context) error {
	if c.NArg() != 1 {
		return usageErr("check-weights takes one FILE")
	}
	arch, err := evaluate.ArchitectureByName(c.String("arch"))
	if err != nil {
		return withCode(ExitUsage, err, "")
	}
	rep, err := evaluate.CheckWeights(c.Args().First(), arch)
	if err != nil {
		var rej *evaluate.Rejection
		if errors.As(err, &rej) {
			return withCode(ExitIntegrity, fmt.Errorf("weights rejected: %w", err), "")
		}
		return fmt.Errorf("check weights: %w", err)
	}
	if globalBool(c, "json") {
		return e.writeJSON(rep)
	}
	fmt.Fprintf(e.stdout, "%s  %s\n", rep.SHA256, rep.Path)
	e.logf("weights ok: %d tensors, %d parameters, %s architecture", rep.Tensors, rep.Parameters, arch.Name)
	return nil
}

func (e *env) score(c *ucli.Context) error {
	qf, err := os.Open(c.String("questions"))
	if err != nil {
		return withCode(ExitUsage, fmt.Errorf("--questions: %w", err), "")
	}
	defer qf.Close()
	questions, err := evaluate.LoadQuestions(qf)
	if err != nil {
		return withCode(ExitIntegrity, fmt.Errorf("questions %s: %w", c.String("questions"), err), "")
	}
	rec, err := evaluate.ScoreFiles(c.String("rollouts"), c.String("failures"), evaluate.ScoreOptions{
		Questions:     questions,
		SlurmJobID:    c.String("job-id"),
		WeightsSHA256: c.String("weights-sha256"),
		WandbURL:      c.String("wandb-url"),
	})
	if err != nil {
		var rej *evaluate.Rejection
		if errors.As(err, &rej) {
			return withCode(ExitIntegrity, fmt.Errorf("rollouts rejected: %w", err), "")
		}
		return fmt.Errorf("score: %w", err)
	}
	line, err := record.Format(&rec)
	if err != nil {
		return fmt.Errorf("score: %w", err)
	}
	fmt.Fprintln(e.stdout, line)
	return nil
}
