package pipelines

import (
	"fmt"
	"strings"

	"github.com/vkattn/vkattn/core"
)

func rowsEach(n int) map[int]int {
	m := map[int]int{}
	for _, d := range core.DMaxBuckets {
		m[d] = n
	}
	return m
}

// quirk is a quirk-table entry: the tuning of a driver and why.
type quirk struct {
	name   string
	tuning core.Tuning
}

// gpuTuning is the starting point on GPUs: storage buffers, one row and
// one key per step (fewest registers), 64-lane workgroups. Not measured on
// a real GPU yet.
var gpuTuning = core.Tuning{
	Path:    core.StorageLoadPath,
	Texel:   core.PathTuning{Rows: rowsEach(1), WorkGroup: 64, Keys: 1, SplitKeys: 64},
	Storage: core.PathTuning{Rows: rowsEach(1), WorkGroup: 64, Keys: 1, SplitKeys: 64},
	// Heads past core.MaxRowWidth: 16 lanes a row (576 = 16 x 36 floats),
	// one row a lane group, 16-key tiles; a mid-sized GPU's compute units.
	Wide: &core.TiledTuning{Rows: 16, Keys: 16, LanesPerRow: 16, RowsPerLane: 1, DecodeLanesPerRow: 16, SubgroupSize: 32, ComputeUnits: 16},
}

// withTiles is t running the tiled kernels shaped by tiles.
func withTiles(t core.Tuning, tiles core.TiledTuning) core.Tuning {
	t.Tiled = &tiles
	return t
}

// The tiled kernels' shapes per vendor, not yet measured on the hardware:
// FlashAttention-2-like tiles sized for each architecture's subgroup
// (NVIDIA warps of 32, AMD wave64 in compute, Intel SIMD16) and shared
// memory; compute units of a large part of each (H100/H200: 132 SMs).
var (
	nvidiaTuning = withTiles(gpuTuning, core.TiledTuning{Rows: 32, Keys: 32, LanesPerRow: 8, RowsPerLane: 2, DecodeLanesPerRow: 32, SubgroupSize: 32, ComputeUnits: 132})
	amdTuning    = withTiles(gpuTuning, core.TiledTuning{Rows: 16, Keys: 32, LanesPerRow: 8, RowsPerLane: 1, DecodeLanesPerRow: 32, SubgroupSize: 64, ComputeUnits: 96})
	intelTuning  = withTiles(gpuTuning, core.TiledTuning{Rows: 16, Keys: 16, LanesPerRow: 8, RowsPerLane: 2, DecodeLanesPerRow: 16, SubgroupSize: 16, ComputeUnits: 32})
)

// cpuTuning is lavapipe's (each choice's figures: BENCHMARKS.md "Planner
// settings on lavapipe"): texel fetches, not storage loads; one subgroup
// per workgroup (8 lanes at 256-bit vectors, widened to 16 at 512 by
// DefaultTuning); as many rows as keep the unrolled body small (rows x
// d_max <= 256, 512 at d_max 128, where 4 rows let decode read K/V once
// per KV head of 4 query heads); 4 keys per step (split-K at d_max 128
// takes 1, PlanAttention); 256 keys per split-K lane; K/V rows shared
// across the lanes by shuffles. The storage path, run only when forced,
// keeps 1 key, which keeps its d_max 256 variant's compile short. Heads
// past core.MaxRowWidth run the tiled kernels, which compile where a row
// kernel that wide does not in reasonable time: a row over the 8 lanes
// of lavapipe's subgroup, 8-key tiles (4 where K and V are staged apart:
// 32 KiB of shared memory), and as many workgroups as a CPU of 8
// threads keeps busy.
var cpuTuning = core.Tuning{
	Path:    core.TexelLoadPath,
	Texel:   core.PathTuning{Rows: map[int]int{16: 8, 32: 8, 64: 4, 128: 4, 256: 1}, WorkGroup: 8, Keys: 4, SplitKeys: 256, SharedLoads: true},
	Storage: core.PathTuning{Rows: rowsEach(1), WorkGroup: 64, Keys: 1, SplitKeys: 64},
	Wide:    &core.TiledTuning{Rows: 16, Keys: 8, LanesPerRow: 8, RowsPerLane: 1, DecodeLanesPerRow: 8, SubgroupSize: 8, ComputeUnits: 8},
}

// quirks is keyed by VkDriverId.
var quirks = map[uint32]quirk{
	core.DriverIDLavapipe:     {"lavapipe: texel fetches, one-subgroup workgroups (measured)", cpuTuning},
	core.DriverIDNvidia:       {"NVIDIA: tiled kernels, warps of 32 (not yet measured)", nvidiaTuning},
	core.DriverIDMesaRADV:     {"RADV: tiled kernels, wave64 (not yet measured)", amdTuning},
	core.DriverIDAMDOpen:      {"AMDVLK: tiled kernels, wave64 (not yet measured)", amdTuning},
	core.DriverIDIntelMesa:    {"ANV: tiled kernels, SIMD16 (not yet measured)", intelTuning},
	core.DriverIDIntelWindows: {"Intel: tiled kernels, SIMD16 (not yet measured)", intelTuning},
}

// PlanAsVendors are the names VendorTuning takes, each a quirk-table
// driver: plans as that vendor's driver would get them, on any device (so
// lavapipe runs the GPU kernels in CI).
var PlanAsVendors = core.PlanAsVendors

var vendorDrivers = map[string]uint32{
	"nvidia": core.DriverIDNvidia, "amd": core.DriverIDMesaRADV, "intel": core.DriverIDIntelMesa, "lavapipe": core.DriverIDLavapipe,
}

// VendorTuning is the quirk-table tuning of a vendor of PlanAsVendors.
func VendorTuning(vendor string) (core.Tuning, error) {
	id, ok := vendorDrivers[vendor]
	if !ok {
		return core.Tuning{}, fmt.Errorf("unknown vendor %q to plan as (want one of %s)", vendor, strings.Join(PlanAsVendors, ", "))
	}
	q := quirks[id]
	t := q.tuning.Clone()
	t.Source = "planned as " + vendor + ": quirk table: " + q.name
	return t, nil
}

// DefaultTuning is the quirk-table tuning of a device's driver, or the
// defaults for its kind of device, with workgroups of whole subgroups
// (WholeSubgroups: lavapipe's 8 invocations are 16 at 512-bit vectors).
func DefaultTuning(dev core.DeviceInfo) core.Tuning {
	var t core.Tuning
	switch q, ok := quirks[dev.DriverID]; {
	case ok:
		t = q.tuning.Clone()
		t.Source = "quirk table: " + q.name
	case dev.Type == core.DeviceCPU && dev.TexelPathOK():
		t = cpuTuning.Clone()
		t.Source = "defaults for CPU drivers"
	default:
		t = gpuTuning.Clone()
		t.Source = "defaults for GPUs"
	}
	t.Texel.WorkGroup = WholeSubgroups(dev, t.Texel.WorkGroup)
	t.Storage.WorkGroup = WholeSubgroups(dev, t.Storage.WorkGroup)
	return t
}

// tuningOr is t, or the device's default tuning for nil.
func tuningOr(dev core.DeviceInfo, t *core.Tuning) *core.Tuning {
	if t == nil {
		d := DefaultTuning(dev)
		t = &d
	}
	return t
}

// choosePath picks the load path of a kernel on dev: the forced one, or
// the tuning's (nil: the device's default tuning).
func choosePath(dev core.DeviceInfo, force core.LoadPath, t *core.Tuning) (core.LoadPath, *core.PathTuning, string, error) {
	if !force.Valid() {
		return force, nil, "", fmt.Errorf("unknown load path %v (want auto, texel or storage)", force)
	}
	t = tuningOr(dev, t)
	path, why := force, "forced"
	if path == core.AutoLoadPath {
		path, why = t.Path, t.Source
	}
	if path == core.TexelLoadPath && !dev.TexelPathOK() {
		return path, nil, why, fmt.Errorf("texel load path: device %s cannot use R32_SFLOAT, R32_UINT and R16_UINT uniform texel buffers", dev.Name)
	}
	return path, t.For(path), why, nil
}

// backwardTuning is the launch shape of the backward's row kernels
// (attention_backward_rows.comp): own rows per invocation by d_max, the
// workgroup's lanes, and the other side's rows each loop iteration takes.
type backwardTuning struct {
	Rows      map[int]int
	WorkGroup int
	Step      int
}

// cpuBackward is lavapipe's (figures: BENCHMARKS.md "Planner settings on
// lavapipe"): as its forward, one subgroup a workgroup and the other
// side's rows fetched once per subgroup and shared by shuffles, 4 rows a
// step; own rows 4 at d_max 64, 2 at 16, 32 and 128, 1 at 256, the most
// that pays for its compile time.
var cpuBackward = backwardTuning{Rows: map[int]int{16: 2, 32: 2, 64: 4, 128: 2, 256: 1}, WorkGroup: 8, Step: 4}

// backwardQuirks are the drivers whose backward runs on the row kernels,
// keyed by VkDriverId; the rest run the workgroup-tiled passes.
var backwardQuirks = map[uint32]backwardTuning{core.DriverIDLavapipe: cpuBackward}

// backwardTuningOf is the row kernels' backward tuning of dev's driver
// and where it comes from, or nil: the quirk table's, or, as
// DefaultTuning, lavapipe's for other CPU drivers with texel views.
func backwardTuningOf(dev core.DeviceInfo) (*backwardTuning, string) {
	if t, ok := backwardQuirks[dev.DriverID]; ok {
		return &t, "quirk table: " + quirks[dev.DriverID].name
	}
	if dev.Type == core.DeviceCPU && dev.TexelPathOK() {
		t := cpuBackward
		return &t, "defaults for CPU drivers"
	}
	return nil, ""
}
