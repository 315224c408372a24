package ledger

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/nemorl/nemorl-slurm/internal/atomicfile"
	"github.com/nemorl/nemorl-slurm/record"
	"github.com/nemorl/nemorl-slurm/rules"
	"github.com/nemorl/nemorl-slurm/stages"
)

// LedgerFormat is the version of the ledger entry format.
const LedgerFormat = 1

// Ledger is the local, crash-safe record of every episode this user
// submitted: one JSON file per episode in Dir, replaced atomically (write a
// temp file, fsync, rename, fsync the directory) on every change. The
// intent to run sbatch is written before sbatch runs and the job id right
// after, so a crash between the two is seen on resume and resolved by
// looking the job up on the cluster before anything is submitted again.
type Ledger struct {
	Dir string
	// OnSave, when set, is told of every entry Save wrote (the engine's
	// tests count an episode's saves with it).
	OnSave func(e *Entry)
}

// DefaultLedgerDir is $XDG_STATE_HOME/nemorl-slurm, else
// ~/.local/state/nemorl-slurm.
func DefaultLedgerDir() (string, error) {
	if d := os.Getenv("XDG_STATE_HOME"); d != "" && filepath.IsAbs(d) {
		return filepath.Join(d, "nemorl-slurm"), nil
	}
	home, err := os.UserHomeDir()
	if err != nil {
		return "", fmt.Errorf("ledger: no state directory: set XDG_STATE_HOME or HOME: %w", err)
	}
	return filepath.Join(home, ".local", "state", "nemorl-slurm"), nil
}

// OpenLedger makes dir (0700) if needed and returns its ledger.
func OpenLedger(dir string) (*Ledger, error) {
	if err := os.MkdirAll(filepath.Join(dir, "episodes"), 0o700); err != nil {
		return nil, fmt.Errorf("ledger: %w", err)
	}
	return &Ledger{Dir: dir}, nil
}

// Entry is one episode in the ledger.
type Entry struct {
	Format  int       `json:"format"`
	Episode string    `json:"episode"`
	Created time.Time `json:"created"`
	// ConfigPath is the absolute path of the config the episode was
	// submitted with; commands that name no --config use it again.
	ConfigPath   string `json:"config_path"`
	ConfigSHA256 string `json:"config_sha256"`
	// Host is where Slurm commands ran ("local", "nemorl@127.0.0.1:2222").
	Host string `json:"host"`
	// Cluster is the config's clusters: entry the episode was placed on
	// ("" under a config of one cluster:): every later command reaches it
	// through that entry.
	Cluster string `json:"cluster,omitempty"`
	// Dir is WORKDIR/EPISODE on the cluster.
	Dir       string `json:"dir"`
	Isolation string `json:"isolation"`
	// PolicyBaseURL is the one of policy_model.base_url this episode's
	// author was given (a list spreads episodes over its endpoints).
	PolicyBaseURL string `json:"policy_base_url,omitempty"`
	// Labels are the user's KEY=VALUE tags (submit --label), for list.
	Labels map[string]string `json:"labels,omitempty"`
	// Ended holds, for the stages whose job has ended and been collected
	// (the author, once its patch is verified), the job as sacct last
	// showed it: they are not queried again (a job slurmctld has forgotten
	// and slurmdbd cannot answer for would otherwise look lost).
	Ended map[stages.Stage]rules.JobSummary `json:"ended,omitempty"`
	// Overrides are the --set KEY=VALUE the episode was submitted with:
	// every later command applies them to ConfigPath again.
	Overrides []string `json:"overrides,omitempty"`
	// Staged is set once every file of the episode is on the cluster.
	Staged bool `json:"staged"`
	// Scripts holds the sha256 of each stage's sbatch script as staged.
	Scripts map[stages.Stage]string `json:"scripts_sha256,omitempty"`
	// TimeLimitMinutes holds each stage's time limit as its script asks
	// Slurm for it (whole minutes, as Slurm keeps it): a job whose limit
	// differs was changed by someone else.
	TimeLimitMinutes map[stages.Stage]int `json:"time_limit_minutes,omitempty"`
	// KillWaitSeconds is the cluster's KillWait the scripts were rendered
	// with (0: unknown, Slurm's default assumed): a restage renders the
	// same scripts, with the sha256s recorded.
	KillWaitSeconds int `json:"kill_wait_s,omitempty"`
	// Jobs holds the submissions, by stage: each stage's current attempt.
	Jobs map[stages.Stage]*Submission `json:"jobs"`
	// Retried holds, by stage, the earlier attempts of the stages that
	// were run again (retry.go), oldest first.
	Retried map[stages.Stage][]rules.Attempt `json:"retried,omitempty"`
	// CancelRequested names why the episode's jobs were cancelled (by
	// cancel, a deadline or an interrupt): nothing more is submitted.
	CancelRequested string `json:"cancel_requested,omitempty"`
	// Author is the author's verified record, once its patch was checked.
	Author *record.Author `json:"author_record,omitempty"`
	// Cleaned is when clean removed the episode's directory on the cluster.
	Cleaned time.Time `json:"cleaned,omitzero"`
	// Outcome is set once, when the episode is final.
	Outcome *rules.Outcome `json:"outcome,omitempty"`
	// Seal is the HMAC-SHA256 of the rest of the entry under the ledger's
	// seal key (seal.go), written with every save; Load checks it.
	Seal string `json:"seal,omitempty"`
	// EvalOutputChecked is set once eval's out.log was found absent or a
	// regular file after train ended (a planted FIFO would stall eval).
	EvalOutputChecked bool `json:"eval_output_checked,omitempty"`
	// CancelsIssued lists the job ids this tool scancelled, so that a
	// CANCELLED job can be told from one the policy cancelled.
	CancelsIssued []string `json:"cancels_issued,omitempty"`
}

// Submission is one stage's sbatch: the intent, written before sbatch
// runs, and the job id, written after.
type Submission struct {
	Intent    time.Time `json:"intent"`
	JobID     string    `json:"job_id,omitempty"`
	Submitted time.Time `json:"submitted,omitzero"`
	// Adopted is set when the job id was found on the cluster after a
	// crash rather than returned by sbatch.
	Adopted bool `json:"adopted,omitempty"`
	// Attempt numbers the stage's submissions: 1 (or 0, in entries from
	// before retries) is the first.
	Attempt int `json:"attempt,omitempty"`
	// After is the job this one was submitted to wait for (afterok).
	After string `json:"after,omitempty"`
	// Array is set when the job is a task of a job array that ran several
	// episodes' jobs of one stage from one sbatch: JobID is then the
	// task's "ARRAY_TASK". It is saved with the intent, before sbatch.
	Array *ArrayTask `json:"array,omitempty"`
}

// ArrayTask is an episode's place in a job array: the array's job name
// and --comment tag (how it is found again after a crash), the sha256 of
// its batch script (which holds the table of its tasks: each task's
// episode directory and the sha256 of the staged script it runs), where
// that script was staged, and this episode's task index.
type ArrayTask struct {
	Name         string `json:"name"`
	Comment      string `json:"comment"`
	ScriptSHA256 string `json:"script_sha256"`
	Script       string `json:"script"`
	Task         int    `json:"task"`
}

// Final reports whether the episode has its outcome.
func (e *Entry) Final() bool { return e.Outcome != nil }

// JobID returns the job id of stage, or "".
func (e *Entry) JobID(stage stages.Stage) string {
	if s := e.Jobs[stage]; s != nil {
		return s.JobID
	}
	return ""
}

func (l *Ledger) path(ep string) string {
	return filepath.Join(l.Dir, "episodes", ep+".json")
}

// Path returns the file of an episode's entry.
func (l *Ledger) Path(ep string) string { return l.path(ep) }

// PromptPath is where the episode's author prompt is kept, so that staging
// can be redone after a crash.
func (l *Ledger) PromptPath(ep string) string {
	return filepath.Join(l.Dir, "episodes", ep+".prompt.txt")
}

// cancelPath is the episode's cancel marker: written by whoever cancels,
// honoured by whoever owns the episode.
func (l *Ledger) cancelPath(ep string) string {
	return filepath.Join(l.Dir, "episodes", ep+".cancel")
}

// RequestCancel records that the episode is to be cancelled, for reason,
// unless it already is; it returns the reason on record (the first one).
// The marker is sealed like the entries.
func (l *Ledger) RequestCancel(ep, reason string) (string, error) {
	if r := l.CancelRequest(ep); r != "" {
		return r, nil
	}
	key, err := l.sealKey(true)
	if err != nil {
		return "", err
	}
	data := reason + "\n" + mac(key, "cancel", ep, []byte(reason)) + "\n"
	if err := atomicfile.Write(l.cancelPath(ep), []byte(data), 0o600); err != nil {
		return "", fmt.Errorf("ledger: %w", err)
	}
	return reason, nil
}

// CancelRequest returns the reason the episode was cancelled for, or "".
// A marker whose seal does not verify (not written by nemorl-slurm) is
// ignored: a planted marker would turn a policy's 0 into a masked sample.
func (l *Ledger) CancelRequest(ep string) string {
	b, err := os.ReadFile(l.cancelPath(ep))
	if err != nil {
		return ""
	}
	reason, seal, _ := strings.Cut(strings.TrimSpace(string(b)), "\n")
	key, err := l.sealKey(false)
	if err != nil || reason == "" || !sameMAC(strings.TrimSpace(seal), mac(key, "cancel", ep, []byte(reason))) {
		return ""
	}
	return reason
}

// ErrEpisodeExists is matched by Create's (and Submit's) error when the
// episode id is already in the ledger or its directory already exists on
// the cluster; ErrBadEpisodeID when the id is not a usable one. Neither
// leaves anything behind.
var (
	ErrEpisodeExists = errors.New("already exists")
	ErrBadEpisodeID  = errors.New("bad episode id")
)

// ErrNotInLedger is matched by Load's error for an unknown episode.
var ErrNotInLedger = errors.New("not in the ledger")

// Create writes a new entry and its prompt; it fails if the episode exists.
func (l *Ledger) Create(e *Entry, prompt []byte) error {
	if !stages.ValidEpisode(e.Episode) {
		return fmt.Errorf("ledger: %w %q", ErrBadEpisodeID, e.Episode)
	}
	if _, err := os.Stat(l.path(e.Episode)); err == nil {
		return fmt.Errorf("episode %s %w in the ledger (%s)", e.Episode, ErrEpisodeExists, l.path(e.Episode))
	}
	if err := atomicfile.Write(l.PromptPath(e.Episode), prompt, 0o600); err != nil {
		return fmt.Errorf("ledger: %w", err)
	}
	return l.Save(e)
}

// Save replaces the episode's entry atomically and durably, sealed
// (seal.go).
func (l *Ledger) Save(e *Entry) error {
	e.Format = LedgerFormat
	key, err := l.sealKey(true)
	if err != nil {
		return err
	}
	if e.Seal, err = sealEntry(key, e); err != nil {
		return fmt.Errorf("ledger: %s: seal: %w", e.Episode, err)
	}
	b, err := json.MarshalIndent(e, "", "  ")
	if err != nil {
		return fmt.Errorf("ledger: %s: %w", e.Episode, err)
	}
	if err := atomicfile.Write(l.path(e.Episode), append(b, '\n'), 0o600); err != nil {
		return fmt.Errorf("ledger: %w", err)
	}
	if l.OnSave != nil {
		l.OnSave(e)
	}
	return nil
}

// Load reads one episode's entry.
func (l *Ledger) Load(ep string) (*Entry, error) {
	if !stages.ValidEpisode(ep) {
		return nil, fmt.Errorf("%w %q: want ep-… (letters, digits and ._- only)", ErrBadEpisodeID, ep)
	}
	b, err := os.ReadFile(l.path(ep))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("episode %s: %w (%s)", ep, ErrNotInLedger, l.Dir)
	}
	if err != nil {
		return nil, fmt.Errorf("ledger: %w", err)
	}
	var e Entry
	if err := json.Unmarshal(b, &e); err != nil {
		return nil, fmt.Errorf("ledger: %s: %w", l.path(ep), err)
	}
	if e.Format != LedgerFormat || e.Episode != ep {
		return nil, fmt.Errorf("ledger: %s: format %d episode %q, want format %d episode %q", l.path(ep), e.Format, e.Episode, LedgerFormat, ep)
	}
	if err := l.checkSeal(&e); err != nil {
		// Whatever it says is not trusted: no job of it is watched or
		// submitted again, no outcome of it is reported as it stands.
		e.Outcome = tamperedOutcome(&e, err, l.path(ep))
	}
	if e.Jobs == nil {
		e.Jobs = map[stages.Stage]*Submission{}
	}
	if e.CancelRequested == "" && !e.Final() {
		e.CancelRequested = l.CancelRequest(ep)
	}
	return &e, nil
}

// List returns every entry, oldest first (episode ids sort by time).
func (l *Ledger) List() ([]*Entry, error) {
	names, err := filepath.Glob(filepath.Join(l.Dir, "episodes", "*.json"))
	if err != nil {
		return nil, fmt.Errorf("ledger: %w", err)
	}
	sort.Strings(names)
	var out []*Entry
	for _, n := range names {
		e, err := l.Load(strings.TrimSuffix(filepath.Base(n), ".json"))
		if err != nil {
			return nil, err
		}
		out = append(out, e)
	}
	return out, nil
}

// The episode locks (TryLock, Lock.Unlock, Locked) are in locks.go.
