package serve

// Reading the policy endpoint from NeMo Gym's head server. Gym (and NeMo
// RL, which starts Gym with the URLs of its own vLLM servers) keeps the
// policy endpoint in its global config: policy_base_url (one URL, or a list
// with one per data-parallel rank), policy_api_key and policy_model_name.
// The head server answers GET /global_config_dict_yaml with that config as
// YAML text, JSON-encoded as a string (a FastAPI str response); plain YAML
// is accepted too.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/nemorl/nemorl-slurm/configs"
)

// MaxGymConfigBytes bounds the head server's answer.
const MaxGymConfigBytes = 8 << 20

// GymPolicy is the policy endpoint as Gym's global config gives it.
type GymPolicy struct {
	BaseURLs []string
	APIKey   string
	Model    string
	// UsesReasoningParser is read from the policy_model server entry
	// (policy_model.responses_api_models.<impl>.uses_reasoning_parser),
	// when there is one.
	UsesReasoningParser *bool
}

// FetchGymPolicy reads the policy endpoint from the head server at head
// (http://HOST:PORT) once.
func FetchGymPolicy(ctx context.Context, client *http.Client, head string) (*GymPolicy, error) {
	u := strings.TrimSuffix(head, "/") + "/global_config_dict_yaml"
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return nil, fmt.Errorf("gym head %s: %w", u, err)
	}
	resp, err := client.Do(req)
	if err != nil {
		return nil, fmt.Errorf("gym head: %w", err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, MaxGymConfigBytes+1))
	if err != nil {
		return nil, fmt.Errorf("gym head %s: read: %w", u, err)
	}
	if resp.StatusCode >= 400 && resp.StatusCode < 500 {
		// Not a head server starting up: a wrong address.
		return nil, configErr("gym head %s: HTTP %d: %s (is serve.gym_head the head server's host:port, 11000 by default?)", u, resp.StatusCode, trim(body, 200))
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("gym head %s: HTTP %d: %s", u, resp.StatusCode, trim(body, 200))
	}
	if len(body) > MaxGymConfigBytes {
		return nil, fmt.Errorf("gym head %s: the config is over %d MiB", u, MaxGymConfigBytes>>20)
	}
	p, err := ParseGymConfig(body)
	if err != nil {
		return nil, fmt.Errorf("gym head %s: %w", u, err)
	}
	return p, nil
}

// WaitGymPolicy retries FetchGymPolicy until the head server answers with
// a usable config or ctx ends: serve may start before Gym does. A config
// that answers but lacks the policy is returned as an error at once.
func WaitGymPolicy(ctx context.Context, head string, logf func(string, ...any)) (*GymPolicy, error) {
	client := &http.Client{Timeout: 10 * time.Second}
	start := time.Now()
	var lastLog time.Time
	for {
		p, err := FetchGymPolicy(ctx, client, head)
		var bad *GymConfigError
		if err == nil || errors.As(err, &bad) {
			return p, err
		}
		if ctx.Err() != nil {
			return nil, fmt.Errorf("waiting for the gym head server %s: %w (last: %v)", head, ctx.Err(), err)
		}
		if time.Since(lastLog) >= 10*time.Second {
			logf("serve: waiting for the gym head server %s (%s so far): %v", head, time.Since(start).Round(time.Second), err)
			lastLog = time.Now()
		}
		select {
		case <-ctx.Done():
		case <-time.After(time.Second):
		}
	}
}

// GymConfigError is a head server's config that does not give the policy.
type GymConfigError struct{ Msg string }

func (e *GymConfigError) Error() string { return e.Msg }

func configErr(format string, args ...any) error {
	return &GymConfigError{Msg: fmt.Sprintf(format, args...)}
}

// ParseGymConfig reads the policy from a /global_config_dict_yaml body.
func ParseGymConfig(body []byte) (*GymPolicy, error) {
	text := body
	var s string
	if json.Unmarshal(body, &s) == nil {
		text = []byte(s)
	}
	var doc map[string]any
	if err := yaml.Unmarshal(text, &doc); err != nil {
		return nil, configErr("the global config is not YAML: %v", err)
	}
	if doc == nil {
		return nil, configErr("the global config is empty")
	}
	p := &GymPolicy{}
	switch v := doc["policy_base_url"].(type) {
	case string:
		p.BaseURLs = []string{v}
	case []any:
		for i, x := range v {
			s, ok := x.(string)
			if !ok {
				return nil, configErr("policy_base_url[%d]: want a URL, got %T", i, x)
			}
			p.BaseURLs = append(p.BaseURLs, s)
		}
	case nil:
	default:
		return nil, configErr("policy_base_url: want a URL or a list of URLs, got %T", v)
	}
	var err error
	if p.APIKey, err = optString(doc, "policy_api_key"); err != nil {
		return nil, err
	}
	if p.Model, err = optString(doc, "policy_model_name"); err != nil {
		return nil, err
	}
	for i, u := range p.BaseURLs {
		if strings.Contains(u, "${") {
			return nil, configErr("policy_base_url[%d] is an unresolved interpolation %q; set policy_model.base_url in the config", i, u)
		}
	}
	for k, v := range map[string]string{"policy_api_key": p.APIKey, "policy_model_name": p.Model} {
		if strings.Contains(v, "${") {
			return nil, configErr("%s is an unresolved interpolation; set it in the config's policy_model", k)
		}
	}
	// policy_model: {responses_api_models: {<impl>: {uses_reasoning_parser: …}}}
	if pm, ok := doc["policy_model"].(map[string]any); ok {
		if models, ok := pm["responses_api_models"].(map[string]any); ok {
			for _, m := range models {
				if mm, ok := m.(map[string]any); ok {
					if b, ok := mm["uses_reasoning_parser"].(bool); ok {
						p.UsesReasoningParser = &b
					}
				}
			}
		}
	}
	return p, nil
}

func optString(doc map[string]any, key string) (string, error) {
	switch v := doc[key].(type) {
	case nil:
		return "", nil
	case string:
		return v, nil
	default:
		return "", configErr("%s: want a string, got %T", key, v)
	}
}

// Fill sets the policy_model keys the config leaves out from p and checks
// the result; it returns the keys it filled.
func (p *GymPolicy) Fill(cfg *configs.Config, head string) ([]string, error) {
	pm := &cfg.PolicyModel
	var filled []string
	if len(pm.BaseURL) == 0 && len(p.BaseURLs) > 0 {
		pm.BaseURL = configs.URLs(p.BaseURLs)
		filled = append(filled, "base_url")
	}
	if pm.APIKey == "" && cfg.SecretUnset == "" && p.APIKey != "" {
		pm.APIKey = configs.Secret(p.APIKey)
		filled = append(filled, "api_key")
	}
	if pm.Model == "" && p.Model != "" {
		pm.Model = p.Model
		filled = append(filled, "model")
	}
	if pm.UsesReasoningParser == nil && p.UsesReasoningParser != nil {
		v := *p.UsesReasoningParser
		pm.UsesReasoningParser = &v
		filled = append(filled, "uses_reasoning_parser")
	}
	if err := configs.CheckPolicyModel(cfg, cfg.Source+" with the gym head server "+head); err != nil {
		return filled, err
	}
	return filled, nil
}

func trim(b []byte, n int) string {
	s := strings.TrimSpace(string(b))
	if len(s) > n {
		s = s[:n] + "…"
	}
	return s
}

// Serve standing as Gym's head server. `gym eval run --no-serve` (Gym's
// collector alone) needs a head server to resolve the agent's address:
// ServerClient.load_from_global_config reads GET /global_config_dict_yaml
// from head_server.{host,port} and then looks the agent up as
// global_config[name][server_type][impl].{host,port}. serve answers that
// endpoint itself with its own agent entry, so the collector and serve are
// all a collection needs.

// HeadConfig is what serve answers as Gym's head server.
type HeadConfig struct {
	// AgentName is the agent's key (serve.agent_name): rows name it in
	// agent_ref.name.
	AgentName string
	// Gym is the rest of the Gym config (serve.gym_config), or nil.
	Gym map[string]any
	// Addr returns serve's listen address (host:port) once it listens.
	Addr func() string
}

// LoadGymConfig reads serve.gym_config: one YAML mapping.
func LoadGymConfig(path string) (map[string]any, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("serve.gym_config: %w", err)
	}
	var doc map[string]any
	if err := yaml.Unmarshal(b, &doc); err != nil {
		return nil, fmt.Errorf("serve.gym_config: %s: %w", path, err)
	}
	if doc == nil {
		return nil, fmt.Errorf("serve.gym_config: %s: want a YAML mapping of Gym's config keys, got nothing", path)
	}
	return doc, nil
}

// Document is the global config as the head server gives it: the Gym
// config with head_server and the agent entry set to serve's address.
func (h *HeadConfig) Document() (map[string]any, error) {
	host, portStr, err := net.SplitHostPort(h.Addr())
	if err != nil {
		return nil, fmt.Errorf("serve's address %q: %w", h.Addr(), err)
	}
	if ip := net.ParseIP(host); host == "" || (ip != nil && ip.IsUnspecified()) {
		host = "127.0.0.1"
	}
	port, err := strconv.Atoi(portStr)
	if err != nil {
		return nil, fmt.Errorf("serve's port %q: %w", portStr, err)
	}
	doc := make(map[string]any, len(h.Gym)+2)
	for k, v := range h.Gym {
		doc[k] = v
	}
	doc["head_server"] = map[string]any{"host": host, "port": port}
	doc[h.AgentName] = map[string]any{"responses_api_agents": map[string]any{
		"nemorl_env": map[string]any{"host": host, "port": port}}}
	return doc, nil
}

// handleHead answers GET /global_config_dict_yaml as Gym's head server
// does: the YAML text of the global config, as a JSON string.
func (s *Server) handleHead(w http.ResponseWriter, r *http.Request) {
	doc, err := s.opt.Head.Document()
	if err != nil {
		_ = s.writeJSON(w, http.StatusInternalServerError, map[string]string{"error": err.Error()})
		return
	}
	y, err := yaml.Marshal(doc)
	if err != nil {
		_ = s.writeJSON(w, http.StatusInternalServerError, map[string]string{"error": "encoding the global config: " + err.Error()})
		return
	}
	_ = s.writeJSON(w, http.StatusOK, string(y))
}
