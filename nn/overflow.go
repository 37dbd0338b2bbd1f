package nn

import (
	"fmt"

	"github.com/vkattn/vkattn"
	"github.com/vkattn/vkattn/core"
	"github.com/vkattn/vkattn/internal/engine"
)

// The layers' range checks: each step of a layer, its dense layers
// included, is bounded from the bounds its input tensors and weights
// carry (engine.Bound), as the engine bounds an attention call
// (internal/engine/overflow.go), and a call whose float32 sums could
// overflow is refused (ErrOverflow).

// checkLinear bounds the outputs of a dense layer y = x W^T + b of the given
// number of inputs from bounds of |x|, |W| and |b|, and refuses it when they
// could overflow float32.
func checkLinear(name string, inputs int, x, w, b float64) (float64, error) {
	y := float64(inputs)*x*w + b
	if !(y <= engine.F32Limit) {
		return 0, core.Errorf(vkattn.ErrOverflow, "%s outputs could reach %d inputs x max|x| %.3g x max|W| %.3g + max|b| %.3g = %.3g, beyond %.3g, half of float32's range", name, inputs, x, w, b, y, engine.F32Limit)
	}
	return y, nil
}

// checkRange bounds every step of an MHA call: the input projections, the
// per-head scores and output sums, and out_proj, whose output bound it
// returns.
func (m *MHA) checkRange(p MHAPlan, attn *vkattn.Options, x, key, value *vkattn.Tensor) (float64, error) {
	wq, wk, wv := m.qW, m.kW, m.vW
	if m.packed {
		wq, wk, wv = m.inW, m.inW, m.inW
	}
	bias := engine.Bound(m.inB)
	qb, err := checkLinear("q projection", m.dModel, engine.Bound(x), engine.Bound(wq), bias)
	if err != nil {
		return 0, err
	}
	kb, err := checkLinear("k projection", m.kdim, engine.Bound(key), engine.Bound(wk), bias)
	if err != nil {
		return 0, err
	}
	vb, err := checkLinear("v projection", m.vdim, engine.Bound(value), engine.Bound(wv), bias)
	if err != nil {
		return 0, err
	}
	dm := p.Attention.Dims
	what := fmt.Sprintf("d_head %d x max|Q| %.3g x max|K| %.3g (bounds of the projections)", dm.DK, qb, kb)
	if err := engine.CheckScores(dm, attn, what, float64(dm.DK)*qb*kb, attn.Scale.For(dm.DK), vb); err != nil {
		return 0, err
	}
	// The concatenated head outputs lie within the V projection's bound.
	return checkLinear("out_proj", m.dModel, vb, engine.Bound(m.outW), engine.Bound(m.outB))
}

// checkRange bounds an additive call: the projections q W_q + b and k W_k,
// their sum (tanh's argument), the scores |w_a . tanh(...)| <= sum |w_a|,
// and the output sums. It returns O's bound.
func (a *Additive) checkRange(dm vkattn.Dims, opts *vkattn.Options, q, k, v *vkattn.Tensor) (float64, error) {
	qb, err := checkLinear("q W_q + b", a.dq, engine.Bound(q), engine.Bound(a.wq), engine.Bound(a.bias))
	if err != nil {
		return 0, err
	}
	kb, err := checkLinear("k W_k", a.dk, engine.Bound(k), engine.Bound(a.wk), 0)
	if err != nil {
		return 0, err
	}
	if !(qb+kb <= engine.F32Limit) {
		return 0, core.Errorf(vkattn.ErrOverflow, "q W_q + b + k W_k could reach %.3g + %.3g, beyond %.3g, half of float32's range", qb, kb, engine.F32Limit)
	}
	what := fmt.Sprintf("d_a %d x max|w_a| %.3g", a.da, engine.Bound(a.wa))
	vb := engine.Bound(v)
	return vb, engine.CheckScores(dm, opts, what, float64(a.da)*engine.Bound(a.wa), 1, vb)
}
