package main

import (
	"bufio"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/nemorl/nemorl-slurm/configs"
)

// The stand-in accepts exactly the lab configs' key.
func TestLabKey(t *testing.T) {
	for _, name := range []string{"lab-none.yaml", "lab-real-author.yaml"} {
		cfg, err := configs.LoadFile(filepath.Join("..", "..", "configs", name))
		if err != nil {
			t.Fatal(err)
		}
		if got := cfg.PolicyModel.APIKey.Reveal(); got != LabKey {
			t.Errorf("configs/%s: policy_model.api_key %q, want LabKey %q", name, got, LabKey)
		}
		if name == "lab-real-author.yaml" {
			if _, err := ModeOf(cfg.PolicyModel.Model); err != nil {
				t.Errorf("configs/%s: %v", name, err)
			}
		}
	}
}

func TestModeOf(t *testing.T) {
	for _, m := range Modes {
		if got, err := ModeOf("stand-in:" + m); err != nil || got != m {
			t.Errorf("ModeOf(stand-in:%s) = %q, %v", m, got, err)
		}
	}
	if got, _ := ModeOf("stand-in"); got != "edit" {
		t.Errorf("ModeOf(stand-in) = %q, want edit", got)
	}
	for _, bad := range []string{"", "stand-in:", "stand-in:nope", "qwen"} {
		if _, err := ModeOf(bad); err == nil {
			t.Errorf("ModeOf(%q) accepted", bad)
		}
	}
}

func TestParseKey(t *testing.T) {
	for in, want := range map[string]string{
		"NEMORL_POLICY_API_KEY=k1\n": "k1", "k2\n": "k2", "OTHER=x\n": "", "": "",
		"A=b\nNEMORL_POLICY_API_KEY= k3 \n": "k3",
	} {
		if got := ParseKey(in); got != want {
			t.Errorf("ParseKey(%q) = %q, want %q", in, got, want)
		}
	}
}

// sse reads an event stream into (event, data) pairs.
func sse(t *testing.T, r io.Reader) (names []string, data []map[string]any) {
	t.Helper()
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		l := sc.Text()
		if v, ok := strings.CutPrefix(l, "event: "); ok {
			names = append(names, v)
		} else if v, ok := strings.CutPrefix(l, "data: "); ok {
			var m map[string]any
			if err := json.Unmarshal([]byte(v), &m); err != nil {
				t.Fatalf("data %q: %v", v, err)
			}
			data = append(data, m)
		}
	}
	return names, data
}

const firstTurn = `{"model":"stand-in:edit","stream":%s,"messages":[{"role":"user","content":"go"}],"tools":[{"name":"Bash"},{"name":"Edit"},{"name":"Read"}]}`

func post(t *testing.T, url, body string) *http.Response {
	t.Helper()
	resp, err := http.Post(url+"/v1/messages?beta=true", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { resp.Body.Close() })
	return resp
}

func TestStreamAndNot(t *testing.T) {
	var status strings.Builder
	s := &Server{Mode: "edit", Model: "stand-in:edit", KeyOK: true, Status: &status}
	ts := httptest.NewServer(s)
	defer ts.Close()

	resp := post(t, ts.URL, strings.Replace(firstTurn, "%s", "true", 1))
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "text/event-stream" {
		t.Fatalf("stream: %s %s", resp.Status, resp.Header.Get("Content-Type"))
	}
	names, data := sse(t, resp.Body)
	want := "message_start content_block_start content_block_delta content_block_delta content_block_stop content_block_start content_block_delta content_block_delta content_block_stop message_delta message_stop"
	if got := strings.Join(names, " "); got != want {
		t.Fatalf("events %s\nwant %s", got, want)
	}
	var js string
	for _, d := range data {
		if delta, ok := d["delta"].(map[string]any); ok && delta["type"] == "input_json_delta" {
			js += delta["partial_json"].(string)
		}
	}
	var input map[string]any
	if err := json.Unmarshal([]byte(js), &input); err != nil || !strings.HasPrefix(input["command"].(string), "pwd") {
		t.Errorf("tool input %q: %v", js, err)
	}
	if sr := data[len(data)-2]["delta"].(map[string]any)["stop_reason"]; sr != "tool_use" {
		t.Errorf("stop_reason %v", sr)
	}

	resp = post(t, ts.URL, strings.Replace(firstTurn, "%s", "false", 1))
	var msg struct {
		Content []struct {
			Type, Name string
			Input      map[string]any
		}
		StopReason string `json:"stop_reason"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&msg); err != nil || len(msg.Content) != 2 || msg.Content[1].Name != "Bash" || msg.StopReason != "tool_use" {
		t.Errorf("non-streaming: %+v %v", msg, err)
	}
	if status.String() != "ok\nok\n" {
		t.Errorf("status %q", status.String())
	}
	if r, _ := http.Get(ts.URL + "/"); r == nil || r.StatusCode != 200 {
		t.Errorf("GET / %v", r)
	}
}

func TestErrors(t *testing.T) {
	for _, c := range []struct {
		mode  string
		keyOK bool
		code  int
		msg   string
	}{
		{"edit", false, 401, "authentication_error"},
		{"error500", true, 500, "api_error"},
	} {
		var status strings.Builder
		ts := httptest.NewServer(&Server{Mode: c.mode, KeyOK: c.keyOK, Status: &status})
		resp := post(t, ts.URL, strings.Replace(firstTurn, "%s", "true", 1))
		b, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != c.code || !strings.Contains(string(b), c.msg) {
			t.Errorf("%s key %v: %s %s", c.mode, c.keyOK, resp.Status, b)
		}
		if !strings.HasPrefix(status.String(), "error ") {
			t.Errorf("%s: status %q", c.mode, status.String())
		}
		ts.Close()
	}
	rep := Play("prompt-too-long", 1, []Result{{Text: "/w\n"}})
	if rep.ErrStatus != 400 || !strings.Contains(rep.ErrMessage, "prompt is too long") {
		t.Errorf("prompt-too-long turn 1: %+v", rep)
	}
	if rep := Play("max-turns", 50, nil); rep.StopReason != "tool_use" {
		t.Errorf("max-turns turn 50: %+v", rep)
	}
}

// The edit script Edits the last line of what Read showed.
func TestEditScript(t *testing.T) {
	read := "     1→grpo:\n     2→  lr: 5.0e-6\n"
	rep := Play("edit", 2, []Result{{Text: "/work\nrecipe.yaml\n"}, {Text: read}})
	in := rep.Blocks[1].Input
	if rep.Blocks[1].Name != "Edit" || in["file_path"] != "/work/recipe.yaml" || in["old_string"] != "  lr: 5.0e-6" {
		t.Errorf("edit turn 2: %+v", rep)
	}
}

func TestMain(m *testing.M) {
	if runtime.GOOS != "linux" {
		os.Exit(0)
	}
	os.Exit(m.Run())
}
