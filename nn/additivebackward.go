package nn

import (
	"context"
	"math"

	"github.com/vkattn/vkattn"
	"github.com/vkattn/vkattn/core"
	"github.com/vkattn/vkattn/internal/engine"
)

// AdditiveGradients are additive attention's gradients of sum(O * dO)
// (float32, dense, row-major, each of the shape of what it is the
// gradient of): the inputs q (B,L,d_q), k (B,S,d_k), v (B,S,d_v), the
// weights W_q (d_q,d_a), W_k (d_k,d_a), b (d_a; nil without a bias), w_a
// (d_a), and the sink (one entry) when opts has one.
type AdditiveGradients struct {
	DQ, DK, DV           []float32
	DWQ, DWK, DBias, DWA []float32
	DSinks               []float32
}

// Backward returns the gradients of sum(O * dO) for O = a.Attention(q, k,
// v, opts) (SEMANTICS.md §16): dO has O's (B, L, d_v). The attention's
// forward and backward run on the device (attention_backward.comp with
// additive scores: the gradients of the projections and each key row's
// share of dw_a); the projections q W_q + b and k W_k are formed and
// differentiated on the host in float64.
func (a *Additive) Backward(q, k, v, dO *vkattn.Tensor, opts vkattn.Options) (*AdditiveGradients, error) {
	return a.BackwardContext(context.Background(), q, k, v, dO, opts)
}

// BackwardContext is Backward with a context that can cancel the wait.
func (a *Additive) BackwardContext(ctx context.Context, q, k, v, dO *vkattn.Tensor, opts vkattn.Options) (*AdditiveGradients, error) {
	d := a.dev
	dims, err := a.inputDims(q, k, v)
	if err != nil {
		return nil, err
	}
	if err := engine.CheckInput(d, "dO", dO); err != nil {
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
	dm := plan.Dims
	if err := a.checkBackwardRange(dm, &opts, q, k, v, dO); err != nil {
		return nil, err
	}
	host := func(t *vkattn.Tensor) ([]float32, error) {
		if t == nil {
			return nil, nil
		}
		return t.Download()
	}
	var in [6][]float32 // q, k, W_q^T, W_k^T, b, w_a
	for i, t := range []*vkattn.Tensor{q, k, a.wq, a.wk, a.bias, a.wa} {
		if in[i], err = host(t); err != nil {
			return nil, err
		}
	}
	wq, wk := core.Transpose(in[2], a.da, a.dq), core.Transpose(in[3], a.da, a.dk) // back to (in, out)
	q64, k64 := widen64(in[0]), widen64(in[1])
	B, L, S := dm.B, dm.L, dm.S
	// The projections as the forward forms them, in float32.
	qp, err := d.Upload([]int{B, 1, L, a.da}, narrow32(core.Project(q64, B*L, a.dq, wq, in[4], a.da)))
	if err != nil {
		return nil, err
	}
	defer qp.Close()
	kp, err := d.Upload([]int{B, 1, S, a.da}, narrow32(core.Project(k64, B*S, a.dk, wk, nil, a.da)))
	if err != nil {
		return nil, err
	}
	defer kp.Close()
	g, err := engine.RunOnce(ctx, func() (*engine.GradCall, error) {
		b := engine.NewBuilder(d)
		call, err := b.Backward(plan, &opts, engine.AttentionInputs{Q: engine.Buf(qp), K: engine.Buf(kp), V: engine.Buf(v), WA: engine.Buf(a.wa)}, dO)
		if err != nil {
			return nil, b.Fail(err)
		}
		return call, nil
	})
	if err != nil {
		return nil, err
	}
	defer g.Close()
	var dev [4][]float32 // dqp, dkp, dv, each key row's dw_a
	for i, t := range []*vkattn.Tensor{g.DQ, g.DK, g.DV, engine.KeyShares(g)} {
		if dev[i], err = t.Download(); err != nil {
			return nil, err
		}
	}
	out := &AdditiveGradients{DV: dev[2]}
	dwa := make([]float64, a.da)
	for i, x := range dev[3] {
		dwa[i%a.da] += float64(x)
	}
	if opts.Sinks != nil {
		if out.DSinks, err = engine.SinkGradients(g); err != nil {
			return nil, err
		}
	}
	dWQ, db, dq := core.ProjectBackward(widen64(dev[0]), q64, B*L, a.dq, a.da, wq, a.bias != nil)
	dWK, _, dk := core.ProjectBackward(widen64(dev[1]), k64, B*S, a.dk, a.da, wk, false)
	for _, h := range []struct {
		name string
		dst  *[]float32
		x    []float64
	}{{"dw_a", &out.DWA, dwa}, {"dq", &out.DQ, dq}, {"dk", &out.DK, dk}, {"dW_q", &out.DWQ, dWQ}, {"dW_k", &out.DWK, dWK}, {"db", &out.DBias, db}} {
		if h.x == nil {
			continue // no bias
		}
		if *h.dst, err = roundGrad(h.name, h.x); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// checkBackwardRange bounds an additive backward call before it runs: the
// forward (checkRange), and the attention's backward on the projections,
// where dS reaches each projection's element i as dS w_a,i (1 - tanh^2),
// so max|w_a| is the factor of dQ and dK (backwardRange), and w_a as
// dS tanh, summed over L rows into each key row's share. The host's sums
// are float64 and checked when rounded (roundGrad).
func (a *Additive) checkBackwardRange(dm vkattn.Dims, opts *vkattn.Options, q, k, v, dO *vkattn.Tensor) error {
	oBound, err := a.checkRange(dm, opts, q, k, v)
	if err != nil {
		return err
	}
	via := engine.GradFactor{Formula: "dS·w_a(1 - tanh²)", Factor: "max|w_a|", X: engine.Bound(a.wa)}
	g, err := engine.BackwardRange(dm, opts, 1, engine.Bound(dO), engine.Bound(v), oBound, via, via)
	if err != nil {
		return err
	}
	if share := float64(dm.L) * g.DS; !(share <= engine.F32Limit) {
		return core.Errorf(vkattn.ErrOverflow, "the backward pass's share of dw_a of a key row could reach L %d x max|dS| %.3g = %.3g, beyond %.3g, half of float32's range", dm.L, g.DS, share, engine.F32Limit)
	}
	return nil
}

// roundGrad rounds a gradient the host summed in float64 to float32,
// refusing one that would round to Inf (ErrOverflow): its terms are the
// device's finite gradients, so only the rounding can overflow.
func roundGrad(name string, x []float64) ([]float32, error) {
	y := narrow32(x)
	for i, v := range y {
		if math.IsInf(float64(v), 0) {
			return nil, core.Errorf(vkattn.ErrOverflow, "the backward pass's %s[%d] is %.3g, beyond float32's range", name, i, x[i])
		}
	}
	return y, nil
}
