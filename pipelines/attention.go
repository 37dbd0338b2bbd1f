// Package pipelines holds vkattn's kernels in kernel terms: buffers,
// element strides, dimensions and flags. It plans each dispatch from the
// device's properties (load path, tile sizes, workgroup size, grid), records
// it once and replays it. It knows nothing of the root package's options;
// the root package translates them.
package pipelines

import (
	"context"
	"encoding/binary"
	"fmt"
	"math"
	"time"

	"github.com/vkattn/vkattn/shaders"
	"github.com/vkattn/vkattn/vk"
)

// LoadPath is how a kernel reads its inputs.
type LoadPath int

const (
	// AutoPath lets the planner choose per device.
	AutoPath LoadPath = iota
	// TexelPath reads through R32F uniform texel buffers (fast on lavapipe).
	TexelPath
	// StoragePath reads plain storage buffers (the portable path).
	StoragePath
)

func (p LoadPath) String() string {
	return [...]string{"auto", "texel", "storage"}[p]
}

// View is a tensor of four logical axes (batch, head, position, width) in a
// buffer: the last axis is contiguous, the others have element strides, so
// (B,H,L,d) and (B,L,H,d) layouts are read in place.
type View struct {
	Buffer  *vk.Buffer
	Offset  int    // elements
	Strides [3]int // batch, head, position, in elements
}

// MaskView is a float mask over (B, H, L, S) with element strides; a stride
// of 0 broadcasts that axis.
type MaskView struct {
	Buffer  *vk.Buffer
	Strides [4]int
}

// Causal alignment codes.
const (
	CausalNone = iota
	CausalTopLeft
	CausalBottomRight
)

// AttentionArgs is one attention call in kernel terms.
type AttentionArgs struct {
	B, H, HKV, L, S, DK, DV int
	Q, K, V, O              View
	Scale                   float64
	Causal                  int
	Mask                    *MaskView  // additive, nil if none
	BoolMask                *MaskView  // boolean, uploaded as 0 / -inf, nil if none
	Lengths                 *vk.Buffer // int32 key lengths [B] then query lengths [B]; nil if none
	LSE                     *vk.Buffer // (B, H, L) float, nil if not wanted
	Weights                 *vk.Buffer // (B, H, L, S) float, nil if not wanted
}

// AttentionPlan is what the planner chose for one problem.
type AttentionPlan struct {
	Variant   string // SPIR-V variant name (shaders/manifest.txt)
	Path      LoadPath
	Vec4      bool // Q, K, V read four floats per load
	DMax      int  // compile-time bound on d_k and d_v
	Rows      int  // query rows per invocation
	KeyTile   int  // keys per online-softmax step (fixed by the shader)
	WorkGroup int  // invocations per workgroup
	// Split-K (flash-decoding): Splits > 0 splits the keys into Splits
	// chunks of SplitKeys, one per lane, with the rows of all query heads of
	// a KV head packed together (RowBlocks blocks of Rows rows per KV head);
	// a combine pass merges the partial results.
	Splits, SplitKeys, RowBlocks int
	Grid                         [3]uint32
	Why                          string // why this load path
}

func (p AttentionPlan) String() string {
	loads := "scalar loads"
	if p.Vec4 {
		loads = "vec4 loads"
	}
	if p.Splits > 0 {
		return fmt.Sprintf("kernel %s (load path %s: %s; %s), split-K: %d splits of %d keys, one per lane, query heads of each KV head packed (%d row blocks of %d rows), d_max %d, workgroup %d, grid %dx%dx%d (split blocks x KV heads*row blocks x batch), then attention_combine; online softmax, no L*S buffer",
			p.Variant, p.Path, p.Why, loads, p.Splits, p.SplitKeys, p.RowBlocks, p.Rows, p.DMax, p.WorkGroup, p.Grid[0], p.Grid[1], p.Grid[2])
	}
	return fmt.Sprintf("kernel %s (load path %s: %s; %s), d_max %d, %d query rows/invocation, key tile %d, workgroup %d, grid %dx%dx%d (row blocks x heads x batch), online softmax, no L*S buffer",
		p.Variant, p.Path, p.Why, loads, p.DMax, p.Rows, p.KeyTile, p.WorkGroup, p.Grid[0], p.Grid[1], p.Grid[2])
}

// MaxHeadWidth is the widest d_k or d_v the attention kernel supports.
const MaxHeadWidth = 256

// LimitError is a problem that does not fit the device or the kernel.
type LimitError struct{ Msg string }

func (e *LimitError) Error() string { return e.Msg }

func limitf(format string, args ...any) error {
	return &LimitError{Msg: fmt.Sprintf(format, args...)}
}

// PlanInput is what the planner needs to know about a problem.
type PlanInput struct {
	B, H, HKV, L, S, DK, DV int
	// Aligned: Q, K and V have widths, offsets and strides that are
	// multiples of 4, so rows can be read as vec4s.
	Aligned bool
	// Weights: the (B,H,L,S) weights are wanted (rules out split-K).
	Weights bool
	// Force overrides the load path (AutoPath: choose).
	Force LoadPath
}

// PlanAttention picks the kernel variant and launch shape for a problem on
// a device.
func PlanAttention(dev vk.PhysicalDevice, in PlanInput) (AttentionPlan, error) {
	var p AttentionPlan
	b, h, l, dk, dv, aligned, force := in.B, in.H, in.L, in.DK, in.DV, in.Aligned, in.Force
	width := max(dk, dv)
	if width > MaxHeadWidth {
		return p, limitf("head width %d (d_k=%d, d_v=%d); the attention kernel supports widths 1..%d", width, dk, dv, MaxHeadWidth)
	}
	p.DMax = 16
	for p.DMax < width {
		p.DMax *= 2
	}
	// Load path: lavapipe turns storage-buffer loads in loops into per-lane
	// loops and runs texel fetches ~20x faster (vulkan-notes.md); real GPUs
	// read storage buffers at full speed.
	p.Path = force
	if p.Path == AutoPath {
		if (dev.DriverID == vk.DriverIDLavapipe || dev.Type == vk.DeviceCPU) && dev.TexelR32F {
			p.Path, p.Why = TexelPath, "CPU driver, texel fetches beat storage loads"
		} else {
			p.Path, p.Why = StoragePath, "GPU, storage buffers are the portable fast path"
		}
	} else {
		p.Why = "forced"
	}
	if p.Path == TexelPath && !dev.TexelR32F {
		return p, fmt.Errorf("texel load path: device %s cannot use R32_SFLOAT uniform texel buffers", dev.Name)
	}
	p.KeyTile = 4
	p.Vec4 = aligned && (p.Path == StoragePath || dev.TexelRGBA32F)
	shape := "scalar"
	if p.Vec4 {
		shape = "vec4"
	}
	if p.Path == TexelPath {
		// One SIMD-8 lane group per workgroup; several rows per lane reuse
		// each fetched key and value element. The unrolled tile body grows
		// with Rows*DMax, so wide heads get fewer rows.
		p.Variant, p.WorkGroup = "attention_texel_"+shape, 8
		p.Rows = map[int]int{16: 8, 32: 8, 64: 4, 128: 2, 256: 1}[p.DMax]
	} else {
		p.Variant, p.WorkGroup, p.Rows = "attention_storage_"+shape, 64, 1
	}
	p.WorkGroup = min(p.WorkGroup, int(dev.Limits.MaxWorkGroupSize[0]), int(dev.Limits.MaxWorkGroupInvocations))
	rowsPerGroup := p.Rows * p.WorkGroup
	p.Grid = [3]uint32{uint32((l + rowsPerGroup - 1) / rowsPerGroup), uint32(h), uint32(b)}
	names := [3]string{"query row blocks", "heads", "batch"}
	// Decode-like problems (few query rows per KV head, many keys) leave
	// most lanes idle and read K/V once per query head; split the keys over
	// lanes instead and pack each KV head's query rows together.
	packed := (h / in.HKV) * l
	if p.Vec4 && !in.Weights && packed <= max(2*p.Rows, 8) && in.S >= 256 {
		p.SplitKeys = 64
		if p.Path == TexelPath {
			p.SplitKeys = 128
		}
		p.Splits = (in.S + p.SplitKeys - 1) / p.SplitKeys
		p.RowBlocks = (packed + p.Rows - 1) / p.Rows
		p.Variant += "_split"
		p.Grid = [3]uint32{uint32((p.Splits + p.WorkGroup - 1) / p.WorkGroup), uint32(in.HKV * p.RowBlocks), uint32(b)}
		names = [3]string{"key split blocks", "KV heads x row blocks", "batch"}
	}
	for i, g := range p.Grid {
		if g > dev.Limits.MaxWorkGroupCount[i] {
			return p, limitf("%d %s exceed the device's %d workgroups on axis %d", g, names[i], dev.Limits.MaxWorkGroupCount[i], i)
		}
	}
	return p, nil
}

// checkRange refuses a buffer the kernel could not address whole: the shader
// indexes with 32-bit ints, texel views are limited in elements and storage
// bindings in bytes.
func checkRange(dev vk.PhysicalDevice, what string, buf *vk.Buffer, texel, vec4 bool) error {
	if buf == nil {
		return nil
	}
	elems := buf.Size() / 4
	if elems > math.MaxInt32 {
		return limitf("%s has %d elements, more than 2^31", what, elems)
	}
	if texel {
		if vec4 {
			elems /= 4
		}
		if elems > uint64(dev.Limits.MaxTexelBufferElements) {
			return limitf("%s has %d elements, the device's texel buffers hold %d", what, elems, dev.Limits.MaxTexelBufferElements)
		}
		return nil
	}
	if buf.Size() > uint64(dev.Limits.MaxStorageBufferRange) {
		return limitf("%s is %d bytes, the device's storage buffer range is %d", what, buf.Size(), dev.Limits.MaxStorageBufferRange)
	}
	return nil
}

// Attention is the attention kernel family on one device: it builds each
// variant once and keeps it.
type Attention struct {
	dev     *vk.Device
	kernels map[string]*vk.Kernel
	dummy   *vk.Buffer // bound where an optional input or output is absent
}

// NewAttention prepares the attention family on dev. Kernels are built
// lazily on first use.
func NewAttention(dev *vk.Device) *Attention {
	return &Attention{dev: dev, kernels: map[string]*vk.Kernel{}}
}

// Close frees the family's kernels and buffers.
func (a *Attention) Close() {
	for _, k := range a.kernels {
		k.Close()
	}
	a.kernels = map[string]*vk.Kernel{}
	a.dummy.Close()
	a.dummy = nil
}

func (a *Attention) kernel(p AttentionPlan) (*vk.Kernel, error) {
	key := fmt.Sprintf("%s/d%d/r%d/w%d", p.Variant, p.DMax, p.Rows, p.WorkGroup)
	if k, ok := a.kernels[key]; ok {
		return k, nil
	}
	code, err := shaders.SPIRV(p.Variant)
	if err != nil {
		return nil, err
	}
	in, mask := vk.StorageBuffer, vk.StorageBuffer
	if p.Path == TexelPath {
		in, mask = vk.UniformTexelR32F, vk.UniformTexelR32F
		if p.Vec4 {
			in = vk.UniformTexelRGBA32F
		}
	}
	k, err := a.dev.NewKernel(vk.KernelSpec{
		Name:  key,
		SPIRV: code,
		Bindings: []vk.BindingType{vk.UniformBuffer, in, in, in, mask, mask,
			vk.StorageBuffer, vk.StorageBuffer, vk.StorageBuffer, vk.StorageBuffer},
		Spec: []int32{int32(p.WorkGroup), int32(p.DMax / 4), int32(p.Rows), int32(p.WorkGroup)},
	})
	if err != nil {
		return nil, err
	}
	a.kernels[key] = k
	return k, nil
}

// combineKernel is the split-K combine pass (one variant per device).
func (a *Attention) combineKernel() (*vk.Kernel, error) {
	const key = "attention_combine"
	if k, ok := a.kernels[key]; ok {
		return k, nil
	}
	code, err := shaders.SPIRV(key)
	if err != nil {
		return nil, err
	}
	k, err := a.dev.NewKernel(vk.KernelSpec{
		Name:     key,
		SPIRV:    code,
		Bindings: []vk.BindingType{vk.UniformBuffer, vk.StorageBuffer, vk.StorageBuffer, vk.StorageBuffer},
	})
	if err != nil {
		return nil, err
	}
	a.kernels[key] = k
	return k, nil
}

// Flags of the Params block, as in shaders/attention.comp.
const (
	flagMask     = 1
	flagBoolMask = 2
	flagCausal   = 4
	flagLengths  = 8
	flagLSE      = 16
	flagWeights  = 32
)

// params encodes the shaders' std140 Params block (attention_params.glsl).
func params(p AttentionPlan, x *AttentionArgs) []byte {
	flags := 0
	var m, bm [4]int
	if x.Mask != nil {
		flags |= flagMask
		m = x.Mask.Strides
	}
	if x.BoolMask != nil {
		flags |= flagBoolMask
		bm = x.BoolMask.Strides
	}
	shift := 0
	switch x.Causal {
	case CausalTopLeft:
		flags |= flagCausal
	case CausalBottomRight:
		flags |= flagCausal
		shift = x.S - x.L
	}
	if x.Lengths != nil {
		flags |= flagLengths
	}
	if x.LSE != nil {
		flags |= flagLSE
	}
	if x.Weights != nil {
		flags |= flagWeights
	}
	ints := []int{
		x.L, x.S, x.DK, x.DV,
		x.B, x.H / x.HKV, flags, shift,
		x.Q.Offset, x.K.Offset, x.V.Offset, x.O.Offset,
		x.Q.Strides[0], x.Q.Strides[1], x.Q.Strides[2], 0,
		x.K.Strides[0], x.K.Strides[1], x.K.Strides[2], 0,
		x.V.Strides[0], x.V.Strides[1], x.V.Strides[2], 0,
		x.O.Strides[0], x.O.Strides[1], x.O.Strides[2], 0,
		m[0], m[1], m[2], m[3],
		bm[0], bm[1], bm[2], bm[3],
	}
	split := []int{p.Splits, p.SplitKeys, p.RowBlocks, x.H}
	out := make([]byte, 4*len(ints)+16+16)
	for i, v := range ints {
		binary.LittleEndian.PutUint32(out[4*i:], uint32(int32(v)))
	}
	binary.LittleEndian.PutUint32(out[4*len(ints):], math.Float32bits(float32(x.Scale*math.Log2E)))
	for i, v := range split {
		binary.LittleEndian.PutUint32(out[4*len(ints)+16+4*i:], uint32(int32(v)))
	}
	return out
}

// Prepared is an attention dispatch recorded once, replayable with Run.
type Prepared struct {
	Plan       AttentionPlan
	params     *vk.Buffer
	set        *vk.DescriptorSet
	partials   *vk.Buffer        // split-K partial results
	combineSet *vk.DescriptorSet // split-K combine pass
	cmds       *vk.Commands
}

// Prepare checks args against the plan and the device, binds the buffers
// and records the dispatch.
func (a *Attention) Prepare(p AttentionPlan, x AttentionArgs) (*Prepared, error) {
	info := a.dev.Info
	texel := p.Path == TexelPath
	for _, c := range []struct {
		what  string
		buf   *vk.Buffer
		texel bool
	}{
		{"Q", x.Q.Buffer, texel}, {"K", x.K.Buffer, texel}, {"V", x.V.Buffer, texel}, {"O", x.O.Buffer, false},
		{"LSE", x.LSE, false}, {"weights", x.Weights, false},
	} {
		if err := checkRange(info, c.what, c.buf, c.texel, p.Vec4); err != nil {
			return nil, err
		}
	}
	for _, mv := range []*MaskView{x.Mask, x.BoolMask} {
		if mv != nil {
			if err := checkRange(info, "mask", mv.Buffer, texel, false); err != nil {
				return nil, err
			}
		}
	}
	k, err := a.kernel(p)
	if err != nil {
		return nil, err
	}
	if a.dummy == nil {
		if a.dummy, err = a.dev.NewBuffer(16); err != nil {
			return nil, err
		}
	}
	or := func(b *vk.Buffer) *vk.Buffer {
		if b == nil {
			return a.dummy
		}
		return b
	}
	maskBuf := func(m *MaskView) *vk.Buffer {
		if m == nil {
			return a.dummy
		}
		return m.Buffer
	}
	pr := &Prepared{Plan: p}
	if pr.params, err = a.dev.NewBuffer(256); err != nil {
		return nil, err
	}
	if err := pr.params.Write(0, params(p, &x)); err != nil {
		pr.Close()
		return nil, err
	}
	last := or(x.Weights) // binding 9: weights, or the split-K partials
	var combine *vk.Kernel
	if p.Splits > 0 {
		// Per split and row: max, sum and the unnormalised d_v-wide output.
		n := uint64(x.B) * uint64(x.H) * uint64(x.L) * uint64(p.Splits) * uint64(x.DV+2)
		if pr.partials, err = a.dev.NewBuffer(4 * n); err != nil {
			pr.Close()
			return nil, err
		}
		if err := checkRange(info, "split-K partials", pr.partials, false, false); err != nil {
			pr.Close()
			return nil, err
		}
		last = pr.partials
		if combine, err = a.combineKernel(); err != nil {
			pr.Close()
			return nil, err
		}
		pr.combineSet, err = combine.Bind([]vk.Arg{{Buffer: pr.params}, {Buffer: pr.partials}, {Buffer: x.O.Buffer}, {Buffer: or(x.LSE)}})
		if err != nil {
			pr.Close()
			return nil, err
		}
	}
	pr.set, err = k.Bind([]vk.Arg{
		{Buffer: pr.params}, {Buffer: x.Q.Buffer}, {Buffer: x.K.Buffer}, {Buffer: x.V.Buffer},
		{Buffer: maskBuf(x.Mask)}, {Buffer: maskBuf(x.BoolMask)}, {Buffer: or(x.Lengths)},
		{Buffer: x.O.Buffer}, {Buffer: or(x.LSE)}, {Buffer: last},
	})
	if err != nil {
		pr.Close()
		return nil, err
	}
	if pr.cmds, err = a.dev.NewCommands(2); err != nil {
		pr.Close()
		return nil, err
	}
	if err := pr.cmds.Begin(); err != nil {
		pr.Close()
		return nil, err
	}
	pr.cmds.Timestamp(0)
	if err := pr.cmds.Dispatch(k, pr.set, p.Grid); err != nil {
		pr.Close()
		return nil, err
	}
	pr.cmds.Barrier()
	if combine != nil {
		rows := x.B * x.H * x.L
		if err := pr.cmds.Dispatch(combine, pr.combineSet, [3]uint32{uint32((rows + 63) / 64), 1, 1}); err != nil {
			pr.Close()
			return nil, err
		}
		pr.cmds.Barrier()
	}
	pr.cmds.Timestamp(1)
	if err := pr.cmds.End(); err != nil {
		pr.Close()
		return nil, err
	}
	return pr, nil
}

// Run submits the recorded dispatch and waits for it; it returns the device
// time when the device has timestamps (0 otherwise).
func (pr *Prepared) Run(ctx context.Context) (time.Duration, error) {
	if err := pr.cmds.Submit(); err != nil {
		return 0, err
	}
	if err := pr.cmds.Wait(ctx); err != nil {
		return 0, err
	}
	t, _, err := pr.cmds.Elapsed(0, 1)
	return t, err
}

// Close frees what Prepare made.
func (pr *Prepared) Close() {
	if pr == nil {
		return
	}
	pr.cmds.Close()
	pr.set.Close()
	pr.combineSet.Close()
	pr.partials.Close()
	pr.params.Close()
}
