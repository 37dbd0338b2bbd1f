package engine

import (
	"context"
	"fmt"

	"github.com/vkattn/vkattn/core"
	"github.com/vkattn/vkattn/pipelines"
)

// AttentionVarlen attends over a packed batch of sequences of different
// lengths with no padding, as FlashAttention's varlen API: Q is
// (1, H, total_q, d_k) and K, V (1, H_kv, total_k, d), sequence i's
// queries are rows cuSeqQ[i] .. cuSeqQ[i+1]-1 of Q and its keys rows
// cuSeqK[i] .. cuSeqK[i+1]-1 of K and V (cumulative offsets from 0 to the
// totals). Each sequence is its own problem: causal alignments, Window and
// ALiBi count within it. Data packed (total, H, d) is read in place
// through SwapAxes12. The Output holds O (1, H, total_q, d_v); masks,
// lengths, LSE and weights are not taken (ErrOption). Out.Plan is the plan
// of the longest sequence's dispatch.
func (d *Device) AttentionVarlen(q, k, v *Tensor, cuSeqQ, cuSeqK []int, opts core.Options) (*Output, error) {
	return RunOnce(context.Background(), func() (*Call, error) { return d.PrepareVarlen(q, k, v, cuSeqQ, cuSeqK, opts) })
}

// PrepareVarlen is AttentionVarlen prepared: one submission of a dispatch
// per non-empty sequence, replayed by Run.
func (d *Device) PrepareVarlen(q, k, v *Tensor, cuSeqQ, cuSeqK []int, opts core.Options) (*Call, error) {
	if err := d.checkInputs([3]string{"Q", "K", "V"}, q, k, v); err != nil {
		return nil, err
	}
	for _, t := range []struct {
		name string
		t    *Tensor
	}{{"Q", q}, {"K", k}, {"V", v}} {
		if t.t.shape[0] != 1 {
			return nil, errorf(core.ErrShape, "varlen %s has shape %v: want (1, heads, total, d), the sequences packed along the positions", t.name, t.t.shape)
		}
	}
	if opts.Mask != nil || opts.BoolMasks != nil || opts.KeyLengths != nil || opts.QueryLengths != nil || opts.AlignToKeyLengths {
		return nil, errorf(core.ErrOption, "varlen calls take no masks or lengths: the offsets give each sequence's extent")
	}
	if opts.WantLSE || opts.WantWeights {
		return nil, errorf(core.ErrOption, "varlen calls return O only (no LSE or weights)")
	}
	if err := checkOffsets("cuSeqQ", cuSeqQ, q.shape[2], -1); err != nil {
		return nil, err
	}
	if err := checkOffsets("cuSeqK", cuSeqK, k.shape[2], len(cuSeqQ)); err != nil {
		return nil, err
	}
	if v.shape[2] != k.shape[2] {
		return nil, errorf(core.ErrShape, "varlen K holds %d positions, V %d", k.shape[2], v.shape[2])
	}
	if r := opts.RoPE; r != nil {
		for _, p := range []struct {
			what     string
			pos      []int
			expected int
		}{{"query", r.QueryPositions, q.shape[2]}, {"key", r.KeyPositions, k.shape[2]}} {
			if p.pos != nil && len(p.pos) != p.expected {
				return nil, errorf(core.ErrShape, "varlen RoPE: %d %s positions for %d packed rows", len(p.pos), p.what, p.expected)
			}
		}
	}
	H, total, dv := q.shape[1], q.shape[2], v.shape[3]
	b := &Builder{d: d}
	out := &Output{}
	var err error
	if out.O, err = b.Output([4]int{1, H, total, dv}); err != nil {
		return nil, b.Fail(err)
	}
	// Zeros first: a sequence with queries but no keys has no dispatch,
	// and its rows are fully masked (SEMANTICS.md §6).
	if err := out.O.writeRaw(0, f32Bytes(make([]float32, H*total*dv))); err != nil {
		return nil, b.Fail(err)
	}
	oBound := 0.0
	for i := 0; i+1 < len(cuSeqQ); i++ {
		l, s := cuSeqQ[i+1]-cuSeqQ[i], cuSeqK[i+1]-cuSeqK[i]
		if l == 0 || s == 0 {
			continue
		}
		qi, ki, vi := q.rowsView(cuSeqQ[i], l), k.rowsView(cuSeqK[i], s), v.rowsView(cuSeqK[i], s)
		seqOpts := opts
		if r := opts.RoPE; r != nil {
			// Each sequence's own positions: by default its queries end at
			// its last key, as if it were a call of its own.
			own := *r
			if r.QueryPositions != nil {
				own.QueryPositions = r.QueryPositions[cuSeqQ[i]:cuSeqQ[i+1]]
			}
			if r.KeyPositions != nil {
				own.KeyPositions = r.KeyPositions[cuSeqK[i]:cuSeqK[i+1]]
			}
			seqOpts.RoPE = &own
		}
		o := pipelines.Layout{Offset: cuSeqQ[i] * dv, Strides: [3]int{H * total * dv, total * dv, dv}}
		plan, in, bound, err := b.lowerCall(qi, ki, vi, &seqOpts, o, nil)
		if err != nil {
			return nil, b.Fail(fmt.Errorf("sequence %d: %w", i, err))
		}
		oBound = max(oBound, bound)
		in.O = out.O.buf
		if _, _, err := b.Attention(plan, in); err != nil {
			return nil, b.Fail(err)
		}
		if l*s > out.Plan.Dims.L*out.Plan.Dims.S {
			out.Plan = plan
		}
	}
	out.setBounds(oBound)
	return Finish(b, out, outputTime)
}

// checkOffsets checks cumulative sequence offsets: from 0, non-decreasing,
// ending at total; n > 0 is the count they must have (that of cuSeqQ).
func checkOffsets(name string, cu []int, total, n int) error {
	switch {
	case len(cu) < 2:
		return errorf(core.ErrLengths, "%s has %d entries: want at least 2 (0, then each sequence's end)", name, len(cu))
	case n > 0 && len(cu) != n:
		return errorf(core.ErrLengths, "%s has %d entries, cuSeqQ %d: one offset per sequence boundary in both", name, len(cu), n)
	case cu[0] != 0:
		return errorf(core.ErrLengths, "%s starts at %d, not 0", name, cu[0])
	case cu[len(cu)-1] != total:
		return errorf(core.ErrLengths, "%s ends at %d, but the tensor holds %d positions", name, cu[len(cu)-1], total)
	}
	for i := 1; i < len(cu); i++ {
		if cu[i] < cu[i-1] {
			return errorf(core.ErrLengths, "%s decreases at entry %d (%d after %d)", name, i, cu[i], cu[i-1])
		}
	}
	return nil
}

// rowsView is the view of positions [first, first+n) of t (batch 1).
func (t *Tensor) rowsView(first, n int) *Tensor {
	v := &Tensor{dev: t.dev, buf: t.buf, owner: t.root(), dtype: t.dtype, shape: t.shape, offset: t.offset + first*t.strides[2], strides: t.strides, finite: t.finite}
	v.shape[2] = n
	return v
}
