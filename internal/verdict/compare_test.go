package verdict

import (
	"math"
	"testing"
)

func TestCompareBoundIsAbsoluteNearZeroRelativeAbove(t *testing.T) {
	inf := math.Inf(1)
	nan := float32(math.NaN())
	for _, c := range []struct {
		name      string
		got       []float32
		want      []float64
		ok        bool
		worst     int
		maxAbsInf bool
	}{
		{"equal values and equal infinities are exact", []float32{1, float32(-inf), float32(inf)}, []float64{1, -inf, inf}, true, -1, false},
		{"absolute near zero: 1.5e-5 off 0", []float32{1.5e-5}, []float64{0}, true, 0, false},
		{"absolute near zero: 2.5e-5 off 0", []float32{2.5e-5}, []float64{0}, false, 0, false},
		{"relative above 1: 0.015 off 1000", []float32{1000.015}, []float64{1000}, true, 0, false},
		{"relative above 1: 0.03 off 1000", []float32{1000.03}, []float64{1000}, false, 0, false},
		{"NaN is never close", []float32{1, nan}, []float64{1, 1}, false, 1, true},
		{"a NaN reference is never matched", []float32{1}, []float64{math.NaN()}, false, 0, true},
		{"a finite value where the reference is -Inf", []float32{-1e30}, []float64{-inf}, false, 0, true},
		{"-Inf where the reference is finite", []float32{float32(-inf)}, []float64{-3}, false, 0, true},
		{"unequal lengths", []float32{1, 2}, []float64{1}, false, -1, true},
	} {
		cmp := Compare(c.got, c.want, SweepTolerance)
		if cmp.OK() != c.ok || cmp.Worst != c.worst || math.IsInf(cmp.MaxAbs, 1) != c.maxAbsInf {
			t.Errorf("%s: %+v; want ok %v, worst %d, infinite MaxAbs %v", c.name, cmp, c.ok, c.worst, c.maxAbsInf)
		}
	}
}

func TestCompareWorstIsFarthestOutsideItsBound(t *testing.T) {
	// Errors 0.01 (bound 0.02 at 1000) and 1.5e-5 (bound 2e-5 at 0): the
	// second is the closer to failing though the smaller.
	c := Compare([]float32{1000.01, 1.5e-5}, []float64{1000, 0}, SweepTolerance)
	if c.Worst != 1 || !Near(c.Ratio, 0.75, 0.01) || !c.OK() {
		t.Errorf("%+v: want worst 1 at ratio 0.75, ok", c)
	}
	if !Near(c.MaxAbs, 0.01, 1e-4) {
		t.Errorf("MaxAbs %g, want 0.01", c.MaxAbs)
	}
	// MaxRel is over |ref| >= RelFloor only: 1e-5 of 1000, not 1.5e-5 of 0.
	if !Near(c.MaxRel, 1e-5, 1e-7) {
		t.Errorf("MaxRel %g, want 1e-5", c.MaxRel)
	}
}

func TestCompareToleranceZeroIsExact(t *testing.T) {
	if c := Compare([]float32{1, 2}, []float64{1, 2}, 0); !c.OK() {
		t.Errorf("equal: %+v", c)
	}
	if c := Compare([]float32{1, 2}, []float64{1, 2.0000001}, 0); c.OK() || c.Worst != 1 {
		t.Errorf("1e-7 off: %+v, want a failure at 1", c)
	}
}

func TestMaxAbsDiffIsCompareMaxAbs(t *testing.T) {
	for _, c := range []struct {
		got  []float32
		want []float64
		d    float64
	}{
		{[]float32{1, 2.5}, []float64{1, 2}, 0.5},
		{[]float32{float32(math.Inf(-1))}, []float64{math.Inf(-1)}, 0},
		{[]float32{1}, []float64{1, 2}, math.Inf(1)},
		{[]float32{float32(math.NaN())}, []float64{0}, math.Inf(1)},
	} {
		if d := MaxAbsDiff(c.got, c.want); d != c.d {
			t.Errorf("MaxAbsDiff(%v, %v) = %v, want %v", c.got, c.want, d, c.d)
		}
	}
}

func TestNearFailsOnNaN(t *testing.T) {
	nan, inf := math.NaN(), math.Inf(1)
	for _, c := range []struct {
		got, want, tol float64
		near           bool
	}{
		{1, 1.5, 0.5, true}, {1, 1.5, 0.49, false}, {inf, inf, 0, true}, {-inf, -inf, 0, true},
		{inf, -inf, 1e300, false}, {1, inf, 1e300, false}, {nan, 1, inf, false}, {1, nan, inf, false}, {nan, nan, inf, false},
	} {
		if got := Near(c.got, c.want, c.tol); got != c.near {
			t.Errorf("Near(%v, %v, %v) = %v, want %v", c.got, c.want, c.tol, got, c.near)
		}
	}
}
