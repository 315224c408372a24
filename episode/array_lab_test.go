package episode

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nemorl/nemorl-slurm/internal/labtest"
	"github.com/nemorl/nemorl-slurm/ledger"
	"github.com/nemorl/nemorl-slurm/remote"
	"github.com/nemorl/nemorl-slurm/rules"
	"github.com/nemorl/nemorl-slurm/slurm"
	"github.com/nemorl/nemorl-slurm/stages"
)

// TestAuthorArrayLab: episodes submitted together have their authors as
// one job array, on each Slurm: one sbatch; each entry records its task
// ("ARRAY_TASK"), the array's name, comment and script sha256 (the bytes
// Slurm keeps for the job); each manifest names its task. An episode whose
// task id was lost (a crash between sbatch and the save) adopts its own
// task, proven by the array's script, not a sibling's; all are scored.
func TestAuthorArrayLab(t *testing.T) {
	labtest.EachSlurm(t, testAuthorArray)
}

func testAuthorArray(t *testing.T, s labtest.Slurm) {
	labtest.UseLab(t)
	d, counter := dialLabAt(t, s.Lab, nil, 0)
	ctx := context.Background()
	specs := []Spec{{Prompt: []byte("stand-in prompt")}, {Prompt: []byte("stand-in prompt")}, {Prompt: []byte("stand-in prompt")}}
	res := d.Submit(ctx, specs)
	var eps []string
	var array string
	for i, r := range res {
		if r.Err != nil {
			t.Fatalf("episode %d: %v", i, r.Err)
		}
		r.Lock.Unlock()
		eps = append(eps, r.Entry.Episode)
		sub := r.Entry.Jobs[stages.Author]
		if sub.Array == nil || sub.Array.Task != i {
			t.Fatalf("episode %d: author submission %+v: want task %d of an array", i, sub, i)
		}
		a, task, ok := slurm.SplitTaskID(sub.JobID)
		if !ok || task != i || (array != "" && a != array) {
			t.Fatalf("episode %d: author job %q: want task %d of the batch's one array %s", i, sub.JobID, i, array)
		}
		array = a
		// The manifest on the cluster names the task.
		b, err := os.ReadFile(filepath.Join(r.Entry.Dir, ManifestFile))
		if err != nil {
			t.Fatal(err)
		}
		var m Manifest
		if err := json.Unmarshal(b, &m); err != nil || m.Jobs[stages.Author] != sub.JobID {
			t.Fatalf("episode %d: manifest jobs %v (%v), want author %s", i, m.Jobs, err, sub.JobID)
		}
	}
	t.Cleanup(func() {
		for _, ep := range eps {
			if e, err := d.Ledger.Load(ep); err == nil {
				cancelAsOwner(d, e)
			}
		}
	})
	// The script Slurm keeps for the array is the one whose sha256 the
	// ledger holds, staged beside the episodes.
	first, _ := d.Ledger.Load(eps[0])
	at := first.Jobs[stages.Author].Array
	staged, err := os.ReadFile(at.Script)
	if err != nil {
		t.Fatalf("the array's staged script: %v", err)
	}
	kept, err := d.Slurm.BatchScript(ctx, first.Jobs[stages.Author].JobID)
	if err != nil {
		t.Fatalf("the array's batch script from Slurm: %v", err)
	}
	for what, b := range map[string][]byte{"staged": staged, "kept by Slurm": kept} {
		if sum := sha256.Sum256(b); hex.EncodeToString(sum[:]) != at.ScriptSHA256 {
			t.Errorf("the array's script %s: sha256 %x, the ledger's %s", what, sum, at.ScriptSHA256)
		}
	}
	// A crash between sbatch and saving the id: episode 1's task is found
	// again by the array's tag and proven by its script.
	e1, err := d.Ledger.Load(eps[1])
	if err != nil {
		t.Fatal(err)
	}
	lost := e1.Jobs[stages.Author].JobID
	e1.Jobs[stages.Author].JobID = ""
	if err := d.Ledger.Save(e1); err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithTimeout(ctx, 4*time.Minute)
	defer cancel()
	got, err := d.Watch(wctx, eps, WatchOptions{Act: true, PollMin: 200 * time.Millisecond, PollMax: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	for i, ep := range eps {
		e := got[ep]
		if o := e.Outcome; o == nil || o.Outcome != rules.Scored || o.Reward == nil {
			t.Errorf("episode %d (%s): outcome %+v, want scored", i, ep, o)
		}
	}
	if sub := got[eps[1]].Jobs[stages.Author]; sub.JobID != lost || !sub.Adopted {
		t.Errorf("episode 1 after the lost id: author %+v, want its own task %s adopted", sub, lost)
	}
	polls, _ := counter.calls()
	t.Logf("%s: array %s, 3 authors in one sbatch; %d polls to the end", s.Name, array, len(polls))
}

// TestAuthorArrayCancelOneTaskLab: cancelling one episode cancels its
// author's task alone; its siblings' tasks go on. A task cancelled while
// still pending in its array's record leaves no record (squeue and sacct
// both forget it, on 22.05 and 24.11): it reads Unknown, withdrawn from
// its array (slurm.SourceWithdrawn) once sacct knows the array.
func TestAuthorArrayCancelOneTaskLab(t *testing.T) {
	labtest.EachSlurm(t, testAuthorArrayCancelOne)
}

func testAuthorArrayCancelOne(t *testing.T, s labtest.Slurm) {
	labtest.UseLab(t)
	d, _ := dialLabAt(t, s.Lab, nil, 0)
	d.Config.Stages.Author.Command = []string{"/opt/nemorl-lab/stand-ins/author", "--sleep-forever"}
	ctx := context.Background()
	es := submitThree(t, d)
	ids := make([]string, len(es))
	for i, e := range es {
		ids[i] = e.JobID(stages.Author)
	}
	lock, _, err := d.Ledger.TryLock(es[0].Episode)
	if err != nil {
		t.Fatal(err)
	}
	signalled, err := d.Cancel(ctx, es[0], rules.ReasonCancelled, lock)
	lock.Unlock()
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(signalled, ",") != ids[0] {
		t.Errorf("cancel signalled %v, want only episode 0's task %s", signalled, ids[0])
	}
	deadline := time.Now().Add(time.Minute)
	for {
		infos, err := d.Slurm.Query(ctx, ids)
		if err != nil {
			t.Fatal(err)
		}
		c, s1, s2 := infos[ids[0]], infos[ids[1]], infos[ids[2]]
		// A task cancelled while still pending in its array's record
		// leaves no record at all (every Slurm: the task is cleared from
		// the array's bitmap): Unknown, never failed.
		// Withdrawn: its array known (a sibling's record), the task in
		// none; none at all while slurmdbd has no record of the array.
		vanished := c.State.Class == slurm.Unknown && (c.Source == slurm.SourceWithdrawn || c.Source == slurm.SourceNone) && s1.Source != slurm.SourceNone
		if c.State.Terminal() || vanished {
			if s1.State.Terminal() || s2.State.Terminal() {
				t.Fatalf("after cancelling task %s: siblings %s %s, %s %s: want them still pending or running", ids[0], ids[1], s1.State.Raw, ids[2], s2.State.Raw)
			}
			if !vanished && c.State.Name != "CANCELLED" {
				t.Errorf("task %s: %s, want CANCELLED (or no record: cancelled while pending)", ids[0], c.State.Raw)
			}
			t.Logf("%s: task %s %q (source %s); siblings %s %s, %s %s", s.Name, ids[0], c.State.Raw, c.Source, ids[1], s1.State.Raw, ids[2], s2.State.Raw)
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("task %s still %s a minute after its cancel", ids[0], c.State.Raw)
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// TestAuthorArrayWithdrawnLab: two authors of one array withdrawn while
// pending (held back with --begin), which leaves Slurm no record of
// either: one by the tool's cancel (cancelled, infra), one by a scancel of
// the same user behind the tool's back, as a sibling's code would
// (foreign_cancel, the policy's, tampering: without isolation, the lab).
// Each is decided once WithdrawnAfter of polls showed its array without it.
func TestAuthorArrayWithdrawnLab(t *testing.T) {
	labtest.EachSlurm(t, testAuthorArrayWithdrawn)
}

func testAuthorArrayWithdrawn(t *testing.T, s labtest.Slurm) {
	labtest.UseLab(t)
	d, _ := dialLabAt(t, s.Lab, nil, 0)
	d.Config.Cluster.ExtraSbatch = append(d.Config.Cluster.ExtraSbatch, "--begin=now+1hour")
	ctx := context.Background()
	es := submitThree(t, d)
	lock, _, err := d.Ledger.TryLock(es[0].Episode)
	if err != nil {
		t.Fatal(err)
	}
	_, err = d.Cancel(ctx, es[0], rules.ReasonCancelled, lock)
	lock.Unlock()
	if err != nil {
		t.Fatal(err)
	}
	victim := es[1].JobID(stages.Author)
	if _, err := d.Host.Run(ctx, remote.Command{Argv: []string{"scancel", victim}}); err != nil {
		t.Fatalf("scancel %s as the user: %v", victim, err)
	}
	wctx, cancel := context.WithTimeout(ctx, rules.WithdrawnAfter+4*time.Minute)
	defer cancel()
	got, err := d.Watch(wctx, []string{es[0].Episode, es[1].Episode}, WatchOptions{Act: true, PollMin: time.Second, PollMax: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if o := got[es[0].Episode].Outcome; o == nil || o.Outcome != rules.InfraFailure || o.FailureReason != rules.ReasonCancelled || o.Reward != nil {
		t.Errorf("episode 0, cancelled by the tool while pending: %+v, want infra_failure/cancelled", o)
	}
	if o := got[es[1].Episode].Outcome; o == nil || o.Outcome != rules.PolicyFailure || o.FailureReason != rules.ReasonForeignCancel || !o.Tampering ||
		!strings.Contains(o.Detail, "withdrawn from its job array") {
		t.Errorf("episode 1, its pending task scancelled behind the tool's back: %+v, want policy_failure/foreign_cancel, tampering", o)
	}
	infos, err := d.Slurm.Query(ctx, []string{es[2].JobID(stages.Author)})
	if j := infos[es[2].JobID(stages.Author)]; err != nil || j.State.Class != slurm.Pending {
		t.Errorf("episode 2's task, untouched: %+v %v, want still pending", j, err)
	}
}

// submitThree submits three episodes together (their authors one array)
// and cancels whatever of them is left when t ends.
func submitThree(t *testing.T, d *Driver) []*ledger.Entry {
	t.Helper()
	res := d.Submit(context.Background(), []Spec{{Prompt: []byte("p")}, {Prompt: []byte("p")}, {Prompt: []byte("p")}})
	var es []*ledger.Entry
	for i, r := range res {
		if r.Err != nil {
			t.Fatalf("episode %d: %v", i, r.Err)
		}
		r.Lock.Unlock()
		es = append(es, r.Entry)
	}
	t.Cleanup(func() {
		for _, e := range es {
			if e, err := d.Ledger.Load(e.Episode); err == nil {
				cancelAsOwner(d, e)
			}
		}
	})
	return es
}
