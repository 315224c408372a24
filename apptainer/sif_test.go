package apptainer

import (
	"crypto/sha256"
	"encoding/hex"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nemorl/nemorl-slurm/internal/siftest"
)

func TestInspect(t *testing.T) {
	p := filepath.Join(t.TempDir(), "eval.sif")
	def := "Bootstrap: docker\nFrom: nvcr.io/nvidia/cuda:12.8.1-runtime-ubuntu24.04\n\n%labels\n  org.nemorl.stage eval\n"
	siftest.Write(t, p, def, `{"org.nemorl.stage": "eval", "org.nemorl.nemo_rl": "1cee835", "org.label-schema.build-arch": "amd64", "n": 3}`)
	img, err := Inspect(p)
	if err != nil {
		t.Fatal(err)
	}
	if img.Arch != "amd64" || img.Definition != def || img.ID != siftest.ID {
		t.Fatalf("arch %q id %q definition %q", img.Arch, img.ID, img.Definition)
	}
	if img.Labels["org.nemorl.stage"] != "eval" || img.Labels["org.nemorl.nemo_rl"] != "1cee835" || img.Labels["n"] != "3" {
		t.Fatalf("labels %v", img.Labels)
	}
	if len(img.Partitions) != 1 || img.Partitions[0].FS != "Squashfs" || img.Partitions[0].Arch != "amd64" || img.Partitions[0].Size != siftest.PartitionBytes {
		t.Fatalf("partitions %+v", img.Partitions)
	}
	if img.Signed {
		t.Fatal("an unsigned image reported signed")
	}
	data, _ := os.ReadFile(p)
	sum := sha256.Sum256(data)
	if d, err := FileDigest(p); err != nil || d != "sha256:"+hex.EncodeToString(sum[:]) {
		t.Fatalf("FileDigest %q, %v", d, err)
	}
}

func TestInspectRejects(t *testing.T) {
	dir := t.TempDir()
	notSIF := filepath.Join(dir, "x.sif")
	if err := os.WriteFile(notSIF, []byte("#!/bin/sh\necho not a sif\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := Inspect(notSIF); err == nil || !strings.Contains(err.Error(), notSIF) {
		t.Fatalf("a shell script inspected as SIF: %v", err)
	}
	if _, err := Inspect(filepath.Join(dir, "missing.sif")); err == nil {
		t.Fatal("a missing file inspected")
	}
	bad := filepath.Join(dir, "bad-labels.sif")
	siftest.Write(t, bad, "Bootstrap: scratch\n", "not json")
	if img, err := Inspect(bad); err == nil || !strings.Contains(err.Error(), "labels object") || img == nil || img.Arch != "amd64" {
		t.Fatalf("broken labels: %v (image %+v)", err, img)
	}
}
