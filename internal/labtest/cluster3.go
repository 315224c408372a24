package labtest

import (
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// Lab3 is what $STATE/lab3.env (lab/cluster3 up, beside lab.env) says of
// cluster 3: Slurm 24.11 built from source, with its own slurmdbd,
// slurmctld, slurmd and login sshd, and SlurmctldParameters=rl_enable (the
// lab user's RPCs are rate limited; root's are not). lab/README.md,
// "Cluster 3".
type Lab3 struct {
	File       string // the lab3.env read
	Cluster    string // NEMORL_LAB3_CLUSTER: its ClusterName
	Version    string // NEMORL_LAB3_SLURM_VERSION: "24.11.5"
	Prefix     string // NEMORL_LAB3_PREFIX: the build; its clients are in Prefix/bin
	SSHHost    string // NEMORL_LAB3_SSH_HOST
	SSHPort    int    // NEMORL_LAB3_SSH_PORT: its login node
	HostKeyPub string // NEMORL_LAB3_HOST_KEY_PUB: that sshd's public host key (a file)
	Conf       string // NEMORL_LAB3_CONF: its slurm.conf
	Gres       string // NEMORL_LAB3_GRES
	Partition  string // NEMORL_LAB3_PARTITION
	Node       string // NEMORL_LAB3_NODE
	Workdir    string // NEMORL_LAB3_WORKDIR
	CtldPort   int    // NEMORL_LAB3_SLURMCTLD_PORT
	LogDir     string // NEMORL_LAB3_LOGDIR: its daemons' logs (slurmctld-lab3.log, ...)
	// The rate limit (NEMORL_LAB3_RL_BUCKET_SIZE, NEMORL_LAB3_RL_REFILL_RATE):
	// RPCs a user may send at once, and how many come back a second.
	RLBucket, RLRefill int
}

// lab3Name is lab3.env's name, in lab.env's directory.
const lab3Name = "lab3.env"

// loadCluster3 reads lab3.env beside lab.env (path) into l.Lab3. Its
// absence is no error (HasCluster3 says false); a broken one is kept in
// l.lab3Err for the tests that ask for cluster 3, so that it fails those
// and not every lab test.
func (l *Lab) loadCluster3(path string) {
	p := filepath.Join(filepath.Dir(path), lab3Name)
	l.Lab3, l.lab3Err = LoadLab3(p)
	if errors.Is(l.lab3Err, fs.ErrNotExist) {
		l.Lab3, l.lab3Err = Lab3{File: p}, nil
	}
}

// LoadLab3 reads and checks a lab3.env file.
func LoadLab3(path string) (Lab3, error) {
	f, err := os.Open(path)
	if err != nil {
		return Lab3{}, err
	}
	defer f.Close()
	vars, err := Parse(f)
	if err != nil {
		return Lab3{}, fmt.Errorf("%s: %w", path, err)
	}
	var missing []string
	need := func(key string) string {
		v := vars[key]
		if v == "" {
			missing = append(missing, key)
		}
		return v
	}
	c := Lab3{File: path,
		Cluster: need("NEMORL_LAB3_CLUSTER"), Version: need("NEMORL_LAB3_SLURM_VERSION"),
		Prefix: need("NEMORL_LAB3_PREFIX"), SSHHost: need("NEMORL_LAB3_SSH_HOST"),
		HostKeyPub: need("NEMORL_LAB3_HOST_KEY_PUB"), Conf: need("NEMORL_LAB3_CONF"),
		Gres: need("NEMORL_LAB3_GRES"), Partition: need("NEMORL_LAB3_PARTITION"),
		LogDir: need("NEMORL_LAB3_LOGDIR"),
		Node:   vars["NEMORL_LAB3_NODE"], Workdir: vars["NEMORL_LAB3_WORKDIR"],
	}
	ports := []struct {
		key string
		to  *int
		min int
	}{
		{"NEMORL_LAB3_SSH_PORT", &c.SSHPort, 1}, {"NEMORL_LAB3_SLURMCTLD_PORT", &c.CtldPort, 1},
		{"NEMORL_LAB3_RL_BUCKET_SIZE", &c.RLBucket, 0}, {"NEMORL_LAB3_RL_REFILL_RATE", &c.RLRefill, 0},
	}
	for _, p := range ports {
		v := vars[p.key]
		if v == "" && p.min == 0 {
			continue // optional
		}
		if v == "" {
			missing = append(missing, p.key)
			continue
		}
		n, err := strconv.Atoi(v)
		if err != nil || n < p.min || n > 65535 {
			return Lab3{}, fmt.Errorf("%s: %s=%q is not a number in [%d, 65535]", path, p.key, v, p.min)
		}
		*p.to = n
	}
	if len(missing) > 0 {
		return Lab3{}, fmt.Errorf("%s: %s missing (run lab/cluster3 up)", path, strings.Join(missing, ", "))
	}
	if _, _, ok := seriesOf(c.Version); !ok {
		return Lab3{}, fmt.Errorf("%s: NEMORL_LAB3_SLURM_VERSION=%q is not a Slurm version", path, c.Version)
	}
	return c, nil
}

// HasCluster3 says whether lab3.env describes cluster 3 (lab/cluster3 up
// has run); it may still be down (Cluster3 checks).
func (l Lab) HasCluster3() bool { return l.Lab3.SSHPort != 0 }

// need3 stops t unless cluster 3 is described and answering on its
// controller's and its login's ports: a failure under NEMORL_REQUIRE_LAB=1
// (make test starts it), a skip otherwise.
func (l Lab) need3(t testing.TB) {
	t.Helper()
	stop := t.Skipf
	if Required() {
		stop = t.Fatalf
	}
	switch {
	case l.lab3Err != nil:
		t.Fatalf("cluster 3: %v", l.lab3Err)
	case !l.HasCluster3():
		stop("cluster 3 (Slurm 24.11, rl_enable) is not set up: no %s; run lab/cluster3 up (make lab-up does)", l.Lab3.File)
	}
	for _, port := range []int{l.Lab3.CtldPort, l.Lab3.SSHPort} {
		if err := dialOnce(net.JoinHostPort(l.Lab3.SSHHost, strconv.Itoa(port)), 2*time.Second); err != nil {
			stop("cluster 3 is not running (%v): lab/cluster3 status; lab/cluster3 up", err)
		}
	}
}

// dialOnce tries one TCP connection to addr.
func dialOnce(addr string, limit time.Duration) error {
	c, err := net.DialTimeout("tcp", addr, limit)
	if err != nil {
		return err
	}
	return c.Close()
}

// Cluster3 returns the lab as cluster 3's login node (127.0.0.1:2225) has
// it: SSHHost, SSHPort, HostKeyPub, Cluster, Gres, Partition and Node are
// cluster 3's, KnownHosts is a file of t's own that pins its host key for
// that port (lab/up rewrites the lab's known_hosts), and there is no far
// endpoint. The user, key and workdir are the lab's (the same home on the
// same node). Over that login the
// lab user's RPCs are rate limited. It skips t (fails it when Required)
// when cluster 3 is not set up or not running; t holds cluster 3 shared
// until it ends (LockCluster3).
func (l Lab) Cluster3(t testing.TB) Lab {
	t.Helper()
	l.need3(t)
	useCluster3(t)
	c := l.Lab3
	pub, err := os.ReadFile(c.HostKeyPub)
	if err != nil {
		t.Fatalf("cluster 3's host key: %v (lab/cluster3 up)", err)
	}
	f := strings.Fields(string(pub))
	if len(f) < 2 {
		t.Fatalf("%s: not a public key: %q", c.HostKeyPub, pub)
	}
	known := filepath.Join(t.TempDir(), "known_hosts-lab3")
	line := fmt.Sprintf("[%s]:%d %s %s\n", c.SSHHost, c.SSHPort, f[0], f[1])
	if err := os.WriteFile(known, []byte(line), 0o644); err != nil {
		t.Fatal(err)
	}
	l.SSHHost, l.SSHPort, l.HostKeyPub, l.KnownHosts = c.SSHHost, c.SSHPort, c.HostKeyPub, known
	l.Cluster, l.Gres, l.Partition = c.Cluster, c.Gres, c.Partition
	if c.Node != "" {
		l.Node = c.Node
	}
	l.FarSSHPort, l.FarRTT = 0, 0
	return l
}

// Cluster3Vars are the variables ("NAME=value") that send this machine's
// Slurm clients to cluster 3: a PATH of its 24.11 clients and the system's
// directories (22.05's clients cannot talk to it; short, as a command
// line in an error message is cut at 400 bytes) and its slurm.conf. Nil
// when lab.env has no cluster 3. For remote.WithEnv; Cluster3Env is the
// whole environment.
func (l Lab) Cluster3Vars() []string {
	if !l.HasCluster3() {
		return nil
	}
	return []string{"PATH=" + filepath.Join(l.Lab3.Prefix, "bin") + ":" + systemPath, "SLURM_CONF=" + l.Lab3.Conf}
}

// systemPath is the PATH after cluster 3's clients in Cluster3Vars.
const systemPath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// Cluster3Env is this process's environment with Cluster3Vars: for
// exec.Cmd.Env, to run Slurm's clients here against cluster 3 (as root:
// never rate limited). Nil when lab.env has no cluster 3.
func (l Lab) Cluster3Env() []string { return withVars(l.Cluster3Vars()) }

// withVars is this process's environment with vars set (nil: nil, which
// exec.Cmd reads as this process's environment).
func withVars(vars []string) []string {
	if len(vars) == 0 {
		return nil
	}
	env := []string{}
	for _, kv := range os.Environ() {
		name, _, _ := strings.Cut(kv, "=")
		keep := true
		for _, v := range vars {
			if strings.HasPrefix(v, name+"=") {
				keep = false
			}
		}
		if keep {
			env = append(env, kv)
		}
	}
	return append(env, vars...)
}

// ctld3Accepts says whether cluster 3's slurmctld accepts a TCP
// connection within a second.
func (l Lab) ctld3Accepts() bool {
	return l.HasCluster3() && dialOnce(net.JoinHostPort(l.Lab3.SSHHost, strconv.Itoa(l.Lab3.CtldPort)), time.Second) == nil
}

// The cluster 3 lock: $TMPDIR/nemorl-lab3.lock, as cluster 2's: every test
// that uses cluster 3 holds it shared (Cluster3, and EachSlurm's 24.11
// subtest, take it), and a test that must be alone on it (a measurement
// of its rate limit: every lab user's RPC counts against one bucket) holds
// it exclusively with LockCluster3, with the lab lock shared.
var lock3Path = func() string { return filepath.Join(os.TempDir(), "nemorl-lab3.lock") }

// cluster3Lock is cluster 3's lock.
var cluster3Lock = &clusterLock{what: "cluster 3", path: func() string { return lock3Path() }}

// LockCluster3 takes cluster 3 for t alone until t ends (the lab shared:
// UseLab): no other test that uses cluster 3 runs meanwhile, in any
// process. Call it before Env, Cluster3 or EachSlurm and, in a parallel
// test, after t.Parallel: a paused test with a hold would keep it from the
// others.
func LockCluster3(t testing.TB) {
	t.Helper()
	cluster3Lock.lockExclusive(t)
}

// useCluster3 holds cluster 3 shared until t ends, unless t holds it
// exclusively already.
func useCluster3(t testing.TB) {
	t.Helper()
	cluster3Lock.useShared(t)
}
