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

// Tests of AttentionBackward (SEMANTICS.md §10) against central finite
// differences of the float64 forward: the loss is sum(O * dO) for a fixed
// random dO, and every element of dQ, dK, dV and dSinks is compared.

// fdAbs and fdRel bound |analytic - fd| <= fdAbs + fdRel * |fd|. With a
// step of 2^-20 relative the difference's truncation is ~1e-12 and the
// rounding of the float64 loss ~1e-10; the cases below differ by at most
// ~1e-8, while a wrong term (a missing factor, a misplaced head) is off by
// 1e-3 or more.
const fdAbs, fdRel = 1e-7, 1e-6

// backwardLoss is sum(O * dO) of the forward on p with opts.
func backwardLoss(t *testing.T, p problem, dO []float64, opts core.Options) float64 {
	t.Helper()
	return dot(p.run(t, opts).O, dO)
}

// dot is sum(o * d), a loss whose gradient with respect to o is d.
func dot[T float32 | float64](o []float64, d []T) float64 {
	s := 0.0
	for i, x := range o {
		s += x * float64(d[i])
	}
	return s
}

// fdStep perturbs x by a power of two near 2^-20 |x| (at least 2^-20), so
// x ± step are float32 values equally far from x, as the forward's float32
// inputs require; it returns them and their exact float64 distance.
func fdStep(x float32) (lo, hi float32, width float64) {
	h := math.Ldexp(1, math.Ilogb(math.Max(1, math.Abs(float64(x))))-20)
	lo, hi = float32(float64(x)-h), float32(float64(x)+h)
	return lo, hi, float64(hi) - float64(lo)
}

// fdGrad is the central difference of loss with respect to every element
// of x, which loss reads (x is restored after each element).
func fdGrad(x []float32, loss func() float64) []float64 {
	g := make([]float64, len(x))
	for i, x0 := range x {
		lo, hi, w := fdStep(x0)
		x[i] = hi
		up := loss()
		x[i] = lo
		down := loss()
		x[i] = x0
		g[i] = (up - down) / w
	}
	return g
}

// compareFD fails where got and fd differ by more than the tolerance and
// returns the largest |got - fd| and |got|; NaN never passes.
func compareFD(t *testing.T, what string, got, fd []float64) (maxErr, maxAbs float64) {
	t.Helper()
	if len(got) != len(fd) {
		t.Fatalf("%s: %d values, want %d", what, len(got), len(fd))
	}
	for i := range got {
		e := math.Abs(got[i] - fd[i])
		if !(e <= fdAbs+fdRel*math.Abs(fd[i])) {
			t.Errorf("%s[%d] = %.12g, finite difference %.12g", what, i, got[i], fd[i])
		}
		maxErr, maxAbs = math.Max(maxErr, e), math.Max(maxAbs, math.Abs(got[i]))
	}
	return maxErr, maxAbs
}

// checkBackwardFD compares AttentionBackward on p with opts against finite
// differences, logging the largest error of each gradient.
func checkBackwardFD(t *testing.T, p problem, opts core.Options, seed int64) {
	t.Helper()
	rng := rand.New(rand.NewSource(seed))
	dO32 := random.Normal(rng, p.qs[0]*p.qs[1]*p.qs[2]*p.vs[3])
	dO := widen(dO32)
	// Own copies, so the perturbations never touch the caller's inputs.
	p.q, p.k, p.v = append([]float32(nil), p.q...), append([]float32(nil), p.k...), append([]float32(nil), p.v...)
	if opts.Sinks != nil {
		opts.Sinks = append([]float32(nil), opts.Sinks...)
	}
	g, err := AttentionBackward(p.q, p.qs, p.k, p.ks, p.v, p.vs, dO32, opts)
	if err != nil {
		t.Fatalf("AttentionBackward: %v", err)
	}
	loss := func() float64 { return backwardLoss(t, p, dO, opts) }
	largest := 0.0
	for _, c := range []struct {
		what string
		got  []float64
		x    []float32
	}{{"dQ", g.DQ, p.q}, {"dK", g.DK, p.k}, {"dV", g.DV, p.v}, {"dSinks", g.DSinks, opts.Sinks}} {
		if (c.got == nil) != (c.x == nil) {
			t.Fatalf("%s is %v for input %v", c.what, c.got, c.x)
		}
		e, a := compareFD(t, c.what, c.got, fdGrad(c.x, loss))
		largest = math.Max(largest, a)
		if c.x != nil {
			t.Logf("%s: max |analytic - fd| = %.2g (largest |gradient| %.2g)", c.what, e, a)
		}
	}
	// All-zero gradients would agree with a forward that ignores its
	// inputs; every case has live rows.
	if !(largest > 1e-2) {
		t.Errorf("largest gradient %g: the case checks nothing", largest)
	}
}

type backwardCase struct {
	name                    string
	B, H, HKV, L, S, DK, DV int
	opts                    func(rng *rand.Rand) core.Options
}

// randMask is a random additive mask of the given shape with about one
// value in five -Inf.
func randMask(rng *rand.Rand, s core.MaskShape) *core.Mask {
	m := &core.Mask{Shape: s, Values: make([]float32, s[0]*s[1]*s[2]*s[3])}
	for i := range m.Values {
		m.Values[i] = float32(rng.NormFloat64())
		if rng.Intn(5) == 0 {
			m.Values[i] = negInf
		}
	}
	return m
}

func randBools(rng *rand.Rand, s core.MaskShape, meaning core.MaskMeaning) core.BoolMask {
	m := core.BoolMask{Shape: s, Values: make([]bool, s[0]*s[1]*s[2]*s[3]), Meaning: meaning}
	for i := range m.Values {
		m.Values[i] = rng.Intn(4) == 0 // allows a quarter, or blocks a quarter
	}
	if meaning == core.TrueAllows {
		for i := range m.Values {
			m.Values[i] = !m.Values[i]
		}
	}
	return m
}

// backwardCases covers every option of SEMANTICS.md §3-§4.2 that the
// forward takes, alone and all together.
func backwardCases() []backwardCase {
	none := func(*rand.Rand) core.Options { return core.Options{} }
	return []backwardCase{
		{"plain", 1, 2, 2, 4, 5, 3, 3, none},
		{"batch", 2, 1, 1, 3, 4, 3, 3, none},
		{"GQA", 2, 4, 2, 3, 4, 3, 2, none},
		{"MQA", 1, 3, 1, 4, 4, 2, 3, none},
		{"d_k != d_v", 1, 2, 1, 3, 5, 5, 2, none},
		{"scale 0.7", 1, 2, 2, 3, 4, 3, 3, func(*rand.Rand) core.Options { return core.Options{Scale: core.CustomScale(0.7)} }},
		{"scale -1.3", 1, 2, 1, 3, 4, 3, 3, func(*rand.Rand) core.Options { return core.Options{Scale: core.CustomScale(-1.3)} }},
		{"causal top-left L<S", 1, 2, 1, 3, 6, 3, 2, func(*rand.Rand) core.Options { return core.Options{Causal: core.CausalTopLeft} }},
		{"causal top-left L>S", 1, 2, 1, 6, 3, 3, 2, func(*rand.Rand) core.Options { return core.Options{Causal: core.CausalTopLeft} }},
		{"causal bottom-right L<S", 1, 2, 1, 3, 6, 3, 2, func(*rand.Rand) core.Options { return core.Options{Causal: core.CausalBottomRight} }},
		// Rows 0-2 see no key.
		{"causal bottom-right L>S", 1, 2, 1, 6, 3, 3, 2, func(*rand.Rand) core.Options { return core.Options{Causal: core.CausalBottomRight} }},
		{"additive mask", 2, 2, 1, 4, 5, 3, 3, func(rng *rand.Rand) core.Options {
			return core.Options{Mask: randMask(rng, core.MaskShape{2, 2, 4, 5})}
		}},
		{"additive mask broadcast", 2, 2, 2, 4, 5, 3, 3, func(rng *rand.Rand) core.Options {
			return core.Options{Mask: randMask(rng, core.MaskShape{1, 2, 1, 5})}
		}},
		{"bool true-allows", 2, 2, 1, 4, 5, 3, 3, func(rng *rand.Rand) core.Options {
			return core.Options{BoolMasks: []core.BoolMask{randBools(rng, core.MaskShape{2, 2, 4, 5}, core.TrueAllows)}}
		}},
		{"bool true-blocks", 2, 2, 1, 4, 5, 3, 3, func(rng *rand.Rand) core.Options {
			return core.Options{BoolMasks: []core.BoolMask{randBools(rng, core.MaskShape{2, 1, 4, 5}, core.TrueBlocks)}}
		}},
		{"bool both", 1, 2, 1, 4, 5, 3, 3, func(rng *rand.Rand) core.Options {
			return core.Options{BoolMasks: []core.BoolMask{
				randBools(rng, core.MaskShape{1, 2, 4, 5}, core.TrueAllows),
				randBools(rng, core.MaskShape{1, 1, 1, 5}, core.TrueBlocks)}}
		}},
		// Item 0 has no key at all.
		{"key lengths", 2, 2, 1, 3, 5, 3, 3, func(*rand.Rand) core.Options { return core.Options{KeyLengths: []int{0, 3}} }},
		{"query lengths", 2, 2, 1, 4, 4, 3, 3, func(*rand.Rand) core.Options { return core.Options{QueryLengths: []int{2, 0}} }},
		{"window (1, 1)", 1, 2, 1, 5, 6, 3, 2, func(*rand.Rand) core.Options { return core.Options{Window: &core.Window{Left: 1, Right: 1}} }},
		// L > S: the first rows see no key.
		{"window (2, 0) L>S", 1, 2, 1, 6, 4, 3, 2, func(*rand.Rand) core.Options { return core.Options{Window: &core.Window{Left: 2, Right: 0}} }},
		// Scale 2 spreads the scores to where tanh bends: |s/c| up to ~5.
		{"softcap 0.8", 1, 2, 1, 4, 5, 3, 3, func(*rand.Rand) core.Options {
			return core.Options{Softcap: 0.8, Scale: core.CustomScale(2)}
		}},
		{"softcap 3 GQA", 2, 4, 2, 3, 4, 4, 2, func(*rand.Rand) core.Options { return core.Options{Softcap: 3} }},
		{"ALiBi", 1, 3, 1, 4, 5, 3, 3, func(rng *rand.Rand) core.Options { return core.Options{ALiBi: random.Normal(rng, 3)} }},
		{"ALiBi published L<S", 1, 4, 2, 3, 6, 3, 3, func(*rand.Rand) core.Options { return core.Options{ALiBi: core.ALiBiSlopes(4)} }},
		{"sinks", 2, 2, 1, 4, 5, 3, 3, func(rng *rand.Rand) core.Options { return core.Options{Sinks: random.Normal(rng, 2)} }},
		// Rows without a visible key keep the sink as their whole
		// denominator and add nothing to dSinks.
		{"sinks masked rows", 2, 2, 1, 5, 3, 3, 2, func(rng *rand.Rand) core.Options {
			return core.Options{Sinks: random.Normal(rng, 2), Causal: core.CausalBottomRight, KeyLengths: []int{3, 0}, QueryLengths: []int{4, 5}}
		}},
		{"align to key lengths", 2, 2, 1, 3, 6, 3, 3, func(rng *rand.Rand) core.Options {
			return core.Options{KeyLengths: []int{4, 6}, AlignToKeyLengths: true, Causal: core.CausalBottomRight,
				Window: &core.Window{Left: 2, Right: -1}, ALiBi: random.Normal(rng, 2)}
		}},
		{"everything", 2, 4, 2, 5, 6, 4, 3, func(rng *rand.Rand) core.Options {
			return core.Options{
				Scale:             core.CustomScale(1.5),
				Causal:            core.CausalBottomRight,
				Mask:              randMask(rng, core.MaskShape{2, 1, 5, 6}),
				BoolMasks:         []core.BoolMask{randBools(rng, core.MaskShape{1, 4, 5, 6}, core.TrueBlocks), randBools(rng, core.MaskShape{2, 1, 1, 6}, core.TrueAllows)},
				KeyLengths:        []int{6, 4},
				QueryLengths:      []int{5, 4},
				Window:            &core.Window{Left: 3, Right: 1},
				Softcap:           1.2,
				Sinks:             random.Normal(rng, 4),
				ALiBi:             random.Normal(rng, 4),
				AlignToKeyLengths: true,
			}
		}},
		{"everything top-left", 2, 4, 1, 6, 4, 3, 5, func(rng *rand.Rand) core.Options {
			return core.Options{
				Causal:       core.CausalTopLeft,
				Mask:         randMask(rng, core.MaskShape{1, 4, 6, 4}),
				BoolMasks:    []core.BoolMask{randBools(rng, core.MaskShape{2, 4, 6, 4}, core.TrueAllows)},
				KeyLengths:   []int{3, 4},
				QueryLengths: []int{6, 3},
				Window:       &core.Window{Left: -1, Right: 2},
				Softcap:      0.8,
				Sinks:        random.Normal(rng, 4),
				ALiBi:        core.ALiBiSlopes(4),
			}
		}},
	}
}

func TestBackwardFiniteDifferences(t *testing.T) {
	for i, c := range backwardCases() {
		t.Run(c.name, func(t *testing.T) {
			seed := int64(100 + i)
			p := newMaskProblem(seed, c.B, c.H, c.HKV, c.L, c.S, c.DK, c.DV)
			checkBackwardFD(t, p, c.opts(rand.New(rand.NewSource(seed))), seed)
		})
	}
}

// Padded rows and rows with no visible key have output 0 whatever the
// inputs: their gradients are exactly 0, never NaN, and their dO is never
// read.
func TestBackwardDeadRowsExactlyZero(t *testing.T) {
	const B, H, L, S, DK, DV = 2, 2, 5, 3, 3, 2
	p := newMaskProblem(7, B, H, 1, L, S, DK, DV)
	rng := rand.New(rand.NewSource(8))
	// Item 0: no keys at all. Item 1: rows 0-1 see no key (bottom-right,
	// L > S), rows 4 on are padding.
	opts := core.Options{Causal: core.CausalBottomRight, KeyLengths: []int{0, 3}, QueryLengths: []int{5, 4}, Sinks: random.Normal(rng, H)}
	dead := func(b, t int) bool { return b == 0 || t < L-S || t >= 4 }

	dO := random.Normal(rng, B*H*L*DV)
	g, err := AttentionBackward(p.q, p.qs, p.k, p.ks, p.v, p.vs, dO, opts)
	if err != nil {
		t.Fatal(err)
	}
	for name, xs := range map[string][]float64{"dQ": g.DQ, "dK": g.DK, "dV": g.DV, "dSinks": g.DSinks} {
		for i, x := range xs {
			if math.IsNaN(x) || math.IsInf(x, 0) {
				t.Fatalf("%s[%d] = %v", name, i, x)
			}
		}
	}
	for b := 0; b < B; b++ {
		for h := 0; h < H; h++ {
			for tt := 0; tt < L; tt++ {
				row := (b*H+h)*L + tt
				for _, x := range g.DQ[row*DK : (row+1)*DK] {
					if dead(b, tt) && x != 0 {
						t.Fatalf("dQ of dead row (b=%d h=%d t=%d) = %v", b, h, tt, g.DQ[row*DK:(row+1)*DK])
					}
				}
			}
		}
	}
	// Item 0's keys and values are seen by no row.
	for i, x := range append(append([]float64(nil), g.DK[:S*DK]...), g.DV[:S*DV]...) {
		if x != 0 {
			t.Fatalf("item 0 key/value gradient %d = %v", i, x)
		}
	}

	// Other dO on the dead rows changes nothing, bit for bit.
	dO2 := append([]float32(nil), dO...)
	for b := 0; b < B; b++ {
		for h := 0; h < H; h++ {
			for tt := 0; tt < L; tt++ {
				if row := (b*H+h)*L + tt; dead(b, tt) {
					for i := row * DV; i < (row+1)*DV; i++ {
						dO2[i] = 1e30 * float32(rng.NormFloat64())
					}
				}
			}
		}
	}
	g2, err := AttentionBackward(p.q, p.qs, p.k, p.ks, p.v, p.vs, dO2, opts)
	if err != nil {
		t.Fatal(err)
	}
	testutil.Near(t, "dQ", g2.DQ, g.DQ, 0)
	testutil.Near(t, "dK", g2.DK, g.DK, 0)
	testutil.Near(t, "dV", g2.DV, g.DV, 0)
	testutil.Near(t, "dSinks", g2.DSinks, g.DSinks, 0)
}

// Without sinks DSinks is nil; with them it has one entry per query head.
func TestBackwardSinksShape(t *testing.T) {
	p := newMaskProblem(9, 1, 2, 1, 2, 3, 2, 2)
	dO := make([]float32, 2*2*2)
	g, err := AttentionBackward(p.q, p.qs, p.k, p.ks, p.v, p.vs, dO, core.Options{})
	if err != nil || g.DSinks != nil {
		t.Fatalf("no sinks: DSinks %v, err %v", g.DSinks, err)
	}
	g, err = AttentionBackward(p.q, p.qs, p.k, p.ks, p.v, p.vs, dO, core.Options{Sinks: []float32{0, 1}})
	if err != nil || len(g.DSinks) != 2 {
		t.Fatalf("sinks: DSinks %v, err %v", g.DSinks, err)
	}
	if g.Dims != (core.Dims{B: 1, H: 2, HKV: 1, L: 2, S: 3, DK: 2, DV: 2}) {
		t.Fatalf("Dims %v", g.Dims)
	}
}

func TestBackwardErrors(t *testing.T) {
	p := newMaskProblem(10, 1, 2, 1, 2, 3, 2, 2)
	dO := make([]float32, 1*2*2*2)
	withAt := func(x []float32, i int, v float32) []float32 {
		y := append([]float32(nil), x...)
		y[i] = v
		return y
	}
	// The forward's refusals come back unchanged.
	for _, c := range []struct {
		name    string
		q, k, v []float32
		ks      [4]int
		opts    core.Options
		want    error
	}{
		{"K width", p.q, p.k, p.v, [4]int{1, 1, 3, 3}, core.Options{}, core.ErrShape},
		{"NaN in Q", withAt(p.q, 1, float32(math.NaN())), p.k, p.v, p.ks, core.Options{}, core.ErrNonFinite},
		{"mask meaning", p.q, p.k, p.v, p.ks, core.Options{BoolMasks: []core.BoolMask{{Shape: core.MaskShape{1, 1, 1, 3}, Values: make([]bool, 3)}}}, core.ErrMask},
		{"sinks count", p.q, p.k, p.v, p.ks, core.Options{Sinks: []float32{1}}, core.ErrShape},
		{"query lengths", p.q, p.k, p.v, p.ks, core.Options{QueryLengths: []int{3}}, core.ErrLengths},
	} {
		g, err := AttentionBackward(c.q, p.qs, c.k, c.ks, c.v, p.vs, dO, c.opts)
		_, ferr := Attention(c.q, p.qs, c.k, c.ks, c.v, p.vs, c.opts)
		if !errors.Is(err, c.want) || g != nil || ferr == nil || err.Error() != ferr.Error() {
			t.Errorf("%s: got (%v, %v), want nil and the forward's %v", c.name, g, err, ferr)
		}
	}

	for _, c := range []struct {
		name string
		dO   []float32
		want error
		msg  string
	}{
		{"short dO", dO[1:], core.ErrShape, "dO has 7 values"},
		{"long dO", append(append([]float32(nil), dO...), 0), core.ErrShape, "needs 8"},
		{"nil dO", nil, core.ErrShape, "dO has 0 values"},
		{"NaN in dO", withAt(dO, 3, float32(math.NaN())), core.ErrNonFinite, "dO value 3 is NaN"},
		{"Inf in dO", withAt(dO, 5, float32(math.Inf(1))), core.ErrNonFinite, "dO value 5 is +Inf"},
		{"-Inf in dO", withAt(dO, 0, negInf), core.ErrNonFinite, "dO value 0 is -Inf"},
	} {
		g, err := AttentionBackward(p.q, p.qs, p.k, p.ks, p.v, p.vs, c.dO, core.Options{})
		if g != nil {
			t.Errorf("%s: got gradients with %v", c.name, err)
		}
		wantError(t, err, c.want, c.msg)
	}
}
