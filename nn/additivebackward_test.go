package nn_test

import (
	"fmt"
	"math/rand"
	"slices"
	"testing"

	"github.com/vkattn/vkattn"
	"github.com/vkattn/vkattn/internal/devtest"
	"github.com/vkattn/vkattn/nn"
	"github.com/vkattn/vkattn/reference"
)

// Additive.Backward equals the float64 reference's gradients (themselves
// checked by finite differences): with a bias and a float16 dO (widened
// on the device for the attention's backward) on lavapipe's plan; with
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
		dO   vkattn.DType
		opts vkattn.Options
	}{
		{"plain, bias, f16 dO", "auto", true, vkattn.Float16, vkattn.Options{}},
		{"masks, lengths, softcap, sink", "nvidia", false, vkattn.Float32, vkattn.Options{Causal: vkattn.CausalBottomRight, KeyLengths: []int{6, 0},
			BoolMasks: []vkattn.BoolMask{{Shape: vkattn.MaskShape{1, 1, L, S}, Values: allow, Meaning: vkattn.TrueAllows}},
			Softcap:   2, Sinks: []float32{0.4}}},
	} {
		for _, plan := range []string{c.plan} {
			t.Run(fmt.Sprintf("%s/%s", c.name, plan), func(t *testing.T) {
				d := devtest.EveryPlan()[plan]
				w := &nn.AdditiveWeights{DQ: dq, DK: dk, DA: da, WQ: devtest.RandomValues(r, dq*da), WK: devtest.RandomValues(r, dk*da), WA: devtest.RandomValues(r, da)}
				if c.bias {
					w.Bias = devtest.RandomValues(r, da)
				}
				layer, err := nn.NewAdditive(d, w)
				if err != nil {
					t.Fatal(err)
				}
				defer layer.Close()
				q, k, v, dO := devtest.RandomValues(r, B*L*dq), devtest.RandomValues(r, B*S*dk), devtest.RandomValues(r, B*S*dv), devtest.RoundAll(c.dO, devtest.RandomValues(r, B*L*dv))
				g, err := layer.Backward(devtest.Upload(t, d, []int{B, L, dq}, q), devtest.Upload(t, d, []int{B, S, dk}, k), devtest.Upload(t, d, []int{B, S, dv}, v),
					uploadAs(t, d, []int{B, L, dv}, dO, c.dO), c.opts)
				if err != nil {
					t.Fatal(err)
				}
				defer g.Close()
				want, err := reference.AdditiveAttentionBackward(q, [3]int{B, L, dq}, k, [3]int{B, S, dk}, v, [3]int{B, S, dv}, w, dO, c.opts)
				if err != nil {
					t.Fatal(err)
				}
				got := func(x *vkattn.Tensor) []float32 { return downloadGrad(t, x) }
				devtest.CompareOptionalGrads(t, devtest.NamedGrad{Name: "dq", Got: got(g.DQ), Want: want.DQ}, devtest.NamedGrad{Name: "dk", Got: got(g.DK), Want: want.DK},
					devtest.NamedGrad{Name: "dv", Got: got(g.DV), Want: want.DV}, devtest.NamedGrad{Name: "dW_q", Got: got(g.DWQ), Want: want.DWQ},
					devtest.NamedGrad{Name: "dW_k", Got: got(g.DWK), Want: want.DWK}, devtest.NamedGrad{Name: "db", Got: got(g.DBias), Want: want.DBias},
					devtest.NamedGrad{Name: "dw_a", Got: got(g.DWA), Want: want.DWA}, devtest.NamedGrad{Name: "dsinks", Got: got(g.DSinks), Want: want.DSinks})
			})
		}
	}
}
