package episode

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/nemorl/nemorl-slurm/configs"
	"github.com/nemorl/nemorl-slurm/ledger"
	"github.com/nemorl/nemorl-slurm/remote"
	"github.com/nemorl/nemorl-slurm/slurm"
	"github.com/nemorl/nemorl-slurm/stages"
)

// SecretsFile is the author stage's secrets file, relative to the episode
// directory. It holds one line, NEMORL_POLICY_API_KEY=<key>; the author job
// reads and deletes it.
const SecretsFile = stages.SecretsFile

// ManifestFile is the episode's plan on the cluster.
const ManifestFile = "manifest.json"

// Driver stages, submits, watches and collects episodes of one config on
// one cluster.
//
// Set the fields, then call. Host, Slurm, Config, Ledger, Version,
// ConfigPath, ConfigSHA256 and Overrides are read once, at the first call,
// into the Driver's parts: set them before it, and leave them (Config is a
// pointer the parts share: its fields are read where they are used). Logf,
// Now, Labels and DiscardNotCreated are read at each use and may change
// between calls (serve sets Logf after Preflight).
//
// The Driver keeps the poll loop (Watch, Inspect, Engine), what it does
// with each episode (advance, retry, finish) and Cancel; the rest is done
// by its parts (driverParts: account, collector, stager, submitter).
type Driver struct {
	Config *configs.Config
	// ConfigPath and ConfigSHA256 name the config file; they go into the
	// ledger and the manifest.
	ConfigPath, ConfigSHA256 string
	Host                     remote.Host
	Slurm                    *slurm.Client
	Ledger                   *ledger.Ledger
	// Version of nemorl-slurm, written into scripts and manifests.
	Version string
	// Logf receives progress lines (stderr); nil discards them.
	Logf func(format string, args ...any)
	// Now is the clock; nil means time.Now.
	Now func() time.Time
	// Labels are given to every episode this driver submits (submit
	// --label); see CheckLabel.
	Labels map[string]string
	// DiscardNotCreated: an episode whose author sbatch made no job (the
	// controller unreachable, its rate limit) is discarded, its staged
	// directory removed, rather than kept for a retry here: serve, over
	// several clusters, places it on another.
	DiscardNotCreated bool
	// Overrides are the --set KEY=VALUE applied to the config file
	// (configs.ApplySets): recorded in every entry submitted.
	Overrides []string

	// onDecide, when set before the first call, is told of every
	// rules.Decide call, by episode (tests walk one episode with it).
	onDecide func(ep string)

	partsOnce sync.Once
	built     *driverParts // by parts, at the first call
}

// driverParts are the Driver's machinery, each part holding only what it
// uses: the cluster user (account), the facts rules.Decide asks for
// (collector), staging (stager) and sbatch (submitter).
type driverParts struct {
	entries   *entries // the one owner of the entries' changes (apply.go)
	account   *account
	collector *collector
	stager    *stager
	submitter *submitter
}

// parts builds d's parts from its fields, once, at the first call (a
// Driver is made as a struct literal, its fields set before its first
// call). Fields read at each use reach the parts as functions that read
// them: Logf and Now (d.logf, d.now), Labels and DiscardNotCreated.
func (d *Driver) parts() *driverParts {
	d.partsOnce.Do(func() {
		acct := &account{host: d.Host}
		own := &entries{ledger: d.Ledger}
		stg := &stager{host: d.Host, config: d.Config, ledger: d.Ledger, entries: own, version: d.Version, logf: d.logf, now: d.now, slurmConfig: d.Slurm.Config}
		d.built = &driverParts{
			entries:   own,
			account:   acct,
			collector: &collector{host: d.Host, slurm: d.Slurm, config: d.Config, now: d.now, account: acct, decided: d.onDecide},
			stager:    stg,
			submitter: &submitter{
				host: d.Host, slurm: d.Slurm, config: d.Config, ledger: d.Ledger, entries: own,
				configPath: d.ConfigPath, configSHA256: d.ConfigSHA256, overrides: d.Overrides,
				labels:            func() map[string]string { return d.Labels },
				discardNotCreated: func() bool { return d.DiscardNotCreated },
				logf:              d.logf,
				now:               d.now,
				stager:            stg,
				account:           acct,
			},
		}
	})
	return d.built
}

func (d *Driver) logf(format string, args ...any) {
	if d.Logf != nil {
		d.Logf(format, args...)
	}
}

func (d *Driver) now() time.Time {
	if d.Now != nil {
		return d.Now()
	}
	return time.Now()
}

// SubmitOne creates episode id (a new one when empty): it writes the ledger
// entry, stages the episode's tree, manifest and secrets.env on the cluster,
// and submits the author job. Train and eval are submitted by Watch once
// the author's patch is verified, so an episode without a patch never
// submits them. The returned entry is locked by this process until lock is
// released. An error with a nil entry left nothing behind; with an entry,
// the ledger has it and resume carries it on.
func (d *Driver) SubmitOne(ctx context.Context, id string, prompt []byte) (*ledger.Entry, *ledger.Lock, error) {
	r := d.Submit(ctx, []Spec{{ID: id, Prompt: prompt}})[0]
	return r.Entry, r.Lock, r.Err
}

// Submit submits several episodes as SubmitOne submits one, staging and
// submitting up to MaxBatch of them per command. Each gets its own ledger
// entry, written with the author's intent before the command runs, so a
// crash at any point leaves every episode for resume (adopted or staged
// again). A preflight refusal refuses them all; nothing of them stays.
func (d *Driver) Submit(ctx context.Context, specs []Spec) []Submitted {
	return d.parts().submitter.submitAll(ctx, specs)
}

// PreflightError is a config value that names a file the cluster does not
// have: found before anything is staged or submitted, not an hour later.
type PreflightError struct {
	Key, Path, Host string
	Err             error
}

func (e *PreflightError) Error() string {
	return fmt.Sprintf("%s: %s on %s: %v", e.Key, e.Path, e.Host, e.Err)
}

func (e *PreflightError) Unwrap() error { return e.Err }

// Preflight checks, on the cluster, the files the jobs will need that the
// config names: the three images (with a container runtime) and the
// stages' replacement commands given by absolute path.
func (d *Driver) Preflight(ctx context.Context) error {
	return d.parts().stager.preflight(ctx)
}

// Cancel stops an episode for good. It records why in a cancel marker next
// to the ledger entry (so nothing more is submitted, by this process, by the
// process that owns the episode, or by a resume) and scancels every job of
// the episode that is known. The owner — the process holding the episode's
// lock, which it passes as lock — also records it in the entry and first
// looks up submissions whose job id is not known yet; a process that does
// not own the episode (lock nil) leaves the entry alone: the owner sees
// the marker at its next poll and cancels what it submitted since. It
// returns the jobs it signalled: those that had not ended.
func (d *Driver) Cancel(ctx context.Context, e *ledger.Entry, reason string, lock *ledger.Lock) ([]string, error) {
	owner := lock != nil
	if e.Final() {
		return nil, nil
	}
	first, err := d.Ledger.RequestCancel(e.Episode, reason)
	if err != nil {
		return nil, err
	}
	if owner {
		if err := d.parts().entries.apply(e, change{cancelRequested: first}); err != nil {
			return nil, err
		}
	} else {
		e.CancelRequested = first // shown; the owner records it
	}
	var ids []string
	for _, s := range stages.All {
		sub := e.Jobs[s]
		if sub == nil {
			continue
		}
		if sub.JobID == "" && owner {
			var imp *ImpostorError
			if _, err := d.parts().submitter.adopt(ctx, e, s); errors.As(err, &imp) {
				d.logf("%s: %v: cancelling them too", e.Episode, err)
				ids = append(ids, imp.IDs...)
			} else if err != nil {
				return nil, err
			}
		}
		if sub.JobID != "" {
			ids = append(ids, sub.JobID)
		}
	}
	if owner {
		if err := d.parts().entries.apply(e, change{cancels: ids}); err != nil {
			return nil, err
		}
	}
	// Only the jobs that have not ended are signalled (and reported): one
	// query; if it fails, all of them (scancel of an ended job is a no-op).
	live := ids
	if infos, err := d.Slurm.Query(ctx, ids); err == nil {
		live = nil
		for _, id := range ids {
			if !infos[id].State.Terminal() {
				live = append(live, id)
			}
		}
	}
	if err := d.Slurm.Cancel(ctx, live); err != nil {
		return live, fmt.Errorf("episode %s: %w", e.Episode, err)
	}
	d.parts().stager.removeSecrets(ctx, e)
	if len(live) > 0 {
		d.logf("%s: cancelled jobs %s (%s)", e.Episode, strings.Join(live, ", "), first)
	}
	return live, nil
}

// CheckLabel checks one label: a key of letters, digits and ._-/ (at most
// 64), a value of at most 256 printable characters.
func CheckLabel(k, v string) error {
	if k == "" || len(k) > 64 {
		return fmt.Errorf("label key %q: want 1..64 characters", k)
	}
	for _, r := range k {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("._-/", r)) {
			return fmt.Errorf("label key %q: want letters, digits and ._-/ only", k)
		}
	}
	if len(v) > 256 {
		return fmt.Errorf("label %s: the value is over 256 bytes", k)
	}
	for _, r := range v {
		if r < ' ' || r == 0x7f {
			return fmt.Errorf("label %s: the value holds a control character", k)
		}
	}
	return nil
}

// UserNames returns the names of the given uids on the cluster (for
// "CANCELLED by 1001"): one `getent passwd` for all of them; a uid with no
// name is left out.
func (d *Driver) UserNames(ctx context.Context, uids []int) (map[int]string, error) {
	return d.parts().account.userNames(ctx, uids)
}
