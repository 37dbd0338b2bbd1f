package vkattn

import "github.com/vkattn/vkattn/core"

// The problem's shapes and options (package core, shared with the float64
// reference; SEMANTICS.md defines them).
type (
	// Causal selects a causal mask and, when L != S, how it is aligned.
	Causal = core.Causal
	// MaskMeaning says what true means in a BoolMask; its zero value is
	// invalid on purpose, so the caller must say which.
	MaskMeaning = core.MaskMeaning
	// MaskShape is the shape of a mask over (B, H, L, S): each axis the
	// full extent or 1 (broadcast).
	MaskShape = core.MaskShape
	// Mask is an additive float mask added to the scaled scores.
	Mask = core.Mask
	// BoolMask is a boolean mask whose sense is named by Meaning.
	BoolMask = core.BoolMask
	// Scale overrides the default score scale 1/sqrt(d_k).
	Scale = core.Scale
	// Options are everything about an attention call except Q, K and V.
	Options = core.Options
	// Window is FlashAttention's window_size=(Left, Right), bottom-right
	// aligned; -1 leaves a side unbounded.
	Window = core.Window
	// Dims are the extents of one attention problem.
	Dims = core.Dims
)

const (
	NotCausal         = core.NotCausal
	CausalTopLeft     = core.CausalTopLeft
	CausalBottomRight = core.CausalBottomRight
	TrueAllows        = core.TrueAllows
	TrueBlocks        = core.TrueBlocks
)

// ParseCausal reads the names Causal prints ("none", "top-left", "bottom-right").
func ParseCausal(s string) (Causal, error) { return core.ParseCausal(s) }

// CustomScale returns a Scale that multiplies q.k by x instead of 1/sqrt(d_k).
func CustomScale(x float64) Scale { return core.CustomScale(x) }

// Shape4 fills a shape of rank 2 to 4 to four axes from the left with ones.
func Shape4(shape []int) ([4]int, error) { return core.Shape4(shape) }

// CheckProblem validates Q, K, V shapes and the options against each other
// and returns the problem's Dims; the device and the reference both call
// it, so they accept exactly the same inputs.
func CheckProblem(q, k, v [4]int, opts *Options) (Dims, error) {
	return core.CheckProblem(q, k, v, opts)
}

// FirstNonFinite returns the index of the first NaN or Inf in x, or -1.
func FirstNonFinite(x []float32) int { return core.FirstNonFinite(x) }
