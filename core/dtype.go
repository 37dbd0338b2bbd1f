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
)

// DTypes is every element type, in order.
var DTypes = []DType{Float32, Float16, BFloat16}

func (t DType) String() string {
	switch t {
	case Float32:
		return "f32"
	case Float16:
		return "f16"
	case BFloat16:
		return "bf16"
	}
	return fmt.Sprintf("DType(%d)", int(t))
}

// Bytes is the size of one element.
func (t DType) Bytes() int {
	if t == Float32 {
		return 4
	}
	return 2
}

// Valid reports whether t is one of DTypes.
func (t DType) Valid() bool { return t >= Float32 && t <= BFloat16 }

// ParseDType reads an element type: f32, f16 or bf16 (or float32, float16,
// bfloat16).
func ParseDType(s string) (DType, error) {
	switch strings.ToLower(s) {
	case "f32", "float32", "fp32":
		return Float32, nil
	case "f16", "float16", "fp16", "half":
		return Float16, nil
	case "bf16", "bfloat16":
		return BFloat16, nil
	}
	return Float32, Errorf(ErrOption, "element type %q: want f32, f16 or bf16", s)
}

// maxFloat16 is the largest finite float16.
const maxFloat16 = 65504

// ToFloat16 rounds x to the nearest float16 (ties to even), subnormals
// included, and returns its bits. A NaN or Inf is ErrNonFinite; a finite x
// that rounds beyond 65504 (|x| >= 65520) is ErrOverflow, never a silent
// Inf.
func ToFloat16(x float32) (uint16, error) { return toHalf(Float16, x, "") }

// ToBFloat16 rounds x to the nearest bfloat16 (ties to even) and returns
// its bits: the upper 16 bits of the rounded float32. NaN or Inf is
// ErrNonFinite; a finite x that rounds beyond the largest bfloat16
// (3.3895314e38) is ErrOverflow.
func ToBFloat16(x float32) (uint16, error) { return toHalf(BFloat16, x, "") }

// toHalf rounds x to the half type t; errors name x as what says.
func toHalf(t DType, x float32, what string) (uint16, error) {
	if err := FiniteElement(x, what); err != nil {
		return 0, err
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
		return 0, Errorf(ErrOverflow, "%s%g does not fit %v (|x| <= %g)", what, x, t, Widen(t, maxHalf[t]))
	}
	return h, nil
}

// maxHalf is the bits of the largest finite value of each half type.
var maxHalf = map[DType]uint16{Float16: 0x7bff, BFloat16: 0x7f7f}

// FiniteElement refuses NaN and Inf; the error names x as what says.
func FiniteElement(x float32, what string) error {
	if math.IsNaN(float64(x)) || math.IsInf(float64(x), 0) {
		return Errorf(ErrNonFinite, "%s%g cannot be stored (tensors must be finite)", what, x)
	}
	return nil
}

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
		h, err := toHalf(t, x, fmt.Sprintf("element %d: ", i))
		if err != nil {
			return nil, err
		}
		bits[i] = h
	}
	return bits, nil
}
