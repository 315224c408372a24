package author

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/nemorl/nemorl-slurm/internal/atomicfile"
	"github.com/nemorl/nemorl-slurm/record"
)

// Output files of the author stage, in FinishInput.OutDir.
const (
	ResponseFile = "response.json"
	PatchFile    = "change.diff"
)

// The work dir paths the patch covers; changes anywhere else are dropped.
const (
	RecipePath = "recipe.yaml"
	NeMoRLPath = "NeMo-RL"
)

// FinishInput describes a finished author run.
type FinishInput struct {
	// WorkDir is the work dir Baseline committed (recipe.yaml, NeMo-RL/,
	// .git/).
	WorkDir string
	// Baseline is the baseline commit: pass the id Baseline returned. It is
	// resolved in WorkDir's repository; "" means "HEAD", which is the
	// baseline only if the policy made no commit of its own (a commit of
	// its edits would move HEAD and hide them from the diff).
	Baseline string
	// TranscriptPath is Claude Code's stream-json stdout.
	TranscriptPath string
	// OutDir receives response.json and change.diff (created if missing).
	OutDir string
	// ExitStatus is the claude process's exit status (-1: killed by a
	// signal); TimedOut is true when the research time limit ended it.
	ExitStatus int
	TimedOut   bool
	// Model names the model in response.json ("": the transcript's).
	Model string
	// Now gives response.json's created_at (nil: time.Now).
	Now func() time.Time
	// Log receives warnings, such as paths git could not add to the patch
	// (nil: discarded).
	Log io.Writer
}

// Finish turns a finished author run into the stage's outputs. It parses
// the transcript, writes OutDir/change.diff (the policy's changes to
// recipe.yaml and NeMo-RL/ against the baseline commit, binary patches and
// deletions included; 0 bytes when there are none) and OutDir/response.json
// (Transcript.Response), each to a temporary file renamed into place, mode
// 0600, and returns the validated author record, ready for record.Write.
//
// The diff is that of
//
//	git add -A -- recipe.yaml NeMo-RL
//	git diff --cached --binary <baseline> -- recipe.yaml NeMo-RL
//
// but made in a private repository: a temporary bare repository that
// borrows WorkDir/.git/objects (objects/info/alternates) and has its own
// index, config and hooks directory. Nothing of WorkDir/.git is used but its
// objects (and, for a Baseline that is not a full commit id, its refs), so a
// config, hook, attribute driver, info/exclude or index the policy planted
// there takes no part, and Finish leaves WorkDir untouched. The worktree's
// .gitignore and .gitattributes files still apply, as they did to the
// baseline commit (a top-level .gitignore the policy wrote can keep its new
// files out of the patch, as in the reference). A file git cannot add (an
// unreadable file, a new nested repository without a commit) is left out,
// with a warning on Log, rather than failing the stage. Renames are detected (diff.renames); files_changed
// counts the diff's "diff --git" sections, so a rename counts once.
//
// Errors name the file or git command and carry the end of git's stderr.
// An error means no record: the outputs may be partly written.
func Finish(ctx context.Context, in FinishInput) (*record.Author, error) {
	switch {
	case in.WorkDir == "":
		return nil, errors.New("author finish: no work dir")
	case in.TranscriptPath == "":
		return nil, errors.New("author finish: no transcript path")
	case in.OutDir == "":
		return nil, errors.New("author finish: no output dir")
	case in.ExitStatus < -1 || in.ExitStatus > 255:
		return nil, fmt.Errorf("author finish: exit status %d outside -1..255", in.ExitStatus)
	}
	now := in.Now
	if now == nil {
		now = time.Now
	}
	work, err := filepath.Abs(in.WorkDir)
	if err != nil {
		return nil, fmt.Errorf("author finish: work dir: %w", err)
	}

	tr, err := readTranscript(in.TranscriptPath)
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(in.OutDir, 0o700); err != nil {
		return nil, fmt.Errorf("author finish: %w", err)
	}

	g, err := newGit()
	if err != nil {
		return nil, err
	}
	defer g.close()
	var patch patchStats
	if err := writeFile(filepath.Join(in.OutDir, PatchFile), func(w io.Writer) error {
		return g.diff(ctx, work, in.Baseline, patch.writer(w), in.Log)
	}); err != nil {
		return nil, err
	}

	data, err := tr.Response("", now(), in.Model, in.TimedOut).JSON()
	if err != nil {
		return nil, fmt.Errorf("author finish: encode %s: %w", ResponseFile, err)
	}
	if err := writeFile(filepath.Join(in.OutDir, ResponseFile), func(w io.Writer) error {
		if _, err := w.Write(data); err != nil {
			return fmt.Errorf("write %s: %w", filepath.Join(in.OutDir, ResponseFile), err)
		}
		return nil
	}); err != nil {
		return nil, err
	}
	respSum := sha256.Sum256(data)

	rec := &record.Author{
		PatchSHA256:    hex.EncodeToString(patch.sum.Sum(nil)),
		PatchBytes:     patch.bytes,
		FilesChanged:   patch.files.files,
		Turns:          tr.Turns(),
		ExitStatus:     in.ExitStatus,
		TimedOut:       in.TimedOut,
		ResponseSHA256: hex.EncodeToString(respSum[:]),
		TerminalReason: tr.TerminalReason(in.TimedOut),
		ModelCalls:     tr.ModelCalls(),
		DroppedEvents:  tr.Dropped(),
	}
	if err := rec.Validate(); err != nil {
		return nil, fmt.Errorf("author finish: record: %w", err)
	}
	return rec, nil
}

func readTranscript(path string) (*Transcript, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("author finish: transcript: %w", err)
	}
	defer f.Close()
	tr, err := ParseStreamJSON(f)
	if err != nil {
		return nil, fmt.Errorf("author finish: transcript %s: %w", path, err)
	}
	return tr, nil
}

// Baseline makes the baseline commit of a fresh work dir, before Claude Code
// runs: git init, the fixed identity as user.name/user.email in the new
// repository's config (so the policy can commit), git add -A, commit
// "baseline" (no hooks, no signing, a fixed date, so the id depends on the
// tree alone). It returns the commit id, to pass to Finish. The .gitignore
// files of the tree apply: ignored files are not in the baseline (nor, later,
// in the diff). A work dir that already has a .git is refused.
func Baseline(ctx context.Context, workDir string) (string, error) {
	work, err := filepath.Abs(workDir)
	if err != nil {
		return "", fmt.Errorf("author baseline: %w", err)
	}
	if fi, err := os.Stat(work); err != nil {
		return "", fmt.Errorf("author baseline: %w", err)
	} else if !fi.IsDir() {
		return "", fmt.Errorf("author baseline: %s is not a directory", work)
	}
	dotGit := filepath.Join(work, ".git")
	if _, err := os.Lstat(dotGit); err == nil {
		return "", fmt.Errorf("author baseline: %s already exists", dotGit)
	} else if !errors.Is(err, os.ErrNotExist) {
		return "", fmt.Errorf("author baseline: %w", err)
	}
	g, err := newGit()
	if err != nil {
		return "", err
	}
	defer g.close()
	tmpl, err := g.emptyDir("template")
	if err != nil {
		return "", err
	}
	gd, wt := "--git-dir="+dotGit, "--work-tree="+work
	steps := [][]string{
		{"init", "-q", "--template=" + tmpl, work},
		{gd, "config", "user.name", gitName},
		{gd, "config", "user.email", gitEmail},
		{gd, wt, "add", "-A"},
		{gd, wt, "commit", "-q", "--no-verify", "--no-gpg-sign", "--allow-empty", "-m", "baseline"},
	}
	for _, args := range steps {
		if err := g.run(ctx, work, nil, args...); err != nil {
			return "", fmt.Errorf("author baseline: %w", err)
		}
	}
	id, err := g.output(ctx, work, gd, "rev-parse", "--verify", "HEAD^{commit}")
	if err != nil {
		return "", fmt.Errorf("author baseline: %w", err)
	}
	return id, nil
}

func (g *git) emptyDir(name string) (string, error) {
	d := filepath.Join(g.tmp, name)
	if err := os.Mkdir(d, 0o700); err != nil {
		return "", fmt.Errorf("git: %w", err)
	}
	return d, nil
}

// diff writes the patch of work's recipe.yaml and NeMo-RL/ against
// baseline to w, using a private repository (see Finish).
func (g *git) diff(ctx context.Context, work, baseline string, w, log io.Writer) error {
	dotGit := filepath.Join(work, ".git")
	objects := filepath.Join(dotGit, "objects")
	if fi, err := os.Stat(objects); err != nil || !fi.IsDir() {
		return fmt.Errorf("author finish: %s is not a git object directory (was the work dir's .git removed or replaced?)", objects)
	}
	tmpl, err := g.emptyDir("template")
	if err != nil {
		return err
	}
	priv := filepath.Join(g.tmp, "repo.git")
	if err := g.run(ctx, g.tmp, nil, "init", "-q", "--bare", "--template="+tmpl, priv); err != nil {
		return fmt.Errorf("author finish: %w", err)
	}
	alt := filepath.Join(priv, "objects", "info", "alternates")
	if err := os.MkdirAll(filepath.Dir(alt), 0o700); err != nil {
		return fmt.Errorf("author finish: %w", err)
	}
	if err := os.WriteFile(alt, []byte(objects+"\n"), 0o600); err != nil {
		return fmt.Errorf("author finish: %w", err)
	}
	commit, err := g.resolve(ctx, priv, dotGit, baseline)
	if err != nil {
		return err
	}

	gd, wt := "--git-dir="+priv, "--work-tree="+work
	if err := g.run(ctx, work, nil, gd, wt, "read-tree", commit); err != nil {
		return fmt.Errorf("author finish: %w", err)
	}
	// git add fails on a pathspec that matches nothing: name only the paths
	// that exist in the worktree or in the baseline.
	listed, err := g.output(ctx, work, gd, "ls-tree", "-z", "--name-only", commit, "--", RecipePath, NeMoRLPath)
	if err != nil {
		return fmt.Errorf("author finish: %w", err)
	}
	inBaseline := map[string]bool{}
	for _, p := range strings.Split(listed, "\x00") {
		inBaseline[p] = true
	}
	var specs []string
	for _, p := range []string{RecipePath, NeMoRLPath} {
		if _, err := os.Lstat(filepath.Join(work, p)); err == nil || inBaseline[p] {
			specs = append(specs, p)
		}
	}
	if len(specs) > 0 {
		// --ignore-errors: a file git cannot add (unreadable, a new nested
		// repository without a commit) is left out instead of failing the
		// stage. git then exits 1, as it does when a top-level .gitignore
		// ignores a named path; both leave a usable index.
		args := append([]string{"--literal-pathspecs", gd, wt, "add", "-A", "--ignore-errors", "--"}, specs...)
		if err := g.run(ctx, work, nil, args...); err != nil {
			var ge *gitError
			if !errors.As(err, &ge) || ge.exitCode != 1 || ge.ctxErr != nil {
				return fmt.Errorf("author finish: %w", err)
			}
			if log != nil {
				fmt.Fprintf(log, "author finish: warning: some paths were not added to the patch: %v\n", err)
			}
		}
	}
	if err := g.run(ctx, work, w, "--literal-pathspecs", gd, wt, "diff", "--cached", "--binary",
		"--no-color", "--no-ext-diff", "--no-textconv", "--src-prefix=a/", "--dst-prefix=b/",
		commit, "--", RecipePath, NeMoRLPath); err != nil {
		return fmt.Errorf("author finish: %w", err)
	}
	return nil
}

// resolve returns the full commit id of baseline: a full object id is
// looked up in the private repository, anything else (HEAD, a branch) is
// resolved in the work dir's repository first.
func (g *git) resolve(ctx context.Context, priv, workGit, baseline string) (string, error) {
	if baseline == "" {
		baseline = "HEAD"
	}
	if strings.HasPrefix(baseline, "-") || strings.ContainsAny(baseline, "\x00\n") {
		return "", fmt.Errorf("author finish: bad baseline %q", baseline)
	}
	id := baseline
	if !isObjectID(baseline) {
		var err error
		id, err = g.output(ctx, g.tmp, "--git-dir="+workGit, "rev-parse", "--verify", "--end-of-options", baseline+"^{commit}")
		if err != nil {
			return "", fmt.Errorf("author finish: baseline %q: %w", baseline, err)
		}
	}
	full, err := g.output(ctx, g.tmp, "--git-dir="+priv, "rev-parse", "--verify", "--end-of-options", id+"^{commit}")
	if err != nil {
		return "", fmt.Errorf("author finish: baseline %q: %w", baseline, err)
	}
	return full, nil
}

// isObjectID reports whether s is a full SHA-1 or SHA-256 object id.
func isObjectID(s string) bool {
	if len(s) != 40 && len(s) != 64 {
		return false
	}
	for i := range len(s) {
		c := s[i] | 0x20
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

// patchStats measures the patch as it is written: size, sha256 and files.
type patchStats struct {
	bytes int64
	sum   hash.Hash
	files headerCounter
}

func (p *patchStats) writer(w io.Writer) io.Writer {
	p.sum = sha256.New()
	return io.MultiWriter(w, p.sum, &p.files, countWriter{&p.bytes})
}

type countWriter struct{ n *int64 }

func (c countWriter) Write(p []byte) (int, error) {
	*c.n += int64(len(p))
	return len(p), nil
}

// headerCounter counts the lines that start with "diff --git " (one per
// file of a git patch). No other line of a git patch can: hunk lines start
// with ' ', '+', '-' or '\\', base85 lines hold no space, and git quotes
// file names that hold a newline.
type headerCounter struct {
	pos   int // bytes of the header matched on this line; -1: no match
	files int
}

const fileHeader = "diff --git "

func (c *headerCounter) Write(p []byte) (int, error) {
	for _, b := range p {
		switch {
		case b == '\n':
			c.pos = 0
		case c.pos < 0:
		case b == fileHeader[c.pos]:
			c.pos++
			if c.pos == len(fileHeader) {
				c.files++
				c.pos = -1
			}
		default:
			c.pos = -1
		}
	}
	return len(p), nil
}

// writeFile writes path through a temporary file in its directory (mode
// 0600, synced) renamed into place. An error of fill is returned as is.
func writeFile(path string, fill func(io.Writer) error) error {
	return atomicfile.WriteFunc(path, 0o600, fill)
}
