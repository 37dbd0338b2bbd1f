package reference

import (
	"math/rand"
	"testing"

	"github.com/vkattn/vkattn/core"
	"github.com/vkattn/vkattn/internal/random"
)

// AdditiveAttentionBackward against central finite differences of the
// forward, every element of every gradient: a plain call with a bias,
// and one with masks, lengths (a row with no visible key), a soft-cap and
// a sink.
func TestAdditiveBackwardFD(t *testing.T) {
	const B, L, S, dq, dk, da, dv = 2, 3, 4, 3, 5, 4, 2
	r := rand.New(rand.NewSource(170))
	allow := make([]bool, L*S)
	for i := range allow {
		allow[i] = i%3 != 0
	}
	for _, c := range []struct {
		name string
		bias bool
		opts core.Options
	}{
		{"plain", true, core.Options{}},
		{"masks, lengths, softcap, sink", false, core.Options{Causal: core.CausalBottomRight, KeyLengths: []int{4, 0},
			BoolMasks: []core.BoolMask{{Shape: core.MaskShape{1, 1, L, S}, Values: allow, Meaning: core.TrueAllows}},
			Softcap:   1.5, Sinks: []float32{0.3}}},
	} {
		t.Run(c.name, func(t *testing.T) {
			w := &core.AdditiveWeights{DQ: dq, DK: dk, DA: da, WQ: random.Normal(r, dq*da), WK: random.Normal(r, dk*da), WA: random.Normal(r, da)}
			if c.bias {
				w.Bias = random.Normal(r, da)
			}
			q, k, v, dO := random.Normal(r, B*L*dq), random.Normal(r, B*S*dk), random.Normal(r, B*S*dv), random.Normal(r, B*L*dv)
			qs, ks, vs := [3]int{B, L, dq}, [3]int{B, S, dk}, [3]int{B, S, dv}
			loss := func() float64 {
				res, err := AdditiveAttention(q, qs, k, ks, v, vs, w, c.opts)
				if err != nil {
					t.Fatal(err)
				}
				return dot(res.O, dO)
			}
			g, err := AdditiveAttentionBackward(q, qs, k, ks, v, vs, w, dO, c.opts)
			if err != nil {
				t.Fatal(err)
			}
			params := []struct {
				name string
				x    []float32
				got  []float64
			}{{"q", q, g.DQ}, {"k", k, g.DK}, {"v", v, g.DV}, {"W_q", w.WQ, g.DWQ}, {"W_k", w.WK, g.DWK}, {"w_a", w.WA, g.DWA}}
			if c.bias {
				params = append(params, struct {
					name string
					x    []float32
					got  []float64
				}{"b", w.Bias, g.DBias})
			}
			if c.opts.Sinks != nil {
				params = append(params, struct {
					name string
					x    []float32
					got  []float64
				}{"sink", c.opts.Sinks, g.DSinks})
			}
			for _, p := range params {
				compareFD(t, p.name, p.got, fdGrad(p.x, loss))
			}
			if !c.bias && g.DBias != nil {
				t.Error("a bias gradient without a bias")
			}
		})
	}
}
