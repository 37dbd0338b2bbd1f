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

// quantBytes is data quantized to the quantized type dt as the device
// stores it: the quants (the table's layout), then the float16 scales,
// one per block (the layout byteSpans reads). It returns the largest
// |dequantized value| too.
func quantBytes(dt core.DType, data []float32) ([]byte, float64, error) {
	q, _ := dt.Quant()
	quants, scales, err := q.Quantize(data)
	if err != nil {
		return nil, 0, err
	}
	most, _ := Magnitude(q.Dequantize(quants, scales))
	return append(quants, halfBytes(scales)...), most, nil
}

// quantBlock is the elements of one block of the quantized type dt.
func quantBlock(dt core.DType) int {
	q, _ := dt.Quant()
	return q.Block
}

// ByteSpan is a byte range of a buffer or of an encoding of elements.
type ByteSpan struct{ Off, N uint64 }

// byteSpans are where elements [e, e+n) lie in a buffer (or a host
// encoding) of total elements of type dt: one range for the float types;
// for a quantized type (e, n and total whole blocks) the quants' bytes,
// then the scales' halves after all total quants.
func byteSpans(dt core.DType, total, e, n int) []ByteSpan {
	if q, ok := dt.Quant(); ok {
		return []ByteSpan{{uint64(q.QuantBytes(e)), uint64(q.QuantBytes(n))},
			{uint64(q.QuantBytes(total) + 2*(e/q.Block)), uint64(2 * (n / q.Block))}}
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
