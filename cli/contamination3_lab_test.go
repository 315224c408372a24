package cli

import (
	"encoding/hex"
	"os"
	"path/filepath"
	"testing"
)

// TestContaminationRoundThreeLab: two whole episodes on the lab (issue 40),
// the eval stand-in running the real contamination check of the binary
// under test as the eval payload does: a patch that carries the stand-in
// problems hex-encoded in a Python string ends policy_failure/contaminated
// with the decoding chain in the evidence; a patch whose recipe comment
// names AIME 2025 as held out is scored.
func TestContaminationRoundThreeLab(t *testing.T) {
	t.Parallel()
	x := newLabCLI(t)
	bin := x.jobBinary(t)
	problems := labStandIns + "/aime25-stand-in.jsonl"
	raw, err := os.ReadFile(problems)
	if err != nil {
		t.Fatal(err)
	}
	// the author job reads the files to add: a directory it can read
	dir, err := os.MkdirTemp("/opt/nemorl-lab", "test-contam3-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	write := func(name, data string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	hexFile := write("blob.py", "# training data\nDATA = \""+hex.EncodeToString(raw)+"\"\nROWS = bytes.fromhex(DATA).decode().splitlines()\n")
	heldOut := write("held_out.yaml", "# AIME 2025 (AIME2025, opencompass/AIME2025) is the held-out eval set: never train on it\ngrpo:\n  max_num_steps: 20\n")
	for _, c := range []struct {
		name         string
		author       []string
		kind, reason string
		detail       string
	}{
		{"problems hex-encoded", []string{"--add-file", hexFile, "NeMo-RL/nemo_rl/data/blob.py"}, "policy_failure", "contaminated", "(decoded from hex text at line "},
		{"a recipe comment naming AIME 2025 as held out", []string{"--add-file", heldOut, "NeMo-RL/examples/configs/held_out.yaml"}, "scored", "", ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			x.contaminationCase(t, map[string][]string{"author": c.author, "eval": {"--check-contamination", bin}}, "contam3", c.name, c.kind, c.reason, c.detail)
		})
	}
}
