package core

import (
	"fmt"
	"maps"
	"slices"
)

// PathTuning is the attention kernel's launch shape on one load path.
type PathTuning struct {
	// Rows is the query rows per invocation for each d_max bucket (16, 32,
	// 64, 128, 256): more rows reuse each loaded key and value element
	// more, at the price of registers and compile time.
	Rows map[int]int `json:"rows_by_d_max"`
	// WorkGroup is the invocations per workgroup.
	WorkGroup int `json:"workgroup"`
	// Keys is the keys per online-softmax step (KeyChoices): more keys
	// write the loop-carried output rows less often, at the price of a
	// longer unrolled body (compile time on lavapipe).
	Keys int `json:"keys_per_step"`
	// SplitKeys is the keys per lane of split-K decode.
	SplitKeys int `json:"split_keys"`
	// SharedLoads: the lanes of a subgroup fetch each K and V row once
	// between them and share it by shuffles (texel path, vec4 prefill; used
	// where the device has compute subgroup shuffles and the workgroup is
	// a multiple of the subgroup size).
	SharedLoads bool `json:"shared_loads"`
}

// Tuning is how the attention planner launches kernels on one device: the
// preferred load path and the shape for each path (a forced path uses its
// own). The default comes from a quirk table keyed by driver ID; `vkattn
// tune` measures candidates and saves the winners.
type Tuning struct {
	Path    LoadPath   `json:"path"`
	Texel   PathTuning `json:"texel"`
	Storage PathTuning `json:"storage"`
	// Tiled, if set, runs scaled dot-product attention on the storage path
	// with the workgroup-tiled GPU kernels (attention_tiled.comp) where the
	// device can (subgroup shuffles, subgroup size control with full
	// subgroups, enough shared memory); nil keeps the row kernels.
	Tiled *TiledTuning `json:"tiled,omitempty"`
	// Wide, if set, is the tiled kernels' launch shape for heads wider
	// than MaxRowWidth where Tiled is nil: such rows do not fit one
	// invocation's registers, so they run on the tiled kernels on every
	// device that can. A tuning without either takes its device's
	// default (pipelines.DefaultTuning).
	Wide *TiledTuning `json:"wide,omitempty"`
	// Source says where the tuning came from, for Plan.
	Source string `json:"source"`
}

// TiledTuning is the launch shape of the tiled GPU kernels. The planner
// fits it to the device and the problem: lanes per row at most the head
// width in vec4s and the subgroup size, keys per tile halved until the
// K and V tiles fit in shared memory, the subgroup size clamped into the
// device's range.
type TiledTuning struct {
	// Rows is the query rows per workgroup (Br), Keys the keys per tile
	// (Bc), LanesPerRow the lanes splitting each row's head dimension.
	Rows        int `json:"rows_per_workgroup"`
	Keys        int `json:"keys_per_tile"`
	LanesPerRow int `json:"lanes_per_row"`
	// RowsPerLane is the query rows each group of LanesPerRow lanes holds
	// (prefill): every K and V value read from shared memory then serves
	// that many rows, for that many times the registers.
	RowsPerLane int `json:"rows_per_lane"`
	// DecodeLanesPerRow is LanesPerRow for split-K decode, whose few rows
	// leave lanes to spare for the head dimension.
	DecodeLanesPerRow int `json:"decode_lanes_per_row"`
	// SubgroupSize is the subgroup size the kernels require.
	SubgroupSize int `json:"subgroup_size"`
	// ComputeUnits is how many workgroups the device runs at once, roughly
	// (SMs, CUs, Xe cores: Vulkan does not report it): split-K decode
	// splits the keys until the grid has several workgroups for each.
	ComputeUnits int `json:"compute_units"`
}

// check reports whether t's values are usable shapes.
func (t *TiledTuning) check() error {
	for _, f := range []struct {
		what string
		n    int
	}{{"rows per workgroup", t.Rows}, {"keys per tile", t.Keys}, {"lanes per row", t.LanesPerRow}, {"rows per lane", t.RowsPerLane},
		{"decode lanes per row", t.DecodeLanesPerRow}, {"subgroup size", t.SubgroupSize}} {
		if f.n < 1 || f.n&(f.n-1) != 0 || f.n > 1024 {
			return fmt.Errorf("tuning: tiled kernels: %d %s, want a power of two up to 1024", f.n, f.what)
		}
	}
	if t.RowsPerLane > t.Rows {
		return fmt.Errorf("tuning: tiled kernels: %d rows per lane group, more than the %d rows per workgroup", t.RowsPerLane, t.Rows)
	}
	if t.Keys < 4 {
		return fmt.Errorf("tuning: tiled kernels: %d keys per tile, want at least 4", t.Keys)
	}
	if t.ComputeUnits < 1 {
		return fmt.Errorf("tuning: tiled kernels: %d compute units, want at least 1", t.ComputeUnits)
	}
	return nil
}

// DMaxBuckets are the compile-time head-width bounds of the row kernels
// (a tuning's rows per invocation are per bucket).
var DMaxBuckets = []int{16, 32, 64, 128, 256}

// WideDMaxBuckets are the compile-time bounds of heads wider than
// MaxRowWidth, which the tiled kernels take: up to 512, then up to
// MaxHeadWidth (576, multi-head latent attention's keys).
var WideDMaxBuckets = []int{512, MaxHeadWidth}

// DMaxOf is the compile-time bound of a head width w (1..MaxHeadWidth):
// the first of DMaxBuckets, then WideDMaxBuckets, that holds it.
func DMaxOf(w int) int {
	for _, b := range DMaxBuckets {
		if w <= b {
			return b
		}
	}
	for _, b := range WideDMaxBuckets {
		if w <= b {
			return b
		}
	}
	return WideDMaxBuckets[len(WideDMaxBuckets)-1]
}

// RowChoices are the query rows per invocation a tuning may use.
var RowChoices = []int{1, 2, 4, 8}

// KeyChoices are the keys per online-softmax step a tuning may use.
var KeyChoices = []int{1, 2, 4, 8}

// Clone copies t so that callers cannot share its maps.
func (t Tuning) Clone() Tuning {
	t.Texel.Rows = maps.Clone(t.Texel.Rows)
	t.Storage.Rows = maps.Clone(t.Storage.Rows)
	if t.Tiled != nil {
		tiles := *t.Tiled
		t.Tiled = &tiles
	}
	if t.Wide != nil {
		tiles := *t.Wide
		t.Wide = &tiles
	}
	return t
}

// For returns the shape of one load path.
func (t *Tuning) For(path LoadPath) *PathTuning {
	if path == TexelLoadPath {
		return &t.Texel
	}
	return &t.Storage
}

// Check reports whether t can run on dev: a concrete preferred path the
// device supports, a row count from RowChoices for every d_max bucket,
// a power-of-two workgroup within the device's limits, keys per step from
// KeyChoices, and split-K chunks of a positive multiple of 4 keys and of
// the keys per step.
func (t Tuning) Check(dev DeviceInfo) error {
	if t.Path != TexelLoadPath && t.Path != StorageLoadPath {
		return fmt.Errorf("tuning: preferred load path %v: want texel or storage", t.Path)
	}
	if t.Path == TexelLoadPath && !dev.TexelPathOK() {
		return fmt.Errorf("tuning: texel load path on %s, which lacks the R32F, R32UI and R16UI texel buffers it reads through", dev.Name)
	}
	if t.Tiled != nil {
		if err := t.Tiled.check(); err != nil {
			return err
		}
	}
	if t.Wide != nil {
		if err := t.Wide.check(); err != nil {
			return fmt.Errorf("wide heads: %w", err)
		}
	}
	for _, path := range []LoadPath{TexelLoadPath, StorageLoadPath} {
		pt := t.For(path)
		for _, d := range DMaxBuckets {
			if !slices.Contains(RowChoices, pt.Rows[d]) {
				return fmt.Errorf("tuning: %v path, d_max %d: %d rows per invocation, want one of %v", path, d, pt.Rows[d], RowChoices)
			}
		}
		wg := pt.WorkGroup
		if wg <= 0 || wg&(wg-1) != 0 || wg > int(dev.Limits.MaxWorkGroupSize[0]) || wg > int(dev.Limits.MaxWorkGroupInvocations) {
			return fmt.Errorf("tuning: %v path: workgroup %d, want a power of two up to the device's %d", path, wg, min(dev.Limits.MaxWorkGroupSize[0], dev.Limits.MaxWorkGroupInvocations))
		}
		if !slices.Contains(KeyChoices, pt.Keys) {
			return fmt.Errorf("tuning: %v path: %d keys per step, want one of %v", path, pt.Keys, KeyChoices)
		}
		if pt.SplitKeys < 4 || pt.SplitKeys%4 != 0 || pt.SplitKeys%pt.Keys != 0 {
			return fmt.Errorf("tuning: %v path: %d split-K keys per lane, want a positive multiple of 4 and of the %d keys per step", path, pt.SplitKeys, pt.Keys)
		}
	}
	return nil
}

// TexelPathOK reports whether the device has the texel buffer formats
// the texel load path reads through.
func (d DeviceInfo) TexelPathOK() bool { return d.TexelR32F && d.TexelWords }
