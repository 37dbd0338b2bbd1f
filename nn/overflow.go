package nn

import (
	"fmt"
	"math"

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
func (m *MHA) checkRange(p MHAPlan, attn *vkattn.Options, x, key, value *engine.Tensor) (float64, error) {
	qb, kb, vb, err := m.projectionBounds(x, key, value)
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

// projectionBounds bounds the Q, K and V projections of x, key and value.
func (m *MHA) projectionBounds(x, key, value *engine.Tensor) (qb, kb, vb float64, err error) {
	bias := engine.Bound(m.inB)
	if qb, err = checkLinear("q projection", m.dModel, engine.Bound(x), engine.Bound(m.projWeight(0)), bias); err != nil {
		return
	}
	if kb, err = checkLinear("k projection", m.kdim, engine.Bound(key), engine.Bound(m.projWeight(1)), bias); err != nil {
		return
	}
	vb, err = checkLinear("v projection", m.vdim, engine.Bound(value), engine.Bound(m.projWeight(2)), bias)
	return
}

// gradBound bounds a float32 sum of terms products of factors bounded by
// a and b: a gradient product's, terms the length of its sum. It is not
// checked against float32's range: a bound from the inputs' bounds (each
// at least 2^32, §9) would refuse ordinary calls, so the gradients are
// checked on the device after the call (engine.Builder.CheckFinite), and
// a bound beyond the limit makes a call that reads the gradient refuse it.
func gradBound(terms int, a, b float64) float64 { return float64(terms) * a * b }

// mhaGradBounds bound an MHA backward call's gradients.
type mhaGradBounds struct {
	dWo, dbo, dWIn, dWq, dWk, dWv, dbIn float64
	dX, dKey, dValue                    float64
}

// checkBackwardRange bounds an MHA backward call before it runs and
// refuses it (ErrOverflow) where the forward (checkRange) or the heads'
// attention backward (engine.BackwardRange, with dO the concatenation's
// gradient, within d max|dY| max|W_o|, and the projections' bounds) could
// overflow float32. It returns the bounds of the gradients: out_proj's
// (dW over B*T rows of dY^T concat, db over the same rows), then each
// projection's weight, bias and input gradients from the heads'.
func (m *MHA) checkBackwardRange(pr *mhaProblem, in *mhaGradInputs) (mhaGradBounds, error) {
	var g mhaGradBounds
	if _, err := m.checkRange(pr.plan, &pr.attn, in.x, in.key, in.value); err != nil {
		return g, err
	}
	qb, kb, vb, err := m.projectionBounds(in.x, in.key, in.value)
	if err != nil {
		return g, err
	}
	p := pr.plan
	rows, kvRows, d, kv := p.B*p.T, p.B*p.S, p.DModel, m.kvOut
	dy := engine.Bound(in.dY)
	g.dWo, g.dbo = gradBound(rows, dy, vb), gradBound(rows, dy, 1)
	dm := p.Attention.Dims
	scale := math.Abs(pr.attn.Scale.For(dm.DK))
	toQ := engine.GradFactor{Formula: "scale·dS·K", Factor: "|scale| x max|K|", X: scale * kb}
	toK := engine.GradFactor{Formula: "scale·dS^T·Q", Factor: "|scale| x max|Q|", X: scale * qb}
	heads, err := engine.BackwardRange(dm, &pr.attn, scale, gradBound(d, dy, engine.Bound(m.outW)), vb, vb, toQ, toK)
	if err != nil {
		return g, err
	}
	g.dWq, g.dWk, g.dWv = gradBound(rows, heads.DQ, engine.Bound(in.x)), gradBound(kvRows, heads.DK, engine.Bound(in.key)), gradBound(kvRows, heads.DV, engine.Bound(in.value))
	g.dWIn = max(g.dWq, g.dWk, g.dWv)
	g.dbIn = max(gradBound(rows, heads.DQ, 1), gradBound(kvRows, max(heads.DK, heads.DV), 1))
	g.dX = gradBound(d, heads.DQ, engine.Bound(m.projWeight(0)))
	g.dKey, g.dValue = gradBound(kv, heads.DK, engine.Bound(m.projWeight(1))), gradBound(kv, heads.DV, engine.Bound(m.projWeight(2)))
	if in.self {
		g.dX += g.dKey + g.dValue
	}
	return g, nil
}

// checkRange bounds an additive call: the projections q W_q + b and k W_k,
// their sum (tanh's argument), the scores |w_a . tanh(...)| <= sum |w_a|,
// and the output sums. It returns O's bound.
func (a *Additive) checkRange(dm vkattn.Dims, opts *vkattn.Options, q, k, v *engine.Tensor) (float64, error) {
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
