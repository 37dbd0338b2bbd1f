package vkattn_test

import (
	"errors"
	"fmt"
	"math/rand"
	"strings"
	"testing"

	"github.com/vkattn/vkattn"
	"github.com/vkattn/vkattn/core"
	"github.com/vkattn/vkattn/internal/devtest"
	"github.com/vkattn/vkattn/pipelines"
)

// TestGPUPlansNameTiledKernels: planned as NVIDIA's or AMD's driver, scaled
// dot-product attention runs the tiled kernels - prefill at every head
// width up to 256 with shared-memory tiles sized to the device, decode as
// tiled split-K, multi-head latent attention's 576/512 heads over one KV
// head too, with V as K's leading columns staged in K's tiles alone - and
// the plan says so; lavapipe's own plan keeps its row kernels, and
// additive attention (no tiled variant) keeps them too.
func TestGPUPlansNameTiledKernels(t *testing.T) {
	info := devtest.Dev.Info()
	for vendor, d := range map[string]*vkattn.Device{"nvidia": devtest.NVIDIADev, "amd": devtest.AMDDev, "intel": devtest.IntelDev} {
		for _, c := range []struct {
			name           string
			h, hkv, l, s   int
			dk, dv         int
			weights, split bool
			vFromK         bool // V = K.Columns(0, dv): planned from tensors
		}{
			{"prefill d64", 8, 8, 512, 512, 64, 64, false, false, false},
			{"prefill d128 GQA", 8, 2, 300, 300, 128, 128, false, false, false},
			{"prefill d256", 2, 2, 64, 64, 256, 256, false, false, false},
			{"odd widths", 2, 1, 17, 33, 33, 20, false, false, false},
			{"decode GQA", 32, 8, 1, 4096, 128, 128, false, true, false},
			{"decode with weights", 8, 2, 1, 1024, 64, 64, true, false, false}, // within lavapipe's loop budget (SEMANTICS.md §14)
			{"MLA decode", 128, 1, 1, 4096, 576, 512, false, true, false},
			{"MLA decode, V from K", 128, 1, 1, 4096, 576, 512, false, true, true},
			{"MLA prefill, V from K", 128, 1, 16, 64, 576, 512, false, false, true},
		} {
			t.Run(vendor+"/"+c.name, func(t *testing.T) {
				plan, err := d.Plan([]int{1, c.h, c.l, c.dk}, []int{1, c.hkv, c.s, c.dk}, []int{1, c.hkv, c.s, c.dv}, vkattn.Options{WantWeights: c.weights})
				if c.dk == 576 && d.Info().Limits.MaxSubgroupSize < 8 {
					// 576 + 512 floats of q and output a row over at most 4
					// lanes exceed the registers planned a lane (lavapipe
					// at 4-lane subgroups, the width leg of make test).
					if !errors.Is(err, vkattn.ErrTooLarge) || !strings.Contains(err.Error(), "registers planned a lane") {
						t.Errorf("a 576-wide head on %d-lane subgroups: %v, want ErrTooLarge naming the registers", d.Info().Limits.MaxSubgroupSize, err)
					}
					return
				}
				if c.vFromK {
					// Prepared, not run: the plan of tensors whose V views K.
					q, k := devtest.Zeros(t, d, 1, c.h, c.l, c.dk), devtest.Zeros(t, d, 1, c.hkv, c.s, c.dk)
					v, verr := k.Columns(0, c.dv)
					if verr != nil {
						t.Fatal(verr)
					}
					call, perr := d.Prepare(q, k, v, vkattn.Options{})
					if perr != nil {
						t.Fatal(perr)
					}
					plan = call.Output().Plan
					call.Close()
				}
				if err != nil {
					t.Fatal(err)
				}
				k := plan.Kernel
				// Heads up to 256 wide share one bound; MLA's have their own.
				dv := k.DMax
				if c.dk == 576 {
					dv = 512
				}
				if k.VFromK != c.vFromK || k.DVMax != dv || (c.dk == 576 && k.DMax != 576) {
					t.Errorf("plan %v: V from K %v, d_max %d and %d; want %v, %d", k, k.VFromK, k.DMax, k.DVMax, c.vFromK, dv)
				}
				if devtest.VariantOf(k).Family != pipelines.FamilyTiled || devtest.VariantOf(k).SplitK != c.split || (k.Splits > 0) != c.split {
					t.Fatalf("plan %v: want the tiled kernel (split-K %v)", k, c.split)
				}
				// Float32 tiles of Bc keys: K's rows of d_max, V's of its
				// bound (d_max, or d_v's own past 256 wide); V from K keeps
				// one vec4 slot of its array, its rows read from K's tile.
				tiles := 4 * k.KeyTile * (k.DMax + k.DVMax)
				if k.VFromK {
					tiles = 4*k.KeyTile*k.DMax + 16
				}
				if k.SharedBytes <= 0 || k.SharedBytes > int(info.Limits.MaxSharedMemory) || k.SharedBytes != tiles {
					t.Errorf("plan %v: %d B of shared memory for tiles of %d keys at d_max %d and %d (want %d; device: %d)", k, k.SharedBytes, k.KeyTile, k.DMax, k.DVMax, tiles, info.Limits.MaxSharedMemory)
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
		if devtest.VariantOf(plan.Kernel).Family == pipelines.FamilyTiled && info.DriverID == core.DriverIDLavapipe && d.PlannedAs() == "" {
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

// TestWideHeadsWithNarrowV: multi-head latent attention's d_k 576 (and a
// 300-wide head) with d_v of 16 and fewer runs on the tiled kernels of a
// GPU plan and agrees with the float64 reference, where a d_v of 16 or
// less once left too few lanes a row for the registers planned (a
// narrower V must never need more than a wider one).
func TestWideHeadsWithNarrowV(t *testing.T) {
	d := devtest.NVIDIADev
	r := rand.New(rand.NewSource(57))
	for _, w := range [][2]int{{576, 16}, {576, 4}, {300, 8}} {
		p := devtest.NewProblem(r, 1, 4, 1, 2, 40, w[0], w[1])
		p.Opts.Causal = vkattn.CausalBottomRight
		if w[0] == 576 && d.Info().Limits.MaxSubgroupSize < 8 {
			// 4-lane subgroups: 576 floats of q a row over 4 lanes
			// exceed a lane's registers whatever d_v (SEMANTICS.md §2).
			if _, err := d.Plan(p.QS[:], p.KS[:], p.VS[:], p.Opts); !errors.Is(err, vkattn.ErrTooLarge) {
				t.Errorf("d_k %d d_v %d on %d-lane subgroups: %v, want ErrTooLarge", w[0], w[1], d.Info().Limits.MaxSubgroupSize, err)
			}
			continue
		}
		devtest.CheckAgainstReference(t, d, p)
	}
}
