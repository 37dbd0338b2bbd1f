package reference

import (
	"math"

	"github.com/vkattn/vkattn/core"
)

// RotateRoPE rotates the rows of x, dense (B, heads, n, d) with n rows per
// head, by r in float64: row t of batch item b at pos(b, t), its first
// r.RotatedDims(d) elements in pairs by the angles pos * invFreq_i, each
// cos and sin in float64 (SEMANTICS.md §5), as Hugging Face's
// apply_rotary_pos_emb (style half) or GPT-J's rotate_every_two
// (interleaved) compute them, without their float32 roundings.
func RotateRoPE(x []float64, shape [4]int, r *core.RoPE, pos func(b, t int) int) {
	B, heads, n, d := shape[0], shape[1], shape[2], shape[3]
	rot := r.RotatedDims(d)
	inv := r.InvFreq(rot)
	for b := 0; b < B; b++ {
		for h := 0; h < heads; h++ {
			for t := 0; t < n; t++ {
				row := x[((b*heads+h)*n+t)*d:][:d]
				p := float64(pos(b, t))
				for i, f := range inv {
					s, c := math.Sincos(p * f)
					a, z := i, i+rot/2
					if r.Style == core.RoPEInterleaved {
						a, z = 2*i, 2*i+1
					}
					xa, xz := row[a], row[z]
					row[a], row[z] = xa*c-xz*s, xz*c+xa*s
				}
			}
		}
	}
}

// applyRoPE rotates widened Q and K of a problem d by opts.RoPE (nil:
// nothing), at the positions SEMANTICS.md §5 gives them.
func applyRoPE(q64, k64 []float64, d core.Dims, opts *core.Options) {
	r := opts.RoPE
	if r == nil {
		return
	}
	RotateRoPE(q64, [4]int{d.B, d.H, d.L, d.DK}, r, func(b, t int) int { return r.QueryPosition(opts, d, b, t) })
	RotateRoPE(k64, [4]int{d.B, d.HKV, d.S, d.DK}, r, func(b, j int) int { return r.KeyPosition(d, b, j) })
}
