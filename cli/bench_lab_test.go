package cli

// Benchmarks of issue #12, through the built binary, on the lab, on its
// loopback sshd and through its far endpoint (a 20 ms round trip), each
// against the plain OpenSSH recipe in the same run. Figures go to
// docs/BENCHMARKS.md.

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nemorl/nemorl-slurm/internal/labtest"
)

type benchEndpoint struct {
	name string
	port int
}

func benchEndpoints(b *testing.B) (labtest.Lab, []benchEndpoint) {
	lab := labtest.Env(b)
	labtest.UseLab(b)
	lab.WaitSSH(b, time.Minute)
	far := lab.Far(b)
	return lab, []benchEndpoint{{"loopback", lab.SSHPort}, {fmt.Sprintf("far-%dms", far.FarRTT.Milliseconds()), far.FarSSHPort}}
}

// benchConfig is configs/lab-none.yaml reaching the lab's sshd on port.
func benchConfig(b *testing.B, port int) string {
	data, err := os.ReadFile("../configs/lab-none.yaml")
	if err != nil {
		b.Fatal(err)
	}
	s := strings.Replace(string(data), "    port: 2222\n", "    port: "+strconv.Itoa(port)+"\n", 1)
	if !strings.Contains(s, "port: "+strconv.Itoa(port)) {
		b.Fatal("configs/lab-none.yaml: no login port 2222 to replace")
	}
	p := filepath.Join(b.TempDir(), "bench.yaml")
	if err := os.WriteFile(p, []byte(s), 0o600); err != nil {
		b.Fatal(err)
	}
	return p
}

// benchDirs are the episode directories the benchmarks made, removed at
// the end.
var benchDirs []string

func removeBenchDirs() {
	for _, d := range benchDirs {
		_ = os.RemoveAll(d)
	}
	benchDirs = nil
}

// benchRun runs the binary and decodes its JSON, remembering the episode
// directories it names.
func benchRun(b *testing.B, bin, state string, args ...string) map[string]any {
	cmd := exec.Command(bin, args...)
	cmd.Env = cliEnv(state)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		b.Fatalf("nemorl-slurm %s: %v\n%s", strings.Join(args, " "), err, stderr.String())
	}
	var doc map[string]any
	if err := json.Unmarshal(stdout.Bytes(), &doc); err != nil {
		b.Fatalf("nemorl-slurm %s: %v: %s", strings.Join(args, " "), err, stdout.String())
	}
	if d, ok := doc["dir"].(string); ok {
		benchDirs = append(benchDirs, d)
	}
	eps, _ := doc["episodes"].([]any)
	for _, e := range eps {
		if m, ok := e.(map[string]any); ok {
			if d, ok := m["dir"].(string); ok {
				benchDirs = append(benchDirs, d)
			}
		}
	}
	return doc
}

func openSSH(lab labtest.Lab, port int, remoteCmd string) *exec.Cmd {
	return exec.Command("ssh", "-i", lab.Key, "-o", "UserKnownHostsFile="+lab.KnownHosts, "-o", "StrictHostKeyChecking=yes",
		"-o", "BatchMode=yes", "-p", strconv.Itoa(port), lab.User+"@"+lab.SSHHost, remoteCmd)
}

// scancelAll cancels the lab user's jobs (make bench runs no tests: they
// are the benchmarks') and removes the episode directories made.
func scancelAll(b *testing.B, lab labtest.Lab) {
	_ = exec.Command("scancel", "-u", lab.User).Run()
	removeBenchDirs()
	time.Sleep(time.Second)
}

// BenchmarkSubmit: one `nemorl-slurm submit` (process start, config, SSH
// login with host keys checked, staging, sbatch) against the OpenSSH floor:
// one `ssh host 'mkdir … && tar -x … && sbatch …'` with the same episode
// tree as a tar on stdin.
func BenchmarkSubmit(b *testing.B) {
	lab, eps := benchEndpoints(b)
	bin := buildBinary(b)
	defer scancelAll(b, lab)
	// The tree to send by plain ssh: a staged episode's, as a tar.
	state := b.TempDir()
	doc := benchRun(b, bin, state, "--json", "--config", benchConfig(b, lab.SSHPort), "submit")
	dir, _ := doc["dir"].(string)
	tarball, err := exec.Command("tar", "-C", dir, "--exclude=author/secrets.env", "-c", ".").Output()
	if err != nil {
		b.Fatalf("tar %s: %v", dir, err)
	}
	for _, ep := range eps {
		cfg := benchConfig(b, ep.port)
		b.Run(ep.name+"/submit", func(b *testing.B) {
			for b.Loop() {
				benchRun(b, bin, state, "--json", "--config", cfg, "submit")
			}
			b.ReportMetric(float64(b.Elapsed().Milliseconds())/float64(b.N), "ms/submit")
		})
		b.Run(ep.name+"/openssh-floor", func(b *testing.B) {
			i := 0
			for b.Loop() {
				i++
				d := fmt.Sprintf("%s/bench-floor-%d-%d", lab.Workdir, time.Now().UnixNano(), i)
				cmd := openSSH(lab, ep.port, "mkdir -p "+d+" && tar -x -C "+d+" && sbatch --parsable "+d+"/author/author.sbatch")
				cmd.Stdin = bytes.NewReader(tarball)
				if out, err := cmd.CombinedOutput(); err != nil {
					b.Fatalf("ssh: %v: %s", err, out)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Milliseconds())/float64(b.N), "ms/submit")
		})
		scancelAll(b, lab)
	}
	_ = exec.Command("sh", "-c", "rm -rf "+lab.Workdir+"/bench-floor-*").Run()
}

// BenchmarkSubmitCount: `submit --count 100` (one connection) against 100
// separate `submit` runs, and against the floor of any tool: one ssh
// session that only runs sbatch 100 times on an already staged script.
func BenchmarkSubmitCount(b *testing.B) {
	lab, eps := benchEndpoints(b)
	bin := buildBinary(b)
	defer scancelAll(b, lab)
	const n = 100
	staged := benchRun(b, bin, b.TempDir(), "--json", "--config", benchConfig(b, lab.SSHPort), "submit")
	benchDirs = nil // kept until the end: its script is the floor's
	defer os.RemoveAll(staged["dir"].(string))
	script := staged["dir"].(string) + "/author/author.sbatch"
	for _, ep := range eps {
		b.Run(ep.name+"/sbatch-only-floor", func(b *testing.B) { sbatchFloor(b, lab, ep.port, n, script, "") })
		scancelAll(b, lab)
		cfg := benchConfig(b, ep.port)
		b.Run(ep.name+"/count-100", func(b *testing.B) {
			for b.Loop() {
				doc := benchRun(b, bin, b.TempDir(), "--json", "--config", cfg, "submit", "--count", strconv.Itoa(n))
				if eps, _ := doc["episodes"].([]any); len(eps) != n {
					b.Fatalf("submitted %d of %d: %v", len(eps), n, doc["failed"])
				}
			}
			b.ReportMetric(float64(n)*float64(b.N)/b.Elapsed().Seconds(), "episodes/s")
		})
		scancelAll(b, lab)
		b.Run(ep.name+"/100-separate", func(b *testing.B) {
			for b.Loop() {
				state := b.TempDir()
				for range n {
					benchRun(b, bin, state, "--json", "--config", cfg, "submit")
				}
			}
			b.ReportMetric(float64(n)*float64(b.N)/b.Elapsed().Seconds(), "episodes/s")
		})
		scancelAll(b, lab)
	}
}

// sbatchFloor is the floor of any tool: one ssh session that only runs
// sbatch n times on an already staged script (with extra sbatch options),
// reported as episodes/s.
func sbatchFloor(b *testing.B, lab labtest.Lab, port, n int, script, extra string) {
	for b.Loop() {
		cmd := openSSH(lab, port, fmt.Sprintf("i=0; while [ $i -lt %d ]; do sbatch --parsable %s --job-name=bench --comment=bench %s >/dev/null || exit 1; i=$((i+1)); done", n, extra, script))
		if out, err := cmd.CombinedOutput(); err != nil {
			b.Fatalf("ssh: %v: %s", err, out)
		}
	}
	b.ReportMetric(float64(n)*float64(b.N)/b.Elapsed().Seconds(), "episodes/s")
}
