package vkattn

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sync"
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
// the left as in Upload) and returns what Attention would run.
func (d *Device) Plan(q, k, v []int, opts Options) (Plan, error) {
	var shapes [3][4]int
	for i, s := range [][]int{q, k, v} {
		var err error
		if shapes[i], err = Shape4(s); err != nil {
			return Plan{}, err
		}
	}
	return d.plan(shapes[0], shapes[1], shapes[2], nil, false, false, &opts)
}

// plan checks a problem of tensors of shapes q, k and v and plans its
// attention kernel, the one plan the call then binds its buffers to.
// layouts are where Q, K, V and O lie in their buffers (nil: dense);
// keyPadding says the call has a key-padding mask (MHA); additive plans
// the additive score variant (q and k are then the projections, width d_a).
func (d *Device) plan(q, k, v [4]int, layouts *[4]pipelines.Layout, keyPadding, additive bool, opts *Options) (Plan, error) {
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
	tuning := d.Tuning() // a copy: SetTuning may run meanwhile
	kp, err := pipelines.PlanAttention(d.dev.Info, pipelines.PlanInput{
		AttentionShape: shape, Force: d.path, Additive: additive, Tuning: &tuning,
	})
	if err != nil {
		return Plan{}, deviceError(err)
	}
	return Plan{Dims: dims, Device: d.String(), Kernel: kp}, nil
}

// deviceError turns the planner's limit errors into ErrTooLarge, and a use
// of a closed device or buffer into ErrClosed.
func deviceError(err error) error {
	var limit *pipelines.LimitError
	switch {
	case errors.As(err, &limit):
		return errorf(ErrTooLarge, "%s", limit.Msg)
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

// Call is an attention call prepared once: its plan, output tensors, mask
// buffers and recorded commands are kept, so Run replays the dispatch with
// no allocation and no re-recording (a decode loop, a benchmark). Change
// the inputs between runs with Tensor.Write. Close it when done.
type Call struct {
	out *Output
	recorded
}

// recorded is what every prepared call keeps: its recorded commands and
// the scratch tensors (masks, lengths, intermediate results) they use.
// Its lock makes the call's Run and Close take turns.
type recorded struct {
	mu       sync.Mutex
	prepared *pipelines.Prepared
	scratch  []*Tensor
}

// run replays the commands and waits for them; done, when not nil, runs
// under the call's lock after a successful run.
func (r *recorded) run(ctx context.Context, done func(time.Duration)) (time.Duration, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.prepared == nil {
		return 0, errorf(ErrClosed, "call used after Close")
	}
	t, err := r.prepared.Run(ctx)
	if err != nil {
		return 0, deviceError(err)
	}
	if done != nil {
		done(t)
	}
	return t, nil
}

// free waits for work in flight and frees the commands and scratch
// tensors, then runs also (the outputs' Close) under the call's lock.
func (r *recorded) free(also func()) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.prepared.Close()
	r.prepared = nil
	for _, t := range r.scratch {
		t.Close()
	}
	r.scratch = nil
	also()
}

// oneShot is a prepared call that Forward-style methods run once.
type oneShot[O any] interface {
	Run(context.Context) (time.Duration, error)
	Close()
	takeOutput() O
}

// runOnce prepares a call, runs it and hands its output over to the caller
// before closing the call. A done ctx prepares and submits nothing; a ctx
// done while waiting returns at once, and the call is freed in the
// background when the device has finished it.
func runOnce[O any, C oneShot[O]](ctx context.Context, prepare func() (C, error)) (O, error) {
	var none O
	if err := ctx.Err(); err != nil {
		return none, err
	}
	c, err := prepare()
	if err != nil {
		return none, err
	}
	if _, err := c.Run(ctx); err != nil {
		if ctx.Err() != nil {
			go c.Close()
		} else {
			c.Close()
		}
		return none, err
	}
	out := c.takeOutput()
	c.Close()
	return out, nil
}

// Output is the call's output; its tensors belong to the Call and are freed
// by Close.
func (c *Call) Output() *Output { return c.out }

func (c *Call) takeOutput() *Output {
	out := c.out
	c.out = nil
	return out
}

// Run executes the recorded dispatch and waits for it. It returns the
// device time (0 without timestamps), also kept in Output().GPUTime.
func (c *Call) Run(ctx context.Context) (time.Duration, error) {
	return c.run(ctx, func(t time.Duration) { c.out.GPUTime = t })
}

// Close frees the call's commands, scratch buffers and outputs. It waits
// for work still in flight (after a cancelled Run) before freeing anything.
func (c *Call) Close() {
	if c == nil {
		return
	}
	c.free(func() {
		c.out.Close()
		c.out = nil
	})
}

// Prepare validates an attention call, allocates its outputs and records its
// dispatch without running it.
func (d *Device) Prepare(q, k, v *Tensor, opts Options) (*Call, error) {
	for _, c := range []struct {
		name string
		t    *Tensor
	}{{"Q", q}, {"K", k}, {"V", v}} {
		if err := d.checkInput(c.name, c.t); err != nil {
			return nil, err
		}
	}
	o := pipelines.DenseLayout(q.shape[0], q.shape[1], q.shape[2], v.shape[3]) // the output Prepare allocates
	plan, err := d.plan(q.shape, k.shape, v.shape, &[4]pipelines.Layout{q.layout(), k.layout(), v.layout(), o}, false, false, &opts)
	if err != nil {
		return nil, err
	}
	dm := plan.Dims
	oBound, err := attentionRange(dm, &opts, q, k, v)
	if err != nil {
		return nil, err
	}
	x := pipelines.AttentionArgs{
		Q: q.buf, K: k.buf, V: v.buf,
		Scale:  opts.Scale.For(dm.DK),
		Causal: int(opts.Causal),
	}
	// Per-call inputs (masks, lengths) live as long as the call.
	call := &Call{out: &Output{Plan: plan}}
	if err := d.bindOptions(dm, &opts, &x, &call.scratch); err != nil {
		call.Close()
		return nil, err
	}
	out := call.out
	fail := func(err error) (*Call, error) {
		call.Close()
		return nil, deviceError(err)
	}
	if out.O, err = d.newTensor([4]int{dm.B, dm.H, dm.L, dm.DV}); err != nil {
		return fail(err)
	}
	x.O = out.O.buf
	if opts.WantLSE {
		if out.LSE, err = d.newTensor([4]int{dm.B, dm.H, dm.L, 1}); err != nil {
			return fail(err)
		}
		x.LSE = out.LSE.buf
	}
	if opts.WantWeights {
		if out.Weights, err = d.newTensor([4]int{dm.B, dm.H, dm.L, dm.S}); err != nil {
			return fail(err)
		}
		x.Weights = out.Weights.buf
	}
	out.setBounds(oBound)
	if call.prepared, err = d.kernels.PrepareAttention(plan.Kernel, x); err != nil {
		return fail(err)
	}
	return call, nil
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
// against dm) into scratch tensors, appended to scratch for the caller to
// free, and points x at them.
func (d *Device) bindOptions(dm Dims, opts *Options, x *pipelines.AttentionArgs, scratch *[]*Tensor) error {
	if m := opts.Mask; m != nil {
		t, err := d.uploadScratch(scratch, len(m.Values), func(h []float32) { copy(h, m.Values) })
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
		t, err := d.uploadScratch(scratch, shape[0]*shape[1]*shape[2]*shape[3], func(h []float32) {
			foldBoolMasks(ms, shape, h)
		})
		if err != nil {
			return err
		}
		x.BoolMask = t.buf
	}
	if opts.KeyLengths != nil || opts.QueryLengths != nil {
		t, err := d.uploadScratch(scratch, 2*dm.B, func(h []float32) {
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
	return nil
}

// uploadScratch makes an n-float tensor filled by fill, appended to scratch.
func (d *Device) uploadScratch(scratch *[]*Tensor, n int, fill func([]float32)) (*Tensor, error) {
	t, err := d.newTensor([4]int{1, 1, 1, n})
	if err != nil {
		return nil, err
	}
	*scratch = append(*scratch, t)
	host := make([]float32, n)
	fill(host)
	return t, t.buf.WriteFloat32(0, host)
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
