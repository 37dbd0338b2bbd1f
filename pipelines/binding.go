package pipelines

import (
	"github.com/vkattn/vkattn/core"
)

// A plan bound: the attention kernel's spec, bindings and parameter
// block, and each chunk's windows, parameters and grid (BindChunk).

// The attention kernel's descriptor bindings (attention.comp's
// layout(binding = N)), in order.
const (
	BindParams = iota
	BindQ
	BindK
	BindV
	BindMask
	BindBoolMask
	BindLengths
	BindO
	BindLSE
	BindWeights // the split-K partials in split-K plans
	BindKeyPadding
	BindHeads     // per-head sinks and ALiBi slopes
	BindPageTable // paged K and V
	BindWA        // additive plans only
	attentionBindings
)

// The backward pass's further bindings (attention_backward.comp), after
// the forward's: dO, D per row, the gradients, each row's sink gradient.
const (
	BindDO = attentionBindings + iota
	BindRowD
	BindDQ
	BindDK
	BindDV
	BindDSink
	BindDWA // additive: each key row's share of dw_a
	backwardBindings
)

// Kernel is the kernel of an attention plan.
func (p *AttentionPlan) Kernel() KernelSpec {
	s := &p.Shape
	bindings := attentionBindingTypes(*p)
	if p.Variant.Family == FamilyCoopmat {
		spec := coopSpec{
			WorkGroup: int32(p.WorkGroup), D4: int32(p.DMax / 4), BR: int32(p.TileRows), BC: int32(p.KeyTile),
			MM: int32(p.Matrix), NSG: int32(p.WorkGroup / p.SubgroupSize), SG: int32(p.SubgroupSize),
			Masked: s.anyMaskSpec(), Variants: s.variants(),
			QType: typeSpec(s.Q.Type), KType: typeSpec(s.K.Type), VType: typeSpec(s.V.Type),
		}
		return KernelSpec{Variant: p.Variant, Bindings: bindings, Subgroup: uint32(p.SubgroupSize), Spec: spec.constants()}
	}
	if p.Variant.Family == FamilyTiled {
		spec := tiledSpec{
			WorkGroup: int32(p.WorkGroup), D4: int32(p.DMax / 4), DV4: int32(p.DVMax / 4),
			BR: int32(p.TileRows), BC: int32(p.KeyTile), LPR: int32(p.LanesPerRow), RPL: int32(p.RowsPerLane),
			Masked: s.anyMaskSpec(), Variants: s.variants(), Paged: boolSpec(s.Paging > 0), VInK: boolSpec(s.VFromK),
			QType: typeSpec(s.Q.Type), KType: typeSpec(s.K.Type), VType: typeSpec(s.V.Type),
		}
		return KernelSpec{Variant: p.Variant, Bindings: bindings, Subgroup: uint32(p.SubgroupSize), Spec: spec.constants()}
	}
	spec := rowSpec{
		WorkGroup: int32(p.WorkGroup), WG: int32(p.WorkGroup), D4: int32(p.DMax / 4),
		Rows: int32(p.Rows), Keys: int32(p.KeyTile), Share: int32(max(p.SharedLoads, 1)),
		Masked: s.maskSpec(), Variants: s.variants(), Paged: boolSpec(s.Paging > 0),
		QType: typeSpec(s.Q.Type), KType: typeSpec(s.K.Type), VType: typeSpec(s.V.Type),
		Halves8: boolSpec(p.Halves8), QuantBlocks: boolSpec(p.QuantBlocks), Mask4: p.mask4Spec(),
	}
	return KernelSpec{Variant: p.Variant, Bindings: bindings, Spec: spec.constants()}
}

// attentionBindingTypes are the attention kernel's bindings for plan p:
// storage buffers but the Params block, Q, K, V and the masks through
// texel views on the texel path, w_a for additive plans only.
func attentionBindingTypes(p AttentionPlan) []core.BindingType {
	s := &p.Shape
	bindings := make([]core.BindingType, attentionBindings)
	for i := range bindings {
		bindings[i] = core.StorageBuffer
	}
	bindings[BindParams] = core.UniformBuffer
	if p.Path == core.TexelLoadPath {
		bindings[BindQ], bindings[BindK], bindings[BindV] = p.inputBinding(s.Q.Type), p.inputBinding(s.K.Type), p.inputBinding(s.V.Type)
		bindings[BindMask], bindings[BindBoolMask], bindings[BindKeyPadding] = core.UniformTexelR32F, core.UniformTexelR32F, core.UniformTexelR32F
		if p.MaskVec4 {
			bindings[BindMask] = core.UniformTexelRGBA32F
		}
		if p.BoolMaskVec4 {
			bindings[BindBoolMask] = core.UniformTexelRGBA32F
		}
	}
	if !p.Additive {
		bindings = bindings[:BindWA]
	}
	return bindings
}

// inputBinding is the texel view of a Q, K or V input of type t: halves
// through 32-bit-word texels, eight a texel, where the plan reads them so
// (Halves8).
func (p *AttentionPlan) inputBinding(t core.DType) core.BindingType {
	if p.Halves8 && t.Half() {
		return core.UniformTexelRGBA32UI
	}
	return texelBinding(t, p.Vec4)
}

// boolSpec is a boolean specialization constant (a VkBool32).
func boolSpec(b bool) int32 {
	if b {
		return 1
	}
	return 0
}

// CombineKernel is the split-K combine pass (one variant per device).
func CombineKernel() KernelSpec {
	return KernelSpec{Variant: Variant{Family: FamilyCombine}, Bindings: combineBindingTypes()}
}

// combineBindingTypes are the combine pass's bindings: Params, the
// partials, O, LSE, lengths, per-head data.
func combineBindingTypes() []core.BindingType {
	b := make([]core.BindingType, combineBindHeads+1)
	for i := range b {
		b[i] = core.StorageBuffer
	}
	b[combineBindParams] = core.UniformBuffer
	return b
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
	flagSinks    = 128
	// Bottom-right alignment to each item's key length: for the causal
	// mask, and for the window and ALiBi positions.
	flagAlignCausal = 256
	flagAlignPos    = 512
)

// chunkParams are the Params of one chunk of a split call.
type chunkParams struct {
	mask, boolMask int // element offsets of the masks in their windows
	b0, batch      int // the chunk's first batch item; the call's batch size
	lse, weights   int // element offsets of the LSE and weights in their windows
	l0, rows       int // the chunk's first query row; the call's query rows L
	h0             int // the chunk's first query head
}

// attentionParams is the std140 Params block of
// shaders/attention_params.glsl, member for member (TestBlocksMatchGLSL
// checks names, types, order and each SPIR-V's offsets).
type attentionParams struct {
	Dims    [4]int32 // L, S, d_k, d_v
	Heads   [4]int32 // B, H/H_kv, flags, causal shift
	Offsets [4]int32 // Q, K, V, O
	QStride [4]int32
	KStride [4]int32
	VStride [4]int32
	OStride [4]int32
	MStride [4]int32
	BStride [4]int32
	Scaling [4]float32
	Split   [4]int32 // splits, keys per split, row blocks, H
	Chunk   [4]int32 // mask and boolean-mask window offsets, b0, B
	Outs    [4]int32 // LSE and weights window offsets, L, l0
	Window  [4]int32 // left, right, bottom-right shift of the chunk's rows, h0
	Variant [4]float32
	Page    [4]int32 // positions per page, page-table entries per item
	Grads   [4]int32 // the backward: dO, dQ, dK, dV window offsets
}

// ivec4 packs four ints as a std140 ivec4.
func ivec4(a, b, c, d int) [4]int32 { return [4]int32{int32(a), int32(b), int32(c), int32(d)} }

// strides4 is a view's strides as an ivec4 (the last is unused).
func strides4(s [3]int) [4]int32 { return ivec4(s[0], s[1], s[2], 0) }

// kvStrides4 is a K or V view's strides and, last, where its q8_0 or
// q4_0 scales start (in halves; unused for the float types).
func kvStrides4(l Layout) [4]int32 { return ivec4(l.Strides[0], l.Strides[1], l.Strides[2], l.Scales) }

// encode is the block's bytes.
func (p *attentionParams) encode() []byte { return encodeBlock(*p) }

// newAttentionParams is the Params of a chunk whose shape is cs (its
// extents, and its tensors' offsets within their windows).
func newAttentionParams(p *AttentionPlan, cs *AttentionShape, c chunkParams) *attentionParams {
	x := &p.Scalars
	flags := cs.maskFlags()
	m, bm := cs.Mask.Strides, cs.BoolMask.Strides
	// Key j is visible to query row t when j <= t + shift; a chunk's rows
	// count from its first row l0.
	shift := c.l0
	switch x.Causal {
	case core.CausalTopLeft:
		flags |= flagCausal
	case core.CausalBottomRight:
		flags |= flagCausal
		shift += cs.S - c.rows
	}
	if cs.Lengths {
		flags |= flagLengths
	}
	if cs.LSE {
		flags |= flagLSE
	}
	if cs.Weights {
		flags |= flagWeights
	}
	flags |= cs.Variants.flags()
	if x.AlignToKeyLengths && cs.Lengths {
		flags |= flagAlignPos
		if x.Causal == core.CausalBottomRight {
			flags |= flagAlignCausal
		}
	}
	return &attentionParams{
		Dims:    ivec4(cs.L, cs.S, cs.DK, cs.DV),
		Heads:   ivec4(cs.B, cs.H/cs.HKV, flags, shift),
		Offsets: ivec4(cs.Q.Offset, cs.K.Offset, cs.V.Offset, cs.O.Offset),
		QStride: strides4(cs.Q.Strides),
		KStride: kvStrides4(cs.K),
		VStride: kvStrides4(cs.V),
		OStride: strides4(cs.O.Strides),
		MStride: ivec4(m[0], m[1], m[2], m[3]),
		BStride: ivec4(bm[0], bm[1], bm[2], bm[3]),
		// The scale alone: the shader scales each dot product once
		// (pre-scaling q would break exact ties).
		Scaling: [4]float32{float32(x.Scale)},
		Split:   ivec4(p.Splits, p.SplitKeys, p.RowBlocks, cs.H),
		Chunk:   ivec4(c.mask, c.boolMask, c.b0, c.batch),
		Outs:    ivec4(c.lse, c.weights, c.rows, c.l0),
		Window:  ivec4(x.Window[0], x.Window[1], c.l0+cs.S-c.rows, c.h0),
		Variant: [4]float32{float32(x.Softcap)},
		Page:    ivec4(cs.Paging, cs.PagesPerItem, 0, 0),
	}
}

// ChunkDispatch is one chunk of a planned call as bound: the windows of
// its buffers (the others are bound whole), its parameter block, its grid
// and its attention work, and the combine pass's grid where the plan is
// split-K.
type ChunkDispatch struct {
	Windows       []Window
	Params        []byte
	Groups        [3]uint32
	FLOPs         float64
	CombineGroups [3]uint32
}

// BindChunk binds chunk c of p: each windowed buffer's window, and the
// parameters that locate the chunk's tensors in them.
func (p *AttentionPlan) BindChunk(dev core.DeviceInfo, c Chunk) (ChunkDispatch, error) {
	s := &p.Shape
	cs := *s // the chunk's shape: its extents, offsets within its windows
	cs.B, cs.H, cs.HKV, cs.L = c.nb, c.nh, c.nkv, c.nl
	extra := chunkParams{b0: c.b0, batch: s.B, l0: c.l0, rows: s.L, h0: c.h0}
	var d ChunkDispatch
	var err error
	if d.Windows, err = bindWindows(dev, chunkBindings(p, c, &cs, &extra)); err != nil {
		return d, err
	}
	d.Params = newAttentionParams(p, &cs, extra).encode()
	d.Groups = [3]uint32{0, uint32(cs.H), uint32(cs.B)}
	switch {
	case p.Splits > 0:
		d.Groups[0], d.Groups[1] = p.Grid[0], uint32(cs.HKV*p.RowBlocks)
	case p.Variant.Family == FamilyTiled || p.Variant.Family == FamilyCoopmat:
		d.Groups[0], d.Groups[1] = uint32(ceilDiv(c.nl*cs.H/cs.HKV, p.TileRows)), uint32(cs.HKV)
	default:
		d.Groups[0] = uint32(ceilDiv(c.nl, p.Rows*p.WorkGroup))
	}
	d.FLOPs = c.flops(s)
	if p.Splits > 0 {
		// A workgroup per row; rows past the x axis's limit continue on y.
		rows := cs.B * cs.H * cs.L
		x := min(rows, int(dev.Limits.MaxWorkGroupCount[0]))
		d.CombineGroups = [3]uint32{uint32(x), uint32(ceilDiv(rows, x)), 1}
	}
	return d, nil
}

// PartialsBytes is the size of the split-K partials buffer of p (0 when
// p is not split-K): per split and row, max, sum and the unnormalised
// d_v-wide output; one buffer serves every chunk in turn.
func (p *AttentionPlan) PartialsBytes() uint64 {
	if p.Splits == 0 {
		return 0
	}
	most := 0
	for _, c := range p.ChunkList() {
		most = max(most, c.nb*c.nh)
	}
	return 4 * uint64(most) * uint64(p.Shape.L) * uint64(p.Splits) * uint64(p.Shape.DV+2)
}
