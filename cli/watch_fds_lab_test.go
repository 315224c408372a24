package cli

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestWatchManyEpisodesFewFiles: `watch` of 200 episodes holds no file per
// episode open (login nodes often allow 1,024): its descriptors stay below
// 64 while it owns all 200. The authors sleep, so the watch only polls.
func TestWatchManyEpisodesFewFiles(t *testing.T) {
	t.Parallel() // with the package's other shared-lab tests, after its LockLab ones
	x := newLabCLI(t)
	requireStandIns(t)
	data := strings.Replace(x.base, "command: ["+labStandIns+"/author]", "command: [/bin/sleep, \"900\"]", 1)
	cfg := filepath.Join(t.TempDir(), "lab-none.yaml")
	if err := os.WriteFile(cfg, []byte(data), 0o600); err != nil {
		t.Fatal(err)
	}
	state := t.TempDir()
	const n = 200
	r := x.run(t, state, 2*time.Minute, "--json", "--config", cfg, "submit", "--count", strconv.Itoa(n))
	var doc struct {
		Episodes []struct {
			Episode string `json:"episode"`
			Dir     string `json:"dir"`
		} `json:"episodes"`
	}
	err := json.Unmarshal(r.stdout, &doc)
	ids := make([]string, 0, n)
	for _, e := range doc.Episodes {
		ids = append(ids, e.Episode)
	}
	// Before any check: the authors sleep 15 minutes, and those of a
	// submit that failed in part would hold the lab's CPUs from every
	// test after this one (CI saw that cascade).
	t.Cleanup(func() {
		if len(ids) > 0 {
			x.run(t, state, 2*time.Minute, append([]string{"--config", cfg, "cancel"}, ids...)...)
		}
		for _, e := range doc.Episodes {
			_ = os.RemoveAll(e.Dir)
		}
	})
	r.want(t, 0)
	if err != nil || len(doc.Episodes) != n {
		t.Fatalf("submit --count %d: %v: %s", n, err, r)
	}

	w := x.start(t, state, 5*time.Minute, "--config", cfg, "watch")
	claims := filepath.Join(state, "nemorl-slurm", "locks", "*.owner")
	eventually(t, 2*time.Minute, 200*time.Millisecond, func() string {
		if w.exited() {
			t.Fatalf("watch exited: %s", w.res)
		}
		m, _ := filepath.Glob(claims)
		if len(m) < n {
			return strconv.Itoa(len(m)) + " episodes claimed by watch"
		}
		return ""
	})
	// Two polls with all of them held.
	time.Sleep(3 * time.Second)
	fds, err := os.ReadDir("/proc/" + strconv.Itoa(w.cmd.Process.Pid) + "/fd")
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("watch of %d episodes: %d open descriptors", n, len(fds))
	if len(fds) >= 64 {
		var names []string
		for _, f := range fds {
			l, _ := os.Readlink("/proc/" + strconv.Itoa(w.cmd.Process.Pid) + "/fd/" + f.Name())
			names = append(names, l)
		}
		t.Errorf("watch of %d episodes holds %d descriptors, want fewer than 64: %v", n, len(fds), names)
	}
	_ = w.cmd.Process.Signal(syscall.SIGINT)
	w.wait(t, time.Minute)
}
