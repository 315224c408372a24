package episode

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nemorl/nemorl-slurm/ledger"
	"github.com/nemorl/nemorl-slurm/record"
	"github.com/nemorl/nemorl-slurm/remote"
	"github.com/nemorl/nemorl-slurm/rules"
	"github.com/nemorl/nemorl-slurm/slurm"
	"github.com/nemorl/nemorl-slurm/stages"
)

// sbatchHost is a login node (files on this machine, in a temp directory)
// whose submit script's sbatch is answered by answer, or stalls until its
// context ends (a throttled controller: rl_enable retries silently); id
// answers for the cluster user; with local, every other command runs on
// this machine (the collector reading a stage's output).
type sbatchHost struct {
	remote.Host
	local  bool
	mu     sync.Mutex
	sbatch [][]string
	answer func(sbatch []string) (stdout, stderr string, exit int, stall bool)
}

func (h *sbatchHost) Name() string { return "fake-login" }

func (h *sbatchHost) Run(ctx context.Context, cmd remote.Command) (*remote.Result, error) {
	if len(cmd.Argv) == 1 && cmd.Argv[0] == "id" {
		return &remote.Result{Stdout: []byte("uid=1001(nemorl) gid=1001(nemorl)\n")}, nil
	}
	// sh -c submitScript sh MANIFEST PRE POST sbatch ARGV…
	if cmd.Label != "sbatch" || len(cmd.Argv) < 8 || cmd.Argv[7] != "sbatch" {
		if h.local {
			return h.Host.Run(ctx, cmd)
		}
		return nil, fmt.Errorf("fake login: unexpected %q", cmd.Argv)
	}
	argv := cmd.Argv[7:]
	h.mu.Lock()
	h.sbatch = append(h.sbatch, argv)
	h.mu.Unlock()
	out, errOut, exit, stall := h.answer(argv)
	if stall {
		<-ctx.Done()
		return nil, fmt.Errorf("fake login: %s: %w", cmd.Brief(), ctx.Err())
	}
	res := &remote.Result{Stdout: []byte(out), Stderr: []byte(errOut), ExitStatus: exit}
	if exit != 0 {
		return res, &remote.CommandError{Host: h.Name(), Command: cmd.String(), ExitStatus: exit, Stderr: remote.TrimStderr(res.Stderr)}
	}
	return res, nil
}

func (h *sbatchHost) calls() [][]string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Clone(h.sbatch)
}

// slurmAnswers answers the Slurm client's commands by program (behind
// env's VAR=value words); a program without an answer fails as a
// controller away would.
type slurmAnswers struct {
	mu    sync.Mutex
	calls [][]string
	by    map[string]func(argv []string) (stdout, stderr string, exit int)
}

func (s *slurmAnswers) Run(_ context.Context, cmd remote.Command) (*remote.Result, error) {
	if cmd.Stdin != nil {
		_, _ = io.Copy(io.Discard, cmd.Stdin)
	}
	prog := ""
	for i, a := range cmd.Argv {
		if (i == 0 && a == "env") || (cmd.Argv[0] == "env" && strings.Contains(a, "=")) {
			continue
		}
		prog = a
		break
	}
	s.mu.Lock()
	s.calls = append(s.calls, cmd.Argv)
	h := s.by[prog]
	s.mu.Unlock()
	out, errOut, exit := "", prog+": error: Unable to contact slurm controller (connect failure)", 1
	if h != nil {
		out, errOut, exit = h(cmd.Argv)
	}
	res := &remote.Result{Stdout: []byte(out), Stderr: []byte(errOut), ExitStatus: exit}
	if exit != 0 {
		return res, &remote.CommandError{Host: "fake", Command: cmd.String(), ExitStatus: exit, Stderr: remote.TrimStderr(res.Stderr)}
	}
	return res, nil
}

func (s *slurmAnswers) count(prog string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, c := range s.calls {
		if slices.Contains(c, prog) {
			n++
		}
	}
	return n
}

// acctLine is a sacct line (the Client's SacctFields) of job id.
func acctLine(id, name, state, comment string, submit time.Time) string {
	ts := fmt.Sprint(submit.Unix())
	return strings.Join([]string{id, id, name, state, "0:0", "None", ts, ts, "", "00:00:01", "vm", "nemorl", "60", comment}, slurm.Sep) + "\n"
}

// queueLine is a squeue line (SqueueFormat) of job id.
func queueLine(id, name, state, comment string, submit time.Time) string {
	ts := fmt.Sprint(submit.Unix())
	return strings.Join([]string{id, name, state, "None", ts, ts, "N/A", "0:01", "vm", "nemorl", "1:00:00", comment}, slurm.Sep) + "\n"
}

// siblingEpisode is an episode whose train job (trainID) runs or ran, and
// whose eval is to be submitted after it, with a driver over host and sl.
func siblingEpisode(t *testing.T, host *sbatchHost, sl *slurmAnswers, trainID string) (*Driver, *ledger.Entry, string) {
	t.Helper()
	lg, err := ledger.OpenLedger(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	host.Host = remote.NewLocal()
	evalScript := "#!/bin/bash\necho eval\n"
	sum := sha256.Sum256([]byte(evalScript))
	e := &ledger.Entry{Episode: "ep-sib", Staged: true, Dir: t.TempDir(), Created: time.Now().UTC(),
		Author:  &record.Author{PatchBytes: 10},
		Scripts: map[stages.Stage]string{stages.Author: "a", stages.Train: "t", stages.Eval: hex.EncodeToString(sum[:])},
		Jobs:    map[stages.Stage]*ledger.Submission{stages.Author: {JobID: "1"}, stages.Train: {JobID: trainID}}}
	if err := lg.Create(e, []byte("p")); err != nil {
		t.Fatal(err)
	}
	cl := slurm.New(sl)
	d := &Driver{Config: exampleConfig(t), Host: host, Slurm: cl, Ledger: lg, Logf: t.Logf}
	return d, e, evalScript
}

// TestSubmitDependencyProblem: sbatch's "Job dependency problem" for eval's
// afterok on train says either that train left slurmctld (MinJobAge) or,
// on Slurm 23.02.0 to 23.11.6, that train is a federated job another
// cluster runs. Eval goes without the dependency only when Slurm says
// train COMPLETED; otherwise it is not submitted (no job was made, so the
// intent goes), and the error says why, naming members: where a federation
// is the likely cause: never an eval that may start before train ended.
func TestSubmitDependencyProblem(t *testing.T) {
	const train = "70000002"
	refused := "sbatch: error: Batch job submission failed: Job dependency problem"
	for _, c := range []struct {
		name    string
		sacct   string // sacct's answer about train; "down": failing
		squeue  string // squeue's; "down": failing
		ok      bool
		mention []string
	}{
		{"completed, gone from slurmctld", "COMPLETED", "", true, nil},
		{"running on a sibling", "RUNNING", "", false, []string{"members:", "RUNNING", train}},
		{"pending, sacct lags", "", "PENDING", false, []string{"members:", "PENDING"}},
		{"revoked here", "REVOKED", "", false, []string{"members:", "REVOKED", "another cluster"}},
		{"failed", "FAILED", "", false, []string{"FAILED"}},
		{"unknown to both", "", "", false, []string{"no state", train}},
		{"both down", "down", "down", false, []string{"Unable to contact"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			now := time.Now()
			host := &sbatchHost{answer: func(argv []string) (string, string, int, bool) {
				if slices.ContainsFunc(argv, func(a string) bool { return strings.HasPrefix(a, "--dependency=") }) {
					return "", refused, 1, false
				}
				return "4243\n", "", 0, false
			}}
			sl := &slurmAnswers{by: map[string]func([]string) (string, string, int){
				"sacct": func(argv []string) (string, string, int) {
					switch c.sacct {
					case "down":
						return "", "sacct: error: slurmdbd: Connection refused", 1
					case "":
						return "", "", 0
					}
					return acctLine(train, "nemorl-train-ep-sib", c.sacct, "", now), "", 0
				},
				"squeue": func(argv []string) (string, string, int) {
					switch c.squeue {
					case "down":
						return "", "squeue: error: Unable to contact slurm controller (connect failure)", 1
					case "":
						return "", "slurm_load_jobs error: Invalid job id specified", 1
					}
					return queueLine(train, "nemorl-train-ep-sib", c.squeue, "", now), "", 0
				},
			}}
			d, e, _ := siblingEpisode(t, host, sl, train)
			err := d.parts().submitter.submit(context.Background(), e, stages.Eval, train, false, change{})
			calls := host.calls()
			if c.ok {
				if err != nil {
					t.Fatal(err)
				}
				if len(calls) != 2 || !slices.Contains(calls[0], "--dependency=afterok:"+train) || slices.ContainsFunc(calls[1], func(a string) bool { return strings.HasPrefix(a, "--dependency") }) {
					t.Fatalf("sbatch calls %q", calls)
				}
				if got := e.JobID(stages.Eval); got != "4243" {
					t.Fatalf("eval job %q", got)
				}
				return
			}
			if !errors.Is(err, ErrDependencyUnconfirmed) {
				t.Fatalf("error %v: want ErrDependencyUnconfirmed", err)
			}
			for _, m := range c.mention {
				if !strings.Contains(err.Error(), m) {
					t.Errorf("error %q does not say %q", err, m)
				}
			}
			if len(calls) != 1 {
				t.Fatalf("sbatch ran %d times: %q", len(calls), calls)
			}
			if _, refused := slurm.SubmitRefused(err); refused || errors.Is(err, remote.ErrOutcomeUnknown) {
				t.Errorf("error %v reads as refused for good, or as an outcome unknown", err)
			}
			// No job was made: the next try submits afresh, without the
			// look-up an intent left on record would cost.
			saved, lerr := d.Ledger.Load(e.Episode)
			if lerr != nil {
				t.Fatal(lerr)
			}
			if e.Jobs[stages.Eval] != nil || saved.Jobs[stages.Eval] != nil {
				t.Errorf("eval's intent kept: %+v / %+v", e.Jobs[stages.Eval], saved.Jobs[stages.Eval])
			}
		})
	}
}

// TestSubmitDeadline: an sbatch still running at its deadline is stopped
// and its outcome is unknown: the stage is looked for by its comment tag
// (nothing yet: the intent stays on record, no job id), never submitted
// again blindly; the next try finds the job the stopped sbatch made and
// adopts it, so sbatch has run once.
func TestSubmitDeadline(t *testing.T) {
	const train = "50"
	host := &sbatchHost{answer: func([]string) (string, string, int, bool) { return "", "", 0, true }}
	var made bool // the job the stopped sbatch made, once slurmctld shows it
	var mu sync.Mutex
	sl := &slurmAnswers{by: map[string]func([]string) (string, string, int){}}
	d, e, evalScript := siblingEpisode(t, host, sl, train)
	name, tag := stages.JobName(e.Episode, stages.Eval), stages.AttemptComment(e.Episode, stages.Eval, 1)
	sl.by["sacct"] = func([]string) (string, string, int) { return "", "", 0 }
	sl.by["squeue"] = func([]string) (string, string, int) {
		mu.Lock()
		defer mu.Unlock()
		if !made {
			return "", "", 0
		}
		return queueLine("4300", name, "PENDING", tag, time.Now()), "", 0
	}
	sl.by["scontrol"] = func(argv []string) (string, string, int) {
		if strings.Join(argv, " ") != "scontrol write batch_script 4300 -" {
			return "", "bad argv", 2
		}
		return evalScript, "", 0
	}
	d.Slurm.Deadlines.Sbatch = 50 * time.Millisecond
	sub := d.parts().submitter

	start := time.Now()
	err := sub.submit(context.Background(), e, stages.Eval, train, false, change{})
	if took := time.Since(start); took > 5*time.Second {
		t.Errorf("submit took %v", took)
	}
	if !errors.Is(err, remote.ErrOutcomeUnknown) || !errors.Is(err, slurm.ErrDeadline) {
		t.Fatalf("error %v: want an outcome unknown at the sbatch deadline", err)
	}
	if slurm.SubmitNotCreated(err) {
		t.Fatal("reads as not created")
	}
	if !strings.Contains(err.Error(), "sbatch --parsable") || strings.Contains(err.Error(), "submitScript") {
		t.Errorf("error %q: want the sbatch command named", err)
	}
	if n := len(host.calls()); n != 1 {
		t.Fatalf("sbatch ran %d times", n)
	}
	if sl.count("squeue") == 0 {
		t.Error("no look-up by comment tag after the outcome unknown")
	}
	if s := e.Jobs[stages.Eval]; s == nil || s.JobID != "" || s.Intent.IsZero() {
		t.Fatalf("eval's submission after the deadline: %+v", s)
	}

	mu.Lock()
	made = true
	mu.Unlock()
	if err := sub.submit(context.Background(), e, stages.Eval, train, false, change{}); err != nil {
		t.Fatal(err)
	}
	if s := e.Jobs[stages.Eval]; s.JobID != "4300" || !s.Adopted {
		t.Fatalf("eval's submission: %+v", s)
	}
	if n := len(host.calls()); n != 1 {
		t.Fatalf("sbatch ran %d times", n)
	}
}

// TestSubmitBatchDeadline: a batch command (staging and the authors'
// sbatch) still running at its deadline is stopped, its sbatch killed with
// it, and each episode's outcome is unknown: looked for by its comment
// tag, kept in the ledger with its intent for resume, never submitted
// again blindly. The sbatch here ignores TERM, so that its own deadline
// (batch.sh's timeout, which sends TERM and KILLs only 5 s later: see
// TestSubmitBatchSbatchPastDeadline) does not end it first.
func TestSubmitBatchDeadline(t *testing.T) {
	d, root := stageDriver(t)
	pidFile := filepath.Join(root, "sbatch.pid")
	slow := "#!/bin/sh\ntrap '' TERM\necho $$ >\"" + pidFile + "\"\nexec sleep 60\n"
	if err := os.WriteFile(filepath.Join(root, "bin", "sbatch"), []byte(slow), 0o755); err != nil {
		t.Fatal(err)
	}
	sl := &slurmAnswers{by: map[string]func([]string) (string, string, int){
		"sacct":  func([]string) (string, string, int) { return "", "", 0 },
		"squeue": func([]string) (string, string, int) { return "", "", 0 },
	}}
	d.Slurm = slurm.New(sl)
	d.Slurm.Deadlines.Sbatch = 500 * time.Millisecond
	start := time.Now()
	e, lock, err := d.SubmitOne(context.Background(), "ep-batch-deadline", []byte("p\n"))
	if took := time.Since(start); took > 10*time.Second {
		t.Errorf("submit took %v", took)
	}
	if lock != nil {
		lock.Unlock()
	}
	if !errors.Is(err, remote.ErrOutcomeUnknown) || !errors.Is(err, slurm.ErrDeadline) {
		t.Fatalf("error %v: want an outcome unknown at the batch's deadline", err)
	}
	if sl.count("squeue") == 0 {
		t.Error("no look-up by comment tag")
	}
	if e == nil || e.JobID(stages.Author) != "" || e.Jobs[stages.Author] == nil {
		t.Fatalf("entry %+v", e)
	}
	if _, lerr := d.Ledger.Load(e.Episode); lerr != nil {
		t.Fatalf("the episode left the ledger: %v", lerr)
	}
	b, err := os.ReadFile(pidFile)
	if err != nil {
		t.Fatalf("the batch's sbatch never started: %v", err)
	}
	{
		pid, _ := strconv.Atoi(strings.TrimSpace(string(b)))
		for deadline := time.Now().Add(5 * time.Second); pid > 0 && syscall.Kill(pid, 0) == nil; time.Sleep(20 * time.Millisecond) {
			if st, _ := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid)); strings.Contains(string(st), ") Z ") {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("the stopped batch's sbatch %d still runs", pid)
			}
		}
	}
}

// TestSubmitDependencyMet: the job a stage waits for is asked of sbatch
// (afterok) only while Slurm has not said, this poll, that it COMPLETED.
// An eval submitted after its train completed (a retried eval, or one
// whose submission was interrupted) goes without the dependency: one
// sbatch, where afterok on a train past MinJobAge costs a refusal, a
// look-up and a second sbatch. The order stays on record (After). A train
// that runs or whose state is unknown is waited for.
func TestSubmitDependencyMet(t *testing.T) {
	const train = "70000003"
	for _, c := range []struct {
		state string // train's state this poll; "": unknown to Slurm
		dep   bool   // sbatch asked for afterok:train
	}{
		{"COMPLETED", false},
		{"RUNNING", true},
		{"PENDING", true},
		{"", true},
	} {
		t.Run(cmp.Or(c.state, "unknown"), func(t *testing.T) {
			host := &sbatchHost{local: true, answer: func([]string) (string, string, int, bool) { return "4244\n", "", 0, false }}
			sl := &slurmAnswers{by: map[string]func([]string) (string, string, int){}}
			d, e, _ := siblingEpisode(t, host, sl, train)
			// Train's record, for the collector to read once it completed,
			// and eval's directory as staged.
			for _, s := range []stages.Stage{stages.Train, stages.Eval} {
				if err := os.MkdirAll(filepath.Join(e.Dir, string(s)), 0o755); err != nil {
					t.Fatal(err)
				}
			}
			if err := os.WriteFile(filepath.Join(e.Dir, stages.Output(stages.Train)), []byte(trainLineText+"\n"), 0o644); err != nil {
				t.Fatal(err)
			}
			e.Ended = map[stages.Stage]rules.JobSummary{stages.Author: {ID: "1", State: "COMPLETED", ExitCode: "0:0"}}
			infos := map[string]slurm.JobInfo{"1": e.Ended[stages.Author].Info()}
			if c.state != "" {
				infos[train] = slurm.JobInfo{ID: train, State: slurm.ParseState(c.state, ""), Runs: 1, Source: slurm.SourceSqueue}
			}
			st := &watchState{since: map[string]time.Time{}}
			if err := d.advance(context.Background(), e, infos, st.waitsFor(e.Episode, d.now, new(sync.Mutex)), nil); err != nil {
				t.Fatal(err)
			}
			if e.Outcome != nil {
				t.Fatalf("the episode ended: %+v", e.Outcome)
			}
			calls := host.calls()
			if len(calls) != 1 {
				t.Fatalf("sbatch ran %d times: %q", len(calls), calls)
			}
			if got := slices.Contains(calls[0], "--dependency=afterok:"+train); got != c.dep || (!c.dep && slices.ContainsFunc(calls[0], func(a string) bool { return strings.HasPrefix(a, "--dependency") })) {
				t.Errorf("train %s: sbatch %q: want afterok:%s asked %v", cmp.Or(c.state, "unknown"), calls[0], train, c.dep)
			}
			if ev := e.Jobs[stages.Eval]; ev == nil || ev.JobID != "4244" || ev.After != train {
				t.Errorf("eval's submission %+v: want job 4244 on record after train %s", ev, train)
			}
		})
	}
}
