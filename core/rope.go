package core

import (
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
)

// RoPE is a rotary position embedding applied to Q and K before the scores
// (SEMANTICS.md §5): the first Dims of each row's d_k elements are
// rotated in pairs by the angle position * invFreq_i, the rest pass
// through unchanged.
type RoPE struct {
	// Theta is the base of the frequencies invFreq_i = Theta^(-2i/Dims)
	// (10,000 in most models, 500,000 in Llama 3); > 0.
	Theta float64
	// Dims is how many leading elements of a row are rotated: even, at
	// most d_k; 0 means all d_k (then d_k must be even).
	Dims int
	// Style pairs the rotated elements (RoPEHalf, the zero value, or
	// RoPEInterleaved).
	Style RoPEStyle
	// Scaling changes the frequencies for contexts longer than the model
	// was trained on; the zero value is none.
	Scaling RoPEScaling
	// QueryPositions[b*L+t] and KeyPositions[b*S+j] are explicit
	// positions (packed or ragged batches); nil: query row t at
	// t + S - L (t + KeyLengths[b] - L under AlignToKeyLengths), key j at j.
	QueryPositions, KeyPositions []int
}

// RoPEStyle is how a RoPE pairs the rotated elements of a row.
type RoPEStyle int

const (
	// RoPEHalf pairs element i with i + Dims/2 (GPT-NeoX, Hugging Face's
	// rotate_half). It is the zero value.
	RoPEHalf RoPEStyle = iota
	// RoPEInterleaved pairs element 2i with 2i+1 (GPT-J).
	RoPEInterleaved
)

// RoPEScalingKind names a frequency scaling.
type RoPEScalingKind int

const (
	// NoRoPEScaling leaves the frequencies as they are (the zero value).
	NoRoPEScaling RoPEScalingKind = iota
	// RoPELinear divides every position by Factor (position
	// interpolation).
	RoPELinear
	// RoPELlama3 scales each frequency by its wavelength as Llama 3.1
	// does (Hugging Face's _compute_llama3_parameters): wavelengths
	// shorter than OriginalContext/HighFreqFactor keep their frequency,
	// longer than OriginalContext/LowFreqFactor are divided by Factor,
	// and those between are interpolated smoothly.
	RoPELlama3
)

// RoPEScaling is a RoPE's frequency scaling; Factor > 0 for either kind,
// and for RoPELlama3 HighFreqFactor > LowFreqFactor > 0 and
// OriginalContext > 0.
type RoPEScaling struct {
	Kind                          RoPEScalingKind
	Factor                        float64
	LowFreqFactor, HighFreqFactor float64
	OriginalContext               int
}

func (s RoPEScaling) String() string {
	switch s.Kind {
	case NoRoPEScaling:
		return "none"
	case RoPELinear:
		return "linear:" + fmtFloat(s.Factor)
	case RoPELlama3:
		return fmt.Sprintf("llama3:%s,%s,%s,%d", fmtFloat(s.Factor), fmtFloat(s.LowFreqFactor), fmtFloat(s.HighFreqFactor), s.OriginalContext)
	}
	return fmt.Sprintf("RoPEScalingKind(%d)", int(s.Kind))
}

func fmtFloat(x float64) string { return strconv.FormatFloat(x, 'g', -1, 64) }

// ParseRoPEScaling reads "none", "linear:F" and "llama3:F,LOW,HIGH,ORIG"
// (factor, low and high frequency factors, original context), the forms
// String prints.
func ParseRoPEScaling(s string) (RoPEScaling, error) {
	bad := func(why string) (RoPEScaling, error) {
		return RoPEScaling{}, Errorf(ErrOption, "RoPE scaling %q: %s (want none, linear:F or llama3:F,LOW,HIGH,ORIG)", s, why)
	}
	kind, args, _ := strings.Cut(s, ":")
	var nums []float64
	if args != "" {
		for _, a := range strings.Split(args, ",") {
			x, err := strconv.ParseFloat(strings.TrimSpace(a), 64)
			if err != nil {
				return bad(fmt.Sprintf("%q is not a number", a))
			}
			nums = append(nums, x)
		}
	}
	var sc RoPEScaling
	switch kind {
	case "none":
		if len(nums) != 0 {
			return bad("none takes no numbers")
		}
		return sc, nil
	case "linear":
		if len(nums) != 1 {
			return bad("linear takes one factor")
		}
		sc = RoPEScaling{Kind: RoPELinear, Factor: nums[0]}
	case "llama3":
		if len(nums) != 4 {
			return bad("llama3 takes four numbers")
		}
		if nums[3] != math.Trunc(nums[3]) || nums[3] > math.MaxInt32 {
			return bad("the original context is a whole number of positions")
		}
		sc = RoPEScaling{Kind: RoPELlama3, Factor: nums[0], LowFreqFactor: nums[1], HighFreqFactor: nums[2], OriginalContext: int(nums[3])}
	default:
		return bad("unknown kind " + strconv.Quote(kind))
	}
	if err := sc.check(); err != nil {
		return RoPEScaling{}, err
	}
	return sc, nil
}

func (s RoPEScaling) check() error {
	finite := func(x float64) bool { return x > 0 && !math.IsInf(x, 0) }
	switch s.Kind {
	case NoRoPEScaling:
		return nil
	case RoPELinear:
		if !finite(s.Factor) {
			return Errorf(ErrOption, "RoPE linear scaling factor %v: want a finite number > 0", s.Factor)
		}
		return nil
	case RoPELlama3:
		if !finite(s.Factor) || !finite(s.LowFreqFactor) || !finite(s.HighFreqFactor) || s.HighFreqFactor <= s.LowFreqFactor || s.OriginalContext <= 0 {
			return Errorf(ErrOption, "RoPE llama3 scaling %v: want factor > 0, high frequency factor > low frequency factor > 0, original context > 0", s)
		}
		return nil
	}
	return Errorf(ErrOption, "unknown RoPE scaling kind %d", int(s.Kind))
}

// RotatedDims is how many elements of a row of width dk r rotates.
func (r *RoPE) RotatedDims(dk int) int {
	if r.Dims == 0 {
		return dk
	}
	return r.Dims
}

// Check validates r for rows of width dk (0: the width is not known yet)
// in a problem of extents d (B, L and S; zero extents skip the position
// counts), and the table it produces (checkTable) at the positions the
// problem uses: the explicit ones, else queries within [-L, S-1] and keys
// within [0, S-1]. A KV cache of capacity C passes Dims{S: C}. With L and
// S both zero, positions not given explicitly may be any up to
// MaxRoPEPosition.
func (r *RoPE) Check(dk int, d Dims) error {
	if !(r.Theta > 0) || math.IsInf(r.Theta, 0) {
		return Errorf(ErrOption, "RoPE theta %v: want a finite number > 0", r.Theta)
	}
	if r.Style != RoPEHalf && r.Style != RoPEInterleaved {
		return Errorf(ErrOption, "unknown RoPE style %v (want RoPEHalf or RoPEInterleaved)", r.Style)
	}
	if r.Dims < 0 || r.Dims%2 != 0 {
		return Errorf(ErrOption, "RoPE rotates %d dims: want an even number (0: all of d_k)", r.Dims)
	}
	if dk > 0 {
		if n := r.RotatedDims(dk); n > dk || n%2 != 0 {
			return Errorf(ErrOption, "RoPE rotates %d of d_k = %d dims: want an even number at most d_k", n, dk)
		}
	}
	if err := r.Scaling.check(); err != nil {
		return err
	}
	for _, p := range []struct {
		what  string
		pos   []int
		count int
	}{{"query", r.QueryPositions, d.B * d.L}, {"key", r.KeyPositions, d.B * d.S}} {
		if p.pos == nil || p.count == 0 {
			continue
		}
		if len(p.pos) != p.count {
			return Errorf(ErrShape, "%d RoPE %s positions, want %d (one per batch item and row)", len(p.pos), p.what, p.count)
		}
		for i, x := range p.pos {
			if x < -MaxRoPEPosition || x > MaxRoPEPosition {
				return Errorf(ErrOption, "RoPE %s position %d is %d: at most %d in magnitude", p.what, i, x, MaxRoPEPosition)
			}
		}
	}
	if n := r.RotatedDims(dk); n > 0 {
		return r.checkTable(n, d)
	}
	return nil
}

// maxPosition bounds |position| over the rows of a problem of extents d
// (SEMANTICS.md §5): explicit positions as given; by default query row t
// sits at t + S - L, or t + KeyLengths[b] - L with KeyLengths[b] in
// [0, S], so within [-L, S-1], and key j at j. Unknown extents (L = S = 0)
// allow any position (known false).
func (r *RoPE) maxPosition(d Dims) (most int, known bool) {
	known = true
	side := func(explicit []int, byDefault int) int {
		if explicit == nil {
			if d.L == 0 && d.S == 0 {
				known = false
				return MaxRoPEPosition
			}
			return byDefault
		}
		most := 0
		for _, x := range explicit {
			most = max(most, x, -x)
		}
		return most
	}
	most = max(side(r.QueryPositions, max(d.L, d.S-1)), side(r.KeyPositions, d.S-1))
	return most, known
}

// checkTable refuses (ErrOption) a RoPE of n rotated elements whose table
// would not be finite at the positions of a problem of extents d
// (maxPosition): a frequency Theta^(-2i/n) or its scaled value beyond
// float64 (Theta near 0, a factor near 0), or an angle p * invFreq_i
// beyond it, whose cos and sin are NaN. The table holds those cos and sin
// rounded to float32, in [-1, 1], so finite angles are all it needs; the
// angle grows with |p|, so the largest position and frequency bound every
// entry.
func (r *RoPE) checkTable(n int, d Dims) error {
	base, inv := r.freqs(n)
	for i := range inv {
		if !inRange(base[i]) {
			return Errorf(ErrOption, "RoPE theta %v: invFreq_%d = theta^(-%d/%d) is %v, beyond float64's range (want a larger theta)", r.Theta, i, 2*i, n, base[i])
		}
		if !inRange(inv[i]) {
			return Errorf(ErrOption, "RoPE scaling %v: it makes invFreq_%d (theta %v) %v, beyond float64's range (want a larger factor)", r.Scaling, i, r.Theta, inv[i])
		}
	}
	most := 0.0
	for _, f := range inv {
		most = max(most, f)
	}
	maxPos, known := r.maxPosition(d)
	if angle := float64(maxPos) * most; !inRange(angle) {
		where := ""
		if !known {
			where = " (the positions are not known here: any up to 2^31-1)"
		}
		return Errorf(ErrOption, "RoPE theta %v, scaling %v: the largest frequency %.3g at position %d%s turns by %v radians, beyond float64's range (want a larger theta or scaling factor, or fewer positions)", r.Theta, r.Scaling, most, maxPos, where, angle)
	}
	return nil
}

// inRange reports whether x is finite (false for NaN).
func inRange(x float64) bool { return math.Abs(x) <= math.MaxFloat64 }

// MaxRoPEPosition bounds explicit positions (2^31 - 1): the kernels index
// positions with 32-bit integers.
const MaxRoPEPosition = math.MaxInt32

// InvFreq is the n/2 frequencies of a RoPE that rotates n elements, in
// float64: Theta^(-2i/n), then scaled.
func (r *RoPE) InvFreq(n int) []float64 {
	_, inv := r.freqs(n)
	return inv
}

// freqs is InvFreq before scaling (base) and after (inv).
func (r *RoPE) freqs(n int) (base, inv []float64) {
	base = make([]float64, n/2)
	for i := range base {
		base[i] = math.Pow(r.Theta, -float64(2*i)/float64(n))
	}
	inv = slices.Clone(base)
	s := r.Scaling
	switch s.Kind {
	case RoPELinear:
		for i := range inv {
			inv[i] /= s.Factor
		}
	case RoPELlama3:
		ctx := float64(s.OriginalContext)
		lowWavelen, highWavelen := ctx/s.LowFreqFactor, ctx/s.HighFreqFactor
		for i, f := range inv {
			wavelen := 2 * math.Pi / f
			switch {
			case wavelen < highWavelen:
			case wavelen > lowWavelen:
				inv[i] = f / s.Factor
			default:
				smooth := (ctx/wavelen - s.LowFreqFactor) / (s.HighFreqFactor - s.LowFreqFactor)
				inv[i] = (1-smooth)*f/s.Factor + smooth*f
			}
		}
	}
	return base, inv
}

// QueryPosition is the position of query row t of batch item b in a
// problem of extents d with options o (r = o.RoPE).
func (r *RoPE) QueryPosition(o *Options, d Dims, b, t int) int {
	if r.QueryPositions != nil {
		return r.QueryPositions[b*d.L+t]
	}
	end := d.S
	if o.AlignToKeyLengths && o.KeyLengths != nil {
		end = o.KeyLengths[b]
	}
	return t + end - d.L
}

// KeyPosition is the position of key j of batch item b.
func (r *RoPE) KeyPosition(d Dims, b, j int) int {
	if r.KeyPositions != nil {
		return r.KeyPositions[b*d.S+j]
	}
	return j
}

// CosSin writes the cos and sin of position pos * inv[i], computed in
// float64 and rounded to float32, into cs as pairs (cos_i, sin_i): the
// table the device rotates with.
func CosSin(pos int, inv []float64, cs []float32) {
	for i, f := range inv {
		s, c := math.Sincos(float64(pos) * f)
		cs[2*i], cs[2*i+1] = float32(c), float32(s)
	}
}

// RotatePairs rotates the first n elements of row x by the pairs
// (cos_i, sin_i) of cs in style, in float64 (where Append and a decode
// step rotate keys on the host).
func RotatePairs(x []float32, n int, style RoPEStyle, cs []float32) {
	for i := 0; i < n/2; i++ {
		a, b := i, i+n/2
		if style == RoPEInterleaved {
			a, b = 2*i, 2*i+1
		}
		c, s := float64(cs[2*i]), float64(cs[2*i+1])
		xa, xb := float64(x[a]), float64(x[b])
		x[a], x[b] = float32(xa*c-xb*s), float32(xb*c+xa*s)
	}
}
