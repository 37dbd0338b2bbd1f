package vkattn_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand"
	"strings"
	"testing"

	"github.com/vkattn/vkattn"
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
		make func(r *rand.Rand) *problem
	}{
		{"half style, 12 of 16 dims, GQA, strided, bottom-right causal", func(r *rand.Rand) *problem {
			p := newProblem(r, 2, 4, 2, 5, 9, 16, 8)
			p.blhd = true
			p.opts = vkattn.Options{Causal: vkattn.CausalBottomRight, RoPE: &vkattn.RoPE{Theta: 10000, Dims: 12}}
			return p
		}},
		{"interleaved, llama3, f16 and bf16, explicit positions, lengths, LSE", func(r *rand.Rand) *problem {
			p := newProblem(r, 2, 2, 1, 3, 7, 8, 8)
			p.types = [3]vkattn.DType{vkattn.Float16, vkattn.BFloat16, vkattn.Float32}
			p.wantLSE = true
			p.opts = vkattn.Options{
				KeyLengths: []int{7, 4}, AlignToKeyLengths: true, Causal: vkattn.CausalBottomRight,
				RoPE: &vkattn.RoPE{Theta: 500000, Style: vkattn.RoPEInterleaved, Scaling: llama3,
					QueryPositions: []int{4093, 4094, 4095, 10, 11, 12},
					KeyPositions:   []int{4089, 4090, 4091, 4092, 4093, 4094, 4095, 9, 10, 11, 12, 0, 0, 0}},
			}
			return p
		}},
		{"linear scaling, more queries than keys, top-left causal, boolean mask", func(r *rand.Rand) *problem {
			p := newProblem(r, 1, 2, 2, 6, 4, 6, 4)
			allow := make([]bool, 6*4)
			for i := range allow {
				allow[i] = i%5 != 1
			}
			p.opts = vkattn.Options{Causal: vkattn.CausalTopLeft,
				BoolMasks: []vkattn.BoolMask{{Shape: vkattn.MaskShape{1, 1, 6, 4}, Values: allow, Meaning: vkattn.TrueAllows}},
				RoPE:      &vkattn.RoPE{Theta: 10000, Dims: 4, Scaling: vkattn.RoPEScaling{Kind: vkattn.RoPELinear, Factor: 2}}}
			return p
		}},
	}
	for name, d := range everyPlan() {
		for i, c := range cases {
			t.Run(name+"/"+c.name, func(t *testing.T) {
				p := c.make(rand.New(rand.NewSource(int64(90 + i))))
				checkAgainstReference(t, d, p)
				plan, err := d.PlanAs(p.qs[:], p.ks[:], p.vs[:], p.types, p.opts)
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
	q, k, v := randomValues(r, H*4*D), randomValues(r, H*9*D), randomValues(r, H*9*D)
	opts := vkattn.Options{Causal: vkattn.CausalBottomRight, RoPE: &vkattn.RoPE{Theta: 10000}}
	out, err := dev.AttentionVarlen(upload(t, dev, []int{1, H, 4, D}, q), upload(t, dev, []int{1, H, 9, D}, k), upload(t, dev, []int{1, H, 9, D}, v), cuQ, cuK, opts)
	if err != nil {
		t.Fatal(err)
	}
	defer out.Close()
	got := download(t, out.O)
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
		compare(t, fmt.Sprintf("sequence %d", i), rows(got, cuQ[i], l, 4), want.O)
	}
}

// A KV cache with RoPE stores each key rotated at its position and
// rotates the queries of every call at theirs: appends from the host and
// from device tensors, prepared calls replayed after appends (their
// queries move with the lengths), and decode steps, on lavapipe's plan and
// the NVIDIA plan with discrete memory, a float32 cache against the
// reference's RoPE and a paged float16 one against keys rotated in
// float64 and then rounded, as it stores them.
func TestKVCacheRoPE(t *testing.T) {
	for _, plan := range ownAndNVIDIA {
		for _, half := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/half %v", plan, half), func(t *testing.T) { cacheRoPE(t, everyPlan()[plan], half) })
		}
	}
}

func cacheRoPE(t *testing.T, d *vkattn.Device, half bool) {
	const B, H, HKV, D, capacity = 2, 4, 2, 16, 40
	r := rand.New(rand.NewSource(95))
	rope := &vkattn.RoPE{Theta: 10000, Dims: 12, Style: vkattn.RoPEInterleaved}
	cfg := vkattn.KVCacheConfig{B: B, HKV: HKV, Capacity: capacity, DK: D, DV: D, RoPE: rope}
	if half {
		cfg.DType, cfg.PageSize = vkattn.Float16, 8
	}
	cache, err := d.NewKVCache(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer cache.Close()
	// The history holds what the reference attends over: unrotated keys
	// for the float32 cache (the reference rotates them), keys rotated in
	// float64 then rounded for the half one (queries rotated alike).
	hist := newHistory(B, HKV, D, D, cfg.DType)
	opts := vkattn.Options{}
	if !half {
		opts.RoPE = rope
	}
	rotate := func(x []float32, heads, n, first int) []float32 { return rotatedFrom(x, heads, n, D, rope, first) }
	record := func(b int, k, v []float32, n int) {
		if half {
			k = rotate(k, HKV, n, cache.Lengths()[b]-n)
		}
		hist.add(b, k, v, n)
	}
	check := func(what string, o, q []float32, L int) {
		t.Helper()
		if half {
			var rq []float32
			for b := 0; b < B; b++ {
				rq = append(rq, rotate(q[b*H*L*D:(b+1)*H*L*D], H, L, cache.Lengths()[b]-L)...)
			}
			q = rq
		}
		hist.check(t, what, o, q, H, L, opts)
	}
	// Ragged prefills from the host.
	for b, n := range []int{9, 6} {
		k, v := randomValues(r, HKV*n*D), randomValues(r, HKV*n*D)
		if err := cache.AppendTo(b, k, v, n); err != nil {
			t.Fatal(err)
		}
		record(b, k, v, n)
	}
	// Two tokens from device tensors.
	k, v := randomValues(r, B*HKV*2*D), randomValues(r, B*HKV*2*D)
	if err := cache.AppendTensors(upload(t, d, []int{B, HKV, 2, D}, k), upload(t, d, []int{B, HKV, 2, D}, v)); err != nil {
		t.Fatal(err)
	}
	for b := 0; b < B; b++ {
		record(b, k[b*HKV*2*D:(b+1)*HKV*2*D], v[b*HKV*2*D:(b+1)*HKV*2*D], 2)
	}
	// A prepared call of two queries, run, then replayed after an append.
	qData := randomValues(r, B*H*2*D)
	q := upload(t, d, []int{B, H, 2, D}, qData)
	call, err := cache.Prepare(q, vkattn.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer call.Close()
	if !strings.Contains(call.Output().Plan.String(), "after rotating Q (RoPE") {
		t.Errorf("plan %q does not name the query rotation", call.Output().Plan)
	}
	for round := 0; round < 2; round++ {
		if round == 1 {
			k, v := randomValues(r, B*HKV*D), randomValues(r, B*HKV*D)
			if err := cache.Append(k, v, 1); err != nil {
				t.Fatal(err)
			}
			for b := 0; b < B; b++ {
				record(b, k[b*HKV*D:(b+1)*HKV*D], v[b*HKV*D:(b+1)*HKV*D], 1)
			}
		}
		check(fmt.Sprintf("prepared call, round %d", round), replay(t, q, qData, call.Run, call.Output().O), qData, 2)
	}
	// Decode steps.
	step := prepareStep(t, cache, H, vkattn.Options{})
	defer step.Close()
	o := make([]float32, B*H*D)
	for i := 0; i < 3; i++ {
		k, v, q := randomValues(r, B*HKV*D), randomValues(r, B*HKV*D), randomValues(r, B*H*D)
		if _, err := step.Run(context.Background(), k, v, q, o); err != nil {
			t.Fatal(err)
		}
		for b := 0; b < B; b++ {
			record(b, k[b*HKV*D:(b+1)*HKV*D], v[b*HKV*D:(b+1)*HKV*D], 1)
		}
		check(fmt.Sprintf("step %d", i), o, q, 1)
	}
}

func TestRoPERefusals(t *testing.T) {
	q := zeros(t, dev, 1, 1, 2, 6)
	rope := &vkattn.RoPE{Theta: 10000}
	cache, err := dev.NewKVCache(vkattn.KVCacheConfig{B: 1, HKV: 1, Capacity: 4, DK: 6, DV: 6, RoPE: rope})
	if err != nil {
		t.Fatal(err)
	}
	defer cache.Close()
	if err := cache.Append(make([]float32, 12), make([]float32, 12), 2); err != nil {
		t.Fatal(err)
	}
	checkRefusals(t, []refusal{
		{"odd rotated dims", vkattn.ErrOption, func() error {
			_, err := dev.Attention(q, q, q, vkattn.Options{RoPE: &vkattn.RoPE{Theta: 10000, Dims: 3}})
			return err
		}},
		{"explicit positions of the wrong count", vkattn.ErrShape, func() error {
			_, err := dev.Attention(q, q, q, vkattn.Options{RoPE: &vkattn.RoPE{Theta: 10000, KeyPositions: []int{0}}})
			return err
		}},
		{"Options.RoPE over a cache", vkattn.ErrOption, func() error {
			_, err := cache.Attention(q, vkattn.Options{RoPE: rope})
			return err
		}},
		{"a cache RoPE with positions", vkattn.ErrOption, func() error {
			c, err := dev.NewKVCache(vkattn.KVCacheConfig{B: 1, HKV: 1, Capacity: 4, DK: 6, DV: 6, RoPE: &vkattn.RoPE{Theta: 1e4, KeyPositions: []int{1}}})
			c.Close()
			return err
		}},
		{"a cache RoPE of too many dims", vkattn.ErrOption, func() error {
			c, err := dev.NewKVCache(vkattn.KVCacheConfig{B: 1, HKV: 1, Capacity: 4, DK: 6, DV: 6, RoPE: &vkattn.RoPE{Theta: 1e4, Dims: 8}})
			c.Close()
			return err
		}},
	})
}

// A RoPE whose table (SEMANTICS.md §17) would not be finite is ErrOption
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
			q, k := zeros(t, dev, 1, 1, l, d), zeros(t, dev, 1, 1, s, d)
			out, err := dev.Attention(q, k, k, vkattn.Options{RoPE: rope})
			if err == nil {
				o := download(t, out.O)
				out.Close()
				t.Fatalf("Options.RoPE: no error, O[0] = %v; want ErrOption", o[0])
			}
			if !errors.Is(err, vkattn.ErrOption) || !strings.Contains(err.Error(), c.names) {
				t.Errorf("Options.RoPE: %v, want ErrOption naming %q", err, c.names)
			}
			cache, err := dev.NewKVCache(vkattn.KVCacheConfig{B: 1, HKV: 1, Capacity: s, DK: d, DV: d, RoPE: rope})
			if err == nil {
				cache.Close()
				t.Fatal("KVCacheConfig.RoPE: no error, want ErrOption")
			}
			if !errors.Is(err, vkattn.ErrOption) {
				t.Errorf("KVCacheConfig.RoPE: %v, want ErrOption", err)
			}
		})
	}
	p := newProblem(rand.New(rand.NewSource(97)), 1, 1, 1, l, s, d, d)
	p.opts.RoPE = &vkattn.RoPE{Theta: 10000, Scaling: vkattn.RoPEScaling{Kind: vkattn.RoPELinear, Factor: 1e-300}}
	checkAgainstReference(t, dev, p)
}

// rotatedFrom is x, rows of n positions of heads heads of width d, rotated
// in float64 by rope at positions first, first+1, ... and rounded to
// float32.
func rotatedFrom(x []float32, heads, n, d int, rope *vkattn.RoPE, first int) []float32 {
	x64 := make([]float64, len(x))
	for i, v := range x {
		x64[i] = float64(v)
	}
	reference.RotateRoPE(x64, [4]int{1, heads, n, d}, rope, func(_, t int) int { return first + t })
	out := make([]float32, len(x))
	for i, v := range x64 {
		out[i] = float32(v)
	}
	return out
}
