package vkattn_test

import (
	"fmt"
	"math/rand"
	"strings"
	"testing"

	"github.com/vkattn/vkattn"
	"github.com/vkattn/vkattn/core"
	"github.com/vkattn/vkattn/internal/devtest"
	"github.com/vkattn/vkattn/internal/engine"
	"github.com/vkattn/vkattn/pipelines"
)

// TestGPUPlansNameTiledKernels: planned as NVIDIA's or AMD's driver, scaled
// dot-product attention runs the tiled kernels - prefill at every head
// width up to 256 with shared-memory tiles sized to the device, decode as
// tiled split-K - and the plan says so; lavapipe's own plan keeps its row
// kernels, and additive attention (no tiled variant) keeps them too.
func TestGPUPlansNameTiledKernels(t *testing.T) {
	info := devtest.Dev.Info()
	for vendor, d := range map[string]*vkattn.Device{"nvidia": devtest.NVIDIADev, "amd": devtest.AMDDev, "intel": devtest.IntelDev} {
		for _, c := range []struct {
			name           string
			h, hkv, l, s   int
			dk, dv         int
			weights, split bool
		}{
			{"prefill d64", 8, 8, 512, 512, 64, 64, false, false},
			{"prefill d128 GQA", 8, 2, 300, 300, 128, 128, false, false},
			{"prefill d256", 2, 2, 64, 64, 256, 256, false, false},
			{"odd widths", 2, 1, 17, 33, 33, 20, false, false},
			{"decode GQA", 32, 8, 1, 4096, 128, 128, false, true},
			{"decode with weights", 8, 2, 1, 1024, 64, 64, true, false}, // within lavapipe's loop budget (SEMANTICS.md §20)
		} {
			t.Run(vendor+"/"+c.name, func(t *testing.T) {
				plan, err := d.Plan([]int{1, c.h, c.l, c.dk}, []int{1, c.hkv, c.s, c.dk}, []int{1, c.hkv, c.s, c.dv}, vkattn.Options{WantWeights: c.weights})
				if err != nil {
					t.Fatal(err)
				}
				k := plan.Kernel
				if engine.AttentionPlanOf(k).Variant.Family != pipelines.FamilyTiled || engine.AttentionPlanOf(k).Variant.SplitK != c.split || (k.Splits > 0) != c.split {
					t.Fatalf("plan %v: want the tiled kernel (split-K %v)", k, c.split)
				}
				if k.SharedBytes <= 0 || k.SharedBytes > int(info.Limits.MaxSharedMemory) || k.SharedBytes != 2*k.KeyTile*k.DMax*4 {
					t.Errorf("plan %v: %d B of shared memory for K/V tiles of %d keys at d_max %d (device: %d)", k, k.SharedBytes, k.KeyTile, k.DMax, info.Limits.MaxSharedMemory)
				}
				sg := k.SubgroupSize
				if sg < int(info.Limits.MinSubgroupSize) || sg > int(info.Limits.MaxSubgroupSize) || k.WorkGroup%sg != 0 || sg%k.LanesPerRow != 0 || k.WorkGroup != k.TileRows/k.RowsPerLane*k.LanesPerRow || k.TileRows%k.RowsPerLane != 0 {
					t.Errorf("plan %v: workgroup %d, %d lanes per row, subgroup %d (device range %d..%d)", k, k.WorkGroup, k.LanesPerRow, sg, info.Limits.MinSubgroupSize, info.Limits.MaxSubgroupSize)
				}
				for _, want := range []string{"attention_tiled", "shared memory", fmt.Sprintf("Br %d", k.TileRows), fmt.Sprintf("Bc %d", k.KeyTile), "planned as " + vendor} {
					if !strings.Contains(plan.String(), want) {
						t.Errorf("plan %q does not say %q", plan, want)
					}
				}
			})
		}
	}
	for name, d := range map[string]*vkattn.Device{"lavapipe's own": devtest.Dev, "forced storage": devtest.StorageDev} {
		plan, err := d.Plan([]int{1, 8, 512, 64}, []int{1, 8, 512, 64}, []int{1, 8, 512, 64}, vkattn.Options{})
		if err != nil {
			t.Fatal(err)
		}
		if engine.AttentionPlanOf(plan.Kernel).Variant.Family == pipelines.FamilyTiled && info.DriverID == core.DriverIDLavapipe && d.PlannedAs() == "" {
			t.Errorf("%s plan on lavapipe: %v; want its row kernels", name, plan.Kernel)
		}
	}
}

// TestSweepGPUPlans runs the randomized sweep (odd shapes, d_k != d_v up to
// 256, GQA/MQA, every mask kind, half inputs at every width, LSE and
// weights) under both GPU vendors' plans.
func TestSweepGPUPlans(t *testing.T) {
	t.Run("nvidia", func(t *testing.T) { sweep(t, devtest.NVIDIADev, 31, 16, sweepWidths) })
	t.Run("amd", func(t *testing.T) { sweep(t, devtest.AMDDev, 32, 8, sweepWidths) })
	// Intel's tiles (16 x 16, 2 rows per lane group) at the narrower widths:
	// its variants compile anew, and the wide ones are NVIDIA's shapes.
	t.Run("intel", func(t *testing.T) { sweep(t, devtest.IntelDev, 33, 8, []int{1, 8, 33, 64}) })
}

// TestDecodeGPUPlans covers tiled split-K decode: few query rows per KV
// head, many keys, GQA/MQA packing into one row block, every mask kind, key
// lengths that end inside a split, half K/V, widths up to 256.
func TestDecodeGPUPlans(t *testing.T) {
	decodeSweep(t, 41, 12, devtest.GPUPlanDevs(), []int{1, 2, 4, 8}, func(r *rand.Rand, c int) (int, int) {
		return pick(r, []int{8, 64, 128, 256}), pick(r, []int{8, 64, 128})
	}, 2)
	decodeSweep(t, 42, 4, []*vkattn.Device{devtest.IntelDev}, []int{1, 4}, func(r *rand.Rand, c int) (int, int) {
		return pick(r, []int{8, 64}), pick(r, []int{8, 64})
	}, 2)
}
