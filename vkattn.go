package vkattn

import (
	"context"
	"time"

	"github.com/x448/float16"

	"github.com/vkattn/vkattn/core"
	"github.com/vkattn/vkattn/internal/engine"
)

// The root's types are named types over the engine's (internal/engine),
// which packages kv and nn build on too: a *Device or *Tensor converts to
// the engine's for free, so kv and nn take and return the root's types,
// and every method a user can call is declared, and documented, here.

// Device is an open Vulkan device with everything vkattn made on it.
//
// A Device is safe for concurrent use, like an *sql.DB: share one among
// goroutines. So are the tensors, calls and layers made on it: calls from
// different goroutines record and wait independently and take turns only
// at queue submission; the runs of one prepared call take turns. Close
// may come at any time: it waits for work in flight, frees everything
// made on the device (open calls included), and every later use returns
// an error wrapping ErrClosed (a Close of something already freed is a
// no-op).
type Device engine.Device

// Tensor is data on a device, stored as float32, float16, bfloat16, q8_0,
// q4_0 or iq4_nl (DType), viewed as four axes (batch, heads, positions, width).
// The last axis is contiguous; the others have strides, so one buffer can
// be read as (B,H,L,d) or as (B,L,H,d) without a copy. A tensor over a
// host program's buffer (Device.TensorOver) is a view the host owns.
type Tensor engine.Tensor

// Call is an attention call prepared once (Device.Prepare): its plan,
// output tensors, mask buffers and recorded commands are kept, so Run
// replays the dispatch with no allocation and no re-recording (a decode
// loop, a benchmark), and Record puts the same work into a host
// program's command buffer. Change the inputs between runs with
// Tensor.Write. Close it when done.
type Call engine.Prepared[*Output]

// Output is the result of Attention. Close it to free the device memory;
// the outputs of a prepared Call belong to the call.
type Output struct {
	O       *Tensor // (B, H, L, d_v)
	LSE     *Tensor // (B, H, L, 1), nil unless Options.WantLSE
	Weights *Tensor // (B, H, L, S), nil unless Options.WantWeights
	Plan    Plan
	GPUTime time.Duration // device time of the dispatch; 0 without timestamps
}

// Gradients are the result of AttentionBackward. Close it to free the
// device memory.
type Gradients struct {
	DQ, DK, DV *Tensor
	DSinks     []float32     // one per head with Options.Sinks; nil otherwise
	Plan       Plan          // the forward's plan; the backward's passes follow from it (SEMANTICS.md §10)
	GPUTime    time.Duration // forward and backward together; 0 without timestamps
	e          *engine.Gradients
}

// Part is one partial attention of a Merge: its O and LSE (Output.Part).
type Part struct{ O, LSE *Tensor }

// Plans, the device's configuration and its counters are package core's
// (cgo-free, shared with the tools that plan without a device); core
// documents their fields and methods in full.
type (
	// Plan says what the device will run for a problem: which kernel
	// variant, load path, tiles and grid (core.Plan).
	Plan = core.Plan
	// KernelPlan is the attention kernel the planner chose for a call
	// (core.KernelPlan).
	KernelPlan = core.KernelPlan
	// Config chooses and configures a device for Open (core.Config).
	Config = core.Config
	// MemoryModel is how a device's buffers are placed (core.MemoryModel).
	MemoryModel = core.MemoryModel
	// Stats counts what a device's work costs beyond the kernels
	// themselves (core.Stats).
	Stats = core.Stats
)

const (
	// AutoMemory maps the buffers the host can map and stages the rest.
	AutoMemory = core.AutoMemory
	// DiscreteMemory maps none of the data buffers, as on a discrete GPU.
	DiscreteMemory = core.DiscreteMemory
)

func init() {
	engine.SetPublic(func(c *engine.Call) any { return callOf(c) }, func(o *engine.Output) any { return outputOf(o) })
}

func (d *Device) e() *engine.Device { return (*engine.Device)(d) }
func (t *Tensor) e() *engine.Tensor { return (*engine.Tensor)(t) }

// tensors is ts as the engine's.
func tensors(ts ...*Tensor) []*engine.Tensor {
	out := make([]*engine.Tensor, len(ts))
	for i, t := range ts {
		out[i] = t.e()
	}
	return out
}

// outputOf is the engine's output o as the root's (nil for nil).
func outputOf(o *engine.Output) *Output {
	if o == nil {
		return nil
	}
	return &Output{O: (*Tensor)(o.O), LSE: (*Tensor)(o.LSE), Weights: (*Tensor)(o.Weights), Plan: o.Plan.Plan, GPUTime: o.GPUTime}
}

func outputTime(o *Output) *time.Duration { return &o.GPUTime }

// callOf is the engine's prepared call c as the root's Call, which takes c
// over.
func callOf(c *engine.Call) *Call {
	if c == nil {
		return nil
	}
	return (*Call)(engine.Rewrap(c, outputOf, outputTime))
}

func outputResult(o *engine.Output, err error) (*Output, error) {
	if err != nil {
		return nil, err
	}
	return outputOf(o), nil
}

func callResult(c *engine.Call, err error) (*Call, error) {
	if err != nil {
		return nil, err
	}
	return callOf(c), nil
}

func planResult(p engine.Plan, err error) (Plan, error) { return p.Plan, err }

func tensorResult(t *engine.Tensor, err error) (*Tensor, error) {
	if err != nil {
		return nil, err
	}
	return (*Tensor)(t), nil
}

// Open opens a device.
func Open(cfg Config) (*Device, error) {
	d, err := engine.Open(cfg)
	return (*Device)(d), err
}

// Devices lists every Vulkan device with a compute queue and the index the
// default choice would take.
func Devices() ([]DeviceInfo, int, error) { return engine.Devices() }

// ParseMemoryModel reads the names a MemoryModel prints: auto or discrete.
func ParseMemoryModel(s string) (MemoryModel, error) { return core.ParseMemoryModel(s) }

// TuningFile is where Device.SaveTuning keeps the tuning of a device: in
// the user cache directory, named by the device and driver build.
func TuningFile(info DeviceInfo) (string, error) { return engine.TuningFile(info) }

// LoadTuning reads the tuning saved for a device.
func LoadTuning(info DeviceInfo) (Tuning, error) { return engine.LoadTuning(info) }

// ValidationMessages returns every message the Vulkan validation layer has
// reported in this process.
func ValidationMessages() []string { return engine.ValidationMessages() }

// LiveObjects is the number of Vulkan objects vkattn has alive in this
// process; zero after every Device is closed.
func LiveObjects() int64 { return engine.LiveObjects() }

// Attention computes softmax(Q K^T * scale + masks) V on the device.
// q is (B,H,L,d_k), k is (B,H_kv,S,d_k), v is (B,H_kv,S,d_v).
func (d *Device) Attention(q, k, v *Tensor, opts Options) (*Output, error) {
	return d.AttentionContext(context.Background(), q, k, v, opts)
}

// AttentionContext is Attention with a context that can cancel the wait for
// the device.
func (d *Device) AttentionContext(ctx context.Context, q, k, v *Tensor, opts Options) (*Output, error) {
	return outputResult(d.e().AttentionContext(ctx, q.e(), k.e(), v.e(), opts))
}

// Prepare validates an attention call, allocates its outputs and records its
// dispatch without running it.
func (d *Device) Prepare(q, k, v *Tensor, opts Options) (*Call, error) {
	return callResult(d.e().Prepare(q.e(), k.e(), v.e(), opts))
}

// Plan validates a problem given by its shapes (each rank 2-4, filled from
// the left as in Upload) and returns what Attention would run on dense
// float32 tensors of those shapes.
func (d *Device) Plan(q, k, v []int, opts Options) (Plan, error) {
	return planResult(d.e().Plan(q, k, v, opts))
}

// PlanAs is Plan for dense Q, K and V stored as the element types types.
func (d *Device) PlanAs(q, k, v []int, types [3]DType, opts Options) (Plan, error) {
	return planResult(d.e().PlanAs(q, k, v, types, opts))
}

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
func (d *Device) AttentionBackward(q, k, v, dO *Tensor, opts Options) (*Gradients, error) {
	return d.AttentionBackwardContext(context.Background(), q, k, v, dO, opts)
}

// AttentionBackwardContext is AttentionBackward with a context that can
// cancel the wait for the device.
func (d *Device) AttentionBackwardContext(ctx context.Context, q, k, v, dO *Tensor, opts Options) (*Gradients, error) {
	g, err := d.e().AttentionBackwardContext(ctx, q.e(), k.e(), v.e(), dO.e(), opts)
	if err != nil {
		return nil, err
	}
	return &Gradients{DQ: (*Tensor)(g.DQ), DK: (*Tensor)(g.DK), DV: (*Tensor)(g.DV), DSinks: g.DSinks, Plan: g.Plan.Plan, GPUTime: g.GPUTime, e: g}, nil
}

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
func (d *Device) AttentionVarlen(q, k, v *Tensor, cuSeqQ, cuSeqK []int, opts Options) (*Output, error) {
	return outputResult(d.e().AttentionVarlen(q.e(), k.e(), v.e(), cuSeqQ, cuSeqK, opts))
}

// PrepareVarlen is AttentionVarlen prepared: one submission of a dispatch
// per non-empty sequence, replayed by Run.
func (d *Device) PrepareVarlen(q, k, v *Tensor, cuSeqQ, cuSeqK []int, opts Options) (*Call, error) {
	return callResult(d.e().PrepareVarlen(q.e(), k.e(), v.e(), cuSeqQ, cuSeqK, opts))
}

// parts is ps as the engine's.
func parts(ps []Part) []engine.Part {
	out := make([]engine.Part, len(ps))
	for i, p := range ps {
		out[i] = engine.Part{O: p.O.e(), LSE: p.LSE.e()}
	}
	return out
}

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
func (d *Device) MergeContext(ctx context.Context, ps []Part) (*Output, error) {
	return outputResult(d.e().MergeContext(ctx, parts(ps)))
}

// PrepareMerge validates a merge, allocates its outputs and records its
// dispatches without running them; Run reads the parts as they are then.
func (d *Device) PrepareMerge(ps []Part) (*Call, error) {
	return callResult(d.e().PrepareMerge(parts(ps)))
}

// Upload copies data of the given shape (rank 2 (L,d), 3 (H,L,d) or 4
// (B,H,L,d), row-major) to the device. Later Writes may hold values up to
// the larger of 2^32 and the largest |value| uploaded.
func (d *Device) Upload(shape []int, data []float32) (*Tensor, error) {
	return tensorResult(d.e().Upload(shape, data))
}

// UploadAs is Upload into a tensor stored as element type t: float32 data
// rounded to the nearest float16 or bfloat16 (ties to even), as ToFloat16
// and ToBFloat16 do, or quantized to q8_0, q4_0 or iq4_nl as ggml's
// reference quantizers do (core.QuantTypes; rows of whole blocks of 32,
// ErrShape otherwise). A NaN
// or Inf is ErrNonFinite and a value beyond the type's range ErrOverflow,
// both naming the element (a quantized type its block); nothing is
// uploaded then.
func (d *Device) UploadAs(shape []int, data []float32, t DType) (*Tensor, error) {
	return tensorResult(d.e().UploadAs(shape, data, t))
}

// UploadBits uploads halves the caller already holds: bits[i] is the
// float16 (t = Float16) or bfloat16 (t = BFloat16) bit pattern of element
// i, stored as given. NaN and Inf patterns are ErrNonFinite.
func (d *Device) UploadBits(shape []int, bits []uint16, t DType) (*Tensor, error) {
	return tensorResult(d.e().UploadBits(shape, bits, t))
}

// UploadFloat16 uploads float16 values (github.com/x448/float16) as a
// Float16 tensor, stored as given.
func (d *Device) UploadFloat16(shape []int, data []float16.Float16) (*Tensor, error) {
	return tensorResult(d.e().UploadFloat16(shape, data))
}

// SaveTuning checks t against the device and saves it where Open finds it
// (TuningFile); it also becomes d's tuning. It returns the file's path.
func (d *Device) SaveTuning(t Tuning) (string, error) { return d.e().SaveTuning(t) }

// Tuning is the tuning the planner uses on d.
func (d *Device) Tuning() Tuning { return d.e().Tuning() }

// SetTuning makes the planner use t for later calls on d (calls already
// prepared keep theirs); `vkattn tune` tries candidates with it.
func (d *Device) SetTuning(t Tuning) error { return d.e().SetTuning(t) }

// PlannedAs is the vendor d plans as (Config.PlanAs or VKATTN_PLAN_AS),
// or "" when it plans as its own driver's quirk table or tuning says.
func (d *Device) PlannedAs() string { return d.e().PlannedAs() }

// Memory is how d places its buffers (Config.Memory, implied by PlanAs).
func (d *Device) Memory() MemoryModel { return d.e().Memory() }

// Info describes the open device.
func (d *Device) Info() DeviceInfo { return d.e().Info() }

// Stats returns the device's counts: vkattn's own allocations,
// submissions and waits (work a host program records with Call.Record
// and submits itself is the host's to count).
func (d *Device) Stats() Stats { return d.e().Stats() }

// ResetAllocStats restarts peak and largest-allocation tracking.
func (d *Device) ResetAllocStats() { d.e().ResetAllocStats() }

// Close frees every tensor, kernel and buffer made on the device and the
// device itself. Safe to call more than once.
func (d *Device) Close() error { return d.e().Close() }

// String names the device and its driver.
func (d *Device) String() string { return d.e().String() }

// Write replaces the data of a dense tensor (one made by Upload), keeping
// its shape; prepared Calls that read it see the new values on their next
// Run. A prepared call checked its inputs once, so NaN or Inf is refused
// (ErrNonFinite), and so is a value beyond the tensor's bound, the larger
// of 2^32 and the largest |value| it was uploaded with (ErrOverflow).
func (t *Tensor) Write(data []float32) error { return t.e().Write(data) }

// Shape is the tensor's four logical axes.
func (t *Tensor) Shape() [4]int { return t.e().Shape() }

// DType is the element type the tensor is stored in.
func (t *Tensor) DType() DType { return t.e().DType() }

// SwapAxes12 returns a view that reads this tensor's axes 1 and 2 swapped:
// data uploaded as (B, L, H, d) becomes the (B, H, L, d) tensor attention
// expects, without a copy. The view shares the data and is freed with it.
func (t *Tensor) SwapAxes12() *Tensor { return (*Tensor)(t.e().SwapAxes12()) }

// Columns returns a view of columns [first, first+n) of every row (the
// last axis): the same buffer and strides, rows n wide, no copy. As V,
// K.Columns(0, d_v) is multi-head latent attention's values, the leading
// columns of the latent keys (SEMANTICS.md §2): a call whose V is such a
// view of its K reads V's rows from K's, and the tiled kernels stage K's
// tiles alone. The view shares the data and is freed with it. A range
// outside the rows is ErrShape, and so is one that splits a q8_0 or q4_0
// block (views of those types hold whole blocks of 32); a nil or closed
// tensor is ErrShape or ErrClosed.
func (t *Tensor) Columns(first, n int) (*Tensor, error) {
	return tensorResult(t.e().Columns(first, n))
}

// Download copies the tensor to the host as dense row-major (B,H,L,d)
// float32 data; halves widen exactly.
func (t *Tensor) Download() ([]float32, error) { return t.e().Download() }

// At reads one element, widened to float32: b, h, l and i index the
// batch, head, position and last axes. It reads a few bytes from the
// device (a q8_0 or q4_0 tensor its 32-value block), for a value shown
// alone.
func (t *Tensor) At(b, h, l, i int) (float32, error) { return t.e().At(b, h, l, i) }

// Close frees the tensor's device memory. Closing a view closes the data it
// views; closing a tensor over a host's buffer (TensorOver) only forgets
// the buffer. Safe to call more than once.
func (t *Tensor) Close() { t.e().Close() }

func (c *Call) e() *engine.Prepared[*Output] { return (*engine.Prepared[*Output])(c) }

// Run executes the recorded commands and waits for them. It returns the
// device time (0 without timestamps), also kept in Output().GPUTime. A
// cancelled ctx returns at once; a long call, recorded as several
// submissions (SEMANTICS.md §2), submits no more, and the one in flight
// finishes before the next Run or Close.
func (c *Call) Run(ctx context.Context) (time.Duration, error) { return c.e().Run(ctx) }

// Output is the call's output; its tensors belong to the call and are
// freed by Close.
func (c *Call) Output() *Output { return c.e().Output() }

// Close frees the call's commands, scratch buffers and outputs. It waits
// for work still in flight (after a cancelled Run) before freeing
// anything; after the device's Close it is a no-op.
func (c *Call) Close() { c.e().Close() }

// Close frees the output tensors.
func (o *Output) Close() {
	if o != nil {
		o.O.Close()
		o.LSE.Close()
		o.Weights.Close()
	}
}

// Part is the output's O and LSE as a part of a merge; LSE is nil unless
// the call asked for it (Options.WantLSE), which Merge refuses.
func (o *Output) Part() Part {
	if o == nil {
		return Part{}
	}
	return Part{O: o.O, LSE: o.LSE}
}

// Close frees the gradient tensors.
func (g *Gradients) Close() {
	if g != nil {
		g.e.Close()
	}
}
