package cli

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nemorl/nemorl-slurm/internal/labtest"
)

// The fault-injection suite (#14): each fault is played on the real lab
// through the built binary. Most take the cluster away from every other
// test (a node set DOWN kills every job on it, a stopped slurmctld
// refuses every sbatch), so TestFaultLab holds the lab's lock exclusively
// and its subtests run one after another; the two that touch only their
// own episodes (a requeue, kill -9 of the tool) are TestFaultSharedLab's.
// Every subtest asserts the outcome, its attempts, and Slurm's own view
// (sacct --duplicates). The faults of one cluster's node or controller
// play on cluster 2 (TestFaultCluster2Lab), held alone: only slurmdbd,
// which both clusters share, and cluster 1's prolog need the whole lab.

const faultTimeout = 8 * time.Minute // one episode through a fault and its recovery

func TestFaultLab(t *testing.T) {
	labtest.LockLab(t) // before newLabCLI's labtest.Env
	x := newFaultLabCLI(t)
	labDaemon(t, "status")
	t.Cleanup(func() {
		// Whatever a failed subtest left behind, the lab is whole again.
		for _, d := range []string{"slurmdbd", "slurmctld", "slurmd"} {
			_ = exec.Command(labtest.Script(t, "daemon"), "start", d).Run()
		}
		_ = exec.Command(labtest.Script(t, "daemon"), "node-resume").Run()
	})
	x.runFaults(t, []faultCase{
		{"launch-held", x.testLaunchHeld},
		{"slurmdbd-outage", x.testSlurmdbdOutage},
	})
}

// TestFaultCluster2Lab: the faults of one cluster's node or controller,
// played on cluster 2 (lab/cluster2), which the test holds alone
// (labtest.LockCluster2): the tests of cluster 1 go on meanwhile. The
// episodes reach cluster 2 over its own login (sshd :2224), as a user's
// second cluster.
func TestFaultCluster2Lab(t *testing.T) {
	t.Parallel()
	labtest.LockCluster2(t) // before newLabCLI's labtest.Env
	x := newFaultLabCLI(t)
	x.onCluster2(t, x.lab.Cluster2(t))
	x.fault(t, "status")
	t.Cleanup(func() {
		// Whatever a failed subtest left behind, cluster 2 is whole again.
		_ = exec.Command(labtest.Script(t, "cluster2"), "start").Run()
		_ = exec.Command(labtest.Script(t, "cluster2"), "node-resume").Run()
	})
	x.runFaults(t, []faultCase{
		{"node-down-requeued", x.testNodeDownRequeued},
		{"node-down-retried", x.testNodeDownRetried},
		{"slurmctld-restart", x.testSlurmctldRestart},
		{"run-slurmctld-down", x.testRunSlurmctldDown},
	})
}

// newFaultLabCLI is newLabCLI for a fault test: the stand-ins, and root
// (the faults stop lab daemons and requeue jobs).
func newFaultLabCLI(t *testing.T) *labCLI {
	t.Helper()
	x := newLabCLI(t)
	requireStandIns(t)
	if os.Geteuid() != 0 {
		if labtest.Required() {
			t.Fatal("the fault suite stops lab daemons and requeues jobs: run it as root")
		}
		t.Skip("the fault suite stops lab daemons and requeues jobs: run it as root")
	}
	return x
}

// faultCase is one subtest of a fault suite.
type faultCase struct {
	name string
	f    func(*testing.T)
}

// runFaults runs the faults one after another, each with x's node in
// service first (whatever the one before left: a launch Slurm saw fail
// drains it).
func (x *labCLI) runFaults(t *testing.T, faults []faultCase) {
	t.Helper()
	for _, c := range faults {
		x.fault(t, "node-resume")
		start := time.Now()
		if t.Run(c.name, c.f) && time.Since(start) > time.Second {
			t.Logf("%s: passed in %s", c.name, time.Since(start).Round(time.Second))
		}
	}
}

// onCluster2 points x at cluster 2: its login (port, host key: the lab's
// known_hosts names it), Slurm's clients here with its SLURM_CONF, its
// faults by lab/cluster2; the episodes' jobs are cancelled there too when
// the test ends.
func (x *labCLI) onCluster2(t *testing.T, west labtest.Lab) {
	t.Helper()
	from, to := fmt.Sprintf("port: %d\n", x.lab.SSHPort), fmt.Sprintf("port: %d\n", west.SSHPort)
	if strings.Count(x.base, from) != 1 {
		t.Fatalf("the lab config has no single %q", from)
	}
	x.base = strings.Replace(x.base, from, to, 1)
	x.slurmEnv = west.Cluster2Env()
}

// fault plays verb on x's cluster: node-down, node-resume,
// slurmctld-restart, slurmctld-stop, slurmctld-start, status (lab/daemon on
// cluster 1, lab/cluster2 on cluster 2).
func (x *labCLI) fault(t *testing.T, verb string) {
	t.Helper()
	if x.slurm.Name != "" && x.slurmEnv != nil { // on(cluster 3)
		t.Fatalf("fault %s: the lab's fault tools are cluster 1's (lab/daemon) and cluster 2's (lab/cluster2), not %s's", verb, x.slurm.Cluster)
	}
	if x.slurmEnv == nil { // cluster 1
		args := map[string][]string{
			"slurmctld-restart": {"restart", "slurmctld"},
			"slurmctld-stop":    {"stop", "slurmctld"},
			"slurmctld-start":   {"start", "slurmctld"},
		}[verb]
		if args == nil {
			args = []string{verb}
		}
		labDaemon(t, args...)
		return
	}
	arg := strings.TrimPrefix(verb, "slurmctld-")
	start := time.Now()
	out, err := exec.Command(labtest.Script(t, "cluster2"), arg).CombinedOutput()
	if err != nil {
		t.Fatalf("lab/cluster2 %s: %v\n%s", arg, err, out)
	}
	t.Logf("lab/cluster2 %s (%s)", arg, time.Since(start).Round(100*time.Millisecond))
}

// slurmCmd is a Slurm client run here against x's cluster.
func (x *labCLI) slurmCmd(name string, args ...string) *exec.Cmd {
	c := x.slurm.Command(name, args...) // cluster 3's own clients (on)
	c.Env = x.slurmEnv
	return c
}

// TestFaultSharedLab: the faults that break nothing but their own
// episodes — a requeue of its own train job, kill -9 of the tool — run on
// the shared lab, alongside the other tests and each other.
func TestFaultSharedLab(t *testing.T) {
	t.Parallel()
	x := newFaultLabCLI(t)
	for _, c := range []faultCase{
		{"requeue", x.testRequeue},
		{"kill9", x.testKill9},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			c.f(t)
		})
	}
}

// labDaemon runs lab/daemon with args (as root) and fails t if it fails.
func labDaemon(t *testing.T, args ...string) {
	t.Helper()
	start := time.Now()
	out, err := exec.Command(labtest.Script(t, "daemon"), args...).CombinedOutput()
	if err != nil {
		t.Fatalf("lab/daemon %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	t.Logf("lab/daemon %s (%s)", strings.Join(args, " "), time.Since(start).Round(100*time.Millisecond))
}

// attemptsDoc is what an outcome says about attempts.
type attemptsDoc struct {
	Attempts map[string]int `json:"attempts"`
	Retried  map[string][]struct {
		Attempt int    `json:"attempt"`
		JobID   string `json:"job_id"`
		Reason  string `json:"reason"`
		Output  string `json:"output"`
		Job     struct {
			State string `json:"state"`
		} `json:"job"`
	} `json:"retried"`
	Jobs map[string]struct {
		ID          string   `json:"id"`
		State       string   `json:"state"`
		Runs        int      `json:"runs"`
		EarlierRuns []string `json:"earlier_runs"`
	} `json:"jobs"`
}

func attemptsOf(t *testing.T, raw []byte) attemptsDoc {
	t.Helper()
	var a attemptsDoc
	if err := json.Unmarshal(raw, &a); err != nil {
		t.Fatalf("outcome: %v\n%s", err, raw)
	}
	return a
}

// sacctRun is one record of sacct --duplicates: a run of a job.
type sacctRun struct{ ID, Submit, Name, Comment, State string }

// sacctRuns lists every run sacct knows of ep's jobs (on either lab
// cluster), oldest submission first: a requeued job has one record per
// run.
func sacctRuns(ep string) ([]sacctRun, error) {
	var names []string
	for _, s := range labStages {
		names = append(names, jobName(ep, s))
	}
	seen := map[string]sacctRun{}
	for _, q := range [][]string{
		{"--starttime=now-2hours"},
		{"--starttime=now-2hours", "--endtime=now", "--state=" + sacctAllStates},
	} {
		args := append([]string{"--clusters=all", "-a", "-n", "-P", "-X", "--duplicates", "--name=" + strings.Join(names, ","),
			"--format=JobIDRaw,Submit,JobName,Comment,State"}, q...)
		out, err := exec.Command("sacct", args...).Output()
		if err != nil {
			return nil, fmt.Errorf("sacct: %w", err)
		}
		for _, l := range strings.Split(strings.TrimSpace(string(out)), "\n") {
			f := strings.SplitN(l, "|", 5)
			if len(f) != 5 {
				continue
			}
			r := sacctRun{ID: f[0], Submit: f[1], Name: f[2], Comment: f[3], State: f[4]}
			seen[r.ID+" "+r.Submit] = r
		}
	}
	var runs []sacctRun
	for _, r := range seen {
		runs = append(runs, r)
	}
	slices.SortFunc(runs, func(a, b sacctRun) int { return strings.Compare(a.Submit+a.ID, b.Submit+b.ID) })
	return runs, nil
}

// stageRuns are the "id state comment" of stage's runs, in order.
func stageRuns(ep, stage string, runs []sacctRun) []string {
	var out []string
	for _, r := range runs {
		if r.Name == jobName(ep, stage) {
			out = append(out, fmt.Sprintf("%s %s %s", r.ID, r.State, r.Comment))
		}
	}
	return out
}

// waitRuns polls sacct until each stage's runs are as want says (every
// run "id state comment", in order; an id of "" matches any).
func waitRuns(t *testing.T, ep string, want map[string][]string) []sacctRun {
	t.Helper()
	var runs []sacctRun
	eventually(t, sacctPatience, time.Second, func() string {
		var err error
		if runs, err = sacctRuns(ep); err != nil {
			return err.Error()
		}
		for _, s := range labStages {
			got := stageRuns(ep, s, runs)
			if len(got) != len(want[s]) {
				return fmt.Sprintf("%s: runs %q, want %q", s, got, want[s])
			}
			for i, w := range want[s] {
				if !strings.HasPrefix(got[i], w) {
					return fmt.Sprintf("%s run %d: %q, want %q", s, i+1, got[i], w)
				}
			}
		}
		return ""
	})
	var view []string
	for _, r := range runs {
		view = append(view, fmt.Sprintf("%s %s %s %s", r.ID, r.Name, r.State, r.Comment))
	}
	t.Logf("sacct --duplicates for %s:\n  %s", ep, strings.Join(view, "\n  "))
	return runs
}

// runToScore runs the episode in the background until its train job
// runs, plays fault, and returns the outcome once run exits 0 scored.
func (x *labCLI) runToScore(t *testing.T, cfg, ep string, fault func(train string)) ([]byte, outcomeJSON) {
	t.Helper()
	state := t.TempDir()
	b := x.start(t, state, faultTimeout, "run", "--json", "--config", cfg, "--episode", ep)
	waitLedger(t, state, ep, b)
	train := x.waitTrainRunning(t, state, ep, b)
	x.waitLaunched(t, train)
	x.waitTraining(t, ep)
	fault(train)
	r := b.wait(t, faultTimeout+10*time.Second).want(t, ExitOK)
	o := outcomeOf(t, r)
	if o.Outcome != "scored" || o.Reward == nil {
		t.Fatalf("outcome %s (%s): %s\n%s", o.Outcome, o.FailureReason, o.Detail, r)
	}
	return r.stdout, o
}

// waitLaunched waits until job id's batch script runs on x's lab node
// (scontrol listpids, run on the node, lists its batch step). A job
// RUNNING in squeue may still be launching: a node lost then is a failed
// launch, which Slurm holds ("launch failed requeued held", as a CI
// machine under load showed), not the node failure a fault means to play.
func (x *labCLI) waitLaunched(t *testing.T, id string) {
	t.Helper()
	eventually(t, quickTimeout, 100*time.Millisecond, func() string {
		out, err := x.slurmCmd("scontrol", "listpids", id).CombinedOutput()
		for _, l := range strings.Split(string(out), "\n") {
			if f := strings.Fields(l); len(f) >= 3 && f[1] == id && f[2] == "batch" {
				return ""
			}
		}
		return fmt.Sprintf("scontrol listpids %s: %v %s", id, err, out)
	})
}

// waitTraining waits until ep's train stand-in has said it trains (its
// --delay line in train/out.log): the fault then meets the trainer, not
// the batch script's first second (a requeue there was once recorded
// FAILED 1:0, the script's own exit on TERM, before Slurm requeued it).
func (x *labCLI) waitTraining(t *testing.T, ep string) {
	t.Helper()
	out := filepath.Join(x.lab.Workdir, ep, "train", "out.log")
	eventually(t, quickTimeout, 100*time.Millisecond, func() string {
		if b, err := os.ReadFile(out); err != nil || !strings.Contains(string(b), "--delay: training for") {
			return fmt.Sprintf("%s: no \"--delay: training for\" line yet (%v)", out, err)
		}
		return ""
	})
}

// (#14, launch failure) The train job's launch fails (the lab's prolog
// fails once for it; on a cluster: a node lost as the job starts, a
// prolog error): Slurm requeues the job, holds it PENDING ("launch failed
// requeued held") and drains the node. The held job never starts by
// itself and nothing of the policy ran in it: the tool cancels it and
// runs train and eval again (attempt 2, launch_failure), and the episode
// scores once the operator resumes the node. sacct's own reason for the
// held job is JobHeldUser, which must not read as the policy's hold.
func (x *labCLI) testLaunchHeld(t *testing.T) {
	ep := newEpisode(t, "launch-held")
	labDaemon(t, "launch-fail", jobName(ep, "train"))
	t.Cleanup(func() { _ = os.Remove(filepath.Join(filepath.Dir(labtest.Env(t).File), "fail-launch")) })
	state := t.TempDir()
	b := x.start(t, state, faultTimeout, "run", "--json", "--config", x.config(t, ""), "--episode", ep)
	waitLedger(t, state, ep, b)
	eventually(t, 2*time.Minute, 200*time.Millisecond, func() string {
		if b.exited() {
			t.Fatalf("run ended early\n%s", b.res)
		}
		out, _ := exec.Command("sinfo", "-h", "-N", "-o", "%T %E").Output()
		if !strings.Contains(string(out), "Prolog error") {
			return "node not drained by the failed prolog: " + strings.TrimSpace(string(out))
		}
		return ""
	})
	labDaemon(t, "node-resume")
	r := b.wait(t, faultTimeout+10*time.Second).want(t, ExitOK)
	o := outcomeOf(t, r)
	if o.Outcome != "scored" || o.Reward == nil {
		t.Fatalf("outcome %s (%s): %s\n%s", o.Outcome, o.FailureReason, o.Detail, r)
	}
	a := attemptsOf(t, r.stdout)
	if a.Attempts["train"] != 2 || a.Attempts["eval"] != 2 || a.Attempts["author"] != 1 {
		t.Errorf("attempts %v: want train and eval twice, the author once", a.Attempts)
	}
	rt, re := a.Retried["train"], a.Retried["eval"]
	if len(rt) != 1 || rt[0].Reason != "launch_failure" || rt[0].Job.State != "PENDING" || rt[0].JobID == o.Jobs["train"].ID ||
		len(re) != 1 || re[0].Reason != "train_retried" {
		t.Fatalf("retried %+v", a.Retried)
	}
	// Slurm's record of the failed launch (REQUEUED), then the held job
	// the tool cancelled, then attempt 2.
	waitRuns(t, ep, map[string][]string{
		"author": {o.Jobs["author"].ID + " COMPLETED"},
		"train":  {rt[0].JobID + " REQUEUED", rt[0].JobID + " CANCELLED", o.Jobs["train"].ID + " COMPLETED"},
		"eval":   {re[0].JobID + " CANCELLED", o.Jobs["eval"].ID + " COMPLETED"},
	})
}

// waitLedger waits for ep's ledger entry (run writes it first).
func waitLedger(t *testing.T, state, ep string, b *bgRun) {
	t.Helper()
	eventually(t, quickTimeout, 50*time.Millisecond, func() string {
		if b.exited() {
			t.Fatalf("run ended early\n%s", b.res)
		}
		if _, err := os.Stat(ledgerPath(state, ep)); err != nil {
			return err.Error()
		}
		return ""
	})
}

// (#14, fault 4) The node set DOWN while train runs: Slurm ends the job
// NODE_FAIL and, the script saying --requeue, runs it again under the
// same id once the node is back. The tool follows the job's runs and
// counts them: attempts.train = 2.
func (x *labCLI) testNodeDownRequeued(t *testing.T) {
	ep := newEpisode(t, "node-down")
	raw, o := x.runToScore(t, x.config(t, "train", "--delay", "15"), ep, func(train string) {
		x.fault(t, "node-down")
		time.Sleep(2 * time.Second)
		x.fault(t, "node-resume")
		x.startRequeuedNow(t, train)
	})
	a := attemptsOf(t, raw)
	tr := a.Jobs["train"]
	if a.Attempts["train"] != 2 || a.Attempts["author"] != 1 || a.Attempts["eval"] != 1 || tr.Runs != 2 || !slices.Equal(tr.EarlierRuns, []string{"NODE_FAIL"}) {
		t.Errorf("attempts %v, train job %+v: want train run twice (NODE_FAIL, then a rerun)", a.Attempts, tr)
	}
	if len(a.Retried) != 0 {
		t.Errorf("the tool retried (%+v) where Slurm requeued the job itself", a.Retried)
	}
	waitRuns(t, ep, map[string][]string{
		"author": {o.Jobs["author"].ID + " COMPLETED"},
		"train":  {tr.ID + " NODE_FAIL", tr.ID + " COMPLETED"},
		"eval":   {o.Jobs["eval"].ID + " COMPLETED"},
	})
}

// (#14, fault 4, episodes.no_requeue) The node set DOWN while train runs,
// the scripts saying --no-requeue: the job ends NODE_FAIL for good; the
// tool retires it with its eval and submits both again (attempt 2, tagged
// nemorl:EP:train:2), and the episode scores.
func (x *labCLI) testNodeDownRetried(t *testing.T) {
	ep := newEpisode(t, "node-retry")
	cfg := x.config(t, "train", "--delay", "15")
	noRequeue(t, cfg)
	raw, o := x.runToScore(t, cfg, ep, func(train string) {
		x.fault(t, "node-down")
		time.Sleep(2 * time.Second)
		x.fault(t, "node-resume")
	})
	a := attemptsOf(t, raw)
	if a.Attempts["train"] != 2 || a.Attempts["eval"] != 2 || a.Attempts["author"] != 1 {
		t.Errorf("attempts %v: want train and eval twice, the author once", a.Attempts)
	}
	rt, re := a.Retried["train"], a.Retried["eval"]
	if len(rt) != 1 || rt[0].Reason != "node_failure" || rt[0].Job.State != "NODE_FAIL" || rt[0].JobID == o.Jobs["train"].ID ||
		len(re) != 1 || re[0].Reason != "train_retried" {
		t.Fatalf("retried %+v", a.Retried)
	}
	waitRuns(t, ep, map[string][]string{
		"author": {o.Jobs["author"].ID + " COMPLETED " + jobTag(ep, "author")},
		"train": {rt[0].JobID + " NODE_FAIL " + jobTag(ep, "train"),
			o.Jobs["train"].ID + " COMPLETED " + jobTag(ep, "train") + ":2"},
		"eval": {re[0].JobID + " CANCELLED",
			o.Jobs["eval"].ID + " COMPLETED " + jobTag(ep, "eval") + ":2"},
	})
}

// noRequeue adds episodes.no_requeue: true to the config file cfg.
func noRequeue(t *testing.T, cfg string) {
	t.Helper()
	b, err := os.ReadFile(cfg)
	if err != nil {
		t.Fatal(err)
	}
	s := strings.Replace(string(b), "\nepisodes:\n", "\nepisodes:\n  no_requeue: true\n", 1)
	if s == string(b) {
		t.Fatalf("%s: no episodes: section", cfg)
	}
	if err := os.WriteFile(cfg, []byte(s), 0o600); err != nil {
		t.Fatal(err)
	}
}

// (#14, requeue) A preemption that requeues, played by scontrol requeue
// of the running train job: the same job id runs again; the collector
// reads the run that ended, and the episode scores with attempts.train = 2.
func (x *labCLI) testRequeue(t *testing.T) {
	ep := newEpisode(t, "requeue")
	raw, o := x.runToScore(t, x.config(t, "train", "--delay", "15"), ep, func(train string) {
		if out, err := exec.Command("scontrol", "requeue", train).CombinedOutput(); err != nil {
			t.Fatalf("scontrol requeue %s: %v\n%s", train, err, out)
		}
		x.startRequeuedNow(t, train)
	})
	a := attemptsOf(t, raw)
	tr := a.Jobs["train"]
	if a.Attempts["train"] != 2 || tr.Runs != 2 || len(tr.EarlierRuns) != 1 {
		t.Fatalf("attempts %v, train job %+v: want train run twice", a.Attempts, tr)
	}
	waitRuns(t, ep, map[string][]string{
		"author": {o.Jobs["author"].ID + " COMPLETED"},
		"train":  {tr.ID + " " + tr.EarlierRuns[0], tr.ID + " COMPLETED"},
		"eval":   {o.Jobs["eval"].ID + " COMPLETED"},
	})
}

// startRequeuedNow waits for job id to be pending again after a requeue
// and, as an operator may, lets it start now: Slurm holds a requeued batch
// job for about two minutes (PENDING (BeginTime)), which the tool only
// waits through; the test need not.
func (x *labCLI) startRequeuedNow(t *testing.T, id string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		out, _ := x.slurmCmd("squeue", "-h", "-j", id, "-o", "%T %r").Output()
		if f := strings.Fields(string(out)); len(f) == 2 && f[0] == "PENDING" && f[1] == "BeginTime" {
			// Not before the node is done with the run that ended: a
			// start within a second of a requeue once met the old run's
			// credential revocation on the node (slurmctld: "Killing
			// non-startable batch JobId=…: Job credential revoked"), and
			// the job ended FAILED 1:0 before its script ran.
			x.waitNoProcesses(t, id)
			time.Sleep(2 * time.Second)
			if out, err := x.slurmCmd("scontrol", "update", "jobid="+id, "StartTime=now").CombinedOutput(); err != nil {
				t.Logf("scontrol update jobid=%s StartTime=now: %v %s (it starts at its begin time)", id, err, out)
			}
			return
		}
		time.Sleep(200 * time.Millisecond)
	}
	t.Logf("job %s was not seen pending on its begin time after the requeue", id)
}

// waitNoProcesses waits until no process of job id runs on the lab node
// (scontrol listpids, run on the node, lists none).
func (x *labCLI) waitNoProcesses(t *testing.T, id string) {
	t.Helper()
	eventually(t, quickTimeout, 100*time.Millisecond, func() string {
		out, _ := x.slurmCmd("scontrol", "listpids", id).CombinedOutput()
		for _, l := range strings.Split(string(out), "\n") {
			if f := strings.Fields(l); len(f) >= 2 && f[1] == id {
				return "job " + id + " still has processes on the node: " + l
			}
		}
		return ""
	})
}

// submitCount submits n episodes and returns their ids.
func (x *labCLI) submitCount(t *testing.T, state, cfg string, n int) []string {
	t.Helper()
	x.run(t, state, quickTimeout, "submit", "--count", fmt.Sprint(n), "--json", "--config", cfg).want(t, ExitOK)
	eps := x.listEpisodes(t, state)
	if len(eps) != n {
		t.Fatalf("%d episodes in the ledger after submit --count %d", len(eps), n)
	}
	for _, ep := range eps {
		t.Cleanup(func() { cleanupEpisode(t, ep) })
	}
	return eps
}

// listEpisodes is every episode of the ledger in state.
func (x *labCLI) listEpisodes(t *testing.T, state string) []string {
	t.Helper()
	r := x.run(t, state, quickTimeout, "--json", "list").want(t, ExitOK)
	var l struct {
		Episodes []struct {
			Episode string `json:"episode"`
		} `json:"episodes"`
	}
	oneJSON(t, r, &l)
	var eps []string
	for _, e := range l.Episodes {
		eps = append(eps, e.Episode)
	}
	return eps
}

// wantAllScored checks that every episode of eps is final and scored
// (result --json) and that sacct shows each with exactly one COMPLETED
// job per stage.
func (x *labCLI) wantAllScored(t *testing.T, state string, eps []string) {
	t.Helper()
	for _, ep := range eps {
		r := x.run(t, state, quickTimeout, "result", "--json", ep)
		if r.code != ExitOK {
			t.Errorf("%s: result exit %d\n%s", ep, r.code, r)
			continue
		}
		o := outcomeOf(t, r)
		if o.Outcome != "scored" {
			t.Errorf("%s: %s (%s) %s", ep, o.Outcome, o.FailureReason, o.Detail)
		}
		waitSacct(t, ep, sacctWant{states: allStates("COMPLETED", labStages...), ids: idsOf(o), tags: true})
	}
}

// (#14, fault 2) slurmctld restarted while episodes are pending and
// running: no false failure; they complete, one job per stage.
func (x *labCLI) testSlurmctldRestart(t *testing.T) {
	state := t.TempDir()
	eps := x.submitCount(t, state, x.config(t, "train", "--delay", "10"), 3)
	b := x.start(t, state, faultTimeout, "watch", "--json")
	x.waitTrainRunning(t, state, eps[0], b)
	x.fault(t, "slurmctld-restart")
	b.wait(t, faultTimeout+10*time.Second).want(t, ExitOK)
	x.wantAllScored(t, state, eps)
}

// (#14) run started while slurmctld is down: the author's sbatch is tried
// again at every poll, like train's and eval's, until slurmctld is back;
// run scores the episode and prints its one JSON document.
func (x *labCLI) testRunSlurmctldDown(t *testing.T) {
	state, ep := t.TempDir(), newEpisode(t, "ctld-down")
	x.fault(t, "slurmctld-stop")
	b := x.start(t, state, faultTimeout, "run", "--json", "--config", x.config(t, ""), "--episode", ep)
	time.Sleep(10 * time.Second)
	if b.exited() {
		x.fault(t, "slurmctld-start")
		t.Fatalf("run gave up while slurmctld was down\n%s", b.res)
	}
	x.fault(t, "slurmctld-start")
	r := b.wait(t, faultTimeout+10*time.Second).want(t, ExitOK)
	if o := outcomeOf(t, r); o.Outcome != "scored" {
		t.Fatalf("outcome %s (%s): %s", o.Outcome, o.FailureReason, o.Detail)
	}
	waitSacct(t, ep, sacctWant{states: allStates("COMPLETED", labStages...), tags: true})
}

// (#14, fault 3) slurmdbd stopped for 60 s while train and eval end:
// sacct fails. A watch that is there follows the jobs through squeue; one
// that comes back only after slurmctld has forgotten the ended jobs
// (MinJobAge, 30 s in the lab) finds that nothing answers for them. It
// waits: nothing is classified lost or failed, and the episodes score once
// slurmdbd is back.
func (x *labCLI) testSlurmdbdOutage(t *testing.T) {
	state := t.TempDir()
	eps := x.submitCount(t, state, x.config(t, "train", "--delay", "5"), 2)
	b := x.start(t, state, faultTimeout, "watch", "--json")
	x.waitTrainRunning(t, state, eps[0], b)
	killGroup(t, b) // the watcher goes away (a laptop asleep)
	outage := time.Now()
	labDaemon(t, "stop", "slurmdbd")
	t.Cleanup(func() { _ = exec.Command(labtest.Script(t, "daemon"), "start", "slurmdbd").Run() })
	// Both episodes' jobs end, and slurmctld forgets them (a job array's
	// tasks carry the array's name).
	var names []string
	for _, ep := range eps {
		e := readLedger(t, state, ep)
		for _, s := range labStages {
			names = append(names, jobName(ep, s))
			if a := e.Jobs[s].Array; a != nil && !slices.Contains(names, a.Name) {
				names = append(names, a.Name)
			}
		}
	}
	eventually(t, 90*time.Second, time.Second, func() string {
		out, err := exec.Command("squeue", "-h", "-t", "all", "-o", "%i %j %T", "--name="+strings.Join(names, ",")).Output()
		if err != nil {
			return err.Error()
		}
		if s := strings.TrimSpace(string(out)); s != "" {
			return "slurmctld still holds: " + s
		}
		return ""
	})
	t.Logf("every job ended and slurmctld forgot it, %s into the outage", time.Since(outage).Round(time.Second))
	w := x.start(t, state, faultTimeout, "watch", "--json")
	time.Sleep(max(60*time.Second-time.Since(outage), 15*time.Second))
	if w.exited() {
		t.Fatalf("watch ended while slurmdbd was away and nothing could answer for the jobs\n%s", w.res)
	}
	t.Logf("slurmdbd back after %s", time.Since(outage).Round(time.Second))
	labDaemon(t, "start", "slurmdbd")
	w.wait(t, faultTimeout+10*time.Second).want(t, ExitOK)
	x.wantAllScored(t, state, eps)
}

// ledgerPhases counts the episodes of the ledger in state by how far they
// are: a kill -9 lands in one of these.
func ledgerPhases(t *testing.T, state string) map[string]int {
	t.Helper()
	files, _ := filepath.Glob(filepath.Join(state, "nemorl-slurm", "episodes", "*.json"))
	phases := map[string]int{}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		var e struct {
			Staged bool `json:"staged"`
			Jobs   map[string]struct {
				JobID string `json:"job_id"`
			} `json:"jobs"`
			Outcome json.RawMessage `json:"outcome"`
		}
		if json.Unmarshal(b, &e) != nil {
			continue
		}
		phase := "final"
		switch {
		case len(e.Outcome) > 0 && string(e.Outcome) != "null":
		case !e.Staged:
			phase = "staging"
		default:
			phase = "running"
			for _, s := range labStages {
				if j, ok := e.Jobs[s]; ok && j.JobID == "" {
					phase = "intent without job id (" + s + ")"
				}
			}
			if _, ok := e.Jobs["eval"]; !ok && e.Jobs["train"].JobID != "" {
				phase = "between train and eval submission"
			}
		}
		phases[phase]++
	}
	return phases
}

// killGroup kills b's process group with SIGKILL and waits for it.
func killGroup(t *testing.T, b *bgRun) {
	t.Helper()
	if err := syscall.Kill(-b.cmd.Process.Pid, syscall.SIGKILL); err != nil && err != syscall.ESRCH {
		t.Fatal(err)
	}
	<-b.done
}

// (#14, fault 1) kill -9 of submit, run and watch at random moments across
// 20 episodes: while staging, between an intent and its job id, between
// train and eval, while collecting. After one resume, every episode has
// exactly one job per stage (sacct), and every one scores.
func (x *labCLI) testKill9(t *testing.T) {
	state, cfg := t.TempDir(), x.config(t, "")
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 14))
	seen := map[string]int{}
	note := func(what string) {
		for p, n := range ledgerPhases(t, state) {
			if p != "final" {
				seen[p] += n
			}
		}
		t.Logf("kill -9 %s: ledger %v", what, ledgerPhases(t, state))
	}
	// submit --count killed while it stages.
	b := x.start(t, state, faultTimeout, "submit", "--count", "12", "--json", "--config", cfg)
	time.Sleep(time.Duration(100+rng.IntN(400)) * time.Millisecond)
	note("submit --count 12")
	killGroup(t, b)
	// run killed, one at a time, at random moments of an episode.
	for i := range 4 {
		ep := newEpisode(t, fmt.Sprintf("kill9-run%d", i))
		b := x.start(t, state, faultTimeout, "run", "--json", "--config", cfg, "--episode", ep)
		time.Sleep(time.Duration(200+rng.IntN(6000)) * time.Millisecond)
		note("run " + ep)
		killGroup(t, b)
	}
	// run killed exactly in the crash window of train's and of eval's
	// sbatch: the job made, its id never saved (the entry put back as the
	// tool wrote it then, sealed). resume must adopt it, not submit again.
	windows := map[string]string{}
	for _, stage := range []string{"train", "eval"} {
		ep := newEpisode(t, "kill9-"+stage+"-window")
		b := x.start(t, state, faultTimeout, "run", "--json", "--config", cfg, "--episode", ep)
		id := waitLedgerJob(t, state, ep, stage, b)
		killGroup(t, b)
		crashWindow(t, state, ep, stage, id)
		windows[ep] = stage + " " + id
		note("run " + ep + " in " + stage + "'s sbatch window")
	}
	if n := len(x.listEpisodes(t, state)); n < 20 {
		x.run(t, state, quickTimeout, "submit", "--count", fmt.Sprint(20-n), "--json", "--config", cfg).want(t, ExitOK)
	}
	eps := x.listEpisodes(t, state)
	for _, ep := range eps {
		t.Cleanup(func() { cleanupEpisode(t, ep) })
	}
	// watch and resume of them all, killed at random.
	for i := range 8 {
		verb := []string{"watch", "resume"}[i%2]
		b := x.start(t, state, faultTimeout, verb, "--json")
		time.Sleep(time.Duration(300+rng.IntN(5000)) * time.Millisecond)
		note(verb)
		killGroup(t, b)
	}
	t.Logf("kill -9 landed with episodes in: %v", seen)
	x.run(t, state, faultTimeout, "resume", "--json").want(t, ExitOK)
	if len(eps) < 20 {
		t.Fatalf("%d episodes, want at least 20", len(eps))
	}
	x.wantAllScored(t, state, eps)
	for ep, w := range windows {
		stage, id, _ := strings.Cut(w, " ")
		if sub := readLedger(t, state, ep).Jobs[stage]; sub.JobID != id || !sub.Adopted {
			t.Errorf("%s: ledger %s job %q adopted %v, want %s adopted after the crash in its sbatch window", ep, stage, sub.JobID, sub.Adopted, id)
		}
	}
}
