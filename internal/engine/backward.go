package engine

import (
	"context"
	"time"

	"github.com/vkattn/vkattn/core"
	"github.com/vkattn/vkattn/pipelines/dispatch"
)

// Gradients are the gradients of sum(O * dO) for O = attention(q, k, v,
// opts) (SEMANTICS.md §10): dense float32 tensors of Q's, K's and V's
// shapes, and dSinks[h] when opts has sinks. Close them to free the
// device memory.
type Gradients struct {
	DQ, DK, DV *Tensor
	DSinks     []float32
	Plan       Plan          // the forward's plan; the backward's passes follow from it (SEMANTICS.md §10)
	GPUTime    time.Duration // forward and backward together; 0 without timestamps
	rowSinks   *Tensor       // each row's share of its head's sink gradient
	keyWA      *Tensor       // additive scores: each key row's share of dw_a
}

// Close frees the gradient tensors.
func (g *Gradients) Close() {
	if g != nil {
		CloseTensors(g.DQ, g.DK, g.DV, g.rowSinks, g.keyWA)
	}
}

func gradientsTime(g *Gradients) *time.Duration { return &g.GPUTime }

// AttentionBackward returns the gradients of sum(O * dO) with respect to q,
// k, v and opts.Sinks, O = attention(q, k, v, opts), computed on the device:
// the forward (O and the log-sum-exp) and FlashAttention-2's backward,
// which recomputes the probabilities from the log-sum-exp, so nothing of
// size L x S is stored, and sums in a fixed order, so the gradients are
// the same bits run to run. dO has O's shape (B, H, L, d_v). Every option
// of the forward applies but WantLSE and WantWeights (ignored) and RoPE
// (ErrOption). Padded query rows and rows with no visible key contribute
// zero gradient. A call too large for one binding per tensor runs as
// chunks of KV heads; one whose single KV head is too large is
// ErrTooLarge.
func (d *Device) AttentionBackward(q, k, v, dO *Tensor, opts core.Options) (*Gradients, error) {
	return d.AttentionBackwardContext(context.Background(), q, k, v, dO, opts)
}

// AttentionBackwardContext is AttentionBackward with a context that can
// cancel the wait for the device.
func (d *Device) AttentionBackwardContext(ctx context.Context, q, k, v, dO *Tensor, opts core.Options) (*Gradients, error) {
	g, err := RunOnce(ctx, func() (*GradCall, error) { return d.prepareBackward(q, k, v, dO, opts) })
	if err != nil {
		return nil, err
	}
	if opts.Sinks != nil {
		if g.DSinks, err = sinkGradients(g.rowSinks, g.Plan.Dims); err != nil {
			g.Close()
			return nil, err
		}
	}
	g.rowSinks.Close()
	g.rowSinks = nil
	return g, nil
}

// checkBackward refuses (ErrOption) a forward plan with a score variant
// the backward pass does not take: both ways into the backward, a call's
// (Builder.Backward) and a layer's (AttentionForBackward), ask it.
func checkBackward(plan Plan) error {
	if v := plan.kernel.Shape.Variants.Refused(false, true); v != "" {
		return errorf(core.ErrOption, "the backward pass does not take %s", v)
	}
	return nil
}

// GradCall is a backward call recorded once.
type GradCall = Prepared[*Gradients]

// prepareBackward records the forward and the backward of a call.
func (d *Device) prepareBackward(q, k, v, dO *Tensor, opts core.Options) (*GradCall, error) {
	if err := d.checkInputs([3]string{"Q", "K", "V"}, q, k, v); err != nil {
		return nil, err
	}
	if err := d.checkInput("dO", dO); err != nil {
		return nil, err
	}
	if opts.RoPE != nil {
		return nil, errorf(core.ErrOption, "the backward pass does not take RoPE: rotate Q and K before it")
	}
	opts.WantLSE, opts.WantWeights = true, false
	oShape := [4]int{q.shape[0], q.shape[1], q.shape[2], v.shape[3]}
	b := &Builder{d: d}
	plan, in, oBound, err := b.lowerCall(q, k, v, &opts, denseF32(oShape), nil)
	if err != nil {
		return nil, b.Fail(err)
	}
	dm := plan.Dims
	if dO.shape != oShape {
		return nil, b.Fail(errorf(core.ErrShape, "dO has shape %v, want O's %v", dO.shape, oShape))
	}
	scale := opts.Scale.For(dm.DK)
	toQ, toK := scaledGrads(scale, q, k)
	bounds, err := BackwardRange(dm, &opts, scale, dO.magnitudeBound(), v.magnitudeBound(), oBound, toQ, toK)
	if err != nil {
		return nil, b.Fail(err)
	}
	call, err := b.Backward(plan, in, dO)
	if err != nil {
		return nil, b.Fail(err)
	}
	// As a forward's outputs, the gradients carry bounds for the calls
	// they feed.
	g := call.Output()
	g.DQ.bound, g.DK.bound, g.DV.bound = bounds.DQ, bounds.DK, bounds.DV
	return call, nil
}

// Backward finishes a backward call of the forward planned as plan (with
// its LSE) over in (Q, K, V; w_a for additive scores): the options'
// buffers, the forward's O and LSE as scratch, the
// backward, and its gradients as outputs (dQ, dK, dV, each row's sink
// share and, for additive scores, each key row's share of dw_a).
func (b *Builder) Backward(plan Plan, in AttentionInputs, dO *Tensor) (*GradCall, error) {
	d, dm := b.d, plan.Dims
	if err := checkBackward(plan); err != nil {
		return nil, err
	}
	oShape := [4]int{dm.B, dm.H, dm.L, dm.DV}
	if dO.layout() != denseF32(oShape) {
		// The kernels read dO dense in float32: a copy of any other.
		data, err := dO.Download()
		if err != nil {
			return nil, err
		}
		if dO, err = b.upload(len(data), func(h []float32) { copy(h, data) }); err != nil {
			return nil, err
		}
	}
	x, err := b.lower(plan, in)
	if err != nil {
		return nil, err
	}
	o, err := b.ScratchTensor(oShape)
	if err != nil {
		return nil, err
	}
	lse, err := b.ScratchTensor([4]int{dm.B, dm.H, dm.L, 1})
	if err != nil {
		return nil, err
	}
	x.O, x.LSE = o.buf, lse.buf
	if err := b.Add(d.kernels.Attention(plan.kernel, x)); err != nil {
		return nil, err
	}
	g := &Gradients{Plan: plan}
	rowD, err := b.ScratchTensor([4]int{dm.B, dm.H, dm.L, 1})
	if err != nil {
		return nil, err
	}
	outs := []struct {
		dst   **Tensor
		shape [4]int
	}{{&g.DQ, [4]int{dm.B, dm.H, dm.L, dm.DK}}, {&g.DK, [4]int{dm.B, dm.HKV, dm.S, dm.DK}}, {&g.DV, [4]int{dm.B, dm.HKV, dm.S, dm.DV}}, {&g.rowSinks, [4]int{dm.B, dm.H, dm.L, 1}}}
	if plan.Kernel.Additive {
		outs = append(outs, struct {
			dst   **Tensor
			shape [4]int
		}{&g.keyWA, [4]int{dm.B, dm.HKV, dm.S, dm.DK}})
	}
	for _, t := range outs {
		if *t.dst, err = b.Output(t.shape); err != nil {
			return nil, err
		}
	}
	bx := dispatch.BackwardArgs{AttentionArgs: x, DO: dO.buf, RowD: rowD.buf, DSink: g.rowSinks.buf, DQ: g.DQ.buf, DK: g.DK.buf, DV: g.DV.buf}
	if g.keyWA != nil {
		bx.DWA = g.keyWA.buf
	}
	if err := b.Add(d.kernels.AttentionBackward(plan.kernel, bx)); err != nil {
		return nil, err
	}
	return Finish(b, g, gradientsTime)
}

// sinkGradients sums each head's rows' shares of its sink gradient, in
// float64 and in order.
func sinkGradients(rows *Tensor, dm core.Dims) ([]float32, error) {
	shares, err := rows.Download()
	if err != nil {
		return nil, err
	}
	sums := make([]float64, dm.H)
	for i, x := range shares {
		sums[i/dm.L%dm.H] += float64(x)
	}
	out := make([]float32, dm.H)
	for h, s := range sums {
		out[h] = float32(s)
	}
	return out, nil
}
