package templates

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
)

// guardTree is a fake container for the isolation guard: a filesystem root
// and a proc tree, as a clean container of the stage would show them.
type guardTree struct {
	root, proc string
	mounts     []string // mount points, one mountinfo line each
	netdev     []string // interface names in /proc/net/dev
}

// bindTargets are the container paths of a stage's binds, read from its
// rendered (cluster-example) payload exec line.
func bindTargets(t *testing.T, stage string) []string {
	t.Helper()
	f, _ := render(t, loadExample(t, "cluster-example.yaml")).Lookup(Script(stage))
	payload, _ := execLines(t, f.Data)
	var out []string
	fields := strings.Fields(payload)
	for i, w := range fields {
		if w == "--bind" {
			spec := strings.Trim(fields[i+1], `"`)
			parts := strings.Split(spec, ":")
			out = append(out, parts[1])
		}
	}
	if len(out) == 0 {
		t.Fatalf("%s: no binds", stage)
	}
	return out
}

func newGuardTree(t *testing.T, stage string) *guardTree {
	t.Helper()
	dir := t.TempDir()
	g := &guardTree{root: filepath.Join(dir, "root"), proc: filepath.Join(dir, "proc"), netdev: []string{"lo"}}
	g.mounts = []string{"/", "/proc", "/sys", "/dev", "/dev/pts", "/dev/shm", "/tmp", "/var/tmp", "/etc/hosts", "/etc/passwd",
		"/etc/group", "/etc/resolv.conf", "/etc/localtime", "/etc/hostname", "/.singularity.d/libs"}
	for _, d := range []string{"usr/bin", "bin", "etc", "dev", "tmp", "var/tmp", "run", "proc", "sys", ".singularity.d/libs"} {
		mkdirAll(t, filepath.Join(g.root, d))
	}
	for _, target := range bindTargets(t, stage) {
		g.mounts = append(g.mounts, target)
		p := filepath.Join(g.root, target)
		if strings.HasPrefix(target, "/nemorl/in/") {
			writeFile(t, p, "input")
		} else {
			mkdirAll(t, p)
		}
	}
	if stage != Author {
		// What Apptainer's --nv binds outside /.singularity.d.
		g.mounts = append(g.mounts, "/usr/bin/nvidia-smi", "/usr/lib64/libcuda.so.1", "/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1")
		writeFile(t, filepath.Join(g.root, "usr/bin/nvidia-smi"), "")
		writeFile(t, filepath.Join(g.root, "usr/lib64/libcuda.so.1"), "")
		writeFile(t, filepath.Join(g.root, "usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1"), "")
	}
	// A socket under /proc or /sys is not reachable as a file: pruned.
	mknodSocket(t, filepath.Join(g.root, "proc", "pruned.sock"))
	return g
}

func mkdirAll(t *testing.T, p string) {
	t.Helper()
	if err := os.MkdirAll(p, 0o755); err != nil {
		t.Fatal(err)
	}
}

func writeFile(t *testing.T, p, data string) {
	t.Helper()
	mkdirAll(t, filepath.Dir(p))
	if err := os.WriteFile(p, []byte(data), 0o644); err != nil {
		t.Fatal(err)
	}
}

func mknodSocket(t *testing.T, p string) {
	t.Helper()
	mkdirAll(t, filepath.Dir(p))
	if err := syscall.Mknod(p, syscall.S_IFSOCK|0o600, 0); err != nil {
		t.Fatal(err)
	}
}

// run writes the proc tree and runs guard.sh with bash on the fake trees.
func (g *guardTree) run(t *testing.T, stage string, env ...string) (string, int) {
	t.Helper()
	g.writeProc(t)
	cmd := exec.Command("bash", "payload/guard.sh", "--root", g.root, "--proc", g.proc, stage)
	cmd.Env = append([]string{"PATH=/usr/local/bin:/usr/bin:/bin"}, env...)
	out, err := cmd.CombinedOutput()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return string(out), code
}

// writeProc writes the fake proc tree: mountinfo and net/dev.
func (g *guardTree) writeProc(t *testing.T) {
	t.Helper()
	var mi strings.Builder
	for i, m := range g.mounts {
		// id parent major:minor root mount-point options - fstype source super-options
		mi.WriteString(strings.Join([]string{strconv.Itoa(100 + i), "99", "0:42", "/", m, "rw,nosuid", "-", "tmpfs", "tmpfs", "rw"}, " ") + "\n")
	}
	writeFile(t, filepath.Join(g.proc, "self", "mountinfo"), mi.String())
	nd := "Inter-|   Receive                                                |  Transmit\n" +
		" face |bytes    packets errs drop fifo frame compressed multicast|bytes    packets errs drop fifo colls carrier compressed\n"
	for _, n := range g.netdev {
		nd += "    " + n + ":       0       0    0    0    0     0          0         0        0       0    0    0    0     0       0          0\n"
	}
	writeFile(t, filepath.Join(g.proc, "net", "dev"), nd)
}

func TestGuardClean(t *testing.T) {
	for _, stage := range Stages {
		g := newGuardTree(t, stage)
		out, code := g.run(t, stage)
		if code != 0 || strings.Contains(out, "isolation:") {
			t.Errorf("%s: clean container refused (exit %d):\n%s", stage, code, out)
		}
	}
}

// TestGuardRefuses: each forbidden thing alone is refused with exit 69 and
// named.
func TestGuardRefuses(t *testing.T) {
	for _, tc := range []struct {
		name, stage string
		plant       func(t *testing.T, g *guardTree)
		env         []string
		want        string
	}{
		{name: "munge bind", stage: Train, want: "mount point /run/munge ",
			plant: func(t *testing.T, g *guardTree) { g.mounts = append(g.mounts, "/run/munge") }},
		{name: "slurm config bind elsewhere", stage: Author, want: "mount point /opt/site/slurm ",
			plant: func(t *testing.T, g *guardTree) { g.mounts = append(g.mounts, "/opt/site/slurm") }},
		{name: "GPU library bind on author", stage: Author, want: "mount point /usr/lib64/libcuda.so.1 ",
			plant: func(t *testing.T, g *guardTree) {
				g.mounts = append(g.mounts, "/usr/lib64/libcuda.so.1")
				writeFile(t, filepath.Join(g.root, "usr/lib64/libcuda.so.1"), "")
			}},
		{name: "directory bound at a GPU library name", stage: Eval, want: "mount point /usr/lib64/libcuda.so.9 ",
			plant: func(t *testing.T, g *guardTree) {
				g.mounts = append(g.mounts, "/usr/lib64/libcuda.so.9")
				mkdirAll(t, filepath.Join(g.root, "usr/lib64/libcuda.so.9"))
			}},
		{name: "escaped mount point", stage: Eval, want: `mount point /tmp\040x `,
			plant: func(t *testing.T, g *guardTree) { g.mounts = append(g.mounts, `/tmp\040x`) }},
		{name: "socket file", stage: Eval, want: "unix socket /nemorl/out/deep/munge.socket.2",
			plant: func(t *testing.T, g *guardTree) {
				mknodSocket(t, filepath.Join(g.root, "nemorl/out/deep/munge.socket.2"))
			}},
		{name: "socket in a mount below /proc", stage: Train, want: "unix socket /proc/driver/x/munge.socket.2",
			plant: func(t *testing.T, g *guardTree) {
				g.mounts = append(g.mounts, "/proc/driver/x")
				mknodSocket(t, filepath.Join(g.root, "proc/driver/x/munge.socket.2"))
			}},
		{name: "socket in /dev", stage: Author, want: "unix socket /dev/log",
			plant: func(t *testing.T, g *guardTree) { mknodSocket(t, filepath.Join(g.root, "dev/log")) }},
		{name: "eth0", stage: Train, want: "network interface eth0",
			plant: func(t *testing.T, g *guardTree) { g.netdev = append(g.netdev, "eth0") }},
		{name: "SLURM_JWT", stage: Author, env: []string{"SLURM_JWT=eyJ"}, want: "environment variable SLURM_JWT is set"},
		{name: "SLURM_CONF", stage: Eval, env: []string{"SLURM_CONF=/x/slurm.conf"}, want: "environment variable SLURM_CONF is set"},
		{name: "SLURMRESTD", stage: Train, env: []string{"SLURMRESTD_URL=http://x"}, want: "environment variable SLURMRESTD_URL is set"},
		{name: "sbatch on PATH", stage: Train, env: []string{"PATH=/usr/bin:/bin:/opt/slurm/bin"}, want: "Slurm client /opt/slurm/bin/sbatch",
			plant: func(t *testing.T, g *guardTree) {
				writeFile(t, filepath.Join(g.root, "opt/slurm/bin/sbatch"), "#!/bin/sh\n")
			}},
		{name: "scontrol in a standard directory", stage: Author, want: "Slurm client /usr/bin/scontrol",
			plant: func(t *testing.T, g *guardTree) { writeFile(t, filepath.Join(g.root, "usr/bin/scontrol"), "") }},
		{name: "/etc/slurm", stage: Author, want: "/etc/slurm is present",
			plant: func(t *testing.T, g *guardTree) { mkdirAll(t, filepath.Join(g.root, "etc/slurm")) }},
		{name: "/var/run/munge", stage: Eval, want: "/var/run/munge is present",
			plant: func(t *testing.T, g *guardTree) { mkdirAll(t, filepath.Join(g.root, "var/run/munge")) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := newGuardTree(t, tc.stage)
			if tc.plant != nil {
				tc.plant(t, g)
			}
			out, code := g.run(t, tc.stage, tc.env...)
			if code != ExitIsolation || !strings.Contains(out, "nemorl: isolation: "+tc.want) {
				t.Fatalf("exit %d, want %d naming %q:\n%s", code, ExitIsolation, tc.want, out)
			}
			if n := strings.Count(out, "nemorl: isolation: "); n != 1 {
				t.Errorf("%d findings, want exactly this one:\n%s", n, out)
			}
		})
	}
}

// TestGuardAuthorNetwork: the author keeps the host network, so its
// interfaces are not a finding; train's are.
func TestGuardAuthorNetwork(t *testing.T) {
	g := newGuardTree(t, Author)
	g.netdev = append(g.netdev, "eth0")
	if out, code := g.run(t, Author); code != 0 {
		t.Fatalf("author with eth0: exit %d\n%s", code, out)
	}
}

// TestGuardUsage: a bad stage or option is refused (the script maps any
// non-zero status to ExitIsolation); the scanned roots come only from the
// command line.
func TestGuardUsage(t *testing.T) {
	for _, args := range [][]string{{}, {"nope"}, {"--root"}, {"--bogus", "x", "train"}, {"--root", "rel", "train"}, {"train", "eval"}} {
		cmd := exec.Command("bash", append([]string{"payload/guard.sh"}, args...)...)
		cmd.Env = []string{"PATH=/usr/bin:/bin"}
		if err := cmd.Run(); err == nil {
			t.Errorf("guard.sh %v: exit 0", args)
		}
	}
	src, err := os.ReadFile("payload/guard.sh")
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(src), "\n") {
		if strings.HasPrefix(strings.TrimSpace(l), "root=") || strings.HasPrefix(strings.TrimSpace(l), "proc=") {
			if strings.Contains(l, "$") && !strings.Contains(l, "=$2") {
				t.Errorf("guard.sh sets its roots from something other than its arguments: %s", l)
			}
		}
	}
}
