package serve

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"sort"
	"strings"
)

// Aggregate is the /aggregate_metrics answer (Gym's AggregateMetrics).
type Aggregate struct {
	GroupLevelMetrics []any          `json:"group_level_metrics"`
	AgentMetrics      map[string]any `json:"agent_metrics"`
	KeyMetrics        map[string]any `json:"key_metrics"`
}

// verifyResponse is what /aggregate_metrics reads of each rollout.
type verifyResponse struct {
	Reward        *float64 `json:"reward"`
	Outcome       string   `json:"outcome"`
	FailureReason string   `json:"failure_reason"`
	MaskSample    bool     `json:"mask_sample"`
	FailureClass  string   `json:"_ng_failure_class"`
	AIME25AvgAt8  *float64 `json:"aime25_avg_at_8"`
}

// aggregate computes the metrics of a collection's rollouts: the mean
// reward over the rows that count (neither masked nor failed in Gym's
// sense), the number of each outcome and failure reason.
func aggregate(rows []verifyResponse) Aggregate {
	outcomes, reasons := map[string]int{}, map[string]int{}
	var sum, sumAll, sumAIME float64
	counted, masked := 0, 0
	for _, r := range rows {
		o := r.Outcome
		if o == "" {
			o = "unknown"
		}
		outcomes[o]++
		if r.FailureReason != "" {
			reasons[r.FailureReason]++
		}
		rw := 0.0
		if r.Reward != nil {
			rw = *r.Reward
		}
		sumAll += rw
		if r.MaskSample || r.FailureClass != "" {
			masked++
			continue
		}
		counted++
		sum += rw
		if r.AIME25AvgAt8 != nil {
			sumAIME += *r.AIME25AvgAt8
		}
	}
	mean := func(s float64, n int) float64 {
		if n == 0 {
			return 0
		}
		return s / float64(n)
	}
	agent := map[string]any{
		"mean/reward":          mean(sum, counted),
		"mean/reward_all_rows": mean(sumAll, len(rows)),
		"mean/aime25_avg_at_8": mean(sumAIME, counted),
		"num_rollouts":         len(rows),
		"num_counted":          counted,
		"num_masked":           masked,
	}
	for k, n := range outcomes {
		agent["outcome/"+k] = n
	}
	for k, n := range reasons {
		agent["failure_reason/"+k] = n
	}
	key := map[string]any{
		"mean/reward":  mean(sum, counted),
		"num_rollouts": len(rows),
		"num_masked":   masked,
		"num_scored":   outcomes["scored"],
	}
	return Aggregate{GroupLevelMetrics: []any{}, AgentMetrics: agent, KeyMetrics: key}
}

func (s *Server) handleAggregate(w http.ResponseWriter, r *http.Request) {
	rows, rerr := decodeVerifyResponses(r.Body)
	if rerr != nil {
		s.badRequest(w, rerr)
		return
	}
	agg := aggregate(rows)
	served, err := s.log.sinceLastAggregate(s.opt.Now())
	if err != nil {
		s.logf("/aggregate_metrics: %v", err)
	} else {
		addServed(&agg, served)
	}
	_ = s.writeJSON(w, http.StatusOK, agg)
}

// addServed adds what serve answered since the previous aggregation, from
// its own records: Gym sends only the rows of its main file, never the
// masked ones it filed as failures.
func addServed(agg *Aggregate, served []answerLine) {
	masked, dataErrors := 0, 0
	outcomes, classes := map[string]int{}, map[string]int{}
	for _, a := range served {
		outcomes[a.Outcome]++
		if a.Class != "" {
			masked++
			classes[a.Class]++
		}
		if a.Outcome == OutcomeDataError {
			dataErrors++
		}
	}
	am := agg.AgentMetrics
	am["served/num_answers"] = len(served)
	am["served/num_masked"] = masked
	am["served/num_data_errors"] = dataErrors
	for k, n := range outcomes {
		am["served/outcome/"+k] = n
	}
	for k, n := range classes {
		am["served/failure_class/"+k] = n
	}
	agg.KeyMetrics["num_masked"] = max(masked, agg.KeyMetrics["num_masked"].(int))
	agg.KeyMetrics["num_served"] = len(served)
}

// decodeVerifyResponses reads {"verify_responses": [...]} as a stream,
// keeping of each rollout only the fields aggregate uses: a body of any
// size passes (Gym sends each row's patch, up to 32 MiB each); memory is
// bounded by the largest single rollout.
func decodeVerifyResponses(body io.Reader) ([]verifyResponse, *requestError) {
	dec := json.NewDecoder(body)
	delim := func(want json.Delim, field string) *requestError {
		t, err := dec.Token()
		if err != nil {
			return bad(field, "not JSON: %v", err)
		}
		if d, ok := t.(json.Delim); !ok || d != want {
			return bad(field, "want %q, got %v", string(want), t)
		}
		return nil
	}
	if e := delim('{', "body"); e != nil {
		return nil, e
	}
	var rows []verifyResponse
	found := false
	for dec.More() {
		t, err := dec.Token()
		if err != nil {
			return nil, bad("body", "not JSON: %v", err)
		}
		k, _ := t.(string)
		if k != "verify_responses" {
			var skip json.RawMessage
			if err := dec.Decode(&skip); err != nil {
				return nil, bad("body", "the value of %q is not JSON: %v", k, err)
			}
			continue
		}
		found = true
		if e := delim('[', "verify_responses"); e != nil {
			return nil, bad("verify_responses", "want a list")
		}
		for i := 0; dec.More(); i++ {
			var v verifyResponse
			if err := dec.Decode(&v); err != nil {
				return nil, bad(fmt.Sprintf("verify_responses[%d]", i), "want an object with a numeric reward: %v", err)
			}
			rows = append(rows, v)
		}
		if e := delim(']', "verify_responses"); e != nil {
			return nil, e
		}
	}
	if e := delim('}', "body"); e != nil {
		return nil, e
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, bad("body", "trailing data after the JSON object")
	}
	if !found {
		return nil, bad("verify_responses", "required")
	}
	return rows, nil
}

// handleMetrics writes the Prometheus text exposition format.
func (s *Server) handleMetrics(w http.ResponseWriter, r *http.Request) {
	var b strings.Builder
	metric := func(name, typ, help string) {
		fmt.Fprintf(&b, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, typ)
	}
	inFlight, queued := s.slots.counts()
	metric("nemorl_serve_episodes_in_flight", "gauge", "Episodes running (holding a slot of serve.concurrency).")
	fmt.Fprintf(&b, "nemorl_serve_episodes_in_flight %d\n", inFlight)
	metric("nemorl_serve_queue_length", "gauge", "Rows waiting for a slot, in arrival order.")
	fmt.Fprintf(&b, "nemorl_serve_queue_length %d\n", queued)

	byStage := map[string]int{}
	for _, row := range s.opt.Engine.Rows() {
		byStage[row.Stage+"|"+row.State]++
	}
	metric("nemorl_serve_episodes", "gauge", "Episodes followed, by current stage and Slurm state.")
	for _, k := range sortedKeys(byStage) {
		stage, state, _ := strings.Cut(k, "|")
		fmt.Fprintf(&b, "nemorl_serve_episodes{stage=%q,state=%q} %d\n", stage, state, byStage[k])
	}

	s.mu.Lock()
	outcomes := make(map[string]int64, len(s.outcomes))
	for k, n := range s.outcomes {
		outcomes[k[0]+"|"+k[1]] = n
	}
	answers := make(map[string]int64, len(s.answers))
	for c, n := range s.answers {
		answers[fmt.Sprint(c)] = n
	}
	attached := s.attached
	s.mu.Unlock()
	metric("nemorl_serve_outcomes_total", "counter", "Episodes ended, by outcome and failure reason.")
	for _, k := range sortedKeys(outcomes) {
		o, reason, _ := strings.Cut(k, "|")
		fmt.Fprintf(&b, "nemorl_serve_outcomes_total{outcome=%q,reason=%q} %d\n", o, reason, outcomes[k])
	}
	metric("nemorl_serve_run_answers_total", "counter", "/run answers, by HTTP status.")
	for _, k := range sortedKeys(answers) {
		fmt.Fprintf(&b, "nemorl_serve_run_answers_total{code=%q} %d\n", k, answers[k])
	}
	metric("nemorl_serve_attached_total", "counter", "/run requests that joined an episode already running for the same rollout.")
	fmt.Fprintf(&b, "nemorl_serve_attached_total %d\n", attached)

	st := s.opt.Engine.Stats()
	metric("nemorl_serve_sacct_polls_total", "counter", "Polls of the cluster (one sacct for every job in flight each).")
	fmt.Fprintf(&b, "nemorl_serve_sacct_polls_total %d\n", st.Polls)
	metric("nemorl_serve_sacct_poll_failures_total", "counter", "Polls that failed.")
	fmt.Fprintf(&b, "nemorl_serve_sacct_poll_failures_total %d\n", st.PollFailures)
	metric("nemorl_serve_sacct_poll_seconds", "gauge", "Duration of the last poll (sacct and advancing the episodes).")
	fmt.Fprintf(&b, "nemorl_serve_sacct_poll_seconds %g\n", st.LastPoll.Seconds())
	metric("nemorl_serve_sacct_poll_seconds_total", "counter", "Time spent polling.")
	fmt.Fprintf(&b, "nemorl_serve_sacct_poll_seconds_total %g\n", st.PollSeconds)
	if s.opt.Reconnects != nil {
		metric("nemorl_serve_ssh_reconnects_total", "counter", "Reconnections of the SSH connection to the cluster.")
		fmt.Fprintf(&b, "nemorl_serve_ssh_reconnects_total %d\n", s.opt.Reconnects())
	}
	if s.opt.RemoteOps != nil {
		ops := s.opt.RemoteOps()
		metric("nemorl_serve_remote_commands_total", "counter", "Commands run on the cluster, by program.")
		for _, k := range sortedKeys(ops) {
			if prog, ok := strings.CutPrefix(k, "run "); ok {
				fmt.Fprintf(&b, "nemorl_serve_remote_commands_total{program=%q} %d\n", prog, ops[k])
			}
		}
		metric("nemorl_serve_remote_file_operations_total", "counter", "File operations on the cluster (SFTP requests over SSH), by kind.")
		for _, k := range sortedKeys(ops) {
			if !strings.HasPrefix(k, "run ") {
				fmt.Fprintf(&b, "nemorl_serve_remote_file_operations_total{op=%q} %d\n", k, ops[k])
			}
		}
	}
	w.Header().Set("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
	_, _ = w.Write([]byte(s.redact(b.String())))
}

func sortedKeys[V any](m map[string]V) []string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return ks
}
