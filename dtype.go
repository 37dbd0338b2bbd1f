package vkattn

import (
	"encoding/binary"

	"github.com/vkattn/vkattn/core"
)

// DType is the element type a tensor is stored in on the device: float32,
// float16 or bfloat16 (core.DType).
type DType = core.DType

const (
	Float32  = core.Float32
	Float16  = core.Float16  // IEEE binary16: 11-bit significand, |x| <= 65504
	BFloat16 = core.BFloat16 // the upper 16 bits of a float32: 8-bit significand, float32's range
)

// ParseDType reads an element type: f32, f16 or bf16 (or float32, float16,
// bfloat16).
func ParseDType(s string) (DType, error) { return core.ParseDType(s) }

// ToFloat16 rounds x to the nearest float16 (ties to even), subnormals
// included, and returns its bits. A NaN or Inf is ErrNonFinite; a finite x
// that rounds beyond 65504 (|x| >= 65520) is ErrOverflow, never a silent
// Inf.
func ToFloat16(x float32) (uint16, error) { return core.ToFloat16(x) }

// ToBFloat16 rounds x to the nearest bfloat16 (ties to even) and returns
// its bits: the upper 16 bits of the rounded float32. NaN or Inf is
// ErrNonFinite; a finite x that rounds beyond the largest bfloat16
// (3.3895314e38) is ErrOverflow.
func ToBFloat16(x float32) (uint16, error) { return core.ToBFloat16(x) }

// Round returns data rounded to element type t as float32 values: what a
// tensor of type t uploaded from data holds, so a reference computed on
// them is the reference of the device's result.
func Round(t DType, data []float32) ([]float32, error) { return core.Round(t, data) }

// halfBytes is bits as little-endian bytes, as the device reads them.
func halfBytes(bits []uint16) []byte {
	b := make([]byte, 2*len(bits))
	for i, h := range bits {
		binary.LittleEndian.PutUint16(b[2*i:], h)
	}
	return b
}
