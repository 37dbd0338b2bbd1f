package engine

import (
	"context"
	"math"
	"sync"
	"time"

	"github.com/vkattn/vkattn/core"
	"github.com/vkattn/vkattn/pipelines"
	"github.com/vkattn/vkattn/pipelines/dispatch"
	"github.com/vkattn/vkattn/vk"
)

// Call is an attention call prepared once: its plan, output tensors, mask
// buffers and recorded commands are kept, so Run replays the dispatch with
// no allocation and no re-recording (a decode loop, a benchmark). Change
// the inputs between runs with Tensor.Write. Close it when done.
type Call = Prepared[*Output]

// Prepared is the one prepared-call type behind Call, the layers' calls
// (package nn) and the backward pass: recorded commands, the scratch
// tensors they use (masks, lengths, intermediate results) and the outputs
// O. Its lock makes Run and Close take turns.
type Prepared[O interface{ Close() }] struct {
	mu       sync.Mutex
	commands *dispatch.Prepared
	scratch  []*Tensor
	out      O
	gpuTime  func(O) *time.Duration // where Run records the device time in out
	// check, if not nil, is asked before each Run: a rolling KV cache's
	// call refuses a run whose window reaches positions let go.
	check func() error
	// after, if not nil, is asked after each Run's wait: a backward
	// call's check that its gradients came out finite.
	after func() error
	// dev and recorded: the call was recorded into a host's command
	// buffer (Record), whose work Close waits for with the device's.
	dev      *Device
	recorded bool
}

// Output is the call's output; its tensors belong to the call and are
// freed by Close.
func (c *Prepared[O]) Output() O {
	if c == nil {
		var none O
		return none
	}
	return c.out
}

// Run executes the recorded commands and waits for them. It returns the
// device time (0 without timestamps), also kept in Output().GPUTime. A
// cancelled ctx returns at once; a long call, recorded as several
// submissions (SEMANTICS.md §2), submits no more, and the one in flight
// finishes before the next Run or Close.
func (c *Prepared[O]) Run(ctx context.Context) (time.Duration, error) {
	if c == nil {
		return 0, errorf(core.ErrClosed, "no call: the call is nil")
	}
	if c.check != nil {
		if err := c.check(); err != nil {
			return 0, err
		}
	}
	return c.run(ctx, func(p *dispatch.Prepared) (time.Duration, error) { return p.Run(ctx) })
}

// RunWith is c's Run with transfers recorded around the call in the same
// submission (dispatch.Prepared.RunWith): a KV cache's decode step.
func RunWith[O interface{ Close() }](ctx context.Context, c *Prepared[O], before, after func(*vk.Commands) error) (time.Duration, error) {
	return c.run(ctx, func(p *dispatch.Prepared) (time.Duration, error) { return p.RunWith(ctx, before, after) })
}

// run runs the commands by submit under the call's lock and records the
// device time.
func (c *Prepared[O]) run(ctx context.Context, submit func(*dispatch.Prepared) (time.Duration, error)) (time.Duration, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.commands == nil {
		return 0, errorf(core.ErrClosed, "call used after Close")
	}
	t, err := submit(c.commands)
	if err != nil {
		return 0, DeviceError(err)
	}
	*c.gpuTime(c.out) = t
	if c.after != nil {
		if err := c.after(); err != nil {
			return t, err
		}
	}
	return t, nil
}

// Rewrap moves c's commands, scratch tensors and checks into a call whose
// output is wrap(c's output), with gpuTime where its Run records the
// device time; c is left closed and empty. The root package turns the
// engine's calls into its own Call with it.
func Rewrap[O, P interface{ Close() }](c *Prepared[O], wrap func(O) P, gpuTime func(P) *time.Duration) *Prepared[P] {
	c.mu.Lock()
	defer c.mu.Unlock()
	p := &Prepared[P]{commands: c.commands, scratch: c.scratch, out: wrap(c.out), gpuTime: gpuTime, check: c.check, after: c.after, dev: c.dev, recorded: c.recorded}
	var none O
	c.commands, c.scratch, c.out = nil, nil, none
	return p
}

// SetCheck makes c ask check before each Run, which fails with its error.
func SetCheck[O interface{ Close() }](c *Prepared[O], check func() error) { c.check = check }

// Close frees the call's commands, scratch buffers and outputs. It waits
// for work still in flight (after a cancelled Run) before freeing
// anything; after the device's Close it is a no-op.
func (c *Prepared[O]) Close() {
	if c == nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.recorded && c.commands != nil {
		// A host's submission may still use what the call frees.
		c.dev.dev.WaitIdle()
	}
	c.commands.Close()
	c.commands = nil
	CloseTensors(c.scratch...)
	c.scratch = nil
	c.out.Close()
	var none O
	c.out = none
}

// takeOutput hands the outputs over to the caller of a one-shot call.
func (c *Prepared[O]) takeOutput() O {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := c.out
	var none O
	c.out = none
	return out
}

// RunOnce prepares a call, runs it and hands its output over to the caller
// before closing the call. A done ctx prepares and submits nothing; a ctx
// done while waiting returns at once, and the call is freed in the
// background when the device has finished it.
func RunOnce[O interface{ Close() }](ctx context.Context, prepare func() (*Prepared[O], error)) (O, error) {
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

// Builder is the one place a prepared call (attention, additive or
// multi-head) is put together: the tensors it allocates, its steps in
// order, and one cleanup of all of them when something fails.
type Builder struct {
	d       *Device
	steps   []*dispatch.Step
	scratch []*Tensor    // freed with the call
	outputs []*Tensor    // handed to the caller with the call's output
	after   func() error // the call's check after each run (CheckFinite)
}

// Output allocates an output tensor of the call.
func (b *Builder) Output(shape [4]int) (*Tensor, error) {
	t, err := b.d.newTensor(shape, core.Float32)
	if err == nil {
		b.outputs = append(b.outputs, t)
	}
	return t, err
}

// ScratchTensor allocates a tensor the call uses and frees itself.
func (b *Builder) ScratchTensor(shape [4]int) (*Tensor, error) {
	t, err := b.d.newTensor(shape, core.Float32)
	if err == nil {
		b.scratch = append(b.scratch, t)
	}
	return t, err
}

// upload makes an n-float scratch tensor filled by fill.
func (b *Builder) upload(n int, fill func([]float32)) (*Tensor, error) {
	t, err := b.ScratchTensor([4]int{1, 1, 1, n})
	if err != nil {
		return nil, err
	}
	host := make([]float32, n)
	fill(host)
	return t, t.buf.WriteFloat32(0, host)
}

// Add appends a bound step.
func (b *Builder) Add(st *dispatch.Step, err error) error {
	if err == nil {
		b.steps = append(b.steps, st)
	}
	return err
}

// AttentionInputs are the buffers of the tensors an attention call reads
// (Q, K, V; w_a for additive scores) and, where the caller placed it, O.
type AttentionInputs struct{ Q, K, V, O, WA *vk.Buffer }

// lower is the one place an attention call becomes its kernel's
// arguments: in's buffers, and the masks, lengths and per-head values of
// the options the plan was made from (already checked against its dims)
// and its key padding uploaded into scratch tensors of the call, each
// where the plan's shape has it. The LSE and weights outputs are left to
// the caller.
func (b *Builder) lower(plan Plan, in AttentionInputs) (dispatch.AttentionArgs, error) {
	x := dispatch.AttentionArgs{Q: in.Q, K: in.K, V: in.V, O: in.O, WA: in.WA}
	dm, s, keyPadding := plan.Dims, &plan.kernel.Shape, plan.keyPadding
	if err := b.bindOptions(dm, s, &plan.opts, &x, plan.cache); err != nil {
		return x, err
	}
	if s.KeyPadding {
		t, err := b.upload(dm.B*dm.S, func(f []float32) {
			for i, padded := range keyPadding.Padded {
				if padded {
					f[i] = float32(math.Inf(-1))
				}
			}
		})
		if err != nil {
			return x, err
		}
		x.KeyPadding = t.buf
	}
	return x, nil
}

// Attention binds the attention of plan over in, with the LSE and weights
// opts asks for allocated as outputs (returned, nil when not asked for).
func (b *Builder) Attention(plan Plan, in AttentionInputs) (lse, weights *Tensor, err error) {
	dm, s := plan.Dims, &plan.kernel.Shape
	x, err := b.lower(plan, in)
	if err != nil {
		return nil, nil, err
	}
	if s.LSE {
		if lse, err = b.Output([4]int{dm.B, dm.H, dm.L, 1}); err != nil {
			return nil, nil, err
		}
		x.LSE = lse.buf
	}
	if s.Weights {
		if weights, err = b.Output([4]int{dm.B, dm.H, dm.L, dm.S}); err != nil {
			return nil, nil, err
		}
		x.Weights = weights.buf
	}
	return lse, weights, b.Add(b.d.kernels.Attention(plan.kernel, x))
}

// AttentionCall finishes a call whose last step is the attention of plan
// over in (without O): it allocates the outputs, O's bound oBound, and
// records.
func (b *Builder) AttentionCall(plan Plan, in AttentionInputs, oBound float64) (*Call, error) {
	dm := plan.Dims
	out := &Output{Plan: plan}
	var err error
	if out.O, err = b.Output([4]int{dm.B, dm.H, dm.L, dm.DV}); err != nil {
		return nil, b.Fail(err)
	}
	in.O = out.O.buf
	if out.LSE, out.Weights, err = b.Attention(plan, in); err != nil {
		return nil, b.Fail(err)
	}
	out.setBounds(oBound)
	return Finish(b, out, outputTime)
}

// Linear binds out = in W^T + bias for a planned layer: in is dense, W
// starts at element wOffset of w, bias (may be nil) at biasOffset, and out
// rows are outStride apart.
func (b *Builder) Linear(l LayerPlan, in, w *Tensor, wOffset int, bias *Tensor, biasOffset int, out *Tensor, outStride int) error {
	shape := pipelines.LinearShape{
		Rows: l.Rows, Outputs: l.Outputs, Inputs: l.Inputs,
		X:    pipelines.RowLayout{Offset: in.offset, Stride: l.Inputs},
		W:    pipelines.RowLayout{Offset: wOffset, Stride: l.Inputs},
		Y:    pipelines.RowLayout{Offset: out.offset, Stride: outStride},
		Bias: bias != nil, BiasOffset: biasOffset,
	}
	bufs := dispatch.LinearBuffers{X: in.buf, W: w.buf, Y: out.buf}
	if bias != nil {
		bufs.Bias = bias.buf
	}
	return b.Add(b.d.kernels.Linear(l.linear, shape, bufs))
}

// Finish records the steps as one submission into a call whose output
// is out (holding the tensors output allocated), its device time kept at
// gpuTime(out).
func Finish[O interface{ Close() }](b *Builder, out O, gpuTime func(O) *time.Duration) (*Prepared[O], error) {
	commands, err := b.d.kernels.Prepare(b.steps...)
	b.steps = nil // Prepare owns them now, also on failure
	if err != nil {
		b.abandon()
		return nil, DeviceError(err)
	}
	c := &Prepared[O]{commands: commands, scratch: b.scratch, out: out, gpuTime: gpuTime, after: b.after, dev: b.d}
	b.scratch, b.outputs, b.after = nil, nil, nil
	return c, nil
}

// abandon frees everything built so far.
func (b *Builder) abandon() {
	for _, s := range b.steps {
		s.Close()
	}
	for _, t := range append(b.scratch, b.outputs...) {
		t.Close()
	}
	b.steps, b.scratch, b.outputs = nil, nil, nil
}

// Fail abandons the build and returns err as the device would.
func (b *Builder) Fail(err error) error {
	b.abandon()
	return DeviceError(err)
}

// bindOptions uploads the masks, lengths and per-head values of opts
// (already checked against dm) that the planned shape s has into scratch
// tensors of the call and points x at them; a KV cache's call reads the
// cache's lengths and page table.
func (b *Builder) bindOptions(dm core.Dims, s *pipelines.AttentionShape, opts *core.Options, x *dispatch.AttentionArgs, cache *CacheRefs) error {
	if s.Mask.Given {
		m := opts.Mask
		t, err := b.upload(len(m.Values), func(h []float32) { copy(h, m.Values) })
		if err != nil {
			return err
		}
		x.Mask = t.buf
	}
	if s.BoolMask.Given {
		// The boolean masks become one additive 0 / -inf mask over the
		// union of their shapes; blocks AND because -inf absorbs every
		// finite addend.
		ms := opts.BoolMasks
		shape := boolMasksShape(ms)
		t, err := b.upload(shape[0]*shape[1]*shape[2]*shape[3], func(h []float32) {
			foldBoolMasks(ms, shape, h)
		})
		if err != nil {
			return err
		}
		x.BoolMask = t.buf
	}
	if s.Paging > 0 {
		x.PageTable = cache.PageTable.buf
	}
	switch {
	case !s.Lengths:
	case cache != nil:
		x.Lengths = cache.Lengths.buf // kept current by the cache
	default:
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
	if heads := pipelines.HeadValues(opts, dm.H); heads != nil {
		t, err := b.upload(len(heads), func(h []float32) { copy(h, heads) })
		if err != nil {
			return err
		}
		x.Heads = t.buf
	}
	return nil
}

// boolMasksShape is the union of the masks' broadcast shapes: full on every
// axis where any of them is.
func boolMasksShape(ms []core.BoolMask) core.MaskShape {
	u := core.MaskShape{1, 1, 1, 1}
	for _, m := range ms {
		for a := range u {
			u[a] = max(u[a], m.Shape[a])
		}
	}
	return u
}

// foldBoolMasks writes -inf into h, row-major over shape (their union),
// wherever any of the masks blocks, and 0 elsewhere.
func foldBoolMasks(ms []core.BoolMask, shape core.MaskShape, h []float32) {
	clear(h)
	for _, m := range ms {
		st := broadcastStrides(m.Shape)
		blockWhen := m.Meaning == core.TrueBlocks
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
func broadcastStrides(s core.MaskShape) [4]int {
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
