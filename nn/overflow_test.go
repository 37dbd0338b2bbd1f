package nn_test

import (
	"context"
	"errors"
	"math"
	"math/rand"
	"strings"
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

// TestBackwardGradientOverflowIsRefused: a gradient the call's bounds let
// through but whose float32 sums go beyond float32's range on the device
// (terms of both signs: +Inf and -Inf, summed NaN) is refused with
// ErrOverflow naming it, never handed back. x of 1e20 through W_q and W_k
// of 1e-20 (and no bias) keeps the scores small, W_o of 1e-30 keeps dO small, and dY of
// 1e20 times the heads' outputs (V, about x) puts each term of
// out_proj.weight's gradient near 1e40. A replay (PrepareBackward's Run)
// is checked each run: the same call with dY of 1 is finite.
func TestBackwardGradientOverflowIsRefused(t *testing.T) {
	r := rand.New(rand.NewSource(5))
	const B, T, d = 1, 4, 8
	w := devtest.RandomMHA(r, d, d, d, false)
	// Separate W_q, W_k, W_v: the projections are bounded by their own
	// weights' bounds.
	for i := range w.InProjWeight[:2*d*d] {
		w.InProjWeight[i] *= 1e-20
	}
	w.QProjWeight, w.KProjWeight, w.VProjWeight = w.InProjWeight[:d*d], w.InProjWeight[d*d:2*d*d], w.InProjWeight[2*d*d:]
	w.InProjWeight = nil
	for i := range w.OutProjWeight {
		w.OutProjWeight[i] *= 1e-30
	}
	layer, err := nn.NewMHA(devtest.Dev, w)
	if err != nil {
		t.Fatal(err)
	}
	defer layer.Close()
	scaled := func(s float32) []float32 {
		v := devtest.RandomValues(r, B*T*d)
		for i := range v {
			v[i] = s * (0.5 + v[i]*v[i]) * float32(1-2*(i%2)) // magnitudes at least s/2, signs alternating
		}
		return v
	}
	x := devtest.Upload(t, devtest.Dev, []int{B, T, d}, scaled(1e20))
	dY := devtest.Upload(t, devtest.Dev, []int{B, T, d}, scaled(1e20))
	opts := nn.MHAOptions{Heads: 2}
	refused := func(what string, g *nn.MHAGradients, err error) {
		t.Helper()
		if !errors.Is(err, vkattn.ErrOverflow) || !strings.Contains(err.Error(), "out_proj.weight") {
			if g != nil {
				t.Errorf("%s: out_proj.weight[0] = %v, error %v; want ErrOverflow naming out_proj.weight", what, devtest.Download(t, g.Params["out_proj.weight"])[0], err)
				return
			}
			t.Errorf("%s: %v, want ErrOverflow naming out_proj.weight", what, err)
		}
	}
	g, err := layer.Backward(x, nil, nil, dY, opts)
	refused("Backward, dY 1e20", g, err)
	g.Close()

	call, err := layer.PrepareBackward(x, nil, nil, dY, opts)
	if err != nil {
		t.Fatal(err)
	}
	defer call.Close()
	_, err = call.Run(context.Background())
	refused("Run, dY 1e20", call.Output(), err)
	if err := dY.Write(scaled(1)); err != nil {
		t.Fatal(err)
	}
	if _, err := call.Run(context.Background()); err != nil {
		t.Fatalf("Run, dY 1: %v", err)
	}
	for name, p := range call.Output().Params {
		for i, v := range devtest.Download(t, p) {
			if math.IsNaN(float64(v)) || math.IsInf(float64(v), 0) {
				t.Fatalf("Run, dY 1: %s[%d] = %v", name, i, v)
			}
		}
	}
}
