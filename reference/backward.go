package reference

import (
	"fmt"
	"math"

	"github.com/vkattn/vkattn/core"

	"gonum.org/v1/gonum/floats"
)

// Gradients are the float64 gradients of the loss sum(O * dO) (SEMANTICS.md
// §10), dense row-major in the shapes of the inputs they belong to.
type Gradients struct {
	Dims core.Dims
	// DQ is (B, H, L, DK).
	DQ []float64
	// DK is (B, HKV, S, DK) and DV is (B, HKV, S, DV): under grouped-query
	// attention each key/value head sums the gradients of every query head
	// that reads it.
	DK, DV []float64
	// DSinks is (H), summed over the batch items and query rows of each
	// head; nil without sinks.
	DSinks []float64
}

// AttentionBackward returns the gradients of sum(O * dO) with respect to q,
// k, v and opts.Sinks, for O = Attention(q, k, v, opts): dO has O's shape
// (B, H, L, DV). Masks, lengths, the window, the scale, the softcap and the
// ALiBi slopes are constants here. Padded query rows and rows with no
// visible key have output 0 whatever the inputs, so they contribute exactly
// zero (SEMANTICS.md §10).
//
// RoPE is refused (core.ErrOption). It validates exactly as Attention does and returns that error unchanged;
// dO of the wrong length is core.ErrShape, a NaN or Inf in it
// core.ErrNonFinite.
func AttentionBackward(q []float32, qShape [4]int, k []float32, kShape [4]int, v []float32, vShape [4]int, dO []float32, opts core.Options) (*Gradients, error) {
	if opts.RoPE != nil {
		return nil, core.Errorf(core.ErrOption, "the backward pass does not take RoPE: rotate Q and K before it")
	}
	// The probabilities are recomputed by the forward itself, so the
	// backward differentiates exactly what Attention computes: the same
	// scores, variants, masks and fully masked rows.
	fwd, err := Attention(q, qShape, k, kShape, v, vShape, opts)
	if err != nil {
		return nil, err
	}
	d := fwd.Dims
	if n := d.B * d.H * d.L * d.DV; len(dO) != n {
		return nil, fmt.Errorf("%w: dO has %d values but O (%d, %d, %d, %d) needs %d", core.ErrShape, len(dO), d.B, d.H, d.L, d.DV, n)
	}
	if i := core.FirstNonFinite(dO); i >= 0 {
		return nil, fmt.Errorf("%w: dO value %d is %v", core.ErrNonFinite, i, dO[i])
	}

	q64, k64, v64, do64 := widen(q), widen(k), widen(v), widen(dO)
	scale := opts.Scale.For(d.DK)
	group := d.H / d.HKV
	g := &Gradients{
		Dims: d,
		DQ:   make([]float64, len(q64)),
		DK:   make([]float64, len(k64)),
		DV:   make([]float64, len(v64)),
	}
	if opts.Sinks != nil {
		g.DSinks = make([]float64, d.H)
	}
	ds := make([]float64, d.S)
	for b := 0; b < d.B; b++ {
		for h := 0; h < d.H; h++ {
			kv := (b*d.HKV + h/group) * d.S // first key row of this head
			for t := 0; t < d.L; t++ {
				row := (b*d.H+h)*d.L + t
				if opts.QueryLengths != nil && t >= opts.QueryLengths[b] {
					// Skipped rather than left to the zero weights: its
					// LSE is -Inf, which would make the sink's share NaN.
					continue
				}
				p := fwd.Weights[row*d.S : (row+1)*d.S]
				qrow := q64[row*d.DK : (row+1)*d.DK]
				dorow := do64[row*d.DV : (row+1)*d.DV]

				// dP_j = dO . v_j and D = sum_j P_j dP_j (= dO . O). Blocked
				// keys have P_j = 0 exactly, so they add nothing here and
				// get ds_j = 0 below.
				delta := 0.0
				for j := 0; j < d.S; j++ {
					ds[j] = floats.Dot(dorow, v64[(kv+j)*d.DV:(kv+j+1)*d.DV])
					delta += p[j] * ds[j]
					floats.AddScaled(g.DV[(kv+j)*d.DV:(kv+j+1)*d.DV], p[j], dorow)
				}
				for j := 0; j < d.S; j++ {
					krow := k64[(kv+j)*d.DK : (kv+j+1)*d.DK]
					// The softmax's own Jacobian, then back through the
					// cap; ALiBi and the additive mask are constants.
					ds[j] = p[j] * (ds[j] - delta)
					if c := opts.Softcap; c > 0 {
						th := math.Tanh(scale * floats.Dot(qrow, krow) / c)
						ds[j] *= 1 - th*th
					}
					floats.AddScaled(g.DQ[row*d.DK:(row+1)*d.DK], scale*ds[j], krow)
					floats.AddScaled(g.DK[(kv+j)*d.DK:(kv+j+1)*d.DK], scale*ds[j], qrow)
				}
				if g.DSinks != nil {
					// The sink's share exp(sink - LSE) times -D. A row with
					// no visible key has D = 0 (its weights are 0), so it
					// adds nothing although its share is 1.
					g.DSinks[h] -= math.Exp(float64(opts.Sinks[h])-fwd.LSE[row]) * delta
				}
			}
		}
	}
	return g, nil
}
