package evaluate

import "encoding/binary"

// Non-finite detection on raw little-endian bit patterns. A value is NaN
// or ±Inf exactly when its exponent bits are all ones:
//
//	BF16  s eeeeeeee mmmmmmm         exponent mask 0x7F80
//	F16   s eeeee mmmmmmmmmm         exponent mask 0x7C00
//	F32   s eeeeeeee m×23            exponent mask 0x7F800000
//
// Eight bytes are tested at once (SWAR). Per lane, with E the exponent mask
// (a contiguous run of bits just below the sign bit) and low(E) its lowest
// bit: (x & E) + low(E) equals the sign bit when x & E == E, and stays
// below it otherwise (any other subset of E is at most E − low(E)). So the
// sign bit of the sum flags the lane, and no carry ever crosses a lane.

const (
	bf16Mask = 0x7F807F807F807F80
	bf16Add  = 0x0080008000800080
	f16Mask  = 0x7C007C007C007C00
	f16Add   = 0x0400040004000400
	lane16   = 0x8000800080008000
	f32Mask  = 0x7F8000007F800000
	f32Add   = 0x0080000000800000
	lane32   = 0x8000000080000000
)

// firstNonFinite returns the index of the first non-finite element of b
// (a whole number of elements of dtype), or -1.
func firstNonFinite(dtype string, b []byte) int64 {
	var mask, add, lane uint64
	var size int
	switch dtype {
	case "BF16":
		mask, add, lane, size = bf16Mask, bf16Add, lane16, 2
	case "F16":
		mask, add, lane, size = f16Mask, f16Add, lane16, 2
	case "F32":
		mask, add, lane, size = f32Mask, f32Add, lane32, 4
	default:
		panic("evaluate: firstNonFinite: dtype " + dtype)
	}
	i := 0
	// 32 bytes per iteration; on a hit, fall through to the exact scan.
	for ; i+32 <= len(b); i += 32 {
		w := b[i : i+32 : i+32]
		x0 := binary.LittleEndian.Uint64(w[0:8])
		x1 := binary.LittleEndian.Uint64(w[8:16])
		x2 := binary.LittleEndian.Uint64(w[16:24])
		x3 := binary.LittleEndian.Uint64(w[24:32])
		// Parenthesized: in Go, + and | share one precedence level.
		if (((x0&mask)+add)|((x1&mask)+add)|((x2&mask)+add)|((x3&mask)+add))&lane != 0 {
			break
		}
	}
	for ; i+size <= len(b); i += size {
		if size == 2 {
			v := uint64(binary.LittleEndian.Uint16(b[i:]))
			if ((v&mask)+add)&lane&0xFFFF != 0 {
				return int64(i / size)
			}
		} else {
			v := uint64(binary.LittleEndian.Uint32(b[i:]))
			if ((v&mask)+add)&lane&0xFFFFFFFF != 0 {
				return int64(i / size)
			}
		}
	}
	return -1
}

// elementBits returns the raw bits of element idx of b, for messages.
func elementBits(size int64, b []byte, idx int64) uint64 {
	if size == 2 {
		return uint64(binary.LittleEndian.Uint16(b[idx*2:]))
	}
	return uint64(binary.LittleEndian.Uint32(b[idx*4:]))
}
