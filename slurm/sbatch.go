package slurm

import (
	"bytes"
	"errors"
	"fmt"
	"strings"

	"github.com/nemorl/nemorl-slurm/remote"
)

// SubmitRequest is one sbatch call. Exactly one of ScriptPath, Script and
// Wrap says what to run.
type SubmitRequest struct {
	// ScriptPath is the batch script's path on the Slurm side.
	ScriptPath string
	// ScriptArgs follow ScriptPath on the command line.
	ScriptArgs []string
	// Script is the batch script itself, sent to sbatch on stdin.
	Script []byte
	// Wrap is a command line for --wrap (sbatch makes the script).
	Wrap string

	// Name is --job-name.
	Name string
	// Comment is --comment (find jobs again with FindByComment).
	Comment string
	// Array makes the job an array (--array=SPEC): task indices and
	// ranges separated by commas, with an optional "%N" to run at most N
	// tasks at once ("0-49", "0,3,7", "0-49%5"); nothing else is taken.
	// sbatch prints the array's job id; its tasks are TaskID(id, i). The
	// largest index must be below the cluster's MaxArraySize (1001 by
	// default): Config.CheckArray (with Client.Config, read once per
	// Client) says whether it fits; sbatch refuses one that does not
	// (SubmitRefused).
	Array string
	// AfterOK lists job ids this job waits for: --dependency=afterok:A:B.
	// A task id ("123_4") waits for that task alone.
	AfterOK []string
	// AfterCorr lists the ids of arrays whose corresponding task each
	// task of this array waits for (--dependency=aftercorr:A:B): task i
	// starts once task i of each has completed successfully; where one
	// failed, task i's dependency can never be satisfied (with
	// KillOnInvalidDep Slurm cancels task i alone). It needs Array. With
	// AfterOK, both must hold: one --dependency joined by ",".
	AfterCorr []string
	// Hold submits the job held (--hold); Release lets it run.
	Hold bool
	// KillOnInvalidDep cancels the job as soon as a dependency can never
	// be satisfied (--kill-on-invalid-dep=yes) instead of leaving it
	// pending forever.
	KillOnInvalidDep bool
	// Args are further sbatch options, each one word starting with "-"
	// ("--time=10", "--gres=gpu:h100:1"); they go before the script.
	Args []string
}

// SubmitResult is what sbatch --parsable printed.
type SubmitResult struct {
	JobID string
	// Cluster is set when sbatch printed "id;cluster" (multi-cluster).
	Cluster string
	// Warnings are the other lines sbatch printed ("sbatch: warning: …"),
	// trimmed, stderr first.
	Warnings []string
}

// SbatchArgs returns sbatch's argv for req (without the stdin).
func SbatchArgs(req SubmitRequest) ([]string, error) {
	n := 0
	for _, set := range []bool{req.ScriptPath != "", req.Script != nil, req.Wrap != ""} {
		if set {
			n++
		}
	}
	if n != 1 {
		return nil, errors.New("slurm: submit: exactly one of ScriptPath, Script and Wrap must be set")
	}
	if len(req.ScriptArgs) > 0 && req.ScriptPath == "" {
		return nil, errors.New("slurm: submit: ScriptArgs need ScriptPath")
	}
	argv := []string{"sbatch", "--parsable"}
	if req.Name != "" {
		if err := checkWord("job name", req.Name); err != nil {
			return nil, err
		}
		argv = append(argv, "--job-name="+req.Name)
	}
	if req.Comment != "" {
		if err := checkWord("comment", req.Comment); err != nil {
			return nil, err
		}
		argv = append(argv, "--comment="+req.Comment)
	}
	if req.Array != "" {
		if err := checkArraySpec(req.Array); err != nil {
			return nil, err
		}
		argv = append(argv, "--array="+req.Array)
	}
	var deps []string
	if len(req.AfterOK) > 0 {
		for _, id := range req.AfterOK {
			if !ValidJobID(id) {
				return nil, fmt.Errorf("slurm: submit: bad dependency job id %q", id)
			}
		}
		deps = append(deps, "afterok:"+strings.Join(req.AfterOK, ":"))
	}
	if len(req.AfterCorr) > 0 {
		if req.Array == "" {
			return nil, errors.New("slurm: submit: AfterCorr needs Array (aftercorr pairs the tasks of two arrays)")
		}
		for _, id := range req.AfterCorr {
			if !canonicalNumber(id) {
				return nil, fmt.Errorf("slurm: submit: bad aftercorr job id %q (an array's job id, as sbatch printed it)", id)
			}
		}
		deps = append(deps, "aftercorr:"+strings.Join(req.AfterCorr, ":"))
	}
	if len(deps) > 0 {
		// "," : every one must hold ("?" would be any one).
		argv = append(argv, "--dependency="+strings.Join(deps, ","))
	}
	if req.Hold {
		argv = append(argv, "--hold")
	}
	if req.KillOnInvalidDep {
		argv = append(argv, "--kill-on-invalid-dep=yes")
	}
	for _, a := range req.Args {
		if !strings.HasPrefix(a, "-") || a == "-" || a == "--" {
			return nil, fmt.Errorf("slurm: submit: extra argument %q is not an option", a)
		}
		if err := checkWord("extra argument", a); err != nil {
			return nil, err
		}
		argv = append(argv, a)
	}
	switch {
	case req.Wrap != "":
		if strings.ContainsRune(req.Wrap, 0) {
			return nil, errors.New("slurm: submit: wrap command holds a NUL byte")
		}
		argv = append(argv, "--wrap="+req.Wrap)
	case req.ScriptPath != "":
		if strings.HasPrefix(req.ScriptPath, "-") {
			return nil, fmt.Errorf("slurm: submit: script path %q starts with -", req.ScriptPath)
		}
		if err := checkWord("script path", req.ScriptPath); err != nil {
			return nil, err
		}
		argv = append(argv, req.ScriptPath)
		for _, a := range req.ScriptArgs {
			if strings.ContainsRune(a, 0) {
				return nil, errors.New("slurm: submit: script argument holds a NUL byte")
			}
		}
		argv = append(argv, req.ScriptArgs...)
	}
	return argv, nil
}

func checkWord(what, s string) error {
	if strings.ContainsAny(s, "\x00\n\r"+Sep) {
		return fmt.Errorf("slurm: submit: %s %q holds a control character", what, s)
	}
	return nil
}

// ParseSbatch parses what `sbatch --parsable` printed on success: one line
// "jobid" or "jobid;cluster" on stdout (for an array, the array's job id). Every other non-empty line, from
// stderr ("sbatch: warning: …") or stdout (a site's job_submit message),
// is returned as a warning. It fails when stdout holds no job id.
func ParseSbatch(stdout, stderr []byte) (SubmitResult, error) {
	var r SubmitResult
	for _, l := range lines(stderr) {
		r.Warnings = append(r.Warnings, l)
	}
	var other []string
	for _, l := range lines(stdout) {
		id, cluster, _ := strings.Cut(l, ";")
		if isDigits(id) && len(id) <= 20 && !strings.ContainsAny(cluster, " \t;") {
			if r.JobID != "" {
				other = append(other, r.JobID+suffix(r.Cluster))
			}
			r.JobID, r.Cluster = id, cluster
			continue
		}
		other = append(other, l)
	}
	r.Warnings = append(r.Warnings, other...)
	if r.JobID == "" {
		msg := strings.Join(lines(stdout), " / ")
		if len(msg) > 200 {
			msg = msg[:200] + "…"
		}
		return r, fmt.Errorf("slurm: sbatch printed no job id (stdout %q)", msg)
	}
	return r, nil
}

func suffix(cluster string) string {
	if cluster == "" {
		return ""
	}
	return ";" + cluster
}

// lines returns the non-empty lines of b, trimmed.
func lines(b []byte) []string {
	var out []string
	for _, l := range bytes.Split(b, []byte("\n")) {
		if s := strings.TrimSpace(string(l)); s != "" {
			out = append(out, s)
		}
	}
	return out
}

// permanentSbatch are sbatch refusals that will not change if the same
// script is submitted again: a wrong partition, account, QOS, GRES or time
// limit, or a script that is gone. Anything else (submit limits, a busy or
// unreachable slurmctld, a lost connection) may pass later.
var permanentSbatch = []string{
	"Invalid partition name",
	"invalid partition specified",
	"Invalid account",
	"Invalid qos specification",
	"Invalid generic resource",
	"Invalid gres specification",
	"Requested node configuration is not available",
	"Requested time limit is invalid",
	"Invalid feature specification",
	"Unable to open file",
	"Batch script is empty",
	"Node count specification invalid",
	"Invalid job array specification", // an index at or above MaxArraySize, more tasks than max_array_tasks
}

// SubmitRefused reports whether err, from Submit, is sbatch refusing the
// job for a reason a later try cannot fix; it returns that reason.
func SubmitRefused(err error) (string, bool) {
	var ce *remote.CommandError
	if !errors.As(err, &ce) {
		return "", false
	}
	for _, p := range permanentSbatch {
		if strings.Contains(strings.ToLower(ce.Stderr), strings.ToLower(p)) {
			return ce.Stderr, true
		}
	}
	return "", false
}

// notCreatedSbatch are sbatch answers given before slurmctld took the job
// in: the user's rate limit (SlurmctldParameters=rl_enable refuses the
// request as it arrives) and a controller that could not be reached at
// all. "Socket timed out on send/recv operation" is not one: the request
// may have been processed and its answer lost, so the job may exist.
var notCreatedSbatch = []string{
	"rate limit",
	"unable to contact slurm controller",
}

// SubmitNotCreated reports whether err, from an sbatch, says that no job
// was made (notCreatedSbatch): the submission may simply be made again,
// without looking for a job it might have left.
func SubmitNotCreated(err error) bool {
	var ce *remote.CommandError
	if !errors.As(err, &ce) || ce.ExitStatus == 0 {
		return false
	}
	s := strings.ToLower(ce.Stderr)
	if strings.Contains(s, "socket timed out") {
		return false
	}
	for _, p := range notCreatedSbatch {
		if strings.Contains(s, p) {
			return true
		}
	}
	return false
}
