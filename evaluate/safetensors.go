package evaluate

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"math/bits"
	"sort"
	"unicode/utf8"
)

// MaxHeaderBytes bounds the safetensors JSON header. The pinned checkpoint's
// header is about 40 KB (339 tensors); safetensors itself allows 100 MB,
// which would be 100 MB of memory for an attacker-chosen value.
const MaxHeaderBytes = 16 << 20

// Allowed dtypes and their element sizes. The pinned export is BF16;
// F16 and F32 are accepted (the eval converts nothing: vLLM loads them).
var allowedDTypes = map[string]int64{"BF16": 2, "F16": 2, "F32": 4}

// Other safetensors dtypes, named in rejections.
var otherDTypes = map[string]string{
	"BOOL": "boolean", "U8": "integer", "I8": "integer", "U16": "integer", "I16": "integer",
	"U32": "integer", "I32": "integer", "U64": "integer", "I64": "integer",
	"F64": "floating point, not accepted", "F8_E4M3": "8-bit float, not accepted",
	"F8_E5M2": "8-bit float, not accepted", "F8_E8M0": "8-bit float, not accepted",
	"F4": "4-bit float, not accepted", "F6_E2M3": "6-bit float, not accepted",
	"F6_E3M2": "6-bit float, not accepted", "C64": "complex",
}

// tensorInfo is one header entry.
type tensorInfo struct {
	Name     string
	DType    string
	elemSize int64
	Shape    []int64
	Begin    int64 // relative to the start of the data region
	End      int64
}

// rawTensorInfo mirrors a header entry; pointers detect absent fields.
type rawTensorInfo struct {
	DType       *string   `json:"dtype"`
	Shape       *[]int64  `json:"shape"`
	DataOffsets *[]uint64 `json:"data_offsets"`
}

// parseHeader parses and checks the JSON header (without its 8-byte length
// prefix): a JSON object, no duplicate keys, optional __metadata__ of
// string values, every other member {dtype, shape, data_offsets} with no
// other fields, only JSON whitespace after the object. It returns the
// tensors sorted by offset, with dtype and size checked.
func parseHeader(h []byte) ([]tensorInfo, map[string]string, *Rejection) {
	if !utf8.Valid(h) {
		return nil, nil, rejectTensor(ReasonHeaderInvalid, "", "header is not valid UTF-8")
	}
	if len(h) == 0 || h[0] != '{' {
		return nil, nil, rejectTensor(ReasonHeaderInvalid, "", "header does not start with '{'")
	}
	dec := json.NewDecoder(bytes.NewReader(h))
	if _, err := dec.Token(); err != nil {
		return nil, nil, rejectTensor(ReasonHeaderInvalid, "", "%v", err)
	}
	var tensors []tensorInfo
	var meta map[string]string
	seen := map[string]bool{}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, nil, rejectTensor(ReasonHeaderInvalid, "", "%v", err)
		}
		name, ok := tok.(string)
		if !ok {
			return nil, nil, rejectTensor(ReasonHeaderInvalid, "", "object key expected")
		}
		var raw json.RawMessage
		if err := dec.Decode(&raw); err != nil {
			return nil, nil, rejectTensor(ReasonHeaderInvalid, name, "%v", err)
		}
		if seen[name] {
			return nil, nil, rejectTensor(ReasonDuplicateTensor, name, "key appears twice in the header")
		}
		seen[name] = true
		if name == "__metadata__" {
			if err := strictUnmarshal(raw, &meta); err != nil || meta == nil {
				return nil, nil, rejectTensor(ReasonHeaderInvalid, name, "__metadata__ must be an object of strings")
			}
			continue
		}
		t, rej := parseTensorInfo(name, raw)
		if rej != nil {
			return nil, nil, rej
		}
		tensors = append(tensors, t)
	}
	if tok, err := dec.Token(); err != nil || tok != json.Delim('}') {
		return nil, nil, rejectTensor(ReasonHeaderInvalid, "", "unterminated header object")
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, nil, rejectTensor(ReasonHeaderInvalid, "", "data after the header object")
	}
	sort.SliceStable(tensors, func(i, j int) bool {
		if tensors[i].Begin != tensors[j].Begin {
			return tensors[i].Begin < tensors[j].Begin
		}
		return tensors[i].End < tensors[j].End
	})
	return tensors, meta, nil
}

func strictUnmarshal(raw []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return err
	}
	if _, err := dec.Token(); err != io.EOF {
		return fmt.Errorf("trailing data")
	}
	return nil
}

func parseTensorInfo(name string, raw json.RawMessage) (tensorInfo, *Rejection) {
	var r rawTensorInfo
	if bytes.HasPrefix(bytes.TrimSpace(raw), []byte("null")) {
		return tensorInfo{}, rejectTensor(ReasonHeaderInvalid, name, "entry is null")
	}
	if err := strictUnmarshal(raw, &r); err != nil {
		return tensorInfo{}, rejectTensor(ReasonHeaderInvalid, name, "entry: %v", err)
	}
	if r.DType == nil || r.Shape == nil || r.DataOffsets == nil {
		return tensorInfo{}, rejectTensor(ReasonHeaderInvalid, name, "entry needs dtype, shape and data_offsets")
	}
	size, ok := allowedDTypes[*r.DType]
	if !ok {
		kind := otherDTypes[*r.DType]
		if kind == "" {
			kind = "unknown dtype"
		}
		return tensorInfo{}, rejectTensor(ReasonDTypeNotAllowed, name, "dtype %q (%s); only BF16, F16, F32 are accepted", *r.DType, kind)
	}
	offs := *r.DataOffsets
	if len(offs) != 2 {
		return tensorInfo{}, rejectTensor(ReasonHeaderInvalid, name, "data_offsets has %d entries, want 2", len(offs))
	}
	const maxOff = 1 << 62
	if offs[0] > offs[1] || offs[1] > maxOff {
		return tensorInfo{}, rejectTensor(ReasonHeaderInvalid, name, "data_offsets [%d, %d] is not an ordered range", offs[0], offs[1])
	}
	// Expected byte size = product(shape) × element size, overflow-checked.
	want := uint64(size)
	for _, d := range *r.Shape {
		if d < 0 {
			return tensorInfo{}, rejectTensor(ReasonHeaderInvalid, name, "negative dimension in shape %v", *r.Shape)
		}
		hi, lo := bits.Mul64(want, uint64(d))
		if hi != 0 || lo > maxOff {
			return tensorInfo{}, rejectTensor(ReasonSizeMismatch, name, "shape %v is absurdly large", *r.Shape)
		}
		want = lo
	}
	if got := offs[1] - offs[0]; got != want {
		return tensorInfo{}, rejectTensor(ReasonSizeMismatch, name, "data_offsets span %d bytes, shape %v × %s needs %d", got, *r.Shape, *r.DType, want)
	}
	return tensorInfo{Name: name, DType: *r.DType, elemSize: size, Shape: *r.Shape,
		Begin: int64(offs[0]), End: int64(offs[1])}, nil
}

// checkLayout checks that the tensors, sorted by offset, tile the data
// region [0, dataLen) exactly: no overlap, no gap, nothing after the last.
func checkLayout(tensors []tensorInfo, dataLen int64) *Rejection {
	var pos int64
	prev := ""
	for _, t := range tensors {
		switch {
		case t.Begin < pos:
			return rejectTensor(ReasonOffsetsOverlap, t.Name, "starts at %d, inside %s which ends at %d", t.Begin, prev, pos)
		case t.Begin > pos:
			return rejectTensor(ReasonOffsetsGap, t.Name, "starts at %d, but the previous tensor ends at %d", t.Begin, pos)
		}
		pos = t.End
		prev = t.Name
	}
	switch {
	case pos > dataLen:
		return rejectTensor(ReasonTruncated, prev, "tensor data ends at %d but the file holds only %d data bytes", pos, dataLen)
	case pos < dataLen:
		return rejectTensor(ReasonOffsetsCoverage, "", "%d bytes after the last tensor belong to no tensor", dataLen-pos)
	}
	return nil
}

// checkArchitecture compares names and shapes with arch.
func checkArchitecture(tensors []tensorInfo, arch Architecture) *Rejection {
	want := make(map[string]TensorSpec, len(arch.Tensors))
	for _, s := range arch.Tensors {
		want[s.Name] = s
	}
	byName := make(map[string]tensorInfo, len(tensors))
	var unexpected []string
	for _, t := range tensors {
		byName[t.Name] = t
		if _, ok := want[t.Name]; !ok {
			unexpected = append(unexpected, t.Name)
		}
	}
	if len(unexpected) > 0 {
		sort.Strings(unexpected)
		return rejectTensor(ReasonUnexpectedTensor, unexpected[0], "%d tensor(s) not in %s: %s", len(unexpected), arch.Name, listSome(unexpected))
	}
	var missing []string
	for _, s := range arch.Tensors {
		t, ok := byName[s.Name]
		if !ok {
			if !s.Optional {
				missing = append(missing, s.Name)
			}
			continue
		}
		if !equalShape(t.Shape, s.Shape) {
			return rejectTensor(ReasonShapeMismatch, s.Name, "shape %v, %s has %v", t.Shape, arch.Name, s.Shape)
		}
	}
	if len(missing) > 0 {
		return rejectTensor(ReasonMissingTensor, missing[0], "%d required tensor(s) of %s absent: %s", len(missing), arch.Name, listSome(missing))
	}
	return nil
}

func equalShape(a, b []int64) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func listSome(names []string) string {
	const max = 5
	if len(names) <= max {
		return fmt.Sprint(names)
	}
	return fmt.Sprintf("%v and %d more", names[:max], len(names)-max)
}
