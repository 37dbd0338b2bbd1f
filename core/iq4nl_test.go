package core

import (
	"bytes"
	"encoding/binary"
	"errors"
	"math"
	"math/rand"
	"os"
	"path/filepath"
	"testing"
)

// ggmlIQ4NL reads testdata/iq4_nl: inputs and the blocks ggml's
// quantize_row_iq4_nl_ref makes of them, as tools/iq4nl_ref (a C
// reproduction written apart from this package) wrote them: raw is the
// blocks as a tensor stores them (every block's 16 bytes of indices, then
// the float16 scales).
func ggmlIQ4NL(t *testing.T) (x []float32, raw []byte) {
	t.Helper()
	dir := filepath.Join("..", "testdata", "iq4_nl")
	in, err := os.ReadFile(filepath.Join(dir, "input.f32"))
	if err != nil {
		t.Fatal(err)
	}
	blocks, err := os.ReadFile(filepath.Join(dir, "blocks.bin"))
	if err != nil {
		t.Fatal(err)
	}
	x = make([]float32, len(in)/4)
	for i := range x {
		x[i] = math.Float32frombits(binary.LittleEndian.Uint32(in[4*i:]))
	}
	n := len(blocks) / 18
	if n*IQ4NLBlock != len(x) {
		t.Fatalf("testdata/iq4_nl: %d values and %d blocks", len(x), n)
	}
	var quants, scales []byte
	for b := range n {
		quants = append(quants, blocks[18*b+2:18*b+18]...)
		scales = append(scales, blocks[18*b:18*b+2]...)
	}
	return x, append(quants, scales...)
}

// QuantizeIQ4NL writes ggml's iq4_nl blocks byte for byte, on inputs
// chosen for ties between levels (both signs of max), zero, tiny (below
// and just above ggml's 1e-15) and large blocks, the first of equal
// magnitudes, and random normals at scales 1e-4 to 1e4.
func TestQuantizeIQ4NLMatchesGGML(t *testing.T) {
	x, raw := ggmlIQ4NL(t)
	quants, scales, err := QuantizeIQ4NL(x)
	if err != nil {
		t.Fatal(err)
	}
	got := append(append([]byte(nil), quants...), make([]byte, 2*len(scales))...)
	for i, s := range scales {
		binary.LittleEndian.PutUint16(got[len(quants)+2*i:], s)
	}
	if bytes.Equal(got, raw) {
		return
	}
	nq := len(x) / 2
	for b := range len(x) / IQ4NLBlock {
		gq, wq := got[16*b:16*b+16], raw[16*b:16*b+16]
		gs, ws := got[nq+2*b:nq+2*b+2], raw[nq+2*b:nq+2*b+2]
		if !bytes.Equal(gq, wq) || !bytes.Equal(gs, ws) {
			t.Errorf("block %d (%v...): scale % x indices % x, ggml's % x and % x", b, x[32*b:32*b+4], gs, gq, ws, wq)
		}
	}
}

// DequantizeIQ4NL is level times scale: hand-made blocks read back.
func TestDequantizeIQ4NL(t *testing.T) {
	quants := make([]byte, 16)
	quants[0] = 0xf0                                 // element 0: level 0 (-127); element 16: level 15 (113)
	quants[3] = 0x78                                 // element 3: level 8 (1); element 19: level 7 (-10)
	got := DequantizeIQ4NL(quants, []uint16{0x3800}) // 0.5
	want := map[int]float32{0: -63.5, 16: 56.5, 3: 0.5, 19: -5, 1: -63.5}
	for i, w := range want {
		if got[i] != w {
			t.Errorf("element %d = %v, want %v", i, got[i], w)
		}
	}
}

// The iq4_nl scale is at most 1.123 amax/127, so blocks below
// SafeMagnitude always quantize: the scale is Σ w q x / Σ w q² with
// w = x², that is d0 Σ a²q²(a/q) / Σ a²q² for a = x/d0, d0 = max/-127: a
// mean of a/q weighted by a²q², whose largest value comes from the
// block's largest element (a = -127 = q, weight 127^4) and 31 copies of
// the a whose ratio to its level is worst for its weight. That worst is
// computed here over a fine grid of a, and the quantizer is run at the
// bound on blocks built from it.
func TestIQ4NLScaleBound(t *testing.T) {
	w0 := math.Pow(127, 4)
	worst, worstA := 0.0, 0.0
	for k := 0; k <= 254000; k++ {
		a := -127 + 254*float64(k)/254000
		q := float64(IQ4NLLevels[iq4NLNearest(float32(a))])
		w := a * a * q * q
		if r := (w0 + 31*w*a/q) / (w0 + 31*w); r > worst {
			worst, worstA = r, a
		}
	}
	if worst > 1.123 || 112*worst >= 127 {
		t.Fatalf("worst scale ratio %v (at a = %v): the safe bound 65504*112 does not hold", worst, worstA)
	}
	amax := float32(IQ4_NL.SafeMagnitude()) * 0.99999
	block := make([]float32, IQ4NLBlock)
	block[0] = -amax
	for i := 1; i < len(block); i++ {
		block[i] = float32(worstA/127) * amax * -1
	}
	if _, _, err := QuantizeIQ4NL(block); err != nil {
		t.Errorf("a block of the worst ratio below SafeMagnitude: %v", err)
	}
	r := rand.New(rand.NewSource(51))
	for range 2000 {
		for i := range block {
			block[i] = max(-amax, min(amax, float32(r.NormFloat64())*amax/4))
		}
		block[r.Intn(len(block))] = amax
		if _, _, err := QuantizeIQ4NL(block); err != nil {
			t.Fatalf("a random block below SafeMagnitude: %v", err)
		}
	}
	for _, top := range []float32{float32(IQ4_NL.SafeMagnitude()) * 1.2, 3e38} { // the latter's sums overflow float32
		big := append([]float32{top}, make([]float32, 31)...)
		big[1] = top / 2
		if _, _, err := QuantizeIQ4NL(big); !errors.Is(err, ErrOverflow) {
			t.Errorf("a block of %g whose scale passes float16: %v, want ErrOverflow", top, err)
		}
	}
	if _, _, err := QuantizeIQ4NL(make([]float32, 48)); !errors.Is(err, ErrShape) {
		t.Errorf("48 values: %v, want ErrShape", err)
	}
	nan := make([]float32, 32)
	nan[5] = float32(math.NaN())
	if _, _, err := QuantizeIQ4NL(nan); !errors.Is(err, ErrNonFinite) {
		t.Errorf("NaN: %v, want ErrNonFinite", err)
	}
}
