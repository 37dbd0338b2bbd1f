package nn_test

import (
	"fmt"
	"math"
	"math/rand"
	"testing"

	"github.com/vkattn/vkattn"
	"github.com/vkattn/vkattn/internal/devtest"
	"github.com/vkattn/vkattn/internal/testutil"
	"github.com/vkattn/vkattn/nn"
	"github.com/vkattn/vkattn/reference"
)

// additiveCase is one additive attention call with host data: q (B,L,DQ),
// k (B,S,DK), v (B,S,DV).
type additiveCase struct {
	w                       *nn.AdditiveWeights
	q, k, v                 []float32
	B, L, S, DQ, DK, DA, DV int
	opts                    vkattn.Options
}

// runAdditive runs c on d; it returns O (B,1,L,DV), LSE and weights.
func runAdditive(t *testing.T, d *vkattn.Device, c *additiveCase) (o, lse, w []float32) {
	t.Helper()
	a, err := nn.NewAdditive(d, c.w)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	q, k, v := devtest.MustUpload(t, d, []int{c.B, c.L, c.DQ}, c.q), devtest.MustUpload(t, d, []int{c.B, c.S, c.DK}, c.k), devtest.MustUpload(t, d, []int{c.B, c.S, c.DV}, c.v)
	defer q.Close()
	defer k.Close()
	defer v.Close()
	opts := c.opts
	opts.WantLSE, opts.WantWeights = true, true
	out, err := a.Attention(q, k, v, opts)
	if err != nil {
		t.Fatal(err)
	}
	defer out.Close()
	if s := out.O.Shape(); s != [4]int{c.B, 1, c.L, c.DV} {
		t.Fatalf("O shape %v", s)
	}
	if !out.Plan.Kernel.Additive || len(out.Plan.Projections) != 2 {
		t.Fatalf("plan %v: want the additive kernel after two projections", out.Plan)
	}
	for _, x := range []struct {
		dst *[]float32
		t   *vkattn.Tensor
	}{{&o, out.O}, {&lse, out.LSE}, {&w, out.Weights}} {
		if *x.dst, err = x.t.Download(); err != nil {
			t.Fatal(err)
		}
	}
	return o, lse, w
}

// checkAdditive compares the GPU with the float64 reference.
func checkAdditive(t *testing.T, d *vkattn.Device, c *additiveCase) {
	t.Helper()
	o, lse, w := runAdditive(t, d, c)
	want, err := reference.AdditiveAttention(c.q, [3]int{c.B, c.L, c.DQ}, c.k, [3]int{c.B, c.S, c.DK}, c.v, [3]int{c.B, c.S, c.DV}, c.w, c.opts)
	if err != nil {
		t.Fatal(err)
	}
	devtest.Compare(t, "O", o, want.O)
	devtest.Compare(t, "LSE", lse, want.LSE)
	devtest.Compare(t, "weights", w, want.Weights)
}

// a = atanh(1/2) = ln(3)/2: tanh(a) = 1/2, tanh(2a) = 4/5.
var atanhHalf = float32(math.Log(3) / 2)

// Worked by hand: only the keys matter.
//
//	W_q = W_k = I (2x2), b = 0, w_a = [1 1], q = [0 0]
//	K = [[0 0] [a 0] [a a]] -> tanh(k_j) = [0 0], [1/2 0], [1/2 1/2] -> e = [0, 1/2, 1]
//	Z = 1 + e^(1/2) + e = 5.367003...; A = [0.186323723, 0.307195886, 0.506480391]
//	V = [[1 0] [0 1] [1 1]] -> O = [(1+e)/Z, (e^(1/2)+e)/Z] = [0.692804114, 0.813676277]
//	LSE = ln Z = 1.680269671
func TestAdditiveGoldenKeysGPU(t *testing.T) {
	a := atanhHalf
	for _, d := range []*vkattn.Device{devtest.Dev, devtest.StorageDev} {
		c := &additiveCase{
			w: &nn.AdditiveWeights{DQ: 2, DK: 2, DA: 2, WQ: []float32{1, 0, 0, 1}, WK: []float32{1, 0, 0, 1}, Bias: []float32{0, 0}, WA: []float32{1, 1}},
			q: []float32{0, 0}, k: []float32{0, 0, a, 0, a, a}, v: []float32{1, 0, 0, 1, 1, 1},
			B: 1, L: 1, S: 3, DQ: 2, DK: 2, DA: 2, DV: 2,
		}
		o, lse, w := runAdditive(t, d, c)
		testutil.Near(t, "A", w, []float64{0.186323723, 0.307195886, 0.506480391}, 1e-6)
		testutil.Near(t, "O", o, []float64{0.692804114, 0.813676277}, 1e-6)
		testutil.Near(t, "LSE", lse, []float64{1.680269671}, 1e-6)
	}
}

// Worked by hand: query and key interact, w_a has mixed signs, masks act as
// for SDPA.
//
//	d_q = d_k = 1, d_a = 2: W_q = [[1 -1]], W_k = [[1 1]], b = 0, w_a = [2 -1]
//	q = [a]; K = [[-a] [a] [0]]; V = [[1] [2] [4]]
//	key 0: (0, -2a) -> tanh (0, -4/5) -> e = 0.8
//	key 1: (2a, 0) -> (4/5, 0) -> e = 1.6
//	key 2: (a, -a) -> (1/2, -1/2) -> e = 1.5
//	A = softmax [0.8 1.6 1.5] = [0.190865424, 0.424778812, 0.384355764]
//	O = 1*A0 + 2*A1 + 4*A2 = 2.577846104, LSE = 2.456186687
//	key length 2: A = [1, e^0.8] / (1 + e^0.8) = [0.310025519, 0.689974481, 0], O = 1.689974481
//	causal top-left (L=1 < S=3): query 0 sees key 0 only: A = [1 0 0], O = 1, LSE = 0.8
//	additive mask [0, -inf, -1.5]: [e^0.8, 0, 1] / (1 + e^0.8) = [0.689974481, 0, 0.310025519],
//	    O = 0.689974481 + 4*0.310025519 = 1.930076557
//	query length 0: zeros and LSE -inf
func TestAdditiveGoldenQueryGPU(t *testing.T) {
	a := atanhHalf
	inf := math.Inf(-1)
	for _, c := range []struct {
		name   string
		opts   vkattn.Options
		w      []float64
		o, lse float64
	}{
		{"plain", vkattn.Options{}, []float64{0.190865424, 0.424778812, 0.384355764}, 2.577846104, 2.456186687},
		{"key length 2", vkattn.Options{KeyLengths: []int{2}}, []float64{0.310025519, 0.689974481, 0}, 1.689974481, math.Log(math.Exp(0.8) + math.Exp(1.6))},
		{"causal top-left", vkattn.Options{Causal: vkattn.CausalTopLeft}, []float64{1, 0, 0}, 1, 0.8},
		{"causal bottom-right", vkattn.Options{Causal: vkattn.CausalBottomRight}, []float64{0.190865424, 0.424778812, 0.384355764}, 2.577846104, 2.456186687},
		{"additive mask", vkattn.Options{Mask: &vkattn.Mask{Shape: vkattn.MaskShape{1, 1, 1, 3}, Values: []float32{0, float32(inf), -1.5}}},
			[]float64{0.689974481, 0, 0.310025519}, 1.930076557, math.Log(math.Exp(0.8) + 1)},
		{"query length 0", vkattn.Options{QueryLengths: []int{0}}, []float64{0, 0, 0}, 0, inf},
	} {
		t.Run(c.name, func(t *testing.T) {
			ac := &additiveCase{
				w: &nn.AdditiveWeights{DQ: 1, DK: 1, DA: 2, WQ: []float32{1, -1}, WK: []float32{1, 1}, WA: []float32{2, -1}},
				q: []float32{a}, k: []float32{-a, a, 0}, v: []float32{1, 2, 4},
				B: 1, L: 1, S: 3, DQ: 1, DK: 1, DA: 2, DV: 1, opts: c.opts,
			}
			o, lse, w := runAdditive(t, devtest.Dev, ac)
			testutil.Near(t, "A", w, c.w, 1e-6)
			testutil.Near(t, "O", o, []float64{c.o}, 1e-6)
			testutil.Near(t, "LSE", lse, []float64{c.lse}, 1e-6)
		})
	}
}

// Randomised sweep against the float64 reference (fixed seed): widths on
// both sides of the vec4 rule, each mask kind in turn, both load paths.
func TestAdditiveSweep(t *testing.T) {
	r := rand.New(rand.NewSource(21))
	shapes := []struct{ B, L, S, DQ, DK, DA, DV int }{
		{1, 1, 1, 1, 1, 1, 1},
		{2, 5, 7, 3, 2, 6, 5},
		{2, 17, 33, 8, 12, 16, 8},
		{1, 9, 300, 16, 16, 32, 16},
		{3, 4, 9, 5, 7, 64, 12},
		{1, 33, 20, 64, 32, 128, 64},
	}
	for i, s := range shapes {
		for _, d := range []*vkattn.Device{devtest.Dev, devtest.StorageDev} {
			if s.DA == 128 && d == devtest.Dev {
				continue // d_max 128 on the storage path only: the texel build compiles for 11 s (nopt) and loads as at d_max 64
			}
			masks := []string{"none", "additive", "boolean", "causal", "lengths", "all"}[i%6]
			name := fmt.Sprintf("%v/%s/%s", s, masks, map[bool]string{false: "auto", true: "storage"}[d == devtest.StorageDev])
			c := &additiveCase{B: s.B, L: s.L, S: s.S, DQ: s.DQ, DK: s.DK, DA: s.DA, DV: s.DV}
			c.q, c.k, c.v = devtest.RandomValues(r, s.B*s.L*s.DQ), devtest.RandomValues(r, s.B*s.S*s.DK), devtest.RandomValues(r, s.B*s.S*s.DV)
			c.w = &nn.AdditiveWeights{DQ: s.DQ, DK: s.DK, DA: s.DA, WQ: devtest.RandomValues(r, s.DQ*s.DA), WK: devtest.RandomValues(r, s.DK*s.DA), WA: devtest.RandomValues(r, s.DA)}
			if i%2 == 0 {
				c.w.Bias = devtest.RandomValues(r, s.DA)
			}
			all := masks == "all"
			if all || masks == "additive" {
				c.opts.Mask = &vkattn.Mask{Shape: vkattn.MaskShape{1, 1, s.L, s.S}, Values: devtest.RandomValues(r, s.L*s.S)}
			}
			if all || masks == "boolean" {
				m := vkattn.BoolMask{Shape: vkattn.MaskShape{s.B, 1, 1, s.S}, Values: make([]bool, s.B*s.S), Meaning: vkattn.TrueBlocks}
				for j := range m.Values {
					m.Values[j] = r.Intn(4) == 0
				}
				c.opts.BoolMasks = []vkattn.BoolMask{m}
			}
			if all || masks == "causal" {
				c.opts.Causal = vkattn.CausalBottomRight
			}
			if all || masks == "lengths" {
				c.opts.KeyLengths, c.opts.QueryLengths = make([]int, s.B), make([]int, s.B)
				for b := range s.B {
					c.opts.KeyLengths[b], c.opts.QueryLengths[b] = r.Intn(s.S+1), r.Intn(s.L+1)
				}
			}
			t.Run(name, func(t *testing.T) { devtest.OnPool(t, d, func(d *vkattn.Device) { checkAdditive(t, d, c) }) })
		}
	}
}

func TestAdditiveErrors(t *testing.T) {
	w := &nn.AdditiveWeights{DQ: 2, DK: 3, DA: 4, WQ: make([]float32, 8), WK: make([]float32, 12), WA: make([]float32, 4)}
	a, err := nn.NewAdditive(devtest.Dev, w)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	q, k, v, k2 := devtest.Zeros(t, devtest.Dev, 1, 2, 2), devtest.Zeros(t, devtest.Dev, 1, 3, 3), devtest.Zeros(t, devtest.Dev, 1, 3, 5), devtest.Zeros(t, devtest.Dev, 1, 3, 2)
	bad := *w
	bad.WK = bad.WK[:11]
	devtest.CheckRefusals(t, []devtest.Refusal{
		{Name: "nil weights", Err: vkattn.ErrShape, Run: func() error { _, err := nn.NewAdditive(devtest.Dev, nil); return err }},
		{Name: "short W_k", Err: vkattn.ErrShape, Run: func() error { _, err := nn.NewAdditive(devtest.Dev, &bad); return err }},
		{Name: "key width", Err: vkattn.ErrShape, Run: func() error { _, err := a.Attention(q, k2, v, vkattn.Options{}); return err }},
		{Name: "scale", Err: vkattn.ErrScale, Run: func() error { _, err := a.Attention(q, k, v, vkattn.Options{Scale: vkattn.CustomScale(2)}); return err }},
		{Name: "head mask", Err: vkattn.ErrMask, Run: func() error {
			_, err := a.Attention(q, k, v, vkattn.Options{Mask: &vkattn.Mask{Shape: vkattn.MaskShape{1, 2, 2, 3}, Values: make([]float32, 12)}})
			return err
		}},
		{Name: "plan rank", Err: vkattn.ErrShape, Run: func() error { _, err := a.Plan([]int{2}, []int{3, 3}, []int{3, 5}, vkattn.Options{}); return err }},
	})
}
