package main

import (
	"flag"
	"fmt"

	"github.com/vkattn/vkattn"
)

// ropeFlags are --rope and its companions (SEMANTICS.md §5): run and
// decode rotate Q and K, bench its shapes and caches.
type ropeFlags struct {
	theta optFloat
	dims  int
	style string
	scale string
}

const ropeFlagsUsage = `  --rope THETA         rotary position embeddings of base THETA (10000; 500000
                       for Llama 3) on Q and K: query t at position t + S - L,
                       key j at j (a KV cache rotates each key as it is appended)
  --rope-dims N        rotate the first N elements of each row (even; default d_k)
  --rope-style half|interleaved
                       pairs (i, i + N/2) as GPT-NeoX and Hugging Face's
                       rotate_half (default), or (2i, 2i+1) as GPT-J
  --rope-scale linear:F | llama3:F,LOW,HIGH,ORIG
                       positions divided by F, or Llama 3's frequency scaling
                       (factor, low and high frequency factors, original context)
`

func (r *ropeFlags) register(fs *flag.FlagSet) {
	fs.Var(&r.theta, "rope", "rotary position embeddings of base `THETA` on Q and K")
	fs.IntVar(&r.dims, "rope-dims", 0, "rotate the first `N` elements of each row (even; 0: d_k)")
	fs.StringVar(&r.style, "rope-style", "half", "RoPE pairs: `half` (i, i+N/2) or interleaved (2i, 2i+1)")
	fs.StringVar(&r.scale, "rope-scale", "none", "RoPE frequency scaling: none, linear:F or llama3:F,LOW,HIGH,ORIG (`SCALE`)")
}

// rope is the RoPE the flags ask for (nil without --rope), checked for
// rows of width dk.
func (r *ropeFlags) rope(dk int) (*vkattn.RoPE, error) {
	if !r.theta.set {
		for _, f := range []struct {
			name   string
			change bool
		}{{"--rope-dims", r.dims != 0}, {"--rope-style", r.style != "half"}, {"--rope-scale", r.scale != "none"}} {
			if f.change {
				return nil, fmt.Errorf("%s needs --rope THETA", f.name)
			}
		}
		return nil, nil
	}
	style, err := vkattn.ParseRoPEStyle(r.style)
	if err != nil {
		return nil, fmt.Errorf("--rope-style: %w", err)
	}
	scale, err := vkattn.ParseRoPEScaling(r.scale)
	if err != nil {
		return nil, fmt.Errorf("--rope-scale: %w", err)
	}
	rope := &vkattn.RoPE{Theta: r.theta.v, Dims: r.dims, Style: style, Scaling: scale}
	if err := rope.Check(dk, vkattn.Dims{}); err != nil {
		return nil, fmt.Errorf("--rope %v --rope-dims %d: %w", r.theta.v, r.dims, err)
	}
	return rope, nil
}
