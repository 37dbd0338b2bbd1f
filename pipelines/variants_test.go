package pipelines

import (
	"slices"
	"testing"

	"github.com/vkattn/vkattn/core"
	"github.com/vkattn/vkattn/shaders"
)

// TestManifestIsTheVariantTable: shaders/manifest.txt, which tools/glslc.sh
// builds the SPIR-V from, is what the variant table generates.
func TestManifestIsTheVariantTable(t *testing.T) {
	got := shaderFile(t, "manifest.txt")
	if string(got) != Manifest() {
		t.Errorf("shaders/manifest.txt is not pipelines.Manifest(): run go generate ./pipelines\ngot:\n%s\nwant:\n%s", got, Manifest())
	}
}

// TestEveryVariantIsReachable plans a grid of problems (prefill and decode,
// aligned and odd widths, weights or not, scaled dot-product and additive
// scores, dense layers) on devices with and without vec4 texel buffers and
// subgroup shuffles, on every load path, and checks that the variants the
// planner picks are exactly the table's and that each has SPIR-V, and that
// every embedded SPIR-V is in the table.
func TestEveryVariantIsReachable(t *testing.T) {
	gpu := lavapipeLike()
	gpu.Name, gpu.Type, gpu.DriverID = "fake discrete GPU", core.DeviceDiscrete, core.DriverIDNvidia
	gpu.Limits.SubgroupSize, gpu.Limits.MinSubgroupSize, gpu.Limits.MaxSubgroupSize = 32, 32, 32
	gpu.SubgroupSizeControl, gpu.FullSubgroups = true, true // the tiled kernels
	gpu.Limits.MaxSharedMemory = 48 << 10
	noVec4Texels := lavapipeLike()
	noVec4Texels.TexelWords4 = false
	reached := map[Variant]bool{
		{Family: FamilyHeadMean}: true, // Kernels.HeadMean's one build
		{Family: FamilySelftest}: true, // the vk package's tests
		{Family: FamilyHeatmap}:  true, // package viewer's Painter
		{Family: FamilyRoPE}:     true, // Kernels.RoPE's one build
		{Family: FamilyQ8Store}:  true, // Kernels.Q8Store's one build
		{Family: FamilyMerge}:    true, // Kernels.Merge's one build
		{Family: FamilyRegroup}:  true, // Kernels.Regroup's one build
	}
	for _, dev := range []core.DeviceInfo{lavapipeLike(), gpu, noVec4Texels} {
		for _, force := range []core.LoadPath{core.AutoLoadPath, core.TexelLoadPath, core.StorageLoadPath} {
			for _, aligned := range []bool{true, false} {
				for _, in := range []PlanInput{
					{AttentionShape: DenseShape(1, 8, 8, 1024, 1024, 64, 64)},
					{AttentionShape: DenseShape(1, 32, 8, 1, 4096, 128, 128)},
				} {
					if !aligned {
						in.Q.Offset++
					}
					for _, additive := range []bool{false, true} {
						for _, weights := range []bool{false, true} {
							for _, kv := range []core.DType{core.Float32, core.Q8_0, core.Q4_0} {
								if kv.Quantized() && additive {
									continue // additive K is a float projection
								}
								in.Force, in.Additive, in.Weights = force, additive, weights
								in.K.Type, in.V.Type = kv, kv
								p, err := PlanAttention(dev, in)
								if err != nil {
									t.Fatalf("%s %+v: %v", dev.Name, in, err)
								}
								reached[p.Variant] = true
								bp, err := planBackward(dev, p)
								if err != nil {
									t.Fatal(err)
								}
								for i := range bp.families {
									reached[bp.variant(i)] = true
								}
								if p.Splits > 0 {
									reached[Variant{Family: FamilyCombine}] = true
								}
							}
						}
					}
				}
				lp, err := PlanLinear(dev, LinearInput{Rows: 6, Outputs: 24, Inputs: 8, Aligned: aligned, Force: force})
				if err != nil {
					t.Fatal(err)
				}
				reached[lp.Variant] = true
				// dW = dY^T X of a layer of 8 outputs and 8 (or 7) inputs.
				width := 8
				if !aligned {
					width = 7
				}
				gp, err := PlanGrad(dev, GradShape{M: 8, N: width, K: 6, A: GradOperand{RowStride: 1, KStride: 8}, B: GradOperand{RowStride: 1, KStride: width},
					C: RowLayout{Stride: width}}, force, nil)
				if err != nil {
					t.Fatal(err)
				}
				reached[gp.Variant] = true
			}
		}
	}
	// Float16 calls on a device with cooperative matrices.
	half := DenseShape(1, 8, 8, 1024, 1024, 64, 64)
	half.Q.Type, half.K.Type, half.V.Type = core.Float16, core.Float16, core.Float16
	if p, err := PlanAttention(withMatrices(gpu, 16), PlanInput{AttentionShape: half}); err != nil {
		t.Fatal(err)
	} else {
		reached[p.Variant] = true
	}
	if lp, err := PlanLinear(withMatrices(gpu, 16), LinearInput{Rows: 6, Outputs: 24, Inputs: 8, X: core.Float16, W: core.Float16}); err != nil {
		t.Fatal(err)
	} else {
		reached[lp.Variant] = true
	}
	for v := range reached {
		if !slices.Contains(Variants, v) {
			t.Errorf("the planner reaches %s, which is not in the variant table", v)
		}
	}
	embedded := shaders.Names()
	for _, v := range Variants {
		if !reached[v] {
			t.Errorf("variant %s is in the table but no plan reaches it", v)
		}
		if _, err := shaders.SPIRV(v.Name()); err != nil {
			t.Errorf("variant %s: %v", v, err)
		}
	}
	for _, name := range embedded {
		if !slices.ContainsFunc(Variants, func(v Variant) bool { return v.Name() == name }) {
			t.Errorf("shaders/%s.spv is embedded but no variant names it", name)
		}
	}
	if len(embedded) != len(Variants) {
		t.Errorf("%d SPIR-V files for %d variants", len(embedded), len(Variants))
	}
}
