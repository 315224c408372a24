package episode

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nemorl/nemorl-slurm/ledger"
	"github.com/nemorl/nemorl-slurm/remote"
	"github.com/nemorl/nemorl-slurm/slurm"
	"github.com/nemorl/nemorl-slurm/stages"
)

// stageDriver is a Driver on this machine (remote.Local) whose workdir is
// a temp directory with awkward characters, and whose sbatch is a stand-in
// script on PATH that prints the job id in $FAKE_SBATCH_OUT (and exits
// with $FAKE_SBATCH_RC), recording its arguments.
func stageDriver(t *testing.T) (*Driver, string) {
	t.Helper()
	cfg := exampleConfig(t)
	root := t.TempDir()
	cfg.Cluster.Workdir = filepath.Join(root, "work dir $(touch pwned) `id` 'q'")
	bin := filepath.Join(root, "bin")
	if err := os.Mkdir(bin, 0o755); err != nil {
		t.Fatal(err)
	}
	fake := "#!/bin/sh\nprintf '%s\\n' \"$@\" > \"" + filepath.Join(root, "sbatch.args") + "\"\n" +
		"[ -n \"${FAKE_SBATCH_ERR:-}\" ] && printf '%s\\n' \"$FAKE_SBATCH_ERR\" >&2\n" +
		"printf '%s\\n' \"${FAKE_SBATCH_OUT:-4242}\"\nexit \"${FAKE_SBATCH_RC:-0}\"\n"
	if err := os.WriteFile(filepath.Join(bin, "sbatch"), []byte(fake), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PATH", bin+":"+os.Getenv("PATH"))
	// The lab's stand-in commands may not exist here: preflight checks none.
	cfg.Stages.Author.Command, cfg.Stages.Train.Command, cfg.Stages.Eval.Command = nil, nil, nil
	lg, err := ledger.OpenLedger(filepath.Join(root, "ledger"))
	if err != nil {
		t.Fatal(err)
	}
	host := remote.NewLocal()
	return &Driver{Config: cfg, ConfigPath: "/x/lab-none.yaml", Host: host, Slurm: slurm.New(host), Ledger: lg, Version: "test"}, root
}

func TestSubmitStagesInOneCommand(t *testing.T) {
	d, root := stageDriver(t)
	counted := remote.NewCounted(d.Host)
	d.Host = counted
	ctx := context.Background()
	e, lock, err := d.SubmitOne(ctx, "ep-stage-1", []byte("the prompt\n"))
	if err != nil {
		t.Fatal(err)
	}
	lock.Unlock()
	if ops := counted.Counts(); len(ops) != 1 || ops["run stage+sbatch"] != 1 {
		t.Errorf("submit made %v on the cluster, want one command", ops)
	}
	if e.JobID(stages.Author) != "4242" || !e.Staged || e.Scripts[stages.Author] == "" || e.PolicyBaseURL == "" {
		t.Errorf("entry %+v", e)
	}
	if _, err := os.Stat(filepath.Join(root, "pwned")); err == nil {
		t.Error("a workdir name ran a command")
	}
	dir := e.Dir
	// Modes as rendered: directories 0700, secrets 0600, no temp left.
	err = filepath.WalkDir(filepath.Dir(dir), func(p string, de fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		fi, _ := de.Info()
		if strings.Contains(de.Name(), ".staging.") || de.Name() == ".manifest.tmp" {
			t.Errorf("left behind: %s", p)
		}
		if de.IsDir() && p != filepath.Dir(dir) && fi.Mode().Perm() != 0o700 {
			t.Errorf("%s: mode %v, want 0700", p, fi.Mode().Perm())
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(filepath.Join(dir, SecretsFile))
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("secrets.env: %v %v", fi, err)
	}
	prompt, _ := os.ReadFile(filepath.Join(dir, "author", "prompt.txt"))
	if string(prompt) != "the prompt\n" {
		t.Errorf("prompt %q", prompt)
	}
	var m Manifest
	b, _ := os.ReadFile(filepath.Join(dir, ManifestFile))
	if err := json.Unmarshal(b, &m); err != nil || m.Jobs[stages.Author] != "4242" || m.Episode != "ep-stage-1" || m.Scripts[stages.Train] != e.Scripts[stages.Train] {
		t.Errorf("manifest %s: %v", b, err)
	}
	args, _ := os.ReadFile(filepath.Join(root, "sbatch.args"))
	if !strings.Contains(string(args), "--job-name="+stages.JobName("ep-stage-1", stages.Author)) || !strings.HasSuffix(strings.TrimSpace(string(args)), filepath.Join(dir, "author", "author.sbatch")) {
		t.Errorf("sbatch args:\n%s", args)
	}

	// Train's submission rewrites the manifest in the same command.
	t.Setenv("FAKE_SBATCH_OUT", "4243")
	if err := d.parts().submitter.submit(ctx, e, stages.Train, e.JobID(stages.Author), false, change{}); err != nil {
		t.Fatal(err)
	}
	b, _ = os.ReadFile(filepath.Join(dir, ManifestFile))
	if err := json.Unmarshal(b, &m); err != nil || m.Jobs[stages.Author] != "4242" || m.Jobs[stages.Train] != "4243" {
		t.Errorf("manifest after train %s: %v", b, err)
	}
	if ops := counted.Counts(); ops["run stage+sbatch"] != 1 || ops["run sbatch"] != 1 || len(ops) != 2 {
		t.Errorf("after train's submit %v, want two commands and no SFTP write", ops)
	}

	// Restaging a complete directory leaves it as it is.
	before, _ := os.ReadFile(filepath.Join(dir, ManifestFile))
	e.Staged = false
	if err := d.parts().stager.restage(ctx, e); err != nil || !e.Staged {
		t.Fatalf("restage of a complete tree: %v", err)
	}
	if after, _ := os.ReadFile(filepath.Join(dir, ManifestFile)); string(after) != string(before) {
		t.Error("restage rewrote a complete tree")
	}
}

func TestSubmitRefusals(t *testing.T) {
	d, root := stageDriver(t)
	ctx := context.Background()

	// A missing image: a preflight error, nothing on the cluster, nothing
	// in the ledger.
	d.Config.Stages.Train.Command = []string{filepath.Join(root, "no such train")}
	_, _, err := d.SubmitOne(ctx, "ep-pre", []byte("p\n"))
	var pe *PreflightError
	if !errors.As(err, &pe) || pe.Key != "stages.train.command[0]" || !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("preflight: %v", err)
	}
	if _, err := d.Ledger.Load("ep-pre"); !errors.Is(err, ledger.ErrNotInLedger) {
		t.Errorf("a refused episode is in the ledger: %v", err)
	}
	if _, err := os.Stat(filepath.Join(d.Config.Cluster.Workdir, "ep-pre")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("a refused episode was staged: %v", err)
	}
	d.Config.Stages.Train.Command = nil

	// A directory already there is never overwritten.
	planted := filepath.Join(d.Config.Cluster.Workdir, "ep-there")
	if err := os.MkdirAll(planted, 0o700); err != nil {
		t.Fatal(err)
	}
	_, _, err = d.SubmitOne(ctx, "ep-there", []byte("p\n"))
	if !errors.Is(err, ledger.ErrEpisodeExists) {
		t.Fatalf("existing directory: %v", err)
	}
	if entries, _ := os.ReadDir(planted); len(entries) != 0 {
		t.Errorf("the existing directory was written into: %v", entries)
	}
	if _, err := d.Ledger.Load("ep-there"); !errors.Is(err, ledger.ErrNotInLedger) {
		t.Errorf("a refused episode is in the ledger: %v", err)
	}

	// sbatch refuses: the error names sbatch and its message; the tree is
	// staged and the intent stays for resume.
	t.Setenv("FAKE_SBATCH_RC", "1")
	t.Setenv("FAKE_SBATCH_OUT", "")
	t.Setenv("FAKE_SBATCH_ERR", "sbatch: error: Invalid partition name specified")
	e, _, err := d.SubmitOne(ctx, "ep-refused", []byte("p\n"))
	var ce *remote.CommandError
	if !errors.As(err, &ce) || !strings.HasPrefix(ce.Command, "sbatch --parsable") || !strings.Contains(ce.Stderr, "Invalid partition") {
		t.Fatalf("sbatch refusal: %v", err)
	}
	if _, refused := slurm.SubmitRefused(err); !refused {
		t.Errorf("SubmitRefused(%v) = false", err)
	}
	if e == nil || !e.Staged || e.Jobs[stages.Author] == nil || e.JobID(stages.Author) != "" {
		t.Errorf("entry after a refused sbatch: %+v", e)
	}
	if _, err := os.Stat(filepath.Join(d.Config.Cluster.Workdir, "ep-refused", ManifestFile)); err != nil {
		t.Errorf("tree of a refused sbatch: %v", err)
	}
	if strings.Contains(err.Error(), "tar -x") || strings.Contains(err.Error(), d.Config.PolicyModel.APIKey.Reveal()) {
		t.Errorf("the error shows the staging script or the key: %v", err)
	}
}

// An interrupted staging leaves no episode directory, only a temp one that
// the next staging of the episode does not mind; a directory without a
// manifest is not taken for a complete one.
func TestStageScriptAtomic(t *testing.T) {
	d, _ := stageDriver(t)
	ctx := context.Background()
	work := d.Config.Cluster.Workdir
	if err := os.MkdirAll(work, 0o700); err != nil {
		t.Fatal(err)
	}
	// A truncated stream: tar fails, nothing is renamed into place.
	res, err := d.Host.Run(ctx, remote.Command{Argv: []string{"sh", "-c", batchScript, "sh", work, "new", "0", "0", "0", "1", "ep-cut", "n", "c", "/s"},
		Stdin: strings.NewReader("not a gzipped tar stream")})
	var ce *remote.CommandError
	if !errors.As(err, &ce) || ce.ExitStatus != stageExitFailed {
		t.Fatalf("bad stream: %v %v", res, err)
	}
	if entries, _ := os.ReadDir(work); len(entries) != 0 {
		t.Errorf("left after a failed staging: %v", entries)
	}
	// Restaging over a directory without a manifest is refused.
	e, lock, err := d.SubmitOne(ctx, "ep-half", []byte("p\n"))
	if err != nil {
		t.Fatal(err)
	}
	lock.Unlock()
	if err := os.Remove(filepath.Join(e.Dir, ManifestFile)); err != nil {
		t.Fatal(err)
	}
	e.Staged = false
	if err := d.parts().stager.restage(ctx, e); err == nil || !strings.Contains(err.Error(), "not a complete episode directory") {
		t.Errorf("restage over an incomplete directory: %v", err)
	}
}

// An author's sbatch in a batch runs under the client's sbatch deadline
// (coreutils timeout in batchScript): one stopped there is outcome unknown
// for its episode (a *slurm.DeadlineError, remote.ErrOutcomeUnknown), not
// a failure; its intent stays, so that the next try looks for the job by
// its comment tag before any new sbatch.
func TestSubmitBatchSbatchPastDeadline(t *testing.T) {
	d, root := stageDriver(t)
	counted := remote.NewCounted(d.Host)
	d.Host = counted
	d.Slurm = slurm.New(counted)
	// Four episodes, one round of sbatch: the batch's own deadline
	// (3 s + 4 × 0.25 s) is not reached first.
	d.Slurm.Deadlines.Sbatch = 3 * time.Second
	if err := os.WriteFile(filepath.Join(root, "bin", "sbatch"), []byte("#!/bin/sh\nexec sleep 60\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	start := time.Now()
	out := d.Submit(ctx, make([]Spec, 4))
	if took := time.Since(start); took > 20*time.Second {
		t.Errorf("the batch took %s: its sbatch sleep 60 s, their deadline is 3 s", took)
	}
	for i, r := range out {
		var de *slurm.DeadlineError
		if !errors.As(r.Err, &de) || !errors.Is(r.Err, remote.ErrOutcomeUnknown) || de.Kind != slurm.KindSbatch || de.Deadline != 3*time.Second ||
			!strings.HasPrefix(de.Command, "sbatch --parsable") || !strings.Contains(r.Err.Error(), "may or may not have been made") {
			t.Fatalf("episode %d: %v, want the sbatch's own deadline (3s), outcome unknown", i, r.Err)
		}
		if slurm.SubmitNotCreated(r.Err) {
			t.Errorf("episode %d: SubmitNotCreated(%v)", i, r.Err)
		}
		e, err := d.Ledger.Load(r.Entry.Episode)
		if err != nil {
			t.Fatal(err)
		}
		if sub := e.Jobs[stages.Author]; !e.Staged || sub == nil || sub.Intent.IsZero() || sub.JobID != "" {
			t.Errorf("episode %d: staged %v, author %+v: want the intent kept, no job id", i, e.Staged, sub)
		}
	}
	// The next try looks for the job before it submits again.
	e, err := d.Ledger.Load(out[0].Entry.Episode)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, "bin", "sbatch"), []byte("#!/bin/sh\necho 4242\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	before := counted.Counts()
	_ = d.parts().submitter.submit(ctx, e, stages.Author, "", false, change{})
	after := counted.Counts()
	if after["run sacct"] == before["run sacct"] && after["run squeue"] == before["run squeue"] {
		t.Errorf("the retry after an sbatch past its deadline looked for no job: %v → %v", before, after)
	}

	// batchScript's statuses of an sbatch stopped by timeout: 124
	// (SIGTERM) and 137 (SIGKILL after -k).
	for _, rc := range []string{"124", "137"} {
		res, _, err := parseBatch([]byte("nemorl-batch\tep-1\tstaged\nnemorl-batch\tep-1\tsbatch\t" + rc + "\n"))
		if err != nil || res["ep-1"] == nil || !errors.Is(res["ep-1"].sbatchErr, slurm.ErrDeadline) || !errors.Is(res["ep-1"].sbatchErr, remote.ErrOutcomeUnknown) {
			t.Errorf("sbatch status %s: %+v, %v", rc, res["ep-1"], err)
		}
	}
}

// Many episodes in one command: each its own entry, directory, job and
// manifest, in one session.
func TestSubmitBatch(t *testing.T) {
	t.Run("arrays", func(t *testing.T) { testSubmitBatch(t, true) })
	t.Run("jobs", func(t *testing.T) { testSubmitBatch(t, false) })
}

// testSubmitBatch: with arrays (cluster.job_arrays, the default), each
// batch's authors are one job array, each episode's job its task
// ("4242_i": task i of the batch); without, each its own job.
func testSubmitBatch(t *testing.T, arrays bool) {
	d, root := stageDriver(t)
	d.Config.Cluster.JobArrays = &arrays
	counted := remote.NewCounted(d.Host)
	d.Host = counted
	ctx := context.Background()
	specs := make([]Spec, MaxBatch+3)
	for i := range specs {
		specs[i] = Spec{Prompt: []byte(fmt.Sprintf("prompt %d\n", i))}
	}
	specs[4].ID = "ep-bad/../id"
	out := d.Submit(ctx, specs)
	if ops := counted.Counts(); ops["run stage+sbatch"] != 2 || len(ops) != 1 {
		t.Errorf("%d episodes took %v, want two commands (batches of %d)", len(specs), ops, MaxBatch)
	}
	seen := map[string]bool{}
	for i, r := range out {
		if i == 4 {
			if !errors.Is(r.Err, ledger.ErrBadEpisodeID) || r.Entry != nil {
				t.Errorf("bad id: %+v", r)
			}
			continue
		}
		want := "4242"
		if arrays {
			// Batches of MaxBatch in order; episode 4 had a bad id and
			// is in no batch.
			task := i
			if i > 4 {
				task--
			}
			want = fmt.Sprintf("4242_%d", task%MaxBatch)
			if a := r.Entry.Jobs[stages.Author].Array; a == nil || a.Task != task%MaxBatch {
				t.Errorf("episode %d: array task %+v, want %d", i, a, task%MaxBatch)
			}
		}
		if r.Err != nil || r.Lock == nil || r.Entry.JobID(stages.Author) != want || !r.Entry.Staged || seen[r.Entry.Episode] {
			t.Fatalf("episode %d: %+v, job %s, want %s", i, r, r.Entry.JobID(stages.Author), want)
		}
		seen[r.Entry.Episode] = true
		r.Lock.Unlock()
		prompt, err := os.ReadFile(filepath.Join(r.Entry.Dir, "author", "prompt.txt"))
		if err != nil || string(prompt) != fmt.Sprintf("prompt %d\n", i) {
			t.Errorf("episode %d: prompt %q %v", i, prompt, err)
		}
		var m Manifest
		b, _ := os.ReadFile(filepath.Join(r.Entry.Dir, ManifestFile))
		if err := json.Unmarshal(b, &m); err != nil || m.Jobs[stages.Author] != want || m.Episode != r.Entry.Episode {
			t.Errorf("episode %d: manifest %s %v", i, b, err)
		}
		e, err := d.Ledger.Load(r.Entry.Episode)
		if err != nil || e.JobID(stages.Author) != want || !e.Staged {
			t.Errorf("episode %d: ledger %+v %v", i, e, err)
		}
	}
	entries, _ := os.ReadDir(d.Config.Cluster.Workdir)
	for _, de := range entries {
		if arrays && de.Name() == ArraysDir {
			continue
		}
		if !seen[de.Name()] {
			t.Errorf("left in the workdir: %s", de.Name())
		}
	}
	_ = root
}

// TestSubmitBatchesAtOnceFreshWorkdir: the first batches of arrays into a
// workdir without .arrays, two at once (Submit's pace), all submitted. CI
// saw submit --count 200 lose a batch: each batch's script tested for
// .arrays and then made it, and the second mkdir failed ("File exists");
// before the fix most rounds here lost one.
func TestSubmitBatchesAtOnceFreshWorkdir(t *testing.T) {
	for round := range 5 {
		d, _ := stageDriver(t)
		specs := make([]Spec, 4*MaxBatch)
		for i := range specs {
			specs[i] = Spec{Prompt: []byte(fmt.Sprintf("prompt %d\n", i))}
		}
		for i, r := range d.Submit(context.Background(), specs) {
			if r.Lock != nil {
				r.Lock.Unlock()
			}
			if r.Err != nil {
				t.Fatalf("round %d: episode %d of %d: %v", round, i, len(specs), r.Err)
			}
		}
	}
}

// TestSubmitRate: under cluster.submit_rate the batch's sbatch start one
// after another at the rate's pace, on the cluster (the batch script),
// and a train submission right after waits its turn behind them; without
// it the batch starts four at a time.
func TestSubmitRate(t *testing.T) {
	starts := func(t *testing.T, rate float64, n int) []float64 {
		d, root := stageDriver(t)
		d.Config.Cluster.SubmitRate = rate
		noArrays := false // each author its own sbatch: their pace is what is measured
		d.Config.Cluster.JobArrays = &noArrays
		log := filepath.Join(root, "starts")
		fake := "#!/bin/sh\ndate +%s.%N >> \"" + log + "\"\nsleep 0.05\nprintf '%s\\n' 4242\n"
		if err := os.WriteFile(filepath.Join(root, "bin", "sbatch"), []byte(fake), 0o755); err != nil {
			t.Fatal(err)
		}
		ctx := context.Background()
		specs := make([]Spec, n)
		for i := range specs {
			specs[i] = Spec{Prompt: []byte("p\n")}
		}
		out := d.Submit(ctx, specs)
		for i, r := range out {
			if r.Err != nil {
				t.Fatalf("episode %d: %v", i, r.Err)
			}
			r.Lock.Unlock()
		}
		if err := d.parts().submitter.submit(ctx, out[0].Entry, stages.Train, out[0].Entry.JobID(stages.Author), false, change{}); err != nil {
			t.Fatal(err)
		}
		b, err := os.ReadFile(log)
		if err != nil {
			t.Fatal(err)
		}
		var ts []float64
		for _, f := range strings.Fields(string(b)) {
			var v float64
			if _, err := fmt.Sscan(f, &v); err != nil {
				t.Fatalf("start %q: %v", f, err)
			}
			ts = append(ts, v)
		}
		if len(ts) != n+1 {
			t.Fatalf("%d sbatch, want %d", len(ts), n+1)
		}
		slices.Sort(ts)
		return ts
	}
	const rate, n = 10.0, 6
	ts := starts(t, rate, n)
	for i := 1; i < len(ts); i++ {
		if gap := ts[i] - ts[i-1]; gap < 0.9/rate {
			t.Errorf("sbatch %d started %.3f s after the one before, want ≥ %.3f s at %v per second (starts %v)", i, gap, 1/rate, rate, ts)
		}
	}
	free := starts(t, 0, n)
	if spread := free[3] - free[0]; spread > 0.9/rate*3 {
		t.Errorf("without a rate the first four sbatch spread over %.3f s, want them at once", spread)
	}
}

// TestSubmitRateLimited: an sbatch refused by the user's rate limit made no
// job: the episode keeps no intent, and the next try submits without
// looking for a job (no sacct, no squeue). A timed-out sbatch may have made
// one: its intent stays, for the look-up.
func TestSubmitRateLimited(t *testing.T) {
	for _, c := range []struct {
		stderr     string
		keepIntent bool
	}{
		{"sbatch: error: Batch job submission failed: RPC rate limit exceeded, please retry later", false},
		{"sbatch: error: Batch job submission failed: Socket timed out on send/recv operation", true},
	} {
		d, _ := stageDriver(t)
		counted := remote.NewCounted(d.Host)
		d.Host = counted
		d.Slurm = slurm.New(counted)
		t.Setenv("FAKE_SBATCH_RC", "1")
		t.Setenv("FAKE_SBATCH_ERR", c.stderr)
		out := d.Submit(context.Background(), []Spec{{Prompt: []byte("p\n")}})
		r := out[0]
		if r.Err == nil || r.Entry == nil || !r.Entry.Staged {
			t.Fatalf("%s: %+v", c.stderr, r)
		}
		e, err := d.Ledger.Load(r.Entry.Episode)
		if err != nil {
			t.Fatal(err)
		}
		if kept := e.Jobs[stages.Author] != nil; kept != c.keepIntent {
			t.Errorf("%s: intent kept %v, want %v", c.stderr, kept, c.keepIntent)
		}
		if c.keepIntent {
			continue
		}
		t.Setenv("FAKE_SBATCH_RC", "0")
		t.Setenv("FAKE_SBATCH_ERR", "")
		before := counted.Counts()
		if err := d.parts().submitter.submit(context.Background(), e, stages.Author, "", false, change{}); err != nil || e.JobID(stages.Author) != "4242" {
			t.Fatalf("retry: %v, %+v", err, e.Jobs[stages.Author])
		}
		after := counted.Counts()
		for _, prog := range []string{"run sacct", "run squeue", "run env"} {
			if after[prog] != before[prog] {
				t.Errorf("the retry looked for a job: %s %d → %d", prog, before[prog], after[prog])
			}
		}
		// And submit's own refusal: an sbatch rate-limited on the retry path drops the intent too.
		t.Setenv("FAKE_SBATCH_RC", "1")
		t.Setenv("FAKE_SBATCH_ERR", c.stderr)
		if err := d.parts().submitter.submit(context.Background(), e, stages.Train, e.JobID(stages.Author), false, change{}); err == nil {
			t.Fatal("a refused train submission succeeded")
		}
		if e.Jobs[stages.Train] != nil {
			t.Errorf("train intent kept after a rate-limit refusal: %+v", e.Jobs[stages.Train])
		}
	}
}

// TestSubmitDiscardNotCreated: under DiscardNotCreated (serve over several
// clusters), an author sbatch that made no job leaves nothing: no ledger
// entry, no staged directory (its secrets.env with it), and an error the
// caller can place elsewhere; a timed-out sbatch, which may have made its
// job, is kept as before.
func TestSubmitDiscardNotCreated(t *testing.T) {
	for _, c := range []struct {
		stderr  string
		discard bool
	}{
		{"sbatch: error: Batch job submission failed: Unable to contact slurm controller (connect failure)", true},
		{"sbatch: error: Batch job submission failed: RPC rate limit exceeded, please retry later", true},
		{"sbatch: error: Batch job submission failed: Socket timed out on send/recv operation", false},
	} {
		d, _ := stageDriver(t)
		d.DiscardNotCreated = true
		t.Setenv("FAKE_SBATCH_RC", "1")
		t.Setenv("FAKE_SBATCH_ERR", c.stderr)
		out := d.Submit(context.Background(), []Spec{{Prompt: []byte("p\n")}, {Prompt: []byte("q\n")}})
		for _, r := range out {
			if r.Err == nil || !strings.Contains(r.Err.Error(), "Batch job submission failed") {
				t.Fatalf("%s: err %v", c.stderr, r.Err)
			}
			if c.discard != (r.Entry == nil) {
				t.Fatalf("%s: entry %v, want discarded %v", c.stderr, r.Entry, c.discard)
			}
		}
		all, err := d.Ledger.List()
		if err != nil {
			t.Fatal(err)
		}
		if c.discard && len(all) != 0 {
			t.Errorf("%s: %d ledger entries left", c.stderr, len(all))
		}
		if !c.discard && len(all) != 2 {
			t.Errorf("%s: %d ledger entries, want both kept", c.stderr, len(all))
		}
		left, _ := filepath.Glob(filepath.Join(d.Config.Cluster.Workdir, "ep-*"))
		// The two authors were one job array: its script stays only
		// while its job may exist (an sbatch whose outcome is unknown).
		arrays, _ := filepath.Glob(filepath.Join(d.Config.Cluster.Workdir, ArraysDir, "*"))
		if c.discard != (len(arrays) == 0) {
			t.Errorf("%s: arrays left %v, want them only when the episodes are kept", c.stderr, arrays)
		}
		if c.discard && len(left) != 0 {
			t.Errorf("%s: staged directories left: %v", c.stderr, left)
		}
		if !c.discard && len(left) != 2 {
			t.Errorf("%s: %d staged directories, want both kept", c.stderr, len(left))
		}
	}
}

// TestRestageRendersTheSameScripts: the KillWait an episode's scripts were
// rendered with is in its entry, so a restage after a crash renders the
// scripts whose sha256s the ledger holds even when scontrol show config
// fails by then (a script rendered with Slurm's default instead would
// differ, and the tool's own job would read as an impostor).
func TestRestageRendersTheSameScripts(t *testing.T) {
	d, _ := stageDriver(t)
	sg := d.parts().stager
	sg.slurmConfig = func(context.Context) (slurm.Config, error) { return slurm.Config{KillWait: 5 * time.Second}, nil }
	p, err := d.parts().submitter.prepare(Spec{Prompt: []byte("p\n")}, sg.killWait(context.Background()))
	if err != nil {
		t.Fatal(err)
	}
	if p.e.KillWaitSeconds != 5 {
		t.Fatalf("entry's KillWait %d s, want 5", p.e.KillWaitSeconds)
	}
	sg.slurmConfig = func(context.Context) (slurm.Config, error) { return slurm.Config{}, errors.New("scontrol: busy") }
	again, err := sg.render(p.e.Episode, []byte("p\n"), p.e.PolicyBaseURL, time.Duration(p.e.KillWaitSeconds)*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if got := scriptHashes(again); !maps.Equal(got, p.e.Scripts) {
		t.Errorf("restaged scripts %v, the entry's %v", got, p.e.Scripts)
	}
	dflt, err := sg.render(p.e.Episode, []byte("p\n"), p.e.PolicyBaseURL, 0)
	if err != nil {
		t.Fatal(err)
	}
	if got := scriptHashes(dflt); maps.Equal(got, p.e.Scripts) {
		t.Error("scripts rendered with the default KillWait are the same as with 5 s: the test shows nothing")
	}
}

// observingHost is a host that is a slurm.Observer too, as serve's
// cluster host is: it records each Slurm command observed.
type observingHost struct {
	remote.Host
	mu   sync.Mutex
	seen []observed
}

type observed struct {
	kind    slurm.Kind
	took    time.Duration
	stopped bool
}

func (h *observingHost) ObserveSlurm(k slurm.Kind, took time.Duration, stopped bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.seen = append(h.seen, observed{k, took, stopped})
}

// TestBatchSbatchObserved (issue 41, item 4): each sbatch an authors'
// batch runs on the cluster is a Slurm command of its own in serve's
// metrics and the slow log, timed there, as a train's sbatch is: one per
// author array, one per author job without arrays, and one stopped at the
// sbatch deadline as stopped. Before, a batch's sbatch, the commands a
// throttled controller slows first, were in neither.
func TestBatchSbatchObserved(t *testing.T) {
	for _, tc := range []struct {
		name   string
		arrays bool
		sleep  string // the stand-in sbatch's
		want   int    // observations
		stop   bool
	}{
		{"array", true, "0.6", 1, false},
		{"jobs", false, "0.6", 5, false},
		{"past its deadline", true, "30", 1, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d, root := stageDriver(t)
			d.Config.Cluster.JobArrays = &tc.arrays
			h := &observingHost{Host: d.Host}
			d.Host = h
			d.Slurm = slurm.New(h)
			d.Slurm.SlowAfter = 500 * time.Millisecond
			d.Slurm.Deadlines.Sbatch = 2 * time.Second
			var mu sync.Mutex
			var slow []slurm.SlowCommand
			d.Slurm.Slow = func(s slurm.SlowCommand) { mu.Lock(); slow = append(slow, s); mu.Unlock() }
			fake := "#!/bin/sh\nsleep " + tc.sleep + "\necho 4242\n"
			if err := os.WriteFile(filepath.Join(root, "bin", "sbatch"), []byte(fake), 0o755); err != nil {
				t.Fatal(err)
			}
			for _, r := range d.Submit(context.Background(), make([]Spec, 5)) {
				if r.Lock != nil {
					r.Lock.Unlock()
				}
				if !tc.stop && r.Err != nil {
					t.Fatal(r.Err)
				}
			}
			// (The other commands: the cluster's KillWait, read once; it
			// may be slow itself on a loaded machine.)
			sbatch := slices.DeleteFunc(slices.Clone(h.seen), func(o observed) bool { return o.kind != slurm.KindSbatch })
			slow = slices.DeleteFunc(slow, func(s slurm.SlowCommand) bool { return s.Kind != slurm.KindSbatch })
			if len(sbatch) != tc.want || len(slow) != tc.want {
				t.Fatalf("observed %+v, slow %+v: want %d sbatch", h.seen, slow, tc.want)
			}
			for i, o := range sbatch {
				min, max := 600*time.Millisecond, 10*time.Second
				if tc.stop {
					min = 2 * time.Second
				}
				if o.stopped != tc.stop || o.took < min || o.took > max {
					t.Errorf("observation %d: %+v, want stopped %v, %s to %s", i, o, tc.stop, min, max)
				}
				s := slow[i]
				if s.Stopped != tc.stop || s.Took != o.took || s.Deadline != 2*time.Second || !strings.Contains(s.Command, "author") {
					t.Errorf("slow %d: %+v", i, s)
				}
			}
		})
	}
}

func TestParseBatchSbatchRuns(t *testing.T) {
	res, runs, err := parseBatch([]byte("nemorl-batch\tep-1\tstaged\nnemorl-sbatch\t2350\t0\nnemorl-batch\tep-1\tsbatch\t0\nnemorl-batch\tep-1\tout\t77\nnemorl-sbatch\t\t124\n"))
	if err != nil || res["ep-1"] == nil || res["ep-1"].job.JobID != "77" {
		t.Fatalf("%+v %v", res, err)
	}
	want := []sbatchRun{{took: 2350 * time.Millisecond, known: true}, {rc: 124}}
	if !slices.Equal(runs, want) || runs[0].stopped() || !runs[1].stopped() {
		t.Errorf("runs %+v, want %+v", runs, want)
	}
	for _, bad := range []string{"nemorl-sbatch\t1\n", "nemorl-sbatch\t-1\t0\n", "nemorl-sbatch\t1\t256\n", "nemorl-sbatch\tx\t0\n", "nemorl-sbatch\t1\t0\textra\n", "nemorl-sbatch\t99999999999\t0\n"} {
		if _, _, err := parseBatch([]byte(bad)); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}

// FuzzParseBatch: parseBatch never panics; what it accepts names only valid
// episodes, sbatch runs it accepts have an exit status of a process and a
// duration within a day, and an episode with a job has no sbatch error.
func FuzzParseBatch(f *testing.F) {
	f.Add([]byte("nemorl-batch\tep-1\tstaged\nnemorl-sbatch\t2350\t0\nnemorl-batch\tep-1\tsbatch\t0\nnemorl-batch\tep-1\tout\t77\n"))
	f.Add([]byte("nemorl-batch\tep-2\texists\nnemorl-batch\tep-2\tsbatch\t124\nnemorl-sbatch\t\t124\n"))
	f.Add([]byte("nemorl-batch\tep-3\tsbatch\t1\nnemorl-batch\tep-3\tout\tsbatch: error: x\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		res, runs, err := parseBatch(b)
		if err != nil {
			if res != nil || runs != nil {
				t.Fatalf("error %v with results", err)
			}
			return
		}
		for ep, r := range res {
			if !stages.ValidEpisode(ep) {
				t.Errorf("episode %q accepted", ep)
			}
			if r.job.JobID != "" && r.sbatchErr != nil {
				t.Errorf("%s: job %v and error %v", ep, r.job, r.sbatchErr)
			}
		}
		for _, r := range runs {
			if r.rc < 0 || r.rc > 255 || r.took < 0 || r.took > 24*time.Hour || (!r.known && r.took != 0) {
				t.Errorf("run %+v accepted", r)
			}
		}
	})
}
