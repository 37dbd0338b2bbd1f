package devtest

import (
	"encoding/binary"
	"fmt"
	"math"
	"math/rand"
	"os"
	"path/filepath"
	"runtime"

	"github.com/x448/float16"
)

// GGMLQ4_0 is ggml's quantize_row_q4_0_ref written out on its own, not
// through package core, for tests of q4_0 against it: per block of 32
// the value of largest |x| (the first such) is max, d = max / -8 and
// id = 1/d (0 when d is 0) in float32, quant j is min(15, (int8)(x*id +
// 8.5f)) with the product and the sum each rounded to float32, and d is
// kept as float16. raw is the blocks as a q4_0 tensor holds them on the
// device: every block's 16 qs bytes (element j in the low nibble of byte
// j, element j+16 in the high one), then the scales, little-endian;
// values are the dequantized (q - 8) * d. len(x) must be whole blocks,
// and no block's |max| below 2^-125, where 1/d overflows (ggml's C then
// converts an infinity to int8, which C leaves undefined).
func GGMLQ4_0(x []float32) (raw []byte, values []float32) {
	nb := len(x) / 32
	raw = make([]byte, 16*nb, 18*nb)
	values = make([]float32, len(x))
	for b := 0; b < nb; b++ {
		blk := x[32*b : 32*b+32]
		var amax, top float32
		for _, v := range blk {
			if a := float32(math.Abs(float64(v))); a > amax {
				amax, top = a, v
			}
		}
		d := top / -8
		var id float32
		if d != 0 {
			id = 1 / d
		}
		h := float16.Fromfloat32(d)
		raw = binary.LittleEndian.AppendUint16(raw, uint16(h))
		scale := h.Float32()
		for j := 0; j < 16; j++ {
			// The conversions round the product before the sum: no fused
			// multiply-add, as ggml's reference build computes it.
			q0 := min(15, int8(float32(float32(blk[j]*id)+8.5)))
			q1 := min(15, int8(float32(float32(blk[j+16]*id)+8.5)))
			raw[16*b+j] = byte(q0) | byte(q1)<<4
			values[32*b+j] = float32(q0-8) * scale
			values[32*b+j+16] = float32(q1-8) * scale
		}
	}
	return raw, values
}

// Q4Data is n values (whole blocks, at least 8) for q4_0 tests: first
// the blocks SEMANTICS.md §9.2 works out by hand (halves and the float32
// sum rounding up, max's sign and its first occurrence, zeros and -0s, a
// scale rounding in float16, a float16-subnormal scale, the largest
// scale), then random blocks of several magnitudes.
func Q4Data(r *rand.Rand, n int) []float32 {
	negZero := float32(math.Copysign(0, -1))
	x := make([]float32, n)
	for b, blk := range [][]float32{
		{-8, 7, 7.49, 7.5, 8, -3.5, 2.5, -2.5, -0.5, 0.5, 0, negZero, -7.5, -7.51, 0.49999997, -0.50000006, 1.4999999},
		{1, 0.75, -0.75, 4, 0, -4},
		{1, 0.75, -0.75, -4, 0, 4},
		{},
		{negZero, negZero, negZero},
		{-8 * (1 + 0x1p-11), 4 * (1 + 0x1p-11)},
		{0, 0, 0, 0, 0, -8 * 0x1p-20, 3 * 0x1p-20},
		{3, 524159.97, -2},
	} {
		copy(x[32*b:], blk)
		if b == 4 {
			for i := 3; i < 32; i++ {
				x[32*b+i] = negZero
			}
		}
	}
	for i := 8 * 32; i < n; i++ {
		x[i] = float32(r.NormFloat64() * math.Ldexp(1, i/32%9-4))
	}
	return x
}

// GGMLIQ4NL is testdata/iq4_nl, which tools/iq4nl_ref (a C reproduction of
// ggml's quantize_row_iq4_nl_ref, written apart from package core) wrote:
// x the inputs (whole blocks of 32), raw ggml's blocks of them as an
// iq4_nl tensor holds them on the device (every block's 16 bytes of
// indices, then the scales, little-endian), values their dequantized
// values, a level of ggml's kvalues_iq4nl times the float16 scale.
func GGMLIQ4NL() (x []float32, raw []byte, values []float32, err error) {
	_, self, _, _ := runtime.Caller(0)
	dir := filepath.Join(filepath.Dir(self), "..", "..", "testdata", "iq4_nl")
	in, err := os.ReadFile(filepath.Join(dir, "input.f32"))
	if err != nil {
		return nil, nil, nil, err
	}
	blocks, err := os.ReadFile(filepath.Join(dir, "blocks.bin"))
	if err != nil {
		return nil, nil, nil, err
	}
	nb := len(blocks) / 18
	if len(in) != 4*32*nb {
		return nil, nil, nil, fmt.Errorf("testdata/iq4_nl: %d bytes of input for %d blocks", len(in), nb)
	}
	levels := [16]float32{-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113}
	x = make([]float32, 32*nb)
	values = make([]float32, 32*nb)
	raw = make([]byte, 16*nb, 18*nb)
	for i := range x {
		x[i] = math.Float32frombits(binary.LittleEndian.Uint32(in[4*i:]))
	}
	for b := range nb {
		blk := blocks[18*b : 18*b+18]
		raw = append(raw, blk[0], blk[1])
		copy(raw[16*b:], blk[2:])
		d := float16.Frombits(binary.LittleEndian.Uint16(blk)).Float32()
		for j, q := range blk[2:] {
			values[32*b+j] = d * levels[q&0xf]
			values[32*b+j+16] = d * levels[q>>4]
		}
	}
	return x, raw, values, nil
}
