package templates

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/nemorl/nemorl-slurm/stages"
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
func bindTargets(t *testing.T, stage stages.Stage) []string {
	t.Helper()
	f, _ := render(t, loadExample(t, "cluster-example.yaml")).Lookup(stages.Script(stage))
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

func newGuardTree(t *testing.T, stage stages.Stage) *guardTree {
	t.Helper()
	dir := t.TempDir()
	g := &guardTree{root: filepath.Join(dir, "root"), proc: filepath.Join(dir, "proc"), netdev: []string{"lo"}}
	g.mounts = []string{"/", "/proc", "/sys", "/dev", "/dev/pts", "/dev/shm", "/dev/mqueue", "/dev/null", "/dev/zero", "/dev/random",
		"/dev/urandom", "/dev/tty", "/tmp", "/var/tmp", "/etc/hosts", "/etc/passwd", "/etc/group", "/etc/resolv.conf", "/etc/localtime", "/etc/hostname"}
	for _, d := range []string{"usr/bin", "bin", "etc", "dev/pts", "dev/shm", "dev/mqueue", "tmp", "var/tmp", "run", "proc", "sys"} {
		mkdirAll(t, filepath.Join(g.root, d))
	}
	for _, f := range []string{"hosts", "passwd", "group", "resolv.conf", "localtime", "hostname"} {
		writeFile(t, filepath.Join(g.root, "etc", f), "")
	}
	for _, d := range []string{"null", "zero", "random", "urandom", "tty"} {
		mknodChar(t, filepath.Join(g.root, "dev", d))
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
	if stage != stages.Author {
		g.nv(t)
	}
	// A socket under /proc or /sys is not reachable as a file: pruned.
	mknodSocket(t, filepath.Join(g.root, "proc", "pruned.sock"))
	return g
}

// nvBinaries and nvFiles are what Apptainer 1.5.3's etc/nvliblist.conf
// names: the binaries (bound at /usr/bin/<name>) and the absolute paths
// (bound at their own path).
var (
	nvBinaries = []string{"nvidia-smi", "nvidia-debugdump", "nvidia-persistenced", "nvidia-cuda-mps-control", "nvidia-cuda-mps-server"}
	nvFiles    = []string{"/usr/share/glvnd/egl_vendor.d/10_nvidia.json", "/usr/share/vulkan/icd.d/nvidia_icd.json",
		"/usr/share/vulkan/icd.d/nvidia_layers.json", "/usr/share/vulkan/implicit_layer.d/nvidia_layers.json",
		"/usr/share/egl/egl_external_platform.d/15_nvidia_gbm.json", "/usr/share/egl/egl_external_platform.d/10_nvidia_wayland.json",
		"/usr/share/nvidia/nvoptix.bin"}
)

// nv adds what Apptainer's --nv binds on a GPU node (the real H200 host's
// list, issue #20): the devices, the binaries, the nvliblist.conf files at
// their paths, the libraries in /.singularity.d/libs, and the
// nvidia-container-cli forms (a library in the system directory, firmware).
func (g *guardTree) nv(t *testing.T) {
	for _, d := range []string{"/dev/nvidia0", "/dev/nvidia1", "/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools", "/dev/nvidia-modeset", "/dev/nvidia-caps/nvidia-cap1"} {
		g.mounts = append(g.mounts, d)
		mknodChar(t, filepath.Join(g.root, d))
	}
	g.mounts = append(g.mounts, "/dev/nvidia-caps", "/.singularity.d/libs")
	mkdirAll(t, filepath.Join(g.root, ".singularity.d/libs"))
	for _, b := range nvBinaries {
		g.mounts = append(g.mounts, "/usr/bin/"+b)
		writeFile(t, filepath.Join(g.root, "usr/bin", b), "")
	}
	for _, f := range append(append([]string{}, nvFiles...), "/.singularity.d/libs/libcuda.so.1", "/.singularity.d/libs/libnvidia-ml.so.1",
		"/.singularity.d/libs/libEGL_nvidia.so.0", "/usr/lib64/libcuda.so.1", "/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.580.159.04",
		"/lib/firmware/nvidia/580.159.04/gsp_ga10x.bin") {
		g.mounts = append(g.mounts, f)
		writeFile(t, filepath.Join(g.root, f), "")
	}
}

func mknodChar(t *testing.T, p string) {
	t.Helper()
	mkdirAll(t, filepath.Dir(p))
	if err := syscall.Mknod(p, syscall.S_IFCHR|0o666, int(unix1_3)); err != nil {
		t.Fatal(err)
	}
}

// unix1_3 is the device number of /dev/null (1, 3).
const unix1_3 = 1<<8 | 3

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
func (g *guardTree) run(t *testing.T, stage stages.Stage, env ...string) (string, int) {
	t.Helper()
	g.writeProc(t)
	cmd := exec.Command("bash", "payload/guard.sh", "--root", g.root, "--proc", g.proc, string(stage))
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
	for _, stage := range stages.All {
		g := newGuardTree(t, stage)
		out, code := g.run(t, stage)
		if code != 0 || strings.Contains(out, "isolation:") {
			t.Errorf("%s: clean container refused (exit %d):\n%s", stage, code, out)
		}
	}
	// A GPU node running nvidia-persistenced: --nv binds its socket too, at
	// its path (seen through /var/run or /run).
	for _, stage := range []stages.Stage{stages.Train, stages.Eval} {
		for _, p := range []string{"/var/run/nvidia-persistenced/socket", "/run/nvidia-persistenced/socket"} {
			g := newGuardTree(t, stage)
			g.mounts = append(g.mounts, p)
			mknodSocket(t, filepath.Join(g.root, p))
			if out, code := g.run(t, stage); code != 0 {
				t.Errorf("%s with %s: exit %d\n%s", stage, p, code, out)
			}
		}
	}
}

// TestGuardRefuses: each forbidden thing alone is refused with exit 69 and
// named.
func TestGuardRefuses(t *testing.T) {
	for _, tc := range []struct {
		name  string
		stage stages.Stage
		plant func(t *testing.T, g *guardTree)
		env   []string
		want  string
	}{
		{name: "munge bind", stage: stages.Train, want: "mount point /run/munge ",
			plant: func(t *testing.T, g *guardTree) { g.mounts = append(g.mounts, "/run/munge") }},
		{name: "slurm config bind elsewhere", stage: stages.Author, want: "mount point /opt/site/slurm ",
			plant: func(t *testing.T, g *guardTree) { g.mounts = append(g.mounts, "/opt/site/slurm") }},
		{name: "GPU library bind on author", stage: stages.Author, want: "mount point /usr/lib64/libcuda.so.1 ",
			plant: func(t *testing.T, g *guardTree) {
				g.mounts = append(g.mounts, "/usr/lib64/libcuda.so.1")
				writeFile(t, filepath.Join(g.root, "usr/lib64/libcuda.so.1"), "")
			}},
		{name: "directory bound at a GPU library name", stage: stages.Eval, want: "mount point /usr/lib64/libcuda.so.9 ",
			plant: func(t *testing.T, g *guardTree) {
				g.mounts = append(g.mounts, "/usr/lib64/libcuda.so.9")
				mkdirAll(t, filepath.Join(g.root, "usr/lib64/libcuda.so.9"))
			}},
		{name: "escaped mount point", stage: stages.Eval, want: `mount point /tmp\040x `,
			plant: func(t *testing.T, g *guardTree) { g.mounts = append(g.mounts, `/tmp\040x`) }},
		{name: "socket file", stage: stages.Eval, want: "unix socket /nemorl/out/deep/munge.socket.2",
			plant: func(t *testing.T, g *guardTree) {
				mknodSocket(t, filepath.Join(g.root, "nemorl/out/deep/munge.socket.2"))
			}},
		{name: "socket in a mount below /proc", stage: stages.Train, want: "unix socket /proc/driver/x/munge.socket.2",
			plant: func(t *testing.T, g *guardTree) {
				g.mounts = append(g.mounts, "/proc/driver/x")
				mknodSocket(t, filepath.Join(g.root, "proc/driver/x/munge.socket.2"))
			}},
		{name: "socket in /dev", stage: stages.Author, want: "unix socket /dev/log (a way to a daemon",
			plant: func(t *testing.T, g *guardTree) { mknodSocket(t, filepath.Join(g.root, "dev/log")) }},
		{name: "munge bound onto a placeholder file in /.singularity.d", stage: stages.Author, want: "mount point /.singularity.d/munge.socket.2 is not allowed in the author container: a unix socket mounted onto a file",
			plant: func(t *testing.T, g *guardTree) {
				g.mounts = append(g.mounts, "/.singularity.d/munge.socket.2")
				mknodSocket(t, filepath.Join(g.root, ".singularity.d/munge.socket.2"))
			}},
		{name: "a socket bound at a GPU library's name", stage: stages.Train, want: "mount point /.singularity.d/libs/libcuda.so.2 is not allowed in the train container: a unix socket",
			plant: func(t *testing.T, g *guardTree) {
				g.mounts = append(g.mounts, "/.singularity.d/libs/libcuda.so.2")
				mknodSocket(t, filepath.Join(g.root, ".singularity.d/libs/libcuda.so.2"))
			}},
		{name: "a socket bound at an allowed file", stage: stages.Eval, want: "mount point /etc/hosts is not allowed in the eval container: a unix socket",
			plant: func(t *testing.T, g *guardTree) {
				_ = os.Remove(filepath.Join(g.root, "etc/hosts"))
				mknodSocket(t, filepath.Join(g.root, "etc/hosts"))
			}},
		{name: "persistenced socket on the author", stage: stages.Author, want: "mount point /var/run/nvidia-persistenced/socket is not allowed in the author container: a unix socket",
			plant: func(t *testing.T, g *guardTree) {
				g.mounts = append(g.mounts, "/var/run/nvidia-persistenced/socket")
				mknodSocket(t, filepath.Join(g.root, "var/run/nvidia-persistenced/socket"))
			}},
		{name: "a socket beside persistenced's", stage: stages.Train, want: "mount point /var/run/nvidia-persistenced/other is not allowed",
			plant: func(t *testing.T, g *guardTree) {
				g.mounts = append(g.mounts, "/var/run/nvidia-persistenced/other")
				mknodSocket(t, filepath.Join(g.root, "var/run/nvidia-persistenced/other"))
			}},
		{name: "nvliblist file on the author (always use nv)", stage: stages.Author, want: "mount point /usr/share/vulkan/icd.d/nvidia_icd.json is not allowed in the author container: a GPU path in the author container, which gets no GPU; cause: --nv",
			plant: func(t *testing.T, g *guardTree) {
				g.mounts = append(g.mounts, "/usr/share/vulkan/icd.d/nvidia_icd.json")
				writeFile(t, filepath.Join(g.root, "usr/share/vulkan/icd.d/nvidia_icd.json"), "{}")
			}},
		{name: "a host file system (mount hostfs)", stage: stages.Train, want: `mount point /scratch is not allowed in the train container: not a path Apptainer, --nv or the train stage's binds mount; cause: a site bind (apptainer.conf "bind path", APPTAINER_BIND, a wrapper's --bind) or apptainer.conf "mount hostfs = yes"`,
			plant: func(t *testing.T, g *guardTree) {
				g.mounts = append(g.mounts, "/scratch")
				mkdirAll(t, filepath.Join(g.root, "scratch"))
			}},
		{name: "another device", stage: stages.Eval, want: "mount point /dev/sda is not allowed",
			plant: func(t *testing.T, g *guardTree) {
				g.mounts = append(g.mounts, "/dev/sda")
				mknodChar(t, filepath.Join(g.root, "dev/sda"))
			}},
		{name: "a GPU device that is a directory", stage: stages.Train, want: "mount point /dev/nvidia9 is not allowed",
			plant: func(t *testing.T, g *guardTree) {
				g.mounts = append(g.mounts, "/dev/nvidia9")
				mkdirAll(t, filepath.Join(g.root, "dev/nvidia9"))
			}},
		{name: "a directory under the libraries", stage: stages.Eval, want: "mount point /.singularity.d/libs/sub/libx.so is not allowed",
			plant: func(t *testing.T, g *guardTree) {
				g.mounts = append(g.mounts, "/.singularity.d/libs/sub/libx.so")
				writeFile(t, filepath.Join(g.root, ".singularity.d/libs/sub/libx.so"), "")
			}},
		{name: "another binary at /usr/bin", stage: stages.Train, want: "mount point /usr/bin/nvidia-shell is not allowed",
			plant: func(t *testing.T, g *guardTree) {
				g.mounts = append(g.mounts, "/usr/bin/nvidia-shell")
				writeFile(t, filepath.Join(g.root, "usr/bin/nvidia-shell"), "")
			}},
		{name: "eth0", stage: stages.Train, want: "network interface eth0",
			plant: func(t *testing.T, g *guardTree) { g.netdev = append(g.netdev, "eth0") }},
		{name: "SLURM_JWT", stage: stages.Author, env: []string{"SLURM_JWT=eyJ"}, want: "environment variable SLURM_JWT is set"},
		{name: "SLURM_CONF", stage: stages.Eval, env: []string{"SLURM_CONF=/x/slurm.conf"}, want: "environment variable SLURM_CONF is set"},
		{name: "SLURMRESTD", stage: stages.Train, env: []string{"SLURMRESTD_URL=http://x"}, want: "environment variable SLURMRESTD_URL is set"},
		{name: "sbatch on PATH", stage: stages.Train, env: []string{"PATH=/usr/bin:/bin:/opt/slurm/bin"}, want: "Slurm client /opt/slurm/bin/sbatch",
			plant: func(t *testing.T, g *guardTree) {
				writeFile(t, filepath.Join(g.root, "opt/slurm/bin/sbatch"), "#!/bin/sh\n")
			}},
		{name: "scontrol in a standard directory", stage: stages.Author, want: "Slurm client /usr/bin/scontrol",
			plant: func(t *testing.T, g *guardTree) { writeFile(t, filepath.Join(g.root, "usr/bin/scontrol"), "") }},
		{name: "/etc/slurm", stage: stages.Author, want: "/etc/slurm is present",
			plant: func(t *testing.T, g *guardTree) { mkdirAll(t, filepath.Join(g.root, "etc/slurm")) }},
		{name: "/var/run/munge", stage: stages.Eval, want: "/var/run/munge is present",
			plant: func(t *testing.T, g *guardTree) { mkdirAll(t, filepath.Join(g.root, "var/run/munge")) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := newGuardTree(t, tc.stage)
			if tc.plant != nil {
				tc.plant(t, g)
			}
			out, code := g.run(t, tc.stage, tc.env...)
			if code != stages.ExitIsolation || !strings.Contains(out, "nemorl: isolation: "+tc.want) {
				t.Fatalf("exit %d, want %d naming %q:\n%s", code, stages.ExitIsolation, tc.want, out)
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
	g := newGuardTree(t, stages.Author)
	g.netdev = append(g.netdev, "eth0")
	if out, code := g.run(t, stages.Author); code != 0 {
		t.Fatalf("author with eth0: exit %d\n%s", code, out)
	}
}

// TestGuardUsage: a bad stage or option is refused (the script maps any
// non-zero status to stages.ExitIsolation); the scanned roots come only from the
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
