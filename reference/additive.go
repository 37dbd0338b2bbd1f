package reference

import (
	"fmt"
	"math"

	"github.com/vkattn/vkattn/core"
)

// AdditiveAttention computes additive attention with the masks of opts:
//
//	e_{t,j} = tanh(q_t W_q + k_j W_k + b) . w_a + M
//	a_{t,j} = softmax over j of e_{t,j}
//	o_t     = sum_j a_{t,j} v_j
//
// q is (B,L,DQ), k (B,S,DK), v (B,S,DV), dense row-major. opts.Mask,
// BoolMasks, Causal, KeyLengths and QueryLengths act exactly as they do in
// Attention (masks broadcast over (B,1,L,S): there is one head), and
// fully masked or padded rows likewise give zeros, -Inf log-sum-exp and
// zero weights. opts.Scale must be the default: additive scores have no
// scale. The Result is that of a single head: Dims has H = HKV = 1 and
// DK = DK of the weights, O is (B,1,L,DV), Weights (B,1,L,S), LSE (B,1,L).
func AdditiveAttention(q []float32, qShape [3]int, k []float32, kShape [3]int, v []float32, vShape [3]int, w *core.AdditiveWeights, opts core.Options) (*Result, error) {
	if w == nil {
		return nil, fmt.Errorf("%w: additive weights are nil", core.ErrShape)
	}
	if opts.RoPE != nil {
		return nil, core.Errorf(core.ErrOption, "additive attention has no rotary embedding (it scores w_a . tanh(q + k))")
	}
	if err := w.Check(); err != nil {
		return nil, err
	}
	if !opts.Scale.IsDefault() {
		return nil, fmt.Errorf("%w: additive attention has no score scale", core.ErrScale)
	}
	// CheckProblem sees width-1 queries and keys: it validates the batch,
	// the positions and every mask and length exactly as for SDPA, and the
	// widths are checked against the weights below.
	d, err := core.CheckProblem([4]int{qShape[0], 1, qShape[1], 1}, [4]int{kShape[0], 1, kShape[1], 1}, [4]int{vShape[0], 1, vShape[1], vShape[2]}, &opts)
	if err != nil {
		return nil, err
	}
	d.DK = w.DK
	for _, t := range []struct {
		name  string
		data  []float32
		shape [3]int
		width int
	}{{"Q", q, qShape, w.DQ}, {"K", k, kShape, w.DK}, {"V", v, vShape, vShape[2]}} {
		if t.shape[2] != t.width {
			return nil, fmt.Errorf("%w: %s shape %v has width %d but the weights expect %d", core.ErrShape, t.name, t.shape, t.shape[2], t.width)
		}
		n := 1
		for _, e := range t.shape {
			if n > math.MaxInt32/e {
				return nil, fmt.Errorf("%w: %s shape %v is too large", core.ErrShape, t.name, t.shape)
			}
			n *= e
		}
		if len(t.data) != n {
			return nil, fmt.Errorf("%w: %s has %d values but shape %v needs %d", core.ErrShape, t.name, len(t.data), t.shape, n)
		}
		if i := firstNonFinite(t.data); i >= 0 {
			return nil, fmt.Errorf("%w: %s value %d is %v", core.ErrNonFinite, t.name, i, t.data[i])
		}
	}

	// Project every query and key once: qp = q W_q + b, kp = k W_k.
	qp := project(widen(q), d.B*d.L, w.DQ, w.WQ, w.Bias, w.DA)
	kp := project(widen(k), d.B*d.S, w.DK, w.WK, nil, w.DA)
	v64 := widen(v)
	wa := widen(w.WA)

	res := &Result{
		Dims:    d,
		O:       make([]float64, d.B*d.L*d.DV),
		LSE:     make([]float64, d.B*d.L),
		Weights: make([]float64, d.B*d.L*d.S),
	}
	e := make([]float64, d.S)
	blocked := make([]bool, d.S)
	for b := 0; b < d.B; b++ {
		for t := 0; t < d.L; t++ {
			row := b*d.L + t
			qr := qp[row*w.DA : (row+1)*w.DA]
			// Attention's row step masks and normalises, so both score
			// functions share one masking semantics.
			res.LSE[row] = res.attendRow(&opts, b, 0, t, row, func(j int) float64 {
				kr := kp[(b*d.S+j)*w.DA : (b*d.S+j+1)*w.DA]
				s := 0.0
				for a := range qr {
					s += math.Tanh(qr[a]+kr[a]) * wa[a]
				}
				return s
			}, v64[b*d.S*d.DV:(b+1)*d.S*d.DV], e, blocked)
		}
	}
	return res, nil
}

// project is core.Project.
func project(x []float64, rows, in int, w, b []float32, out int) []float64 {
	return core.Project(x, rows, in, w, b, out)
}
