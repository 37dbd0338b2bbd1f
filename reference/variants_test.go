package reference

import (
	"errors"
	"fmt"
	"math"
	"math/rand"
	"testing"

	"github.com/vkattn/vkattn/core"
	"github.com/vkattn/vkattn/internal/random"
	"github.com/vkattn/vkattn/internal/testutil"
)

// Tests of the score variants (SEMANTICS.md §4.1): window, soft-capping,
// sinks and ALiBi. The hand-derived cases write each expected number out
// from the formula for that case; TestVariantsMatchDense compares with an
// independent dense computation; the rest are properties.

// wantRow checks one row of r: its output, weights and log-sum-exp.
func wantRow(t *testing.T, what string, r *Result, row int, o, w []float64, lse float64) {
	t.Helper()
	d := r.Dims
	testutil.Near(t, what+" O", r.O[row*d.DV:(row+1)*d.DV], o, 1e-15)
	testutil.Near(t, what+" weights", r.Weights[row*d.S:(row+1)*d.S], w, 1e-15)
	testutil.Near(t, what+" LSE", r.LSE[row:row+1], []float64{lse}, 1e-14)
}

// softmaxOf returns exp(e_j - m) / Z and m + log Z for the logits e plus,
// if sink is not nil, the sink's logit in Z only.
func softmaxOf(e []float64, sink *float64) ([]float64, float64) {
	m := math.Inf(-1)
	for _, x := range e {
		m = math.Max(m, x)
	}
	if sink != nil {
		m = math.Max(m, *sink)
	}
	z := 0.0
	for _, x := range e {
		z += math.Exp(x - m)
	}
	if sink != nil {
		z += math.Exp(*sink - m)
	}
	w := make([]float64, len(e))
	for j, x := range e {
		w[j] = math.Exp(x-m) / z
	}
	return w, m + math.Log(z)
}

func dotRow(w []float64, v []float64) float64 {
	s := 0.0
	for j := range w {
		s += w[j] * v[j]
	}
	return s
}

// L=1, S=3, d=1, q=2, k=(1,0,-1): scores 2, 0, -2 at the default scale 1.
func TestSoftcapByHand(t *testing.T) {
	q, k, v := []float32{2}, []float32{1, 0, -1}, []float32{1, 2, 4}
	qs, ks := [4]int{1, 1, 1, 1}, [4]int{1, 1, 3, 1}
	vv := []float64{1, 2, 4}

	// c = 1: e = tanh(2), tanh(0), tanh(-2).
	r := mustRun(t, q, qs, k, ks, v, ks, core.Options{Softcap: 1})
	w, lse := softmaxOf([]float64{math.Tanh(2), 0, -math.Tanh(2)}, nil)
	wantRow(t, "softcap 1", r, 0, []float64{dotRow(w, vv)}, w, lse)

	// Scale 2 then c = 4: s = 4, 0, -4, e = 4 tanh(1), 0, -4 tanh(1).
	r = mustRun(t, q, qs, k, ks, v, ks, core.Options{Scale: core.CustomScale(2), Softcap: 4})
	w, lse = softmaxOf([]float64{4 * math.Tanh(1), 0, -4 * math.Tanh(1)}, nil)
	wantRow(t, "scale 2 softcap 4", r, 0, []float64{dotRow(w, vv)}, w, lse)

	// A softcap below the scores' range still keeps their order.
	if !(r.Weights[0] > r.Weights[1] && r.Weights[1] > r.Weights[2]) {
		t.Fatalf("weights %v not decreasing", r.Weights)
	}
}

// H=2, H_kv=1, L=2, S=3, q=0 so every score is 0 and only ALiBi's bias
// slope_h * (j - (t + S - L)) = slope_h * (j - t - 1) remains.
func TestALiBiByHand(t *testing.T) {
	q := make([]float32, 2*2*1)
	k, v := []float32{0, 0, 0}, []float32{1, 2, 4}
	r := mustRun(t, q, [4]int{1, 2, 2, 1}, k, [4]int{1, 1, 3, 1}, v, [4]int{1, 1, 3, 1},
		core.Options{ALiBi: []float32{0.5, 1}})
	bias := [][]float64{ // rows (h, t): (0,0), (0,1), (1,0), (1,1)
		{-0.5, 0, 0.5}, // 0.5 * (j - 1)
		{-1, -0.5, 0},  // 0.5 * (j - 2)
		{-1, 0, 1},     // 1 * (j - 1)
		{-2, -1, 0},    // 1 * (j - 2)
	}
	for row, e := range bias {
		w, lse := softmaxOf(e, nil)
		wantRow(t, fmt.Sprintf("ALiBi row %d", row), r, row, []float64{dotRow(w, []float64{1, 2, 4})}, w, lse)
	}

	// L=3 > S=2: t + S - L = t - 1, so row 0's bias is slope * (j + 1).
	r = mustRun(t, make([]float32, 3), [4]int{1, 1, 3, 1}, []float32{0, 0}, [4]int{1, 1, 2, 1}, []float32{1, 2}, [4]int{1, 1, 2, 1},
		core.Options{ALiBi: []float32{0.25}})
	for row, e := range [][]float64{{0.25, 0.5}, {0, 0.25}, {-0.25, 0}} {
		w, lse := softmaxOf(e, nil)
		wantRow(t, fmt.Sprintf("ALiBi L>S row %d", row), r, row, []float64{dotRow(w, []float64{1, 2})}, w, lse)
	}
}

// q=0: a row's weights are uniform over the keys its window leaves, so its
// output is their mean and its log-sum-exp log(count).
func TestWindowByHand(t *testing.T) {
	v := []float32{1, 2, 4, 8}
	run := func(L, S int, win core.Window) *Result {
		return mustRun(t, make([]float32, L), [4]int{1, 1, L, 1}, make([]float32, S), [4]int{1, 1, S, 1}, v[:S], [4]int{1, 1, S, 1},
			core.Options{Window: &win})
	}
	q := 1.0 / 4
	// L=2, S=4: the aligned position of row t is t + 2.
	r := run(2, 4, core.Window{Left: 1, Right: 0})
	wantRow(t, "(1,0) row 0, keys 1..2", r, 0, []float64{3}, []float64{0, 0.5, 0.5, 0}, math.Log(2))
	wantRow(t, "(1,0) row 1, keys 2..3", r, 1, []float64{6}, []float64{0, 0, 0.5, 0.5}, math.Log(2))
	r = run(2, 4, core.Window{Left: 0, Right: 1})
	wantRow(t, "(0,1) row 0, keys 2..3", r, 0, []float64{6}, []float64{0, 0, 0.5, 0.5}, math.Log(2))
	wantRow(t, "(0,1) row 1, key 3", r, 1, []float64{8}, []float64{0, 0, 0, 1}, 0)
	r = run(2, 4, core.Window{Left: 2, Right: -1})
	wantRow(t, "(2,-1) row 0, keys 0..3", r, 0, []float64{15.0 / 4}, []float64{q, q, q, q}, math.Log(4))
	wantRow(t, "(2,-1) row 1, keys 1..3", r, 1, []float64{14.0 / 3}, []float64{0, 1.0 / 3, 1.0 / 3, 1.0 / 3}, math.Log(3))
	// L=3, S=2, (0,0): row t sees key t - 1 only, so row 0 sees nothing.
	r = run(3, 2, core.Window{Left: 0, Right: 0})
	wantRow(t, "(0,0) row 0, no key", r, 0, []float64{0}, []float64{0, 0}, math.Inf(-1))
	wantRow(t, "(0,0) row 1, key 0", r, 1, []float64{1}, []float64{1, 0}, 0)
	wantRow(t, "(0,0) row 2, key 1", r, 2, []float64{2}, []float64{0, 1}, 0)
}

// L=1, S=2, d=1, q=1, k=(1,0): scores 1, 0.
func TestSinksByHand(t *testing.T) {
	q, k, v := []float32{1}, []float32{1, 0}, []float32{3, 5}
	qs, ks := [4]int{1, 1, 1, 1}, [4]int{1, 1, 2, 1}
	for _, c := range []struct {
		sink float32
		// m = max(1, 0, sink), Z = exp(1-m) + exp(-m) + exp(sink-m)
		m float64
	}{{0.5, 1}, {3, 3}, {-2, 1}} {
		r := mustRun(t, q, qs, k, ks, v, ks, core.Options{Sinks: []float32{c.sink}})
		s := float64(c.sink)
		z := math.Exp(1-c.m) + math.Exp(-c.m) + math.Exp(s-c.m)
		w := []float64{math.Exp(1-c.m) / z, math.Exp(-c.m) / z}
		wantRow(t, fmt.Sprintf("sink %v", c.sink), r, 0, []float64{3*w[0] + 5*w[1]}, w, c.m+math.Log(z))
	}

	// Every key masked: only the sink is left in Z, so LSE is the sink.
	r := mustRun(t, q, qs, k, ks, v, ks, core.Options{Sinks: []float32{0.75}, KeyLengths: []int{0}})
	wantRow(t, "fully masked", r, 0, []float64{0}, []float64{0, 0}, 0.75)
	// A padded row stays -Inf.
	r = mustRun(t, q, qs, k, ks, v, ks, core.Options{Sinks: []float32{0.75}, QueryLengths: []int{0}})
	wantRow(t, "padded", r, 0, []float64{0}, []float64{0, 0}, math.Inf(-1))
}

// Every variant at once on L=1, S=4, d=2, q=(1,1),
// k=(1,0),(1,1),(0,-1),(2,1): dot products 1, 2, -1, 3.
func TestVariantsCombinedByHand(t *testing.T) {
	q := []float32{1, 1}
	k := []float32{1, 0, 1, 1, 0, -1, 2, 1}
	v := []float32{1, 10, 100, 1000}
	opts := core.Options{
		Scale:   core.CustomScale(2), // s = 2, 4, -2, 6
		Softcap: 2,                   // 2 tanh(s/2)
		ALiBi:   []float32{0.25},     // + 0.25 (j - 3)
		Mask:    &core.Mask{Shape: core.MaskShape{1, 1, 1, 4}, Values: []float32{0, 0.5, 0, -0.5}},
		Window:  &core.Window{Left: 2, Right: -1}, // j >= 3 - 2: blocks key 0
		BoolMasks: []core.BoolMask{{Shape: core.MaskShape{1, 1, 1, 4}, Values: []bool{false, false, true, false},
			Meaning: core.TrueBlocks}}, // blocks key 2
		Sinks: []float32{-1},
	}
	r := mustRun(t, q, [4]int{1, 1, 1, 2}, k, [4]int{1, 1, 4, 2}, v, [4]int{1, 1, 4, 1}, opts)
	e1 := 2*math.Tanh(4.0/2) + 0.25*(1-3) + 0.5
	e3 := 2*math.Tanh(6.0/2) + 0.25*(3-3) - 0.5
	m := math.Max(math.Max(e1, e3), -1)
	z := math.Exp(e1-m) + math.Exp(e3-m) + math.Exp(-1-m)
	w1, w3 := math.Exp(e1-m)/z, math.Exp(e3-m)/z
	wantRow(t, "combined", r, 0, []float64{10*w1 + 1000*w3}, []float64{0, w1, 0, w3}, m+math.Log(z))
}

// GQA (H=4, H_kv=2): sinks and slopes belong to the query head, not to the
// key/value head it reads. q=0, L=1, S=2: the logits are -slope_h, 0.
func TestVariantsGQAByHand(t *testing.T) {
	slopes := []float32{1, 0.5, 0.25, 0.125}
	sinks := []float32{0, 1, -1, 2}
	v := []float32{1, 3, 10, 30} // kv head 0: 1, 3; kv head 1: 10, 30
	r := mustRun(t, make([]float32, 4), [4]int{1, 4, 1, 1}, make([]float32, 4), [4]int{1, 2, 2, 1}, v, [4]int{1, 2, 2, 1},
		core.Options{ALiBi: slopes, Sinks: sinks})
	for h := range slopes {
		a, s := float64(slopes[h]), float64(sinks[h])
		m := math.Max(0, s)
		z := math.Exp(-a-m) + math.Exp(-m) + math.Exp(s-m)
		w := []float64{math.Exp(-a-m) / z, math.Exp(-m) / z}
		kv := h / 2
		o := w[0]*float64(v[2*kv]) + w[1]*float64(v[2*kv+1])
		wantRow(t, fmt.Sprintf("head %d", h), r, h, []float64{o}, w, m+math.Log(z))
	}
}

// variantCase is one combination of options for TestVariantsMatchDense.
type variantCase struct {
	name         string
	causal       core.Causal
	window       *core.Window
	softcap      float64
	scale        float64 // 0: the default
	sinks        bool
	alibi        int // 0 none, 1 the published slopes, 2 random ones
	mask, bools  bool
	keyLens      bool
	queryLens    bool
	wantDeadRows bool // the case must have a live-query row that sees no key
}

// denseSpec is a problem's options as explicit dense matrices, built in
// the test from the case: what denseAttention consumes.
type denseSpec struct {
	scale, softcap float64
	bias           []float64 // (H, L, S) ALiBi bias
	add            []float64 // (B, H, L, S) additive mask
	visible        []bool    // (B, H, L, S): window, causal, lengths, masks
	padded         []bool    // (B, L)
	sinks          []float64 // (H) or nil
}

// buildCase returns the options of c for dims d and the same options as
// explicit matrices.
func buildCase(rng *rand.Rand, c variantCase, d core.Dims) (core.Options, denseSpec) {
	B, H, L, S := d.B, d.H, d.L, d.S
	opts := core.Options{Causal: c.causal, Window: c.window, Softcap: c.softcap}
	sp := denseSpec{scale: 1 / math.Sqrt(float64(d.DK)), softcap: c.softcap,
		bias: make([]float64, H*L*S), add: make([]float64, B*H*L*S), visible: make([]bool, B*H*L*S), padded: make([]bool, B*L)}
	if c.scale != 0 {
		opts.Scale, sp.scale = core.CustomScale(c.scale), c.scale
	}
	switch c.alibi {
	case 1:
		opts.ALiBi = core.ALiBiSlopes(H)
	case 2:
		opts.ALiBi = random.Normal(rng, H) // negative slopes too
	}
	for h := 0; h < H && opts.ALiBi != nil; h++ {
		for t := 0; t < L; t++ {
			for j := 0; j < S; j++ {
				sp.bias[(h*L+t)*S+j] = float64(opts.ALiBi[h]) * float64(j-(t+S-L))
			}
		}
	}
	if c.sinks {
		opts.Sinks = make([]float32, H)
		sp.sinks = make([]float64, H)
		for h := range opts.Sinks {
			opts.Sinks[h] = float32(rng.NormFloat64())
			sp.sinks[h] = float64(opts.Sinks[h])
		}
	}
	// Additive: random values, -Inf on a pattern and on the whole last row
	// of (b=0, h=1), a row with no visible key.
	addAt := func(b, h, t, j int) float32 {
		if (b == 0 && h == 1 && t == L-1) || (b+h+t+j)%5 == 0 {
			return negInf
		}
		return float32(rng.NormFloat64())
	}
	if c.mask {
		opts.Mask = denseMask(B, H, L, S, addAt)
	}
	// Boolean: (B, 1, L, S), broadcast over heads, true blocks.
	var blocks []bool
	if c.bools {
		blocks = make([]bool, B*L*S)
		for i := range blocks {
			blocks[i] = rng.Intn(4) == 0
		}
		opts.BoolMasks = []core.BoolMask{{Shape: core.MaskShape{B, 1, L, S}, Values: blocks, Meaning: core.TrueBlocks}}
	}
	if c.keyLens {
		opts.KeyLengths = []int{S - 1, min(2, S)}[:B]
	}
	if c.queryLens {
		opts.QueryLengths = make([]int, B)
		for b := range opts.QueryLengths {
			opts.QueryLengths[b] = max(L-2*b, 0)
		}
	}
	for b := 0; b < B; b++ {
		for t := 0; t < L; t++ {
			sp.padded[b*L+t] = opts.QueryLengths != nil && t >= opts.QueryLengths[b]
		}
		for h := 0; h < H; h++ {
			for t := 0; t < L; t++ {
				for j := 0; j < S; j++ {
					i := ((b*H+h)*L+t)*S + j
					if opts.Mask != nil {
						sp.add[i] = float64(opts.Mask.Values[i])
					}
					pos := t + S - L // bottom-right aligned position of row t
					vis := true
					if w := c.window; w != nil {
						vis = vis && (w.Left == -1 || j >= pos-w.Left) && (w.Right == -1 || j <= pos+w.Right)
					}
					switch c.causal {
					case core.CausalTopLeft:
						vis = vis && j <= t
					case core.CausalBottomRight:
						vis = vis && j <= pos
					}
					if opts.KeyLengths != nil {
						vis = vis && j < opts.KeyLengths[b]
					}
					if blocks != nil {
						vis = vis && !blocks[(b*L+t)*S+j]
					}
					sp.visible[i] = vis && !math.IsInf(sp.add[i], -1)
				}
			}
		}
	}
	return opts, sp
}

// denseAttention is plain float64 softmax attention over the matrices of sp:
// per row, the visible keys' logits scale*(q.k), soft-capped, plus bias
// and mask, with the sink appended as one more column of the softmax and
// dropped afterwards.
func denseAttention(p problem, sp denseSpec) (o, lse, w []float64) {
	B, H, L, DK := p.qs[0], p.qs[1], p.qs[2], p.qs[3]
	HKV, S, DV := p.ks[1], p.ks[2], p.vs[3]
	o, lse, w = make([]float64, B*H*L*DV), make([]float64, B*H*L), make([]float64, B*H*L*S)
	for b := 0; b < B; b++ {
		for h := 0; h < H; h++ {
			kvh := h * HKV / H
			for t := 0; t < L; t++ {
				row := (b*H+h)*L + t
				lse[row] = math.Inf(-1)
				if sp.padded[b*L+t] {
					continue
				}
				var logits []float64
				var keys []int
				for j := 0; j < S; j++ {
					if !sp.visible[row*S+j] {
						continue
					}
					dot := 0.0
					for i := 0; i < DK; i++ {
						dot += float64(p.q[row*DK+i]) * float64(p.k[((b*HKV+kvh)*S+j)*DK+i])
					}
					s := sp.scale * dot
					if sp.softcap > 0 {
						s = sp.softcap * math.Tanh(s/sp.softcap)
					}
					logits = append(logits, s+sp.bias[(h*L+t)*S+j]+sp.add[row*S+j])
					keys = append(keys, j)
				}
				if sp.sinks != nil {
					logits = append(logits, sp.sinks[h])
				}
				if len(logits) == 0 {
					continue
				}
				m := logits[0]
				for _, x := range logits {
					m = math.Max(m, x)
				}
				z := 0.0
				for _, x := range logits {
					z += math.Exp(x - m)
				}
				lse[row] = m + math.Log(z)
				for n, j := range keys { // the sink column has no key: dropped
					a := math.Exp(logits[n]-m) / z
					w[row*S+j] = a
					for i := 0; i < DV; i++ {
						o[row*DV+i] += a * float64(p.v[((b*HKV+kvh)*S+j)*DV+i])
					}
				}
			}
		}
	}
	return o, lse, w
}

// The reference equals the dense computation for every variant alone and
// combined with causal, masks, lengths and GQA, on shapes with L < S,
// L > S (bottom-right rows that see nothing) and L = S.
func TestVariantsMatchDense(t *testing.T) {
	shapes := []core.Dims{
		{B: 2, H: 4, HKV: 2, L: 5, S: 9, DK: 8, DV: 3},
		{B: 2, H: 4, HKV: 2, L: 7, S: 4, DK: 4, DV: 2},
		{B: 1, H: 6, HKV: 3, L: 1, S: 6, DK: 5, DV: 4},
		{B: 2, H: 3, HKV: 1, L: 6, S: 6, DK: 2, DV: 2},
	}
	win := func(l, r int) *core.Window { return &core.Window{Left: l, Right: r} }
	cases := []variantCase{
		{name: "plain"},
		{name: "softcap", softcap: 0.7},
		{name: "softcap scale 3", softcap: 2, scale: 3},
		{name: "alibi published", alibi: 1},
		{name: "alibi random", alibi: 2},
		{name: "sinks", sinks: true},
		{name: "window (2,1)", window: win(2, 1)},
		{name: "window (0,0)", window: win(0, 0)},
		{name: "window (-1,2)", window: win(-1, 2)},
		{name: "window (3,-1)", window: win(3, -1)},
		{name: "window (1,0) top-left", window: win(1, 0), causal: core.CausalTopLeft},
		{name: "sinks key lengths mask", sinks: true, keyLens: true, mask: true, wantDeadRows: true},
		{name: "softcap alibi mask bools", softcap: 1.5, alibi: 1, mask: true, bools: true},
		{name: "all bottom-right", causal: core.CausalBottomRight, window: win(2, -1), softcap: 1, alibi: 2, sinks: true,
			mask: true, bools: true, keyLens: true, queryLens: true, wantDeadRows: true},
		{name: "all top-left", causal: core.CausalTopLeft, window: win(1, 1), softcap: 0.5, scale: -0.8, alibi: 1, sinks: true,
			keyLens: true, queryLens: true, wantDeadRows: true},
		{name: "sinks window bottom-right", causal: core.CausalBottomRight, window: win(0, 0), sinks: true},
	}
	rng := rand.New(rand.NewSource(41))
	for si, d := range shapes {
		p := newMaskProblem(int64(100+si), d.B, d.H, d.HKV, d.L, d.S, d.DK, d.DV)
		for _, c := range cases {
			name := fmt.Sprintf("%v/%s", d, c.name)
			opts, sp := buildCase(rng, c, d)
			r, err := Attention(p.q, p.qs, p.k, p.ks, p.v, p.vs, opts)
			if err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			noNaN(t, r)
			o, lse, w := denseAttention(p, sp)
			testutil.Near(t, name+" O", r.O, o, 1e-12)
			testutil.Near(t, name+" LSE", r.LSE, lse, 1e-12)
			testutil.Near(t, name+" weights", r.Weights, w, 1e-12)
			if c.wantDeadRows && deadRows(sp, d) == 0 {
				t.Fatalf("%s: no fully masked row to check", name)
			}
		}
	}
}

// deadRows counts the unpadded rows of sp that see no key.
func deadRows(sp denseSpec, d core.Dims) int {
	n := 0
	for row := 0; row < d.B*d.H*d.L; row++ {
		b, t := row/(d.H*d.L), row%d.L
		if sp.padded[b*d.L+t] {
			continue
		}
		seen := false
		for _, v := range sp.visible[row*d.S : (row+1)*d.S] {
			seen = seen || v
		}
		if !seen {
			n++
		}
	}
	return n
}

// propertyProblems are random problems with L < S, L > S and L = S, all
// with GQA (H=4, H_kv=2).
func propertyProblems() []problem {
	return []problem{
		newMaskProblem(51, 2, 4, 2, 3, 7, 4, 3),
		newMaskProblem(52, 2, 4, 2, 6, 3, 4, 2),
		newMaskProblem(53, 1, 4, 2, 5, 5, 3, 3),
	}
}

// baseOptions are option sets the variants are layered on, each with its
// name; lengths assume B = 2 or B = 1 and S >= 3.
func baseOptions(p problem) map[string]core.Options {
	B, H, L, S := p.qs[0], p.qs[1], p.qs[2], p.ks[2]
	rng := rand.New(rand.NewSource(int64(7 * S)))
	mask := denseMask(B, H, L, S, func(b, h, t, j int) float32 {
		if (b == 0 && t == 0) || (t+j)%4 == 1 { // row (0, h, 0) sees nothing
			return negInf
		}
		return float32(rng.NormFloat64())
	})
	keyLens := []int{S, 2}[:B]
	return map[string]core.Options{
		"none":         {},
		"bottom-right": {Causal: core.CausalBottomRight},
		"top-left":     {Causal: core.CausalTopLeft, Mask: mask},
		"key lengths":  {KeyLengths: keyLens, QueryLengths: []int{L, L - 1}[:B]},
		"everything": {Causal: core.CausalBottomRight, Mask: mask, KeyLengths: keyLens,
			Softcap: 1, ALiBi: core.ALiBiSlopes(H), Sinks: []float32{0.5, -1, 1, 0}},
	}
}

// A softcap far above every score changes them by s^3/(3c^2): nothing.
func TestSoftcapHugeIsNone(t *testing.T) {
	for _, p := range propertyProblems() {
		for name, opts := range baseOptions(p) {
			if opts.Softcap > 0 {
				continue
			}
			capped := opts
			capped.Softcap = 1e6
			a, b := p.run(t, opts), p.run(t, capped)
			testutil.Near(t, name+" O", b.O, a.O, 1e-9)
			testutil.Near(t, name+" LSE", b.LSE, a.LSE, 1e-9)
			testutil.Near(t, name+" weights", b.Weights, a.Weights, 1e-9)
		}
	}
}

// Window (-1, -1) bounds nothing; (-1, 0) is CausalBottomRight, bit for bit.
func TestWindowEquivalences(t *testing.T) {
	for _, p := range propertyProblems() {
		for name, opts := range baseOptions(p) {
			w := opts
			w.Window = &core.Window{Left: -1, Right: -1}
			same(t, name+": window (-1,-1) vs none", p.run(t, w), p.run(t, opts))
			if opts.Causal != core.NotCausal {
				continue
			}
			w.Window = &core.Window{Left: -1, Right: 0}
			c := opts
			c.Causal = core.CausalBottomRight
			same(t, name+": window (-1,0) vs bottom-right", p.run(t, w), p.run(t, c))
		}
	}
}

// Sinks of -1e30 add exp(-1e30 - m) = 0 to every live row: the same result
// as no sinks, except that a row with no visible key has LSE = the sink.
func TestSinksFarBelowAreNone(t *testing.T) {
	for _, p := range propertyProblems() {
		H := p.qs[1]
		for name, opts := range baseOptions(p) {
			if opts.Sinks != nil {
				continue
			}
			s := opts
			s.Sinks = make([]float32, H)
			for h := range s.Sinks {
				s.Sinks[h] = -1e30
			}
			a, b := p.run(t, opts), p.run(t, s)
			testutil.Near(t, name+" O", b.O, a.O, 0)
			testutil.Near(t, name+" weights", b.Weights, a.Weights, 0)
			for row := range a.LSE {
				want := a.LSE[row]
				if rowSum(a, row) == 0 && !padded(opts, a.Dims, row) {
					want = float64(float32(-1e30))
				}
				testutil.Near(t, fmt.Sprintf("%s LSE row %d", name, row), b.LSE[row:row+1], []float64{want}, 0)
			}
		}
	}
}

func rowSum(r *Result, row int) float64 { return sum(r.Weights[row*r.Dims.S : (row+1)*r.Dims.S]) }

func padded(opts core.Options, d core.Dims, row int) bool {
	return opts.QueryLengths != nil && row%d.L >= opts.QueryLengths[row/(d.H*d.L)]
}

// With sinks a live row's weights sum to less than 1: the sink takes
// exp(sink - LSE) of it, and LSE = log(exp(LSE without sinks) + exp(sink)).
// A row that sees no key has zero output and LSE = the sink; a padded row
// keeps -Inf.
func TestSinksRows(t *testing.T) {
	for _, p := range propertyProblems() {
		d := p.run(t, core.Options{}).Dims
		for name, opts := range baseOptions(p) {
			opts.Sinks = []float32{0.5, -1, 1.5, 0}
			s := opts
			s.Sinks = nil
			a, r := p.run(t, s), p.run(t, opts)
			dead := 0
			for row := range r.LSE {
				h := row / d.L % d.H
				sink := float64(opts.Sinks[h])
				o := r.O[row*d.DV : (row+1)*d.DV]
				switch {
				case padded(opts, d, row):
					testutil.Near(t, name+" padded LSE", r.LSE[row:row+1], []float64{math.Inf(-1)}, 0)
					testutil.Near(t, name+" padded O", o, make([]float64, d.DV), 0)
				case rowSum(a, row) == 0: // no visible key
					dead++
					testutil.Near(t, name+" dead LSE", r.LSE[row:row+1], []float64{sink}, 0)
					testutil.Near(t, name+" dead O", o, make([]float64, d.DV), 0)
					testutil.Near(t, name+" dead weights", r.Weights[row*d.S:(row+1)*d.S], make([]float64, d.S), 0)
				default:
					ws := rowSum(r, row)
					if !(ws > 0 && ws < 1) {
						t.Fatalf("%s row %d: weights sum to %v, want in (0, 1)", name, row, ws)
					}
					testutil.Near(t, name+" sink share", []float64{1 - ws}, []float64{math.Exp(sink - r.LSE[row])}, 1e-12)
					want := math.Max(a.LSE[row], sink) + math.Log1p(math.Exp(-math.Abs(a.LSE[row]-sink)))
					testutil.Near(t, name+" LSE", r.LSE[row:row+1], []float64{want}, 1e-12)
				}
			}
			if name == "everything" && dead == 0 {
				t.Fatalf("%s: no fully masked row to check", name)
			}
		}
	}
}

// The reference refuses bad variants with CheckProblem's errors, unchanged.
func TestVariantErrors(t *testing.T) {
	p := newMaskProblem(61, 1, 4, 2, 2, 3, 2, 2) // H = 4, H_kv = 2
	nan, inf := float32(math.NaN()), float32(math.Inf(1))
	for _, c := range []struct {
		name string
		opts core.Options
		want error
		msg  string
	}{
		{"sinks per KV head", core.Options{Sinks: []float32{0, 0}}, core.ErrShape, "sinks: 2 values"},
		{"ALiBi too many", core.Options{ALiBi: make([]float32, 5)}, core.ErrShape, "ALiBi slopes: 5 values"},
		{"sink NaN", core.Options{Sinks: []float32{0, nan, 0, 0}}, core.ErrNonFinite, "sinks value 1"},
		{"ALiBi Inf", core.Options{ALiBi: []float32{0, 0, 0, inf}}, core.ErrNonFinite, "ALiBi slopes value 3"},
		{"window left", core.Options{Window: &core.Window{Left: -2, Right: 0}}, core.ErrOption, "window (-2, 0)"},
		{"window right", core.Options{Window: &core.Window{Left: 0, Right: -3}}, core.ErrOption, "window (0, -3)"},
		{"softcap negative", core.Options{Softcap: -1}, core.ErrOption, "softcap -1"},
		{"softcap NaN", core.Options{Softcap: math.NaN()}, core.ErrOption, "softcap NaN"},
		{"softcap Inf", core.Options{Softcap: math.Inf(1)}, core.ErrOption, "softcap +Inf"},
		{"softcap beyond float32", core.Options{Softcap: 1e39}, core.ErrOption, "softcap 1e+39"},
	} {
		r, err := Attention(p.q, p.qs, p.k, p.ks, p.v, p.vs, c.opts)
		if r != nil {
			t.Fatalf("%s: got a result", c.name)
		}
		wantError(t, err, c.want, c.msg)
		_, cerr := core.CheckProblem(p.qs, p.ks, p.vs, &c.opts)
		if cerr == nil || cerr.Error() != err.Error() || !errors.Is(cerr, c.want) {
			t.Fatalf("%s: %q, CheckProblem said %v", c.name, err, cerr)
		}
	}
}
