package core

import (
	"errors"
	"math"
	"strings"
	"testing"
)

// nibble is quant i of q4_0 quants as ggml lays them out: block i/32's
// byte i%16, its high half for the block's elements 16..31.
func nibble(quants []byte, i int) int {
	b := quants[16*(i/32)+i%16]
	if i%32 >= 16 {
		b >>= 4
	}
	return int(b & 0xf)
}

// A block whose max is -8 has d = 1 and id = 1, so each quant is
// min(15, trunc(x + 8.5)) with x + 8.5 rounded to float32, worked out here
// by hand: halves go up (-3.5 -> 5, reading -3), 7.5 and 8 (not the
// first of the largest magnitude) clamp to 15, and the float32 sum rounds
// 0.49999997 + 8.5 up to 9, -0.50000006 + 8.5 up to 8 and 1.4999999 + 8.5
// up to 10.
func TestQuantizeQ4_0ByHand(t *testing.T) {
	cases := []struct {
		x float32
		q int
	}{
		{-8, 0}, {7, 15}, {7.49, 15}, {7.5, 15}, {8, 15}, {-3.5, 5}, {2.5, 11}, {-2.5, 6},
		{-0.5, 8}, {0.5, 9}, {0, 8}, {float32(math.Copysign(0, -1)), 8}, {-7.5, 1}, {-7.51, 0},
		{0.49999997, 9}, {-0.50000006, 8}, {1.4999999, 10}, {-8 + 1.0/64, 0},
	}
	block := make([]float32, 32)
	for i, c := range cases {
		block[i] = c.x
	}
	q, scales, err := QuantizeQ4_0(block)
	if err != nil {
		t.Fatal(err)
	}
	if scales[0] != 0x3c00 { // float16 1.0
		t.Errorf("scale of a block whose max is -8: %#04x, want 0x3c00 (1.0)", scales[0])
	}
	deq := DequantizeQ4_0(q, scales)
	for i, c := range cases {
		if got := nibble(q, i); got != c.q {
			t.Errorf("quant of %v: %d, want %d", c.x, got, c.q)
		}
		if want := float32(c.q - 8); deq[i] != want {
			t.Errorf("%v dequantized: %v, want %v", c.x, deq[i], want)
		}
	}
}

// The sign of max: the first value of largest |x| sets it, and d = max/-8
// is negative for a positive max. max = 4: d = -0.5, id = -2; 4 -> 0
// (reads 4), -4 -> trunc(16.5) = 16 -> 15 (reads -3.5), 1 -> 6 (reads 1),
// 0.75 -> trunc(7) = 7 (reads 0.5), -0.75 -> 10 (reads -1). With -4 first,
// d = 0.5 and 4 clamps to 15 (reads 3.5).
func TestQuantizeQ4_0Sign(t *testing.T) {
	block := make([]float32, 32)
	copy(block, []float32{1, 0.75, -0.75, 4, 0, -4})
	q, scales, err := QuantizeQ4_0(block)
	if err != nil {
		t.Fatal(err)
	}
	if scales[0] != 0xb800 { // float16 -0.5
		t.Errorf("scale for max 4: %#04x, want 0xb800 (-0.5)", scales[0])
	}
	deq := DequantizeQ4_0(q, scales)
	for i, w := range []struct {
		q int
		v float32
	}{{6, 1}, {7, 0.5}, {10, -1}, {0, 4}, {8, 0}, {15, -3.5}} {
		if nibble(q, i) != w.q || deq[i] != w.v {
			t.Errorf("element %d (%v): quant %d reading %v, want %d reading %v", i, block[i], nibble(q, i), deq[i], w.q, w.v)
		}
	}
	copy(block, []float32{1, 0.75, -0.75, -4, 0, 4})
	q, scales, err = QuantizeQ4_0(block)
	if err != nil {
		t.Fatal(err)
	}
	if deq := DequantizeQ4_0(q, scales); scales[0] != 0x3800 || nibble(q, 3) != 0 || nibble(q, 5) != 15 || deq[5] != 3.5 {
		t.Errorf("-4 before 4: scale %#04x, quants %d %d reading %v; want 0x3800 (0.5), 0, 15 reading 3.5", scales[0], nibble(q, 3), nibble(q, 5), deq[5])
	}
}

// The layout is ggml's: x_j = j - 8 and x_(j+16) = 7 - j have d = 1 and
// quants j and 15 - j, so byte j is j | (15 - j) << 4.
func TestQuantizeQ4_0Layout(t *testing.T) {
	block := make([]float32, 64)
	for j := range 16 {
		block[32+j] = float32(j - 8)
		block[32+j+16] = float32(7 - j)
	}
	q, scales, err := QuantizeQ4_0(block)
	if err != nil {
		t.Fatal(err)
	}
	if len(q) != 32 || len(scales) != 2 {
		t.Fatalf("%d quant bytes and %d scales for 64 values, want 32 and 2", len(q), len(scales))
	}
	for j := range 16 {
		if want := byte(j | (15-j)<<4); q[16+j] != want {
			t.Errorf("byte %d of the second block: %#02x, want %#02x", j, q[16+j], want)
		}
	}
	if got := Q4_0.StorageBytes(64); got != 36 {
		t.Errorf("64 q4_0 elements take %d bytes, want 36", got)
	}
}

// Zeros: max stays 0, d = 0 / -8 = -0 (float16 0x8000), id = 0, every
// quant trunc(8.5) = 8 (bytes 0x88), read back as (8 - 8) * -0 = -0; a
// block of -0s the same.
func TestQuantizeQ4_0Zeros(t *testing.T) {
	block := make([]float32, 64)
	for i := 32; i < 64; i++ {
		block[i] = float32(math.Copysign(0, -1))
	}
	q, scales, err := QuantizeQ4_0(block)
	if err != nil {
		t.Fatal(err)
	}
	for b, s := range scales {
		if s != 0x8000 {
			t.Errorf("block %d of zeros: scale %#04x, want 0x8000 (-0)", b, s)
		}
	}
	for i, x := range q {
		if x != 0x88 {
			t.Errorf("byte %d of zeros: %#02x, want 0x88", i, x)
		}
	}
	for i, v := range DequantizeQ4_0(q, scales) {
		if math.Float32bits(v) != 0x80000000 {
			t.Errorf("element %d of zeros read back as %v (%#x), want -0", i, v, math.Float32bits(v))
		}
	}
}

// A max whose scale rounds in float16. max = -8(1 + 2^-11): d = 1 + 2^-11,
// halfway between float16 1 and 1 + 2^-10, rounds to even, 1.0; the quants
// use the float32 id = 1/d = 1 - 2^-11 + 2^-22 (rounded), so max * id =
// -8(1 + 2^-33) -> -8 and x = 4(1 + 2^-11) -> 4, quants 0 and 12, reading
// -8 and 4. max = -8(1 + 3*2^-11) has d halfway between 1 + 2^-10 and
// 1 + 2^-9, which rounds to even, 1 + 2^-9 (0x3c02).
func TestQuantizeQ4_0ScaleRounds(t *testing.T) {
	block := make([]float32, 32)
	block[0] = -8 * (1 + 0x1p-11)
	block[1] = 4 * (1 + 0x1p-11)
	q, scales, err := QuantizeQ4_0(block)
	if err != nil {
		t.Fatal(err)
	}
	deq := DequantizeQ4_0(q, scales)
	if scales[0] != 0x3c00 || nibble(q, 0) != 0 || nibble(q, 1) != 12 || deq[0] != -8 || deq[1] != 4 {
		t.Errorf("max -8(1+2^-11): scale %#04x, quants %d %d reading %v %v; want 0x3c00, 0 12 reading -8 4",
			scales[0], nibble(q, 0), nibble(q, 1), deq[0], deq[1])
	}
	block[0] = -8 * (1 + 3*0x1p-11)
	if _, scales, err = QuantizeQ4_0(block); err != nil || scales[0] != 0x3c02 {
		t.Errorf("max -8(1+3*2^-11): scale %#04x (%v), want 0x3c02", scales[0], err)
	}
}

// Tiny blocks. max = -8 * 2^-20: d = 2^-20, a float16 subnormal (16 *
// 2^-24, 0x0010), id = 2^20, and 3 * 2^-20 -> 11, read back exactly.
// max = -2^-124: d = 2^-127, a float32 subnormal (float16 0), id = 2^127,
// and 2^-125 -> trunc(12.5) = 12. max = -2^-130: 1/d = 2^133 overflows,
// id = 0, every quant 8. max = 2^-149: d = -2^-152 rounds to -0 (float16
// 0x8000), id = 0, every quant 8.
func TestQuantizeQ4_0Tiny(t *testing.T) {
	block := make([]float32, 32)
	block[5] = -8 * 0x1p-20
	block[6] = 3 * 0x1p-20
	q, scales, err := QuantizeQ4_0(block)
	if err != nil {
		t.Fatal(err)
	}
	deq := DequantizeQ4_0(q, scales)
	if scales[0] != 0x0010 || nibble(q, 5) != 0 || nibble(q, 6) != 11 || deq[6] != block[6] || deq[5] != block[5] {
		t.Errorf("max -8*2^-20: scale %#04x, quants %d %d reading %v %v; want 0x0010, 0 11 reading %v %v",
			scales[0], nibble(q, 5), nibble(q, 6), deq[5], deq[6], block[5], block[6])
	}
	for _, c := range []struct {
		max, x float32
		scale  uint16
		qMax   int
		qx     int
	}{
		{-0x1p-124, 0x1p-125, 0x0000, 0, 12},
		{-0x1p-130, 0x1p-131, 0x0000, 8, 8},
		{0x1p-149, 0, 0x8000, 8, 8},
	} {
		block[5], block[6] = c.max, c.x
		q, scales, err := QuantizeQ4_0(block)
		if err != nil {
			t.Fatal(err)
		}
		if scales[0] != c.scale || nibble(q, 5) != c.qMax || nibble(q, 6) != c.qx || nibble(q, 0) != 8 {
			t.Errorf("max %v, x %v: scale %#04x, quants %d %d (zero: %d); want %#04x, %d %d (zero: 8)",
				c.max, c.x, scales[0], nibble(q, 5), nibble(q, 6), nibble(q, 0), c.scale, c.qMax, c.qx)
		}
		for i, v := range DequantizeQ4_0(q, scales) {
			if v != 0 {
				t.Errorf("max %v: element %d reads %v, want 0 (the scale is 0)", c.max, i, v)
			}
		}
	}
}

// The float16 bound: |max| / 8 must be below 65520. 524159.97, the
// float32 below 524160, has d = -65519.996, the largest float16 with
// max's sign flipped (0xfbff); 524160 and beyond are ErrOverflow, the
// message naming the bound. NaN, Inf and part blocks are refused.
func TestQuantizeQ4_0Refused(t *testing.T) {
	block := make([]float32, 32)
	for _, c := range []struct {
		max   float32
		scale uint16
	}{{524159.97, 0xfbff}, {-524159.97, 0x7bff}} {
		block[3] = c.max
		if _, scales, err := QuantizeQ4_0(block); err != nil || scales[0] != c.scale {
			t.Errorf("max %v: scales %x, %v; want %#04x", c.max, scales, err, c.scale)
		}
	}
	const want = "below 65520*8 = 524160"
	for _, x := range []float32{524160, -524160, 524160.06, 3e38} {
		block[3] = x
		if _, _, err := QuantizeQ4_0(block); !errors.Is(err, ErrOverflow) || !strings.Contains(err.Error(), want) {
			t.Errorf("max %v: %v; want ErrOverflow saying %q", x, err, want)
		}
	}
	for _, x := range []float32{float32(math.NaN()), float32(math.Inf(-1))} {
		block[3] = x
		if _, _, err := QuantizeQ4_0(block); !errors.Is(err, ErrNonFinite) {
			t.Errorf("%v: %v, want ErrNonFinite", x, err)
		}
	}
	if _, _, err := QuantizeQ4_0(make([]float32, 48)); !errors.Is(err, ErrShape) {
		t.Errorf("48 values: %v, want ErrShape", err)
	}
	if _, err := Round(Q4_0, make([]float32, 40)); !errors.Is(err, ErrShape) {
		t.Errorf("Round of 40 values to q4_0: %v, want ErrShape", err)
	}
	if got := DequantizeQ4_0(make([]byte, 24), make([]uint16, 2)); len(got) != 32 {
		t.Errorf("1.5 blocks of quants dequantize to %d values, want the one whole block's 32", len(got))
	}
}

// Random blocks: every quant is trunc(x/d + 8.5) within the rounding of
// id (so x reads back within half a step of the float32 d, and ties go
// up), clamped to 15; the first value of largest |x| gets 0; Round is the
// dequantized values.
func TestQuantizeQ4_0Bounds(t *testing.T) {
	data := quantBlocks(4, 300)
	q, scales, err := QuantizeQ4_0(data)
	if err != nil {
		t.Fatal(err)
	}
	rounded, err := Round(Q4_0, data)
	if err != nil {
		t.Fatal(err)
	}
	deq := DequantizeQ4_0(q, scales)
	for b := range scales {
		block := data[b*32 : (b+1)*32]
		top := 0
		for i, x := range block {
			if math.Abs(float64(x)) > math.Abs(float64(block[top])) {
				top = i
			}
		}
		d := float64(block[top]) / -8
		d16 := float64(Widen(Float16, scales[b]))
		if !(math.Abs(d16-d) <= max(math.Abs(d)*0x1p-11, 0x1p-25)) {
			t.Fatalf("block %d: scale %v for d = %v", b, d16, d)
		}
		for i, x := range block {
			qi := nibble(q, b*32+i)
			exact := float64(x)/d + 8.5
			if want := min(15, int(math.Floor(exact))); qi != want && math.Abs(exact-math.Round(exact)) > 1e-5 {
				t.Fatalf("block %d element %d: quant %d for x/d + 8.5 = %v", b, i, qi, exact)
			}
			if i == top && qi != 0 {
				t.Fatalf("block %d: the largest |x| has quant %d, want 0", b, qi)
			}
			if v := float64(qi-8) * d16; float64(deq[b*32+i]) != v || rounded[b*32+i] != deq[b*32+i] {
				t.Fatalf("block %d element %d: dequantized %v, Round %v, want %v", b, i, deq[b*32+i], rounded[b*32+i], v)
			}
		}
	}
}

// The element type's names and sizes.
func TestQ4_0Type(t *testing.T) {
	if dt, err := ParseDType("q4_0"); err != nil || dt != Q4_0 || dt.String() != "q4_0" {
		t.Errorf("ParseDType(q4_0) = %v, %v", dt, err)
	}
	if !Q4_0.Quantized() || !Q8_0.Quantized() || Float16.Quantized() || Q4_0.Valid() {
		t.Error("Quantized: want q8_0 and q4_0 only; Valid: not q4_0")
	}
	if got := Q4_0.StorageBytes(32 * 1000); got != 18*1000 {
		t.Errorf("32000 q4_0 elements take %d bytes, want 18000", got)
	}
}
