package train

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/nemorl/nemorl-slurm/internal/shell"
	"github.com/nemorl/nemorl-slurm/record"
)

// Exit codes of Run, for the job.
const (
	// ExitOK: status ok, model.safetensors is in OutDir.
	ExitOK = 0
	// ExitPolicyFailure: a record with another status was printed.
	ExitPolicyFailure = 1
	// ExitInfra: a launcher or infrastructure fault; no record was printed.
	ExitInfra = 3
)

// deadlineSlack allows for clock steps between the job script's date and
// the launcher's start.
const deadlineSlack = time.Minute

// Run runs the train stage (see the package documentation) and prints its
// record on stdout, exactly one line. log receives the launcher's messages
// and the trainer's and exporter's output.
//
// The record's status:
//
//   - patch_failed: `git apply --check` refused the patch (the trainer does
//     not run; trainer_exit_status 0);
//   - trainer_timeout: the trainer still ran at Deadline+Grace, or ctx was
//     cancelled (the job got TERM) before the export, and its process
//     group was stopped (TERM, then KILL after KillAfter);
//   - trainer_failed: it exited non-zero (trainer_exit_status, -1 for a
//     signal);
//   - no_reward: it exited 0 without an "• Avg Reward:" line;
//   - no_checkpoint: nor a results/grpo/step_N directory (N ≥ 1);
//   - export_failed: the exporter failed, outlived ExportMargin, was
//     cancelled, or left no non-empty output;
//   - ok: the sha256 and size of OutDir/model.safetensors are recorded.
//
// train_reward and inner_steps carry what was found (the last reward, the
// highest step) whatever the status; the weights fields only with ok.
//
// Any other failure (a bad plan, missing inputs, an empty patch, git or
// python that cannot be started, unreadable train data, I/O errors) prints
// no record and returns ExitInfra with the error. In every case the
// trainer's and exporter's process groups are gone when Run returns.
func Run(ctx context.Context, p Plan, stdout io.Writer, log io.Writer) (*record.Train, int, error) {
	lw := &lockedWriter{w: log}
	logf := func(format string, args ...any) {
		fmt.Fprintf(lw, "nemorl-train: "+format+"\n", args...)
	}
	infra := func(err error) (*record.Train, int, error) {
		logf("error: %v", err)
		return nil, ExitInfra, err
	}
	var gpu record.GPU // read before the policy's code runs
	finish := func(rec *record.Train) (*record.Train, int, error) {
		rec.SetGPU(gpu)
		logf("status %s: train_reward %v, inner_steps %d, trainer_exit_status %d",
			rec.Status, rec.TrainReward, rec.InnerSteps, rec.TrainerExitStatus)
		if err := record.Write(stdout, rec); err != nil {
			return rec, ExitInfra, fmt.Errorf("print the record: %w", err)
		}
		if rec.Status == record.StatusOK {
			return rec, ExitOK, nil
		}
		return rec, ExitPolicyFailure, nil
	}

	if err := p.Validate(); err != nil {
		return infra(err)
	}
	p = p.withDefaults()
	if err := p.preflight(); err != nil {
		return infra(err)
	}
	// NEMORL_DEADLINE is the stage start plus inner_deadline_seconds, so it
	// is never further away than that; more means a wrong unit or clock.
	if left, most := time.Until(p.Deadline), time.Duration(p.Settings.InnerDeadlineSeconds)*time.Second+deadlineSlack; left > most {
		return infra(fmt.Errorf("the deadline %s is %s away, more than inner_deadline_seconds (%d s)",
			p.Deadline.UTC().Format(time.RFC3339), left.Truncate(time.Second), p.Settings.InnerDeadlineSeconds))
	}
	if err := p.clearOutputs(); err != nil {
		return infra(err)
	}
	// The job's GPU, for the record (informational: the policy's code runs
	// in this job). One that cannot be read is not a failure of the stage.
	if g, err := record.QueryGPU(ctx, p.SMI, p.GPUs); err != nil {
		logf("warning: the GPU could not be read, the record names none: %v", err)
	} else {
		gpu = g
		logf("GPU: %s", g.String())
	}

	// 1. The policy's patch.
	logf("applying %s in %s", p.Patch, p.WorkDir)
	if err := ApplyPatch(ctx, p); err != nil {
		var pe *PatchError
		switch {
		case errors.As(err, &pe):
			logf("git apply --check refused the patch:\n%s", pe.Output)
			return finish(&record.Train{Status: record.StatusPatchFailed})
		case ctx.Err() != nil:
			logf("cancelled while applying the patch")
			return finish(&record.Train{Status: record.StatusTrainerTimeout})
		}
		return infra(err)
	}

	// 2. The training rows.
	n, err := p.writeGymRows()
	if err != nil {
		return infra(err)
	}
	logf("wrote %d rows to %s", n, filepath.Join(p.WorkDir, GymTrainFile))
	if ctx.Err() != nil {
		logf("cancelled before the trainer started")
		return finish(&record.Train{Status: record.StatusTrainerTimeout})
	}

	// 3. The trainer.
	trainLog, err := os.OpenFile(filepath.Join(p.WorkDir, TrainLogFile), os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return infra(err)
	}
	defer trainLog.Close()
	var rewards rewardScanner
	fileSink := &tolerantWriter{w: trainLog}
	now := time.Now()
	argv := p.TrainerArgv(now)
	stopAt := p.Deadline.Add(p.Grace)
	logf("deadline %s (in %s), stop at %s", p.Deadline.UTC().Format(time.RFC3339), p.Deadline.Sub(now).Truncate(time.Second), stopAt.UTC().Format(time.RFC3339))
	logf("trainer (in %s): %s", p.NemoRLRoot(), shell.Join(argv))
	res, err := child{
		argv:      argv,
		dir:       p.NemoRLRoot(),
		env:       p.TrainerEnv(os.Environ()),
		out:       io.MultiWriter(fileSink, &tolerantWriter{w: lw}, &rewards),
		stopAt:    stopAt,
		killAfter: p.KillAfter,
		started:   func(pgid int) { logf("trainer started: process group %d", pgid) },
	}.run(ctx)
	if err != nil {
		return infra(err)
	}
	if err := errors.Join(trainLog.Close(), fileSink.err); err != nil {
		logf("warning: %s is incomplete: %v", TrainLogFile, err)
	}
	logf("trainer ended: exit status %d, %s", res.ExitStatus, res.Stopped)

	reward, hasReward := rewards.Result()
	steps, stepDir, err := LastCheckpoint(p.CheckpointDir())
	if err != nil {
		return infra(err)
	}
	rec := &record.Train{TrainReward: reward, InnerSteps: steps, TrainerExitStatus: res.ExitStatus}
	switch {
	case res.Stopped != notStopped:
		rec.Status = record.StatusTrainerTimeout
	case res.ExitStatus != 0:
		rec.Status = record.StatusTrainerFailed
	case !hasReward:
		rec.Status = record.StatusNoReward
	case steps == 0:
		rec.Status = record.StatusNoCheckpoint
	}
	if rec.Status != "" {
		return finish(rec)
	}

	// 4. The export.
	exportArgv := p.ExportArgv(stepDir)
	logf("exporter (in %s, at most %s): %s", p.WorkDir, p.ExportMargin, shell.Join(exportArgv))
	eres, err := child{
		argv:      exportArgv,
		dir:       p.WorkDir,
		env:       p.TrainerEnv(os.Environ()),
		out:       &tolerantWriter{w: lw},
		stopAt:    time.Now().Add(p.ExportMargin),
		killAfter: p.KillAfter,
		started:   func(pgid int) { logf("exporter started: process group %d", pgid) },
	}.run(ctx)
	if err != nil {
		return infra(err)
	}
	logf("exporter ended: exit status %d, %s", eres.ExitStatus, eres.Stopped)
	if eres.Stopped != notStopped || eres.ExitStatus != 0 {
		os.Remove(p.weightsTempPath())
		rec.Status = record.StatusExportFailed
		return finish(rec)
	}
	if fi, err := os.Lstat(p.weightsTempPath()); err != nil || !fi.Mode().IsRegular() || fi.Size() == 0 {
		logf("the exporter exited 0 but left no non-empty regular file %s", p.weightsTempPath())
		os.Remove(p.weightsTempPath())
		rec.Status = record.StatusExportFailed
		return finish(rec)
	}
	if err := os.Rename(p.weightsTempPath(), p.WeightsPath()); err != nil {
		return infra(err)
	}
	sum, size, err := hashFile(p.WeightsPath())
	if err != nil {
		return infra(err)
	}
	rec.Status, rec.WeightsSHA256, rec.WeightsBytes = record.StatusOK, sum, size
	return finish(rec)
}

// preflight checks that the inputs exist, so that a broken image or
// mount is a launcher fault, not the policy's.
func (p Plan) preflight() error {
	for _, f := range []struct {
		what, path string
		dir        bool
	}{
		{"work dir", p.WorkDir, true},
		{"recipe", filepath.Join(p.WorkDir, RecipeFile), false},
		{"NeMo RL checkout", p.NemoRLRoot(), true},
		{"patch", p.Patch, false},
		{"python", p.Python, false},
		{"train data", p.TrainData, false},
		{"export script", p.ExportScript, false},
		{"out dir", p.OutDir, true},
	} {
		fi, err := os.Stat(f.path)
		if err != nil {
			return fmt.Errorf("%s: %w", f.what, err)
		}
		if fi.IsDir() != f.dir {
			kind := "a regular file"
			if f.dir {
				kind = "a directory"
			}
			return fmt.Errorf("%s %s is not %s", f.what, f.path, kind)
		}
	}
	return nil
}

// clearOutputs removes what an earlier attempt may have left: weights in
// OutDir and checkpoints in WorkDir, so that neither is taken for this
// run's.
func (p Plan) clearOutputs() error {
	for _, f := range []string{p.WeightsPath(), p.weightsTempPath()} {
		if err := os.Remove(f); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return err
		}
	}
	return os.RemoveAll(p.CheckpointDir())
}

func (p Plan) writeGymRows() (int, error) {
	in, err := os.Open(p.TrainData)
	if err != nil {
		return 0, err
	}
	defer in.Close()
	path := filepath.Join(p.WorkDir, GymTrainFile)
	out, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return 0, err
	}
	n, err := GymRows(in, out)
	if cerr := out.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return 0, fmt.Errorf("%s: %w", p.TrainData, err)
	}
	return n, nil
}

// LastCheckpoint finds the checkpoint with the highest N among the
// directories dir/step_N (N decimal, at least 1), as the reference sorts
// results/grpo/step_* by their number. It returns 0 and "" when there is
// none or dir does not exist. NeMo RL writes a checkpoint as tmp_step_N and
// renames it when complete, so an unfinished one is not taken.
func LastCheckpoint(dir string) (int, string, error) {
	entries, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return 0, "", nil
	}
	if err != nil {
		return 0, "", fmt.Errorf("checkpoints: %w", err)
	}
	best, bestPath := 0, ""
	for _, e := range entries {
		digits, ok := strings.CutPrefix(e.Name(), "step_")
		if !ok || digits == "" || strings.TrimLeft(digits, "0123456789") != "" {
			continue
		}
		n, err := strconv.Atoi(digits)
		if err != nil || n < 1 || n <= best {
			continue
		}
		path := filepath.Join(dir, e.Name())
		if fi, err := os.Stat(path); err != nil || !fi.IsDir() {
			continue
		}
		best, bestPath = n, path
	}
	return best, bestPath, nil
}

func hashFile(path string) (string, int64, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", 0, err
	}
	defer f.Close()
	h := sha256.New()
	n, err := io.Copy(h, f)
	if err != nil {
		return "", 0, fmt.Errorf("hash %s: %w", path, err)
	}
	return hex.EncodeToString(h.Sum(nil)), n, nil
}
