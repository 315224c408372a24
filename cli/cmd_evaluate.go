package cli

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
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
				Name:  "contamination",
				Usage: "check the author's patch for the eval problems (statements, answers as a list, problem-answer pairs); exit 4 when it holds them",
				Flags: withGlobals(
					&ucli.StringFlag{Name: "patch", Required: true, Usage: "the author's change.diff (read as data, never applied)"},
					&ucli.StringFlag{Name: "problems", Required: true, Usage: "the eval problems (JSON Lines: question, expected_answer)"},
					&ucli.StringFlag{Name: "report", Usage: "write the report (JSON) here too, for evaluate score --contamination"},
					&ucli.StringFlag{Name: "pristine", Usage: "the image's pristine tree (holding NeMo-RL/), where the bases of binary deltas are read; without it a binary delta is refused"},
				),
				Action: e.contamination,
			},
			{
				Name:  "score",
				Usage: "turn AIME25 rollouts into the NEMORL_ENV_RESULT record after strict checks (or, for a contaminated patch, the record of reward 0)",
				Flags: withGlobals(
					&ucli.StringFlag{Name: "contamination", Required: true, Usage: "evaluate contamination's report of the author's patch"},
					&ucli.StringFlag{Name: "rollouts", Usage: "Gym rollouts (JSON Lines); required unless the patch is contaminated"},
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

// contamination runs the contamination check: exit 0 clean, 4 (integrity)
// when the patch holds the eval problems; the report goes to stdout (JSON
// with --json, else the evidence) and to --report.
func (e *env) contamination(c *ucli.Context) error {
	if c.NArg() != 0 {
		return usageErr("contamination takes no arguments (--patch, --problems)")
	}
	chk, err := evaluate.CheckContamination(c.String("patch"), c.String("problems"), c.String("pristine"))
	if err != nil {
		return fmt.Errorf("contamination: %w", err)
	}
	if p := c.String("report"); p != "" {
		b, err := json.MarshalIndent(chk, "", "  ")
		if err != nil {
			return fmt.Errorf("contamination: %w", err)
		}
		if err := os.WriteFile(p, append(b, '\n'), 0o600); err != nil {
			return fmt.Errorf("contamination: --report: %w", err)
		}
	}
	if globalBool(c, "json") {
		if err := e.writeJSON(chk); err != nil {
			return err
		}
	}
	rep := chk.Report
	e.logf("contamination: %d added lines of the patch (%d bytes, sha256 %s) against %d problems (sha256 %s)",
		rep.AddedLines, chk.PatchBytes, chk.PatchSHA256, chk.Problems, chk.ProblemsSHA256)
	if rep.BinarySections > 0 {
		e.logf("contamination: %d binary sections, decoded to %d bytes in %d lines", rep.BinarySections, rep.DecodedBytes, rep.DecodedLines)
	}
	if !rep.Contaminated {
		e.logf("contamination: none found")
		return nil
	}
	return withCode(ExitIntegrity, errors.New("contaminated: "+chk.Evidence), "")
}

func (e *env) score(c *ucli.Context) error {
	chk, err := evaluate.LoadContaminationCheck(c.String("contamination"))
	if err != nil {
		return withCode(ExitUsage, fmt.Errorf("--contamination: %w", err), "")
	}
	raw, err := os.ReadFile(c.String("questions"))
	if err != nil {
		return withCode(ExitUsage, fmt.Errorf("--questions: %w", err), "")
	}
	if sum := sha256.Sum256(raw); hex.EncodeToString(sum[:]) != chk.ProblemsSHA256 {
		return withCode(ExitIntegrity, fmt.Errorf("questions %s: sha256 %x, but the contamination check read problems of sha256 %s", c.String("questions"), sum, chk.ProblemsSHA256), "")
	}
	var rec record.Eval
	switch {
	case chk.Report.Contaminated && c.String("rollouts") != "":
		return usageErr("--rollouts: the patch is contaminated, its weights are not scored")
	case chk.Report.Contaminated:
		rec, err = evaluate.ContaminatedRecord(chk, c.String("job-id"), c.String("weights-sha256"), c.String("wandb-url"))
	case c.String("rollouts") == "":
		return usageErr("--rollouts is required (the patch is not contaminated)")
	default:
		questions, qerr := evaluate.LoadQuestions(bytes.NewReader(raw))
		if qerr != nil {
			return withCode(ExitIntegrity, fmt.Errorf("questions %s: %w", c.String("questions"), qerr), "")
		}
		rec, err = evaluate.ScoreFiles(c.String("rollouts"), c.String("failures"), evaluate.ScoreOptions{
			Questions:     questions,
			SlurmJobID:    c.String("job-id"),
			WeightsSHA256: c.String("weights-sha256"),
			WandbURL:      c.String("wandb-url"),
			Contamination: chk,
		})
	}
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
