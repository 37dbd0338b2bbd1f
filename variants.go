package vkattn

import "github.com/vkattn/vkattn/core"

// MaxALiBiHeads bounds ALiBiSlopes (2^24 heads, far beyond any model).
const MaxALiBiHeads = core.MaxALiBiHeads

// ALiBiSlopes are the ALiBi slopes of h heads (Press et al., 2022); nil for
// h below 1 or beyond MaxALiBiHeads. SEMANTICS.md §4.1.
func ALiBiSlopes(h int) []float32 { return core.ALiBiSlopes(h) }
