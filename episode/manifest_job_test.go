package episode

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nemorl/nemorl-slurm/ledger"
	"github.com/nemorl/nemorl-slurm/rules"
	"github.com/nemorl/nemorl-slurm/stages"
)

// TestAdoptWaitsForTheManifestsJob: after a crash between train's sbatch
// and its id, the manifest on the cluster names the job (submit.sh wrote
// it) but Slurm knows nothing of it (slurmctld forgot it, slurmdbd has not
// recorded it: stand-in sacct and squeue that answer with nothing). The
// stage is not submitted again while ManifestJobWait runs; then it is,
// once: an id the policy planted delays the episode, never masks it. A
// retired attempt's id in the manifest holds nothing back.
func TestAdoptWaitsForTheManifestsJob(t *testing.T) {
	d, root := stageDriver(t)
	for _, c := range []string{"sacct", "squeue"} {
		if err := os.WriteFile(filepath.Join(root, "bin", c), []byte("#!/bin/sh\nexit 0\n"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	clock := time.Now().UTC()
	d.Now = func() time.Time { return clock }
	ctx := context.Background()
	e, lock, err := d.SubmitOne(ctx, "", []byte("prompt\n"))
	if err != nil {
		t.Fatal(err)
	}
	lock.Unlock()
	author := e.JobID(stages.Author)
	sb := d.parts().submitter
	// The crash: train's intent in the ledger, its id only in the manifest.
	e.Jobs[stages.Train] = &ledger.Submission{Intent: clock, Attempt: 1, After: author}
	if err := d.Ledger.Save(e); err != nil {
		t.Fatal(err)
	}
	m, err := sb.stager.manifest(e, stages.Train)
	if err != nil {
		t.Fatal(err)
	}
	manifest := filepath.Join(e.Dir, ManifestFile)
	if err := os.WriteFile(manifest, []byte(strings.Replace(string(m), jobIDMarker, "777", 1)), 0o600); err != nil {
		t.Fatal(err)
	}
	args := filepath.Join(root, "sbatch.args")
	before, _ := os.ReadFile(args)
	t.Setenv("FAKE_SBATCH_OUT", "4343")
	for _, after := range []time.Duration{0, ManifestJobWait - time.Second} {
		clock = clock.Add(after)
		err := sb.submit(ctx, e, stages.Train, author, false, change{})
		if err == nil || !strings.Contains(err.Error(), "job 777") {
			t.Fatalf("%s after the first look: submit: %v, want it held back by job 777", after, err)
		}
		if now, _ := os.ReadFile(args); string(now) != string(before) || e.JobID(stages.Train) != "" {
			t.Fatalf("%s after the first look: sbatch ran (train job %q)", after, e.JobID(stages.Train))
		}
	}
	clock = clock.Add(time.Second)
	if err := sb.submit(ctx, e, stages.Train, author, false, change{}); err != nil {
		t.Fatalf("after ManifestJobWait: %v", err)
	}
	if got := e.JobID(stages.Train); got != "4343" {
		t.Fatalf("train job %q after ManifestJobWait, want the new sbatch's 4343", got)
	}

	// A retry: the manifest still names the retired attempt's job.
	e.Retried = map[stages.Stage][]rules.Attempt{stages.Train: {{Attempt: 1, JobID: "4343"}}}
	e.Jobs[stages.Train] = &ledger.Submission{Intent: clock, Attempt: 2, After: author}
	if err := os.WriteFile(manifest, []byte(strings.Replace(string(m), jobIDMarker, "4343", 1)), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("FAKE_SBATCH_OUT", "4444")
	if err := sb.submit(ctx, e, stages.Train, author, false, change{}); err != nil || e.JobID(stages.Train) != "4444" {
		t.Fatalf("retry with the retired job in the manifest: %v, train job %q, want 4444 at once", err, e.JobID(stages.Train))
	}
}

// FuzzManifestJobID: manifestJobID never panics and returns "" or an id
// Slurm's clients accept.
func FuzzManifestJobID(f *testing.F) {
	f.Add([]byte(`{"jobs":{"train":"123"}}`), "train")
	f.Add([]byte(`{"jobs":{"author":"12_3"}}`), "author")
	f.Add([]byte(`{"jobs":{"train":"1; rm -rf /"}}`), "train")
	f.Add([]byte(`{"jobs":{"train":7}}`), "train")
	f.Fuzz(func(t *testing.T, b []byte, stage string) {
		id := manifestJobID(b, stages.Stage(stage))
		if id != "" && strings.Trim(id, "0123456789_+") != "" {
			t.Fatalf("manifestJobID(%q) = %q", b, id)
		}
	})
}
