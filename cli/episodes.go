package cli

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	ucli "github.com/urfave/cli/v2"
	"golang.org/x/term"

	"github.com/nemorl/nemorl-slurm/configs"
	"github.com/nemorl/nemorl-slurm/episode"
	"github.com/nemorl/nemorl-slurm/ledger"
	"github.com/nemorl/nemorl-slurm/remote"
	"github.com/nemorl/nemorl-slurm/rules"
	"github.com/nemorl/nemorl-slurm/slurm"
	"github.com/nemorl/nemorl-slurm/stages"
)

// session is one config's engine over its open connection: the verbs do
// what they do to episodes through episode.Runner, and read beside it the
// config, the host (logs and clean read files), the ledger and Slurm.
type session struct {
	episode.Runner
	Config *configs.Config
	Host   remote.Host
	Ledger *ledger.Ledger
	Slurm  *slurm.Client
	// setup is the driver behind Runner, for what a verb sets before it
	// runs: labels (submit), where its lines go (watch, cancel).
	setup    *episode.Driver
	episodes []string // the episodes this session handles
}

// newSession is the session of driver d.
func newSession(d *episode.Driver) *session {
	return &session{Runner: d, Config: d.Config, Host: d.Host, Ledger: d.Ledger, Slurm: d.Slurm, setup: d}
}

func (s *session) close() {
	if s.Host != nil {
		_ = s.Host.Close()
	}
}

func openLedger() (*ledger.Ledger, error) {
	dir, err := ledger.DefaultLedgerDir()
	if err != nil {
		return nil, err
	}
	return ledger.OpenLedger(dir)
}

// explicitConfig returns the config path named by --config or
// $NEMORL_SLURM_CONFIG, or "".
func explicitConfig(c *ucli.Context) string {
	if p := globalString(c, "config"); p != "" {
		return p
	}
	return os.Getenv("NEMORL_SLURM_CONFIG")
}

// connect loads the config at path and opens its cluster: this machine
// when cluster.login is absent, else SSH with host keys checked.
//
// needKey is set by the commands that stage episodes (submit, run): the
// others load the config with the policy API key optional, so that cancel,
// status or clean work without ${POLICY_API_KEY} set.
//
// sets are --set KEY=VALUE overrides (submit, run), applied to the file as
// configs.ApplySets does, or those an episode's ledger entry recorded.
//
// cluster names the config's clusters: entry to reach ("": the first, or
// the config's one cluster:).
func (e *env) connect(ctx context.Context, c *ucli.Context, lg *ledger.Ledger, path, cluster string, needKey bool, sets []string) (*session, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, withCode(ExitUsage, fmt.Errorf("config %s: %w", path, err), "set --config or NEMORL_SLURM_CONFIG")
	}
	source := path
	if len(sets) > 0 {
		if data, err = configs.ApplySets(data, sets); err != nil {
			return nil, withCode(ExitUsage, fmt.Errorf("config %s: %w", path, err), "")
		}
		source = path + " with --set " + strings.Join(sets, " --set ")
	}
	cfg, err := configs.LoadWith(source, data, os.LookupEnv, configs.LoadOptions{SecretsOptional: !needKey, PolicyFromGymHead: !needKey})
	if err != nil {
		return nil, withCode(ExitUsage, err, "")
	}
	if cfg, err = cfg.For(cluster); err != nil {
		return nil, withCode(ExitUsage, err, "")
	}
	abs, err := filepath.Abs(path)
	if err != nil {
		return nil, fmt.Errorf("config %s: %w", path, err)
	}
	if cfg.Runtime.Kind == configs.RuntimeNone {
		switch c.Command.Name {
		case "run", "watch", "resume", "submit":
			e.logf("warning: %s: runtime.kind none: the stages run without isolation and can reach Slurm and each other's files; rewards cannot be trusted against an adversarial policy (outcomes say \"isolation\": \"none\"; use it for the lab only)", path)
		}
	}
	sum := sha256.Sum256(data)
	host, err := dialCluster(ctx, cfg, path, e.verboseLogf(c))
	if err != nil {
		return nil, err
	}
	d := e.newDriver(cfg, abs, sum, host, lg)
	d.Overrides = sets
	return newSession(d), nil
}

// sessionsFor opens one session per config the episodes were submitted
// with (or the one --config names), each holding its episodes. A config
// that cannot be opened (moved, broken, its cluster unreachable) does not
// stop the others: its episodes are returned in skipped, with why, and
// logged; only when no config opens is that an error.
func (e *env) sessionsFor(ctx context.Context, c *ucli.Context, lg *ledger.Ledger, entries []*ledger.Entry) (sessions []*session, skipped map[string]error, err error) {
	// One session per config, cluster and --set overrides (the key joins
	// them with NUL, which none holds).
	byConfig := map[string][]string{}
	explicit := explicitConfig(c)
	for _, en := range entries {
		p := en.ConfigPath
		if explicit != "" {
			p = explicit
		}
		k := strings.Join(append([]string{p, en.Cluster}, en.Overrides...), "\x00")
		byConfig[k] = append(byConfig[k], en.Episode)
	}
	paths := make([]string, 0, len(byConfig))
	for p := range byConfig {
		paths = append(paths, p)
	}
	sort.Strings(paths)
	skipped = map[string]error{}
	var first error
	for _, k := range paths {
		parts := strings.Split(k, "\x00")
		p := k
		s, err := e.connect(ctx, c, lg, parts[0], parts[1], false, parts[2:])
		if err != nil {
			if first == nil {
				first = err
			}
			for _, ep := range byConfig[p] {
				skipped[ep] = err
			}
			e.logf("skipping %s: %v", strings.Join(byConfig[p], ", "), err)
			continue
		}
		s.episodes = byConfig[p]
		sessions = append(sessions, s)
	}
	if len(sessions) == 0 && first != nil {
		return nil, nil, first
	}
	return sessions, skipped, nil
}

// skippedStrings renders skipped for --json: episode → why.
func skippedStrings(skipped map[string]error) map[string]string {
	out := make(map[string]string, len(skipped))
	for ep, err := range skipped {
		out[ep] = err.Error()
	}
	return out
}

// skippedError is the error of the episodes sessionsFor skipped, or nil.
func skippedError(skipped map[string]error) error {
	if len(skipped) == 0 {
		return nil
	}
	eps := make([]string, 0, len(skipped))
	for ep := range skipped {
		eps = append(eps, ep)
	}
	sort.Strings(eps)
	return withCode(ExitInfra, fmt.Errorf("%d episode(s) skipped, their config could not be opened: %s (first: %w)", len(eps), strings.Join(eps, ", "), skipped[eps[0]]), "")
}

// ledgerEntries opens the ledger and selects episodes from it
// (selectEpisodes).
func ledgerEntries(names []string, keep func(*ledger.Entry) bool) (*ledger.Ledger, []*ledger.Entry, error) {
	lg, err := openLedger()
	if err != nil {
		return nil, nil, err
	}
	entries, err := selectEpisodes(lg, names, keep)
	return lg, entries, err
}

// selectEpisodes returns the named episodes, or with none named every
// episode of the ledger for which keep is true.
func selectEpisodes(lg *ledger.Ledger, names []string, keep func(*ledger.Entry) bool) ([]*ledger.Entry, error) {
	if len(names) > 0 {
		var out []*ledger.Entry
		seen := map[string]bool{}
		for _, n := range names {
			if seen[n] {
				continue
			}
			seen[n] = true
			en, err := lg.Load(n)
			if err != nil {
				if errors.Is(err, ledger.ErrNotInLedger) {
					return nil, &Error{Code: ExitUsage, Err: err, Hint: "nemorl-slurm list shows the episodes in the ledger (" + lg.Dir + ")"}
				}
				return nil, err
			}
			out = append(out, en)
		}
		return out, nil
	}
	all, err := lg.List()
	if err != nil {
		return nil, err
	}
	var out []*ledger.Entry
	for _, en := range all {
		if keep(en) {
			out = append(out, en)
		}
	}
	return out, nil
}

func unfinished(en *ledger.Entry) bool { return !en.Final() }

// progress shows watch rows: a live table redrawn in place on a terminal,
// otherwise one line per change. Log lines go through logf, above the
// table: the table is cleared, the line printed, the table drawn again
// under it, so the screen holds one table and every log line.
type progress struct {
	mu    sync.Mutex
	w     io.Writer
	tty   bool
	drawn int    // lines of the table on screen
	table string // the table last drawn
	last  map[string]string
	start time.Time
}

func newProgress(w io.Writer) *progress {
	tty := false
	if f, ok := w.(*os.File); ok {
		tty = term.IsTerminal(int(f.Fd()))
	}
	return &progress{w: w, tty: tty, last: map[string]string{}, start: time.Now()}
}

func (p *progress) update(rows []episode.Row) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.tty {
		p.clear()
		p.table = formatRows(rows)
		p.draw()
		return
	}
	for _, r := range rows {
		line := string(r.Stage) + " " + r.JobID + " " + r.State.String() + attemptNote(r)
		if p.last[r.Episode] == line {
			continue
		}
		p.last[r.Episode] = line
		// The outcome is printed once, by the report at the end.
		fmt.Fprintf(p.w, "%s %s %s job %s %s%s%s\n", time.Now().UTC().Format(time.RFC3339), r.Episode, r.Stage, orDash(r.JobID), r.State, reasonNote(r), attemptNote(r))
	}
}

// logf prints a log line above the table.
func (p *progress) logf(format string, args ...any) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.clear()
	fmt.Fprintf(p.w, format+"\n", args...)
	p.draw()
}

// clear removes the table from the screen (the cursor goes back to where
// it started).
func (p *progress) clear() {
	if p.tty && p.drawn > 0 {
		fmt.Fprintf(p.w, "\x1b[%dA\x1b[J", p.drawn)
		p.drawn = 0
	}
}

func (p *progress) draw() {
	if p.tty && p.table != "" {
		fmt.Fprint(p.w, p.table)
		p.drawn = strings.Count(p.table, "\n")
	}
}

// reasonNote is " (Dependency)" for a pending row with a reason.
func reasonNote(r episode.Row) string {
	if r.Reason == "" {
		return ""
	}
	return " (" + r.Reason + ")"
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func outcomeNote(r episode.Row) string {
	o := r.Outcome
	if o == nil {
		return ""
	}
	s := " → " + string(o.Outcome)
	if o.Reward != nil {
		s += " reward " + formatReward(o)
	}
	if o.FailureReason != "" {
		s += " (" + o.FailureReason + ")"
	}
	return s
}

// formatRows renders the table of status and watch.
func formatRows(rows []episode.Row) string {
	var b strings.Builder
	// A CLUSTER column once any episode runs on a clusters: entry.
	clusters := slices.ContainsFunc(rows, func(r episode.Row) bool { return r.Cluster != "" })
	if clusters {
		fmt.Fprintf(&b, "%-12s ", "CLUSTER")
	}
	fmt.Fprintf(&b, "%-28s %-6s %-8s %-24s %9s  %s\n", "EPISODE", "STAGE", "JOB", "STATE", "ELAPSED", "OUTCOME")
	for _, r := range rows {
		if clusters {
			fmt.Fprintf(&b, "%-12s ", orDash(r.Cluster))
		}
		out := "-"
		if r.Outcome != nil {
			out = strings.TrimPrefix(outcomeNote(r), " → ")
		}
		state := r.State.String()
		if r.Reason != "" {
			state += " (" + r.Reason + ")"
		}
		state += attemptNote(r)
		fmt.Fprintf(&b, "%-28s %-6s %-8s %-24s %9s  %s\n", r.Episode, r.Stage, orDash(r.JobID), state, formatElapsed(r.Elapsed), out)
	}
	return b.String()
}

func formatElapsed(d time.Duration) string {
	if d <= 0 {
		return "-"
	}
	s := int64(d / time.Second)
	return fmt.Sprintf("%d:%02d:%02d", s/3600, s%3600/60, s%60)
}

// attemptNote names a stage's attempt after its first (a retry, a
// requeue): " attempt 2".
func attemptNote(r episode.Row) string {
	if r.Attempt > 1 {
		return fmt.Sprintf(" attempt %d", r.Attempt)
	}
	return ""
}

// rowJSON is a row in --json output.
type rowJSON struct {
	Episode        string `json:"episode"`
	Cluster        string `json:"cluster,omitempty"`
	Stage          string `json:"stage"`
	JobID          string `json:"job_id"`
	State          string `json:"state"`
	Reason         string `json:"reason,omitempty"`
	ElapsedSeconds int64  `json:"elapsed_seconds"`
	// Attempt, after the first: the stage's attempt (retries, requeues).
	Attempt int            `json:"attempt,omitempty"`
	Outcome *rules.Outcome `json:"outcome,omitempty"`
}

func rowsJSON(rows []episode.Row) []rowJSON {
	out := make([]rowJSON, 0, len(rows))
	for _, r := range rows {
		out = append(out, rowJSON{Episode: r.Episode, Cluster: r.Cluster, Stage: string(r.Stage), JobID: r.JobID, State: r.State.String(), Reason: r.Reason,
			ElapsedSeconds: int64(r.Elapsed / time.Second), Outcome: r.Outcome})
		if r.Attempt > 1 {
			out[len(out)-1].Attempt = r.Attempt
		}
	}
	return out
}

// worstExit is the exit code of several outcomes: 4 if any integrity
// violation, else 3 if any infrastructure failure or unfinished episode,
// else 0.
func worstExit(entries []*ledger.Entry) int {
	code := ExitOK
	for _, en := range entries {
		c := ExitInfra
		if en.Outcome != nil {
			c = en.Outcome.ExitCode()
		}
		if c == ExitIntegrity || (c == ExitInfra && code == ExitOK) {
			code = c
		}
	}
	return code
}

// summary is the one-line human account of an outcome.
func summary(o *rules.Outcome) string {
	s := fmt.Sprintf("%s: %s", o.Episode, o.Outcome)
	if o.Reward != nil {
		s += ", reward " + formatReward(o)
	}
	if o.MaskSample {
		s += ", mask_sample"
	}
	if o.FailureReason != "" {
		s += fmt.Sprintf(" (%s: %s)", o.FailureStage, o.FailureReason)
	}
	if o.TrainReward != nil && o.InnerSteps != nil && o.Outcome != rules.InfraFailure && o.Outcome != rules.IntegrityViolation {
		s += fmt.Sprintf("; train_reward %.4f after %d inner steps", *o.TrainReward, *o.InnerSteps)
	}
	return s
}

// formatReward shows a reward to four places and, for an eval's score,
// the samples it counts: "0.4542 (109/240)".
func formatReward(o *rules.Outcome) string {
	if o.Reward == nil {
		return "-"
	}
	r := *o.Reward
	s := fmt.Sprintf("%.4f", r)
	if o.Correct != nil && o.Samples > 0 {
		s += fmt.Sprintf(" (%d/%d)", *o.Correct, o.Samples)
	}
	return s
}

// printOutcome prints an outcome for a human: the summary on stdout, the
// jobs and the detail under it.
func (e *env) printOutcome(o *rules.Outcome) {
	fmt.Fprintln(e.stdout, summary(o))
	for _, st := range stages.All {
		j, ok := o.Jobs[st]
		if !ok {
			continue
		}
		for _, a := range o.Retried[st] {
			fmt.Fprintf(e.stdout, "  %-6s job %-8s %-22s exit %s  attempt %d, retried: %s\n", st, a.JobID, a.Job.State, a.Job.ExitCode, a.Attempt, a.Reason)
		}
		fmt.Fprintf(e.stdout, "  %-6s job %-8s %-22s exit %s", st, j.ID, j.State, j.ExitCode)
		if n := o.Attempts[st]; n > 1 {
			fmt.Fprintf(e.stdout, "  (%d attempts", n)
			if j.Runs > 1 {
				fmt.Fprintf(e.stdout, "; Slurm ran this job %d times, earlier runs %s", j.Runs, strings.Join(j.EarlierRuns, ", "))
			}
			fmt.Fprint(e.stdout, ")")
		}
		fmt.Fprintln(e.stdout)
	}
	if o.Detail != "" {
		fmt.Fprintf(e.stdout, "  %s\n", o.Detail)
	}
	switch o.Isolation {
	case "none":
		fmt.Fprintln(e.stdout, "  isolation: none (lab only: the stages ran without containers)")
	case "":
	default:
		fmt.Fprintf(e.stdout, "  isolation: %s (each stage in its own container)\n", o.Isolation)
	}
}

// userNames names the uids in "CANCELLED by 1001" states, asking the
// cluster once per uid.
type userNames struct {
	names map[int]string
	asked map[int]bool
}

var reCancelledBy = regexp.MustCompile(`^(CANCELLED by )(\d+)$`)

// rename rewrites the rows' "CANCELLED by UID" states with the user's name.
// lookup names uids (episode.Driver.UserNames); nil leaves them as uids.
func (u *userNames) rename(ctx context.Context, lookup func(context.Context, []int) (map[int]string, error), rows []episode.Row) {
	if u.names == nil {
		u.names, u.asked = map[int]string{}, map[int]bool{}
	}
	var ask []int
	for _, r := range rows {
		if m := reCancelledBy.FindStringSubmatch(r.State.String()); m != nil {
			uid, _ := strconv.Atoi(m[2])
			if !u.asked[uid] {
				u.asked[uid] = true
				ask = append(ask, uid)
			}
		}
	}
	if len(ask) > 0 && lookup != nil {
		names, _ := lookup(ctx, ask)
		maps.Copy(u.names, names)
	}
	for i, r := range rows {
		if m := reCancelledBy.FindStringSubmatch(r.State.String()); m != nil {
			uid, _ := strconv.Atoi(m[2])
			if name, ok := u.names[uid]; ok {
				rows[i].State = episode.RowState(m[1] + name) // Slurm's state, the uid named
			}
		}
	}
}

// newDriver is the one place a Driver is made (the episode verbs, serve):
// the config as loaded from abs (sum: its bytes' sha256), the cluster, the
// ledger, and e's log.
func (e *env) newDriver(cfg *configs.Config, abs string, sum [32]byte, host remote.Host, lg *ledger.Ledger) *episode.Driver {
	sl := slurm.New(host)
	sl.Cluster = cfg.Cluster.Member
	sl.Slow = func(s slurm.SlowCommand) { e.logf("%s", s) }
	return &episode.Driver{
		Config: cfg, ConfigPath: abs, ConfigSHA256: hex.EncodeToString(sum[:]),
		Host: host, Slurm: sl, Ledger: lg, Version: Version,
		Logf: func(format string, args ...any) { e.logf(format, args...) },
	}
}
