// Package pipelines holds vkattn's kernels in kernel terms: buffers,
// element strides, dimensions and flags. It plans each dispatch from the
// device's properties (load path, tile sizes, workgroup size, grid), records
// it once and replays it. It knows nothing of the root package's options;
// the root package translates them.
package pipelines

import (
	"encoding/binary"
	"fmt"
	"math"

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
	KeyPadding              *vk.Buffer // (B, S) float 0 / -inf, nil if none
	WA                      *vk.Buffer // additive plans: w_a, DK floats
}

// AttentionPlan is what the planner chose for one problem.
type AttentionPlan struct {
	Variant   string // SPIR-V variant name (shaders/manifest.txt)
	Path      LoadPath
	Vec4      bool // Q, K, V read four floats per load
	DMax      int  // compile-time bound on d_k and d_v
	Rows      int  // query rows per invocation
	KeyTile   int  // keys per online-softmax step (fixed by the shader: 1, with lazy rescaling)
	WorkGroup int  // invocations per workgroup
	// Split-K (flash-decoding): Splits > 0 splits the keys into Splits
	// chunks of SplitKeys, one per lane, with the rows of all query heads of
	// a KV head packed together (RowBlocks blocks of Rows rows per KV head);
	// a combine pass merges the partial results.
	Splits, SplitKeys, RowBlocks int
	// Additive: additive (Bahdanau) scores; Q and K are the projections.
	Additive bool
	Grid     [3]uint32
	Why      string // why this load path
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
	return fmt.Sprintf("kernel %s (load path %s: %s; %s), d_max %d, %d query rows/invocation, %d key per step, workgroup %d, grid %dx%dx%d (row blocks x heads x batch), online softmax with lazy rescaling, no L*S buffer",
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
	// Additive: additive scores w_a . tanh(q + k) instead of q . k.
	Additive bool
	// Tuning is the device's launch shapes; nil means DefaultTuning.
	Tuning *Tuning
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
	path, tuning, why, err := choosePath(dev, force, in.Tuning)
	if err != nil {
		return p, err
	}
	p.Path, p.Why = path, why
	p.Additive = in.Additive
	family := "attention_"
	if p.Additive {
		family = "additive_"
	}
	if !dev.SubgroupVote {
		return p, fmt.Errorf("attention: device %s has no subgroup vote operations in compute shaders (Vulkan 1.1 subgroupAny), which the kernel needs", dev.Name)
	}
	p.KeyTile = 1
	p.Vec4 = aligned && (p.Path == StoragePath || dev.TexelRGBA32F)
	shape := "scalar"
	if p.Vec4 {
		shape = "vec4"
	}
	p.Variant = family + p.Path.String() + "_" + shape
	p.Rows, p.WorkGroup = tuning.Rows[p.DMax], tuning.WorkGroup
	p.WorkGroup = min(p.WorkGroup, int(dev.Limits.MaxWorkGroupSize[0]), int(dev.Limits.MaxWorkGroupInvocations))
	if p.Rows < 1 {
		return p, fmt.Errorf("attention: tuning has no rows per invocation for d_max %d", p.DMax)
	}
	rowsPerGroup := p.Rows * p.WorkGroup
	p.Grid = [3]uint32{uint32((l + rowsPerGroup - 1) / rowsPerGroup), uint32(h), uint32(b)}
	names := [3]string{"query row blocks", "heads", "batch"}
	// Decode-like problems (few query rows per KV head, many keys) leave
	// most lanes idle and read K/V once per query head; split the keys over
	// lanes instead and pack each KV head's query rows together.
	packed := (h / in.HKV) * l
	if p.Vec4 && !in.Weights && !p.Additive && packed <= max(2*p.Rows, 8) && in.S >= 256 {
		p.SplitKeys = tuning.SplitKeys
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

// attentionKernel is the kernel of an attention plan, built once per device.
func (ks *Kernels) attentionKernel(p AttentionPlan) (*vk.Kernel, error) {
	in, mask := vk.StorageBuffer, vk.StorageBuffer
	if p.Path == TexelPath {
		in, mask = vk.UniformTexelR32F, vk.UniformTexelR32F
		if p.Vec4 {
			in = vk.UniformTexelRGBA32F
		}
	}
	bindings := []vk.BindingType{vk.UniformBuffer, in, in, in, mask, mask,
		vk.StorageBuffer, vk.StorageBuffer, vk.StorageBuffer, vk.StorageBuffer, mask}
	if p.Additive {
		bindings = append(bindings, vk.StorageBuffer) // w_a
	}
	return ks.get(vk.KernelSpec{
		Name:     fmt.Sprintf("%s/d%d/r%d/w%d", p.Variant, p.DMax, p.Rows, p.WorkGroup),
		Bindings: bindings,
		Spec:     []int32{int32(p.WorkGroup), int32(p.DMax / 4), int32(p.Rows), int32(p.WorkGroup)},
	}, p.Variant)
}

// combineKernel is the split-K combine pass (one variant per device).
func (ks *Kernels) combineKernel() (*vk.Kernel, error) {
	return ks.get(vk.KernelSpec{
		Name:     "attention_combine",
		Bindings: []vk.BindingType{vk.UniformBuffer, vk.StorageBuffer, vk.StorageBuffer, vk.StorageBuffer},
	}, "attention_combine")
}

// Flags of the Params block, as in shaders/attention.comp.
const (
	flagMask     = 1
	flagBoolMask = 2
	flagCausal   = 4
	flagLengths  = 8
	flagLSE      = 16
	flagWeights  = 32
	flagKeyPad   = 64
)

// attentionParams encodes the shaders' std140 Params block (attention_params.glsl).
func attentionParams(p AttentionPlan, x *AttentionArgs) []byte {
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
	if x.KeyPadding != nil {
		flags |= flagKeyPad
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
	scaling := make([]byte, 16)
	binary.LittleEndian.PutUint32(scaling, math.Float32bits(float32(x.Scale*math.Log2E)))
	out := append(int32Bytes(ints), scaling...)
	return append(out, int32Bytes([]int{p.Splits, p.SplitKeys, p.RowBlocks, x.H})...)
}

// Attention binds an attention call: its parameters, scratch buffers and
// descriptor sets, and the split-K combine pass when the plan has one.
func (ks *Kernels) Attention(p AttentionPlan, x AttentionArgs) (*Step, error) {
	info := ks.dev.Info
	texel := p.Path == TexelPath
	if p.Additive != (x.WA != nil) {
		return nil, fmt.Errorf("pipelines: additive plan %v with w_a %v", p.Additive, x.WA != nil)
	}
	for _, c := range []struct {
		what  string
		buf   *vk.Buffer
		texel bool
	}{
		{"Q", x.Q.Buffer, texel}, {"K", x.K.Buffer, texel}, {"V", x.V.Buffer, texel}, {"O", x.O.Buffer, false},
		{"LSE", x.LSE, false}, {"weights", x.Weights, false}, {"key padding", x.KeyPadding, texel},
	} {
		if err := checkRange(info, c.what, c.buf, c.texel, p.Vec4 && c.what != "key padding"); err != nil {
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
	k, err := ks.attentionKernel(p)
	if err != nil {
		return nil, err
	}
	st := &Step{}
	fail := func(err error) (*Step, error) {
		st.Close()
		return nil, err
	}
	params, err := ks.dev.NewBuffer(256)
	if err != nil {
		return nil, err
	}
	st.own(params)
	if err := params.Write(0, attentionParams(p, &x)); err != nil {
		return fail(err)
	}
	maskBuf := func(m *MaskView) *vk.Buffer {
		if m == nil {
			return nil
		}
		return m.Buffer
	}
	last := x.Weights // binding 9: weights, or the split-K partials
	var combine dispatch
	if p.Splits > 0 {
		// Per split and row: max, sum and the unnormalised d_v-wide output.
		n := uint64(x.B) * uint64(x.H) * uint64(x.L) * uint64(p.Splits) * uint64(x.DV+2)
		partials, err := ks.dev.NewBuffer(4 * n)
		if err != nil {
			return fail(err)
		}
		st.own(partials)
		if err := checkRange(info, "split-K partials", partials, false, false); err != nil {
			return fail(err)
		}
		last = partials
		if combine.kernel, err = ks.combineKernel(); err != nil {
			return fail(err)
		}
		if combine.set, err = ks.bind(combine.kernel, params, partials, x.O.Buffer, x.LSE); err != nil {
			return fail(err)
		}
		st.own(combine.set)
		rows := x.B * x.H * x.L
		combine.groups = [3]uint32{uint32((rows + 63) / 64), 1, 1}
	}
	args := []*vk.Buffer{params, x.Q.Buffer, x.K.Buffer, x.V.Buffer, maskBuf(x.Mask), maskBuf(x.BoolMask),
		x.Lengths, x.O.Buffer, x.LSE, last, x.KeyPadding}
	if p.Additive {
		args = append(args, x.WA)
	}
	set, err := ks.bind(k, args...)
	if err != nil {
		return fail(err)
	}
	st.own(set)
	st.dispatches = append(st.dispatches, dispatch{kernel: k, set: set, groups: p.Grid})
	if combine.kernel != nil {
		st.dispatches = append(st.dispatches, combine)
	}
	return st, nil
}

// bind binds buffers to a kernel's bindings in order; nil binds the dummy
// buffer (an absent optional input or output).
func (ks *Kernels) bind(k *vk.Kernel, bufs ...*vk.Buffer) (*vk.DescriptorSet, error) {
	args := make([]vk.Arg, len(bufs))
	for i, b := range bufs {
		var err error
		if args[i].Buffer, err = ks.or(b); err != nil {
			return nil, err
		}
	}
	return k.Bind(args)
}

// PrepareAttention binds an attention call and records it on its own.
func (ks *Kernels) PrepareAttention(p AttentionPlan, x AttentionArgs) (*Prepared, error) {
	st, err := ks.Attention(p, x)
	if err != nil {
		return nil, err
	}
	return ks.Prepare(st)
}
