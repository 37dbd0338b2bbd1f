package pipelines

import (
	"fmt"

	"github.com/vkattn/vkattn/core"
)

// backwardWorkGroup is the backward kernels' workgroup size.
const backwardWorkGroup = 64

// backwardBindingTypes are attention_backward.comp's bindings: the
// forward's, storage buffers but the Params block, then the pass's own.
func backwardBindingTypes() []core.BindingType {
	b := make([]core.BindingType, backwardBindings)
	for i := range b {
		b[i] = core.StorageBuffer
	}
	b[BindParams] = core.UniformBuffer
	return b
}

// backwardRowsBindingTypes are attention_backward_rows.comp's bindings
// (kv: the key pass's), by the element types of Q, K and V: the
// workgroup-tiled passes', but Q, K, V, dO, the log-sum-exp and the masks
// read through texel views (Q, K, V and dO four elements a texel), and D,
// which the query pass writes, read by the key pass through one.
func backwardRowsBindingTypes(kv bool, q, k, v core.DType) []core.BindingType {
	b := backwardBindingTypes()
	b[BindQ], b[BindK], b[BindV] = texelBinding(q, true), texelBinding(k, true), texelBinding(v, true)
	b[BindDO], b[BindLSE] = core.UniformTexelRGBA32UI, core.UniformTexelR32F
	b[BindMask], b[BindBoolMask], b[BindKeyPadding] = core.UniformTexelR32F, core.UniformTexelR32F, core.UniformTexelR32F
	if kv {
		b[BindRowD] = core.UniformTexelR32F
	}
	return b
}

// backwardPlan is how the backward of a forward plan runs: its query and
// key passes' families, the bound of d_k and d_v their registers hold and
// the rows a tile stages (the tiled passes), or the row kernels' rows per
// invocation, workgroup, rows per step and lanes sharing a row's loads.
type backwardPlan struct {
	families   [2]Family
	dMax, tile int
	rows       *backwardTuning
	share, wg  int
}

// variant is pass i's SPIR-V build (0 the query pass, 1 the key pass).
func (bp backwardPlan) variant(i int) Variant {
	if bp.rows != nil {
		return Variant{Family: bp.families[i], Path: core.TexelLoadPath, Vec4: true, Shared: true}
	}
	return Variant{Family: bp.families[i]}
}

// planBackward sizes the passes for p: d_max the power of two from 16
// that holds d_k and d_v (at most core.MaxBackwardWidth); on the row
// kernels where they take p (backwardRows), else tiles of up to 16 rows
// that fit the device's shared memory twice over with their LSE and D.
func planBackward(dev core.DeviceInfo, p AttentionPlan) (backwardPlan, error) {
	bp := backwardPlan{families: [2]Family{FamilyBackwardQ, FamilyBackwardKV}, dMax: 16}
	if p.Additive {
		bp.families = [2]Family{FamilyAdditiveBackwardQ, FamilyAdditiveBackwardKV}
	}
	s := &p.Shape
	for bp.dMax < max(s.DK, s.DV) {
		bp.dMax *= 2
	}
	if bp.dMax > core.MaxBackwardWidth {
		return bp, Limitf("the backward pass takes head widths up to %d, not d_k %d, d_v %d", core.MaxBackwardWidth, s.DK, s.DV)
	}
	if rows, _ := backwardRows(dev, &p); rows != nil {
		return planBackwardRows(dev, p, rows, bp)
	}
	bp.tile = min(16, int(dev.Limits.MaxSharedMemory)/(4*(2*bp.dMax+2)))
	switch {
	case bp.tile < 1:
		return bp, Limitf("the backward pass's tiles of d_max %d do not fit %d B of shared memory", bp.dMax, dev.Limits.MaxSharedMemory)
	case backwardWorkGroup > min(int(dev.Limits.MaxWorkGroupSize[0]), int(dev.Limits.MaxWorkGroupInvocations)):
		return bp, Limitf("the backward pass needs workgroups of %d invocations", backwardWorkGroup)
	}
	return bp, checkBackwardLoops(dev, s, backwardLoops(bp.tile, s.S, s.L, s.H/s.HKV))
}

// checkBackwardLoops refuses a backward whose invocations would loop n
// times on a device that ends loops earlier (SEMANTICS.md §14).
func checkBackwardLoops(dev core.DeviceInfo, s *AttentionShape, n int) error {
	if budget := dev.LoopBudget(); budget > 0 && n > budget {
		group := s.H / s.HKV
		return Limitf("on %s, which ends an invocation's loops after %d iterations, the backward of %d keys and %d query rows a KV head (%d heads of %d rows) would loop %d times",
			dev.Name, budget, s.S, group*s.L, group, s.L, n)
	}
	return nil
}

// planBackwardRows sizes the row kernels' passes: the tuning's rows per
// invocation for d_max and rows per step, the device's subgroup width
// sharing each row's loads, and the tuning's workgroup made whole
// subgroups (the lanes sharing a row must all be there).
func planBackwardRows(dev core.DeviceInfo, p AttentionPlan, t *backwardTuning, bp backwardPlan) (backwardPlan, error) {
	s := &p.Shape
	bp.families, bp.rows = [2]Family{FamilyBackwardRowsQ, FamilyBackwardRowsKV}, t
	bp.share, _ = sharedLoadWidth(dev)
	switch {
	case t.Rows[bp.dMax] < 1 || t.Step < 1 || t.WorkGroup < 1:
		return bp, fmt.Errorf("backward: tuning has no rows per invocation, rows a step or workgroup for d_max %d", bp.dMax)
	case bp.share < 1: // backwardRows took only devices that share
		return bp, fmt.Errorf("backward: the row passes need subgroups that share loads")
	}
	bp.wg = ceilDiv(t.WorkGroup, bp.share) * bp.share
	if bp.wg > min(int(dev.Limits.MaxWorkGroupSize[0]), int(dev.Limits.MaxWorkGroupInvocations)) {
		return bp, Limitf("the backward pass needs workgroups of %d invocations", bp.wg)
	}
	return bp, checkBackwardLoops(dev, s, backwardRowLoops(t.Step, s.S, s.L, s.H/s.HKV))
}

// backwardRows is the row kernels' tuning where the backward of p runs on
// them, else nil and why not: they read texel views, rows four elements a
// load, shared by the lanes of a subgroup, so they run where the forward
// plan is on the texel path with vec4 loads (the quirk table's plan of the
// device; forced storage loads and the GPU vendors' plans keep the tiled
// passes) and the device's subgroups share loads.
func backwardRows(dev core.DeviceInfo, p *AttentionPlan) (*backwardTuning, string) {
	t, source := backwardTuningOf(dev)
	if t == nil {
		return nil, "no row plan for " + dev.Name + " in the quirk table"
	}
	lim := &dev.Limits
	_, noShare := sharedLoadWidth(dev)
	switch {
	case p.Path != core.TexelLoadPath:
		return nil, "the forward runs on the " + p.Path.String() + " load path; the row passes read texel views"
	case !p.Vec4:
		return nil, "rows not read as vec4s: widths, offsets or strides not multiples of 4"
	case p.Additive:
		return nil, "additive scores"
	case noShare != "":
		return nil, "the row passes share rows across a subgroup: " + noShare
	case lim.MinStorageAlignment > 0 && lim.MinTexelAlignment%lim.MinStorageAlignment != 0:
		// D is written as a storage buffer and read through a texel view
		// of the same window.
		return nil, fmt.Sprintf("texel views align to %d B, storage windows to %d B", lim.MinTexelAlignment, lim.MinStorageAlignment)
	}
	return t, source
}

// BackwardPlan is the backward pass of a forward plan (planned with its
// LSE): its two kernels, a query pass (dQ, D, the sinks' shares) then a
// key pass (dK, dV), each an output row per invocation with no atomics,
// the other side's rows staged in shared memory; and its chunks. A call
// larger than one binding reaches runs as chunks of batch items and KV
// heads with their query heads, each bound through windows of the
// buffers (never blocks of query rows: a key's gradient sums every row).
// K and V are read unpaged. An additive plan's Q and K are the
// projections (d_k = d_a), and the key pass writes each key row's share
// of dw_a too.
//
// On the row kernels (Rows > 0, lavapipe's plan) an invocation owns Rows
// rows of its side, interleaved over a workgroup of WorkGroup lanes, and
// walks the other side's rows Step at a time, reading them through texel
// views and sharing each row's loads across the subgroup; no shared
// memory and no barriers.
type BackwardPlan struct {
	Forward AttentionPlan // the forward plan, on the loads the passes use
	Passes  [2]KernelSpec
	Chunks  []Chunk
	// The row kernels' shape; Rows 0 for the workgroup-tiled passes.
	Rows, WorkGroup, Step int
	Why                   string // which passes and why
}

func (bp BackwardPlan) String() string {
	if bp.Rows > 0 {
		return fmt.Sprintf("kernels %s and %s: %d rows per invocation, workgroup %d, %d rows of the other side a step, rows read through texel views and shared across the subgroup (%s)",
			bp.Passes[0].Variant, bp.Passes[1].Variant, bp.Rows, bp.WorkGroup, bp.Step, bp.Why)
	}
	return fmt.Sprintf("kernels %s and %s: workgroup-tiled, %d invocations a workgroup, the other side's rows staged in shared memory (%s)",
		bp.Passes[0].Variant, bp.Passes[1].Variant, backwardWorkGroup, bp.Why)
}

// PlanBackward plans the backward of the forward plan p.
func PlanBackward(dev core.DeviceInfo, p AttentionPlan) (BackwardPlan, error) {
	s := &p.Shape
	switch {
	case s.Paging > 0:
		return BackwardPlan{}, Limitf("the backward pass reads dense K and V, not pages")
	case !s.LSE:
		return BackwardPlan{}, Limitf("the backward pass needs the forward's log-sum-exp")
	case s.kvQuant():
		return BackwardPlan{}, Limitf("the backward pass reads float K and V, not a quantized type %v", core.QuantNames())
	}
	rows, why := backwardRows(dev, &p)
	if rows == nil {
		// The tiled passes read storage buffers, whatever the forward's path.
		p.Path, p.Vec4 = core.StorageLoadPath, false
		why = "workgroup-tiled passes: " + why
	} else {
		why = "row passes: " + why
	}
	chunks, err := backwardChunks(dev, &p)
	if err != nil {
		return BackwardPlan{}, err
	}
	bp, err := planBackward(dev, p)
	if err != nil {
		return BackwardPlan{}, err
	}
	plan := BackwardPlan{Forward: p, Chunks: chunks, Why: why}
	if rows != nil {
		plan.Rows, plan.WorkGroup, plan.Step = rows.Rows[bp.dMax], bp.wg, rows.Step
		spec := backwardRowsSpec{
			WorkGroup: int32(plan.WorkGroup), WG: int32(plan.WorkGroup), D4: int32(bp.dMax / 4),
			Rows: int32(plan.Rows), Step: int32(plan.Step), Share: int32(bp.share),
			Masked: s.maskSpec(), Variants: s.variants(),
			QType: typeSpec(s.Q.Type), KType: typeSpec(s.K.Type), VType: typeSpec(s.V.Type),
		}.constants()
		for i := range bp.families {
			plan.Passes[i] = KernelSpec{Variant: bp.variant(i), Bindings: backwardRowsBindingTypes(i == 1, s.Q.Type, s.K.Type, s.V.Type), Spec: spec}
		}
		return plan, nil
	}
	spec := backwardSpec{
		WorkGroup: backwardWorkGroup, Masked: s.anyMaskSpec(), Variants: s.variants(),
		QType: typeSpec(s.Q.Type), KType: typeSpec(s.K.Type), VType: typeSpec(s.V.Type),
		DMax: int32(bp.dMax), Tile: int32(bp.tile),
	}.constants()
	for i := range bp.families {
		plan.Passes[i] = KernelSpec{Variant: bp.variant(i), Bindings: backwardBindingTypes(), Spec: spec}
	}
	return plan, nil
}

// backwardChunks are the chunks of the backward of p: the whole call,
// else as many KV heads of one batch item at a time as fit.
func backwardChunks(dev core.DeviceInfo, p *AttentionPlan) ([]Chunk, error) {
	x := &p.Shape
	var lastErr error
	fit := func(cs []Chunk) []Chunk {
		for _, c := range cs {
			for _, b := range backwardChunkBindings(p, c, nil, nil, nil) {
				_, err := bindWindow(dev, b.what, b.window(), b.texel, b.vec4, b.dtype)
				if err == nil && b.binding == BindRowD && b.texel {
					// The query pass writes D through a storage view.
					_, err = bindWindow(dev, b.what, b.window(), false, false, b.dtype)
				}
				if err != nil {
					lastErr = err
					return nil
				}
			}
		}
		return cs
	}
	if cs := fit([]Chunk{headsChunk(x, 0, x.B, 0, x.HKV)}); cs != nil {
		return cs, nil
	}
	for g := x.HKV; g >= 1; g-- {
		if cs := fit(headsChunks(x, g)); cs != nil {
			return cs, nil
		}
	}
	return nil, Limitf("one KV head of one batch item does not fit a binding in the backward pass (which does not split query rows): %v", lastErr)
}

// backwardOffsets are the element offsets, within their windows, of a
// chunk's backward buffers: dO, dQ, dK, dV (Params.grads), and the rows
// of D, the sink shares and dw_a's shares, which must equal the LSE's and
// dK's (the kernels index them alike).
type backwardOffsets struct{ dO, dQ, dK, dV, rowD, dSink, dWA int }

// backwardChunkBindings are the forward's windowed buffers of chunk c
// (chunkBindings) and the backward's own: dO, D, the sink shares and dQ
// over the chunk's query rows, dK and dV (and dw_a's shares) over its key
// rows, all dense. Planning passes nil for cs, extra and off.
func backwardChunkBindings(p *AttentionPlan, c Chunk, cs *AttentionShape, extra *chunkParams, off *backwardOffsets) []chunkBinding {
	if cs == nil {
		cs, extra, off = new(AttentionShape), new(chunkParams), new(backwardOffsets)
	}
	s := &p.Shape
	bs := chunkBindings(p, c, cs, extra)
	// The row passes (on the texel path) read dO, the log-sum-exp and D
	// through texel views; D's window serves the query pass's writes too.
	texel := p.Path == core.TexelLoadPath
	for i := range bs {
		if bs[i].binding == BindLSE {
			bs[i].texel = texel
		}
	}
	rows := span{(c.b0*s.H + c.h0) * s.L, ((c.b0+c.nb-1)*s.H+c.h0+c.nh-1)*s.L + s.L}
	keys := span{(c.b0*s.HKV + c.hk0) * s.S, ((c.b0+c.nb-1)*s.HKV+c.hk0+c.nkv-1)*s.S + s.S}
	times := func(sp span, n int) span { return span{sp.lo * n, sp.hi * n} }
	bs = append(bs,
		chunkBinding{BindDO, "dO", times(rows, s.DV), texel, texel, core.Float32, &off.dO, nil},
		chunkBinding{BindRowD, "D", rows, texel, false, core.Float32, &off.rowD, nil},
		chunkBinding{BindDSink, "sink shares", rows, false, false, core.Float32, &off.dSink, nil},
		chunkBinding{BindDQ, "dQ", times(rows, s.DK), false, false, core.Float32, &off.dQ, nil},
		chunkBinding{BindDK, "dK", times(keys, s.DK), false, false, core.Float32, &off.dK, nil},
		chunkBinding{BindDV, "dV", times(keys, s.DV), false, false, core.Float32, &off.dV, nil})
	if p.Additive {
		bs = append(bs, chunkBinding{BindDWA, "dw_a shares", times(keys, s.DK), false, false, core.Float32, &off.dWA, nil})
	}
	return bs
}

// BackwardDispatch is one chunk of a backward pass as bound: the windows
// of its buffers, its parameter block and the grids of its two passes.
type BackwardDispatch struct {
	Windows []Window
	Params  []byte
	Groups  [2][3]uint32
}

// BindChunk binds chunk c of the backward pass.
func (bp *BackwardPlan) BindChunk(dev core.DeviceInfo, c Chunk) (BackwardDispatch, error) {
	p := &bp.Forward
	s := &p.Shape
	cs := *s
	cs.B, cs.H, cs.HKV = c.nb, c.nh, c.nkv
	extra := chunkParams{b0: c.b0, batch: s.B, rows: s.L, h0: c.h0}
	var off backwardOffsets
	var d BackwardDispatch
	var err error
	if d.Windows, err = bindWindows(dev, backwardChunkBindings(p, c, &cs, &extra, &off)); err != nil {
		return d, err
	}
	if off.rowD != extra.lse || off.dSink != extra.lse || (p.Additive && off.dWA != off.dK) {
		return d, Limitf("the backward's row buffers start at other offsets than the log-sum-exp's and dK's")
	}
	params := newAttentionParams(p, &cs, extra)
	params.Grads = ivec4(off.dO, off.dQ, off.dK, off.dV)
	d.Params = params.encode()
	perGroup := backwardWorkGroup
	if bp.Rows > 0 {
		perGroup = bp.Rows * bp.WorkGroup
	}
	for i, pass := range []struct{ rows, heads int }{{s.L, cs.H}, {s.S, cs.HKV}} {
		d.Groups[i] = [3]uint32{uint32(ceilDiv(pass.rows, perGroup)), uint32(pass.heads), uint32(cs.B)}
		for a, g := range d.Groups[i] {
			if g > dev.Limits.MaxWorkGroupCount[a] {
				return d, Limitf("the backward pass needs %v workgroups, beyond the device's grid %v", d.Groups[i], dev.Limits.MaxWorkGroupCount)
			}
		}
	}
	return d, nil
}
