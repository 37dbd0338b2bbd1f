package core

import (
	"fmt"
	"math"
	"strings"

	"github.com/x448/float16"
)

// DType is the element type a tensor is stored in on the device: float32,
// float16 or bfloat16. Kernels widen every element to float32 as they
// load it (exactly: every half is a float32) and compute and write in
// float32, so a half tensor halves the memory and the bytes read, and the
// result is that of float32 attention on the rounded values.
type DType int

const (
	Float32  DType = iota // IEEE binary32
	Float16               // IEEE binary16: 11-bit significand, |x| <= 65504
	BFloat16              // the upper 16 bits of a float32: 8-bit significand, float32's range
	// Q8_0 is ggml's q8_0, for K and V (a KV cache, K and V of a call):
	// blocks of Q8Block consecutive elements of a row, each an int8 times
	// the block's float16 scale (SEMANTICS.md §9.2). Rows must be whole
	// blocks.
	Q8_0
	// Q4_0 is ggml's q4_0, for K and V: blocks of Q4Block consecutive
	// elements of a row, each a 4-bit quant q read as (q - 8) times the
	// block's float16 scale (SEMANTICS.md §9.2). Rows must be whole
	// blocks.
	Q4_0
	// IQ4_NL is ggml's iq4_nl, for K and V: blocks of IQ4NLBlock
	// elements, each a 4-bit index into a fixed table of 16 non-linear
	// levels (IQ4NLLevels) times the block's float16 scale (SEMANTICS.md
	// §9.2). Rows must be whole blocks.
	IQ4_NL
)

// Q8Block is the elements of one q8_0 block.
const Q8Block = 32

// Q4Block is the elements of one q4_0 block: Q4Block/2 bytes of quants,
// two a byte, and a float16 scale.
const Q4Block = 32

// IQ4NLBlock is the elements of one iq4_nl block: 16 bytes of 4-bit
// indices and a float16 scale.
const IQ4NLBlock = 32

// DTypes is every element type, in order.
var DTypes = []DType{Float32, Float16, BFloat16}

// Bytes is the size of one element of a float type (a quantized type: 1,
// the unit its buffers are measured in, though a 4-bit quant is half a
// byte). StorageBytes is the size of n elements of any type, scales
// included.
func (t DType) Bytes() int {
	switch {
	case t == Float32:
		return 4
	case t.Quantized():
		return 1
	}
	return 2
}

// StorageBytes is the bytes n elements of type t take: n*Bytes(), and for
// a quantized type its quants (QuantBits each) and a float16 scale per
// block (q8_0: 34 bytes per 32 elements; q4_0: 18).
func (t DType) StorageBytes(n int) int {
	if q, ok := t.Quant(); ok {
		return (n*q.QuantBits+7)/8 + 2*((n+q.Block-1)/q.Block)
	}
	return n * t.Bytes()
}

// Quantized reports whether t is a block-quantized type (a row of
// QuantTypes): a buffer of its quants, then its float16 scales, one per
// block.
func (t DType) Quantized() bool {
	_, ok := t.Quant()
	return ok
}

// Half reports whether t is a 16-bit float type (Float16, BFloat16).
func (t DType) Half() bool { return t == Float16 || t == BFloat16 }

// Valid reports whether t is one of DTypes, the float types every tensor
// may have.
func (t DType) Valid() bool { return t >= Float32 && t <= BFloat16 }

// ValidKV reports whether K and V may be stored as t: a float type or a
// quantized one.
func (t DType) ValidKV() bool { return t.Valid() || t.Quantized() }

// ParseDType reads an element type: f32, f16 or bf16 (or float32, float16,
// bfloat16), or a quantized type's name (q8_0, q4_0: QuantTypes).
func ParseDType(s string) (DType, error) {
	switch strings.ToLower(s) {
	case "f32", "float32", "fp32":
		return Float32, nil
	case "f16", "float16", "fp16", "half":
		return Float16, nil
	case "bf16", "bfloat16":
		return BFloat16, nil
	}
	for _, q := range QuantTypes {
		if strings.EqualFold(s, q.Name) {
			return q.DType, nil
		}
	}
	return Float32, Errorf(ErrOption, "element type %q: want f32, f16, bf16 (or %s for K and V)", s, strings.Join(QuantNames(), ", "))
}

// SafeMagnitude is a magnitude below which every value of a block
// quantizes within range: the block's scale stays within float16's
// largest finite, 65504 (QuantType.SafeMagnitude). +Inf for the float
// types.
func (t DType) SafeMagnitude() float64 {
	if q, ok := t.Quant(); ok {
		return q.SafeMagnitude
	}
	return math.Inf(1)
}

// maxFloat16 is the largest finite float16.
const maxFloat16 = 65504

// ToFloat16 rounds x to the nearest float16 (ties to even), subnormals
// included, and returns its bits. A NaN or Inf is ErrNonFinite; a finite x
// that rounds beyond 65504 (|x| >= 65520) is ErrOverflow, never a silent
// Inf.
func ToFloat16(x float32) (uint16, error) { return toHalf(Float16, x, -1) }

// ToBFloat16 rounds x to the nearest bfloat16 (ties to even) and returns
// its bits: the upper 16 bits of the rounded float32. NaN or Inf is
// ErrNonFinite; a finite x that rounds beyond the largest bfloat16
// (3.3895314e38) is ErrOverflow.
func ToBFloat16(x float32) (uint16, error) { return toHalf(BFloat16, x, -1) }

// toHalf rounds x to the half type t; errors name it as element element
// (none for a negative one).
func toHalf(t DType, x float32, element int) (uint16, error) {
	// The element's name is formatted only for an error.
	what := func() string {
		if element < 0 {
			return ""
		}
		return fmt.Sprintf("element %d: ", element)
	}
	if !Finite32(x) {
		return 0, FiniteElement(x, what())
	}
	var h uint16
	if t == Float16 {
		h = float16.Fromfloat32(x).Bits()
	} else {
		bits := math.Float32bits(x)
		bits += 0x7fff + (bits>>16)&1 // round the low half away, ties to even
		h = uint16(bits >> 16)
	}
	if math.IsInf(float64(Widen(t, h)), 0) {
		return 0, Errorf(ErrOverflow, "%s%g does not fit %v (|x| <= %g)", what(), x, t, Widen(t, maxHalf[t]))
	}
	return h, nil
}

// maxHalf is the bits of the largest finite value of each half type.
var maxHalf = map[DType]uint16{Float16: 0x7bff, BFloat16: 0x7f7f}

// FiniteElement refuses NaN and Inf; the error names x as what says.
func FiniteElement(x float32, what string) error {
	if !Finite32(x) {
		return Errorf(ErrNonFinite, "%s%g cannot be stored (tensors must be finite)", what, x)
	}
	return nil
}

// Finite32 reports whether x is neither NaN nor an infinity: loops over
// many elements test it first and format FiniteElement's message only for
// the element that fails.
func Finite32(x float32) bool { return !math.IsNaN(float64(x)) && !math.IsInf(float64(x), 0) }

// Widen is the float32 value of the half bits h of type t (exact).
func Widen(t DType, h uint16) float32 {
	if t == Float16 {
		return float16.Frombits(h).Float32()
	}
	return math.Float32frombits(uint32(h) << 16)
}

// Round returns data rounded to element type t as float32 values: what a
// tensor of type t uploaded from data holds, so a reference computed on
// them is the reference of the device's result. Errors as ToFloat16 and
// ToBFloat16, naming the element.
func Round(t DType, data []float32) ([]float32, error) {
	if q, ok := t.Quant(); ok {
		quants, scales, err := q.Quantize(data)
		if err != nil {
			return nil, err
		}
		return q.Dequantize(quants, scales), nil
	}
	out := make([]float32, len(data))
	if t == Float32 {
		copy(out, data)
		return out, nil
	}
	bits, err := HalfBits(t, data)
	if err != nil {
		return nil, err
	}
	for i, h := range bits {
		out[i] = Widen(t, h)
	}
	return out, nil
}

// HalfBits rounds data to the half type t; errors name the element.
func HalfBits(t DType, data []float32) ([]uint16, error) {
	if t != Float16 && t != BFloat16 {
		return nil, Errorf(ErrOption, "element type %v is not a half", t)
	}
	bits := make([]uint16, len(data))
	for i, x := range data {
		h, err := toHalf(t, x, i)
		if err != nil {
			return nil, err
		}
		bits[i] = h
	}
	return bits, nil
}

// QuantizeQ8_0 quantizes data, whole blocks of Q8Block values, as ggml's
// quantize_row_q8_0 does, bit for bit: per block d = amax/127 in float32,
// id = 1/d (0 when d = 0), each quant the float32 product x*id rounded
// half away from zero, and d stored as the nearest float16 (ties to even,
// subnormals kept). A NaN or Inf is ErrNonFinite; a block whose scale
// rounds beyond float16's range (amax >= q8AmaxLimit) ErrOverflow; a
// length that is not whole blocks ErrShape.
func QuantizeQ8_0(data []float32) (quants []int8, scales []uint16, err error) {
	if len(data)%Q8Block != 0 {
		return nil, nil, Errorf(ErrShape, "q8_0 holds blocks of %d values; %d values are not whole blocks", Q8Block, len(data))
	}
	quants = make([]int8, len(data))
	scales = make([]uint16, len(data)/Q8Block)
	for b := range scales {
		block := data[b*Q8Block : (b+1)*Q8Block]
		amax, _, err := blockPeak(block, b*Q8Block)
		if err != nil {
			return nil, nil, err
		}
		if amax >= q8AmaxLimit {
			return nil, nil, Errorf(ErrOverflow, "q8_0 block %d: largest |x| %g needs a scale beyond float16 (a block's |x| must be below 65520*127 = %d)", b, amax, q8AmaxLimit)
		}
		d := amax / 127
		var id float32
		if d != 0 {
			id = 1 / d
		}
		if math.IsInf(float64(id), 0) {
			id = 0 // d is below 2^-126 or so: its float16 scale is 0 anyway
		}
		scales[b] = float16.Fromfloat32(d).Bits()
		for i, x := range block {
			quants[b*Q8Block+i] = int8(roundHalfAway(float32(x * id))) // the product rounded: never fused
		}
	}
	return quants, scales, nil
}

// blockPeak is a block's largest |x| and the first element of that
// magnitude (ggml's amax and max), or the error of its first element that
// is not finite; first is the block's first element in the data.
func blockPeak(block []float32, first int) (amax, top float32, err error) {
	for i, x := range block {
		if !Finite32(x) {
			return 0, 0, FiniteElement(x, fmt.Sprintf("element %d: ", first+i))
		}
		if a := float32(math.Abs(float64(x))); amax < a { // strictly: the first of equal magnitudes
			amax, top = a, x
		}
	}
	return amax, top, nil
}

// q8AmaxLimit bounds a q8_0 block's largest |x|: below it the scale
// amax/127 rounds to a finite float16, at or above it to Inf. float16's
// largest value is 65504 and 65520, the midpoint to 2^16, rounds to even,
// Inf; amax/127 in float32 is below 65520 exactly when amax is below
// 65520*127 (an integer, exact in float32: the float32 below it,
// 8321039.5, gives 65519.996).
const q8AmaxLimit = 65520 * 127

// roundHalfAway is C's roundf: the nearest integer, halves away from zero.
func roundHalfAway(x float32) float32 {
	t := float32(math.Trunc(float64(x)))
	if math.Abs(float64(x-t)) >= 0.5 {
		t += float32(math.Copysign(1, float64(x)))
	}
	return t
}

// DequantizeQ8_0 is the values of q8_0 blocks: quant times the block's
// float16 scale, exact in float32.
func DequantizeQ8_0(quants []int8, scales []uint16) []float32 {
	out := make([]float32, len(quants))
	for i, q := range quants {
		out[i] = float32(q) * Widen(Float16, scales[i/Q8Block])
	}
	return out
}

// QuantizeQ4_0 quantizes data, whole blocks of Q4Block values, as ggml's
// quantize_row_q4_0_ref does, bit for bit: per block max is the value of
// largest |x| (the first such, its sign kept), d = max / -8 and id = 1/d
// (0 when d is ±0) in float32, each quant min(15, trunc(x*id + 8.5)) with
// the product and the sum each rounded to float32, and d stored as the
// nearest float16 (ties to even, subnormals and sign kept). quants are
// ggml's qs bytes, 16 a block: element j of a block is the low nibble of
// its byte j, element j+16 the high one. A NaN or Inf is ErrNonFinite; a
// block whose scale rounds beyond float16's range (|max| >= q4MaxLimit)
// ErrOverflow; a length that is not whole blocks ErrShape.
func QuantizeQ4_0(data []float32) (quants []byte, scales []uint16, err error) {
	if len(data)%Q4Block != 0 {
		return nil, nil, Errorf(ErrShape, "q4_0 holds blocks of %d values; %d values are not whole blocks", Q4Block, len(data))
	}
	quants = make([]byte, len(data)/2)
	scales = make([]uint16, len(data)/Q4Block)
	for b := range scales {
		block := data[b*Q4Block : (b+1)*Q4Block]
		amax, top, err := blockPeak(block, b*Q4Block)
		if err != nil {
			return nil, nil, err
		}
		if amax >= q4MaxLimit {
			return nil, nil, Errorf(ErrOverflow, "q4_0 block %d: largest |x| %g needs a scale beyond float16 (a block's |x| must be below 65520*8 = %d)", b, amax, q4MaxLimit)
		}
		d := top / -8 // a block of zeros: -0
		var id float32
		if d != 0 {
			id = 1 / d
		}
		if math.IsInf(float64(id), 0) {
			id = 0 // |d| below about 2.9e-39: its float16 scale is 0 anyway
		}
		scales[b] = float16.Fromfloat32(d).Bits()
		for j := range Q4Block / 2 {
			lo, hi := q4Quant(block[j], id), q4Quant(block[j+Q4Block/2], id)
			quants[b*Q4Block/2+j] = lo | hi<<4
		}
	}
	return quants, scales, nil
}

// q4Quant is ggml's quant of x: the float32 product x*id and the float32
// sum with 8.5, each rounded (never fused), truncated, at most 15. The sum
// is at least 0.5 minus rounding for every x of the block (|x*id| <= 8
// but for the rounding of id), so truncating never goes below 0.
func q4Quant(x, id float32) byte {
	s := float32(float32(x*id) + 8.5)
	return byte(min(15, int(s)))
}

// q4MaxLimit bounds a q4_0 block's largest |x|: below it the scale
// max/-8 rounds to a finite float16, at or above it to Inf (65520, the
// midpoint from 65504 to 2^16, rounds to even, Inf). Dividing by 8 is
// exact for such magnitudes.
const q4MaxLimit = 65520 * 8

// DequantizeQ4_0 is the values of q4_0 blocks: (quant - 8) times the
// block's float16 scale, exact in float32; as many whole blocks as both
// quants and scales hold.
func DequantizeQ4_0(quants []byte, scales []uint16) []float32 {
	return dequantizeNibbles(quants, scales, Q4Block, func(q byte) float32 { return float32(int(q) - 8) })
}

// dequantizeNibbles is the values of blocks of block 4-bit quants (byte j
// of a block holds element j in its low nibble and element j + block/2 in
// its high one), each the level of its nibble times the block's float16
// scale; as many whole blocks as both quants and scales hold.
func dequantizeNibbles(quants []byte, scales []uint16, block int, level func(byte) float32) []float32 {
	out := make([]float32, min(len(quants)/(block/2), len(scales))*block)
	for i := range out {
		b, j := i/block, i%block
		q := quants[b*block/2+j%(block/2)]
		if j >= block/2 {
			q >>= 4
		}
		out[i] = level(q&0xf) * Widen(Float16, scales[b])
	}
	return out
}

// FormatBytes writes a byte count in binary units: "512 B", "1.5 MiB".
func FormatBytes(n uint64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	v, i := float64(n), 0
	for v >= unit && i < 4 {
		v /= unit
		i++
	}
	return fmt.Sprintf("%.1f %s", v, [...]string{"B", "KiB", "MiB", "GiB", "TiB"}[i])
}
