package evaluate

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"os"
	"sort"
)

// CheckWeights reads the tensor data through ReadBuffers buffers of
// ReadBufferBytes each (a multiple of every accepted element size): its
// memory does not grow with the file.
const (
	ReadBufferBytes = 1 << 20
	ReadBuffers     = 4
)

// Report describes a checkpoint that CheckWeights accepted (or, with a
// rejection, as far as the check got).
type Report struct {
	Path string `json:"path"`
	// Size is the file size in bytes.
	Size int64 `json:"size"`
	// SHA256 is the hex sha256 of the whole file; set only when the file
	// was accepted.
	SHA256      string `json:"sha256"`
	HeaderBytes int64  `json:"header_bytes"`
	Tensors     int    `json:"tensors"`
	Parameters  int64  `json:"parameters"`
	// DTypes counts tensors per dtype.
	DTypes map[string]int `json:"dtypes"`
	// TiedHead is true when an optional tensor (the tied lm_head.weight) is
	// absent.
	TiedHead bool              `json:"tied_head"`
	Metadata map[string]string `json:"metadata,omitempty"`
}

// CheckWeights checks the safetensors file at path against arch and
// returns its sha256, reading the file exactly once, front to back, in
// constant memory (ReadBuffers × ReadBufferBytes; the JSON header, at most
// MaxHeaderBytes, is held while it is parsed). Scanning and hashing run on
// two goroutines.
//
// Checks, in order: a regular file; the 8-byte little-endian header length
// (non-zero, at most MaxHeaderBytes, within the file); the header (strict
// JSON, no duplicate names, optional __metadata__ of strings, entries of
// exactly dtype/shape/data_offsets); every dtype BF16, F16 or F32; every
// data_offsets span equal to product(shape) × element size; the tensors
// tiling the data region exactly (no overlap, no gap, nothing after the
// last, nothing missing at the end); names and shapes equal to arch's
// (optional tensors may be absent); every value finite. A failure of any
// of these is a *Rejection; I/O failures are plain errors.
func CheckWeights(path string, arch Architecture) (Report, error) {
	rep := Report{Path: path, DTypes: map[string]int{}}
	f, err := os.Open(path)
	if err != nil {
		return rep, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return rep, err
	}
	if !st.Mode().IsRegular() {
		return rep, rejectTensor(ReasonNotRegularFile, "", "%s is a %s", path, st.Mode().Type())
	}
	rep.Size = st.Size()

	h := sha256.New()
	r := &hashingReader{r: f, h: h} // header only; the data goes through pipe

	var lenBuf [8]byte
	if _, err := io.ReadFull(r, lenBuf[:]); err != nil {
		return rep, truncatedOr(err, "file of %d bytes has no 8-byte header length", rep.Size)
	}
	n := binary.LittleEndian.Uint64(lenBuf[:])
	switch {
	case n == 0:
		return rep, rejectTensor(ReasonHeaderSize, "", "header length 0")
	case n > MaxHeaderBytes:
		return rep, rejectTensor(ReasonHeaderSize, "", "header length %d exceeds the limit %d", n, MaxHeaderBytes)
	case int64(n) > rep.Size-8:
		return rep, rejectTensor(ReasonHeaderSize, "", "header length %d but only %d bytes follow", n, rep.Size-8)
	}
	rep.HeaderBytes = int64(n)
	header := make([]byte, n)
	if _, err := io.ReadFull(r, header); err != nil {
		return rep, truncatedOr(err, "file ends inside the header")
	}
	tensors, meta, rej := parseHeader(header)
	header = nil
	if rej != nil {
		return rep, rej
	}
	rep.Metadata = meta
	rep.Tensors = len(tensors)
	for _, t := range tensors {
		rep.DTypes[t.DType]++
		rep.Parameters += numElements(t.Shape)
	}
	dataLen := rep.Size - 8 - int64(n)
	if rej := checkLayout(tensors, dataLen); rej != nil {
		return rep, rej
	}
	if rej := checkArchitecture(tensors, arch); rej != nil {
		return rep, rej
	}
	present := map[string]bool{}
	for _, t := range tensors {
		present[t.Name] = true
	}
	for _, s := range arch.Tensors {
		if s.Optional && !present[s.Name] {
			rep.TiedHead = true
		}
	}

	// Stream the data region: tensors are contiguous and sorted, so reading
	// each tensor's bytes in turn reads the region front to back. This
	// goroutine reads and scans; a second one hashes, in file order, the
	// chunks handed to it (ReadBuffers buffers in rotation).
	pipe := newHashPipe(h, ReadBuffers, ReadBufferBytes)
	defer pipe.close()
	for i := range tensors {
		t := &tensors[i]
		var elem int64
		for left := t.End - t.Begin; left > 0; {
			buf := pipe.get()
			k := min(left, int64(len(buf)))
			chunk := buf[:k]
			if _, err := io.ReadFull(f, chunk); err != nil {
				return rep, truncatedOr(err, "file ends inside tensor %s", t.Name)
			}
			if idx := firstNonFinite(t.DType, chunk); idx >= 0 {
				bits := elementBits(t.elemSize, chunk, idx)
				return rep, rejectTensor(ReasonNonFinite, t.Name, "element %d (%s bits 0x%0*x) is %s",
					elem+idx, t.DType, 2*t.elemSize, bits, nonFiniteKind(t.DType, bits))
			}
			pipe.put(chunk)
			elem += k / t.elemSize
			left -= k
		}
	}
	var one [1]byte
	if k, _ := io.ReadFull(f, one[:]); k != 0 {
		return rep, rejectTensor(ReasonFileChanged, "", "the file grew while it was read (stat said %d bytes)", rep.Size)
	}
	pipe.close()
	rep.SHA256 = hex.EncodeToString(h.Sum(nil))
	return rep, nil
}

func truncatedOr(err error, format string, args ...any) error {
	if errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF) {
		return rejectTensor(ReasonTruncated, "", format, args...)
	}
	return fmt.Errorf("evaluate: reading weights: %w", err)
}

func nonFiniteKind(dtype string, bits uint64) string {
	var mant uint64
	var sign bool
	switch dtype {
	case "BF16":
		mant, sign = bits&0x7F, bits&0x8000 != 0
	case "F16":
		mant, sign = bits&0x3FF, bits&0x8000 != 0
	default:
		mant, sign = bits&0x7FFFFF, bits&0x80000000 != 0
	}
	switch {
	case mant != 0:
		return "NaN"
	case sign:
		return "-Inf"
	}
	return "+Inf"
}

// hashingReader hashes every byte read through it.
type hashingReader struct {
	r io.Reader
	h hash.Hash
}

func (hr *hashingReader) Read(p []byte) (int, error) {
	n, err := hr.r.Read(p)
	hr.h.Write(p[:n])
	return n, err
}

// TensorNames returns the architecture's tensor names, sorted, for messages
// and tests.
func (a Architecture) TensorNames() []string {
	out := make([]string, 0, len(a.Tensors))
	for _, t := range a.Tensors {
		out = append(out, t.Name)
	}
	sort.Strings(out)
	return out
}

// hashPipe hashes, on its own goroutine and in order, the chunks put to
// it, recycling a fixed set of buffers.
type hashPipe struct {
	ch     chan []byte
	free   chan []byte
	done   chan struct{}
	closed bool
}

func newHashPipe(h hash.Hash, n, size int) *hashPipe {
	p := &hashPipe{ch: make(chan []byte, n), free: make(chan []byte, n), done: make(chan struct{})}
	for range n {
		p.free <- make([]byte, size)
	}
	go func() {
		defer close(p.done)
		for b := range p.ch {
			h.Write(b)
			p.free <- b[:cap(b)]
		}
	}()
	return p
}

// get returns a free buffer of full size.
func (p *hashPipe) get() []byte { return <-p.free }

// put hands a filled chunk (a prefix of a buffer from get) to the hasher.
func (p *hashPipe) put(b []byte) { p.ch <- b }

// close waits until every chunk put is hashed; idempotent.
func (p *hashPipe) close() {
	if !p.closed {
		p.closed = true
		close(p.ch)
		<-p.done
	}
}
