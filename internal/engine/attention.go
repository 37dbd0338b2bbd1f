package engine

import (
	"context"
	"errors"
	"fmt"
	"time"

	vulkan "github.com/vulkan-go/vulkan"

	"github.com/vkattn/vkattn/core"
	"github.com/vkattn/vkattn/pipelines"
	"github.com/vkattn/vkattn/vk"
)

// Plan validates a problem given by its shapes (each rank 2-4, filled from
// the left as in Upload) and returns what Attention would run on dense
// float32 tensors of those shapes.
func (d *Device) Plan(q, k, v []int, opts core.Options) (Plan, error) {
	return d.PlanAs(q, k, v, [3]core.DType{}, opts)
}

// PlanAs is Plan for dense Q, K and V stored as the element types types.
func (d *Device) PlanAs(q, k, v []int, types [3]core.DType, opts core.Options) (Plan, error) {
	var shapes [3][4]int
	var layouts [4]pipelines.Layout
	for i, s := range [][]int{q, k, v} {
		var err error
		if shapes[i], err = core.Shape4(s); err != nil {
			return Plan{}, err
		}
		x := shapes[i]
		layouts[i] = pipelines.DenseLayout(x[0], x[1], x[2], x[3])
		layouts[i].Type = types[i]
	}
	layouts[3] = pipelines.DenseLayout(shapes[0][0], shapes[0][1], shapes[0][2], shapes[2][3])
	return d.plan(shapes[0], shapes[1], shapes[2], PlanOf{Layouts: &layouts}, &opts)
}

// PlanOf is what a call adds to its shapes for the planner: where Q, K, V
// and O lie in their buffers (nil: dense), a key-padding mask (MHA; nil:
// none), the additive score variant (q and k are then the projections,
// width d_a), the KV cache the call reads (nil: none), and whether V is
// K's leading columns (Tensor.Columns), read from K's rows. The plan
// keeps the key padding and the cache: binding reads them there.
type PlanOf struct {
	Layouts    *[4]pipelines.Layout
	KeyPadding *core.KeyPadding
	Additive   bool
	Cache      *CacheRefs
	VFromK     bool
}

// plan checks a problem of tensors of shapes q, k and v and plans its
// attention kernel, the one plan the call then binds its buffers to.
func (d *Device) plan(q, k, v [4]int, how PlanOf, opts *core.Options) (Plan, error) {
	if err := d.checkOpen(); err != nil {
		return Plan{}, err
	}
	dims, err := core.CheckProblem(q, k, v, opts)
	if err != nil {
		return Plan{}, err
	}
	shape := pipelines.DenseShape(dims.B, dims.H, dims.HKV, dims.L, dims.S, dims.DK, dims.DV)
	if how.Layouts != nil {
		shape.Q, shape.K, shape.V, shape.O = how.Layouts[0], how.Layouts[1], how.Layouts[2], how.Layouts[3]
	}
	if opts.Mask != nil {
		shape.Mask = pipelines.MaskLayout{Given: true, Strides: broadcastStrides(opts.Mask.Shape)}
	}
	if len(opts.BoolMasks) > 0 {
		shape.BoolMask = pipelines.MaskLayout{Given: true, Strides: broadcastStrides(boolMasksShape(opts.BoolMasks))}
	}
	shape.Lengths = opts.KeyLengths != nil || opts.QueryLengths != nil
	shape.LSE, shape.Weights, shape.KeyPadding = opts.WantLSE, opts.WantWeights, how.KeyPadding != nil
	shape.Variants = pipelines.VariantsOf(opts)
	if c := how.Cache; c != nil && c.PageTable != nil {
		shape.Paging, shape.Pages, shape.PagesPerItem = c.PageSize, c.Pages, c.PerItem
	}
	shape.VFromK = how.VFromK
	tuning := d.Tuning() // a copy: SetTuning may run meanwhile
	kp, err := pipelines.PlanAttention(d.dev.Info.DeviceInfo, pipelines.PlanInput{
		AttentionShape: shape, Force: d.path, Additive: how.Additive, Tuning: &tuning, Float32Products: opts.Float32Products,
		Scalars: scalars(dims, opts, how.Additive),
	})
	if err != nil {
		return Plan{}, DeviceError(err)
	}
	p := Plan{Plan: core.Plan{Dims: dims, Device: d.String(), Kernel: kernelPlan(kp), RoPE: opts.RoPE}, kernel: kp,
		opts: *opts, keyPadding: how.KeyPadding, cache: how.Cache}
	if how.Cache != nil && how.Cache.RoPE != nil {
		p.RoPE, p.RoPEQueryOnly = how.Cache.RoPE, true
	}
	return p, nil
}

// scalars are the values of a call of dims that its kernels read: the
// score scale (none for additive scores: w_a carries it), the causal
// alignment, the window, the soft cap and the positions' alignment.
func scalars(dims core.Dims, opts *core.Options, additive bool) pipelines.Scalars {
	sc := pipelines.Scalars{Scale: opts.Scale.For(dims.DK), Causal: opts.Causal, Softcap: opts.Softcap, AlignToKeyLengths: opts.AlignToKeyLengths}
	if additive {
		sc.Scale = 1
	}
	if w := opts.Window; w != nil {
		// A side reaching L + S keys shows every key (a query's position
		// is in [-L, S-1]): so capped, the kernels' 32-bit position
		// arithmetic cannot overflow, whatever the int was.
		reach := func(side int) int {
			if side < 0 {
				return side
			}
			return min(side, dims.L+dims.S)
		}
		sc.Window = [2]int{reach(w.Left), reach(w.Right)}
	}
	return sc
}

// DeviceError turns the planner's limit errors and full memory heaps into
// ErrTooLarge, and a use of a closed device or buffer into ErrClosed.
func DeviceError(err error) error {
	var limit *pipelines.LimitError
	var call *vk.Error
	lost := errors.Is(err, vk.ErrDeviceLost) || errors.As(err, &call) && vulkan.Result(call.Result) == vulkan.ErrorDeviceLost
	switch {
	case err == nil || errors.Is(err, core.ErrTooLarge) || errors.Is(err, core.ErrClosed) || errors.Is(err, core.ErrDeviceLost) || errors.Is(err, core.ErrDevice):
		return err
	case errors.As(err, &limit):
		return errorf(core.ErrTooLarge, "%s", limit.Msg)
	case lost:
		return fmt.Errorf("%w (%w)", core.ErrDeviceLost, err)
	case errors.Is(err, vk.ErrOutOfMemory):
		return fmt.Errorf("%w (%w)", core.ErrTooLarge, err)
	case errors.Is(err, vk.ErrClosed):
		return fmt.Errorf("%w (%w)", core.ErrClosed, err)
	case call != nil && (vulkan.Result(call.Result) == vulkan.ErrorOutOfDeviceMemory || vulkan.Result(call.Result) == vulkan.ErrorOutOfHostMemory):
		return fmt.Errorf("%w: out of memory (%w)", core.ErrTooLarge, err)
	case call != nil:
		return fmt.Errorf("%w: a Vulkan call failed (%w)", core.ErrDevice, err)
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

// outputTime is where a call of Output records its device time (Finish).
func outputTime(o *Output) *time.Duration { return &o.GPUTime }

// Close frees the output tensors.
func (o *Output) Close() {
	if o != nil {
		CloseTensors(o.O, o.LSE, o.Weights)
	}
}

// Attention computes softmax(Q K^T * scale + masks) V on the device.
// q is (B,H,L,d_k), k is (B,H_kv,S,d_k), v is (B,H_kv,S,d_v).
func (d *Device) Attention(q, k, v *Tensor, opts core.Options) (*Output, error) {
	return d.AttentionContext(context.Background(), q, k, v, opts)
}

// AttentionContext is Attention with a context that can cancel the wait for
// the device.
func (d *Device) AttentionContext(ctx context.Context, q, k, v *Tensor, opts core.Options) (*Output, error) {
	return RunOnce(ctx, func() (*Call, error) { return d.Prepare(q, k, v, opts) })
}

// Prepare validates an attention call, allocates its outputs and records its
// dispatch without running it.
func (d *Device) Prepare(q, k, v *Tensor, opts core.Options) (*Call, error) {
	return d.prepare(q, k, v, opts, nil)
}

// prepare is Prepare of a call that reads the KV cache cache (nil: none).
func (d *Device) prepare(q, k, v *Tensor, opts core.Options, cache *CacheRefs) (*Call, error) {
	if err := d.checkInputs([3]string{"Q", "K", "V"}, q, k, v); err != nil {
		return nil, err
	}
	if cache != nil && cache.RoPE != nil && opts.RoPE != nil {
		return nil, errorf(core.ErrOption, "the KV cache rotates by its own RoPE (kv.Config.RoPE): Options.RoPE must be nil")
	}
	b := &Builder{d: d}
	plan, in, oBound, err := b.lowerCall(q, k, v, &opts, denseF32([4]int{q.shape[0], q.shape[1], q.shape[2], v.shape[3]}), cache)
	if err != nil {
		return nil, b.Fail(err)
	}
	return b.AttentionCall(plan, in, oBound)
}

// lowerCall is the one lowering of a call's Q, K and V, for a call of its
// own, each sequence of a varlen call and the backward's forward: the
// layouts its kernel reads them in (float32 copies rotated by RoPE where
// it has one: Q and K by opts.RoPE, Q alone by a cache's, whose keys were
// rotated when appended; V read from K's rows where it is a view of their
// leading columns), its plan (which keeps opts and the cache for binding),
// the rotations recorded into b, the buffers to bind and the bound of the
// output's magnitudes. o is where O lies in its buffer.
func (b *Builder) lowerCall(q, k, v *Tensor, opts *core.Options, o pipelines.Layout, cache *CacheRefs) (Plan, AttentionInputs, float64, error) {
	rotQ, rotK := opts.RoPE != nil || (cache != nil && cache.RoPE != nil), opts.RoPE != nil
	layouts := [4]pipelines.Layout{q.layout(), k.layout(), v.layout(), o}
	if rotQ {
		layouts[0] = denseF32(q.shape)
	}
	if rotK {
		layouts[1] = denseF32(k.shape)
	}
	// V read as K's leading columns where it is a view of them and K is
	// read in place (not a rotated copy).
	vFromK := !rotK && leadingColumnsOf(v, k)
	plan, err := b.d.plan(q.shape, k.shape, v.shape, PlanOf{Layouts: &layouts, Cache: cache, VFromK: vFromK}, opts)
	if err != nil {
		return Plan{}, AttentionInputs{}, 0, err
	}
	switch {
	case rotK:
		q, k, err = b.rotateCall(plan.Dims, opts, q, k)
	case rotQ:
		q, err = b.rotated(q, cache.RoPE, cache.RoPETable, cache.RoPELengths)
	}
	if err != nil {
		return Plan{}, AttentionInputs{}, 0, err
	}
	oBound, err := attentionRange(plan.Dims, opts, q, k, v)
	if err != nil {
		return Plan{}, AttentionInputs{}, 0, err
	}
	return plan, AttentionInputs{Q: q.buf, K: k.buf, V: v.buf}, oBound, nil
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
		return errorf(core.ErrShape, "%s is nil", name)
	case t.root().closed.Load():
		return errorf(core.ErrClosed, "%s was closed", name)
	case t.dev != d:
		return errorf(core.ErrDevice, "%s lives on %s, not on %s", name, t.dev.ident(), d.ident())
	case !t.finite:
		return errorf(core.ErrNonFinite, "%s holds NaN or Inf", name)
	}
	return nil
}
