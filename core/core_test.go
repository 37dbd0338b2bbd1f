package core_test

import (
	"encoding/json"
	"errors"
	"math"
	"testing"

	"github.com/vkattn/vkattn/core"
)

// These tests need no device: the conversions and checks are plain Go.

// The conversions, bit for bit, on values whose rounding is worked out by
// hand from the formats (binary16: 10 fraction bits, exponent bias 15,
// subnormals down to 2^-24; bfloat16: 7 fraction bits, float32's exponent).
func TestHalfConversionsBitExact(t *testing.T) {
	for _, c := range []struct {
		x    float32
		bits uint16
	}{
		{1, 0x3c00}, {-2, 0xc000}, {0.5, 0x3800}, {65504, 0x7bff},
		{65519, 0x7bff},                               // below the midpoint 65520: down to the largest half
		{float32(math.Ldexp(1, -24)), 0x0001},         // the smallest subnormal
		{float32(math.Ldexp(1, -25)), 0x0000},         // halfway to 0: ties to even (0)
		{float32(math.Ldexp(3, -25)), 0x0002},         // 1.5 * 2^-24: ties to even (2 * 2^-24)
		{float32(math.Ldexp(1023, -24)), 0x03ff},      // the largest subnormal
		{float32(math.Ldexp(1, -14)), 0x0400},         // the smallest normal
		{1 + float32(math.Ldexp(1, -11)), 0x3c00},     // halfway between 1 and its successor: even
		{1 + float32(math.Ldexp(3, -11)), 0x3c02},     // halfway between 1+2^-10 and 1+2^-9: even
		{float32(math.Copysign(0, -1)), 0x8000},       // -0 keeps its sign
		{0.1, 0x2e66},                                 // 0.0999755859375
		{-float32(math.Ldexp(1, -24)) * 0.75, 0x8001}, // rounds up to the smallest subnormal
	} {
		got, err := core.ToFloat16(c.x)
		if err != nil || got != c.bits {
			t.Errorf("ToFloat16(%g) = %#04x, %v; want %#04x", c.x, got, err, c.bits)
		}
	}
	for _, c := range []struct {
		x    float32
		bits uint16
	}{
		{1, 0x3f80}, {-2, 0xc000}, {0.1, 0x3dcd}, // 0.1 = 0x3dcccccd: round up
		{1 + float32(math.Ldexp(1, -8)), 0x3f80}, // halfway between 1 and 1+2^-7: even
		{1 + float32(math.Ldexp(3, -8)), 0x3f82}, // halfway between 1+2^-7 and 1+2^-6: even
		{3.3895314e38, 0x7f7f},                   // the largest bfloat16
		{float32(math.Ldexp(1, -133)), 0x0001},   // a float32 subnormal that is a bfloat16 one
		{float32(math.Copysign(0, -1)), 0x8000},
		{65504, 0x4780}, // 65504 = 0x477fe000: the low half 0xe000 is past the midpoint, up
		{257, 0x4380},   // 257 = 0x43808000: exactly halfway, to the even 256
		{259, 0x4382},   // 259 = 0x43818000: halfway, to the even 260
	} {
		got, err := core.ToBFloat16(c.x)
		if err != nil || got != c.bits {
			t.Errorf("ToBFloat16(%g) = %#04x, %v; want %#04x", c.x, got, err, c.bits)
		}
	}
	// Out of range is an error, never Inf; NaN and Inf are refused.
	for _, c := range []struct {
		convert func(float32) (uint16, error)
		x       float32
		want    error
	}{
		{core.ToFloat16, 65520, core.ErrOverflow}, // the midpoint rounds to even: 2^16, Inf
		{core.ToFloat16, -1e5, core.ErrOverflow},
		{core.ToBFloat16, math.MaxFloat32, core.ErrOverflow},
		{core.ToFloat16, float32(math.NaN()), core.ErrNonFinite},
		{core.ToBFloat16, float32(math.Inf(-1)), core.ErrNonFinite},
	} {
		if _, err := c.convert(c.x); !errors.Is(err, c.want) {
			t.Errorf("converting %g: %v, want %v", c.x, err, c.want)
		}
	}
}

// TestValidateChecksOptionsWithoutTensors: Options.Validate needs only the
// extents masks and lengths refer to, and refuses extents no problem has.
func TestValidateChecksOptionsWithoutTensors(t *testing.T) {
	d := core.Dims{B: 2, H: 4, L: 3, S: 5} // no widths or K/V heads
	ok := core.Options{
		Causal:     core.CausalBottomRight,
		Mask:       &core.Mask{Shape: core.MaskShape{2, 1, 3, 5}, Values: make([]float32, 30)},
		BoolMasks:  []core.BoolMask{{Shape: core.MaskShape{1, 4, 1, 5}, Values: make([]bool, 20), Meaning: core.TrueBlocks}},
		KeyLengths: []int{5, 0},
	}
	if err := ok.Validate(d); err != nil {
		t.Errorf("valid options: %v", err)
	}
	for _, c := range []struct {
		name string
		d    core.Dims
		want error
	}{
		{"a mask over 3 heads of 4", core.Dims{B: 2, H: 3, L: 3, S: 5}, core.ErrMask},
		{"masks over 5 keys where S = 4", core.Dims{B: 2, H: 4, L: 3, S: 4}, core.ErrMask},
		{"no batch", core.Dims{H: 4, L: 3, S: 5}, core.ErrEmpty},
		{"2^64 scores", core.Dims{B: 1 << 16, H: 1 << 16, L: 1 << 16, S: 1 << 16}, core.ErrTooLarge},
	} {
		if err := ok.Validate(c.d); !errors.Is(err, c.want) {
			t.Errorf("%s: %v, want %v", c.name, err, c.want)
		}
	}
	if err := (core.Options{KeyLengths: []int{6, 1}}).Validate(d); !errors.Is(err, core.ErrLengths) {
		t.Errorf("key length 6 of S=5: %v, want ErrLengths", err)
	}
}

func TestFirstNonFiniteFindsNaNAndBothInfinities(t *testing.T) {
	nan, inf := float32(math.NaN()), float32(math.Inf(1))
	for _, c := range []struct {
		x    []float32
		want int
	}{
		{nil, -1},
		{[]float32{0, -1, math.MaxFloat32}, -1},
		{[]float32{0, nan, inf}, 1},
		{[]float32{-inf}, 0},
		{[]float32{1, 2, inf}, 2},
	} {
		if got := core.FirstNonFinite(c.x); got != c.want {
			t.Errorf("FirstNonFinite(%v) = %d, want %d", c.x, got, c.want)
		}
	}
}

// The cooperative-matrix bound (SEMANTICS.md §9.3) for max|q| = 2, max|k| =
// 1, max|v| = 4, three keys, d_k = 4 and scale 1/2, against the numbers
// worked by hand from its formula: float16 inputs only round P; bfloat16
// ones add e = 2^-28 max|x| + 2^-140 per value, eps = 2^-25 + 2^-54
// (and terms of 2^-140) for the scores.
func TestMatrixErrorBound(t *testing.T) {
	q, k, v := []float32{2, -1}, []float32{1}, []float32{-4, 0.5}
	half := core.MatrixErrorBound(3, 4, 0.5, [3]core.DType{core.Float16, core.Float16, core.Float16}, q, k, v)
	if want := (0x1p-11 + 3*0x1p-25) * 4; half.O != want || half.LSE != 0 {
		t.Errorf("float16: %+v, want O %v, LSE 0", half, want)
	}
	brain := core.MatrixErrorBound(3, 4, 0.5, [3]core.DType{core.BFloat16, core.BFloat16, core.BFloat16}, q, k, v)
	const wantO, wantLSE = 0.0019537359621697448, 2.9802322443206464e-08
	if !(math.Abs(brain.O-wantO) <= 1e-15) || !(math.Abs(brain.LSE-wantLSE) <= 1e-20) {
		t.Errorf("bfloat16: %+v, want O %v, LSE %v", brain, wantO, wantLSE)
	}
}

// Element types print by name in JSON (plans, bench rows) and read back.
func TestDTypeJSONRoundTrip(t *testing.T) {
	in := [5]core.DType{core.Float32, core.Float16, core.BFloat16, core.Q8_0, core.Q4_0}
	b, err := json.Marshal(in)
	if err != nil || string(b) != `["f32","f16","bf16","q8_0","q4_0"]` {
		t.Fatalf("json.Marshal: %s, %v", b, err)
	}
	var out [5]core.DType
	if err := json.Unmarshal(b, &out); err != nil || out != in {
		t.Fatalf("json.Unmarshal: %v, %v", out, err)
	}
}
