package core

import (
	"fmt"
	"math"
)

// CooperativeMatrix is one shape and type combination a device multiplies
// with VK_KHR_cooperative_matrix: Result (M x N) = A (M x K) B (K x N) + C
// (M x N), each matrix spread over the invocations of Scope.
type CooperativeMatrix struct {
	M, N, K                int
	A, B, C, Result        MatrixType
	SaturatingAccumulation bool
	Scope                  MatrixScope
}

func (c CooperativeMatrix) String() string {
	return fmt.Sprintf("%dx%dx%d %v*%v+%v->%v (%v)", c.M, c.N, c.K, c.A, c.B, c.C, c.Result, c.Scope)
}

// MatrixType is a cooperative matrix's element type (VkComponentTypeKHR).
type MatrixType uint32

// The element types vkattn's kernels use.
const (
	MatrixFloat16  MatrixType = 0
	MatrixFloat32  MatrixType = 1
	MatrixBFloat16 MatrixType = 1000141000 // VK_COMPONENT_TYPE_BFLOAT16_KHR
)

var matrixTypeNames = names[MatrixType]{"MatrixType", "matrix element type",
	[]string{"f16", "f32", "f64", "s8", "s16", "s32", "s64", "u8", "u16", "u32", "u64"}}

func (t MatrixType) String() string {
	if t == MatrixBFloat16 {
		return "bf16"
	}
	return matrixTypeNames.of(t)
}

// MatrixScope is the set of invocations a cooperative matrix spans
// (VkScopeKHR).
type MatrixScope uint32

// MatrixSubgroup is the scope vkattn's kernels use: one subgroup holds a
// matrix.
const MatrixSubgroup MatrixScope = 3

// HasMatrix reports whether d offers a subgroup-scope cooperative matrix
// of shape M x N x K with A and B of type ab and float32 C and Result.
func (d DeviceInfo) HasMatrix(m, n, k int, ab MatrixType) bool {
	for _, c := range d.CooperativeMatrices {
		if c.M == m && c.N == n && c.K == k && c.A == ab && c.B == ab && c.C == MatrixFloat32 &&
			c.Result == MatrixFloat32 && c.Scope == MatrixSubgroup && !c.SaturatingAccumulation {
			return true
		}
	}
	return false
}

// MatrixBound is how far the cooperative-matrix path may move a call's
// outputs from float32 attention's on the same inputs, beyond the float32
// path's own rounding (SEMANTICS.md §9.3).
type MatrixBound struct {
	O   float64 // each output
	LSE float64 // each log-sum-exp
}

// MatrixErrorBound is the cooperative-matrix path's bound for a call with
// keys visible keys (or more: S), head width dk, score scale and Q's, K's
// and V's element types and values as stored (or a superset):
//
//   - P rounded to float16 moves each output by at most
//     (2^-11 + keys * 2^-25) * max|v|;
//   - a bfloat16 block scaled into float16 keeps each value within
//     e = 2^-28 * max|x| + 2^-140 of itself (exact for float16 inputs), so
//     a score moves by at most
//     eps = |scale| * dk * (max|q| e_k + max|k| e_q + e_q e_k),
//     the log-sum-exp by eps and the outputs by another
//     (e^(2 eps) - 1) max|v| + (1 + 2^-11) e_v.
func MatrixErrorBound(keys, dk int, scale float64, types [3]DType, q, k, v []float32) MatrixBound {
	mq, mk, mv := maxAbs(q), maxAbs(k), maxAbs(v)
	eq, ek, ev := scaledError(types[0], mq), scaledError(types[1], mk), scaledError(types[2], mv)
	eps := math.Abs(scale) * float64(dk) * (mq*ek + mk*eq + eq*ek)
	o := (0x1p-11+float64(keys)*0x1p-25)*(mv+ev) + (1+0x1p-11)*ev + math.Expm1(2*eps)*mv
	return MatrixBound{O: o, LSE: eps}
}

// scaledError bounds how far a value of type t moves on its way into a
// float16 matrix, for the largest |x| top of its block: not at all for
// float16; for bfloat16 scaled by a power of two (top into [2^14, 2^15)),
// only values that land below float16's normal range (2^-14) can round
// or flush, by less than 2^-14 before the scale, 2^-28 * top after it
// (2^-140 for blocks below 2^-112, which are scaled by 2^126 at most).
func scaledError(t DType, top float64) float64 {
	if t != BFloat16 {
		return 0
	}
	return 0x1p-28*top + 0x1p-140
}

func maxAbs(xs []float32) float64 {
	top := 0.0
	for _, x := range xs {
		top = math.Max(top, math.Abs(float64(x)))
	}
	return top
}
