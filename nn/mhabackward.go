package nn

import (
	"context"
	"time"

	"github.com/vkattn/vkattn"
	"github.com/vkattn/vkattn/core"
	"github.com/vkattn/vkattn/internal/engine"
	"github.com/vkattn/vkattn/pipelines"
)

// MHAGradients are an MHA layer's gradients of sum(Out * dY), dense
// float32 tensors on the device (Download reads one; Close frees them
// all): of its inputs, in the shapes Forward took them in (DKey and
// DValue nil for self-attention, whose DX includes what flows through K
// and V), and of its parameters, by the names PyTorch's state_dict gives
// them: in_proj_weight or q_proj_weight, k_proj_weight, v_proj_weight;
// in_proj_bias; out_proj.weight; out_proj.bias (those the layer has),
// each shaped (1, 1, rows, columns) or (1, 1, 1, length).
type MHAGradients struct {
	DX, DKey, DValue *vkattn.Tensor
	Params           map[string]*vkattn.Tensor
	Plan             MHAPlan       // the forward's
	GPUTime          time.Duration // the whole backward call; 0 without timestamps
}

// Close frees the gradient tensors.
func (g *MHAGradients) Close() {
	if g == nil {
		return
	}
	closeTensors(g.DX, g.DKey, g.DValue)
	for _, t := range g.Params {
		t.Close()
	}
}

// mhaParamNames are the parameters' gradients in the order a run that
// left one not finite names the first.
var mhaParamNames = []string{"out_proj.weight", "out_proj.bias", "in_proj_weight", "q_proj_weight", "k_proj_weight", "v_proj_weight", "in_proj_bias"}

// checked are the gradients each run checks for non-finite values, and
// their names: the parameters' (mhaParamNames), then the inputs'.
func (g *MHAGradients) checked() ([]*engine.Tensor, []string) {
	var ts []*vkattn.Tensor
	for _, name := range mhaParamNames {
		ts = append(ts, g.Params[name])
	}
	return engineTensors(append(ts, g.DX, g.DKey, g.DValue)...), append(mhaParamNames[:len(mhaParamNames):len(mhaParamNames)], "dX", "dKey", "dValue")
}

func mhaGradTime(g *MHAGradients) *time.Duration { return &g.GPUTime }

// MHAGradCall is an MHA backward call recorded once and replayable, like
// MHACall: its gradients are rewritten by each Run.
type MHAGradCall engine.Prepared[*MHAGradients]

// Backward returns the gradients of sum(Out * dY) for Out = m.Forward(x,
// key, value, opts) (SEMANTICS.md §10): dY has Out's shape. The whole pass
// runs on the device as one submission: the input projections and every
// head's attention forward again (with the log-sum-exp), then
// out_proj's gradients (dW = dY^T concat, db = the column sums of dY,
// dconcat = dY W), the heads' attention backward (with the layer's masks
// and key padding) and the input projections' gradients, the packed
// in_proj of self-attention as one product. Sums are float32 in a fixed
// order (the same bits run to run). NeedWeights is ignored. A gradient
// whose sums went beyond float32's range is ErrOverflow naming it (§9),
// checked on the device at the end of the submission, also on each Run
// of PrepareBackward's call.
func (m *MHA) Backward(x, key, value, dY *vkattn.Tensor, opts MHAOptions) (*MHAGradients, error) {
	return m.BackwardContext(context.Background(), x, key, value, dY, opts)
}

// BackwardContext is Backward with a context that can cancel the wait.
func (m *MHA) BackwardContext(ctx context.Context, x, key, value, dY *vkattn.Tensor, opts MHAOptions) (*MHAGradients, error) {
	return engine.RunOnce(ctx, func() (*engine.Prepared[*MHAGradients], error) {
		return m.prepareBackward((*engine.Tensor)(x), (*engine.Tensor)(key), (*engine.Tensor)(value), (*engine.Tensor)(dY), opts)
	})
}

// mhaGradInputs are a backward call's checked inputs: the tensors (key
// and value x for self-attention) and each one's (B, rows).
type mhaGradInputs struct {
	x, key, value, dY *engine.Tensor
	dims              [3][2]int
	self              bool
}

// gradInputs checks a backward call's tensors as Prepare checks a
// forward's, and dY against Out's shape.
func (m *MHA) gradInputs(x, key, value, dY *engine.Tensor) (mhaGradInputs, error) {
	in := mhaGradInputs{x: x, key: key, value: value, dY: dY, self: key == nil && value == nil}
	if (key == nil) != (value == nil) {
		return in, core.Errorf(vkattn.ErrShape, "give key and value for cross-attention, or neither for self-attention")
	}
	if in.self {
		in.key, in.value = x, x
	}
	for i, t := range []struct {
		name, widthName string
		t               *engine.Tensor
		width           int
	}{{"query", "embed_dim", x, m.dModel}, {"key", "kdim", in.key, m.kdim}, {"value", "vdim", in.value, m.vdim}, {"dY", "embed_dim", dY, m.dModel}} {
		if err := engine.CheckInput(m.dev, t.name, t.t); err != nil {
			return in, err
		}
		b, n, err := mhaInput(t.name, t.t, t.width, t.widthName)
		if err != nil {
			return in, err
		}
		if i < 3 {
			in.dims[i] = [2]int{b, n}
		}
	}
	if dY.Shape() != x.Shape() {
		return in, core.Errorf(vkattn.ErrShape, "dY has shape %v, want Out's %v", dY.Shape(), x.Shape())
	}
	return in, nil
}

// PrepareBackward validates an MHA backward call, allocates its gradients
// and scratch buffers and records the whole pass (Backward's) without
// running it. Change the inputs or dY between runs with Tensor.Write.
func (m *MHA) PrepareBackward(x, key, value, dY *vkattn.Tensor, opts MHAOptions) (*MHAGradCall, error) {
	c, err := m.prepareBackward((*engine.Tensor)(x), (*engine.Tensor)(key), (*engine.Tensor)(value), (*engine.Tensor)(dY), opts)
	return (*MHAGradCall)(c), err
}

func (m *MHA) prepareBackward(x, key, value, dY *engine.Tensor, opts MHAOptions) (*engine.Prepared[*MHAGradients], error) {
	if m == nil {
		return nil, errNoLayer
	}
	in, err := m.gradInputs(x, key, value, dY)
	if err != nil {
		return nil, err
	}
	opts.NeedWeights = false
	pr, err := m.problem(in.dims, [3]vkattn.DType{in.x.DType(), in.key.DType(), in.value.DType()}, in.self, &opts, true)
	if err != nil {
		return nil, err
	}
	bounds, err := m.checkBackwardRange(&pr, &in)
	if err != nil {
		return nil, err
	}
	b := engine.NewBuilder(m.dev)
	g, err := m.recordBackward(b, &pr, &in, &opts, &bounds)
	if err == nil {
		err = b.CheckFinite(g.checked())
	}
	if err != nil {
		return nil, b.Fail(err)
	}
	return engine.Finish(b, g, mhaGradTime)
}

// Element offset and (row, k) strides of a dense row-major (rows, width)
// matrix read along its rows (dY W: each row's sum) or down its columns
// (dY^T X: the sum over the rows).
func alongRows(t *engine.Tensor, width int, offset int) pipelines.GradOperand {
	return pipelines.GradOperand{Offset: engine.Layout(t).Offset + offset, RowStride: width, KStride: 1, Type: t.DType()}
}

func downColumns(t *engine.Tensor, width int, offset int) pipelines.GradOperand {
	return pipelines.GradOperand{Offset: engine.Layout(t).Offset + offset, RowStride: 1, KStride: width, Type: t.DType()}
}

// linearGrads records the gradients of the dense layer y = x W^T (+ b) of
// rows rows, in inputs and out outputs, given dy (rows, out) at column
// dyCol of rows dyStride wide: dW into dW (at element dWAt), the bias's
// into db (at dbAt; nil: none), and, where dx is not nil, dy W into (or,
// with accumulate, added to) dx. W starts at element wAt of w.
func linearGrads(b *engine.Builder, rows, inputs, out int, dy *engine.Tensor, dyCol, dyStride int, x, w *engine.Tensor, wAt int,
	dW *engine.Tensor, dWAt int, db *engine.Tensor, dbAt int, dx *engine.Tensor, accumulate bool) error {
	// dW = dy^T x: the sum over the rows.
	s := pipelines.GradShape{M: out, N: inputs, K: rows, A: downColumns(dy, dyStride, dyCol), B: downColumns(x, inputs, 0),
		C: pipelines.RowLayout{Offset: dWAt, Stride: inputs}}
	if err := b.GradProduct(s, dy, x, dW); err != nil {
		return err
	}
	if db != nil {
		if err := columnSums(b, dy, dyCol, dyStride, rows, out, db, dbAt); err != nil {
			return err
		}
	}
	if dx == nil {
		return nil
	}
	// dx = dy W: each row's sum over the outputs, W read down its columns.
	s = pipelines.GradShape{M: rows, N: inputs, K: out, A: alongRows(dy, dyStride, dyCol), B: downColumns(w, inputs, wAt),
		C: pipelines.RowLayout{Stride: inputs}, Accumulate: accumulate}
	return b.GradProduct(s, dy, w, dx)
}

// columnSums records into dst (from element at) the sums over rows of
// the width columns of src from column col, rows stride apart: a bias's
// gradient.
func columnSums(b *engine.Builder, src *engine.Tensor, col, stride, rows, width int, dst *engine.Tensor, at int) error {
	return b.Regroup(pipelines.RegroupShape{N: [4]int{1, 1, rows, width}, SrcType: src.DType(), Sum: true,
		Src: pipelines.RegroupView{Offset: engine.Layout(src).Offset + col, Strides: [3]int{0, 0, stride}},
		Dst: pipelines.RegroupView{Offset: at}}, src, dst)
}

// headsToRows records the copy of heads (B, heads, n, dh), dense, into
// the columns from col of rows (B*n, ...) stride wide: (B, n, heads, dh).
func headsToRows(b *engine.Builder, heads *engine.Tensor, B, h, n, dh int, rows *engine.Tensor, col, stride int) error {
	return b.Regroup(pipelines.RegroupShape{N: [4]int{B, h, n, dh}, SrcType: vkattn.Float32,
		Src: pipelines.RegroupView{Strides: [3]int{h * n * dh, n * dh, dh}},
		Dst: pipelines.RegroupView{Offset: col, Strides: [3]int{n * stride, dh, stride}}}, heads, rows)
}

// rowsToHeads is headsToRows' inverse for rows d = h*dh wide.
func rowsToHeads(b *engine.Builder, rows *engine.Tensor, B, h, n, dh int, heads *engine.Tensor) error {
	d := h * dh
	return b.Regroup(pipelines.RegroupShape{N: [4]int{B, h, n, dh}, SrcType: vkattn.Float32,
		Src: pipelines.RegroupView{Strides: [3]int{n * d, dh, d}},
		Dst: pipelines.RegroupView{Strides: [3]int{h * n * dh, n * dh, dh}}}, rows, heads)
}

// recordBackward records the backward pass of the checked call pr over
// in into b and returns its gradients, bounded by bounds.
func (m *MHA) recordBackward(b *engine.Builder, pr *mhaProblem, in *mhaGradInputs, opts *MHAOptions, bounds *mhaGradBounds) (*MHAGradients, error) {
	p := pr.plan
	B, T, S, d, h, _, dh, hkv := m.extents(pr)
	scratch := func(rows, width int) (*engine.Tensor, error) { return b.ScratchTensor([4]int{1, 1, rows, width}) }
	g := &mhaGrads{Params: map[string]*engine.Tensor{}}
	param := func(name string, rows, cols int, bound float64) (*engine.Tensor, error) {
		return g.param(b, name, rows, cols, bound)
	}

	// The forward again, as Prepare records it, up to the heads' outputs
	// concatenated, with the log-sum-exp the backward reads.
	inputs := [3]*engine.Tensor{in.x, in.key, in.value}
	projected, err := m.recordProjections(b, pr, inputs)
	if err != nil {
		return nil, err
	}
	concat, err := scratch(B*T, d)
	if err != nil {
		return nil, err
	}
	tape, err := b.AttentionForBackward(pr.attention, engine.AttentionInputs{Q: engine.Buf(projected[0]), K: engine.Buf(projected[1]),
		V: engine.Buf(projected[2]), O: engine.Buf(concat)})
	if err != nil {
		return nil, err
	}

	// out_proj: Out = concat W_o^T + b_o.
	dWo, err := param("out_proj.weight", d, d, bounds.dWo)
	if err != nil {
		return nil, err
	}
	var dbo *engine.Tensor
	if m.outB != nil {
		if dbo, err = param("out_proj.bias", 1, d, bounds.dbo); err != nil {
			return nil, err
		}
	}
	dConcat, err := scratch(B*T, d)
	if err != nil {
		return nil, err
	}
	if err := linearGrads(b, B*T, d, d, in.dY, 0, d, concat, m.outW, 0, dWo, 0, dbo, 0, dConcat, false); err != nil {
		return nil, err
	}

	// The heads: dO is (B, h, T, dh), dense; dQ, dK and dV come back so.
	dO, err := b.ScratchTensor([4]int{B, h, T, dh})
	if err != nil {
		return nil, err
	}
	if err := rowsToHeads(b, dConcat, B, h, T, dh, dO); err != nil {
		return nil, err
	}
	var heads engine.GradTargets
	for _, t := range []struct {
		dst      **engine.Tensor
		heads, n int
	}{{&heads.DQ, h, T}, {&heads.DK, hkv, S}, {&heads.DV, hkv, S}} {
		if *t.dst, err = b.ScratchTensor([4]int{B, t.heads, t.n, dh}); err != nil {
			return nil, err
		}
	}
	if err := b.AttentionBackwardFrom(tape, dO, heads); err != nil {
		return nil, err
	}

	if err := m.recordInputGrads(b, pr, in, inputs, heads, g, bounds); err != nil {
		return nil, err
	}
	return g.public(p), nil
}

// recordInputGrads records the gradients of the input projections from
// the heads' dQ, dK and dV: their weights' and biases' (into g.Params),
// and those of the inputs (g.DX, and a cross-attention's g.DKey and
// g.DValue).
func (m *MHA) recordInputGrads(b *engine.Builder, pr *mhaProblem, in *mhaGradInputs, inputs [3]*engine.Tensor, heads engine.GradTargets, g *mhaGrads, bounds *mhaGradBounds) error {
	B, T, S, d, h, kv, dh, hkv := m.extents(pr)
	scratch := func(rows, width int) (*engine.Tensor, error) { return b.ScratchTensor([4]int{1, 1, rows, width}) }
	param := func(name string, rows, cols int, bound float64) (*engine.Tensor, error) {
		return g.param(b, name, rows, cols, bound)
	}
	var err error
	var dIn *engine.Tensor // in_proj_weight's gradient (packed)
	if m.packed {
		if dIn, err = param("in_proj_weight", 3*d, d, bounds.dWIn); err != nil {
			return err
		}
	}
	var dbIn *engine.Tensor
	if m.inB != nil {
		if dbIn, err = param("in_proj_bias", 1, d+2*kv, bounds.dbIn); err != nil {
			return err
		}
	}
	if g.DX, err = g.output(b, in.x.Shape(), bounds.dX); err != nil {
		return err
	}
	if pr.self {
		// Q, K and V's gradients side by side, (B*T, 3d) as the fused
		// projection's output: one product for in_proj_weight, one for x.
		dQKV, err := scratch(B*T, 3*d)
		if err != nil {
			return err
		}
		for i, t := range []*engine.Tensor{heads.DQ, heads.DK, heads.DV} {
			if err := headsToRows(b, t, B, h, T, dh, dQKV, i*d, 3*d); err != nil {
				return err
			}
		}
		return linearGrads(b, B*T, d, 3*d, dQKV, 0, 3*d, in.x, m.inW, 0, dIn, 0, dbIn, 0, g.DX, false)
	}
	if !in.self {
		if g.DKey, err = g.output(b, in.key.Shape(), bounds.dKey); err != nil {
			return err
		}
		if g.DValue, err = g.output(b, in.value.Shape(), bounds.dValue); err != nil {
			return err
		}
	}
	for i, x := range []struct {
		heads         *engine.Tensor
		nh, rows, out int
		inputs        int
		name          string
		dx            *engine.Tensor
		dWBound       float64
	}{{heads.DQ, h, T, d, m.dModel, "q_proj_weight", g.DX, bounds.dWq}, {heads.DK, hkv, S, kv, m.kdim, "k_proj_weight", g.DKey, bounds.dWk},
		{heads.DV, hkv, S, kv, m.vdim, "v_proj_weight", g.DValue, bounds.dWv}} {
		dy, err := scratch(B*x.rows, x.out)
		if err != nil {
			return err
		}
		if err := headsToRows(b, x.heads, B, x.nh, x.rows, dh, dy, 0, x.out); err != nil {
			return err
		}
		dW, dWAt := dIn, m.projOffset(i)
		if !m.packed {
			if dW, err = param(x.name, x.out, x.inputs, x.dWBound); err != nil {
				return err
			}
		}
		dx, accumulate := x.dx, false
		if in.self { // separate weights: K's and V's gradients flow into x too
			dx, accumulate = g.DX, i > 0
		}
		if err := linearGrads(b, B*x.rows, x.inputs, x.out, dy, 0, x.out, inputs[i], m.projWeight(i), m.projOffset(i),
			dW, dWAt, dbIn, m.biasOffset(i), dx, accumulate); err != nil {
			return err
		}
	}
	return nil
}

// output is a gradient output of b of shape, within bound.
func (g *mhaGrads) output(b *engine.Builder, shape [4]int, bound float64) (*engine.Tensor, error) {
	t, err := b.Output(shape)
	if err == nil {
		engine.SetBound(t, bound)
	}
	return t, err
}

// param is the gradient output of the parameter name, (rows, cols).
func (g *mhaGrads) param(b *engine.Builder, name string, rows, cols int, bound float64) (*engine.Tensor, error) {
	t, err := g.output(b, [4]int{1, 1, rows, cols}, bound)
	if err == nil {
		g.Params[name] = t
	}
	return t, err
}

// mhaGrads are MHAGradients as the engine's tensors, while recorded.
type mhaGrads struct {
	DX, DKey, DValue *engine.Tensor
	Params           map[string]*engine.Tensor
}

// public is g as the caller's MHAGradients of the call planned as p.
func (g *mhaGrads) public(p MHAPlan) *MHAGradients {
	out := &MHAGradients{DX: (*vkattn.Tensor)(g.DX), DKey: (*vkattn.Tensor)(g.DKey), DValue: (*vkattn.Tensor)(g.DValue),
		Params: make(map[string]*vkattn.Tensor, len(g.Params)), Plan: p}
	for name, t := range g.Params {
		out.Params[name] = (*vkattn.Tensor)(t)
	}
	return out
}

// projWeight is the tensor holding projection i's weights (0 Q, 1 K, 2 V).
func (m *MHA) projWeight(i int) *engine.Tensor {
	if m.packed {
		return m.inW
	}
	return []*engine.Tensor{m.qW, m.kW, m.vW}[i]
}

// extents are a recorded backward's: batch, query and key lengths, model
// width and heads, the K/V projections' width, a head's width, KV heads.
func (m *MHA) extents(pr *mhaProblem) (B, T, S, d, h, kv, dh, hkv int) {
	p := pr.plan
	B, T, S, d, h = p.B, p.T, p.S, p.DModel, p.Heads
	kv = m.kvOut
	dh = d / h
	return B, T, S, d, h, kv, dh, kv / dh
}
