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
	"bytes"
	"encoding/binary"
	"fmt"
	"math"
	"slices"
	"strings"

	"github.com/vkattn/vkattn/core"
)

// Layout is where a tensor of four logical axes (batch, head, position,
// width) lies in its buffer: the last axis is contiguous, the others have
// element strides, so (B,H,L,d) and (B,L,H,d) layouts are read in place.
type Layout struct {
	Offset  int        // elements
	Strides [3]int     // batch, head, position, in elements
	Type    core.DType // element type
	// Scales is where a q8_0 or q4_0 tensor's block scales start in its
	// buffer, in halves: its quants (q8_0 a byte per element, q4_0 two
	// elements a byte) fill the buffer's first 2*Scales bytes, the float16
	// scales follow, one per block of 32.
	Scales int
}

// kvQuant reports whether K or V is q8_0 or q4_0: the plan reads them
// with a Q8_LOADS build.
func (s *AttentionShape) kvQuant() bool { return s.K.Type.Quantized() || s.V.Type.Quantized() }

// quantSpan is the whole buffer of a q8_0 or q4_0 layout, quants and
// scales, in bytes (the unit of its spans): a kernel reads both, so it
// binds all of it. Such buffers are allocated in whole 16-byte texels
// (vec4 texel views read the last scales).
func (l Layout) quantSpan() span {
	quants := 2 * l.Scales // bytes
	elements := quants
	if l.Type == core.Q4_0 {
		elements = 2 * quants
	}
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

// quantBlocks reports whether K or V is q8_0 or q4_0 and each such input
// has rows of whole blocks (core.Q8Block and core.Q4Block elements).
func (s *AttentionShape) quantBlocks() bool {
	return rowsAlignedWhere(core.DType.Quantized, max(core.Q8Block, core.Q4Block), rowLayout{s.K, s.DK}, rowLayout{s.V, s.DV})
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
	// are AttentionArgs).
	Window, Softcap, ALiBi, Sinks bool
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

// Score variant bits of attention.comp's VARIANTS constant.
const (
	variantWindow  = 1
	variantSoftcap = 2
	variantALiBi   = 4
	variantSinks   = 8
)

// variants is the shape's VARIANTS specialization constant.
func (s *AttentionShape) variants() int32 {
	v := 0
	for _, f := range []struct {
		on  bool
		bit int
	}{{s.Window, variantWindow}, {s.Softcap, variantSoftcap}, {s.ALiBi, variantALiBi}, {s.Sinks, variantSinks}} {
		if f.on {
			v |= f.bit
		}
	}
	return int32(v)
}

// DenseShape is the shape of a call of dense row-major tensors with no
// masks, lengths or extra outputs.
func DenseShape(b, h, hkv, l, s, dk, dv int) AttentionShape {
	return AttentionShape{B: b, H: h, HKV: hkv, L: l, S: s, DK: dk, DV: dv,
		Q: DenseLayout(b, h, l, dk), K: DenseLayout(b, hkv, s, dk), V: DenseLayout(b, hkv, s, dv), O: DenseLayout(b, h, l, dv)}
}

// masked reports whether the kernel needs its mask loads.
func (s *AttentionShape) masked() bool { return s.Mask.Given || s.BoolMask.Given || s.KeyPadding }

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

// maskSpec is the row kernels' MASKED specialization constant: the flag
// bit of each mask the call has, so that only those masks' loads are
// compiled in (lavapipe runs both sides of even a uniform branch).
func (s *AttentionShape) maskSpec() int32 {
	var bits int32
	for _, m := range []struct {
		given bool
		flag  int32
	}{{s.Mask.Given, flagMask}, {s.BoolMask.Given, flagBoolMask}, {s.KeyPadding, flagKeyPad}} {
		if m.given {
			bits |= m.flag
		}
	}
	return bits
}

// anyMaskSpec is the GPU kernels' MASKED: every mask's loads where the
// call has any (a GPU skips a uniform branch, so one variant serves every
// mix), none where it has none.
func (s *AttentionShape) anyMaskSpec() int32 {
	if s.masked() {
		return flagMask | flagBoolMask | flagKeyPad
	}
	return 0
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

func (p AttentionPlan) String() string {
	loads := "scalar loads"
	if p.Vec4 {
		loads = "vec4 loads"
	}
	if p.Halves8 {
		loads += ", halves eight a fetch"
	}
	if p.QuantBlocks {
		loads += ", quantized K/V a block at a time"
	}
	if p.MaskVec4 || p.BoolMaskVec4 {
		loads += ", masks four keys a fetch"
	}
	if p.Variant.Family == FamilyCoopmat {
		return fmt.Sprintf("kernel %s (load path %s: %s; %s%s), both products on %dx%dx%d cooperative matrices (float16 in, float32 accumulated; P rounded to float16), workgroup-tiled, query heads of each KV head packed; Br %d query rows x Bc %d keys per tile, workgroup %d (%d subgroups of %d, full subgroups required), %d B of shared memory; grid %dx%dx%d (row blocks x KV heads x batch), online softmax rescaled once per tile, no L*S buffer%s%s",
			p.Variant, p.Path, p.Why, loads, p.matrixTypesNote(), p.Matrix, p.Matrix, p.Matrix, p.TileRows, p.KeyTile, p.WorkGroup, p.WorkGroup/p.SubgroupSize, p.SubgroupSize,
			p.SharedBytes, p.Grid[0], p.Grid[1], p.Grid[2], p.maskNote(), p.chunkNote())
	}
	if p.Variant.Family == FamilyTiled {
		holds := fmt.Sprintf("each holds %d of the d_max %d", p.DMax/p.LanesPerRow, p.DMax)
		if p.DVMax != p.DMax {
			holds = fmt.Sprintf("each holds %d of q's d_max %d and %d of the output's %d", p.DMax/p.LanesPerRow, p.DMax, p.DVMax/p.LanesPerRow, p.DVMax)
		}
		staged := "K/V tiles"
		if p.Shape.VFromK {
			staged = "K tiles (V read from them: V is K's leading columns)"
		}
		tiles := fmt.Sprintf("Br %d query rows x Bc %d keys per tile, %d lanes per row (%s) and %d rows per lane group, workgroup %d, %s %d B of shared memory, full subgroups of %d required (VK_EXT_subgroup_size_control enabled)",
			p.TileRows, p.KeyTile, p.LanesPerRow, holds, p.RowsPerLane, p.WorkGroup, staged, p.SharedBytes, p.SubgroupSize)
		if p.Splits > 0 {
			return fmt.Sprintf("kernel %s (load path %s: %s; %s%s), split-K: %d splits of %d keys, a workgroup each, query heads of each KV head packed (%d row blocks); %s; grid %dx%dx%d (key splits x KV heads*row blocks x batch), then attention_combine; online softmax, no L*S buffer%s%s",
				p.Variant, p.Path, p.Why, loads, p.typesNote(), p.Splits, p.SplitKeys, p.RowBlocks, tiles, p.Grid[0], p.Grid[1], p.Grid[2], p.maskNote(), p.chunkNote())
		}
		return fmt.Sprintf("kernel %s (load path %s: %s; %s%s), workgroup-tiled, query heads of each KV head packed; %s; grid %dx%dx%d (row blocks x KV heads x batch), online softmax rescaled once per tile, no L*S buffer%s%s",
			p.Variant, p.Path, p.Why, loads, p.typesNote(), tiles, p.Grid[0], p.Grid[1], p.Grid[2], p.maskNote(), p.chunkNote())
	}
	// The row kernels use no subgroup operations but the shared loads' shuffles.
	anyWidth := ", no subgroup operations (any subgroup width)"
	if p.Splits > 0 {
		return fmt.Sprintf("kernel %s (load path %s: %s; %s%s), split-K: %d splits of %d keys, one per lane, query heads of each KV head packed (%d row blocks of %d rows), %d keys per step, d_max %d, workgroup %d%s, grid %dx%dx%d (split blocks x KV heads*row blocks x batch), then attention_combine; online softmax, no L*S buffer%s%s",
			p.Variant, p.Path, p.Why, loads, p.typesNote(), p.Splits, p.SplitKeys, p.RowBlocks, p.Rows, p.KeyTile, p.DMax, p.WorkGroup, anyWidth, p.Grid[0], p.Grid[1], p.Grid[2], p.maskNote(), p.chunkNote())
	}
	shared := anyWidth
	if p.SharedLoads > 0 {
		shared = fmt.Sprintf(", K/V rows fetched once per %d-lane subgroup and shared by shuffles (the device's one subgroup width)", p.SharedLoads)
	}
	return fmt.Sprintf("kernel %s (load path %s: %s; %s%s%s), d_max %d, %d query rows/invocation, %d keys per step, workgroup %d, grid %dx%dx%d (row blocks x heads x batch), online softmax, no L*S buffer%s%s",
		p.Variant, p.Path, p.Why, loads, p.typesNote(), shared, p.DMax, p.Rows, p.KeyTile, p.WorkGroup, p.Grid[0], p.Grid[1], p.Grid[2], p.maskNote(), p.chunkNote())
}

// typesNote says how Q, K and V are read when one of them is a half.
func (p AttentionPlan) typesNote() string {
	return typesNote([]string{"Q", "K", "V"}, p.Shape.Q.Type, p.Shape.K.Type, p.Shape.V.Type)
}

// matrixTypesNote names Q's, K's and V's types as the matrices read them:
// float16 as stored, bfloat16 scaled into float16 by a power of two per
// block (SEMANTICS.md §18).
func (p AttentionPlan) matrixTypesNote() string {
	ts := []core.DType{p.Shape.Q.Type, p.Shape.K.Type, p.Shape.V.Type}
	note := "; " + namedTypes([]string{"Q", "K", "V"}, ts...) + " as float16"
	if slices.Contains(ts, core.BFloat16) {
		note += " (bfloat16 scaled by a power of two per block)"
	}
	return note
}

// maskNote says whether mask loads and score variants are compiled in.
func (p AttentionPlan) maskNote() string {
	note := "; no mask loads (none given)"
	if p.Masked {
		note = "; mask loads compiled in"
	}
	var vs []string
	for _, v := range []struct {
		on   bool
		name string
	}{{p.Shape.Window, "sliding window"}, {p.Shape.Softcap, "soft-capping"}, {p.Shape.ALiBi, "ALiBi"}, {p.Shape.Sinks, "attention sinks"}} {
		if v.on {
			vs = append(vs, v.name)
		}
	}
	if len(vs) > 0 {
		note += "; " + strings.Join(vs, ", ") + " compiled in"
	}
	return note
}

// chunkNote describes the split of a call larger than one binding.
func (p AttentionPlan) chunkNote() string {
	if p.Chunks <= 1 {
		return ""
	}
	return fmt.Sprintf("; tensors exceed one binding's reach: %d chunks of one batch item, %d KV heads and up to %d query rows, each through buffer windows, one submission", p.Chunks, p.ChunkKVHeads, p.ChunkRows)
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
	// Decode-like problems (few query rows per KV head, many keys) leave
	// most lanes idle and read K/V once per query head; split the keys over
	// lanes instead and pack each KV head's query rows together.
	packed := (h / in.HKV) * l
	if p.Vec4 && !in.Weights && !p.Additive && packed <= max(2*p.Rows, 8) && in.S >= 256 {
		p.SplitKeys = tuning.SplitKeys
		p.splitKeys(ceilDiv(in.S, p.SplitKeys))
		switch {
		case p.Rows == 1 && p.Path == core.TexelLoadPath:
			// One row a lane (no GQA): on lavapipe 1 key a step decoded
			// H=32 S=4096 and 16384 faster than 2 (medians of two sets
			// of 3 and 4 alternating rounds: f32 K/V 7-33%, f16 K/V -3
			// to +11%); 4 keys were slower than 2.
			p.KeyTile = 1
		case p.DMax >= 128 && p.Path == core.TexelLoadPath:
			// Packed GQA rows at d_max 128 on lavapipe (H=32 H_kv=8,
			// S=4096 and 16384): 2 keys a step decoded f16 K/V 10-30%
			// faster than 1 key and f32 as fast; 4 keys were no faster.
			// The rows x keys x d_max/4 unrolled body compiles in 2.6 s
			// (1 key 2.2 s, 4 keys 3.1 s).
			p.KeyTile = min(p.KeyTile, 2)
		}
	}
	if err := fitLoops(dev, &in, &p); err != nil {
		return p, err
	}
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
	// the fetches (on lavapipe each is a call gathering the lanes' texels;
	// f16 K/V decode without GQA ran 1.5-1.8x faster, with GQA 0.9-1.2x
	// in noisy rounds). Shared loads and the additive kernel keep four.
	p.Halves8 = p.Vec4 && p.Path == core.TexelLoadPath && !p.Additive && p.SharedLoads == 0 && in.halves8()
	// q8_0 and q4_0 rows of whole blocks fetch each texel of quants and
	// each block's scale once: a slot at a time fetched the texel four
	// times and the scale eight, and q8_0 decode ran slower than float32.
	p.QuantBlocks = p.Vec4 && p.Path == core.TexelLoadPath && !p.Additive && in.quantBlocks()
	// Prefill lanes read a mask value (additive, boolean) per key and row,
	// each a texel fetch (on lavapipe a call): four keys a fetch where the
	// mask allows, in steps of four keys from a multiple of 4.
	steps4 := p.Path == core.TexelLoadPath && p.Splits == 0 && p.KeyTile%4 == 0
	p.MaskVec4, p.BoolMaskVec4 = steps4 && in.Mask.vec4(), steps4 && in.BoolMask.vec4()
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
	p.Variant.Q8 = p.Shape.kvQuant()
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

// planCoopmat plans p on the cooperative-matrix kernel where the device
// and the problem allow it (SEMANTICS.md §18): half Q, K and V, a
// subgroup-scope float16 matrix with float32 accumulators, enough packed
// query rows per KV head for a row block (decode keeps the split-K
// kernels), no weights, no paged or additive attention, tiles that fit
// shared memory, and a device that runs loops whole (LoopBudget 0: its
// loops are not counted; no device with a budget offers matrices). Else it
// reports false, p untouched but for a note in its Why where the device
// has the matrices and the call would use them but the device's limits
// do not let it.
func planCoopmat(dev core.DeviceInfo, in *PlanInput, p *AttentionPlan) (bool, error) {
	mm := matrixSide(dev)
	packed := in.H / in.HKV * in.L
	if mm == 0 || !in.Q.Type.Half() || !in.K.Type.Half() || !in.V.Type.Half() || in.Float32Products || in.Additive || in.Weights || in.Paging > 0 || in.Force == core.TexelLoadPath ||
		packed < 2*mm || p.DMax%mm != 0 {
		return false, nil
	}
	if !dev.SubgroupSizeControl || !dev.FullSubgroups || dev.LoopBudget() > 0 {
		p.Why += "; cooperative matrices not used: they need subgroup size control with full subgroups and loops run whole"
		return false, nil
	}
	if p.DMax > core.MaxRowWidth {
		p.Why += fmt.Sprintf("; cooperative matrices not used: the matrix kernel's tiles are planned for heads up to %d", core.MaxRowWidth)
		return false, nil
	}
	lim := dev.Limits
	sg := int(lim.SubgroupSize)
	dp := p.DMax
	// Shared memory: Q, K and V tiles in float16, the scores (float32) and
	// probabilities (float16) of a tile, the output rows (float32), a
	// rescale per row, five block maxima (bfloat16's scales).
	bytes := func(br, bc int) int { return br*dp*2 + 2*bc*dp*2 + br*bc*(4+2) + br*dp*4 + br*4 + 5*4 }
	br, bc := max(16, 2*mm), max(16, 2*mm)
	for bc > mm && bytes(br, bc) > int(lim.MaxSharedMemory) {
		bc /= 2
	}
	for br > mm && bytes(br, bc) > int(lim.MaxSharedMemory) {
		br /= 2
	}
	nsg := max(ceilDiv(br, sg), 2)
	if bytes(br, bc) > int(lim.MaxSharedMemory) || nsg*sg > min(int(lim.MaxWorkGroupSize[0]), int(lim.MaxWorkGroupInvocations)) {
		p.Why += fmt.Sprintf("; cooperative matrices not used: d_max %d tiles do not fit %d B of shared memory in a workgroup of %d %d-lane subgroups", dp, lim.MaxSharedMemory, nsg, sg)
		return false, nil
	}
	p.Variant = Variant{Family: FamilyCoopmat, Path: core.StorageLoadPath}
	p.Path, p.Vec4, p.Matrix = core.StorageLoadPath, false, mm
	p.Why = fmt.Sprintf("half inputs on the device's %dx%dx%d float16 cooperative matrices", mm, mm, mm)
	p.Rows, p.TileRows, p.KeyTile, p.SubgroupSize = 0, br, bc, sg
	p.WorkGroup, p.SharedBytes = nsg*sg, bytes(br, bc)
	p.Grid = [3]uint32{uint32(ceilDiv(packed, br)), uint32(in.HKV), uint32(in.B)}
	return true, finishPlan(dev, p)
}

// matrixSide is the larger square float16 cooperative-matrix shape (M = N
// = K = 16 or 8) the device has with float32 accumulators, or 0.
func matrixSide(dev core.DeviceInfo) int {
	for _, mm := range []int{16, 8} {
		if dev.HasMatrix(mm, mm, mm, core.MatrixFloat16) {
			return mm
		}
	}
	return 0
}

// tiledCapable reports why dev cannot run the tiled kernels, or "".
func tiledCapable(dev core.DeviceInfo) string {
	switch {
	case !dev.Limits.SubgroupShuffle:
		return "no subgroup shuffles in compute shaders"
	case !dev.SubgroupSizeControl || !dev.FullSubgroups:
		return "no subgroup size control with full subgroups (VK_EXT_subgroup_size_control)"
	}
	return ""
}

// pow2Below is the largest power of two <= n (n >= 1).
func pow2Below(n int) int {
	p := 1
	for 2*p <= n {
		p *= 2
	}
	return p
}

// pow2Above is the smallest power of two >= n.
func pow2Above(n int) int {
	p := 1
	for p < n {
		p *= 2
	}
	return p
}

// laneFloats is the most floats of q and output rows the planner lets one
// lane of the tiled kernels hold (RowsPerLane rows' slots of both): NVIDIA
// and AMD give a lane up to 255 and 256 32-bit registers, and the tile's
// scores, the key slots in flight and the addresses need the rest. Every
// vendor's tiles at d_max 256 hold at most 128.
const laneFloats = 144

// workgroupFloats is the most floats of q and output rows the planner lets
// a tiled workgroup hold, all its lanes together: half the 64 Ki 32-bit
// registers of an NVIDIA SM or an AMD CU's SIMD, so a workgroup keeps its
// rows in registers with room for the rest (a workgroup of 1024 lanes
// gets at most 64 registers a lane there). Every vendor's tiles at d_max
// 256 hold at most 16 Ki.
const workgroupFloats = 32 << 10

// pow2Factor is the largest power of two dividing n (n >= 1).
func pow2Factor(n int) int { return n & -n }

// wideTiles is the tiled kernels' shape for heads wider than
// core.MaxRowWidth: the tuning's tiled kernels, else its Wide shape, else
// the device's default tuning's (a tuning saved without Wide).
func wideTiles(dev core.DeviceInfo, t *core.Tuning) *core.TiledTuning {
	def := DefaultTuning(dev)
	for _, t := range []*core.Tuning{tuningOr(dev, t), &def} {
		if t.Tiled != nil {
			return t.Tiled
		}
		if t.Wide != nil {
			return t.Wide
		}
	}
	return nil
}

// planTiled plans p with the tiled GPU kernels shaped by tiles, fitted to
// the device and the problem. It reports false (p untouched but for its
// note) when the device cannot run them; the row kernels plan then. Heads
// wider than core.MaxRowWidth have no other kernel: where these cannot
// run, the call is a LimitError naming the limit.
func planTiled(dev core.DeviceInfo, in *PlanInput, tiles *core.TiledTuning, p *AttentionPlan) (bool, error) {
	wide := p.DMax > core.MaxRowWidth
	notUsed := func(why string) (bool, error) {
		if wide {
			return true, Limitf("head width %d (d_k=%d, d_v=%d) runs on the tiled kernels only (rows wider than %d do not fit one invocation's registers), which cannot run here: %s",
				max(in.DK, in.DV), in.DK, in.DV, core.MaxRowWidth, why)
		}
		p.Why += "; tiled kernels not used: " + why
		return false, nil
	}
	if why := tiledCapable(dev); why != "" {
		return notUsed(why)
	}
	lim := dev.Limits
	sg := min(max(tiles.SubgroupSize, int(lim.MinSubgroupSize)), int(lim.MaxSubgroupSize))
	d4, dv4 := p.DMax/4, p.DVMax/4
	group := in.H / in.HKV
	packed := group * in.L
	maxWG := min(int(lim.MaxWorkGroupSize[0]), int(lim.MaxWorkGroupInvocations))
	// Decode-like problems: the packed rows of a KV head fit one row block
	// but the grid (a workgroup per KV head) would leave most compute units
	// idle; split the keys into blocks, a workgroup each (flash-decoding).
	// Wide heads hold few rows a workgroup, so many query heads of one KV
	// head (MLA: 128 over one latent head) take several row blocks: they
	// split too while the grid leaves compute units idle.
	splittable := p.Vec4 && !in.Weights && in.S >= 256
	fewBlocks := in.B*in.HKV < 2*tiles.ComputeUnits
	if wide {
		fewBlocks = in.B*in.HKV*ceilDiv(packed, tiles.Rows) < 2*tiles.ComputeUnits
	}
	decode := splittable && fewBlocks && (packed <= tiles.Rows || wide)
	br, lanes, rpl := tiles.Rows, tiles.LanesPerRow, tiles.RowsPerLane
	if decode {
		br, lanes, rpl = pow2Above(packed), tiles.DecodeLanesPerRow, 1
	}
	// The lanes of a row split d_max and d_v's bound in whole vec4 slots.
	most := min(sg, pow2Factor(d4), pow2Factor(dv4))
	lanes = min(lanes, most)
	// Registers: more lanes a row, then fewer rows a lane, until a lane's
	// q and output slots fit.
	for 4*rpl*(d4+dv4)/lanes > laneFloats {
		switch {
		case 2*lanes <= most:
			lanes *= 2
		case rpl > 1:
			rpl /= 2
		default:
			return notUsed(fmt.Sprintf("rows of d_max %d (d_v bound %d) leave %d floats of q and output a lane in %d-lane rows of %d-lane subgroups, more than the %d registers planned a lane",
				p.DMax, p.DVMax, 4*rpl*(d4+dv4)/lanes, lanes, sg, laneFloats))
		}
	}
	// Whole subgroups: more rows where a workgroup would be narrower than one.
	br = max(br, rpl*sg/lanes)
	if br/rpl*lanes > maxWG {
		br = rpl * pow2Below(max(1, maxWG/lanes))
	}
	// The workgroup's registers: fewer rows a workgroup where its lanes'
	// slots together would not fit.
	for br > rpl*sg/lanes && br/rpl*lanes*(4*rpl*(d4+dv4)/lanes) > workgroupFloats {
		br /= 2
	}
	// K and V tiles of float32 vec4s; V from K's tile where it is K's
	// leading columns (its own array is then one slot).
	tileBytes := func(bc int) int {
		v := bc * dv4
		if in.VFromK {
			v = 1
		}
		return 16 * (bc*d4 + v)
	}
	bc := tiles.Keys
	for bc >= 4 && tileBytes(bc) > int(lim.MaxSharedMemory) {
		bc /= 2
	}
	if bc < 4 || br/rpl*lanes%sg != 0 {
		return notUsed(fmt.Sprintf("d_max %d tiles do not fit %d B of shared memory in workgroups of whole %d-lane subgroups", p.DMax, lim.MaxSharedMemory, sg))
	}
	p.Variant = Variant{Family: FamilyTiled, Path: core.StorageLoadPath, Vec4: p.Vec4}
	p.Rows, p.TileRows, p.KeyTile, p.LanesPerRow, p.RowsPerLane, p.SubgroupSize = 0, br, bc, lanes, rpl, sg
	p.WorkGroup, p.SharedBytes = br/rpl*lanes, tileBytes(bc)
	p.Grid = [3]uint32{uint32(ceilDiv(packed, br)), uint32(in.HKV), uint32(in.B)}
	if decode {
		// Several workgroups per compute unit, each at least a tile of keys.
		want := ceilDiv(4*tiles.ComputeUnits, in.B*in.HKV*ceilDiv(packed, br))
		if wide {
			// Many rows a KV head: no more partials (a d_v row per split
			// and row) than the K and V rows the splits read.
			want = min(want, max(1, in.S*(in.DK+in.DV)/(packed*(in.DV+2))))
		}
		splits := max(1, min(want, ceilDiv(in.S, bc)))
		p.SplitKeys = max(bc, ceilDiv(in.S, splits)/bc*bc) // whole tiles, rounded down: at least the splits wanted
		p.splitKeys(ceilDiv(in.S, p.SplitKeys))
	}
	if err := fitLoops(dev, in, p); err != nil {
		return true, err
	}
	return true, finishPlan(dev, p)
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
		spec := make([]int32, coopSpecCount)
		spec[specLocalSize], spec[coopSpecD4], spec[coopSpecBR], spec[coopSpecBC] = int32(p.WorkGroup), int32(p.DMax/4), int32(p.TileRows), int32(p.KeyTile)
		spec[coopSpecMM], spec[coopSpecNSG], spec[coopSpecSG] = int32(p.Matrix), int32(p.WorkGroup/p.SubgroupSize), int32(p.SubgroupSize)
		spec[coopSpecMasked], spec[coopSpecVariants] = s.anyMaskSpec(), s.variants()
		spec[coopSpecQType], spec[coopSpecKType], spec[coopSpecVType] = typeSpec(s.Q.Type), typeSpec(s.K.Type), typeSpec(s.V.Type)
		return KernelSpec{Variant: p.Variant, Bindings: bindings, Subgroup: uint32(p.SubgroupSize), Spec: spec}
	}
	if p.Variant.Family == FamilyTiled {
		spec := make([]int32, tiledSpecCount)
		spec[specLocalSize], spec[tiledSpecD4] = int32(p.WorkGroup), int32(p.DMax/4)
		spec[tiledSpecBR], spec[tiledSpecBC], spec[tiledSpecLPR], spec[tiledSpecRPL] = int32(p.TileRows), int32(p.KeyTile), int32(p.LanesPerRow), int32(p.RowsPerLane)
		spec[tiledSpecMasked], spec[tiledSpecVariants], spec[tiledSpecPaged] = s.anyMaskSpec(), s.variants(), boolSpec(s.Paging > 0)
		spec[tiledSpecQType], spec[tiledSpecKType], spec[tiledSpecVType] = typeSpec(s.Q.Type), typeSpec(s.K.Type), typeSpec(s.V.Type)
		spec[tiledSpecDV4], spec[tiledSpecVInK] = int32(p.DVMax/4), boolSpec(s.VFromK)
		return KernelSpec{Variant: p.Variant, Bindings: bindings, Subgroup: uint32(p.SubgroupSize), Spec: spec}
	}
	spec := make([]int32, attSpecCount)
	spec[specLocalSize], spec[attSpecWG], spec[attSpecD4] = int32(p.WorkGroup), int32(p.WorkGroup), int32(p.DMax/4)
	spec[attSpecRows], spec[attSpecKeys], spec[attSpecShare] = int32(p.Rows), int32(p.KeyTile), int32(max(p.SharedLoads, 1))
	spec[attSpecMasked], spec[attSpecVariants], spec[attSpecPaged] = s.maskSpec(), s.variants(), boolSpec(s.Paging > 0)
	spec[attSpecQType], spec[attSpecKType], spec[attSpecVType] = typeSpec(s.Q.Type), typeSpec(s.K.Type), typeSpec(s.V.Type)
	spec[attSpecHalves8], spec[attSpecQuantBlocks], spec[attSpecMask4] = boolSpec(p.Halves8), boolSpec(p.QuantBlocks), p.mask4Spec()
	return KernelSpec{Variant: p.Variant, Bindings: bindings, Spec: spec}
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

// ceilDiv is a/b rounded up, for positive b.
func ceilDiv(a, b int) int { return (a + b - 1) / b }

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
// shaders/attention_params.glsl, member for member (TestParamsMatchGLSL
// checks names, types and order): every member is a 16-byte vec4 or
// ivec4, so the packed little-endian encoding is the std140 layout.
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
func (p *attentionParams) encode() []byte {
	var b bytes.Buffer
	binary.Write(&b, binary.LittleEndian, p) // fixed-size fields: cannot fail
	return b.Bytes()
}

// newAttentionParams is the Params of a chunk whose shape is cs (its
// extents, and its tensors' offsets within their windows).
func newAttentionParams(p *AttentionPlan, cs *AttentionShape, c chunkParams) *attentionParams {
	x := &p.Scalars
	flags := 0
	m, bm := cs.Mask.Strides, cs.BoolMask.Strides
	if cs.Mask.Given {
		flags |= flagMask
	}
	if cs.BoolMask.Given {
		flags |= flagBoolMask
	}
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
	if cs.KeyPadding {
		flags |= flagKeyPad
	}
	if cs.Sinks {
		flags |= flagSinks
	}
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
