package serve

import (
	"encoding/json"
	"errors"
	"net/http"
	"time"

	"github.com/nemorl/nemorl-slurm/configs"
	"github.com/nemorl/nemorl-slurm/episode"
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
	Reward        float64 `json:"reward"`
	AIME25Exact   float64 `json:"aime25_exact"`
	AIME25AvgAt8  float64 `json:"aime25_avg_at_8"`
	TrainReward   float64 `json:"train_reward"`
	Completed     int     `json:"completed"`
	InnerSteps    int     `json:"inner_steps"`
	WandbURL      string  `json:"wandb_url"`
	Patch         string  `json:"patch"`
	FailureReason string  `json:"failure_reason"`

	Episode      string                        `json:"episode"`
	Outcome      string                        `json:"outcome"`
	FailureStage string                        `json:"failure_stage"`
	MaskSample   bool                          `json:"mask_sample"`
	Jobs         map[string]episode.JobSummary `json:"jobs"`
	Isolation    string                        `json:"isolation"`
	Detail       string                        `json:"detail,omitempty"`
	Tampering    bool                          `json:"tampering,omitempty"`
	// Stored: the row was answered from an earlier episode of the same
	// rollout (a re-sent row), not a new one.
	Stored bool `json:"stored,omitempty"`

	FailureClass    string          `json:"_ng_failure_class,omitempty"`
	FailureTerminal bool            `json:"_ng_failure_terminal,omitempty"`
	InstanceConfig  *InstanceConfig `json:"instance_config,omitempty"`
	// Error is set on HTTP 500 (serve.failures: error) and 503.
	Error string `json:"error,omitempty"`
}

// InstanceConfig tells NeMo RL to drop the sample from the loss.
type InstanceConfig struct {
	MaskSample bool `json:"mask_sample"`
}

// answer writes the row's answer: the episode's outcome (final), or a
// failure before any episode existed (err).
func (s *Server) answer(w http.ResponseWriter, r *http.Request, rw *row, final *episode.Entry, err error, stored bool) {
	resp := RunResponse{ResponsesCreateParams: rw.params, Jobs: map[string]episode.JobSummary{}, Stored: stored}
	switch {
	case errors.Is(err, errClosed):
		s.count(http.StatusServiceUnavailable)
		resp.Error = "the server is shutting down; a running episode goes on and a re-sent row attaches to it on the next start"
		s.writeJSON(w, http.StatusServiceUnavailable, resp)
		return
	case err != nil:
		resp.Outcome = string(episode.InfraFailure)
		resp.FailureReason, resp.FailureStage = "submit_failed", "submit"
		resp.MaskSample, resp.Detail = true, err.Error()
		resp.Isolation = s.d.Config.Runtime.Kind
		if resp.Isolation != configs.RuntimeNone {
			resp.Isolation = "apptainer"
		}
	default:
		o := final.Outcome
		resp.Episode, resp.Outcome = final.Episode, string(o.Outcome)
		resp.FailureReason, resp.FailureStage, resp.Detail = o.FailureReason, o.FailureStage, o.Detail
		resp.MaskSample, resp.Tampering, resp.Isolation = o.MaskSample, o.Tampering, o.Isolation
		resp.Completed, resp.WandbURL = o.Completed, o.WandbURL
		resp.Jobs = o.Jobs
		if o.Reward != nil {
			resp.Reward = *o.Reward
		}
		resp.AIME25Exact = deref(o.AIME25Exact)
		resp.AIME25AvgAt8 = deref(o.AIME25AvgAt8)
		resp.TrainReward = deref(o.TrainReward)
		if o.InnerSteps != nil {
			resp.InnerSteps = *o.InnerSteps
		}
		response, patch, problems, rerr := s.d.AuthorFiles(r.Context(), final)
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
	masked := resp.Outcome == string(episode.InfraFailure) || resp.Outcome == string(episode.IntegrityViolation)
	if masked {
		resp.Reward = 0
		resp.MaskSample = true
		resp.FailureClass = resp.Outcome + "/" + resp.FailureReason
		resp.FailureTerminal = resp.Outcome == string(episode.IntegrityViolation)
		resp.InstanceConfig = &InstanceConfig{MaskSample: true}
		if s.opt.Failures == configs.ServeFailuresError {
			resp.Error = resp.FailureClass + ": no reward (" + resp.Detail + ")"
			s.count(http.StatusInternalServerError)
			s.writeJSON(w, http.StatusInternalServerError, resp)
			return
		}
	}
	s.count(http.StatusOK)
	s.writeJSON(w, http.StatusOK, resp)
}

func deref(p *float64) float64 {
	if p == nil {
		return 0
	}
	return *p
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
		"model": s.d.Config.PolicyModel.Model, "output": []any{}, "parallel_tool_calls": false,
		"tool_choice": "auto", "tools": []any{},
	})
	return b
}
