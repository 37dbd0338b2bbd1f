package vkattn_test

import (
	"errors"
	"fmt"
	"math/rand"
	"strings"
	"testing"

	"github.com/vkattn/vkattn"
	"github.com/vkattn/vkattn/internal/devtest"
	"github.com/vkattn/vkattn/kv"
	"github.com/vkattn/vkattn/reference"
)

// RoPE on the device equals the float64 reference's on every plan: both
// styles, partial dims, theta 10,000 and 500,000, linear and Llama 3
// scaling, strided and half inputs, explicit ragged positions, queries
// past their keys (negative positions), with masks, lengths and the LSE.
func TestRoPEEveryPlan(t *testing.T) {
	llama3 := vkattn.RoPEScaling{Kind: vkattn.RoPELlama3, Factor: 8, LowFreqFactor: 1, HighFreqFactor: 4, OriginalContext: 64}
	cases := []struct {
		name string
		make func(r *rand.Rand) *devtest.Problem
	}{
		{"half style, 12 of 16 dims, GQA, strided, bottom-right causal", func(r *rand.Rand) *devtest.Problem {
			p := devtest.NewProblem(r, 2, 4, 2, 5, 9, 16, 8)
			p.BLHD = true
			p.Opts = vkattn.Options{Causal: vkattn.CausalBottomRight, RoPE: &vkattn.RoPE{Theta: 10000, Dims: 12}}
			return p
		}},
		{"interleaved, llama3, f16 and bf16, explicit positions, lengths, LSE", func(r *rand.Rand) *devtest.Problem {
			p := devtest.NewProblem(r, 2, 2, 1, 3, 7, 8, 8)
			p.Types = [3]vkattn.DType{vkattn.Float16, vkattn.BFloat16, vkattn.Float32}
			p.WantLSE = true
			p.Opts = vkattn.Options{
				KeyLengths: []int{7, 4}, AlignToKeyLengths: true, Causal: vkattn.CausalBottomRight,
				RoPE: &vkattn.RoPE{Theta: 500000, Style: vkattn.RoPEInterleaved, Scaling: llama3,
					QueryPositions: []int{4093, 4094, 4095, 10, 11, 12},
					KeyPositions:   []int{4089, 4090, 4091, 4092, 4093, 4094, 4095, 9, 10, 11, 12, 0, 0, 0}},
			}
			return p
		}},
		{"linear scaling, more queries than keys, top-left causal, boolean mask", func(r *rand.Rand) *devtest.Problem {
			p := devtest.NewProblem(r, 1, 2, 2, 6, 4, 6, 4)
			allow := make([]bool, 6*4)
			for i := range allow {
				allow[i] = i%5 != 1
			}
			p.Opts = vkattn.Options{Causal: vkattn.CausalTopLeft,
				BoolMasks: []vkattn.BoolMask{{Shape: vkattn.MaskShape{1, 1, 6, 4}, Values: allow, Meaning: vkattn.TrueAllows}},
				RoPE:      &vkattn.RoPE{Theta: 10000, Dims: 4, Scaling: vkattn.RoPEScaling{Kind: vkattn.RoPELinear, Factor: 2}}}
			return p
		}},
	}
	for name, d := range devtest.EveryPlan() {
		for i, c := range cases {
			t.Run(name+"/"+c.name, func(t *testing.T) {
				p := c.make(rand.New(rand.NewSource(int64(90 + i))))
				devtest.CheckAgainstReference(t, d, p)
				plan, err := d.PlanAs(p.QS[:], p.KS[:], p.VS[:], p.Types, p.Opts)
				if err != nil {
					t.Fatal(err)
				}
				if !strings.Contains(plan.String(), "after rotating Q and K (RoPE") {
					t.Errorf("plan %q does not name the rotation", plan)
				}
			})
		}
	}
}

// Varlen calls rotate each sequence at its own positions: queries ending
// at the sequence's last key, as a call of its own would.
func TestRoPEVarlen(t *testing.T) {
	r := rand.New(rand.NewSource(93))
	const H, D = 2, 8
	cuQ, cuK := []int{0, 3, 4}, []int{0, 5, 9}
	q, k, v := devtest.RandomValues(r, H*4*D), devtest.RandomValues(r, H*9*D), devtest.RandomValues(r, H*9*D)
	opts := vkattn.Options{Causal: vkattn.CausalBottomRight, RoPE: &vkattn.RoPE{Theta: 10000}}
	out, err := devtest.Dev.AttentionVarlen(devtest.Upload(t, devtest.Dev, []int{1, H, 4, D}, q), devtest.Upload(t, devtest.Dev, []int{1, H, 9, D}, k), devtest.Upload(t, devtest.Dev, []int{1, H, 9, D}, v), cuQ, cuK, opts)
	if err != nil {
		t.Fatal(err)
	}
	defer out.Close()
	got := devtest.Download(t, out.O)
	for i := 0; i+1 < len(cuQ); i++ {
		l, s := cuQ[i+1]-cuQ[i], cuK[i+1]-cuK[i]
		rows := func(x []float32, first, n, total int) []float32 {
			var out []float32
			for h := 0; h < H; h++ {
				out = append(out, x[(h*total+first)*D:(h*total+first+n)*D]...)
			}
			return out
		}
		want, err := reference.Attention(rows(q, cuQ[i], l, 4), [4]int{1, H, l, D}, rows(k, cuK[i], s, 9), [4]int{1, H, s, D}, rows(v, cuK[i], s, 9), [4]int{1, H, s, D}, opts)
		if err != nil {
			t.Fatal(err)
		}
		devtest.Compare(t, fmt.Sprintf("sequence %d", i), rows(got, cuQ[i], l, 4), want.O)
	}
}

func TestRoPERefusals(t *testing.T) {
	q := devtest.Zeros(t, devtest.Dev, 1, 1, 2, 6)
	rope := &vkattn.RoPE{Theta: 10000}
	cache, err := kv.New(devtest.Dev, kv.Config{B: 1, HKV: 1, Capacity: 4, DK: 6, DV: 6, RoPE: rope})
	if err != nil {
		t.Fatal(err)
	}
	defer cache.Close()
	if err := cache.Append(make([]float32, 12), make([]float32, 12), 2); err != nil {
		t.Fatal(err)
	}
	devtest.CheckRefusals(t, []devtest.Refusal{
		{Name: "odd rotated dims", Err: vkattn.ErrOption, Run: func() error {
			_, err := devtest.Dev.Attention(q, q, q, vkattn.Options{RoPE: &vkattn.RoPE{Theta: 10000, Dims: 3}})
			return err
		}},
		{Name: "explicit positions of the wrong count", Err: vkattn.ErrShape, Run: func() error {
			_, err := devtest.Dev.Attention(q, q, q, vkattn.Options{RoPE: &vkattn.RoPE{Theta: 10000, KeyPositions: []int{0}}})
			return err
		}},
		{Name: "Options.RoPE over a cache", Err: vkattn.ErrOption, Run: func() error {
			_, err := cache.Attention(q, vkattn.Options{RoPE: rope})
			return err
		}},
		{Name: "a cache RoPE with positions", Err: vkattn.ErrOption, Run: func() error {
			c, err := kv.New(devtest.Dev, kv.Config{B: 1, HKV: 1, Capacity: 4, DK: 6, DV: 6, RoPE: &vkattn.RoPE{Theta: 1e4, KeyPositions: []int{1}}})
			c.Close()
			return err
		}},
		{Name: "a cache RoPE of too many dims", Err: vkattn.ErrOption, Run: func() error {
			c, err := kv.New(devtest.Dev, kv.Config{B: 1, HKV: 1, Capacity: 4, DK: 6, DV: 6, RoPE: &vkattn.RoPE{Theta: 1e4, Dims: 8}})
			c.Close()
			return err
		}},
	})
}

// A RoPE whose table (SEMANTICS.md §5) would not be finite is ErrOption
// naming what makes it so, for a call (Options.RoPE) and for a KV cache,
// rather than NaN outputs (a call) or a NaN table and keys (a cache):
// frequencies theta^(-2i/n) beyond float64 (theta 5e-324 or 1e-320 with
// 64 rotated dims), a scaling factor that makes them so (linear or Llama
// 3's of 5e-324), or angles p invFreq_i beyond float64 at the call's
// positions (linear:1e-308: frequency 1e308, position 7). With linear:1e-300
// every angle of the call is finite (7e300) and it matches the reference.
func TestRoPETableOutOfRange(t *testing.T) {
	const l, s, d = 4, 8, 64
	for _, c := range []struct {
		theta float64
		scale string
		names string
	}{
		{5e-324, "none", "theta"},
		{1e-320, "none", "theta"},
		{10000, "linear:1e-308", "position 7"},
		{10000, "linear:5e-324", "scaling linear:5e-324"},
		{10000, "llama3:5e-324,1,4,8192", "scaling llama3:5e-324"},
	} {
		t.Run(fmt.Sprintf("%g %s", c.theta, c.scale), func(t *testing.T) {
			scaling, err := vkattn.ParseRoPEScaling(c.scale)
			if err != nil {
				t.Fatal(err)
			}
			rope := &vkattn.RoPE{Theta: c.theta, Scaling: scaling}
			q, k := devtest.Zeros(t, devtest.Dev, 1, 1, l, d), devtest.Zeros(t, devtest.Dev, 1, 1, s, d)
			out, err := devtest.Dev.Attention(q, k, k, vkattn.Options{RoPE: rope})
			if err == nil {
				o := devtest.Download(t, out.O)
				out.Close()
				t.Fatalf("Options.RoPE: no error, O[0] = %v; want ErrOption", o[0])
			}
			if !errors.Is(err, vkattn.ErrOption) || !strings.Contains(err.Error(), c.names) {
				t.Errorf("Options.RoPE: %v, want ErrOption naming %q", err, c.names)
			}
			cache, err := kv.New(devtest.Dev, kv.Config{B: 1, HKV: 1, Capacity: s, DK: d, DV: d, RoPE: rope})
			if err == nil {
				cache.Close()
				t.Fatal("kv.Config.RoPE: no error, want ErrOption")
			}
			if !errors.Is(err, vkattn.ErrOption) {
				t.Errorf("kv.Config.RoPE: %v, want ErrOption", err)
			}
		})
	}
	p := devtest.NewProblem(rand.New(rand.NewSource(97)), 1, 1, 1, l, s, d, d)
	p.Opts.RoPE = &vkattn.RoPE{Theta: 10000, Scaling: vkattn.RoPEScaling{Kind: vkattn.RoPELinear, Factor: 1e-300}}
	devtest.CheckAgainstReference(t, devtest.Dev, p)
}
