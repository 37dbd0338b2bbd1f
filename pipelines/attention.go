// Package pipelines plans vkattn's kernels in kernel terms: layouts,
// element strides, dimensions, flags and the device's description
// (core.DeviceInfo). It decides each dispatch from the device's properties
// (load path, tile sizes, workgroup size, grid, chunks, buffer windows and
// parameter blocks) without a driver: it builds and tests with cgo off.
// Package dispatch binds a plan to the device's buffers and records it.
// It knows nothing of the root package's options; the root package
// lowers them.
package pipelines

import (
	"fmt"
	"math"

	"github.com/vkattn/vkattn/core"
)

// Layout is where a tensor of four logical axes (batch, head, position,
// width) lies in its buffer: the last axis is contiguous, the others have
// element strides, so (B,H,L,d) and (B,L,H,d) layouts are read in place.
type Layout struct {
	Offset  int        // elements
	Strides [3]int     // batch, head, position, in elements
	Type    core.DType // element type
	// Scales is where a quantized tensor's block scales start in its
	// buffer, in halves: its quants (core.QuantType.QuantBits each) fill
	// the buffer's first 2*Scales bytes, the float16 scales follow, one
	// per block.
	Scales int
}

// kvQuant reports whether K or V is quantized: the plan reads them with a
// QUANT_LOADS build.
func (s *AttentionShape) kvQuant() bool { return s.K.Type.Quantized() || s.V.Type.Quantized() }

// quantSpan is the whole buffer of a quantized layout, quants and
// scales, in bytes (the unit of its spans): a kernel reads both, so it
// binds all of it. Such buffers are allocated in whole 16-byte texels
// (vec4 texel views read the last scales).
func (l Layout) quantSpan() span {
	q, _ := l.Type.Quant()
	elements := 2 * l.Scales * 8 / q.QuantBits // the quants' bytes, as elements
	return span{0, (l.Type.StorageBytes(elements) + 15) &^ 15}
}

// DenseLayout is the layout of a dense row-major (b, h, l, w) tensor.
func DenseLayout(b, h, l, w int) Layout {
	return Layout{Strides: [3]int{h * l * w, l * w, w}}
}

// aligned reports whether rows of width w can be read as vec4s.
func (l Layout) aligned(w int) bool { return l.alignedTo(4, w) }

// alignedTo reports whether rows of width w start and end on multiples of
// n elements.
func (l Layout) alignedTo(n, w int) bool {
	return w%n == 0 && l.Offset%n == 0 && l.Strides[0]%n == 0 && l.Strides[1]%n == 0 && l.Strides[2]%n == 0
}

// halves8 reports whether Q, K and V include float16 or bfloat16 inputs
// and each can be read eight halves a texel: rows of whole 16-byte texels.
func (s *AttentionShape) halves8() bool {
	return rowsAlignedWhere(core.DType.Half, 8, rowLayout{s.Q, s.DK}, rowLayout{s.K, s.DK}, rowLayout{s.V, s.DV})
}

// quantBlocks reports whether K or V is quantized and each such input has
// rows of whole blocks (of every quantized type: core.QuantBlockMultiple).
func (s *AttentionShape) quantBlocks() bool {
	return rowsAlignedWhere(core.DType.Quantized, core.QuantBlockMultiple(), rowLayout{s.K, s.DK}, rowLayout{s.V, s.DV})
}

// rowLayout is an input's layout and the width of its rows.
type rowLayout struct {
	l Layout
	w int
}

// rowsAlignedWhere reports whether some of inputs are of a type `is`
// selects and each such input has rows aligned to n elements.
func rowsAlignedWhere(is func(core.DType) bool, n int, inputs ...rowLayout) bool {
	found := false
	for _, in := range inputs {
		if !is(in.l.Type) {
			continue
		}
		if !in.l.alignedTo(n, in.w) {
			return false
		}
		found = true
	}
	return found
}

// MaskLayout says whether a call has a float mask over (B, H, L, S) and
// its element strides; a stride of 0 broadcasts that axis.
type MaskLayout struct {
	Given   bool
	Strides [4]int
}

// AttentionShape is an attention call without its buffers: extents, where
// Q, K, V and O lie in their buffers, and which masks, lengths and outputs
// it has. It is all the planner reads of a call.
type AttentionShape struct {
	B, H, HKV, L, S, DK, DV int
	Q, K, V, O              Layout
	Mask                    MaskLayout // additive
	BoolMask                MaskLayout // the boolean masks folded into one 0 / -inf mask
	Lengths                 bool       // per-batch key and query lengths
	KeyPadding              bool       // (B, S) 0 / -inf
	LSE, Weights            bool       // outputs wanted
	// The score variants of SEMANTICS.md §4.1 the call uses (their values
	// are Scalars and AttentionArgs).
	Variants ScoreVariants
	// Paging > 0: K and V are pools of Pages pages of Paging positions
	// (K.Strides and V.Strides are page, head and position strides), key j
	// of item b at row j % Paging of page PageTable[b][j / Paging], with
	// PagesPerItem table entries per item (S <= PagesPerItem * Paging).
	Paging, Pages, PagesPerItem int
	// VFromK: V is the leading DV columns of K's rows (multi-head latent
	// attention's values are its latent keys without the rotary columns):
	// V's layout is K's and the caller binds K's buffer as V. The tiled
	// kernels then stage K alone and read V from its tile.
	VFromK bool
}

// DenseShape is the shape of a call of dense row-major tensors with no
// masks, lengths or extra outputs.
func DenseShape(b, h, hkv, l, s, dk, dv int) AttentionShape {
	return AttentionShape{B: b, H: h, HKV: hkv, L: l, S: s, DK: dk, DV: dv,
		Q: DenseLayout(b, h, l, dk), K: DenseLayout(b, hkv, s, dk), V: DenseLayout(b, hkv, s, dv), O: DenseLayout(b, h, l, dv)}
}

// vec4 reports whether mask m is given and can be read four keys a
// texel: its keys contiguous and its rows starting on multiples of 4 (so
// a step's four keys from a multiple of 4 are one texel).
func (m MaskLayout) vec4() bool {
	st := m.Strides
	return m.Given && st[3] == 1 && st[0]%4 == 0 && st[1]%4 == 0 && st[2]%4 == 0
}

// mask4Spec is the row kernel's MASK4 specialization constant: the flag
// bits of the masks read four keys a fetch.
func (p *AttentionPlan) mask4Spec() int32 {
	var bits int32
	if p.MaskVec4 {
		bits |= flagMask
	}
	if p.BoolMaskVec4 {
		bits |= flagBoolMask
	}
	return bits
}

// Scalars are the values of an attention call that its kernels read from
// their parameter block rather than plan for.
type Scalars struct {
	Scale   float64
	Causal  core.Causal
	Window  [2]int  // left, right; -1 unbounded (shapes with Window)
	Softcap float64 // c > 0 (shapes with Softcap)
	// AlignToKeyLengths: bottom-right positions count from each item's key
	// length (in the lengths buffer) instead of S.
	AlignToKeyLengths bool
}

// AttentionPlan is what the planner chose for one problem.
type AttentionPlan struct {
	Variant Variant
	Path    core.LoadPath
	core.KernelLayout
	Why string // why this load path
	// Shape is the call planned and Scalars its values: binding its
	// buffers reads the chunks, windows and parameters from the plan and
	// never plans again.
	Shape   AttentionShape
	Scalars Scalars
}

// LimitError is a problem that does not fit the device or the kernel.
type LimitError struct{ Msg string }

func (e *LimitError) Error() string { return e.Msg }

func Limitf(format string, args ...any) error {
	return &LimitError{Msg: fmt.Sprintf(format, args...)}
}

// PlanInput is what the planner needs to know about a problem: its shape
// and how to plan it.
type PlanInput struct {
	AttentionShape
	// Force overrides the load path (AutoLoadPath: choose).
	Force core.LoadPath
	// Float32Products keeps float16 inputs off the cooperative matrices:
	// P V in float32, as on every other device (core.Options).
	Float32Products bool
	// Additive: additive scores w_a . tanh(q + k) instead of q . k.
	Additive bool
	// core.Tuning is the device's launch shapes; nil means DefaultTuning.
	Tuning *core.Tuning
	// Scalars are the call's values, kept in the plan for its binding.
	Scalars Scalars
}

// PlanAttention picks the kernel variant, launch shape and (for a call
// larger than one binding reaches) the split into chunks for a problem on
// a device. The plan is complete: dispatch binds buffers to it.
func PlanAttention(dev core.DeviceInfo, in PlanInput) (AttentionPlan, error) {
	p := AttentionPlan{Shape: in.AttentionShape, Scalars: in.Scalars}
	b, h, l, dk, dv, force := in.B, in.H, in.L, in.DK, in.DV, in.Force
	// Rows read as vec4s need 4-aligned widths, offsets and strides.
	aligned := in.Q.aligned(dk) && in.K.aligned(dk) && in.V.aligned(dv)
	width := max(dk, dv)
	switch {
	case in.Additive && width > core.MaxRowWidth: // Q and K are the projections: their width is d_a
		return p, Limitf("head width %d (d_a=%d, the projections' width; d_v=%d); additive attention supports widths 1..%d", width, dk, dv, core.MaxRowWidth)
	case width > core.MaxHeadWidth:
		return p, Limitf("head width %d (d_k=%d, d_v=%d); the attention kernels support widths 1..%d", width, dk, dv, core.MaxHeadWidth)
	case in.VFromK && (in.V != in.K || dv > dk):
		return p, fmt.Errorf("attention: V as K's leading columns needs V's layout to be K's (V %+v, K %+v) and d_v <= d_k (d_v %d, d_k %d)", in.V, in.K, dv, dk)
	}
	// Heads wider than the row kernels take run on the tiled kernels, on
	// every device that can run them; d_v takes its own bucket there.
	wide := width > core.MaxRowWidth
	p.DMax, p.DVMax = core.DMaxOf(width), core.DMaxOf(width)
	if wide {
		// At least 32: the lanes of a row split d_v's bound in whole vec4
		// slots, and 16 leaves four lanes a row, whose share of a wide
		// d_k then overflows a lane's registers (a narrower V must never
		// need more than a wider one).
		p.DVMax = max(core.DMaxOf(dv), 32)
	}
	if wide && force == core.TexelLoadPath {
		return p, Limitf("head width %d (d_k=%d, d_v=%d) runs on the tiled kernels only (rows wider than %d do not fit one invocation's registers), which read storage buffers, not the forced texel load path", width, dk, dv, core.MaxRowWidth)
	}
	path, tuning, why, err := choosePath(dev, force, in.Tuning)
	if err != nil {
		return p, err
	}
	if wide && path != core.StorageLoadPath {
		why = fmt.Sprintf("heads wider than %d run on the tiled kernels, which read storage buffers (the tuning's %s path: %s)", core.MaxRowWidth, path, why)
		path, tuning = core.StorageLoadPath, tuningOr(dev, in.Tuning).For(core.StorageLoadPath)
	}
	p.Path, p.Why = path, why
	p.Additive = in.Additive
	if err := in.checkTypes(); err != nil {
		return p, err
	}
	p.Vec4 = aligned && (p.Path == core.StorageLoadPath || dev.TexelWords4)
	p.KeyTile = tuning.Keys
	if p.Additive || !p.Vec4 {
		// One key per step for additive scores (each costs d tanh, so the
		// loop-carried writes that more keys save are a small share, and
		// the unrolled tanh body compiled several times longer) and for
		// scalar loads (odd widths, rare; four clamped loads per vec4 slot
		// made the 4-key body slow to compile).
		p.KeyTile = 1
	}
	if p.KeyTile < 1 {
		return p, fmt.Errorf("attention: tuning has no keys per step")
	}
	if ok, err := planCoopmat(dev, &in, &p); ok || err != nil {
		return p, err
	}
	tiles := tuningOr(dev, in.Tuning).Tiled
	if wide {
		tiles = wideTiles(dev, in.Tuning)
	}
	if tiles != nil && p.Path == core.StorageLoadPath && !p.Additive {
		if ok, err := planTiled(dev, &in, tiles, &p); ok || err != nil {
			return p, err
		}
	}
	if wide { // every tuning has a shape for them (DefaultTuning's)
		return p, fmt.Errorf("attention: no tiled kernel shape for head width %d in the tuning (%s)", width, tuningOr(dev, in.Tuning).Source)
	}
	p.Variant = Variant{Family: FamilyAttention, Path: p.Path, Vec4: p.Vec4}
	if p.Additive {
		p.Variant.Family = FamilyAdditive
	}
	p.Rows, p.WorkGroup = tuning.Rows[p.DMax], WholeSubgroups(dev, tuning.WorkGroup)
	if p.Rows < 1 {
		return p, fmt.Errorf("attention: tuning has no rows per invocation for d_max %d", p.DMax)
	}
	rowsPerGroup := p.Rows * p.WorkGroup
	p.Grid = [3]uint32{uint32((l + rowsPerGroup - 1) / rowsPerGroup), uint32(h), uint32(b)}
	p.planSplitK(&in, tuning)
	if err := fitLoops(dev, &in, &p); err != nil {
		return p, err
	}
	p.chooseTexelReads(dev, &in, tuning)
	return p, finishPlan(dev, &p)
}

// splitKeys makes p a split-K plan of splits blocks of SplitKeys keys (set
// by the caller) with each KV head's query rows packed: the row kernels
// take a split a lane, with no more rows per lane than the KV head has
// packed rows (a lane's rows past them would be computed and thrown
// away); the tiled kernels a split a workgroup.
func (p *AttentionPlan) splitKeys(splits int) {
	s := &p.Shape
	packed := s.H / s.HKV * s.L
	p.Splits, p.Variant.SplitK = splits, true
	if p.Variant.Family == FamilyTiled {
		p.RowBlocks = ceilDiv(packed, p.TileRows)
		p.Grid = [3]uint32{uint32(p.Splits), uint32(s.HKV * p.RowBlocks), uint32(s.B)}
		return
	}
	p.Rows = min(p.Rows, pow2Above(packed))
	p.RowBlocks = ceilDiv(packed, p.Rows)
	p.Grid = [3]uint32{uint32(ceilDiv(p.Splits, p.WorkGroup)), uint32(s.HKV * p.RowBlocks), uint32(s.B)}
}

// gridAxes names the axes of p's grid, for errors.
func (p *AttentionPlan) gridAxes() [3]string {
	tiled := p.Variant.Family == FamilyTiled || p.Variant.Family == FamilyCoopmat
	switch {
	case p.Splits > 0 && tiled:
		return [3]string{"key splits", "KV heads x row blocks", "batch"}
	case p.Splits > 0:
		return [3]string{"key split blocks", "KV heads x row blocks", "batch"}
	case tiled:
		return [3]string{"query row blocks", "KV heads", "batch"}
	}
	return [3]string{"query row blocks", "heads", "batch"}
}

// sharedLoadWidth is the subgroup width the row kernels' shared K/V loads
// may assume (their lanes shuffle from SHARE = that many lanes), or why
// none: the kernel does not require a subgroup size, so only a device that
// runs every compute subgroup at one width (size control reporting
// min = max = SubgroupSize) has one. Intel (8..32) and MoltenVK (4..32)
// report the widest, and a subgroup may run narrower; a device without
// size control does not say.
func sharedLoadWidth(dev core.DeviceInfo) (int, string) {
	lim := dev.Limits
	sg := int(lim.SubgroupSize)
	switch {
	case !lim.SubgroupShuffle:
		return 0, "no subgroup shuffles in compute shaders"
	case sg < 2:
		return 0, fmt.Sprintf("subgroups of %d lane", sg)
	case !dev.SubgroupSizeControl:
		return 0, "no subgroup size control, so the width compute subgroups run at is not known"
	case !oneSubgroupWidth(dev):
		return 0, fmt.Sprintf("compute subgroups may run at %d..%d lanes, not one width", lim.MinSubgroupSize, lim.MaxSubgroupSize)
	}
	return sg, ""
}

// oneSubgroupWidth reports whether dev runs every compute subgroup at
// SubgroupSize lanes: size control reporting min = max = SubgroupSize.
func oneSubgroupWidth(dev core.DeviceInfo) bool {
	lim := dev.Limits
	return dev.SubgroupSizeControl && lim.MinSubgroupSize == lim.SubgroupSize && lim.MaxSubgroupSize == lim.SubgroupSize
}

// WholeSubgroups is a workgroup of wg invocations made whole subgroups
// where dev runs compute subgroups at one width, within its limits. A
// workgroup narrower than the subgroup leaves lanes idle: lavapipe's
// 8-invocation workgroups ran prefill at half speed on its 16-lane
// subgroups (512-bit vectors).
func WholeSubgroups(dev core.DeviceInfo, wg int) int {
	lim := dev.Limits
	if sg := int(lim.SubgroupSize); sg > 1 && oneSubgroupWidth(dev) {
		wg = ceilDiv(wg, sg) * sg
	}
	return min(wg, int(lim.MaxWorkGroupSize[0]), int(lim.MaxWorkGroupInvocations))
}

// finishPlan checks the grid against the device
// and splits the call into chunks where it is larger than one binding.
func finishPlan(dev core.DeviceInfo, p *AttentionPlan) error {
	for i, g := range p.Grid {
		if g > dev.Limits.MaxWorkGroupCount[i] {
			return Limitf("%d %s exceed the device's %d workgroups on axis %d", g, p.gridAxes()[i], dev.Limits.MaxWorkGroupCount[i], i)
		}
	}
	p.Masked = p.Shape.masked()
	p.Variant.Quant = p.Shape.kvQuant()
	if err := dev.CheckBindings(attentionBindingTypes(*p)); err != nil {
		return Limitf("%v", err)
	}
	cs, err := planChunks(dev, p)
	if err != nil {
		return err
	}
	p.Chunks, p.ChunkKVHeads, p.ChunkHeads, p.ChunkRows = len(cs), cs[0].nkv, cs[0].nh, cs[0].nl
	return nil
}

// CheckRange refuses a buffer of size bytes that a kernel could not
// address whole: the shader indexes with 32-bit ints, texel views are
// limited in elements and storage bindings in bytes.
func CheckRange(dev core.DeviceInfo, what string, size uint64, texel, vec4 bool, t core.DType) error {
	elems := size / uint64(t.Bytes())
	if t.Quantized() {
		elems = size / 4 // read as words
	}
	if elems > math.MaxInt32 {
		return Limitf("%s has %d elements, more than 2^31", what, elems)
	}
	if texel {
		if vec4 {
			elems /= 4
		}
		if elems > uint64(dev.Limits.MaxTexelBufferElements) {
			return Limitf("%s has %d elements, the device's texel buffers hold %d", what, elems, dev.Limits.MaxTexelBufferElements)
		}
		return nil
	}
	if size > uint64(dev.Limits.MaxStorageBufferRange) {
		return Limitf("%s is %d bytes, the device's storage buffer range is %d", what, size, dev.Limits.MaxStorageBufferRange)
	}
	return nil
}

// ceilDiv is a/b rounded up, for positive b.
func ceilDiv(a, b int) int { return (a + b - 1) / b }

// planSplitK makes a decode-like problem (few query rows per KV head, many
// keys) split-K, where most lanes would idle and read K/V once per query
// head: the keys split over lanes, each KV head's query rows packed.
func (p *AttentionPlan) planSplitK(in *PlanInput, tuning *core.PathTuning) {
	l, h := in.L, in.H
	packed := (h / in.HKV) * l
	if p.Vec4 && !in.Weights && !p.Additive && packed <= max(2*p.Rows, 8) && in.S >= 256 {
		p.SplitKeys = tuning.SplitKeys
		p.splitKeys(ceilDiv(in.S, p.SplitKeys))
		switch {
		case p.Rows == 1 && p.Path == core.TexelLoadPath:
			// One row a lane (no GQA): 1 key a step decoded fastest on
			// lavapipe (BENCHMARKS.md, "Decode (split-K)").
			p.KeyTile = 1
		case p.DMax >= 128 && p.Path == core.TexelLoadPath:
			// Packed GQA rows at d_max 128: 2 keys a step beat 1 and 4
			// on lavapipe, and the unrolled body compiles faster than
			// 4's (BENCHMARKS.md, "The first call of each kernel family").
			p.KeyTile = min(p.KeyTile, 2)
		}
	}
}

// chooseTexelReads picks how the texel row kernels read their inputs:
// shared K/V rows, eight halves a fetch, whole quantized blocks, masks
// four keys a fetch.
func (p *AttentionPlan) chooseTexelReads(dev core.DeviceInfo, in *PlanInput, tuning *core.PathTuning) {
	// Prefill lanes of a workgroup all read the same key row: let each
	// subgroup fetch it once and share it by shuffles where the tuning
	// asks for it, the device runs one subgroup width and its subgroups
	// tile the workgroup.
	if tuning.SharedLoads && p.Path == core.TexelLoadPath && p.Vec4 && p.Splits == 0 && !p.Additive && !in.kvQuant() {
		if sg, why := sharedLoadWidth(dev); why != "" {
			p.Why += "; shared K/V loads not used: " + why
		} else if p.WorkGroup%sg == 0 {
			p.SharedLoads = sg
			p.Variant.Shared = true
		}
	}
	// Lanes that fetch their own rows read half inputs eight a texel: half
	// the fetches, each a call on lavapipe (BENCHMARKS.md, "Decode
	// (split-K)"). Shared loads and the additive kernel keep four.
	p.Halves8 = p.Vec4 && p.Path == core.TexelLoadPath && !p.Additive && p.SharedLoads == 0 && in.halves8()
	// q8_0 and q4_0 rows of whole blocks fetch each texel of quants and
	// each block's scale once, not once per vec4 slot (the slot-at-a-time
	// figures are in BENCHMARKS.md, "Decode (split-K)").
	p.QuantBlocks = p.Vec4 && p.Path == core.TexelLoadPath && !p.Additive && in.quantBlocks()
	// Prefill lanes read a mask value (additive, boolean) per key and row,
	// each a texel fetch (on lavapipe a call): four keys a fetch where the
	// mask allows, in steps of four keys from a multiple of 4.
	steps4 := p.Path == core.TexelLoadPath && p.Splits == 0 && p.KeyTile%4 == 0
	p.MaskVec4, p.BoolMaskVec4 = steps4 && in.Mask.vec4(), steps4 && in.BoolMask.vec4()
}
