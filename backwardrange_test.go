package vkattn_test

import (
	"errors"
	"math"
	"math/rand"
	"strings"
	"testing"

	"github.com/vkattn/vkattn"
	"github.com/vkattn/vkattn/internal/devtest"
	"github.com/vkattn/vkattn/nn"
	"github.com/vkattn/vkattn/reference"
)

// backwardOf runs the backward of q, k, v (single-head, (L, d) and (S, d)
// data) with dO on dev, closing the inputs and gradients when the test
// ends.
func backwardOf(t *testing.T, l, s, d int, q, k, v, dO []float32, opts vkattn.Options) (*vkattn.Gradients, error) {
	t.Helper()
	g, err := devtest.Dev.AttentionBackward(devtest.Upload(t, devtest.Dev, []int{l, d}, q), devtest.Upload(t, devtest.Dev, []int{s, d}, k), devtest.Upload(t, devtest.Dev, []int{s, d}, v), devtest.Upload(t, devtest.Dev, []int{l, d}, dO), opts)
	if err == nil {
		t.Cleanup(g.Close)
	}
	return g, err
}

// alternating is n values of magnitude x, signs alternating.
func alternating(n int, x float32) []float32 {
	v := devtest.Filled(n, x)
	for i := 1; i < n; i += 2 {
		v[i] = -x
	}
	return v
}

// TestBackwardOverflowIsRefused: finite inputs whose backward could
// overflow float32 (Inf, then NaN gradients) are ErrOverflow naming the
// quantity (SEMANTICS.md §9, §10), for the attention's backward and
// additive attention's, while the forward of the same inputs runs.
func TestBackwardOverflowIsRefused(t *testing.T) {
	const l, s, d = 4, 8, 8
	r := rand.New(rand.NewSource(140))
	small := func(n int) []float32 { return devtest.RandomValues(r, n) }
	for _, c := range []struct {
		name, what  string
		q, k, v, dO []float32
	}{
		// dO . v_j reaches 8 x 1e10 x 1e30 = 8e40.
		{"V 1e30, dO 1e10", "dP = dO·V^T", small(l * d), small(s * d), alternating(s*d, 1e30), devtest.Filled(l*d, 1e10)},
		// 8 x 3e38 x 2^32 (V's bound).
		{"dO 3e38", "dP = dO·V^T", small(l * d), small(s * d), small(s * d), alternating(l*d, 3e38)},
		// dS <= 2 x 8 x 2^32 x 2^32 = 3e20; dQ sums 8 keys of dS |scale| max|K|:
		// 8 x 3e20 x 0.354 x 1e20 = 8e40; the forward's scores (8 x 2^32 x 1e20) fit.
		{"K 1e20", "dQ = scale·dS·K", small(l * d), alternating(s*d, 1e20), small(s * d), small(l * d)},
		// dK sums 4 query rows of dS |scale| max|Q|: 4 x 3e20 x 0.354 x 1e20.
		{"Q 1e20", "dK = scale·dS^T·Q", alternating(l*d, 1e20), small(s * d), small(s * d), small(l * d)},
	} {
		t.Run(c.name, func(t *testing.T) {
			out, err := devtest.Dev.Attention(devtest.Upload(t, devtest.Dev, []int{l, d}, c.q), devtest.Upload(t, devtest.Dev, []int{s, d}, c.k), devtest.Upload(t, devtest.Dev, []int{s, d}, c.v), vkattn.Options{})
			if err != nil {
				t.Fatalf("forward: %v", err)
			}
			out.Close()
			g, err := backwardOf(t, l, s, d, c.q, c.k, c.v, c.dO, vkattn.Options{})
			if !errors.Is(err, vkattn.ErrOverflow) {
				if g != nil {
					t.Fatalf("got gradients (dQ[0] = %v), error %v; want ErrOverflow", devtest.Download(t, g.DQ)[0], err)
				}
				t.Fatalf("got %v, want ErrOverflow", err)
			}
			if !strings.Contains(err.Error(), c.what) {
				t.Errorf("error %q does not name %s", err, c.what)
			}
		})
	}

	w := &nn.AdditiveWeights{DQ: d, DK: d, DA: d, WQ: small(d * d), WK: small(d * d), WA: small(d)}
	add, err := nn.NewAdditive(devtest.Dev, w)
	if err != nil {
		t.Fatal(err)
	}
	defer add.Close()
	q, k, v, dO := devtest.Upload(t, devtest.Dev, []int{1, l, d}, small(l*d)), devtest.Upload(t, devtest.Dev, []int{1, s, d}, small(s*d)), devtest.Upload(t, devtest.Dev, []int{1, s, d}, alternating(s*d, 1e30)), devtest.Upload(t, devtest.Dev, []int{1, l, d}, devtest.Filled(l*d, 1e10))
	if _, err := add.Backward(q, k, v, dO, vkattn.Options{}); !errors.Is(err, vkattn.ErrOverflow) || !strings.Contains(err.Error(), "dP = dO·V^T") {
		t.Errorf("additive backward, V 1e30, dO 1e10: %v, want ErrOverflow naming dP", err)
	}

	// The projections' gradients are refused when they are not finite: q of 1e30 through W_q of 1e-30 keeps tanh's
	// argument small, dO and V of 1e10 make dq' about 1e20 on the
	// device, and dW_q = q^T dq' about 1e50.
	w.WQ = devtest.Filled(d*d, 1e-30)
	tiny, err := nn.NewAdditive(devtest.Dev, w)
	if err != nil {
		t.Fatal(err)
	}
	defer tiny.Close()
	large := func(n int) []float32 {
		x := small(n)
		for i := range x {
			x[i] *= 1e10
		}
		return x
	}
	q, v, dO = devtest.Upload(t, devtest.Dev, []int{1, l, d}, alternating(l*d, 1e30)), devtest.Upload(t, devtest.Dev, []int{1, s, d}, large(s*d)), devtest.Upload(t, devtest.Dev, []int{1, l, d}, large(l*d))
	if g, err := tiny.Backward(q, k, v, dO, vkattn.Options{}); !errors.Is(err, vkattn.ErrOverflow) || !strings.Contains(err.Error(), "dW_q") {
		if g != nil {
			t.Fatalf("additive backward, dW_q about 1e50: dW_q[0] = %v, error %v; want ErrOverflow naming dW_q", devtest.Download(t, g.DWQ)[0], err)
		}
		t.Errorf("additive backward, dW_q about 1e50: %v, want ErrOverflow naming dW_q", err)
	}
}

// TestBackwardJustInsideTheBound: with every other bound at its floor
// (2^32: ordinary Q, K and dO), the backward's binding bound at L=4, S=8,
// d=8 is dQ's, S x 2 d_v 2^32 max|V| x |scale| 2^32 <= MaxFloat32/2. V
// just inside it gives finite gradients equal to the reference's; just
// beyond, ErrOverflow.
func TestBackwardJustInsideTheBound(t *testing.T) {
	const l, s, d = 4, 8, 8
	r := rand.New(rand.NewSource(141))
	q, k, dO := devtest.RandomValues(r, l*d), devtest.RandomValues(r, s*d), devtest.RandomValues(r, l*d)
	limit := math.MaxFloat32 / 2 / (s * 2 * d * math.Exp2(32) / math.Sqrt(d) * math.Exp2(32))
	withMax := func(x float64) []float32 {
		v := devtest.RandomValues(rand.New(rand.NewSource(142)), s*d)
		for i := range v {
			v[i] *= float32(x)
		}
		v[3] = float32(x) // max|V| = x, as float32
		return v
	}
	inside := withMax(limit * 0.99)
	g, err := backwardOf(t, l, s, d, q, k, inside, dO, vkattn.Options{})
	if err != nil {
		t.Fatalf("max|V| %.4g, 0.99 of the bound: %v", 0.99*limit, err)
	}
	want, err := reference.AttentionBackward(q, [4]int{1, 1, l, d}, k, [4]int{1, 1, s, d}, inside, [4]int{1, 1, s, d}, dO, vkattn.Options{})
	if err != nil {
		t.Fatal(err)
	}
	devtest.CompareGrad(t, "dQ", devtest.Download(t, g.DQ), want.DQ)
	devtest.CompareGrad(t, "dK", devtest.Download(t, g.DK), want.DK)
	devtest.CompareGrad(t, "dV", devtest.Download(t, g.DV), want.DV)
	if _, err := backwardOf(t, l, s, d, q, k, withMax(limit*1.01), dO, vkattn.Options{}); !errors.Is(err, vkattn.ErrOverflow) || !strings.Contains(err.Error(), "dQ") {
		t.Errorf("max|V| 1.01 times the bound: %v, want ErrOverflow naming dQ", err)
	}
}

// TestBackwardLargeScoresFinite: the backward recomputes P = exp(s - lse)
// from scores it sums in its own order; at scores of 1e8 and more a few
// ulps above the forward's maximum made exp overflow, and every gradient
// was NaN or Inf. P is at most 1: the gradients are finite, and each dV_j
// = sum_t P_tj dO_t lies within L max|dO|.
func TestBackwardLargeScoresFinite(t *testing.T) {
	const l, s, d = 16, 64, 16
	for _, m := range []float32{1e5, 1e10} {
		r := rand.New(rand.NewSource(143))
		q, k, v, dO := devtest.RandomValues(r, l*d), devtest.RandomValues(r, s*d), devtest.RandomValues(r, s*d), devtest.RandomValues(r, l*d)
		for i := range q {
			q[i] *= m
		}
		for i := range k {
			k[i] *= m
		}
		g, err := backwardOf(t, l, s, d, q, k, v, dO, vkattn.Options{})
		if err != nil {
			t.Fatalf("Q, K of %g: %v", m, err)
		}
		for _, x := range []struct {
			name  string
			t     *vkattn.Tensor
			bound float64
		}{{"dQ", g.DQ, math.Inf(1)}, {"dK", g.DK, math.Inf(1)}, {"dV", g.DV, l}} {
			for i, y := range devtest.Download(t, x.t) {
				if !(math.Abs(float64(y)) <= x.bound) {
					t.Fatalf("Q, K of %g: %s[%d] = %v, want finite and within %v", m, x.name, i, y, x.bound)
				}
			}
		}
	}
}

// TestGradientsCarryBounds: as a forward's outputs, gradients carry the
// bounds their call was checked with, so they can feed another call (they
// were unbounded, and any call on them ErrOverflow).
func TestGradientsCarryBounds(t *testing.T) {
	const l, s, d = 4, 8, 8
	r := rand.New(rand.NewSource(144))
	q, k, v := devtest.RandomValues(r, l*d), devtest.RandomValues(r, s*d), devtest.RandomValues(r, s*d)
	g, err := backwardOf(t, l, s, d, q, k, v, devtest.RandomValues(r, l*d), vkattn.Options{})
	if err != nil {
		t.Fatal(err)
	}
	// dS <= 2 x 8 x 2^64 ~ 3e20, so dK's bound is 4 rows x 3e20 x 0.354 x
	// 2^32 ~ 1.8e30 and dV's 4 x 2^32: dV as Q (scores 8 x 1.7e10 x 2^32)
	// and dK as V fit.
	out, err := devtest.Dev.Attention(g.DV, devtest.Upload(t, devtest.Dev, []int{s, d}, k), g.DK, vkattn.Options{})
	if err != nil {
		t.Fatalf("dV as Q and dK as V: %v", err)
	}
	out.Close()
	if _, err := devtest.Dev.Attention(g.DQ, g.DQ, g.DQ, vkattn.Options{}); !errors.Is(err, vkattn.ErrOverflow) {
		t.Errorf("dQ as Q and K: %v, want ErrOverflow (8 x its bound 3.6e30, squared)", err)
	}
}
