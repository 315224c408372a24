package episode

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/nemorl/nemorl-slurm/configs"
	"github.com/nemorl/nemorl-slurm/internal/labtest"
	"github.com/nemorl/nemorl-slurm/ledger"
	"github.com/nemorl/nemorl-slurm/record"
	"github.com/nemorl/nemorl-slurm/remote"
	"github.com/nemorl/nemorl-slurm/slurm"
	"github.com/nemorl/nemorl-slurm/stages"
)

// TestRoundTripsFar counts what one submit and one collection cost on the
// cluster, through the lab's far sshd (a 20 ms round trip): every
// operation is counted where it is sent (remote.Counted). A command is one
// SSH session: a channel open and an exec request, two round trips.
//   - submit: one command (the tree, the manifest and the author's sbatch);
//   - collection of the author's record: one command, and a few hundred
//     bytes back out of a log of more than a MiB.
func TestRoundTripsFar(t *testing.T) {
	lab := labtest.Env(t).Far(t)
	labtest.UseLab(t)
	cfg, err := configs.LoadFile("../configs/lab-none.yaml")
	if err != nil {
		t.Fatal(err)
	}
	cfg.Cluster.Workdir = lab.TestWorkdir(t)
	// A chatty author: 1.5 MiB of log before its record.
	cfg.Stages.Author.Command = []string{"/bin/sh", "-c", "head -c 1572864 /dev/zero | tr '\\0' 'x' | fold -w 100; echo; exec " + cfg.Stages.Author.Command[0]}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	ssh, err := remote.Dial(ctx, remote.Options{Host: lab.SSHHost, Port: lab.SSHPort, User: lab.User,
		IdentityFile: lab.Key, KnownHostsFile: lab.KnownHosts, ConfigFile: "none"})
	if err != nil {
		t.Fatalf("ssh to the lab's far port %d: %v", lab.SSHPort, err)
	}
	defer ssh.Close()
	host := remote.NewCounted(ssh)
	lg, err := ledger.OpenLedger(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	d := &Driver{Config: cfg, ConfigPath: "../configs/lab-none.yaml", Host: host, Slurm: slurm.New(ssh), Ledger: lg, Version: "test", Logf: t.Logf}

	e, lock, err := d.SubmitOne(ctx, "", []byte("stand-in prompt"))
	if err != nil {
		t.Fatal(err)
	}
	lock.Unlock()
	t.Cleanup(func() { cancelAsOwner(d, e) })
	if ops := host.Counts(); len(ops) != 1 || ops["run stage+sbatch"] != 1 {
		t.Errorf("submit made %v on the cluster, want one command (two round trips)", ops)
	}

	// Wait for the author to end (sacct through the uncounted connection).
	id := e.JobID(stages.Author)
	for {
		infos, err := d.Slurm.Query(ctx, []string{id})
		if err != nil {
			t.Fatal(err)
		}
		if infos[id].State.Terminal() {
			break
		}
		select {
		case <-ctx.Done():
			t.Fatalf("author job %s did not end: %v", id, infos[id].State)
		case <-time.After(500 * time.Millisecond):
		}
	}
	before, got0 := host.Counts(), host.Received()
	out, err := d.parts().collector.scan(ctx, e, stages.Author)
	if err != nil || out.RecordErr != nil {
		t.Fatalf("scan: %v %v", err, out.RecordErr)
	}
	rec, fi := out.Record, out.File
	if _, ok := rec.(*record.Author); !ok || fi.Size < 1<<20 {
		t.Fatalf("record %T from a %d-byte log", rec, fi.Size)
	}
	ops := host.Counts()
	if ops["run collect"]-before["run collect"] != 1 || len(ops) != 2 {
		t.Errorf("collection made %v (before %v), want one command (two round trips)", ops, before)
	}
	if n := host.Received() - got0; n > 64<<10 || n == 0 {
		t.Errorf("collection read %d bytes back from a %d-byte log, want at most 64 KiB", n, fi.Size)
	} else {
		t.Logf("collection: one command, %d bytes back from a %d-byte log; submit: one command", n, fi.Size)
	}
	if !strings.HasPrefix(ssh.Name(), lab.User+"@") {
		t.Errorf("host %s", ssh.Name())
	}
}
