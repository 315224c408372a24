package configs

import (
	"fmt"
	"net"
	"net/url"
	"regexp"
	"strconv"
	"time"
)

// gymName is a server name in Gym's global config.
var gymName = regexp.MustCompile(`^[A-Za-z0-9_][A-Za-z0-9_-]{0,127}$`)

// Serve configures `nemorl-slurm serve`, the NeMo Gym agent endpoint.
type Serve struct {
	// Listen is the HTTP address (host:port); loopback unless a token is set.
	Listen string `yaml:"listen"`
	// Concurrency bounds the episodes in flight; further rows wait in
	// arrival order with their connections open.
	Concurrency int `yaml:"concurrency"`
	// Failures says how a masked outcome (infra_failure,
	// integrity_violation) is answered: "mask" (200 with
	// _ng_failure_class and instance_config.mask_sample) or "error"
	// (HTTP 500 with a JSON body, as the reference agent).
	Failures string `yaml:"failures"`
	// Token is the bearer token every request must carry; required when
	// Listen is not a loopback address.
	Token Secret `yaml:"token"`
	// GymHead is the URL of NeMo Gym's head server (http://HOST:PORT);
	// serve reads the policy endpoint from its GET /global_config_dict_yaml
	// (policy_base_url, policy_api_key, policy_model_name) where
	// policy_model leaves them out.
	GymHead string `yaml:"gym_head"`
	// ResendWindow is how long an outcome that never reached its caller
	// is kept for a re-send of its row (counted from the episode's end, or
	// from serve's start when later); past it the row gets a new episode.
	ResendWindow Duration `yaml:"resend_window"`
	// AgentName is the agent's name in the global config serve answers as
	// Gym's head server (GET /global_config_dict_yaml): rows name it in
	// agent_ref.name.
	AgentName string `yaml:"agent_name"`
	// GymConfig is a Gym config file (YAML, on this machine) whose keys the
	// head-server answer carries besides serve's own agent entry.
	GymConfig string `yaml:"gym_config"`
	// MixGPUTypes lets the clusters: entries name different GPU types in
	// their gres (gpu:h100:1 on one, gpu:a100:1 on another). Off (the
	// default) they must share one, named in every entry's gres: serve
	// places the rows of one GRPO step on every cluster, and an hour of
	// training on one GPU is not an hour on another. On, serve keeps the
	// rows of one _ng_task_index on one GPU type (serve/place.go).
	MixGPUTypes bool `yaml:"mix_gpu_types"`
}

// Serve defaults and the failures modes.
const (
	DefaultServeListen      = "127.0.0.1:8765"
	DefaultServeConcurrency = 4
	ServeFailuresMask       = "mask"
	ServeFailuresError      = "error"
	DefaultServeAgentName   = "nemorl_env"
	DefaultResendWindow     = time.Hour
)

func applyServeDefaults(c *Config, present func(string) bool) {
	s := &c.Serve
	if s.Listen == "" && !present("serve.listen") {
		s.Listen = DefaultServeListen
	}
	if s.Concurrency == 0 && !present("serve.concurrency") {
		s.Concurrency = DefaultServeConcurrency
	}
	if s.Failures == "" && !present("serve.failures") {
		s.Failures = ServeFailuresMask
	}
	if s.ResendWindow.Duration == 0 && !present("serve.resend_window") {
		s.ResendWindow.Duration = DefaultResendWindow
	}
	if s.AgentName == "" && !present("serve.agent_name") {
		s.AgentName = DefaultServeAgentName
	}
}

func (c *checker) serve(s Serve) {
	if err := CheckListen(s.Listen); err != nil {
		c.add("serve.listen", "%v", err)
	}
	c.rangeInt("serve.concurrency", s.Concurrency, 1, 16384)
	if s.Failures != ServeFailuresMask && s.Failures != ServeFailuresError {
		c.add("serve.failures", "want mask or error, got %q", s.Failures)
	}
	if s.GymHead != "" {
		u, err := url.Parse(s.GymHead)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || (u.Path != "" && u.Path != "/") || u.RawQuery != "" {
			c.add("serve.gym_head", "want the head server's http://HOST:PORT, got %q", s.GymHead)
		} else if u.User != nil {
			c.add("serve.gym_head", "must not carry credentials")
		}
	}
	if s.ResendWindow.Duration < 0 || s.ResendWindow.Duration > 7*24*time.Hour {
		c.add("serve.resend_window", "want 0s..168h, got %s", s.ResendWindow.Duration)
	}
	if !gymName.MatchString(s.AgentName) {
		c.add("serve.agent_name", "want a name of letters, digits, _ and -, got %q", s.AgentName)
	}
	if s.GymConfig != "" {
		c.localPath("serve.gym_config", s.GymConfig)
	}
	for _, r := range s.Token {
		if r <= ' ' || r == 0x7f {
			c.add("serve.token", "contains whitespace or a control character")
			break
		}
	}
}

// CheckListen checks a host:port listen address.
func CheckListen(addr string) error {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("want host:port such as %s, got %q", DefaultServeListen, addr)
	}
	if n, err := strconv.Atoi(port); err != nil || n < 0 || n > 65535 {
		return fmt.Errorf("want a port 0..65535, got %q", port)
	}
	_ = host
	return nil
}

// Loopback reports whether a listen address only accepts connections from
// this machine (127.0.0.0/8, ::1, localhost).
func Loopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}
