package vkattn_test

import (
	"fmt"
	"math/rand"
	"strings"
	"testing"

	"github.com/vkattn/vkattn"
	"github.com/vkattn/vkattn/internal/devtest"
)

// The cooperative-matrix kernel against the float64 reference within its
// stated bound (SEMANTICS.md §9.3): grouped-query heads, both causal
// alignments with L < S and L > S, every mask kind, key and query lengths
// (a fully masked row), d_k != d_v, every score variant together, LSE,
// strided views; float16 Q, K and V (bfloat16 in TestCoopmatBFloat16). Small shapes: each case is a kernel
// lavapipe compiles.
func TestCoopmatAttention(t *testing.T) {
	d := devtest.CoopmatDevice(t)
	r := rand.New(rand.NewSource(230))
	f16 := [3]vkattn.DType{vkattn.Float16, vkattn.Float16, vkattn.Float16}
	cases := []struct {
		name                    string
		b, h, hkv, l, s, dk, dv int
		setup                   func(p *devtest.Problem)
	}{
		{"gqa", 2, 4, 2, 37, 50, 16, 16, func(p *devtest.Problem) {}}, // d_max 16 as the odd widths: lavapipe compiles d_max 64 for ~30 s
		{"masks, lengths, bottom-right", 2, 2, 1, 20, 70, 32, 16, func(p *devtest.Problem) {
			p.Opts.Causal = vkattn.CausalBottomRight
			p.Opts.KeyLengths, p.Opts.QueryLengths = []int{70, 0}, []int{20, 13}
			randomMasks(r, p)
			p.BLHD = true
		}},
		{"odd widths, S < Bc, one key", 3, 2, 1, 33, 7, 5, 12, func(p *devtest.Problem) {
			p.Opts.KeyLengths = []int{7, 1, 4}
			p.Opts.Scale = vkattn.CustomScale(0.7)
		}},
		{"variants, top-left, L > S", 1, 4, 4, 48, 30, 16, 16, func(p *devtest.Problem) {
			p.Opts.Causal = vkattn.CausalTopLeft
			p.Opts.Window = &vkattn.Window{Left: 9, Right: 2}
			p.Opts.Softcap = 0.7
			p.Opts.ALiBi = vkattn.ALiBiSlopes(4)
			p.Opts.Sinks = devtest.RandomValues(r, 4)
		}},
	}
	for _, c := range cases {
		for _, planned := range []struct {
			name string
			d    *vkattn.Device
		}{{"auto", d}, {"nvidia", devtest.NVIDIADev}} {
			t.Run(fmt.Sprintf("%s/%s", planned.name, c.name), func(t *testing.T) {
				p := devtest.NewProblem(r, c.b, c.h, c.hkv, c.l, c.s, c.dk, c.dv)
				c.setup(p)
				p.Types, p.WantLSE = f16, true
				plan, err := planned.d.PlanAs(p.QS[:], p.KS[:], p.VS[:], p.Types, p.Opts)
				if err != nil {
					t.Fatal(err)
				}
				if plan.Kernel.Matrix == 0 {
					t.Fatalf("planned %v, want the cooperative-matrix kernel", plan)
				}
				devtest.CheckAgainstReference(t, planned.d, p)
			})
		}
	}
}

// Bfloat16 inputs reach the float16 matrices scaled by a power of two per
// block (SEMANTICS.md §9.3): queries of ~1e6 (beyond float16's 65504), keys
// of ~1e-6 and ~1e-5 by tile (float16 subnormals unscaled) and values of
// ~1e6 and ~1e5 by tile, so every block needs its own scale, and a float16
// K beside them (scaled Q and V, exact K). Each must stay within the
// stated bound, which for these values is 2^-11 of the largest |v| and
// a few ulps of the scores.
func TestCoopmatBFloat16(t *testing.T) {
	d := devtest.CoopmatDevice(t)
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
			p := devtest.NewProblem(r, 1, 2, 1, 20, s, dk, dk)
			p.Types, p.WantLSE = c.types, true
			p.Opts.Causal = vkattn.CausalBottomRight
			scaleRows := func(x []float32, first, scale float32) {
				for i := range x {
					if i/dk%s < 16 {
						x[i] *= first
					} else {
						x[i] *= scale
					}
				}
			}
			for i := range p.Q {
				p.Q[i] *= 1e6
			}
			if c.types[1] == vkattn.BFloat16 {
				scaleRows(p.K, 1e-6, 1e-5)
			} else {
				scaleRows(p.K, 1e-3, 1e-2) // within float16's normal range
				for i := range p.Q {
					p.Q[i] *= 1e-3
				}
			}
			scaleRows(p.V, 1e6, 1e5)
			plan, err := d.PlanAs(p.QS[:], p.KS[:], p.VS[:], p.Types, p.Opts)
			if err != nil {
				t.Fatal(err)
			}
			if plan.Kernel.Matrix == 0 || !strings.Contains(plan.String(), "scaled by a power of two") {
				t.Fatalf("planned %v, want the cooperative-matrix kernel with scaled bfloat16", plan)
			}
			devtest.CheckAgainstReference(t, d, p)
		})
	}
}

// A call larger than one binding runs as chunks on the matrices too, with
// sinks, ALiBi and a window per chunk.
func TestCoopmatChunked(t *testing.T) {
	devtest.CoopmatDevice(t)
	d := devtest.SmallBindings(t, vkattn.Config{})
	r := rand.New(rand.NewSource(232))
	p := devtest.NewProblem(r, 2, 4, 2, 40, 900, 32, 32)
	p.Types, p.WantLSE = [3]vkattn.DType{vkattn.Float16, vkattn.Float16, vkattn.Float16}, true
	p.Opts.KeyLengths = []int{893, 900}
	p.Opts.Causal = vkattn.CausalBottomRight
	p.Opts.Sinks, p.Opts.ALiBi = devtest.RandomValues(r, 4), vkattn.ALiBiSlopes(4)
	p.Opts.Window = &vkattn.Window{Left: 300, Right: 0}
	plan, err := d.PlanAs(p.QS[:], p.KS[:], p.VS[:], p.Types, p.Opts)
	if err != nil {
		t.Fatal(err)
	}
	if plan.Kernel.Matrix == 0 || plan.Kernel.Chunks < 2 {
		t.Fatalf("planned %v, want the cooperative-matrix kernel in chunks", plan)
	}
	devtest.CheckAgainstReference(t, d, p)
}

// Float32Products keeps float16 inputs off the matrices: another kernel,
// at the float32 path's tolerance.
func TestCoopmatFloat32Products(t *testing.T) {
	d := devtest.CoopmatDevice(t)
	r := rand.New(rand.NewSource(231))
	p := devtest.NewProblem(r, 1, 2, 2, 33, 40, 16, 16)
	p.Types = [3]vkattn.DType{vkattn.Float16, vkattn.Float16, vkattn.Float16}
	p.Opts.Float32Products = true
	plan, err := d.PlanAs(p.QS[:], p.KS[:], p.VS[:], p.Types, p.Opts)
	if err != nil {
		t.Fatal(err)
	}
	if plan.Kernel.Matrix != 0 {
		t.Fatalf("Float32Products planned %v", plan)
	}
	got := devtest.RunGPU(t, d, p)
	devtest.Compare(t, "O", got.O, devtest.RunReference(t, p).O)
}
