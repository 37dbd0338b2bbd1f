package engine

import (
	"encoding/binary"

	"github.com/vkattn/vkattn/core"
)

// halfBytes is bits as little-endian bytes, as the device reads them.
func halfBytes(bits []uint16) []byte {
	b := make([]byte, 2*len(bits))
	for i, h := range bits {
		binary.LittleEndian.PutUint16(b[2*i:], h)
	}
	return b
}

// q8Bytes is data quantized to q8_0 as the device stores it: the quants,
// a byte each, then the float16 scales, one per block (the layout
// byteSpans reads). It returns the largest |dequantized value| too.
func q8Bytes(data []float32) ([]byte, float64, error) {
	q, scales, err := core.QuantizeQ8_0(data)
	if err != nil {
		return nil, 0, err
	}
	raw := make([]byte, len(q), len(q)+2*len(scales))
	for i, x := range q {
		raw[i] = byte(x)
	}
	most, _ := Magnitude(core.DequantizeQ8_0(q, scales))
	return append(raw, halfBytes(scales)...), most, nil
}

// q4Bytes is data quantized to q4_0 as the device stores it: every
// block's 16 quant bytes (ggml's qs), then the float16 scales, one per
// block (the layout byteSpans reads). It returns the largest
// |dequantized value| too.
func q4Bytes(data []float32) ([]byte, float64, error) {
	q, scales, err := core.QuantizeQ4_0(data)
	if err != nil {
		return nil, 0, err
	}
	most, _ := Magnitude(core.DequantizeQ4_0(q, scales))
	return append(q, halfBytes(scales)...), most, nil
}

// quantBytes is q8Bytes or q4Bytes, as dt (Q8_0 or Q4_0) says.
func quantBytes(dt core.DType, data []float32) ([]byte, float64, error) {
	if dt == core.Q4_0 {
		return q4Bytes(data)
	}
	return q8Bytes(data)
}

// quantBlock is the elements of one block of the quantized type dt.
func quantBlock(dt core.DType) int {
	if dt == core.Q4_0 {
		return core.Q4Block
	}
	return core.Q8Block
}

// ByteSpan is a byte range of a buffer or of an encoding of elements.
type ByteSpan struct{ Off, N uint64 }

// byteSpans are where elements [e, e+n) lie in a buffer (or a host
// encoding) of total elements of type dt: one range for the float types;
// for q8_0 and q4_0 (e, n and total whole blocks) the quants' bytes (a
// byte an element; q4_0 half a byte, blocks whole), then the scales'
// halves after all total quants.
func byteSpans(dt core.DType, total, e, n int) []ByteSpan {
	switch dt {
	case core.Q8_0:
		return []ByteSpan{{uint64(e), uint64(n)}, {uint64(total + 2*(e/core.Q8Block)), uint64(2 * (n / core.Q8Block))}}
	case core.Q4_0:
		return []ByteSpan{{uint64(e / 2), uint64(n / 2)}, {uint64(total/2 + 2*(e/core.Q4Block)), uint64(2 * (n / core.Q4Block))}}
	}
	b := uint64(dt.Bytes())
	return []ByteSpan{{uint64(e) * b, uint64(n) * b}}
}

// EachSpan calls f with the matching source and destination ranges of n
// elements: from element src of an encoding (or buffer) of srcTotal
// elements to element dst of one of dstTotal.
func EachSpan(dt core.DType, srcTotal, src, dstTotal, dst, n int, f func(from, to ByteSpan) error) error {
	to := byteSpans(dt, dstTotal, dst, n)
	for i, from := range byteSpans(dt, srcTotal, src, n) {
		if err := f(from, to[i]); err != nil {
			return err
		}
	}
	return nil
}
