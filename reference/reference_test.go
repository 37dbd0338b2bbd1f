package reference

import (
	"errors"
	"math"
	"math/rand"
	"testing"

	"github.com/vkattn/vkattn/core"
	"github.com/vkattn/vkattn/internal/random"
	"github.com/vkattn/vkattn/internal/testutil"
	"github.com/vkattn/vkattn/internal/verdict"
)

var negInf = float32(math.Inf(-1))

func mustRun(t *testing.T, q []float32, qs [4]int, k []float32, ks [4]int, v []float32, vs [4]int, opts core.Options) *Result {
	t.Helper()
	r, err := Attention(q, qs, k, ks, v, vs, opts)
	if err != nil {
		t.Fatalf("Attention: %v", err)
	}
	noNaN(t, r)
	return r
}

// noNaN checks the reference never produces NaN, in particular for fully
// masked rows.
func noNaN(t *testing.T, r *Result) {
	t.Helper()
	for name, xs := range map[string][]float64{"O": r.O, "LSE": r.LSE, "Weights": r.Weights} {
		for i, x := range xs {
			if math.IsNaN(x) {
				t.Fatalf("%s[%d] is NaN", name, i)
			}
		}
	}
}

// same requires bit-for-bit equal results: used where two ways of stating a
// mask must take exactly the same arithmetic path.
func same(t *testing.T, what string, a, b *Result) {
	t.Helper()
	testutil.Near(t, what+" O", a.O, b.O, 0)
	testutil.Near(t, what+" LSE", a.LSE, b.LSE, 0)
	testutil.Near(t, what+" Weights", a.Weights, b.Weights, 0)
}

// matmul is (n,m) x (m,p) in float32; the small inputs below are integers,
// so it is exact.
func matmul(a []float32, n, m int, b []float32, p int) []float32 {
	c := make([]float32, n*p)
	for i := 0; i < n; i++ {
		for j := 0; j < p; j++ {
			for l := 0; l < m; l++ {
				c[i*p+j] += a[i*m+l] * b[l*p+j]
			}
		}
	}
	return c
}

func sum(xs []float64) float64 {
	s := 0.0
	for _, x := range xs {
		s += x
	}
	return s
}

// Golden values of seed 000, SEMANTICS.md §18 (B=L=1, S=3, d_k=d_v=2).
func TestGoldenSeed000(t *testing.T) {
	q := []float32{1, 0}
	k := []float32{1, 0, 0, 1, 1, 1}
	v := []float32{2, 0, 0, 4, 2, 2}
	qs, ks, vs := [4]int{1, 1, 1, 2}, [4]int{1, 1, 3, 2}, [4]int{1, 1, 3, 2}

	r := mustRun(t, q, qs, k, ks, v, vs, core.Options{})
	// Rounded values as SEMANTICS.md §18 prints them.
	testutil.Near(t, "A", r.Weights, []float64{0.4011, 0.1978, 0.4011}, 1e-4)
	testutil.Near(t, "O", r.O, []float64{1.6044, 1.5933}, 1e-4)
	// Closed form: scaled scores [1/sqrt2, 0, 1/sqrt2].
	c := math.Exp(1 / math.Sqrt2)
	testutil.Near(t, "A exact", r.Weights, []float64{c / (2*c + 1), 1 / (2*c + 1), c / (2*c + 1)}, 1e-15)
	testutil.Near(t, "LSE", r.LSE, []float64{math.Log(2*c + 1)}, 1e-15)

	// SEMANTICS.md §18: with M = [0 0 -inf].
	m := &core.Mask{Shape: core.MaskShape{1, 1, 1, 3}, Values: []float32{0, 0, negInf}}
	r = mustRun(t, q, qs, k, ks, v, vs, core.Options{Mask: m})
	testutil.Near(t, "masked A", r.Weights, []float64{0.6698, 0.3302, 0}, 1e-4)
	testutil.Near(t, "masked O", r.O, []float64{1.3395, 1.3210}, 1e-4)
	testutil.Near(t, "masked LSE", r.LSE, []float64{math.Log(c + 1)}, 1e-15)

	// SEMANTICS.md §18: weights (0.5, 0.25, 0.25) over the same V give (1.5, 1.5).
	// A zero query makes the scores equal the additive mask [ln2 0 0].
	m = &core.Mask{Shape: core.MaskShape{1, 1, 1, 3}, Values: []float32{float32(math.Ln2), 0, 0}}
	r = mustRun(t, []float32{0, 0}, qs, k, ks, v, vs, core.Options{Mask: m})
	testutil.Near(t, "weighted A", r.Weights, []float64{0.5, 0.25, 0.25}, 1e-7)
	testutil.Near(t, "weighted O", r.O, []float64{1.5, 1.5}, 1e-6)
}

// seed003 builds the seed 003 self-attention problem (SEMANTICS.md §18) from X and
// the projection matrices (T=3, widths 2).
func seed003(wv []float32) (q, k, v []float32) {
	x := []float32{1, 0, 0, 1, 1, 1}
	wq := []float32{1, 0, 0, 1}
	wk := []float32{1, 1, 0, 1}
	return matmul(x, 3, 2, wq, 2), matmul(x, 3, 2, wk, 2), matmul(x, 3, 2, wv, 2)
}

// Golden values of seed 003, SEMANTICS.md §18.
func TestGoldenSeed003(t *testing.T) {
	s := [4]int{1, 1, 3, 2}
	wv := []float32{1, 0, 1, 2}
	q, k, v := seed003(wv)
	testutil.Near(t, "Q", widen(q), []float64{1, 0, 0, 1, 1, 1}, 0)
	testutil.Near(t, "K", widen(k), []float64{1, 1, 0, 1, 1, 2}, 0)
	testutil.Near(t, "V", widen(v), []float64{1, 0, 1, 2, 2, 2}, 0)

	r := mustRun(t, q, s, k, s, v, s, core.Options{})
	wantA := []float64{
		0.401112, 0.197776, 0.401112,
		0.248255, 0.248255, 0.503490,
		0.283995, 0.140029, 0.575975,
	}
	testutil.Near(t, "A", r.Weights, wantA, 1e-6)
	testutil.Near(t, "O", r.O, []float64{1.401112, 1.197776, 1.503490, 1.503490, 1.575975, 1.432009}, 1e-6)

	// Zero W_V: O all zeros, A unchanged.
	_, _, v0 := seed003([]float32{0, 0, 0, 0})
	r0 := mustRun(t, q, s, k, s, v0, s, core.Options{})
	testutil.Near(t, "zero W_V O", r0.O, make([]float64, 6), 0)
	testutil.Near(t, "zero W_V A", r0.Weights, r.Weights, 0)

	// V + [2,-1] per row: O + [2,-1]; first row to full precision.
	vs := append([]float32(nil), v...)
	for i := range vs {
		vs[i] += []float32{2, -1}[i%2]
	}
	rs := mustRun(t, q, s, k, s, vs, s, core.Options{})
	testutil.Near(t, "shifted O row 0", rs.O[:2], []float64{3.401112092679786, 0.1977758146404283}, 1e-14)
	for i := range r.O {
		testutil.Near(t, "shifted O", rs.O[i:i+1], []float64{r.O[i] + []float64{2, -1}[i%2]}, 1e-14)
	}

	// Third query [0,0]: uniform weights, output mean of V = [4/3 4/3].
	qz := append([]float32(nil), q...)
	qz[4], qz[5] = 0, 0
	rz := mustRun(t, qz, s, k, s, v, s, core.Options{})
	testutil.Near(t, "zero-query A", rz.Weights[6:], []float64{1.0 / 3, 1.0 / 3, 1.0 / 3}, 1e-15)
	testutil.Near(t, "zero-query O", rz.O[4:], []float64{4.0 / 3, 4.0 / 3}, 1e-15)
}

// SEMANTICS.md §18: Q, K (5,4), V (5,3): divisor sqrt(4) = 2, scores (5,5),
// output (5,3). Query t is [t 0 0 0] and only key 1 is [1 0 0 0] (the others
// are zero), so row t's scores are [0 t/2 0 0 0] and its weights are
// [1, e^(t/2), 1, 1, 1] / (4 + e^(t/2)). A divisor of sqrt(5) or sqrt(3)
// would miss these by far more than the tolerance.
func TestGoldenDivisor(t *testing.T) {
	q := make([]float32, 5*4)
	for i := 0; i < 5; i++ {
		q[i*4] = float32(i)
	}
	k := make([]float32, 5*4)
	k[1*4] = 1
	v := []float32{
		1, 0, 0,
		0, 1, 0,
		0, 0, 1,
		1, 1, 0,
		0, 1, 1,
	}
	r := mustRun(t, q, [4]int{1, 1, 5, 4}, k, [4]int{1, 1, 5, 4}, v, [4]int{1, 1, 5, 3}, core.Options{})
	if d := (core.Dims{B: 1, H: 1, HKV: 1, L: 5, S: 5, DK: 4, DV: 3}); r.Dims != d {
		t.Fatalf("Dims = %v, want %v", r.Dims, d)
	}
	if len(r.O) != 15 || len(r.Weights) != 25 || len(r.LSE) != 5 {
		t.Fatalf("lens O %d Weights %d LSE %d, want 15 25 5", len(r.O), len(r.Weights), len(r.LSE))
	}
	for i := 0; i < 5; i++ {
		x := math.Exp(float64(i) / 2)
		z := 4 + x
		a := []float64{1 / z, x / z, 1 / z, 1 / z, 1 / z}
		testutil.Near(t, "A row", r.Weights[i*5:i*5+5], a, 1e-15)
		// O = a0*v0 + a1*v1 + a2*v2 + a3*v3 + a4*v4.
		o := []float64{a[0] + a[3], a[1] + a[3] + a[4], a[2] + a[4]}
		testutil.Near(t, "O row", r.O[i*3:i*3+3], o, 1e-15)
		testutil.Near(t, "LSE", r.LSE[i:i+1], []float64{math.Log(z)}, 1e-15)
	}
}

// Properties of SEMANTICS.md §15 on random inputs.
func TestProperties(t *testing.T) {
	rng := rand.New(rand.NewSource(1))
	const B, H, HKV, L, S, DK, DV = 2, 4, 2, 5, 7, 4, 3
	qs, ks, vs := [4]int{B, H, L, DK}, [4]int{B, HKV, S, DK}, [4]int{B, HKV, S, DV}
	q, k := random.Normal(rng, B*H*L*DK), random.Normal(rng, B*HKV*S*DK)
	// Multiples of 1/64 so that adding the shift below is exact in float32.
	v := make([]float32, B*HKV*S*DV)
	for i := range v {
		v[i] = float32(math.Round(rng.NormFloat64()*64) / 64)
	}

	for _, causal := range []core.Causal{core.NotCausal, core.CausalTopLeft, core.CausalBottomRight} {
		opts := core.Options{Causal: causal}
		r := mustRun(t, q, qs, k, ks, v, vs, opts)
		for b := 0; b < B; b++ {
			for h := 0; h < H; h++ {
				for l := 0; l < L; l++ {
					row := (b*H+h)*L + l
					w := r.Weights[row*S : row*S+S]
					for _, x := range w {
						if x < 0 {
							t.Fatalf("%v: negative weight %v", causal, x)
						}
					}
					if s := sum(w); !verdict.Near(s, 1, 1e-12) {
						t.Fatalf("%v: row %d weights sum to %v", causal, row, s)
					}
					kv := b*HKV + h/(H/HKV)
					for i := 0; i < DV; i++ {
						lo, hi := math.Inf(1), math.Inf(-1)
						for j := 0; j < S; j++ {
							x := float64(v[(kv*S+j)*DV+i])
							lo, hi = math.Min(lo, x), math.Max(hi, x)
						}
						if o := r.O[row*DV+i]; !(o >= lo-1e-12 && o <= hi+1e-12) {
							t.Fatalf("%v: O[%d,%d] = %v outside [%v, %v]", causal, row, i, o, lo, hi)
						}
					}
				}
			}
		}

		// Adding u to every value row adds u to every output row.
		u := []float32{2, -1, 0.5}
		vu := append([]float32(nil), v...)
		for i := range vu {
			vu[i] += u[i%DV]
		}
		ru := mustRun(t, q, qs, k, ks, vu, vs, opts)
		for i := range r.O {
			testutil.Near(t, "value shift", ru.O[i:i+1], []float64{r.O[i] + float64(u[i%DV])}, 1e-12)
		}
		testutil.Near(t, "value shift weights", ru.Weights, r.Weights, 0)

		// Zero values give zero output whatever the weights.
		rz := mustRun(t, q, qs, k, ks, make([]float32, len(v)), vs, opts)
		testutil.Near(t, "zero values", rz.O, make([]float64, len(r.O)), 0)
	}

	// A zero query gives uniform weights and LSE log(S).
	r := mustRun(t, make([]float32, len(q)), qs, k, ks, v, vs, core.Options{})
	for i, w := range r.Weights {
		if !verdict.Near(w, 1.0/S, 1e-15) {
			t.Fatalf("zero query: weight %d = %v, want 1/%d", i, w, S)
		}
	}
	for i, x := range r.LSE {
		if !verdict.Near(x, math.Log(S), 1e-14) {
			t.Fatalf("zero query: LSE %d = %v, want log %d", i, x, S)
		}
	}
}

// Permuting the positions of a self-attention input permutes the output
// rows the same way (SEMANTICS.md §15). Q, K and V are row-wise projections of X,
// so permuting X permutes their rows.
func TestPermutationEquivariance(t *testing.T) {
	rng := rand.New(rand.NewSource(2))
	const T, D, DV = 6, 4, 3
	x := random.Normal(rng, T*D)
	wq, wk, wv := random.Normal(rng, D*D), random.Normal(rng, D*D), random.Normal(rng, D*DV)
	perm := rng.Perm(T)
	xp := make([]float32, len(x))
	for i, p := range perm {
		copy(xp[i*D:(i+1)*D], x[p*D:(p+1)*D])
	}
	qk, vs := [4]int{1, 1, T, D}, [4]int{1, 1, T, DV}
	r := mustRun(t, matmul(x, T, D, wq, D), qk, matmul(x, T, D, wk, D), qk, matmul(x, T, D, wv, DV), vs, core.Options{})
	rp := mustRun(t, matmul(xp, T, D, wq, D), qk, matmul(xp, T, D, wk, D), qk, matmul(xp, T, D, wv, DV), vs, core.Options{})
	for i, p := range perm {
		testutil.Near(t, "permuted O", rp.O[i*DV:(i+1)*DV], r.O[p*DV:(p+1)*DV], 1e-12)
		testutil.Near(t, "permuted LSE", rp.LSE[i:i+1], r.LSE[p:p+1], 1e-12)
		for j, pj := range perm {
			testutil.Near(t, "permuted A", rp.Weights[i*T+j:i*T+j+1], r.Weights[p*T+pj:p*T+pj+1], 1e-12)
		}
	}
}

// problem is a random (B,H,L,S) problem for the mask tests.
type problem struct {
	q, k, v    []float32
	qs, ks, vs [4]int
}

// newMaskProblem is a problem of standard normal inputs (random.QKV).
func newMaskProblem(seed int64, B, H, HKV, L, S, DK, DV int) problem {
	in, sh := random.QKV(rand.New(rand.NewSource(seed)), random.Normal, B, H, HKV, L, S, DK, DV)
	return problem{q: in[0], k: in[1], v: in[2], qs: sh[0], ks: sh[1], vs: sh[2]}
}

func (p problem) run(t *testing.T, opts core.Options) *Result {
	t.Helper()
	return mustRun(t, p.q, p.qs, p.k, p.ks, p.v, p.vs, opts)
}

func TestBoolMaskMeaning(t *testing.T) {
	p := newMaskProblem(3, 2, 2, 2, 3, 4, 4, 3)
	rng := rand.New(rand.NewSource(4))
	shape := core.MaskShape{2, 1, 3, 4} // broadcast over heads
	allow := make([]bool, 2*3*4)
	for i := range allow {
		allow[i] = rng.Intn(3) > 0
	}
	allow[0], allow[1], allow[2], allow[3] = false, false, false, false // one fully masked row
	block := make([]bool, len(allow))
	add := make([]float32, len(allow))
	for i, a := range allow {
		block[i] = !a
		if !a {
			add[i] = negInf
		}
	}
	ra := p.run(t, core.Options{BoolMasks: []core.BoolMask{{Shape: shape, Values: allow, Meaning: core.TrueAllows}}})
	rb := p.run(t, core.Options{BoolMasks: []core.BoolMask{{Shape: shape, Values: block, Meaning: core.TrueBlocks}}})
	same(t, "TrueAllows vs inverted TrueBlocks", ra, rb)
	rm := p.run(t, core.Options{Mask: &core.Mask{Shape: shape, Values: add}})
	same(t, "bool block vs additive -Inf", ra, rm)

	// Weights are 0 exactly where blocked; the fully masked row (b=0, t=0)
	// is zeros and -Inf in both heads.
	for b := 0; b < 2; b++ {
		for h := 0; h < 2; h++ {
			for l := 0; l < 3; l++ {
				row := (b*2+h)*3 + l
				for j := 0; j < 4; j++ {
					if w := ra.Weights[row*4+j]; !allow[(b*3+l)*4+j] && w != 0 {
						t.Fatalf("blocked key has weight %v", w)
					} else if allow[(b*3+l)*4+j] && w == 0 {
						t.Fatalf("allowed key has weight 0")
					}
				}
			}
		}
	}
	for _, row := range []int{0, 3} {
		if !math.IsInf(ra.LSE[row], -1) {
			t.Fatalf("fully masked row %d: LSE %v, want -Inf", row, ra.LSE[row])
		}
		testutil.Near(t, "fully masked O", ra.O[row*3:row*3+3], []float64{0, 0, 0}, 0)
	}
}

// Causal masks for L=2, S=4 against hand-written additive masks.
func TestCausal(t *testing.T) {
	p := newMaskProblem(5, 1, 2, 1, 2, 4, 3, 2)
	inf := negInf
	shape := core.MaskShape{1, 1, 2, 4}
	topLeft := []float32{
		0, inf, inf, inf,
		0, 0, inf, inf,
	}
	bottomRight := []float32{
		0, 0, 0, inf,
		0, 0, 0, 0,
	}
	same(t, "top-left", p.run(t, core.Options{Causal: core.CausalTopLeft}),
		p.run(t, core.Options{Mask: &core.Mask{Shape: shape, Values: topLeft}}))
	same(t, "bottom-right", p.run(t, core.Options{Causal: core.CausalBottomRight}),
		p.run(t, core.Options{Mask: &core.Mask{Shape: shape, Values: bottomRight}}))

	// L == S: both alignments are the usual lower-triangular mask.
	sq := newMaskProblem(6, 1, 1, 1, 3, 3, 2, 2)
	tri := &core.Mask{Shape: core.MaskShape{1, 1, 3, 3}, Values: []float32{0, inf, inf, 0, 0, inf, 0, 0, 0}}
	rt := sq.run(t, core.Options{Causal: core.CausalTopLeft})
	same(t, "square top-left", rt, sq.run(t, core.Options{Mask: tri}))
	same(t, "square bottom-right", rt, sq.run(t, core.Options{Causal: core.CausalBottomRight}))

	// L > S bottom-right: query t sees j <= t-2, so rows 0 and 1 see nothing.
	tall := newMaskProblem(7, 1, 1, 1, 4, 2, 2, 2)
	r := tall.run(t, core.Options{Causal: core.CausalBottomRight})
	for row := 0; row < 2; row++ {
		if !math.IsInf(r.LSE[row], -1) {
			t.Fatalf("row %d LSE %v, want -Inf", row, r.LSE[row])
		}
		testutil.Near(t, "empty causal row", r.O[row*2:row*2+2], []float64{0, 0}, 0)
	}
	testutil.Near(t, "row 2 weights", r.Weights[4:6], []float64{1, 0}, 0)
	testutil.Near(t, "row 3 weights sum", []float64{sum(r.Weights[6:8])}, []float64{1}, 1e-15)
}

func TestKeyLengths(t *testing.T) {
	p := newMaskProblem(8, 2, 2, 2, 3, 4, 3, 2)
	r := p.run(t, core.Options{KeyLengths: []int{0, 2}})
	// Batch 0 has no keys: every row zeros, LSE -Inf, weights 0.
	n := 2 * 3 // rows per batch item
	testutil.Near(t, "key length 0 O", r.O[:n*2], make([]float64, n*2), 0)
	testutil.Near(t, "key length 0 weights", r.Weights[:n*4], make([]float64, n*4), 0)
	for i := 0; i < n; i++ {
		if !math.IsInf(r.LSE[i], -1) {
			t.Fatalf("LSE[%d] = %v, want -Inf", i, r.LSE[i])
		}
	}
	inf := negInf
	m := &core.Mask{Shape: core.MaskShape{2, 1, 1, 4}, Values: []float32{inf, inf, inf, inf, 0, 0, inf, inf}}
	same(t, "key lengths vs (B,1,1,S) mask", r, p.run(t, core.Options{Mask: m}))
}

func TestQueryLengths(t *testing.T) {
	p := newMaskProblem(9, 2, 2, 1, 3, 4, 3, 2)
	full := p.run(t, core.Options{})
	r := p.run(t, core.Options{QueryLengths: []int{1, 3}})
	for b := 0; b < 2; b++ {
		for h := 0; h < 2; h++ {
			for l := 0; l < 3; l++ {
				row := (b*2+h)*3 + l
				o, w := r.O[row*2:row*2+2], r.Weights[row*4:row*4+4]
				if l >= []int{1, 3}[b] {
					testutil.Near(t, "padded O", o, []float64{0, 0}, 0)
					testutil.Near(t, "padded weights", w, []float64{0, 0, 0, 0}, 0)
					if !math.IsInf(r.LSE[row], -1) {
						t.Fatalf("padded row %d LSE %v, want -Inf", row, r.LSE[row])
					}
					continue
				}
				testutil.Near(t, "valid O", o, full.O[row*2:row*2+2], 0)
				testutil.Near(t, "valid weights", w, full.Weights[row*4:row*4+4], 0)
				testutil.Near(t, "valid LSE", r.LSE[row:row+1], full.LSE[row:row+1], 0)
			}
		}
	}
}

// Grouped- and multi-query attention equal multi-head attention with each
// K/V head repeated for its H/HKV query heads.
func TestGQA(t *testing.T) {
	const B, H, L, S, DK, DV = 2, 4, 3, 5, 4, 3
	for _, hkv := range []int{1, 2, 4} {
		p := newMaskProblem(10, B, H, hkv, L, S, DK, DV)
		rep := func(x []float32, w int) []float32 {
			var y []float32
			for b := 0; b < B; b++ {
				for h := 0; h < H; h++ {
					kv := b*hkv + h/(H/hkv)
					y = append(y, x[kv*S*w:(kv+1)*S*w]...)
				}
			}
			return y
		}
		opts := core.Options{Causal: core.CausalBottomRight, KeyLengths: []int{5, 3}}
		same(t, "GQA vs repeated MHA", p.run(t, opts),
			mustRun(t, p.q, p.qs, rep(p.k, DK), [4]int{B, H, S, DK}, rep(p.v, DV), [4]int{B, H, S, DV}, opts))
	}
}

func TestCustomScale(t *testing.T) {
	q := []float32{1, 0}
	k := []float32{1, 0, 0, 1, 1, 1}
	v := []float32{2, 0, 0, 4, 2, 2}
	qs, ks := [4]int{1, 1, 1, 2}, [4]int{1, 1, 3, 2}
	// Scale 1 turns the seed 000 scores into Q K^T = [1 0 1].
	r := mustRun(t, q, qs, k, ks, v, ks, core.Options{Scale: core.CustomScale(1)})
	e := math.E
	testutil.Near(t, "scale 1 A", r.Weights, []float64{e / (2*e + 1), 1 / (2*e + 1), e / (2*e + 1)}, 1e-15)
	testutil.Near(t, "scale 1 LSE", r.LSE, []float64{math.Log(2*e + 1)}, 1e-15)
	// Scale 0 makes every score 0: uniform weights.
	r = mustRun(t, q, qs, k, ks, v, ks, core.Options{Scale: core.CustomScale(0)})
	testutil.Near(t, "scale 0 A", r.Weights, []float64{1.0 / 3, 1.0 / 3, 1.0 / 3}, 1e-15)
	// Naming the default explicitly changes nothing.
	same(t, "explicit default scale",
		mustRun(t, q, qs, k, ks, v, ks, core.Options{Scale: core.CustomScale(1 / math.Sqrt(2))}),
		mustRun(t, q, qs, k, ks, v, ks, core.Options{}))
	// Doubling the scale is doubling the query (exact in binary).
	p := newMaskProblem(11, 1, 2, 2, 3, 4, 4, 2)
	q2 := append([]float32(nil), p.q...)
	for i := range q2 {
		q2[i] *= 2
	}
	same(t, "2*scale vs 2*q", p.run(t, core.Options{Scale: core.CustomScale(0.6)}),
		mustRun(t, q2, p.qs, p.k, p.ks, p.v, p.vs, core.Options{Scale: core.CustomScale(0.3)}))
}

// Every kind of mask at once equals the single additive mask that combines
// them by hand; a broadcast mask equals its expansion.
func TestCombinedAndBroadcast(t *testing.T) {
	const B, H, L, S = 2, 2, 3, 5
	p := newMaskProblem(12, B, H, 1, L, S, 4, 3)
	rng := rand.New(rand.NewSource(13))
	add := make([]float32, H*S) // shape (1,H,1,S)
	for i := range add {
		add[i] = float32(rng.NormFloat64())
	}
	add[2] = negInf
	bools := make([]bool, B*L*S) // shape (B,1,L,S), true blocks
	for i := range bools {
		bools[i] = rng.Intn(4) == 0
	}
	keyLen := []int{4, 5}
	opts := core.Options{
		Mask:       &core.Mask{Shape: core.MaskShape{1, H, 1, S}, Values: add},
		BoolMasks:  []core.BoolMask{{Shape: core.MaskShape{B, 1, L, S}, Values: bools, Meaning: core.TrueBlocks}},
		Causal:     core.CausalBottomRight,
		KeyLengths: keyLen,
	}
	full := denseMask(B, H, L, S, func(b, h, l, j int) float32 {
		if bools[(b*L+l)*S+j] || j > l+S-L || j >= keyLen[b] {
			return negInf
		}
		return add[h*S+j]
	})
	expanded := denseMask(B, H, L, S, func(b, h, l, j int) float32 { return add[h*S+j] })
	same(t, "combined masks", p.run(t, opts), p.run(t, core.Options{Mask: full}))
	same(t, "broadcast additive",
		p.run(t, core.Options{Mask: &core.Mask{Shape: core.MaskShape{1, H, 1, S}, Values: add}}),
		p.run(t, core.Options{Mask: expanded}))

	// A per-head boolean mask (1,H,1,S) is read with the query head index.
	perHead := []bool{true, false, true, true, false, false, true, true, false, true}
	headAdd := denseMask(B, H, L, S, func(b, h, l, j int) float32 {
		if !perHead[h*S+j] {
			return negInf
		}
		return 0
	})
	same(t, "per-head bool mask",
		p.run(t, core.Options{BoolMasks: []core.BoolMask{{Shape: core.MaskShape{1, H, 1, S}, Values: perHead, Meaning: core.TrueAllows}}}),
		p.run(t, core.Options{Mask: headAdd}))
}

// denseMask is the (B,H,L,S) additive mask whose element (b,h,l,j) is
// at(b,h,l,j): the hand expansion broadcast and combined masks must equal.
func denseMask(B, H, L, S int, at func(b, h, l, j int) float32) *core.Mask {
	m := &core.Mask{Shape: core.MaskShape{B, H, L, S}, Values: make([]float32, 0, B*H*L*S)}
	for b := 0; b < B; b++ {
		for h := 0; h < H; h++ {
			for l := 0; l < L; l++ {
				for j := 0; j < S; j++ {
					m.Values = append(m.Values, at(b, h, l, j))
				}
			}
		}
	}
	return m
}

// Boolean masks AND: several of either meaning and of different broadcast
// shapes, with an additive mask and causal, equal the one additive mask
// that blocks wherever any of them blocks (SEMANTICS.md §4).
func TestBoolMasksAND(t *testing.T) {
	const B, H, L, S = 2, 3, 4, 5
	p := newMaskProblem(15, B, H, 1, L, S, 4, 3)
	rng := rand.New(rand.NewSource(16))
	bools := func(n int) []bool {
		x := make([]bool, n)
		for i := range x {
			x[i] = rng.Intn(4) == 0
		}
		return x
	}
	add := random.Normal(rng, L*S) // (1,1,L,S)
	allow := bools(H * S)          // (1,H,1,S), true allows
	for i := range allow {
		allow[i] = !allow[i]
	}
	blockRows := bools(B * L) // (B,1,L,1), true blocks
	blockKeys := bools(B * S) // (B,1,1,S), true blocks
	opts := core.Options{
		Mask: &core.Mask{Shape: core.MaskShape{1, 1, L, S}, Values: add},
		BoolMasks: []core.BoolMask{
			{Shape: core.MaskShape{1, H, 1, S}, Values: allow, Meaning: core.TrueAllows},
			{Shape: core.MaskShape{B, 1, L, 1}, Values: blockRows, Meaning: core.TrueBlocks},
			{Shape: core.MaskShape{B, 1, 1, S}, Values: blockKeys, Meaning: core.TrueBlocks},
		},
		Causal: core.CausalBottomRight,
	}
	full := denseMask(B, H, L, S, func(b, h, l, j int) float32 {
		if !allow[h*S+j] || blockRows[b*L+l] || blockKeys[b*S+j] || j > l+S-L {
			return negInf
		}
		return add[l*S+j]
	})
	same(t, "boolean masks AND", p.run(t, opts), p.run(t, core.Options{Mask: full}))

	// Seed 000 (SEMANTICS.md §18): allowing keys 1 and 2 and blocking key 2 leaves
	// key 1: weights (1, 0, 0), output v_1 = (2, 0).
	s := [4]int{1, 1, 3, 2}
	r := mustRun(t, []float32{1, 0}, [4]int{1, 1, 1, 2}, []float32{1, 0, 0, 1, 1, 1}, s, []float32{2, 0, 0, 4, 2, 2}, s, core.Options{BoolMasks: []core.BoolMask{
		{Shape: core.MaskShape{1, 1, 1, 3}, Values: []bool{true, true, false}, Meaning: core.TrueAllows},
		{Shape: core.MaskShape{1, 1, 1, 3}, Values: []bool{false, true, false}, Meaning: core.TrueBlocks},
	}})
	testutil.Near(t, "weights", r.Weights, []float64{1, 0, 0}, 0)
	testutil.Near(t, "O", r.O, []float64{2, 0}, 0)
}

// Large scores must not overflow: the row max is subtracted before exp.
func TestStableSoftmax(t *testing.T) {
	p := newMaskProblem(14, 1, 1, 1, 4, 6, 4, 2)
	for i := range p.q {
		p.q[i] *= 1e4
	}
	r := p.run(t, core.Options{})
	for row := 0; row < 4; row++ {
		if s := sum(r.Weights[row*6 : row*6+6]); !verdict.Near(s, 1, 1e-12) {
			t.Fatalf("row %d weights sum to %v", row, s)
		}
		if math.IsInf(r.LSE[row], 0) {
			t.Fatalf("row %d LSE %v", row, r.LSE[row])
		}
	}
}

func TestErrors(t *testing.T) {
	ok := newMaskProblem(15, 1, 2, 1, 2, 3, 2, 2)
	cases := []struct {
		name       string
		q, k, v    []float32
		qs, ks, vs [4]int
		opts       core.Options
		want       error
	}{
		{"heads", make([]float32, 3*2*2), make([]float32, 2*3*2), make([]float32, 2*3*2),
			[4]int{1, 3, 2, 2}, [4]int{1, 2, 3, 2}, [4]int{1, 2, 3, 2}, core.Options{}, core.ErrHeads},
		{"empty", nil, ok.k, ok.v, [4]int{1, 2, 0, 2}, ok.ks, ok.vs, core.Options{}, core.ErrEmpty},
		{"mask meaning unset", ok.q, ok.k, ok.v, ok.qs, ok.ks, ok.vs,
			core.Options{BoolMasks: []core.BoolMask{{Shape: core.MaskShape{1, 1, 1, 3}, Values: make([]bool, 3)}}}, core.ErrMask},
		{"key length", ok.q, ok.k, ok.v, ok.qs, ok.ks, ok.vs, core.Options{KeyLengths: []int{4}}, core.ErrLengths},
		{"scale", ok.q, ok.k, ok.v, ok.qs, ok.ks, ok.vs, core.Options{Scale: core.CustomScale(math.NaN())}, core.ErrScale},
		{"short q", ok.q[1:], ok.k, ok.v, ok.qs, ok.ks, ok.vs, core.Options{}, core.ErrShape},
		{"long v", ok.q, ok.k, append(append([]float32(nil), ok.v...), 0), ok.qs, ok.ks, ok.vs, core.Options{}, core.ErrShape},
	}
	for _, bad := range []struct {
		which int
		x     float32
	}{{0, float32(math.NaN())}, {1, float32(math.Inf(1))}, {2, negInf}} {
		in := [3][]float32{append([]float32(nil), ok.q...), append([]float32(nil), ok.k...), append([]float32(nil), ok.v...)}
		in[bad.which][1] = bad.x
		cases = append(cases, struct {
			name       string
			q, k, v    []float32
			qs, ks, vs [4]int
			opts       core.Options
			want       error
		}{"non-finite", in[0], in[1], in[2], ok.qs, ok.ks, ok.vs, core.Options{}, core.ErrNonFinite})
	}
	for _, c := range cases {
		r, err := Attention(c.q, c.qs, c.k, c.ks, c.v, c.vs, c.opts)
		if !errors.Is(err, c.want) || r != nil {
			t.Errorf("%s: got (%v, %v), want nil and %v", c.name, r, err, c.want)
			continue
		}
		// CheckProblem's errors pass through unchanged.
		if _, cerr := core.CheckProblem(c.qs, c.ks, c.vs, &c.opts); cerr != nil && cerr.Error() != err.Error() {
			t.Errorf("%s: %q, CheckProblem said %q", c.name, err, cerr)
		}
	}
}
