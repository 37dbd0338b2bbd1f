package vkattn_test

import (
	"errors"
	"fmt"
	"math"
	"math/rand"
	"path/filepath"
	"testing"

	"github.com/vkattn/vkattn"
	"github.com/vkattn/vkattn/internal/testutil"
	"github.com/vkattn/vkattn/pipelines"
	"github.com/vkattn/vkattn/reference"
	"github.com/vkattn/vkattn/weights"
)

// randomMHA returns weights scaled like PyTorch's initialisation (uniform
// in ±1/sqrt(fan_in)), so activations stay O(1) at every width: packed when
// kdim = vdim = d, separate otherwise.
func randomMHA(r *rand.Rand, d, kdim, vdim int, bias bool) *vkattn.MHAWeights {
	scaled := func(n, fanIn int) []float32 {
		x := randomValues(r, n)
		for i := range x {
			x[i] /= float32(math.Sqrt(float64(fanIn)))
		}
		return x
	}
	w := &vkattn.MHAWeights{DModel: d, KDim: kdim, VDim: vdim, OutProjWeight: scaled(d*d, d)}
	if kdim == d && vdim == d {
		w.InProjWeight = scaled(3*d*d, d)
	} else {
		w.QProjWeight, w.KProjWeight, w.VProjWeight = scaled(d*d, d), scaled(d*kdim, kdim), scaled(d*vdim, vdim)
	}
	if bias {
		w.InProjBias, w.OutProjBias = randomValues(r, 3*d), randomValues(r, d)
	}
	return w
}

// storeWeightsAs has w store its weight matrices as dt, rounded to it by
// the tests' own rounding (roundAll), so the reference reads what the
// device holds.
func storeWeightsAs(w *vkattn.MHAWeights, dt vkattn.DType) {
	for _, m := range []*[]float32{&w.InProjWeight, &w.QProjWeight, &w.KProjWeight, &w.VProjWeight, &w.OutProjWeight} {
		if *m != nil {
			*m = roundAll(dt, *m)
		}
	}
	w.DType = dt
}

// mhaCase is one layer call with host data.
type mhaCase struct {
	w                *vkattn.MHAWeights
	x, key, value    []float32
	xs, keyS, valueS []int // nil key and value for self-attention
	opts             vkattn.MHAOptions
}

type mhaGot struct {
	out, weights, avg []float32
	plan              vkattn.MHAPlan
	outShape          [4]int
}

// runMHA runs c on d and downloads every output.
func runMHA(t *testing.T, d *vkattn.Device, c *mhaCase) mhaGot {
	t.Helper()
	layer, err := d.NewMHA(c.w)
	if err != nil {
		t.Fatal(err)
	}
	defer layer.Close()
	upload := func(x []float32, s []int) *vkattn.Tensor {
		if x == nil {
			return nil
		}
		return mustUpload(t, d, s, x)
	}
	x, key, value := upload(c.x, c.xs), upload(c.key, c.keyS), upload(c.value, c.valueS)
	defer x.Close()
	defer key.Close()
	defer value.Close()
	out, err := layer.Forward(x, key, value, c.opts)
	if err != nil {
		t.Fatal(err)
	}
	defer out.Close()
	var g mhaGot
	g.plan, g.outShape = out.Plan, out.Out.Shape()
	if g.out, err = out.Out.Download(); err != nil {
		t.Fatal(err)
	}
	if c.opts.NeedWeights {
		if g.weights, err = out.Weights.Download(); err != nil {
			t.Fatal(err)
		}
		if g.avg, err = out.AvgWeights.Download(); err != nil {
			t.Fatal(err)
		}
	} else if out.Weights != nil || out.AvgWeights != nil {
		t.Fatal("weights returned without NeedWeights")
	}
	// Plan (from shapes alone) agrees with what Forward ran.
	plan, err := layer.Plan(c.xs, c.keyS, c.valueS, c.opts)
	if err != nil {
		t.Fatal(err)
	}
	if plan.String() != g.plan.String() {
		t.Fatalf("Plan:\n%v\nForward ran:\n%v", plan, g.plan)
	}
	return g
}

// planMHA is what c's layer would run on d.
func planMHA(t *testing.T, d *vkattn.Device, c *mhaCase) vkattn.MHAPlan {
	t.Helper()
	layer, err := d.NewMHA(c.w)
	if err != nil {
		t.Fatal(err)
	}
	defer layer.Close()
	plan, err := layer.Plan(c.xs, c.keyS, c.valueS, c.opts)
	if err != nil {
		t.Fatal(err)
	}
	return plan
}

// checkMHA runs c on the GPU and on the float64 reference and compares the
// output and, when asked, the per-head and averaged weights.
func checkMHA(t *testing.T, d *vkattn.Device, c *mhaCase) mhaGot {
	t.Helper()
	got := runMHA(t, d, c)
	want, err := reference.MultiHeadAttention(c.x, c.xs, c.key, c.keyS, c.value, c.valueS, c.w, c.opts)
	if err != nil {
		t.Fatal(err)
	}
	compare(t, "out", got.out, want.Out)
	if c.opts.NeedWeights {
		compare(t, "weights", got.weights, want.Weights)
		compare(t, "averaged weights", got.avg, want.AvgWeights)
	}
	return got
}

// SEMANTICS.md §9 walk-through, B=2, T=3, d=8, h=2: 288 parameters; X (2,3,8)
// -> one fused projection (6 rows x 24 outputs) -> per-head attention
// (2,2,3,4) -> out_proj (6 x 8) -> (2,3,8), as the reference computes it.
func TestMHASpecWalkthroughGPU(t *testing.T) {
	const B, T, d, h = 2, 3, 8, 2
	r := rand.New(rand.NewSource(3))
	w := randomMHA(r, d, d, d, true)
	if n := w.ParamCount(); n != 288 {
		t.Fatalf("ParamCount = %d, want 4d^2 + 4d = 288", n)
	}
	c := &mhaCase{w: w, x: randomValues(r, B*T*d), xs: []int{B, T, d}, opts: vkattn.MHAOptions{Heads: h, NeedWeights: true}}
	got := checkMHA(t, dev, c)
	p := got.plan
	if len(p.Projections) != 1 || p.Projections[0].Rows != B*T || p.Projections[0].Outputs != 3*d || p.Projections[0].Inputs != d {
		t.Fatalf("projections %v, want one fused (6 x 8) x (24 x 8)^T", p.Projections)
	}
	if want := (vkattn.Dims{B: 2, H: 2, HKV: 2, L: 3, S: 3, DK: 4, DV: 4}); p.Attention.Dims != want {
		t.Fatalf("per-head dims %v, want %v", p.Attention.Dims, want)
	}
	if o := p.OutProj; o.Rows != B*T || o.Outputs != d || o.Inputs != d {
		t.Fatalf("out_proj %v, want (6 x 8) x (8 x 8)^T", o)
	}
	if got.outShape != [4]int{1, B, T, d} {
		t.Fatalf("output shape %v, want (2,3,8)", got.outShape)
	}
	if len(got.weights) != B*h*T*T || len(got.avg) != B*T*T {
		t.Fatalf("weights %d and averaged %d values, want 36 and 18", len(got.weights), len(got.avg))
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
func loadMHAParity(t *testing.T, i int, format string) (*mhaCase, map[string]weights.Tensor) {
	t.Helper()
	c := mhaParityCases[i]
	dir := filepath.Join("testdata", "mha")
	data, err := weights.Load(filepath.Join(dir, c.name+".npz"))
	if err != nil {
		t.Fatal(err)
	}
	w, err := weights.LoadMHA(filepath.Join(dir, c.name+"_params"+format), c.dModel, c.kdim, c.vdim)
	if err != nil {
		t.Fatal(err)
	}
	q := data["query"]
	mc := &mhaCase{w: w, x: q.Data, xs: q.Shape}
	if k, ok := data["key"]; ok {
		mc.key, mc.keyS, mc.value, mc.valueS = k.Data, k.Shape, data["value"].Data, data["value"].Shape
	}
	B, T, S := q.Shape[0], q.Shape[1], q.Shape[1]
	if mc.keyS != nil {
		S = mc.keyS[1]
	}
	if mc.opts, err = weights.MHAOptions(data, c.heads, B, T, S); err != nil {
		t.Fatal(err)
	}
	return mc, data
}

// PyTorch parity: testdata/mha holds nn.MultiheadAttention outputs made by
// tools/mha_parity.py (PyTorch 1.13); the GPU layer must match them.
func TestMHAPyTorchParityGPU(t *testing.T) {
	for i, c := range mhaParityCases {
		for plan, d := range everyPlan() {
			t.Run(plan+"/"+c.name, func(t *testing.T) {
				t.Parallel() // each plan's device compiles its kernels at once
				// The storage plan reads the safetensors copy of the layer.
				mc, data := loadMHAParity(t, i, map[bool]string{false: ".npz", true: ".safetensors"}[d == storageDev])
				mc.opts.NeedWeights = true
				got := runMHA(t, d, mc)
				for _, o := range []struct {
					name string
					got  []float32
				}{{"out", got.out}, {"weights", got.weights}, {"weights_avg", got.avg}} {
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
	var cases []*mhaCase
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
				c := randomMHACase(r, d, h, T, masks, cross)
				names = append(names, fmt.Sprintf("d%d/h%d/T%d/%s/cross=%v", d, h, T, masks, cross))
				cases = append(cases, c)
				kernels = append(kernels, kernelOf(planMHA(t, dev, c).Attention.Kernel))
			}
		}
	}
	inCompileOrder(t, kernels, func(i int) string { return names[i] }, func(t *testing.T, i int) {
		onPool(t, dev, func(d *vkattn.Device) { checkMHA(t, d, cases[i]) })
	})
}

// An MHA layer reads float16 and bfloat16 inputs as stored: its output is
// that of the inputs' values (SEMANTICS.md §8.1), here for float32
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
			in := halfLayerCase{w: randomMHA(r, d, d, d, true), xs: []int{B, T, d}, dt: c.x, opts: vkattn.MHAOptions{Heads: h}}
			if c.cross {
				in.w, in.kvs = randomMHA(r, d, kdim, kdim, true), []int{B, S, kdim}
			}
			storeWeightsAs(in.w, c.w)
			in.check(t, everyPlan()[c.plan], r)
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
	w       *vkattn.MHAWeights
	xs, kvs []int
	dt      vkattn.DType
	opts    vkattn.MHAOptions
}

// check runs the call on d and compares Out with the float64 reference of
// the stored values; it returns the plan the call ran.
func (c *halfLayerCase) check(t *testing.T, d *vkattn.Device, r *rand.Rand) vkattn.MHAPlan {
	t.Helper()
	layer, err := d.NewMHA(c.w)
	if err != nil {
		t.Fatal(err)
	}
	defer layer.Close()
	x := roundAll(c.dt, randomValues(r, elements(c.xs)))
	xt := mustUploadAs(t, d, c.xs, x, c.dt)
	defer xt.Close()
	var kv []float32
	var kvt *vkattn.Tensor
	if c.kvs != nil {
		kv = roundAll(c.dt, randomValues(r, elements(c.kvs)))
		kvt = mustUploadAs(t, d, c.kvs, kv, c.dt)
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
	compare(t, "out", download(t, out.Out), want.Out)
	return out.Plan
}

// The storage load path (what GPUs run) on a smaller sweep.
func TestMHAStoragePath(t *testing.T) {
	r := rand.New(rand.NewSource(12))
	for i, s := range []struct{ d, h, T int }{{8, 2, 5}, {64, 8, 17}, {96, 2, 33}, {20, 5, 9}} {
		masks := []string{"all", "key padding", "causal", "none"}[i]
		t.Run(fmt.Sprintf("d%d/h%d/T%d/%s", s.d, s.h, s.T, masks), func(t *testing.T) {
			checkMHA(t, storageDev, randomMHACase(r, s.d, s.h, s.T, masks, i%2 == 1))
		})
	}
}

// randomMHACase builds a layer call with the named masks; cross-attention
// uses S = T+3 keys of widths kdim = d+1, vdim = d+2 (separate weights).
func randomMHACase(r *rand.Rand, d, h, T int, masks string, cross bool) *mhaCase {
	const B = 2
	c := &mhaCase{xs: []int{B, T, d}, opts: vkattn.MHAOptions{Heads: h, NeedWeights: T <= 17}}
	S := T
	if cross {
		S = T + 3
		c.w = randomMHA(r, d, d+1, d+2, r.Intn(2) == 0)
		c.keyS, c.valueS = []int{B, S, d + 1}, []int{B, S, d + 2}
		c.key, c.value = randomValues(r, B*S*(d+1)), randomValues(r, B*S*(d+2))
	} else {
		c.w = randomMHA(r, d, d, d, true)
	}
	c.x = randomValues(r, B*T*d)
	all := masks == "all"
	if all || masks == "key padding" {
		kp := &vkattn.KeyPadding{Padded: make([]bool, B*S)}
		for b := 0; b < B; b++ {
			for j := 0; j < S; j++ {
				// Batch item 1 pads its last third; item 0 pads at random
				// but keeps key 0.
				kp.Padded[b*S+j] = (b == 1 && j >= S-S/3 && j > 0) || (b == 0 && j > 0 && r.Intn(4) == 0)
			}
		}
		c.opts.KeyPadding = kp
	}
	if all || masks == "additive" {
		m := &vkattn.Mask{Shape: vkattn.MaskShape{1, h, T, S}, Values: randomValues(r, h*T*S)}
		m.Values[0] = float32(math.Inf(-1))
		c.opts.Attention.Mask = m
	}
	if all || masks == "boolean" {
		m := vkattn.BoolMask{Shape: vkattn.MaskShape{B, 1, T, S}, Values: make([]bool, B*T*S), Meaning: vkattn.TrueAllows}
		for i := range m.Values {
			m.Values[i] = r.Intn(5) != 0
		}
		c.opts.Attention.BoolMasks = []vkattn.BoolMask{m}
	}
	if all || masks == "causal" {
		c.opts.Attention.Causal = vkattn.CausalBottomRight
		if T%2 == 1 {
			c.opts.Attention.Causal = vkattn.CausalTopLeft
		}
	}
	return c
}

// A row whose keys are all padded has zero attention, so its output is
// out_proj.bias exactly (PyTorch gives NaN; vkattn documents the choice).
func TestMHAFullyPaddedRowGivesBias(t *testing.T) {
	r := rand.New(rand.NewSource(5))
	const B, T, d, h = 2, 4, 8, 2
	c := &mhaCase{w: randomMHA(r, d, d, d, true), x: randomValues(r, B*T*d), xs: []int{B, T, d}, opts: vkattn.MHAOptions{Heads: h}}
	c.opts.KeyPadding = &vkattn.KeyPadding{Padded: make([]bool, B*T)}
	for j := 0; j < T; j++ {
		c.opts.KeyPadding.Padded[T+j] = true // batch item 1: every key padded
	}
	got := checkMHA(t, dev, c)
	for i := T * d; i < 2*T*d; i++ {
		if got.out[i] != c.w.OutProjBias[i%d] {
			t.Fatalf("out[%d] = %v, want out_proj.bias[%d] = %v", i, got.out[i], i%d, c.w.OutProjBias[i%d])
		}
	}
}

// A prepared layer replays with new inputs written in place.
func TestMHAPreparedReplays(t *testing.T) {
	r := rand.New(rand.NewSource(8))
	const B, T, d, h = 1, 9, 16, 4
	c := &mhaCase{w: randomMHA(r, d, d, d, true), xs: []int{B, T, d}, opts: vkattn.MHAOptions{Heads: h, Attention: vkattn.Options{Causal: vkattn.CausalTopLeft}}}
	layer, err := dev.NewMHA(c.w)
	if err != nil {
		t.Fatal(err)
	}
	defer layer.Close()
	x := zeros(t, dev, c.xs...)
	call, err := layer.Prepare(x, nil, nil, c.opts)
	if err != nil {
		t.Fatal(err)
	}
	defer call.Close()
	for run := 0; run < 3; run++ {
		c.x = randomValues(r, B*T*d)
		got := replay(t, x, c.x, call.Run, call.Output().Out)
		want, err := reference.MultiHeadAttention(c.x, c.xs, nil, nil, nil, nil, c.w, c.opts)
		if err != nil {
			t.Fatal(err)
		}
		compare(t, fmt.Sprintf("run %d out", run), got, want.Out)
	}
}

func TestMHAErrors(t *testing.T) {
	r := rand.New(rand.NewSource(9))
	w := randomMHA(r, 8, 8, 8, true)
	layer, err := dev.NewMHA(w)
	if err != nil {
		t.Fatal(err)
	}
	defer layer.Close()
	x := upload(t, dev, []int{2, 3, 8}, randomValues(r, 48))
	narrow := upload(t, dev, []int{2, 3, 7}, randomValues(r, 42))
	bad := *w
	bad.OutProjWeight = bad.OutProjWeight[:60]
	checkRefusals(t, []refusal{
		{"nil weights", vkattn.ErrShape, func() error { _, err := dev.NewMHA(nil); return err }},
		{"short out_proj.weight", vkattn.ErrShape, func() error { _, err := dev.NewMHA(&bad); return err }},
		{"heads do not divide d", vkattn.ErrHeads, func() error { _, err := layer.Forward(x, nil, nil, vkattn.MHAOptions{Heads: 3}); return err }},
		{"zero heads", vkattn.ErrHeads, func() error { _, err := layer.Forward(x, nil, nil, vkattn.MHAOptions{}); return err }},
		{"wrong width", vkattn.ErrShape, func() error { _, err := layer.Forward(narrow, nil, nil, vkattn.MHAOptions{Heads: 2}); return err }},
		{"key without value", vkattn.ErrShape, func() error { _, err := layer.Forward(x, x, nil, vkattn.MHAOptions{Heads: 2}); return err }},
		{"view input", vkattn.ErrShape, func() error {
			_, err := layer.Forward(x.SwapAxes12(), nil, nil, vkattn.MHAOptions{Heads: 2})
			return err
		}},
		{"key padding size", vkattn.ErrMask, func() error {
			_, err := layer.Forward(x, nil, nil, vkattn.MHAOptions{Heads: 2, KeyPadding: &vkattn.KeyPadding{Padded: make([]bool, 5)}})
			return err
		}},
		{"mask shape", vkattn.ErrMask, func() error {
			_, err := layer.Forward(x, nil, nil, vkattn.MHAOptions{Heads: 2, Attention: vkattn.Options{Mask: &vkattn.Mask{Shape: vkattn.MaskShape{1, 1, 3, 4}, Values: make([]float32, 12)}}})
			return err
		}},
		{"plan rank", vkattn.ErrShape, func() error { _, err := layer.Plan([]int{8}, nil, nil, vkattn.MHAOptions{Heads: 2}); return err }},
	})
	layer.Close()
	if _, err := layer.Forward(x, nil, nil, vkattn.MHAOptions{Heads: 2}); !errors.Is(err, vkattn.ErrClosed) {
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
		for _, d := range []*vkattn.Device{dev, storageDev} {
			t.Run(fmt.Sprintf("d%d/h%d/kv%d/%d", s.d, s.h, s.kvHeads, i), func(t *testing.T) {
				const B = 2
				dh := s.d / s.h
				kv := s.kvHeads * dh
				scaled := func(n, fanIn int) []float32 {
					x := randomValues(r, n)
					for j := range x {
						x[j] /= float32(math.Sqrt(float64(fanIn)))
					}
					return x
				}
				w := &vkattn.MHAWeights{DModel: s.d, KDim: s.kdim, VDim: s.kdim, KVDim: kv,
					QProjWeight: scaled(s.d*s.d, s.d), KProjWeight: scaled(kv*s.kdim, s.kdim), VProjWeight: scaled(kv*s.kdim, s.kdim),
					InProjBias: randomValues(r, s.d+2*kv), OutProjWeight: scaled(s.d*s.d, s.d), OutProjBias: randomValues(r, s.d)}
				c := &mhaCase{w: w, x: randomValues(r, B*s.T*s.d), xs: []int{B, s.T, s.d},
					opts: vkattn.MHAOptions{Heads: s.h, NeedWeights: true, Attention: vkattn.Options{Causal: vkattn.CausalBottomRight}}}
				if s.kdim != s.d || s.S != s.T {
					c.key, c.keyS = randomValues(r, B*s.S*s.kdim), []int{B, s.S, s.kdim}
					c.value, c.valueS = randomValues(r, B*s.S*s.kdim), []int{B, s.S, s.kdim}
				}
				c.opts.KeyPadding = &vkattn.KeyPadding{Padded: make([]bool, B*s.S)}
				c.opts.KeyPadding.Padded[2*s.S-1] = true
				got := checkMHA(t, d, c)
				if got.plan.Attention.Dims.HKV != s.kvHeads {
					t.Fatalf("plan %v: want %d K/V heads", got.plan.Attention, s.kvHeads)
				}
			})
		}
	}
}
