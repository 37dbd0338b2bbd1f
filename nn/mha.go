package nn

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"time"

	"github.com/vkattn/vkattn"
	"github.com/vkattn/vkattn/core"
	"github.com/vkattn/vkattn/internal/engine"
	"github.com/vkattn/vkattn/pipelines"
)

// MHA is a multi-head attention layer (PyTorch nn.MultiheadAttention with
// batch_first=True, in eval mode) whose weights live on a device. Make one
// with NewMHA, run it with Forward or Prepare, Close it when done.
//
// Inputs are dense tensors made by Upload with shape (B,T,width), or (T,width)
// for one sequence. The layer runs as one submission: the input projections
// (one fused dense layer for self-attention with packed weights), the
// attention of every head read through strides straight out of the
// projection output, the output projection, and the head-averaged weights
// when asked. Nothing is transposed or copied between the steps.
type MHA struct {
	dev                *engine.Device
	dModel, kdim, vdim int
	kvOut              int // width of the K and V projections (grouped-query when < dModel)
	packed             bool
	// Weights in PyTorch's (out, in) layout; inW when packed, else qW, kW, vW.
	inW, qW, kW, vW, inB, outW, outB *engine.Tensor
	wType                            vkattn.DType // element type of the weight matrices
	closed                           atomic.Bool
}

// NewMHA checks the weights (errors name the tensor and both shapes) and
// uploads them to d.
func NewMHA(dev *vkattn.Device, w *MHAWeights) (*MHA, error) {
	d := (*engine.Device)(dev)
	if err := engine.CheckOpen(d); err != nil {
		return nil, err
	}
	if w == nil {
		return nil, core.Errorf(vkattn.ErrShape, "nil weights")
	}
	if err := w.Check(); err != nil {
		return nil, err
	}
	m := &MHA{dev: d, dModel: w.DModel, kdim: w.KDim, vdim: w.VDim, kvOut: w.KVOut(), packed: w.InProjWeight != nil, wType: w.DType}
	if err := uploadWeights(d, []weightUpload{
		{&m.inW, w.InProjWeight, w.DType}, {&m.qW, w.QProjWeight, w.DType}, {&m.kW, w.KProjWeight, w.DType}, {&m.vW, w.VProjWeight, w.DType},
		{&m.inB, w.InProjBias, vkattn.Float32}, {&m.outW, w.OutProjWeight, w.DType}, {&m.outB, w.OutProjBias, vkattn.Float32},
	}); err != nil {
		return nil, err
	}
	return m, nil
}

// Close frees the layer's weights.
func (m *MHA) Close() {
	if m != nil {
		engine.CloseTensors(m.inW, m.qW, m.kW, m.vW, m.inB, m.outW, m.outB)
		m.closed.Store(true)
	}
}

// MHAPlan says what an MHA call runs: its dense layers in order and the
// attention of every head.
type MHAPlan struct {
	B, T, S, DModel, Heads int
	Projections            []LayerPlan // input projections, in order
	Attention              vkattn.Plan // per-head attention (H = Heads, d = DModel/Heads)
	OutProj                LayerPlan
	HeadMean               bool // averaged weights computed on the device
}

// FLOPs is the layer's floating-point work: every dense layer plus the
// attention count of SEMANTICS.md §16.
func (p MHAPlan) FLOPs() float64 {
	f := p.Attention.Dims.FLOPs() + p.OutProj.FLOPs()
	for _, l := range p.Projections {
		f += l.FLOPs()
	}
	return f
}

// String lists the layers and the per-head attention, one a line.
func (p MHAPlan) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "multi-head attention B=%d T=%d S=%d d=%d heads=%d (%.4g GFLOP), one submission:\n", p.B, p.T, p.S, p.DModel, p.Heads, p.FLOPs()/1e9)
	layer := func(l LayerPlan) {
		fmt.Fprintf(&b, "  %v\n", l)
	}
	for _, l := range p.Projections {
		layer(l)
	}
	fmt.Fprintf(&b, "  per head: %v\n", p.Attention)
	layer(p.OutProj)
	if p.HeadMean {
		b.WriteString("  head_mean: weights averaged over heads\n")
	}
	return strings.TrimSuffix(b.String(), "\n")
}

// MHAOutput is the result of an MHA call.
type MHAOutput struct {
	Out        *vkattn.Tensor // (B, T, DModel), shaped (1, B, T, DModel)
	Weights    *vkattn.Tensor // (B, Heads, T, S); nil unless NeedWeights
	AvgWeights *vkattn.Tensor // (B, T, S) mean over heads, shaped (1, B, T, S); nil unless NeedWeights
	Plan       MHAPlan
	GPUTime    time.Duration // device time of the whole layer; 0 without timestamps
}

func mhaOutputTime(o *MHAOutput) *time.Duration { return &o.GPUTime }

// Close frees the output tensors.
func (o *MHAOutput) Close() {
	if o != nil {
		closeTensors(o.Out, o.Weights, o.AvgWeights)
	}
}

// Forward runs the layer: x is the query input (B,T,DModel); key
// (B,S,KDim) and value (B,S,VDim) are the cross-attention inputs, both nil
// for self-attention. Each is a dense float32, float16 or bfloat16 tensor
// (float16 inputs with float16 weights put the projections on a device's
// cooperative matrices). A query row whose every key is masked gets zero
// attention, so its output is out_proj.bias (PyTorch gives NaN there).
func (m *MHA) Forward(x, key, value *vkattn.Tensor, opts MHAOptions) (*MHAOutput, error) {
	return m.ForwardContext(context.Background(), x, key, value, opts)
}

// ForwardContext is Forward with a context that can cancel the wait.
func (m *MHA) ForwardContext(ctx context.Context, x, key, value *vkattn.Tensor, opts MHAOptions) (*MHAOutput, error) {
	return engine.RunOnce(ctx, func() (*engine.Prepared[*MHAOutput], error) {
		return m.prepare((*engine.Tensor)(x), (*engine.Tensor)(key), (*engine.Tensor)(value), opts)
	})
}

// mhaInput reads a layer's input tensor as (B, T, width): dense, of a
// type the dense layers read (float32, float16 or bfloat16).
func mhaInput(name string, t *engine.Tensor, width int, widthName string) (b, n int, err error) {
	s := t.Shape()
	if !engine.Dense(t) {
		return 0, 0, core.Errorf(vkattn.ErrShape, "%s must be a dense tensor made by Upload, not a view", name)
	}
	if !t.DType().Valid() {
		return 0, 0, core.Errorf(vkattn.ErrOption, "%s is %v: layer inputs are f32, f16 or bf16", name, t.DType())
	}
	if s[0] != 1 {
		return 0, 0, core.Errorf(vkattn.ErrShape, "%s has shape %v: want (B,T,width) or (T,width)", name, s)
	}
	if s[3] != width {
		return 0, 0, core.Errorf(vkattn.ErrShape, "%s has width %d but the weights' %s is %d", name, s[3], widthName, width)
	}
	return s[1], s[2], nil
}

// mhaProblem is a validated MHA call.
type mhaProblem struct {
	plan MHAPlan
	// The planner's plans behind plan's, which recording binds.
	attention engine.Plan
	layers    []engine.LayerPlan // the input projections
	outProj   engine.LayerPlan
	attn      vkattn.Options // per-head attention options (weights wanted when NeedWeights)
	self      bool           // self-attention with packed weights: one fused projection
	// layouts are where Q, K, V and O of every head lie inside the
	// projection outputs and the concatenation.
	layouts [4]pipelines.Layout
}

// Plan validates a call given by its input shapes ((B,T,width) or
// (T,width); nil key and value shapes for self-attention) and returns what
// Forward would run on float32 inputs (half inputs may put dense layers on
// the cooperative matrices: the call's own plan says so).
func (m *MHA) Plan(xShape, keyShape, valueShape []int, opts MHAOptions) (MHAPlan, error) {
	if m == nil {
		return MHAPlan{}, errNoLayer
	}
	shapes := [3][]int{xShape, keyShape, valueShape}
	if keyShape == nil && valueShape == nil {
		shapes[1], shapes[2] = xShape, xShape
	}
	var dims [3][2]int
	for i, name := range []string{"query", "key", "value"} {
		s := shapes[i]
		if len(s) != 2 && len(s) != 3 {
			return MHAPlan{}, core.Errorf(vkattn.ErrShape, "%s shape %v: want (B,T,width) or (T,width)", name, s)
		}
		if len(s) != len(xShape) {
			return MHAPlan{}, core.Errorf(vkattn.ErrShape, "%s has rank %d but query has rank %d", name, len(s), len(xShape))
		}
		dims[i] = [2]int{1, s[len(s)-2]}
		if len(s) == 3 {
			dims[i][0] = s[0]
		}
		width := []int{m.dModel, m.kdim, m.vdim}[i]
		if s[len(s)-1] != width {
			return MHAPlan{}, core.Errorf(vkattn.ErrShape, "%s shape %v has width %d but the weights' %s is %d", name, s, s[len(s)-1], []string{"embed_dim", "kdim", "vdim"}[i], width)
		}
	}
	p, err := m.problem(dims, [3]vkattn.DType{}, keyShape == nil && valueShape == nil, &opts, false)
	return p.plan, err
}

// problem checks a call of inputs with (B, T) dims, stored as types, and
// plans it; lse plans the attention with its log-sum-exp (the backward
// pass reads it).
func (m *MHA) problem(dims [3][2]int, types [3]vkattn.DType, self bool, opts *MHAOptions, lse bool) (mhaProblem, error) {
	var pr mhaProblem
	if m.closed.Load() {
		return pr, core.Errorf(vkattn.ErrClosed, "MHA layer used after Close")
	}
	if err := engine.CheckOpen(m.dev); err != nil {
		return pr, err
	}
	B, T, S := dims[0][0], dims[0][1], dims[1][1]
	if dims[1][0] != B || dims[2][0] != B {
		return pr, core.Errorf(vkattn.ErrShape, "batch sizes differ: query %d, key %d, value %d", B, dims[1][0], dims[2][0])
	}
	if dims[2][1] != S {
		return pr, core.Errorf(vkattn.ErrShape, "key has %d positions but value has %d", S, dims[2][1])
	}
	if opts.Attention.RoPE != nil {
		return pr, core.Errorf(vkattn.ErrOption, "MultiheadAttention has no rotary embedding: Attention.RoPE must be nil")
	}
	h, d, kv := opts.Heads, m.dModel, m.kvOut
	hkv, err := core.KVHeadCount(d, kv, h)
	if err != nil {
		return pr, err
	}
	dh := d / h
	pr.attn = opts.Attention
	pr.attn.WantLSE = lse
	pr.attn.WantWeights = opts.NeedWeights
	if kp := opts.KeyPadding; kp != nil && len(kp.Padded) != B*S {
		return pr, core.Errorf(vkattn.ErrMask, "key padding mask has %d values, want (B,S) = (%d,%d)", len(kp.Padded), B, S)
	}
	pr.self = self && m.packed
	// Heads are strided views of the projection outputs: (B, T, h, dh)
	// read as (B, h, T, dh), planned as such (alignment, and the split of
	// calls too large for one binding, depend on these strides).
	if pr.self {
		strides := [3]int{T * 3 * d, dh, 3 * d}
		pr.layouts = [4]pipelines.Layout{{Strides: strides}, {Offset: d, Strides: strides}, {Offset: 2 * d, Strides: strides}}
	} else {
		pr.layouts = [4]pipelines.Layout{{Strides: [3]int{T * d, dh, d}}, {Strides: [3]int{S * kv, dh, kv}}, {Strides: [3]int{S * kv, dh, kv}}}
	}
	pr.layouts[3] = pipelines.Layout{Strides: [3]int{T * d, dh, d}}
	attn, err := engine.PlanCall(m.dev, [4]int{B, h, T, dh}, [4]int{B, hkv, S, dh}, [4]int{B, hkv, S, dh}, engine.PlanOf{Layouts: &pr.layouts, KeyPadding: opts.KeyPadding}, &pr.attn)
	if err != nil {
		return pr, err
	}
	p := MHAPlan{B: B, T: T, S: S, DModel: d, Heads: h, Attention: attn.Plan, HeadMean: opts.NeedWeights}
	pr.attention = attn
	layer := func(name string, in pipelines.LinearInput, x vkattn.DType) (engine.LayerPlan, error) {
		in.X, in.W, in.Float32Products = x, m.wType, opts.Attention.Float32Products
		return engine.PlanLayer(m.dev, name, in)
	}
	if pr.self {
		l, err := layer("in_proj (Q,K,V fused)", pipelines.LinearInput{Rows: B * T, Outputs: 3 * d, Inputs: d, Bias: m.inB != nil}, types[0])
		if err != nil {
			return pr, err
		}
		pr.layers = []engine.LayerPlan{l}
	} else {
		for i, in := range []struct {
			name                  string
			rows, outputs, inputs int
		}{{"q_proj", B * T, d, d}, {"k_proj", B * S, kv, m.kdim}, {"v_proj", B * S, kv, m.vdim}} {
			// in_proj_bias holds b_q (d), b_k and b_v (the K/V width each).
			l, err := layer(in.name, pipelines.LinearInput{Rows: in.rows, Outputs: in.outputs, Inputs: in.inputs, WOffset: m.projOffset(i),
				Bias: m.inB != nil, BiasOffset: m.biasOffset(i)}, types[i])
			if err != nil {
				return pr, err
			}
			pr.layers = append(pr.layers, l)
		}
	}
	if pr.outProj, err = layer("out_proj", pipelines.LinearInput{Rows: B * T, Outputs: d, Inputs: d, Bias: m.outB != nil}, vkattn.Float32); err != nil {
		return pr, err
	}
	for _, l := range pr.layers {
		p.Projections = append(p.Projections, l.LayerPlan)
	}
	p.OutProj = pr.outProj.LayerPlan
	pr.plan = p
	return pr, nil
}

// biasOffset is the element offset of projection i's bias in
// in_proj_bias: b_q (d), then b_k and b_v (the K/V width each).
func (m *MHA) biasOffset(i int) int { return []int{0, m.dModel, m.dModel + m.kvOut}[i] }

// projOffset is the element offset of projection i (0 Q, 1 K, 2 V) in its
// weight tensor: the packed in_proj_weight stacks them.
func (m *MHA) projOffset(i int) int {
	if m.packed {
		return i * m.dModel * m.dModel
	}
	return 0
}

// Prepare validates an MHA call, allocates its outputs and scratch buffers
// and records the whole layer without running it. Change the inputs
// between runs with Tensor.Write.
func (m *MHA) Prepare(x, key, value *vkattn.Tensor, opts MHAOptions) (*MHACall, error) {
	c, err := m.prepare((*engine.Tensor)(x), (*engine.Tensor)(key), (*engine.Tensor)(value), opts)
	return (*MHACall)(c), err
}

func (m *MHA) prepare(x, key, value *engine.Tensor, opts MHAOptions) (*engine.Prepared[*MHAOutput], error) {
	if m == nil {
		return nil, errNoLayer
	}
	d := m.dev
	self := key == nil && value == nil
	if (key == nil) != (value == nil) {
		return nil, core.Errorf(vkattn.ErrShape, "give key and value for cross-attention, or neither for self-attention")
	}
	if self {
		key, value = x, x
	}
	var dims [3][2]int
	for i, in := range []struct {
		name, widthName string
		t               *engine.Tensor
		width           int
	}{{"query", "embed_dim", x, m.dModel}, {"key", "kdim", key, m.kdim}, {"value", "vdim", value, m.vdim}} {
		if err := engine.CheckInput(d, in.name, in.t); err != nil {
			return nil, err
		}
		b, n, err := mhaInput(in.name, in.t, in.width, in.widthName)
		if err != nil {
			return nil, err
		}
		dims[i] = [2]int{b, n}
	}
	pr, err := m.problem(dims, [3]vkattn.DType{x.DType(), key.DType(), value.DType()}, self, &opts, false)
	if err != nil {
		return nil, err
	}
	outBound, err := m.checkRange(pr.plan, &pr.attn, x, key, value)
	if err != nil {
		return nil, err
	}
	p := pr.plan
	B, T, S, dm, h := p.B, p.T, p.S, p.DModel, p.Heads

	b := engine.NewBuilder(d)
	out := &MHAOutput{Plan: p}
	scratch := func(rows, width int) (*engine.Tensor, error) { return b.ScratchTensor([4]int{1, 1, rows, width}) }

	// Input projections; each head of Q, K and V is then a strided view of
	// their output: (B, T, h, dh) read as (B, h, T, dh).
	projected, err := m.recordProjections(b, &pr, [3]*engine.Tensor{x, key, value})
	if err != nil {
		return nil, b.Fail(err)
	}
	q, k, v := engine.Buf(projected[0]), engine.Buf(projected[1]), engine.Buf(projected[2])

	// Attention writes each head's output into its columns of the
	// concatenation (B, T, h*dh), the input of out_proj.
	concat, err := scratch(B*T, dm)
	if err != nil {
		return nil, b.Fail(err)
	}
	in := engine.AttentionInputs{Q: q, K: k, V: v, O: engine.Buf(concat)}
	_, weights, err := b.Attention(pr.attention, in)
	if err != nil {
		return nil, b.Fail(err)
	}
	if weights != nil {
		engine.SetBound(weights, 1)
	}
	y, err := b.Output([4]int{1, B, T, dm})
	if err != nil {
		return nil, b.Fail(err)
	}
	engine.SetBound(y, outBound)
	if err := b.Linear(pr.outProj, concat, m.outW, 0, m.outB, 0, y, dm); err != nil {
		return nil, b.Fail(err)
	}
	out.Out, out.Weights = (*vkattn.Tensor)(y), (*vkattn.Tensor)(weights)
	if opts.NeedWeights {
		avg, err := b.Output([4]int{1, B, T, S})
		if err != nil {
			return nil, b.Fail(err)
		}
		engine.SetBound(avg, 1)
		out.AvgWeights = (*vkattn.Tensor)(avg)
		if err := b.Add(engine.Kernels(d).HeadMean(engine.Buf(weights), engine.Buf(avg), B, h, T*S)); err != nil {
			return nil, b.Fail(err)
		}
	}
	return engine.Finish(b, out, mhaOutputTime)
}

// MHACall is an MHA call recorded once and replayable, like Call.
type MHACall engine.Prepared[*MHAOutput]

// recordProjections records the input projections of inputs (x, key,
// value) into scratch tensors of b and returns them: Q, K and V, or one
// (B*T, 3d) tensor three times for a packed self-attention (the fused
// in_proj). The forward and the backward (which records the forward
// again) share them.
func (m *MHA) recordProjections(b *engine.Builder, pr *mhaProblem, inputs [3]*engine.Tensor) ([3]*engine.Tensor, error) {
	var out [3]*engine.Tensor
	for i, l := range pr.layers {
		y, err := b.ScratchTensor([4]int{1, 1, l.Rows, l.Outputs})
		if err != nil {
			return out, err
		}
		if pr.self {
			if err := b.Linear(l, inputs[0], m.inW, 0, m.inB, 0, y, l.Outputs); err != nil {
				return out, err
			}
			return [3]*engine.Tensor{y, y, y}, nil
		}
		if err := b.Linear(l, inputs[i], m.projWeight(i), m.projOffset(i), m.inB, m.biasOffset(i), y, l.Outputs); err != nil {
			return out, err
		}
		out[i] = y
	}
	return out, nil
}
