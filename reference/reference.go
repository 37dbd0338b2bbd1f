package reference

import (
	"fmt"
	"math"

	"github.com/vkattn/vkattn/core"

	"gonum.org/v1/gonum/floats"
)

// Result holds float64 outputs, dense row-major.
type Result struct {
	Dims core.Dims
	// O is the attention output, (B, H, L, DV).
	O []float64
	// LSE is (B, H, L): the natural-log log-sum-exp of the row's final scores
	// (scaled, soft-capped, ALiBi-biased scores plus additive mask, over
	// unmasked keys only, and the head's sink if any); -Inf for padded query
	// rows and for fully masked rows without sinks, the sink with them.
	LSE []float64
	// Weights is (B, H, L, S): 0 at masked keys, all 0 for fully masked rows
	// and padded query rows. With sinks a live row sums to less than 1.
	Weights []float64
}

// Attention computes softmax(Q K^T * scale + M) V with every mask and score
// variant of opts (window, soft-capping, sinks, ALiBi: SEMANTICS.md §4.1).
//
// q is dense (B,H,L,DK), k is dense (B,HKV,S,DK) and v is dense (B,HKV,S,DV),
// all row-major. It validates with core.CheckProblem first and returns that
// error unchanged; it then checks the slice lengths against the shapes
// (core.ErrShape) and that q, k and v are finite (core.ErrNonFinite).
// opts.WantLSE and opts.WantWeights are ignored: both are always filled.
func Attention(q []float32, qShape [4]int, k []float32, kShape [4]int, v []float32, vShape [4]int, opts core.Options) (*Result, error) {
	d, err := core.CheckProblem(qShape, kShape, vShape, &opts)
	if err != nil {
		return nil, err
	}
	for _, t := range []struct {
		name  string
		data  []float32
		shape [4]int
	}{{"Q", q, qShape}, {"K", k, kShape}, {"V", v, vShape}} {
		if n := t.shape[0] * t.shape[1] * t.shape[2] * t.shape[3]; len(t.data) != n {
			return nil, fmt.Errorf("%w: %s has %d values but shape %v needs %d", core.ErrShape, t.name, len(t.data), t.shape, n)
		}
		for i, x := range t.data {
			if math.IsNaN(float64(x)) || math.IsInf(float64(x), 0) {
				return nil, fmt.Errorf("%w: %s value %d is %v", core.ErrNonFinite, t.name, i, x)
			}
		}
	}

	// Widen once so every product and sum below is float64.
	q64, k64, v64 := widen(q), widen(k), widen(v)
	applyRoPE(q64, k64, d, &opts)
	scale := opts.Scale.For(d.DK)
	group := d.H / d.HKV

	res := &Result{
		Dims:    d,
		O:       make([]float64, d.B*d.H*d.L*d.DV),
		LSE:     make([]float64, d.B*d.H*d.L),
		Weights: make([]float64, d.B*d.H*d.L*d.S),
	}
	e := make([]float64, d.S)
	blocked := make([]bool, d.S)
	for b := 0; b < d.B; b++ {
		for h := 0; h < d.H; h++ {
			kvh := h / group
			for t := 0; t < d.L; t++ {
				row := (b*d.H+h)*d.L + t
				qrow := q64[row*d.DK : (row+1)*d.DK]
				kv := (b*d.HKV + kvh) * d.S // first key row of this head
				res.LSE[row] = res.attendRow(&opts, b, h, t, row, func(j int) float64 {
					return scale * floats.Dot(qrow, k64[(kv+j)*d.DK:(kv+j+1)*d.DK])
				}, v64[kv*d.DV:(kv+d.S)*d.DV], e, blocked)
			}
		}
	}
	return res, nil
}

// attendRow computes query row t of head h in batch item b (row: its index
// in the result) from the unmasked scores score(j) of its S keys: it applies
// the score variants and every mask of opts, writes the row's weights and
// output (values holds the row's S value rows, dense) and returns its
// log-sum-exp. Padded and fully masked rows keep zero output and weights;
// they return -Inf, except that a fully masked row with a sink returns the
// sink (SEMANTICS.md §4.1, §6). e and blocked are scratch of length S.
func (res *Result) attendRow(opts *core.Options, b, h, t, row int, score func(j int) float64, values, e []float64, blocked []bool) float64 {
	d := res.Dims
	if opts.QueryLengths != nil && t >= opts.QueryLengths[b] {
		return math.Inf(-1) // padded query row, sinks or not
	}
	for j := range e {
		s := score(j)
		if c := opts.Softcap; c > 0 {
			s = c * math.Tanh(s/c)
		}
		if opts.ALiBi != nil {
			// Distance from the bottom-right aligned diagonal, on the full
			// extents like CausalBottomRight.
			s += float64(opts.ALiBi[h]) * float64(j-diagonal(opts, d, b, t))
		}
		e[j] = s + additive(opts.Mask, b, h, t, j)
		blocked[j] = isBlocked(opts, d, b, h, t, j) || math.IsInf(e[j], -1)
	}
	// No sink is a sink of -Inf: exp(-Inf - m) adds exactly 0, so rows
	// without sinks take the same arithmetic as before sinks existed.
	sink := math.Inf(-1)
	if opts.Sinks != nil {
		sink = float64(opts.Sinks[h])
	}
	w := res.Weights[row*d.S : (row+1)*d.S]
	lse, live := softmaxRow(e, blocked, sink, w)
	if !live {
		return lse // every key masked: -Inf, or the sink
	}
	out := res.O[row*d.DV : (row+1)*d.DV]
	for j := range e {
		if blocked[j] {
			continue
		}
		for i, x := range values[j*d.DV : (j+1)*d.DV] {
			out[i] += w[j] * x
		}
	}
	return lse
}

// softmaxRow writes the stable softmax of the unblocked scores e into w
// (blocked keys keep weight 0), with sink (-Inf for none) one more logit in
// the denominator that gets no weight, and returns the row's log-sum-exp,
// sink included. live is false when every key is blocked: the row has no
// weights, and its log-sum-exp is the sink's alone.
func softmaxRow(e []float64, blocked []bool, sink float64, w []float64) (lse float64, live bool) {
	keyMax := math.Inf(-1)
	for j := range e {
		if !blocked[j] && e[j] > keyMax {
			keyMax = e[j]
		}
	}
	if math.IsInf(keyMax, -1) {
		return sink, false // log(exp(sink)) exactly, without rounding
	}
	rowMax := math.Max(keyMax, sink)
	sum := math.Exp(sink - rowMax)
	for j := range e {
		if !blocked[j] {
			w[j] = math.Exp(e[j] - rowMax)
			sum += w[j]
		}
	}
	for j := range e {
		w[j] /= sum
	}
	return rowMax + math.Log(sum), true
}

func widen(x []float32) []float64 {
	y := make([]float64, len(x))
	for i, v := range x {
		y[i] = float64(v)
	}
	return y
}

// maskIndex is the row-major offset of (b,h,t,j) in a mask of the given
// shape, reading index 0 on every broadcast (extent 1) axis.
func maskIndex(s core.MaskShape, b, h, t, j int) int {
	idx := [4]int{b, h, t, j}
	off := 0
	for a := range s {
		if s[a] == 1 {
			idx[a] = 0
		}
		off = off*s[a] + idx[a]
	}
	return off
}

func additive(m *core.Mask, b, h, t, j int) float64 {
	if m == nil {
		return 0
	}
	return float64(m.Values[maskIndex(m.Shape, b, h, t, j)])
}

// isBlocked reports whether any boolean-style mask (each boolean mask,
// window, causal, key length) blocks key j for query t of head h in batch item b:
// a key is visible only if every one allows it.
func isBlocked(opts *core.Options, d core.Dims, b, h, t, j int) bool {
	for _, m := range opts.BoolMasks {
		val := m.Values[maskIndex(m.Shape, b, h, t, j)]
		if (m.Meaning == core.TrueAllows && !val) || (m.Meaning == core.TrueBlocks && val) {
			return true
		}
	}
	if win := opts.Window; win != nil {
		// Bottom-right aligned band, on the full extents as for causal.
		// Differences of positions, which cannot overflow, against the
		// sides, which may be as large as an int holds.
		diag := diagonal(opts, d, b, t)
		if (win.Left != -1 && diag-j > win.Left) || (win.Right != -1 && j-diag > win.Right) {
			return true
		}
	}
	switch opts.Causal {
	case core.CausalTopLeft:
		if j > t {
			return true
		}
	case core.CausalBottomRight:
		// Full extents S and L, not the per-batch lengths (unless
		// AlignToKeyLengths).
		if j > diagonal(opts, d, b, t) {
			return true
		}
	}
	return opts.KeyLengths != nil && j >= opts.KeyLengths[b]
}

// diagonal is the key position of query t of item b for the bottom-right
// aligned masks and biases: t + S - L, or t + KeyLengths[b] - L with
// AlignToKeyLengths (SEMANTICS.md §4.1).
func diagonal(opts *core.Options, d core.Dims, b, t int) int {
	if opts.AlignToKeyLengths && opts.KeyLengths != nil {
		return t + opts.KeyLengths[b] - d.L
	}
	return t + d.S - d.L
}
