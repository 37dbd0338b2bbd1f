package reference

import (
	"fmt"
	"math"
	"slices"

	"github.com/vkattn/vkattn/core"
)

// MHAResult is a multi-head attention layer's output and every intermediate
// step, so each stage of a GPU implementation can be checked on its own.
type MHAResult struct {
	B, T, S, DModel, Heads int
	// Q (B,T,DModel), K and V (B,S,KVOut): the input projections with
	// bias, rounded to float32 because Attention consumes float32 (as the
	// GPU keeps its projections).
	Q, K, V []float32
	// Attention is the attention of every head on Q, K, V split into heads
	// (B, Heads, T|S, DModel/Heads): Attention.O is (B,Heads,T,DModel/Heads),
	// Attention.Weights (B,Heads,T,S), Attention.LSE (B,Heads,T).
	Attention *Result
	// Concat is Attention.O with the heads merged back, (B,T,DModel): the
	// input of the output projection.
	Concat []float64
	// Out is the layer output, (B,T,DModel).
	Out []float64
	// Weights (B,Heads,T,S, the same slice as Attention.Weights) and
	// AvgWeights (B,T,S, their mean over heads); nil unless NeedWeights.
	Weights, AvgWeights []float64

	attnOpts core.Options // the heads' options, key padding folded in
	hkv      int          // K/V heads
}

// MultiHeadAttention computes PyTorch's nn.MultiheadAttention forward pass
// (batch_first=True, eval mode: no dropout) in float64:
//
//	Q = x W_q^T + b_q, K = key W_k^T + b_k, V = value W_v^T + b_v
//	split into Heads heads of width DModel/Heads: (B,T,d) -> (B,Heads,T,d/Heads)
//	per head: Attention with opts.Attention and the key padding mask
//	merge heads -> (B,T,d), Out = merged W_o^T + b_o
//
// x is the query input, (B,T,DModel) or (T,DModel) for B = 1. key
// (B,S,KDim) and value (B,S,VDim), of the same rank as x, are the
// cross-attention inputs; both nil (with nil shapes) means self-attention on
// x.
//
// A row whose every key is masked has zero weights and zero attention output
// (SEMANTICS.md §6), so its layer output is OutProjBias (zeros without bias);
// PyTorch returns NaN there. Query rows past opts.Attention.QueryLengths
// likewise give OutProjBias.
func MultiHeadAttention(x []float32, xShape []int, key []float32, keyShape []int, value []float32, valueShape []int, w *core.MHAWeights, opts core.MHAOptions) (*MHAResult, error) {
	if w == nil {
		return nil, fmt.Errorf("%w: MHA weights are nil", core.ErrShape)
	}
	if opts.Attention.RoPE != nil {
		return nil, core.Errorf(core.ErrOption, "MultiheadAttention has no rotary embedding: Attention.RoPE must be nil")
	}
	if err := w.Check(); err != nil {
		return nil, err
	}
	if (key == nil) != (value == nil) || (key == nil) != (keyShape == nil && valueShape == nil) {
		return nil, fmt.Errorf("%w: give key and value (with shapes) for cross-attention, or neither for self-attention", core.ErrShape)
	}
	if key == nil {
		key, keyShape, value, valueShape = x, xShape, x, xShape
	}
	xs, err := shape3("query", x, xShape, len(xShape), w.DModel, "embed_dim")
	if err != nil {
		return nil, err
	}
	ks, err := shape3("key", key, keyShape, len(xShape), w.KDim, "kdim")
	if err != nil {
		return nil, err
	}
	vs, err := shape3("value", value, valueShape, len(xShape), w.VDim, "vdim")
	if err != nil {
		return nil, err
	}
	if ks[0] != xs[0] || vs[0] != xs[0] {
		return nil, fmt.Errorf("%w: batch sizes differ: query %d, key %d, value %d", core.ErrShape, xs[0], ks[0], vs[0])
	}
	if vs[1] != ks[1] {
		return nil, fmt.Errorf("%w: key has %d positions but value has %d", core.ErrShape, ks[1], vs[1])
	}
	h, d, kv := opts.Heads, w.DModel, w.KVOut()
	hkv, err := w.KVHeads(h)
	if err != nil {
		return nil, err
	}
	B, T, S, dh := xs[0], xs[1], ks[1], d/h

	// Validate the caller's options against the per-head problem before
	// reading any mask, then fold the key padding mask into them.
	qShape, kvShape := [4]int{B, h, T, dh}, [4]int{B, hkv, S, dh}
	attnOpts := opts.Attention
	if _, err := core.CheckProblem(qShape, kvShape, kvShape, &attnOpts); err != nil {
		return nil, err
	}
	if kp := opts.KeyPadding; kp != nil {
		if len(kp.Padded) != B*S {
			return nil, fmt.Errorf("%w: key padding mask has %d values, want (B,S) = (%d,%d)", core.ErrMask, len(kp.Padded), B, S)
		}
		// Key padding is one more boolean mask, (B,1,1,S), true = padded.
		attnOpts.BoolMasks = append(slices.Clip(attnOpts.BoolMasks), core.BoolMask{Shape: core.MaskShape{B, 1, 1, S}, Values: kp.Padded, Meaning: core.TrueBlocks})
	}

	wq, wk, wv, bq, bk, bv := w.Projections()
	res := &MHAResult{B: B, T: T, S: S, DModel: d, Heads: h, attnOpts: attnOpts, hkv: hkv}
	for _, p := range []struct {
		name   string
		dst    *[]float32
		in     []float32
		rows   int
		inW    int
		wt, bs []float32
		out    int
	}{
		{"Q", &res.Q, x, B * T, d, wq, bq, d},
		{"K", &res.K, key, B * S, w.KDim, wk, bk, kv},
		{"V", &res.V, value, B * S, w.VDim, wv, bv, kv},
	} {
		if *p.dst, err = narrowAll(p.name, linear(widen(p.in), p.rows, p.inW, p.wt, p.bs, p.out)); err != nil {
			return nil, err
		}
	}

	r, err := Attention(splitHeads(res.Q, B, T, h, dh), qShape, splitHeads(res.K, B, S, hkv, dh), kvShape,
		splitHeads(res.V, B, S, hkv, dh), kvShape, attnOpts)
	if err != nil {
		return nil, err
	}
	res.Attention = r
	res.Concat = mergeHeads(r.O, B, T, h, dh)
	res.Out = linear(res.Concat, B*T, d, w.OutProjWeight, w.OutProjBias, d)
	if opts.NeedWeights {
		res.Weights = r.Weights
		res.AvgWeights = make([]float64, B*T*S)
		for b := 0; b < B; b++ {
			for hh := 0; hh < h; hh++ {
				src := r.Weights[(b*h+hh)*T*S : (b*h+hh+1)*T*S]
				dst := res.AvgWeights[b*T*S : (b+1)*T*S]
				for i, a := range src {
					dst[i] += a / float64(h)
				}
			}
		}
	}
	return res, nil
}

// shape3 checks an MHA input of rank 2 (T,width) or 3 (B,T,width) against
// its data and the width the weights expect, and returns (B,T,width).
func shape3(name string, data []float32, shape []int, rank, width int, widthName string) ([3]int, error) {
	var s [3]int
	if len(shape) != 2 && len(shape) != 3 {
		return s, fmt.Errorf("%w: %s shape %v: want rank 3 (B,T,width) or 2 (T,width)", core.ErrShape, name, shape)
	}
	if len(shape) != rank {
		return s, fmt.Errorf("%w: %s has rank %d but query has rank %d", core.ErrShape, name, len(shape), rank)
	}
	s = [3]int{1, shape[len(shape)-2], shape[len(shape)-1]}
	if len(shape) == 3 {
		s[0] = shape[0]
	}
	n := 1
	for _, e := range s {
		if e <= 0 {
			return s, fmt.Errorf("%w: %s shape %v has an empty axis", core.ErrEmpty, name, shape)
		}
		if n > math.MaxInt32/e {
			return s, fmt.Errorf("%w: %s shape %v is too large", core.ErrShape, name, shape)
		}
		n *= e
	}
	if s[2] != width {
		return s, fmt.Errorf("%w: %s shape %v has width %d but the weights' %s is %d", core.ErrShape, name, shape, s[2], widthName, width)
	}
	if len(data) != n {
		return s, fmt.Errorf("%w: %s has %d values but shape %v needs %d", core.ErrShape, name, len(data), shape, n)
	}
	if i := firstNonFinite(data); i >= 0 {
		return s, fmt.Errorf("%w: %s value %d is %v", core.ErrNonFinite, name, i, data[i])
	}
	return s, nil
}

// linear is core.Linear.
func linear(x []float64, rows, in int, w, b []float32, out int) []float64 {
	return core.Linear(x, rows, in, w, b, out)
}

// splitHeads reads (B,T,h*dh) as (B,T,h,dh) and swaps the middle axes to
// (B,h,T,dh). Reinterpreting the data as (B,h,T,dh) without the swap mixes
// positions into heads: the bug SEMANTICS.md §11 warns about.
func splitHeads(x []float32, B, T, h, dh int) []float32 { return swapAxes12(x, B, T, h, dh) }

// mergeHeads is the inverse of splitHeads: (B,h,T,dh) -> (B,T,h*dh).
func mergeHeads(x []float64, B, T, h, dh int) []float64 { return swapAxes12(x, B, h, T, dh) }

// swapAxes12 is core.SwapAxes12.
func swapAxes12[E any](x []E, n0, n1, n2, w int) []E { return core.SwapAxes12(x, n0, n1, n2, w) }

// narrowAll rounds to float32, failing on values float32 cannot hold.
func narrowAll(name string, x []float64) ([]float32, error) {
	y := make([]float32, len(x))
	for i, v := range x {
		y[i] = float32(v)
		if math.IsInf(float64(y[i]), 0) || math.IsNaN(v) {
			return nil, fmt.Errorf("%w: projection %s value %d is %v, outside float32", core.ErrNonFinite, name, i, v)
		}
	}
	return y, nil
}

func firstNonFinite(x []float32) int {
	for i, v := range x {
		if math.IsNaN(float64(v)) || math.IsInf(float64(v), 0) {
			return i
		}
	}
	return -1
}
