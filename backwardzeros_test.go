package vkattn_test

import (
	"fmt"
	"math/rand"
	"testing"

	"github.com/vkattn/vkattn"
	"github.com/vkattn/vkattn/internal/devtest"
	"github.com/vkattn/vkattn/reference"
)

// Gradients that the semantics make exactly zero are exactly zero, element
// by element, not merely small beside the tensor's largest (SEMANTICS.md
// §10): dQ of padded query rows (QueryLengths) and of the rows of an item
// whose key length is 0; dK and dV of a key every query is masked from, and
// of every key of that item. The rest agrees with the float64 reference.
// Grouped-query heads, on lavapipe's plan and NVIDIA's.
func TestGradientsExactZeros(t *testing.T) {
	const B, H, HKV, L, S, D = 2, 4, 2, 5, 7, 8
	for _, plan := range devtest.OwnAndNVIDIA {
		t.Run(plan, func(t *testing.T) {
			d := devtest.EveryPlan()[plan]
			r := rand.New(rand.NewSource(16))
			blocked := make([]bool, B*S) // key 2 of item 0 blocked for every query
			blocked[2] = true
			p := &devtest.Problem{
				Q: devtest.RandomValues(r, B*H*L*D), K: devtest.RandomValues(r, B*HKV*S*D), V: devtest.RandomValues(r, B*HKV*S*D),
				QS: [4]int{B, H, L, D}, KS: [4]int{B, HKV, S, D}, VS: [4]int{B, HKV, S, D},
				Opts: vkattn.Options{KeyLengths: []int{S, 0}, QueryLengths: []int{3, L},
					BoolMasks: []vkattn.BoolMask{{Shape: vkattn.MaskShape{B, 1, 1, S}, Values: blocked, Meaning: vkattn.TrueBlocks}}},
			}
			dO := devtest.RandomValues(r, B*H*L*D)
			g := runBackward(t, d, p, dO)
			defer g.Close()
			dq, dk, dv := devtest.Download(t, g.DQ), devtest.Download(t, g.DK), devtest.Download(t, g.DV)
			// Rows of D elements that must be exactly zero.
			check := func(name string, x []float32, heads, rows int, zero func(b, row int) bool) {
				for b := range B {
					for h := range heads {
						for row := range rows {
							if !zero(b, row) {
								continue
							}
							at := ((b*heads+h)*rows + row) * D
							for i, e := range x[at : at+D] {
								if e != 0 {
									t.Errorf("%s[%d, %d, %d, %d] = %g, want exactly 0", name, b, h, row, i, e)
								}
							}
						}
					}
				}
			}
			check("dQ", dq, H, L, func(b, row int) bool { return b == 1 || row >= 3 })
			for _, x := range []struct {
				name string
				g    []float32
			}{{"dK", dk}, {"dV", dv}} {
				check(x.name, x.g, HKV, S, func(b, key int) bool { return b == 1 || key == 2 })
			}
			want, err := reference.AttentionBackward(p.Q, p.QS, p.K, p.KS, p.V, p.VS, dO, p.Opts)
			if err != nil {
				t.Fatal(err)
			}
			for _, x := range []struct {
				name string
				got  []float32
				want []float64
			}{{"dQ", dq, want.DQ}, {"dK", dk, want.DK}, {"dV", dv, want.DV}} {
				devtest.CompareGrad(t, fmt.Sprintf("%s %s", plan, x.name), x.got, x.want)
			}
		})
	}
}
