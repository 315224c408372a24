// Command imagestandin plays, for the payload tests, the programs of the
// three images that cannot run here: Claude Code (claude), the policy proxy
// and the NeMo RL venv's Python (author_proxy.py, vLLM's server, the GRPO
// trainer, export_dcp.py, eval_prepare.py) and NeMo Gym's gym. It is linked
// under those names in a stand-in image root; it decides what to play from
// the name it was run as and its arguments, and appends each command line,
// shell-quoted, to $NEMORL_STANDIN_LOG. Run as nemorl-slurm, it logs and
// execs the real binary ($NEMORL_STANDIN_REAL_BIN).
// NEMORL_STANDIN_MODE=claude-hangs or trainer-hangs makes that program never
// end. It is a STAND-IN: nothing it prints is a real transcript, training or
// evaluation.
package main

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/nemorl/nemorl-slurm/evaluate"
	"github.com/nemorl/nemorl-slurm/internal/shell"
)

// inherited lists descriptors 3 and 4 when open at start (before this
// program opens anything): Claude Code must inherit neither.
var inherited string

func main() {
	name := filepath.Base(os.Args[0])
	if name == "claude" {
		for _, fd := range []int{3, 4} {
			var st syscall.Stat_t
			if syscall.Fstat(fd, &st) == nil {
				// The Go runtime reads cgroup files at start.
				if target, _ := os.Readlink("/proc/self/fd/" + strconv.Itoa(fd)); !strings.HasPrefix(target, "/sys/fs/cgroup/") {
					inherited += fmt.Sprintf(" %d->%s", fd, target)
				}
			}
		}
	}
	args := os.Args[1:]
	// wait-http runs while a server starts in the background: logging it
	// would make the order of the log lines a race.
	if !(name == "nemorl-slurm" && len(args) > 1 && args[1] == "wait-http") {
		logf("%s", shell.Join(append([]string{name}, args...)))
	}
	switch name {
	case "claude":
		claude(args)
	case "gym":
		gymEval(args)
	case "python":
		python(args)
	case "nemorl-slurm":
		// The real binary, logged like the rest.
		real := os.Getenv("NEMORL_STANDIN_REAL_BIN")
		if real == "" {
			fail("stand-in: NEMORL_STANDIN_REAL_BIN is not set")
		}
		if err := syscall.Exec(real, append([]string{real}, args...), os.Environ()); err != nil {
			fail("stand-in: exec %s: %v", real, err)
		}
	default:
		fail("stand-in: unknown program %s", name)
	}
}

func logf(format string, a ...any) {
	p := os.Getenv("NEMORL_STANDIN_LOG")
	if p == "" {
		return
	}
	f, err := os.OpenFile(p, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
	if err != nil {
		fail("stand-in: log: %v", err)
	}
	defer f.Close()
	fmt.Fprintf(f, format+"\n", a...)
}

func fail(format string, a ...any) {
	fmt.Fprintf(os.Stderr, format+"\n", a...)
	os.Exit(70)
}

// flag returns the value after name in args.
func flag(args []string, name string) string {
	for i, a := range args {
		if a == name && i+1 < len(args) {
			return args[i+1]
		}
		if v, ok := strings.CutPrefix(a, name+"="); ok {
			return v
		}
	}
	fail("stand-in: no %s in %q", name, args)
	return ""
}

func python(args []string) {
	if len(args) >= 2 && args[0] == "-m" && args[1] == "vllm.entrypoints.openai.api_server" {
		serve(flag(args, "--port"), "/health")
		return
	}
	if len(args) == 0 {
		fail("stand-in python: no script")
	}
	switch filepath.Base(args[0]) {
	case "author_proxy.py":
		proxy(args)
	case "run_grpo_nemo_gym.py":
		trainer(args)
	case "export_dcp.py":
		export(flag(args, "--dcp"), flag(args, "--out"))
	case "eval_prepare.py":
		prepare(flag(args, "--questions"), flag(args, "--rows"), flag(args, "--config"))
	default:
		fail("stand-in python: unknown script %s", args[0])
	}
}

// proxy plays author_proxy.py: it makes itself non-dumpable, reads the key
// from --key-fd (closing it), writes "proxy <pid> started" on --status-fd,
// then answers HTTP, writing "ok" on the status descriptor for each POST
// /v1/messages (NEMORL_STANDIN_MODE=endpoint-500: "error 500", and answers
// 500).
func proxy(args []string) {
	if _, _, errno := syscall.RawSyscall(syscall.SYS_PRCTL, syscall.PR_SET_DUMPABLE, 0, 0); errno != 0 {
		fail("stand-in proxy: prctl: %v", errno)
	}
	if os.Getenv("NEMORL_POLICY_API_KEY") != "" {
		fail("stand-in proxy: the key is in the environment")
	}
	kfd, err := strconv.Atoi(flag(args, "--key-fd"))
	if err != nil {
		fail("stand-in proxy: --key-fd: %v", err)
	}
	kf := os.NewFile(uintptr(kfd), "key")
	data, err := io.ReadAll(kf)
	kf.Close()
	if err != nil || !strings.Contains(string(data), "NEMORL_POLICY_API_KEY=") {
		fail("stand-in proxy: no key on descriptor %d: %v", kfd, err)
	}
	logf("proxy: the policy key reached the proxy")
	var status *os.File
	if v := flagOr(args, "--status-fd"); v != "" {
		sfd, err := strconv.Atoi(v)
		if err != nil {
			fail("stand-in proxy: --status-fd: %v", err)
		}
		status = os.NewFile(uintptr(sfd), "status")
		fmt.Fprintf(status, "proxy %d started\n", os.Getpid())
	}
	fmt.Println("READY " + flag(args, "--port"))
	l, err := net.Listen("tcp", "127.0.0.1:"+flag(args, "--port"))
	if err != nil {
		fail("stand-in proxy: %v", err)
	}
	var mu sync.Mutex
	_ = http.Serve(l, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost && r.URL.Path == "/v1/messages" {
			line, code := "ok", 200
			if os.Getenv("NEMORL_STANDIN_MODE") == "endpoint-500" {
				line, code = "error 500", 500
			}
			mu.Lock()
			if status != nil {
				fmt.Fprintln(status, line)
			}
			mu.Unlock()
			w.WriteHeader(code)
		}
		fmt.Fprintln(w, "stand-in ok")
	}))
}

// flagOr returns the value after name in args, or "".
func flagOr(args []string, name string) string {
	for i, a := range args {
		if a == name && i+1 < len(args) {
			return args[i+1]
		}
	}
	return ""
}

// serve answers HTTP on 127.0.0.1:port until killed; path "" answers
// everything, else only path (200).
func serve(port, path string) {
	l, err := net.Listen("tcp", "127.0.0.1:"+port)
	if err != nil {
		fail("stand-in server: %v", err)
	}
	_ = http.Serve(l, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if path != "" && r.URL.Path != path {
			http.NotFound(w, r)
			return
		}
		fmt.Fprintln(w, "stand-in ok")
	}))
}

// claude edits recipe.yaml in its working directory, as a policy would, and
// prints a short stream-json transcript.
func claude(args []string) {
	if os.Getenv("NEMORL_STANDIN_MODE") == "claude-hangs" {
		fmt.Println(`{"type":"system","subtype":"init","model":"stand-in","session_id":"s-hang"}`)
		select {} // until timeout(1) kills it
	}
	for _, v := range []string{"ANTHROPIC_BASE_URL", "ANTHROPIC_MODEL", "CLAUDE_CODE_MAX_CONTEXT_TOKENS", "CLAUDE_CODE_MAX_OUTPUT_TOKENS", "DISABLE_COMPACT"} {
		logf("claude env %s=%s", v, os.Getenv(v))
	}
	if os.Getenv("NEMORL_POLICY_API_KEY") != "" {
		fail("stand-in claude: the policy key leaked into Claude Code's environment")
	}
	if inherited != "" {
		fail("stand-in claude: inherited descriptors %s (the key or status descriptor leaked)", inherited)
	}
	// One model call through the proxy, as Claude Code makes.
	resp, err := http.Post(os.Getenv("ANTHROPIC_BASE_URL")+"/v1/messages", "application/json", strings.NewReader(`{}`))
	if err != nil {
		fail("stand-in claude: %v", err)
	}
	resp.Body.Close()
	logf("claude: model call status %d", resp.StatusCode)
	if p := os.Getenv("NEMORL_STANDIN_CLAUDE_WAIT"); p != "" {
		probeProxy()
		// The test scans every process while this one and the proxy run.
		logf("claude: waiting for %s", p)
		for range 600 {
			if _, err := os.Stat(p); err == nil {
				break
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	f, err := os.OpenFile("recipe.yaml", os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		fail("stand-in claude: %v", err)
	}
	fmt.Fprintln(f, "# tuned by the stand-in policy")
	f.Close()
	model := flag(args, "--model")
	for _, ev := range []string{
		`{"type":"system","subtype":"init","model":"` + model + `","session_id":"s-1"}`,
		`{"type":"assistant","message":{"id":"m1","model":"` + model + `","content":[{"type":"text","text":"I will tune recipe.yaml."},{"type":"tool_use","id":"tu_1","name":"Bash","input":{"command":"echo tuned >> recipe.yaml"}}],"usage":{"input_tokens":100,"output_tokens":20}}}`,
		`{"type":"user","message":{"content":[{"type":"tool_result","tool_use_id":"tu_1","content":"","is_error":false}]}}`,
		`{"type":"assistant","message":{"id":"m2","model":"` + model + `","content":[{"type":"text","text":"Done."}],"usage":{"input_tokens":130,"output_tokens":5}}}`,
		`{"type":"result","subtype":"success","is_error":false,"num_turns":2,"result":"Done.","usage":{"input_tokens":230,"output_tokens":25}}`,
	} {
		fmt.Println(ev)
	}
}

// probeProxy tries, as a policy would, to read the proxy's environment and
// descriptors through /proc; it logs what it could read.
func probeProxy() {
	procs, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	for _, c := range procs {
		b, _ := os.ReadFile(c)
		if !strings.Contains(string(b), "author_proxy.py") {
			continue
		}
		dir := filepath.Dir(c)
		_, envErr := os.ReadFile(filepath.Join(dir, "environ"))
		_, fdErr := os.ReadDir(filepath.Join(dir, "fd"))
		_, keyErr := os.ReadFile(filepath.Join(dir, "fd", "3"))
		logf("claude: proxy environ readable=%v fd readable=%v (euid %d)", envErr == nil, fdErr == nil || keyErr == nil, os.Geteuid())
	}
}

// trainer prints two rewards and leaves step_2 and step_3 checkpoints.
func trainer(args []string) {
	if os.Getenv("NEMORL_STANDIN_MODE") == "trainer-hangs" {
		fmt.Println("• Avg Reward: 0.125")
		select {} // until the launcher stops it
	}
	dir := ""
	for _, a := range args {
		if v, ok := strings.CutPrefix(strings.TrimLeft(a, "+"), "checkpointing.checkpoint_dir="); ok {
			dir = v
		}
	}
	if dir == "" {
		fail("stand-in trainer: no checkpointing.checkpoint_dir override")
	}
	for _, step := range []string{"step_2", "step_3"} {
		if err := os.MkdirAll(filepath.Join(dir, step, "policy", "weights"), 0o700); err != nil {
			fail("stand-in trainer: %v", err)
		}
	}
	fmt.Println("• Avg Reward: 0.25")
	fmt.Println("• Avg Reward: 0.375")
}

// export writes a real safetensors file of evaluate.TinyQwen2 (bf16, zeros
// but for a marker): check-weights accepts it with --arch tiny-qwen2.
func export(dcp, out string) {
	if _, err := os.Stat(dcp); err != nil {
		fail("stand-in export: %v", err)
	}
	header := map[string]any{"__metadata__": map[string]string{"format": "pt"}}
	var data []byte
	for _, t := range evaluate.TinyQwen2().Tensors {
		n := int64(2)
		shape := []int64{}
		for _, d := range t.Shape {
			n *= d
			shape = append(shape, d)
		}
		header[t.Name] = map[string]any{"dtype": "BF16", "shape": shape, "data_offsets": []int64{int64(len(data)), int64(len(data)) + n}}
		data = append(data, make([]byte, n)...)
	}
	copy(data, []byte{0x80, 0x3f}) // 1.0 in bf16: not all zeros
	h, _ := json.Marshal(header)
	for len(h)%8 != 0 {
		h = append(h, ' ')
	}
	var b bytes.Buffer
	binary.Write(&b, binary.LittleEndian, uint64(len(h)))
	b.Write(h)
	b.Write(data)
	if err := os.WriteFile(out, b.Bytes(), 0o600); err != nil {
		fail("stand-in export: %v", err)
	}
}

// prepare writes the rows and the Gym config as eval_prepare.py does (the
// token budget is a stand-in number).
func prepare(questions, rows, config string) {
	qs := readQuestions(questions)
	var b bytes.Buffer
	for _, q := range qs {
		row := map[string]any{"question": q, "expected_answer": "0", "responses_create_params": map[string]any{
			"input": []map[string]string{{"role": "user", "content": evaluate.DefaultPrompt + q}}, "max_output_tokens": 32000}}
		line, _ := json.Marshal(row)
		b.Write(append(line, '\n'))
	}
	if err := os.WriteFile(rows, b.Bytes(), 0o600); err != nil {
		fail("stand-in prepare: %v", err)
	}
	cfg := fmt.Sprintf(`{"math_with_judge_simple_agent": {"responses_api_agents": {"simple_agent": {"datasets": [{"jsonl_fpath": %q}]}}}}`, rows)
	if err := os.WriteFile(config, []byte(cfg), 0o600); err != nil {
		fail("stand-in prepare: %v", err)
	}
}

func readQuestions(path string) []string {
	data, err := os.ReadFile(path)
	if err != nil {
		fail("stand-in: %v", err)
	}
	var qs []string
	for _, line := range strings.Split(strings.TrimSpace(string(data)), "\n") {
		var row struct{ Question string }
		if err := json.Unmarshal([]byte(line), &row); err != nil {
			fail("stand-in: %s: %v", path, err)
		}
		qs = append(qs, row.Question)
	}
	return qs
}

// gymEval answers every row 8 times; question i gets i%9 (at most 8) right.
func gymEval(args []string) {
	var cfg struct {
		M struct {
			A struct {
				S struct {
					Datasets []struct {
						Path string `json:"jsonl_fpath"`
					} `json:"datasets"`
				} `json:"simple_agent"`
			} `json:"responses_api_agents"`
		} `json:"math_with_judge_simple_agent"`
	}
	raw, err := os.ReadFile(flag(args, "--config"))
	if err != nil || json.Unmarshal(raw, &cfg) != nil || len(cfg.M.A.S.Datasets) != 1 {
		fail("stand-in gym: config %v", err)
	}
	rowsData, err := os.ReadFile(cfg.M.A.S.Datasets[0].Path)
	if err != nil {
		fail("stand-in gym: %v", err)
	}
	var out bytes.Buffer
	for i, line := range strings.Split(strings.TrimSpace(string(rowsData)), "\n") {
		var row map[string]any
		if err := json.Unmarshal([]byte(line), &row); err != nil {
			fail("stand-in gym: %v", err)
		}
		for s := range 8 {
			reward := 0.0
			if s < i%9 {
				reward = 1
			}
			r := map[string]any{"responses_create_params": row["responses_create_params"], "reward": reward,
				"_ng_task_index": i, "_ng_rollout_index": s, "response": "stand-in answer"}
			b, _ := json.Marshal(r)
			out.Write(append(b, '\n'))
		}
	}
	if err := os.WriteFile(flag(args, "--output"), out.Bytes(), 0o600); err != nil {
		fail("stand-in gym: %v", err)
	}
}
