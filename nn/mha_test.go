package nn_test

import (
	"errors"
	"fmt"
	"math"
	"math/rand"
	"path/filepath"
	"testing"

	"github.com/vkattn/vkattn"
	"github.com/vkattn/vkattn/internal/devtest"
	"github.com/vkattn/vkattn/internal/testutil"
	"github.com/vkattn/vkattn/nn"
	"github.com/vkattn/vkattn/pipelines"
	"github.com/vkattn/vkattn/reference"
	"github.com/vkattn/vkattn/weights"
)

// storeWeightsAs has w store its weight matrices as dt, rounded to it by
// the tests' own rounding (roundAll), so the reference reads what the
// device holds.
func storeWeightsAs(w *nn.MHAWeights, dt vkattn.DType) {
	for _, m := range []*[]float32{&w.InProjWeight, &w.QProjWeight, &w.KProjWeight, &w.VProjWeight, &w.OutProjWeight} {
		if *m != nil {
			*m = devtest.RoundAll(dt, *m)
		}
	}
	w.DType = dt
}

// planMHA is what c's layer would run on d.
func planMHA(t *testing.T, d *vkattn.Device, c *devtest.MHACase) nn.MHAPlan {
	t.Helper()
	layer, err := nn.NewMHA(d, c.W)
	if err != nil {
		t.Fatal(err)
	}
	defer layer.Close()
	plan, err := layer.Plan(c.XS, c.KeyS, c.ValueS, c.Opts)
	if err != nil {
		t.Fatal(err)
	}
	return plan
}

// SEMANTICS.md §11 walk-through, B=2, T=3, d=8, h=2: 288 parameters; X (2,3,8)
// -> one fused projection (6 rows x 24 outputs) -> per-head attention
// (2,2,3,4) -> out_proj (6 x 8) -> (2,3,8), as the reference computes it.
func TestMHASpecWalkthroughGPU(t *testing.T) {
	const B, T, d, h = 2, 3, 8, 2
	r := rand.New(rand.NewSource(3))
	w := devtest.RandomMHA(r, d, d, d, true)
	if n := w.ParamCount(); n != 288 {
		t.Fatalf("ParamCount = %d, want 4d^2 + 4d = 288", n)
	}
	c := &devtest.MHACase{W: w, X: devtest.RandomValues(r, B*T*d), XS: []int{B, T, d}, Opts: nn.MHAOptions{Heads: h, NeedWeights: true}}
	got := devtest.CheckMHA(t, devtest.Dev, c)
	p := got.Plan
	if len(p.Projections) != 1 || p.Projections[0].Rows != B*T || p.Projections[0].Outputs != 3*d || p.Projections[0].Inputs != d {
		t.Fatalf("projections %v, want one fused (6 x 8) x (24 x 8)^T", p.Projections)
	}
	if want := (vkattn.Dims{B: 2, H: 2, HKV: 2, L: 3, S: 3, DK: 4, DV: 4}); p.Attention.Dims != want {
		t.Fatalf("per-head dims %v, want %v", p.Attention.Dims, want)
	}
	if o := p.OutProj; o.Rows != B*T || o.Outputs != d || o.Inputs != d {
		t.Fatalf("out_proj %v, want (6 x 8) x (8 x 8)^T", o)
	}
	if got.OutShape != [4]int{1, B, T, d} {
		t.Fatalf("output shape %v, want (2,3,8)", got.OutShape)
	}
	if len(got.Weights) != B*h*T*T || len(got.Avg) != B*T*T {
		t.Fatalf("weights %d and averaged %d values, want 36 and 18", len(got.Weights), len(got.Avg))
	}
	// FLOPs: fused projection 2*6*24*8, attention 4*2*2*3*3*4, out 2*6*8*8.
	if f, want := p.FLOPs(), float64(2*6*24*8+4*2*2*3*3*4+2*6*8*8); f != want {
		t.Fatalf("FLOPs %v, want %v", f, want)
	}
}

// mhaParityCases are the cases tools/mha_parity.py writes to testdata/mha.
var mhaParityCases = []struct {
	name               string
	heads              int
	dModel, kdim, vdim int
}{
	{"self", 2, 8, 8, 8},
	{"cross", 2, 8, 5, 6},
	{"padcausal", 3, 12, 12, 12},
	{"mask3d", 4, 16, 16, 16},
}

// loadMHAParity reads parity case i: its layer (from the params file of
// the given format, ".npz" or ".safetensors"), inputs and options, and
// the arrays of CASE.npz.
func loadMHAParity(t *testing.T, i int, format string) (*devtest.MHACase, map[string]weights.Tensor) {
	t.Helper()
	c := mhaParityCases[i]
	dir := filepath.Join("..", "testdata", "mha")
	data, err := weights.Load(filepath.Join(dir, c.name+".npz"))
	if err != nil {
		t.Fatal(err)
	}
	w, err := weights.LoadMHA(filepath.Join(dir, c.name+"_params"+format), c.dModel, c.kdim, c.vdim)
	if err != nil {
		t.Fatal(err)
	}
	q := data["query"]
	mc := &devtest.MHACase{W: w, X: q.Data, XS: q.Shape}
	if k, ok := data["key"]; ok {
		mc.Key, mc.KeyS, mc.Value, mc.ValueS = k.Data, k.Shape, data["value"].Data, data["value"].Shape
	}
	B, T, S := q.Shape[0], q.Shape[1], q.Shape[1]
	if mc.KeyS != nil {
		S = mc.KeyS[1]
	}
	if mc.Opts, err = weights.MHAOptions(data, c.heads, B, T, S); err != nil {
		t.Fatal(err)
	}
	return mc, data
}

// PyTorch parity: testdata/mha holds nn.MultiheadAttention outputs made by
// tools/mha_parity.py (PyTorch 1.13); the GPU layer must match them.
func TestMHAPyTorchParityGPU(t *testing.T) {
	for i, c := range mhaParityCases {
		for plan, d := range devtest.EveryPlan() {
			t.Run(plan+"/"+c.name, func(t *testing.T) {
				t.Parallel() // each plan's device compiles its kernels at once
				// The storage plan reads the safetensors copy of the layer.
				mc, data := loadMHAParity(t, i, map[bool]string{false: ".npz", true: ".safetensors"}[d == devtest.StorageDev])
				mc.Opts.NeedWeights = true
				got := devtest.RunMHA(t, d, mc)
				for _, o := range []struct {
					name string
					got  []float32
				}{{"out", got.Out}, {"weights", got.Weights}, {"weights_avg", got.Avg}} {
					want := data[o.name].Data
					worst := testutil.Near(t, o.name+" against PyTorch's", o.got, want, 2e-5)
					t.Logf("%s: max |GPU - PyTorch| = %.2g", o.name, worst)
				}
			})
		}
	}
}

// Randomised sweep against the float64 reference (fixed seed): every d in
// {8, 64, 96, 128} x h in {1, 2, 8} x T in {1, 17, 129}, each case with one
// mask setting in turn (none, key padding, additive, boolean, causal, all of
// them), self- and cross-attention alternating.
func TestMHASweep(t *testing.T) {
	r := rand.New(rand.NewSource(11))
	i := 0
	var names []string
	var cases []*devtest.MHACase
	var kernels []pipelines.AttentionPlan
	for _, d := range []int{8, 64, 128} {
		for _, h := range []int{1, 2, 8} {
			for _, T := range []int{1, 17, 129} {
				if T == 17 && h != 2 {
					continue // the weights of T > 1 rows: once per width
				}
				masks := []string{"none", "key padding", "additive", "boolean", "causal", "all"}[i%6]
				cross := i%2 == 1
				i++
				c := devtest.RandomMHACase(r, d, h, T, masks, cross)
				names = append(names, fmt.Sprintf("d%d/h%d/T%d/%s/cross=%v", d, h, T, masks, cross))
				cases = append(cases, c)
				kernels = append(kernels, devtest.KernelOf(planMHA(t, devtest.Dev, c).Attention.Kernel))
			}
		}
	}
	devtest.InCompileOrder(t, kernels, func(i int) string { return names[i] }, func(t *testing.T, i int) {
		devtest.OnPool(t, devtest.Dev, func(d *vkattn.Device) { devtest.CheckMHA(t, d, cases[i]) })
	})
}

// An MHA layer reads float16 and bfloat16 inputs as stored: its output is
// that of the inputs' values (SEMANTICS.md §9.1), here for float32
// weights on lavapipe's plan (linear.comp widening X) and, with float16
// weights too, on NVIDIA's; cross-attention with a half key and value.
func TestMHAHalfInputs(t *testing.T) {
	const B, T, S, d, kdim, h = 2, 5, 7, 8, 6, 2
	r := rand.New(rand.NewSource(234))
	for _, c := range []struct {
		plan  string
		x, w  vkattn.DType
		cross bool
	}{
		{"auto", vkattn.Float16, vkattn.Float32, false},
		{"auto", vkattn.BFloat16, vkattn.Float32, true},
		{"nvidia", vkattn.Float16, vkattn.Float16, true},
	} {
		t.Run(fmt.Sprintf("%s/x %v, weights %v", c.plan, c.x, c.w), func(t *testing.T) {
			in := halfLayerCase{w: devtest.RandomMHA(r, d, d, d, true), xs: []int{B, T, d}, dt: c.x, opts: nn.MHAOptions{Heads: h}}
			if c.cross {
				in.w, in.kvs = devtest.RandomMHA(r, d, kdim, kdim, true), []int{B, S, kdim}
			}
			storeWeightsAs(in.w, c.w)
			in.check(t, devtest.EveryPlan()[c.plan], r)
		})
	}
}

// elements is the element count of a shape.
func elements(shape []int) int {
	n := 1
	for _, e := range shape {
		n *= e
	}
	return n
}

// halfLayerCase is an MHA call whose inputs, random, are stored as dt:
// x of shape xs, and for cross-attention one array of shape kvs as key
// and value.
type halfLayerCase struct {
	w       *nn.MHAWeights
	xs, kvs []int
	dt      vkattn.DType
	opts    nn.MHAOptions
}

// check runs the call on d and compares Out with the float64 reference of
// the stored values; it returns the plan the call ran.
func (c *halfLayerCase) check(t *testing.T, d *vkattn.Device, r *rand.Rand) nn.MHAPlan {
	t.Helper()
	layer, err := nn.NewMHA(d, c.w)
	if err != nil {
		t.Fatal(err)
	}
	defer layer.Close()
	x := devtest.RoundAll(c.dt, devtest.RandomValues(r, elements(c.xs)))
	xt := devtest.MustUploadAs(t, d, c.xs, x, c.dt)
	defer xt.Close()
	var kv []float32
	var kvt *vkattn.Tensor
	if c.kvs != nil {
		kv = devtest.RoundAll(c.dt, devtest.RandomValues(r, elements(c.kvs)))
		kvt = devtest.MustUploadAs(t, d, c.kvs, kv, c.dt)
		defer kvt.Close()
	}
	out, err := layer.Forward(xt, kvt, kvt, c.opts)
	if err != nil {
		t.Fatal(err)
	}
	defer out.Close()
	want, err := reference.MultiHeadAttention(x, c.xs, kv, c.kvs, kv, c.kvs, c.w, c.opts)
	if err != nil {
		t.Fatal(err)
	}
	devtest.Compare(t, "out", devtest.Download(t, out.Out), want.Out)
	return out.Plan
}

// The storage load path (what GPUs run) on a smaller sweep.
func TestMHAStoragePath(t *testing.T) {
	r := rand.New(rand.NewSource(12))
	for i, s := range []struct{ d, h, T int }{{8, 2, 5}, {64, 8, 17}, {96, 2, 33}, {20, 5, 9}} {
		masks := []string{"all", "key padding", "causal", "none"}[i]
		t.Run(fmt.Sprintf("d%d/h%d/T%d/%s", s.d, s.h, s.T, masks), func(t *testing.T) {
			devtest.CheckMHA(t, devtest.StorageDev, devtest.RandomMHACase(r, s.d, s.h, s.T, masks, i%2 == 1))
		})
	}
}

// A row whose keys are all padded has zero attention, so its output is
// out_proj.bias exactly (PyTorch gives NaN; vkattn documents the choice).
func TestMHAFullyPaddedRowGivesBias(t *testing.T) {
	r := rand.New(rand.NewSource(5))
	const B, T, d, h = 2, 4, 8, 2
	c := &devtest.MHACase{W: devtest.RandomMHA(r, d, d, d, true), X: devtest.RandomValues(r, B*T*d), XS: []int{B, T, d}, Opts: nn.MHAOptions{Heads: h}}
	c.Opts.KeyPadding = &nn.KeyPadding{Padded: make([]bool, B*T)}
	for j := 0; j < T; j++ {
		c.Opts.KeyPadding.Padded[T+j] = true // batch item 1: every key padded
	}
	got := devtest.CheckMHA(t, devtest.Dev, c)
	for i := T * d; i < 2*T*d; i++ {
		if got.Out[i] != c.W.OutProjBias[i%d] {
			t.Fatalf("out[%d] = %v, want out_proj.bias[%d] = %v", i, got.Out[i], i%d, c.W.OutProjBias[i%d])
		}
	}
}

// A prepared layer replays with new inputs written in place.
func TestMHAPreparedReplays(t *testing.T) {
	r := rand.New(rand.NewSource(8))
	const B, T, d, h = 1, 9, 16, 4
	c := &devtest.MHACase{W: devtest.RandomMHA(r, d, d, d, true), XS: []int{B, T, d}, Opts: nn.MHAOptions{Heads: h, Attention: vkattn.Options{Causal: vkattn.CausalTopLeft}}}
	layer, err := nn.NewMHA(devtest.Dev, c.W)
	if err != nil {
		t.Fatal(err)
	}
	defer layer.Close()
	x := devtest.Zeros(t, devtest.Dev, c.XS...)
	call, err := layer.Prepare(x, nil, nil, c.Opts)
	if err != nil {
		t.Fatal(err)
	}
	defer call.Close()
	for run := 0; run < 3; run++ {
		c.X = devtest.RandomValues(r, B*T*d)
		got := devtest.Replay(t, x, c.X, call.Run, call.Output().Out)
		want, err := reference.MultiHeadAttention(c.X, c.XS, nil, nil, nil, nil, c.W, c.Opts)
		if err != nil {
			t.Fatal(err)
		}
		devtest.Compare(t, fmt.Sprintf("run %d out", run), got, want.Out)
	}
}

func TestMHAErrors(t *testing.T) {
	r := rand.New(rand.NewSource(9))
	w := devtest.RandomMHA(r, 8, 8, 8, true)
	layer, err := nn.NewMHA(devtest.Dev, w)
	if err != nil {
		t.Fatal(err)
	}
	defer layer.Close()
	x := devtest.Upload(t, devtest.Dev, []int{2, 3, 8}, devtest.RandomValues(r, 48))
	narrow := devtest.Upload(t, devtest.Dev, []int{2, 3, 7}, devtest.RandomValues(r, 42))
	bad := *w
	bad.OutProjWeight = bad.OutProjWeight[:60]
	devtest.CheckRefusals(t, []devtest.Refusal{
		{Name: "nil weights", Err: vkattn.ErrShape, Run: func() error { _, err := nn.NewMHA(devtest.Dev, nil); return err }},
		{Name: "short out_proj.weight", Err: vkattn.ErrShape, Run: func() error { _, err := nn.NewMHA(devtest.Dev, &bad); return err }},
		{Name: "heads do not divide d", Err: vkattn.ErrHeads, Run: func() error { _, err := layer.Forward(x, nil, nil, nn.MHAOptions{Heads: 3}); return err }},
		{Name: "zero heads", Err: vkattn.ErrHeads, Run: func() error { _, err := layer.Forward(x, nil, nil, nn.MHAOptions{}); return err }},
		{Name: "wrong width", Err: vkattn.ErrShape, Run: func() error { _, err := layer.Forward(narrow, nil, nil, nn.MHAOptions{Heads: 2}); return err }},
		{Name: "key without value", Err: vkattn.ErrShape, Run: func() error { _, err := layer.Forward(x, x, nil, nn.MHAOptions{Heads: 2}); return err }},
		{Name: "view input", Err: vkattn.ErrShape, Run: func() error {
			_, err := layer.Forward(x.SwapAxes12(), nil, nil, nn.MHAOptions{Heads: 2})
			return err
		}},
		{Name: "key padding size", Err: vkattn.ErrMask, Run: func() error {
			_, err := layer.Forward(x, nil, nil, nn.MHAOptions{Heads: 2, KeyPadding: &nn.KeyPadding{Padded: make([]bool, 5)}})
			return err
		}},
		{Name: "mask shape", Err: vkattn.ErrMask, Run: func() error {
			_, err := layer.Forward(x, nil, nil, nn.MHAOptions{Heads: 2, Attention: vkattn.Options{Mask: &vkattn.Mask{Shape: vkattn.MaskShape{1, 1, 3, 4}, Values: make([]float32, 12)}}})
			return err
		}},
		{Name: "plan rank", Err: vkattn.ErrShape, Run: func() error { _, err := layer.Plan([]int{8}, nil, nil, nn.MHAOptions{Heads: 2}); return err }},
	})
	layer.Close()
	if _, err := layer.Forward(x, nil, nil, nn.MHAOptions{Heads: 2}); !errors.Is(err, vkattn.ErrClosed) {
		t.Errorf("after Close: %v, want ErrClosed", err)
	}
}

// Grouped-query layers (k_proj_weight and v_proj_weight with fewer rows
// than d) on both load paths, self- and cross-attention, with masks and
// weights, against the reference.
func TestMHAGroupedQueryGPU(t *testing.T) {
	r := rand.New(rand.NewSource(41))
	for i, s := range []struct{ d, h, kvHeads, T, S, kdim int }{
		{64, 8, 2, 17, 17, 64}, // self-attention (separate weights)
		{32, 4, 1, 9, 12, 20},  // multi-query, cross-attention
		{96, 8, 4, 33, 33, 96},
	} {
		for _, d := range []*vkattn.Device{devtest.Dev, devtest.StorageDev} {
			t.Run(fmt.Sprintf("d%d/h%d/kv%d/%d", s.d, s.h, s.kvHeads, i), func(t *testing.T) {
				const B = 2
				dh := s.d / s.h
				kv := s.kvHeads * dh
				scaled := func(n, fanIn int) []float32 {
					x := devtest.RandomValues(r, n)
					for j := range x {
						x[j] /= float32(math.Sqrt(float64(fanIn)))
					}
					return x
				}
				w := &nn.MHAWeights{DModel: s.d, KDim: s.kdim, VDim: s.kdim, KVDim: kv,
					QProjWeight: scaled(s.d*s.d, s.d), KProjWeight: scaled(kv*s.kdim, s.kdim), VProjWeight: scaled(kv*s.kdim, s.kdim),
					InProjBias: devtest.RandomValues(r, s.d+2*kv), OutProjWeight: scaled(s.d*s.d, s.d), OutProjBias: devtest.RandomValues(r, s.d)}
				c := &devtest.MHACase{W: w, X: devtest.RandomValues(r, B*s.T*s.d), XS: []int{B, s.T, s.d},
					Opts: nn.MHAOptions{Heads: s.h, NeedWeights: true, Attention: vkattn.Options{Causal: vkattn.CausalBottomRight}}}
				if s.kdim != s.d || s.S != s.T {
					c.Key, c.KeyS = devtest.RandomValues(r, B*s.S*s.kdim), []int{B, s.S, s.kdim}
					c.Value, c.ValueS = devtest.RandomValues(r, B*s.S*s.kdim), []int{B, s.S, s.kdim}
				}
				c.Opts.KeyPadding = &nn.KeyPadding{Padded: make([]bool, B*s.S)}
				c.Opts.KeyPadding.Padded[2*s.S-1] = true
				got := devtest.CheckMHA(t, d, c)
				if got.Plan.Attention.Dims.HKV != s.kvHeads {
					t.Fatalf("plan %v: want %d K/V heads", got.Plan.Attention, s.kvHeads)
				}
			})
		}
	}
}
