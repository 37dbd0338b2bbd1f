package nn_test

import (
	"errors"
	"fmt"
	"math/rand"
	"path/filepath"
	"strings"
	"testing"

	"github.com/vkattn/vkattn"
	"github.com/vkattn/vkattn/internal/devtest"
	"github.com/vkattn/vkattn/nn"
	"github.com/vkattn/vkattn/reference"
	"github.com/vkattn/vkattn/weights"
)

// MHA.Backward equals the float64 reference's layer gradients (itself
// checked by finite differences): self-attention with packed weights,
// biases and a causal mask; cross-attention with separate weights of
// other widths, no bias and key padding; a grouped-query layer; on
// lavapipe's plan and NVIDIA's.
func TestMHABackward(t *testing.T) {
	const B, T, S, d = 2, 5, 6, 16
	r := rand.New(rand.NewSource(150))
	padded := make([]bool, B*S)
	padded[2], padded[S+5] = true, true
	gqa := devtest.RandomMHA(r, d, 12, 12, true)
	gqa.KVDim = d / 2
	gqa.KProjWeight, gqa.VProjWeight = gqa.KProjWeight[:d/2*12], gqa.VProjWeight[:d/2*12]
	gqa.InProjBias = gqa.InProjBias[:d+d]
	for _, c := range []struct {
		name string
		w    *nn.MHAWeights
		kdim int // 0: self-attention
		opts nn.MHAOptions
	}{
		{"self, packed, causal", devtest.RandomMHA(r, d, d, d, true), 0, nn.MHAOptions{Heads: 4, Attention: vkattn.Options{Causal: vkattn.CausalTopLeft}}},
		{"cross, separate, key padding", devtest.RandomMHA(r, d, 12, 10, false), 12, nn.MHAOptions{Heads: 2, KeyPadding: &nn.KeyPadding{Padded: padded}}},
		{"grouped-query", gqa, 12, nn.MHAOptions{Heads: 4, Attention: vkattn.Options{Causal: vkattn.CausalBottomRight}}},
	} {
		for _, plan := range devtest.OwnAndNVIDIA {
			t.Run(fmt.Sprintf("%s/%s", c.name, plan), func(t *testing.T) {
				d := devtest.EveryPlan()[plan]
				layer, err := nn.NewMHA(d, c.w)
				if err != nil {
					t.Fatal(err)
				}
				defer layer.Close()
				x := devtest.RandomValues(r, B*T*16)
				var key, value []float32
				var ks, vs []int
				var kt, vt *vkattn.Tensor
				if c.kdim > 0 {
					key, value = devtest.RandomValues(r, B*S*c.w.KDim), devtest.RandomValues(r, B*S*c.w.VDim)
					ks, vs = []int{B, S, c.w.KDim}, []int{B, S, c.w.VDim}
					kt, vt = devtest.Upload(t, d, ks, key), devtest.Upload(t, d, vs, value)
				}
				dY := devtest.RandomValues(r, B*T*16)
				g, err := layer.Backward(devtest.Upload(t, d, []int{B, T, 16}, x), kt, vt, devtest.Upload(t, d, []int{B, T, 16}, dY), c.opts)
				if err != nil {
					t.Fatal(err)
				}
				want, err := reference.MultiHeadAttentionBackward(x, []int{B, T, 16}, key, ks, value, vs, c.w, dY, c.opts)
				if err != nil {
					t.Fatal(err)
				}
				devtest.CompareOptionalGrads(t, devtest.NamedGrad{Name: "dx", Got: g.DX, Want: want.DX}, devtest.NamedGrad{Name: "dkey", Got: g.DKey, Want: want.DKey}, devtest.NamedGrad{Name: "dvalue", Got: g.DValue, Want: want.DValue})
				wants := want.Params()
				if len(g.Params) != len(wants) {
					t.Fatalf("gradients of %d parameters, the reference has %d", len(g.Params), len(wants))
				}
				for name, w := range wants {
					devtest.CompareGrad(t, name, g.Params[name], w)
				}
			})
		}
	}
	layer, err := nn.NewMHA(devtest.Dev, devtest.RandomMHA(r, d, d, d, true))
	if err != nil {
		t.Fatal(err)
	}
	defer layer.Close()
	x := devtest.Zeros(t, devtest.Dev, B, T, d)
	if _, err := layer.Backward(x, nil, nil, devtest.Zeros(t, devtest.Dev, B, T+1, d), nn.MHAOptions{Heads: 4}); !errors.Is(err, vkattn.ErrShape) {
		t.Errorf("dY of another shape: %v, want ErrShape", err)
	}
}

// MHA.Backward equals PyTorch's autograd of nn.MultiheadAttention
// (testdata/mha/CASE_grads.npz, float64, made by tools/mha_parity.py):
// the inputs' and every parameter's gradients, self- and cross-attention,
// key padding with a causal mask and an additive mask, on lavapipe's plan
// and NVIDIA's, within 1e-4 x max(1, max|PyTorch|).
func TestMHABackwardPyTorchParity(t *testing.T) {
	for i, c := range mhaParityCases {
		for _, plan := range devtest.OwnAndNVIDIA {
			t.Run(plan+"/"+c.name, func(t *testing.T) {
				d := devtest.EveryPlan()[plan]
				mc, _ := loadMHAParity(t, i, ".npz")
				grads, err := weights.Load(filepath.Join("..", "testdata", "mha", c.name+"_grads.npz"))
				if err != nil {
					t.Fatal(err)
				}
				layer, err := nn.NewMHA(d, mc.W)
				if err != nil {
					t.Fatal(err)
				}
				defer layer.Close()
				var key, value *vkattn.Tensor
				if mc.Key != nil {
					key, value = devtest.Upload(t, d, mc.KeyS, mc.Key), devtest.Upload(t, d, mc.ValueS, mc.Value)
				}
				dout := grads["dout"]
				g, err := layer.Backward(devtest.Upload(t, d, mc.XS, mc.X), key, value, devtest.Upload(t, d, dout.Shape, dout.Data), mc.Opts)
				if err != nil {
					t.Fatal(err)
				}
				got := map[string][]float32{"query": g.DX, "key": g.DKey, "value": g.DValue}
				for name, v := range g.Params {
					got[name] = v
				}
				for name, want := range grads {
					name, ok := strings.CutPrefix(name, "grad.")
					if !ok {
						continue
					}
					w64 := make([]float64, len(want.Data))
					for j, x := range want.Data {
						w64[j] = float64(x)
					}
					if got[name] == nil {
						t.Fatalf("no gradient %s", name)
					}
					devtest.CompareGrad(t, name, got[name], w64)
					delete(got, name)
				}
				for name, v := range got {
					if v != nil {
						t.Errorf("gradient %s that PyTorch's layer does not have", name)
					}
				}
			})
		}
	}
}
