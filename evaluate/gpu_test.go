package evaluate

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nemorl/nemorl-slurm/record"
)

// fakeSMI puts a stand-in nvidia-smi first on PATH: it logs its arguments
// to the returned file and prints out (or, with out "", fails as a node
// without a driver does).
func fakeSMI(t *testing.T, out string) string {
	t.Helper()
	dir := t.TempDir()
	log := filepath.Join(dir, "calls")
	body := "echo 'NVIDIA-SMI has failed because it could not communicate with the NVIDIA driver.'; exit 9"
	if out != "" {
		body = "printf '%s' '" + out + "'"
	}
	script := "#!/bin/sh\necho \"$*\" >> " + log + "\n" + body + "\n"
	if err := os.WriteFile(filepath.Join(dir, SMI), []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PATH", dir+string(os.PathListSeparator)+os.Getenv("PATH"))
	return log
}

func calls(t *testing.T, log string) []string {
	t.Helper()
	b, err := os.ReadFile(log)
	if os.IsNotExist(err) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	return strings.Split(strings.TrimSpace(string(b)), "\n")
}

// TestScoreFilesGPU: in the job, the eval record names the GPU of
// CUDA_VISIBLE_DEVICES as nvidia-smi reports it; a GPU given is taken as
// is; one nvidia-smi cannot read leaves the record without a GPU, said on
// Warn, and the score stands.
func TestScoreFilesGPU(t *testing.T) {
	dir := t.TempDir()
	rows, _ := goodRows()
	rp := filepath.Join(dir, "rollouts.jsonl")
	if err := os.WriteFile(rp, []byte(encodeRows(t, rows)), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Setenv("CUDA_VISIBLE_DEVICES", "3")
	log := fakeSMI(t, "NVIDIA H100 80GB HBM3, 81559\n")
	ev, err := ScoreFiles(rp, "", testOptions())
	if err != nil {
		t.Fatal(err)
	}
	if g := ev.GPU(); g == nil || *g != (record.GPU{Name: "NVIDIA H100 80GB HBM3", MemoryMiB: 81559, Count: 1}) {
		t.Errorf("record GPU %+v", g)
	}
	if c := calls(t, log); len(c) != 1 || c[0] != "--query-gpu=name,memory.total --format=csv,noheader,nounits -i 3" {
		t.Errorf("nvidia-smi called as %q", c)
	}
	line, err := record.Format(&ev)
	if err != nil || !strings.HasSuffix(line, `"gpu_name":"NVIDIA H100 80GB HBM3","gpu_memory_mib":81559,"gpu_count":1}`) {
		t.Errorf("record line %s, %v", line, err)
	}

	opts := testOptions()
	opts.GPU = &record.GPU{Name: "NVIDIA A100-SXM4-80GB", MemoryMiB: 81920, Count: 1}
	if ev, err := ScoreFiles(rp, "", opts); err != nil || ev.GPUName != "NVIDIA A100-SXM4-80GB" {
		t.Errorf("a GPU given: %q, %v", ev.GPUName, err)
	}
	if c := calls(t, log); len(c) != 1 {
		t.Errorf("nvidia-smi run although the GPU was given: %q", c)
	}
	opts.GPU = &record.GPU{Name: "x", MemoryMiB: 1, Count: 1}
	if _, err := ScoreFiles(rp, "", opts); err == nil || !strings.Contains(err.Error(), "gpu_memory_mib") {
		t.Errorf("an invalid GPU given: %v", err)
	}

	fakeSMI(t, "")
	var warn bytes.Buffer
	opts = testOptions()
	opts.Warn = &warn
	ev, err = ScoreFiles(rp, "", opts)
	if err != nil || ev.GPU() != nil || ev.Reward != rewardOfGoodRows(t) {
		t.Errorf("no driver: GPU %+v, reward %v, %v", ev.GPU(), ev.Reward, err)
	}
	if !strings.Contains(warn.String(), "could not be read") || !strings.Contains(warn.String(), "could not communicate with the NVIDIA driver") {
		t.Errorf("warning %q", warn.String())
	}
}

// rewardOfGoodRows is goodRows' reward, as Score computes it.
func rewardOfGoodRows(t *testing.T) float64 {
	t.Helper()
	_, per := goodRows()
	n := 0
	for _, c := range per {
		n += c
	}
	return record.RewardFor(n)
}

// TestContaminatedRecordGPU: the record of a contaminated patch names the
// job's GPU too.
func TestContaminatedRecordGPU(t *testing.T) {
	p := writeFile(t, "change.diff", addedFile("data/x.jsonl", strings.Split(strings.TrimSpace(mustRead(t, standInProblems)), "\n")))
	chk, err := CheckContamination(p, standInProblems, "")
	if err != nil {
		t.Fatal(err)
	}
	t.Setenv("CUDA_VISIBLE_DEVICES", "0,1")
	fakeSMI(t, "NVIDIA H200, 143771\nNVIDIA H200, 143771\n")
	ev, err := ContaminatedRecord(chk, "777", testWeights, "")
	if err != nil {
		t.Fatal(err)
	}
	if g := ev.GPU(); g == nil || *g != (record.GPU{Name: "NVIDIA H200", MemoryMiB: 143771, Count: 2}) {
		t.Errorf("record GPU %+v", g)
	}
}
