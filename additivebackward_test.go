package vkattn_test

import (
	"fmt"
	"math/rand"
	"slices"
	"testing"

	"github.com/vkattn/vkattn"
	"github.com/vkattn/vkattn/reference"
)

// Additive.Backward equals the float64 reference's gradients (themselves
// checked by finite differences): with a bias on lavapipe's plan; with
// masks, lengths (an item with no visible key), a soft-cap and a sink on
// NVIDIA's.
func TestAdditiveBackward(t *testing.T) {
	const B, L, S, dq, dk, da, dv = 2, 20, 70, 5, 3, 8, 4 // several workgroups of keys, tiles of rows
	r := rand.New(rand.NewSource(180))
	allow := slices.Repeat([]bool{true, true, true, false}, L*S/4) // every fourth element blocked
	for _, c := range []struct {
		name string
		plan string
		bias bool
		opts vkattn.Options
	}{
		{"plain, bias", "auto", true, vkattn.Options{}},
		{"masks, lengths, softcap, sink", "nvidia", false, vkattn.Options{Causal: vkattn.CausalBottomRight, KeyLengths: []int{6, 0},
			BoolMasks: []vkattn.BoolMask{{Shape: vkattn.MaskShape{1, 1, L, S}, Values: allow, Meaning: vkattn.TrueAllows}},
			Softcap:   2, Sinks: []float32{0.4}}},
	} {
		for _, plan := range []string{c.plan} {
			t.Run(fmt.Sprintf("%s/%s", c.name, plan), func(t *testing.T) {
				d := everyPlan()[plan]
				w := &vkattn.AdditiveWeights{DQ: dq, DK: dk, DA: da, WQ: randomValues(r, dq*da), WK: randomValues(r, dk*da), WA: randomValues(r, da)}
				if c.bias {
					w.Bias = randomValues(r, da)
				}
				layer, err := d.NewAdditive(w)
				if err != nil {
					t.Fatal(err)
				}
				defer layer.Close()
				q, k, v, dO := randomValues(r, B*L*dq), randomValues(r, B*S*dk), randomValues(r, B*S*dv), randomValues(r, B*L*dv)
				g, err := layer.Backward(upload(t, d, []int{B, L, dq}, q), upload(t, d, []int{B, S, dk}, k), upload(t, d, []int{B, S, dv}, v), upload(t, d, []int{B, L, dv}, dO), c.opts)
				if err != nil {
					t.Fatal(err)
				}
				want, err := reference.AdditiveAttentionBackward(q, [3]int{B, L, dq}, k, [3]int{B, S, dk}, v, [3]int{B, S, dv}, w, dO, c.opts)
				if err != nil {
					t.Fatal(err)
				}
				compareOptionalGrads(t, namedGrad{"dq", g.DQ, want.DQ}, namedGrad{"dk", g.DK, want.DK}, namedGrad{"dv", g.DV, want.DV},
					namedGrad{"dW_q", g.DWQ, want.DWQ}, namedGrad{"dW_k", g.DWK, want.DWK}, namedGrad{"db", g.DBias, want.DBias},
					namedGrad{"dw_a", g.DWA, want.DWA}, namedGrad{"dsinks", g.DSinks, want.DSinks})
			})
		}
	}
}
