package core

import (
	"fmt"
	"math"
	"strings"
)

// MaxHeadWidth is the widest d_k or d_v the attention forward takes (the
// planner refuses a wider head; the float64 reference has no limit): 576
// holds multi-head latent attention's keys (DeepSeek V2/V3: a 512-wide
// latent and 64 rotary columns). Heads wider than MaxRowWidth run on the
// tiled kernels only; the backward pass takes MaxBackwardWidth.
const MaxHeadWidth = 576

// MaxRowWidth is the widest head the row kernels (one invocation holds a
// query row and its output in registers) and additive attention take;
// wider heads split each row over the lanes of a subgroup (the tiled
// kernels), which needs subgroup size control with full subgroups.
const MaxRowWidth = 256

// MaxBackwardWidth is the widest d_k or d_v the backward pass takes.
const MaxBackwardWidth = 256

// Causal selects a causal mask and, when L != S, how it is aligned.
type Causal int

const (
	// NotCausal applies no causal mask. It is the zero value.
	NotCausal Causal = iota
	// CausalTopLeft lets query t see keys j <= t (PyTorch is_causal).
	CausalTopLeft
	// CausalBottomRight lets query t see keys j <= t + S - L, so the last
	// query sees every key (FlashAttention >= 2.1, what a KV cache needs).
	CausalBottomRight
)

// MaskMeaning says what true means in a BoolMask. Its zero value is invalid on
// purpose: interfaces disagree (PyTorch's MultiheadAttention blocks where
// true, its scaled_dot_product_attention allows where true), so the caller
// must say which.
type MaskMeaning int

const (
	meaningUnset MaskMeaning = iota
	// TrueAllows: true marks a key the query may attend to.
	TrueAllows
	// TrueBlocks: true marks a key the query must not attend to.
	TrueBlocks
)

// MaskShape is the shape of a mask over (B, H, L, S). Each axis is either the
// full extent or 1, meaning the mask is broadcast along it.
type MaskShape [4]int

// Mask is an additive float mask: its values are added to the scaled scores.
// -Inf blocks a key; NaN and +Inf are rejected.
type Mask struct {
	Shape  MaskShape
	Values []float32 // row-major over Shape
}

// BoolMask is a boolean mask whose sense is named by Meaning. Options take
// any number of them, of either meaning: a key is visible only where every
// one allows it.
type BoolMask struct {
	Shape   MaskShape
	Values  []bool // row-major over Shape
	Meaning MaskMeaning
}

// Scale overrides the default score scale 1/sqrt(d_k). The zero value means
// the default.
type Scale struct {
	value float64
	set   bool
}

// CustomScale returns a Scale that multiplies q.k by x instead of 1/sqrt(d_k).
func CustomScale(x float64) Scale { return Scale{value: x, set: true} }

// IsDefault reports whether s is the default 1/sqrt(d_k).
func (s Scale) IsDefault() bool { return !s.set }

// For returns the scale applied for key width dk.
func (s Scale) For(dk int) float64 {
	if s.set {
		return s.value
	}
	return 1 / math.Sqrt(float64(dk))
}

// Options are everything about an attention call except Q, K and V. The zero
// value is plain softmax(Q K^T / sqrt(d_k)) V.
type Options struct {
	Scale  Scale
	Causal Causal
	Mask   *Mask // additive, may be nil
	// BoolMasks combine by AND: a key is visible only where every mask
	// allows it (each with its own Meaning and broadcast shape).
	BoolMasks []BoolMask
	// KeyLengths[b] keys are valid in batch item b; the rest are masked for
	// every head and query. nil means all S keys.
	KeyLengths []int
	// QueryLengths[b] query rows are valid in batch item b; rows past it give
	// zero output (and -Inf log-sum-exp). nil means all L rows.
	QueryLengths []int
	// WantLSE asks for the natural log-sum-exp of each row's scaled scores,
	// one per (B, H, L) row, returned as a (B, H, L, 1) tensor; -Inf for
	// fully masked and padded rows.
	WantLSE bool
	// WantWeights asks for the attention weights, shape (B, H, L, S). Meant
	// for small problems: it is the L*S buffer the fused path otherwise avoids.
	WantWeights bool

	// The score variants models ship with (SEMANTICS.md §4.1), each
	// composable with everything above:

	// Window limits each query to a band of keys around its bottom-right
	// aligned position (FlashAttention's window_size); nil: no window.
	Window *Window
	// Softcap > 0 caps the scaled scores: s -> Softcap * tanh(s / Softcap)
	// (Gemma 2), before ALiBi and masks. 0: none.
	Softcap float64
	// Sinks[h] is a learned logit of query head h that joins the softmax
	// denominator only (no value row); nil: none. H entries.
	Sinks []float32
	// ALiBi[h] is the slope of query head h's linear position bias
	// slope * (j - (t + S - L)) added to the scores; nil: none. H entries;
	// ALiBiSlopes(H) gives the published ones.
	ALiBi []float32
	// AlignToKeyLengths: bottom-right positions (CausalBottomRight, Window,
	// ALiBi) count from each item's KeyLengths[b] instead of S, so query t
	// of item b sits at key position t + KeyLengths[b] - L: the queries are
	// the last L tokens of sequences of different lengths (a KV cache).
	AlignToKeyLengths bool
	// RoPE rotates Q and K by their positions before the scores
	// (SEMANTICS.md §5); nil: none.
	RoPE *RoPE
	// Float32Products keeps float16 inputs off a device's cooperative
	// matrices: P V in float32, as on every other device, at the float32
	// path's accuracy. By default a device with float16 matrices computes
	// float16 calls on them, with P rounded to float16 (SEMANTICS.md §9.3).
	Float32Products bool
}

// Window is FlashAttention's window_size=(Left, Right) with bottom-right
// aligned positions: key j is visible to query t iff
// t + S - L - Left <= j <= t + S - L + Right. -1 leaves that side
// unbounded.
type Window struct{ Left, Right int }

// Dims are the extents of one attention problem.
//
//	Q: (B, H, L, DK)  K: (B, HKV, S, DK)  V: (B, HKV, S, DV)  O: (B, H, L, DV)
type Dims struct {
	B   int `json:"B"`
	H   int `json:"H"`
	HKV int `json:"H_kv"`
	L   int `json:"L"`
	S   int `json:"S"`
	DK  int `json:"d_k"`
	DV  int `json:"d_v"`
}

// FLOPs is the cost of Q K^T and A V, 2*B*H*L*S*(DK+DV) (SEMANTICS.md §16).
func (d Dims) FLOPs() float64 {
	return 2 * float64(d.B) * float64(d.H) * float64(d.L) * float64(d.S) * float64(d.DK+d.DV)
}

func (d Dims) String() string {
	return fmt.Sprintf("B=%d H=%d H_kv=%d L=%d S=%d d_k=%d d_v=%d", d.B, d.H, d.HKV, d.L, d.S, d.DK, d.DV)
}

// Shape4 fills a shape of rank 2 to 4 to four axes from the left with ones:
// (L,d) -> (1,1,L,d), (H,L,d) -> (1,H,L,d).
func Shape4(shape []int) ([4]int, error) {
	var s [4]int
	if len(shape) < 2 || len(shape) > 4 {
		return s, Errorf(ErrShape, "rank %d shape %v: want rank 2 (L,d), 3 (H,L,d) or 4 (B,H,L,d)", len(shape), shape)
	}
	for i := range s {
		s[i] = 1
	}
	copy(s[4-len(shape):], shape)
	for i, n := range s {
		if n <= 0 {
			return s, Errorf(ErrEmpty, "shape %v has extent %d on axis %d", shape, n, i-(4-len(shape)))
		}
	}
	if n, ok := countFits(s); !ok {
		return s, Errorf(ErrTooLarge, "shape %v: %.3g elements, beyond any device", shape, n)
	}
	return s, nil
}

// CheckProblem validates Q, K, V shapes (each (B, heads, positions, width))
// and the options against each other and returns the problem's Dims. The GPU
// path and the reference both call it, so they accept exactly the same inputs.
func CheckProblem(q, k, v [4]int, opts *Options) (Dims, error) {
	d := Dims{B: q[0], H: q[1], L: q[2], DK: q[3], HKV: k[1], S: k[2], DV: v[3]}
	for _, s := range [][4]int{q, k, v} {
		for _, n := range s {
			if n <= 0 {
				return d, Errorf(ErrEmpty, "Q %v, K %v, V %v: every axis must be at least 1", q, k, v)
			}
		}
	}
	for _, s := range [][4]int{q, k, v, {d.B, d.H, d.L, d.S}} {
		if n, ok := countFits(s); !ok {
			return d, Errorf(ErrTooLarge, "Q %v, K %v, V %v: %.3g elements in %v, beyond any device", q, k, v, n, s)
		}
	}
	switch {
	case k[0] != q[0] || v[0] != q[0]:
		return d, Errorf(ErrShape, "batch sizes differ: Q %d, K %d, V %d", q[0], k[0], v[0])
	case k[3] != q[3]:
		return d, Errorf(ErrShape, "Q width d_k=%d but K width %d", q[3], k[3])
	case v[2] != k[2]:
		return d, Errorf(ErrShape, "K has %d positions but V has %d", k[2], v[2])
	case v[1] != k[1]:
		return d, Errorf(ErrHeads, "K has %d heads but V has %d", k[1], v[1])
	case q[1]%k[1] != 0:
		return d, Errorf(ErrHeads, "K/V head count %d does not divide query head count %d", k[1], q[1])
	}
	if opts == nil {
		return d, nil
	}
	if err := opts.validate(MaskShape{d.B, d.H, d.L, d.S}); err != nil {
		return d, err
	}
	if r := opts.RoPE; r != nil {
		return d, r.Check(d.DK, d)
	}
	return d, nil
}

// Validate checks the options against a problem's extents: the scale, the
// causal alignment, each mask's meaning, shape (each axis 1 or the full
// extent) and values, and the key and query lengths. Only d's B, H, L and
// S matter, the extents masks and lengths refer to, so options can be
// checked before Q, K and V exist (a layer's masks, say). CheckProblem
// checks the shapes and then the options the same way.
func (o Options) Validate(d Dims) error {
	full := MaskShape{d.B, d.H, d.L, d.S}
	for _, n := range full {
		if n <= 0 {
			return Errorf(ErrEmpty, "(B,H,L,S) = %v: every extent must be at least 1", [4]int(full))
		}
	}
	if n, ok := countFits(full); !ok {
		return Errorf(ErrTooLarge, "(B,H,L,S) = %v: %.3g elements, beyond any device", [4]int(full), n)
	}
	if err := o.validate(full); err != nil {
		return err
	}
	if r := o.RoPE; r != nil {
		return r.Check(d.DK, d)
	}
	return nil
}

// countFits returns the element count of s and whether it is at most
// 2^62: larger counts would wrap around the int products that size masks.
func countFits(s [4]int) (float64, bool) {
	n := float64(s[0]) * float64(s[1]) * float64(s[2]) * float64(s[3])
	return n, n <= 1<<62
}

// validate is Validate for positive extents full = (B, H, L, S).
func (o *Options) validate(full MaskShape) error {
	if s := o.Scale; s.set && !(math.Abs(s.value) <= math.MaxFloat32) {
		// The kernels compute in float32: a larger scale would be Inf there.
		return Errorf(ErrScale, "scale %v is not a finite float32 (|scale| <= %g)", s.value, math.MaxFloat32)
	}
	if o.Causal < NotCausal || o.Causal > CausalBottomRight {
		return Errorf(ErrOption, "unknown causal alignment %v (want NotCausal, CausalTopLeft or CausalBottomRight)", o.Causal)
	}
	if m := o.Mask; m != nil {
		if err := checkMaskShape("additive mask", m.Shape, full, len(m.Values)); err != nil {
			return err
		}
		for i, x := range m.Values {
			if math.IsNaN(float64(x)) || math.IsInf(float64(x), 1) {
				return Errorf(ErrMask, "additive mask value %d is %v (only finite values and -Inf are allowed)", i, x)
			}
		}
	}
	for i, m := range o.BoolMasks {
		what := fmt.Sprintf("boolean mask %d", i)
		if m.Meaning != TrueAllows && m.Meaning != TrueBlocks {
			return Errorf(ErrMask, "%s: Meaning is %v: say TrueAllows or TrueBlocks", what, m.Meaning)
		}
		if err := checkMaskShape(what, m.Shape, full, len(m.Values)); err != nil {
			return err
		}
	}
	if err := checkLengths("key", o.KeyLengths, full[0], full[3]); err != nil {
		return err
	}
	if err := checkLengths("query", o.QueryLengths, full[0], full[2]); err != nil {
		return err
	}
	return o.validateVariants(full[1])
}

// FirstNonFinite returns the index of the first NaN or Inf in x, or -1.
// Inputs and weights must be finite (ErrNonFinite); a caller can name the
// value before uploading anything.
func FirstNonFinite(x []float32) int {
	for i, v := range x {
		if math.IsNaN(float64(v)) || math.IsInf(float64(v), 0) {
			return i
		}
	}
	return -1
}

func checkMaskShape(what string, s, full MaskShape, n int) error {
	names := [4]string{"B", "H", "L", "S"}
	count := 1
	for i := range s {
		if s[i] != 1 && s[i] != full[i] {
			return Errorf(ErrMask, "%s shape %v is not broadcastable to (B,H,L,S)=%v: axis %s is %d, want 1 or %d",
				what, [4]int(s), [4]int(full), names[i], s[i], full[i])
		}
		count *= s[i]
	}
	if n != count {
		return Errorf(ErrMask, "%s shape %v needs %d values, got %d", what, [4]int(s), count, n)
	}
	return nil
}

func checkLengths(what string, lengths []int, b, max int) error {
	if lengths == nil {
		return nil
	}
	if len(lengths) != b {
		return Errorf(ErrLengths, "%d %s lengths for batch size %d", len(lengths), what, b)
	}
	for i, n := range lengths {
		if n < 0 || n > max {
			return Errorf(ErrLengths, "%s length %d of batch item %d is outside [0, %d]", what, n, i, max)
		}
	}
	return nil
}

// MaskSummary says which masks and lengths o sets: "none", or a list such
// as "additive [1 1 8 8], causal bottom-right, key lengths [5 8]".
func (o *Options) MaskSummary() string {
	var parts []string
	if o.Mask != nil {
		parts = append(parts, fmt.Sprintf("additive %v", [4]int(o.Mask.Shape)))
	}
	for _, m := range o.BoolMasks {
		parts = append(parts, fmt.Sprintf("bool %v (%s)", [4]int(m.Shape), m.Meaning))
	}
	if o.Causal != NotCausal {
		parts = append(parts, "causal "+o.Causal.String())
	}
	if o.KeyLengths != nil {
		parts = append(parts, fmt.Sprintf("key lengths %v", o.KeyLengths))
	}
	if o.QueryLengths != nil {
		parts = append(parts, fmt.Sprintf("query lengths %v", o.QueryLengths))
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, ", ")
}
