package vkattn_test

import (
	"errors"
	"math/rand"
	"sort"
	"testing"

	"github.com/vkattn/vkattn"
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
func lastKeyDominates(p *problem) {
	for i := range p.q {
		p.q[i] = 0.5 + p.q[i]*p.q[i]
	}
	s, dk := p.ks[2], p.ks[3]
	for bh := 0; bh < p.ks[0]*p.ks[1]; bh++ {
		row := p.k[(bh*s+s-1)*dk : (bh*s+s)*dk]
		for i := range row {
			row[i] = 10
		}
	}
}

// mostUnsplit is the largest key count up to hi that d plans for p's
// other extents without splitting the keys (0 if every count splits).
func mostUnsplit(t *testing.T, d *vkattn.Device, p *problem, hi int) int {
	t.Helper()
	planOf := func(s int) vkattn.Plan {
		ks, vs := p.ks, p.vs
		ks[2], vs[2] = s, s
		plan, err := d.PlanAs(p.qs[:], ks[:], vs[:], p.types, p.opts)
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
	probe := newProblem(r, 1, 1, 1, l, 8, dk, dk)
	probe.types = types
	most := mostUnsplit(t, d, probe, 1<<20)
	if most == 0 || most == 1<<20 {
		t.Fatalf("no key count where the plan starts splitting: %d", most)
	}
	for _, s := range []int{most, most + 1} {
		p := newProblem(r, 1, 1, 1, l, s, dk, dk)
		p.types = types
		lastKeyDominates(p)
		got := runGPU(t, d, p)
		if split := got.out.Plan.Kernel.Splits > 0; split != (s > most) {
			t.Fatalf("%d keys: split %v", s, split)
		}
		compare(t, "O", got.o, runReference(t, p).O)
	}
}

func TestLongLoopsRowKernel(t *testing.T) {
	checkLoopBoundary(t, rowDev, 64, 4, [3]vkattn.DType{})
}

func TestLongLoopsRowKernelQ8(t *testing.T) {
	checkLoopBoundary(t, rowDev, 32, 32, [3]vkattn.DType{vkattn.Float32, vkattn.Q8_0, vkattn.Q8_0})
}

func TestLongLoopsTiled(t *testing.T) {
	inParallel(t, []string{"nvidia", "amd", "intel"}, func(t *testing.T, plan string) {
		d := map[string]*vkattn.Device{"nvidia": nvidiaDev, "amd": amdDev, "intel": intelDev}[plan]
		checkLoopBoundary(t, d, 64, 4, [3]vkattn.DType{})
	})
}

// The weights pass loops once more per key and has no split-K form: past
// the budget the call is refused.
func TestLongLoopsWeightsRefused(t *testing.T) {
	d := rowDev
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
	p := newProblem(r, 1, 1, 1, 64, most, 4, 4)
	p.weights = true
	lastKeyDominates(p)
	got := runGPU(t, d, p)
	want := runReference(t, p)
	compare(t, "O", got.o, want.O)
	compare(t, "weights", got.w, want.Weights)
}

// The backward passes loop once per staged row and per tile (d <= 16: 16
// rows a tile, 18 iterations each, 3,640 tiles): 58,240 keys (the query
// pass) or query rows (the key pass) run whole, one more is refused. The
// last key and the last query row carry most of the gradients.
func TestLongLoopsBackward(t *testing.T) {
	if dev.Info().LoopBudget() == 0 {
		t.Skipf("%s runs loops whole", dev.Info().Name)
	}
	const most = 58240
	for _, keys := range []bool{true, false} {
		l, s := 2, most
		if !keys {
			l, s = most, 2
		}
		r := rand.New(rand.NewSource(197))
		p := newProblem(r, 1, 1, 1, l, s, 16, 16)
		for i := 0; i < 16; i++ {
			p.k[(s-1)*16+i], p.v[(s-1)*16+i] = 3, 100
		}
		dO := randomValues(r, l*16)
		for i := range dO[(l-1)*16:] {
			dO[(l-1)*16+i] = 1000
		}
		checkBackwardOf(t, dev, p, dO)
		long := newProblem(r, 1, 1, 1, l+boolInt(!keys), s+boolInt(keys), 16, 16)
		q, k, v := long.inputs(t, dev)
		_, err := dev.AttentionBackward(q, k, v, zeros(t, dev, 1, 1, long.qs[2], 16), long.opts)
		if !errors.Is(err, vkattn.ErrTooLarge) {
			t.Errorf("backward of %d query rows and %d keys: %v, want ErrTooLarge", long.qs[2], long.ks[2], err)
		}
		for _, x := range []*vkattn.Tensor{q, k, v} {
			x.Close()
		}
	}
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}
