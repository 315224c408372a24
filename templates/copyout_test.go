package templates

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/nemorl/nemorl-slurm/stages"
)

// fakeApptainer runs the guard for real (its bundle path translated
// through the binds) and plays the payload, writing where the container's
// output directory is bound:
//   - train.sh: FAKE_WEIGHTS bytes of weights (sparse; a symlink to
//     FAKE_LINK instead when set), a junk file, FAKE_STDOUT bytes of output
//     ending in a record line;
//   - author.sh: FAKE_PATCH bytes of change.diff, a response.json,
//     FAKE_LOG bytes of transcript.jsonl, a junk file, and a line saying
//     whether it found the key in its node-local directory.
const fakeApptainer = `#!/bin/bash
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
out=
for b in "${binds[@]}"; do
  IFS=: read -r h c _ <<< "$b"
  case $2 in "$c"/*guard.sh) exec bash "$h${2#"$c"}" --root "$FAKE_ROOT" --proc "$FAKE_PROC" "$3" ;; esac
  case $c in /nemorl/out | /nemorl/author) out=$h ;; esac
done
[ -n "$out" ] || { echo "fake apptainer: no output bind" >&2; exit 2; }
case $2 in
  */guard.sh) echo "fake apptainer: no guard bind" >&2; exit 2 ;;
  */train.sh)
    if [ -n "${FAKE_LINK:-}" ]; then
      ln -s "$FAKE_LINK" "$out/model.safetensors"
    else
      truncate -s "$FAKE_WEIGHTS" "$out/model.safetensors"
      printf 'weights of %s bytes' "$FAKE_WEIGHTS" | dd of="$out/model.safetensors" conv=notrunc status=none
    fi
    ;;
  */author.sh)
    if grep -q '^NEMORL_POLICY_API_KEY=' "$out/secrets.env" && [ -f "$out/bundle/author.json" ] && [ -f "$out/prompt.txt" ]; then
      echo "fake author: key, bundle and prompt in the node-local directory"
    fi
    rm -f "$out/secrets.env"
    truncate -s "$FAKE_PATCH" "$out/change.diff"
    printf 'patch of %s bytes' "$FAKE_PATCH" | dd of="$out/change.diff" conv=notrunc status=none
    echo '{"object": "response"}' > "$out/response.json"
    head -c "$FAKE_LOG" /dev/zero | tr '\0' y > "$out/transcript.jsonl"
    echo "NEMORL_ENV_AUTHOR_RESULT=the-record"
    ;;
  *) exit 0 ;; # the GPU check
esac
head -c $((5 << 20)) /dev/zero > "$out/junk"
head -c "${FAKE_STDOUT:-0}" /dev/zero | tr '\0' x
echo
echo "NEMORL_ENV_TRAIN_RESULT=the-record"
`

// fakeApptainerTree renders and writes the example config's episode with
// fakeApptainer as the runtime, in a temp dir it returns.
func fakeApptainerTree(t *testing.T) (string, *Tree) {
	t.Helper()
	dir := t.TempDir()
	fake := filepath.Join(dir, "apptainer")
	if err := os.WriteFile(fake, []byte(fakeApptainer), 0o755); err != nil {
		t.Fatal(err)
	}
	cfg := loadExample(t, "cluster-example.yaml")
	cfg.Cluster.Workdir = filepath.Join(dir, "work")
	cfg.Cluster.GPUDevices = testGPUDevices
	cfg.Runtime.Binary = fake
	tr := render(t, cfg)
	writeTree(t, tr)
	return dir, tr
}

// The isolated train payload writes node-local scratch only: the script
// copies out the weights alone, within MaxWeightsBytes, and the payload's
// stdout and stderr reach out.log through the cap (the first
// OutputHeadBytes, then only the last OutputTailBytes, the record's window).
// A fake apptainer runs the guard for real and plays the payload: it
// writes FAKE_WEIGHTS bytes of weights (sparse), a junk file and
// FAKE_STDOUT bytes of output ending in a record line.
func TestTrainCopyOut(t *testing.T) {
	dir, tr := fakeApptainerTree(t)
	if err := os.WriteFile(filepath.Join(tr.Dir, "author/change.diff"), []byte("d"), 0o600); err != nil {
		t.Fatal(err)
	}
	g := newGuardTree(t, stages.Train)
	g.writeProc(t)
	weights := filepath.Join(tr.Dir, "train/checkpoint/model.safetensors")
	secret := filepath.Join(dir, "not-the-payloads")
	if err := os.WriteFile(secret, []byte("a file outside the container's scratch"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name            string
		weights, stdout int64
		code            int
		link            string // the weights a symlink to this file
	}{
		{"small output", 1 << 20, 1000, 0, ""},
		{"output past the cap", 2 << 20, 40 << 20, 0, ""},
		{"weights past the bound", MaxWeightsBytes() + 1, 1000, stages.ExitOutputBound, ""},
		{"weights a symlink", 1 << 20, 1000, 0, secret},
	} {
		t.Run(c.name, func(t *testing.T) {
			_ = os.Remove(weights)
			out, code := runScript(t, tr, stages.Train, "FAKE_ROOT="+g.root, "FAKE_PROC="+g.proc, "FAKE_LINK="+c.link,
				fmt.Sprintf("FAKE_WEIGHTS=%d", c.weights), fmt.Sprintf("FAKE_STDOUT=%d", c.stdout))
			if code != c.code {
				t.Fatalf("exit %d, want %d\n%.3000s", code, c.code, tail(out, 3000))
			}
			if !strings.Contains(tail(out, OutputTailBytes), "NEMORL_ENV_TRAIN_RESULT=the-record\n") {
				t.Errorf("the record is not in out.log's last %d bytes", OutputTailBytes)
			}
			if max := int64(OutputHeadBytes + OutputTailBytes + 64<<10); int64(len(out)) > max {
				t.Errorf("out.log has %d bytes, more than the cap's %d", len(out), max)
			}
			capped := strings.Contains(out, "nemorl: the payload's output went past")
			if capped != (c.stdout > OutputHeadBytes) {
				t.Errorf("cap notice %v for %d bytes of output", capped, c.stdout)
			}
			// Nothing but the weights reached the shared directory.
			entries, err := os.ReadDir(filepath.Dir(weights))
			if err != nil {
				t.Fatal(err)
			}
			var names []string
			for _, e := range entries {
				names = append(names, e.Name())
			}
			fi, err := os.Stat(weights)
			if c.link != "" {
				if err == nil || len(names) != 0 || !strings.Contains(out, "left no regular file of weights") {
					t.Errorf("weights a symlink to %s: copied %v (%v)\n%s", c.link, names, err, tail(out, 2000))
				}
				return
			}
			if c.code != 0 {
				if err == nil || len(names) != 0 || !strings.Contains(out, "nemorl: output bound: the payload's model.safetensors is") {
					t.Errorf("weights over the bound: copied %v (%v)\n%s", names, err, tail(out, 2000))
				}
				return
			}
			if err != nil || fi.Size() != c.weights || len(names) != 1 {
				t.Fatalf("weights copied out: %v %v; the shared directory holds %v", fi, err, names)
			}
			f, err := os.Open(weights)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			want := fmt.Sprintf("weights of %d bytes", c.weights)
			got := make([]byte, len(want))
			if _, err := io.ReadFull(f, got); err != nil || string(got) != want {
				t.Errorf("copied weights start %q (%v), want the payload's %q", got, err, want)
			}
		})
	}
}

func tail(s string, n int) string {
	if len(s) > n {
		return s[len(s)-n:]
	}
	return s
}

// The isolated author payload writes node-local scratch only: the script
// copies the bundle and the prompt in and moves the key in (the shared
// secrets.env is gone before the payload starts), then copies back the
// patch and the response whole within their bounds, the logs' first
// OutputHeadBytes, and nothing else.
func TestAuthorCopyOut(t *testing.T) {
	_, tr := fakeApptainerTree(t)
	g := newGuardTree(t, stages.Author)
	g.writeProc(t)
	shared := filepath.Join(tr.Dir, string(stages.Author))
	for _, c := range []struct {
		name       string
		patch, log int64
		want       map[string]int64 // what the shared author directory holds, with sizes
	}{
		{"small", 1000, 1000, map[string]int64{"change.diff": 1000, "response.json": 23, "transcript.jsonl": 1000}},
		{"patch and log past their bounds", stages.MaxPatchBytes + 1, OutputHeadBytes + 5<<20,
			map[string]int64{"response.json": 23, "transcript.jsonl": OutputHeadBytes}},
	} {
		t.Run(c.name, func(t *testing.T) {
			for name := range c.want {
				_ = os.Remove(filepath.Join(shared, name))
			}
			_ = os.Remove(filepath.Join(shared, "change.diff"))
			if err := os.WriteFile(filepath.Join(shared, "secrets.env"), []byte("NEMORL_POLICY_API_KEY="+testKey+"\n"), 0o600); err != nil {
				t.Fatal(err)
			}
			out, code := runScript(t, tr, stages.Author, "FAKE_ROOT="+g.root, "FAKE_PROC="+g.proc,
				fmt.Sprintf("FAKE_PATCH=%d", c.patch), fmt.Sprintf("FAKE_LOG=%d", c.log))
			if code != 0 {
				t.Fatalf("exit %d, want 0\n%.3000s", code, tail(out, 3000))
			}
			if !strings.Contains(out, "fake author: key, bundle and prompt in the node-local directory") {
				t.Errorf("the payload did not find the key, bundle and prompt in its node-local directory\n%s", tail(out, 2000))
			}
			got := map[string]int64{}
			entries, err := os.ReadDir(shared)
			if err != nil {
				t.Fatal(err)
			}
			for _, e := range entries {
				if fi, err := e.Info(); err == nil && fi.Mode().IsRegular() {
					got[e.Name()] = fi.Size()
				}
			}
			for _, staged := range []string{"author.sbatch", "prompt.txt", "out.log"} {
				if _, ok := got[staged]; !ok {
					t.Errorf("the shared author directory lost %s", staged)
				}
				delete(got, staged)
			}
			if fmt.Sprint(got) != fmt.Sprint(c.want) {
				t.Errorf("the shared author directory holds %v, want %v\n%s", got, c.want, tail(out, 2000))
			}
			if c.patch > stages.MaxPatchBytes && !strings.Contains(out, fmt.Sprintf("the payload's change.diff is %d bytes, more than the %d it may have: not copied out", c.patch, stages.MaxPatchBytes)) {
				t.Errorf("no notice of the patch over its bound\n%s", tail(out, 2000))
			}
			if c.patch <= stages.MaxPatchBytes {
				b, err := os.ReadFile(filepath.Join(shared, "change.diff"))
				if want := fmt.Sprintf("patch of %d bytes", c.patch); err != nil || !strings.HasPrefix(string(b), want) {
					t.Errorf("copied patch starts %.40q (%v), want %q", b, err, want)
				}
			}
		})
	}
}

// The eval script copies the author's patch to node-local scratch (its
// first stages.MaxPatchBytes at most, opened once) and the payload reads
// only that copy: a symlink, a FIFO or a missing file gives an empty copy
// (which names another patch than the author's record), never a hang or
// a read through the link.
func TestEvalPatchCopy(t *testing.T) {
	t.Parallel()
	tr := stageRun(t, map[stages.Stage]string{stages.Eval: `case $NEMORL_PATCH in */author/change.diff) echo "payload reads the shared patch"; exit 1 ;; esac
echo "payload patch: $(stat -c %s -- "$NEMORL_PATCH") bytes, $(head -c 16 -- "$NEMORL_PATCH")"`})
	writeWeights(t, tr)
	patch := filepath.Join(tr.Dir, "author/change.diff")
	secret := filepath.Join(tr.Dir, "not-the-patch")
	if err := os.WriteFile(secret, []byte("a file that is not the patch"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name string
		make func() error
		want string
	}{
		{"regular", func() error { return os.WriteFile(patch, []byte("diff --git a/x b/x\n"), 0o600) }, "payload patch: 19 bytes, diff --git a/x b\n"},
		{"missing", func() error { return nil }, "payload patch: 0 bytes, "},
		{"symlink", func() error { return os.Symlink(secret, patch) }, "payload patch: 0 bytes, "},
		{"fifo", func() error { return syscall.Mkfifo(patch, 0o600) }, "payload patch: 0 bytes, "},
		{"past the bound", func() error {
			if err := os.WriteFile(patch, []byte("diff --git a/y b/y\n"), 0o600); err != nil {
				return err
			}
			return os.Truncate(patch, stages.MaxPatchBytes+5)
		}, fmt.Sprintf("payload patch: %d bytes, diff --git a/y b\n", stages.MaxPatchBytes)},
	} {
		t.Run(c.name, func(t *testing.T) {
			_ = os.Remove(patch)
			if err := c.make(); err != nil {
				t.Fatal(err)
			}
			out, code := runScript(t, tr, stages.Eval)
			if code != 0 || !strings.Contains(out, c.want) {
				t.Fatalf("exit %d, want 0 and %q\n%s", code, c.want, tail(out, 2000))
			}
		})
	}
}
