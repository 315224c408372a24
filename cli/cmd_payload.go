package cli

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	ucli "github.com/urfave/cli/v2"

	"github.com/nemorl/nemorl-slurm/payload"
	"github.com/nemorl/nemorl-slurm/payload/author"
	"github.com/nemorl/nemorl-slurm/payload/train"
	"github.com/nemorl/nemorl-slurm/record"
)

// payloadCommand holds the helpers the built-in stage payloads call inside
// the images. They are not meant for people; they are documented for the
// engineers who change the payloads.
func payloadCommand(e *env) *ucli.Command {
	return &ucli.Command{
		Name:  "payload",
		Usage: "in-job helpers of the built-in stage payloads (inside the images)",
		Subcommands: []*ucli.Command{
			{
				Name:  "author-baseline",
				Usage: "make the author work dir a git repository with one baseline commit; print its id",
				Flags: []ucli.Flag{
					&ucli.StringFlag{Name: "work", Required: true, Usage: "the work dir (NeMo-RL/, recipe.yaml, train_math.jsonl)"},
				},
				Action: e.payloadAuthorBaseline,
			},
			{
				Name:  "author-finish",
				Usage: "write response.json and change.diff from the Claude Code run and print the author record",
				Flags: []ucli.Flag{
					&ucli.StringFlag{Name: "work", Required: true},
					&ucli.StringFlag{Name: "baseline", Required: true, Usage: "the commit author-baseline printed"},
					&ucli.StringFlag{Name: "transcript", Required: true, Usage: "Claude Code's stream-json output"},
					&ucli.StringFlag{Name: "out", Required: true, Usage: "where response.json and change.diff go"},
					&ucli.IntFlag{Name: "exit-status", Required: true, Usage: "Claude Code's exit status"},
					&ucli.BoolFlag{Name: "timed-out", Usage: "the research budget ended the run"},
					&ucli.StringFlag{Name: "model", Usage: "the policy model's name"},
				},
				Action: e.payloadAuthorFinish,
			},
			{
				Name:  "train",
				Usage: "apply the patch, run the GRPO trainer to the inner deadline ($NEMORL_DEADLINE), export the weights, print the train record",
				Flags: []ucli.Flag{
					&ucli.StringFlag{Name: "settings", Required: true, Usage: "the bundle's train.json"},
					&ucli.StringFlag{Name: "work", Required: true, Usage: "the work dir (NeMo-RL/, recipe.yaml)"},
					&ucli.StringFlag{Name: "patch", Required: true, Usage: "the author's change.diff"},
					&ucli.StringFlag{Name: "python", Required: true, Usage: "the NeMo RL venv's python"},
					&ucli.StringFlag{Name: "train-data", Required: true, Usage: "train_math.jsonl"},
					&ucli.StringFlag{Name: "out", Required: true, Usage: "where model.safetensors goes"},
					&ucli.StringFlag{Name: "export-script", Required: true, Usage: "the bundle's export_dcp.py"},
					&ucli.StringFlag{Name: "deadline", EnvVars: []string{"NEMORL_DEADLINE"}, Required: true, Usage: "the inner deadline, epoch seconds"},
				},
				Action: e.payloadTrain,
			},
			{
				Name:      "settings",
				Usage:     "print a bundle settings file (JSON) as NEMORL_SETTING_* shell assignments",
				ArgsUsage: "FILE",
				Action:    e.payloadSettings,
			},
			{
				Name:   "free-port",
				Usage:  "print a free TCP port on 127.0.0.1",
				Action: e.payloadFreePort,
			},
			{
				Name:  "wait-http",
				Usage: "wait until a local HTTP server answers (with --want-status, that status)",
				Flags: []ucli.Flag{
					&ucli.StringFlag{Name: "url", Required: true},
					&ucli.IntFlag{Name: "want-status", Usage: "the status that means ready (default: any answer)"},
					&ucli.IntFlag{Name: "pid", Usage: "the server process: give up when it exits"},
					&ucli.DurationFlag{Name: "timeout", Value: 10 * time.Minute, Usage: "give up after this long"},
				},
				Action: e.payloadWaitHTTP,
			},
		},
	}
}

func (e *env) payloadAuthorBaseline(c *ucli.Context) error {
	id, err := author.Baseline(c.Context, c.String("work"))
	if err != nil {
		return err
	}
	_, err = fmt.Fprintln(e.stdout, id)
	return err
}

// payloadAuthorFinish prints the author record; a failure prints none (the
// collector then sees missing_record: infrastructure, no reward).
func (e *env) payloadAuthorFinish(c *ucli.Context) error {
	rec, err := author.Finish(c.Context, author.FinishInput{
		WorkDir: c.String("work"), Baseline: c.String("baseline"), TranscriptPath: c.String("transcript"),
		OutDir: c.String("out"), ExitStatus: c.Int("exit-status"), TimedOut: c.Bool("timed-out"),
		Model: c.String("model"), Log: e.stderr,
	})
	if err != nil {
		return err
	}
	return record.Write(e.stdout, rec)
}

// payloadTrain runs the launcher. TERM (Slurm's, forwarded by the payload)
// cancels it: it stops the trainer and still prints a record. The exit
// status is the launcher's: 0 only for status ok.
func (e *env) payloadTrain(c *ucli.Context) error {
	settings, err := train.LoadSettings(c.String("settings"))
	if err != nil {
		return withCode(ExitUsage, err, "")
	}
	deadline, err := train.ParseDeadline(c.String("deadline"))
	if err != nil {
		return withCode(ExitUsage, err, "")
	}
	p := train.Plan{
		WorkDir: c.String("work"), Patch: c.String("patch"), Python: c.String("python"),
		TrainData: c.String("train-data"), OutDir: c.String("out"), ExportScript: c.String("export-script"),
		Deadline: deadline, Settings: settings,
	}
	ctx, stop := signal.NotifyContext(c.Context, syscall.SIGTERM, os.Interrupt)
	defer stop()
	_, code, err := train.Run(ctx, p, e.stdout, e.stderr)
	if err != nil {
		return withCode(max(code, ExitInternal), err, "")
	}
	if code != 0 {
		return ucli.Exit("", code)
	}
	return nil
}

func (e *env) payloadSettings(c *ucli.Context) error {
	if c.NArg() != 1 {
		return usageErr("payload settings takes one FILE")
	}
	f, err := os.Open(c.Args().First())
	if err != nil {
		return withCode(ExitUsage, err, "")
	}
	defer f.Close()
	out, err := payload.Settings(f)
	if err != nil {
		return withCode(ExitUsage, fmt.Errorf("%s: %w", f.Name(), err), "")
	}
	_, err = fmt.Fprint(e.stdout, out)
	return err
}

func (e *env) payloadFreePort(c *ucli.Context) error {
	p, err := payload.FreePort()
	if err != nil {
		return err
	}
	_, err = fmt.Fprintln(e.stdout, p)
	return err
}

func (e *env) payloadWaitHTTP(c *ucli.Context) error {
	ctx, cancel := context.WithTimeout(c.Context, c.Duration("timeout"))
	defer cancel()
	err := payload.WaitHTTP(ctx, c.String("url"), payload.WaitOptions{WantStatus: c.Int("want-status"), PID: c.Int("pid")})
	if err != nil {
		return withCode(ExitInfra, err, "")
	}
	return nil
}
