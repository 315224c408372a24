// Command policy-standin is a STAND-IN, for the lab only, for the policy
// model together with NeMo Gym's Anthropic-Messages adapter
// (templates/payload/author_proxy.py in front of an OpenAI-compatible
// server). It lets the lab's author stage run the real thing — the built-in
// author payload (author.sh), real Claude Code, real git and the real
// `nemorl-slurm payload author-finish` — with only the model scripted.
//
// lab/up builds it to /opt/nemorl-lab/bin/policy-standin and installs a shim
// as the author image's /opt/nemorl/gym-venv/bin/python that runs it in
// place of `python author_proxy.py`, with author_proxy.py's arguments:
//
//	policy-standin --settings author.json --port P [--key-fd N] [--status-fd M] [--gym-root DIR]
//
// It listens on 127.0.0.1 only and never contacts anything. It serves
//
//   - GET / (the payload's readiness probe, `payload wait-http`): 200;
//   - POST /v1/messages (Claude Code sends ?beta=true): the Anthropic
//     Messages API, streaming (SSE: message_start, content_block_start,
//     content_block_delta with text_delta or input_json_delta,
//     content_block_stop, message_delta with the stop_reason, message_stop)
//     and not (Claude Code retries with "stream": false after a broken
//     stream);
//   - POST /v1/messages/count_tokens: a rough count.
//
// The policy API key comes from descriptor --key-fd (read to EOF, then
// closed; a NEMORL_POLICY_API_KEY=<key> line, as in secrets.env, or the bare
// key), else from $NEMORL_POLICY_API_KEY (removed from the environment once
// read), as author_proxy.py takes it; like it, the process makes itself
// non-dumpable first. It must be the lab's key
// (configs/lab-none.yaml, policy_model.api_key: LabKey); any other key makes every
// Messages call answer 401, as the policy's server would. With --status-fd,
// it writes "proxy <pid> started" at once, then one line per Messages call:
// "ok", or "error <http-status>" (there is no upstream to fail to connect
// to, so never "error connect").
//
// What it plays is chosen by the model name in the settings file
// (policy_model.model, from the config): "stand-in:<mode>" (plain
// "stand-in": edit). A turn is the number of assistant messages already in
// the request, so the script is stateless and survives Claude Code's
// retries. Modes (Claude Code's --bare tools are Bash, Edit and Read):
//
//	edit             Bash `pwd; ls`, Read recipe.yaml, Edit it (a line appended
//	                 after its last line), Bash a command (git diff --stat), then
//	                 a closing text (end_turn).
//	no-edit          Bash `ls`, then a closing text: no change.
//	error500         HTTP 500 (api_error) on every call. Claude Code 2.1.332
//	                 retries 10 times with backoff (about 3 min 15 s), then
//	                 gives up: terminal_reason api_error, exit 1.
//	prompt-too-long  Bash appends a line to recipe.yaml, then HTTP 400
//	                 "prompt is too long: …" on every later call.
//	max-turns        Bash appends a line to recipe.yaml, then a Bash call on
//	                 every turn, never a closing text: Claude Code stops at
//	                 --max-turns.
//	large-edit       Bash appends a line to recipe.yaml and writes large.txt
//	                 (~17 MB, one marker line first), Read large.txt (3 lines),
//	                 Edit the marker line, then a closing text.
//
// Requests without tools (none seen from Claude Code 2.1.332 under --bare)
// get a short text. --log-requests FILE appends every request (method, path,
// body) as one JSON line, for tests.
package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// LabKey is configs/lab-none.yaml's policy_model.api_key (a test checks it).
const LabKey = "lab-stand-in-key"

// KeyEnv is where the key is read from without --key-fd.
const KeyEnv = "NEMORL_POLICY_API_KEY"

// Modes are the scripts it can play.
var Modes = []string{"edit", "no-edit", "error500", "prompt-too-long", "max-turns", "large-edit"}

// LargeFileBytes is about the size of large-edit's file.
const LargeFileBytes = 17 << 20

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("policy-standin", flag.ContinueOnError)
	fs.SetOutput(stderr)
	settings := fs.String("settings", "", "the author bundle JSON (author.json)")
	port := fs.Int("port", 0, "port on 127.0.0.1 (0: any)")
	keyFD := fs.Int("key-fd", -1, "read the policy API key from this inherited descriptor")
	statusFD := fs.Int("status-fd", -1, "write the status lines to this inherited descriptor")
	_ = fs.String("gym-root", "", "ignored (author_proxy.py's Gym tree)")
	logReq := fs.String("log-requests", "", "append every request as a JSON line to this file")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	fail := func(format string, a ...any) int {
		fmt.Fprintf(stderr, "policy-standin: "+format+"\n", a...)
		return 2
	}
	if err := nonDumpable(); err != nil {
		return fail("prctl(PR_SET_DUMPABLE, 0): %v", err)
	}
	var status io.Writer
	if *statusFD >= 0 {
		f := os.NewFile(uintptr(*statusFD), "status")
		if f == nil {
			return fail("--status-fd %d is not open", *statusFD)
		}
		defer f.Close()
		status = f
		fmt.Fprintf(f, "proxy %d started\n", os.Getpid())
	}
	key, err := takeKey(*keyFD)
	if err != nil {
		return fail("%v", err)
	}
	if *settings == "" {
		return fail("--settings is required")
	}
	model, err := loadModel(*settings)
	if err != nil {
		return fail("%v", err)
	}
	mode, err := ModeOf(model)
	if err != nil {
		return fail("%v", err)
	}
	if *port < 0 || *port > 65535 {
		return fail("--port %d is not 0..65535", *port)
	}
	var reqLog io.Writer
	if *logReq != "" {
		f, err := os.OpenFile(*logReq, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
		if err != nil {
			return fail("%v", err)
		}
		defer f.Close()
		reqLog = f
	}
	ln, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(*port)))
	if err != nil {
		return fail("listen: %v", err)
	}
	s := &Server{Mode: mode, Model: model, KeyOK: key == LabKey, Status: status, RequestLog: reqLog, Log: stderr}
	fmt.Fprintf(stderr, "policy-standin: STAND-IN for the policy model and NeMo Gym's adapter; mode %s, key accepted: %v, on %s\n", mode, s.KeyOK, ln.Addr())
	fmt.Fprintf(stdout, "READY %d\n", ln.Addr().(*net.TCPAddr).Port)
	srv := &http.Server{Handler: s, ReadHeaderTimeout: 30 * time.Second}
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)
	go func() {
		<-sig
		_ = srv.Close()
	}()
	if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
		fmt.Fprintf(stderr, "policy-standin: %v\n", err)
		return 1
	}
	return 0
}

// takeKey reads the key from descriptor fd (closed afterwards), or from
// $NEMORL_POLICY_API_KEY when fd < 0 (then unset).
func takeKey(fd int) (string, error) {
	if fd < 0 {
		key := os.Getenv(KeyEnv)
		os.Unsetenv(KeyEnv)
		if key == "" {
			return "", fmt.Errorf("%s is not set (or empty) and no --key-fd", KeyEnv)
		}
		return key, nil
	}
	f := os.NewFile(uintptr(fd), "key")
	if f == nil {
		return "", fmt.Errorf("--key-fd %d is not open", fd)
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, 64<<10))
	if err != nil {
		return "", fmt.Errorf("--key-fd %d: %v", fd, err)
	}
	if key := ParseKey(string(b)); key != "" {
		return key, nil
	}
	return "", fmt.Errorf("--key-fd %d held no key", fd)
}

// ParseKey reads the key as author_proxy.py does: the value of the last
// NEMORL_POLICY_API_KEY= line (secrets.env's form), else a lone line
// without "=", trimmed.
func ParseKey(data string) string {
	lines := strings.FieldsFunc(data, func(r rune) bool { return r == '\n' || r == '\r' })
	key := ""
	for _, l := range lines {
		if v, ok := strings.CutPrefix(l, KeyEnv+"="); ok {
			key = v
		}
	}
	if key == "" && len(lines) == 1 && !strings.Contains(lines[0], "=") {
		key = lines[0]
	}
	return strings.TrimSpace(key)
}

// nonDumpable is prctl(PR_SET_DUMPABLE, 0), as author_proxy.py does: other
// processes of the user cannot read this one's memory or descriptors.
func nonDumpable() error {
	const prSetDumpable = 4
	if _, _, e := syscall.RawSyscall(syscall.SYS_PRCTL, prSetDumpable, 0, 0); e != 0 {
		return e
	}
	return nil
}

// loadModel reads policy_model.model from the author bundle.
func loadModel(path string) (string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", err
	}
	var bundle struct {
		PolicyModel struct {
			Model string `json:"model"`
		} `json:"policy_model"`
	}
	if err := json.Unmarshal(b, &bundle); err != nil {
		return "", fmt.Errorf("%s: %v", path, err)
	}
	if bundle.PolicyModel.Model == "" {
		return "", fmt.Errorf("%s: no policy_model.model", path)
	}
	return bundle.PolicyModel.Model, nil
}

// ModeOf is the mode a model name asks for: "stand-in:<mode>", or "edit"
// for plain "stand-in".
func ModeOf(model string) (string, error) {
	if model == "stand-in" {
		return "edit", nil
	}
	m, ok := strings.CutPrefix(model, "stand-in:")
	if ok {
		for _, x := range Modes {
			if m == x {
				return m, nil
			}
		}
	}
	return "", fmt.Errorf("policy_model.model %q: want stand-in or stand-in:<mode>, mode one of %s", model, strings.Join(Modes, ", "))
}

// Server answers Claude Code.
type Server struct {
	Mode, Model string
	KeyOK       bool      // the proxy was given the lab's key
	Status      io.Writer // status lines (nil: none)
	RequestLog  io.Writer // one JSON line per request (nil: none)
	Log         io.Writer // diagnostics

	mu sync.Mutex
	n  int
}

func (s *Server) status(line string) {
	if s.Status == nil {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	fmt.Fprintln(s.Status, line)
}

func (s *Server) logf(format string, a ...any) {
	if s.Log != nil {
		s.mu.Lock()
		fmt.Fprintf(s.Log, "policy-standin: "+format+"\n", a...)
		s.mu.Unlock()
	}
}

func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(io.LimitReader(r.Body, 256<<20))
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	if s.RequestLog != nil {
		line, _ := json.Marshal(map[string]any{"method": r.Method, "path": r.URL.RequestURI(), "body": json.RawMessage(orNull(body))})
		s.mu.Lock()
		_, _ = s.RequestLog.Write(append(line, '\n'))
		s.mu.Unlock()
	}
	switch {
	case r.URL.Path == "/" && (r.Method == http.MethodGet || r.Method == http.MethodHead):
		w.Header().Set("Content-Type", "text/plain")
		_, _ = io.WriteString(w, "policy-standin: ready\n")
	case r.URL.Path == "/v1/messages/count_tokens" && r.Method == http.MethodPost:
		writeJSON(w, http.StatusOK, map[string]any{"input_tokens": len(body)/4 + 1})
	case r.URL.Path == "/v1/messages" && r.Method == http.MethodPost:
		s.messages(w, body)
	default:
		writeJSON(w, http.StatusNotFound, apiError("not_found_error", "policy-standin: no "+r.Method+" "+r.URL.Path))
	}
}

func orNull(b []byte) []byte {
	if json.Valid(b) && len(b) > 0 {
		return b
	}
	q, _ := json.Marshal(string(b))
	return q
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v)
}

func apiError(typ, msg string) map[string]any {
	return map[string]any{"type": "error", "error": map[string]any{"type": typ, "message": msg}}
}

// Request is the part of a Messages request the stand-in reads.
type Request struct {
	Model    string    `json:"model"`
	Stream   bool      `json:"stream"`
	Messages []Message `json:"messages"`
	Tools    []struct {
		Name string `json:"name"`
	} `json:"tools"`
}

// Message is one message of the conversation.
type Message struct {
	Role    string          `json:"role"`
	Content json.RawMessage `json:"content"` // a string or blocks
}

// Block is a content block of a request.
type Block struct {
	Type      string          `json:"type"`
	Text      string          `json:"text"`
	ToolUseID string          `json:"tool_use_id"`
	Content   json.RawMessage `json:"content"` // tool_result: a string or blocks
	IsError   bool            `json:"is_error"`
}

// Result is a tool result the conversation holds.
type Result struct {
	Text    string
	IsError bool
}

// Out is a content block of a reply.
type Out struct {
	Type  string // "text" or "tool_use"
	Text  string
	Name  string
	Input map[string]any
}

// Reply is what one turn answers: blocks and a stop reason, or an error.
type Reply struct {
	Blocks     []Out
	StopReason string
	ErrStatus  int // != 0: answer this HTTP error instead
	ErrType    string
	ErrMessage string
}

func (s *Server) messages(w http.ResponseWriter, body []byte) {
	var req Request
	if err := json.Unmarshal(body, &req); err != nil {
		s.status("error 400")
		writeJSON(w, http.StatusBadRequest, apiError("invalid_request_error", "policy-standin: "+err.Error()))
		return
	}
	s.mu.Lock()
	s.n++
	call := s.n
	s.mu.Unlock()
	if !s.KeyOK {
		s.logf("call %d: 401 (the proxy was not given the lab's key)", call)
		s.status("error 401")
		writeJSON(w, http.StatusUnauthorized, apiError("authentication_error", "invalid x-api-key"))
		return
	}
	turn, results := conversation(req.Messages)
	var rep Reply
	if len(req.Tools) == 0 {
		rep = Reply{Blocks: []Out{{Type: "text", Text: "stand-in"}}, StopReason: "end_turn"}
	} else {
		rep = Play(s.Mode, turn, results)
	}
	if rep.ErrStatus != 0 {
		s.logf("call %d (turn %d, stream %v): HTTP %d %s", call, turn, req.Stream, rep.ErrStatus, rep.ErrMessage)
		s.status("error " + strconv.Itoa(rep.ErrStatus))
		writeJSON(w, rep.ErrStatus, apiError(rep.ErrType, rep.ErrMessage))
		return
	}
	s.logf("call %d (turn %d, stream %v): %s", call, turn, req.Stream, rep.summary())
	s.status("ok")
	model := req.Model
	if model == "" {
		model = s.Model
	}
	id := fmt.Sprintf("msg_standin_%d", call)
	in := len(body)/4 + 1
	if req.Stream {
		stream(w, id, model, in, call, rep)
		return
	}
	var content []map[string]any
	for i, b := range rep.Blocks {
		content = append(content, b.final(call, i))
	}
	writeJSON(w, http.StatusOK, map[string]any{
		"id": id, "type": "message", "role": "assistant", "model": model, "content": content,
		"stop_reason": rep.StopReason, "stop_sequence": nil,
		"usage": map[string]any{"input_tokens": in, "output_tokens": rep.outTokens()},
	})
}

func (r Reply) summary() string {
	var parts []string
	for _, b := range r.Blocks {
		if b.Type == "tool_use" {
			parts = append(parts, "tool_use "+b.Name)
		} else {
			parts = append(parts, "text")
		}
	}
	return strings.Join(parts, ", ") + " (" + r.StopReason + ")"
}

func (r Reply) outTokens() int {
	n := 1
	for _, b := range r.Blocks {
		j, _ := json.Marshal(b.Input)
		n += (len(b.Text) + len(j)) / 4
	}
	return n
}

func (b Out) id(call, i int) string { return fmt.Sprintf("toolu_standin_%d_%d", call, i) }

// final is the block as a non-streaming reply holds it.
func (b Out) final(call, i int) map[string]any {
	if b.Type == "tool_use" {
		return map[string]any{"type": "tool_use", "id": b.id(call, i), "name": b.Name, "input": b.Input}
	}
	return map[string]any{"type": "text", "text": b.Text}
}

// stream writes the reply as Server-Sent Events, as the Messages API does.
func stream(w http.ResponseWriter, id, model string, in, call int, rep Reply) {
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	w.WriteHeader(http.StatusOK)
	bw := bufio.NewWriter(w)
	flusher, _ := w.(http.Flusher)
	event := func(name string, data map[string]any) {
		data["type"] = name
		j, _ := json.Marshal(data)
		fmt.Fprintf(bw, "event: %s\ndata: %s\n\n", name, j)
		_ = bw.Flush()
		if flusher != nil {
			flusher.Flush()
		}
	}
	event("message_start", map[string]any{"message": map[string]any{
		"id": id, "type": "message", "role": "assistant", "model": model, "content": []any{},
		"stop_reason": nil, "stop_sequence": nil, "usage": map[string]any{"input_tokens": in, "output_tokens": 1},
	}})
	for i, b := range rep.Blocks {
		if b.Type == "tool_use" {
			event("content_block_start", map[string]any{"index": i, "content_block": map[string]any{
				"type": "tool_use", "id": b.id(call, i), "name": b.Name, "input": map[string]any{}}})
			j, _ := json.Marshal(b.Input)
			for _, part := range halves(string(j)) {
				event("content_block_delta", map[string]any{"index": i, "delta": map[string]any{"type": "input_json_delta", "partial_json": part}})
			}
		} else {
			event("content_block_start", map[string]any{"index": i, "content_block": map[string]any{"type": "text", "text": ""}})
			for _, part := range halves(b.Text) {
				event("content_block_delta", map[string]any{"index": i, "delta": map[string]any{"type": "text_delta", "text": part}})
			}
		}
		event("content_block_stop", map[string]any{"index": i})
	}
	event("message_delta", map[string]any{"delta": map[string]any{"stop_reason": rep.StopReason, "stop_sequence": nil},
		"usage": map[string]any{"output_tokens": rep.outTokens()}})
	event("message_stop", map[string]any{})
}

// halves splits s in two at a rune boundary (one part when short), so that
// every block arrives in more than one delta.
func halves(s string) []string {
	if len(s) < 2 {
		return []string{s}
	}
	m := len(s) / 2
	for m < len(s) && (s[m]&0xC0) == 0x80 {
		m++
	}
	return []string{s[:m], s[m:]}
}

// conversation returns the turn (assistant messages so far) and the tool
// results in order.
func conversation(msgs []Message) (int, []Result) {
	turn := 0
	var results []Result
	for _, m := range msgs {
		if m.Role == "assistant" {
			turn++
			continue
		}
		var blocks []Block
		if json.Unmarshal(m.Content, &blocks) != nil {
			continue
		}
		for _, b := range blocks {
			if b.Type == "tool_result" {
				results = append(results, Result{Text: textOf(b.Content), IsError: b.IsError})
			}
		}
	}
	return turn, results
}

// textOf is a tool_result's content as text.
func textOf(raw json.RawMessage) string {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s
	}
	var blocks []Block
	if json.Unmarshal(raw, &blocks) == nil {
		var b strings.Builder
		for _, x := range blocks {
			b.WriteString(x.Text)
		}
		return b.String()
	}
	return ""
}

func bash(cmd, desc string) Out {
	return Out{Type: "tool_use", Name: "Bash", Input: map[string]any{"command": cmd, "description": desc}}
}

func text(s string) Reply {
	return Reply{Blocks: []Out{{Type: "text", Text: s}}, StopReason: "end_turn"}
}

func tools(b ...Out) Reply {
	return Reply{Blocks: append([]Out{{Type: "text", Text: "Next step."}}, b...), StopReason: "tool_use"}
}

// workDir is the first line of the first tool result (every script starts
// with `pwd`).
func workDir(results []Result) string {
	if len(results) == 0 {
		return ""
	}
	wd, _, _ := strings.Cut(strings.TrimSpace(results[0].Text), "\n")
	return strings.TrimSpace(wd)
}

// lastLine is the last non-empty line of a Read result, without its line
// number ("     7→text" or "     7\ttext").
func lastLine(read string) string {
	lines := strings.Split(read, "\n")
	for i := len(lines) - 1; i >= 0; i-- {
		l := strings.TrimLeft(lines[i], " ")
		j := 0
		for j < len(l) && l[j] >= '0' && l[j] <= '9' {
			j++
		}
		if j == 0 {
			continue
		}
		rest := l[j:]
		switch {
		case strings.HasPrefix(rest, "→"):
			rest = rest[len("→"):]
		case strings.HasPrefix(rest, "\t"):
			rest = rest[1:]
		default:
			continue
		}
		if strings.TrimSpace(rest) != "" {
			return rest
		}
	}
	return ""
}

const appendRecipe = "printf '%s\\n' '# policy stand-in: edited by the scripted policy of the lab' >> recipe.yaml"

// Play is the reply of mode at turn, given the tool results so far.
func Play(mode string, turn int, results []Result) Reply {
	wd := workDir(results)
	switch mode {
	case "error500":
		return Reply{ErrStatus: http.StatusInternalServerError, ErrType: "api_error", ErrMessage: "policy-standin: internal server error (mode error500)"}
	case "no-edit":
		if turn == 0 {
			return tools(bash("pwd && ls", "List the work dir"))
		}
		return text("I looked around and changed nothing.")
	case "prompt-too-long":
		if turn == 0 {
			return tools(bash("pwd && "+appendRecipe, "Tune the recipe"))
		}
		return Reply{ErrStatus: http.StatusBadRequest, ErrType: "invalid_request_error", ErrMessage: "prompt is too long: 300000 tokens > 262144 maximum"}
	case "max-turns":
		if turn == 0 {
			return tools(bash("pwd && "+appendRecipe, "Tune the recipe"))
		}
		return tools(bash(fmt.Sprintf("echo policy stand-in turn %d", turn), "Keep going"))
	case "large-edit":
		switch turn {
		case 0:
			return tools(bash(fmt.Sprintf("pwd && %s && { echo 'STAND-IN MARKER: original'; yes 'a line of the very large file the policy stand-in writes' | head -c %d; echo; } > large.txt && wc -c large.txt", appendRecipe, LargeFileBytes),
				"Write a very large file"))
		case 1:
			return tools(Out{Type: "tool_use", Name: "Read", Input: map[string]any{"file_path": wd + "/large.txt", "limit": 3}})
		case 2:
			return tools(Out{Type: "tool_use", Name: "Edit", Input: map[string]any{"file_path": wd + "/large.txt",
				"old_string": "STAND-IN MARKER: original", "new_string": "STAND-IN MARKER: edited by the policy stand-in"}})
		}
		return text("I edited the very large file.")
	default: // edit
		switch turn {
		case 0:
			return tools(bash("pwd && ls", "List the work dir"))
		case 1:
			return tools(Out{Type: "tool_use", Name: "Read", Input: map[string]any{"file_path": wd + "/recipe.yaml"}})
		case 2:
			last := ""
			if len(results) > 1 {
				last = lastLine(results[1].Text)
			}
			if last == "" {
				return tools(bash(appendRecipe, "Tune the recipe"))
			}
			return tools(Out{Type: "tool_use", Name: "Edit", Input: map[string]any{"file_path": wd + "/recipe.yaml",
				"old_string": last, "new_string": last + "\n# policy stand-in: edited with the Edit tool"}})
		case 3:
			cmd := "git diff --stat -- recipe.yaml; echo policy stand-in ran a command"
			if len(results) > 2 && results[2].IsError {
				cmd = appendRecipe + " && " + cmd
			}
			return tools(bash(cmd, "Check the change"))
		}
		return text("I tuned recipe.yaml and checked the result.")
	}
}
