package cli

// End-to-end tests of the lab's REAL author stage (configs/lab-real-author.yaml):
// the built binary runs episodes whose author job runs the built-in author
// payload (templates/payload/author.sh) on the host with real Claude Code,
// real git and the real `nemorl-slurm payload author-finish`, installed by
// lab/up under /opt/nemorl. Only the policy model is a stand-in
// (lab/policy-standin), whose mode each case picks with policy_model.model.
// Train and eval are the lab stand-ins. Each case has its own XDG_STATE_HOME
// and episode id, as in episode_lab_test.go, whose helpers these reuse.

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/nemorl/nemorl-slurm/configs"
	"github.com/nemorl/nemorl-slurm/internal/labtest"
)

const (
	labImageRoot  = "/opt/nemorl"         // lab/lib.sh LAB_IMAGE_ROOT
	labBin        = "/opt/nemorl-lab/bin" // lab/lib.sh LAB_BIN
	realAuthorCfg = "../configs/lab-real-author.yaml"
	// Claude Code gives up on a failing endpoint after about 3 min 15 s;
	// research_seconds is 300.
	endpointDownTimeout = 8 * time.Minute
)

// TestAuthorLab runs the real author stage's cases on the lab.
func TestAuthorLab(t *testing.T) {
	t.Parallel() // with the package's other shared-lab tests, after its LockLab ones
	lab := labtest.Env(t)
	labtest.UseLab(t)
	requireStandIns(t)
	requireAuthorRoot(t)

	base, err := os.ReadFile(realAuthorCfg)
	if err != nil {
		t.Fatal(err)
	}
	shared := lab.Workdir
	lab.Workdir = lab.TestWorkdir(t)
	base = []byte(lab.WithWorkdir(t, string(base), shared, lab.Workdir))
	cfg, err := configs.LoadFile(realAuthorCfg)
	if err != nil {
		t.Fatalf("%s: %v", realAuthorCfg, err)
	}
	checkRealAuthorConfig(t, cfg)
	x := &labCLI{bin: buildBinary(t), lab: lab, base: string(base), apiKey: cfg.PolicyModel.APIKey.Reveal()}

	t.Run("Scored", x.testAuthorScored)
	t.Run("NoEdit", x.testAuthorNoEdit)
	t.Run("MaxTurns", x.testAuthorMaxTurns)
	t.Run("PromptTooLong", x.testAuthorPromptTooLong)
	t.Run("LargeEdit", x.testAuthorLargeEdit)
	t.Run("EndpointDown", x.testAuthorEndpointDown)
}

// requireAuthorRoot fails t unless lab/up's author image root is current:
// Claude Code at the pinned version, nemorl-slurm and the policy stand-in
// built from this checkout's sources, the python shim, the sources.
func requireAuthorRoot(t *testing.T) {
	t.Helper()
	libVar := func(name string) string {
		out, err := exec.Command("bash", "-c", `. ../lab/lib.sh && printf %s "$`+name+`"`).Output()
		if err != nil || len(out) == 0 {
			t.Fatalf("lab/lib.sh %s: %v", name, err)
		}
		return string(out)
	}
	want := libVar("LAB_CLAUDE_VERSION")
	out, err := exec.Command(labImageRoot+"/bin/claude", "--version").Output()
	if got, _, _ := strings.Cut(string(out), " "); err != nil || got != want {
		t.Fatalf("%s/bin/claude --version: %q (%v), want %s: run lab/up", labImageRoot, out, err, want)
	}
	hash, err := exec.Command("bash", "-c", ". ../lab/lib.sh && lab_source_hash").Output()
	if err != nil {
		t.Fatalf("lab_source_hash: %v", err)
	}
	stamp, err := os.ReadFile(libVar("LAB_SOURCE_STAMP"))
	if err != nil || strings.TrimSpace(string(stamp)) != strings.TrimSpace(string(hash)) {
		t.Fatalf("nemorl-slurm in %s was built from other sources (stamp %q, now %q; %v): run lab/up", labBin, stamp, hash, err)
	}
	a, err1 := os.ReadFile(labBin + "/nemorl-slurm")
	b, err2 := os.ReadFile(labImageRoot + "/bin/nemorl-slurm")
	if err1 != nil || err2 != nil || !bytes.Equal(a, b) {
		t.Fatalf("%s/bin/nemorl-slurm is not lab/up's build (%v, %v): run lab/up", labImageRoot, err1, err2)
	}
	for _, p := range []string{labBin + "/policy-standin", labImageRoot + "/gym-venv/bin/python"} {
		if fi, err := os.Stat(p); err != nil || fi.Mode().Perm()&0o005 != 0o005 {
			t.Fatalf("%s: not there or not executable by the lab user (%v): run lab/up", p, err)
		}
	}
	for _, p := range []string{"src/recipe.yaml", "src/train_math.jsonl", "src/NeMo-RL/3rdparty/Gym-workspace/Gym/pyproject.toml"} {
		if _, err := os.Stat(filepath.Join(labImageRoot, p)); err != nil {
			t.Fatalf("stand-in source: %v: run lab/up", err)
		}
	}
}

// checkRealAuthorConfig: lab-real-author.yaml is configs/lab-none.yaml but for
// the author stage (built-in payload) and the policy model.
func checkRealAuthorConfig(t *testing.T, real *configs.Config) {
	t.Helper()
	lab, err := configs.LoadFile("../configs/lab-none.yaml")
	if err != nil {
		t.Fatalf("configs/lab-none.yaml: %v", err)
	}
	if len(real.Stages.Author.Command) != 0 {
		t.Errorf("%s: stages.author.command %q, want empty (the built-in payload)", realAuthorCfg, real.Stages.Author.Command)
	}
	if !strings.HasPrefix(real.PolicyModel.Model, "stand-in:") {
		t.Errorf("%s: policy_model.model %q, want stand-in:<mode>", realAuthorCfg, real.PolicyModel.Model)
	}
	if real.PolicyModel.APIKey.Reveal() != lab.PolicyModel.APIKey.Reveal() {
		t.Errorf("%s: policy_model.api_key differs from configs/lab-none.yaml's", realAuthorCfg)
	}
	for name, pair := range map[string][2]any{
		"cluster": {real.Cluster, lab.Cluster}, "runtime": {real.Runtime, lab.Runtime},
		"stages.train": {real.Stages.Train, lab.Stages.Train}, "stages.eval": {real.Stages.Eval, lab.Stages.Eval},
		"episodes": {real.Episodes, lab.Episodes},
	} {
		if !reflect.DeepEqual(pair[0], pair[1]) {
			t.Errorf("%s: %s differs from configs/lab-none.yaml's:\n%+v\n%+v", realAuthorCfg, name, pair[0], pair[1])
		}
	}
}

// modeConfig writes lab-real-author.yaml with the policy stand-in playing
// mode, and returns its path.
func (x *labCLI) modeConfig(t *testing.T, mode string) string {
	t.Helper()
	old := "\n  model: stand-in:edit"
	if n := strings.Count(x.base, old); n != 1 {
		t.Fatalf("%s: %d lines %q, want 1", realAuthorCfg, n, old)
	}
	p := filepath.Join(t.TempDir(), "lab-real-author.yaml")
	if err := os.WriteFile(p, []byte(strings.Replace(x.base, old, "\n  model: stand-in:"+mode, 1)), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// runMode runs one episode with the policy stand-in playing mode.
func (x *labCLI) runMode(t *testing.T, mode string, code int, timeout time.Duration) outcomeJSON {
	t.Helper()
	state, cfg, ep := t.TempDir(), x.modeConfig(t, mode), newEpisode(t, "author-"+mode)
	r := x.run(t, state, timeout, "run", "--config", cfg, "--json", "--episode", ep)
	t.Logf("run took %v", r.took.Round(time.Millisecond))
	if r.code != code {
		x.dumpAuthor(t, x.lab.Workdir+"/"+ep)
		t.Fatalf("exit %d, want %d\n%s", r.code, code, r)
	}
	o := outcomeOf(t, r)
	if o.Episode != ep || o.Isolation != "none" {
		t.Errorf("outcome episode %q isolation %q, want %s none", o.Episode, o.Isolation, ep)
	}
	return o
}

// dumpAuthor logs the author stage's logs of an episode directory.
func (x *labCLI) dumpAuthor(t *testing.T, dir string) {
	t.Helper()
	for _, f := range []string{"out.log", "proxy.log", "claude.log"} {
		b, err := os.ReadFile(filepath.Join(dir, "author", f))
		if len(b) > 8<<10 {
			b = b[len(b)-8<<10:]
		}
		t.Logf("author/%s (%v):\n%s", f, err, b)
	}
}

// authorRecord is the NEMORL_ENV_AUTHOR_RESULT record of author/out.log.
type authorRecord struct {
	PatchBytes     int64  `json:"patch_bytes"`
	FilesChanged   int    `json:"files_changed"`
	Turns          int    `json:"turns"`
	ExitStatus     int    `json:"exit_status"`
	TerminalReason string `json:"terminal_reason"`
	ModelCalls     int    `json:"model_calls"`
	DroppedEvents  int    `json:"dropped_events"`
}

func readAuthorRecord(t *testing.T, dir string) authorRecord {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, "author", "out.log"))
	if err != nil {
		t.Fatal(err)
	}
	var rec *authorRecord
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "NEMORL_ENV_AUTHOR_RESULT="); ok {
			rec = new(authorRecord)
			if err := json.Unmarshal([]byte(v), rec); err != nil {
				t.Fatalf("author record %q: %v", v, err)
			}
		}
	}
	if rec == nil {
		t.Fatalf("author/out.log has no NEMORL_ENV_AUTHOR_RESULT line:\n%s", b)
	}
	return *rec
}

// responseItem is one output item of response.json.
type responseItem struct {
	Type      string `json:"type"`
	Name      string `json:"name"`
	Arguments string `json:"arguments"`
	Role      string `json:"role"`
	Content   []struct {
		Text string `json:"text"`
	} `json:"content"`
}

// readResponse returns response.json's output items.
func readResponse(t *testing.T, dir string) []responseItem {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, "author", "response.json"))
	if err != nil {
		t.Fatalf("response.json: %v", err)
	}
	var r struct {
		Output []responseItem `json:"output"`
	}
	if err := json.Unmarshal(b, &r); err != nil {
		t.Fatalf("response.json: %v", err)
	}
	return r.Output
}

// calls lists the function calls' names.
func calls(items []responseItem) []string {
	var names []string
	for _, it := range items {
		if it.Type == "function_call" {
			names = append(names, it.Name)
		}
	}
	return names
}

// wantPatchOfRecipe fails t unless change.diff is a patch of recipe.yaml.
func wantPatchOfRecipe(t *testing.T, dir string) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, "author", "change.diff"))
	if err != nil || !bytes.Contains(b, []byte("diff --git a/recipe.yaml b/recipe.yaml")) {
		t.Errorf("change.diff does not patch recipe.yaml (%v):\n%.2000s", err, b)
	}
}

// wantNoSynthetic fails t if response.json holds a synthetic API-error text.
func wantNoSynthetic(t *testing.T, items []responseItem) {
	t.Helper()
	for _, it := range items {
		for _, c := range it.Content {
			if strings.HasPrefix(c.Text, "API Error") {
				t.Errorf("response.json holds Claude Code's synthetic message %q", c.Text)
			}
		}
	}
}

// testAuthorScored: the policy reads, edits recipe.yaml with Edit, runs a
// command, ends; the episode is scored, response.json holds the calls.
func (x *labCLI) testAuthorScored(t *testing.T) {
	t.Parallel()
	o := x.runMode(t, "edit", ExitOK, episodeTimeout)
	if o.Outcome != "scored" {
		x.dumpAuthor(t, o.Dir)
		t.Fatalf("outcome %s (%s: %s), want scored", o.Outcome, o.FailureReason, o.Detail)
	}
	wantJobs(t, o, allStates("COMPLETED", labStages...))
	items := readResponse(t, o.Dir)
	if got, want := calls(items), []string{"Bash", "Read", "Edit", "Bash"}; !reflect.DeepEqual(got, want) {
		t.Errorf("response.json function calls %q, want %q", got, want)
	}
	outputs := 0
	for _, it := range items {
		if it.Type == "function_call_output" {
			outputs++
		}
	}
	if outputs != 4 {
		t.Errorf("response.json has %d function_call_output items, want 4", outputs)
	}
	wantNoSynthetic(t, items)
	wantPatchOfRecipe(t, o.Dir)
	rec := readAuthorRecord(t, o.Dir)
	if rec.TerminalReason != "success" || rec.ModelCalls != 5 || rec.ExitStatus != 0 || rec.FilesChanged != 1 {
		t.Errorf("author record %+v, want success, 5 model calls, exit 0, 1 file", rec)
	}
	x.checkClusterDir(t, o.Episode, o)
}

// testAuthorNoEdit: the policy changes nothing: no_patch, nothing more runs.
func (x *labCLI) testAuthorNoEdit(t *testing.T) {
	t.Parallel()
	o := x.runMode(t, "no-edit", ExitOK, episodeTimeout)
	wantFailure(t, o, "policy_failure", "no_patch", "author")
	wantJobs(t, o, map[string]string{"author": "COMPLETED"})
	if got := calls(readResponse(t, o.Dir)); !reflect.DeepEqual(got, []string{"Bash"}) {
		t.Errorf("response.json function calls %q, want [Bash]", got)
	}
}

// testAuthorMaxTurns: the policy never stops; Claude Code ends at
// --max-turns, the patch so far is kept (the episode goes on to a score)
// and the record says max_turns.
func (x *labCLI) testAuthorMaxTurns(t *testing.T) {
	t.Parallel()
	o := x.runMode(t, "max-turns", ExitOK, episodeTimeout)
	rec := readAuthorRecord(t, o.Dir)
	if rec.TerminalReason != "max_turns" {
		t.Errorf("author record terminal_reason %q, want max_turns (%+v)", rec.TerminalReason, rec)
	}
	if rec.PatchBytes == 0 {
		t.Errorf("author record: patch_bytes 0, want the patch kept (%+v)", rec)
	}
	wantPatchOfRecipe(t, o.Dir)
	if o.Outcome != "scored" {
		x.dumpAuthor(t, o.Dir)
		t.Errorf("outcome %s (%s: %s), want scored (the patch is kept)", o.Outcome, o.FailureReason, o.Detail)
	}
}

// testAuthorPromptTooLong: the endpoint refuses the context after one
// edit: the patch is kept, the record says prompt_too_long.
func (x *labCLI) testAuthorPromptTooLong(t *testing.T) {
	t.Parallel()
	o := x.runMode(t, "prompt-too-long", ExitOK, episodeTimeout)
	rec := readAuthorRecord(t, o.Dir)
	if rec.TerminalReason != "prompt_too_long" || rec.PatchBytes == 0 {
		t.Errorf("author record %+v, want prompt_too_long and the patch kept", rec)
	}
	wantPatchOfRecipe(t, o.Dir)
	wantNoSynthetic(t, readResponse(t, o.Dir))
	if o.Outcome != "scored" {
		x.dumpAuthor(t, o.Dir)
		t.Errorf("outcome %s (%s: %s), want scored (the patch is kept)", o.Outcome, o.FailureReason, o.Detail)
	}
}

// testAuthorLargeEdit: an Edit of a ~17 MB file (one stream-json line over
// 16 MiB) is in response.json.
func (x *labCLI) testAuthorLargeEdit(t *testing.T) {
	t.Parallel()
	o := x.runMode(t, "large-edit", ExitOK, episodeTimeout)
	items := readResponse(t, o.Dir)
	found := false
	for _, it := range items {
		if it.Type == "function_call" && it.Name == "Edit" && strings.Contains(it.Arguments, "large.txt") &&
			strings.Contains(it.Arguments, "STAND-IN MARKER: edited by the policy stand-in") {
			found = true
		}
	}
	if !found {
		t.Errorf("response.json has no Edit call of large.txt; calls %q", calls(items))
	}
	if got, want := calls(items), []string{"Bash", "Read", "Edit"}; !reflect.DeepEqual(got, want) {
		t.Errorf("response.json function calls %q, want %q", got, want)
	}
	t.Logf("author record: %+v", readAuthorRecord(t, o.Dir))
	if o.Outcome != "scored" {
		x.dumpAuthor(t, o.Dir)
		t.Errorf("outcome %s (%s: %s), want scored", o.Outcome, o.FailureReason, o.Detail)
	}
}

// testAuthorEndpointDown: every model call fails with HTTP 500; Claude
// Code gives up after its retries. That is the operator's outage, never a
// policy 0: infra_failure (policy_endpoint_failed), exit 3.
func (x *labCLI) testAuthorEndpointDown(t *testing.T) {
	t.Parallel()
	o := x.runMode(t, "error500", ExitInfra, endpointDownTimeout)
	wantFailure(t, o, "infra_failure", "policy_endpoint_failed", "author")
	wantJobs(t, o, map[string]string{"author": "FAILED"})
	if _, err := os.Stat(filepath.Join(o.Dir, "author", "response.json")); err == nil {
		wantNoSynthetic(t, readResponse(t, o.Dir))
	}
}
