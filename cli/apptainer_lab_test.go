package cli

// Episodes in real containers (issue #20): the lab's Apptainer (built from
// source by lab/up), its SIF images of the stand-ins, the node made to look
// like a GPU node to --nv by lab/gpu-node, through the built binary over
// SSH with configs/lab.yaml. Then the refusals a site can cause:
// a wrapper that binds munge's directory, munge's socket bound onto a
// placeholder file in /.singularity.d (invisible to find -type s), and the
// node without a GPU.

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/nemorl/nemorl-slurm/internal/labtest"
	"github.com/nemorl/nemorl-slurm/record"
	"github.com/nemorl/nemorl-slurm/rules"
	"github.com/nemorl/nemorl-slurm/stages"
	"github.com/nemorl/nemorl-slurm/templates"
)

const labApptainer = "/opt/nemorl-lab/apptainer/bin/apptainer"

// gpuNodeMu keeps the tests that turn lab/gpu-node on and off from
// overlapping each other. Nothing else in the lab reads what gpu-node
// makes (the stand-in driver files --nv binds: only the Apptainer tests'
// containers see them; the other lab tests run without isolation and
// check the fake GPUs of gres.conf, /dev/nemorl-fakegpu*), so these tests
// hold the lab shared and run alongside the others.
var gpuNodeMu sync.Mutex

// holdGPUNode runs t as the only test that changes lab/gpu-node, until it
// ends.
func holdGPUNode(t *testing.T) {
	gpuNodeMu.Lock()
	t.Cleanup(gpuNodeMu.Unlock) // registered first: runs after gpu-node off
}

// gpuNode runs lab/gpu-node on|off.
func gpuNode(t *testing.T, arg string) {
	t.Helper()
	if out, err := exec.Command("../lab/gpu-node", arg).CombinedOutput(); err != nil {
		t.Fatalf("lab/gpu-node %s: %v\n%s", arg, err, out)
	}
}

func TestApptainerLab(t *testing.T) {
	t.Parallel()
	holdGPUNode(t)
	x := newLabCLI(t)
	requireStandIns(t)
	if _, err := os.Stat(labApptainer); err != nil {
		if os.Getenv("NEMORL_REQUIRE_LAB") != "" {
			t.Fatalf("the lab has no Apptainer (%v): lab/up installs it", err)
		}
		t.Skip("no Apptainer in the lab")
	}
	base, err := os.ReadFile("../configs/lab.yaml")
	if err != nil {
		t.Fatal(err)
	}
	cfgText := x.lab.WithWorkdir(t, string(base), x.sharedWorkdir, x.lab.Workdir)
	write := func(name, text string) string {
		p := filepath.Join(t.TempDir(), name)
		if err := os.WriteFile(p, []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	state := t.TempDir()
	cfg := write("lab.yaml", cfgText)
	// The eval image is pinned the way a site pins it.
	x.run(t, state, quickTimeout, "images", "lock", "--config", cfg).want(t, ExitOK)
	locked, err := os.ReadFile(cfg)
	if err != nil || strings.Contains(string(locked), "sha256:0000") {
		t.Fatalf("images lock did not pin the eval image: %v\n%s", err, locked)
	}
	gpuNode(t, "on")
	t.Cleanup(func() { gpuNode(t, "off") }) // the stand-in libraries stay out of the ld cache

	type outcome struct {
		Outcome       string `json:"outcome"`
		FailureReason string `json:"failure_reason"`
		FailureStage  string `json:"failure_stage"`
		Detail        string `json:"detail"`
		Isolation     string `json:"isolation"`
		Reward        *float64
		Jobs          map[string]struct {
			State string `json:"state"`
		} `json:"jobs"`
	}
	runEp := func(name, config string, want int) outcome {
		t.Helper()
		ep := newEpisode(t, name)
		r := x.run(t, state, episodeTimeout, "run", "--config", config, "--json", "--episode", ep).want(t, want)
		var o outcome
		if err := json.Unmarshal([]byte(r.stdout), &o); err != nil {
			t.Fatalf("%s: %v\n%s", name, err, r)
		}
		return o
	}

	// A GPU node running nvidia-persistenced: scored in real containers,
	// on each Slurm (both at once; cluster 3's 24.11 through its login,
	// where the lab user's RPCs are rate limited), and Slurm's accounting
	// there shows the episode's three jobs.
	t.Run("scored", func(t *testing.T) {
		labtest.EachSlurm(t, func(t *testing.T, s labtest.Slurm) {
			p := filepath.Join(t.TempDir(), "lab.yaml")
			if err := os.WriteFile(p, []byte(withLogin(t, string(locked), x.lab, s.Lab)), 0o600); err != nil {
				t.Fatal(err)
			}
			ep := newEpisodeOn(t, s, "gpu")
			r := x.run(t, state, episodeTimeout, "run", "--config", p, "--json", "--episode", ep).want(t, ExitOK)
			var o outcome
			if err := json.Unmarshal([]byte(r.stdout), &o); err != nil {
				t.Fatalf("%v\n%s", err, r)
			}
			if o.Outcome != "scored" || o.Isolation != "apptainer" || o.Jobs["author"].State != "COMPLETED" || o.Jobs["train"].State != "COMPLETED" || o.Jobs["eval"].State != "COMPLETED" {
				t.Fatalf("on the GPU node of %s (Slurm %s): %+v", s.Cluster, s.Version, o)
			}
			waitSacctOn(t, s, ep, sacctWant{states: allStates("COMPLETED", labStages...), tags: true})
		})
	})
	if t.Failed() {
		t.FailNow()
	}

	// A site wrapper that adds --bind /run/munge: refused, the path and
	// its cause named in the outcome.
	wrapper := filepath.Join(x.lab.Workdir, "apptainer-site-wrapper")
	if err := os.WriteFile(wrapper, []byte("#!/bin/sh\ncmd=$1; shift\nexec "+labApptainer+" \"$cmd\" --bind /run/munge \"$@\"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	o := runEp("munge-wrapper", write("wrapper.yaml", strings.Replace(string(locked), "binary: "+labApptainer, "binary: "+wrapper, 1)), ExitInfra)
	if o.Outcome != "infra_failure" || o.FailureReason != "isolation_breach" || o.FailureStage != "author" ||
		!strings.Contains(o.Detail, "mount point /run/munge is not allowed") || !strings.Contains(o.Detail, "a site bind") {
		t.Errorf("a wrapper binding /run/munge: %+v", o)
	}
	// munge's socket bound onto a placeholder file where the allowlist
	// would take a file: [ -S ] on the mount point sees it.
	sneaky := filepath.Join(x.lab.Workdir, "apptainer-socket-wrapper")
	if err := os.WriteFile(sneaky, []byte("#!/bin/sh\ncmd=$1; shift\nexec "+labApptainer+" \"$cmd\" --bind /run/munge/munge.socket.2:/.singularity.d/munge.socket.2 \"$@\"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	o = runEp("munge-socket", write("socket.yaml", strings.Replace(string(locked), "binary: "+labApptainer, "binary: "+sneaky, 1)), ExitInfra)
	if o.Outcome != "infra_failure" || o.FailureReason != "isolation_breach" ||
		!strings.Contains(o.Detail, "mount point /.singularity.d/munge.socket.2 is not allowed in the author container: a unix socket") {
		t.Errorf("munge's socket on a placeholder file: %+v", o)
	}

	// doctor runs the guard where the jobs run: passing on the lab, and
	// failing with a named fix for the wrapper's bind of /run/munge.
	doctor := func(config string, want int) map[string][]map[string]string {
		t.Helper()
		r := x.run(t, state, episodeTimeout, "--json", "--config", config, "doctor", "--skip-endpoint").want(t, want)
		var doc struct {
			Checks []map[string]string `json:"checks"`
		}
		if err := json.Unmarshal([]byte(r.stdout), &doc); err != nil {
			t.Fatalf("doctor --json: %v\n%s", err, r)
		}
		out := map[string][]map[string]string{}
		for _, c := range doc.Checks {
			out[c["name"]] = append(out[c["name"]], c)
		}
		return out
	}
	checks := doctor(cfg, ExitOK)
	for _, st := range []string{"author", "train"} {
		if c := checks["isolation "+st]; len(c) != 1 || c[0]["status"] != "ok" {
			t.Errorf("doctor on the lab: isolation %s: %v", st, c)
		}
	}
	checks = doctor(write("doctor-wrapper.yaml", strings.Replace(string(locked), "binary: "+labApptainer, "binary: "+wrapper, 1)), ExitUsage)
	for _, st := range []string{"author", "train"} {
		c := checks["isolation "+st]
		if len(c) != 1 || c[0]["status"] != "fail" || !strings.Contains(c[0]["detail"], "mount point /run/munge") || !strings.Contains(c[0]["fix"], "remove the site bind") {
			t.Errorf("doctor with a wrapper binding /run/munge: isolation %s: %v", st, c)
		}
	}

	// A site whose apptainer.conf says `mount hostfs = yes`, with a host
	// file system to mount: the setting is live (a plain exec mounts it),
	// and --no-mount hostfs,bind-paths neutralises it (scored).
	conf := "/opt/nemorl-lab/apptainer/etc/apptainer/apptainer.conf"
	orig, err := os.ReadFile(conf)
	if err != nil || !strings.Contains(string(orig), "\nmount hostfs = no\n") {
		t.Fatalf("%s: %v, want a line mount hostfs = no", conf, err)
	}
	hostfs := "/srv/nemorl-lab-hostfs"
	if err := os.MkdirAll(hostfs, 0o755); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", hostfs).CombinedOutput(); err != nil {
		t.Fatalf("mount a host file system: %v %s", err, out)
	}
	t.Cleanup(func() { _ = exec.Command("umount", hostfs).Run() })
	if err := os.WriteFile(conf, []byte(strings.Replace(string(orig), "\nmount hostfs = no\n", "\nmount hostfs = yes\n", 1)), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.WriteFile(conf, orig, 0o644) })
	plain, err := exec.Command("su", "nemorl", "-s", "/bin/sh", "-c", labApptainer+" -s exec --containall /opt/nemorl-lab/images/author.sif cat /proc/self/mountinfo").CombinedOutput()
	if err != nil || !strings.Contains(string(plain), " "+hostfs+" ") {
		t.Fatalf("mount hostfs = yes does not mount %s in a plain exec (%v): the case proves nothing\n%s", hostfs, err, plain)
	}
	if o := runEp("hostfs", cfg, ExitOK); o.Outcome != "scored" || o.Isolation != "apptainer" {
		t.Errorf("with mount hostfs = yes: %+v, want scored (neutralised by --no-mount hostfs)", o)
	}
	_ = os.WriteFile(conf, orig, 0o644)

	// The node without a GPU: train finds none (retried, then masked).
	gpuNode(t, "off")
	o = runEp("no-gpu", cfg, ExitInfra)
	if o.Outcome != "infra_failure" || o.FailureReason != "no_gpu" || o.FailureStage != "train" || o.Isolation != "apptainer" {
		t.Errorf("without a GPU: %+v", o)
	}
}

// TestAttackApptainerLab: the train stand-in's attacks on Slurm (an
// impostor eval job, cancelling the eval, a helper job rewriting eval's
// output), which the runtime-none attack tests show being caught, find no
// way to Slurm in the real train container: the attack is not mounted,
// and the episode is the policy's 0, never a masked sample.
func TestAttackApptainerLab(t *testing.T) {
	t.Parallel()
	holdGPUNode(t)
	x := newLabCLI(t)
	requireStandIns(t)
	if _, err := os.Stat(labApptainer); err != nil {
		t.Fatalf("the lab has no Apptainer (%v): lab/up installs it", err)
	}
	base, err := os.ReadFile("../configs/lab.yaml")
	if err != nil {
		t.Fatal(err)
	}
	state := t.TempDir()
	cfgText := x.lab.WithWorkdir(t, string(base), x.sharedWorkdir, x.lab.Workdir)
	cfg := filepath.Join(t.TempDir(), "lab.yaml")
	if err := os.WriteFile(cfg, []byte(cfgText), 0o600); err != nil {
		t.Fatal(err)
	}
	x.run(t, state, quickTimeout, "images", "lock", "--config", cfg).want(t, ExitOK)
	locked, err := os.ReadFile(cfg)
	if err != nil {
		t.Fatal(err)
	}
	gpuNode(t, "on")
	t.Cleanup(func() { gpuNode(t, "off") })
	// runWith runs an episode whose stage stand-in gets args (YAML list
	// items), and returns its outcome.
	runWith := func(t *testing.T, stage stages.Stage, args, name string) outcomeJSON {
		old := "command: [" + labStandIns + "/" + string(stage) + "]"
		p := filepath.Join(t.TempDir(), string(stage)+".yaml")
		if err := os.WriteFile(p, []byte(strings.Replace(string(locked), old, "command: ["+labStandIns+"/"+string(stage)+", "+args+"]", 1)), 0o600); err != nil {
			t.Fatal(err)
		}
		ep := newEpisode(t, "ctr-"+name)
		return outcomeOf(t, x.run(t, state, episodeTimeout, "run", "--config", p, "--json", "--episode", ep).want(t, ExitOK))
	}
	for _, mode := range []string{"impostor-eval", "cancel-eval", "helper-rewrites-eval", "redirect-eval-stdout", "plant-eval-fifo"} {
		t.Run(mode, func(t *testing.T) {
			o := runWith(t, stages.Train, "--"+mode, mode)
			ep := o.Episode
			if o.Outcome != "policy_failure" || o.MaskSample || o.Isolation != "apptainer" || o.FailureStage != "train" {
				t.Errorf("outcome %s (%s: %s) mask %v isolation %s, want the policy's 0 from train in a container", o.Outcome, o.FailureStage, o.FailureReason, o.MaskSample, o.Isolation)
			}
			logs := x.run(t, state, quickTimeout, "logs", ep, "--stage", "train").want(t, ExitOK)
			if !strings.Contains(string(logs.stdout)+logs.stderr, "ATTACK NOT MOUNTED (--"+mode+")") {
				t.Errorf("train's log does not say the attack failed:\n%s", logs.stdout)
			}
			// Slurm saw the episode's own jobs only; eval never ran (its
			// dependency on train failed).
			jobs := waitSacct(t, ep, sacctWant{states: map[string]string{"author": "COMPLETED", "train": "FAILED", "eval": "CANCELLED"}, tags: true})
			if len(jobs) > 3 {
				t.Errorf("sacct shows %d jobs for %s, want its own three at most: %+v", len(jobs), ep, jobs)
			}
		})
	} // A train payload that writes 8 GiB of output and grows its weights
	// past any the architecture can have: out.log keeps the cap's bytes
	// (the record among them), the weights are not copied out, nothing
	// else reaches the shared file system, and the outcome is the policy's.
	t.Run("flood-bytes", func(t *testing.T) {
		const n = int64(8) << 30
		o := runWith(t, stages.Train, fmt.Sprintf("--flood-bytes, \"%d\"", n), "flood")
		if o.Outcome != "policy_failure" || o.FailureReason != rules.ReasonOutputTooLarge || o.FailureStage != "train" || o.MaskSample {
			t.Fatalf("outcome %s (%s: %s) mask %v, want policy_failure (train: output_too_large): %s", o.Outcome, o.FailureStage, o.FailureReason, o.MaskSample, o.Detail)
		}
		fi, err := os.Stat(filepath.Join(o.Dir, "train", "out.log"))
		if err != nil || fi.Size() > templates.OutputHeadBytes+templates.OutputTailBytes+64<<10 {
			t.Errorf("train's out.log: %v, %v: want at most the cap's %d bytes", fi, err, templates.OutputHeadBytes+templates.OutputTailBytes)
		}
		left, err := os.ReadDir(filepath.Join(o.Dir, "train", "checkpoint"))
		if err != nil || len(left) != 0 {
			t.Errorf("train/checkpoint holds %v (%v): want nothing copied out", left, err)
		}
		t.Logf("%d bytes written by the payload; out.log %d bytes; %s", 2*n, fi.Size(), o.Detail)
	})
	// The author container writes node-local scratch only: a junk file and
	// a flooded transcript stay on the node (the transcript's first 16 MiB
	// come back) and the episode goes on; a patch that is not a regular
	// file within its bound is not copied back, and the record's claim
	// about it makes the episode the policy's 0.
	authorAttack := func(t *testing.T, args, name string) (outcomeJSON, string) {
		o := runWith(t, stages.Author, args, name)
		return o, filepath.Join(o.Dir, string(stages.Author))
	}
	t.Run("author-flood-bytes", func(t *testing.T) {
		const n = int64(1) << 30
		o, dir := authorAttack(t, fmt.Sprintf("--flood-bytes, \"%d\"", n), "author-flood")
		if o.Outcome != "scored" {
			t.Errorf("outcome %s (%s: %s), want scored: the flood stayed on the node", o.Outcome, o.FailureStage, o.FailureReason)
		}
		if _, err := os.Lstat(filepath.Join(dir, "junk.bin")); !os.IsNotExist(err) {
			t.Errorf("author/junk.bin reached the shared file system (%v)", err)
		}
		fi, err := os.Stat(filepath.Join(dir, "transcript.jsonl"))
		if err != nil || fi.Size() != templates.OutputHeadBytes {
			t.Errorf("author/transcript.jsonl: %v %v, want its first %d bytes", fi, err, templates.OutputHeadBytes)
		}
		var total int64
		_ = filepath.Walk(dir, func(_ string, fi os.FileInfo, err error) error {
			if err == nil && fi.Mode().IsRegular() {
				total += fi.Size()
			}
			return nil
		})
		t.Logf("%d bytes written by the payload; the shared author directory holds %d", 2*n, total)
		if total > 64<<20 {
			t.Errorf("the shared author directory holds %d bytes after a %d-byte flood", total, 2*n)
		}
	})
	for _, mode := range []string{"patch-oversize", "patch-fifo", "patch-dev-zero"} {
		t.Run("author-"+mode, func(t *testing.T) {
			o, dir := authorAttack(t, "--"+mode, "author-"+mode)
			if o.Outcome != "policy_failure" || o.FailureReason != string(record.ReasonPatchMismatch) || o.FailureStage != "author" || o.MaskSample || !o.Tampering ||
				!strings.Contains(o.Detail, "change.diff is missing, and the author record names a patch of") {
				t.Errorf("outcome %s (%s: %s) mask %v tampering %v, want policy_failure (author: patch_mismatch, the patch missing), tampering: %s", o.Outcome, o.FailureStage, o.FailureReason, o.MaskSample, o.Tampering, o.Detail)
			}
			logs := x.run(t, state, quickTimeout, "logs", o.Episode, "--stage", "author").want(t, ExitOK)
			if !strings.Contains(string(logs.stdout)+logs.stderr, "nemorl: output bound: the payload's change.diff") {
				t.Errorf("author's log does not say why change.diff was not copied back:\n%s", logs.stdout)
			}
			if _, err := os.Lstat(filepath.Join(dir, "change.diff")); !os.IsNotExist(err) {
				t.Errorf("author/change.diff reached the shared file system (%v)", err)
			}
		})
	}
}
