package train

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
)

// PatchError is returned by ApplyPatch when `git apply --check` refuses the
// patch: the policy's patch does not apply to the pinned checkouts, and Run
// prints status patch_failed.
type PatchError struct {
	// Output is git's output (its end, if long).
	Output string
	Err    error
}

func (e *PatchError) Error() string {
	return fmt.Sprintf("the patch does not apply: %v: %s", e.Err, e.Output)
}

func (e *PatchError) Unwrap() error { return e.Err }

// ErrEmptyPatch is returned for a patch file that is empty or only
// whitespace: the author stage ends such an episode (no_patch) before
// train, so reaching train with one is a launcher fault.
var ErrEmptyPatch = errors.New("the patch is empty")

// maxGitOutput bounds the git output kept in a PatchError.
const maxGitOutput = 8 << 10

// ApplyPatch applies Plan.Patch in Plan.WorkDir as the reference run.sh
// does: `git apply --check`, then `git apply`. A refused check is a
// *PatchError; anything else (a missing or empty patch, git missing, a
// failure of the second command after a passing check, a cancelled ctx) is
// a plain error.
//
// git runs with a clean environment: only PATH, HOME set to a fresh empty
// directory, GIT_CONFIG_NOSYSTEM=1 (no system or user configuration),
// LC_ALL=C, no terminal prompts, hooks pointed at /dev/null, and
// GIT_CEILING_DIRECTORIES set to WorkDir's parent so that a repository
// around WorkDir is never used (git apply in a repository's subdirectory
// would skip the paths outside it). Outside a repository git apply rejects
// paths that leave WorkDir and changes beyond symbolic links.
func ApplyPatch(ctx context.Context, p Plan) error {
	p = p.withDefaults()
	data, err := os.ReadFile(p.Patch)
	if err != nil {
		return fmt.Errorf("read the patch: %w", err)
	}
	if len(bytes.TrimSpace(data)) == 0 {
		return fmt.Errorf("%s: %w", p.Patch, ErrEmptyPatch)
	}
	patch, err := filepath.Abs(p.Patch)
	if err != nil {
		return err
	}
	home, err := os.MkdirTemp("", "nemorl-git-home-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(home)
	path := os.Getenv("PATH")
	if path == "" {
		path = "/usr/local/bin:/usr/bin:/bin"
	}
	env := []string{
		"PATH=" + path,
		"HOME=" + home,
		"XDG_CONFIG_HOME=" + filepath.Join(home, ".config"),
		"GIT_CONFIG_NOSYSTEM=1",
		"GIT_CONFIG_GLOBAL=/dev/null",
		"GIT_CEILING_DIRECTORIES=" + filepath.Dir(p.WorkDir),
		"GIT_TERMINAL_PROMPT=0",
		"LC_ALL=C",
	}
	git := func(args ...string) (string, error) {
		argv := append([]string{"-c", "core.hooksPath=/dev/null", "apply"}, args...)
		cmd := exec.CommandContext(ctx, p.Git, argv...)
		cmd.Dir = p.WorkDir
		cmd.Env = env
		out, err := cmd.CombinedOutput()
		if len(out) > maxGitOutput {
			out = append([]byte("…"), out[len(out)-maxGitOutput:]...)
		}
		return string(bytes.TrimSpace(out)), err
	}
	out, err := git("--check", patch)
	if err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		var exit *exec.ExitError
		if errors.As(err, &exit) && exit.Exited() {
			return &PatchError{Output: out, Err: err}
		}
		return fmt.Errorf("git apply --check: %w: %s", err, out)
	}
	if out, err := git(patch); err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return fmt.Errorf("git apply failed after a passing check: %w: %s", err, out)
	}
	return nil
}
