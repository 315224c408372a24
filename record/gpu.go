package record

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os/exec"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"
)

// GPU is the GPU a train or eval job had, as its record names it: the
// model name and memory nvidia-smi reports for the job's GPUs. An episode's
// outcome carries the eval record's (trusted) and the train record's (what
// the policy's code printed: informational).
type GPU struct {
	// Name is the model ("NVIDIA H100 80GB HBM3"); the distinct names
	// joined by " + " when the job had GPUs of several models.
	Name string `json:"name"`
	// MemoryMiB is the memory of the job's smallest GPU, in MiB.
	MemoryMiB int `json:"memory_mib"`
	// Count is how many GPUs the job had.
	Count int `json:"count"`
}

// Bounds of a record's GPU fields.
const (
	// MaxGPUNameBytes bounds gpu_name (nvidia-smi's names are under 40).
	MaxGPUNameBytes = 128
	// MinGPUMemoryMiB and MaxGPUMemoryMiB bound gpu_memory_mib: 256 MiB to
	// 4 TiB (an H100 has 81559 MiB, a B200 about 183000).
	MinGPUMemoryMiB = 256
	MaxGPUMemoryMiB = 4 << 20
	// MaxGPUs bounds gpu_count.
	MaxGPUs = 64
)

// String is the GPU for people: "NVIDIA H100 80GB HBM3 (81559 MiB)", with
// "2 × " before it for two GPUs; "" for none.
func (g *GPU) String() string {
	if g == nil || g.Name == "" {
		return ""
	}
	s := fmt.Sprintf("%s (%d MiB)", g.Name, g.MemoryMiB)
	if g.Count > 1 {
		s = fmt.Sprintf("%d × %s", g.Count, s)
	}
	return s
}

// GPU is the GPU the train record names, nil when it names none.
func (t *Train) GPU() *GPU { return gpuOf(t.GPUName, t.GPUMemoryMiB, t.GPUCount) }

// SetGPU writes g into the train record.
func (t *Train) SetGPU(g GPU) { t.GPUName, t.GPUMemoryMiB, t.GPUCount = g.Name, g.MemoryMiB, g.Count }

// GPU is the GPU the eval record names, nil when the evaluator could not
// read it.
func (e *Eval) GPU() *GPU { return gpuOf(e.GPUName, e.GPUMemoryMiB, e.GPUCount) }

// SetGPU writes g into the eval record.
func (e *Eval) SetGPU(g GPU) { e.GPUName, e.GPUMemoryMiB, e.GPUCount = g.Name, g.MemoryMiB, g.Count }

func gpuOf(name string, mem, count int) *GPU {
	if name == "" {
		return nil
	}
	return &GPU{Name: name, MemoryMiB: mem, Count: count}
}

// checkGPU validates a record's GPU fields: all three zero (not read), or
// a name of printable ASCII within MaxGPUNameBytes, a memory within
// MinGPUMemoryMiB..MaxGPUMemoryMiB and a count within 1..MaxGPUs.
func checkGPU(name string, mem, count int) *Rejection {
	if name == "" && mem == 0 && count == 0 {
		return nil
	}
	switch {
	case name == "":
		return reject(ReasonInvalidValue, "gpu_name", "empty, but gpu_memory_mib %d and gpu_count %d say a GPU was read", mem, count)
	case len(name) > MaxGPUNameBytes:
		return reject(ReasonInvalidValue, "gpu_name", "%d bytes, longer than %d", len(name), MaxGPUNameBytes)
	case name != strings.TrimSpace(name):
		return reject(ReasonInvalidValue, "gpu_name", "leading or trailing space")
	}
	for i := range len(name) {
		if c := name[i]; c < 0x20 || c > 0x7e {
			return reject(ReasonInvalidValue, "gpu_name", "byte %d is not printable ASCII", i)
		}
	}
	switch {
	case mem < MinGPUMemoryMiB || mem > MaxGPUMemoryMiB:
		return reject(ReasonInvalidValue, "gpu_memory_mib", "%d outside %d..%d", mem, MinGPUMemoryMiB, MaxGPUMemoryMiB)
	case count < 1 || count > MaxGPUs:
		return reject(ReasonInvalidValue, "gpu_count", "%d outside 1..%d", count, MaxGPUs)
	}
	return nil
}

// Validate checks g as a record's GPU fields would be checked.
func (g GPU) Validate() error {
	if rej := checkGPU(g.Name, g.MemoryMiB, g.Count); rej != nil {
		return rej
	}
	return nil
}

// SMIArgs are nvidia-smi's arguments for the query QueryGPU runs (before
// -i and the job's GPUs).
var SMIArgs = []string{"--query-gpu=name,memory.total", "--format=csv,noheader,nounits"}

// reVisible is a CUDA_VISIBLE_DEVICES list QueryGPU passes to nvidia-smi
// -i: indices or UUIDs (GPU-…, MIG-…).
var reVisible = regexp.MustCompile(`^[A-Za-z0-9-]+(,[A-Za-z0-9-]+)*$`)

// QueryGPU asks nvidia-smi (smi: a path or a name on PATH) for the job's
// GPUs: those of visible (CUDA_VISIBLE_DEVICES: indices or UUIDs, as Slurm
// sets it), or every GPU nvidia-smi sees when visible is not such a list.
// It runs at most 30 s (and no longer than ctx allows).
func QueryGPU(ctx context.Context, smi, visible string) (GPU, error) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	args := slices.Clone(SMIArgs)
	if reVisible.MatchString(visible) {
		args = append(args, "-i", visible)
	}
	var stdout, stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, smi, args...)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		msg := strings.TrimSpace(stderr.String() + " " + stdout.String())
		if len(msg) > 200 {
			msg = msg[:200] + "…"
		}
		if msg != "" {
			return GPU{}, fmt.Errorf("%s %s: %w: %s", smi, strings.Join(args, " "), err, msg)
		}
		return GPU{}, fmt.Errorf("%s %s: %w", smi, strings.Join(args, " "), err)
	}
	g, err := ParseGPUs(stdout.Bytes())
	if err != nil {
		return GPU{}, fmt.Errorf("%s %s: %w", smi, strings.Join(args, " "), err)
	}
	return g, nil
}

// ParseGPUs reads nvidia-smi's answer to SMIArgs: one line per GPU, "NAME,
// MEMORY" (MiB, no unit). The GPU it returns names the distinct models in
// order (joined by " + "), the smallest memory and the count; it passes
// Validate, or ParseGPUs fails.
func ParseGPUs(out []byte) (GPU, error) {
	var g GPU
	var names []string
	for i, line := range strings.Split(string(out), "\n") {
		line = strings.TrimSpace(line)
		if line == "" {
			continue
		}
		comma := strings.LastIndexByte(line, ',')
		if comma < 0 {
			return GPU{}, fmt.Errorf("line %d: want NAME, MEMORY, got %q", i+1, abbrevGPU(line))
		}
		name, memText := strings.TrimSpace(line[:comma]), strings.TrimSpace(line[comma+1:])
		mem, err := strconv.Atoi(memText)
		if err != nil {
			return GPU{}, fmt.Errorf("line %d: memory %q is not a whole number of MiB", i+1, abbrevGPU(memText))
		}
		if name == "" {
			return GPU{}, fmt.Errorf("line %d: no GPU name", i+1)
		}
		if !slices.Contains(names, name) {
			names = append(names, name)
		}
		if g.Count == 0 || mem < g.MemoryMiB {
			g.MemoryMiB = mem
		}
		g.Count++
		if g.Count > MaxGPUs {
			return GPU{}, fmt.Errorf("more than %d GPUs", MaxGPUs)
		}
	}
	if g.Count == 0 {
		return GPU{}, errors.New("no GPU listed")
	}
	g.Name = strings.Join(names, " + ")
	if err := g.Validate(); err != nil {
		return GPU{}, err
	}
	return g, nil
}

func abbrevGPU(s string) string {
	if len(s) > 60 {
		return s[:60] + "…"
	}
	return s
}
