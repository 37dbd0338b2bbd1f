package pipelines

import (
	"fmt"

	"github.com/vkattn/vkattn/core"
)

// The GPU kernels' plans: the workgroup-tiled kernels (rows split over
// subgroup lanes, K/V tiles in shared memory) and the cooperative-matrix
// kernel, fitted to the device's subgroups, registers and shared memory.

// planCoopmat plans p on the cooperative-matrix kernel where the device
// and the problem allow it (SEMANTICS.md §9.3): half Q, K and V, a
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
