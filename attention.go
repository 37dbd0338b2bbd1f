package vkattn

import (
	"context"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/vkattn/vkattn/pipelines"
	"github.com/vkattn/vkattn/vk"
)

// Plan says what the device will run for a problem: which kernel variant,
// load path, tiles and grid. Nothing is chosen silently.
type Plan struct {
	Dims   Dims
	Device string
	Kernel pipelines.AttentionPlan
	// Projections are the dense layers that run first (additive attention's
	// q W_q + b and k W_k); none for scaled dot-product attention.
	Projections []LayerPlan
}

func (p Plan) String() string {
	kind := "attention"
	if p.Kernel.Additive {
		kind = "additive attention"
	}
	s := fmt.Sprintf("%s %v on %s: %v", kind, p.Dims, p.Device, p.Kernel)
	for _, l := range p.Projections {
		s += "; after " + l.String()
	}
	return s
}

// Plan validates a problem given by its shapes (each rank 2-4, filled from
// the left as in Upload) and returns what Attention would run on dense
// float32 tensors of those shapes.
func (d *Device) Plan(q, k, v []int, opts Options) (Plan, error) {
	return d.PlanAs(q, k, v, [3]DType{}, opts)
}

// PlanAs is Plan for dense Q, K and V stored as the element types types.
func (d *Device) PlanAs(q, k, v []int, types [3]DType, opts Options) (Plan, error) {
	var shapes [3][4]int
	var layouts [4]pipelines.Layout
	for i, s := range [][]int{q, k, v} {
		var err error
		if shapes[i], err = Shape4(s); err != nil {
			return Plan{}, err
		}
		x := shapes[i]
		layouts[i] = pipelines.DenseLayout(x[0], x[1], x[2], x[3])
		layouts[i].Type = types[i]
	}
	layouts[3] = pipelines.DenseLayout(shapes[0][0], shapes[0][1], shapes[0][2], shapes[2][3])
	return d.plan(shapes[0], shapes[1], shapes[2], &layouts, false, false, &opts, nil)
}

// plan checks a problem of tensors of shapes q, k and v and plans its
// attention kernel, the one plan the call then binds its buffers to.
// layouts are where Q, K, V and O lie in their buffers (nil: dense);
// keyPadding says the call has a key-padding mask (MHA); additive plans
// the additive score variant (q and k are then the projections, width d_a);
// cache, if not nil, is the KV cache the call reads.
func (d *Device) plan(q, k, v [4]int, layouts *[4]pipelines.Layout, keyPadding, additive bool, opts *Options, cache *cacheRefs) (Plan, error) {
	if err := d.checkOpen(); err != nil {
		return Plan{}, err
	}
	dims, err := CheckProblem(q, k, v, opts)
	if err != nil {
		return Plan{}, err
	}
	shape := pipelines.DenseShape(dims.B, dims.H, dims.HKV, dims.L, dims.S, dims.DK, dims.DV)
	if layouts != nil {
		shape.Q, shape.K, shape.V, shape.O = layouts[0], layouts[1], layouts[2], layouts[3]
	}
	if opts.Mask != nil {
		shape.Mask = pipelines.MaskLayout{Given: true, Strides: broadcastStrides(opts.Mask.Shape)}
	}
	if len(opts.BoolMasks) > 0 {
		shape.BoolMask = pipelines.MaskLayout{Given: true, Strides: broadcastStrides(boolMasksShape(opts.BoolMasks))}
	}
	shape.Lengths = opts.KeyLengths != nil || opts.QueryLengths != nil
	shape.LSE, shape.Weights, shape.KeyPadding = opts.WantLSE, opts.WantWeights, keyPadding
	shape.Window, shape.Softcap, shape.ALiBi, shape.Sinks = opts.Window != nil, opts.Softcap > 0, opts.ALiBi != nil, opts.Sinks != nil
	if cache != nil && cache.pages != nil {
		pt := cache.pages
		shape.Paging, shape.Pages, shape.PagesPerItem = pt.size, pt.pages, pt.perItem
	}
	tuning := d.Tuning() // a copy: SetTuning may run meanwhile
	kp, err := pipelines.PlanAttention(d.dev.Info, pipelines.PlanInput{
		AttentionShape: shape, Force: d.path, Additive: additive, Tuning: &tuning,
	})
	if err != nil {
		return Plan{}, deviceError(err)
	}
	return Plan{Dims: dims, Device: d.String(), Kernel: kp}, nil
}

// deviceError turns the planner's limit errors and full memory heaps into
// ErrTooLarge, and a use of a closed device or buffer into ErrClosed.
func deviceError(err error) error {
	var limit *pipelines.LimitError
	switch {
	case errors.As(err, &limit):
		return errorf(ErrTooLarge, "%s", limit.Msg)
	case errors.Is(err, vk.ErrOutOfMemory) && !errors.Is(err, ErrTooLarge):
		return fmt.Errorf("%w (%w)", ErrTooLarge, err)
	case errors.Is(err, vk.ErrClosed) && !errors.Is(err, ErrClosed):
		return fmt.Errorf("%w (%w)", ErrClosed, err)
	}
	return err
}

// Output is the result of Attention. Close it to free the device memory.
type Output struct {
	O       *Tensor // (B, H, L, d_v)
	LSE     *Tensor // (B, H, L, 1), nil unless Options.WantLSE
	Weights *Tensor // (B, H, L, S), nil unless Options.WantWeights
	Plan    Plan
	GPUTime time.Duration // device time of the dispatch; 0 without timestamps
}

// Close frees the output tensors.
func (o *Output) Close() {
	if o == nil {
		return
	}
	o.O.Close()
	o.LSE.Close()
	o.Weights.Close()
}

// Attention computes softmax(Q K^T * scale + masks) V on the device.
// q is (B,H,L,d_k), k is (B,H_kv,S,d_k), v is (B,H_kv,S,d_v).
func (d *Device) Attention(q, k, v *Tensor, opts Options) (*Output, error) {
	return d.AttentionContext(context.Background(), q, k, v, opts)
}

// AttentionContext is Attention with a context that can cancel the wait for
// the device.
func (d *Device) AttentionContext(ctx context.Context, q, k, v *Tensor, opts Options) (*Output, error) {
	return runOnce(ctx, func() (*Call, error) { return d.Prepare(q, k, v, opts) })
}

// Prepare validates an attention call, allocates its outputs and records its
// dispatch without running it.
func (d *Device) Prepare(q, k, v *Tensor, opts Options) (*Call, error) {
	return d.prepare(q, k, v, opts, nil)
}

// prepare is Prepare of a call that reads the KV cache cache (nil: none).
func (d *Device) prepare(q, k, v *Tensor, opts Options, cache *cacheRefs) (*Call, error) {
	if err := d.checkInputs([3]string{"Q", "K", "V"}, q, k, v); err != nil {
		return nil, err
	}
	o := pipelines.DenseLayout(q.shape[0], q.shape[1], q.shape[2], v.shape[3]) // the output Prepare allocates
	plan, err := d.plan(q.shape, k.shape, v.shape, &[4]pipelines.Layout{q.layout(), k.layout(), v.layout(), o}, false, false, &opts, cache)
	if err != nil {
		return nil, err
	}
	dm := plan.Dims
	oBound, err := attentionRange(dm, &opts, q, k, v)
	if err != nil {
		return nil, err
	}
	b := &builder{d: d}
	x := pipelines.AttentionArgs{Q: q.buf, K: k.buf, V: v.buf, Scale: opts.Scale.For(dm.DK), Causal: int(opts.Causal)}
	return b.attentionCall(plan, &opts, x, oBound, cache)
}

// checkInputs checks the three input tensors of a call, named names.
func (d *Device) checkInputs(names [3]string, q, k, v *Tensor) error {
	for i, t := range []*Tensor{q, k, v} {
		if err := d.checkInput(names[i], t); err != nil {
			return err
		}
	}
	return nil
}

// checkInput checks that an input tensor can be read by a call on d.
func (d *Device) checkInput(name string, t *Tensor) error {
	switch {
	case t == nil:
		return errorf(ErrShape, "%s is nil", name)
	case t.root().closed.Load():
		return errorf(ErrClosed, "%s was closed", name)
	case t.dev != d:
		return errorf(ErrDevice, "%s lives on %s, not on %s", name, t.dev.ident(), d.ident())
	case !t.finite:
		return errorf(ErrNonFinite, "%s holds NaN or Inf", name)
	}
	return nil
}

// bindOptions uploads the masks and lengths of opts (already checked
// against dm) into scratch tensors of the call and points x at them.
func (b *builder) bindOptions(dm Dims, opts *Options, x *pipelines.AttentionArgs, cache *cacheRefs) error {
	if m := opts.Mask; m != nil {
		t, err := b.upload(len(m.Values), func(h []float32) { copy(h, m.Values) })
		if err != nil {
			return err
		}
		x.Mask = t.buf
	}
	if ms := opts.BoolMasks; len(ms) > 0 {
		// The boolean masks become one additive 0 / -inf mask over the
		// union of their shapes; blocks AND because -inf absorbs every
		// finite addend.
		shape := boolMasksShape(ms)
		t, err := b.upload(shape[0]*shape[1]*shape[2]*shape[3], func(h []float32) {
			foldBoolMasks(ms, shape, h)
		})
		if err != nil {
			return err
		}
		x.BoolMask = t.buf
	}
	x.AlignToKeyLengths = opts.AlignToKeyLengths
	if cache != nil && cache.pages != nil {
		x.PageTable = cache.pages.table.buf
	}
	if cache != nil {
		x.Lengths = cache.lengths.buf // kept current by the cache
	} else if opts.KeyLengths != nil || opts.QueryLengths != nil {
		t, err := b.upload(2*dm.B, func(h []float32) {
			for b := 0; b < dm.B; b++ {
				kl, ql := dm.S, dm.L
				if opts.KeyLengths != nil {
					kl = opts.KeyLengths[b]
				}
				if opts.QueryLengths != nil {
					ql = opts.QueryLengths[b]
				}
				h[b] = math.Float32frombits(uint32(int32(kl)))
				h[dm.B+b] = math.Float32frombits(uint32(int32(ql)))
			}
		})
		if err != nil {
			return err
		}
		x.Lengths = t.buf
	}
	if opts.Sinks != nil || opts.ALiBi != nil {
		t, err := b.upload(2*dm.H, func(h []float32) {
			for i := 0; i < dm.H; i++ {
				if opts.Sinks != nil {
					h[2*i] = opts.Sinks[i]
				}
				if opts.ALiBi != nil {
					h[2*i+1] = opts.ALiBi[i]
				}
			}
		})
		if err != nil {
			return err
		}
		x.Heads = t.buf
	}
	if w := opts.Window; w != nil {
		// A side reaching L + S keys shows every key (a query's position
		// is in [-L, S-1]): so capped, the kernels' 32-bit position
		// arithmetic cannot overflow, whatever the int was.
		reach := func(side int) int {
			if side < 0 {
				return side
			}
			return min(side, dm.L+dm.S)
		}
		x.Window = [2]int{reach(w.Left), reach(w.Right)}
	}
	x.Softcap = opts.Softcap
	return nil
}

// boolMasksShape is the union of the masks' broadcast shapes: full on every
// axis where any of them is.
func boolMasksShape(ms []BoolMask) MaskShape {
	u := MaskShape{1, 1, 1, 1}
	for _, m := range ms {
		for a := range u {
			u[a] = max(u[a], m.Shape[a])
		}
	}
	return u
}

// foldBoolMasks writes -inf into h, row-major over shape (their union),
// wherever any of the masks blocks, and 0 elsewhere.
func foldBoolMasks(ms []BoolMask, shape MaskShape, h []float32) {
	clear(h)
	for _, m := range ms {
		st := broadcastStrides(m.Shape)
		blockWhen := m.Meaning == TrueBlocks
		i := 0
		for b := 0; b < shape[0]; b++ {
			for hh := 0; hh < shape[1]; hh++ {
				for l := 0; l < shape[2]; l++ {
					row := b*st[0] + hh*st[1] + l*st[2]
					for j := 0; j < shape[3]; j++ {
						if m.Values[row+j*st[3]] == blockWhen {
							h[i] = float32(math.Inf(-1))
						}
						i++
					}
				}
			}
		}
	}
}

// broadcastStrides gives element strides of a row-major mask over
// (B, H, L, S), with 0 on axes of extent 1 so they broadcast.
func broadcastStrides(s MaskShape) [4]int {
	var st [4]int
	n := 1
	for i := 3; i >= 0; i-- {
		if s[i] != 1 {
			st[i] = n
		}
		n *= s[i]
	}
	return st
}
