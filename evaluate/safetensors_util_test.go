package evaluate

import (
	"bufio"
	"encoding/binary"
	"encoding/json"
	"io"
	"os"
	"testing"
)

// stTensor is one tensor to write. Data nil means deterministic finite
// values (fillFinite).
type stTensor struct {
	Name  string
	DType string
	Shape []int64
	Data  []byte
}

var dtypeSizes = map[string]int64{"BF16": 2, "F16": 2, "F32": 4, "F64": 8, "I32": 4, "I64": 8, "U8": 1, "BOOL": 1, "I8": 1}

func (t stTensor) bytes() int64 { return numElements(t.Shape) * dtypeSizes[t.DType] }

// stHeader builds the header map for tensors laid out in order; mutate may
// lie about it before it is encoded.
func stHeader(tensors []stTensor, mutate func(map[string]any)) []byte {
	hdr := map[string]any{"__metadata__": map[string]string{"format": "pt"}}
	var off int64
	for _, t := range tensors {
		n := t.bytes()
		hdr[t.Name] = map[string]any{"dtype": t.DType, "shape": t.Shape, "data_offsets": []int64{off, off + n}}
		off += n
	}
	if mutate != nil {
		mutate(hdr)
	}
	b, err := json.Marshal(hdr)
	if err != nil {
		panic(err)
	}
	// safetensors pads the header with spaces to a multiple of 8.
	for len(b)%8 != 0 {
		b = append(b, ' ')
	}
	return b
}

// writeST writes a safetensors file: header length, header, tensor data
// in order (streamed through a small buffer, so it also serves the
// full-size benchmark).
func writeST(tb testing.TB, path string, tensors []stTensor, mutate func(map[string]any)) {
	tb.Helper()
	f, err := os.Create(path)
	if err != nil {
		tb.Fatal(err)
	}
	if err := writeSTTo(f, tensors, mutate); err != nil {
		f.Close()
		tb.Fatal(err)
	}
	if err := f.Close(); err != nil {
		tb.Fatal(err)
	}
}

func writeSTTo(w io.Writer, tensors []stTensor, mutate func(map[string]any)) error {
	bw := bufio.NewWriterSize(w, 4<<20)
	hdr := stHeader(tensors, mutate)
	var n [8]byte
	binary.LittleEndian.PutUint64(n[:], uint64(len(hdr)))
	bw.Write(n[:])
	bw.Write(hdr)
	fill := make([]byte, 4<<20)
	var seed uint64 = 0x9E3779B97F4A7C15
	for _, t := range tensors {
		if t.Data != nil {
			if _, err := bw.Write(t.Data); err != nil {
				return err
			}
			continue
		}
		for left := t.bytes(); left > 0; {
			k := min(left, int64(len(fill)))
			fillFinite(t.DType, fill[:k], &seed)
			if _, err := bw.Write(fill[:k]); err != nil {
				return err
			}
			left -= k
		}
	}
	return bw.Flush()
}

// fillFinite fills b with pseudo-random values whose exponent is never all
// ones (the top exponent bit is cleared); integer dtypes get raw bytes.
func fillFinite(dtype string, b []byte, seed *uint64) {
	x := *seed
	for i := 0; i+8 <= len(b); i += 8 {
		x ^= x << 13
		x ^= x >> 7
		x ^= x << 17
		v := x
		switch dtype {
		case "BF16", "F16":
			v &^= 0x4000400040004000
		case "F32":
			v &^= 0x4000000040000000
		case "F64":
			v &^= 0x4000000000000000
		}
		binary.LittleEndian.PutUint64(b[i:], v)
	}
	for i := len(b) &^ 7; i < len(b); i++ {
		b[i] = 0
	}
	*seed = x
}

// archTensors returns the tensors of arch in dtype, the optional ones
// included when withOptional.
func archTensors(arch Architecture, dtype string, withOptional bool) []stTensor {
	var out []stTensor
	for _, s := range arch.Tensors {
		if s.Optional && !withOptional {
			continue
		}
		out = append(out, stTensor{Name: s.Name, DType: dtype, Shape: s.Shape})
	}
	return out
}

func tinyArch(testing.TB) Architecture { return TinyQwen2() }
