package engine

import (
	"github.com/vkattn/vkattn/core"
	"github.com/vkattn/vkattn/pipelines"
	"github.com/vkattn/vkattn/pipelines/dispatch"
	"github.com/vkattn/vkattn/vk"
)

// What the KV cache (package kv) and the layers (package nn) use of the
// device and its tensors beyond their methods. These are functions, not
// methods: the root package re-exports Device and Tensor, so each of
// their exported methods is public API.

// VK is d's Vulkan device.
func VK(d *Device) *vk.Device { return d.dev }

// Kernels is d's kernel library.
func Kernels(d *Device) *dispatch.Kernels { return d.kernels }

// CheckOpen is ErrClosed once d is closed.
func CheckOpen(d *Device) error { return d.checkOpen() }

// NewTensor allocates a dense, uninitialised tensor of shape s and element
// type dt on d; its bound is +Inf until SetBound.
func NewTensor(d *Device, s [4]int, dt core.DType) (*Tensor, error) { return d.newTensor(s, dt) }

// UploadBounded is Device.UploadAs with the tensor's bound at least
// headroom: WriteHeadroom for tensors Write may change, 0 for weights, so
// the bounds derived from them stay tight.
func UploadBounded(d *Device, shape []int, data []float32, t core.DType, headroom float64) (*Tensor, error) {
	return d.upload(shape, data, t, headroom)
}

// CheckInput checks that t, named name in errors, can be read by a call on
// d: not nil, open, on d, finite.
func CheckInput(d *Device, name string, t *Tensor) error { return d.checkInput(name, t) }

// CheckInputs is CheckInput of three tensors.
func CheckInputs(d *Device, names [3]string, q, k, v *Tensor) error {
	return d.checkInputs(names, q, k, v)
}

// PrepareOver is Device.Prepare of a call whose K and V are a KV cache's,
// refs saying what else of the cache it reads.
func PrepareOver(d *Device, q, k, v *Tensor, opts core.Options, refs *CacheRefs) (*Call, error) {
	return d.prepare(q, k, v, opts, refs)
}

// Buf is the buffer t's values lie in (its owner's).
func Buf(t *Tensor) *vk.Buffer { return t.buf }

// Root is the tensor that owns t's buffer: t itself unless t is a view.
func Root(t *Tensor) *Tensor { return t.root() }

// Elements is how many elements t's buffer holds (its owner's).
func Elements(t *Tensor) int { return t.elements() }

// Layout is where t lies in its buffer, in kernel terms: its element
// offset, strides and element type.
func Layout(t *Tensor) pipelines.Layout { return t.layout() }

// Dense reports whether t is a dense tensor as Upload makes one, not a
// view of one.
func Dense(t *Tensor) bool {
	s := t.shape
	return t.owner == nil && t.offset == 0 && t.strides == [3]int{s[1] * s[2] * s[3], s[2] * s[3], s[3]}
}

// RowMajor reports whether t's rows lie one after another from its
// offset, as a dense tensor of its shape would (a view over a host's
// buffer, a prefix).
func RowMajor(t *Tensor) bool {
	s := t.shape
	return t.strides == [3]int{s[1] * s[2] * s[3], s[2] * s[3], s[3]}
}

// Bound is no less than any |value| t holds (its owner's bound); 0 for a
// nil t (an absent bias).
func Bound(t *Tensor) float64 { return t.magnitudeBound() }

// SetBound records that t's values (its owner's) stay within b: what the
// call that writes t guarantees, for the range checks of the calls that
// read it.
func SetBound(t *Tensor, b float64) { t.root().bound = b }

// PagedView is the (b, heads, positions, D) view of a page pool t of
// (pages, heads, page size, D): its batch stride is the pool's page
// stride, and a page table places each page.
func PagedView(t *Tensor, b, heads, positions int) *Tensor {
	v := &Tensor{dev: t.dev, buf: t.buf, owner: t.root(), dtype: t.dtype, strides: t.strides, finite: t.finite}
	v.shape = [4]int{b, heads, positions, t.shape[3]}
	return v
}

// Prefix is the view of t's first n positions (axis 2), the same data.
func Prefix(t *Tensor, n int) *Tensor {
	v := &Tensor{dev: t.dev, buf: t.buf, owner: t.root(), dtype: t.dtype, shape: t.shape, offset: t.offset, strides: t.strides, finite: t.finite}
	v.shape[2] = n
	return v
}

// NewBuilder starts a call on d (Finish records it).
func NewBuilder(d *Device) *Builder { return &Builder{d: d} }

// PlanCall checks a problem of tensors of shapes q, k and v, laid out and
// used as how says, and plans its attention kernel.
func PlanCall(d *Device, q, k, v [4]int, how PlanOf, opts *core.Options) (Plan, error) {
	return d.plan(q, k, v, how, opts)
}

// PlanLayer plans the dense layer in says on d's load path and tuning,
// named name in the plan.
func PlanLayer(d *Device, name string, in pipelines.LinearInput) (LayerPlan, error) {
	return d.planLayer(name, in)
}

// KeyShares are a backward call's shares of dw_a, one row per key row
// (additive scores; nil otherwise), which the caller sums.
func KeyShares(g *Gradients) *Tensor { return g.keyWA }

// SinkGradients sums the rows' shares of each head's sink gradient of a
// backward call whose options had sinks.
func SinkGradients(g *Gradients) ([]float32, error) { return sinkGradients(g.rowSinks, g.Plan.Dims) }

// The root package's conversions of the engine's results into its own
// types, set by its init: kv and nn return the root's Call and Output.
var (
	publicCall   func(*Call) any
	publicOutput func(*Output) any
)

// SetPublic records the root package's conversions (its init calls it).
func SetPublic(call func(*Call) any, output func(*Output) any) {
	publicCall, publicOutput = call, output
}

// PublicCall is c as the root package's *Call (C), which takes c over.
func PublicCall[C any](c *Call) C { return publicCall(c).(C) }

// PublicOutput is o as the root package's *Output (O).
func PublicOutput[O any](o *Output) O { return publicOutput(o).(O) }
