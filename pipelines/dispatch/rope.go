package dispatch

import (
	"math"

	"github.com/vkattn/vkattn/core"
	"github.com/vkattn/vkattn/pipelines"
	"github.com/vkattn/vkattn/vk"
)

// RoPEArgs are the buffers and extents of a rotary embedding (rope.comp):
// rows of X, (B, Heads, N, D) at XOffset with XStrides over (B, Heads, N),
// rotated into Y, dense float32 of the same shape.
type RoPEArgs struct {
	X           *vk.Buffer
	XType       core.DType
	XOffset     int
	XStrides    [3]int
	Y           *vk.Buffer
	B, Heads, N int
	D, Rot      int // row width, rotated elements (even, <= D)
	Interleaved bool
	// Table holds float32 (cos, sin) pairs, Rot/2 per table row. With
	// Lengths nil, table row b*N + t is row t of batch item b's; with
	// Lengths (a KV cache's int32 key lengths), row t of item b reads
	// table row t + Lengths[b] - N, its position in the cache.
	Table, Lengths *vk.Buffer
}

// RoPE binds a rotary embedding of a's rows.
func (ks *Kernels) RoPE(a RoPEArgs) (*Step, error) {
	dev := ks.dev.Info.DeviceInfo
	total, err := checkRows(dev, "RoPE", [4]int{a.B, a.Heads, a.N, a.D},
		rowBuffer{"RoPE input", a.X, a.XType}, rowBuffer{"RoPE output", a.Y, core.Float32}, rowBuffer{"RoPE table", a.Table, core.Float32})
	if err != nil {
		return nil, err
	}
	k, err := ks.kernel(pipelines.RoPEKernel(a.XType))
	if err != nil {
		return nil, err
	}
	set, err := ks.bind(k, a.X, a.Y, a.Table, a.Lengths)
	if err != nil {
		return nil, err
	}
	n := total
	cols, rows, err := pipelines.Grid(dev, "RoPE", n)
	if err != nil {
		set.Close()
		return nil, err
	}
	flag := func(b bool) int32 {
		if b {
			return 1
		}
		return 0
	}
	push := pipelines.RoPEPush{
		Heads: int32(a.Heads), N: int32(a.N), D: int32(a.D), ROT: int32(a.Rot),
		Interleaved: flag(a.Interleaved), FromLengths: flag(a.Lengths != nil),
		XOffset: int32(a.XOffset), XStrideB: int32(a.XStrides[0]), XStrideH: int32(a.XStrides[1]), XStrideN: int32(a.XStrides[2]),
		Total: int32(n), RowPitch: int32(cols * pipelines.ElementWorkGroup),
	}.Bytes()
	st := &Step{owned: []closer{set}}
	st.dispatches = []dispatch{{kernel: k, set: set, groups: [3]uint32{uint32(cols), uint32(rows), 1}, push: push}}
	return st, nil
}

// rowBuffer is a buffer an elementwise kernel reads or writes, its
// elements of type t.
type rowBuffer struct {
	what string
	buf  *vk.Buffer
	t    core.DType
}

// checkRows checks an elementwise kernel over rows of shape (B, heads, N,
// D) for what: at most 2^31 elements in all, each buffer within the
// device's binding range. It returns the elements.
func checkRows(dev core.DeviceInfo, what string, shape [4]int, bufs ...rowBuffer) (int, error) {
	total := float64(shape[0]) * float64(shape[1]) * float64(shape[2]) * float64(shape[3])
	if total > math.MaxInt32 {
		return 0, pipelines.Limitf("%s of %.3g elements: at most 2^31", what, total)
	}
	for _, b := range bufs {
		if err := checkRange(dev, b.what, b.buf, false, false, b.t); err != nil {
			return 0, err
		}
	}
	return int(total), nil
}
