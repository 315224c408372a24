package cli

// serve driven as NeMo Gym's collector and NeMo RL drive it, through the
// built binary on the lab: the README's recipe (serve alone, standing as
// Gym's head server), two collections of the same rows, a malformed row
// among good ones, kill -9 of serve under an open collection, and NeMo
// RL's rows of two training steps with the same prompts.

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nemorl/nemorl-slurm/configs"
)

// readmeGymRecipe returns the +key=value arguments of the `gym eval run`
// command of docs/serve.md (moved there from the README), as written.
func readmeGymRecipe(t *testing.T) map[string]string {
	t.Helper()
	b, err := os.ReadFile("../docs/serve.md")
	if err != nil {
		t.Fatal(err)
	}
	text := string(b)
	i := strings.Index(text, "<!-- recipe: gym eval run -->")
	if i < 0 {
		t.Fatal("docs/serve.md has no <!-- recipe: gym eval run --> block")
	}
	block := text[i+len("<!-- recipe: gym eval run -->"):]
	start := strings.Index(block, "gym eval run")
	end := strings.Index(block[start:], "\n```")
	if start < 0 || end < 0 {
		t.Fatal("docs/serve.md: the recipe block has no gym eval run command")
	}
	cmd := strings.ReplaceAll(block[start:start+end], "\\\n", " ")
	args := map[string]string{}
	for _, f := range strings.Fields(cmd) {
		if k, v, ok := strings.Cut(strings.TrimPrefix(f, "+"), "="); ok && strings.HasPrefix(f, "+") {
			args[k] = v
		}
	}
	if !strings.Contains(cmd, "--no-serve") {
		t.Errorf("the README's recipe %q does not run Gym's collector alone (--no-serve)", cmd)
	}
	return args
}

func TestServeGymLab(t *testing.T) {
	t.Parallel() // with the package's other shared-lab tests, after its LockLab ones
	x := newLabCLI(t)
	requireStandIns(t)
	recipe := readmeGymRecipe(t)
	// The recipe names serve's default address as the head server and the
	// default agent name; the test's serve listens elsewhere.
	_, defPort, _ := strings.Cut(configs.DefaultServeListen, ":")
	if recipe["head_server.host"] != "127.0.0.1" || recipe["head_server.port"] != defPort || recipe["agent_name"] != configs.DefaultServeAgentName {
		t.Fatalf("README recipe %v: want +head_server.host=127.0.0.1 +head_server.port=%s +agent_name=%s", recipe, defPort, configs.DefaultServeAgentName)
	}
	if n, err := strconv.Atoi(recipe["num_repeats"]); err != nil || n < 1 {
		t.Fatalf("README recipe: num_repeats %q", recipe["num_repeats"])
	}
	cfg := x.serveConfig(t, "  concurrency: 4\n", "")
	state := t.TempDir()
	srv := x.startServe(t, state, cfg)
	u, _ := url.Parse(srv.url)
	head := "http://" + recipe["head_server.host"] + ":" + u.Port()
	agent := recipe["agent_name"]
	ctx, cancel := context.WithTimeout(context.Background(), 2*episodeTimeout)
	defer cancel()
	var episodes []string
	t.Cleanup(func() {
		for _, ep := range episodes {
			cleanupEpisode(t, ep)
		}
	})

	tag := randHex(t)
	row := func(statement string) string {
		return fmt.Sprintf(`{"responses_create_params": {"input": [{"role": "user", "content": %q}], "metadata": {"problem_statement": %q}}}`, statement, statement+" "+tag)
	}
	rows := []string{
		row("Improve post-training (gym A)."),
		row("LABMODE:eval-two-records"),
		`{"responses_create_params": {"input": 5}}`, // malformed
	}
	// One repeat each (the recipe's num_repeats multiplies the episodes
	// alike; the test keeps the lab's two CPUs to few of them).
	collect := func(name string) *gymCollection {
		t.Helper()
		c, err := gymCollect(ctx, head, agent, rows, 1)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		// The forged eval record is, without isolation (lab-none), the
		// policy's doing: a result with its 0, flagged; the malformed row a
		// terminal, masked failure.
		if len(c.Results) != 2 || len(c.Failures) != 1 {
			t.Fatalf("%s: %d results, %d failures, want 2 and 1: %v %v", name, len(c.Results), len(c.Failures), c.Results, c.Failures)
		}
		var scored, forged map[string]any
		for _, a := range c.Results {
			switch a["outcome"] {
			case "scored":
				scored = a
			case "policy_failure":
				forged = a
			}
		}
		if scored == nil || scored["mask_sample"] != false {
			t.Errorf("%s: the good row: %v", name, c.Results)
		}
		if forged == nil || forged["failure_reason"] != "duplicate_record" || forged["reward"] != 0.0 || forged["mask_sample"] != false || forged["tampering"] != true {
			t.Errorf("%s: the forged eval record: %v, want the policy's 0 (duplicate_record), flagged", name, forged)
		}
		if f := c.Failures[0]; str(f["_ng_failure_class"]) != "data_error/responses_create_params.input" || f["_ng_failure_terminal"] != true || f["mask_sample"] != true {
			t.Errorf("%s: failures %v, want data_error/responses_create_params.input, terminal and masked", name, c.Failures)
		}
		am, _ := c.Aggregate["agent_metrics"].(map[string]any)
		if am["num_rollouts"] != 2.0 || am["served/num_answers"] != 3.0 || am["served/num_masked"] != 1.0 || am["served/num_data_errors"] != 1.0 {
			t.Errorf("%s: /aggregate_metrics agent_metrics %v, want 2 rollouts from Gym and serve's own 3 answers, 1 masked, 1 data error", name, am)
		}
		for _, a := range append(append([]map[string]any{}, c.Results...), c.Failures...) {
			if ep := str(a["episode"]); ep != "" {
				episodes = append(episodes, ep)
			}
		}
		return c
	}
	epsOf := func(c *gymCollection) map[string]bool {
		m := map[string]bool{}
		for _, a := range append(append([]map[string]any{}, c.Results...), c.Failures...) {
			if ep := str(a["episode"]); ep != "" {
				m[ep] = true
			}
		}
		return m
	}

	// /aggregate_metrics of rows with 23 MiB patches (Gym sends each
	// row's patch): read as a stream, whatever the size.
	patch := strings.Repeat("+x\\n", 23<<20/4)
	var big strings.Builder
	big.WriteString(`{"verify_responses": [`)
	for i := range 3 {
		if i > 0 {
			big.WriteString(",")
		}
		big.WriteString(`{"reward": 0.25, "outcome": "scored", "aime25_avg_at_8": 0.25, "patch": "` + patch + `"}`)
	}
	big.WriteString(`]}`)
	if code, doc := srv.post(t, "/aggregate_metrics", big.String()); code != 200 {
		t.Errorf("/aggregate_metrics with three 23 MiB patches (%d MiB): HTTP %d %v", big.Len()>>20, code, doc)
	} else if am, _ := doc["agent_metrics"].(map[string]any); am["num_rollouts"] != 3.0 || am["mean/reward"] != 0.25 {
		t.Errorf("/aggregate_metrics with three 23 MiB patches: %v", am)
	}

	first := collect("collection 1")
	second := collect("collection 2 (the same rows, a new gym eval run)")
	e1, e2 := epsOf(first), epsOf(second)
	if len(e1) != 2 || len(e2) != 2 {
		t.Fatalf("episodes %v and %v, want two each", e1, e2)
	}
	for ep := range e2 {
		if e1[ep] {
			t.Errorf("the second collection got the first one's episode %s", ep)
		}
	}
	for _, a := range second.Results {
		if a["stored"] == true {
			t.Errorf("the second collection was answered from storage: %v", a)
		}
	}

	// kill -9 of serve under an open collection: Gym's client retries the
	// refused connection; the restarted serve re-attaches and the re-sent
	// row gets the same episode.
	rowE := []string{row("Improve post-training (gym E).")}
	type result struct {
		c   *gymCollection
		err error
	}
	done := make(chan result, 1)
	go func() {
		c, err := gymCollect(ctx, head, agent, rowE, 1)
		done <- result{c, err}
	}()
	known := []map[string]any{}
	for ep := range e1 {
		known = append(known, map[string]any{"episode": ep})
	}
	for ep := range e2 {
		known = append(known, map[string]any{"episode": ep})
	}
	epE := x.waitNewEpisode(t, state, known)
	episodes = append(episodes, epE)
	srv.kill(t)
	time.Sleep(2 * time.Second) // the client meets a refused connection
	srv = x.startServeAt(t, state, cfg, u.Host)
	r := <-done
	if r.err != nil {
		t.Fatalf("the collection across kill -9: %v", r.err)
	}
	if len(r.c.Results) != 1 || r.c.Results[0]["episode"] != epE || r.c.Results[0]["outcome"] != "scored" || r.c.Retries == 0 {
		t.Errorf("across kill -9: results %v (retries %d), want %s scored after a retry", r.c.Results, r.c.Retries, epE)
	}

	// NeMo RL: each training step sends the same prompts again, stamped
	// with the dataset's indices (the same every step) or only with _rowidx
	// (restarting every batch): every step is new episodes.
	nemoRL := func(statement string, stamped bool) string {
		params := fmt.Sprintf(`{"input": [{"role": "user", "content": %q}], "metadata": {"problem_statement": %q}, "temperature": 1.0, "top_p": 1.0, "max_output_tokens": 8192}`, statement, statement+" "+tag)
		if stamped {
			return `{"responses_create_params": ` + params + `, "agent_ref": {"name": "nemorl_env"}, "_rowidx": 0, "_ng_task_index": 3, "_ng_rollout_index": 0}`
		}
		return `{"responses_create_params": ` + params + `, "agent_ref": {"name": "nemorl_env"}, "_rowidx": 1}`
	}
	step := func(n int) []string {
		batch := []string{nemoRL("Improve post-training (nemo-rl S).", true), nemoRL("Improve post-training (nemo-rl U).", false)}
		got := make([]string, len(batch))
		errs := make(chan error, len(batch))
		for i, body := range batch {
			go func() {
				code, doc := srv.post(t, "/run", body)
				if code != 200 || doc["outcome"] != "scored" || doc["stored"] == true {
					errs <- fmt.Errorf("step %d row %d: HTTP %d %v", n, i, code, doc)
					return
				}
				got[i] = str(doc["episode"])
				errs <- nil
			}()
		}
		for range batch {
			if err := <-errs; err != nil {
				t.Error(err)
			}
		}
		episodes = append(episodes, got...)
		return got
	}
	s1, s2 := step(1), step(2)
	for i := range s1 {
		if s1[i] == "" || s1[i] == s2[i] {
			t.Errorf("NeMo RL row %d: step 1 episode %q, step 2 episode %q, want two episodes", i, s1[i], s2[i])
		}
	}

	// The episode that lived through kill -9 is one chain in Slurm.
	waitSacct(t, epE, sacctWant{states: allStates("COMPLETED", labStages...), tags: true})
}
