package reference

import (
	"fmt"
	"math"

	"github.com/vkattn/vkattn/core"
)

// Merge merges partial attentions in float64 (SEMANTICS.md §7.1): each part
// is the attention of the same query rows over its own keys (O normalised
// within the part, LSE), and the result is the attention over all of them,
//
//	LSE = ln sum_i exp(LSE_i)    O = sum_i exp(LSE_i - LSE) O_i
//
// with LSE -Inf and O 0 on rows where every part has -Inf. The parts must
// agree on B, H, L and DV (core.ErrShape); the result's S is the sum of
// theirs, its HKV and DK part 0's. When every part has its weights, the
// result's are theirs side by side along the keys in the parts' order,
// each rescaled by exp(LSE_i - LSE); otherwise Weights is nil. NaN in O or
// LSE, +Inf in LSE and Inf in O are core.ErrNonFinite.
func Merge(parts []*Result) (*Result, error) {
	if len(parts) == 0 {
		return nil, fmt.Errorf("%w: Merge needs at least one part", core.ErrOption)
	}
	d := parts[0].Dims
	out := core.Dims{B: d.B, H: d.H, HKV: d.HKV, L: d.L, DK: d.DK, DV: d.DV}
	rows := d.B * d.H * d.L
	weights := true
	for i, p := range parts {
		pd := p.Dims
		if pd.B != d.B || pd.H != d.H || pd.L != d.L || pd.DV != d.DV {
			return nil, fmt.Errorf("%w: part %d has B=%d H=%d L=%d d_v=%d, part 0 B=%d H=%d L=%d d_v=%d", core.ErrShape, i, pd.B, pd.H, pd.L, pd.DV, d.B, d.H, d.L, d.DV)
		}
		if len(p.O) != rows*d.DV || len(p.LSE) != rows {
			return nil, fmt.Errorf("%w: part %d has %d O and %d LSE values, want %d and %d", core.ErrShape, i, len(p.O), len(p.LSE), rows*d.DV, rows)
		}
		for j, x := range p.LSE {
			if math.IsNaN(x) || math.IsInf(x, 1) {
				return nil, fmt.Errorf("%w: part %d LSE value %d is %v", core.ErrNonFinite, i, j, x)
			}
		}
		for j, x := range p.O {
			if math.IsNaN(x) || math.IsInf(x, 0) {
				return nil, fmt.Errorf("%w: part %d O value %d is %v", core.ErrNonFinite, i, j, x)
			}
		}
		out.S += pd.S
		weights = weights && len(p.Weights) == rows*pd.S
	}
	res := &Result{Dims: out, O: make([]float64, rows*d.DV), LSE: make([]float64, rows)}
	if weights {
		res.Weights = make([]float64, rows*out.S)
	}
	for r := 0; r < rows; r++ {
		m := math.Inf(-1)
		for _, p := range parts {
			m = math.Max(m, p.LSE[r])
		}
		if math.IsInf(m, -1) {
			res.LSE[r] = m // no part saw a key: O and weights stay 0
			continue
		}
		sum := 0.0
		for _, p := range parts {
			sum += math.Exp(p.LSE[r] - m)
		}
		lse := m + math.Log(sum)
		res.LSE[r] = lse
		o := res.O[r*d.DV : (r+1)*d.DV]
		key := 0 // the part's first key in the merged row
		for _, p := range parts {
			w := math.Exp(p.LSE[r] - lse) // 0 for a part with LSE -Inf
			for i, x := range p.O[r*d.DV : (r+1)*d.DV] {
				o[i] += w * x
			}
			if weights {
				s := p.Dims.S
				for j, a := range p.Weights[r*s : (r+1)*s] {
					res.Weights[r*out.S+key+j] = w * a
				}
				key += s
			}
		}
	}
	return res, nil
}
