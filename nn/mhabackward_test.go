package nn_test

import (
	"context"
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
// biases and a causal mask (one product for in_proj_weight, one for x);
// cross-attention with separate weights of other widths (10: scalar
// loads), no bias and key padding; a grouped-query layer; grouped-query
// self-attention, whose separate projections each add their share to dx;
// on lavapipe's plan and NVIDIA's.
func TestMHABackward(t *testing.T) {
	const B, T, S, d = 2, 5, 6, 16
	r := rand.New(rand.NewSource(150))
	padded := make([]bool, B*S)
	padded[2], padded[S+5] = true, true
	gqa := devtest.RandomMHA(r, d, 12, 12, true)
	gqa.KVDim = d / 2
	gqa.KProjWeight, gqa.VProjWeight = gqa.KProjWeight[:d/2*12], gqa.VProjWeight[:d/2*12]
	gqa.InProjBias = gqa.InProjBias[:d+d]
	gqaSelf := devtest.RandomMHA(r, d, d+1, d+1, true) // separate weights, cut to (d/2, d)
	gqaSelf.KDim, gqaSelf.VDim, gqaSelf.KVDim = d, d, d/2
	gqaSelf.KProjWeight, gqaSelf.VProjWeight, gqaSelf.InProjBias = gqaSelf.KProjWeight[:d/2*d], gqaSelf.VProjWeight[:d/2*d], gqaSelf.InProjBias[:d+d]
	for _, c := range []struct {
		name string
		w    *nn.MHAWeights
		kdim int // 0: self-attention
		opts nn.MHAOptions
	}{
		{"self, packed, causal", devtest.RandomMHA(r, d, d, d, true), 0, nn.MHAOptions{Heads: 4, Attention: vkattn.Options{Causal: vkattn.CausalTopLeft}}},
		{"cross, separate, key padding", devtest.RandomMHA(r, d, 12, 10, false), 12, nn.MHAOptions{Heads: 2, KeyPadding: &nn.KeyPadding{Padded: padded}}},
		{"grouped-query", gqa, 12, nn.MHAOptions{Heads: 4, Attention: vkattn.Options{Causal: vkattn.CausalBottomRight}}},
		{"grouped-query self", gqaSelf, 0, nn.MHAOptions{Heads: 4}},
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
				defer g.Close()
				want, err := reference.MultiHeadAttentionBackward(x, []int{B, T, 16}, key, ks, value, vs, c.w, dY, c.opts)
				if err != nil {
					t.Fatal(err)
				}
				devtest.CompareOptionalGrads(t, devtest.NamedGrad{Name: "dx", Got: downloadGrad(t, g.DX), Want: want.DX},
					devtest.NamedGrad{Name: "dkey", Got: downloadGrad(t, g.DKey), Want: want.DKey}, devtest.NamedGrad{Name: "dvalue", Got: downloadGrad(t, g.DValue), Want: want.DValue})
				wants := want.Params()
				if len(g.Params) != len(wants) {
					t.Fatalf("gradients of %d parameters, the reference has %d", len(g.Params), len(wants))
				}
				for name, w := range wants {
					devtest.CompareGrad(t, name, downloadGrad(t, g.Params[name]), w)
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
				defer g.Close()
				got := map[string][]float32{"query": downloadGrad(t, g.DX), "key": downloadGrad(t, g.DKey), "value": downloadGrad(t, g.DValue)}
				for name, v := range g.Params {
					got[name] = downloadGrad(t, v)
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

// downloadGrad is a gradient's values on the host; nil for a gradient the
// layer does not have.
func downloadGrad(t *testing.T, x *vkattn.Tensor) []float32 {
	t.Helper()
	if x == nil {
		return nil
	}
	return devtest.Download(t, x)
}

// MHA.Backward and Additive.Backward leave every gradient on the device:
// on a device planned as NVIDIA's, whose buffers are not mapped (a host
// read or write is a staged transfer with a submission and a wait of its
// own), a backward call with no mask or per-head values to upload is one
// submission and one host wait, and nothing passes through staging until
// a gradient is downloaded: the words that say whether each gradient came
// out finite are written by the kernels into host-visible memory and read
// there after the wait.
func TestBackwardStaysOnDevice(t *testing.T) {
	d := devtest.NVIDIADev
	if d.Memory() != vkattn.DiscreteMemory {
		t.Fatalf("NVIDIA's plan places buffers as %v, want DiscreteMemory", d.Memory())
	}
	r := rand.New(rand.NewSource(151))
	const B, T, S, dm = 2, 5, 6, 16
	check := func(what string, backward func() (interface{ Close() }, error)) {
		t.Helper()
		before := d.Stats()
		g, err := backward()
		if err != nil {
			t.Fatal(err)
		}
		defer g.Close()
		if s := d.Stats().Since(before); s.Submits != 1 || s.Waits != 1 || s.StagingBytes != 0 {
			t.Errorf("%s: %d submissions, %d host waits, %d bytes staged; want 1, 1, 0", what, s.Submits, s.Waits, s.StagingBytes)
		}
	}
	mha, err := nn.NewMHA(d, devtest.RandomMHA(r, dm, dm, dm, true))
	if err != nil {
		t.Fatal(err)
	}
	defer mha.Close()
	x, dY := devtest.Upload(t, d, []int{B, T, dm}, devtest.RandomValues(r, B*T*dm)), devtest.Upload(t, d, []int{B, T, dm}, devtest.RandomValues(r, B*T*dm))
	check("MHA", func() (interface{ Close() }, error) { return mha.Backward(x, nil, nil, dY, nn.MHAOptions{Heads: 4}) })

	const dq, dk, da, dv = 5, 3, 8, 4
	add, err := nn.NewAdditive(d, &nn.AdditiveWeights{DQ: dq, DK: dk, DA: da, WQ: devtest.RandomValues(r, dq*da), WK: devtest.RandomValues(r, dk*da),
		Bias: devtest.RandomValues(r, da), WA: devtest.RandomValues(r, da)})
	if err != nil {
		t.Fatal(err)
	}
	defer add.Close()
	q, k, v := devtest.Upload(t, d, []int{B, T, dq}, devtest.RandomValues(r, B*T*dq)), devtest.Upload(t, d, []int{B, S, dk}, devtest.RandomValues(r, B*S*dk)),
		devtest.Upload(t, d, []int{B, S, dv}, devtest.RandomValues(r, B*S*dv))
	dO := devtest.Upload(t, d, []int{B, T, dv}, devtest.RandomValues(r, B*T*dv))
	check("additive", func() (interface{ Close() }, error) {
		return add.Backward(q, k, v, dO, vkattn.Options{Causal: vkattn.CausalBottomRight})
	})
}

// A backward pass whose tensors are larger than one binding reaches runs
// its products in blocks: cross-attention with packed weights over keys
// and values of 2 x 1100 rows of 16 (137 KiB each, bindings of 128 KiB),
// so dkey and dvalue run in blocks of rows and k_proj's and v_proj's
// weight gradients in blocks of the sum over the rows, each adding to the
// last; against the reference.
func TestMHABackwardBlocks(t *testing.T) {
	d := devtest.SmallBindings(t, vkattn.Config{})
	const B, T, S, dm, h = 2, 3, 1100, 16, 2
	r := rand.New(rand.NewSource(152))
	w := devtest.RandomMHA(r, dm, dm, dm, true)
	x, key, value, dY := devtest.RandomValues(r, B*T*dm), devtest.RandomValues(r, B*S*dm), devtest.RandomValues(r, B*S*dm), devtest.RandomValues(r, B*T*dm)
	layer, err := nn.NewMHA(d, w)
	if err != nil {
		t.Fatal(err)
	}
	defer layer.Close()
	xs, kvs := []int{B, T, dm}, []int{B, S, dm}
	opts := nn.MHAOptions{Heads: h}
	call, err := layer.PrepareBackward(devtest.Upload(t, d, xs, x), devtest.Upload(t, d, kvs, key), devtest.Upload(t, d, kvs, value), devtest.Upload(t, d, xs, dY), opts)
	if err != nil {
		t.Fatal(err)
	}
	defer call.Close()
	if _, err := call.Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	g := call.Output()
	want, err := reference.MultiHeadAttentionBackward(x, xs, key, kvs, value, kvs, w, dY, opts)
	if err != nil {
		t.Fatal(err)
	}
	devtest.CompareOptionalGrads(t, devtest.NamedGrad{Name: "dx", Got: downloadGrad(t, g.DX), Want: want.DX},
		devtest.NamedGrad{Name: "dkey", Got: downloadGrad(t, g.DKey), Want: want.DKey}, devtest.NamedGrad{Name: "dvalue", Got: downloadGrad(t, g.DValue), Want: want.DValue})
	for name, w := range want.Params() {
		devtest.CompareGrad(t, name, downloadGrad(t, g.Params[name]), w)
	}
}

// checkHalfBackward runs the backward of a self-attention layer whose
// weights and input are float16 and whose dY is bfloat16 on d (the
// gradient products read each operand as stored) and compares every
// gradient with the reference's on the stored values.
func checkHalfBackward(t *testing.T, d *vkattn.Device) {
	t.Helper()
	const B, T, dm = 2, 5, 16
	r := rand.New(rand.NewSource(153))
	w := devtest.RandomMHA(r, dm, dm, dm, true)
	storeWeightsAs(w, vkattn.Float16)
	xs := []int{B, T, dm}
	x, dY := devtest.RoundAll(vkattn.Float16, devtest.RandomValues(r, B*T*dm)), devtest.RoundAll(vkattn.BFloat16, devtest.RandomValues(r, B*T*dm))
	layer, err := nn.NewMHA(d, w)
	if err != nil {
		t.Fatal(err)
	}
	defer layer.Close()
	opts := nn.MHAOptions{Heads: 4, Attention: vkattn.Options{Causal: vkattn.CausalTopLeft}}
	g, err := layer.Backward(uploadAs(t, d, xs, x, vkattn.Float16), nil, nil, uploadAs(t, d, xs, dY, vkattn.BFloat16), opts)
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	want, err := reference.MultiHeadAttentionBackward(x, xs, nil, nil, nil, nil, w, dY, opts)
	if err != nil {
		t.Fatal(err)
	}
	devtest.CompareGrad(t, "dx", downloadGrad(t, g.DX), want.DX)
	for name, w := range want.Params() {
		devtest.CompareGrad(t, name, downloadGrad(t, g.Params[name]), w)
	}
}

// MHA.Backward of float16 weights and input and a bfloat16 dY equals the
// reference's on the stored values.
func TestMHABackwardHalf(t *testing.T) { checkHalfBackward(t, devtest.Dev) }

// The same where the forward's projections run on the cooperative
// matrices (float16 x and W), which the backward pass recomputes there.
func TestCoopmatMHABackward(t *testing.T) { checkHalfBackward(t, devtest.CoopmatDevice(t)) }

// uploadAs uploads x stored as dt; the test's cleanup closes it.
func uploadAs(t *testing.T, d *vkattn.Device, shape []int, x []float32, dt vkattn.DType) *vkattn.Tensor {
	t.Helper()
	tt := devtest.MustUploadAs(t, d, shape, x, dt)
	t.Cleanup(tt.Close)
	return tt
}
