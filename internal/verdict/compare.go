package verdict

import "math"

// Tolerances of the comparisons with the float64 reference
// (SEMANTICS.md §17). Each is a tol of Compare's one rule,
//
//	|got - ref| <= tol * max(1, |ref|)
//
// absolute near zero and relative for large values, so one bound serves
// outputs of any size.
const (
	// SweepTolerance bounds every GPU output in the test suite's
	// randomised sweeps, chunked calls and layers.
	SweepTolerance = 2e-5
	// VerifyTolerance bounds the GPU against the reference on the golden
	// cases (vkattn verify): they are tiny, so float32 accumulation error
	// stays near 1e-7.
	VerifyTolerance = 1e-5
	// CheckTolerance is --check's bound in vkattn run, mha and additive,
	// on problems of any size a user brings.
	CheckTolerance = 1e-4
)

// RelFloor is the smallest |ref| over which Comparison.MaxRel is taken:
// near zero a relative error measures float32 rounding of tiny values, not
// the kernel (a 1e-7 error on a 1e-5 output would read as 1%).
const RelFloor = 1e-3

// Comparison is the result of Compare.
type Comparison struct {
	Tolerance float64
	// Extra is an absolute allowance beyond the tolerance (a path's stated
	// error bound: SEMANTICS.md §9.3); 0 for most comparisons.
	Extra     float64
	Got, Want int // the lengths compared; unequal lengths fail
	// MaxAbs is the largest |got - ref|: 0 for equal values (equal
	// infinities included), +Inf where either is NaN or only one is
	// infinite.
	MaxAbs float64
	// MaxRel is the largest |got - ref| / |ref| over |ref| >= RelFloor.
	MaxRel float64
	// Worst is the index of the value with the largest Ratio, -1 when every
	// value is exact or the lengths differ.
	Worst int
	// Ratio is |got - ref| / (tol * max(1, |ref|) + Extra) at Worst: above
	// 1 fails.
	// It is +Inf for a value off an infinite ref, which no tolerance
	// covers (a fully masked row's -Inf log-sum-exp must be -Inf).
	Ratio float64
}

// OK reports whether the lengths agree and every value is within bounds.
func (c Comparison) OK() bool { return c.Got == c.Want && !(c.Ratio > 1) }

// Compare compares got with the reference want under tol (one of the
// tolerances above, or 0 for exact equality).
func Compare(got []float32, want []float64, tol float64) Comparison {
	return CompareWithin(got, want, tol, 0)
}

// CompareWithin is Compare with an absolute allowance extra on top of tol.
func CompareWithin(got []float32, want []float64, tol, extra float64) Comparison {
	c := Comparison{Tolerance: tol, Extra: extra, Got: len(got), Want: len(want), Worst: -1}
	if len(got) != len(want) {
		c.MaxAbs, c.MaxRel, c.Ratio = math.Inf(1), math.Inf(1), math.Inf(1)
		return c
	}
	for i, g := range got {
		w := want[i]
		d := diff(float64(g), w)
		if d == 0 {
			continue
		}
		c.MaxAbs = math.Max(c.MaxAbs, d)
		if math.Abs(w) >= RelFloor {
			c.MaxRel = math.Max(c.MaxRel, relative(d, w))
		}
		r := math.Inf(1)
		if !math.IsInf(d, 1) {
			r = d / (tol*math.Max(1, math.Abs(w)) + extra)
		}
		if r > c.Ratio || c.Worst < 0 {
			c.Worst, c.Ratio = i, r
		}
	}
	return c
}

// MaxAbsDiff is the largest |got[i] - want[i]|, Compare's MaxAbs: +Inf when
// the lengths differ or a value is NaN or only one is infinite; equal
// infinities count as 0.
func MaxAbsDiff(got []float32, want []float64) float64 {
	return Compare(got, want, 0).MaxAbs
}

// Near reports whether got is within tol of want: |got - want| <= tol, or
// both the same infinity. A NaN on either side is never near: a test that
// compares with Near fails on NaN.
func Near(got, want, tol float64) bool {
	d := diff(got, want) // +Inf for NaN or unequal infinities
	return d <= tol && !math.IsInf(d, 1)
}

// diff is |a - b|, 0 for equal values (equal infinities included) and
// +Inf where either is NaN.
func diff(a, b float64) float64 {
	switch {
	case a == b:
		return 0
	case math.IsNaN(a) || math.IsNaN(b):
		return math.Inf(1)
	}
	return math.Abs(a - b)
}

// relative is d / |w|, +Inf for an infinite d.
func relative(d, w float64) float64 {
	if math.IsInf(d, 1) {
		return d
	}
	return d / math.Abs(w)
}
