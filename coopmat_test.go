package vkattn_test

import (
	"fmt"
	"math/rand"
	"os"
	"strings"
	"testing"

	"github.com/vkattn/vkattn"
)

// coopmatDevice is dev when it has float16 cooperative matrices. Without
// them the cooperative-matrix tests have nothing to run on: they say so,
// and under VKATTN_REQUIRE_COOPMAT=1 (make test's leg on Mesa 26's
// lavapipe, tools/lavapipe26.sh) they fail instead.
func coopmatDevice(t *testing.T) *vkattn.Device {
	t.Helper()
	if dev.Info().CooperativeMatrices != nil {
		return dev
	}
	if os.Getenv("VKATTN_REQUIRE_COOPMAT") == "1" {
		t.Fatalf("%s has no cooperative matrices (VKATTN_REQUIRE_COOPMAT=1)", dev)
	}
	t.Skipf("%s has no cooperative matrices: run on Mesa 26's lavapipe (tools/lavapipe26.sh)", dev)
	return nil
}

// The cooperative-matrix kernel against the float64 reference within its
// stated bound (SEMANTICS.md §18): grouped-query heads, both causal
// alignments with L < S and L > S, every mask kind, key and query lengths
// (a fully masked row), d_k != d_v, every score variant together, LSE,
// strided views; float16 Q, K and V (bfloat16 in TestCoopmatBFloat16). Small shapes: each case is a kernel
// lavapipe compiles.
func TestCoopmatAttention(t *testing.T) {
	d := coopmatDevice(t)
	r := rand.New(rand.NewSource(230))
	f16 := [3]vkattn.DType{vkattn.Float16, vkattn.Float16, vkattn.Float16}
	cases := []struct {
		name                    string
		b, h, hkv, l, s, dk, dv int
		setup                   func(p *problem)
	}{
		{"gqa", 2, 4, 2, 37, 50, 16, 16, func(p *problem) {}}, // d_max 16 as the odd widths: lavapipe compiles d_max 64 for ~30 s
		{"masks, lengths, bottom-right", 2, 2, 1, 20, 70, 32, 16, func(p *problem) {
			p.opts.Causal = vkattn.CausalBottomRight
			p.opts.KeyLengths, p.opts.QueryLengths = []int{70, 0}, []int{20, 13}
			randomMasks(r, p)
			p.blhd = true
		}},
		{"odd widths, S < Bc, one key", 3, 2, 1, 33, 7, 5, 12, func(p *problem) {
			p.opts.KeyLengths = []int{7, 1, 4}
			p.opts.Scale = vkattn.CustomScale(0.7)
		}},
		{"variants, top-left, L > S", 1, 4, 4, 48, 30, 16, 16, func(p *problem) {
			p.opts.Causal = vkattn.CausalTopLeft
			p.opts.Window = &vkattn.Window{Left: 9, Right: 2}
			p.opts.Softcap = 0.7
			p.opts.ALiBi = vkattn.ALiBiSlopes(4)
			p.opts.Sinks = randomValues(r, 4)
		}},
	}
	for _, c := range cases {
		for _, planned := range []struct {
			name string
			d    *vkattn.Device
		}{{"auto", d}, {"nvidia", nvidiaDev}} {
			t.Run(fmt.Sprintf("%s/%s", planned.name, c.name), func(t *testing.T) {
				p := newProblem(r, c.b, c.h, c.hkv, c.l, c.s, c.dk, c.dv)
				c.setup(p)
				p.types, p.wantLSE = f16, true
				plan, err := planned.d.PlanAs(p.qs[:], p.ks[:], p.vs[:], p.types, p.opts)
				if err != nil {
					t.Fatal(err)
				}
				if plan.Kernel.Matrix == 0 {
					t.Fatalf("planned %v, want the cooperative-matrix kernel", plan)
				}
				checkAgainstReference(t, planned.d, p)
			})
		}
	}
}

// Bfloat16 inputs reach the float16 matrices scaled by a power of two per
// block (SEMANTICS.md §18): queries of ~1e6 (beyond float16's 65504), keys
// of ~1e-6 and ~1e-5 by tile (float16 subnormals unscaled) and values of
// ~1e6 and ~1e5 by tile, so every block needs its own scale, and a float16
// K beside them (scaled Q and V, exact K). Each must stay within the
// stated bound, which for these values is 2^-11 of the largest |v| and
// a few ulps of the scores.
func TestCoopmatBFloat16(t *testing.T) {
	d := coopmatDevice(t)
	r := rand.New(rand.NewSource(233))
	for _, c := range []struct {
		name  string
		types [3]vkattn.DType
	}{
		{"bf16", [3]vkattn.DType{vkattn.BFloat16, vkattn.BFloat16, vkattn.BFloat16}},
		{"bf16 Q and V, f16 K", [3]vkattn.DType{vkattn.BFloat16, vkattn.Float16, vkattn.BFloat16}},
	} {
		t.Run(c.name, func(t *testing.T) {
			const s, dk = 40, 16
			p := newProblem(r, 1, 2, 1, 20, s, dk, dk)
			p.types, p.wantLSE = c.types, true
			p.opts.Causal = vkattn.CausalBottomRight
			scaleRows := func(x []float32, first, scale float32) {
				for i := range x {
					if i/dk%s < 16 {
						x[i] *= first
					} else {
						x[i] *= scale
					}
				}
			}
			for i := range p.q {
				p.q[i] *= 1e6
			}
			if c.types[1] == vkattn.BFloat16 {
				scaleRows(p.k, 1e-6, 1e-5)
			} else {
				scaleRows(p.k, 1e-3, 1e-2) // within float16's normal range
				for i := range p.q {
					p.q[i] *= 1e-3
				}
			}
			scaleRows(p.v, 1e6, 1e5)
			plan, err := d.PlanAs(p.qs[:], p.ks[:], p.vs[:], p.types, p.opts)
			if err != nil {
				t.Fatal(err)
			}
			if plan.Kernel.Matrix == 0 || !strings.Contains(plan.String(), "scaled by a power of two") {
				t.Fatalf("planned %v, want the cooperative-matrix kernel with scaled bfloat16", plan)
			}
			checkAgainstReference(t, d, p)
		})
	}
}

// A call larger than one binding runs as chunks on the matrices too, with
// sinks, ALiBi and a window per chunk.
func TestCoopmatChunked(t *testing.T) {
	coopmatDevice(t)
	d := smallBindings(t, vkattn.Config{})
	r := rand.New(rand.NewSource(232))
	p := newProblem(r, 2, 4, 2, 40, 900, 32, 32)
	p.types, p.wantLSE = [3]vkattn.DType{vkattn.Float16, vkattn.Float16, vkattn.Float16}, true
	p.opts.KeyLengths = []int{893, 900}
	p.opts.Causal = vkattn.CausalBottomRight
	p.opts.Sinks, p.opts.ALiBi = randomValues(r, 4), vkattn.ALiBiSlopes(4)
	p.opts.Window = &vkattn.Window{Left: 300, Right: 0}
	plan, err := d.PlanAs(p.qs[:], p.ks[:], p.vs[:], p.types, p.opts)
	if err != nil {
		t.Fatal(err)
	}
	if plan.Kernel.Matrix == 0 || plan.Kernel.Chunks < 2 {
		t.Fatalf("planned %v, want the cooperative-matrix kernel in chunks", plan)
	}
	checkAgainstReference(t, d, p)
}

// Float32Products keeps float16 inputs off the matrices: another kernel,
// at the float32 path's tolerance.
func TestCoopmatFloat32Products(t *testing.T) {
	d := coopmatDevice(t)
	r := rand.New(rand.NewSource(231))
	p := newProblem(r, 1, 2, 2, 33, 40, 16, 16)
	p.types = [3]vkattn.DType{vkattn.Float16, vkattn.Float16, vkattn.Float16}
	p.opts.Float32Products = true
	plan, err := d.PlanAs(p.qs[:], p.ks[:], p.vs[:], p.types, p.opts)
	if err != nil {
		t.Fatal(err)
	}
	if plan.Kernel.Matrix != 0 {
		t.Fatalf("Float32Products planned %v", plan)
	}
	got := runGPU(t, d, p)
	compare(t, "O", got.o, runReference(t, p).O)
}

// MHA layers with float16 weights and inputs run their input projections
// on the matrices (exact products, float32 sums: the float32 tolerance);
// out_proj reads the float32 attention output on linear.comp.
// Float32Products keeps them all on linear.comp. A packed self-attention
// layer, and cross-attention whose widths (24 and 12; 12 and 7, rows of
// halves that start mid-word) are not whole tiles.
func TestCoopmatLinear(t *testing.T) {
	d := coopmatDevice(t)
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
				planned = nvidiaDev
			}
			in := halfLayerCase{w: randomMHA(r, c.dm, c.kdim, c.kdim, true), xs: []int{c.b, c.tq, c.dm}, dt: vkattn.Float16,
				opts: vkattn.MHAOptions{Heads: c.h}}
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
	coopmatDevice(t)
	d := smallBindings(t, vkattn.Config{})
	const T, S, dm, kdim, h = 20, 300, 16, 256, 2
	r := rand.New(rand.NewSource(235))
	in := halfLayerCase{w: randomMHA(r, dm, kdim, kdim, true), xs: []int{1, T, dm}, kvs: []int{1, S, kdim}, dt: vkattn.Float16,
		opts: vkattn.MHAOptions{Heads: h}}
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
