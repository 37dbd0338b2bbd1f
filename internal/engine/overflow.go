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

// F32Limit bounds every sum the kernels form in float32 (scores, output
// accumulators, projections): half of float32's range leaves room for
// rounding.
const F32Limit = math.MaxFloat32 / 2

// maskedScoreLimit bounds a score plus its additive mask: the kernel adds
// them in float32 and only ever subtracts the row's maximum from the sum,
// so the sum need only round to a finite float32 (below FLT_MAX plus half
// an ulp, 2^103). A mask of -FLT_MAX, which models save as "blocked"
// (torch.finfo(float32).min), passes with any score below about 1e31.
const maskedScoreLimit = math.MaxFloat32 + 0x1p103

// CheckScores refuses a call whose float32 arithmetic could overflow, which
// gives Inf and then NaN rows, never an error, on the device. dot bounds the
// unscaled score (d_k max|q| max|k| for scaled dot products, described by
// dotWhat), vBound bounds |V|; the bounds are host-side facts about the
// inputs (Tensor.bound), not the data itself.
func CheckScores(d core.Dims, opts *core.Options, dotWhat string, dot, scale, vBound float64) error {
	scaled := dot * math.Abs(scale)
	mask := maskMagnitude(opts.Mask)
	capped := scaled
	if opts.Softcap > 0 {
		capped = min(scaled, opts.Softcap) // c tanh(s / c) is within c
	}
	// ALiBi adds slope * (j - (t + S - L)): |j - pos| < S + L.
	slope, _ := Magnitude(opts.ALiBi) // finite: checked with the options
	bias := slope * float64(d.S+d.L)
	score := capped + bias + mask
	switch {
	case !(dot <= F32Limit):
		return errorf(core.ErrOverflow, "unscaled scores could reach %s = %.3g, beyond %.3g, half of float32's range", dotWhat, dot, F32Limit)
	case !(scaled <= F32Limit):
		return errorf(core.ErrOverflow, "scaled scores could reach %.3g (%s times scale %g), beyond %.3g, half of float32's range", scaled, dotWhat, scale, F32Limit)
	case !(capped+bias <= F32Limit):
		return errorf(core.ErrOverflow, "scores plus the ALiBi bias (largest slope x (S + L) = %.3g) could reach %.3g, beyond %.3g, half of float32's range", bias, capped+bias, F32Limit)
	case !(score < maskedScoreLimit):
		return errorf(core.ErrOverflow, "scores plus the additive mask (largest finite |value| %.3g) could reach %.3g, beyond float32's range", mask, score)
	case !(float64(d.S)*vBound <= F32Limit):
		// Each output row accumulates up to S value rows (weights <= 1)
		// before it is normalised.
		return errorf(core.ErrOverflow, "output sums could reach S %d x max|V| %.3g = %.3g, beyond %.3g, half of float32's range", d.S, vBound, float64(d.S)*vBound, F32Limit)
	}
	return nil
}

// GradFactor is what dS meets in each term of a gradient's sum: for dQ =
// scale dS K, |scale| max|K| (formula "scale·dS·K", factor "|scale| x
// max|K|").
type GradFactor struct {
	Formula, Factor string
	X               float64
}

// scaledGrads are the factors of scaled dot-product scores: the kernel
// forms scale dS first, then its products with K (into dQ) and Q (into
// dK).
func scaledGrads(scale float64, q, k *Tensor) (toQ, toK GradFactor) {
	scale = math.Abs(scale)
	return GradFactor{"scale·dS·K", "|scale| x max|K|", scale * k.magnitudeBound()},
		GradFactor{"scale·dS^T·Q", "|scale| x max|Q|", scale * q.magnitudeBound()}
}

// GradBounds bound a backward call's float32 quantities.
type GradBounds struct{ DS, DQ, DK, DV float64 }

// BackwardRange refuses a backward call (SEMANTICS.md §10) whose float32
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
func BackwardRange(dm core.Dims, opts *core.Options, scale, dO, v, o float64, toQ, toK GradFactor) (GradBounds, error) {
	dv := float64(dm.DV)
	rows := dm.H / dm.HKV * dm.L // the query rows a key's gradients sum
	dP, D := dv*dO*v, dv*dO*o
	g := GradBounds{DS: dP + D}
	g.DQ = float64(dm.S) * g.DS * toQ.X
	g.DK = float64(rows) * g.DS * toK.X
	g.DV = float64(rows) * dO
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
		{g.DS, "dS = P∘(dP - D) could reach max|dP| %.3g + max|D| %.3g = %.3g", []any{dP, D, g.DS}},
		{g.DS * math.Abs(scale), "scale·dS could reach |scale| %g x max|dS| %.3g = %.3g", []any{scale, g.DS, g.DS * math.Abs(scale)}},
		{g.DQ, "dQ = %s could reach S %d x max|dS| %.3g x %s %.3g = %.3g", []any{toQ.Formula, dm.S, g.DS, toQ.Factor, toQ.X, g.DQ}},
		{g.DK, "dK = %s could reach %d query rows x max|dS| %.3g x %s %.3g = %.3g", []any{toK.Formula, rows, g.DS, toK.Factor, toK.X, g.DK}},
		{g.DV, "dV = P^T·dO could reach %d query rows x max|dO| %.3g = %.3g", []any{rows, dO, g.DV}},
		{sinks, "dSinks could reach B x L = %d rows x max|D| %.3g = %.3g", []any{dm.B * dm.L, D, sinks}},
	} {
		if !(c.x <= F32Limit) {
			return g, errorf(core.ErrOverflow, "the backward pass's "+c.format+", beyond %.3g, half of float32's range", append(c.args, F32Limit)...)
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
	return vb, CheckScores(dm, opts, what, float64(dm.DK)*qb*kb, opts.Scale.For(dm.DK), vb)
}

// setBounds records what an attention call's outputs may hold: O within
// oBound, weights within [0, 1]; the log-sum-exp is -Inf on fully masked
// rows, so it has no finite bound.
func (o *Output) setBounds(oBound float64) {
	o.O.bound = oBound
	if o.LSE != nil {
		o.LSE.finite, o.LSE.lse = false, true
	}
	if o.Weights != nil {
		o.Weights.bound = 1
	}
}
