package reference

import (
	"fmt"
	"math"

	"github.com/vkattn/vkattn/core"
)

// AdditiveGradients are the gradients of sum(O * dO) for additive
// attention, in float64, each of the shape of what it is the gradient
// of: the inputs q, k, v, the weights W_q, W_k, b and w_a, and the sink
// (one entry) when opts has one.
type AdditiveGradients struct {
	DQ, DK, DV           []float64
	DWQ, DWK, DBias, DWA []float64
	DSinks               []float64
}

// AdditiveAttentionBackward returns the gradients of sum(O * dO) for
// O = AdditiveAttention(q, k, v, w, opts); dO is O's (B, L, DV). With
// pre_{t,j} = q_t W_q + b + k_j W_k and the raw score s = tanh(pre) . w_a,
// a row's score gradient dE_j = P_j (dO_t . v_j - dO_t . O_t) (times the
// soft-cap's derivative) flows to w_a as dE_j tanh(pre) and to both
// projections as dE_j w_a (1 - tanh^2(pre)); masks are constants.
func AdditiveAttentionBackward(q []float32, qShape [3]int, k []float32, kShape [3]int, v []float32, vShape [3]int, w *core.AdditiveWeights, dO []float32, opts core.Options) (*AdditiveGradients, error) {
	fwd, err := AdditiveAttention(q, qShape, k, kShape, v, vShape, w, opts)
	if err != nil {
		return nil, err
	}
	d := fwd.Dims
	if n := d.B * d.L * d.DV; len(dO) != n {
		return nil, fmt.Errorf("%w: dO has %d values but O (%d, %d, %d) needs %d", core.ErrShape, len(dO), d.B, d.L, d.DV, n)
	}
	if i := core.FirstNonFinite(dO); i >= 0 {
		return nil, fmt.Errorf("%w: dO value %d is %v", core.ErrNonFinite, i, dO[i])
	}
	da := w.DA
	q64, k64, v64, do64, wa := widen(q), widen(k), widen(v), widen(dO), widen(w.WA)
	qp := project(q64, d.B*d.L, w.DQ, w.WQ, w.Bias, da)
	kp := project(k64, d.B*d.S, w.DK, w.WK, nil, da)
	g := &AdditiveGradients{DV: make([]float64, len(v64)), DWA: make([]float64, da)}
	dqp, dkp := make([]float64, len(qp)), make([]float64, len(kp))
	if opts.Sinks != nil {
		g.DSinks = make([]float64, 1)
	}
	th := make([]float64, da)
	for b := 0; b < d.B; b++ {
		for t := 0; t < d.L; t++ {
			row := b*d.L + t
			lse := fwd.LSE[row]
			if math.IsInf(lse, -1) {
				continue // padded, or no visible key: output 0 whatever the inputs
			}
			o, gradO := fwd.O[row*d.DV:(row+1)*d.DV], do64[row*d.DV:(row+1)*d.DV]
			D := 0.0
			for i := range o {
				D += gradO[i] * o[i]
			}
			if g.DSinks != nil {
				g.DSinks[0] -= math.Exp(float64(opts.Sinks[0])-lse) * D
			}
			qr := qp[row*da : (row+1)*da]
			for j := 0; j < d.S; j++ {
				p := fwd.Weights[row*d.S+j]
				if p == 0 {
					continue
				}
				vr := v64[(b*d.S+j)*d.DV : (b*d.S+j+1)*d.DV]
				dP := 0.0
				for i := range vr {
					dP += gradO[i] * vr[i]
					g.DV[(b*d.S+j)*d.DV+i] += p * gradO[i]
				}
				kr := kp[(b*d.S+j)*da : (b*d.S+j+1)*da]
				s := 0.0
				for a := range th {
					th[a] = math.Tanh(qr[a] + kr[a])
					s += th[a] * wa[a]
				}
				dE := p * (dP - D)
				if c := opts.Softcap; c > 0 {
					y := math.Tanh(s / c)
					dE *= 1 - y*y
				}
				for a := range th {
					g.DWA[a] += dE * th[a]
					pre := dE * wa[a] * (1 - th[a]*th[a])
					dqp[row*da+a] += pre
					dkp[(b*d.S+j)*da+a] += pre
				}
			}
		}
	}
	// qp = q W_q + b and kp = k W_k, with W (in, out).
	g.DWQ, g.DBias, g.DQ = core.ProjectBackward(dqp, q64, d.B*d.L, w.DQ, da, w.WQ, w.Bias != nil)
	g.DWK, _, g.DK = core.ProjectBackward(dkp, k64, d.B*d.S, w.DK, da, w.WK, false)
	return g, nil
}
