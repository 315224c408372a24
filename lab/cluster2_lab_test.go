package lab_test

// The lab's cluster 2 (lab/README.md, "Cluster 2"), over its own sshd: a
// job submitted there runs on cluster 2 (not cluster 1), with its one
// GPU; with cluster 2's controller stopped its clients fail and cluster
// 1's do not; once it is started again the job is still there.

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nemorl/nemorl-slurm/internal/labtest"
	"github.com/nemorl/nemorl-slurm/internal/shell"
)

// sshResult is what one command over ssh gave.
type sshResult struct {
	stdout, stderr string
	err            error
	took           time.Duration
}

// labSSH runs command (a shell command line) as the lab user over the lab
// endpoint's sshd (lab.SSHPort: 2222 for cluster 1, 2224 for cluster 2),
// strict host key checking against the lab's known_hosts, stdin as its
// input.
func labSSH(t *testing.T, lab labtest.Lab, stdin, command string) sshResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, "ssh", "-i", lab.Key, "-p", strconv.Itoa(lab.SSHPort),
		"-o", "BatchMode=yes", "-o", "IdentitiesOnly=yes", "-o", "StrictHostKeyChecking=yes",
		"-o", "UserKnownHostsFile="+lab.KnownHosts, "-o", "GlobalKnownHostsFile=/dev/null",
		"-o", "ConnectTimeout=10", "-F", "none", lab.User+"@"+lab.SSHHost, command)
	cmd.Stdin = strings.NewReader(stdin)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	start := time.Now()
	err := cmd.Run()
	return sshResult{stdout: strings.TrimSpace(out.String()), stderr: strings.TrimSpace(errb.String()), err: err, took: time.Since(start)}
}

// labSSHOK is labSSH that fails t when the command fails; its stdout.
func labSSHOK(t *testing.T, lab labtest.Lab, command string) string {
	t.Helper()
	r := labSSH(t, lab, "", command)
	if r.err != nil {
		t.Fatalf("ssh -p %d %s: %v\nstdout: %s\nstderr: %s", lab.SSHPort, command, r.err, r.stdout, r.stderr)
	}
	return r.stdout
}

// waitSSH retries command over ssh until ok accepts its stdout (limit at
// most) and returns that stdout; it fails t at the limit.
func waitSSH(t *testing.T, lab labtest.Lab, command string, limit time.Duration, ok func(string) bool) string {
	t.Helper()
	deadline := time.Now().Add(limit)
	for {
		r := labSSH(t, lab, "", command)
		if r.err == nil && ok(r.stdout) {
			return r.stdout
		}
		if time.Now().After(deadline) {
			t.Fatalf("ssh -p %d %s: not as wanted within %v; last: %v\nstdout: %s\nstderr: %s", lab.SSHPort, command, limit, r.err, r.stdout, r.stderr)
		}
		time.Sleep(time.Second)
	}
}

func TestCluster2(t *testing.T) {
	t.Parallel()
	labtest.LockCluster2(t) // before Env: this test stops cluster 2's controller
	lab := labtest.Env(t)
	c2 := lab.Cluster2(t)
	if _, err := exec.LookPath("ssh"); err != nil {
		labtest.Need(t, "ssh (openssh-client)", err)
	}
	if c2.SSHPort == lab.SSHPort || c2.Cluster == lab.Cluster || c2.Lab2Conf == "" {
		t.Fatalf("cluster 2 is not apart from cluster 1: %+v", c2)
	}
	q := shell.Quote

	// The sessions on 2224 name cluster 2's config; those on 2222 none.
	if got := labSSHOK(t, c2, `printf '%s\n' "${SLURM_CONF-unset}"`); got != c2.Lab2Conf {
		t.Errorf("SLURM_CONF over port %d = %q, want %q", c2.SSHPort, got, c2.Lab2Conf)
	}
	if got := labSSHOK(t, lab, `printf '%s\n' "${SLURM_CONF-unset}"`); got != "unset" {
		t.Errorf("SLURM_CONF over port %d = %q, want it unset", lab.SSHPort, got)
	}
	// One node each, the same name and partition; half the GPUs on cluster 2.
	sinfo := "sinfo -h -N -o '%N %R %G'"
	if got, want := labSSHOK(t, c2, sinfo), c2.Node+" "+c2.Partition+" "+c2.Lab2Gres; got != want {
		t.Errorf("cluster 2 sinfo: %q, want %q", got, want)
	}
	if got, want := labSSHOK(t, lab, sinfo), lab.Node+" "+lab.Partition+" "+lab.Gres; got != want {
		t.Errorf("cluster 1 sinfo: %q, want %q", got, want)
	}

	// A job on cluster 2, asking for all its GPUs. Its output goes to a
	// directory of this test (labtest's LockLab then knows it as ours).
	dir := lab.TestWorkdir(t)
	labSSHOK(t, c2, "mkdir -p "+q(dir))
	var b [4]byte
	if _, err := rand.Read(b[:]); err != nil {
		t.Fatal(err)
	}
	name := "nemorl-cluster2-test-" + hex.EncodeToString(b[:])
	gpu := strings.TrimPrefix(c2.Lab2Gres, "gpu:") // h100:2
	n, err := strconv.Atoi(gpu[strings.LastIndex(gpu, ":")+1:])
	if err != nil || n < 1 {
		t.Fatalf("cluster 2's GRES %q: no GPU count", c2.Lab2Gres)
	}
	var indexes []string // what CUDA_VISIBLE_DEVICES lists for them
	for i := range n {
		indexes = append(indexes, strconv.Itoa(i))
	}
	script := `#!/bin/bash
echo "conf=${SLURM_CONF-unset} cluster=${SLURM_CLUSTER_NAME-} gpus=${CUDA_VISIBLE_DEVICES-}"
# Without SLURM_CONF, as on a node of cluster 2: /etc/slurm is its config.
echo "default=$(env -u SLURM_CONF scontrol show config | sed -n 's/^ClusterName *= *//p')"
exec sleep 300
`
	r := labSSH(t, c2, script, "sbatch --parsable --job-name="+q(name)+" --time=5 --partition="+q(c2.Partition)+
		" --gres=gpu:"+q(gpu)+" --output="+q(dir+"/%j.out"))
	if r.err != nil {
		t.Fatalf("sbatch over port %d: %v\n%s", c2.SSHPort, r.err, r.stderr)
	}
	id, _, _ := strings.Cut(r.stdout, ";")
	if _, err := strconv.Atoi(id); err != nil {
		t.Fatalf("sbatch --parsable over port %d said %q", c2.SSHPort, r.stdout)
	}
	t.Logf("job %s on cluster 2 (%s)", id, r.stdout)
	// Cleanups run last first: this one after the controller is back.
	t.Cleanup(func() {
		if r := labSSH(t, c2, "", "scancel "+id); r.err != nil {
			t.Errorf("cleanup: scancel %s on cluster 2: %v: %s", id, r.err, r.stderr)
		}
		waitSSH(t, c2, "squeue -h -j "+id+" -o %T 2>/dev/null || true", time.Minute, func(s string) bool {
			return s == "" || s == "CANCELLED" || s == "COMPLETED"
		})
	})

	waitSSH(t, c2, "squeue -h -j "+id+" -o '%T %N'", time.Minute, func(s string) bool { return s == "RUNNING "+c2.Node })
	out := filepath.Join(dir, id+".out")
	var lines []string
	deadline := time.Now().Add(time.Minute)
	for {
		data, _ := os.ReadFile(out)
		lines = strings.Split(strings.TrimSpace(string(data)), "\n")
		if len(lines) >= 2 || time.Now().After(deadline) {
			break
		}
		time.Sleep(500 * time.Millisecond)
	}
	want := []string{"conf=" + c2.Lab2Conf + " cluster=" + c2.Cluster + " gpus=" + strings.Join(indexes, ","), "default=" + c2.Cluster}
	if strings.Join(lines, "\n") != strings.Join(want, "\n") {
		t.Errorf("the job's output %s:\n%s\nwant:\n%s", out, strings.Join(lines, "\n"), strings.Join(want, "\n"))
	}

	// Cluster 1 does not know it (its own ids start at 1, cluster 2's at
	// 10000000; the name tells even if they met).
	if r := labSSH(t, lab, "", "squeue -h -j "+id+" -o %j"); strings.Contains(r.stdout, name) {
		t.Errorf("cluster 1's squeue knows job %s: %q", id, r.stdout)
	} else {
		t.Logf("cluster 1's squeue -j %s: %v %q %q", id, r.err, r.stdout, r.stderr)
	}
	if got := labSSHOK(t, lab, "sacct -n -X -P -j "+id+" -o JobName"); strings.Contains(got, name) {
		t.Errorf("cluster 1's sacct knows job %s: %q", id, got)
	}

	// Accounting: the same slurmdbd, cluster 2's records (sacct -M here,
	// plain sacct over 2224), on the node, with the GPU.
	sacct := " -n -X -P -j " + id + " -o JobID,JobName,Cluster,NodeList,State,AllocTRES"
	row := func(s string) bool {
		f := strings.Split(s, "|")
		return len(f) == 6 && f[0] == id && f[1] == name && f[2] == c2.Cluster && f[3] == c2.Node &&
			f[4] == "RUNNING" && strings.Contains(f[5], "gres/gpu:"+strings.ReplaceAll(gpu, ":", "=")) // gres/gpu:h100=1
	}
	waitSSH(t, c2, "sacct"+sacct, time.Minute, row)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	local, err := exec.CommandContext(ctx, "sacct", append([]string{"-M", c2.Cluster}, strings.Fields(sacct)...)...).CombinedOutput()
	if err != nil || !row(strings.TrimSpace(string(local))) {
		t.Errorf("sacct -M %s%s here: %v\n%s", c2.Cluster, sacct, err, local)
	}

	// Cluster 2's controller away: its clients fail, cluster 1's answer,
	// and the job's accounting is still there (sacct asks slurmdbd).
	lab.StopCluster2(t)
	r = labSSH(t, c2, "", "squeue -h -j "+id)
	if r.err == nil || !strings.Contains(r.stderr, "Unable to contact slurm controller") {
		t.Errorf("squeue on cluster 2 with its controller stopped: %v, stdout %q, stderr %q; want it to fail with Unable to contact slurm controller", r.err, r.stdout, r.stderr)
	}
	t.Logf("cluster 2 squeue, controller stopped: %v after %v: %s", r.err, r.took.Round(time.Millisecond), r.stderr)
	r1 := labSSH(t, lab, "", "squeue -h -o %i")
	if r1.err != nil {
		t.Errorf("squeue on cluster 1 while cluster 2's controller is stopped: %v: %s", r1.err, r1.stderr)
	}
	t.Logf("cluster 1 squeue meanwhile: ok after %v", r1.took.Round(time.Millisecond))
	if got := labSSH(t, c2, "", "sacct"+sacct); got.err != nil || !row(got.stdout) {
		t.Errorf("sacct on cluster 2 with its controller stopped: %v, %q, %s", got.err, got.stdout, got.stderr)
	}

	// Back: it answers, and the job is still known, still running.
	lab.StartCluster2(t)
	if got := labSSHOK(t, c2, "squeue -h -j "+id+" -o '%T %N %j'"); got != "RUNNING "+c2.Node+" "+name {
		t.Errorf("cluster 2 squeue after the restart: %q, want the job running", got)
	}
	ctx, cancel = context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if got, err := exec.CommandContext(ctx, "squeue", "-M", c2.Cluster, "-h", "-j", id, "-o", "%T").CombinedOutput(); err != nil ||
		!strings.Contains(string(got), "RUNNING") {
		t.Errorf("squeue -M %s here after the restart: %v\n%s", c2.Cluster, err, got)
	}
}
