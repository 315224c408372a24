package record

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// TestGPUFieldsValidate: the GPU fields of both records are all zero (not
// read) or a bounded printable name, a sane memory and a count; the eval
// record names them in every line, the train record may leave them out.
func TestGPUFieldsValidate(t *testing.T) {
	for _, c := range []struct {
		name  string
		mut   func(name *string, mem, count *int)
		field string // "" when valid
	}{
		{"read", func(*string, *int, *int) {}, ""},
		{"not read", func(n *string, m, c *int) { *n, *m, *c = "", 0, 0 }, ""},
		{"two models", func(n *string, m, c *int) { *n, *c = "NVIDIA H100 80GB HBM3 + NVIDIA A100-SXM4-80GB", 2 }, ""},
		{"memory without a name", func(n *string, _, _ *int) { *n = "" }, "gpu_name"},
		{"name too long", func(n *string, _, _ *int) { *n = strings.Repeat("H", MaxGPUNameBytes+1) }, "gpu_name"},
		{"name at the bound", func(n *string, _, _ *int) { *n = strings.Repeat("H", MaxGPUNameBytes) }, ""},
		{"control character", func(n *string, _, _ *int) { *n = "NVIDIA\tH100" }, "gpu_name"},
		{"not ASCII", func(n *string, _, _ *int) { *n = "NVIDIA H100\u202e" }, "gpu_name"},
		{"leading space", func(n *string, _, _ *int) { *n = " NVIDIA H100" }, "gpu_name"},
		{"memory too small", func(_ *string, m, _ *int) { *m = MinGPUMemoryMiB - 1 }, "gpu_memory_mib"},
		{"memory too large", func(_ *string, m, _ *int) { *m = MaxGPUMemoryMiB + 1 }, "gpu_memory_mib"},
		{"negative memory", func(_ *string, m, _ *int) { *m = -81559 }, "gpu_memory_mib"},
		{"no count", func(_ *string, _, c *int) { *c = 0 }, "gpu_count"},
		{"too many", func(_ *string, _, c *int) { *c = MaxGPUs + 1 }, "gpu_count"},
	} {
		t.Run(c.name, func(t *testing.T) {
			ev, tr := goodEval(), goodTrain()
			c.mut(&ev.GPUName, &ev.GPUMemoryMiB, &ev.GPUCount)
			c.mut(&tr.GPUName, &tr.GPUMemoryMiB, &tr.GPUCount)
			for _, r := range []Record{ev, tr} {
				_, err := Scan(r.Stage(), []byte(mustLine(t, r)+"\n"))
				var rej *Rejection
				switch {
				case c.field == "" && err != nil:
					t.Errorf("%s: %v", r.Stage(), err)
				case c.field != "" && (!errors.As(err, &rej) || rej.Reason != ReasonInvalidValue || rej.Field != c.field):
					t.Errorf("%s: got %v, want invalid_value of %s", r.Stage(), err, c.field)
				}
			}
		})
	}
}

// TestGPUFieldsOptional: a train record of a launcher older than the GPU
// fields is read as naming no GPU; an eval record without them is
// rejected, saying where such a record comes from.
func TestGPUFieldsOptional(t *testing.T) {
	const fields = `,"gpu_name":"NVIDIA H100 80GB HBM3","gpu_memory_mib":81559,"gpu_count":1`
	train := mustFormat(t, goodTrain())
	if !strings.Contains(train, fields) {
		t.Fatalf("%s lacks %s", train, fields)
	}
	rec, err := Scan(StageTrain, []byte(strings.Replace(train, fields, "", 1)))
	if err != nil {
		t.Fatalf("a train record without the GPU fields: %v", err)
	}
	want := goodTrain()
	want.SetGPU(GPU{})
	if !reflect.DeepEqual(rec, want) || rec.(*Train).GPU() != nil {
		t.Errorf("read as %+v, want %+v and no GPU", rec, want)
	}
	// One of them alone is held to the others.
	if _, err := Scan(StageTrain, []byte(strings.Replace(train, `,"gpu_memory_mib":81559,"gpu_count":1`, "", 1))); ReasonOf(err) != ReasonInvalidValue {
		t.Errorf("a train record naming a GPU without its memory: %v", err)
	}
	// A field of the wrong type is refused, optional or not.
	if _, err := Scan(StageTrain, []byte(strings.Replace(train, `"gpu_count":1`, `"gpu_count":"1"`, 1))); ReasonOf(err) != ReasonWrongType {
		t.Errorf("a string gpu_count: %v", err)
	}
	ev := mustFormat(t, goodEval())
	for _, f := range []string{`,"gpu_name":"NVIDIA H100 80GB HBM3"`, `,"gpu_memory_mib":81559`, `,"gpu_count":1`} {
		_, err := Scan(StageEval, []byte(strings.Replace(ev, f, "", 1)))
		var rej *Rejection
		if !errors.As(err, &rej) || rej.Reason != ReasonMissingField || !strings.Contains(rej.Detail, "rebuild the eval image") {
			t.Errorf("an eval record without %s: %v", f, err)
		}
	}
	if g := goodEval().GPU(); g == nil || g.String() != "NVIDIA H100 80GB HBM3 (81559 MiB)" {
		t.Errorf("eval GPU %v", g)
	}
	if s := (&GPU{Name: "NVIDIA A100-SXM4-40GB", MemoryMiB: 40960, Count: 2}).String(); s != "2 × NVIDIA A100-SXM4-40GB (40960 MiB)" {
		t.Errorf("String %q", s)
	}
}

func TestParseGPUs(t *testing.T) {
	for _, c := range []struct {
		name string
		out  string
		want GPU
		err  string
	}{
		{"one", "NVIDIA H100 80GB HBM3, 81559\n", GPU{"NVIDIA H100 80GB HBM3", 81559, 1}, ""},
		{"two alike, CRLF and blank lines", "NVIDIA H200, 143771\r\n\r\nNVIDIA H200, 143771\r\n", GPU{"NVIDIA H200", 143771, 2}, ""},
		{"two models: both named, the smaller memory", "NVIDIA A100-SXM4-80GB, 81920\nNVIDIA A100-SXM4-40GB, 40960\n", GPU{"NVIDIA A100-SXM4-80GB + NVIDIA A100-SXM4-40GB", 40960, 2}, ""},
		{"nothing", "\n", GPU{}, "no GPU listed"},
		{"not CSV: the lab's stand-in nvidia-smi", "nemorl-lab gpu-node STAND-IN: nvidia-smi (no GPU here)\n", GPU{}, "want NAME, MEMORY"},
		{"memory not reported", "NVIDIA H100 80GB HBM3, [N/A]\n", GPU{}, "not a whole number"},
		{"memory with its unit", "NVIDIA H100 80GB HBM3, 81559 MiB\n", GPU{}, "not a whole number"},
		{"no name", ", 81559\n", GPU{}, "no GPU name"},
		{"memory out of range", "Tiny, 12\n", GPU{}, "gpu_memory_mib"},
		{"an error message", "No devices were found\n", GPU{}, "want NAME, MEMORY"},
		{"too many", strings.Repeat("NVIDIA H100, 81559\n", MaxGPUs+1), GPU{}, "more than 64"},
	} {
		t.Run(c.name, func(t *testing.T) {
			g, err := ParseGPUs([]byte(c.out))
			switch {
			case c.err == "" && (err != nil || g != c.want):
				t.Errorf("got %+v, %v; want %+v", g, err, c.want)
			case c.err != "" && (err == nil || !strings.Contains(err.Error(), c.err)):
				t.Errorf("got %+v, %v; want an error with %q", g, err, c.err)
			}
		})
	}
}

// FuzzParseGPUs: whatever nvidia-smi prints, ParseGPUs does not panic and
// what it accepts is fit for a record.
func FuzzParseGPUs(f *testing.F) {
	for _, s := range []string{"NVIDIA H100 80GB HBM3, 81559\n", "A, 1024\nB, 2048\n", "x", ", 1", "NVIDIA H100, -1\n", "NVIDIA\x00H100, 81559"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, out []byte) {
		g, err := ParseGPUs(out)
		if err != nil {
			return
		}
		if verr := g.Validate(); verr != nil || g.Count < 1 {
			t.Fatalf("accepted %+v: %v", g, verr)
		}
		ev := goodEval()
		ev.SetGPU(g)
		if _, err := Format(ev); err != nil {
			t.Fatalf("accepted %+v does not format: %v", g, err)
		}
	})
}

// TestQueryGPU runs a stand-in nvidia-smi: the query's arguments, the
// job's GPUs as -i (only a list of indices or UUIDs), and its failures
// with what it printed.
func TestQueryGPU(t *testing.T) {
	dir := t.TempDir()
	smi := filepath.Join(dir, "nvidia-smi")
	args := filepath.Join(dir, "args")
	script := "#!/bin/sh\nprintf '%s\\n' \"$@\" > " + args + "\ncase \"$*\" in *'-i 7'*) echo 'No devices were found' >&2; exit 6 ;; esac\necho 'NVIDIA H100 80GB HBM3, 81559'\n"
	if err := os.WriteFile(smi, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for _, c := range []struct {
		visible, wantArgs string
	}{
		{"0", "--query-gpu=name,memory.total --format=csv,noheader,nounits -i 0"},
		{"GPU-8f6b0c2e-1d2a-4c5e-9f00-0123456789ab,1", "--query-gpu=name,memory.total --format=csv,noheader,nounits -i GPU-8f6b0c2e-1d2a-4c5e-9f00-0123456789ab,1"},
		{"", "--query-gpu=name,memory.total --format=csv,noheader,nounits"},
		{"NoDevFiles;rm -rf /", "--query-gpu=name,memory.total --format=csv,noheader,nounits"},
	} {
		g, err := QueryGPU(ctx, smi, c.visible)
		if err != nil || g != (GPU{"NVIDIA H100 80GB HBM3", 81559, 1}) {
			t.Errorf("visible %q: %+v, %v", c.visible, g, err)
		}
		got, _ := os.ReadFile(args)
		if s := strings.Join(strings.Fields(string(got)), " "); s != c.wantArgs {
			t.Errorf("visible %q: nvidia-smi %s, want %s", c.visible, s, c.wantArgs)
		}
	}
	if _, err := QueryGPU(ctx, smi, "7"); err == nil || !strings.Contains(err.Error(), "No devices were found") {
		t.Errorf("a failing nvidia-smi: %v", err)
	}
	if _, err := QueryGPU(ctx, filepath.Join(dir, "absent"), "0"); err == nil {
		t.Error("no nvidia-smi: no error")
	}
}
