package episode

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nemorl/nemorl-slurm/configs"
	"github.com/nemorl/nemorl-slurm/internal/labtest"
	"github.com/nemorl/nemorl-slurm/ledger"
	"github.com/nemorl/nemorl-slurm/remote"
	"github.com/nemorl/nemorl-slurm/rules"
	"github.com/nemorl/nemorl-slurm/slurm"
	"github.com/nemorl/nemorl-slurm/stages"
)

// stageArrayEpisodes submits n episodes whose first id ends in first (the
// stand-in train's --only-episode picks it), their authors one array, and
// waits until every author has ended: the next poll then decides all of
// them at once. The returned driver counts its commands.
// Each configure then changes the driver's config before the episodes
// are staged.
func stageArrayEpisodes(t *testing.T, s labtest.Slurm, train []string, first string, n int, configure ...func(*configs.Config)) (*Driver, *remote.Counted, []string) {
	t.Helper()
	labtest.UseLab(t)
	d, _ := dialLabAt(t, s.Lab, train, 0)
	for _, c := range configure {
		c(d.Config)
	}
	counted := remote.NewCounted(d.Host)
	d.Host = counted // before the Driver's first call builds its parts
	ctx := context.Background()
	specs := []Spec{{ID: "ep-" + time.Now().UTC().Format("20060102T150405Z") + "-" + first, Prompt: []byte("stand-in prompt")}}
	for len(specs) < n {
		specs = append(specs, Spec{Prompt: []byte("stand-in prompt")})
	}
	var eps, authors []string
	for i, r := range d.Submit(ctx, specs) {
		if r.Err != nil {
			t.Fatalf("episode %d: %v", i, r.Err)
		}
		r.Lock.Unlock()
		eps, authors = append(eps, r.Entry.Episode), append(authors, r.Entry.JobID(stages.Author))
	}
	t.Cleanup(func() {
		for _, ep := range eps {
			if e, err := d.Ledger.Load(ep); err == nil && !e.Final() {
				cancelAsOwner(d, e)
			}
		}
	})
	for deadline := time.Now().Add(2 * time.Minute); ; time.Sleep(time.Second) {
		infos, err := d.Slurm.Query(ctx, authors)
		ended := err == nil
		for _, id := range authors {
			ended = ended && infos[id].State.Terminal()
		}
		if ended {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the authors %v have not all ended after 2 minutes: %v %v", authors, infos, err)
		}
	}
	return d, counted, eps
}

// runStageArrays is stageArrayEpisodes watched to the end (within limit):
// every episode's final entry, by episode, and the episodes in order. Two
// episodes: cluster 3 has two GPUs, and a sibling attack needs the
// attacker's train task and its sibling's to run at once.
func runStageArrays(t *testing.T, s labtest.Slurm, train []string, first string, limit time.Duration) (map[string]*ledger.Entry, []string) {
	t.Helper()
	d, counted, eps := stageArrayEpisodes(t, s, train, first, 2)
	got, _ := watchStageArrays(t, d, counted, eps, limit)
	return got, eps
}

// watchStageArrays watches eps to the end (within limit), acting: every
// episode's final entry, by episode, and the sbatch run meanwhile.
func watchStageArrays(t *testing.T, d *Driver, counted *remote.Counted, eps []string, limit time.Duration) (map[string]*ledger.Entry, int64) {
	t.Helper()
	before := counted.Counts()["run sbatch"]
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()
	got, err := d.Watch(ctx, eps, WatchOptions{Act: true, PollMin: 200 * time.Millisecond, PollMax: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	return got, counted.Counts()["run sbatch"] - before
}

// TestStageArraysLab: on each Slurm, three episodes whose authors ended
// before one poll have their train jobs submitted as one job array (one
// sbatch) and their eval jobs as one array chained to it task for task
// (aftercorr): each eval task has its train task's index. One episode's
// train crashes (the stand-in's --trainer-crash, for it alone): its eval
// task never runs, its outcome is train's failure (train_failed, the
// policy's), and its siblings are scored: their eval records name their
// tasks' own job ids (sacct's JobIDRaw), which the rules check.
func TestStageArraysLab(t *testing.T) {
	labtest.EachSlurm(t, testStageArrays)
}

func testStageArrays(t *testing.T, s labtest.Slurm) {
	d, counted, eps := stageArrayEpisodes(t, s, []string{"/opt/nemorl-lab/stand-ins/train", "--only-episode", "*-crash0", "--trainer-crash"}, "crash0", 3)
	got, n := watchStageArrays(t, d, counted, eps, 4*time.Minute)
	if n != 2 {
		t.Errorf("the train and eval jobs of 3 episodes took %d sbatch, want 2 (one array each)", n)
	}
	var trainArray, evalArray string
	for i, ep := range eps {
		e := got[ep]
		tr, ev := e.Jobs[stages.Train], e.Jobs[stages.Eval]
		if tr == nil || tr.Array == nil || ev == nil || ev.Array == nil {
			t.Fatalf("episode %d: train %+v, eval %+v: want tasks of arrays", i, tr, ev)
		}
		if (trainArray != "" && tr.Array.Name != trainArray) || (evalArray != "" && ev.Array.Name != evalArray) {
			t.Errorf("episode %d: train in %s, eval in %s: want the arrays %s and %s", i, tr.Array.Name, ev.Array.Name, trainArray, evalArray)
		}
		trainArray, evalArray = tr.Array.Name, ev.Array.Name
		_, tt, ok1 := slurm.SplitTaskID(tr.JobID)
		_, et, ok2 := slurm.SplitTaskID(ev.JobID)
		if !ok1 || !ok2 || tt != tr.Array.Task || et != ev.Array.Task || et != tt {
			t.Errorf("episode %d: train %s (task %d), eval %s (task %d): want eval task i waiting for train task i", i, tr.JobID, tr.Array.Task, ev.JobID, ev.Array.Task)
		}
		if ev.After != tr.JobID {
			t.Errorf("episode %d: eval waits for %q, want its train task %s", i, ev.After, tr.JobID)
		}
		o := e.Outcome
		if i == 0 {
			if o == nil || o.Outcome != rules.PolicyFailure || o.FailureStage != stages.Train || o.FailureReason != rules.ReasonTrainFailed {
				t.Errorf("episode %d (train crashed): outcome %+v, want policy_failure train %s", i, o, rules.ReasonTrainFailed)
			} else if j := o.Jobs[stages.Eval]; !j.Start.IsZero() {
				t.Errorf("episode %d: its eval task %s started at %s: want it never run", i, j.ID, j.Start)
			}
			continue
		}
		if o == nil || o.Outcome != rules.Scored || o.Reward == nil {
			t.Errorf("episode %d: outcome %+v, want scored", i, o)
		}
	}
	t.Logf("%s: train array %s, eval array %s (aftercorr): 2 sbatch for 3 episodes; the crashed train's eval never ran; %s",
		s.Name, trainArray, evalArray, outcomes(got, eps))
}

// outcomes is a line of eps' outcomes.
func outcomes(got map[string]*ledger.Entry, eps []string) string {
	var out []string
	for _, ep := range eps {
		if o := got[ep].Outcome; o != nil {
			out = append(out, string(o.Outcome)+"/"+o.FailureReason)
		}
	}
	return strings.Join(out, ", ")
}

// TestStageArraysCancelSiblingLab: the policy's train code, in one task of
// a train array, scancels its sibling episodes' train tasks (the stand-in
// train's --cancel-siblings, for that episode alone; runtime none: the
// policy has the user's Slurm rights). Each sibling's outcome is decided
// on its own: a cancel the tool did not issue, the policy's
// (foreign_cancel, tampering), never a masked sample; the attacker's own
// episode is scored, and its task and eval are untouched.
func TestStageArraysCancelSiblingLab(t *testing.T) {
	labtest.EachSlurm(t, testStageArraysCancelSibling)
}

func testStageArraysCancelSibling(t *testing.T, s labtest.Slurm) {
	// The siblings train for 180 s (they are cancelled long before):
	// the attacker's task must find them in squeue, and under make test
	// other tests' jobs may hold one of cluster 3's two GPUs, so the
	// attacker's task can start well after its sibling's (with 20 s, the
	// sibling had once ended before the attacker started: nothing to
	// cancel, the attack not mounted).
	got, eps := runStageArrays(t, s, []string{"/opt/nemorl-lab/stand-ins/train", "--delay", "180", "--only-episode", "*-attack0", "--cancel-siblings"}, "attack0", 6*time.Minute)
	for i, ep := range eps {
		o := got[ep].Outcome
		if i == 0 {
			if o == nil || o.Outcome != rules.Scored {
				t.Errorf("episode %d (the attacker): outcome %+v, want scored%s", i, o, attackNotMounted(got[ep]))
			}
			continue
		}
		if o == nil || o.Outcome != rules.PolicyFailure || o.FailureStage != stages.Train || o.FailureReason != rules.ReasonForeignCancel || !o.Tampering {
			t.Errorf("episode %d (its train task cancelled by a sibling's code): outcome %+v, want policy_failure train %s with tampering", i, o, rules.ReasonForeignCancel)
		}
	}
	t.Logf("%s: one train task cancelled its siblings: %s", s.Name, outcomes(got, eps))
}

// attackNotMounted is the stand-in train's "ATTACK NOT MOUNTED" line in
// e's train output, if it wrote one (then the attack, not the tool, is
// what failed), for a test's error.
func attackNotMounted(e *ledger.Entry) string {
	b, err := os.ReadFile(filepath.Join(e.Dir, stages.Output(stages.Train)))
	if err != nil {
		return ""
	}
	for _, l := range strings.Split(string(b), "\n") {
		if strings.Contains(l, "ATTACK NOT MOUNTED") {
			return "; the stand-in's attack was not mounted: " + l
		}
	}
	return ""
}

// replyDropped is a host whose first sbatch of a train array runs on the
// cluster but whose answer never reaches the tool: the outcome of a
// connection lost between a command and its answer
// (remote.ErrOutcomeUnknown).
type replyDropped struct {
	remote.Host
	once  sync.Once
	fired bool
}

func (h *replyDropped) Run(ctx context.Context, c remote.Command) (*remote.Result, error) {
	res, err := h.Host.Run(ctx, c)
	if c.Label == "sbatch" && strings.Contains(strings.Join(c.Argv, " "), "--job-name=nemorl-train-arr-") {
		dropped := false
		h.once.Do(func() { h.fired, dropped = true, true })
		if dropped {
			return nil, fmt.Errorf("%s: the answer to sbatch was lost: %w", h.Name(), remote.ErrOutcomeUnknown)
		}
	}
	return res, err
}

// TestStageArraysReplyLostLab: the train array's sbatch runs but its
// answer is lost. No episode's train is submitted twice: at the next poll
// each finds its own task by the array's name and proves it by the
// array's script (adopt), and all are scored; Slurm has one train array.
func TestStageArraysReplyLostLab(t *testing.T) {
	labtest.EachSlurm(t, testStageArraysReplyLost)
}

func testStageArraysReplyLost(t *testing.T, s labtest.Slurm) {
	d, counted, eps := stageArrayEpisodes(t, s, nil, "lost0", 3)
	h := &replyDropped{Host: counted}
	d.Host = h
	d.built.submitter.host = h // the parts are built: the submitter's host, as a lost connection would reach it
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	got, err := d.Watch(ctx, eps, WatchOptions{Act: true, PollMin: 200 * time.Millisecond, PollMax: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if !h.fired {
		t.Fatal("no train array's sbatch went through the host")
	}
	arrays := map[string]bool{}
	for i, ep := range eps {
		e := got[ep]
		if o := e.Outcome; o == nil || o.Outcome != rules.Scored {
			t.Errorf("episode %d: outcome %+v, want scored", i, o)
		}
		tr := e.Jobs[stages.Train]
		if tr == nil || tr.Array == nil || !tr.Adopted {
			t.Errorf("episode %d: train %+v: want its task of the array adopted", i, tr)
			continue
		}
		a, _, _ := slurm.SplitTaskID(tr.JobID)
		arrays[a] = true
	}
	if len(arrays) != 1 {
		t.Errorf("train arrays %v: want one", arrays)
	}
	t.Logf("%s: the train array's answer lost; every task adopted from array %v; %s", s.Name, arrays, outcomes(got, eps))
}

// TestStageArraysRequeueSiblingLab: the policy's train code, in one task
// of a train array, requeues its sibling episodes' running train tasks
// (the stand-in train's --requeue-siblings, for that episode alone). Each
// sibling's task runs again from the start (Slurm holds a requeued job
// about two minutes first), its second run counted as an attempt, and its
// episode is scored on its own: nothing of the attack reaches a sibling's
// reward, and the attacker's episode is scored too.
func TestStageArraysRequeueSiblingLab(t *testing.T) {
	labtest.EachSlurm(t, testStageArraysRequeueSibling)
}

func testStageArraysRequeueSibling(t *testing.T, s labtest.Slurm) {
	// The siblings train for 60 s a run: the attacker's task must find
	// its sibling's running, and may start later than it (other tests'
	// jobs on the cluster's GPUs; see the cancel case above).
	got, eps := runStageArrays(t, s, []string{"/opt/nemorl-lab/stand-ins/train", "--delay", "60", "--only-episode", "*-requeue0", "--requeue-siblings"}, "requeue0", 8*time.Minute)
	for i, ep := range eps {
		o := got[ep].Outcome
		if o == nil || o.Outcome != rules.Scored {
			t.Errorf("episode %d: outcome %+v, want scored%s", i, o, attackNotMounted(got[ep]))
			continue
		}
		if i == 0 {
			continue
		}
		// Slurm's own account: the sibling's train task ran twice.
		id := got[ep].Jobs[stages.Train].JobID
		out, err := s.Command("sacct", "-n", "-P", "-X", "--duplicates", "-j", id, "--format=JobID,State").Output()
		if err != nil {
			t.Fatalf("sacct -j %s: %v", id, err)
		}
		if n := strings.Count(strings.TrimSpace(string(out)), "\n") + 1; n != 2 {
			t.Errorf("episode %d: sacct --duplicates shows %d runs of its train task %s, want 2 (requeued once):\n%s", i, n, id, out)
		}
		// The outcome says so too: two attempts at train, its job two runs.
		if o.Attempts[stages.Train] != 2 || o.Jobs[stages.Train].Runs != 2 {
			t.Errorf("episode %d: outcome attempts %v, train job %+v: want 2 attempts at train, its task 2 runs", i, o.Attempts, o.Jobs[stages.Train])
		}
	}
	t.Logf("%s: one train task requeued its siblings: %s", s.Name, outcomes(got, eps))
}

// TestStageArraysForgedSiblingRecordLab: the policy's train code, in one
// task of a train array, reads the array's script (its table of tasks:
// every episode's directory) and appends a perfect eval record to each
// sibling episode's eval/out.log before that eval runs (the stand-in
// train's --forge-sibling-eval). The table holds nothing secret, and the
// forgery never counts: each eval task starts its out.log afresh, and the
// record read is the one the sibling's own eval printed (its task's own
// job id, its weights). Every episode is scored with its own reward.
func TestStageArraysForgedSiblingRecordLab(t *testing.T) {
	labtest.EachSlurm(t, testStageArraysForgedSiblingRecord)
}

func testStageArraysForgedSiblingRecord(t *testing.T, s labtest.Slurm) {
	got, eps := runStageArrays(t, s, []string{"/opt/nemorl-lab/stand-ins/train", "--delay", "5", "--only-episode", "*-forge0", "--forge-sibling-eval"}, "forge0", 4*time.Minute)
	// The attack was mounted: the attacker's train log names both forgeries.
	log, err := os.ReadFile(filepath.Join(got[eps[0]].Dir, stages.Output(stages.Train)))
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(string(log), "attack: a forged eval record appended to"); n != len(eps)-1 {
		t.Fatalf("the attacker's train appended %d forged records, want %d (one per sibling):\n%s", n, len(eps)-1, log)
	}
	// Each sibling: its eval started its out.log afresh after the forgery
	// (scored, from its one record), or the forgery landed beside its
	// eval's record (a record rejected: the policy's). Never the forged
	// reward, never a masked sample.
	for i, ep := range eps {
		e := got[ep]
		o := e.Outcome
		if o == nil || o.MaskSample || (o.Reward != nil && *o.Reward == 1) {
			t.Errorf("episode %d: outcome %+v: the forged record counted or masked the sample", i, o)
			continue
		}
		out, err := os.ReadFile(filepath.Join(e.Dir, stages.Output(stages.Eval)))
		if err != nil {
			t.Fatal(err)
		}
		records := strings.Count(string(out), "NEMORL_ENV_RESULT=")
		switch {
		case o.Outcome == rules.Scored && records == 1:
		case i > 0 && o.Outcome == rules.PolicyFailure && o.FailureStage == stages.Eval && records == 2:
		default:
			t.Errorf("episode %d: outcome %s/%s with %d records in eval/out.log: want scored from its one record, or (a sibling) the policy's failure at eval with the forged record beside its own", i, o.Outcome, o.FailureReason, records)
		}
	}
	t.Logf("%s: forged records appended to the siblings' eval/out.log before their evals: %s", s.Name, outcomes(got, eps))
}

// TestStageArraysRetryOneTaskLab: the tool retries one task of an eval
// array on its own, on each Slurm. Episode 0's eval (the stand-in's
// --exit 4 for it alone: the evaluator rejected the rollouts, the
// cluster's failure, retryable) fails; the tool runs its eval again as one
// job, which fails the same way, and with episodes.retries 1 the episode
// ends the cluster's (masked), its two attempts counted. The retired
// attempt keeps its array's name and script (clean removes the array's
// directory only with the last episode that ran a task of it). Its
// sibling, a task of the same arrays, is scored, each of its stages run
// once: the retry submitted one job and touched nothing else. That job
// asks for no dependency: its train task completed, which the poll read,
// and an afterok on it would be refused once it left slurmctld
// (MinJobAge 30 s; CI's loaded run at 7393b7b took 4 sbatch so).
// NEMORL_RETRY_PAST_PURGE=1 makes that the case every time: each eval
// runs 95 s (the stand-in's --delay), past MinJobAge and slurmctld's
// 60 s purge cycle, so the retry is submitted after Slurm forgot train's
// task; the test then asserts that premise too (3 minutes more, each
// cluster's GPUs held meanwhile: not in make test).
func TestStageArraysRetryOneTaskLab(t *testing.T) {
	labtest.EachSlurm(t, testStageArraysRetryOneTask)
}

// purgeWait is how long after its end a job has surely left slurmctld:
// the lab's MinJobAge (30 s), slurmctld's purge cycle (60 s,
// PURGE_JOB_INTERVAL) and a margin.
const purgeWait = 95 * time.Second

func testStageArraysRetryOneTask(t *testing.T, s labtest.Slurm) {
	pastPurge := os.Getenv("NEMORL_RETRY_PAST_PURGE") == "1"
	d, counted, eps := stageArrayEpisodes(t, s, nil, "retry0", 2, func(c *configs.Config) {
		c.Stages.Eval.Command = []string{"/opt/nemorl-lab/stand-ins/eval", "--only-episode", "*-retry0", "--exit", "4"}
		if pastPurge {
			c.Stages.Eval.Command = append(c.Stages.Eval.Command, "--delay", strconv.Itoa(int(purgeWait/time.Second)))
		}
		c.Episodes.Retries = 1
	})
	got, n := watchStageArrays(t, d, counted, eps, 9*time.Minute)
	if n != 3 {
		t.Errorf("%d sbatch for the two episodes' train and eval and one retry, want 3 (a train array, an eval array, the retried eval alone, without a dependency on its completed train)", n)
	}
	failed, sibling := got[eps[0]], got[eps[1]]
	o := failed.Outcome
	if o == nil || o.Outcome != rules.InfraFailure || o.FailureStage != stages.Eval || o.FailureReason != rules.ReasonRolloutsRejected || !o.MaskSample {
		t.Fatalf("episode 0: outcome %+v, want the cluster's failure at eval (%s), masked", o, rules.ReasonRolloutsRejected)
	}
	if o.Attempts[stages.Eval] != 2 || o.Attempts[stages.Train] != 1 {
		t.Errorf("episode 0: attempts %v, want eval twice and train once", o.Attempts)
	}
	retired := failed.Retried[stages.Eval]
	if len(retired) != 1 || len(failed.Retried[stages.Train]) != 0 {
		t.Fatalf("episode 0: retired %+v, want its first eval alone", failed.Retried)
	}
	se := sibling.Jobs[stages.Eval]
	if se == nil || se.Array == nil || retired[0].Array != se.Array.Name || retired[0].ArrayScript != se.Array.Script || retired[0].Reason != rules.ReasonRolloutsRejected {
		t.Errorf("episode 0: retired eval %+v, want the task of its sibling's eval array %+v, rejected rollouts", retired[0], se)
	}
	if again := failed.Jobs[stages.Eval]; again == nil || again.Array != nil || again.JobID == "" || again.JobID == retired[0].JobID || again.After != failed.JobID(stages.Train) {
		t.Errorf("episode 0: its second eval %+v, want one job of its own, after its train %s on record", again, failed.JobID(stages.Train))
	}
	if se != nil && se.Array != nil && failed.ArrayScripts()[se.Array.Name] != se.Array.Script {
		t.Errorf("episode 0: arrays %v, want the retired eval's array %s among them", failed.ArrayScripts(), se.Array.Name)
	}
	if pastPurge {
		// The premise: the retry went in after Slurm forgot train's task.
		trainEnd, again := o.Jobs[stages.Train].End, failed.Jobs[stages.Eval]
		if trainEnd.IsZero() || again == nil || again.Submitted.Sub(trainEnd) < purgeWait {
			t.Fatalf("episode 0: train task %s ended %s, the retry submitted %v: want it %s or more after (past MinJobAge and the purge cycle)", failed.JobID(stages.Train), trainEnd, again, purgeWait)
		}
		t.Logf("%s: the retry went in %s after train task %s ended", s.Name, again.Submitted.Sub(trainEnd).Round(time.Second), failed.JobID(stages.Train))
	}
	so := sibling.Outcome
	if so == nil || so.Outcome != rules.Scored || so.Reward == nil || so.Attempts[stages.Train] > 1 || so.Attempts[stages.Eval] > 1 || len(sibling.Retried) != 0 {
		t.Errorf("episode 1: outcome %+v, retired %+v: want scored, each stage run once", so, sibling.Retried)
	}
	t.Logf("%s: eval task %s retried alone as job %s: %s", s.Name, retired[0].JobID, failed.JobID(stages.Eval), outcomes(got, eps))
}
