package engine

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/vkattn/vkattn/core"
)

// Device-free tests of the lowering helpers that turn Options into what
// the kernels read.

// broadcastStrides gives row-major strides with 0 on the axes of extent 1.
func TestBroadcastStrides(t *testing.T) {
	for _, c := range []struct {
		shape core.MaskShape
		want  [4]int
	}{
		{core.MaskShape{1, 1, 1, 1}, [4]int{0, 0, 0, 0}},
		{core.MaskShape{1, 1, 7, 9}, [4]int{0, 0, 9, 1}},
		{core.MaskShape{3, 1, 1, 9}, [4]int{9, 0, 0, 1}},
		{core.MaskShape{2, 3, 4, 5}, [4]int{60, 20, 5, 1}},
		{core.MaskShape{2, 3, 1, 1}, [4]int{3, 1, 0, 0}},
	} {
		if got := broadcastStrides(c.shape); got != c.want {
			t.Errorf("broadcastStrides(%v) = %v, want %v", c.shape, got, c.want)
		}
	}
}

// foldBoolMasks blocks (-Inf) exactly where any mask blocks, each mask
// broadcast over the union of their shapes, with either meaning, and
// clears what the buffer held before.
func TestFoldBoolMasks(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	random := func(shape core.MaskShape, meaning core.MaskMeaning) core.BoolMask {
		m := core.BoolMask{Shape: shape, Meaning: meaning, Values: make([]bool, shape[0]*shape[1]*shape[2]*shape[3])}
		for i := range m.Values {
			m.Values[i] = r.IntN(4) == 0
		}
		return m
	}
	ms := []core.BoolMask{
		random(core.MaskShape{2, 1, 1, 5}, core.TrueBlocks), // key padding
		random(core.MaskShape{1, 1, 3, 5}, core.TrueAllows), // an attention mask
		random(core.MaskShape{1, 4, 1, 1}, core.TrueBlocks), // whole heads
	}
	shape := boolMasksShape(ms)
	if shape != (core.MaskShape{2, 4, 3, 5}) {
		t.Fatalf("boolMasksShape = %v, want the union [2 4 3 5]", shape)
	}
	h := make([]float32, 2*4*3*5)
	for i := range h {
		h[i] = 7 // what a reused buffer held
	}
	foldBoolMasks(ms, shape, h)
	// Each mask's element at a coordinate: the coordinate on its full
	// axes, 0 on its broadcast ones.
	at := func(m core.BoolMask, c [4]int) bool {
		i := 0
		for a := range 4 {
			x := c[a]
			if m.Shape[a] == 1 {
				x = 0
			}
			i = i*m.Shape[a] + x
		}
		return m.Values[i]
	}
	i := 0
	for b := range 2 {
		for hd := range 4 {
			for l := range 3 {
				for j := range 5 {
					blocked := false
					for _, m := range ms {
						v := at(m, [4]int{b, hd, l, j})
						blocked = blocked || (m.Meaning == core.TrueBlocks && v) || (m.Meaning == core.TrueAllows && !v)
					}
					want := float32(0)
					if blocked {
						want = float32(math.Inf(-1))
					}
					if h[i] != want {
						t.Fatalf("[%d %d %d %d] = %g, want %g", b, hd, l, j, h[i], want)
					}
					i++
				}
			}
		}
	}
}

// scalars: the scale (the default, a custom one, 1 for additive scores),
// the window's sides capped at L + S (so the kernels' 32-bit positions
// cannot overflow) and unbounded ones kept, the soft cap and the
// alignment passed on.
func TestScalars(t *testing.T) {
	dims := core.Dims{B: 1, H: 2, HKV: 2, L: 5, S: 11, DK: 16, DV: 8}
	sc := scalars(dims, &core.Options{}, false)
	if sc.Scale != 0.25 || sc.Window != [2]int{} || sc.Softcap != 0 || sc.AlignToKeyLengths {
		t.Errorf("scalars of no options: %+v", sc)
	}
	opts := core.Options{Scale: core.CustomScale(0.5), Softcap: 30, AlignToKeyLengths: true, Causal: core.CausalBottomRight,
		Window: &core.Window{Left: math.MaxInt, Right: -1}}
	sc = scalars(dims, &opts, false)
	if sc.Scale != 0.5 || sc.Window != [2]int{16, -1} || sc.Softcap != 30 || !sc.AlignToKeyLengths || sc.Causal != core.CausalBottomRight {
		t.Errorf("scalars of %+v: %+v", opts, sc)
	}
	opts.Window = &core.Window{Left: 3, Right: 15}
	if sc = scalars(dims, &opts, true); sc.Scale != 1 || sc.Window != [2]int{3, 15} {
		t.Errorf("additive scalars of a window (3, 15): %+v, want scale 1 and the sides as given", sc)
	}
	opts.Window = &core.Window{Left: 16, Right: 17}
	if sc = scalars(dims, &opts, false); sc.Window != [2]int{16, 16} {
		t.Errorf("a window (16, 17) over L + S = 16: %v, want [16 16]", sc.Window)
	}
}
