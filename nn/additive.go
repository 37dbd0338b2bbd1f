package nn

import (
	"context"
	"sync/atomic"

	"github.com/vkattn/vkattn"
	"github.com/vkattn/vkattn/core"
	"github.com/vkattn/vkattn/internal/engine"
	"github.com/vkattn/vkattn/pipelines"
)

// Additive is additive (Bahdanau) attention, SEMANTICS.md §12, with its weights on
// a device:
//
//	e_{t,j} = tanh(q_t W_q + k_j W_k + b) . w_a + masks,  O = softmax_j(e) V
//
// Each query and key is projected once by a dense layer; the attention
// kernel then scores every (query, key) pair from the projections with the
// same online softmax, masks, lengths, log-sum-exp and weights as scaled
// dot-product attention. Additive scores have no scale.
type Additive struct {
	dev        *engine.Device
	dq, dk, da int
	// wq and wk are W_q and W_k transposed to the (out, in) layout of the
	// dense-layer kernel; bias and wa as given.
	wq, wk, bias, wa *engine.Tensor
	closed           atomic.Bool
}

// NewAdditive checks the weights (errors name the tensor and both shapes)
// and uploads them to d.
func NewAdditive(dev *vkattn.Device, w *AdditiveWeights) (*Additive, error) {
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
	a := &Additive{dev: d, dq: w.DQ, dk: w.DK, da: w.DA}
	if err := uploadWeights(d, []weightUpload{
		{&a.wq, core.Transpose(w.WQ, w.DQ, w.DA), vkattn.Float32}, {&a.wk, core.Transpose(w.WK, w.DK, w.DA), vkattn.Float32}, {&a.bias, w.Bias, vkattn.Float32}, {&a.wa, w.WA, vkattn.Float32},
	}); err != nil {
		return nil, err
	}
	return a, nil
}

// Close frees the weights.
func (a *Additive) Close() {
	if a != nil {
		engine.CloseTensors(a.wq, a.wk, a.bias, a.wa)
		a.closed.Store(true)
	}
}

// Plan validates a call given by its input shapes, q (B,L,d_q), k (B,S,d_k)
// and v (B,S,d_v) (or rank 2 without B), and returns what Attention would
// run. Dims are those of the attention kernel: H = 1, d_k = d_a.
func (a *Additive) Plan(q, k, v []int, opts vkattn.Options) (vkattn.Plan, error) {
	p, err := a.planShapes(q, k, v, opts)
	return p.Plan, err
}

func (a *Additive) planShapes(q, k, v []int, opts vkattn.Options) (engine.Plan, error) {
	if a == nil {
		return engine.Plan{}, errNoLayer
	}
	var dims [3][3]int
	for i, s := range [][]int{q, k, v} {
		name := []string{"query", "key", "value"}[i]
		if len(s) != 2 && len(s) != 3 {
			return engine.Plan{}, core.Errorf(vkattn.ErrShape, "%s shape %v: want (B,T,width) or (T,width)", name, s)
		}
		if len(s) != len(q) {
			return engine.Plan{}, core.Errorf(vkattn.ErrShape, "%s has rank %d but query has rank %d", name, len(s), len(q))
		}
		dims[i] = [3]int{1, s[len(s)-2], s[len(s)-1]}
		if len(s) == 3 {
			dims[i][0] = s[0]
		}
	}
	return a.plan(dims, &opts)
}

// plan checks a call of (B, positions, width) inputs and plans it.
func (a *Additive) plan(dims [3][3]int, opts *vkattn.Options) (engine.Plan, error) {
	if a.closed.Load() {
		return engine.Plan{}, core.Errorf(vkattn.ErrClosed, "additive attention used after Close")
	}
	if !opts.Scale.IsDefault() {
		return engine.Plan{}, core.Errorf(vkattn.ErrScale, "additive attention has no score scale")
	}
	if opts.RoPE != nil {
		return engine.Plan{}, core.Errorf(vkattn.ErrOption, "additive attention has no rotary embedding (it scores w_a . tanh(q + k))")
	}
	for i, want := range []int{a.dq, a.dk} {
		if dims[i][2] != want {
			return engine.Plan{}, core.Errorf(vkattn.ErrShape, "%s has width %d but the weights expect %d", []string{"query", "key"}[i], dims[i][2], want)
		}
	}
	B, L, S, dv := dims[0][0], dims[0][1], dims[1][1], dims[2][2]
	q, k, v := [4]int{B, 1, L, a.da}, [4]int{dims[1][0], 1, S, a.da}, [4]int{dims[2][0], 1, dims[2][1], dv}
	// The projections are dense buffers of width d_a; V is dense and read
	// in place.
	p, err := engine.PlanCall(a.dev, q, k, v, engine.PlanOf{Additive: true}, opts)
	if err != nil {
		return p, err
	}
	lq, err := engine.PlanLayer(a.dev, "q W_q + b", pipelines.LinearInput{Rows: B * L, Outputs: a.da, Inputs: a.dq, Bias: a.bias != nil})
	if err != nil {
		return p, err
	}
	lk, err := engine.PlanLayer(a.dev, "k W_k", pipelines.LinearInput{Rows: B * S, Outputs: a.da, Inputs: a.dk})
	if err != nil {
		return p, err
	}
	p.SetProjections(lq, lk)
	return p, nil
}

// Attention computes additive attention of q (B,L,d_q), k (B,S,d_k) and v
// (B,S,d_v), dense tensors made by Upload with those shapes (or (L,d_q),
// (S,d_k), (S,d_v) for one sequence). Options act as for scaled
// dot-product attention with one head: masks broadcast over (B,1,L,S);
// Scale must be the default. The Output is that of one head: O (B,1,L,d_v),
// LSE (B,1,L,1), Weights (B,1,L,S).
func (a *Additive) Attention(q, k, v *vkattn.Tensor, opts vkattn.Options) (*vkattn.Output, error) {
	return a.AttentionContext(context.Background(), q, k, v, opts)
}

// AttentionContext is Attention with a context that can cancel the wait.
func (a *Additive) AttentionContext(ctx context.Context, q, k, v *vkattn.Tensor, opts vkattn.Options) (*vkattn.Output, error) {
	out, err := engine.RunOnce(ctx, func() (*engine.Call, error) {
		return a.prepare((*engine.Tensor)(q), (*engine.Tensor)(k), (*engine.Tensor)(v), opts)
	})
	if err != nil {
		return nil, err
	}
	return engine.PublicOutput[*vkattn.Output](out), nil
}

// inputDims checks q, k and v (dense tensors of this layer's device) and
// gives each one's (B, positions, width).
func (a *Additive) inputDims(q, k, v *engine.Tensor) ([3][3]int, error) {
	var dims [3][3]int
	names := [3]string{"query", "key", "value"}
	if err := engine.CheckInputs(a.dev, names, q, k, v); err != nil {
		return dims, err
	}
	for i, t := range []*engine.Tensor{q, k, v} {
		if t.DType() != vkattn.Float32 {
			return dims, core.Errorf(vkattn.ErrOption, "%s is %v: additive attention's inputs are f32", names[i], t.DType())
		}
		b, n, err := mhaInput(names[i], t, t.Shape()[3], "width")
		if err != nil {
			return dims, err
		}
		dims[i] = [3]int{b, n, t.Shape()[3]}
	}
	return dims, nil
}

// Prepare validates a call, allocates its outputs and records the
// projections and the attention as one submission without running it.
func (a *Additive) Prepare(q, k, v *vkattn.Tensor, opts vkattn.Options) (*vkattn.Call, error) {
	call, err := a.prepare((*engine.Tensor)(q), (*engine.Tensor)(k), (*engine.Tensor)(v), opts)
	if err != nil {
		return nil, err
	}
	return engine.PublicCall[*vkattn.Call](call), nil
}

func (a *Additive) prepare(q, k, v *engine.Tensor, opts vkattn.Options) (*engine.Call, error) {
	if a == nil {
		return nil, errNoLayer
	}
	d := a.dev
	dims, err := a.inputDims(q, k, v)
	if err != nil {
		return nil, err
	}
	plan, err := a.plan(dims, &opts)
	if err != nil {
		return nil, err
	}
	dm := plan.Dims
	oBound, err := a.checkRange(dm, &opts, q, k, v)
	if err != nil {
		return nil, err
	}
	b := engine.NewBuilder(d)
	project := func(l engine.LayerPlan, in, w, bias *engine.Tensor) (*engine.Tensor, error) {
		y, err := b.ScratchTensor([4]int{1, 1, l.Rows, l.Outputs})
		if err != nil {
			return nil, err
		}
		return y, b.Linear(l, in, w, 0, bias, 0, y, l.Outputs)
	}
	qp, err := project(plan.Projection(0), q, a.wq, a.bias)
	if err != nil {
		return nil, b.Fail(err)
	}
	kp, err := project(plan.Projection(1), k, a.wk, nil)
	if err != nil {
		return nil, b.Fail(err)
	}
	return b.AttentionCall(plan, engine.AttentionInputs{Q: engine.Buf(qp), K: engine.Buf(kp), V: engine.Buf(v), WA: engine.Buf(a.wa)}, oBound)
}
