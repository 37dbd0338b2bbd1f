package pipelines

import (
	"slices"
	"strings"
	"testing"

	"github.com/vkattn/vkattn/core"
)

// lavapipeLike is a device description with lavapipe's driver ID and the
// properties the planner reads; no Vulkan device is needed to plan.
func lavapipeLike() core.DeviceInfo {
	return core.DeviceInfo{
		Name: "fake lavapipe", Type: core.DeviceCPU, DriverID: core.DriverIDLavapipe,
		TexelR32F: true, TexelWords: true, TexelWords4: true,
		SubgroupSizeControl: true, FullSubgroups: true, // one width, 8 (Mesa 22.3.6)
		Limits: core.Limits{
			MaxWorkGroupCount: [3]uint32{65535, 65535, 65535}, MaxWorkGroupSize: [3]uint32{1024, 1024, 64},
			MaxWorkGroupInvocations: 1024, SubgroupSize: 8, MinSubgroupSize: 8, MaxSubgroupSize: 8, SubgroupShuffle: true,
			MaxStorageBufferRange: 128 << 20, MaxTexelBufferElements: 128 << 20,
			MinStorageAlignment: 16, MinTexelAlignment: 16, MaxSharedMemory: 32 << 10,
		},
	}
}

// TestPlanUsesTheTuning checks that a plan carries the tuning's keys per
// step and shared loads where they apply, and one key per step and
// unshared loads where they do not (a regression: the keys-per-step rule
// once read the vec4 decision before it was made, so every plan ran one
// key per step).
func TestPlanUsesTheTuning(t *testing.T) {
	dev := lavapipeLike()
	tuning := DefaultTuning(dev)
	prefill := PlanInput{AttentionShape: DenseShape(1, 8, 8, 1024, 1024, 64, 64)}
	cases := []struct {
		name       string
		edit       func(*PlanInput)
		keys       int
		shared     int
		variant    string
		splitKeyed bool
	}{
		{"prefill vec4", func(*PlanInput) {}, tuning.Texel.Keys, 8, "attention_texel_vec4_shared", false},
		{"unaligned (scalar loads)", func(in *PlanInput) { in.AttentionShape = DenseShape(1, 8, 8, 1024, 1024, 63, 63) }, 1, 0, "attention_texel_scalar", false},
		{"additive", func(in *PlanInput) { in.Additive = true }, 1, 0, "additive_texel_vec4", false},
		{"decode (split-K: lanes read different keys)", func(in *PlanInput) { in.AttentionShape = DenseShape(1, 32, 8, 1, 4096, 64, 64) }, tuning.Texel.Keys, 0, "attention_texel_vec4_split", true},
		{"storage path", func(in *PlanInput) { in.Force = core.StorageLoadPath }, tuning.Storage.Keys, 0, "attention_storage_vec4", false},
	}
	for _, c := range cases {
		in := prefill
		c.edit(&in)
		p, err := PlanAttention(dev, in)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if p.KeyTile != c.keys || p.SharedLoads != c.shared || p.Variant.Name() != c.variant || (p.Splits > 0) != c.splitKeyed {
			t.Errorf("%s: variant %s, %d keys per step, shared loads %d, %d splits; want %s, %d, %d, split %v",
				c.name, p.Variant, p.KeyTile, p.SharedLoads, p.Splits, c.variant, c.keys, c.shared, c.splitKeyed)
		}
	}

	// Shared loads need subgroup shuffles and subgroups that tile the
	// workgroup.
	for _, edit := range []func(*core.DeviceInfo){
		func(d *core.DeviceInfo) { d.Limits.SubgroupShuffle = false },
		func(d *core.DeviceInfo) { d.Limits.SubgroupSize = 16 }, // workgroup 8
	} {
		d := lavapipeLike()
		edit(&d)
		p, err := PlanAttention(d, prefill)
		if err != nil {
			t.Fatal(err)
		}
		if p.SharedLoads != 0 || p.Variant.Name() != "attention_texel_vec4" {
			t.Errorf("subgroup %d, shuffles %v: variant %s with shared loads %d, want attention_texel_vec4 unshared",
				d.Limits.SubgroupSize, d.Limits.SubgroupShuffle, p.Variant, p.SharedLoads)
		}
	}
}

// TestPlanSetsMasked checks that the mask loads are compiled in exactly
// when the call has an additive, boolean or key-padding mask.
func TestPlanSetsMasked(t *testing.T) {
	dev := lavapipeLike()
	for _, c := range []struct {
		name string
		edit func(*AttentionShape)
		want bool
	}{
		{"no mask", func(*AttentionShape) {}, false},
		{"lengths only", func(x *AttentionShape) { x.Lengths = true }, false},
		{"additive mask", func(x *AttentionShape) { x.Mask.Given = true }, true},
		{"boolean mask", func(x *AttentionShape) { x.BoolMask.Given = true }, true},
		{"key padding", func(x *AttentionShape) { x.KeyPadding = true }, true},
	} {
		in := PlanInput{AttentionShape: DenseShape(1, 2, 2, 8, 8, 16, 16)}
		c.edit(&in.AttentionShape)
		p, err := PlanAttention(dev, in)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if p.Masked != c.want {
			t.Errorf("%s: Masked = %v, want %v", c.name, p.Masked, c.want)
		}
	}
}

// TestChunksComeFromThePlan: a call too large for one binding is split by
// the planner, and the chunks binding reads back from the plan are the
// planned ones, for each way of splitting (KV heads of a batch item; rows
// of one query head).
func TestChunksComeFromThePlan(t *testing.T) {
	dev := lavapipeLike()
	for _, c := range []struct {
		name  string
		shape AttentionShape
		reach uint32 // bytes one binding reaches
	}{
		{"one chunk", DenseShape(2, 4, 2, 64, 64, 16, 16), 1 << 30},
		{"KV heads of one batch item", DenseShape(2, 4, 2, 64, 64, 16, 16), 64 * 16 * 4 * 2},
		{"rows of one query head", DenseShape(1, 4, 1, 256, 16, 16, 16), 64 * 16 * 4},
	} {
		d := dev
		d.Limits.MaxStorageBufferRange, d.Limits.MaxTexelBufferElements = c.reach, c.reach/16
		p, err := PlanAttention(d, PlanInput{AttentionShape: c.shape, Force: core.StorageLoadPath})
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		planned, err := planChunks(d, &p)
		if err != nil {
			t.Fatal(err)
		}
		if got := p.ChunkList(); !slices.Equal(got, planned) {
			t.Errorf("%s: the plan gives chunks %v, the planner chose %v", c.name, got, planned)
		}
		if c.reach < 1<<30 && p.Chunks < 2 {
			t.Errorf("%s: %d chunks within a %d-byte reach, want a split", c.name, p.Chunks, c.reach)
		}
		t.Logf("%s: %d chunks of %d KV heads, %d query heads, %d rows", c.name, p.Chunks, p.ChunkKVHeads, p.ChunkHeads, p.ChunkRows)
	}
}

// TestTiledPlansFitTheDevice: the tiled plans take their tiles from the
// vendor's tuning and fit them to the device: keys per tile halved until
// the K and V tiles fit shared memory, the subgroup size clamped into the
// device's range with whole subgroups per workgroup, lanes per row at most
// the head width in vec4s; split-K decode gets several workgroups per
// compute unit; a device without subgroup size control keeps the row
// kernels and the plan says why.
func TestTiledPlansFitTheDevice(t *testing.T) {
	gpu := func(shared, minSG, maxSG uint32) core.DeviceInfo {
		d := lavapipeLike()
		d.Type, d.DriverID = core.DeviceDiscrete, core.DriverIDMesaRADV
		d.Limits.MaxSharedMemory, d.Limits.MinSubgroupSize, d.Limits.MaxSubgroupSize = shared, minSG, maxSG
		d.Limits.SubgroupSize = maxSG
		d.SubgroupSizeControl, d.FullSubgroups = true, true
		return d
	}
	amd, err := VendorTuning("amd")
	if err != nil {
		t.Fatal(err)
	}
	tiles := *amd.Tiled
	for _, c := range []struct {
		name                      string
		dev                       core.DeviceInfo
		shape                     AttentionShape
		keys, lanes, subgroup, wg int
	}{
		{"wave64, d=64", gpu(64<<10, 32, 64), DenseShape(1, 8, 8, 512, 512, 64, 64), tiles.Keys, 8, 64, 128},
		{"d=256 in 16 KiB", gpu(16<<10, 32, 64), DenseShape(1, 2, 2, 64, 64, 256, 256), 8, 8, 64, 128},
		{"d=16: 4 lanes a row, more rows fill the subgroup", gpu(64<<10, 64, 64), DenseShape(1, 2, 2, 64, 64, 16, 16), tiles.Keys, 4, 64, 64},
		{"subgroups of 8 only", gpu(32<<10, 8, 8), DenseShape(1, 2, 2, 64, 64, 128, 128), 32, 8, 8, 128},
	} {
		p, err := PlanAttention(c.dev, PlanInput{AttentionShape: c.shape, Tuning: &amd})
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if p.Variant.Family != FamilyTiled || p.KeyTile != c.keys || p.LanesPerRow != c.lanes || p.SubgroupSize != c.subgroup || p.WorkGroup != c.wg ||
			p.SharedBytes > int(c.dev.Limits.MaxSharedMemory) || p.WorkGroup%p.SubgroupSize != 0 {
			t.Errorf("%s: %v; want Bc %d, %d lanes per row, subgroup %d, workgroup %d", c.name, p, c.keys, c.lanes, c.subgroup, c.wg)
		}
	}
	// NVIDIA's tiles: two rows per lane group, so 32 rows in 128 lanes.
	nvidia, err := VendorTuning("nvidia")
	if err != nil {
		t.Fatal(err)
	}
	if p, err := PlanAttention(gpu(48<<10, 32, 32), PlanInput{AttentionShape: DenseShape(1, 8, 8, 512, 512, 128, 128), Tuning: &nvidia}); err != nil ||
		p.TileRows != 32 || p.RowsPerLane != 2 || p.WorkGroup != 128 || p.KeyTile != 32 || p.SharedBytes != 32<<10 {
		t.Errorf("NVIDIA d=128: %v, %v; want Br 32 in 128 lanes (2 rows a lane group), Bc 32 in 32 KiB", p, err)
	}
	// Decode H=32 H_kv=8 S=4096: 8 KV heads alone would fill 8 of 96 CUs.
	dev := gpu(64<<10, 32, 64)
	p, err := PlanAttention(dev, PlanInput{AttentionShape: DenseShape(1, 32, 8, 1, 4096, 128, 128), Tuning: &amd})
	if err != nil {
		t.Fatal(err)
	}
	if groups := int(p.Grid[0] * p.Grid[1] * p.Grid[2]); !p.Variant.SplitK || groups < 4*tiles.ComputeUnits || p.SplitKeys%p.KeyTile != 0 || p.Splits*p.SplitKeys < 4096 || p.TileRows != 4 {
		t.Errorf("decode: %v; want split-K over >= %d workgroups of whole tiles, 4 packed rows a workgroup", p, 4*tiles.ComputeUnits)
	}
	noControl := dev
	noControl.SubgroupSizeControl = false
	p, err = PlanAttention(noControl, PlanInput{AttentionShape: DenseShape(1, 8, 8, 512, 512, 64, 64), Tuning: &amd})
	if err != nil {
		t.Fatal(err)
	}
	if p.Variant.Family == FamilyTiled || !strings.Contains(p.Why, "subgroup size control") {
		t.Errorf("without subgroup size control: %v; want the row kernels and why", p)
	}
	if _, err := VendorTuning("apple"); err == nil {
		t.Errorf("VendorTuning(apple): no error")
	}
}

// withMatrices is dev with subgroup-scope m x m x m float16 cooperative
// matrices (float32 accumulators) and their features.
func withMatrices(dev core.DeviceInfo, m int) core.DeviceInfo {
	dev.CooperativeMatrices = []core.CooperativeMatrix{
		{M: m, N: m, K: m, A: core.MatrixFloat16, B: core.MatrixFloat16, C: core.MatrixFloat16, Result: core.MatrixFloat16, Scope: core.MatrixSubgroup},
		{M: m, N: m, K: m, A: core.MatrixFloat16, B: core.MatrixFloat16, C: core.MatrixFloat32, Result: core.MatrixFloat32, Scope: core.MatrixSubgroup},
	}
	dev.SubgroupSizeControl, dev.FullSubgroups = true, true
	if dev.DriverID == core.DriverIDLavapipe {
		dev.DriverInfo = "Mesa 26.1.6 (LLVM 19.1.7)" // the lavapipe that has them
	}
	return dev
}

// The planner puts float16 prefill on the cooperative matrices where the
// device has a float16 shape with float32 accumulators, and keeps every
// other call where it was (SEMANTICS.md §9.3); the tiles shrink to fit
// shared memory.
func TestCoopmatPlanning(t *testing.T) {
	lavapipe26 := withMatrices(lavapipeLike(), 8)
	half := func(b, h, hkv, l, s, dk, dv int) PlanInput {
		in := PlanInput{AttentionShape: DenseShape(b, h, hkv, l, s, dk, dv)}
		in.Q.Type, in.K.Type, in.V.Type = core.Float16, core.Float16, core.Float16
		return in
	}
	plan := func(dev core.DeviceInfo, in PlanInput) AttentionPlan {
		t.Helper()
		p, err := PlanAttention(dev, in)
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	p := plan(lavapipe26, half(2, 8, 2, 100, 300, 64, 64))
	if p.Variant.Family != FamilyCoopmat || p.Matrix != 8 || p.TileRows != 16 || p.KeyTile != 16 || p.WorkGroup != 16 {
		t.Errorf("float16 prefill on 8x8x8 matrices: %v", p)
	}
	if p.Grid != [3]uint32{uint32(ceilDiv(4*100, 16)), 2, 2} {
		t.Errorf("grid %v", p.Grid)
	}
	brain := half(2, 8, 2, 100, 300, 64, 64)
	brain.Q.Type, brain.V.Type = core.BFloat16, core.BFloat16
	if p := plan(lavapipe26, brain); p.Variant.Family != FamilyCoopmat || !strings.Contains(p.String(), "Q bf16 K f16 V bf16 as float16 (bfloat16 scaled") {
		t.Errorf("bfloat16 Q and V beside float16 K on float16 matrices: %v", p)
	}
	wide := plan(lavapipe26, half(1, 2, 2, 64, 64, 256, 256))
	if wide.Variant.Family != FamilyCoopmat || wide.SharedBytes > 32<<10 || wide.TileRows != 8 {
		t.Errorf("d 256 in 32 KiB: %v", wide)
	}
	f32 := half(2, 8, 2, 100, 300, 64, 64)
	f32.Q.Type = core.Float32
	weights := half(2, 8, 2, 100, 300, 64, 64)
	weights.Weights = true
	products := half(2, 8, 2, 100, 300, 64, 64)
	products.Float32Products = true
	accumulators := lavapipe26
	accumulators.CooperativeMatrices = accumulators.CooperativeMatrices[:1] // float16 accumulators only
	for _, c := range []struct {
		name string
		dev  core.DeviceInfo
		in   PlanInput
	}{
		{"float32 Q", lavapipe26, f32},
		{"decode", lavapipe26, half(1, 8, 8, 1, 4096, 64, 64)},
		{"weights", lavapipe26, weights},
		{"Float32Products", lavapipe26, products},
		{"no float32 accumulators", accumulators, half(2, 8, 2, 100, 300, 64, 64)},
		{"no matrices", lavapipeLike(), half(2, 8, 2, 100, 300, 64, 64)},
	} {
		if p := plan(c.dev, c.in); p.Variant.Family == FamilyCoopmat {
			t.Errorf("%s: planned on the matrices: %v", c.name, p)
		}
	}
}

// Dense layers go on the matrices when X and W are both float16: a
// workgroup of (2M/M)^2 subgroups per 2M x 2M block of Y.
func TestCoopmatLinearPlanning(t *testing.T) {
	lavapipe26 := withMatrices(lavapipeLike(), 8)
	layer := func(x, w core.DType) LinearInput {
		return LinearInput{Rows: 100, Outputs: 40, Inputs: 24, Aligned: true, X: x, W: w}
	}
	p, err := PlanLinear(lavapipe26, layer(core.Float16, core.Float16))
	if err != nil {
		t.Fatal(err)
	}
	if p.Variant.Family != FamilyLinearCoopmat || p.Matrix != 8 || p.TileRows != 16 || p.TileCols != 16 ||
		p.WorkGroup != 4*int(lavapipe26.Limits.SubgroupSize) || p.Grid != [3]uint32{3, 7, 1} {
		t.Errorf("float16 layer on 8x8x8 matrices: %v", p)
	}
	products := layer(core.Float16, core.Float16)
	products.Float32Products = true
	texel := layer(core.Float16, core.Float16)
	texel.Force = core.TexelLoadPath
	for _, c := range []struct {
		name string
		dev  core.DeviceInfo
		in   LinearInput
	}{
		{"float32 X", lavapipe26, layer(core.Float32, core.Float16)},
		{"bfloat16 W", lavapipe26, layer(core.Float16, core.BFloat16)},
		{"Float32Products", lavapipe26, products},
		{"texel path forced", lavapipe26, texel},
		{"no matrices", lavapipeLike(), layer(core.Float16, core.Float16)},
	} {
		p, err := PlanLinear(c.dev, c.in)
		if err != nil {
			t.Fatal(err)
		}
		if p.Variant.Family != FamilyLinear || p.Matrix != 0 {
			t.Errorf("%s: %v, want linear.comp", c.name, p)
		}
	}
}

// A dense layer larger than one binding is planned in blocks, whole tiles
// each, that the plan names: X and Y of 1000 x 64 floats (250 KiB) in a
// 64 KiB reach are 4 blocks of 252 rows (rows halve, in whole tiles of 4,
// until they fit).
func TestLinearBlocksPlanned(t *testing.T) {
	d := lavapipeLike()
	d.Limits.MaxStorageBufferRange = 64 << 10
	p, err := PlanLinear(d, LinearInput{Rows: 1000, Outputs: 64, Inputs: 64, Aligned: true, Force: core.StorageLoadPath})
	if err != nil {
		t.Fatal(err)
	}
	if p.BlockOutputs != 64 || p.BlockRows != 252 || p.Blocks != 4 || !strings.Contains(p.String(), "in 4 blocks of 252 rows x 64 outputs") {
		t.Errorf("planned %v (blocks of %d x %d, %d)", p, p.BlockRows, p.BlockOutputs, p.Blocks)
	}
	whole, err := PlanLinear(lavapipeLike(), LinearInput{Rows: 1000, Outputs: 64, Inputs: 64, Aligned: true})
	if err != nil {
		t.Fatal(err)
	}
	if whole.Blocks != 1 || whole.BlockRows != 1000 || strings.Contains(whole.String(), "blocks") {
		t.Errorf("a layer that fits: %v", whole)
	}
}

// TestWorkGroupsAreWholeSubgroups: lavapipe's workgroups of 8 invocations
// become 16 where it runs 16-lane subgroups (512-bit vectors), for the
// forward (prefill with shared loads, split-K decode) and the dense
// layers, and stay as tuned where the device runs 8 lanes, where its
// subgroups may run at several widths, and within its workgroup limit.
func TestWorkGroupsAreWholeSubgroups(t *testing.T) {
	width := func(sg, lo, hi uint32) core.DeviceInfo {
		d := lavapipeLike()
		d.Limits.SubgroupSize, d.Limits.MinSubgroupSize, d.Limits.MaxSubgroupSize = sg, lo, hi
		return d
	}
	capped := width(16, 16, 16)
	capped.Limits.MaxWorkGroupSize[0] = 12
	cases := []struct {
		name   string
		dev    core.DeviceInfo
		wg     int
		shared int
	}{
		{"8 lanes", width(8, 8, 8), 8, 8},
		{"16 lanes", width(16, 16, 16), 16, 16},
		{"4 lanes", width(4, 4, 4), 8, 4},
		{"8..32 lanes", width(32, 8, 32), 8, 0},
		{"16 lanes, workgroups of at most 12", capped, 12, 0},
	}
	for _, c := range cases {
		if got := DefaultTuning(c.dev).Texel.WorkGroup; got != c.wg {
			t.Errorf("%s: default tuning's workgroup %d, want %d", c.name, got, c.wg)
		}
		prefill, err := PlanAttention(c.dev, PlanInput{AttentionShape: DenseShape(1, 8, 8, 1024, 1024, 64, 64)})
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if prefill.WorkGroup != c.wg || prefill.SharedLoads != c.shared {
			t.Errorf("%s: prefill workgroup %d, shared loads %d; want %d, %d", c.name, prefill.WorkGroup, prefill.SharedLoads, c.wg, c.shared)
		}
		decode, err := PlanAttention(c.dev, PlanInput{AttentionShape: DenseShape(1, 32, 32, 1, 4096, 128, 128)})
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if decode.Splits == 0 || decode.WorkGroup != c.wg {
			t.Errorf("%s: decode %d splits, workgroup %d; want split-K, %d", c.name, decode.Splits, decode.WorkGroup, c.wg)
		}
		dense, err := PlanLinear(c.dev, LinearInput{Rows: 512, Outputs: 256, Inputs: 256, Aligned: true, X: core.Float32, W: core.Float32})
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if dense.WorkGroup != c.wg {
			t.Errorf("%s: dense layer workgroup %d, want %d", c.name, dense.WorkGroup, c.wg)
		}
	}
}
