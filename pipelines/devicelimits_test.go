package pipelines

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/vkattn/vkattn/core"
)

// TestPlansFitRealDevices plans a sweep of calls of every kernel family
// on every description of realDevices, with the device's own tuning and
// each vendor's (PlanAsVendors), and checks each plan against the device:
// shared memory as the kernel's shader declares it, workgroup size,
// required subgroup size (within the device's range, only with size
// control and full subgroups, a divisor of the workgroup), shuffles and
// the shared loads' fixed width, cooperative-matrix shapes the device
// lists, the grid of every dispatch, and every binding's window. A call
// that does not fit must be refused with a LimitError that names the
// limit; a small call must plan everywhere; a plan that leaves the tiled
// or matrix kernels the tuning and device would run says why.
func TestPlansFitRealDevices(t *testing.T) {
	ref := boundless()
	for _, dev := range realDevices() {
		t.Run(dev.Name, func(t *testing.T) {
			for _, tn := range tuningsFor(t, dev) {
				tuning := tn.tuning
				r := reporter{t: t, prefix: tn.name}
				for _, c := range attentionSweep() {
					if c.in.Force == core.TexelLoadPath && tuning.Path != core.TexelLoadPath && tn.name != "own tuning" || c.in.Force == core.StorageLoadPath && tuning.Tiled == nil && tn.name != "own tuning" {
						continue // the GPU vendors' texel shapes are alike (gpuTuning's): planned with the device's own
					}
					in := c.in
					in.Tuning = &tuning
					p, err := PlanAttention(dev, in)
					if err != nil {
						_, refErr := PlanAttention(ref, in)
						// Heads past the row kernels' run on the tiled
						// kernels only: not on every device.
						small := c.small && (max(in.DK, in.DV) <= core.MaxRowWidth || tiledCapable(dev) == "")
						r.refusal(c.name, err, refErr, small)
						continue
					}
					r.add(c.name, attentionProblems(dev, &in, &tuning, p))
					if in.LSE && !in.kvQuant() && in.Paging == 0 {
						r.add(c.name+" backward", backwardProblems(dev, p))
					}
				}
				for _, c := range linearSweep() {
					in := c.in
					in.Tuning = &tuning
					p, err := PlanLinear(dev, in)
					if err != nil {
						_, refErr := PlanLinear(ref, in)
						r.refusal(c.name, err, refErr, c.small)
						continue
					}
					r.add(c.name, linearProblems(dev, in, p))
				}
				r.done()
				if testing.Short() {
					break // the device's own tuning only
				}
			}
		})
	}
}

// reporter reports the first few problems of a device and tuning, and
// how many there were in all.
type reporter struct {
	t            *testing.T
	prefix       string
	n, planned   int
	refusedLimit int
	first        string // the first refusal for a limit
}

func (r *reporter) add(name string, problems []string) {
	r.planned++
	for _, p := range problems {
		if r.n++; r.n <= 8 {
			r.t.Errorf("%s: %s: %s", r.prefix, name, p)
		}
	}
}

// limitWords are the limits a LimitError may name.
var limitWords = []string{"shared memory", "workgroups", "invocations", "binding", "texel buffers", "storage buffer range",
	"subgroup", "loop", "head width", "grid", "2^31", "registers"}

// refusal checks a refused call: refused on a device without limits too
// (the call itself is at fault), or refused with a LimitError naming the
// limit, and never a small call.
func (r *reporter) refusal(name string, err, refErr error, small bool) {
	if refErr != nil {
		return
	}
	var limit *LimitError
	var problems []string
	switch {
	case !errors.As(err, &limit):
		problems = append(problems, fmt.Sprintf("refused without a LimitError: %v", err))
	case !containsAny(err.Error(), limitWords):
		problems = append(problems, fmt.Sprintf("refused with a LimitError that names no limit: %v", err))
	case small:
		problems = append(problems, fmt.Sprintf("a small call refused: %v", err))
	}
	if r.refusedLimit++; r.first == "" {
		r.first = name + ": " + err.Error()
	}
	r.add(name, problems)
	r.planned--
}

func (r *reporter) done() {
	if r.n > 8 {
		r.t.Errorf("%s: %d problems in all", r.prefix, r.n)
	}
	if r.planned == 0 {
		r.t.Errorf("%s: nothing planned", r.prefix)
	}
	r.t.Logf("%s: %d calls planned, %d refused for a limit (first: %s)", r.prefix, r.planned, r.refusedLimit, r.first)
}

func containsAny(s string, words []string) bool {
	for _, w := range words {
		if strings.Contains(s, w) {
			return true
		}
	}
	return false
}

// boundless is a device with far larger limits than any in the table:
// a call it refuses is refused for what it is, not for a device's limit.
func boundless() core.DeviceInfo {
	d := realDevices()[0]
	d.Name = "boundless"
	l := &d.Limits
	l.MaxStorageBufferRange, l.MaxTexelBufferElements, l.MaxSharedMemory = 1<<32-1, 1<<32-1, 1<<30
	l.MaxWorkGroupCount = [3]uint32{1<<32 - 1, 1<<32 - 1, 1<<32 - 1}
	l.MinStorageAlignment, l.MinTexelAlignment = 4, 4
	return d
}

type namedTuning struct {
	name   string
	tuning core.Tuning
}

// tuningsFor are dev's own tuning and each vendor's.
func tuningsFor(t *testing.T, dev core.DeviceInfo) []namedTuning {
	// A texel tuning with shared loads in workgroups of 64, as `vkattn
	// tune` may save one planned as lavapipe (it keeps the shared loads
	// and varies the workgroup).
	shared := cpuTuning.Clone()
	shared.Texel.WorkGroup = 64
	ts := []namedTuning{{"own tuning", DefaultTuning(dev)}, {"shared loads in 64 lanes", shared}}
	for _, v := range PlanAsVendors {
		tuning, err := VendorTuning(v)
		if err != nil {
			t.Fatal(err)
		}
		ts = append(ts, namedTuning{"planned as " + v, tuning})
	}
	return ts
}

type attentionCase struct {
	name  string
	in    PlanInput
	small bool // every tensor within 256 KiB: must plan on every device
}

// attentionSweep is every family's calls: prefill, GQA, decode (split-K),
// long S and long L, odd widths 1..576 (multi-head latent attention's
// d_k 576, d_v 512 over one KV head among them), float32, float16,
// bfloat16, q8_0 and q4_0 K/V, masks and lengths, weights, LSE (and so
// the backward), additive scores, paged K/V, V as K's leading columns,
// each on every load path.
func attentionSweep() []attentionCase {
	// Every width on the smaller calls, a few on the large ones (whose
	// chunks make them slow to plan on small devices).
	all := [][2]int{{1, 1}, {3, 3}, {16, 16}, {31, 31}, {33, 33}, {64, 64}, {65, 65}, {100, 100}, {128, 128},
		{129, 129}, {200, 200}, {255, 255}, {256, 256}, {64, 128}, {256, 8}, {257, 64}, {300, 300}, {513, 513},
		{576, 512}, {576, 576}, {32, 576}, {576, 16}, {576, 1}, {513, 8}}
	few := [][2]int{{1, 1}, {64, 64}, {129, 129}, {256, 256}, {576, 512}}
	geometries := []struct {
		name            string
		b, h, hkv, l, s int
		widths          [][2]int
	}{
		{"tiny", 3, 5, 5, 3, 7, all},
		{"prefill", 2, 8, 8, 512, 512, all},
		{"GQA prefill", 1, 32, 8, 256, 1024, all},
		{"GQA", 4, 64, 4, 33, 77, all},
		{"decode GQA", 1, 32, 8, 1, 4096, all},
		{"decode MQA long S", 1, 16, 1, 1, 1 << 20, few},
		{"long S", 1, 8, 2, 4096, 65536, few},
		{"long L", 1, 1, 1, 1 << 20, 64, few},
		{"many items", 512, 2, 1, 1, 256, few},
		{"MLA decode", 4, 128, 1, 1, 4096, [][2]int{{576, 512}}},
		{"MLA prefill", 1, 128, 1, 64, 1024, [][2]int{{576, 512}}},
	}
	// Variants marked forced are planned on each load path besides.
	variants := []struct {
		name   string
		forced bool
		edit   func(*PlanInput)
	}{
		{"f32", true, func(*PlanInput) {}},
		{"f16", false, func(in *PlanInput) { in.Q.Type, in.K.Type, in.V.Type = core.Float16, core.Float16, core.Float16 }},
		{"bf16 LSE", false, func(in *PlanInput) {
			in.Q.Type, in.K.Type, in.V.Type, in.LSE = core.BFloat16, core.BFloat16, core.BFloat16, true
		}},
		{"f16 float32 products", false, func(in *PlanInput) {
			in.Q.Type, in.K.Type, in.V.Type, in.Float32Products = core.Float16, core.Float16, core.Float16, true
		}},
		{"q8_0 K/V", true, func(in *PlanInput) {
			in.K.Type, in.V.Type = core.Q8_0, core.Q8_0
			in.K.Scales, in.V.Scales = in.B*in.HKV*in.S*in.DK/2, in.B*in.HKV*in.S*in.DV/2
		}},
		{"q4_0 K/V", false, func(in *PlanInput) { quantKV(in, core.Q4_0) }},
		{"masked LSE", true, func(in *PlanInput) {
			s := &in.AttentionShape
			in.Mask = MaskLayout{Given: true, Strides: [4]int{s.H * s.L * s.S, s.L * s.S, s.S, 1}}
			in.BoolMask = MaskLayout{Given: true, Strides: [4]int{0, 0, s.S, 1}}
			in.KeyPadding, in.Lengths, in.LSE = true, true, true
			in.Variants = VariantWindow | VariantSoftcap | VariantALiBi | VariantSinks
		}},
		{"weights", false, func(in *PlanInput) { in.Weights, in.LSE = true, true }},
		{"additive", true, func(in *PlanInput) { in.Additive, in.LSE = true, true }},
		{"paged", false, func(in *PlanInput) {
			s := &in.AttentionShape
			s.Paging, s.PagesPerItem = 16, ceilDiv(s.S, 16)
			s.Pages = s.B * s.PagesPerItem
			s.K.Strides = [3]int{s.HKV * 16 * s.DK, 16 * s.DK, s.DK}
			s.V.Strides = [3]int{s.HKV * 16 * s.DV, 16 * s.DV, s.DV}
		}},
		{"V from K", false, func(in *PlanInput) {
			if in.DV <= in.DK {
				in.V, in.VFromK = in.K, true
			}
		}},
	}
	var cs []attentionCase
	for _, g := range geometries {
		for _, w := range g.widths {
			for _, v := range variants {
				forces := []core.LoadPath{core.AutoLoadPath}
				if v.forced {
					forces = append(forces, core.TexelLoadPath, core.StorageLoadPath)
				}
				for _, force := range forces {
					in := PlanInput{AttentionShape: DenseShape(g.b, g.h, g.hkv, g.l, g.s, w[0], w[1]), Force: force}
					v.edit(&in)
					cs = append(cs, attentionCase{
						name:  fmt.Sprintf("%s B=%d H=%d/%d L=%d S=%d d=%d/%d %s %v", g.name, g.b, g.h, g.hkv, g.l, g.s, w[0], w[1], v.name, force),
						in:    in,
						small: smallCall(&in.AttentionShape),
					})
				}
			}
		}
	}
	return cs
}

// smallCall reports whether every tensor of s is within 256 KiB, which
// one binding of any device reaches (2^16 scalar texels on Mali).
func smallCall(s *AttentionShape) bool {
	const most = 1 << 16 // elements
	for _, n := range []int{s.B * s.H * s.L * max(s.DK, s.DV), s.B * s.HKV * s.S * max(s.DK, s.DV), s.B * s.H * s.L * s.S} {
		if n > most {
			return false
		}
	}
	return true
}

// declaredShared is the shared memory the kernel of plan p declares, as
// its shader does (not as the planner sizes it).
func declaredShared(p AttentionPlan) int {
	switch p.Variant.Family {
	case FamilyTiled: // attention_tiled.comp: vec4 kTile[BC * D4], vTile[V_IN_K ? 1 : BC * DV4]
		v := p.KeyTile * (p.DVMax / 4)
		if p.Shape.VFromK {
			v = 1
		}
		return (p.KeyTile*(p.DMax/4) + v) * 16
	case FamilyCoopmat:
		// attention_coopmat.comp: float16 qS[BR * DP], kS and vS[BC * DP];
		// float sS[BR * BC]; float16 pS[BR * BC]; float oS[BR * DP],
		// alphaS[BR]; uint topS[5].
		br, bc, dp := p.TileRows, p.KeyTile, p.DMax
		return br*dp*2 + 2*bc*dp*2 + br*bc*4 + br*bc*2 + br*dp*4 + br*4 + 5*4
	}
	return 0 // attention.comp declares none
}

// subgroupProblems checks a kernel that requires full subgroups of sg
// lanes in workgroups of wg.
func subgroupProblems(dev core.DeviceInfo, sg, wg int) []string {
	var ps []string
	lim := dev.Limits
	switch {
	case !dev.SubgroupSizeControl || !dev.FullSubgroups:
		ps = append(ps, fmt.Sprintf("requires subgroups of %d on a device without size control and full subgroups", sg))
	case sg < int(lim.MinSubgroupSize) || sg > int(lim.MaxSubgroupSize) || sg&(sg-1) != 0:
		ps = append(ps, fmt.Sprintf("requires subgroups of %d outside the device's %d..%d", sg, lim.MinSubgroupSize, lim.MaxSubgroupSize))
	case sg < 1 || wg%sg != 0:
		ps = append(ps, fmt.Sprintf("workgroup %d is not whole subgroups of %d", wg, sg))
	}
	return ps
}

// workGroupProblems checks a workgroup of wg invocations along x.
func workGroupProblems(dev core.DeviceInfo, wg int) []string {
	if wg < 1 || wg > int(dev.Limits.MaxWorkGroupSize[0]) || wg > int(dev.Limits.MaxWorkGroupInvocations) {
		return []string{fmt.Sprintf("workgroup %d beyond the device's %d (%d invocations)", wg, dev.Limits.MaxWorkGroupSize[0], dev.Limits.MaxWorkGroupInvocations)}
	}
	return nil
}

// gridProblems checks a dispatch's workgroup counts.
func gridProblems(dev core.DeviceInfo, what string, g [3]uint32) []string {
	for i := range g {
		if g[i] < 1 || g[i] > dev.Limits.MaxWorkGroupCount[i] {
			return []string{fmt.Sprintf("%s grid %v beyond the device's %v", what, g, dev.Limits.MaxWorkGroupCount)}
		}
	}
	return nil
}

// reach is the bytes one binding of type t reaches (texel views hold
// MaxTexelBufferElements texels of one element, four with vec4, or a word
// for q8_0 and q4_0).
func reach(dev core.DeviceInfo, texel, vec4 bool, t core.DType) int {
	if !texel {
		return int(dev.Limits.MaxStorageBufferRange)
	}
	b := t.Bytes()
	if t.Quantized() {
		b = 4
	}
	if vec4 {
		b *= 4
	}
	return int(dev.Limits.MaxTexelBufferElements) * b
}

// chunkGrid is the grid of chunk c's attention dispatch (as
// Kernels.attentionChunk records it).
func chunkGrid(p *AttentionPlan, c Chunk) [3]uint32 {
	switch {
	case p.Splits > 0:
		return [3]uint32{p.Grid[0], uint32(c.nkv * p.RowBlocks), uint32(c.nb)}
	case p.Variant.Family == FamilyTiled || p.Variant.Family == FamilyCoopmat:
		return [3]uint32{uint32(ceilDiv(c.nl*c.nh/c.nkv, p.TileRows)), uint32(c.nkv), uint32(c.nb)}
	}
	return [3]uint32{uint32(ceilDiv(c.nl, p.Rows*p.WorkGroup)), uint32(c.nh), uint32(c.nb)}
}

// coopmatEligible reports whether the call would go on dev's cooperative
// matrices if the device's limits allowed (planCoopmat's conditions on
// the call).
func coopmatEligible(dev core.DeviceInfo, in *PlanInput, dmax int) bool {
	mm := matrixSide(dev)
	return mm > 0 && in.Q.Type.Half() && in.K.Type.Half() && in.V.Type.Half() && !in.Float32Products && !in.Additive && !in.Weights &&
		in.Paging == 0 && in.Force != core.TexelLoadPath && in.H/in.HKV*in.L >= 2*mm && dmax%mm == 0
}

// attentionProblems is how plan p of call in with tuning does not fit dev.
func attentionProblems(dev core.DeviceInfo, in *PlanInput, tuning *core.Tuning, p AttentionPlan) []string {
	lim := dev.Limits
	ps := workGroupProblems(dev, p.WorkGroup)
	if shared := declaredShared(p); shared > int(lim.MaxSharedMemory) || shared != p.SharedBytes {
		ps = append(ps, fmt.Sprintf("%s declares %d B of shared memory (the plan says %d), the device has %d", p.Variant, shared, p.SharedBytes, lim.MaxSharedMemory))
	}
	if p.Path == core.TexelLoadPath && (!dev.TexelPathOK() || p.Vec4 && !dev.TexelWords4) {
		ps = append(ps, "texel path without the device's texel formats")
	}
	str := p.String()
	switch p.Variant.Family {
	case FamilyTiled, FamilyCoopmat:
		sg := p.SubgroupSize
		ps = append(ps, subgroupProblems(dev, sg, p.WorkGroup)...)
		if p.Variant.Family == FamilyTiled {
			if !lim.SubgroupShuffle {
				ps = append(ps, "tiled kernel on a device without subgroup shuffles")
			}
			if p.LanesPerRow < 1 || sg%p.LanesPerRow != 0 || (p.DMax/4)%p.LanesPerRow != 0 || (p.DVMax/4)%p.LanesPerRow != 0 || p.WorkGroup != p.TileRows/p.RowsPerLane*p.LanesPerRow {
				ps = append(ps, fmt.Sprintf("%d lanes per row do not divide subgroups of %d and d_max %d and d_v's bound %d in vec4s, or make the workgroup %d", p.LanesPerRow, sg, p.DMax, p.DVMax, p.WorkGroup))
			}
			if p.DVMax > p.DMax || p.DMax < max(in.DK, in.DV) || p.DVMax < in.DV {
				ps = append(ps, fmt.Sprintf("bounds d_max %d, d_v %d do not hold d_k %d, d_v %d", p.DMax, p.DVMax, in.DK, in.DV))
			}
			if n := 4 * p.RowsPerLane * (p.DMax + p.DVMax) / 4 / p.LanesPerRow; n > laneFloats {
				ps = append(ps, fmt.Sprintf("a lane holds %d floats of q and output, more than %d", n, laneFloats))
			}
			if !strings.Contains(str, fmt.Sprintf("full subgroups of %d required", sg)) {
				ps = append(ps, "the plan does not say the subgroup size it requires: "+str)
			}
		} else {
			if !dev.HasMatrix(p.Matrix, p.Matrix, p.Matrix, core.MatrixFloat16) || p.DMax%p.Matrix != 0 {
				ps = append(ps, fmt.Sprintf("%dx%dx%d float16 matrices the device does not list (%v)", p.Matrix, p.Matrix, p.Matrix, dev.CooperativeMatrices))
			}
			if !strings.Contains(str, fmt.Sprintf("subgroups of %d, full subgroups required", sg)) {
				ps = append(ps, "the plan does not say the subgroup size it requires: "+str)
			}
		}
	default:
		if p.SubgroupSize != 0 {
			ps = append(ps, fmt.Sprintf("row kernel with a required subgroup size %d", p.SubgroupSize))
		}
		if n := p.SharedLoads; n > 0 {
			// The shader shuffles from lanes 0..n-1 of whatever subgroup it
			// runs in, without requiring a size: the device must run one.
			if !lim.SubgroupShuffle || !dev.SubgroupSizeControl || lim.MinSubgroupSize != uint32(n) || lim.MaxSubgroupSize != uint32(n) || p.WorkGroup%n != 0 {
				ps = append(ps, fmt.Sprintf("shared loads across %d lanes in workgroups of %d on subgroups of %d..%d (size control %v, shuffles %v)",
					n, p.WorkGroup, lim.MinSubgroupSize, lim.MaxSubgroupSize, dev.SubgroupSizeControl, lim.SubgroupShuffle))
			}
			if !strings.Contains(str, fmt.Sprintf("once per %d-lane subgroup", n)) {
				ps = append(ps, "the plan does not say the width its shared loads assume: "+str)
			}
		} else if !strings.Contains(str, "any subgroup width") {
			ps = append(ps, "the plan does not say it assumes no subgroup width: "+str)
		}
		// No silent fallback: the tuning's tiled kernels and the device's
		// matrices, where the call would use them, are left with a reason.
		if tuning.Tiled != nil && p.Path == core.StorageLoadPath && !p.Additive && !strings.Contains(p.Why, "tiled kernels not used") {
			ps = append(ps, "the tuning's tiled kernels left without a reason: "+p.Why)
		}
	}
	if p.Variant.Family != FamilyCoopmat && coopmatEligible(dev, in, p.DMax) && !strings.Contains(p.Why, "cooperative matrices not used") {
		ps = append(ps, "the device's cooperative matrices left without a reason: "+p.Why)
	}
	ps = append(ps, gridProblems(dev, "attention", p.Grid)...)
	cs := p.ChunkList()
	if len(cs) > 17 {
		cs = append(cs[:16], cs[len(cs)-1]) // the chunks are alike but the last
	}
	for _, c := range cs {
		ps = append(ps, gridProblems(dev, "a chunk's attention", chunkGrid(&p, c))...)
		if p.Splits > 0 {
			rows := c.nb * c.nh * c.nl
			x := min(rows, int(lim.MaxWorkGroupCount[0]))
			ps = append(ps, gridProblems(dev, "a chunk's combine", [3]uint32{uint32(x), uint32(ceilDiv(rows, x)), 1})...)
		}
		if err := fits(dev, &p, c); err != nil {
			ps = append(ps, fmt.Sprintf("chunk %v does not fit: %v", c, err))
		}
		for _, b := range chunkBindings(&p, c, nil, nil) {
			if n := (b.sp.hi - b.sp.lo) * b.dtype.Bytes(); n > reach(dev, b.texel, b.vec4, b.dtype) {
				ps = append(ps, fmt.Sprintf("chunk %v binds %d B of %s, beyond one binding's %d", c, n, b.what, reach(dev, b.texel, b.vec4, b.dtype)))
			}
		}
		if len(ps) > 0 {
			break // one chunk's problems are enough
		}
	}
	return ps
}

// backwardProblems is how the backward of forward plan p does not fit
// dev, or nothing where it is refused with a LimitError naming a limit.
func backwardProblems(dev core.DeviceInfo, p AttentionPlan) []string {
	lim := dev.Limits
	rows, _ := backwardRows(dev, &p)
	if rows == nil {
		p.Path, p.Vec4 = core.StorageLoadPath, false // as AttentionBackward reads
	}
	bp, err := planBackward(dev, p)
	var limit *LimitError
	if err != nil {
		if !errors.As(err, &limit) || !containsAny(err.Error(), limitWords) {
			return []string{fmt.Sprintf("backward refused without naming a limit: %v", err)}
		}
		return nil
	}
	var ps []string
	if rows == nil {
		// attention_backward.comp: float aTile[TILE * DMAX], bTile[TILE * DMAX],
		// lseTile[TILE], dTile[TILE].
		if shared := 4 * (2*bp.tile*bp.dMax + 2*bp.tile); bp.tile < 1 || shared > int(lim.MaxSharedMemory) {
			ps = append(ps, fmt.Sprintf("backward tiles of %d rows declare %d B of shared memory, the device has %d", bp.tile, shared, lim.MaxSharedMemory))
		}
		ps = append(ps, workGroupProblems(dev, backwardWorkGroup)...)
	} else {
		ps = append(ps, workGroupProblems(dev, bp.wg)...)
	}
	cs, err := backwardChunks(dev, &p)
	if err != nil {
		if !errors.As(err, &limit) || !containsAny(err.Error(), limitWords) {
			ps = append(ps, fmt.Sprintf("backward chunks refused without naming a limit: %v", err))
		}
		return ps
	}
	if len(cs) > 17 {
		cs = append(cs[:16], cs[len(cs)-1])
	}
	for _, c := range cs {
		for _, b := range backwardChunkBindings(&p, c, nil, nil, nil) {
			reach, unit := int(lim.MaxStorageBufferRange), "B"
			n := (b.sp.hi - b.sp.lo) * b.dtype.Bytes()
			if b.texel {
				reach, unit = int(lim.MaxTexelBufferElements), "texels"
				if b.vec4 {
					n /= 4
				}
				n /= b.dtype.Bytes()
			}
			if n > reach {
				return append(ps, fmt.Sprintf("backward chunk %v binds %d %s of %s, beyond the device's %d", c, n, unit, b.what, reach))
			}
		}
	}
	return ps
}

type linearCase struct {
	name  string
	in    LinearInput
	small bool
}

// linearSweep is dense layers of every shape class, element types and
// load path.
func linearSweep() []linearCase {
	var cs []linearCase
	for _, dims := range [][3]int{{1, 1, 1}, {3, 5, 7}, {100, 40, 24}, {4096, 4096, 4096}, {1 << 20, 64, 64}, {1 << 22, 4096, 4096}} {
		for _, types := range [][2]core.DType{{core.Float32, core.Float32}, {core.Float16, core.Float16}, {core.BFloat16, core.BFloat16}, {core.Float32, core.Float16}} {
			for _, force := range []core.LoadPath{core.AutoLoadPath, core.TexelLoadPath, core.StorageLoadPath} {
				for _, products := range []bool{false, true} {
					in := LinearInput{Rows: dims[0], Outputs: dims[1], Inputs: dims[2], Aligned: dims[2]%4 == 0, Bias: true,
						X: types[0], W: types[1], Force: force, Float32Products: products}
					cs = append(cs, linearCase{
						name:  fmt.Sprintf("linear %dx%dx%d %v*%v %v products %v", dims[0], dims[1], dims[2], types[0], types[1], force, products),
						in:    in,
						small: max(dims[0], dims[1])*dims[2] <= 1<<16,
					})
				}
			}
		}
	}
	return cs
}

// linearProblems is how dense-layer plan p does not fit dev.
func linearProblems(dev core.DeviceInfo, in LinearInput, p LinearPlan) []string {
	lim := dev.Limits
	ps := workGroupProblems(dev, p.WorkGroup)
	ps = append(ps, gridProblems(dev, "dense layer", p.Grid)...)
	ps = append(ps, gridProblems(dev, "a dense-layer block", p.groups(p.BlockRows, p.BlockOutputs))...)
	if p.Path == core.TexelLoadPath && (!dev.TexelPathOK() || p.Vec4 && !dev.TexelWords4) {
		ps = append(ps, "texel path without the device's texel formats")
	}
	if p.Matrix > 0 {
		ps = append(ps, subgroupProblems(dev, p.SubgroupSize, p.WorkGroup)...)
		if !dev.HasMatrix(p.Matrix, p.Matrix, p.Matrix, core.MatrixFloat16) {
			ps = append(ps, fmt.Sprintf("%dx%dx%d float16 matrices the device does not list", p.Matrix, p.Matrix, p.Matrix))
		}
		// linear_coopmat.comp: float16 xS and wS[TILE * TILE], float yS[TILE * TILE].
		if shared := p.TileRows * p.TileRows * (2 + 2 + 4); shared > int(lim.MaxSharedMemory) {
			ps = append(ps, fmt.Sprintf("linear_coopmat declares %d B of shared memory, the device has %d", shared, lim.MaxSharedMemory))
		}
		if !strings.Contains(p.String(), fmt.Sprintf("(%d-lane subgroups)", p.SubgroupSize)) {
			ps = append(ps, "the plan does not say the subgroup size it requires: "+p.String())
		}
	} else if matrixSide(dev) > 0 && in.X == core.Float16 && in.W == core.Float16 && !in.Float32Products && in.Force != core.TexelLoadPath &&
		!strings.Contains(p.Why, "cooperative matrices not used") {
		ps = append(ps, "the device's cooperative matrices left without a reason: "+p.Why)
	}
	x := LinearShape{Rows: in.Rows, Outputs: in.Outputs, Inputs: in.Inputs, X: RowLayout{Stride: in.Inputs}, W: RowLayout{Offset: in.WOffset, Stride: in.Inputs}, Y: RowLayout{Stride: in.Outputs}}
	sp := linearSpans(&x, 0, p.BlockRows, 0, p.BlockOutputs)
	types := p.types()
	for i, what := range []string{"X", "W", "Y", "bias"} {
		texel := p.Path == core.TexelLoadPath && i < 2
		if n := (sp[i].hi - sp[i].lo) * types[i].Bytes(); n > reach(dev, texel, p.Vec4 && i < 2, types[i]) {
			ps = append(ps, fmt.Sprintf("a block of %d x %d binds %d B of %s, beyond one binding's %d", p.BlockRows, p.BlockOutputs, n, what, reach(dev, texel, p.Vec4 && i < 2, types[i])))
		}
	}
	return ps
}

// A device that lists float16 matrices but cannot run the matrix kernel
// for a call that would use them (no subgroup size control; too little
// shared memory for d_max 256 tiles) plans the call on another kernel, and
// the plan says why.
func TestPlanSaysWhyNotMatrices(t *testing.T) {
	in := PlanInput{AttentionShape: DenseShape(1, 8, 8, 512, 512, 256, 256)}
	in.Q.Type, in.K.Type, in.V.Type = core.Float16, core.Float16, core.Float16
	noControl, small := realDevices()[0], realDevices()[0]
	noControl.SubgroupSizeControl, noControl.FullSubgroups = false, false
	small.Limits.MaxSharedMemory = 16 << 10
	for _, dev := range []core.DeviceInfo{noControl, small} {
		p, err := PlanAttention(dev, in)
		if err != nil {
			t.Fatal(err)
		}
		if p.Variant.Family == FamilyCoopmat || !strings.Contains(p.Why, "cooperative matrices not used") {
			t.Errorf("size control %v, %d B of shared memory: %v; want another kernel and why", dev.SubgroupSizeControl, dev.Limits.MaxSharedMemory, p)
		}
	}
}

// TestNarrowerVPlansWhereWiderDoes: a narrower V never needs more than a
// wider one: wherever a wide head (d_k past the row kernels) plans with
// a d_v near 512, it plans with every d_v below read the same way, on
// every real device and tuning (d_v <= 16 once left too few lanes a row
// to split d_k).
func TestNarrowerVPlansWhereWiderDoes(t *testing.T) {
	for _, dev := range realDevices() {
		if dev.LoopBudget() > 0 {
			continue // there the keys an invocation loops over follow the lanes, and §14's limit refuses some calls
		}
		for _, tn := range tuningsFor(t, dev) {
			for _, dk := range []int{576, 513, 300} {
				for _, shape := range [][3]int{{1, 1, 64}, {128, 1, 4096}} { // H, L, S: MLA decode-like and one head
					plan := func(dv int) error {
						in := PlanInput{AttentionShape: DenseShape(1, shape[0], 1, shape[1], shape[2], dk, dv)}
						tuning := tn.tuning
						in.Tuning = &tuning
						_, err := PlanAttention(dev, in)
						return err
					}
					// Against the widest d_v read the same way (vec4 rows
					// or not: scalar rows have no split-K to stay within
					// a loop limit).
					wide := map[int]bool{}
					for r := range 4 {
						wide[r] = plan(508+r) == nil
					}
					for dv := 1; dv < 508; dv++ {
						if err := plan(dv); err != nil && wide[dv%4] {
							t.Errorf("%s %s: d_k %d plans with d_v %d but not %d: %v", dev.Name, tn.name, dk, 508+dv%4, dv, err)
							break
						}
					}
				}
			}
		}
	}
}
