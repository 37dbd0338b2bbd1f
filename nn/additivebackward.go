package nn

import (
	"context"
	"time"

	"github.com/vkattn/vkattn"
	"github.com/vkattn/vkattn/core"
	"github.com/vkattn/vkattn/internal/engine"
	"github.com/vkattn/vkattn/pipelines"
)

// AdditiveGradients are additive attention's gradients of sum(O * dO),
// dense float32 tensors on the device (Download reads one; Close frees
// them all), each of the shape of what it is the gradient of: the inputs
// q (B,L,d_q), k (B,S,d_k), v (B,S,d_v) as the call took them, the
// weights W_q (d_q,d_a), W_k (d_k,d_a), b (d_a; nil without a bias), w_a
// (d_a), shaped (1, 1, rows, columns) or (1, 1, 1, length), and the sink
// (one entry; nil unless opts has one).
type AdditiveGradients struct {
	DQ, DK, DV           *vkattn.Tensor
	DWQ, DWK, DBias, DWA *vkattn.Tensor
	DSinks               *vkattn.Tensor
	Plan                 vkattn.Plan   // the forward's
	GPUTime              time.Duration // the whole backward call; 0 without timestamps
}

// Close frees the gradient tensors.
func (g *AdditiveGradients) Close() {
	if g != nil {
		closeTensors(g.DQ, g.DK, g.DV, g.DWQ, g.DWK, g.DBias, g.DWA, g.DSinks)
	}
}

func additiveGradTime(g *AdditiveGradients) *time.Duration { return &g.GPUTime }

// AdditiveGradCall is an additive backward call recorded once and
// replayable: its gradients are rewritten by each Run.
type AdditiveGradCall engine.Prepared[*AdditiveGradients]

// Backward returns the gradients of sum(O * dO) for O = a.Attention(q, k,
// v, opts) (SEMANTICS.md §10): dO has O's (B, L, d_v). The whole pass runs
// on the device as one submission: the projections q W_q + b and k W_k
// and the attention's forward again, its backward
// (attention_backward.comp with additive scores: the projections'
// gradients and each key row's share of dw_a), then the projections'
// gradients (dW = x^T dy, db and dw_a as column sums, dx = dy W^T) and the
// sink's, float32 sums in a fixed order. A gradient whose sums went beyond
// float32's range is ErrOverflow naming it (§9), checked on the device at
// the end of the submission, also on each Run of PrepareBackward's call.
func (a *Additive) Backward(q, k, v, dO *vkattn.Tensor, opts vkattn.Options) (*AdditiveGradients, error) {
	return a.BackwardContext(context.Background(), q, k, v, dO, opts)
}

// BackwardContext is Backward with a context that can cancel the wait.
func (a *Additive) BackwardContext(ctx context.Context, q, k, v, dO *vkattn.Tensor, opts vkattn.Options) (*AdditiveGradients, error) {
	return engine.RunOnce(ctx, func() (*engine.Prepared[*AdditiveGradients], error) {
		return a.prepareBackward((*engine.Tensor)(q), (*engine.Tensor)(k), (*engine.Tensor)(v), (*engine.Tensor)(dO), opts)
	})
}

// PrepareBackward validates a backward call, allocates its gradients and
// scratch buffers and records the whole pass (Backward's) without running
// it.
func (a *Additive) PrepareBackward(q, k, v, dO *vkattn.Tensor, opts vkattn.Options) (*AdditiveGradCall, error) {
	c, err := a.prepareBackward((*engine.Tensor)(q), (*engine.Tensor)(k), (*engine.Tensor)(v), (*engine.Tensor)(dO), opts)
	return (*AdditiveGradCall)(c), err
}

func (a *Additive) prepareBackward(q, k, v, dO *engine.Tensor, opts vkattn.Options) (*engine.Prepared[*AdditiveGradients], error) {
	if a == nil {
		return nil, errNoLayer
	}
	d := a.dev
	dims, err := a.inputDims(q, k, v)
	if err != nil {
		return nil, err
	}
	if err := engine.CheckInput(d, "dO", dO); err != nil {
		return nil, err
	}
	if _, _, err := mhaInput("dO", dO, dims[2][2], "d_v"); err != nil {
		return nil, err
	}
	if want := [4]int{1, dims[0][0], dims[0][1], dims[2][2]}; dO.Shape() != want {
		return nil, core.Errorf(vkattn.ErrShape, "dO has shape %v, want O's (B, L, d_v) %v", dO.Shape(), want)
	}
	opts.WantLSE, opts.WantWeights = true, false
	plan, err := a.plan(dims, &opts)
	if err != nil {
		return nil, err
	}
	bounds, err := a.checkBackwardRange(plan.Dims, &opts, q, k, v, dO)
	if err != nil {
		return nil, err
	}
	b := engine.NewBuilder(d)
	g, err := a.recordBackward(b, plan, &opts, [4]*engine.Tensor{q, k, v, dO}, &bounds)
	if err == nil {
		err = b.CheckFinite(engineTensors(g.DWQ, g.DWK, g.DBias, g.DWA, g.DQ, g.DK, g.DV, g.DSinks),
			[]string{"dW_q", "dW_k", "db", "dw_a", "dq", "dk", "dv", "the sinks' gradient"})
	}
	if err != nil {
		return nil, b.Fail(err)
	}
	return engine.Finish(b, g, additiveGradTime)
}

// recordBackward records the backward pass of the call planned as plan
// over q, k, v and dO into b and returns its gradients, bounded by
// bounds.
func (a *Additive) recordBackward(b *engine.Builder, plan engine.Plan, opts *vkattn.Options, in [4]*engine.Tensor, bounds *additiveGradBounds) (*AdditiveGradients, error) {
	q, k, v, dO := in[0], in[1], in[2], in[3]
	dm := plan.Dims
	B, L, S, da := dm.B, dm.L, dm.S, a.da
	g := &additiveGrads{}
	output := func(dst **engine.Tensor, shape [4]int, bound float64) error {
		t, err := b.Output(shape)
		if err == nil {
			engine.SetBound(t, bound)
			*dst = t
		}
		return err
	}
	scratch := func(rows, width int) (*engine.Tensor, error) { return b.ScratchTensor([4]int{B, 1, rows, width}) }

	// The forward again, with the log-sum-exp.
	qp, err := scratch(L, da)
	if err != nil {
		return nil, err
	}
	if err := b.Linear(plan.Projection(0), q, a.wq, 0, a.bias, 0, qp, da); err != nil {
		return nil, err
	}
	kp, err := scratch(S, da)
	if err != nil {
		return nil, err
	}
	if err := b.Linear(plan.Projection(1), k, a.wk, 0, nil, 0, kp, da); err != nil {
		return nil, err
	}
	tape, err := b.AttentionForBackward(plan, engine.AttentionInputs{Q: engine.Buf(qp), K: engine.Buf(kp), V: engine.Buf(v), WA: engine.Buf(a.wa)})
	if err != nil {
		return nil, err
	}

	// The attention's backward reads dO as float32, O's (B, 1, L, d_v).
	dOF := dO
	if dO.DType() != vkattn.Float32 {
		if dOF, err = scratch(L, dm.DV); err != nil {
			return nil, err
		}
		if err := b.Regroup(pipelines.RegroupShape{N: [4]int{1, 1, B * L, dm.DV}, SrcType: dO.DType(),
			Src: pipelines.RegroupView{Strides: [3]int{0, 0, dm.DV}}, Dst: pipelines.RegroupView{Strides: [3]int{0, 0, dm.DV}}}, dO, dOF); err != nil {
			return nil, err
		}
	}
	var t engine.GradTargets
	if t.DQ, err = scratch(L, da); err != nil {
		return nil, err
	}
	if t.DK, err = scratch(S, da); err != nil {
		return nil, err
	}
	if t.KeyWA, err = scratch(S, da); err != nil {
		return nil, err
	}
	if t.RowSinks, err = scratch(L, 1); err != nil {
		return nil, err
	}
	if err := output(&g.DV, v.Shape(), bounds.dv); err != nil {
		return nil, err
	}
	t.DV = g.DV
	if err := b.AttentionBackwardFrom(tape, dOF, t); err != nil {
		return nil, err
	}

	// The projections: y = x W + b with W (in, out), the device's (out,
	// in) transpose: dW = x^T dy, db and dw_a the column sums, dx = dy W^T.
	for _, p := range []struct {
		x, dy, w     *engine.Tensor
		rows, inputs int
		dW, dx       **engine.Tensor
		dWB, dxB     float64
	}{{q, t.DQ, a.wq, B * L, a.dq, &g.DWQ, &g.DQ, bounds.dWQ, bounds.dq}, {k, t.DK, a.wk, B * S, a.dk, &g.DWK, &g.DK, bounds.dWK, bounds.dk}} {
		if err := output(p.dW, [4]int{1, 1, p.inputs, da}, p.dWB); err != nil {
			return nil, err
		}
		s := pipelines.GradShape{M: p.inputs, N: da, K: p.rows, A: downColumns(p.x, p.inputs, 0), B: downColumns(p.dy, da, 0),
			C: pipelines.RowLayout{Stride: da}}
		if err := b.GradProduct(s, p.x, p.dy, *p.dW); err != nil {
			return nil, err
		}
		if err := output(p.dx, p.x.Shape(), p.dxB); err != nil {
			return nil, err
		}
		s = pipelines.GradShape{M: p.rows, N: p.inputs, K: da, A: alongRows(p.dy, da, 0), B: downColumns(p.w, p.inputs, 0),
			C: pipelines.RowLayout{Stride: p.inputs}}
		if err := b.GradProduct(s, p.dy, p.w, *p.dx); err != nil {
			return nil, err
		}
	}
	// Column sums: dw_a over the key rows' shares, db over dq_proj's
	// rows, the sink's gradient over the rows' shares.
	type colSum struct {
		dst         **engine.Tensor
		src         *engine.Tensor
		rows, width int
		bound       float64
	}
	sums := []colSum{{&g.DWA, t.KeyWA, B * S, da, bounds.dwa}}
	if a.bias != nil {
		sums = append(sums, colSum{&g.DBias, t.DQ, B * L, da, bounds.db})
	}
	if opts.Sinks != nil {
		sums = append(sums, colSum{&g.DSinks, t.RowSinks, B * L, 1, bounds.dSinks})
	}
	for _, c := range sums {
		if err := output(c.dst, [4]int{1, 1, 1, c.width}, c.bound); err != nil {
			return nil, err
		}
		if err := columnSums(b, c.src, 0, c.width, c.rows, c.width, *c.dst, 0); err != nil {
			return nil, err
		}
	}
	return &AdditiveGradients{DQ: (*vkattn.Tensor)(g.DQ), DK: (*vkattn.Tensor)(g.DK), DV: (*vkattn.Tensor)(g.DV),
		DWQ: (*vkattn.Tensor)(g.DWQ), DWK: (*vkattn.Tensor)(g.DWK), DBias: (*vkattn.Tensor)(g.DBias), DWA: (*vkattn.Tensor)(g.DWA),
		DSinks: (*vkattn.Tensor)(g.DSinks), Plan: plan.Plan}, nil
}

// additiveGrads are AdditiveGradients as the engine's tensors, while
// recorded.
type additiveGrads struct {
	DQ, DK, DV, DWQ, DWK, DBias, DWA, DSinks *engine.Tensor
}

// additiveGradBounds bound an additive backward call's gradients.
type additiveGradBounds struct {
	dq, dk, dv, dWQ, dWK, db, dwa, dSinks float64
}

// checkBackwardRange bounds an additive backward call before it runs and
// refuses it (ErrOverflow) where the forward (checkRange) or the
// attention's backward on the projections could overflow float32: dS
// reaches each projection's element i as dS w_a,i (1 - tanh^2), so
// max|w_a| is the factor of dQ and dK (BackwardRange), and w_a as dS
// tanh, summed over L rows into each key row's share. It returns the
// bounds of the gradients, the projections' (sums of rows for dW and db,
// of d_a outputs for dx; gradBound) and dw_a's (over B*S key rows).
func (a *Additive) checkBackwardRange(dm vkattn.Dims, opts *vkattn.Options, q, k, v, dO *engine.Tensor) (additiveGradBounds, error) {
	var g additiveGradBounds
	oBound, err := a.checkRange(dm, opts, q, k, v)
	if err != nil {
		return g, err
	}
	via := engine.GradFactor{Formula: "dS·w_a(1 - tanh²)", Factor: "max|w_a|", X: engine.Bound(a.wa)}
	heads, err := engine.BackwardRange(dm, opts, 1, engine.Bound(dO), engine.Bound(v), oBound, via, via)
	if err != nil {
		return g, err
	}
	share := float64(dm.L) * heads.DS
	if !(share <= engine.F32Limit) {
		return g, core.Errorf(vkattn.ErrOverflow, "the backward pass's share of dw_a of a key row could reach L %d x max|dS| %.3g = %.3g, beyond %.3g, half of float32's range", dm.L, heads.DS, share, engine.F32Limit)
	}
	rows, keys := dm.B*dm.L, dm.B*dm.S
	g.dv = heads.DV
	g.dSinks = gradBound(rows, heads.DS, 1) // BackwardRange checked the sinks' sum
	g.dWQ, g.db, g.dq = gradBound(rows, engine.Bound(q), heads.DQ), gradBound(rows, heads.DQ, 1), gradBound(a.da, heads.DQ, engine.Bound(a.wq))
	g.dWK, g.dk = gradBound(keys, engine.Bound(k), heads.DK), gradBound(a.da, heads.DK, engine.Bound(a.wk))
	g.dwa = gradBound(keys, share, 1)
	return g, nil
}
