package templates

import (
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nemorl/nemorl-slurm/stages"
)

// TestRenderIsolation asserts the container flags and the guard on the
// rendered scripts: --no-mount bind-paths everywhere, --net --network none on
// train and eval only, the guard line identical to the payload line but for
// the command, the APPTAINER/SINGULARITY clearing before both, and nothing
// of it under runtime none.
func TestRenderIsolation(t *testing.T) {
	tr := render(t, loadExample(t, "cluster-example.yaml"))
	guardArgv := map[stages.Stage]string{
		stages.Author: " /bin/bash /nemorl/author/bundle/guard.sh author",
		stages.Train:  " /bin/bash /nemorl/bundle/guard.sh train",
		stages.Eval:   " /bin/bash /nemorl/bundle/guard.sh eval",
	}
	payloadArgv := map[stages.Stage]string{
		stages.Author: ` /bin/bash /nemorl/author/bundle/author.sh > "$nemorl_cap_fifo" 2>&1 &`,
		stages.Train:  ` /bin/bash /nemorl/bundle/train.sh > "$nemorl_cap_fifo" 2>&1 &`,
		stages.Eval:   ` /bin/bash /nemorl/bundle/eval.sh > "$nemorl_scratch/payload.stdout" &`,
	}
	for _, stage := range stages.All {
		f, _ := tr.Lookup(stages.Script(stage))
		script := string(f.Data)
		payload, guard := execLines(t, f.Data)
		if !strings.Contains(payload, " --no-mount hostfs,bind-paths ") || !strings.Contains(guard, " --no-mount hostfs,bind-paths ") {
			t.Errorf("%s: no --no-mount hostfs,bind-paths:\n%s\n%s", stage, payload, guard)
		}
		noNet := strings.Contains(payload, " --net --network none ")
		if noNet != (stage != stages.Author) || strings.Contains(guard, " --net --network none ") != noNet {
			t.Errorf("%s: --net --network none on payload=%v (want %v):\n%s\n%s", stage, noNet, stage != stages.Author, payload, guard)
		}
		gHead, ok1 := strings.CutSuffix(guard, guardArgv[stage]+" >&2 || nemorl_guard_status=$?")
		pHead, ok2 := strings.CutSuffix(payload, payloadArgv[stage])
		if !ok1 || !ok2 || gHead != pHead {
			t.Errorf("%s: the guard's exec line must be the payload's but for the command:\n%s\n%s", stage, guard, payload)
		}
		clear := strings.Index(script, "unset APPTAINER_BIND APPTAINER_BINDPATH SINGULARITY_BIND SINGULARITY_BINDPATH\n")
		loop := strings.Index(script, "for nemorl_v in ${!APPTAINER@} ${!SINGULARITY@}; do\n")
		gi, pi := strings.Index(script, guard), strings.Index(script, payload)
		if clear < 0 || loop < 0 || !(clear < gi && loop < gi && gi < pi) {
			t.Errorf("%s: want the env clearing (%d, %d) before the guard (%d) before the payload (%d)", stage, clear, loop, gi, pi)
		}
		if !strings.Contains(script, "nemorl_verdict 69\n") || !strings.Contains(script, `echo "nemorl: isolation: the guard refused`) {
			t.Errorf("%s: no isolation refusal", stage)
		}
	}

	lab := render(t, loadExample(t, "lab-none.yaml"))
	for _, stage := range stages.All {
		f, _ := lab.Lookup(stages.Script(stage))
		script := string(f.Data)
		if _, guard := execLines(t, f.Data); guard != "" {
			t.Errorf("lab %s: a guard runs under runtime none: %s", stage, guard)
		}
		for _, bad := range []string{"APPTAINER", "--no-mount", "--network"} {
			if strings.Contains(script, bad) {
				t.Errorf("lab %s: %q under runtime none", stage, bad)
			}
		}
		if !strings.Contains(script, "no isolation\n# guard runs") && !strings.Contains(script, "so no isolation") {
			t.Errorf("lab %s: the script does not say that no guard runs", stage)
		}
	}
}

// TestGuardStaged: guard.sh is in every stage's bundle whatever the stage
// command, and is one of eval's pinned inputs, copied and checked.
func TestGuardStaged(t *testing.T) {
	guard, err := os.ReadFile("payload/guard.sh")
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"lab-none.yaml", "cluster-example.yaml"} {
		tr := render(t, loadExample(t, name))
		for _, stage := range stages.All {
			f, ok := tr.Lookup(string(stage) + "/bundle/guard.sh")
			if !ok || string(f.Data) != string(guard) {
				t.Errorf("%s: %s/bundle/guard.sh missing or not the embedded guard", name, stage)
			}
		}
		f, _ := tr.Lookup(stages.Script(stages.Eval))
		script := string(f.Data)
		if !regexp.MustCompile(`(?m)^[0-9a-f]{64}  guard\.sh$`).MatchString(script) || !strings.Contains(script, "/eval/bundle/guard.sh ") {
			t.Errorf("%s: guard.sh not pinned and copied in the eval script", name)
		}
	}
}

const evalRecord = `echo 'NEMORL_ENV_RESULT={"reward": 1}'`

func readAll(t *testing.T, f *os.File) string {
	t.Helper()
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		t.Fatal(err)
	}
	b, err := io.ReadAll(f)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func writeWeights(t *testing.T, tr *Tree) {
	t.Helper()
	if err := os.WriteFile(filepath.Join(tr.Dir, "train/checkpoint/model.safetensors"), []byte("w"), 0o600); err != nil {
		t.Fatal(err)
	}
}

// TestRunEvalOutputRedirected: the eval script run with its stdout on
// another file while out.log exists refuses at once (67), and no record
// reaches either file.
func TestRunEvalOutputRedirected(t *testing.T) {
	t.Parallel()
	tr := stageRun(t, map[stages.Stage]string{stages.Eval: evalRecord + `; echo payload-ran >&2`})
	writeWeights(t, tr)
	log := filepath.Join(tr.Dir, stages.Output(stages.Eval))
	if err := os.WriteFile(log, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	other, err := os.Create(filepath.Join(tr.Dir, "other.log"))
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	code := runScriptTo(t, tr, stages.Eval, other)
	got := readAll(t, other)
	logData, _ := os.ReadFile(log)
	if code != stages.ExitOutputNotOwn || !strings.Contains(got, "output check (at start)") || strings.Contains(got, "payload-ran") {
		t.Fatalf("exit %d, want %d before the payload:\n%s", code, stages.ExitOutputNotOwn, got)
	}
	if strings.Contains(got, "NEMORL_ENV_RESULT") || strings.Contains(string(logData), "NEMORL_ENV_RESULT") {
		t.Fatalf("a record escaped:\nother.log:\n%s\nout.log:\n%s", got, logData)
	}
}

// TestRunEvalOutputChanged: out.log is fine at the start but not after the
// payload (replaced by another file, or given a second link): 67, and the
// payload's record reaches neither the old nor the new out.log.
func TestRunEvalOutputChanged(t *testing.T) {
	t.Parallel()
	for name, swap := range map[string]string{
		"replaced":  `log=$(dirname "$NEMORL_OUT")/out.log; rm -f "$log"; : > "$log"`,
		"hardlink":  `log=$(dirname "$NEMORL_OUT")/out.log; ln "$log" "$NEMORL_OUT/copy.log"`,
		"symlinked": `log=$(dirname "$NEMORL_OUT")/out.log; mv "$log" "$NEMORL_OUT/real.log"; ln -s "$NEMORL_OUT/real.log" "$log"`,
	} {
		t.Run(name, func(t *testing.T) {
			tr := stageRun(t, map[stages.Stage]string{stages.Eval: evalRecord + "\n" + swap + "\necho payload-ran >&2"})
			writeWeights(t, tr)
			log := filepath.Join(tr.Dir, stages.Output(stages.Eval))
			f, err := os.OpenFile(log, os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o600)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			code := runScriptTo(t, tr, stages.Eval, f)
			old := readAll(t, f)
			now, _ := os.ReadFile(log)
			if code != stages.ExitOutputNotOwn || !strings.Contains(old, "payload-ran") || !strings.Contains(old, "output check (after the payload)") {
				t.Fatalf("exit %d, want %d after the payload:\n%s", code, stages.ExitOutputNotOwn, old)
			}
			if strings.Contains(old, "NEMORL_ENV_RESULT") || strings.Contains(string(now), "NEMORL_ENV_RESULT") {
				t.Fatalf("a record escaped:\njob stdout:\n%s\nout.log now:\n%s", old, now)
			}
		})
	}
}

// TestRunEvalOwnOutput: everything right, the record lands in out.log, once,
// after the payload ended; the trusted payload's status passes through.
func TestRunEvalOwnOutput(t *testing.T) {
	t.Parallel()
	tr := stageRun(t, map[stages.Stage]string{stages.Eval: evalRecord + `; echo payload-ending >&2; exit "${NEMORL_TEST_STATUS:-0}"`})
	writeWeights(t, tr)
	out, code := runScript(t, tr, stages.Eval)
	if code != 0 || strings.Count(out, "NEMORL_ENV_RESULT=") != 1 {
		t.Fatalf("exit %d, want the record once:\n%s", code, out)
	}
	if strings.Index(out, "payload exited with status 0") > strings.Index(out, "NEMORL_ENV_RESULT=") {
		t.Errorf("the record reached out.log before the payload ended:\n%s", out)
	}
	// The stand-in's environment is env -i: pass a status by rewriting it.
	p := filepath.Join(filepath.Dir(tr.Dir), "standin-eval")
	if err := os.WriteFile(p, []byte("#!/bin/bash\n"+evalRecord+"\nexit 68\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	out, code = runScript(t, tr, stages.Eval)
	if code != stages.ExitWeightsRejected || strings.Count(out, "NEMORL_ENV_RESULT=") != 1 {
		t.Fatalf("eval's status must pass through: exit %d\n%s", code, out)
	}
}

// TestRunInputsNotRegular: the weights (eval) and the patch (train) must be
// regular files, not symlinks: 66.
func TestRunInputsNotRegular(t *testing.T) {
	tr := stageRun(t, map[stages.Stage]string{stages.Eval: `echo eval-ran`, stages.Train: `echo train-ran`})
	target := filepath.Join(tr.Dir, "elsewhere")
	if err := os.WriteFile(target, []byte("w"), 0o600); err != nil {
		t.Fatal(err)
	}
	for stage, rel := range map[stages.Stage]string{stages.Eval: "train/checkpoint/model.safetensors", stages.Train: "author/change.diff"} {
		if err := os.Symlink(target, filepath.Join(tr.Dir, rel)); err != nil {
			t.Fatal(err)
		}
		out, code := runScript(t, tr, stage)
		if code != stages.ExitInputBad || !strings.Contains(out, "symlink") || strings.Contains(out, string(stage)+"-ran") {
			t.Errorf("%s with a symlinked %s: exit %d\n%s", stage, rel, code, out)
		}
		if err := os.Remove(filepath.Join(tr.Dir, rel)); err != nil {
			t.Fatal(err)
		}
		if err := os.Mkdir(filepath.Join(tr.Dir, rel), 0o700); err != nil {
			t.Fatal(err)
		}
		if out, code := runScript(t, tr, stage); code != stages.ExitInputBad {
			t.Errorf("%s with a directory at %s: exit %d\n%s", stage, rel, code, out)
		}
	}
}

// TestRunReservedExit: a payload the policy controls (author, train) cannot
// exit with one of the scripts' own verdicts: 64..79 is reported as 1
// (TestScriptExitStatuses runs every status).
func TestRunReservedExit(t *testing.T) {
	tr := stageRun(t, map[stages.Stage]string{stages.Author: `exit 69`, stages.Train: `exit 67`})
	if err := os.WriteFile(filepath.Join(tr.Dir, "author/secrets.env"), []byte("K=x\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(tr.Dir, "author/change.diff"), []byte("d"), 0o600); err != nil {
		t.Fatal(err)
	}
	for stage, status := range map[stages.Stage]string{stages.Author: "69", stages.Train: "67"} {
		out, code := runScript(t, tr, stage)
		if code != stages.ExitPayloadReserved || !strings.Contains(out, "exit status "+status+" is not one of this script's verdicts: reported as 1") {
			t.Errorf("%s: exit %d, want %d:\n%s", stage, code, stages.ExitPayloadReserved, out)
		}
	}
}

// TestRunGuard runs the isolated train script with a stand-in apptainer
// that runs the real guard.sh from the bundle bind against a fake container
// tree: a clean tree lets the payload run, with the site's APPTAINER_* and
// SINGULARITY_* variables gone but the temporary and cache directories; a
// munge directory stops the job with 69 before the payload starts.
func TestRunGuard(t *testing.T) {
	dir := t.TempDir()
	fake := filepath.Join(dir, "apptainer")
	script := `#!/bin/bash
env | grep -E '^(APPTAINER|SINGULARITY)' | sort | sed 's/^/fake-env: /' >&2
shift # exec
binds=()
while [ $# -gt 0 ]; do
  case $1 in
    --bind) binds+=("$2"); shift 2 ;;
    --workdir | --env | --network | --no-mount | --pwd | --home) shift 2 ;;
    -*) shift ;;
    *) break ;;
  esac
done
shift # the image
case $2 in
  */guard.sh)
    [ -z "${FAKE_FAIL:-}" ] || exit 255
    for b in "${binds[@]}"; do
      IFS=: read -r h c _ <<< "$b"
      case $2 in "$c"/*) exec bash "$h${2#"$c"}" --root "$FAKE_ROOT" --proc "$FAKE_PROC" "$3" ;; esac
    done
    echo "fake apptainer: no bind for $2" >&2; exit 2 ;;
esac
echo "payload-ran $*" >&2
`
	if err := os.WriteFile(fake, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	cfg := loadExample(t, "cluster-example.yaml")
	cfg.Cluster.Workdir = filepath.Join(dir, "work")
	cfg.Cluster.GPUDevices = testGPUDevices
	cfg.Runtime.Binary = fake
	tr := render(t, cfg)
	writeTree(t, tr)
	if err := os.WriteFile(filepath.Join(tr.Dir, "author/change.diff"), []byte("d"), 0o600); err != nil {
		t.Fatal(err)
	}
	g := newGuardTree(t, stages.Train)
	g.writeProc(t)
	env := []string{"FAKE_ROOT=" + g.root, "FAKE_PROC=" + g.proc, "APPTAINER_BIND=/run/munge", "APPTAINERENV_SLURM_CONF=/etc/slurm/slurm.conf",
		"SINGULARITY_BINDPATH=/etc/slurm", "APPTAINER_NO_MOUNT=", "APPTAINER_TMPDIR=/tmp/at", "SINGULARITY_CACHEDIR=/tmp/sc"}
	out, code := runScript(t, tr, stages.Train, env...)
	if code != 0 || !strings.Contains(out, "payload-ran /bin/bash /nemorl/bundle/train.sh") || !strings.Contains(out, "nemorl: guard: no way to Slurm") {
		t.Fatalf("clean: exit %d\n%s", code, out)
	}
	seen := regexp.MustCompile(`fake-env: ([A-Z_]+)=`).FindAllStringSubmatch(out, -1)
	for _, m := range seen {
		if m[1] != "APPTAINER_TMPDIR" && m[1] != "SINGULARITY_CACHEDIR" {
			t.Errorf("%s reached apptainer:\n%s", m[1], out)
		}
	}
	if len(seen) != 6 { // the two kept, seen by the guard's exec, the GPU check's and the payload's
		t.Errorf("want APPTAINER_TMPDIR and SINGULARITY_CACHEDIR kept on all three exec lines:\n%s", out)
	}

	mkdirAll(t, filepath.Join(g.root, "run/munge"))
	out, code = runScript(t, tr, stages.Train, env...)
	if code != stages.ExitIsolation || strings.Contains(out, "payload-ran") || !strings.Contains(out, "nemorl: isolation: /run/munge is present") ||
		!strings.Contains(out, "nemorl: isolation: the guard refused the train container") {
		t.Fatalf("munge: exit %d, want %d and no payload:\n%s", code, stages.ExitIsolation, out)
	}

	// A guard that cannot run (the container did not start) verifies
	// nothing: the payload does not start either.
	out, code = runScript(t, tr, stages.Train, append(env, "FAKE_FAIL=1")...)
	if code != stages.ExitIsolation || strings.Contains(out, "payload-ran") || !strings.Contains(out, "nemorl: isolation: unverified") {
		t.Fatalf("guard failed to run: exit %d, want %d and no payload:\n%s", code, stages.ExitIsolation, out)
	}
}

// TestRunEvalRenamedAfterRecord: a forged copy renamed over out.log as soon
// as the genuine record appeared in it (what a same-user helper job can do)
// is caught by the script's checks after the record: 67.
func TestRunEvalRenamedAfterRecord(t *testing.T) {
	t.Parallel()
	tr := stageRun(t, map[stages.Stage]string{stages.Eval: evalRecord})
	writeWeights(t, tr)
	log := filepath.Join(tr.Dir, stages.Output(stages.Eval))
	f, err := os.OpenFile(log, os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := os.MkdirAll(tr.Dir+"/.node-tmp", 0o700); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("bash", filepath.Join(tr.Dir, stages.Script(stages.Eval)))
	cmd.Env = []string{"PATH=/usr/bin:/bin", "SLURM_JOB_ID=4242", "CUDA_VISIBLE_DEVICES=0", "TMPDIR=" + tr.Dir + "/.node-tmp"}
	cmd.Stdout, cmd.Stderr = f, f
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	deadline := time.Now().Add(20 * time.Second)
	for {
		b, _ := os.ReadFile(log)
		if strings.Contains(string(b), "NEMORL_ENV_RESULT=") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no record in out.log:\n%s", b)
		}
		time.Sleep(20 * time.Millisecond)
	}
	forged := filepath.Join(tr.Dir, "eval/forged.tmp")
	if err := os.WriteFile(forged, []byte(`NEMORL_ENV_RESULT={"reward": 1, "forged": true}`+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(forged, log); err != nil {
		t.Fatal(err)
	}
	err = <-done
	ee, ok := err.(*exec.ExitError)
	if got := readAll(t, f); !ok || ee.ExitCode() != stages.ExitOutputNotOwn || !strings.Contains(got, "output check (after the record)") {
		t.Fatalf("exit %v, want %d:\n%s", err, stages.ExitOutputNotOwn, got)
	}
}

// TestRenderScratchEnvNetworkPwd: every stage's exec line sets HOME and the
// caches under the job's scratch directory; container lines pass --pwd /tmp;
// train and eval get --net --network none unless stages.<stage>.network,
// and then the guard is told (--host-network); the author always keeps the
// network; train and eval check the GPU in the container.
func TestRenderScratchEnvNetworkPwd(t *testing.T) {
	cfg := loadExample(t, "cluster-example.yaml")
	tr := render(t, cfg)
	for _, stage := range stages.All {
		f, _ := tr.Lookup(stages.Script(stage))
		payload, guard := execLines(t, f.Data)
		for k, rel := range ScratchEnv(stage) {
			want := " --env " + k + "=/tmp/" + rel + " "
			if k == "HOME" {
				want = " --no-home --writable-tmpfs --no-mount hostfs,bind-paths --home /tmp/" + rel + " "
			}
			if !strings.Contains(payload, want) || !strings.Contains(guard, want) {
				t.Errorf("%s: exec lines lack %q:\n%s", stage, want, payload)
			}
		}
		for _, want := range []string{" --home /tmp/home ", " --env XDG_CACHE_HOME=/tmp/cache ", " --env XDG_CONFIG_HOME=/tmp/config ",
			" --env TRITON_CACHE_DIR=/tmp/cache/triton ", " --env VLLM_CACHE_ROOT=/tmp/cache/vllm ", " --env UV_CACHE_DIR=/tmp/cache/uv ",
			" --env TORCHINDUCTOR_CACHE_DIR=/tmp/cache/torchinductor ", " --env CUDA_CACHE_PATH=/tmp/cache/nv ", " --env PIP_CACHE_DIR=/tmp/cache/pip ", " --pwd /tmp "} {
			if !strings.Contains(payload, want) {
				t.Errorf("%s: payload line lacks %q:\n%s", stage, want, payload)
			}
		}
		// The train image pins HF_HOME to its read-only base model snapshot.
		if hf := strings.Contains(payload, " --env HF_HOME=/tmp/cache/huggingface "); hf != (stage != stages.Train) {
			t.Errorf("%s: HF_HOME under scratch = %v:\n%s", stage, hf, payload)
		}
		if !strings.Contains(string(f.Data), `mkdir -p -- "$nemorl_scratch/tmp/home" "$nemorl_scratch/tmp/cache" "$nemorl_scratch/tmp/config"`) {
			t.Errorf("%s: HOME and the caches are not made in the container's /tmp", stage)
		}
		noNet := strings.Contains(payload, " --net --network none ")
		if noNet != (stage != stages.Author) || strings.Contains(guard, "--host-network") {
			t.Errorf("%s: default network: --net --network none=%v\n%s", stage, noNet, guard)
		}
		gpu := gpuCheckLine(f.Data)
		if (gpu != "") != (stage != stages.Author) {
			t.Errorf("%s: container GPU check %q", stage, gpu)
		}
		if gpu != "" && (!strings.Contains(gpu, " --nv ") || !strings.Contains(gpu, "for d in /dev/nvidia[0-9]*; do") || !strings.Contains(gpu, "exit 70")) {
			t.Errorf("%s: container GPU check:\n%s", stage, gpu)
		}
		if hasGPU := strings.Contains(string(f.Data), "for nemorl_d in /dev/nvidia[0-9]*; do"); hasGPU != (stage != stages.Author) {
			t.Errorf("%s: host GPU check present = %v", stage, hasGPU)
		}
	}

	cfg.Stages.Train.Network = true
	tr = render(t, cfg)
	for _, stage := range stages.All {
		f, _ := tr.Lookup(stages.Script(stage))
		payload, guard := execLines(t, f.Data)
		noNet := strings.Contains(payload, " --net --network none ")
		if noNet != (stage == stages.Eval) || strings.Contains(guard, "--host-network") != (stage == stages.Train) {
			t.Errorf("train network true: %s: --net --network none=%v\n%s", stage, noNet, guard)
		}
	}

	lab := render(t, loadExample(t, "lab-none.yaml"))
	for _, stage := range stages.All {
		f, _ := lab.Lookup(stages.Script(stage))
		payload, _ := execLines(t, f.Data)
		for k, rel := range ScratchEnv(stage) {
			if want := ` "` + k + `=$nemorl_scratch/` + rel + `" `; !strings.Contains(payload, want) {
				t.Errorf("lab %s: lacks %s:\n%s", stage, want, payload)
			}
		}
		if strings.Contains(payload, "/nonexistent") || !strings.Contains(string(f.Data), `mkdir -p -- "$nemorl_scratch/home"`) {
			t.Errorf("lab %s: HOME not in scratch:\n%s", stage, payload)
		}
	}
}

// TestRunNoGPU: train and eval exit 70 with "nemorl: no GPU:" before their
// payload when Slurm gave no GPU or no device file matches
// cluster.gpu_devices.
func TestRunNoGPU(t *testing.T) {
	t.Parallel()
	tr := stageRun(t, map[stages.Stage]string{stages.Train: `echo payload-ran`, stages.Eval: `echo payload-ran`})
	writeWeights(t, tr)
	if err := os.WriteFile(filepath.Join(tr.Dir, "author/change.diff"), []byte("d"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, stage := range []stages.Stage{stages.Train, stages.Eval} {
		out, code := runScript(t, tr, stage, "CUDA_VISIBLE_DEVICES=")
		if code != stages.ExitNoGPU || !strings.Contains(out, "nemorl: no GPU: Slurm gave job 4242 no visible GPU") || strings.Contains(out, "payload-ran") {
			t.Errorf("%s without CUDA_VISIBLE_DEVICES: exit %d, want %d:\n%s", stage, code, stages.ExitNoGPU, out)
		}
		out, code = runScript(t, tr, stage, "CUDA_VISIBLE_DEVICES=", "SLURM_JOB_GPUS=1")
		if code != 0 || !strings.Contains(out, "nemorl: GPU 1 visible (/dev/null)") {
			t.Errorf("%s with SLURM_JOB_GPUS: exit %d:\n%s", stage, code, out)
		}
	}
	// A node whose driver is missing: no device file matches.
	cfg := loadExample(t, "lab-none.yaml")
	cfg.Cluster.Workdir = tr.Dir[:strings.LastIndex(tr.Dir, "/")]
	cfg.Cluster.GPUDevices = "/dev/nemorl-no-such-gpu[0-9]*"
	cfg.Stages.Train.Command = []string{"/bin/echo", "payload-ran"}
	tr2, err := Render(cfg, Input{Episode: "ep-nogpu", Prompt: []byte("p"), Version: "test"})
	if err != nil {
		t.Fatal(err)
	}
	writeTree(t, tr2)
	if err := os.WriteFile(filepath.Join(tr2.Dir, "author/change.diff"), []byte("d"), 0o600); err != nil {
		t.Fatal(err)
	}
	out, code := runScript(t, tr2, stages.Train)
	if code != stages.ExitNoGPU || !strings.Contains(out, "nemorl: no GPU: GPU 0: no device file matches /dev/nemorl-no-such-gpu[0-9]*") || strings.Contains(out, "payload-ran") {
		t.Errorf("no device file: exit %d, want %d:\n%s", code, stages.ExitNoGPU, out)
	}
}

// TestTermKillsPayloadThatIgnoresIt: a payload that ignores TERM is killed
// (its whole process group) nemorl_term_wait s after the batch shell got
// TERM — two thirds of KillWait, written into the script at render (3 s
// here; the script never runs scontrol: a stand-in that would say 30 s
// records any call) — and the script removes its scratch directory and
// exits before Slurm's KILL would.
func TestTermKillsPayloadThatIgnoresIt(t *testing.T) {
	t.Parallel()
	tr := stageRunKillWait(t, map[stages.Stage]string{stages.Train: `trap '' TERM; echo "home=$HOME"; sleep 300 & echo started; wait`}, 3*time.Second)
	if err := os.WriteFile(filepath.Join(tr.Dir, "author/change.diff"), []byte("d"), 0o600); err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(tr.Dir, "fakebin")
	mkdirAll(t, bin)
	scontrolRan := filepath.Join(tr.Dir, "scontrol-ran")
	if err := os.WriteFile(filepath.Join(bin, "scontrol"), []byte("#!/bin/sh\n: > "+scontrolRan+"\necho 'KillWait                = 30 sec'\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(bin, "squeue"), []byte("#!/bin/sh\nexit 1\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	mkdirAll(t, tr.Dir+"/.node-tmp")
	var out syncBuffer
	cmd := exec.Command("bash", filepath.Join(tr.Dir, stages.Script(stages.Train)))
	cmd.Env = []string{"PATH=" + bin + ":/usr/bin:/bin", "CUDA_VISIBLE_DEVICES=0", "SLURM_JOB_ID=4243", "TMPDIR=" + tr.Dir + "/.node-tmp"}
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for !strings.Contains(out.String(), "started") && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	home := regexp.MustCompile(`home=(\S+)`).FindStringSubmatch(out.String())
	if home == nil || !strings.HasPrefix(home[1], tr.Dir+"/.node-tmp/nemorl-train.") {
		t.Fatalf("HOME not in the scratch directory:\n%s", out.String())
	}
	start := time.Now()
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		if took := time.Since(start); took < 1500*time.Millisecond || took > 3500*time.Millisecond {
			t.Errorf("the script ended %v after TERM, want about 2 s (2/3 of KillWait 3 s)", took)
		}
		// The payload killed: 137, which the script reports as 1 (a
		// status of 128 or more would read as 9 before Slurm 25.11).
		ee, ok := err.(*exec.ExitError)
		if want := stages.ScriptExit(stages.Train, 137); !ok || ee.ExitCode() != want || !strings.Contains(out.String(), "payload exited with status 137\n") {
			t.Errorf("want the payload's 137 seen and exit %d, got %v\n%s", want, err, out.String())
		}
	case <-time.After(15 * time.Second):
		_ = cmd.Process.Kill()
		<-done
		t.Fatalf("batch shell did not end after TERM\n%s", out.String())
	}
	if !strings.Contains(out.String(), "killing its process group") || !strings.Contains(out.String(), "it has 2 s to exit") {
		t.Errorf("no kill after the bounded wait:\n%s", out.String())
	}
	if _, err := os.Stat(scontrolRan); err == nil {
		t.Error("the script ran scontrol")
	}
	if _, err := os.Stat(filepath.Dir(home[1])); !os.IsNotExist(err) {
		t.Errorf("scratch %s left: %v", filepath.Dir(home[1]), err)
	}
	// The payload's background sleep was in its process group: gone too.
	if b, _ := exec.Command("pgrep", "-f", "^sleep 300$").Output(); len(b) > 0 {
		for _, pid := range strings.Fields(string(b)) {
			if env, _ := os.ReadFile("/proc/" + pid + "/environ"); strings.Contains(string(env), home[1]) {
				t.Errorf("the payload's child %s survived", pid)
			}
		}
	}
}
