package cli

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/nemorl/nemorl-slurm/slurm"
)

// A Slurm command that does not answer within its deadline (a throttled
// controller: Slurm's clients retry silently under rl_enable) is stopped
// there, and its check says so, with the deadline's fix; it is not
// reported as sacct or sinfo failing.
func TestDoctorSlurmPastDeadline(t *testing.T) {
	dir := t.TempDir()
	bin := filepath.Join(dir, "bin")
	if err := os.Mkdir(bin, 0o755); err != nil {
		t.Fatal(err)
	}
	for name, body := range map[string]string{
		"sbatch": "exit 0", "squeue": "exit 0", "scancel": "exit 0",
		"sacct": "exec sleep 60", "sinfo": "exec sleep 60", "sacctmgr": "exec sleep 60", "scontrol": "exec sleep 60",
	} {
		if err := os.WriteFile(filepath.Join(bin, name), []byte("#!/bin/sh\n"+body+"\n"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	t.Setenv("PATH", bin+string(os.PathListSeparator)+os.Getenv("PATH"))
	cfgPath := filepath.Join(dir, "doctor.yaml")
	cfg := `cluster:
  workdir: ` + filepath.Join(dir, "work") + `
  partition: gpu
  gres: gpu:h100:1
  account: acct
runtime: {kind: none}
policy_model: {base_url: "http://127.0.0.1:9/v1", api_key: k, model: m, uses_reasoning_parser: false}
stages:
  author: {command: [/bin/true]}
  train: {command: [/bin/true]}
  eval: {command: [/bin/true]}
`
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	old := doctorDeadlines
	doctorDeadlines = slurm.Deadlines{Sacct: 300 * time.Millisecond, Sinfo: 300 * time.Millisecond, Scontrol: 300 * time.Millisecond}
	t.Cleanup(func() { doctorDeadlines = old })

	start := time.Now()
	code, out, errs := runMain(t, "doctor", "--json", "--config", cfgPath)
	if took := time.Since(start); took > 30*time.Second {
		t.Errorf("doctor took %s: the fake Slurm commands sleep 60 s, their deadlines are 0.3 s", took)
	}
	if code != ExitUsage {
		t.Errorf("exit %d, want %d (checks failed): %s", code, ExitUsage, errs)
	}
	var doc struct{ Checks []check }
	if err := json.Unmarshal([]byte(out), &doc); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	got := map[string]check{}
	for _, ch := range doc.Checks {
		got[ch.Name] = ch
	}
	const late = "no answer within 0.3s (a throttled or overloaded controller?)"
	for name, want := range map[string]check{
		"accounting":   {Status: "fail", Detail: "sacct: " + late},
		"partition":    {Status: "fail", Detail: "sinfo: " + late},
		"account":      {Status: "warn", Detail: "sacctmgr: " + late},
		"slurm config": {Status: "fail", Detail: "scontrol show config: " + late},
	} {
		ch := got[name]
		if ch.Status != want.Status || ch.Detail != want.Detail || ch.Fix != pastDeadlineFix {
			t.Errorf("check %s: %+v, want status %s, detail %q and the deadline's fix", name, ch, want.Status, want.Detail)
		}
	}
	if ch := got["slurm commands"]; ch.Status != "ok" {
		t.Errorf("slurm commands: %+v", ch)
	}
}
