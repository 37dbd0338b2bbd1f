package engine

import (
	"encoding/binary"
	"fmt"
	"math"
	"sync/atomic"
	"unsafe"

	"github.com/vkattn/vkattn/core"
	"github.com/vkattn/vkattn/pipelines"
	"github.com/vkattn/vkattn/vk"
	"github.com/x448/float16"
)

// Tensor is data on a device, stored as float32, float16 or bfloat16
// (DType), viewed as four axes (batch, heads, positions, width). The last
// axis is contiguous; the others have strides, so one buffer can be read as
// (B,H,L,d) or as (B,L,H,d) without a copy.
type Tensor struct {
	dev     *Device
	buf     *vk.Buffer
	owner   *Tensor // the tensor that owns buf; nil for an owner
	dtype   core.DType
	shape   [4]int
	offset  int
	strides [3]int
	finite  bool // every value is finite (checked at upload)
	// lse: a log-sum-exp the device writes, finite or -Inf (a fully
	// masked row), never NaN or +Inf; Write keeps it so (it refuses
	// non-finite values). Merge trusts it without reading it back, which
	// matters before the call that writes it has run. Read it through
	// root().
	lse    bool
	closed atomic.Bool // on the owner: Close or the device's Close ran
	// bound is no less than any |value| the owner holds, now or after a
	// Write (Write refuses more), so calls prepared on it stay in float32
	// range (checkScores); +Inf when unknown. Read it through root().
	bound float64
}

// WriteHeadroom is the magnitude Write may reach in any uploaded tensor,
// whatever Upload held (zeros for a cache filled later): calls prepared on
// it were checked against it. 2^32 leaves scores of d_k <= 256 in range up
// to a scale of about 1e16.
const WriteHeadroom = 1 << 32

// Upload copies data of the given shape (rank 2 (L,d), 3 (H,L,d) or 4
// (B,H,L,d), row-major) to the device. Later Writes may hold values up to
// the larger of 2^32 and the largest |value| uploaded.
func (d *Device) Upload(shape []int, data []float32) (*Tensor, error) {
	return d.upload(shape, data, core.Float32, WriteHeadroom)
}

// UploadAs is Upload into a tensor stored as element type t: float32 data
// rounded to the nearest float16 or bfloat16 (ties to even), as ToFloat16
// and ToBFloat16 do, or quantized to q8_0, q4_0 or iq4_nl as ggml's
// reference quantizers do (core.QuantTypes; rows of whole blocks of 32,
// ErrShape otherwise). A NaN
// or Inf is ErrNonFinite and a value beyond the type's range ErrOverflow,
// both naming the element (a quantized type its block); nothing is
// uploaded then.
func (d *Device) UploadAs(shape []int, data []float32, t core.DType) (*Tensor, error) {
	return d.upload(shape, data, t, WriteHeadroom)
}

// UploadBits uploads halves the caller already holds: bits[i] is the
// float16 (t = Float16) or bfloat16 (t = BFloat16) bit pattern of element
// i, stored as given. NaN and Inf patterns are ErrNonFinite.
func (d *Device) UploadBits(shape []int, bits []uint16, t core.DType) (*Tensor, error) {
	if t != core.Float16 && t != core.BFloat16 {
		return nil, errorf(core.ErrOption, "UploadBits takes float16 or bfloat16 bits, not %v", t)
	}
	s, err := d.checkUpload(shape, len(bits))
	if err != nil {
		return nil, err
	}
	most := 0.0
	for i, h := range bits {
		x := core.Widen(t, h)
		if !core.Finite32(x) {
			return nil, core.FiniteElement(x, fmt.Sprintf("element %d (bits %#04x): ", i, h))
		}
		most = max(most, math.Abs(float64(x)))
	}
	return d.store(s, t, halfBytes(bits), most, WriteHeadroom)
}

// UploadFloat16 uploads float16 values (github.com/x448/float16) as a
// Float16 tensor, stored as given.
func (d *Device) UploadFloat16(shape []int, data []float16.Float16) (*Tensor, error) {
	bits := make([]uint16, len(data))
	for i, h := range data {
		bits[i] = h.Bits()
	}
	return d.UploadBits(shape, bits, core.Float16)
}

// upload is UploadAs with the tensor's bound at least headroom; weights,
// which are never written, have none, so the bounds derived from them
// (checkLinear) stay tight.
func (d *Device) upload(shape []int, data []float32, t core.DType, headroom float64) (*Tensor, error) {
	s, err := d.checkUpload(shape, len(data))
	if err != nil {
		return nil, err
	}
	if t == core.Float32 {
		most, finite := Magnitude(data)
		tn, err := d.store(s, t, f32Bytes(data), most, headroom)
		if err == nil {
			tn.finite = finite
		}
		return tn, err
	}
	if t.Quantized() {
		if block := quantBlock(t); s[3]%block != 0 {
			return nil, errorf(core.ErrShape, "%v rows are whole blocks of %d elements; shape %v has rows of %d", t, block, shape, s[3])
		}
		raw, most, err := quantBytes(t, data)
		if err != nil {
			return nil, err
		}
		return d.store(s, t, raw, most, headroom)
	}
	bits, err := core.HalfBits(t, data)
	if err != nil {
		return nil, err
	}
	most, _ := Magnitude(data)
	return d.store(s, t, halfBytes(bits), most, headroom)
}

// checkUpload checks n values against a shape.
func (d *Device) checkUpload(shape []int, n int) ([4]int, error) {
	s, err := core.Shape4(shape)
	if err != nil {
		return s, err
	}
	if want := s[0] * s[1] * s[2] * s[3]; n != want {
		return s, errorf(core.ErrShape, "shape %v needs %d values, got %d", shape, want, n)
	}
	return s, nil
}

// store makes a dense tensor of type t holding raw, whose largest |value|
// is most.
func (d *Device) store(s [4]int, t core.DType, raw []byte, most, headroom float64) (*Tensor, error) {
	tn, err := d.newTensor(s, t)
	if err != nil {
		return nil, err
	}
	tn.bound = max(most, headroom)
	if err := tn.buf.Write(0, raw); err != nil {
		tn.Close()
		return nil, err
	}
	return tn, nil
}

// f32Bytes views float32 data as the bytes the device reads.
func f32Bytes(data []float32) []byte {
	if len(data) == 0 {
		return nil
	}
	return unsafe.Slice((*byte)(unsafe.Pointer(&data[0])), 4*len(data))
}

// Magnitude returns the largest |x| of data and whether every x is finite.
func Magnitude(data []float32) (most float64, finite bool) {
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
	if err := t.usable(); err != nil {
		return err
	}
	s := t.shape
	if t.owner != nil || t.strides != [3]int{s[1] * s[2] * s[3], s[2] * s[3], s[3]} {
		return errorf(core.ErrShape, "Write needs the dense tensor Upload made, not a view")
	}
	if n := s[0] * s[1] * s[2] * s[3]; len(data) != n {
		return errorf(core.ErrShape, "shape %v needs %d values, got %d", s, n, len(data))
	}
	raw, err := Encode(t, data)
	if err != nil {
		return err
	}
	return t.writeRaw(t.offset, raw)
}

// Encode checks values to be written into t (finite, within its bound,
// fitting its type) and returns them as the device stores them.
func Encode(t *Tensor, data []float32) ([]byte, error) {
	if err := CheckWrite(t, data); err != nil {
		return nil, err
	}
	return EncodeValues(t, data)
}

// CheckWrite refuses data that Write into t may not hold: NaN or Inf, or
// values beyond t's bound, which calls prepared on t were checked
// against.
func CheckWrite(t *Tensor, data []float32) error {
	most, finite := Magnitude(data)
	if !finite {
		return errorf(core.ErrNonFinite, "Write data holds NaN or Inf")
	}
	if bound := t.root().bound; most > bound {
		return errorf(core.ErrOverflow, "Write data holds |x| = %g, beyond this tensor's bound %g (calls prepared on it were checked against that); upload a new tensor", most, bound)
	}
	return nil
}

// EncodeValues is data as t's element type stores it, checked against
// that type's range only (finiteness and t's bound are the caller's).
func EncodeValues(t *Tensor, data []float32) ([]byte, error) {
	if t.dtype == core.Float32 {
		return f32Bytes(data), nil // a view of data, copied by writeRaw
	}
	if t.dtype.Quantized() {
		raw, _, err := quantBytes(t.dtype, data)
		return raw, err
	}
	bits, err := core.HalfBits(t.dtype, data)
	if err != nil {
		return nil, err
	}
	return halfBytes(bits), nil
}

// WriteInts stores xs as int32 words from element offset off of a
// float32-sized tensor (lengths and page tables the kernels read as ints).
func WriteInts(t *Tensor, off int, xs []int) error { return t.writeRaw(off, Int32Words(xs)) }

// Int32Words is xs as the little-endian int32 words the kernels read.
func Int32Words(xs []int) []byte {
	raw := make([]byte, 4*len(xs))
	for i, x := range xs {
		binary.LittleEndian.PutUint32(raw[4*i:], uint32(int32(x)))
	}
	return raw
}

// writeRaw stores encoded elements from element offset off of t's buffer
// (a quantized type: whole blocks, quants and scales, as quantBytes encodes
// them).
func (t *Tensor) writeRaw(off int, raw []byte) error {
	n := len(raw) / t.dtype.Bytes()
	if t.dtype.Quantized() {
		block := quantBlock(t.dtype)
		n = len(raw) / t.dtype.StorageBytes(block) * block
	}
	return EachSpan(t.dtype, n, 0, t.elements(), off, n, func(from, to ByteSpan) error {
		return t.buf.Write(to.Off, raw[from.Off:from.Off+from.N])
	})
}

// elements is how many elements t's buffer holds (its owner's).
func (t *Tensor) elements() int {
	s := t.root().shape
	return s[0] * s[1] * s[2] * s[3]
}

// newTensor allocates a dense, uninitialised tensor.
func (d *Device) newTensor(s [4]int, dt core.DType) (*Tensor, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if err := d.checkOpen(); err != nil {
		return nil, err
	}
	n := s[0] * s[1] * s[2] * s[3]
	// Whole 32-bit words: kernels read halves two a word; q8_0 and q4_0
	// in whole 16-byte texels, which vec4 texel views read their last
	// scales in.
	align := uint64(4)
	if dt.Quantized() {
		align = 16
	}
	buf, err := d.dev.NewBuffer((uint64(dt.StorageBytes(n)) + align - 1) / align * align)
	if err != nil {
		return nil, DeviceError(err)
	}
	t := &Tensor{dev: d, buf: buf, dtype: dt, shape: s, strides: [3]int{s[1] * s[2] * s[3], s[2] * s[3], s[3]}, finite: true, bound: math.Inf(1)}
	d.tensors[t] = struct{}{}
	return t, nil
}

// Shape is the tensor's four logical axes.
func (t *Tensor) Shape() [4]int {
	if t == nil {
		return [4]int{}
	}
	return t.shape
}

// DType is the element type the tensor is stored in.
func (t *Tensor) DType() core.DType {
	if t == nil {
		return core.Float32
	}
	return t.dtype
}

// SwapAxes12 returns a view that reads this tensor's axes 1 and 2 swapped:
// data uploaded as (B, L, H, d) becomes the (B, H, L, d) tensor attention
// expects, without a copy. The view shares the data and is freed with it.
func (t *Tensor) SwapAxes12() *Tensor {
	if t == nil {
		return nil
	}
	v := &Tensor{dev: t.dev, buf: t.buf, owner: t.root(), dtype: t.dtype, shape: t.shape, offset: t.offset, strides: t.strides, finite: t.finite}
	v.shape[1], v.shape[2] = t.shape[2], t.shape[1]
	v.strides[1], v.strides[2] = t.strides[2], t.strides[1]
	return v
}

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
	if t == nil {
		return nil, errorf(core.ErrShape, "Columns of a nil tensor")
	}
	if t.root().closed.Load() {
		return nil, errorf(core.ErrClosed, "tensor used after Close")
	}
	w := t.shape[3]
	if first < 0 || n < 1 || first > w-n {
		return nil, errorf(core.ErrShape, "Columns(%d, %d) of rows %d wide: want 0 <= first and 1 <= n with first+n <= %d", first, n, w, w)
	}
	if t.dtype.Quantized() {
		if block := quantBlock(t.dtype); first%block != 0 || n%block != 0 {
			return nil, errorf(core.ErrShape, "Columns(%d, %d) of a %v tensor: %v rows are read in whole blocks of %d, so first and n must be multiples of %d", first, n, t.dtype, t.dtype, block, block)
		}
	}
	v := &Tensor{dev: t.dev, buf: t.buf, owner: t.root(), dtype: t.dtype, shape: t.shape, offset: t.offset + first, strides: t.strides, finite: t.finite}
	v.shape[3] = n
	return v, nil
}

// leadingColumnsOf reports whether v is k's leading columns (a view
// k.Columns(0, n) or one of its views: k's buffer, offset, strides, type
// and first three axes), so a call may read V from K's rows.
func leadingColumnsOf(v, k *Tensor) bool {
	return v.root() == k.root() && v.offset == k.offset && v.strides == k.strides && v.dtype == k.dtype &&
		[3]int(v.shape[:3]) == [3]int(k.shape[:3]) && v.shape[3] <= k.shape[3]
}

// usable is ErrShape for a nil tensor and ErrClosed once t (its owner)
// is closed.
func (t *Tensor) usable() error {
	if t == nil {
		return errorf(core.ErrShape, "nil tensor")
	}
	if t.root().closed.Load() {
		return errorf(core.ErrClosed, "tensor used after Close")
	}
	return nil
}

func (t *Tensor) root() *Tensor {
	if t.owner != nil {
		return t.owner
	}
	return t
}

// layout is where the tensor lies in its buffer, in kernel terms.
func (t *Tensor) layout() pipelines.Layout {
	l := pipelines.Layout{Offset: t.offset, Strides: t.strides, Type: t.dtype}
	if q, ok := t.dtype.Quant(); ok {
		l.Scales = q.QuantBytes(t.elements()) / 2 // the scales follow the quants' bytes, in halves
	}
	return l
}

// Download copies the tensor to the host as dense row-major (B,H,L,d)
// float32 data; halves widen exactly.
func (t *Tensor) Download() ([]float32, error) {
	if err := t.usable(); err != nil {
		return nil, err
	}
	s := t.shape
	out := make([]float32, s[0]*s[1]*s[2]*s[3])
	if t.strides == [3]int{s[1] * s[2] * s[3], s[2] * s[3], s[3]} {
		return out, t.readRow(t.offset, out)
	}
	i := 0
	for b := 0; b < s[0]; b++ {
		for h := 0; h < s[1]; h++ {
			for l := 0; l < s[2]; l++ {
				off := t.offset + b*t.strides[0] + h*t.strides[1] + l*t.strides[2]
				if err := t.readRow(off, out[i:i+s[3]]); err != nil {
					return nil, err
				}
				i += s[3]
			}
		}
	}
	return out, nil
}

// At reads one element, widened to float32: b, h, l and i index the
// batch, head, position and last axes. It reads a few bytes from the
// device (a q8_0 or q4_0 tensor its 32-value block), for a value shown
// alone.
func (t *Tensor) At(b, h, l, i int) (float32, error) {
	if err := t.usable(); err != nil {
		return 0, err
	}
	s := t.shape
	if b < 0 || b >= s[0] || h < 0 || h >= s[1] || l < 0 || l >= s[2] || i < 0 || i >= s[3] {
		return 0, errorf(core.ErrShape, "index (%d, %d, %d, %d) outside shape %v", b, h, l, i, s)
	}
	off := t.offset + b*t.strides[0] + h*t.strides[1] + l*t.strides[2] + i
	if t.dtype.Quantized() {
		n := quantBlock(t.dtype)
		base := off / n * n
		block := make([]float32, n)
		if err := t.readRow(base, block); err != nil {
			return 0, err
		}
		return block[off-base], nil
	}
	var v [1]float32
	err := t.readRow(off, v[:])
	return v[0], err
}

// readRow fills dst with the elements from element offset off, widened.
func (t *Tensor) readRow(off int, dst []float32) error {
	if t.dtype == core.Float32 {
		return t.buf.ReadFloat32(uint64(off), dst)
	}
	if t.dtype.Quantized() {
		// Whole blocks: their quant bytes, then their scales.
		sp := byteSpans(t.dtype, t.elements(), off, len(dst))
		raw := make([]byte, sp[0].N+sp[1].N)
		if err := t.buf.Read(sp[0].Off, raw[:sp[0].N]); err != nil {
			return err
		}
		if err := t.buf.Read(sp[1].Off, raw[sp[0].N:]); err != nil {
			return err
		}
		quants := raw[:sp[0].N]
		scales := make([]uint16, sp[1].N/2)
		for i := range scales {
			scales[i] = binary.LittleEndian.Uint16(raw[int(sp[0].N)+2*i:])
		}
		q, _ := t.dtype.Quant()
		copy(dst, q.Dequantize(quants, scales))
		return nil
	}
	raw := make([]byte, 2*len(dst))
	if err := t.buf.Read(uint64(2*off), raw); err != nil {
		return err
	}
	for i := range dst {
		dst[i] = core.Widen(t.dtype, binary.LittleEndian.Uint16(raw[2*i:]))
	}
	return nil
}

// CloseTensors closes each of ts (nil ones too, which do nothing).
func CloseTensors(ts ...*Tensor) {
	for _, t := range ts {
		t.Close()
	}
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
