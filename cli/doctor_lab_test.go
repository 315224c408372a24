package cli

import (
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// TestDoctorLab: doctor passes on the lab's config, and each broken config
// fails the check it breaks, with a fix.
func TestDoctorLab(t *testing.T) {
	t.Parallel() // with the package's other shared-lab tests, after its LockLab ones
	x := newLabCLI(t)
	lab := x.lab
	state := t.TempDir()
	type checkJSON struct {
		Name, Status, Detail, Fix string
	}
	doctor := func(t *testing.T, cfg string, wantCode int) map[string]checkJSON {
		t.Helper()
		r := x.run(t, state, 3*time.Minute, "--json", "--config", cfg, "doctor", "--skip-endpoint")
		r.want(t, wantCode)
		var doc struct {
			OK     bool        `json:"ok"`
			Checks []checkJSON `json:"checks"`
		}
		if err := json.Unmarshal(r.stdout, &doc); err != nil || doc.OK != (wantCode == 0) {
			t.Fatalf("doctor --json: %v: %s", err, r)
		}
		out := map[string]checkJSON{}
		for _, c := range doc.Checks {
			if c.Status == "fail" && c.Fix == "" {
				t.Errorf("check %s failed without a fix: %+v", c.Name, c)
			}
			out[c.Name] = c
		}
		return out
	}
	variant := func(t *testing.T, old, new string) string {
		t.Helper()
		if !strings.Contains(x.base, old) {
			t.Fatalf("configs/lab-none.yaml has no %q", old)
		}
		p := filepath.Join(t.TempDir(), "lab-none.yaml")
		if err := os.WriteFile(p, []byte(strings.Replace(x.base, old, new, 1)), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}

	got := doctor(t, "../configs/lab-none.yaml", 0)
	for _, name := range []string{"config", "ssh", "slurm commands", "accounting", "partition", "gres", "workdir"} {
		if got[name].Status != "ok" {
			t.Errorf("lab: check %q: %+v, want ok", name, got[name])
		}
	}

	empty := filepath.Join(t.TempDir(), "known_hosts")
	if err := os.WriteFile(empty, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	unreadable := filepath.Join(x.sharedWorkdir, "doctor-unreadable.sif")
	if err := os.WriteFile(unreadable, []byte("x"), 0o600); err != nil { // root's: the lab user cannot read it
		t.Fatal(err)
	}
	t.Cleanup(func() { os.Remove(unreadable) })
	for _, c := range []struct {
		name, old, new, check string
		detail                *regexp.Regexp
	}{
		{"wrong partition", "partition: gpu", "partition: nosuch", "partition", regexp.MustCompile(`"nosuch" does not exist \(partitions: gpu`)},
		{"unknown gres type", "gres: gpu:h100:1", "gres: gpu:a100:1", "gres", regexp.MustCompile(`no gpu:a100 \(its nodes have gpu:h100`)},
		{"host key missing", "known_hosts: " + lab.KnownHosts, "known_hosts: " + empty, "ssh host key", regexp.MustCompile(`not a known host`)},
		{"unreadable image", "  kind: none", "  kind: apptainer\n  images: {author: " + unreadable + ", train: " + unreadable + ", eval: " + unreadable + "}\n  digests: {eval: \"sha256:" + strings.Repeat("ab", 32) + "\"}", "image eval", regexp.MustCompile(`missing or unreadable`)},
	} {
		t.Run(c.name, func(t *testing.T) {
			cfg := variant(t, c.old, c.new)
			if c.name == "unreadable image" {
				// The stand-in commands are not allowed with a container runtime.
				data, _ := os.ReadFile(cfg)
				data = regexp.MustCompile(`(?m)^    command: \[.*\]\n`).ReplaceAll(data, nil)
				_ = os.WriteFile(cfg, data, 0o600)
			}
			got := doctor(t, cfg, ExitUsage)
			ch, ok := got[c.check]
			if !ok || ch.Status != "fail" || !c.detail.MatchString(ch.Detail) {
				t.Errorf("check %q: %+v, want fail matching %s", c.check, ch, c.detail)
			}
		})
	}
}
