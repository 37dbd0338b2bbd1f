package reference

import (
	"errors"
	"math"
	"math/rand"
	"testing"

	"github.com/vkattn/vkattn/core"
	"github.com/vkattn/vkattn/internal/random"
	"github.com/vkattn/vkattn/internal/testutil"
)

// randMHA returns random weights: packed when kdim = vdim = d, separate
// otherwise, with biases when bias is set.
// randSelf draws, from a generator seeded with seed, a self-attention
// layer of width d (packed weights, biases), then n input values; r is
// left to draw what else a test needs.
func randSelf(seed int64, d, n int) (r *rand.Rand, w *core.MHAWeights, x []float32) {
	r = rand.New(rand.NewSource(seed))
	w = randMHA(r, d, d, d, true)
	return r, w, random.Normal(r, n)
}

func randMHA(r *rand.Rand, d, kdim, vdim int, bias bool) *core.MHAWeights {
	w := &core.MHAWeights{DModel: d, KDim: kdim, VDim: vdim, OutProjWeight: random.Normal(r, d*d)}
	if kdim == d && vdim == d {
		w.InProjWeight = random.Normal(r, 3*d*d)
	} else {
		w.QProjWeight, w.KProjWeight, w.VProjWeight = random.Normal(r, d*d), random.Normal(r, d*kdim), random.Normal(r, d*vdim)
	}
	if bias {
		w.InProjBias, w.OutProjBias = random.Normal(r, 3*d), random.Normal(r, d)
	}
	return w
}

func mustMHA(t *testing.T, x []float32, xs []int, k []float32, ks []int, v []float32, vs []int, w *core.MHAWeights, opts core.MHAOptions) *MHAResult {
	t.Helper()
	r, err := MultiHeadAttention(x, xs, k, ks, v, vs, w, opts)
	if err != nil {
		t.Fatalf("MultiHeadAttention: %v", err)
	}
	for name, xs := range map[string][]float64{"Out": r.Out, "Concat": r.Concat, "AvgWeights": r.AvgWeights} {
		for i, x := range xs {
			if math.IsNaN(x) {
				t.Fatalf("%s[%d] is NaN", name, i)
			}
		}
	}
	noNaN(t, r.Attention)
	return r
}

// naiveMHA computes the layer from the projections res.Q, res.K, res.V with
// nothing but loops: no Attention, no head split, head hh reading columns
// hh*dh..(hh+1)*dh of every position. No masks.
func naiveMHA(res *MHAResult, w *core.MHAWeights) []float64 {
	B, T, S, d, h := res.B, res.T, res.S, res.DModel, res.Heads
	dh := d / h
	concat := make([]float64, B*T*d)
	for b := 0; b < B; b++ {
		for hh := 0; hh < h; hh++ {
			for t := 0; t < T; t++ {
				e := make([]float64, S)
				m := math.Inf(-1)
				for j := 0; j < S; j++ {
					for i := 0; i < dh; i++ {
						e[j] += float64(res.Q[(b*T+t)*d+hh*dh+i]) * float64(res.K[(b*S+j)*d+hh*dh+i])
					}
					e[j] /= math.Sqrt(float64(dh))
					m = math.Max(m, e[j])
				}
				z := 0.0
				for j := range e {
					e[j] = math.Exp(e[j] - m)
					z += e[j]
				}
				for j := 0; j < S; j++ {
					for i := 0; i < dh; i++ {
						concat[(b*T+t)*d+hh*dh+i] += e[j] / z * float64(res.V[(b*S+j)*d+hh*dh+i])
					}
				}
			}
		}
	}
	out := make([]float64, B*T*d)
	for n := 0; n < B*T; n++ {
		for o := 0; o < d; o++ {
			s := 0.0
			if w.OutProjBias != nil {
				s = float64(w.OutProjBias[o])
			}
			for i := 0; i < d; i++ {
				s += concat[n*d+i] * float64(w.OutProjWeight[o*d+i])
			}
			out[n*d+o] = s
		}
	}
	return out
}

// SEMANTICS.md §11: B=2, T=3, d=8, h=2 walks X (2,3,8) -> QKV (2,3,24) -> Q,K,V
// each (2,2,3,4) -> scores (2,2,3,3) -> per-head out (2,2,3,4) -> concat
// (2,3,8) -> W_O -> (2,3,8), with 4d^2 + 4d = 288 parameters.
func TestMHASpecWalkthrough(t *testing.T) {
	const B, T, d, h = 2, 3, 8, 2
	_, w, x := randSelf(3, d, B*T*d)

	// 192 + 64 weights + 24 + 8 biases.
	if got := []int{len(w.InProjWeight), len(w.OutProjWeight), len(w.InProjBias), len(w.OutProjBias)}; got[0] != 192 || got[1] != 64 || got[2] != 24 || got[3] != 8 {
		t.Fatalf("parameter sizes %v, want [192 64 24 8]", got)
	}
	if n := w.ParamCount(); n != 4*d*d+4*d {
		t.Fatalf("ParamCount = %d, want 4d^2+4d = 288", n)
	}

	res := mustMHA(t, x, []int{B, T, d}, nil, nil, nil, nil, w, core.MHAOptions{Heads: h})
	if res.B != B || res.T != T || res.S != T || res.DModel != d || res.Heads != h {
		t.Fatalf("result dims B=%d T=%d S=%d d=%d h=%d", res.B, res.T, res.S, res.DModel, res.Heads)
	}

	// X (2,3,8) -> fused QKV (2,3,24): Q, K and V are its three 8-wide
	// column blocks.
	qkv := linear(widen(x), B*T, d, w.InProjWeight, w.InProjBias, 3*d)
	if len(qkv) != B*T*3*d {
		t.Fatalf("QKV has %d values, want (2,3,24) = 144", len(qkv))
	}
	for n := 0; n < B*T; n++ {
		for i := 0; i < d; i++ {
			for blk, got := range [][]float32{res.Q, res.K, res.V} {
				if want := float32(qkv[n*3*d+blk*d+i]); got[n*d+i] != want {
					t.Fatalf("block %d of QKV row %d col %d: %v, want %v", blk, n, i, got[n*d+i], want)
				}
			}
		}
	}

	// Q, K, V each (2,2,3,4); scores and weights (2,2,3,3); per-head out
	// (2,2,3,4).
	if want := (core.Dims{B: 2, H: 2, HKV: 2, L: 3, S: 3, DK: 4, DV: 4}); res.Attention.Dims != want {
		t.Fatalf("per-head Dims %v, want %v", res.Attention.Dims, want)
	}
	if len(res.Attention.Weights) != 2*2*3*3 || len(res.Attention.O) != 2*2*3*4 || len(res.Attention.LSE) != 2*2*3 {
		t.Fatalf("per-head lens weights %d O %d LSE %d, want 36 48 12", len(res.Attention.Weights), len(res.Attention.O), len(res.Attention.LSE))
	}

	// Concat (2,3,8): head hh of position t fills columns 4hh..4hh+3.
	if len(res.Concat) != B*T*d || len(res.Out) != B*T*d {
		t.Fatalf("concat %d, out %d values, want 48 each", len(res.Concat), len(res.Out))
	}
	for b := 0; b < B; b++ {
		for hh := 0; hh < h; hh++ {
			for tt := 0; tt < T; tt++ {
				for i := 0; i < 4; i++ {
					if got, want := res.Concat[(b*T+tt)*d+hh*4+i], res.Attention.O[((b*h+hh)*T+tt)*4+i]; got != want {
						t.Fatalf("concat[%d,%d,%d] = %v, want head %d out %v", b, tt, hh*4+i, got, hh, want)
					}
				}
			}
		}
	}

	// Out against loops that never split heads.
	testutil.Near(t, "Out vs naive", res.Out, naiveMHA(res, w), 1e-12)
	if res.Weights != nil || res.AvgWeights != nil {
		t.Fatal("weights returned without NeedWeights")
	}
}

// SEMANTICS.md §11: reading the (B,T,d) projections as (B,h,T,dh) without swapping
// the head and sequence axes mixes positions into heads. The result must
// differ from the layer's, or the walk-through would not catch the bug.
func TestMHAAxisSwapMatters(t *testing.T) {
	const B, T, d, h, dh = 2, 3, 8, 2, 4
	_, w, x := randSelf(4, d, B*T*d)
	res := mustMHA(t, x, []int{B, T, d}, nil, nil, nil, nil, w, core.MHAOptions{Heads: h})

	// Split and merge are inverses, and split really moves data.
	back := mergeHeads(widen(splitHeads(res.Q, B, T, h, dh)), B, T, h, dh)
	testutil.Near(t, "merge(split(Q))", back, widen(res.Q), 0)
	if split := splitHeads(res.Q, B, T, h, dh); split[dh] == res.Q[dh] && split[2*dh] == res.Q[2*dh] {
		t.Fatal("splitHeads left the data in place")
	}

	s := [4]int{B, h, T, dh}
	bad, err := Attention(res.Q, s, res.K, s, res.V, s, core.Options{})
	if err != nil {
		t.Fatal(err)
	}
	badOut := linear(bad.O, B*T, d, w.OutProjWeight, w.OutProjBias, d)
	maxDiff := 0.0
	for i := range badOut {
		maxDiff = math.Max(maxDiff, math.Abs(badOut[i]-res.Out[i]))
	}
	if !(maxDiff >= 1e-2) {
		t.Fatalf("attention without the axis swap differs by only %g", maxDiff)
	}
	t.Logf("without the axis swap the output is off by up to %.3g", maxDiff)
}

func TestMHACross(t *testing.T) {
	const B, T, S, d, kd, vd, h = 2, 3, 5, 8, 5, 6, 2
	r := rand.New(rand.NewSource(5))
	w := randMHA(r, d, kd, vd, true)
	x, k, v := random.Normal(r, B*T*d), random.Normal(r, B*S*kd), random.Normal(r, B*S*vd)
	res := mustMHA(t, x, []int{B, T, d}, k, []int{B, S, kd}, v, []int{B, S, vd}, w, core.MHAOptions{Heads: h, NeedWeights: true})
	if res.S != S || len(res.K) != B*S*d || len(res.V) != B*S*d || len(res.Weights) != B*h*T*S || len(res.AvgWeights) != B*T*S {
		t.Fatalf("S %d, K %d, V %d, weights %d, avg %d", res.S, len(res.K), len(res.V), len(res.Weights), len(res.AvgWeights))
	}
	testutil.Near(t, "K", widen(res.K), widen(narrowMust(t, linear(widen(k), B*S, kd, w.KProjWeight, w.InProjBias[d:2*d], d))), 0)
	testutil.Near(t, "V", widen(res.V), widen(narrowMust(t, linear(widen(v), B*S, vd, w.VProjWeight, w.InProjBias[2*d:], d))), 0)
	testutil.Near(t, "Out vs naive", res.Out, naiveMHA(res, w), 1e-12)

	// AvgWeights is the head mean; every row sums to 1.
	for b := 0; b < B; b++ {
		for tt := 0; tt < T; tt++ {
			row := res.AvgWeights[(b*T+tt)*S : (b*T+tt+1)*S]
			testutil.Near(t, "avg row sum", []float64{sum(row)}, []float64{1}, 1e-12)
			for j := range row {
				m := 0.0
				for hh := 0; hh < h; hh++ {
					m += res.Weights[((b*h+hh)*T+tt)*S+j]
				}
				testutil.Near(t, "avg", row[j:j+1], []float64{m / h}, 1e-15)
			}
		}
	}

	// Rank 2 inputs are batch 1.
	r2 := mustMHA(t, x[:T*d], []int{T, d}, k[:S*kd], []int{S, kd}, v[:S*vd], []int{S, vd}, w, core.MHAOptions{Heads: h})
	testutil.Near(t, "rank 2", r2.Out, res.Out[:T*d], 0)
}

func narrowMust(t *testing.T, x []float64) []float32 {
	t.Helper()
	y, err := narrowAll("x", x)
	if err != nil {
		t.Fatal(err)
	}
	return y
}

// The packed and separate layouts of the same weights, and no biases versus
// zero biases, give identical results.
func TestMHALayouts(t *testing.T) {
	const B, T, d, h = 2, 4, 6, 3
	_, packed, x := randSelf(6, d, B*T*d)
	sep := *packed
	sep.InProjWeight = nil
	sep.QProjWeight, sep.KProjWeight, sep.VProjWeight = packed.InProjWeight[:d*d], packed.InProjWeight[d*d:2*d*d], packed.InProjWeight[2*d*d:]
	a := mustMHA(t, x, []int{B, T, d}, nil, nil, nil, nil, packed, core.MHAOptions{Heads: h})
	b := mustMHA(t, x, []int{B, T, d}, x, []int{B, T, d}, x, []int{B, T, d}, &sep, core.MHAOptions{Heads: h})
	testutil.Near(t, "separate vs packed", b.Out, a.Out, 0)
	if packed.ParamCount() != sep.ParamCount() {
		t.Fatalf("ParamCount %d vs %d", packed.ParamCount(), sep.ParamCount())
	}

	nob := *packed
	nob.InProjBias, nob.OutProjBias = nil, nil
	zero := *packed
	zero.InProjBias, zero.OutProjBias = make([]float32, 3*d), make([]float32, d)
	testutil.Near(t, "nil vs zero bias", mustMHA(t, x, []int{B, T, d}, nil, nil, nil, nil, &nob, core.MHAOptions{Heads: h}).Out,
		mustMHA(t, x, []int{B, T, d}, nil, nil, nil, nil, &zero, core.MHAOptions{Heads: h}).Out, 0)
	if nob.ParamCount() != 4*d*d {
		t.Fatalf("ParamCount without bias %d, want %d", nob.ParamCount(), 4*d*d)
	}
}

// Permuting the positions of X permutes the self-attention output alike
// (SEMANTICS.md §15), through projections, heads and merge.
func TestMHAPermutation(t *testing.T) {
	const T, d, h = 5, 8, 4
	r, w, x := randSelf(7, d, T*d)
	perm := r.Perm(T)
	px := make([]float32, len(x))
	for i, p := range perm {
		copy(px[i*d:(i+1)*d], x[p*d:(p+1)*d])
	}
	a := mustMHA(t, x, []int{T, d}, nil, nil, nil, nil, w, core.MHAOptions{Heads: h})
	b := mustMHA(t, px, []int{T, d}, nil, nil, nil, nil, w, core.MHAOptions{Heads: h})
	for i, p := range perm {
		testutil.Near(t, "permuted row", b.Out[i*d:(i+1)*d], a.Out[p*d:(p+1)*d], 1e-12)
	}
}

func TestMHAKeyPadding(t *testing.T) {
	const B, T, S, d, h = 2, 3, 4, 8, 2
	r, w, x := randSelf(8, d, B*T*d)
	kv := random.Normal(r, B*S*d)
	run := func(opts core.MHAOptions) *MHAResult {
		opts.Heads, opts.NeedWeights = h, true
		return mustMHA(t, x, []int{B, T, d}, kv, []int{B, S, d}, kv, []int{B, S, d}, w, opts)
	}

	// Padding the last keys is KeyLengths, and a (B,1,1,S) TrueBlocks mask.
	pad := &core.KeyPadding{Padded: []bool{false, false, false, true, false, false, true, true}}
	got := run(core.MHAOptions{KeyPadding: pad})
	testutil.Near(t, "padding vs key lengths", got.Out, run(core.MHAOptions{Attention: core.Options{KeyLengths: []int{3, 2}}}).Out, 0)
	bm := core.BoolMask{Shape: core.MaskShape{B, 1, 1, S}, Values: pad.Padded, Meaning: core.TrueBlocks}
	testutil.Near(t, "padding vs bool mask", got.Out, run(core.MHAOptions{Attention: core.Options{BoolMasks: []core.BoolMask{bm}}}).Out, 0)
	for i, a := range got.Weights {
		if j := i % S; (i/(h*T*S) == 0 && j == 3 || i/(h*T*S) == 1 && j >= 2) && a != 0 {
			t.Fatalf("padded key has weight %v at %d", a, i)
		}
	}

	// With a TrueAllows (T,S) mask too, both apply.
	allow := []bool{
		true, true, false, true,
		false, true, true, true,
		true, false, true, true,
	}
	am := core.BoolMask{Shape: core.MaskShape{1, 1, T, S}, Values: allow, Meaning: core.TrueAllows}
	merged := make([]bool, B*T*S)
	for b := 0; b < B; b++ {
		for tt := 0; tt < T; tt++ {
			for j := 0; j < S; j++ {
				merged[(b*T+tt)*S+j] = !allow[tt*S+j] || pad.Padded[b*S+j]
			}
		}
	}
	mm := core.BoolMask{Shape: core.MaskShape{B, 1, T, S}, Values: merged, Meaning: core.TrueBlocks}
	testutil.Near(t, "padding + mask", run(core.MHAOptions{KeyPadding: pad, Attention: core.Options{BoolMasks: []core.BoolMask{am}}}).Out,
		run(core.MHAOptions{Attention: core.Options{BoolMasks: []core.BoolMask{mm}}}).Out, 0)
	// The caller's mask is left as it was.
	if am.Shape != (core.MaskShape{1, 1, T, S}) || !am.Values[0] || am.Values[2] {
		t.Fatal("the caller's boolean mask was modified")
	}

	// A fully masked row: zero weights and attention output, so the layer
	// output is out_proj.bias (PyTorch gives NaN).
	full := &core.KeyPadding{Padded: []bool{false, false, false, false, true, true, true, true}}
	res := run(core.MHAOptions{KeyPadding: full})
	for tt := 0; tt < T; tt++ {
		testutil.Near(t, "fully masked out", res.Out[(T+tt)*d:(T+tt+1)*d], widen(w.OutProjBias), 0)
		testutil.Near(t, "fully masked avg weights", res.AvgWeights[(T+tt)*S:(T+tt+1)*S], make([]float64, S), 0)
	}
}

// Causal, an additive (B,h,T,S) mask (PyTorch's 3-D attn_mask) and a
// custom scale pass through to every head.
func TestMHAMasksPassThrough(t *testing.T) {
	const B, T, d, h, dh = 2, 4, 8, 2, 4
	r := rand.New(rand.NewSource(9))
	w := randMHA(r, d, d, d, false)
	x := random.Normal(r, B*T*d)
	m := &core.Mask{Shape: core.MaskShape{B, h, T, T}, Values: random.Normal(r, B*h*T*T)}
	m.Values[5] = negInf
	opts := core.Options{Causal: core.CausalTopLeft, Mask: m, Scale: core.CustomScale(0.3)}
	res := mustMHA(t, x, []int{B, T, d}, nil, nil, nil, nil, w, core.MHAOptions{Heads: h, Attention: opts, NeedWeights: true})
	s := [4]int{B, h, T, dh}
	want := mustRun(t, splitHeads(res.Q, B, T, h, dh), s, splitHeads(res.K, B, T, h, dh), s, splitHeads(res.V, B, T, h, dh), s, opts)
	same(t, "per head", res.Attention, want)
	for b := 0; b < B; b++ {
		for tt := 0; tt < T; tt++ {
			for j := tt + 1; j < T; j++ {
				if a := res.AvgWeights[(b*T+tt)*T+j]; a != 0 {
					t.Fatalf("causal: weight %v at b=%d t=%d j=%d", a, b, tt, j)
				}
			}
		}
	}
}

func TestMHAErrors(t *testing.T) {
	const B, T, d, h = 1, 2, 4, 2
	r := rand.New(rand.NewSource(10))
	good := randMHA(r, d, d, d, true)
	x := random.Normal(r, B*T*d)
	xs := []int{B, T, d}
	mod := func(f func(w *core.MHAWeights)) *core.MHAWeights {
		w := *good
		f(&w)
		return &w
	}
	nan := float32(math.NaN())
	cases := []struct {
		name string
		w    *core.MHAWeights
		x    []float32
		xs   []int
		k, v []float32
		ks   []int
		vs   []int
		opts core.MHAOptions
		err  error
		msg  string
	}{
		{name: "nil weights", err: core.ErrShape, msg: "nil"},
		{name: "no dims", w: mod(func(w *core.MHAWeights) { w.KDim = 0 }), err: core.ErrEmpty},
		{name: "both layouts", w: mod(func(w *core.MHAWeights) { w.QProjWeight = make([]float32, d*d) }), err: core.ErrShape, msg: "both"},
		{name: "no layout", w: mod(func(w *core.MHAWeights) { w.InProjWeight = nil }), err: core.ErrShape, msg: "neither"},
		{name: "packed with kdim", w: mod(func(w *core.MHAWeights) { w.KDim = 3 }), err: core.ErrShape, msg: "kdim"},
		{name: "short in_proj_weight", w: mod(func(w *core.MHAWeights) { w.InProjWeight = w.InProjWeight[:40] }), err: core.ErrShape, msg: "in_proj_weight has 40 values, want shape [12 4]"},
		{name: "short bias", w: mod(func(w *core.MHAWeights) { w.OutProjBias = w.OutProjBias[:3] }), err: core.ErrShape, msg: "out_proj.bias has 3 values, want shape [4]"},
		{name: "NaN weight", w: mod(func(w *core.MHAWeights) {
			w.OutProjWeight = append([]float32(nil), w.OutProjWeight...)
			w.OutProjWeight[2] = nan
		}), err: core.ErrNonFinite, msg: "out_proj.weight"},
		{name: "separate k_proj", w: &core.MHAWeights{DModel: d, KDim: 3, VDim: d, QProjWeight: make([]float32, d*d), KProjWeight: make([]float32, d*d), VProjWeight: make([]float32, d*d), OutProjWeight: make([]float32, d*d)},
			err: core.ErrShape, msg: "k_proj_weight has 16 values, want shape [4 3]"},
		{name: "heads", opts: core.MHAOptions{Heads: 3}, err: core.ErrHeads},
		{name: "zero heads", opts: core.MHAOptions{Heads: 0}, err: core.ErrHeads},
		{name: "width", xs: []int{B, T * 2, d / 2}, err: core.ErrShape, msg: "embed_dim"},
		{name: "rank", xs: []int{1, B, T, d}, err: core.ErrShape, msg: "rank"},
		{name: "length", x: x[:5], err: core.ErrShape, msg: "query has 5 values"},
		{name: "empty", x: []float32{}, xs: []int{B, 0, d}, err: core.ErrEmpty},
		{name: "non-finite x", x: append(append([]float32(nil), x[:7]...), nan), err: core.ErrNonFinite, msg: "query value 7"},
		{name: "key without value", k: x, ks: xs, err: core.ErrShape, msg: "key and value"},
		{name: "key rank", k: x, ks: []int{T, d}, v: x, vs: []int{T, d}, err: core.ErrShape, msg: "rank"},
		{name: "batch", k: append(x, x...), ks: []int{2, T, d}, v: append(x, x...), vs: []int{2, T, d}, err: core.ErrShape, msg: "batch"},
		{name: "positions", k: x, ks: xs, v: x[:d], vs: []int{B, 1, d}, err: core.ErrShape, msg: "positions"},
		{name: "padding length", opts: core.MHAOptions{Heads: h, KeyPadding: &core.KeyPadding{Padded: []bool{true}}}, err: core.ErrMask},
		{name: "mask shape", opts: core.MHAOptions{Heads: h, Attention: core.Options{Mask: &core.Mask{Shape: core.MaskShape{1, 3, T, T}, Values: make([]float32, 3*T*T)}}}, err: core.ErrMask},
		{name: "mask meaning", opts: core.MHAOptions{Heads: h, KeyPadding: &core.KeyPadding{Padded: make([]bool, T)}, Attention: core.Options{BoolMasks: []core.BoolMask{{Shape: core.MaskShape{1, 1, 1, T}, Values: make([]bool, T)}}}}, err: core.ErrMask},
		{name: "missing out_proj.weight", w: mod(func(w *core.MHAWeights) { w.OutProjWeight = nil }), err: core.ErrShape, msg: "out_proj.weight has 0 values"},
		{name: "projection overflow", w: mod(func(w *core.MHAWeights) {
			w.InProjWeight = make([]float32, 3*d*d)
			w.InProjWeight[0], w.InProjWeight[1] = 3e38, 3e38
		}), x: []float32{10, 10, 0, 0, 0, 0, 0, 0}, err: core.ErrNonFinite, msg: "projection Q"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			w := c.w
			if w == nil && c.name != "nil weights" {
				w = good
			}
			if c.x == nil {
				c.x = x
			}
			if c.xs == nil {
				c.xs = xs
			}
			if c.opts.Heads == 0 && c.name != "zero heads" {
				c.opts.Heads = h
			}
			_, err := MultiHeadAttention(c.x, c.xs, c.k, c.ks, c.v, c.vs, w, c.opts)
			wantError(t, err, c.err, c.msg)
		})
	}
}

// Grouped-query attention (KVDim < DModel): a layer whose K and V
// projections have kvHeads heads equals the plain layer whose K and V
// weights repeat each K/V head's rows for every query head of its group
// (query head hh reads K/V head hh / (Heads/kvHeads)).
func TestMHAGroupedQueryEqualsRepeatedKV(t *testing.T) {
	const B, T, S, d, h, kvHeads = 2, 5, 7, 16, 8, 2
	const dh, kv, group = d / h, kvHeads * d / h, h / kvHeads
	r := rand.New(rand.NewSource(17))
	g := &core.MHAWeights{DModel: d, KDim: 6, VDim: 5, KVDim: kv,
		QProjWeight: random.Normal(r, d*d), KProjWeight: random.Normal(r, kv*6), VProjWeight: random.Normal(r, kv*5),
		InProjBias: random.Normal(r, d+2*kv), OutProjWeight: random.Normal(r, d*d), OutProjBias: random.Normal(r, d)}
	full := &core.MHAWeights{DModel: d, KDim: 6, VDim: 5, QProjWeight: g.QProjWeight,
		OutProjWeight: g.OutProjWeight, OutProjBias: g.OutProjBias, InProjBias: append([]float32(nil), g.InProjBias[:d]...)}
	repeat := func(w []float32, in int) []float32 {
		var out []float32
		for hh := 0; hh < h; hh++ {
			src := (hh / group) * dh
			out = append(out, w[src*in:(src+dh)*in]...)
		}
		return out
	}
	full.KProjWeight, full.VProjWeight = repeat(g.KProjWeight, 6), repeat(g.VProjWeight, 5)
	full.InProjBias = append(full.InProjBias, repeat(g.InProjBias[d:d+kv], 1)...)
	full.InProjBias = append(full.InProjBias, repeat(g.InProjBias[d+kv:], 1)...)
	x, key, value := random.Normal(r, B*T*d), random.Normal(r, B*S*6), random.Normal(r, B*S*5)
	opts := core.MHAOptions{Heads: h, NeedWeights: true, Attention: core.Options{Causal: core.CausalBottomRight}}
	got := mustMHA(t, x, []int{B, T, d}, key, []int{B, S, 6}, value, []int{B, S, 5}, g, opts)
	want := mustMHA(t, x, []int{B, T, d}, key, []int{B, S, 6}, value, []int{B, S, 5}, full, opts)
	testutil.Near(t, "Out", got.Out, want.Out, 1e-12)
	testutil.Near(t, "AvgWeights", got.AvgWeights, want.AvgWeights, 1e-12)
	if got.Attention.Dims.HKV != kvHeads {
		t.Fatalf("K/V heads %d, want %d", got.Attention.Dims.HKV, kvHeads)
	}
	// A K/V width that is not a whole number of heads dividing the query
	// heads is refused.
	bad := *g
	bad.KVDim, bad.KProjWeight, bad.VProjWeight, bad.InProjBias = 3*dh, random.Normal(r, 3*dh*6), random.Normal(r, 3*dh*5), nil
	if _, err := MultiHeadAttention(x, []int{B, T, d}, key, []int{B, S, 6}, value, []int{B, S, 5}, &bad, opts); !errors.Is(err, core.ErrHeads) {
		t.Fatalf("3 K/V heads for 8 query heads: %v, want ErrHeads", err)
	}
}
