package episode

// Staging in one stream. An episode's tree (about 20 files, 50–100 KB),
// its secrets.env and its manifest reach the cluster as one tar stream on
// the stdin of one command, which checks the files the config names
// (preflight), unpacks the stream into a fresh 0700 directory beside the
// episode's, fsyncs the files, renames the directory into place (so the
// episode directory exists only complete: there is no partial tree for
// resume to finish) and, for submit, runs the author's sbatch and records
// its job id in the manifest. Over SSH that is one session: two round trips
// after the handshake, where staging file by file over SFTP took about a
// hundred.
//
// Later submissions (train, eval) run sbatch and rewrite the manifest with
// the new job id in one command too (submitScript).

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"path"
	"sort"
	"strings"

	"github.com/nemorl/nemorl-slurm/configs"
	"github.com/nemorl/nemorl-slurm/internal/shell"
	"github.com/nemorl/nemorl-slurm/remote"
	"github.com/nemorl/nemorl-slurm/slurm"
	"github.com/nemorl/nemorl-slurm/templates"
)

// Exit statuses of stageScript (sbatch's own, 1, passes through).
const (
	stageExitPreflight = 90 // a file the config names is missing
	stageExitExists    = 91 // the episode directory exists (or is incomplete)
	stageExitFailed    = 92 // mkdir, tar, sync or rename failed
)

// jobIDMarker stands for the job id in the manifest sent before sbatch ran.
const jobIDMarker = "@NEMORL_JOB_ID@"

// manifestNext is the manifest with the author's job id as jobIDMarker,
// sent in the stream; the script fills it in after sbatch.
const manifestNext = ".manifest.next"

// stageScript: sh -c stageScript sh MODE DIR [KEY=PATH…] -- [SBATCH ARGV…]
// MODE is "new" (the directory must not exist) or "restage" (a complete
// directory, one with its manifest, is left as it is).
const stageScript = `set -u
umask 077
mode=$1 dir=$2
shift 2
while [ $# -gt 0 ] && [ "$1" != -- ]; do
	k=${1%%=*} p=${1#*=}
	shift
	if [ -d "$p" ]; then r="is a directory"
	elif [ ! -e "$p" ]; then r="no such file or directory"
	elif [ ! -r "$p" ]; then r="permission denied"
	else continue
	fi
	printf 'nemorl-stage: preflight\t%s\t%s\t%s\n' "$k" "$p" "$r" >&2
	exit 90
done
[ $# -gt 0 ] && shift
parent=${dir%/*} base=${dir##*/}
if [ -e "$dir" ] || [ -L "$dir" ]; then
	if [ "$mode" = restage ] && [ -d "$dir" ] && [ ! -L "$dir" ] && [ -f "$dir/manifest.json" ]; then
		cat >/dev/null
		exit 0
	fi
	printf 'nemorl-stage: exists\t%s\n' "$dir" >&2
	exit 91
fi
mkdir -p -- "$parent" || exit 92
tmp=$(mktemp -d -- "$parent/.$base.staging.XXXXXX") || exit 92
trap 'rm -rf -- "$tmp"' EXIT
tar -x -p --no-same-owner -f - -C "$tmp" || exit 92
find "$tmp" -type f -exec sync -- {} + 2>/dev/null || sync
mv -T -- "$tmp" "$dir" || exit 92
trap - EXIT
[ $# -gt 0 ] || exit 0
out=$("$@" </dev/null)
rc=$?
printf '%s\n' "$out"
[ $rc -eq 0 ] || exit $rc
id=$(printf '%s\n' "$out" | sed -n 's/^\([0-9][0-9_]*\)\(;.*\)\{0,1\}$/\1/p' | tail -n 1)
if [ -n "$id" ] && [ -f "$dir/` + manifestNext + `" ]; then
	sed "s/` + jobIDMarker + `/$id/" "$dir/` + manifestNext + `" >"$dir/.manifest.tmp" &&
		mv -f -- "$dir/.manifest.tmp" "$dir/manifest.json" &&
		rm -f -- "$dir/` + manifestNext + `"
fi
exit 0
`

// submitScript: sh -c submitScript sh MANIFEST SBATCH ARGV… with the
// manifest (the new job id as jobIDMarker) on stdin.
const submitScript = `set -u
umask 077
m=$1
shift
out=$("$@" </dev/null)
rc=$?
printf '%s\n' "$out"
[ $rc -eq 0 ] || exit $rc
id=$(printf '%s\n' "$out" | sed -n 's/^\([0-9][0-9_]*\)\(;.*\)\{0,1\}$/\1/p' | tail -n 1)
[ -n "$id" ] || exit 0
sed "s/` + jobIDMarker + `/$id/" >"$m.tmp" && mv -f -- "$m.tmp" "$m"
exit 0
`

// preflightChecks maps config keys to the cluster files they name that the
// jobs need: the three images (with a container runtime) and the stages'
// replacement commands given by absolute path.
func (d *Driver) preflightChecks() map[string]string {
	cfg := d.Config
	check := map[string]string{}
	if cfg.Runtime.Kind != configs.RuntimeNone {
		check["runtime.images.author"] = cfg.Runtime.Images.Author
		check["runtime.images.train"] = cfg.Runtime.Images.Train
		check["runtime.images.eval"] = cfg.Runtime.Images.Eval
	}
	for key, argv := range map[string][]string{"stages.author.command[0]": cfg.Stages.Author.Command,
		"stages.train.command[0]": cfg.Stages.Train.Command, "stages.eval.command[0]": cfg.Stages.Eval.Command} {
		if len(argv) > 0 && path.IsAbs(argv[0]) && cfg.Runtime.Kind == configs.RuntimeNone {
			check[key] = argv[0]
		}
	}
	return check
}

// scriptHashes is the sha256 of each stage's sbatch script in tree.
func scriptHashes(tree *templates.Tree) map[string]string {
	out := map[string]string{}
	for _, s := range templates.Stages {
		f, _ := tree.Lookup(templates.Script(s))
		sum := sha256.Sum256(f.Data)
		out[s] = hex.EncodeToString(sum[:])
	}
	return out
}

// secretsData is secrets.env: the only place the policy API key is written.
func (d *Driver) secretsData(e *Entry) ([]byte, error) {
	key := d.Config.PolicyModel.APIKey.Reveal()
	if key == "" {
		return nil, fmt.Errorf("episode %s: policy_model.api_key: %s is not set in the environment: staging the episode needs the key", e.Episode, d.Config.SecretUnset)
	}
	if strings.ContainsAny(key, "\x00\r\n") {
		return nil, fmt.Errorf("episode %s: policy_model.api_key holds a newline or NUL", e.Episode)
	}
	return []byte("NEMORL_POLICY_API_KEY=" + key + "\n"), nil
}

// bundle is the tar stream of the tree, secrets.env and the manifest (and,
// when the author is submitted in the same command, the manifest to write
// once its job id is known).
func (d *Driver) bundle(e *Entry, tree *templates.Tree, withSubmit bool) ([]byte, error) {
	secrets, err := d.secretsData(e)
	if err != nil {
		return nil, err
	}
	manifest, err := d.manifest(e, "")
	if err != nil {
		return nil, err
	}
	files := append([]templates.File(nil), tree.Files...)
	files = append(files, templates.File{Path: SecretsFile, Mode: 0o600, Data: secrets},
		templates.File{Path: ManifestFile, Mode: 0o600, Data: manifest})
	if withSubmit {
		next, err := d.manifest(e, Author)
		if err != nil {
			return nil, err
		}
		files = append(files, templates.File{Path: manifestNext, Mode: 0o600, Data: next})
	}
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	now := d.now()
	for _, f := range files {
		if f.Path == "" {
			continue // the root: the script's fresh 0700 directory
		}
		h := &tar.Header{Name: f.Path, Mode: int64(f.Mode.Perm()), ModTime: now, Format: tar.FormatPAX}
		if f.IsDir() {
			h.Typeflag, h.Name = tar.TypeDir, f.Path+"/"
		} else {
			h.Typeflag, h.Size = tar.TypeReg, int64(len(f.Data))
		}
		if err := tw.WriteHeader(h); err != nil {
			return nil, fmt.Errorf("episode %s: bundle %s: %w", e.Episode, f.Path, err)
		}
		if !f.IsDir() {
			if _, err := tw.Write(f.Data); err != nil {
				return nil, fmt.Errorf("episode %s: bundle %s: %w", e.Episode, f.Path, err)
			}
		}
	}
	if err := tw.Close(); err != nil {
		return nil, fmt.Errorf("episode %s: bundle: %w", e.Episode, err)
	}
	return buf.Bytes(), nil
}

// stageRemote stages tree in one command (see stageScript). With req, the
// author's sbatch runs in the same command once the tree is in place, and
// its result is returned. mode is "new" or "restage".
func (d *Driver) stageRemote(ctx context.Context, e *Entry, tree *templates.Tree, mode string, req *slurm.SubmitRequest) (*slurm.SubmitResult, error) {
	stream, err := d.bundle(e, tree, req != nil)
	if err != nil {
		return nil, err
	}
	argv := []string{"sh", "-c", stageScript, "sh", mode, tree.Dir}
	if mode == "new" {
		checks := d.preflightChecks()
		keys := make([]string, 0, len(checks))
		for k := range checks {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			argv = append(argv, k+"="+checks[k])
		}
	}
	argv = append(argv, "--")
	var sbatch []string
	if req != nil {
		if sbatch, err = slurm.SbatchArgs(*req); err != nil {
			return nil, err
		}
		argv = append(argv, sbatch...)
	}
	res, err := d.Host.Run(ctx, remote.Command{Argv: argv, Stdin: bytes.NewReader(stream)})
	var ce *remote.CommandError
	if errors.As(err, &ce) && res != nil {
		switch ce.ExitStatus {
		case stageExitPreflight:
			f := strings.Split(strings.TrimSpace(lastLine(res.Stderr, "nemorl-stage: preflight\t")), "\t")
			if len(f) == 3 {
				return nil, &PreflightError{Key: f[0], Path: f[1], Host: d.Host.Name(), Err: preflightErr(f[2])}
			}
		case stageExitExists:
			return nil, fmt.Errorf("episode %s: %w: %s already exists on %s; refusing to overwrite it", e.Episode, ErrEpisodeExists, tree.Dir, d.Host.Name())
		case stageExitFailed:
			return nil, fmt.Errorf("episode %s: stage %s on %s: %s", e.Episode, tree.Dir, d.Host.Name(), remote.TrimStderr(res.Stderr))
		}
		if req != nil {
			// sbatch's own failure: name sbatch, not the staging script.
			c := *ce
			c.Command = shell.Join(sbatch)
			return nil, fmt.Errorf("slurm: submit: %w", &c)
		}
	}
	if err != nil {
		return nil, fmt.Errorf("episode %s: stage %s on %s: %w", e.Episode, tree.Dir, d.Host.Name(), err)
	}
	if req == nil {
		return nil, nil
	}
	r, err := slurm.ParseSbatch(res.Stdout, res.Stderr)
	if err != nil {
		return nil, fmt.Errorf("%w: %s", err, shell.Join(sbatch))
	}
	return &r, nil
}

// submitRemote runs sbatch for req and, in the same command, rewrites the
// manifest with the new job as stage's.
func (d *Driver) submitRemote(ctx context.Context, e *Entry, stage string, req slurm.SubmitRequest) (slurm.SubmitResult, error) {
	sbatch, err := slurm.SbatchArgs(req)
	if err != nil {
		return slurm.SubmitResult{}, err
	}
	manifest, err := d.manifest(e, stage)
	if err != nil {
		return slurm.SubmitResult{}, err
	}
	argv := append([]string{"sh", "-c", submitScript, "sh", path.Join(e.Dir, ManifestFile)}, sbatch...)
	res, err := d.Host.Run(ctx, remote.Command{Argv: argv, Stdin: bytes.NewReader(manifest)})
	var ce *remote.CommandError
	if errors.As(err, &ce) {
		c := *ce
		c.Command = shell.Join(sbatch)
		if c.Stderr == "" && res != nil {
			c.Stderr = remote.TrimStderr(res.Stderr)
		}
		return slurm.SubmitResult{}, fmt.Errorf("slurm: submit: %w", &c)
	}
	if err != nil {
		return slurm.SubmitResult{}, fmt.Errorf("slurm: submit: %s: %w", shell.Join(sbatch), err)
	}
	r, err := slurm.ParseSbatch(res.Stdout, res.Stderr)
	if err != nil {
		return r, fmt.Errorf("%w: %s", err, shell.Join(sbatch))
	}
	return r, nil
}

func preflightErr(reason string) error {
	switch reason {
	case "no such file or directory":
		return fs.ErrNotExist
	case "permission denied":
		return fs.ErrPermission
	}
	return errors.New(reason)
}

// lastLine returns the rest of the last line of b that starts with prefix.
func lastLine(b []byte, prefix string) string {
	var out string
	for _, l := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(l, prefix); ok {
			out = rest
		}
	}
	return out
}

// manifest renders the manifest of e; pending, when set, is a stage whose
// job id is not known yet: it appears as jobIDMarker for the script to
// fill in.
func (d *Driver) manifest(e *Entry, pending string) ([]byte, error) {
	rt := d.Config.Runtime
	m := Manifest{
		Episode: e.Episode, Created: e.Created, Version: d.Version, Host: e.Host, Dir: e.Dir,
		Isolation: e.Isolation, ConfigSHA256: e.ConfigSHA256, Scripts: e.Scripts, Jobs: map[string]string{},
	}
	if rt.Kind != configs.RuntimeNone {
		m.Images = map[string]string{Author: rt.Images.Author, Train: rt.Images.Train, Eval: rt.Images.Eval}
		m.Digests = map[string]string{}
		for stage, digest := range map[string]string{Author: rt.Digests.Author, Train: rt.Digests.Train, Eval: rt.Digests.Eval} {
			if digest != "" {
				m.Digests[stage] = digest
			}
		}
	}
	for s, sub := range e.Jobs {
		if sub.JobID != "" {
			m.Jobs[s] = sub.JobID
		}
	}
	if pending != "" {
		m.Jobs[pending] = jobIDMarker
	}
	b, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return nil, fmt.Errorf("episode %s: manifest: %w", e.Episode, err)
	}
	return append(b, '\n'), nil
}
