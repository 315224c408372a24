package slurm

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/nemorl/nemorl-slurm/remote"
)

// ErrNoBatchScript: Slurm knows the job but holds no batch script for it.
// sacct --batch-script prints NONE for a job whose record has no script:
// slurm.conf without AccountingStoreFlags=job_script when the job was
// submitted, or — for a few seconds after a job starts — a record whose
// script slurmdbd has not received yet (lab, 22.05: NONE 3 s after the
// start, the script 8 s after). A caller may retry that second case later.
var ErrNoBatchScript = errors.New("slurm: no batch script stored for the job")

// ErrUnknownJob: neither slurmctld nor the accounting database (as the
// calling user sees it) knows the job. sacct shows only the caller's own
// jobs to a user who is not an administrator.
var ErrUnknownJob = errors.New("slurm: job unknown to slurmctld and sacct")

// BatchScript returns job id's batch script exactly as it was submitted,
// byte for byte (a missing final newline stays missing). It asks slurmctld
// first (scontrol write batch_script ID -), which knows a job until
// MinJobAge after its end; when slurmctld no longer knows the job (or
// fails), it asks the accounting database (sacct --batch-script), which
// needs AccountingStoreFlags=job_script. Both give the same bytes for the
// same job (lab test). Only the job's owner (or an administrator) gets it.
//
// id is a plain job id (123) or an array task's (123_4): every task of an
// array has the array's script, byte for byte. scontrol answers for a
// task as for its array (22.05 and 24.11: the same bytes for 123, 123_4
// and a task still pending in the array's record); sacct frames each
// task's record under its own id ("Batch Script for 123_4"), and shows
// it once Slurm split the task out (it ran): a task that never ran is
// not there (ErrUnknownJob). A heterogeneous job's component (123+0) is
// refused.
//
// The error matches ErrNoBatchScript when the job is known but has no
// stored script, ErrUnknownJob when neither knows it.
func (c *Client) BatchScript(ctx context.Context, id string) ([]byte, error) {
	if _, _, isTask := SplitTaskID(id); !(isTask || isDigits(id) && len(id) <= 32) {
		return nil, fmt.Errorf("slurm: batch script: bad job id %q (a plain job id or an array task's is needed)", id)
	}
	script, ctldErr := c.ctldBatchScript(ctx, id)
	if ctldErr == nil {
		return script, nil
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	script, err := c.sacctBatchScript(ctx, id)
	switch {
	case err == nil:
		return script, nil
	case errors.Is(ctldErr, errCtldUnknownJob):
		// slurmctld forgot the job: sacct's answer is the answer.
		return nil, err
	case errors.Is(err, ErrUnknownJob):
		// slurmctld refused for another reason (another user's job,
		// controller down): its error says more than sacct's silence.
		return nil, ctldErr
	default:
		return nil, fmt.Errorf("%w (and %w)", ctldErr, err)
	}
}

// errCtldUnknownJob: scontrol said slurmctld does not know the job.
var errCtldUnknownJob = errors.New("slurmctld does not know the job")

// ctldScriptFailure is the message scontrol prints (on stderr) when it
// could not get the script; 22.05 still exits 0 (lab).
const ctldScriptFailure = "job script retrieval failed"

// ctldBatchScript runs scontrol write batch_script ID -, which writes the
// script to stdout exactly as stored (no framing, no newline added: lab,
// 22.05.8). On failure 22.05 prints "job script retrieval failed: <Slurm
// error>" on stderr and exits 0: "Invalid job id specified" for a job
// slurmctld does not (or no longer) know, "Invalid user id" for another
// user's job.
func (c *Client) ctldBatchScript(ctx context.Context, id string) ([]byte, error) {
	cmd := remote.Command{Argv: []string{"scontrol", "write", "batch_script", id, "-"}, Idempotent: true}
	res, err := c.run(ctx, KindScontrol, cmd)
	var stderr []byte
	if res != nil {
		stderr = res.Stderr
	}
	if bytes.Contains(stderr, []byte(ctldScriptFailure)) {
		msg := remote.TrimStderr(stderr)
		if bytes.Contains(stderr, []byte("Invalid job id specified")) {
			return nil, fmt.Errorf("slurm: batch script: %s: %s: %w", cmd.String(), msg, errCtldUnknownJob)
		}
		return nil, fmt.Errorf("slurm: batch script: %s: %s", cmd.String(), msg)
	}
	if err != nil {
		return nil, commandError("batch script", cmd, res, err)
	}
	if len(res.Stdout) == 0 {
		return nil, fmt.Errorf("slurm: batch script: %s printed nothing", cmd.String())
	}
	return res.Stdout, nil
}

// sacctBatchScript runs sacct --batch-script --jobs=ID and unframes its
// output with ParseSacctBatchScript, as the cluster's sacct frames it
// (SacctVersion).
func (c *Client) sacctBatchScript(ctx context.Context, id string) ([]byte, error) {
	v, err := c.SacctVersion(ctx)
	if err != nil {
		return nil, fmt.Errorf("slurm: batch script of job %s: how sacct frames it: %w", id, err)
	}
	cmd := remote.Command{Argv: append(c.sacctArgv(), "--batch-script", "--jobs="+id), Idempotent: true}
	res, err := c.run(ctx, KindSacct, cmd)
	if err != nil {
		return nil, commandError("batch script", cmd, res, err)
	}
	script, err := ParseSacctBatchScript(v, id, res.Stdout)
	if err != nil {
		return nil, fmt.Errorf("%w (%s)", err, cmd.Brief())
	}
	return script, nil
}

// sacctScriptRule is the line under sacct's "Batch Script for ID" header.
var sacctScriptRule = strings.Repeat("-", 80)

// sacctNone is what sacct prints in place of a script it does not hold.
const sacctNone = "NONE\n"

// SacctAddsNewline reports whether sacct of version v prints a newline of
// its own after each --batch-script record: 22.05 to 24.05 do, 24.11 and
// later do not (src/sacct/options.c, _print_script, at every release tag
// from slurm-22-05-0-1 to slurm-24-05-8-1, and from slurm-24-11-0-1 to
// slurm-26-05-3-1).
func SacctAddsNewline(v Version) bool { return !v.AtLeast(24, 11) }

// FrameSacctBatchScript is what sacct of version v prints for
// --batch-script --jobs=ID of job id with the given script ("NONE\n" for
// none stored), without --noheader: ParseSacctBatchScript's inverse.
func FrameSacctBatchScript(v Version, id string, script []byte) []byte {
	out := []byte("Batch Script for " + id + "\n" + sacctScriptRule + "\n")
	out = append(out, script...)
	if SacctAddsNewline(v) {
		out = append(out, '\n')
	}
	return out
}

// ParseSacctBatchScript unframes `sacct --batch-script --jobs=ID` output
// for job id, printed by sacct of version v (src/sacct/options.c,
// _print_script). Each job record is a header and the script exactly as
// stored, "NONE\n" in place of a script the record does not hold:
//
//	Batch Script for ID\n
//	<80 dashes>\n
//	<the script>
//
// followed, from 22.05 to 24.05 only, by one newline of sacct's own
// (printf("...%s\n", script)), whatever the script's last byte; 24.11
// dropped it (printf("%s", script)). 24.11 also drops the header under
// --noheader, which the Client does not pass: the header names the job,
// on every version. No column header, no other framing; no output at all
// (exit 0) for a job sacct does not show the caller. (Captured: testdata/
// lab for 22.05.8, testdata/lab-24.11 for 24.11.)
//
// The output must be exactly one such record for id: the header is matched
// at the start only (a script may itself hold a "Batch Script for" line or
// a line of dashes), sacct's own newline (where v adds one) is removed,
// and the rest is returned. NONE gives ErrNoBatchScript, no output
// ErrUnknownJob; a header for another id (an array task 123_1, a
// heterogeneous component 123+0) or a body that is not a script (sbatch
// requires "#!" first) is an error.
func ParseSacctBatchScript(v Version, id string, out []byte) ([]byte, error) {
	if len(bytes.TrimSpace(out)) == 0 {
		return nil, fmt.Errorf("%w: sacct has no record of job %s", ErrUnknownJob, id)
	}
	header := "Batch Script for " + id + "\n" + sacctScriptRule + "\n"
	script, ok := bytes.CutPrefix(out, []byte(header))
	if !ok {
		first, _, _ := bytes.Cut(out, []byte("\n"))
		if bytes.HasPrefix(first, []byte("Batch Script for "+id+"_")) {
			return nil, fmt.Errorf("slurm: sacct %s batch script of job %s: an array, one record per task (%.40q): ask for a task's", v, id, first)
		}
		return nil, fmt.Errorf("slurm: sacct %s batch script of job %s: unexpected framing %.80q", v, id, first)
	}
	if SacctAddsNewline(v) {
		if script, ok = bytes.CutSuffix(script, []byte("\n")); !ok {
			return nil, fmt.Errorf("slurm: sacct %s batch script of job %s: no final newline (output cut short?)", v, id)
		}
	}
	if string(script) == sacctNone {
		return nil, fmt.Errorf("%w: sacct says NONE for job %s (AccountingStoreFlags without job_script, a script purged, a job without one, or slurmdbd has not received it yet)", ErrNoBatchScript, id)
	}
	if !bytes.HasPrefix(script, []byte("#!")) {
		return nil, fmt.Errorf("slurm: sacct %s batch script of job %s: does not start with #!: %.40q", v, id, script)
	}
	return bytes.Clone(script), nil
}
