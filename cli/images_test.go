package cli

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nemorl/nemorl-slurm/configs"
	"github.com/nemorl/nemorl-slurm/internal/labtest"
	"github.com/nemorl/nemorl-slurm/internal/siftest"
)

func runMain(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errb bytes.Buffer
	code = Main(append([]string{"nemorl-slurm"}, args...), strings.NewReader(""), &out, &errb)
	return code, out.String(), errb.String()
}

func TestImagesInspect(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "train.sif")
	siftest.Write(t, p, "Bootstrap: docker\nFrom: nvcr.io/nvidia/pytorch:25.01-py3\n", `{"org.nemorl.stage": "train"}`)
	code, out, errs := runMain(t, "images", "inspect", "--json", p)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	var doc struct {
		Images []struct {
			Path, Arch, Digest, Definition string
			Labels                         map[string]string
		}
	}
	if err := json.Unmarshal([]byte(out), &doc); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	data, _ := os.ReadFile(p)
	sum := sha256.Sum256(data)
	im := doc.Images[0]
	if len(doc.Images) != 1 || im.Arch != "amd64" || im.Labels["org.nemorl.stage"] != "train" ||
		im.Digest != "sha256:"+hex.EncodeToString(sum[:]) || !strings.Contains(im.Definition, "pytorch:25.01") {
		t.Fatalf("inspect: %+v", doc)
	}
	// Apptainer ≥ 1.2 keeps the labels in a JSON.Generic object.
	generic := filepath.Join(dir, "eval.sif")
	siftest.WriteGenericLabels(t, generic, "Bootstrap: docker\nFrom: x\n", `{"org.nemorl.stage": "eval", "org.label-schema.schema-version": "1.0"}`)
	code, out, errs = runMain(t, "images", "inspect", "--json", generic)
	doc.Images = nil
	if err := json.Unmarshal([]byte(out), &doc); code != 0 || err != nil || len(doc.Images) != 1 ||
		doc.Images[0].Labels["org.nemorl.stage"] != "eval" || doc.Images[0].Labels["org.label-schema.schema-version"] != "1.0" {
		t.Fatalf("JSON.Generic labels: exit %d (%v): %s%s", code, err, out, errs)
	}
	if code, out, _ := runMain(t, "images", "inspect", generic); code != 0 || !strings.Contains(out, "label    org.nemorl.stage = eval") {
		t.Fatalf("JSON.Generic labels, text: exit %d:\n%s", code, out)
	}
	notSIF := filepath.Join(dir, "x.sif")
	os.WriteFile(notSIF, []byte("not a sif"), 0o644)
	if code, out, errs := runMain(t, "images", "inspect", notSIF); code != ExitUsage || out != "" || !strings.Contains(errs, notSIF) {
		t.Fatalf("not a SIF: exit %d stdout %q stderr %q", code, out, errs)
	}
}

// TestImagesLockLab hashes three image files on the lab over SSH and pins
// them in a config file, changing only the digest lines.
func TestImagesLockLab(t *testing.T) {
	lab := labtest.Env(t)
	labtest.UseLab(t)
	t.Setenv("XDG_STATE_HOME", t.TempDir())
	imgDir, err := os.MkdirTemp(lab.Workdir, "images-test-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(imgDir) })
	if err := os.Chmod(imgDir, 0o755); err != nil {
		t.Fatal(err)
	}
	want := map[string]string{}
	for _, s := range []string{"author", "train", "eval"} {
		data := []byte("image of the " + s + " stage\n")
		if err := os.WriteFile(filepath.Join(imgDir, s+".sif"), data, 0o644); err != nil {
			t.Fatal(err)
		}
		sum := sha256.Sum256(data)
		want[s] = "sha256:" + hex.EncodeToString(sum[:])
	}
	lab0, err := os.ReadFile("../configs/lab-none.yaml")
	if err != nil {
		t.Fatal(err)
	}
	cfgText := strings.Replace(string(lab0), "runtime:\n  kind: none                 # no isolation: lab only\n",
		"runtime:\n  kind: apptainer  # keep this comment\n  images:\n    author: "+imgDir+"/author.sif\n    train: "+imgDir+"/train.sif\n    eval: "+imgDir+"/eval.sif\n  digests:\n    eval: sha256:"+strings.Repeat("0", 64)+"  # placeholder\n", 1)
	if cfgText == string(lab0) {
		t.Fatal("configs/lab-none.yaml changed: the test's runtime replacement no longer applies")
	}
	cfgPath := filepath.Join(t.TempDir(), "c.yaml")
	if err := os.WriteFile(cfgPath, []byte(cfgText), 0o640); err != nil {
		t.Fatal(err)
	}
	code, out, errs := runMain(t, "images", "lock", "--config", cfgPath)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	for s, d := range want {
		if !strings.Contains(out, s) || !strings.Contains(out, d) {
			t.Errorf("output lacks %s %s:\n%s", s, d, out)
		}
	}
	cfg, err := configs.LoadFile(cfgPath)
	if err != nil {
		t.Fatal(err)
	}
	got := cfg.Runtime.Digests
	if got.Author != want["author"] || got.Train != want["train"] || got.Eval != want["eval"] {
		t.Fatalf("digests %+v, want %v", got, want)
	}
	after, _ := os.ReadFile(cfgPath)
	if !strings.Contains(string(after), "# keep this comment") || !strings.Contains(string(after), want["eval"]+"  # placeholder") {
		t.Fatalf("comments lost:\n%s", after)
	}
	if fi, _ := os.Stat(cfgPath); fi.Mode().Perm() != 0o640 {
		t.Fatalf("config mode %v, want 0640 kept", fi.Mode())
	}
	// The lab config has no images: a clear usage error, nothing written.
	if code, _, errs := runMain(t, "images", "lock", "--config", "../configs/lab-none.yaml"); code != ExitUsage || !strings.Contains(errs, "runtime.kind is none") {
		t.Fatalf("lab config: exit %d: %s", code, errs)
	}
}

// TestImagesLockBootstrap: `images lock` works on a config that has no
// runtime.digests.eval yet (every other verb refuses such a config and asks
// for `images lock`), here on this machine (no cluster.login).
func TestImagesLockBootstrap(t *testing.T) {
	dir := t.TempDir()
	t.Setenv("XDG_STATE_HOME", t.TempDir())
	want := map[string]string{}
	for _, s := range []string{"author", "train", "eval"} {
		data := []byte("bootstrap image of the " + s + " stage\n")
		if err := os.WriteFile(filepath.Join(dir, s+".sif"), data, 0o644); err != nil {
			t.Fatal(err)
		}
		sum := sha256.Sum256(data)
		want[s] = "sha256:" + hex.EncodeToString(sum[:])
	}
	cfgText := `cluster:
  workdir: ` + dir + `/work
  partition: gpu
runtime:
  kind: apptainer
  images:
    author: ` + dir + `/author.sif
    train: ` + dir + `/train.sif
    eval: ` + dir + `/eval.sif
policy_model:
  base_url: http://127.0.0.1:9/v1
  api_key: k
  model: m
  uses_reasoning_parser: false
`
	cfgPath := filepath.Join(dir, "c.yaml")
	if err := os.WriteFile(cfgPath, []byte(cfgText), 0o600); err != nil {
		t.Fatal(err)
	}
	if code, _, errs := runMain(t, "config", "check", "--config", cfgPath); code != ExitUsage || !strings.Contains(errs, "images lock") {
		t.Fatalf("config check without the eval digest: exit %d, want %d asking for images lock:\n%s", code, ExitUsage, errs)
	}
	code, out, errs := runMain(t, "images", "lock", "--config", cfgPath)
	if code != 0 {
		t.Fatalf("images lock on a config without digests: exit %d:\n%s", code, errs)
	}
	for s, d := range want {
		if !strings.Contains(out, d) {
			t.Errorf("output lacks %s %s:\n%s", s, d, out)
		}
	}
	cfg, err := configs.LoadFile(cfgPath)
	if err != nil {
		t.Fatalf("the locked config does not load: %v", err)
	}
	if got := cfg.Runtime.Digests; got.Author != want["author"] || got.Train != want["train"] || got.Eval != want["eval"] {
		t.Fatalf("digests %+v, want %v", got, want)
	}
	// Anything else wrong with the config is still an error.
	bad := strings.Replace(cfgText, "kind: apptainer", "kind: docker", 1)
	if err := os.WriteFile(cfgPath, []byte(bad), 0o600); err != nil {
		t.Fatal(err)
	}
	if code, _, errs := runMain(t, "images", "lock", "--config", cfgPath); code != ExitUsage || !strings.Contains(errs, "runtime.kind") {
		t.Fatalf("bad kind: exit %d:\n%s", code, errs)
	}
}

// doctor's guard check reads each stage's guard line from the rendered
// script, and gives each kind of finding its own fix.
func TestDoctorGuardLineAndFixes(t *testing.T) {
	script := "x\n" + `apptainer exec --containall IMG /bin/bash /nemorl/bundle/guard.sh train >&2 || nemorl_guard_status=$?` + "\ny\n"
	if got := guardLine(script, "train"); got != "apptainer exec --containall IMG /bin/bash /nemorl/bundle/guard.sh train" {
		t.Errorf("guardLine: %q", got)
	}
	if got := guardLine(script, "author"); got != "" {
		t.Errorf("guardLine of another stage: %q", got)
	}
	fixes := map[string]string{
		`mount point /run/munge is not allowed in the author container: not a path Apptainer, --nv or the author stage's binds mount; cause: a site bind (apptainer.conf "bind path", APPTAINER_BIND, a wrapper's --bind) or apptainer.conf "mount hostfs = yes"`: "remove the site bind",
		"mount point /usr/share/vulkan/icd.d/nvidia_icd.json is not allowed in the author container: a GPU path in the author container, which gets no GPU; cause: --nv":                                                                                          "always use nv = no",
		"mount point /.singularity.d/munge.socket.2 is not allowed in the author container: a unix socket mounted onto a file":                                                                                                                                    "no socket may be bound",
		"Slurm client /usr/bin/sbatch":          "without Slurm's clients",
		"network interface eth0 (want only lo)": "--net --network none",
	}
	seen := map[string]bool{}
	for finding, want := range fixes {
		fix := guardFix(finding)
		if !strings.Contains(fix, want) {
			t.Errorf("%s: fix %q, want one with %q", finding, fix, want)
		}
		seen[fix] = true
	}
	if len(seen) != len(fixes) {
		t.Errorf("%d kinds of finding share %d fixes", len(fixes), len(seen))
	}
}
