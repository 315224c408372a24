package slurm

// slurmctld's configuration as scontrol show config prints it: what the
// tool needs of it (KillWait for the batch scripts' TERM path,
// MaxArraySize for job arrays), asked once per Client, so that the jobs
// themselves ask slurmctld nothing the tool can tell them when it renders
// them (under SlurmctldParameters=rl_enable every RPC of the user's counts
// against one bucket).

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"maps"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"time"
	"weak"

	"github.com/nemorl/nemorl-slurm/remote"
)

// Config is what the tool reads of the cluster's slurmctld configuration
// (scontrol show config).
type Config struct {
	// KillWait is how long Slurm waits between a job's TERM and its KILL
	// (slurm.conf KillWait, whole seconds; DefaultKillWait when unset).
	// Zero is a value a site may set: Slurm kills at once.
	KillWait time.Duration
	// MaxArraySize is slurm.conf's MaxArraySize: a job array's task
	// indexes are below it (0 disables arrays; Slurm's default 1001).
	MaxArraySize int
	// Values is every "Key = value" line of the output's main section (the
	// keys as printed, the values trimmed), for what the two fields above
	// do not name.
	Values map[string]string
}

// clone is cfg with a Values of its own: each caller of Client.Config
// gets one, which it may change.
func (cfg Config) clone() Config {
	cfg.Values = maps.Clone(cfg.Values)
	return cfg
}

// Slurm's defaults of the keys Config reads (slurm.conf(5), 22.05 to
// 26.05): what a cluster whose slurm.conf does not set them has.
const (
	DefaultKillWait     = 30 * time.Second
	DefaultMaxArraySize = 1001
)

// configHeader starts scontrol show config's output, 22.05 to 26.05
// (src/api/config_info.c slurm_print_ctl_conf: "Configuration data as of
// TIME"); its "Key = value" lines follow ("%-23s = %s"), up to the first
// blank line, after which come the plugins' sections (cgroup, MPI, node
// features…) and the controllers' ping ("Slurmctld(primary) at HOST is
// UP").
const configHeader = "Configuration data as of "

// ParseConfig reads scontrol show config's output. It reads the lines of
// the main section (from the "Configuration data as of" line to the first
// blank one) of the form "Key = value" (the key padded to 23 columns; the
// value is what follows the first " = "), and ignores the rest, so that a
// key or a section a Slurm release adds changes nothing. KillWait ("N sec")
// and MaxArraySize ("N"), which every release from 22.05 to 26.05 prints,
// must each be there exactly once with a value of their form; otherwise,
// or without the header, it returns an error naming what is wrong.
func ParseConfig(out []byte) (Config, error) {
	sc := bufio.NewScanner(bytes.NewReader(out))
	sc.Buffer(make([]byte, 0, 4096), 1<<20)
	n, header := 0, false
	for !header && sc.Scan() {
		n++
		header = strings.HasPrefix(sc.Text(), configHeader)
	}
	if !header {
		if err := sc.Err(); err != nil {
			return Config{}, fmt.Errorf("slurm: show config: line %d: %w", n+1, err)
		}
		return Config{}, fmt.Errorf("slurm: show config: no %q line: not scontrol show config's output", strings.TrimSpace(configHeader))
	}
	cfg := Config{Values: map[string]string{}}
	seen := map[string]int{} // line of each key Config reads
	for sc.Scan() {
		n++
		line := strings.TrimSuffix(sc.Text(), "\r")
		if strings.TrimSpace(line) == "" {
			break
		}
		key, value, ok := strings.Cut(line, " = ")
		key = strings.TrimRight(key, " ")
		if !ok || key == "" || strings.ContainsAny(key, " \t") {
			continue
		}
		value = strings.TrimSpace(value)
		if _, dup := cfg.Values[key]; !dup {
			cfg.Values[key] = value
		}
		switch key {
		case "KillWait", "MaxArraySize":
		default:
			continue
		}
		if first, dup := seen[key]; dup {
			return Config{}, fmt.Errorf("slurm: show config: line %d: %s again (first on line %d)", n, key, first)
		}
		seen[key] = n
		var err error
		if key == "KillWait" {
			cfg.KillWait, err = parseKillWait(value)
		} else {
			cfg.MaxArraySize, err = parseMaxArraySize(value)
		}
		if err != nil {
			return Config{}, fmt.Errorf("slurm: show config: line %d: %w", n, err)
		}
	}
	if err := sc.Err(); err != nil {
		return Config{}, fmt.Errorf("slurm: show config: line %d: %w", n+1, err)
	}
	for _, key := range []string{"KillWait", "MaxArraySize"} {
		if _, ok := seen[key]; !ok {
			return Config{}, fmt.Errorf("slurm: show config: no %s line in its main section", key)
		}
	}
	return cfg, nil
}

// parseKillWait reads KillWait's value: "%u sec" of a uint16.
func parseKillWait(v string) (time.Duration, error) {
	num, ok := strings.CutSuffix(v, " sec")
	if !ok || !isDigits(num) || len(num) > 5 {
		return 0, fmt.Errorf("KillWait %.40q: want N sec", v)
	}
	s, err := strconv.ParseUint(num, 10, 16)
	if err != nil {
		return 0, fmt.Errorf("KillWait %.40q: want N sec, N below 65536", v)
	}
	return time.Duration(s) * time.Second, nil
}

// parseMaxArraySize reads MaxArraySize's value: "%u" of a uint32.
func parseMaxArraySize(v string) (int, error) {
	if !isDigits(v) || len(v) > 10 {
		return 0, fmt.Errorf("MaxArraySize %.40q: want a whole number", v)
	}
	n, err := strconv.ParseUint(v, 10, 32)
	if err != nil {
		return 0, fmt.Errorf("MaxArraySize %.40q: want a whole number below 2^32", v)
	}
	return int(n), nil
}

// ConfigRetryAfter is how long a Client keeps a failed Config's error
// before it runs scontrol show config again: the renders of a batch of
// episodes meanwhile get that error at once, rather than one throttled
// command each.
const ConfigRetryAfter = 30 * time.Second

// Config is the cluster's slurmctld configuration, from one scontrol show
// config (KindScontrol's deadline) per Client: the first answer is kept
// for the Client's life. Concurrent callers share one command, each
// waiting until it ends or its own ctx does (the command runs on, within
// its deadline, for the others). A failure (the command failing, stopped
// at its deadline — a *DeadlineError —, or output ParseConfig refuses) is
// kept ConfigRetryAfter, then asked again; a caller's own ctx ending is
// never kept.
func (c *Client) Config(ctx context.Context) (Config, error) {
	st := configStateOf(c)
	st.mu.Lock()
	if st.cfg != nil {
		cfg := st.cfg.clone()
		st.mu.Unlock()
		return cfg, nil
	}
	if st.err != nil && st.now().Sub(st.failed) < ConfigRetryAfter {
		err := st.err
		st.mu.Unlock()
		return Config{}, err
	}
	call := st.call
	if call == nil {
		call = &configCall{done: make(chan struct{})}
		st.call = call
		// The command runs apart from this caller's ctx (its values
		// kept), bounded by its deadline: every caller waiting for it
		// gets its answer, whichever gives up.
		go c.askConfig(context.WithoutCancel(ctx), st, call)
	}
	st.mu.Unlock()
	select {
	case <-call.done:
		return call.cfg.clone(), call.err
	case <-ctx.Done():
		return Config{}, fmt.Errorf("slurm: show config: %w", context.Cause(ctx))
	}
}

// askConfig runs scontrol show config for call, keeps its answer (or its
// error, with the time) in st and wakes the callers waiting.
func (c *Client) askConfig(ctx context.Context, st *configState, call *configCall) {
	cfg, err := c.showConfig(ctx)
	st.mu.Lock()
	if err == nil {
		st.cfg, st.err = &cfg, nil
	} else {
		st.err, st.failed = err, st.now()
	}
	st.call = nil
	st.mu.Unlock()
	call.cfg, call.err = cfg, err
	close(call.done)
}

// showConfig runs one scontrol show config and parses it. scontrol pings
// the controllers after it printed the configuration and exits 1, with
// nothing on stderr, when none answered ("Slurmctld(primary) at HOST is
// DOWN", src/scontrol/scontrol.c _print_ping, 22.05 to 26.05): a ping the
// rate limit refuses under rl_enable, while the configuration RPC, which the
// client retries, went through. A command that exits 1 is therefore read
// all the same: its configuration counts if ParseConfig takes it whole (a
// failed configuration RPC prints none, and no ping).
func (c *Client) showConfig(ctx context.Context) (Config, error) {
	cmd := remote.Command{Argv: []string{"scontrol", "show", "config"}, Idempotent: true}
	res, err := c.run(ctx, KindScontrol, cmd)
	var ce *remote.CommandError
	if err != nil && res != nil && res.ExitStatus == 1 && errors.As(err, &ce) {
		if cfg, perr := ParseConfig(res.Stdout); perr == nil {
			return cfg, nil
		}
	}
	if err != nil {
		return Config{}, commandError("show config", cmd, res, err)
	}
	cfg, err := ParseConfig(res.Stdout)
	if err != nil {
		return Config{}, fmt.Errorf("%w (%s)", err, cmd.Brief())
	}
	return cfg, nil
}

// configState is one Client's Config: its answer, its last failure, the
// command in flight. It lives beside the Client (configStates), not in it,
// and goes when the Client does.
type configState struct {
	mu     sync.Mutex
	cfg    *Config     // the answer, once there is one
	err    error       // the last failure, kept ConfigRetryAfter from failed
	failed time.Time   //
	call   *configCall // the command in flight, if any
	clock  func() time.Time
}

func (st *configState) now() time.Time {
	if st.clock != nil {
		return st.clock()
	}
	return time.Now()
}

// configCall is one scontrol show config and its outcome, set before done
// is closed.
type configCall struct {
	done chan struct{}
	cfg  Config
	err  error
}

// configStates holds each Client's configState, by a weak pointer to the
// Client: an entry is removed when its Client is garbage (runtime
// cleanup), so that the map does not keep Clients, or grow with them.
var configStates struct {
	mu sync.Mutex
	m  map[weak.Pointer[Client]]*configState
}

// configStateOf returns c's configState, making it at c's first use.
func configStateOf(c *Client) *configState {
	if c == nil {
		panic(errors.New("slurm: Config of a nil *Client"))
	}
	key := weak.Make(c)
	configStates.mu.Lock()
	defer configStates.mu.Unlock()
	if st, ok := configStates.m[key]; ok {
		return st
	}
	if configStates.m == nil {
		configStates.m = map[weak.Pointer[Client]]*configState{}
	}
	st := &configState{}
	configStates.m[key] = st
	runtime.AddCleanup(c, forgetConfigState, key)
	return st
}

// forgetConfigState removes a collected Client's entry.
func forgetConfigState(key weak.Pointer[Client]) {
	configStates.mu.Lock()
	delete(configStates.m, key)
	configStates.mu.Unlock()
}
