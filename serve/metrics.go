package serve

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"time"
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
	// A caller asks for the metrics once it has its answers; an answer's
	// line is logged right after it is written: wait for those in flight.
	s.waitDeliveries(5 * time.Second)
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

// waitDeliveries waits until no answer is being written, at most limit
// (a caller that stopped reading holds its answer's write).
func (s *Server) waitDeliveries(limit time.Duration) {
	deadline := time.Now().Add(limit)
	for s.delivering.Load() > 0 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
}
