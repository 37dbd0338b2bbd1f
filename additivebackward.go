package vkattn

import (
	"context"

	"github.com/vkattn/vkattn/core"
	"github.com/vkattn/vkattn/pipelines"
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
func (a *Additive) Backward(q, k, v, dO *Tensor, opts Options) (*AdditiveGradients, error) {
	return a.BackwardContext(context.Background(), q, k, v, dO, opts)
}

// BackwardContext is Backward with a context that can cancel the wait.
func (a *Additive) BackwardContext(ctx context.Context, q, k, v, dO *Tensor, opts Options) (*AdditiveGradients, error) {
	d := a.dev
	dims, err := a.inputDims(q, k, v)
	if err != nil {
		return nil, err
	}
	if err := d.checkInput("dO", dO); err != nil {
		return nil, err
	}
	if want := [4]int{1, dims[0][0], dims[0][1], dims[2][2]}; dO.shape != want {
		return nil, errorf(ErrShape, "dO has shape %v, want O's (B, L, d_v) %v", dO.shape, want)
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
	host := func(t *Tensor) ([]float32, error) {
		if t == nil {
			return nil, nil
		}
		return t.Download()
	}
	var in [6][]float32 // q, k, W_q^T, W_k^T, b, w_a
	for i, t := range []*Tensor{q, k, a.wq, a.wk, a.bias, a.wa} {
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
	g, err := runOnce(ctx, func() (*gradCall, error) {
		b := &builder{d: d}
		x := pipelines.AttentionArgs{Q: qp.buf, K: kp.buf, V: v.buf, Scale: 1, Causal: int(opts.Causal), WA: a.wa.buf}
		call, err := b.backward(plan, &opts, x, dO)
		if err != nil {
			return nil, b.fail(err)
		}
		return call, nil
	})
	if err != nil {
		return nil, err
	}
	defer g.Close()
	var dev [4][]float32 // dqp, dkp, dv, each key row's dw_a
	for i, t := range []*Tensor{g.DQ, g.DK, g.DV, g.keyWA} {
		if dev[i], err = t.Download(); err != nil {
			return nil, err
		}
	}
	out := &AdditiveGradients{DV: dev[2], DWA: make([]float32, a.da)}
	dwa := make([]float64, a.da)
	for i, x := range dev[3] {
		dwa[i%a.da] += float64(x)
	}
	out.DWA = narrow32(dwa)
	if opts.Sinks != nil {
		if out.DSinks, err = sinkGradients(g.rowSinks, dm); err != nil {
			return nil, err
		}
	}
	dWQ, db, dq := core.ProjectBackward(widen64(dev[0]), q64, B*L, a.dq, a.da, wq, a.bias != nil)
	dWK, _, dk := core.ProjectBackward(widen64(dev[1]), k64, B*S, a.dk, a.da, wk, false)
	out.DQ, out.DK, out.DWQ, out.DWK = narrow32(dq), narrow32(dk), narrow32(dWQ), narrow32(dWK)
	if db != nil {
		out.DBias = narrow32(db)
	}
	return out, nil
}

// checkBackwardRange bounds an additive backward call: the forward
// (checkRange), the attention's backward on the projections (dS flows
// into each projection's element i as dS w_a,i (1 - tanh^2) and into w_a
// as dS tanh, so max|w_a| and 1 are its factors), and the host's float64
// sums, each rounded to float32: dw_a over B S key rows' shares (each
// over L rows), and the projections' gradients dx = dx' W^T, dW = x^T dx'
// and db.
func (a *Additive) checkBackwardRange(dm Dims, opts *Options, q, k, v, dO *Tensor) error {
	oBound, err := a.checkRange(dm, opts, q, k, v)
	if err != nil {
		return err
	}
	via := gradFactor{"dS·w_a(1 - tanh²)", "max|w_a|", a.wa.magnitudeBound()}
	g, err := backwardRange(dm, opts, 1, dO.magnitudeBound(), v.magnitudeBound(), oBound, via, via)
	if err != nil {
		return err
	}
	B, L, S := dm.B, dm.L, dm.S
	for _, c := range []struct {
		what  string
		n     int
		terms string
		x     float64
	}{
		{"dw_a", B * S * L, "B x S x L terms dS tanh, each within max|dS|", g.dS},
		{"dq = dq' W_q^T", a.da, "d_a terms, each within max|dq'| x max|W_q|", g.dQ * a.wq.magnitudeBound()},
		{"dW_q = q^T dq'", B * L, "B x L terms, each within max|q| x max|dq'|", q.magnitudeBound() * g.dQ},
		{"db", B * L, "B x L terms, each within max|dq'|", g.dQ},
		{"dk = dk' W_k^T", a.da, "d_a terms, each within max|dk'| x max|W_k|", g.dK * a.wk.magnitudeBound()},
		{"dW_k = k^T dk'", B * S, "B x S terms, each within max|k| x max|dk'|", k.magnitudeBound() * g.dK},
	} {
		if y := float64(c.n) * c.x; !(y <= f32Limit) {
			return errorf(ErrOverflow, "the backward pass's %s could reach %d (%s %.3g) = %.3g, beyond %.3g, half of float32's range", c.what, c.n, c.terms, c.x, y, f32Limit)
		}
	}
	return nil
}
