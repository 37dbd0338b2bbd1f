package engine

import (
	"fmt"
	"math"

	"github.com/vkattn/vkattn/core"
)

// Inputs near float32's limit give scores, sums or projections that are
// Inf on the device, and then NaN rows, never an error. Each uploaded
// tensor carries a bound on its magnitude (Tensor.bound), each weight
// tensor its exact largest |value|; Prepare derives bounds of everything
// the kernels compute from them and refuses a call (ErrOverflow) whose
// float32 sums could overflow. Device-produced tensors get bounds from the
// call that makes them, so chained calls are checked too.

// f32Limit bounds every sum the kernels form in float32 (scores, output
// accumulators, projections): half of float32's range leaves room for
// rounding.
const f32Limit = math.MaxFloat32 / 2

// maskedScoreLimit bounds a score plus its additive mask: the kernel adds
// them in float32 and only ever subtracts the row's maximum from the sum,
// so the sum need only round to a finite float32 (below FLT_MAX plus half
// an ulp, 2^103). A mask of -FLT_MAX, which models save as "blocked"
// (torch.finfo(float32).min), passes with any score below about 1e31.
const maskedScoreLimit = math.MaxFloat32 + 0x1p103

// checkScores refuses a call whose float32 arithmetic could overflow, which
// gives Inf and then NaN rows, never an error, on the device. dot bounds the
// unscaled score (d_k max|q| max|k| for scaled dot products, described by
// dotWhat), vBound bounds |V|; the bounds are host-side facts about the
// inputs (Tensor.bound), not the data itself.
func checkScores(d core.Dims, opts *core.Options, dotWhat string, dot, scale, vBound float64) error {
	scaled := dot * math.Abs(scale)
	mask := maskMagnitude(opts.Mask)
	capped := scaled
	if opts.Softcap > 0 {
		capped = min(scaled, opts.Softcap) // c tanh(s / c) is within c
	}
	// ALiBi adds slope * (j - (t + S - L)): |j - pos| < S + L.
	slope, _ := magnitude(opts.ALiBi) // finite: checked with the options
	bias := slope * float64(d.S+d.L)
	score := capped + bias + mask
	switch {
	case !(dot <= f32Limit):
		return errorf(core.ErrOverflow, "unscaled scores could reach %s = %.3g, beyond %.3g, half of float32's range", dotWhat, dot, f32Limit)
	case !(scaled <= f32Limit):
		return errorf(core.ErrOverflow, "scaled scores could reach %.3g (%s times scale %g), beyond %.3g, half of float32's range", scaled, dotWhat, scale, f32Limit)
	case !(capped+bias <= f32Limit):
		return errorf(core.ErrOverflow, "scores plus the ALiBi bias (largest slope x (S + L) = %.3g) could reach %.3g, beyond %.3g, half of float32's range", bias, capped+bias, f32Limit)
	case !(score < maskedScoreLimit):
		return errorf(core.ErrOverflow, "scores plus the additive mask (largest finite |value| %.3g) could reach %.3g, beyond float32's range", mask, score)
	case !(float64(d.S)*vBound <= f32Limit):
		// Each output row accumulates up to S value rows (weights <= 1)
		// before it is normalised.
		return errorf(core.ErrOverflow, "output sums could reach S %d x max|V| %.3g = %.3g, beyond %.3g, half of float32's range", d.S, vBound, float64(d.S)*vBound, f32Limit)
	}
	return nil
}

// checkLinear bounds the outputs of a dense layer y = x W^T + b of the given
// number of inputs from bounds of |x|, |W| and |b|, and refuses it when they
// could overflow float32.
func checkLinear(name string, inputs int, x, w, b float64) (float64, error) {
	y := float64(inputs)*x*w + b
	if !(y <= f32Limit) {
		return 0, errorf(core.ErrOverflow, "%s outputs could reach %d inputs x max|x| %.3g x max|W| %.3g + max|b| %.3g = %.3g, beyond %.3g, half of float32's range", name, inputs, x, w, b, y, f32Limit)
	}
	return y, nil
}

// gradFactor is what dS meets in each term of a gradient's sum: for dQ =
// scale dS K, |scale| max|K| (formula "scale·dS·K", factor "|scale| x
// max|K|").
type gradFactor struct {
	formula, factor string
	x               float64
}

// scaledGrads are the factors of scaled dot-product scores: the kernel
// forms scale dS first, then its products with K (into dQ) and Q (into
// dK).
func scaledGrads(scale float64, q, k *Tensor) (toQ, toK gradFactor) {
	scale = math.Abs(scale)
	return gradFactor{"scale·dS·K", "|scale| x max|K|", scale * k.magnitudeBound()},
		gradFactor{"scale·dS^T·Q", "|scale| x max|Q|", scale * q.magnitudeBound()}
}

// gradBounds bound a backward call's float32 quantities.
type gradBounds struct{ dS, dQ, dK, dV float64 }

// backwardRange refuses a backward call (SEMANTICS.md §16) whose float32
// intermediates in attention_backward.comp could overflow, which gives Inf
// and then NaN gradients, never an error, on the device. dO, v and o bound
// |dO|, |V| and the forward's |O|; toQ and toK are what dS is multiplied by
// on its way into dQ (a sum over up to S keys) and dK (over the group's
// query rows). P is at most 1 and so is the soft-cap's derivative, so
//
//	dP = dO . v_j, D = dO . O_t       within d_v max|dO| max|V| (or max|O|)
//	dS = P (dP - D) c'                within |dP| + |D|
//	dQ_t = sum over keys, dK_j = sum over rows of dS times the factor
//	dV_j = sum over rows of P dO      within rows max|dO|
//
// and each head's dSinks sums -P_sink D over B L rows (in float64, then
// rounded to float32). The bounds hold for every partial sum too. scale is
// what multiplies dS before either product (1 for additive scores).
func backwardRange(dm core.Dims, opts *core.Options, scale, dO, v, o float64, toQ, toK gradFactor) (gradBounds, error) {
	dv := float64(dm.DV)
	rows := dm.H / dm.HKV * dm.L // the query rows a key's gradients sum
	dP, D := dv*dO*v, dv*dO*o
	g := gradBounds{dS: dP + D}
	g.dQ = float64(dm.S) * g.dS * toQ.x
	g.dK = float64(rows) * g.dS * toK.x
	g.dV = float64(rows) * dO
	sinks := 0.0
	if opts.Sinks != nil {
		sinks = float64(dm.B*dm.L) * D
	}
	for _, c := range []struct {
		x      float64
		format string
		args   []any
	}{
		{dP, "dP = dO·V^T could reach d_v %d x max|dO| %.3g x max|V| %.3g = %.3g", []any{dm.DV, dO, v, dP}},
		{D, "D = rowsum(dO∘O) could reach d_v %d x max|dO| %.3g x max|O| %.3g = %.3g", []any{dm.DV, dO, o, D}},
		{g.dS, "dS = P∘(dP - D) could reach max|dP| %.3g + max|D| %.3g = %.3g", []any{dP, D, g.dS}},
		{g.dS * math.Abs(scale), "scale·dS could reach |scale| %g x max|dS| %.3g = %.3g", []any{scale, g.dS, g.dS * math.Abs(scale)}},
		{g.dQ, "dQ = %s could reach S %d x max|dS| %.3g x %s %.3g = %.3g", []any{toQ.formula, dm.S, g.dS, toQ.factor, toQ.x, g.dQ}},
		{g.dK, "dK = %s could reach %d query rows x max|dS| %.3g x %s %.3g = %.3g", []any{toK.formula, rows, g.dS, toK.factor, toK.x, g.dK}},
		{g.dV, "dV = P^T·dO could reach %d query rows x max|dO| %.3g = %.3g", []any{rows, dO, g.dV}},
		{sinks, "dSinks could reach B x L = %d rows x max|D| %.3g = %.3g", []any{dm.B * dm.L, D, sinks}},
	} {
		if !(c.x <= f32Limit) {
			return g, errorf(core.ErrOverflow, "the backward pass's "+c.format+", beyond %.3g, half of float32's range", append(c.args, f32Limit)...)
		}
	}
	return g, nil
}

// maskMagnitude is the largest finite |value| of an additive mask (0 for
// none); -Inf entries block and add nothing.
func maskMagnitude(m *core.Mask) float64 {
	if m == nil {
		return 0
	}
	most := 0.0
	for _, x := range m.Values {
		if a := math.Abs(float64(x)); a > most && !math.IsInf(a, 0) {
			most = a
		}
	}
	return most
}

// magnitudeBound is t's bound; 0 for an absent optional tensor (a bias).
func (t *Tensor) magnitudeBound() float64 {
	if t == nil {
		return 0
	}
	return t.root().bound
}

// attentionRange checks a scaled dot-product call (checkScores) and returns
// the bound of its output O: a convex combination of V rows, or zeros.
func attentionRange(dm core.Dims, opts *core.Options, q, k, v *Tensor) (float64, error) {
	qb, kb, vb := q.magnitudeBound(), k.magnitudeBound(), v.magnitudeBound()
	what := fmt.Sprintf("d_k %d x max|Q| %.3g x max|K| %.3g", dm.DK, qb, kb)
	return vb, checkScores(dm, opts, what, float64(dm.DK)*qb*kb, opts.Scale.For(dm.DK), vb)
}

// setBounds records what an attention call's outputs may hold: O within
// oBound, weights within [0, 1]; the log-sum-exp is -Inf on fully masked
// rows, so it has no finite bound.
func (o *Output) setBounds(oBound float64) {
	o.O.bound = oBound
	if o.LSE != nil {
		o.LSE.finite = false
	}
	if o.Weights != nil {
		o.Weights.bound = 1
	}
}

// checkRange bounds every step of an MHA call: the input projections, the
// per-head scores and output sums, and out_proj, whose output bound it
// returns.
func (m *MHA) checkRange(p MHAPlan, attn *core.Options, x, key, value *Tensor) (float64, error) {
	wq, wk, wv := m.qW, m.kW, m.vW
	if m.packed {
		wq, wk, wv = m.inW, m.inW, m.inW
	}
	bias := m.inB.magnitudeBound()
	qb, err := checkLinear("q projection", m.dModel, x.magnitudeBound(), wq.magnitudeBound(), bias)
	if err != nil {
		return 0, err
	}
	kb, err := checkLinear("k projection", m.kdim, key.magnitudeBound(), wk.magnitudeBound(), bias)
	if err != nil {
		return 0, err
	}
	vb, err := checkLinear("v projection", m.vdim, value.magnitudeBound(), wv.magnitudeBound(), bias)
	if err != nil {
		return 0, err
	}
	dm := p.Attention.Dims
	what := fmt.Sprintf("d_head %d x max|Q| %.3g x max|K| %.3g (bounds of the projections)", dm.DK, qb, kb)
	if err := checkScores(dm, attn, what, float64(dm.DK)*qb*kb, attn.Scale.For(dm.DK), vb); err != nil {
		return 0, err
	}
	// The concatenated head outputs lie within the V projection's bound.
	return checkLinear("out_proj", m.dModel, vb, m.outW.magnitudeBound(), m.outB.magnitudeBound())
}

// checkRange bounds an additive call: the projections q W_q + b and k W_k,
// their sum (tanh's argument), the scores |w_a . tanh(...)| <= sum |w_a|,
// and the output sums. It returns O's bound.
func (a *Additive) checkRange(dm core.Dims, opts *core.Options, q, k, v *Tensor) (float64, error) {
	qb, err := checkLinear("q W_q + b", a.dq, q.magnitudeBound(), a.wq.magnitudeBound(), a.bias.magnitudeBound())
	if err != nil {
		return 0, err
	}
	kb, err := checkLinear("k W_k", a.dk, k.magnitudeBound(), a.wk.magnitudeBound(), 0)
	if err != nil {
		return 0, err
	}
	if !(qb+kb <= f32Limit) {
		return 0, errorf(core.ErrOverflow, "q W_q + b + k W_k could reach %.3g + %.3g, beyond %.3g, half of float32's range", qb, kb, f32Limit)
	}
	what := fmt.Sprintf("d_a %d x max|w_a| %.3g", a.da, a.wa.magnitudeBound())
	vb := v.magnitudeBound()
	return vb, checkScores(dm, opts, what, float64(a.da)*a.wa.magnitudeBound(), 1, vb)
}
