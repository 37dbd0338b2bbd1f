package vkattn_test

import (
	"errors"
	"math/rand"
	"sort"
	"testing"

	"github.com/vkattn/vkattn"
	"github.com/vkattn/vkattn/internal/devtest"
)

// Long loops: lavapipe before Mesa 26 ends an invocation's loops after
// 65,535 iterations (core.DeviceInfo.LoopBudget) and silently drops the
// work past them. The planner counts each kernel's loops and splits the
// keys (split-K) or refuses the call where one invocation would loop more.
// Each family runs at the most keys it takes in one invocation and one
// past that, against the reference, on inputs whose last key outweighs
// all others: a loop count looser than the driver's would drop it and fail.

// lastKeyDominates makes p's last key carry nearly all the weight of every
// query row: positive queries and a last key row of 10s.
func lastKeyDominates(p *devtest.Problem) {
	for i := range p.Q {
		p.Q[i] = 0.5 + p.Q[i]*p.Q[i]
	}
	s, dk := p.KS[2], p.KS[3]
	for bh := 0; bh < p.KS[0]*p.KS[1]; bh++ {
		row := p.K[(bh*s+s-1)*dk : (bh*s+s)*dk]
		for i := range row {
			row[i] = 10
		}
	}
}

// mostUnsplit is the largest key count up to hi that d plans for p's
// other extents without splitting the keys (0 if every count splits).
func mostUnsplit(t *testing.T, d *vkattn.Device, p *devtest.Problem, hi int) int {
	t.Helper()
	planOf := func(s int) vkattn.Plan {
		ks, vs := p.KS, p.VS
		ks[2], vs[2] = s, s
		plan, err := d.PlanAs(p.QS[:], ks[:], vs[:], p.Types, p.Opts)
		if err != nil {
			t.Fatalf("plan of %d keys: %v", s, err)
		}
		return plan
	}
	return sort.Search(hi, func(s int) bool { return planOf(s+1).Kernel.Splits > 0 })
}

// checkLoopBoundary runs l query rows over the most keys d's plan takes
// unsplit and one more (split) against the reference.
func checkLoopBoundary(t *testing.T, d *vkattn.Device, l, dk int, types [3]vkattn.DType) {
	t.Helper()
	if d.Info().LoopBudget() == 0 {
		t.Skipf("%s runs loops whole", d.Info().Name)
	}
	r := rand.New(rand.NewSource(191))
	probe := devtest.NewProblem(r, 1, 1, 1, l, 8, dk, dk)
	probe.Types = types
	most := mostUnsplit(t, d, probe, 1<<20)
	if most == 0 || most == 1<<20 {
		t.Fatalf("no key count where the plan starts splitting: %d", most)
	}
	for _, s := range []int{most, most + 1} {
		p := devtest.NewProblem(r, 1, 1, 1, l, s, dk, dk)
		p.Types = types
		lastKeyDominates(p)
		got := devtest.RunGPU(t, d, p)
		if split := got.Out.Plan.Kernel.Splits > 0; split != (s > most) {
			t.Fatalf("%d keys: split %v", s, split)
		}
		devtest.Compare(t, "O", got.O, devtest.RunReference(t, p).O)
	}
}

func TestLongLoopsRowKernel(t *testing.T) {
	checkLoopBoundary(t, devtest.RowDev, 64, 4, [3]vkattn.DType{})
}

func TestLongLoopsRowKernelQ8(t *testing.T) {
	checkLoopBoundary(t, devtest.RowDev, 32, 32, [3]vkattn.DType{vkattn.Float32, vkattn.Q8_0, vkattn.Q8_0})
}

func TestLongLoopsTiled(t *testing.T) {
	devtest.InParallel(t, []string{"nvidia", "amd", "intel"}, func(t *testing.T, plan string) {
		d := map[string]*vkattn.Device{"nvidia": devtest.NVIDIADev, "amd": devtest.AMDDev, "intel": devtest.IntelDev}[plan]
		checkLoopBoundary(t, d, 64, 4, [3]vkattn.DType{})
	})
}

// The weights pass loops once more per key and has no split-K form: past
// the budget the call is refused.
func TestLongLoopsWeightsRefused(t *testing.T) {
	d := devtest.RowDev
	budget := d.Info().LoopBudget()
	if budget == 0 {
		t.Skipf("%s runs loops whole", d.Info().Name)
	}
	plans := func(s int) bool {
		ks := []int{1, 1, s, 4}
		_, err := d.Plan([]int{1, 1, 64, 4}, ks, ks, vkattn.Options{WantWeights: true})
		if err != nil && !errors.Is(err, vkattn.ErrTooLarge) {
			t.Fatalf("weights of %d keys: %v", s, err)
		}
		return err == nil
	}
	most := sort.Search(budget, func(s int) bool { return !plans(s + 1) })
	if most == 0 || most == budget {
		t.Fatalf("no key count where the weights are refused: %d", most)
	}
	r := rand.New(rand.NewSource(193))
	p := devtest.NewProblem(r, 1, 1, 1, 64, most, 4, 4)
	p.Weights = true
	lastKeyDominates(p)
	got := devtest.RunGPU(t, d, p)
	want := devtest.RunReference(t, p)
	devtest.Compare(t, "O", got.O, want.O)
	devtest.Compare(t, "weights", got.W, want.Weights)
}

// The backward passes: lavapipe's row passes loop once per 4 keys (the
// query pass) or 4 query rows (the key pass): 262,140 keys or query rows
// run whole, one more is refused. The workgroup-tiled passes (forced
// storage loads) loop once per staged row and per tile (d <= 16: 16 rows
// a tile, 18 iterations each, 3,640 tiles): 58,240. The last key and the
// last query row carry most of the gradients.
func TestLongLoopsBackward(t *testing.T) {
	if devtest.Dev.Info().LoopBudget() == 0 {
		t.Skipf("%s runs loops whole", devtest.Dev.Info().Name)
	}
	for _, c := range []struct {
		name string
		d    *vkattn.Device
		most int
	}{{"row passes", devtest.Dev, 262140}, {"tiled passes", devtest.StorageDev, 58240}} {
		for _, keys := range []bool{true, false} {
			l, s := 2, c.most
			if !keys {
				l, s = c.most, 2
			}
			r := rand.New(rand.NewSource(197))
			p := devtest.NewProblem(r, 1, 1, 1, l, s, 16, 16)
			for i := 0; i < 16; i++ {
				p.K[(s-1)*16+i], p.V[(s-1)*16+i] = 3, 100
			}
			dO := devtest.RandomValues(r, l*16)
			for i := range dO[(l-1)*16:] {
				dO[(l-1)*16+i] = 1000
			}
			checkBackwardOf(t, c.d, p, dO)
			long := devtest.NewProblem(r, 1, 1, 1, l+boolInt(!keys), s+boolInt(keys), 16, 16)
			q, k, v := long.Inputs(t, c.d)
			_, err := c.d.AttentionBackward(q, k, v, devtest.Zeros(t, c.d, 1, 1, long.QS[2], 16), long.Opts)
			if !errors.Is(err, vkattn.ErrTooLarge) {
				t.Errorf("%s: backward of %d query rows and %d keys: %v, want ErrTooLarge", c.name, long.QS[2], long.KS[2], err)
			}
			for _, x := range []*vkattn.Tensor{q, k, v} {
				x.Close()
			}
		}
	}
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}
