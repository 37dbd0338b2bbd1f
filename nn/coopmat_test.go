package nn_test

import (
	"math/rand"
	"testing"

	"github.com/vkattn/vkattn"
	"github.com/vkattn/vkattn/internal/devtest"
	"github.com/vkattn/vkattn/nn"
)

// MHA layers with float16 weights and inputs run their input projections
// on the matrices (exact products, float32 sums: the float32 tolerance);
// out_proj reads the float32 attention output on linear.comp.
// Float32Products keeps them all on linear.comp. A packed self-attention
// layer, and cross-attention whose widths (24 and 12; 12 and 7, rows of
// halves that start mid-word) are not whole tiles.
func TestCoopmatLinear(t *testing.T) {
	d := devtest.CoopmatDevice(t)
	r := rand.New(rand.NewSource(233))
	for _, c := range []struct {
		name             string
		dm, kdim, h      int
		b, tq, s         int
		cross, f32, nvid bool
	}{
		{"self, packed", 32, 32, 2, 2, 21, 21, false, false, false},
		{"cross, widths not whole tiles, NVIDIA's plan", 24, 12, 3, 2, 5, 19, true, false, true},
		{"cross, odd widths (kdim 7, d 12)", 12, 7, 3, 1, 6, 11, true, false, false},
		{"self, Float32Products", 32, 32, 2, 1, 9, 9, false, true, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			planned := d
			if c.nvid {
				planned = devtest.NVIDIADev
			}
			in := halfLayerCase{w: devtest.RandomMHA(r, c.dm, c.kdim, c.kdim, true), xs: []int{c.b, c.tq, c.dm}, dt: vkattn.Float16,
				opts: nn.MHAOptions{Heads: c.h}}
			if c.cross {
				in.kvs = []int{c.b, c.s, c.kdim}
			}
			in.opts.Attention.Float32Products = c.f32
			storeWeightsAs(in.w, vkattn.Float16)
			plan := in.check(t, planned, r)
			for _, l := range plan.Projections {
				if on := l.Kernel.Matrix > 0; on == c.f32 {
					t.Errorf("%s planned %v (Float32Products %v)", l.Name, l.Kernel, c.f32)
				}
			}
			if plan.OutProj.Kernel.Matrix > 0 {
				t.Errorf("out_proj of float32 input planned %v", plan.OutProj.Kernel)
			}
		})
	}
}

// A layer input larger than one binding runs its projection on the
// matrices in blocks of rows, each bound through its own windows: cross-
// attention whose KV (300 x 256 halves, 150 KiB) exceeds a 128 KiB binding
// while the projections' outputs (300 x 16 floats) fit.
func TestCoopmatLinearBlocks(t *testing.T) {
	devtest.CoopmatDevice(t)
	d := devtest.SmallBindings(t, vkattn.Config{})
	const T, S, dm, kdim, h = 20, 300, 16, 256, 2
	r := rand.New(rand.NewSource(235))
	in := halfLayerCase{w: devtest.RandomMHA(r, dm, kdim, kdim, true), xs: []int{1, T, dm}, kvs: []int{1, S, kdim}, dt: vkattn.Float16,
		opts: nn.MHAOptions{Heads: h}}
	storeWeightsAs(in.w, vkattn.Float16)
	for _, l := range in.check(t, d, r).Projections {
		if l.Kernel.Matrix == 0 {
			t.Errorf("%s planned %v, want the matrices", l.Name, l.Kernel)
		}
		if blocks := l.Kernel.Blocks; (l.Name != "q_proj") != (blocks == 2 && l.Kernel.BlockRows == 160) || (l.Name == "q_proj" && blocks != 1) {
			t.Errorf("%s planned %v: want K's and V's projections in 2 blocks of 160 rows, Q's in one", l.Name, l.Kernel)
		}
	}
}
