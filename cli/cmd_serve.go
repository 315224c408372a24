package cli

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/pprof"
	"os"
	"os/signal"
	"path/filepath"
	"runtime/debug"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	ucli "github.com/urfave/cli/v2"

	"github.com/nemorl/nemorl-slurm/configs"
	"github.com/nemorl/nemorl-slurm/episode"
	"github.com/nemorl/nemorl-slurm/ledger"
	"github.com/nemorl/nemorl-slurm/remote"
	"github.com/nemorl/nemorl-slurm/serve"
	"github.com/nemorl/nemorl-slurm/slurm"
)

func serveCommand(e *env) *ucli.Command {
	return &ucli.Command{
		Name:      "serve",
		Usage:     "the NeMo Gym agent endpoint: POST /run runs each row as an episode and answers with its verified outcome",
		ArgsUsage: " ",
		Flags: withGlobals(
			&ucli.StringFlag{Name: "listen", Usage: "host:port to listen on (default serve.listen, else " + configs.DefaultServeListen + ")"},
			&ucli.BoolFlag{Name: "allow-no-isolation", Usage: "serve with runtime.kind none (the lab): rewards cannot be trusted against an adversarial policy"},
		),
		Action: e.serve,
	}
}

func (e *env) serve(c *ucli.Context) error {
	if c.NArg() > 0 {
		return usageErr("serve takes no arguments, got %q", c.Args().First())
	}
	path := configPath(c)
	data, err := os.ReadFile(path)
	if err != nil {
		return withCode(ExitUsage, fmt.Errorf("config %s: %w", path, err), "set --config or NEMORL_SLURM_CONFIG")
	}
	cfg, err := configs.LoadWith(path, data, os.LookupEnv, configs.LoadOptions{PolicyFromGymHead: true})
	if err != nil {
		return withCode(ExitUsage, err, "")
	}
	if head := cfg.Serve.GymHead; head != "" {
		p, err := serve.WaitGymPolicy(c.Context, head, e.logf)
		if err != nil {
			return withCode(ExitUsage, fmt.Errorf("serve.gym_head: %w", err), "start Gym's head server first, or set policy_model in the config")
		}
		filled, err := p.Fill(cfg, head)
		if err != nil {
			return withCode(ExitUsage, err, "set the missing policy_model keys in the config")
		}
		if len(filled) > 0 {
			e.logf("serve: policy_model.%s from the gym head server %s (%d endpoint(s))", strings.Join(filled, ", policy_model."), head, len(cfg.PolicyModel.BaseURL))
		}
	}
	abs, err := filepath.Abs(path)
	if err != nil {
		return fmt.Errorf("config %s: %w", path, err)
	}
	listen := cfg.Serve.Listen
	if l := c.String("listen"); l != "" {
		if err := configs.CheckListen(l); err != nil {
			return usageErr("--listen: %v", err)
		}
		listen = l
	}
	token := cfg.Serve.Token.Reveal()
	if !configs.Loopback(listen) && token == "" {
		return &Error{Code: ExitUsage, Err: fmt.Errorf("serve: %s is not a loopback address and serve.token is not set: anyone who reaches the port could run episodes on your allocation", listen),
			Hint: "set serve.token: ${NEMORL_SERVE_TOKEN} (sent as Authorization: Bearer …), or listen on 127.0.0.1"}
	}
	if cfg.Runtime.Kind == configs.RuntimeNone {
		if !c.Bool("allow-no-isolation") {
			return &Error{Code: ExitUsage, Err: fmt.Errorf("serve: %s: runtime.kind none runs the stages without isolation: the policy can reach Slurm and forge its own evaluation", path),
				Hint: "use apptainer or singularity; for the lab only, pass --allow-no-isolation"}
		}
		e.logf("warning: %s: runtime.kind none: the stages run without isolation and can reach Slurm and each other's files; rewards cannot be trusted against an adversarial policy (answers say \"isolation\": \"none\"; use it for the lab only)", path)
	}

	lg, err := openLedger()
	if err != nil {
		return err
	}
	var logins []remote.Host
	defer func() {
		for _, h := range logins {
			h.Close()
		}
	}()
	clusters, drivers, err := e.serveClusters(c.Context, cfg, path, abs, sha256.Sum256(data), lg, globalBool(c, "verbose"), &logins)
	if err != nil {
		return err
	}
	// One ledger and one config file for every cluster; the first's view
	// of the config names the scope of serve's keys.
	opt := serve.Options{Clusters: clusters, Ledger: lg, ConfigPath: drivers[0].ConfigPath, Config: drivers[0].Config,
		Concurrency: cfg.Serve.Concurrency, Failures: cfg.Serve.Failures,
		Token: token, Logf: func(format string, args ...any) { e.logf(format, args...) }}
	opt.ResendWindow = cfg.Serve.ResendWindow.Duration
	var listening atomic.Value // serve's address, once it listens
	listening.Store(listen)
	if cfg.Serve.GymHead == "" {
		// Not under NeMo RL's head server: serve stands as Gym's own.
		head := &serve.HeadConfig{AgentName: cfg.Serve.AgentName, Addr: func() string { return listening.Load().(string) }}
		if p := cfg.Serve.GymConfig; p != "" {
			if head.Gym, err = serve.LoadGymConfig(p); err != nil {
				return withCode(ExitUsage, err, "serve.gym_config names a Gym config file (YAML) on this machine")
			}
			if _, ok := head.Gym[cfg.Serve.AgentName]; ok {
				e.logf("serve: serve.gym_config's %s entry is replaced by serve's own address", cfg.Serve.AgentName)
			}
		}
		opt.Head = head
	}
	srv, err := serve.New(opt)
	if err != nil {
		return err
	}
	// The server's own log lines are redacted by serve; the drivers' too.
	// Every Slurm command of a cluster is observed in /metrics from here
	// on (its preflight's, run before serve existed, are not), and each
	// slow one counted and logged, named by its cluster when there are
	// several.
	for i, d := range drivers {
		d.Logf = func(format string, args ...any) { opt.Logf("%s", srv.Redact(fmt.Sprintf(format, args...))) }
		name := clusters[i].Name
		sc := srv.SlurmCommands(name)
		d.Host.(*observedHost).feed.Store(sc)
		where := ""
		if name != "" {
			where = "cluster " + name + ": "
		}
		d.Slurm.Slow = func(c slurm.SlowCommand) {
			sc.Slow(c)
			d.Logf("%s%s", where, c)
		}
	}

	// A soft memory limit (GOMEMLIMIT, when set, wins): near it the
	// collector runs more often rather than letting a burst's garbage
	// (thousands of rows arriving at once) grow the heap to twice what is
	// live. What serve keeps per waiting row is a few KiB.
	if os.Getenv("GOMEMLIMIT") == "" {
		debug.SetMemoryLimit(serveMemoryLimit)
	}
	ctx, stop := signal.NotifyContext(c.Context, os.Interrupt, syscall.SIGTERM)
	defer stop()
	ectx, cancelEngine := context.WithCancel(context.Background())
	defer cancelEngine()
	var engines sync.WaitGroup
	for _, cl := range clusters {
		engines.Add(1)
		go func() { defer engines.Done(); _ = cl.Follower.Run(ectx) }()
	}
	if err := srv.Start(); err != nil {
		return err
	}
	ln, err := net.Listen("tcp", listen)
	if err != nil {
		return withCode(ExitUsage, fmt.Errorf("serve: listen %s: %w", listen, err), "")
	}
	listening.Store(ln.Addr().String())
	// No read or write timeout: a /run stays open for the whole episode.
	hs := &http.Server{Handler: srv.Handler(), ReadHeaderTimeout: 30 * time.Second}
	e.logf("serve: listening on http://%s (config %s, serve.concurrency %d, failures %s, ledger %s)", ln.Addr(), abs, cfg.Serve.Concurrency, cfg.Serve.Failures, lg.Dir)
	if names := cfg.ClusterNames(); len(names) > 1 {
		e.logf("serve: %d clusters: %s; each row is placed where it starts soonest", len(names), strings.Join(names, ", "))
	}
	if opt.Head != nil {
		e.logf("serve: also Gym's head server for agent %s: point Gym at it with +head_server.host=… +head_server.port=%s", cfg.Serve.AgentName, portOf(ln.Addr().String()))
	}
	if addr := os.Getenv("NEMORL_SERVE_PPROF"); addr != "" {
		stopProf, err := servePprof(addr)
		if err != nil {
			return withCode(ExitUsage, fmt.Errorf("NEMORL_SERVE_PPROF: %w", err), "give a loopback host:port, such as 127.0.0.1:6060")
		}
		defer stopProf()
		e.logf("serve: Go's profiles on http://%s/debug/pprof/ (NEMORL_SERVE_PPROF)", addr)
	}
	errc := make(chan error, 1)
	go func() { errc <- hs.Serve(ln) }()
	select {
	case err := <-errc:
		return fmt.Errorf("serve: %w", err)
	case <-ctx.Done():
	}
	stop()
	e.logf("serve: stopping: queued rows are answered 503; running episodes go on and the next serve re-attaches to them")
	srv.Shutdown()
	sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_ = hs.Shutdown(sctx)
	cancelEngine()
	engines.Wait()
	return nil
}

// serveClusters opens serve's clusters: one connection, driver and engine
// per cluster (clusters:), or the config's one cluster:; the members of
// one clusters: entry share its login's connection, added to logins for
// the caller to close. With one cluster, it must answer at start; of
// several, one that does not starts down (no rows placed there) and is
// checked (preflight) once it answers.
func (e *env) serveClusters(ctx context.Context, cfg *configs.Config, path, abs string, sum [32]byte, lg *ledger.Ledger, verbose bool, logins *[]remote.Host) ([]serve.Cluster, []*episode.Driver, error) {
	var clusters []serve.Cluster
	var drivers []*episode.Driver
	names := cfg.ClusterNames()
	byEntry := map[string]remote.Host{}
	for _, name := range names {
		ccfg, err := cfg.For(name)
		if err != nil {
			return nil, nil, withCode(ExitUsage, err, "")
		}
		where := ""
		if name != "" {
			where = "cluster " + name + ": "
		}
		entry, _, _ := strings.Cut(name, configs.MemberSep)
		login, ok := byEntry[entry]
		var down error
		if !ok {
			if login, down, err = e.serveLogin(ctx, ccfg, path, entry, where, verbose, len(names) > 1); err != nil {
				return nil, nil, err
			}
			byEntry[entry] = login
			*logins = append(*logins, login)
		}
		var reconnects func() int64
		if r, ok := login.(interface{ Reconnects() int64 }); ok && ccfg.Cluster.Login != nil {
			reconnects = r.Reconnects
		}
		counted := remote.NewCounted(memberHost(login, ccfg))
		d := e.newDriver(ccfg, abs, sum, &observedHost{Counted: counted}, lg)
		d.DiscardNotCreated = len(names) > 1
		preflight := servePreflight(d, path, where)
		cl := serve.DriverCluster(name, d)
		cl.MaxInFlight, cl.RemoteOps, cl.Reconnects = cfg.MaxInFlight(name), counted.Counts, reconnects
		if down == nil {
			err := preflight(ctx)
			var ce *Error
			switch {
			case err == nil:
			case len(names) > 1 && errors.As(err, &ce) && ce.Code == ExitInfra:
				down = err
			default:
				return nil, nil, err
			}
		}
		if down != nil {
			// Its episodes in the ledger are followed when it answers; the
			// config's paths there are checked then, before any row goes.
			e.logf("serve: %snot answering at start, no rows placed there until it answers: %v", where, down)
			cl.Down, cl.Preflight = down, func(ctx context.Context) error {
				err := preflight(ctx)
				var ce *Error
				if errors.As(err, &ce) && ce.Code == ExitUsage {
					return fmt.Errorf("%w: %w", serve.ErrMisconfigured, err)
				}
				return err
			}
		}
		drivers = append(drivers, d)
		clusters = append(clusters, cl)
	}
	return clusters, drivers, nil
}

// observedHost is a cluster's host that tells serve's /metrics of every
// Slurm command run through it (slurm.Observer: its Slurm client's
// commands and the episode's staged sbatch), once serve has set feed.
type observedHost struct {
	*remote.Counted
	feed atomic.Pointer[serve.SlurmCommands]
}

func (h *observedHost) ObserveSlurm(kind slurm.Kind, took time.Duration, stopped bool) {
	if f := h.feed.Load(); f != nil {
		f.ObserveSlurm(kind, took, stopped)
	}
}

// serveLogin connects to the login of a clusters: entry (or the config's
// one cluster:). Of several clusters (orLater), one whose login cannot be
// reached is opened to connect later, and down says why. Reconnections
// are logged, -v or not (and counted by the SSH host), under the entry's
// name: its members share them.
func (e *env) serveLogin(ctx context.Context, ccfg *configs.Config, path, entry, where string, verbose, orLater bool) (login remote.Host, down, err error) {
	if entry != ccfg.ClusterName {
		where = "cluster " + entry + ": "
	}
	logf := func(format string, args ...any) {
		msg := fmt.Sprintf(format, args...)
		if verbose || strings.Contains(msg, "connection lost") || strings.HasSuffix(msg, ": reconnected") {
			e.logf("%s%s", where, msg)
		}
	}
	if orLater {
		login, down, err = dialLoginOrLater(ctx, ccfg, path, logf)
	} else {
		login, err = dialLogin(ctx, ccfg, path, logf)
	}
	if err != nil && ccfg.ClusterName != "" {
		return nil, nil, fmt.Errorf("cluster %s: %w", ccfg.ClusterName, err)
	}
	return login, down, err
}

// servePreflight checks d's config on its cluster (Driver.Preflight): a
// path that is missing is a usage error naming the config, anything else
// an infrastructure one.
func servePreflight(d *episode.Driver, path, where string) func(context.Context) error {
	return func(ctx context.Context) error {
		err := d.Preflight(ctx)
		var pe *episode.PreflightError
		if errors.As(err, &pe) {
			return &Error{Code: ExitUsage, Err: fmt.Errorf("%s: %s%w", path, where, err), Hint: "fix the config"}
		}
		if err != nil {
			return withCode(ExitInfra, fmt.Errorf("%s%w", where, err), "")
		}
		return nil
	}
}

func portOf(addr string) string {
	_, p, err := net.SplitHostPort(addr)
	if err != nil {
		return addr
	}
	return p
}

// serveMemoryLimit is serve's soft memory limit unless GOMEMLIMIT is set
// (runtime/debug.SetMemoryLimit: a target for the collector, never a cap
// that fails an allocation).
const serveMemoryLimit = 192 << 20

// servePprof serves Go's runtime profiles (net/http/pprof) on addr, a
// loopback address only, for measuring serve (docs/BENCHMARKS.md): set
// NEMORL_SERVE_PPROF=127.0.0.1:6060. It returns the function that stops it.
func servePprof(addr string) (func(), error) {
	if err := configs.CheckListen(addr); err != nil {
		return nil, err
	}
	if !configs.Loopback(addr) {
		return nil, fmt.Errorf("%s is not a loopback address: the profiles are for this machine only", addr)
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("listen %s: %w", addr, err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	ps := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = ps.Serve(ln) }()
	return func() { _ = ps.Close() }, nil
}
