package cli

// gymCollect is a STAND-IN for NeMo Gym's rollout collection (`gym eval
// run --no-serve`, nemo_gym/rollout_collection.py with its ServerClient),
// written from what that code does, for the lab tests of serve. It is not
// Gym: it proves serve answers what Gym's collector asks, in the way it
// asks it, as far as these facts go:
//   - the agent's address comes from the head server: GET
//     head_server/global_config_dict_yaml, a JSON string holding YAML, and
//     global_config[agent][server_type][impl].{host,port}, the first entry
//     two levels down;
//   - rows get agent_ref {"name": agent} when they have none,
//     _ng_task_index by first appearance of the row's JSON text (identical
//     rows share one), and _ng_rollout_index 0..num_repeats-1 per task;
//   - each row is POSTed whole to /run with only Content-Type, no timeout;
//     a refused or dropped connection is retried every 0.5 s (Gym does so
//     for ever; here until ctx ends); any non-2xx answer aborts the whole
//     collection;
//   - an answer with _ng_failure_class goes to the failures file, every
//     other one to the main file, with the row's indices;
//   - at the end, /aggregate_metrics gets {"verify_responses": [...]} with
//     the main file's rows, response and responses_create_params dropped.

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync"
	"syscall"
	"time"

	"gopkg.in/yaml.v3"
)

type gymCollection struct {
	Results, Failures []map[string]any
	Aggregate         map[string]any
	// Retries counts the connection retries (a refused or dropped
	// connection).
	Retries int
}

func gymCollect(ctx context.Context, head, agent string, rows []string, numRepeats int) (*gymCollection, error) {
	agentURL, err := gymResolve(ctx, head, agent)
	if err != nil {
		return nil, err
	}
	pre, err := gymPreprocess(rows, agent, numRepeats)
	if err != nil {
		return nil, err
	}
	out := &gymCollection{}
	var mu sync.Mutex
	var wg sync.WaitGroup
	errs := make([]error, len(pre))
	answers := make([]map[string]any, len(pre))
	for i, row := range pre {
		wg.Add(1)
		go func() {
			defer wg.Done()
			body, _ := json.Marshal(row)
			a, retries, err := gymPost(ctx, agentURL+"/run", body)
			mu.Lock()
			out.Retries += retries
			mu.Unlock()
			if err != nil {
				errs[i] = fmt.Errorf("row %d: %w", i, err)
				return
			}
			a["_ng_task_index"], a["_ng_rollout_index"] = row["_ng_task_index"], row["_ng_rollout_index"]
			answers[i] = a
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return out, fmt.Errorf("the collection aborted: %w", err)
	}
	var verify []map[string]any
	for _, a := range answers {
		if _, failed := a["_ng_failure_class"]; failed {
			out.Failures = append(out.Failures, a)
			continue
		}
		out.Results = append(out.Results, a)
		v := map[string]any{}
		for k, val := range a {
			if k != "response" && k != "responses_create_params" {
				v[k] = val
			}
		}
		verify = append(verify, v)
	}
	if verify == nil {
		verify = []map[string]any{}
	}
	body, _ := json.Marshal(map[string]any{"verify_responses": verify})
	agg, _, err := gymPost(ctx, agentURL+"/aggregate_metrics", body)
	if err != nil {
		return out, fmt.Errorf("aggregate_metrics: %w", err)
	}
	out.Aggregate = agg
	return out, nil
}

// gymResolve reads the agent's address from the head server.
func gymResolve(ctx context.Context, head, agent string) (string, error) {
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, head+"/global_config_dict_yaml", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return "", fmt.Errorf("Could not connect to the head server at %s: %w", head, err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 {
		return "", fmt.Errorf("head server: HTTP %d: %s", resp.StatusCode, raw)
	}
	var text string
	if err := json.Unmarshal(raw, &text); err != nil {
		return "", fmt.Errorf("head server: not a JSON string: %w", err)
	}
	var cfg map[string]any
	if err := yaml.Unmarshal([]byte(text), &cfg); err != nil {
		return "", fmt.Errorf("head server: not YAML: %w", err)
	}
	// The first entry of a mapping, as a mapping.
	first := func(v any) (map[string]any, bool) {
		m, ok := v.(map[string]any)
		for _, x := range m {
			mm, ok := x.(map[string]any)
			return mm, ok
		}
		return nil, ok && false
	}
	impls, ok := first(cfg[agent]) // global_config[agent][server_type]
	if !ok {
		return "", fmt.Errorf("global config has no server %q: %v", agent, cfg[agent])
	}
	srv, ok := first(impls) // …[impl]
	if !ok || srv["host"] == nil || srv["port"] == nil {
		return "", fmt.Errorf("global config: %s has no host and port: %v", agent, cfg[agent])
	}
	return fmt.Sprintf("http://%v:%v", srv["host"], srv["port"]), nil
}

// gymPreprocess numbers the rows as Gym does.
func gymPreprocess(rows []string, agent string, numRepeats int) ([]map[string]any, error) {
	taskOf := map[string]int{}
	perTask := map[int]int{}
	var out []map[string]any
	for i, line := range rows {
		var row map[string]any
		if err := json.Unmarshal([]byte(line), &row); err != nil {
			return nil, fmt.Errorf("input row %d: %w", i, err)
		}
		if _, ok := row["agent_ref"]; !ok {
			row["agent_ref"] = map[string]any{"name": agent}
		}
		canon, _ := json.Marshal(row)
		task, ok := taskOf[string(canon)]
		if !ok {
			task = len(taskOf)
			taskOf[string(canon)] = task
		}
		for r := 0; r < numRepeats; r++ {
			cp := map[string]any{}
			for k, v := range row {
				cp[k] = v
			}
			if _, has := cp["_ng_task_index"]; !has {
				cp["_ng_task_index"] = task
			}
			cp["_ng_rollout_index"] = perTask[task]
			perTask[task]++
			out = append(out, cp)
		}
	}
	return out, nil
}

// gymPost POSTs body as Gym's client does: no timeout, the connection
// retried every 0.5 s while refused or dropped, a non-2xx answer an error.
func gymPost(ctx context.Context, url string, body []byte) (map[string]any, int, error) {
	client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	retries := 0
	for {
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		resp, err := client.Do(req)
		if err != nil {
			var op *net.OpError
			if ctx.Err() == nil && (errors.As(err, &op) || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, syscall.ECONNRESET)) {
				retries++
				select {
				case <-ctx.Done():
				case <-time.After(500 * time.Millisecond):
				}
				continue
			}
			return nil, retries, err
		}
		raw, rerr := io.ReadAll(resp.Body)
		resp.Body.Close()
		if rerr != nil && ctx.Err() == nil {
			retries++ // dropped mid-answer: Gym's ServerDisconnectedError
			time.Sleep(500 * time.Millisecond)
			continue
		}
		if resp.StatusCode/100 != 2 {
			return nil, retries, fmt.Errorf("HTTP %d (raise_for_status): %s", resp.StatusCode, raw)
		}
		var doc map[string]any
		if err := json.Unmarshal(raw, &doc); err != nil {
			return nil, retries, fmt.Errorf("answer not JSON: %w", err)
		}
		return doc, retries, nil
	}
}
