package nn_test

import (
	"errors"
	"math/rand"
	"testing"

	"github.com/vkattn/vkattn"
	"github.com/vkattn/vkattn/internal/devtest"
	"github.com/vkattn/vkattn/nn"
)

// TestLayerOverflowIsRefused: MHA and additive attention bound their
// device-made projections from the inputs and the weights (d inputs x
// max|x| x max|W| + max|b|) and refuse a call that could overflow.
func TestLayerOverflowIsRefused(t *testing.T) {
	r := rand.New(rand.NewSource(4))
	const B, T, d = 1, 3, 8
	w := devtest.RandomMHA(r, d, d, d, true)
	for i := range w.InProjWeight {
		w.InProjWeight[i] *= 1e19 // projections ~3e19, their dot products ~1e39
	}
	layer, err := nn.NewMHA(devtest.Dev, w)
	if err != nil {
		t.Fatal(err)
	}
	defer layer.Close()
	x := devtest.Upload(t, devtest.Dev, []int{B, T, d}, devtest.RandomValues(r, B*T*d))
	if out, err := layer.Forward(x, nil, nil, nn.MHAOptions{Heads: 2}); !errors.Is(err, vkattn.ErrOverflow) {
		out.Close()
		t.Errorf("MHA with 1e19 weights: %v, want ErrOverflow", err)
	}

	aw := &nn.AdditiveWeights{DQ: 2, DK: 2, DA: 2, WQ: devtest.Filled(4, 1e38), WK: devtest.Filled(4, 1), WA: devtest.Filled(2, 1)}
	add, err := nn.NewAdditive(devtest.Dev, aw)
	if err != nil {
		t.Fatal(err)
	}
	defer add.Close()
	aq, ak, av := devtest.Upload(t, devtest.Dev, []int{1, 2, 2}, devtest.Filled(4, 3)), devtest.Upload(t, devtest.Dev, []int{1, 3, 2}, devtest.Filled(6, 1)), devtest.Upload(t, devtest.Dev, []int{1, 3, 2}, devtest.Filled(6, 1))
	if out, err := add.Attention(aq, ak, av, vkattn.Options{}); !errors.Is(err, vkattn.ErrOverflow) {
		out.Close()
		t.Errorf("additive with q W_q = 6e38: %v, want ErrOverflow", err)
	}
}
