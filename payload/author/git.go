package author

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"
)

// The fixed identity and date of every commit this package makes. With a
// fixed date the baseline commit id depends on the tree alone.
const (
	gitName  = "nemorl-slurm"
	gitEmail = "nemorl-slurm@localhost"
	gitDate  = "2000-01-01T00:00:00Z"
)

// gitConfig is passed as -c to every git command: no hooks, no fsmonitor,
// no signing, no content conversion, no background maintenance, no colour.
// Command-line config wins over a repository's own config.
var gitConfig = []string{
	"core.hooksPath=/dev/null",
	"core.fsmonitor=false",
	"core.untrackedCache=false",
	"core.autocrlf=false",
	"core.safecrlf=false",
	"core.fileMode=true",
	"core.symlinks=true",
	"core.ignoreCase=false",
	"core.precomposeUnicode=false",
	"core.sparseCheckout=false",
	"core.splitIndex=false",
	"commit.gpgSign=false",
	"gc.auto=0",
	"maintenance.auto=false",
	"color.ui=false",
	"diff.renames=true",
	"init.defaultBranch=main",
}

// git runs git commands with an environment of its own: only PATH and
// TMPDIR are inherited (no GIT_* variable of the caller), HOME and
// XDG_CONFIG_HOME are an empty temporary directory, and the system and
// global config files are not read, so neither a .gitconfig the policy
// wrote nor the caller's settings take part.
type git struct {
	tmp string // removed by close
	env []string
}

func newGit() (*git, error) {
	tmp, err := os.MkdirTemp("", "nemorl-author-git-*")
	if err != nil {
		return nil, fmt.Errorf("git: temporary directory: %w", err)
	}
	home := filepath.Join(tmp, "home")
	if err := os.Mkdir(home, 0o700); err != nil {
		os.RemoveAll(tmp)
		return nil, fmt.Errorf("git: temporary home: %w", err)
	}
	env := []string{
		"PATH=" + os.Getenv("PATH"),
		"HOME=" + home,
		"XDG_CONFIG_HOME=" + filepath.Join(home, ".config"),
		"GIT_CONFIG_NOSYSTEM=1",
		"GIT_CONFIG_GLOBAL=/dev/null",
		"GIT_ATTR_NOSYSTEM=1",
		"GIT_NO_REPLACE_OBJECTS=1",
		"GIT_TERMINAL_PROMPT=0",
		"GIT_AUTHOR_NAME=" + gitName,
		"GIT_AUTHOR_EMAIL=" + gitEmail,
		"GIT_AUTHOR_DATE=" + gitDate,
		"GIT_COMMITTER_NAME=" + gitName,
		"GIT_COMMITTER_EMAIL=" + gitEmail,
		"GIT_COMMITTER_DATE=" + gitDate,
		"LC_ALL=C",
		"TZ=UTC",
	}
	if d := os.Getenv("TMPDIR"); d != "" {
		env = append(env, "TMPDIR="+d)
	}
	return &git{tmp: tmp, env: env}, nil
}

func (g *git) close() { os.RemoveAll(g.tmp) }

// run runs `git <args>` in dir, its stdout to stdout (nil: discarded). The
// error names the command and carries the end of its stderr.
func (g *git) run(ctx context.Context, dir string, stdout io.Writer, args ...string) error {
	full := make([]string, 0, 2*len(gitConfig)+len(args))
	for _, c := range gitConfig {
		full = append(full, "-c", c)
	}
	full = append(full, args...)
	cmd := exec.CommandContext(ctx, "git", full...)
	cmd.Dir = dir
	cmd.Env = g.env
	cmd.Stdout = stdout
	var stderr tailBuffer
	cmd.Stderr = &stderr
	cmd.WaitDelay = 5 * time.Second
	if err := cmd.Run(); err != nil {
		ge := &gitError{args: args, dir: dir, err: err, stderr: stderr.String(), exitCode: -1}
		if ee, ok := err.(*exec.ExitError); ok {
			ge.exitCode = ee.ExitCode()
		}
		if ctx.Err() != nil {
			ge.ctxErr = ctx.Err()
		}
		return ge
	}
	return nil
}

// gitError is a failed git command.
type gitError struct {
	args     []string
	dir      string
	err      error
	ctxErr   error
	stderr   string // its end, trimmed
	exitCode int    // -1: not started or killed
}

func (e *gitError) Error() string {
	msg := fmt.Sprintf("git %s (in %s): %v", strings.Join(e.args, " "), e.dir, e.err)
	if e.ctxErr != nil {
		msg += " (" + e.ctxErr.Error() + ")"
	}
	if e.stderr != "" {
		msg += ": " + e.stderr
	}
	return msg
}

func (e *gitError) Unwrap() []error {
	if e.ctxErr != nil {
		return []error{e.err, e.ctxErr}
	}
	return []error{e.err}
}

// output runs git and returns its stdout, trimmed.
func (g *git) output(ctx context.Context, dir string, args ...string) (string, error) {
	var b strings.Builder
	err := g.run(ctx, dir, &b, args...)
	return strings.TrimSpace(b.String()), err
}

// tailBuffer keeps the last stderrMax bytes written to it.
type tailBuffer struct {
	b         []byte
	truncated bool
}

const stderrMax = 2048

func (t *tailBuffer) Write(p []byte) (int, error) {
	t.b = append(t.b, p...)
	if len(t.b) > 2*stderrMax {
		t.b = append(t.b[:0], t.b[len(t.b)-stderrMax:]...)
		t.truncated = true
	}
	return len(p), nil
}

func (t *tailBuffer) String() string {
	b := t.b
	cut := t.truncated
	if len(b) > stderrMax {
		b, cut = b[len(b)-stderrMax:], true
	}
	s := strings.TrimSpace(strings.ToValidUTF8(string(b), "\uFFFD"))
	if cut && s != "" {
		s = "…" + s
	}
	return s
}
