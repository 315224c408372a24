package slurm

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"weak"

	"github.com/nemorl/nemorl-slurm/remote"
)

// The captures: scontrol show config of the lab's cluster 1 (Debian's
// 22.05.8) and cluster 3 (24.11.5, rl_enable), as root (capture_config.sh).
var configCaptures = []struct {
	path, cluster string
	rateLimited   bool
}{
	{filepath.Join("testdata", "lab", "scontrol_show_config.txt"), "nemorl-lab", false},
	{filepath.Join("testdata", "lab-24.11", "scontrol_show_config.txt"), "nemorl-lab3", true},
}

func TestParseConfigCaptures(t *testing.T) {
	for _, c := range configCaptures {
		t.Run(filepath.Base(filepath.Dir(c.path)), func(t *testing.T) {
			b, err := os.ReadFile(c.path)
			if err != nil {
				t.Fatal(err)
			}
			cfg, err := ParseConfig(b)
			if err != nil {
				t.Fatal(err)
			}
			// The lab's slurm.conf (lab/up, lab/cluster3): KillWait=5,
			// MaxArraySize=10001.
			if cfg.KillWait != 5*time.Second || cfg.MaxArraySize != 10001 {
				t.Errorf("KillWait %v, MaxArraySize %d; want 5s, 10001", cfg.KillWait, cfg.MaxArraySize)
			}
			if got := cfg.Values["ClusterName"]; got != c.cluster {
				t.Errorf("ClusterName %q, want %q", got, c.cluster)
			}
			if got := cfg.Values["KillWait"]; got != "5 sec" {
				t.Errorf("Values[KillWait] %q", got)
			}
			if rl := strings.Contains(cfg.Values["SlurmctldParameters"], "rl_enable"); rl != c.rateLimited {
				t.Errorf("SlurmctldParameters %q: rl_enable %v, want %v", cfg.Values["SlurmctldParameters"], rl, c.rateLimited)
			}
			// Keys longer than the 23-column pad, and values with " = "'s
			// own characters in them, read whole.
			if got := cfg.Values["AccountingStorageExternalHost"]; got != "(null)" {
				t.Errorf("AccountingStorageExternalHost %q", got)
			}
			// The controllers' ping after the blank line is not a key.
			for k := range cfg.Values {
				if strings.Contains(k, "Slurmctld(") {
					t.Errorf("key %q from after the main section", k)
				}
			}
			if len(cfg.Values) < 150 {
				t.Errorf("%d keys read", len(cfg.Values))
			}
		})
	}
}

// configText is scontrol show config's output as slurm_print_key_pairs
// writes it, with lines (Key, value) and then extra, after a blank line.
func configText(pairs [][2]string, extra string) string {
	var b strings.Builder
	b.WriteString("Configuration data as of 2026-12-07T00:54:41\n")
	for _, p := range pairs {
		fmt.Fprintf(&b, "%-23s = %s\n", p[0], p[1])
	}
	b.WriteString("\n" + extra)
	return b.String()
}

func TestParseConfigSections(t *testing.T) {
	out := configText([][2]string{
		{"AccountingStorageEnforce", "none"},
		{"KillWait", "65535 sec"},
		{"MaxArraySize", "0"},
		{"SchedulerParameters", "a=b,c = d"},
		{"Empty", ""},
	}, "Cgroup Support Configuration:\nKillWait                = 7 sec\n\nMPI Plugins Configuration:\nMaxArraySize            = 3\n\nSlurmctld(primary) at vm is UP\n")
	cfg, err := ParseConfig([]byte(out))
	if err != nil {
		t.Fatal(err)
	}
	if cfg.KillWait != 65535*time.Second || cfg.MaxArraySize != 0 {
		t.Errorf("%v %d: the plugins' sections were read", cfg.KillWait, cfg.MaxArraySize)
	}
	if got := cfg.Values["SchedulerParameters"]; got != "a=b,c = d" {
		t.Errorf("SchedulerParameters %q", got)
	}
	if got, ok := cfg.Values["Empty"]; !ok || got != "" {
		t.Errorf("Empty %q %v", got, ok)
	}
	// Without its final blank line and ping (output cut), with CRLF, and
	// with lines that are not "Key = value" among the keys: read.
	out = "Configuration data as of x\r\nKillWait                = 0 sec\r\nnot a pair\r\nMaxArraySize = 1001\r\n"
	if cfg, err := ParseConfig([]byte(out)); err != nil || cfg.KillWait != 0 || cfg.MaxArraySize != 1001 {
		t.Errorf("%+v %v", cfg, err)
	}
}

func TestParseConfigRejects(t *testing.T) {
	good := [][2]string{{"KillWait", "30 sec"}, {"MaxArraySize", "1001"}}
	for _, c := range []struct {
		name, out, want string
	}{
		{"empty", "", "no \"Configuration data as of\" line"},
		{"an error", "slurm_load_ctl_conf error: Unable to contact slurm controller (connect failure)\n", "not scontrol show config's output"},
		{"no KillWait", configText(good[1:], ""), "no KillWait line"},
		{"no MaxArraySize", configText(good[:1], ""), "no MaxArraySize line"},
		{"KillWait only in a plugin's section", configText(good[1:], "X Configuration:\nKillWait                = 5 sec\n"), "no KillWait line"},
		{"KillWait twice", configText(append(good, [2]string{"KillWait", "5 sec"}), ""), "line 4: KillWait again (first on line 2)"},
		{"KillWait without sec", configText([][2]string{{"KillWait", "30"}, good[1]}, ""), "line 2: KillWait \"30\": want N sec"},
		{"KillWait negative", configText([][2]string{{"KillWait", "-1 sec"}, good[1]}, ""), "want N sec"},
		{"KillWait over uint16", configText([][2]string{{"KillWait", "65536 sec"}, good[1]}, ""), "N below 65536"},
		{"KillWait in minutes", configText([][2]string{{"KillWait", "1 min"}, good[1]}, ""), "want N sec"},
		{"MaxArraySize not a number", configText([][2]string{good[0], {"MaxArraySize", "(null)"}}, ""), "MaxArraySize \"(null)\": want a whole number"},
		{"MaxArraySize over uint32", configText([][2]string{good[0], {"MaxArraySize", "4294967296"}}, ""), "below 2^32"},
		{"a line too long", configText(good, "") + strings.Repeat("x", 2<<20), ""}, // after the main section: not read
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := ParseConfig([]byte(c.out))
			if c.want == "" {
				if err != nil {
					t.Errorf("error %v", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("error %v, want one saying %q", err, c.want)
			}
		})
	}
	// A line too long inside the main section is an error, not a panic.
	long := "Configuration data as of x\nKillWait = " + strings.Repeat("9", 2<<20) + "\n"
	if _, err := ParseConfig([]byte(long)); err == nil {
		t.Error("a 2 MiB line accepted")
	}
}

// configRunner answers scontrol show config with out (exit 0) or fails,
// counting the commands; gate, when set, holds each command until it is
// closed or the command's ctx ends.
type configRunner struct {
	calls atomic.Int32
	mu    sync.Mutex
	out   string
	fail  bool
	gate  chan struct{}
	argv  []string
	exit  int // with out: its exit status (scontrol's 1 after a failed ping)
}

func (r *configRunner) Run(ctx context.Context, cmd remote.Command) (*remote.Result, error) {
	r.calls.Add(1)
	r.mu.Lock()
	out, fail, gate := r.out, r.fail, r.gate
	r.argv = cmd.Argv
	r.mu.Unlock()
	if gate != nil {
		select {
		case <-gate:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	if fail {
		res := &remote.Result{Stderr: []byte("slurm_load_ctl_conf error: Unable to contact slurm controller (connect failure)\n"), ExitStatus: 1}
		return res, &remote.CommandError{Host: "fake", Command: cmd.String(), ExitStatus: 1}
	}
	res := &remote.Result{Stdout: []byte(out), ExitStatus: r.exit}
	if r.exit != 0 {
		return res, &remote.CommandError{Host: "fake", Command: cmd.String(), ExitStatus: r.exit}
	}
	return res, nil
}

func (r *configRunner) set(out string, fail bool) {
	r.mu.Lock()
	r.out, r.fail = out, fail
	r.mu.Unlock()
}

func captured(t *testing.T, i int) string {
	t.Helper()
	b, err := os.ReadFile(configCaptures[i].path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestClientConfigOnce: concurrent callers share one scontrol show config;
// later ones get the kept answer without a command.
func TestClientConfigOnce(t *testing.T) {
	r := &configRunner{out: captured(t, 1), gate: make(chan struct{})}
	c := New(r)
	var wg sync.WaitGroup
	errs := make(chan error, 32)
	for range 32 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			cfg, err := c.Config(context.Background())
			if err == nil && (cfg.KillWait != 5*time.Second || cfg.MaxArraySize != 10001) {
				err = fmt.Errorf("got %v %d", cfg.KillWait, cfg.MaxArraySize)
			}
			errs <- err
		}()
	}
	for r.calls.Load() == 0 {
		time.Sleep(time.Millisecond)
	}
	time.Sleep(20 * time.Millisecond) // the others arrive while it runs
	close(r.gate)
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	for range 3 {
		cfg, err := c.Config(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		// Each caller's Values is its own.
		if cfg.Values["KillWait"] != "5 sec" {
			t.Fatalf("Values[KillWait] %q: changed by another caller", cfg.Values["KillWait"])
		}
		cfg.Values["KillWait"] = "changed"
	}
	if n := r.calls.Load(); n != 1 {
		t.Errorf("%d scontrol commands, want 1", n)
	}
	if got := strings.Join(r.argv, " "); got != "scontrol show config" {
		t.Errorf("ran %q", got)
	}
	// Another Client asks for itself.
	if _, err := New(r).Config(context.Background()); err != nil || r.calls.Load() != 2 {
		t.Errorf("a second Client: %v, %d commands", err, r.calls.Load())
	}
}

// TestClientConfigFailureKeptAWhile: a failure is the answer for
// ConfigRetryAfter, then scontrol is asked again; an answer is then kept.
func TestClientConfigFailureKeptAWhile(t *testing.T) {
	r := &configRunner{fail: true}
	c := New(r)
	now := time.Unix(1e9, 0)
	var clockMu sync.Mutex
	configStateOf(c).clock = func() time.Time { clockMu.Lock(); defer clockMu.Unlock(); return now }
	advance := func(d time.Duration) { clockMu.Lock(); now = now.Add(d); clockMu.Unlock() }

	_, err := c.Config(context.Background())
	var ce *remote.CommandError
	if !errors.As(err, &ce) || !strings.Contains(err.Error(), "slurm: show config") || !strings.Contains(err.Error(), "Unable to contact slurm controller") {
		t.Fatalf("error %v: want the command's, with its stderr", err)
	}
	r.set(captured(t, 0), false)
	advance(ConfigRetryAfter - time.Second)
	if _, err2 := c.Config(context.Background()); err2 == nil || err2.Error() != err.Error() || r.calls.Load() != 1 {
		t.Fatalf("within ConfigRetryAfter: %v, %d commands; want the kept error, 1 command", err2, r.calls.Load())
	}
	advance(time.Second)
	cfg, err := c.Config(context.Background())
	if err != nil || cfg.KillWait != 5*time.Second || r.calls.Load() != 2 {
		t.Fatalf("after ConfigRetryAfter: %+v %v, %d commands", cfg.KillWait, err, r.calls.Load())
	}
	r.set("", true)
	advance(time.Hour)
	if cfg, err := c.Config(context.Background()); err != nil || cfg.KillWait != 5*time.Second || r.calls.Load() != 2 {
		t.Fatalf("the answer not kept: %v %v, %d commands", cfg.KillWait, err, r.calls.Load())
	}

	// scontrol exits 1 when no controller answered its ping after the
	// configuration (a ping refused under rl_enable): the configuration
	// it printed counts.
	down := strings.Replace(captured(t, 1), "Slurmctld(primary) at vm is UP", "Slurmctld(primary) at vm is DOWN", 1)
	if down == captured(t, 1) {
		t.Fatal("no ping line in the capture")
	}
	r3 := &configRunner{out: down, exit: 1}
	if cfg, err := New(r3).Config(context.Background()); err != nil || cfg.KillWait != 5*time.Second {
		t.Errorf("exit 1 after the configuration: %v %v", cfg.KillWait, err)
	}
	// Exit 1 without a whole configuration is the command's failure.
	r4 := &configRunner{out: "Configuration data as of x\nKillWait = 5 sec\n", exit: 1}
	if _, err := New(r4).Config(context.Background()); !errors.As(err, &ce) {
		t.Errorf("exit 1, half a configuration: %v", err)
	}

	// Output ParseConfig refuses is a failure too, named with the command.
	r2 := &configRunner{out: "Configuration data as of x\nKillWait = soon\nMaxArraySize = 1\n"}
	if _, err := New(r2).Config(context.Background()); err == nil || !strings.Contains(err.Error(), `KillWait "soon"`) || !strings.Contains(err.Error(), "(scontrol show config)") {
		t.Errorf("bad output: %v", err)
	}
}

// TestClientConfigDeadline: a throttled scontrol is stopped at
// KindScontrol's deadline (a *DeadlineError, outcome unknown) and Slow
// hears of it.
func TestClientConfigDeadline(t *testing.T) {
	r := &configRunner{out: captured(t, 1), gate: make(chan struct{})}
	var slow []SlowCommand
	var mu sync.Mutex
	c := New(r)
	c.Deadlines = Deadlines{Scontrol: 100 * time.Millisecond}
	c.Slow = func(s SlowCommand) { mu.Lock(); slow = append(slow, s); mu.Unlock() }
	start := time.Now()
	_, err := c.Config(context.Background())
	var de *DeadlineError
	if !errors.As(err, &de) || de.Kind != KindScontrol || !errors.Is(err, ErrDeadline) {
		t.Fatalf("error %v: want a *DeadlineError of scontrol", err)
	}
	if took := time.Since(start); took > 5*time.Second {
		t.Errorf("took %v", took)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(slow) != 1 || !slow[0].Stopped || slow[0].Command != "scontrol show config" {
		t.Errorf("Slow heard %+v", slow)
	}
}

// TestClientConfigCallerGivesUp: a caller whose ctx ends gets its ctx's
// error at once; the command runs on and its answer is kept for the next.
func TestClientConfigCallerGivesUp(t *testing.T) {
	r := &configRunner{out: captured(t, 0), gate: make(chan struct{})}
	c := New(r)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { _, err := c.Config(ctx); done <- err }()
	for r.calls.Load() == 0 {
		time.Sleep(time.Millisecond)
	}
	cancel()
	select {
	case err := <-done:
		if !errors.Is(err, context.Canceled) {
			t.Errorf("error %v, want context.Canceled", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the caller still waits after its ctx ended")
	}
	waiting := make(chan error, 1)
	go func() { _, err := c.Config(context.Background()); waiting <- err }()
	close(r.gate)
	if err := <-waiting; err != nil {
		t.Fatal(err)
	}
	if cfg, err := c.Config(context.Background()); err != nil || cfg.KillWait != 5*time.Second || r.calls.Load() != 1 {
		t.Errorf("%v %v, %d commands; want the one command's answer", cfg.KillWait, err, r.calls.Load())
	}
}

// TestConfigStateGoesWithClient: the side table does not keep a Client
// alive, and loses its entry when the Client is collected.
func TestConfigStateGoesWithClient(t *testing.T) {
	r := &configRunner{out: captured(t, 0)}
	c := New(r)
	if _, err := c.Config(context.Background()); err != nil {
		t.Fatal(err)
	}
	key := weak.Make(c)
	c = nil
	deadline := time.Now().Add(10 * time.Second)
	for {
		runtime.GC()
		configStates.mu.Lock()
		_, there := configStates.m[key]
		configStates.mu.Unlock()
		if !there && key.Value() == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("entry still there (client collected: %v)", key.Value() == nil)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestLabConfig: on each Slurm of the lab, over its login as the lab user
// (on 24.11 its RPCs rate limited), eight concurrent Config calls run one
// scontrol show config, whose KillWait and MaxArraySize are slurm.conf's.
func TestLabConfig(t *testing.T) {
	eachSlurm(t, func(t *testing.T, l *lab) {
		conf := "/etc/slurm/slurm.conf"
		for _, v := range l.slurm.Vars() {
			if p, ok := strings.CutPrefix(v, "SLURM_CONF="); ok {
				conf = p
			}
		}
		want := Config{KillWait: DefaultKillWait, MaxArraySize: DefaultMaxArraySize}
		b, err := os.ReadFile(conf)
		if err != nil {
			t.Fatal(err)
		}
		for _, line := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(line, "KillWait="); ok {
				n, err := strconv.Atoi(strings.TrimSpace(v))
				if err != nil {
					t.Fatalf("%s: %q", conf, line)
				}
				want.KillWait = time.Duration(n) * time.Second
			}
			if v, ok := strings.CutPrefix(line, "MaxArraySize="); ok {
				if want.MaxArraySize, err = strconv.Atoi(strings.TrimSpace(v)); err != nil {
					t.Fatalf("%s: %q", conf, line)
				}
			}
		}
		c, cr, _ := sshClientAt(t, l.slurm.Lab)
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		var wg sync.WaitGroup
		got := make([]Config, 8)
		errs := make([]error, 8)
		for i := range got {
			wg.Add(1)
			go func() { defer wg.Done(); got[i], errs[i] = c.Config(ctx) }()
		}
		wg.Wait()
		for i := range got {
			if errs[i] != nil {
				t.Fatal(errs[i])
			}
			if got[i].KillWait != want.KillWait || got[i].MaxArraySize != want.MaxArraySize {
				t.Errorf("KillWait %v MaxArraySize %d; %s says %v %d", got[i].KillWait, got[i].MaxArraySize, conf, want.KillWait, want.MaxArraySize)
			}
		}
		if got[0].Values["ClusterName"] != l.slurm.Cluster {
			t.Errorf("ClusterName %q, want %q", got[0].Values["ClusterName"], l.slurm.Cluster)
		}
		if n := cr.count("scontrol"); n != 1 {
			t.Errorf("%d scontrol commands for 8 calls, want 1", n)
		}
	})
}
