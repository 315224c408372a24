package remote_test

// Lab tests through the far endpoint: the lab sshd reached through
// lab/delayproxy, which adds FarRTT (20 ms) to every round trip. Skipped
// without the lab, or with a lab.env from before the far endpoint, unless
// NEMORL_REQUIRE_LAB=1.

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nemorl/nemorl-slurm/internal/labtest"
	"github.com/nemorl/nemorl-slurm/remote"
)

// fastest runs f n times and returns its shortest wall time.
func fastest(t *testing.T, n int, f func()) time.Duration {
	t.Helper()
	best := time.Duration(1<<63 - 1)
	for range n {
		t0 := time.Now()
		f()
		best = min(best, time.Since(t0))
	}
	return best
}

func TestFarLab(t *testing.T) {
	near := labtest.Env(t)
	far := near.Far(t)
	rtt := far.FarRTT
	if rtt <= 0 {
		t.Fatalf("%s: NEMORL_LAB_FAR_RTT_MS=%v, want a positive round trip", far.File, rtt)
	}
	labtest.UseLab(t)
	nearOpts, farOpts := labOptions(t, near), labOptions(t, far) // host keys checked (lab known_hosts)
	if farOpts.Port != far.FarSSHPort || farOpts.KnownHostsFile != near.KnownHosts {
		t.Fatalf("far options %+v", farOpts)
	}

	login := func(opts remote.Options) func() {
		return func() {
			h, err := remote.Dial(t.Context(), opts)
			if err != nil {
				t.Fatalf("Dial %s:%d: %v", opts.Host, opts.Port, err)
			}
			_ = h.Close()
		}
	}
	// Interleaved, so a busy machine slows both alike.
	var nearLogin, farLogin time.Duration
	for i := range 4 {
		n, f := fastest(t, 1, login(nearOpts)), fastest(t, 1, login(farOpts))
		if i == 0 || n < nearLogin {
			nearLogin = n
		}
		if i == 0 || f < farLogin {
			farLogin = f
		}
	}

	run := func(h *remote.SSH) func() {
		return func() {
			res, err := h.Run(t.Context(), remote.Command{Argv: []string{"true"}, Idempotent: true})
			if err != nil || res.ExitStatus != 0 {
				t.Fatalf("%s: true: %+v, %v", h.Name(), res, err)
			}
		}
	}
	nh, fh := dialLab(t, nearOpts), dialLab(t, farOpts)
	if want := fmt.Sprintf("%s@%s:%d", far.User, far.SSHHost, far.FarSSHPort); fh.Name() != want {
		t.Errorf("Name() = %q, want %q", fh.Name(), want)
	}
	nearCmd := fastest(t, 5, run(nh))
	farCmd := fastest(t, 5, run(fh))

	t.Logf("round trip added by the far endpoint: %v", rtt)
	t.Logf("ssh login (fastest of 4): loopback %v, far %v", nearLogin, farLogin)
	t.Logf("one command `true` on an open connection (fastest of 5): loopback %v, far %v", nearCmd, farCmd)

	// A command costs a round trip to open its channel and one for exec
	// (the exit status and channel close come back with the last).
	if farCmd < 2*rtt {
		t.Errorf("one command through the far port took %v, want ≥ 2×%v", farCmd, rtt)
	}
	// A login is several round trips (version and KEXINIT, key exchange,
	// NEWKEYS and service request, public key authentication, …).
	if farLogin < nearLogin+3*rtt {
		t.Errorf("ssh login through the far port took %v, loopback %v: want ≥ 3×%v more", farLogin, nearLogin, rtt)
	}
}

// TestFarLabHostKey: the far port's host key is checked against the lab's
// known_hosts under its own [host]:port name; an entry for the loopback
// port alone does not vouch for it.
func TestFarLabHostKey(t *testing.T) {
	far := labtest.Env(t).Far(t)
	labtest.UseLab(t)
	b, err := os.ReadFile(far.KnownHosts)
	if err != nil {
		t.Fatal(err)
	}
	farName := fmt.Sprintf("[%s]:%d ", far.SSHHost, far.FarSSHPort)
	var nearOnly []string
	found := false
	for _, line := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(line, farName) {
			found = true
			continue
		}
		nearOnly = append(nearOnly, line)
	}
	if !found {
		t.Fatalf("%s has no %sentry; run lab/up", far.KnownHosts, farName)
	}
	kh := filepath.Join(t.TempDir(), "known_hosts")
	if err := os.WriteFile(kh, []byte(strings.Join(nearOnly, "\n")), 0o600); err != nil {
		t.Fatal(err)
	}
	opts := labOptions(t, far)
	opts.KnownHostsFile = kh
	_, err = remote.Dial(t.Context(), opts)
	var hk *remote.HostKeyError
	if !errors.As(err, &hk) || !hk.Unknown || hk.Port != far.FarSSHPort {
		t.Fatalf("Dial with no entry for the far port = %v, want an unknown-host *HostKeyError", err)
	}

	// The plain OpenSSH client, as the README shows it, strict.
	if _, err := exec.LookPath("ssh"); err != nil {
		t.Skip("no ssh client")
	}
	out, err := exec.CommandContext(t.Context(), "ssh", "-n", "-i", far.Key, "-p", strconv.Itoa(far.FarSSHPort),
		"-o", "BatchMode=yes", "-o", "IdentitiesOnly=yes", "-o", "StrictHostKeyChecking=yes",
		"-o", "UserKnownHostsFile="+far.KnownHosts, "-o", "GlobalKnownHostsFile=/dev/null",
		"-F", "none", far.User+"@"+far.SSHHost, "echo", "far-ok").CombinedOutput()
	if err != nil || strings.TrimSpace(string(out)) != "far-ok" {
		t.Errorf("ssh -p %d: %v\n%s", far.FarSSHPort, err, out)
	}
}
