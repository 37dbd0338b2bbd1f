package core

import (
	"math"
	"math/bits"
)

// MaxALiBiHeads bounds ALiBiSlopes (2^24 heads, far beyond any model), so
// that an absurd count is not a request for terabytes.
const MaxALiBiHeads = 1 << 24

// ALiBiSlopes are the ALiBi slopes of h heads (Press et al., 2022): for h a
// power of two, head i (from 0) gets 2^(-8(i+1)/h); otherwise the slopes of
// the largest power of two n below h, then every other slope of 2n, as the
// paper's reference code does. h beyond MaxALiBiHeads (or below 1) gives
// nil.
func ALiBiSlopes(h int) []float32 {
	if h <= 0 || h > MaxALiBiHeads {
		return nil
	}
	pow2 := func(n int) []float64 {
		s := make([]float64, n)
		for i := range s {
			s[i] = math.Exp2(-8 * float64(i+1) / float64(n))
		}
		return s
	}
	n := 1 << (bits.Len(uint(h)) - 1) // the largest power of two <= h
	slopes := pow2(n)
	for i, extra := 0, pow2(2*n); len(slopes) < h; i += 2 {
		slopes = append(slopes, extra[i])
	}
	out := make([]float32, h)
	for i, s := range slopes {
		out[i] = float32(s)
	}
	return out
}

// minSoftcap is float32's smallest normal number: a smaller cap would be
// flushed to zero on devices that flush subnormals.
const minSoftcap = 0x1p-126

// validateVariants checks Window, Softcap, Sinks and ALiBi for h query
// heads.
func (o *Options) validateVariants(h int) error {
	if w := o.Window; w != nil && (w.Left < -1 || w.Right < -1) {
		return Errorf(ErrOption, "window (%d, %d): each side is -1 (unbounded) or a key count >= 0", w.Left, w.Right)
	}
	if c := o.Softcap; !(c == 0 || c >= minSoftcap && c <= math.MaxFloat32) {
		return Errorf(ErrOption, "softcap %v: want 0 (none) or a float32 in [%g, %g]", c, minSoftcap, math.MaxFloat32)
	}
	for _, p := range []struct {
		what string
		vals []float32
	}{{"sinks", o.Sinks}, {"ALiBi slopes", o.ALiBi}} {
		if p.vals == nil {
			continue
		}
		if len(p.vals) != h {
			return Errorf(ErrShape, "%s: %d values, want one per query head (H = %d)", p.what, len(p.vals), h)
		}
		if i := FirstNonFinite(p.vals); i >= 0 {
			return Errorf(ErrNonFinite, "%s value %d is %v", p.what, i, p.vals[i])
		}
	}
	return nil
}

// variantsUsed reports whether any of the score variants is on.
func (o *Options) variantsUsed() bool {
	return o.Window != nil || o.Softcap > 0 || o.Sinks != nil || o.ALiBi != nil
}
