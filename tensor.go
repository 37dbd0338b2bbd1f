package vkattn

import (
	"math"
	"sync/atomic"

	"github.com/vkattn/vkattn/pipelines"
	"github.com/vkattn/vkattn/vk"
)

// Tensor is float32 data on a device viewed as four axes (batch, heads,
// positions, width). The last axis is contiguous; the others have strides,
// so one buffer can be read as (B,H,L,d) or as (B,L,H,d) without a copy.
type Tensor struct {
	dev     *Device
	buf     *vk.Buffer
	owner   *Tensor // the tensor that owns buf; nil for an owner
	shape   [4]int
	offset  int
	strides [3]int
	finite  bool        // every value is finite (checked at upload)
	closed  atomic.Bool // on the owner: Close or the device's Close ran
	// bound is no less than any |value| the owner holds, now or after a
	// Write (Write refuses more), so calls prepared on it stay in float32
	// range (checkScores); +Inf when unknown. Read it through root().
	bound float64
}

// writeHeadroom is the magnitude Write may reach in any uploaded tensor,
// whatever Upload held (zeros for a cache filled later): calls prepared on
// it were checked against it. 2^32 leaves scores of d_k <= 256 in range up
// to a scale of about 1e16.
const writeHeadroom = 1 << 32

// Upload copies data of the given shape (rank 2 (L,d), 3 (H,L,d) or 4
// (B,H,L,d), row-major) to the device. Later Writes may hold values up to
// the larger of 2^32 and the largest |value| uploaded.
func (d *Device) Upload(shape []int, data []float32) (*Tensor, error) {
	return d.upload(shape, data, writeHeadroom)
}

// upload is Upload with the tensor's bound at least headroom; weights,
// which are never written, have none, so the bounds derived from them
// (checkLinear) stay tight.
func (d *Device) upload(shape []int, data []float32, headroom float64) (*Tensor, error) {
	s, err := Shape4(shape)
	if err != nil {
		return nil, err
	}
	n := s[0] * s[1] * s[2] * s[3]
	if len(data) != n {
		return nil, errorf(ErrShape, "shape %v needs %d values, got %d", shape, n, len(data))
	}
	t, err := d.newTensor(s)
	if err != nil {
		return nil, err
	}
	most, finite := magnitude(data)
	t.finite, t.bound = finite, max(most, headroom)
	if err := t.buf.WriteFloat32(0, data); err != nil {
		t.Close()
		return nil, err
	}
	return t, nil
}

// magnitude returns the largest |x| of data and whether every x is finite.
func magnitude(data []float32) (most float64, finite bool) {
	for _, x := range data {
		a := math.Abs(float64(x))
		if math.IsNaN(a) || math.IsInf(a, 0) {
			return math.Inf(1), false
		}
		most = max(most, a)
	}
	return most, true
}

// Write replaces the data of a dense tensor (one made by Upload), keeping
// its shape; prepared Calls that read it see the new values on their next
// Run. A prepared call checked its inputs once, so NaN or Inf is refused
// (ErrNonFinite), and so is a value beyond the tensor's bound, the larger
// of 2^32 and the largest |value| it was uploaded with (ErrOverflow).
func (t *Tensor) Write(data []float32) error {
	if t.root().closed.Load() {
		return errorf(ErrClosed, "tensor used after Close")
	}
	s := t.shape
	if t.owner != nil || t.strides != [3]int{s[1] * s[2] * s[3], s[2] * s[3], s[3]} {
		return errorf(ErrShape, "Write needs the dense tensor Upload made, not a view")
	}
	if n := s[0] * s[1] * s[2] * s[3]; len(data) != n {
		return errorf(ErrShape, "shape %v needs %d values, got %d", s, n, len(data))
	}
	most, finite := magnitude(data)
	if !finite {
		return errorf(ErrNonFinite, "Write data holds NaN or Inf")
	}
	if bound := t.root().bound; most > bound {
		return errorf(ErrOverflow, "Write data holds |x| = %g, beyond this tensor's bound %g (calls prepared on it were checked against that); upload a new tensor", most, bound)
	}
	return t.buf.WriteFloat32(uint64(t.offset), data)
}

// newTensor allocates a dense, uninitialised tensor.
func (d *Device) newTensor(s [4]int) (*Tensor, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if err := d.checkOpen(); err != nil {
		return nil, err
	}
	n := s[0] * s[1] * s[2] * s[3]
	buf, err := d.dev.NewBuffer(uint64(4 * n))
	if err != nil {
		return nil, err
	}
	t := &Tensor{dev: d, buf: buf, shape: s, strides: [3]int{s[1] * s[2] * s[3], s[2] * s[3], s[3]}, finite: true, bound: math.Inf(1)}
	d.tensors[t] = struct{}{}
	return t, nil
}

// Shape is the tensor's four logical axes.
func (t *Tensor) Shape() [4]int { return t.shape }

// SwapAxes12 returns a view that reads this tensor's axes 1 and 2 swapped:
// data uploaded as (B, L, H, d) becomes the (B, H, L, d) tensor attention
// expects, without a copy. The view shares the data and is freed with it.
func (t *Tensor) SwapAxes12() *Tensor {
	v := &Tensor{dev: t.dev, buf: t.buf, owner: t.root(), shape: t.shape, offset: t.offset, strides: t.strides, finite: t.finite}
	v.shape[1], v.shape[2] = t.shape[2], t.shape[1]
	v.strides[1], v.strides[2] = t.strides[2], t.strides[1]
	return v
}

func (t *Tensor) root() *Tensor {
	if t.owner != nil {
		return t.owner
	}
	return t
}

// layout is where the tensor lies in its buffer, in kernel terms.
func (t *Tensor) layout() pipelines.Layout {
	return pipelines.Layout{Offset: t.offset, Strides: t.strides}
}

// Download copies the tensor to the host as dense row-major (B,H,L,d) data.
func (t *Tensor) Download() ([]float32, error) {
	if t.root().closed.Load() {
		return nil, errorf(ErrClosed, "tensor used after Close")
	}
	s := t.shape
	dense := t.strides == [3]int{s[1] * s[2] * s[3], s[2] * s[3], s[3]}
	out := make([]float32, s[0]*s[1]*s[2]*s[3])
	if dense {
		return out, t.buf.ReadFloat32(uint64(t.offset), out)
	}
	row := make([]float32, s[3])
	i := 0
	for b := 0; b < s[0]; b++ {
		for h := 0; h < s[1]; h++ {
			for l := 0; l < s[2]; l++ {
				off := t.offset + b*t.strides[0] + h*t.strides[1] + l*t.strides[2]
				if err := t.buf.ReadFloat32(uint64(off), row); err != nil {
					return nil, err
				}
				i += copy(out[i:], row)
			}
		}
	}
	return out, nil
}

// Close frees the tensor's device memory. Closing a view closes the data it
// views. Safe to call more than once.
func (t *Tensor) Close() {
	if t == nil {
		return
	}
	r := t.root()
	r.dev.mu.Lock()
	defer r.dev.mu.Unlock()
	if _, ok := r.dev.tensors[r]; ok {
		delete(r.dev.tensors, r)
		r.closed.Store(true)
		// Work in flight that reads the buffer (a cancelled call's) keeps
		// it alive until it finishes.
		r.buf.Close()
	}
}
