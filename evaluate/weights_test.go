package evaluate

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestQwen25Architecture(t *testing.T) {
	a := Qwen25_1_5B_Instruct()
	if len(a.Tensors) != 28*12+3 {
		t.Errorf("%d tensors, want %d", len(a.Tensors), 28*12+3)
	}
	if p := a.Parameters(); p != 1_543_714_304 {
		t.Errorf("parameters = %d", p)
	}
	want := map[string][]int64{
		"model.embed_tokens.weight":                      {151936, 1536},
		"model.layers.0.self_attn.q_proj.weight":         {1536, 1536},
		"model.layers.0.self_attn.q_proj.bias":           {1536},
		"model.layers.27.self_attn.k_proj.weight":        {256, 1536},
		"model.layers.27.self_attn.v_proj.bias":          {256},
		"model.layers.13.self_attn.o_proj.weight":        {1536, 1536},
		"model.layers.5.mlp.gate_proj.weight":            {8960, 1536},
		"model.layers.5.mlp.up_proj.weight":              {8960, 1536},
		"model.layers.5.mlp.down_proj.weight":            {1536, 8960},
		"model.layers.5.input_layernorm.weight":          {1536},
		"model.layers.5.post_attention_layernorm.weight": {1536},
		"model.norm.weight":                              {1536},
		"lm_head.weight":                                 {151936, 1536},
	}
	got := map[string]TensorSpec{}
	for _, s := range a.Tensors {
		if _, dup := got[s.Name]; dup {
			t.Errorf("duplicate %s", s.Name)
		}
		got[s.Name] = s
	}
	for name, shape := range want {
		s, ok := got[name]
		if !ok || !equalShape(s.Shape, shape) {
			t.Errorf("%s: %v, want %v", name, s.Shape, shape)
		}
		if s.Optional != (name == "lm_head.weight") {
			t.Errorf("%s optional = %v", name, s.Optional)
		}
	}
	for _, bad := range []string{"model.layers.28.input_layernorm.weight", "model.layers.0.self_attn.o_proj.bias", "model.rotary_emb.inv_freq"} {
		if _, ok := got[bad]; ok {
			t.Errorf("unexpected %s", bad)
		}
	}
	for _, n := range []string{"qwen2.5-1.5b-instruct", "tiny-qwen2"} {
		if a, err := ArchitectureByName(n); err != nil || len(a.Tensors) == 0 {
			t.Errorf("ArchitectureByName(%s): %v", n, err)
		}
	}
	if tiny := TinyQwen2(); len(tiny.Tensors) != 2*12+3 || tiny.Parameters() != 32*8+2*(8+8*16*3+2*(4*8+4)+8*8+8+8*8+8)+8 {
		t.Errorf("tiny: %d tensors, %d parameters", len(tiny.Tensors), tiny.Parameters())
	}
	if _, err := ArchitectureByName("gpt2"); err == nil {
		t.Error("unknown architecture accepted")
	}
	if _, err := Qwen2Architecture("x", Qwen2Config{Layers: 1, Hidden: 10, Intermediate: 1, Heads: 3, KVHeads: 1, HeadDim: 3, Vocab: 1}); err == nil {
		t.Error("inconsistent config accepted")
	}
}

func fileSHA(t *testing.T, path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

func TestCheckWeightsGood(t *testing.T) {
	arch := tinyArch(t)
	dir := t.TempDir()
	cases := map[string][]stTensor{
		"bf16 tied head absent":  archTensors(arch, "BF16", false),
		"bf16 tied head present": archTensors(arch, "BF16", true),
		"f16":                    archTensors(arch, "F16", false),
		"f32":                    archTensors(arch, "F32", true),
	}
	// Mixed dtypes, and a layout order that differs from the name order.
	mixed := archTensors(arch, "BF16", false)
	mixed[1].DType, mixed[4].DType = "F32", "F16"
	mixed[0], mixed[len(mixed)-1] = mixed[len(mixed)-1], mixed[0]
	cases["mixed dtypes, shuffled layout"] = mixed
	for name, tensors := range cases {
		t.Run(name, func(t *testing.T) {
			p := filepath.Join(dir, strings.ReplaceAll(name, " ", "_")+".safetensors")
			writeST(t, p, tensors, nil)
			rep, err := CheckWeights(p, arch)
			if err != nil {
				t.Fatal(err)
			}
			if rep.SHA256 != fileSHA(t, p) {
				t.Errorf("sha256 %s, want %s", rep.SHA256, fileSHA(t, p))
			}
			if rep.Tensors != len(tensors) || rep.TiedHead != (len(tensors) == len(arch.Tensors)-1) {
				t.Errorf("report %+v", rep)
			}
			if rep.Metadata["format"] != "pt" {
				t.Errorf("metadata %v", rep.Metadata)
			}
		})
	}
}

func TestCheckWeightsRejections(t *testing.T) {
	arch := tinyArch(t)
	base := func() []stTensor { return archTensors(arch, "BF16", false) }
	emb := "model.embed_tokens.weight"
	withData := func(i int, dtype string, put func(b []byte)) []stTensor {
		ts := base()
		ts[i].DType = dtype
		ts[i].Data = make([]byte, ts[i].bytes())
		fillFinite(dtype, ts[i].Data, new(uint64(7)))
		put(ts[i].Data)
		return ts
	}
	ts := base()
	layer0 := ts[1].Name // model.layers.0.input_layernorm.weight
	type tcase struct {
		name    string
		tensors []stTensor
		mutate  func(map[string]any)
		edit    func(b []byte) []byte // edits the written file
		reason  Reason
		tensor  string
		detail  string
	}
	cases := []tcase{
		{name: "bf16 NaN", tensors: withData(0, "BF16", func(b []byte) { binary.LittleEndian.PutUint16(b[10:], 0x7FC1) }), reason: ReasonNonFinite, tensor: emb, detail: "element 5 (BF16 bits 0x7fc1) is NaN"},
		{name: "bf16 +Inf", tensors: withData(0, "BF16", func(b []byte) { binary.LittleEndian.PutUint16(b[len(b)-2:], 0x7F80) }), reason: ReasonNonFinite, tensor: emb, detail: "is +Inf"},
		{name: "bf16 -Inf", tensors: withData(2, "BF16", func(b []byte) { binary.LittleEndian.PutUint16(b[0:], 0xFF80) }), reason: ReasonNonFinite, detail: "element 0 (BF16 bits 0xff80) is -Inf"},
		{name: "f16 NaN", tensors: withData(0, "F16", func(b []byte) { binary.LittleEndian.PutUint16(b[6:], 0xFE01) }), reason: ReasonNonFinite, tensor: emb, detail: "element 3 (F16 bits 0xfe01) is NaN"},
		{name: "f32 Inf", tensors: withData(0, "F32", func(b []byte) { binary.LittleEndian.PutUint32(b[8:], 0x7F800000) }), reason: ReasonNonFinite, tensor: emb, detail: "element 2 (F32 bits 0x7f800000) is +Inf"},
		{name: "integer tensor", tensors: withData(1, "I32", func([]byte) {}), reason: ReasonDTypeNotAllowed, tensor: layer0, detail: `"I32" (integer)`},
		{name: "bool tensor", tensors: withData(1, "BOOL", func([]byte) {}), reason: ReasonDTypeNotAllowed, tensor: layer0},
		{name: "f64 tensor", tensors: withData(1, "F64", func([]byte) {}), reason: ReasonDTypeNotAllowed, tensor: layer0},
		{name: "unknown dtype", tensors: base(), mutate: func(h map[string]any) { h[layer0].(map[string]any)["dtype"] = "Q4_K" }, reason: ReasonDTypeNotAllowed, tensor: layer0, detail: "unknown dtype"},
		{name: "wrong shape", tensors: func() []stTensor { ts := base(); ts[0].Shape = []int64{8, 32}; return ts }(), reason: ReasonShapeMismatch, tensor: emb},
		{name: "extra dimension", tensors: func() []stTensor { ts := base(); ts[1].Shape = []int64{8, 1}; return ts }(), reason: ReasonShapeMismatch, tensor: layer0},
		{name: "missing tensor", tensors: func() []stTensor { ts := base(); return append(ts[:3:3], ts[4:]...) }(), reason: ReasonMissingTensor, tensor: base()[3].Name},
		{name: "extra tensor", tensors: append(base(), stTensor{Name: "model.layers.2.input_layernorm.weight", DType: "BF16", Shape: []int64{8}}), reason: ReasonUnexpectedTensor, tensor: "model.layers.2.input_layernorm.weight"},
		{name: "extra buffer", tensors: append(base(), stTensor{Name: "model.rotary_emb.inv_freq", DType: "F32", Shape: []int64{2}}), reason: ReasonUnexpectedTensor, tensor: "model.rotary_emb.inv_freq"},
		{name: "tied head wrong shape", tensors: append(base(), stTensor{Name: "lm_head.weight", DType: "BF16", Shape: []int64{32, 4}}), reason: ReasonShapeMismatch, tensor: "lm_head.weight"},
		{name: "truncated data", tensors: base(), edit: func(b []byte) []byte { return b[:len(b)-10] }, reason: ReasonTruncated},
		{name: "truncated header", tensors: base(), edit: func(b []byte) []byte { return b[:20] }, reason: ReasonHeaderSize},
		{name: "truncated length", tensors: base(), edit: func(b []byte) []byte { return b[:5] }, reason: ReasonTruncated},
		{name: "empty file", tensors: base(), edit: func(b []byte) []byte { return nil }, reason: ReasonTruncated},
		{name: "trailing bytes", tensors: base(), edit: func(b []byte) []byte { return append(b, 0, 0, 0, 0) }, reason: ReasonOffsetsCoverage},
		{name: "header length zero", tensors: base(), edit: func(b []byte) []byte { binary.LittleEndian.PutUint64(b, 0); return b }, reason: ReasonHeaderSize},
		{name: "header length absurd", tensors: base(), edit: func(b []byte) []byte { binary.LittleEndian.PutUint64(b, 1<<62); return b }, reason: ReasonHeaderSize},
		{name: "header length past file", tensors: base(), edit: func(b []byte) []byte { binary.LittleEndian.PutUint64(b, uint64(len(b))); return b }, reason: ReasonHeaderSize},
		{name: "header length short", tensors: base(), edit: func(b []byte) []byte {
			n := binary.LittleEndian.Uint64(b)
			binary.LittleEndian.PutUint64(b, n-9)
			return b
		}, reason: ReasonHeaderInvalid},
		{name: "header not JSON", tensors: base(), edit: func(b []byte) []byte { b[8] = 'x'; return b }, reason: ReasonHeaderInvalid},
		{name: "header garbage inside", tensors: base(), edit: func(b []byte) []byte { b[9] = '#'; return b }, reason: ReasonHeaderInvalid},
		{name: "header trailing data", tensors: base(), edit: func(b []byte) []byte {
			n := binary.LittleEndian.Uint64(b)
			b[8+n-1] = 'x'
			return b
		}, reason: ReasonHeaderInvalid},
		{name: "duplicate tensor name", tensors: base(), edit: rewriteHeader(func(h string) string {
			return strings.Replace(h, `"model.norm.weight":`, `"model.embed_tokens.weight":`, 1)
		}), reason: ReasonDuplicateTensor, tensor: emb},
		{name: "header with leading space", tensors: base(), edit: rewriteHeader(func(h string) string { return " " + h }), reason: ReasonHeaderInvalid},
		{name: "unknown entry field", tensors: base(), mutate: func(h map[string]any) { h[layer0].(map[string]any)["strides"] = []int{1} }, reason: ReasonHeaderInvalid, tensor: layer0},
		{name: "missing data_offsets", tensors: base(), mutate: func(h map[string]any) { delete(h[layer0].(map[string]any), "data_offsets") }, reason: ReasonHeaderInvalid, tensor: layer0},
		{name: "three offsets", tensors: base(), mutate: func(h map[string]any) { h[layer0].(map[string]any)["data_offsets"] = []int{0, 1, 2} }, reason: ReasonHeaderInvalid, tensor: layer0},
		{name: "negative offset", tensors: base(), mutate: func(h map[string]any) { h[layer0].(map[string]any)["data_offsets"] = []int{-2, 14} }, reason: ReasonHeaderInvalid, tensor: layer0},
		{name: "reversed offsets", tensors: base(), mutate: func(h map[string]any) {
			o := h[layer0].(map[string]any)["data_offsets"].([]int64)
			h[layer0].(map[string]any)["data_offsets"] = []int64{o[1], o[0]}
		}, reason: ReasonHeaderInvalid, tensor: layer0},
		{name: "negative dimension", tensors: base(), mutate: func(h map[string]any) { h[layer0].(map[string]any)["shape"] = []int{-8} }, reason: ReasonHeaderInvalid, tensor: layer0},
		{name: "absurd shape", tensors: base(), mutate: func(h map[string]any) { h[layer0].(map[string]any)["shape"] = []int64{1 << 40, 1 << 40} }, reason: ReasonSizeMismatch, tensor: layer0},
		{name: "metadata not strings", tensors: base(), mutate: func(h map[string]any) { h["__metadata__"] = map[string]any{"format": 1} }, reason: ReasonHeaderInvalid, tensor: "__metadata__"},
		{name: "null entry", tensors: base(), mutate: func(h map[string]any) { h[layer0] = nil }, reason: ReasonHeaderInvalid, tensor: layer0},
		{name: "size lies about shape", tensors: base(), mutate: func(h map[string]any) { h[layer0].(map[string]any)["shape"] = []int64{4} }, reason: ReasonSizeMismatch, tensor: layer0},
		{name: "offsets overlap", tensors: base(), mutate: func(h map[string]any) {
			// Point post_attention_layernorm at input_layernorm's bytes
			// (same size).
			h["model.layers.0.post_attention_layernorm.weight"].(map[string]any)["data_offsets"] = h[layer0].(map[string]any)["data_offsets"]
		}, reason: ReasonOffsetsOverlap},
		{name: "offsets gap", tensors: base(), mutate: func(h map[string]any) {
			// Shift the first tensor 2 bytes late, the rest unchanged: a gap
			// at 0 and an overlap with the next one.
			o := h[emb].(map[string]any)["data_offsets"].([]int64)
			h[emb].(map[string]any)["data_offsets"] = []int64{o[0] + 2, o[1] + 2}
		}, reason: ReasonOffsetsGap, tensor: base()[0].Name},
		{name: "last tensor shifted back", tensors: base(), mutate: func(h map[string]any) {
			// Claim the last tensor lies 2 bytes earlier: overlap.
			ts := base()
			last := ts[len(ts)-1].Name
			o := h[last].(map[string]any)["data_offsets"].([]int64)
			h[last].(map[string]any)["data_offsets"] = []int64{o[0] - 2, o[1] - 2}
		}, reason: ReasonOffsetsOverlap},
		{name: "first tensor moved past the end", tensors: base(), mutate: func(h map[string]any) {
			// Move the first tensor after the last: a gap at 0 is reported.
			ts := base()
			var end int64
			for _, t := range ts {
				end += t.bytes()
			}
			n := ts[0].bytes()
			h[emb].(map[string]any)["data_offsets"] = []int64{end, end + n}
		}, reason: ReasonOffsetsGap},
	}
	cases = append(cases, tcase{name: "end beyond file", tensors: base(), mutate: func(h map[string]any) {
		// The last tensor (model.norm.weight) claims 4 more elements than
		// the file holds, consistently with its shape.
		e := h["model.norm.weight"].(map[string]any)
		o := e["data_offsets"].([]int64)
		e["shape"], e["data_offsets"] = []int64{12}, []int64{o[0], o[1] + 8}
	}, reason: ReasonTruncated, tensor: "model.norm.weight"})
	dir := t.TempDir()
	for i, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p := filepath.Join(dir, "case"+string(rune('a'+i%26))+strings.ReplaceAll(c.name, " ", "_"))
			writeST(t, p, c.tensors, c.mutate)
			if c.edit != nil {
				b, err := os.ReadFile(p)
				if err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(p, c.edit(b), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			rep, err := CheckWeights(p, arch)
			var rej *Rejection
			if !errors.As(err, &rej) {
				t.Fatalf("got %v (report %+v), want a rejection %s", err, rep, c.reason)
			}
			if rej.Reason != c.reason || (c.tensor != "" && rej.Tensor != c.tensor) || !strings.Contains(rej.Detail, c.detail) {
				t.Errorf("got %v\nwant reason %s tensor %q detail containing %q", err, c.reason, c.tensor, c.detail)
			}
			if rep.SHA256 != "" {
				t.Error("sha256 reported for a rejected file")
			}
		})
	}
}

// A tensor larger than the read buffer, with the bad value in a later
// chunk: the element index must count across chunks.
func TestCheckWeightsLargeTensor(t *testing.T) {
	elems := int64(3*ReadBufferBytes/2 + 10) // 1.5 buffers of BF16 pairs: ~3 MiB
	arch := Architecture{Name: "big", Tensors: []TensorSpec{{Name: "w", Shape: []int64{elems}}, {Name: "b", Shape: []int64{3}}}}
	data := make([]byte, elems*2)
	fillFinite("BF16", data, new(uint64(1)))
	bad := int64(ReadBufferBytes/2 + 12345) // second chunk
	binary.LittleEndian.PutUint16(data[bad*2:], 0x7F81)
	p := filepath.Join(t.TempDir(), "big.safetensors")
	writeST(t, p, []stTensor{{Name: "w", DType: "BF16", Shape: []int64{elems}, Data: data}, {Name: "b", DType: "F32", Shape: []int64{3}}}, nil)
	_, err := CheckWeights(p, arch)
	var rej *Rejection
	if !errors.As(err, &rej) || rej.Reason != ReasonNonFinite || !strings.Contains(rej.Detail, "element 536633 ") {
		t.Fatalf("got %v, want non_finite at element %d", err, bad)
	}
	binary.LittleEndian.PutUint16(data[bad*2:], 0x3F80)
	writeST(t, p, []stTensor{{Name: "w", DType: "BF16", Shape: []int64{elems}, Data: data}, {Name: "b", DType: "F32", Shape: []int64{3}}}, nil)
	rep, err := CheckWeights(p, arch)
	if err != nil || rep.SHA256 != fileSHA(t, p) || rep.Parameters != elems+3 {
		t.Fatalf("good big file: %v %+v", err, rep)
	}
}

func TestCheckWeightsIOErrors(t *testing.T) {
	arch := tinyArch(t)
	_, err := CheckWeights(filepath.Join(t.TempDir(), "absent"), arch)
	if err == nil || ReasonOf(err) != "" || !errors.Is(err, os.ErrNotExist) {
		t.Errorf("absent file: %v", err)
	}
	_, err = CheckWeights(t.TempDir(), arch)
	if ReasonOf(err) != ReasonNotRegularFile {
		t.Errorf("directory: %v", err)
	}
}

func TestFirstNonFinite(t *testing.T) {
	for _, c := range []struct {
		dtype string
		size  int
		bad   []uint64 // non-finite patterns
		good  []uint64 // finite extremes
	}{
		{"BF16", 2, []uint64{0x7F80, 0xFF80, 0x7FC0, 0x7F81, 0xFFFF}, []uint64{0x7F7F, 0xFF7F, 0x0000, 0x8000, 0x0001, 0x3F80, 0x7F00}},
		{"F16", 2, []uint64{0x7C00, 0xFC00, 0x7E00, 0x7C01, 0xFFFF}, []uint64{0x7BFF, 0xFBFF, 0x0000, 0x8000, 0x0001, 0x3C00, 0x7800}},
		{"F32", 4, []uint64{0x7F800000, 0xFF800000, 0x7FC00000, 0x7F800001, 0xFFFFFFFF}, []uint64{0x7F7FFFFF, 0xFF7FFFFF, 0, 0x80000000, 1, 0x3F800000}},
	} {
		for n := 1; n <= 40; n++ {
			for pos := 0; pos < n; pos++ {
				for _, bad := range c.bad {
					b := make([]byte, n*c.size)
					for i := range n {
						put(b, c.size, i, c.good[i%len(c.good)])
					}
					put(b, c.size, pos, bad)
					if got := firstNonFinite(c.dtype, b); got != int64(pos) {
						t.Fatalf("%s n=%d pos=%d bits=%#x: got %d", c.dtype, n, pos, bad, got)
					}
				}
			}
			b := make([]byte, n*c.size)
			for i := range n {
				put(b, c.size, i, c.good[(i+n)%len(c.good)])
			}
			if got := firstNonFinite(c.dtype, b); got != -1 {
				t.Fatalf("%s n=%d all finite: got %d", c.dtype, n, got)
			}
		}
	}
}

func put(b []byte, size, i int, v uint64) {
	if size == 2 {
		binary.LittleEndian.PutUint16(b[i*2:], uint16(v))
	} else {
		binary.LittleEndian.PutUint32(b[i*4:], uint32(v))
	}
}

// Exhaustive over all 2^16 BF16 and F16 patterns.
func TestFirstNonFiniteExhaustive16(t *testing.T) {
	for _, dt := range []struct {
		name string
		exp  uint16
	}{{"BF16", 0x7F80}, {"F16", 0x7C00}} {
		b := make([]byte, 2)
		for v := range 1 << 16 {
			binary.LittleEndian.PutUint16(b, uint16(v))
			want := int64(-1)
			if uint16(v)&dt.exp == dt.exp {
				want = 0
			}
			if got := firstNonFinite(dt.name, b); got != want {
				t.Fatalf("%s %#04x: got %d want %d", dt.name, v, got, want)
			}
		}
	}
}

// rewriteHeader returns a file edit that replaces the JSON header and fixes
// the length prefix.
func rewriteHeader(f func(string) string) func([]byte) []byte {
	return func(b []byte) []byte {
		n := binary.LittleEndian.Uint64(b)
		h := f(string(b[8 : 8+n]))
		out := make([]byte, 8, 8+len(h)+len(b))
		binary.LittleEndian.PutUint64(out, uint64(len(h)))
		out = append(out, h...)
		return append(out, b[8+n:]...)
	}
}
