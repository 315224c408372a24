package cli

import (
	"bytes"
	"embed"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"text/template"
	"time"

	ucli "github.com/urfave/cli/v2"

	"github.com/nemorl/nemorl-slurm/configs"
)

//go:embed templates/init.yaml.tmpl
var initFS embed.FS

func initCommand(e *env) *ucli.Command {
	return &ucli.Command{
		Name:  "init",
		Usage: "write a commented starter config from a few flags, then check it",
		Description: `Examples:
   nemorl-slurm init --host login1.cluster.edu --user alice --workdir /scratch/alice/nemorl \
       --partition gpu --images /scratch/alice/images --base-url http://policy.cluster.edu:8000/v1
   nemorl-slurm init --workdir /scratch/$USER/nemorl --partition gpu --images ~/sif   # on the login node`,
		ArgsUsage: " ",
		Flags: withGlobals(
			&ucli.StringFlag{Name: "out", Value: configs.DefaultFile, Usage: "the config file to write (never overwritten)"},
			&ucli.StringFlag{Name: "host", Usage: "login node (host name or ~/.ssh/config alias); none: nemorl-slurm runs on the login node"},
			&ucli.IntFlag{Name: "port", Value: 22, Usage: "its SSH port"},
			&ucli.StringFlag{Name: "user", Usage: "your user on the cluster (default: ~/.ssh/config's, else yours)"},
			&ucli.StringFlag{Name: "identity-file", Usage: "SSH key (default: ssh-agent, then ~/.ssh/id_*)"},
			&ucli.StringFlag{Name: "workdir", Usage: "where episodes live on the cluster's shared file system (required)"},
			&ucli.StringFlag{Name: "partition", Usage: "a partition with H100s (required)"},
			&ucli.StringFlag{Name: "account", Usage: "Slurm account"},
			&ucli.StringFlag{Name: "qos", Usage: "Slurm QOS"},
			&ucli.StringFlag{Name: "gres", Value: "gpu:h100:1", Usage: "what train and eval request"},
			&ucli.StringFlag{Name: "runtime", Value: configs.RuntimeApptainer, Usage: "apptainer or singularity"},
			&ucli.StringFlag{Name: "images", Usage: "directory on the cluster holding nemorl-author.sif, nemorl-train.sif and nemorl-eval.sif (required)"},
			&ucli.StringFlag{Name: "base-url", Value: "http://POLICY-HOST:8000/v1", Usage: "the policy's OpenAI-compatible endpoint"},
			&ucli.StringFlag{Name: "model", Value: "policy", Usage: "the policy's model name"},
		),
		Action: e.init,
	}
}

func (e *env) init(c *ucli.Context) error {
	if c.NArg() > 0 {
		return usageErr("init takes no arguments, got %q", c.Args().First())
	}
	var missing []string
	for _, f := range []string{"workdir", "partition", "images"} {
		if c.String(f) == "" {
			missing = append(missing, "--"+f)
		}
	}
	if len(missing) > 0 {
		return &Error{Code: ExitUsage, Err: fmt.Errorf("init needs %s", strings.Join(missing, ", ")), Hint: "see nemorl-slurm init --help"}
	}
	out := c.String("out")
	if _, err := os.Lstat(out); err == nil {
		return &Error{Code: ExitUsage, Err: fmt.Errorf("%s exists; init never overwrites a config", out), Hint: "pass --out another.yaml, or edit it and run nemorl-slurm config check"}
	} else if !errors.Is(err, fs.ErrNotExist) {
		return usageErr("%s: %v", out, err)
	}
	images := strings.TrimSuffix(c.String("images"), "/")
	data := map[string]any{
		"Date": time.Now().Format("2006-01-02"), "Host": c.String("host"), "Port": c.Int("port"), "User": c.String("user"),
		"IdentityFile": c.String("identity-file"), "Workdir": c.String("workdir"), "Partition": c.String("partition"),
		"Account": c.String("account"), "QOS": c.String("qos"), "Gres": c.String("gres"), "Runtime": c.String("runtime"),
		"Images":  map[string]string{"author": images + "/nemorl-author.sif", "train": images + "/nemorl-train.sif", "eval": images + "/nemorl-eval.sif"},
		"BaseURL": c.String("base-url"), "Model": c.String("model"),
	}
	// Every value is written as a YAML double-quoted string: a flag cannot
	// add keys or break the file.
	q := func(v any) (string, error) {
		b, err := json.Marshal(v)
		return string(b), err
	}
	tmpl, err := template.New("init.yaml.tmpl").Option("missingkey=error").Funcs(template.FuncMap{"q": q}).ParseFS(initFS, "templates/init.yaml.tmpl")
	if err != nil {
		return fmt.Errorf("init: template: %w", err)
	}
	var b bytes.Buffer
	if err := tmpl.Execute(&b, data); err != nil {
		return fmt.Errorf("init: render the config: %w", err)
	}
	// It must load before it is written: the flags are checked like a file.
	cfg, err := configs.LoadWith(out, b.Bytes(), os.LookupEnv, configs.LoadOptions{SecretsOptional: true, EvalDigestOptional: true})
	if err != nil {
		return withCode(ExitUsage, fmt.Errorf("init: the flags give a config that does not load: %w", err), "fix the flags named by the keys above")
	}
	if dir := filepath.Dir(out); dir != "." {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return fmt.Errorf("init: %w", err)
		}
	}
	f, err := os.OpenFile(out, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return withCode(ExitUsage, fmt.Errorf("init: %w", err), "")
	}
	if _, err := f.Write(b.Bytes()); err != nil {
		f.Close()
		return fmt.Errorf("init: write %s: %w", out, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("init: write %s: %w", out, err)
	}
	warnings := configs.Warnings(cfg)
	if globalBool(c, "json") {
		ws := make([]problemJSON, 0, len(warnings))
		for _, w := range warnings {
			ws = append(ws, problemJSON{File: out, Line: w.Line, Key: w.Path, Message: w.Msg})
		}
		return e.writeJSON(map[string]any{"written": out, "warnings": ws})
	}
	for _, w := range warnings {
		e.logf("warning: %s:%d: %s: %s", out, w.Line, w.Path, w.Msg)
	}
	fmt.Fprintln(e.stdout, out)
	e.logf("wrote %s; next: export POLICY_API_KEY=…, put the images in %s, run nemorl-slurm images lock --config %s, then nemorl-slurm doctor --config %s", out, images, out, out)
	return nil
}
