package nn_test

import (
	"fmt"
	"math/rand"
	"strings"
	"testing"

	"github.com/vkattn/vkattn"
	"github.com/vkattn/vkattn/internal/devtest"
)

// Multi-head layers with float16 and bfloat16 weights (packed and
// separate q/k/v projections, both load paths, vec4 and scalar widths):
// against the reference on the rounded weights.
func TestMHAHalfWeights(t *testing.T) {
	// NVIDIA's plan loads as AMD's does.
	devtest.InParallel(t, []string{"auto", "storage", "nvidia"}, func(t *testing.T, path string) {
		d := devtest.EveryPlan()[path]
		r := rand.New(rand.NewSource(17))
		for _, dt := range []vkattn.DType{vkattn.Float16, vkattn.BFloat16} {
			for _, cross := range []bool{false, true} {
				width := 16
				if cross {
					width = 6 // scalar loads: the projections of width 7 and 8
				}
				c := devtest.RandomMHACase(r, width, 2, 9, "key padding", cross)
				storeWeightsAs(c.W, dt)
				t.Run(fmt.Sprintf("%v/cross=%v", dt, cross), func(t *testing.T) {
					got := devtest.CheckMHA(t, d, c)
					if s := got.Plan.OutProj.String(); !strings.Contains(s, "W "+dt.String()) {
						t.Errorf("out_proj plan %q does not say it reads %v weights", s, dt)
					}
				})
			}
		}
	})
}
