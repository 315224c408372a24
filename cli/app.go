// Package cli is the nemorl-slurm command line: one file per verb
// (cmd_<verb>.go), global flags, output formats and exit codes.
package cli

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"regexp"
	"strings"

	ucli "github.com/urfave/cli/v2"

	"github.com/nemorl/nemorl-slurm/configs"
)

// Version is set at build time with -ldflags "-X …/cli.Version=…".
var Version = "dev"

// env is what one invocation works with.
type env struct {
	stdin          io.Reader
	stdout, stderr io.Writer
	// wroteJSON is set once the invocation's JSON document is out: an
	// error after it (an outcome's exit code) adds no second one.
	wroteJSON bool
}

// Main runs the command line and returns the process exit code.
func Main(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	e := &env{stdin: stdin, stdout: stdout, stderr: stderr}
	notFound := false
	// -v is --verbose here, so --version has no short form.
	ucli.VersionFlag = &ucli.BoolFlag{Name: "version", Usage: "print the version"}
	app := &ucli.App{
		Name:      "nemorl-slurm",
		Usage:     "run NeMo Gym nemorl_env episodes (author → train → eval) on Slurm",
		Version:   Version,
		Reader:    stdin,
		Writer:    stdout, // --help and --version (asked for: stdout); logs and errors go to stderr
		ErrWriter: stderr,
		Flags:     globalFlags(),
		Commands: []*ucli.Command{
			initCommand(e),
			configCommand(e),
			doctorCommand(e),
			renderCommand(e),
			submitCommand(e),
			statusCommand(e),
			listCommand(e),
			reportCommand(e),
			watchCommand(e),
			resultCommand(e),
			logsCommand(e),
			cancelCommand(e),
			runCommand(e),
			resumeCommand(e),
			serveCommand(e),
			cleanCommand(e),
			imagesCommand(e),
			payloadCommand(e),
			evaluateCommand(e),
			completionCommand(e),
		},
		EnableBashCompletion: true,
		OnUsageError: func(_ *ucli.Context, err error, _ bool) error {
			return &Error{Code: ExitUsage, Err: flagDashes(err), Hint: "see nemorl-slurm --help"}
		},
		CommandNotFound: func(c *ucli.Context, name string) {
			notFound = true
			fmt.Fprintf(stderr, "nemorl-slurm: no command %q\nhint: see nemorl-slurm --help\n", name)
		},
		ExitErrHandler: func(*ucli.Context, error) {}, // Main reports errors
		Action: func(c *ucli.Context) error {
			// No command: the help, on stderr, and a usage error.
			c.App.Writer = stderr
			_ = ucli.ShowAppHelp(c)
			if c.NArg() > 0 {
				return usageErr("no command %q", c.Args().First())
			}
			return &Error{Code: ExitUsage, Err: errors.New("no command given"), Hint: "nemorl-slurm --help lists them"}
		},
	}
	jsonMode := jsonRequested(args)
	// An error before any action ran is a usage error (unknown flag,
	// missing required flag, bad argument).
	inAction := false
	markActions(app.Commands, &inAction)
	if err := app.Run(interspersed(app, args)); err != nil {
		var uerr ucli.ExitCoder
		if errors.As(err, &uerr) {
			return uerr.ExitCode()
		}
		if !inAction {
			var e *Error
			if !errors.As(err, &e) {
				err = &Error{Code: ExitUsage, Err: err, Hint: "see nemorl-slurm --help"}
			}
		}
		code, hint := report(stderr, err)
		if jsonMode && !e.wroteJSON {
			_ = e.writeJSON(map[string]any{"error": map[string]any{"code": code, "message": err.Error(), "hint": hint}})
		}
		return code
	}
	if notFound {
		if jsonMode && !e.wroteJSON {
			_ = e.writeJSON(map[string]any{"error": map[string]any{"code": ExitUsage, "message": "no such command", "hint": "nemorl-slurm --help lists them"}})
		}
		return ExitUsage
	}
	return ExitOK
}

// jsonRequested reports whether --json is among the flags of args (before
// a "--"), wherever it is: errors are then a JSON document on stdout too.
func jsonRequested(args []string) bool {
	for _, a := range args[min(1, len(args)):] {
		switch a {
		case "--":
			return false
		case "--json", "-json", "--json=true", "--json=1":
			return true
		}
	}
	return false
}

// interspersed moves the flags that follow a command's arguments before
// them (urfave/cli stops reading flags at the first argument), so that
// `logs EP --stage eval` and `result EP --json` work as documented. A flag
// that takes a value keeps it; "--" ends the flags as usual.
func interspersed(app *ucli.App, args []string) []string {
	if len(args) < 2 {
		return args
	}
	cmds, flags := app.Commands, app.Flags
	i, inCommand := 1, false
	// Walk the command path (skipping flags before it).
	for i < len(args) {
		a := args[i]
		if strings.HasPrefix(a, "-") {
			if takesValue(flags, a) {
				i++
			}
			i++
			continue
		}
		var found *ucli.Command
		for _, c := range cmds {
			if c.HasName(a) {
				found = c
			}
		}
		if found == nil {
			break
		}
		i++
		inCommand = true
		cmds, flags = found.Subcommands, found.Flags
		if len(cmds) == 0 {
			break
		}
	}
	if !inCommand {
		return args
	}
	var lead, pos []string
	for j := i; j < len(args); j++ {
		a := args[j]
		switch {
		case a == "--":
			pos = append(pos, args[j:]...)
			j = len(args)
		case strings.HasPrefix(a, "-") && a != "-":
			lead = append(lead, a)
			if takesValue(flags, a) && j+1 < len(args) {
				lead = append(lead, args[j+1])
				j++
			}
		default:
			pos = append(pos, a)
		}
	}
	return append(append(append([]string{}, args[:i]...), lead...), pos...)
}

// takesValue reports whether arg ("--name" or "-n", without "=value") is
// a flag of flags that needs the next argument as its value.
func takesValue(flags []ucli.Flag, arg string) bool {
	if strings.Contains(arg, "=") {
		return false
	}
	name := strings.TrimLeft(arg, "-")
	for _, f := range flags {
		for _, n := range f.Names() {
			if n == name {
				_, isBool := f.(*ucli.BoolFlag)
				return !isBool
			}
		}
	}
	return false
}

func markActions(cmds []*ucli.Command, in *bool) {
	for _, cmd := range cmds {
		if act := cmd.Action; act != nil {
			cmd.Action = func(c *ucli.Context) error { *in = true; return act(c) }
		}
		cmd.OnUsageError = func(_ *ucli.Context, err error, _ bool) error {
			return &Error{Code: ExitUsage, Err: flagDashes(err), Hint: "see nemorl-slurm " + cmd.Name + " --help"}
		}
		markActions(cmd.Subcommands, in)
	}
}

// globalFlags are accepted before the command and after it alike
// (nemorl-slurm --json status, nemorl-slurm status --json).
func globalFlags() []ucli.Flag {
	return []ucli.Flag{
		&ucli.StringFlag{Name: "config", Usage: "config file (default $NEMORL_SLURM_CONFIG, else ./nemorl-slurm.yaml)"},
		&ucli.BoolFlag{Name: "json", Usage: "print exactly one JSON document on stdout"},
		&ucli.BoolFlag{Name: "verbose", Aliases: []string{"v"}, Usage: "log more to stderr"},
	}
}

// withGlobals adds the global flags to a command's own.
func withGlobals(flags ...ucli.Flag) []ucli.Flag { return append(flags, globalFlags()...) }

// setContext finds the context where a global flag was set: on the
// command or before it.
func setContext(c *ucli.Context, name string) *ucli.Context {
	for _, ctx := range c.Lineage() {
		for _, n := range ctx.LocalFlagNames() {
			if n == name {
				return ctx
			}
		}
	}
	return nil
}

func globalString(c *ucli.Context, name string) string {
	if ctx := setContext(c, name); ctx != nil {
		return ctx.String(name)
	}
	return ""
}

func globalBool(c *ucli.Context, name string) bool {
	if ctx := setContext(c, name); ctx != nil {
		return ctx.Bool(name)
	}
	return false
}

// configPath is the config --config names, else $NEMORL_SLURM_CONFIG, else
// ./nemorl-slurm.yaml.
func configPath(c *ucli.Context) string {
	if p := globalString(c, "config"); p != "" {
		return p
	}
	return configs.DefaultPath()
}

// loadConfig loads the config at configPath. With opts.SecretsOptional the
// policy API key's variable may be unset (render never writes the key).
func loadConfig(c *ucli.Context, opts ...configs.LoadOptions) (*configs.Config, error) {
	var opt configs.LoadOptions
	if len(opts) > 0 {
		opt = opts[0]
	}
	cfg, err := configs.LoadFileWith(configPath(c), opt)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, withCode(ExitUsage, err, "set --config or NEMORL_SLURM_CONFIG (nemorl-slurm init writes a starter config)")
	}
	if err != nil {
		return nil, withCode(ExitUsage, err, "")
	}
	return cfg, nil
}

// writeJSON prints v as the one JSON document of this invocation.
func (e *env) writeJSON(v any) error {
	enc := json.NewEncoder(e.stdout)
	enc.SetIndent("", "  ")
	enc.SetEscapeHTML(false)
	e.wroteJSON = true
	if err := enc.Encode(v); err != nil {
		return fmt.Errorf("write JSON: %w", err)
	}
	return nil
}

func (e *env) logf(format string, args ...any) { fmt.Fprintf(e.stderr, format+"\n", args...) }

var reOneDashFlag = regexp.MustCompile(`(flag(?: provided but not defined:)? )-([A-Za-z][\w-]+)`)

// flagDashes writes the flags in urfave/cli's messages as they are typed
// ("invalid value "abc" for flag -tail" → "… flag --tail").
func flagDashes(err error) error {
	msg := reOneDashFlag.ReplaceAllString(err.Error(), "${1}--${2}")
	if msg == err.Error() {
		return err
	}
	return errors.New(msg)
}
