package remote_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nemorl/nemorl-slurm/remote"
	"github.com/nemorl/nemorl-slurm/remote/remotetest"
)

func TestLocal(t *testing.T) {
	remotetest.Run(t, func(t *testing.T) (remote.Host, string) {
		h := remote.NewLocal()
		t.Cleanup(func() { _ = h.Close() })
		return h, t.TempDir()
	})
}

// TestLocalCancelKillsGroup: cancelling kills the children the command
// started too, not just the command.
func TestLocalCancelKillsGroup(t *testing.T) {
	h := remote.NewLocal()
	pidFile := filepath.Join(t.TempDir(), "pid")
	ctx, cancel := context.WithCancel(t.Context())
	errc := make(chan error, 1)
	go func() {
		_, err := h.Run(ctx, remote.Command{Argv: []string{"sh", "-c", `sleep 1000 & echo $! > "$1"; wait`, "sh", pidFile}})
		errc <- err
	}()
	var pid int
	for deadline := time.Now().Add(5 * time.Second); ; {
		b, _ := os.ReadFile(pidFile)
		if n, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil {
			pid = n
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("no pid file")
		}
		time.Sleep(10 * time.Millisecond)
	}
	cancel()
	if err := <-errc; !errors.Is(err, context.Canceled) {
		t.Errorf("err = %v", err)
	}
	for deadline := time.Now().Add(5 * time.Second); syscall.Kill(pid, 0) == nil; {
		if time.Now().After(deadline) {
			t.Fatalf("grandchild %d survived the cancel", pid)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
