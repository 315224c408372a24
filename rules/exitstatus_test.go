package rules

import (
	"fmt"
	"testing"

	"github.com/nemorl/nemorl-slurm/slurm"
	"github.com/nemorl/nemorl-slurm/stages"
)

// payloadExitOutcome is the outcome of a healthy episode whose author or
// train payload ended with status (0–255; 128+N for a death by signal N),
// reported by the script as exit and read by sacct as reading.
func payloadExitOutcome(t *testing.T, stage stages.Stage, reading int) *Verdict {
	t.Helper()
	f := healthy(true)
	j := f.Jobs[stage]
	state := "FAILED"
	if reading == 0 {
		state = "COMPLETED" // sacct's state knows the status was not 0; its ExitCode may not
	}
	j.State, j.ExitCode = slurm.ParseState(state, ""), slurm.ParseExitCode(fmt.Sprintf("%d:0", reading))
	f.Jobs[stage] = j
	return decideAll(t, f).Verdict
}

// TestPayloadExitNeverAVerdict: for every status an author or train
// payload can end with (0–255: its own exit, or 128+N when killed by
// signal N), the status its script exits with (stages.ScriptExit, the rule
// the rendered scripts are tested to follow in templates'
// TestScriptExitStatuses) reads, as sacct shows it on every Slurm (as is,
// or folded by 128 before 25.11), as the policy's failure: never a
// script's verdict, never masked.
func TestPayloadExitNeverAVerdict(t *testing.T) {
	for _, stage := range []stages.Stage{stages.Author, stages.Train} {
		for status := 1; status <= 255; status++ {
			exit := stages.ScriptExit(stage, status)
			for _, reading := range stages.SacctReadings(exit) {
				v := payloadExitOutcome(t, stage, reading)
				if v == nil || v.Kind != PolicyFailure || v.Stage != stage {
					t.Errorf("%s payload status %d: script exit %d, sacct %d:0 → %+v, want the policy's failure at %s", stage, status, exit, reading, v, stage)
				}
			}
		}
	}
}

// TestPayloadExitRawWouldMask shows what the rule closes: a train script
// that passed its payload's status through as is would let sacct before
// 25.11 read a status of 192–207 as one of the script's verdicts and mask
// all but one (71, output_too_large, is a verdict against the policy):
// 198 as no_gpu, retried on a GPU.
func TestPayloadExitRawWouldMask(t *testing.T) {
	var masked []int
	for status := stages.SacctFoldMin + stages.ExitReservedMin; status <= stages.SacctFoldMin+stages.ExitReservedMax; status++ {
		readings := stages.SacctReadings(status)
		if v := payloadExitOutcome(t, stages.Train, readings[len(readings)-1]); v == nil || v.Kind != PolicyFailure {
			masked = append(masked, status)
		}
	}
	if want := stages.ExitReservedMax - stages.ExitReservedMin; len(masked) != want {
		t.Errorf("raw statuses masked when folded: %v (%d), want every one of 192–207 but 199 (%d)", masked, len(masked), want)
	}
	if v := payloadExitOutcome(t, stages.Train, stages.ExitNoGPU); v == nil || v.Kind != InfraFailure || v.Reason != ReasonNoGPU {
		t.Errorf("train exit 198 read as 70:0 → %+v, want infra_failure/no_gpu (the masking the scripts' rule prevents)", v)
	}
}

// TestScriptAltered: an author or train job that is a task of a job array
// exits 65 when its episode's staged script changed after staging (the
// array's script checks each task's sha256 before running it). Only a
// process of the user changes a staged file: the policy's code without
// isolation (a sibling episode's: the same user), a breach with it. Never
// the cluster's, never masked. Eval's 65 stays its own verdict on its
// image and inputs.
func TestScriptAltered(t *testing.T) {
	for _, isolated := range []bool{false, true} {
		for _, stage := range []stages.Stage{stages.Author, stages.Train} {
			f := healthy(isolated)
			j := f.Jobs[stage]
			j.State, j.ExitCode = slurm.ParseState("FAILED", ""), slurm.ParseExitCode(fmt.Sprintf("%d:0", stages.ExitInputsTampered))
			f.Jobs[stage] = j
			v := decideAll(t, f).Verdict
			want := PolicyFailure
			if isolated {
				want = IntegrityViolation
			}
			if v == nil || v.Kind != want || v.Reason != ReasonScriptAltered || v.Stage != stage || !v.Tampering {
				t.Errorf("isolated %v, %s exit %d → %+v, want %s/%s at %s, tampering", isolated, stage, stages.ExitInputsTampered, v, want, ReasonScriptAltered, stage)
			}
		}
	}
	f := healthy(true)
	j := f.Jobs[stages.Eval]
	j.State, j.ExitCode = slurm.ParseState("FAILED", ""), slurm.ParseExitCode(fmt.Sprintf("%d:0", stages.ExitInputsTampered))
	f.Jobs[stages.Eval] = j
	if v := decideAll(t, f).Verdict; v == nil || v.Reason != ReasonEvalInputsTampered {
		t.Errorf("eval exit %d → %+v, want %s", stages.ExitInputsTampered, v, ReasonEvalInputsTampered)
	}
}
