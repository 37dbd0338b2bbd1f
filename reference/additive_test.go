package reference

import (
	"math"
	"math/rand"
	"testing"

	"github.com/vkattn/vkattn/core"
	"github.com/vkattn/vkattn/internal/random"
	"github.com/vkattn/vkattn/internal/testutil"
	"github.com/vkattn/vkattn/internal/verdict"
)

// atanhHalf is a = atanh(1/2) = ln(3)/2, so tanh(a) = 1/2 and tanh(2a) =
// (9-1)/(9+1) = 4/5. As float32 it is off by ~1e-8, hence the 1e-7
// tolerances of the hand-worked cases.
var atanhHalf = float32(math.Log(3) / 2)

func mustAdditive(t *testing.T, q []float32, qs [3]int, k []float32, ks [3]int, v []float32, vs [3]int, w *core.AdditiveWeights, opts core.Options) *Result {
	t.Helper()
	r, err := AdditiveAttention(q, qs, k, ks, v, vs, w, opts)
	if err != nil {
		t.Fatalf("AdditiveAttention: %v", err)
	}
	noNaN(t, r)
	return r
}

// Hand-worked: only the keys matter.
//
//	W_q = W_k = I (2x2), b = 0, w_a = [1 1], q = [0 0]
//	K = [[0 0] [a 0] [a a]]  ->  tanh(q W_q + k_j W_k) = [0 0], [1/2 0], [1/2 1/2]
//	e = [0, 1/2, 1]
//	A = [1, e^(1/2), e] / Z, Z = 1 + e^(1/2) + e = 5.367003...
//	  = [0.186323723, 0.307195886, 0.506480391]
//	V = [[1 0] [0 1] [1 1]]  ->  O = [(1+e)/Z, (e^(1/2)+e)/Z] = [0.692804114, 0.813676277]
//	LSE = ln Z = 1.680269671
func TestAdditiveGoldenKeys(t *testing.T) {
	a := atanhHalf
	w := &core.AdditiveWeights{DQ: 2, DK: 2, DA: 2, WQ: []float32{1, 0, 0, 1}, WK: []float32{1, 0, 0, 1}, Bias: []float32{0, 0}, WA: []float32{1, 1}}
	r := mustAdditive(t, []float32{0, 0}, [3]int{1, 1, 2}, []float32{0, 0, a, 0, a, a}, [3]int{1, 3, 2},
		[]float32{1, 0, 0, 1, 1, 1}, [3]int{1, 3, 2}, w, core.Options{})
	e, eh := math.E, math.Exp(0.5)
	z := 1 + eh + e
	testutil.Near(t, "A", r.Weights, []float64{1 / z, eh / z, e / z}, 1e-7)
	testutil.Near(t, "A digits", r.Weights, []float64{0.186323723, 0.307195886, 0.506480391}, 1e-7)
	testutil.Near(t, "O", r.O, []float64{(1 + e) / z, (eh + e) / z}, 1e-7)
	testutil.Near(t, "O digits", r.O, []float64{0.692804114, 0.813676277}, 1e-7)
	testutil.Near(t, "LSE", r.LSE, []float64{math.Log(z)}, 1e-7)
	if want := (core.Dims{B: 1, H: 1, HKV: 1, L: 1, S: 3, DK: 2, DV: 2}); r.Dims != want {
		t.Fatalf("Dims %v, want %v", r.Dims, want)
	}
}

// Hand-worked: query and key interact, w_a has mixed signs, and the masks
// act as for SDPA.
//
//	d_q = d_k = 1, d_a = 2: W_q = [[1 -1]], W_k = [[1 1]], b = 0, w_a = [2 -1]
//	q = [a];  K = [[-a] [a] [0]];  V = [[1] [2] [4]]
//	key 0: q W_q + k W_k = (a-a, -a-a) = (0, -2a) -> tanh (0, -4/5)  -> e = 0.8
//	key 1: (2a, 0)  -> (4/5, 0)    -> e = 1.6
//	key 2: (a, -a)  -> (1/2, -1/2) -> e = 1 + 1/2 = 1.5
//	A = softmax [0.8 1.6 1.5] = [0.190865424, 0.424778812, 0.384355764]
//	O = 1*A0 + 2*A1 + 4*A2 = 2.577846104, LSE = 2.456186687
//	key length 2: A = [1, e^0.8] / (1 + e^0.8) = [0.310025519, 0.689974481, 0],
//	    O = 1.689974481
//	causal top-left (L=1 < S=3): query 0 sees key 0 only: A = [1 0 0], O = 1
//	causal bottom-right: the last query sees every key, as unmasked
//	additive mask [0, -inf, -1.5]: softmax [0.8, 1.6-inf, 0] = [e^0.8, 0, 1] / (1 + e^0.8)
//	    = [0.689974481, 0, 0.310025519], O = 0.689974481 + 4*0.310025519 = 1.930076557
func TestAdditiveGoldenQuery(t *testing.T) {
	a := atanhHalf
	w := &core.AdditiveWeights{DQ: 1, DK: 1, DA: 2, WQ: []float32{1, -1}, WK: []float32{1, 1}, WA: []float32{2, -1}}
	run := func(opts core.Options) *Result {
		return mustAdditive(t, []float32{a}, [3]int{1, 1, 1}, []float32{-a, a, 0}, [3]int{1, 3, 1}, []float32{1, 2, 4}, [3]int{1, 3, 1}, w, opts)
	}
	r := run(core.Options{})
	testutil.Near(t, "A", r.Weights, []float64{0.190865424, 0.424778812, 0.384355764}, 1e-7)
	testutil.Near(t, "O", r.O, []float64{2.577846104}, 1e-7)
	testutil.Near(t, "LSE", r.LSE, []float64{2.456186687}, 1e-7)

	r = run(core.Options{KeyLengths: []int{2}})
	testutil.Near(t, "key length A", r.Weights, []float64{0.310025519, 0.689974481, 0}, 1e-7)
	testutil.Near(t, "key length O", r.O, []float64{1.689974481}, 1e-7)

	r = run(core.Options{Causal: core.CausalTopLeft})
	testutil.Near(t, "top-left A", r.Weights, []float64{1, 0, 0}, 0)
	testutil.Near(t, "top-left O", r.O, []float64{1}, 0)
	testutil.Near(t, "top-left LSE", r.LSE, []float64{0.8}, 1e-7)

	same(t, "bottom-right", run(core.Options{Causal: core.CausalBottomRight}), run(core.Options{}))

	m := &core.Mask{Shape: core.MaskShape{1, 1, 1, 3}, Values: []float32{0, negInf, -1.5}}
	r = run(core.Options{Mask: m})
	testutil.Near(t, "mask A", r.Weights, []float64{0.689974481, 0, 0.310025519}, 1e-7)
	testutil.Near(t, "mask O", r.O, []float64{1.930076557}, 1e-7)

	// The same block as a boolean mask of either meaning.
	blocks := core.BoolMask{Shape: core.MaskShape{1, 1, 1, 3}, Values: []bool{false, false, true}, Meaning: core.TrueBlocks}
	allows := core.BoolMask{Shape: core.MaskShape{1, 1, 1, 3}, Values: []bool{true, true, false}, Meaning: core.TrueAllows}
	same(t, "true-blocks vs key length", run(core.Options{BoolMasks: []core.BoolMask{blocks}}), run(core.Options{KeyLengths: []int{2}}))
	same(t, "true-allows vs key length", run(core.Options{BoolMasks: []core.BoolMask{allows}}), run(core.Options{KeyLengths: []int{2}}))

	// Every key masked, or the query padded: zeros and -Inf, never NaN.
	for _, opts := range []core.Options{{KeyLengths: []int{0}}, {QueryLengths: []int{0}}} {
		r = run(opts)
		testutil.Near(t, "masked row A", r.Weights, []float64{0, 0, 0}, 0)
		testutil.Near(t, "masked row O", r.O, []float64{0}, 0)
		testutil.Near(t, "masked row LSE", r.LSE, []float64{math.Inf(-1)}, 0)
	}
}

// Hand-worked: the bias alone. W_q = W_k = 0, b = [a], w_a = [2]: every
// score is 2 tanh(a) = 1 whatever q and k, so the weights are uniform and
// the output is the mean value row. A bias of 1e30 saturates tanh to 1:
// same answer, no overflow.
func TestAdditiveGoldenBias(t *testing.T) {
	q := []float32{3, -7, 0.5, 2} // (B=2, L=2, d_q=1)
	k := []float32{1, 2, 3, -1, -2, -3}
	v := []float32{
		1, 2, // batch 0
		3, 4,
		5, 9,
		0, 0, // batch 1
		3, 3,
		6, -3,
	}
	for _, bias := range []float32{atanhHalf, 1e30} {
		w := &core.AdditiveWeights{DQ: 1, DK: 1, DA: 1, WQ: []float32{0}, WK: []float32{0}, Bias: []float32{bias}, WA: []float32{2}}
		r := mustAdditive(t, q, [3]int{2, 2, 1}, k, [3]int{2, 3, 1}, v, [3]int{2, 3, 2}, w, core.Options{})
		third := 1.0 / 3
		testutil.Near(t, "A", r.Weights, []float64{third, third, third, third, third, third, third, third, third, third, third, third}, 1e-15)
		testutil.Near(t, "O", r.O, []float64{3, 5, 3, 5, 3, 0, 3, 0}, 1e-14)
		score := 2 * math.Tanh(float64(bias))
		testutil.Near(t, "LSE", r.LSE, []float64{score + math.Log(3), score + math.Log(3), score + math.Log(3), score + math.Log(3)}, 1e-14)
	}
}

type additiveProblem struct {
	B, L, S, DQ, DK, DA, DV int
	q, k, v                 []float32
	w                       *core.AdditiveWeights
}

func newAdditiveProblem(seed int64, B, L, S, DQ, DK, DA, DV int) additiveProblem {
	r := rand.New(rand.NewSource(seed))
	return additiveProblem{
		B: B, L: L, S: S, DQ: DQ, DK: DK, DA: DA, DV: DV,
		q: random.Normal(r, B*L*DQ), k: random.Normal(r, B*S*DK), v: random.Normal(r, B*S*DV),
		w: &core.AdditiveWeights{DQ: DQ, DK: DK, DA: DA, WQ: random.Normal(r, DQ*DA), WK: random.Normal(r, DK*DA), Bias: random.Normal(r, DA), WA: random.Normal(r, DA)},
	}
}

func (p additiveProblem) run(t *testing.T, opts core.Options) *Result {
	t.Helper()
	return mustAdditive(t, p.q, [3]int{p.B, p.L, p.DQ}, p.k, [3]int{p.B, p.S, p.DK}, p.v, [3]int{p.B, p.S, p.DV}, p.w, opts)
}

// scores computes e_{t,j} by the formula, independently of AdditiveAttention.
func (p additiveProblem) scores() []float64 {
	e := make([]float64, p.B*p.L*p.S)
	for b := 0; b < p.B; b++ {
		for t := 0; t < p.L; t++ {
			for j := 0; j < p.S; j++ {
				for a := 0; a < p.DA; a++ {
					x := float64(p.w.Bias[a])
					for i := 0; i < p.DQ; i++ {
						x += float64(p.q[(b*p.L+t)*p.DQ+i]) * float64(p.w.WQ[i*p.DA+a])
					}
					for i := 0; i < p.DK; i++ {
						x += float64(p.k[(b*p.S+j)*p.DK+i]) * float64(p.w.WK[i*p.DA+a])
					}
					e[(b*p.L+t)*p.S+j] += math.Tanh(x) * float64(p.w.WA[a])
				}
			}
		}
	}
	return e
}

// Additive attention with any masks equals SDPA with zero queries (all dot
// products 0) and the additive scores added to the mask: both score
// functions share one softmax and one masking semantics. Tolerance 1e-6:
// the mask is float32.
func TestAdditiveMatchesSDPAWithScoresAsMask(t *testing.T) {
	const B, L, S, DQ, DK, DA, DV = 2, 4, 5, 3, 2, 6, 3
	p := newAdditiveProblem(11, B, L, S, DQ, DK, DA, DV)
	e := p.scores()
	r := rand.New(rand.NewSource(12))
	userMask := random.Normal(r, L*S)
	userMask[7] = negInf
	bm := make([]bool, B*S)
	for i := range bm {
		bm[i] = r.Intn(4) != 0
	}
	for _, opts := range []core.Options{
		{},
		{Causal: core.CausalTopLeft},
		{Causal: core.CausalBottomRight},
		{KeyLengths: []int{3, 0}, QueryLengths: []int{4, 2}},
		{Mask: &core.Mask{Shape: core.MaskShape{1, 1, L, S}, Values: userMask}},
		{BoolMasks: []core.BoolMask{{Shape: core.MaskShape{B, 1, 1, S}, Values: bm, Meaning: core.TrueAllows}}},
		{BoolMasks: []core.BoolMask{{Shape: core.MaskShape{B, 1, 1, S}, Values: bm, Meaning: core.TrueBlocks}}, Causal: core.CausalTopLeft, KeyLengths: []int{5, 4}},
	} {
		got := p.run(t, opts)
		m := make([]float32, B*L*S)
		for b := 0; b < B; b++ {
			for tt := 0; tt < L; tt++ {
				for j := 0; j < S; j++ {
					m[(b*L+tt)*S+j] = float32(e[(b*L+tt)*S+j] + additive(opts.Mask, b, 0, tt, j))
				}
			}
		}
		sd := opts
		sd.Mask = &core.Mask{Shape: core.MaskShape{B, 1, L, S}, Values: m}
		want := mustRun(t, make([]float32, B*L), [4]int{B, 1, L, 1}, make([]float32, B*S), [4]int{B, 1, S, 1}, p.v, [4]int{B, 1, S, DV}, sd)
		testutil.Near(t, "weights", got.Weights, want.Weights, 1e-6)
		testutil.Near(t, "O", got.O, want.O, 1e-6)
		testutil.Near(t, "LSE", got.LSE, want.LSE, 1e-6)
	}
}

// SEMANTICS.md §15 properties on random problems.
func TestAdditiveProperties(t *testing.T) {
	const B, L, S, DQ, DK, DA, DV = 3, 5, 7, 4, 3, 8, 5
	for seed := int64(20); seed < 25; seed++ {
		p := newAdditiveProblem(seed, B, L, S, DQ, DK, DA, DV)
		r := p.run(t, core.Options{})
		for row := 0; row < B*L; row++ {
			w := r.Weights[row*S : (row+1)*S]
			testutil.Near(t, "row sum", []float64{sum(w)}, []float64{1}, 1e-12)
			b := row / L
			for i := 0; i < DV; i++ {
				lo, hi := math.Inf(1), math.Inf(-1)
				for j := 0; j < S; j++ {
					x := float64(p.v[(b*S+j)*DV+i])
					lo, hi = math.Min(lo, x), math.Max(hi, x)
				}
				if o := r.O[row*DV+i]; !(o >= lo-1e-12 && o <= hi+1e-12) {
					t.Fatalf("seed %d: O[%d,%d] = %v outside [%v, %v]", seed, row, i, o, lo, hi)
				}
			}
		}

		// Weights follow the formula.
		e := p.scores()
		for row := 0; row < B*L; row++ {
			m := math.Inf(-1)
			for _, x := range e[row*S : (row+1)*S] {
				m = math.Max(m, x)
			}
			z := 0.0
			for _, x := range e[row*S : (row+1)*S] {
				z += math.Exp(x - m)
			}
			for j := 0; j < S; j++ {
				testutil.Near(t, "weight", r.Weights[row*S+j:row*S+j+1], []float64{math.Exp(e[row*S+j]-m) / z}, 1e-14)
			}
		}

		// Permuting keys and values together permutes the weights and
		// leaves the output alone.
		perm := rand.New(rand.NewSource(seed)).Perm(S)
		pp := p
		pp.k, pp.v = make([]float32, len(p.k)), make([]float32, len(p.v))
		for b := 0; b < B; b++ {
			for j, src := range perm {
				copy(pp.k[(b*S+j)*DK:(b*S+j+1)*DK], p.k[(b*S+src)*DK:(b*S+src+1)*DK])
				copy(pp.v[(b*S+j)*DV:(b*S+j+1)*DV], p.v[(b*S+src)*DV:(b*S+src+1)*DV])
			}
		}
		rp := pp.run(t, core.Options{})
		testutil.Near(t, "permuted O", rp.O, r.O, 1e-12)
		for row := 0; row < B*L; row++ {
			for j, src := range perm {
				testutil.Near(t, "permuted weights", rp.Weights[row*S+j:row*S+j+1], r.Weights[row*S+src:row*S+src+1], 1e-15)
			}
		}

		// V + u per row gives O + u; zero V gives zero O.
		u := []float32{1, -2, 0.5, 3, -1}
		pu := p
		pu.v = make([]float32, len(p.v))
		for i := range pu.v {
			pu.v[i] = p.v[i] + u[i%DV]
		}
		ru := pu.run(t, core.Options{})
		for i := range r.O {
			testutil.Near(t, "shifted O", ru.O[i:i+1], []float64{r.O[i] + float64(u[i%DV])}, 1e-6)
		}
		pz := p
		pz.v = make([]float32, len(p.v))
		testutil.Near(t, "zero V", pz.run(t, core.Options{}).O, make([]float64, B*L*DV), 0)

		// w_a = 0 makes every score 0: uniform weights.
		p0 := p
		w0 := *p.w
		w0.WA = make([]float32, DA)
		p0.w = &w0
		r0 := p0.run(t, core.Options{})
		for i, a := range r0.Weights {
			if !verdict.Near(a, 1.0/S, 1e-15) {
				t.Fatalf("w_a = 0: weight %d is %v, want 1/%d", i, a, S)
			}
		}
	}
}

func TestAdditiveErrors(t *testing.T) {
	good := &core.AdditiveWeights{DQ: 2, DK: 3, DA: 4, WQ: make([]float32, 8), WK: make([]float32, 12), Bias: make([]float32, 4), WA: make([]float32, 4)}
	mod := func(f func(w *core.AdditiveWeights)) *core.AdditiveWeights {
		w := *good
		f(&w)
		return &w
	}
	q, k, v := make([]float32, 2*2), make([]float32, 5*3), make([]float32, 5*2)
	qs, ks, vs := [3]int{1, 2, 2}, [3]int{1, 5, 3}, [3]int{1, 5, 2}
	cases := []struct {
		name       string
		w          *core.AdditiveWeights
		q, k, v    []float32
		qs, ks, vs [3]int
		opts       core.Options
		err        error
		msg        string
	}{
		{name: "nil weights", err: core.ErrShape, msg: "nil"},
		{name: "dims", w: mod(func(w *core.AdditiveWeights) { w.DA = 0 }), err: core.ErrEmpty},
		{name: "W_q", w: mod(func(w *core.AdditiveWeights) { w.WQ = make([]float32, 6) }), err: core.ErrShape, msg: "W_q has 6 values, want shape [2 4]"},
		{name: "w_a missing", w: mod(func(w *core.AdditiveWeights) { w.WA = nil }), err: core.ErrShape, msg: "w_a has 0 values"},
		{name: "b", w: mod(func(w *core.AdditiveWeights) { w.Bias = make([]float32, 3) }), err: core.ErrShape, msg: "b has 3 values"},
		{name: "NaN W_k", w: mod(func(w *core.AdditiveWeights) {
			w.WK = []float32{0, 0, 0, 0, 0, float32(math.NaN()), 0, 0, 0, 0, 0, 0}
		}), err: core.ErrNonFinite, msg: "W_k value 5"},
		{name: "scale", opts: core.Options{Scale: core.CustomScale(2)}, err: core.ErrScale},
		{name: "query width", qs: [3]int{1, 1, 4}, err: core.ErrShape, msg: "Q shape [1 1 4] has width 4"},
		{name: "key width", ks: [3]int{1, 5, 5}, err: core.ErrShape, msg: "K shape"},
		{name: "batch", qs: [3]int{2, 1, 2}, err: core.ErrShape, msg: "batch"},
		{name: "positions", vs: [3]int{1, 4, 2}, v: make([]float32, 8), err: core.ErrShape},
		{name: "empty", qs: [3]int{1, 0, 2}, q: []float32{}, err: core.ErrEmpty},
		{name: "length", q: make([]float32, 3), err: core.ErrShape, msg: "Q has 3 values"},
		{name: "non-finite", v: append(make([]float32, 9), float32(math.Inf(1))), err: core.ErrNonFinite, msg: "V value 9"},
		{name: "mask heads", opts: core.Options{Mask: &core.Mask{Shape: core.MaskShape{1, 2, 2, 5}, Values: make([]float32, 20)}}, err: core.ErrMask},
		{name: "mask meaning", opts: core.Options{BoolMasks: []core.BoolMask{{Shape: core.MaskShape{1, 1, 1, 5}, Values: make([]bool, 5)}}}, err: core.ErrMask},
		{name: "lengths", opts: core.Options{KeyLengths: []int{6}}, err: core.ErrLengths},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			w := c.w
			if w == nil && c.name != "nil weights" {
				w = good
			}
			def := func(x *[]float32, d []float32, s *[3]int, ds [3]int) {
				if *x == nil {
					*x = d
				}
				if *s == ([3]int{}) {
					*s = ds
				}
			}
			def(&c.q, q, &c.qs, qs)
			def(&c.k, k, &c.ks, ks)
			def(&c.v, v, &c.vs, vs)
			_, err := AdditiveAttention(c.q, c.qs, c.k, c.ks, c.v, c.vs, w, c.opts)
			wantError(t, err, c.err, c.msg)
		})
	}
}
