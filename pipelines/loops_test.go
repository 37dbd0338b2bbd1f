package pipelines

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/vkattn/vkattn/core"
)

func TestLoopBudgetByDriver(t *testing.T) {
	for _, c := range []struct {
		driver uint32
		info   string
		want   int
	}{
		{core.DriverIDLavapipe, "Mesa 22.3.6 (LLVM 15.0.6)", 65535},
		{core.DriverIDLavapipe, "Mesa 25.0.7 (LLVM 15.0.6)", 65535},
		{core.DriverIDLavapipe, "Mesa 26.1.6 (LLVM 19.1.7)", 0},
		{core.DriverIDLavapipe, "", 65535},
		{core.DriverIDNvidia, "580.95", 0},
		{core.DriverIDMesaRADV, "Mesa 22.3.6", 0},
	} {
		d := core.DeviceInfo{DriverID: c.driver, DriverInfo: c.info}
		if got := d.LoopBudget(); got != c.want {
			t.Errorf("driver %d %q: budget %d, want %d", c.driver, c.info, got, c.want)
		}
	}
}

// Every plan on a device with a loop budget keeps each invocation of its
// kernels (and the split-K merge) within it, or is refused with a
// LimitError, on every vendor's plan; without a budget nothing is split
// or refused for it.
func TestPlansFitTheLoopBudget(t *testing.T) {
	dev := lavapipeLike()
	dev.DriverInfo = "Mesa 22.3.6 (LLVM 15.0.6)"
	budget := dev.LoopBudget()
	for _, vendor := range append([]string{""}, PlanAsVendors...) {
		tuning := DefaultTuning(dev)
		if vendor != "" {
			var err error
			if tuning, err = VendorTuning(vendor); err != nil {
				t.Fatal(err)
			}
		}
		for _, s := range []int{1000, 10000, 262140, 262141, 1 << 20} {
			for _, l := range []int{1, 64, 1024} {
				for _, d := range []int{4, 64, 256, core.MaxHeadWidth} {
					for _, weights := range []bool{false, true} {
						in := PlanInput{AttentionShape: DenseShape(1, 4, 2, l, s, d, d), Tuning: &tuning}
						in.Weights = weights
						name := fmt.Sprintf("%s L=%d S=%d d=%d weights %v", vendor, l, s, d, weights)
						p, err := PlanAttention(dev, in)
						var limit *LimitError
						if errors.As(err, &limit) {
							continue
						} else if err != nil {
							t.Fatalf("%s: %v", name, err)
						}
						keys, n := s, 0
						if p.Splits > 0 {
							keys = p.SplitKeys
							if c := combineLoops(p.Splits, d); c > budget {
								t.Errorf("%s: the merge of %d splits loops %d times", name, p.Splits, c)
							}
						}
						if p.Variant.Family == FamilyTiled {
							n = tiledLoops(&p, keys, weights)
						} else {
							n = rowLoops(&p, keys, weights)
						}
						if n > budget {
							t.Errorf("%s: %s loops %d times", name, p.Variant, n)
						}
					}
				}
			}
		}
	}
}

// Split-K decode's merge loops once per split for each of its output
// elements: a tuning of 4 keys a split would merge 65,536 splits of 2^18
// keys, more than the budget; the planner splits them into fewer, longer
// blocks that each invocation and the merge run whole.
func TestSplitKMergeWithinTheLoopBudget(t *testing.T) {
	dev := lavapipeLike()
	tuning := DefaultTuning(dev)
	tuning.Texel.SplitKeys = 4
	in := PlanInput{AttentionShape: DenseShape(1, 1, 1, 1, 1<<18, 64, 64), Tuning: &tuning}
	p, err := PlanAttention(dev, in)
	if err != nil {
		t.Fatal(err)
	}
	budget := dev.LoopBudget()
	if p.Splits == 0 || p.Splits*p.SplitKeys < in.S || combineLoops(p.Splits, 64) > budget || rowLoops(&p, p.SplitKeys, false) > budget {
		t.Errorf("%d splits of %d keys: the merge loops %d times, a split %d; want both within %d",
			p.Splits, p.SplitKeys, combineLoops(p.Splits, 64), rowLoops(&p, p.SplitKeys, false), budget)
	}
	if combineLoops(in.S/4, 64) <= budget {
		t.Errorf("the tuning's own splits would fit the budget: not a test of the merge")
	}
}

// A call with more work than one submission should carry runs as chunks
// of at most that much (down to one query row), on CPUs and GPUs alike;
// split-K calls are not chunked for work.
func TestLongCallsChunkedByWork(t *testing.T) {
	gpu := lavapipeLike()
	gpu.Type, gpu.DriverID = core.DeviceDiscrete, core.DriverIDNvidia
	for _, dev := range []struct {
		name string
		dev  core.DeviceInfo
	}{{"cpu", lavapipeLike()}, {"gpu", gpu}} {
		most := DispatchFLOPs(dev.dev)
		for _, shape := range []AttentionShape{
			DenseShape(1, 1, 1, 100000, 100000, 64, 64),
			DenseShape(2, 8, 2, 4096, 4096, 128, 128),
			DenseShape(1, 1, 1, 1, 1<<18, 64, 64),
		} {
			p, err := PlanAttention(dev.dev, PlanInput{AttentionShape: shape})
			if err != nil {
				t.Fatalf("%s %+v: %v", dev.name, shape, err)
			}
			cs := p.ChunkList()
			work := 0.0
			for _, c := range cs {
				if c.flops(&p.Shape) > most && c.nl > 1 {
					t.Errorf("%s: a chunk of %.3g FLOPs, more than %.3g", dev.name, c.flops(&p.Shape), most)
				}
				work += c.flops(&p.Shape)
			}
			if whole := headsChunk(&p.Shape, 0, shape.B, 0, shape.HKV).flops(&p.Shape); work != whole {
				t.Errorf("%s: chunks of %.4g FLOPs in all, want the call's %.4g", dev.name, work, whole)
			}
			if p.Splits > 0 && len(cs) > 1 {
				t.Errorf("%s: a split-K call in %d chunks", dev.name, len(cs))
			}
		}
	}
}

// A dense layer loops once per four inputs: 262,140 inputs plan on a
// device with a loop budget, 262,144 are refused.
func TestLinearWithinTheLoopBudget(t *testing.T) {
	dev := lavapipeLike()
	layer := func(inputs int) LinearInput {
		return LinearInput{Rows: 1, Outputs: 1, Inputs: inputs, Aligned: true, X: core.Float32, W: core.Float32}
	}
	if _, err := PlanLinear(dev, layer(4*dev.LoopBudget())); err != nil {
		t.Errorf("%d inputs: %v", 4*dev.LoopBudget(), err)
	}
	var limit *LimitError
	if _, err := PlanLinear(dev, layer(4*dev.LoopBudget()+1)); !errors.As(err, &limit) {
		t.Errorf("%d inputs: %v, want a LimitError", 4*dev.LoopBudget()+1, err)
	}
}

// A device whose stage takes fewer storage buffers than a kernel binds
// (Vulkan's minimum is 4) refuses the plan, naming the limit.
func TestPlanRefusesBindingsPastTheStageLimits(t *testing.T) {
	dev := lavapipeLike()
	in := PlanInput{AttentionShape: DenseShape(1, 2, 2, 16, 16, 16, 16), Force: core.StorageLoadPath}
	if _, err := PlanAttention(dev, in); err != nil {
		t.Fatal(err)
	}
	dev.Limits.MaxStageStorageBuffers = 4
	_, err := PlanAttention(dev, in)
	var limit *LimitError
	if !errors.As(err, &limit) || !strings.Contains(err.Error(), "maxPerStageDescriptorStorageBuffers") {
		t.Errorf("4 storage buffers a stage: %v, want a LimitError naming maxPerStageDescriptorStorageBuffers", err)
	}
}
