package reference

import (
	"math"
	"math/rand"
	"testing"

	"github.com/vkattn/vkattn/core"
	"github.com/vkattn/vkattn/internal/random"
	"github.com/vkattn/vkattn/internal/verdict"
)

// mhaFD is the central difference of loss with respect to element i of
// x, with a step of 2^-10 relative: the forward rounds its projections to
// float32, noise a step of 2^-20 would magnify past the gradient itself.
func mhaFD(x []float32, i int, loss func() float64) float64 {
	x0 := x[i]
	h := math.Ldexp(1, math.Ilogb(math.Max(1, math.Abs(float64(x0))))-10)
	lo, hi := float32(float64(x0)-h), float32(float64(x0)+h)
	x[i] = hi
	up := loss()
	x[i] = lo
	down := loss()
	x[i] = x0
	return (up - down) / (float64(hi) - float64(lo))
}

// MultiHeadAttentionBackward against finite differences of the forward,
// for a sample of every gradient's elements: self-attention with packed
// weights, biases and a causal mask; cross-attention with separate
// weights of other widths, no bias, key padding and a boolean mask; a
// grouped-query layer.
func TestMHABackwardFD(t *testing.T) {
	const B, T, S, d, h = 2, 4, 5, 8, 2
	r := rand.New(rand.NewSource(140))
	padded := make([]bool, B*S)
	padded[3], padded[S+4] = true, true
	allow := make([]bool, T*S)
	for i := range allow {
		allow[i] = i%4 != 1
	}
	gqa := &core.MHAWeights{DModel: d, KDim: 6, VDim: 6, KVDim: d / 2,
		QProjWeight: random.Normal(r, d*d), KProjWeight: random.Normal(r, d/2*6), VProjWeight: random.Normal(r, d/2*6),
		InProjBias: random.Normal(r, d+d), OutProjWeight: random.Normal(r, d*d), OutProjBias: random.Normal(r, d)}
	for _, c := range []struct {
		name string
		w    *core.MHAWeights
		kdim int // 0: self-attention
		opts core.MHAOptions
	}{
		{"self, packed, causal", randMHA(r, d, d, d, true), 0, core.MHAOptions{Heads: h, Attention: core.Options{Causal: core.CausalTopLeft}}},
		{"cross, separate, padding", randMHA(r, d, 6, 7, false), 6, core.MHAOptions{Heads: h, KeyPadding: &core.KeyPadding{Padded: padded},
			Attention: core.Options{BoolMasks: []core.BoolMask{{Shape: core.MaskShape{1, 1, T, S}, Values: allow, Meaning: core.TrueAllows}}}}},
		{"grouped-query", gqa, 6, core.MHAOptions{Heads: 4, Attention: core.Options{Causal: core.CausalBottomRight}}},
	} {
		t.Run(c.name, func(t *testing.T) {
			x := random.Normal(r, B*T*d)
			var key, value []float32
			var ks, vs []int
			if c.kdim > 0 {
				key, value = random.Normal(r, B*S*c.w.KDim), random.Normal(r, B*S*c.w.VDim)
				ks, vs = []int{B, S, c.w.KDim}, []int{B, S, c.w.VDim}
			}
			dOut := random.Normal(r, B*T*d)
			loss := func() float64 {
				res, err := MultiHeadAttention(x, []int{B, T, d}, key, ks, value, vs, c.w, c.opts)
				if err != nil {
					t.Fatal(err)
				}
				return dot(res.Out, dOut)
			}
			g, err := MultiHeadAttentionBackward(x, []int{B, T, d}, key, ks, value, vs, c.w, dOut, c.opts)
			if err != nil {
				t.Fatal(err)
			}
			checked := 0
			for _, p := range []struct {
				name  string
				param []float32
				grad  []float64
			}{{"x", x, g.DX}, {"key", key, g.DKey}, {"value", value, g.DValue},
				{"in_proj_weight", c.w.InProjWeight, g.InProjWeight}, {"q_proj_weight", c.w.QProjWeight, g.QProjWeight},
				{"k_proj_weight", c.w.KProjWeight, g.KProjWeight}, {"v_proj_weight", c.w.VProjWeight, g.VProjWeight},
				{"in_proj_bias", c.w.InProjBias, g.InProjBias}, {"out_proj.weight", c.w.OutProjWeight, g.OutProjWeight},
				{"out_proj.bias", c.w.OutProjBias, g.OutProjBias}} {
				if (p.param == nil) != (p.grad == nil) || len(p.param) != len(p.grad) {
					t.Fatalf("%s: %d gradients for %d values", p.name, len(p.grad), len(p.param))
				}
				top := 0.0
				for _, v := range p.grad {
					top = math.Max(top, math.Abs(v))
				}
				for k := 0; k < 12 && len(p.param) > 0; k++ {
					i := r.Intn(len(p.param))
					fd := mhaFD(p.param, i, loss)
					if !verdict.Near(p.grad[i], fd, 2e-3*math.Max(1, top)) {
						t.Errorf("%s[%d] = %.9g, finite difference %.9g", p.name, i, p.grad[i], fd)
					}
					checked++
				}
			}
			if checked == 0 {
				t.Fatal("nothing checked")
			}
		})
	}
}
