package engine

import (
	"math"

	"github.com/vkattn/vkattn/core"
	"github.com/vkattn/vkattn/pipelines"
	"github.com/vkattn/vkattn/pipelines/dispatch"
)

// What the layers' backward passes (package nn) record on the device
// beyond their forward: the attention's forward kept for its backward,
// the backward into tensors the layer places, the dense layers' gradient
// products, and the copies and sums between them. All of it goes into the
// one submission of the layer's call: nothing returns to the host until
// the caller downloads a gradient.

// BackwardTape is an attention forward recorded for its backward: its
// plan (with the log-sum-exp) and its arguments, O and the LSE included.
type BackwardTape struct {
	plan Plan
	x    dispatch.AttentionArgs
}

// AttentionForBackward records the forward of plan (planned with its
// LSE) over in, key padding as lower uploads it, writing O where in.O
// says (a dense scratch tensor when nil) and the LSE into scratch, and
// returns what the backward reads.
func (b *Builder) AttentionForBackward(plan Plan, in AttentionInputs) (*BackwardTape, error) {
	dm := plan.Dims
	if !plan.kernel.Shape.LSE {
		return nil, errorf(core.ErrOption, "the backward pass needs a forward planned with its log-sum-exp")
	}
	if err := checkBackward(plan); err != nil {
		return nil, err
	}
	x, err := b.lower(plan, in)
	if err != nil {
		return nil, err
	}
	if x.O == nil {
		o, err := b.ScratchTensor([4]int{dm.B, dm.H, dm.L, dm.DV})
		if err != nil {
			return nil, err
		}
		x.O = o.buf
	}
	lse, err := b.ScratchTensor([4]int{dm.B, dm.H, dm.L, 1})
	if err != nil {
		return nil, err
	}
	x.LSE = lse.buf
	if err := b.Add(b.d.kernels.Attention(plan.kernel, x)); err != nil {
		return nil, err
	}
	return &BackwardTape{plan: plan, x: x}, nil
}

// GradTargets are where an attention backward writes, dense float32
// tensors of the plan's shapes: dQ (B, H, L, d_k), dK (B, H_kv, S, d_k),
// dV (B, H_kv, S, d_v), each row's share of its head's sink gradient (B,
// H, L; scratch when nil) and, for additive scores, each key row's share
// of dw_a (B, H_kv, S, d_a).
type GradTargets struct{ DQ, DK, DV, RowSinks, KeyWA *Tensor }

// AttentionBackwardFrom records the backward of the forward t over dO, a
// dense float32 tensor holding O's (B, H, L, d_v) row-major (of that
// shape, or another with the same rows of d_v), into g.
func (b *Builder) AttentionBackwardFrom(t *BackwardTape, dO *Tensor, g GradTargets) error {
	dm := t.plan.Dims
	if s := dO.shape; !Dense(dO) || dO.dtype != core.Float32 || s[3] != dm.DV || s[0]*s[1]*s[2] != dm.B*dm.H*dm.L {
		return errorf(core.ErrShape, "the backward pass reads dO dense in float32, (%d, %d, %d, %d) as O, not %v %v", dm.B, dm.H, dm.L, dm.DV, dO.dtype, dO.shape)
	}
	rowD, err := b.ScratchTensor([4]int{dm.B, dm.H, dm.L, 1})
	if err != nil {
		return err
	}
	if g.RowSinks == nil {
		if g.RowSinks, err = b.ScratchTensor([4]int{dm.B, dm.H, dm.L, 1}); err != nil {
			return err
		}
	}
	bx := dispatch.BackwardArgs{AttentionArgs: t.x, DO: dO.buf, RowD: rowD.buf, DSink: g.RowSinks.buf, DQ: g.DQ.buf, DK: g.DK.buf, DV: g.DV.buf}
	if t.plan.Kernel.Additive {
		if g.KeyWA == nil {
			return errorf(core.ErrOption, "the backward pass of additive scores writes each key row's share of dw_a: give its tensor")
		}
		bx.DWA = g.KeyWA.buf
	}
	return b.Add(b.d.kernels.AttentionBackward(t.plan.kernel, bx))
}

// GradProduct records the gradient product s (C (+)= A B^T) over the
// buffers of a, w and c, whose element offsets s already holds, planned
// on the device's load path and tuning.
func (b *Builder) GradProduct(s pipelines.GradShape, a, w, c *Tensor) error {
	d := b.d
	tuning := d.Tuning() // a copy: SetTuning may run meanwhile
	p, err := pipelines.PlanGrad(d.dev.Info.DeviceInfo, s, d.path, &tuning)
	if err != nil {
		return DeviceError(err)
	}
	return b.Add(d.kernels.GradProduct(p, s, dispatch.GradBuffers{A: a.buf, B: w.buf, C: c.buf}))
}

// Regroup records the move or sum s from src's buffer into dst's, whose
// element offsets s already holds.
func (b *Builder) Regroup(s pipelines.RegroupShape, src, dst *Tensor) error {
	st, err := b.d.kernels.Regroup(s, src.buf, dst.buf)
	return b.Add(st, DeviceError(err))
}

// finiteZeros is where the status buffer of CheckFinite holds the zeros
// its products read (64 floats: 256 bytes, within any device's offset
// alignment); each gradient's status words follow.
const finiteZeros = 64

// CheckFinite records, at the end of the call, a check that each of
// grads (dense float32 tensors; nil ones skipped) is finite, and makes
// each Run refuse (ErrOverflow, naming names[i]) a run that left one not
// finite: a float32 sum of terms of both signs beyond its range comes out
// +Inf plus -Inf, NaN. The check is one more gradient product per
// gradient, 0 times each column's elements summed into a status word per
// column (4 rows of it), 0 exactly when every element is finite: the
// kernel and variant the gradients were formed with, writing into a small
// host-visible buffer the host reads after the call's one wait, with no
// transfer and no submission of its own.
func (b *Builder) CheckFinite(grads []*Tensor, names []string) error {
	type checked struct {
		name        string
		g           *Tensor
		rows, width int // the gradient read as (rows, width), dense
		at, words   int // its status words
	}
	var list []checked
	words := finiteZeros
	for i, g := range grads {
		if g == nil {
			continue
		}
		// One row (a bias) is read as rows of 4 where it can be: a sum of
		// one term would take the scalar loads, a variant of its own.
		width := g.shape[3]
		rows := g.shape[0] * g.shape[1] * g.shape[2]
		if rows == 1 && width > gradTile4 && width%gradTile4 == 0 {
			rows, width = width/gradTile4, gradTile4
		}
		list = append(list, checked{names[i], g, rows, width, words, gradTile4 * width})
		words += gradTile4 * width
	}
	if len(list) == 0 {
		return nil
	}
	buf, err := b.d.dev.NewHostBuffer(uint64(4 * words))
	if err != nil {
		return DeviceError(err)
	}
	status := &Tensor{dev: b.d, buf: buf, dtype: core.Float32, shape: [4]int{1, 1, 1, words}, strides: [3]int{words, words, words}, finite: true, bound: math.Inf(1)}
	b.d.mu.Lock()
	b.d.tensors[status] = struct{}{}
	b.d.mu.Unlock()
	b.scratch = append(b.scratch, status)
	if err := buf.WriteFloat32(0, make([]float32, finiteZeros)); err != nil {
		return DeviceError(err)
	}
	for _, c := range list {
		s := pipelines.GradShape{M: gradTile4, N: c.width, K: c.rows,
			A: pipelines.GradOperand{RowStride: 1, Type: core.Float32},
			B: pipelines.GradOperand{Offset: c.g.offset, RowStride: 1, KStride: c.width, Type: c.g.dtype},
			C: pipelines.RowLayout{Offset: c.at, Stride: c.width}}
		if err := b.GradProduct(s, status, c.g, status); err != nil {
			return err
		}
	}
	// One read of every status word after each run (runs of a call take
	// its lock one at a time, so they share got).
	got := make([]float32, words-finiteZeros)
	b.after = func() error {
		if err := buf.ReadFloat32(finiteZeros, got); err != nil {
			return DeviceError(err)
		}
		for _, c := range list {
			for _, v := range got[c.at-finiteZeros : c.at-finiteZeros+c.words] {
				if v != 0 {
					return errorf(core.ErrOverflow, "%s is not finite: a float32 sum of its terms went beyond float32's range (found on the device after the call); the gradients are refused", c.name)
				}
			}
		}
		return nil
	}
	return nil
}

// gradTile4 is the rows of zeros each check's product reads: a whole
// tile, so the product takes the vec4 loads of the gradients' own.
const gradTile4 = 4
