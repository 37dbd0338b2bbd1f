package engine

import (
	"context"
	"fmt"
	"math"

	"github.com/vkattn/vkattn/core"
	"github.com/vkattn/vkattn/pipelines/dispatch"
)

// Part is one partial attention (SEMANTICS.md §7.1): the attention of some
// query rows over a subset of the keys, as Attention returns it with
// Options.WantLSE: O (B, H, L, d_v) normalised within the part and LSE
// (B, H, L, 1), -Inf on rows that saw no key.
type Part struct{ O, LSE *Tensor }

// Part is the output's O and LSE as a part of a merge; LSE is nil unless
// the call asked for it (Options.WantLSE), which Merge refuses.
func (o *Output) Part() Part { return Part{O: o.O, LSE: o.LSE} }

// Merge computes, on the device, the attention over the union of the
// parts' keys from the parts' outputs (SEMANTICS.md §7.1):
//
//	LSE = ln sum_i exp(LSE_i)    O = sum_i exp(LSE_i - LSE) O_i
//
// with LSE -Inf and O 0 on rows where every part has -Inf. The parts must
// share their shapes; any number of at least one may be given, in any
// order. The output holds O and LSE (its Plan is empty: a merge runs no
// attention kernel). The parts stay the caller's.
func (d *Device) Merge(parts []Part) (*Output, error) {
	return d.MergeContext(context.Background(), parts)
}

// MergeContext is Merge with a context that can cancel the wait for the
// device.
func (d *Device) MergeContext(ctx context.Context, parts []Part) (*Output, error) {
	return RunOnce(ctx, func() (*Call, error) { return d.PrepareMerge(parts) })
}

// PrepareMerge validates a merge, allocates its outputs and records its
// dispatches without running them; Run reads the parts as they are then.
func (d *Device) PrepareMerge(parts []Part) (*Call, error) {
	if err := d.checkOpen(); err != nil {
		return nil, err
	}
	shape, err := d.checkParts(parts)
	if err != nil {
		return nil, err
	}
	B, H, L, DV := shape[0], shape[1], shape[2], shape[3]
	x := dispatch.MergeArgs{B: B, Heads: H, L: L, D: DV}
	bound := 0.0
	for _, p := range parts {
		ol, ll := p.O.layout(), p.LSE.layout()
		x.Parts = append(x.Parts, dispatch.MergePart{O: p.O.buf, LSE: p.LSE.buf,
			OOffset: ol.Offset, OStrides: ol.Strides, LSEOffset: ll.Offset, LSEStrides: ll.Strides})
		// O is a convex combination of the parts' rows (or zeros).
		bound = max(bound, p.O.magnitudeBound())
	}
	b := &Builder{d: d}
	out := &Output{}
	if out.O, err = b.Output(shape); err != nil {
		return nil, b.Fail(err)
	}
	if out.LSE, err = b.Output([4]int{B, H, L, 1}); err != nil {
		return nil, b.Fail(err)
	}
	sums, err := b.ScratchTensor([4]int{1, 1, 1, dispatch.MergeSums(B*H*L, DV)})
	if err != nil {
		return nil, b.Fail(err)
	}
	x.O, x.LSE, x.Sums = out.O.buf, out.LSE.buf, sums.buf
	if err := b.Add(d.kernels.Merge(x)); err != nil {
		return nil, b.Fail(err)
	}
	out.setBounds(bound)
	return Finish(b, out, outputTime)
}

// checkParts checks the parts of a merge and returns their O's shape.
func (d *Device) checkParts(parts []Part) ([4]int, error) {
	if len(parts) == 0 {
		return [4]int{}, errorf(core.ErrOption, "Merge needs at least one part")
	}
	var shape [4]int
	for i, p := range parts {
		name := fmt.Sprintf("part %d's", i)
		if p.LSE == nil && p.O != nil {
			return shape, errorf(core.ErrShape, "%s LSE is nil: compute each part with Options.WantLSE", name)
		}
		// O is an input like any other; LSE may hold -Inf (rows with no
		// visible key), so only its finiteness goes unchecked.
		if err := d.checkInput(name+" O", p.O); err != nil {
			return shape, err
		}
		switch lse := p.LSE; {
		case lse.root().closed.Load():
			return shape, errorf(core.ErrClosed, "%s LSE was closed", name)
		case lse.dev != d:
			return shape, errorf(core.ErrDevice, "%s LSE lives on %s, not on %s", name, lse.dev.ident(), d.ident())
		case !lse.finite && !lse.root().lse:
			// Uploaded with a value that is not finite: -Inf is a row
			// with no visible key, NaN and +Inf would merge into NaN rows.
			// A call's own LSE output is not read: it may not have run
			// yet, and it holds no NaN or +Inf once it has.
			if err := checkLSE(name, lse); err != nil {
				return shape, err
			}
		}
		for _, t := range []struct {
			what string
			t    *Tensor
		}{{"O", p.O}, {"LSE", p.LSE}} {
			if t.t.dtype != core.Float32 {
				return shape, errorf(core.ErrOption, "%s %s is %v: Merge reads float32 parts, as Attention writes them", name, t.what, t.t.dtype)
			}
		}
		if i == 0 {
			shape = p.O.shape
		}
		if p.O.shape != shape {
			return shape, errorf(core.ErrShape, "%s O is %v, part 0's %v: the parts of a merge share B, H, L and d_v", name, p.O.shape, shape)
		}
		if want := [4]int{shape[0], shape[1], shape[2], 1}; p.LSE.shape != want {
			return shape, errorf(core.ErrShape, "%s LSE is %v, want %v (a row of O, one value)", name, p.LSE.shape, want)
		}
	}
	return shape, nil
}

// checkLSE refuses an LSE tensor holding NaN or +Inf (ErrNonFinite); it
// reads the values back, which only LSEs uploaded with non-finite values
// cost (those the device writes are finite or -Inf, Tensor.lse).
func checkLSE(name string, lse *Tensor) error {
	xs, err := lse.Download()
	if err != nil {
		return err
	}
	for i, x := range xs {
		if math.IsNaN(float64(x)) || math.IsInf(float64(x), 1) {
			return errorf(core.ErrNonFinite, "%s LSE value %d is %v: a log-sum-exp is finite, or -Inf on a row with no visible key", name, i, x)
		}
	}
	return nil
}
