package dispatch

import (
	"github.com/vkattn/vkattn/core"
	"github.com/vkattn/vkattn/pipelines"
	"github.com/vkattn/vkattn/vk"
)

// Q8StoreArgs are the buffers and extents of a quantization (a type of core.QuantTypes)
// (q8_store.comp): rows of X, (B, Heads, N, D) at XOffset with XStrides
// over (B, Heads, N), each quantized to element RowDst[r] of Y, a buffer
// of YType whose scales start at half Scales.
type Q8StoreArgs struct {
	X           *vk.Buffer
	XType       core.DType
	XOffset     int
	XStrides    [3]int
	B, Heads, N int
	D           int // a multiple of the block (32)
	Y           *vk.Buffer
	YType       core.DType // a quantized type; the zero value, Float32, is Q8_0
	Scales      int
	RowDst      *vk.Buffer // int32, one per row of X
	// Status's first word is set to 1 where a block's scale passed
	// float16's range (clamped to its largest finite value).
	Status *vk.Buffer
}

// Q8Store binds the quantization of a's rows.
func (ks *Kernels) Q8Store(a Q8StoreArgs) (*Step, error) {
	dev := ks.dev.Info.DeviceInfo
	if a.YType == core.Float32 {
		a.YType = core.Q8_0
	}
	if !a.YType.Quantized() {
		return nil, pipelines.Limitf("quantization into %v: want one of %v", a.YType, core.QuantNames())
	}
	what := a.YType.String() + " quantization"
	q, _ := a.YType.Quant()
	block := q.Block
	if a.D%block != 0 || !a.XType.Valid() {
		return nil, pipelines.Limitf("%s of rows of %d %v: want float rows of whole blocks of %d", what, a.D, a.XType, block)
	}
	total, err := checkRows(dev, what, [4]int{a.B, a.Heads, a.N, a.D},
		rowBuffer{"quantized input", a.X, a.XType}, rowBuffer{a.YType.String() + " output", a.Y, a.YType})
	if err != nil {
		return nil, err
	}
	k, err := ks.kernel(pipelines.Q8StoreKernel(a.XType, a.YType))
	if err != nil {
		return nil, err
	}
	set, err := ks.bind(k, a.X, a.Y, a.RowDst, a.Status)
	if err != nil {
		return nil, err
	}
	blocks := total / block
	cols, rows, err := pipelines.Grid(dev, what, blocks)
	if err != nil {
		set.Close()
		return nil, err
	}
	push := pipelines.Q8StorePush{
		Heads: int32(a.Heads), N: int32(a.N), D: int32(a.D),
		XOffset: int32(a.XOffset), XStrideB: int32(a.XStrides[0]), XStrideH: int32(a.XStrides[1]), XStrideN: int32(a.XStrides[2]),
		Blocks: int32(blocks), Scales: int32(a.Scales), RowPitch: int32(cols * pipelines.ElementWorkGroup),
	}.Bytes()
	st := &Step{owned: []closer{set}}
	st.dispatches = []dispatch{{kernel: k, set: set, groups: [3]uint32{uint32(cols), uint32(rows), 1}, push: push}}
	return st, nil
}

// Record records the step into c: its parameter blocks, a barrier, then
// each dispatch with a barrier after it. The step must outlive c's
// execution.
func (s *Step) Record(c *vk.Commands) error {
	if err := s.recordUpdates(c); err != nil {
		return err
	}
	if len(s.updates) > 0 {
		c.Barrier()
	}
	return recordDispatches(c, s.dispatches)
}
