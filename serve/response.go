package serve

import (
	"bytes"
	"encoding/json"
	"errors"
	"net/http"
	"time"

	"github.com/nemorl/nemorl-slurm/configs"
	"github.com/nemorl/nemorl-slurm/ledger"
	"github.com/nemorl/nemorl-slurm/rules"
	"github.com/nemorl/nemorl-slurm/stages"
)

// Gym's failure-routing keys (nemo_gym/rollout_collection.py): a row with
// _ng_failure_class goes to the failures file, not the scores, and is
// retried on resume unless _ng_failure_terminal.
const (
	ngFailureClass    = "_ng_failure_class"
	ngFailureTerminal = "_ng_failure_terminal"
)

// RunResponse is the /run answer: the fields of nemorl_env's
// NeMoRLEnvResponse, then ours.
type RunResponse struct {
	ResponsesCreateParams json.RawMessage `json:"responses_create_params"`
	Response              json.RawMessage `json:"response"`
	// Reward is the episode's reward; 0.0 on a masked row (the field is a
	// float in Gym's model; _ng_failure_class and mask_sample keep it out
	// of every score and loss).
	Reward        Float  `json:"reward"`
	AIME25Exact   Float  `json:"aime25_exact"`
	AIME25AvgAt8  Float  `json:"aime25_avg_at_8"`
	TrainReward   Float  `json:"train_reward"`
	Completed     int    `json:"completed"`
	InnerSteps    int    `json:"inner_steps"`
	WandbURL      string `json:"wandb_url"`
	Patch         string `json:"patch"`
	FailureReason string `json:"failure_reason"`

	Episode      string                            `json:"episode"`
	Outcome      string                            `json:"outcome"`
	FailureStage string                            `json:"failure_stage"`
	MaskSample   bool                              `json:"mask_sample"`
	Jobs         map[stages.Stage]rules.JobSummary `json:"jobs"`
	Isolation    string                            `json:"isolation"`
	Detail       string                            `json:"detail,omitempty"`
	Tampering    bool                              `json:"tampering,omitempty"`
	// Stored: the row was answered from an earlier episode of the same
	// rollout (a re-sent row), not a new one.
	Stored bool `json:"stored,omitempty"`

	FailureClass    string `json:"_ng_failure_class,omitempty"`
	FailureTerminal bool   `json:"_ng_failure_terminal,omitempty"`
	// NoPersist: Gym writes the answer nowhere and dispatches the row
	// again on resume (an answer cut short by serve's own shutdown).
	NoPersist      bool            `json:"_ng_no_persist,omitempty"`
	InstanceConfig *InstanceConfig `json:"instance_config,omitempty"`
	// Error is set on HTTP 500 (serve.failures: error) and 503, and on a
	// malformed row (data_error), with Field naming what is wrong.
	Error string `json:"error,omitempty"`
	Field string `json:"field,omitempty"`
}

// Float is a float64 that JSON always writes as a number with a fraction
// or an exponent (0.0, not 0): Gym's and NeMo RL's readers see a float
// whatever its value.
type Float float64

// MarshalJSON writes f as encoding/json would, with ".0" added to an
// integral value.
func (f Float) MarshalJSON() ([]byte, error) {
	b, err := json.Marshal(float64(f))
	if err != nil {
		return nil, err
	}
	if !bytes.ContainsAny(b, ".eE") {
		b = append(b, '.', '0')
	}
	return b, nil
}

// InstanceConfig tells NeMo RL to drop the sample from the loss.
type InstanceConfig struct {
	MaskSample bool `json:"mask_sample"`
}

// ending is how a row's run ended: its episode's final entry, or a
// failure before any episode existed (err); stored when the entry is one
// a re-send of the row found on record.
type ending struct {
	final  *ledger.Entry
	err    error
	stored bool
}

// answer writes the row's answer: the episode's outcome, or the failure
// before any episode existed.
func (s *Server) answer(w http.ResponseWriter, r *http.Request, rw *row, key string, end ending) {
	final, err := end.final, end.err
	resp := RunResponse{ResponsesCreateParams: rw.params, Jobs: map[stages.Stage]rules.JobSummary{}, Stored: end.stored}
	switch {
	case errors.Is(err, errClosed):
		const msg = "the server is shutting down; a running episode goes on and a re-sent row attaches to it on the next start"
		if s.opt.Failures == configs.ServeFailuresError {
			s.count(http.StatusServiceUnavailable)
			resp.Error = msg
			resp.Response = s.placeholderResponse("")
			_ = s.writeJSON(w, http.StatusServiceUnavailable, resp)
			return
		}
		// Gym's collector aborts on a non-2xx /run: a 200 that it stores
		// nowhere (_ng_no_persist), so that resume dispatches the row
		// again, masked for a caller that reads it anyway.
		resp.Outcome = string(rules.InfraFailure)
		resp.FailureReason, resp.FailureStage = rules.ReasonServeShutdown, "serve"
		resp.MaskSample, resp.Detail = true, msg
		resp.Isolation = s.isolation()
		resp.NoPersist = true
		resp.Response = s.placeholderResponse("")
		resp.FailureClass = resp.Outcome + "/" + resp.FailureReason
		resp.InstanceConfig = &InstanceConfig{MaskSample: true}
		s.count(http.StatusOK)
		_ = s.writeJSON(w, http.StatusOK, resp)
		return
	case err != nil:
		resp.Outcome = string(rules.InfraFailure)
		resp.FailureReason, resp.FailureStage = rules.ReasonSubmitFailed, "submit"
		resp.MaskSample, resp.Detail = true, err.Error()
		resp.Isolation = s.isolation()
	default:
		o := final.Outcome
		resp.Episode, resp.Outcome = final.Episode, string(o.Outcome)
		resp.FailureReason, resp.FailureStage, resp.Detail = o.FailureReason, string(o.FailureStage), o.Detail
		resp.MaskSample, resp.Tampering, resp.Isolation = o.MaskSample, o.Tampering, o.Isolation
		resp.Completed, resp.WandbURL = o.Completed, o.WandbURL
		resp.Jobs = o.Jobs
		if o.Reward != nil {
			resp.Reward = Float(*o.Reward)
		}
		resp.AIME25Exact = deref(o.AIME25Exact)
		resp.AIME25AvgAt8 = deref(o.AIME25AvgAt8)
		resp.TrainReward = deref(o.TrainReward)
		if o.InnerSteps != nil {
			resp.InnerSteps = *o.InnerSteps
		}
		run := s.clusters[0].Runner
		if c := s.clusterOf(final); c != nil {
			run = c.Runner // the files are on the episode's cluster
		}
		response, patch, problems, rerr := run.AuthorFiles(r.Context(), final)
		if rerr != nil {
			s.logf("%s: reading the author's files: %v", final.Episode, rerr)
		}
		for _, p := range problems {
			s.logf("%s: %s", final.Episode, p)
		}
		if response != nil && json.Valid(response) {
			resp.Response = response
		}
		resp.Patch = string(patch)
	}
	if resp.Response == nil {
		resp.Response = s.placeholderResponse(resp.Episode)
	}
	status := http.StatusOK
	masked := resp.Outcome == string(rules.InfraFailure) || resp.Outcome == string(rules.IntegrityViolation)
	if masked {
		resp.Reward = 0
		resp.MaskSample = true
		resp.FailureClass = resp.Outcome + "/" + resp.FailureReason
		resp.FailureTerminal = resp.Outcome == string(rules.IntegrityViolation)
		resp.InstanceConfig = &InstanceConfig{MaskSample: true}
		if s.opt.Failures == configs.ServeFailuresError {
			resp.Error = resp.FailureClass + ": no reward (" + resp.Detail + ")"
			status = http.StatusInternalServerError
		}
	}
	s.deliver(w, key, status, &resp)
}

// deliver writes an answer that carries an outcome. For a row with a
// rollout identity, the delivery is on record (durably) before the first
// byte is written and taken back if the answer did not reach the
// connection in full: an outcome is never handed out twice for two
// requests, at the price that an answer cut by a crash between the two
// steps costs the row a new episode rather than a stale reward.
func (s *Server) deliver(w http.ResponseWriter, key string, status int, resp *RunResponse) {
	s.delivering.Add(1)
	defer s.delivering.Add(-1)
	now := s.opt.Now()
	onRecord := false
	if key != "" && resp.Episode != "" {
		if err := s.keys.deliver(key, resp.Episode, now); err != nil {
			// Not on record: forget the mapping instead, so that this
			// outcome can never answer a later request.
			s.logf("%s: recording the delivery: %v; the row's next request gets a new episode", resp.Episode, err)
			s.keys.drop(key, resp.Episode)
		} else {
			onRecord = true
		}
	}
	s.count(status)
	err := s.writeJSON(w, status, resp)
	if err != nil {
		s.logf("/run: %s: the answer did not reach the caller (%v); a re-send of the row gets it", orPending(resp.Episode), err)
		if onRecord {
			if err := s.keys.deliver(key, resp.Episode, time.Time{}); err != nil {
				s.logf("%s: taking back the delivery: %v", resp.Episode, err)
			}
		}
		return
	}
	if err := s.log.add(answerLine{At: now, Kind: "answer", Episode: resp.Episode, Outcome: resp.Outcome,
		Reason: resp.FailureReason, Class: resp.FailureClass, Status: status}); err != nil {
		s.logf("%v", err)
	}
}

// dataError answers a row that cannot be run (serve.failures: mask): 200,
// masked, with the terminal failure class data_error/<field> so that Gym
// files it with its failures and never retries it, and NeMo RL drops it.
func (s *Server) dataError(w http.ResponseWriter, body []byte, rw *row, rerr *requestError) {
	resp := RunResponse{Jobs: map[stages.Stage]rules.JobSummary{}, Outcome: OutcomeDataError,
		FailureReason: rules.ReasonDataError, FailureStage: "request", MaskSample: true,
		Detail: rerr.Error(), Error: rerr.Error(), Field: rerr.field, Isolation: s.isolation(),
		FailureClass: OutcomeDataError + "/" + rerr.field, FailureTerminal: true, InstanceConfig: &InstanceConfig{MaskSample: true}}
	resp.ResponsesCreateParams = json.RawMessage("{}")
	if rw != nil {
		resp.ResponsesCreateParams = rw.params
	} else if top, e := decodeObject(body, "body"); e == nil {
		var m map[string]json.RawMessage
		if p, ok := top[keyParams]; ok && json.Unmarshal(p, &m) == nil && m != nil {
			resp.ResponsesCreateParams = p
		}
	}
	resp.Response = s.placeholderResponse("")
	s.deliver(w, "", http.StatusOK, &resp)
}

// OutcomeDataError is the outcome of a /run row that never became an
// episode because it is malformed (serve.failures: mask); its failure
// reason is the same word (rules.ReasonDataError).
const OutcomeDataError = rules.ReasonDataError

func (s *Server) isolation() string {
	if s.opt.Config.Runtime.Kind == configs.RuntimeNone {
		return configs.RuntimeNone
	}
	return "apptainer"
}

func deref(p *float64) Float {
	if p == nil {
		return 0
	}
	return Float(*p)
}

// placeholderResponse is the Responses object of a row whose author left
// no readable response.json: empty output, status incomplete.
func (s *Server) placeholderResponse(ep string) json.RawMessage {
	id := "resp_nemorl_none"
	if ep != "" {
		id = "resp_nemorl_" + ep
	}
	b, _ := json.Marshal(map[string]any{
		"id": id, "object": "response", "created_at": time.Now().Unix(), "status": "incomplete",
		"model": s.opt.Config.PolicyModel.Model, "output": []any{}, "parallel_tool_calls": false,
		"tool_choice": "auto", "tools": []any{},
	})
	return b
}
