package cli

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"sort"
	"strings"

	ucli "github.com/urfave/cli/v2"

	"github.com/nemorl/nemorl-slurm/apptainer"
	"github.com/nemorl/nemorl-slurm/configs"
	"github.com/nemorl/nemorl-slurm/internal/atomicfile"
	"github.com/nemorl/nemorl-slurm/remote"

	"github.com/nemorl/nemorl-slurm/stages"
)

func imagesCommand(e *env) *ucli.Command {
	return &ucli.Command{
		Name:  "images",
		Usage: "the three Apptainer images: pin their digests, inspect a SIF",
		Subcommands: []*ucli.Command{
			{
				Name:      "lock",
				Usage:     "sha256 the config's three images on the cluster and write runtime.digests into the config file",
				ArgsUsage: " ",
				Flags:     withGlobals(),
				Action:    e.imagesLock,
			},
			{
				Name:      "inspect",
				Usage:     "print a SIF file's architecture, labels, definition and partitions (and its sha256 digest)",
				ArgsUsage: "FILE.sif…",
				Flags:     withGlobals(),
				Action:    e.imagesInspect,
			},
		},
	}
}

func (e *env) imagesInspect(c *ucli.Context) error {
	if c.NArg() == 0 {
		return usageErr("images inspect takes one or more SIF files")
	}
	var out []*imageReport
	for _, p := range c.Args().Slice() {
		img, err := apptainer.Inspect(p)
		if err != nil {
			hint := "is it a SIF image (apptainer build)?"
			switch {
			case errors.Is(err, fs.ErrNotExist):
				hint = "no such file here: images inspect reads local files (copy the image, or run it on the login node)"
			case errors.Is(err, fs.ErrPermission):
				hint = "it cannot be read: check its permissions"
			}
			return withCode(ExitUsage, err, hint)
		}
		d, err := apptainer.FileDigest(p)
		if err != nil {
			return err
		}
		out = append(out, &imageReport{Image: img, Digest: d})
	}
	if globalBool(c, "json") {
		return e.writeJSON(map[string]any{"images": out})
	}
	for _, r := range out {
		fmt.Fprintf(e.stdout, "%s\n  digest   %s\n  arch     %s\n  id       %s\n  created  %s\n  size     %d bytes, SIF %s, signed %t\n",
			r.Path, r.Digest, r.Arch, r.ID, r.Created.Format("2006-01-02T15:04:05Z"), r.Size, r.Version, r.Signed)
		keys := make([]string, 0, len(r.Labels))
		for k := range r.Labels {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			fmt.Fprintf(e.stdout, "  label    %s = %s\n", k, r.Labels[k])
		}
		for _, p := range r.Partitions {
			fmt.Fprintf(e.stdout, "  part     %d %s %s %s %d bytes\n", p.ID, p.Type, p.FS, p.Arch, p.Size)
		}
		if r.Definition != "" {
			fmt.Fprintf(e.stdout, "  definition:\n    %s\n", strings.ReplaceAll(strings.TrimRight(r.Definition, "\n"), "\n", "\n    "))
		}
	}
	return nil
}

type imageReport struct {
	*apptainer.Image
	Digest string `json:"digest"`
}

// imagesLock hashes the images where the jobs will read them (on the
// cluster) and pins the digests in the config file, changing only those
// lines.
func (e *env) imagesLock(c *ucli.Context) error {
	if c.NArg() > 0 {
		return usageErr("images lock takes no arguments")
	}
	path := configPath(c)
	// The config may lack runtime.digests.eval: writing it is this verb's
	// job (every other verb requires it).
	data, err := os.ReadFile(path)
	if err != nil {
		return withCode(ExitUsage, fmt.Errorf("config %s: %w", path, err), "set --config or NEMORL_SLURM_CONFIG")
	}
	cfg, err := configs.LoadWith(path, data, os.LookupEnv, configs.LoadOptions{SecretsOptional: true, EvalDigestOptional: true})
	if err != nil {
		return withCode(ExitUsage, err, "")
	}
	rt := cfg.Runtime
	if rt.Kind == configs.RuntimeNone {
		return usageErr("%s: runtime.kind is none: there are no images to lock", path)
	}
	host, err := dialCluster(c.Context, cfg, path, e.verboseLogf(c))
	if err != nil {
		return err
	}
	defer host.Close()
	digests := map[stages.Stage]string{}
	for _, stage := range stages.All {
		p := rt.Images.Of(stage)
		res, err := host.Run(c.Context, remote.Command{Argv: []string{"sha256sum", "--", p}, Idempotent: true})
		if err != nil {
			return withCode(ExitInfra, fmt.Errorf("runtime.images.%s: %w", stage, err), "")
		}
		sum, _, _ := strings.Cut(string(res.Stdout), " ")
		d := "sha256:" + sum
		if len(sum) != 64 {
			return withCode(ExitInfra, fmt.Errorf("runtime.images.%s: sha256sum printed %q", stage, bytes.TrimSpace(res.Stdout)), "")
		}
		digests[stage] = d
	}
	updated, err := configs.SetDigests(path, data, digests)
	if err != nil {
		return withCode(ExitUsage, err, "")
	}
	if _, err := configs.Load(path, updated, os.LookupEnv); err != nil {
		return fmt.Errorf("images lock: the updated config would not load (nothing written): %w", err)
	}
	mode := os.FileMode(0o644)
	if fi, err := os.Stat(path); err == nil {
		mode = fi.Mode()
	}
	if err := atomicfile.Write(path, updated, mode); err != nil {
		return err
	}
	old := map[stages.Stage]string{}
	for _, stage := range stages.All {
		old[stage] = rt.Digests.Of(stage)
	}
	if globalBool(c, "json") {
		return e.writeJSON(map[string]any{"config": path, "digests": digests, "previous": old})
	}
	for _, stage := range stages.All {
		note := "unchanged"
		if old[stage] != digests[stage] {
			note = "was " + orDash(old[stage])
		}
		fmt.Fprintf(e.stdout, "%-6s %s  %s (%s)\n", stage, digests[stage], rt.Images.Of(stage), note)
	}
	e.logf("wrote runtime.digests to %s", path)
	return nil
}

// dialCluster reaches the cluster of cfg (loaded from path): this machine
// when cluster.login is absent, else over SSH with host keys checked. logf
// receives the connection's log lines (nil: none). Every verb that talks to
// the cluster connects through it.
func dialCluster(ctx context.Context, cfg *configs.Config, path string, logf func(string, ...any)) (remote.Host, error) {
	h, err := dialLogin(ctx, cfg, path, logf)
	if err != nil {
		return nil, err
	}
	return memberHost(h, cfg), nil
}

// memberHost is h sending every Slurm command to cfg's member of a
// federation (clusters[i].members), or h.
func memberHost(h remote.Host, cfg *configs.Config) remote.Host {
	if m := cfg.Cluster.Member; m != "" {
		return remote.WithEnv(h, "SLURM_CLUSTERS="+m)
	}
	return h
}

// dialLogin connects to cfg's login node (this machine when it has none).
func dialLogin(ctx context.Context, cfg *configs.Config, path string, logf func(string, ...any)) (remote.Host, error) {
	l := cfg.Cluster.Login
	if l == nil {
		return remote.NewLocal(), nil
	}
	ssh, err := remote.Dial(ctx, loginOptions(l, logf))
	if err != nil {
		return nil, withCode(ExitInfra, fmt.Errorf("connect to the cluster (%s, from %s): %w", l.Host, path, err), "")
	}
	return ssh, nil
}

func loginOptions(l *configs.Login, logf func(string, ...any)) remote.Options {
	return remote.Options{
		Host: l.Host, Port: l.Port, User: l.User, IdentityFile: l.IdentityFile,
		KnownHostsFile: l.KnownHosts, ProxyJump: l.ProxyJump, AcceptNewHostKey: l.AcceptNewHostKey, Logf: logf,
	}
}

// dialLoginOrLater is dialLogin for one of several clusters (serve): a
// login that cannot be reached now is opened without a connection, to be
// connected when it answers, and down says why it is down. A host key or
// a key that is refused is still an error: no later try fixes it.
func dialLoginOrLater(ctx context.Context, cfg *configs.Config, path string, logf func(string, ...any)) (h remote.Host, down, err error) {
	h, err = dialLogin(ctx, cfg, path, logf)
	var hk *remote.HostKeyError
	var auth *remote.AuthError
	if err == nil || errors.As(err, &hk) || errors.As(err, &auth) || errors.Is(err, context.Canceled) {
		return h, nil, err
	}
	lazy, oerr := remote.Open(loginOptions(cfg.Cluster.Login, logf))
	if oerr != nil {
		return nil, nil, err
	}
	return lazy, err, nil
}

// verboseLogf is e.logf with -v, else nil.
func (e *env) verboseLogf(c *ucli.Context) func(string, ...any) {
	if globalBool(c, "verbose") {
		return e.logf
	}
	return nil
}
