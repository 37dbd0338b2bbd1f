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

// MatrixErrorBound is how far an output of the cooperative-matrix path may
// lie from float32 attention on the same (float16) inputs, beyond the
// float32 path's own rounding (SEMANTICS.md §18): P rounded to float16
// moves each output by at most (2^-11 + keys * 2^-25) * max|v|, for keys
// visible keys and v their values (or a superset: all of V).
func MatrixErrorBound(keys int, v []float32) float64 {
	top := 0.0
	for _, x := range v {
		top = math.Max(top, math.Abs(float64(x)))
	}
	return (0x1p-11 + float64(keys)*0x1p-25) * top
}
