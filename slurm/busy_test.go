package slurm

import (
	"errors"
	"fmt"
	"testing"

	"github.com/nemorl/nemorl-slurm/remote"
)

func TestIsControllerBusy(t *testing.T) {
	cmdErr := func(stderr string) error {
		return &remote.CommandError{Host: "login1", Command: "sacct ...", ExitStatus: 1, Stderr: stderr}
	}
	for _, c := range []struct {
		err  error
		busy bool
	}{
		{cmdErr("sacct: error: slurm_persist_conn_open_without_init: failed to open persistent connection: Connection refused"), true},
		{cmdErr("squeue: error: slurm_load_jobs error: Socket timed out on send/recv operation"), true},
		{cmdErr("sbatch: error: Batch job submission failed: RPC rate limit exceeded"), true},
		{cmdErr("squeue: error: slurm_load_jobs error: Unable to contact slurm controller (connect failure)"), true},
		{cmdErr("sbatch: error: Batch job submission failed: Resource temporarily unavailable"), true},
		{fmt.Errorf("slurm: query: %w", errors.Join(cmdErr("sacct: error: Problem talking to the database: Connection refused"), cmdErr("squeue: error: Invalid job id specified"))), true},
		{cmdErr("sbatch: error: Batch job submission failed: Invalid partition name specified"), false},
		{cmdErr("squeue: error: Invalid job id specified"), false},
		{errors.New("rate limit"), false}, // not a Slurm command's answer
		{nil, false},
	} {
		if got := IsControllerBusy(c.err); got != c.busy {
			t.Errorf("IsControllerBusy(%v) = %v, want %v", c.err, got, c.busy)
		}
	}
}

// TestSubmitNotCreated: only answers given before slurmctld took the job
// in say that no job was made; a timed-out answer may hide a job.
func TestSubmitNotCreated(t *testing.T) {
	ce := func(stderr string) error {
		return fmt.Errorf("slurm: submit: %w", &remote.CommandError{Command: "sbatch x", ExitStatus: 1, Stderr: stderr})
	}
	for _, c := range []struct {
		err  error
		want bool
	}{
		{ce("sbatch: error: Batch job submission failed: RPC rate limit exceeded, please retry later"), true},
		{ce("sbatch: error: Batch job submission failed: Unable to contact slurm controller (connect failure)"), true},
		{ce("sbatch: error: Batch job submission failed: Socket timed out on send/recv operation"), false},
		{ce("sbatch: error: rate limit ... Socket timed out on send/recv operation"), false},
		{ce("sbatch: error: Batch job submission failed: Invalid partition name specified"), false},
		{errors.New("rate limit"), false}, // not sbatch's answer
		{nil, false},
	} {
		if got := SubmitNotCreated(c.err); got != c.want {
			t.Errorf("SubmitNotCreated(%v) = %v, want %v", c.err, got, c.want)
		}
	}
}
