package verify

import (
	"context"
	"fmt"
	"time"

	"github.com/vkattn/vkattn"
	"github.com/vkattn/vkattn/internal/stats"
	"github.com/vkattn/vkattn/internal/verdict"
	"github.com/vkattn/vkattn/nn"
	"github.com/vkattn/vkattn/reference"
)

// Input is a host array to upload: its shape and values, the element type
// to store them as (zero: float32) and, for a float16 input read as such,
// its bit patterns, uploaded unchanged.
type Input struct {
	Shape []int
	Data  []float32
	Type  vkattn.DType
	Bits  []uint16
}

func (in *Input) upload(dev *vkattn.Device) (*vkattn.Tensor, error) {
	if in.Type == vkattn.Float16 && in.Bits != nil {
		return dev.UploadBits(in.Shape, in.Bits, vkattn.Float16)
	}
	return dev.UploadAs(in.Shape, in.Data, in.Type)
}

// values are in's values and shape, nil for no input.
func (in *Input) values() ([]float32, []int) {
	if in == nil {
		return nil, nil
	}
	return in.Data, in.Shape
}

// uploadAll uploads the inputs (a nil one gives a nil tensor); free closes
// what was uploaded, also after an error.
func uploadAll(dev *vkattn.Device, ins ...*Input) (ts []*vkattn.Tensor, free func(), err error) {
	free = func() {
		for _, t := range ts {
			t.Close()
		}
	}
	for _, in := range ins {
		var t *vkattn.Tensor
		if in != nil {
			if t, err = in.upload(dev); err != nil {
				return ts, free, err
			}
		}
		ts = append(ts, t)
	}
	return ts, free, nil
}

// RunCall uploads Q, K and V (a nil v uploads nothing: prepare gets a nil
// V, as when it reads V from K's columns), runs the call prepare makes of
// them (planned, if not nil, sees its plan before it runs) and downloads
// its outputs.
func RunCall(dev *vkattn.Device, q, k Input, v *Input, prepare func(q, k, v *vkattn.Tensor) (*vkattn.Call, error), planned func(vkattn.Plan)) (*Outputs, error) {
	ts, free, err := uploadAll(dev, &q, &k, v)
	defer free()
	if err != nil {
		return nil, err
	}
	call, err := prepare(ts[0], ts[1], ts[2])
	if err != nil {
		return nil, err
	}
	defer call.Close()
	out := call.Output()
	if planned != nil {
		planned(out.Plan)
	}
	if _, err := call.Run(context.Background()); err != nil {
		return nil, err
	}
	res := &Outputs{Plan: out.Plan, GPUTime: out.GPUTime}
	for _, d := range []struct {
		t   *vkattn.Tensor
		dst *[]float32
	}{{out.O, &res.O}, {out.LSE, &res.LSE}, {out.Weights, &res.Weights}} {
		if d.t == nil {
			continue
		}
		if *d.dst, err = d.t.Download(); err != nil {
			return nil, err
		}
	}
	return res, nil
}

// Check compares the outputs with the float64 reference's: O, and the
// log-sum-exp and weights where the call gave them. q, k and v are the
// call's inputs as stored and scale its score scale: a plan on cooperative
// matrices is held to its stated bound (Plan.MatrixErrorBound) on top of
// the float32 tolerance.
func (o *Outputs) Check(ref *reference.Result, q, k, v []float32, scale vkattn.Scale) *verdict.Check {
	chk := &verdict.Check{}
	bound := o.Plan.MatrixErrorBound(q, k, v, scale)
	chk.AddWithin("O", o.O, ref.O, bound.O)
	if o.LSE != nil {
		chk.AddWithin("LSE", o.LSE, ref.LSE, bound.LSE)
	}
	if o.Weights != nil {
		chk.Add("weights", o.Weights, ref.Weights)
	}
	return chk
}

// MHAForward uploads x and kv (nil for self-attention; one array serves as
// key and value), prepares the layer's call (planned, if not nil, sees its
// plan before it runs), runs it and downloads Out (as O) and, with
// opts.NeedWeights, the per-head weights or, with average, their mean over
// heads (as Weights). With check it also compares them with
// reference.MultiHeadAttention.
func MHAForward(dev *vkattn.Device, layer *nn.MHA, w *nn.MHAWeights, x Input, kv *Input, opts nn.MHAOptions, average, check bool,
	planned func(nn.MHAPlan)) (*Outputs, *verdict.Check, error) {
	ts, free, err := uploadAll(dev, &x, kv)
	defer free()
	if err != nil {
		return nil, nil, err
	}
	call, err := layer.Prepare(ts[0], ts[1], ts[1], opts)
	if err != nil {
		return nil, nil, err
	}
	defer call.Close()
	out := call.Output()
	if planned != nil {
		planned(out.Plan)
	}
	if _, err := call.Run(context.Background()); err != nil {
		return nil, nil, err
	}
	res := &Outputs{LayerPlan: out.Plan, GPUTime: out.GPUTime}
	if res.O, err = out.Out.Download(); err != nil {
		return nil, nil, err
	}
	if opts.NeedWeights {
		weights := out.Weights
		if average {
			weights = out.AvgWeights
		}
		if res.Weights, err = weights.Download(); err != nil {
			return nil, nil, err
		}
	}
	if !check {
		return res, nil, nil
	}
	kvData, kvShape := kv.values()
	ref, err := reference.MultiHeadAttention(x.Data, x.Shape, kvData, kvShape, kvData, kvShape, w, opts)
	if err != nil {
		return nil, nil, fmt.Errorf("reference: %w", err)
	}
	chk := &verdict.Check{}
	chk.Add("out", res.O, ref.Out)
	switch {
	case res.Weights == nil:
	case average:
		chk.Add("averaged weights", res.Weights, ref.AvgWeights)
	default:
		chk.Add("weights", res.Weights, ref.Weights)
	}
	return res, chk, nil
}

// Gradient is one named gradient, of an input or a parameter, with its
// shape.
type Gradient struct {
	Name  string
	Shape []int
	Data  []float32
}

// Gradients are a backward pass's results, downloaded, and with a check
// their comparison with the float64 reference's.
type Gradients struct {
	Grads   []Gradient
	Plan    vkattn.Plan   // the forward's (attention and additive attention)
	GPUTime time.Duration // the backward call's device time
	Check   *verdict.GradCheck
}

// add appends a gradient and, under a check, its comparison with want.
func (g *Gradients) add(name string, shape []int, data []float32, want []float64) {
	g.Grads = append(g.Grads, Gradient{name, shape, data})
	if g.Check != nil {
		g.Check.Add(name, data, want)
	}
}

// runBackward uploads ins, runs backward on them and, with check, want: the
// float64 reference's gradients (zero ones without check).
func runBackward[G, R any](dev *vkattn.Device, ins []*Input, backward func([]*vkattn.Tensor) (G, error), want func() (*R, error), check bool) (G, *R, error) {
	var g G
	ts, free, err := uploadAll(dev, ins...)
	defer free()
	if err != nil {
		return g, nil, err
	}
	if g, err = backward(ts); err != nil {
		return g, nil, err
	}
	ref := new(R)
	if check {
		if ref, err = want(); err != nil {
			return g, nil, fmt.Errorf("reference: %w", err)
		}
	}
	return g, ref, nil
}

func newGradients(check bool) *Gradients {
	if check {
		return &Gradients{Check: &verdict.GradCheck{}}
	}
	return &Gradients{}
}

// AttentionGradients uploads q, k, v and dO, runs Device.AttentionBackward
// and downloads dQ, dK, dV (the shapes of q, k and v) and, with sinks,
// dSinks (H values). shapes are q's, k's and v's as (B, heads, rows,
// width), for the reference's check.
func AttentionGradients(dev *vkattn.Device, q, k, v, dO Input, shapes [3][4]int, opts vkattn.Options, check bool) (*Gradients, error) {
	g, ref, err := runBackward(dev, []*Input{&q, &k, &v, &dO}, func(ts []*vkattn.Tensor) (*vkattn.Gradients, error) {
		return dev.AttentionBackward(ts[0], ts[1], ts[2], ts[3], opts)
	}, func() (*reference.Gradients, error) {
		return reference.AttentionBackward(q.Data, shapes[0], k.Data, shapes[1], v.Data, shapes[2], dO.Data, opts)
	}, check)
	defer g.Close() // nil-safe: also after the reference failed
	if err != nil {
		return nil, err
	}
	res := newGradients(check)
	res.Plan, res.GPUTime = g.Plan, g.GPUTime
	for _, x := range []struct {
		name  string
		shape []int
		t     *vkattn.Tensor
		want  []float64
	}{{"dQ", q.Shape, g.DQ, ref.DQ}, {"dK", k.Shape, g.DK, ref.DK}, {"dV", v.Shape, g.DV, ref.DV}} {
		data, err := x.t.Download()
		if err != nil {
			return nil, err
		}
		res.add(x.name, x.shape, data, x.want)
	}
	if g.DSinks != nil {
		res.add("dSinks", []int{len(g.DSinks)}, g.DSinks, ref.DSinks)
	}
	return res, nil
}

// MHAGradients uploads x, kv (nil for self-attention; one array serves as
// key and value) and dout, runs layer.Backward and returns the gradients
// named as the inputs and w.Params() name them: "x", "kv" (the key's and
// the value's summed) and every parameter's.
func MHAGradients(dev *vkattn.Device, layer *nn.MHA, w *nn.MHAWeights, x Input, kv *Input, dout Input, opts nn.MHAOptions, check bool) (*Gradients, error) {
	g, ref, err := runBackward(dev, []*Input{&x, kv, &dout}, func(ts []*vkattn.Tensor) (*nn.MHAGradients, error) {
		return layer.Backward(ts[0], ts[1], ts[1], ts[2], opts)
	}, func() (*reference.MHAGradients, error) {
		kvData, kvShape := kv.values()
		return reference.MultiHeadAttentionBackward(x.Data, x.Shape, kvData, kvShape, kvData, kvShape, w, dout.Data, opts)
	}, check)
	defer g.Close() // nil-safe: also after the reference failed
	if err != nil {
		return nil, err
	}
	host, err := downloadAll(map[string]*vkattn.Tensor{"x": g.DX, "key": g.DKey, "value": g.DValue}, g.Params)
	if err != nil {
		return nil, err
	}
	res := newGradients(check)
	res.GPUTime = g.GPUTime
	res.add("x", x.Shape, host["x"], ref.DX)
	if kv != nil {
		dkv := make([]float32, len(host["key"]))
		for i := range dkv {
			dkv[i] = host["key"][i] + host["value"][i]
		}
		var want []float64
		if check {
			want = make([]float64, len(ref.DKey))
			for i := range want {
				want[i] = ref.DKey[i] + ref.DValue[i]
			}
		}
		res.add("kv", kv.Shape, dkv, want)
	}
	wants := ref.Params()
	for _, prm := range w.Params() {
		if data, ok := host[prm.Name]; ok {
			res.add(prm.Name, prm.Shape, data, wants[prm.Name])
		}
	}
	return res, nil
}

// downloadAll reads the tensors of each map (nil ones left out) into one
// map by name.
func downloadAll(ms ...map[string]*vkattn.Tensor) (map[string][]float32, error) {
	host := map[string][]float32{}
	for _, m := range ms {
		for name, t := range m {
			if t == nil {
				continue
			}
			data, err := t.Download()
			if err != nil {
				return nil, fmt.Errorf("%s: %w", name, err)
			}
			host[name] = data
		}
	}
	return host, nil
}

// AdditiveGradients uploads q, k, v and dO, runs layer.Backward and
// returns the gradients named "q", "k", "v", "W_q", "W_k", "b" (with a
// bias) and "w_a". shapes are q's, k's and v's as (B, positions, width),
// for the reference's check.
func AdditiveGradients(dev *vkattn.Device, layer *nn.Additive, w *nn.AdditiveWeights, q, k, v, dO Input, shapes [3][3]int, opts vkattn.Options, check bool) (*Gradients, error) {
	g, ref, err := runBackward(dev, []*Input{&q, &k, &v, &dO}, func(ts []*vkattn.Tensor) (*nn.AdditiveGradients, error) {
		return layer.Backward(ts[0], ts[1], ts[2], ts[3], opts)
	}, func() (*reference.AdditiveGradients, error) {
		return reference.AdditiveAttentionBackward(q.Data, shapes[0], k.Data, shapes[1], v.Data, shapes[2], w, dO.Data, opts)
	}, check)
	defer g.Close() // nil-safe: also after the reference failed
	if err != nil {
		return nil, err
	}
	host, err := downloadAll(map[string]*vkattn.Tensor{"q": g.DQ, "k": g.DK, "v": g.DV, "W_q": g.DWQ, "W_k": g.DWK, "b": g.DBias, "w_a": g.DWA})
	if err != nil {
		return nil, err
	}
	res := newGradients(check)
	res.Plan, res.GPUTime = g.Plan, g.GPUTime
	res.add("q", q.Shape, host["q"], ref.DQ)
	res.add("k", k.Shape, host["k"], ref.DK)
	res.add("v", v.Shape, host["v"], ref.DV)
	res.add("W_q", []int{w.DQ, w.DA}, host["W_q"], ref.DWQ)
	res.add("W_k", []int{w.DK, w.DA}, host["W_k"], ref.DWK)
	if g.DBias != nil {
		res.add("b", []int{w.DA}, host["b"], ref.DBias)
	}
	res.add("w_a", []int{w.DA}, host["w_a"], ref.DWA)
	return res, nil
}

// MedianGPUTime is the median device time of n runs of the call prepare
// makes of q, k and v, prepared once (0 without timestamps): the steady
// state, with the kernels' first-dispatch compile left out when a run
// before it paid for that.
func MedianGPUTime(dev *vkattn.Device, q, k, v Input, prepare func(q, k, v *vkattn.Tensor) (*vkattn.Call, error), n int) (time.Duration, error) {
	ts, free, err := uploadAll(dev, &q, &k, &v)
	defer free()
	if err != nil {
		return 0, err
	}
	call, err := prepare(ts[0], ts[1], ts[2])
	if err != nil {
		return 0, err
	}
	defer call.Close()
	times := make([]time.Duration, n)
	for i := range times {
		if times[i], err = call.Run(context.Background()); err != nil {
			return 0, err
		}
	}
	return stats.Of(times).Median, nil
}
