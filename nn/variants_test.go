package nn_test

import (
	"math/rand"
	"testing"

	"github.com/vkattn/vkattn"
	"github.com/vkattn/vkattn/internal/devtest"
	"github.com/vkattn/vkattn/nn"
)

// Additive attention runs the same kernel: the score variants apply to
// its scores w_a . tanh(q + k) as to scaled dot products (one head).
func TestScoreVariantsAdditive(t *testing.T) {
	r := rand.New(rand.NewSource(47))
	const B, L, S, DQ, DK, DA, DV = 2, 6, 11, 5, 7, 8, 4
	for _, d := range []*vkattn.Device{devtest.Dev, devtest.StorageDev} {
		c := &additiveCase{B: B, L: L, S: S, DQ: DQ, DK: DK, DA: DA, DV: DV}
		c.q, c.k, c.v = devtest.RandomValues(r, B*L*DQ), devtest.RandomValues(r, B*S*DK), devtest.RandomValues(r, B*S*DV)
		c.w = &nn.AdditiveWeights{DQ: DQ, DK: DK, DA: DA, WQ: devtest.RandomValues(r, DQ*DA), WK: devtest.RandomValues(r, DK*DA), WA: devtest.RandomValues(r, DA)}
		c.opts = vkattn.Options{Window: &vkattn.Window{Left: 4, Right: 1}, Softcap: 0.9, ALiBi: []float32{0.3}, Sinks: []float32{0.2}}
		t.Run(map[bool]string{false: "auto", true: "storage"}[d == devtest.StorageDev], func(t *testing.T) { checkAdditive(t, d, c) })
	}
}
