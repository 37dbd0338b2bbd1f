package core

import (
	"errors"
	"math"
	"math/rand"
	"strings"
	"testing"
)

// q8_0 blocks by hand: a block whose largest |x| is 127 has scale 1, so
// its quants are its values rounded half away from zero (C's roundf); a
// zero block has scale 0 and zero quants; a tiny block keeps its float16
// subnormal scale.
func TestQuantizeQ8_0ByHand(t *testing.T) {
	block := make([]float32, 64)
	want := make([]int8, 64)
	vals := []float32{127, -2.5, 2.5, 0.5, -0.5, 1.4999999, -126.5, 0.49999997, 3}
	wants := []int8{127, -3, 3, 1, -1, 1, -127, 0, 3}
	copy(block, vals)
	copy(want, wants)
	q, scales, err := QuantizeQ8_0(block)
	if err != nil {
		t.Fatal(err)
	}
	if scales[0] != 0x3c00 { // float16 1.0
		t.Errorf("scale of a block of amax 127: %#04x, want 0x3c00 (1.0)", scales[0])
	}
	if scales[1] != 0 {
		t.Errorf("scale of a zero block: %#04x, want 0", scales[1])
	}
	for i := range want {
		if q[i] != want[i] {
			t.Errorf("quant %d of %v: %d, want %d", i, block[i], q[i], want[i])
		}
	}
	// amax = 127 * 2^-20: d = 2^-20, float16 subnormal 16 * 2^-24.
	tiny := make([]float32, 32)
	tiny[5] = float32(127 * math.Pow(2, -20))
	tiny[6] = float32(-3 * math.Pow(2, -20))
	q, scales, err = QuantizeQ8_0(tiny)
	if err != nil {
		t.Fatal(err)
	}
	if scales[0] != 0x0010 || q[5] != 127 || q[6] != -3 {
		t.Errorf("tiny block: scale %#04x quants %d %d, want 0x0010, 127, -3", scales[0], q[5], q[6])
	}
	if got := DequantizeQ8_0(q, scales); got[6] != tiny[6] {
		t.Errorf("dequantized %v, want %v", got[6], tiny[6])
	}
}

// Random blocks: every quant is within half a step of x/d (d the float32
// scale), the largest reaches +-127, and dequantizing is within half a
// step plus the float16 scale's rounding.
func TestQuantizeQ8_0Bounds(t *testing.T) {
	data := quantBlocks(8, 200)
	q, scales, err := QuantizeQ8_0(data)
	if err != nil {
		t.Fatal(err)
	}
	deq := DequantizeQ8_0(q, scales)
	for b := range scales {
		block := data[b*32 : (b+1)*32]
		amax, top := 0.0, 0
		for _, x := range block {
			amax = math.Max(amax, math.Abs(float64(x)))
		}
		d := amax / 127
		d16 := float64(Widen(Float16, scales[b]))
		for i, x := range block {
			qi := int(q[b*32+i])
			if !(math.Abs(float64(qi)-float64(x)/d) <= 0.5+1e-5) {
				t.Fatalf("block %d element %d: quant %d for x/d = %g", b, i, qi, float64(x)/d)
			}
			top = max(top, abs(qi))
			if e := math.Abs(float64(deq[b*32+i]) - float64(x)); !(e <= d/2*(1+1e-5)+127*math.Abs(d16-d)) {
				t.Fatalf("block %d element %d: dequantized %v for %v", b, i, deq[b*32+i], x)
			}
		}
		if top != 127 {
			t.Fatalf("block %d: largest quant %d, want 127", b, top)
		}
	}
	if _, _, err := QuantizeQ8_0(make([]float32, 48)); !errors.Is(err, ErrShape) {
		t.Errorf("48 values: %v, want ErrShape", err)
	}
	big := make([]float32, 32)
	big[0] = 1e7
	if _, _, err := QuantizeQ8_0(big); !errors.Is(err, ErrOverflow) {
		t.Errorf("amax 1e7: %v, want ErrOverflow", err)
	}
	big[0] = float32(math.NaN())
	if _, _, err := QuantizeQ8_0(big); !errors.Is(err, ErrNonFinite) {
		t.Errorf("NaN: %v, want ErrNonFinite", err)
	}
	if got := Q8_0.StorageBytes(64); got != 68 {
		t.Errorf("64 q8_0 elements take %d bytes, want 68", got)
	}
}

// The q8_0 bound is exact and stated as it is checked.
// A block's scale amax/127 is a finite float16 exactly when amax is below
// 65520*127 = 8321040: the float32 below it (8321039.5) quantizes, with
// the largest float16 scale, and 8321040 is ErrOverflow, the message
// naming that bound; 8320032, which the old message (|x| <= 8.319008e+06)
// refused in words, is accepted as it was.
func TestQuantizeQ8_0Limit(t *testing.T) {
	block := make([]float32, 32)
	for _, amax := range []float32{8320032, 8321039.5, -8321039.5} {
		block[3] = amax
		if _, scales, err := QuantizeQ8_0(block); err != nil || scales[0] != 0x7bff {
			t.Errorf("amax %v: scales %x, %v; want the largest float16 scale 0x7bff", amax, scales, err)
		}
	}
	const want = "below 65520*127 = 8321040"
	for _, amax := range []float32{8321040, -8321040, 8321040.5, 8.3233e6, 3e38} {
		block[3] = amax
		if _, _, err := QuantizeQ8_0(block); !errors.Is(err, ErrOverflow) || !strings.Contains(err.Error(), want) {
			t.Errorf("amax %v: %v; want ErrOverflow saying %q", amax, err, want)
		}
	}
}

func abs(x int) int {
	if x < 0 {
		return -x
	}
	return x
}

// quantBlocks draws blocks of 32 normal values whose magnitudes go from
// 1e-3 to 1e3 block by block, with one outlier (1e4, in the second block):
// the quantizers' tests' inputs.
func quantBlocks(seed int64, blocks int) []float32 {
	r := rand.New(rand.NewSource(seed))
	data := make([]float32, 32*blocks)
	for i := range data {
		data[i] = float32(r.NormFloat64() * math.Pow(10, float64(i/32%7-3)))
	}
	data[40] = 1e4
	return data
}
