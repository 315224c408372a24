package episode

import (
	"context"
	"fmt"
	"os/exec"
	"path"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nemorl/nemorl-slurm/internal/labtest"
	"github.com/nemorl/nemorl-slurm/remote"
)

// BenchmarkCollect reads a record from the end of a 1.5 MiB stage log on
// the lab, on the loopback sshd and through the far endpoint (20 ms round
// trip), two ways in the same run:
//   - collect: what the watcher does (readOutput on its warm connection:
//     one command that checks the file and sends back the last MiB's
//     record lines);
//   - collect-cold: the same with a new connection each time;
//   - openssh: the plain recipe, `ssh host 'tail -c 1M LOG | grep PREFIX'`
//     (a new connection each time, as a script would).
func BenchmarkCollect(b *testing.B) {
	lab := labtest.Env(b)
	labtest.UseLab(b)
	lab.WaitSSH(b, time.Minute)
	far := lab.Far(b)
	ctx := context.Background()
	log := path.Join(lab.Workdir, fmt.Sprintf("bench-collect-%d.log", time.Now().UnixNano()))
	mk := exec.Command("su", "-s", "/bin/sh", lab.User, "-c",
		"head -c 1572864 /dev/zero | tr '\\0' x | fold -w 100 > "+log+" && echo >> "+log+" && echo '"+trainLineText+"' >> "+log+" && echo '+ exit 0' >> "+log)
	if out, err := mk.CombinedOutput(); err != nil {
		b.Fatalf("make the log: %v: %s", err, out)
	}
	defer exec.Command("rm", "-f", log).Run()
	for _, ep := range []struct {
		name string
		port int
	}{{"loopback", lab.SSHPort}, {fmt.Sprintf("far-%dms", far.FarRTT.Milliseconds()), far.FarSSHPort}} {
		ssh, err := remote.Dial(ctx, remote.Options{Host: lab.SSHHost, Port: ep.port, User: lab.User,
			IdentityFile: lab.Key, KnownHostsFile: lab.KnownHosts, ConfigFile: "none"})
		if err != nil {
			b.Fatal(err)
		}
		host := remote.NewCounted(ssh)
		d := &Driver{Host: host}
		b.Run(ep.name+"/collect", func(b *testing.B) {
			ops0, got0 := host.Counts()["run collect"], host.Received()
			for b.Loop() {
				out, err := d.parts().collector.readOutput(ctx, log, TailBytes)
				if err != nil || len(out.lines) != 1 {
					b.Fatalf("%+v %v", out, err)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Milliseconds())/float64(b.N), "ms/collect")
			b.ReportMetric(float64(host.Counts()["run collect"]-ops0)/float64(b.N), "commands/collect")
			b.ReportMetric(float64(host.Received()-got0)/float64(b.N), "bytes/collect")
		})
		ssh.Close()
		b.Run(ep.name+"/collect-cold", func(b *testing.B) {
			// As the plain recipe pays it: a new connection each time.
			for b.Loop() {
				ssh, err := remote.Dial(ctx, remote.Options{Host: lab.SSHHost, Port: ep.port, User: lab.User,
					IdentityFile: lab.Key, KnownHostsFile: lab.KnownHosts, ConfigFile: "none"})
				if err != nil {
					b.Fatal(err)
				}
				out, err := (&Driver{Host: ssh}).parts().collector.readOutput(ctx, log, TailBytes)
				ssh.Close()
				if err != nil || len(out.lines) != 1 {
					b.Fatalf("%+v %v", out, err)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Milliseconds())/float64(b.N), "ms/collect")
		})
		b.Run(ep.name+"/openssh", func(b *testing.B) {
			for b.Loop() {
				cmd := exec.Command("ssh", "-i", lab.Key, "-o", "UserKnownHostsFile="+lab.KnownHosts, "-o", "StrictHostKeyChecking=yes",
					"-o", "BatchMode=yes", "-p", strconv.Itoa(ep.port), lab.User+"@"+lab.SSHHost, "tail -c 1048576 "+log+" | grep NEMORL_ENV_")
				out, err := cmd.Output()
				if err != nil || !strings.HasPrefix(string(out), "NEMORL_ENV_TRAIN_RESULT=") {
					b.Fatalf("ssh: %v: %q", err, out)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Milliseconds())/float64(b.N), "ms/collect")
		})
	}
}
