package vkattn_test

import (
	"context"
	"fmt"
	"math"
	"math/rand"
	"testing"

	"github.com/vkattn/vkattn"
	"github.com/vkattn/vkattn/internal/devtest"
	"github.com/vkattn/vkattn/internal/verdict"
)

// Properties of SEMANTICS.md §15, checked on the GPU output itself (not only
// against the reference).

// TestWeightsAreADistribution: weights are >= 0 and each row sums to 1; each
// output coordinate lies between the min and max of that value coordinate.
func TestWeightsAreADistribution(t *testing.T) {
	const l, s, d = 17, 33, 16
	p := devtest.NewProblem(rand.New(rand.NewSource(11)), 2, 3, 3, l, s, d, d)
	p.Weights = true
	got := devtest.RunGPU(t, devtest.Dev, p)
	for row := 0; row < 2*3*l; row++ {
		sum := 0.0
		for j := 0; j < s; j++ {
			w := float64(got.W[row*s+j])
			if !(w >= 0) {
				t.Fatalf("row %d weight %d = %v, want >= 0", row, j, w)
			}
			sum += w
		}
		if !verdict.Near(sum, 1, 1e-5) {
			t.Fatalf("row %d weights sum to %v, want 1", row, sum)
		}
	}
	for bh := 0; bh < 2*3; bh++ {
		for i := 0; i < d; i++ {
			lo, hi := math.Inf(1), math.Inf(-1)
			for j := 0; j < s; j++ {
				x := float64(p.V[(bh*s+j)*d+i])
				lo, hi = math.Min(lo, x), math.Max(hi, x)
			}
			for t0 := 0; t0 < l; t0++ {
				o := float64(got.O[(bh*l+t0)*d+i])
				if !(o >= lo-1e-6 && o <= hi+1e-6) {
					t.Fatalf("output %v outside value range [%v, %v]", o, lo, hi)
				}
			}
		}
	}
}

// TestPermutationEquivariance: permuting the positions of self-attention
// inputs permutes the output rows the same way.
func TestPermutationEquivariance(t *testing.T) {
	const n, d = 29, 24
	r := rand.New(rand.NewSource(5))
	x := devtest.RandomValues(r, n*d)
	perm := r.Perm(n)
	px := make([]float32, n*d)
	for i, j := range perm {
		copy(px[i*d:(i+1)*d], x[j*d:(j+1)*d])
	}
	self := func(x []float32) []float32 {
		p := &devtest.Problem{Q: x, K: x, V: x, QS: [4]int{1, 1, n, d}, KS: [4]int{1, 1, n, d}, VS: [4]int{1, 1, n, d}}
		return devtest.RunGPU(t, devtest.Dev, p).O
	}
	o, po := self(x), self(px)
	for i, j := range perm {
		for c := 0; c < d; c++ {
			if !verdict.Near(float64(po[i*d+c]), float64(o[j*d+c]), 1e-5) {
				t.Fatalf("permuted row %d [%d] = %v, row %d's %v", i, c, po[i*d+c], j, o[j*d+c])
			}
		}
	}
}

// TestValueShift: adding u to every value row adds u to every output row;
// zero values give zero output.
func TestValueShift(t *testing.T) {
	const l, s, d = 9, 13, 8
	p := devtest.NewProblem(rand.New(rand.NewSource(9)), 1, 2, 2, l, s, d, d)
	base := devtest.RunGPU(t, devtest.Dev, p).O
	u := []float32{2, -1, 0.5, 3, -4, 0, 1, 7}
	shifted := *p
	shifted.V = append([]float32(nil), p.V...)
	for i := range shifted.V {
		shifted.V[i] += u[i%d]
	}
	got := devtest.RunGPU(t, devtest.Dev, &shifted).O
	for i := range got {
		if !verdict.Near(float64(got[i]), float64(base[i])+float64(u[i%d]), 2e-5) {
			t.Fatalf("output %d: shifted %v, base %v + u %v", i, got[i], base[i], u[i%d])
		}
	}
	zero := *p
	zero.V = make([]float32, len(p.V))
	for i, x := range devtest.RunGPU(t, devtest.Dev, &zero).O {
		if x != 0 {
			t.Fatalf("zero values gave output[%d] = %v", i, x)
		}
	}
}

// TestZeroQueryUniformWeights: a zero query scores every key 0, so its
// weights are uniform and its output is the mean of the values.
func TestZeroQueryUniformWeights(t *testing.T) {
	const l, s, d = 3, 7, 5
	p := devtest.NewProblem(rand.New(rand.NewSource(4)), 1, 1, 1, l, s, d, d)
	p.Q = make([]float32, l*d)
	p.Weights = true
	got := devtest.RunGPU(t, devtest.Dev, p)
	for i, w := range got.W {
		if !verdict.Near(float64(w), 1.0/s, 1e-6) {
			t.Fatalf("weight %d = %v, want 1/%d", i, w, s)
		}
	}
	for c := 0; c < d; c++ {
		mean := 0.0
		for j := 0; j < s; j++ {
			mean += float64(p.V[j*d+c]) / s
		}
		if !verdict.Near(float64(got.O[c]), mean, 1e-6) {
			t.Fatalf("output[%d] = %v, want mean %v", c, got.O[c], mean)
		}
	}
}

// TestPreparedCallReplays: a Call records its dispatch once; running it
// again after Tensor.Write gives the reference result for the new inputs,
// and allocates nothing per run.
func TestPreparedCallReplays(t *testing.T) {
	r := rand.New(rand.NewSource(31))
	p := devtest.NewProblem(r, 1, 4, 2, 9, 300, 16, 16)
	p.Opts.Causal = vkattn.CausalBottomRight
	q, k, v := devtest.Upload(t, devtest.Dev, p.QS[:], p.Q), devtest.Upload(t, devtest.Dev, p.KS[:], p.K), devtest.Upload(t, devtest.Dev, p.VS[:], p.V)
	call, err := devtest.Dev.Prepare(q, k, v, p.Opts)
	if err != nil {
		t.Fatal(err)
	}
	defer call.Close()
	for run := 0; run < 3; run++ {
		if run > 0 {
			p.Q = devtest.RandomValues(r, len(p.Q))
			if err := q.Write(p.Q); err != nil {
				t.Fatal(err)
			}
		}
		before := devtest.Dev.Stats().Allocations
		if _, err := call.Run(context.Background()); err != nil {
			t.Fatal(err)
		}
		if n := devtest.Dev.Stats().Allocations - before; n != 0 {
			t.Errorf("run %d allocated %d buffers", run, n)
		}
		got := devtest.Download(t, call.Output().O)
		devtest.Compare(t, fmt.Sprintf("run %d O", run), got, devtest.RunReference(t, p).O)
	}
	bad := make([]float32, len(p.Q))
	bad[0] = float32(math.NaN())
	devtest.CheckRefusals(t, []devtest.Refusal{
		{Name: "Write of NaN", Err: vkattn.ErrNonFinite, Run: func() error { return q.Write(bad) }},
		{Name: "Write to a view", Err: vkattn.ErrShape, Run: func() error { return q.SwapAxes12().Write(p.Q) }},
	})
}

// TestCallRunAllocatesNothing: a prepared call's Run allocates no buffer
// and creates no descriptor pool (nor any other Vulkan object), over many
// replays, on every plan: prefill with masks, LSE and weights, and split-K
// decode (whose partials and combine pass are bound once too).
func TestCallRunAllocatesNothing(t *testing.T) {
	const replays = 40
	r := rand.New(rand.NewSource(33))
	for name, d := range devtest.EveryPlan() {
		for _, c := range []struct {
			kind            string
			h, hkv, l, s, w int
		}{{"prefill", 4, 2, 9, 40, 16}, {"decode", 8, 2, 1, 600, 16}} {
			t.Run(name+"/"+c.kind, func(t *testing.T) {
				p := devtest.NewProblem(r, 2, c.h, c.hkv, c.l, c.s, c.w, c.w)
				p.Opts.Causal = vkattn.CausalBottomRight
				p.Opts.KeyLengths = []int{c.s, c.s - 3}
				p.Opts.WantLSE = true
				p.Opts.WantWeights = c.kind == "prefill"
				q, k, v := devtest.Upload(t, d, p.QS[:], p.Q), devtest.Upload(t, d, p.KS[:], p.K), devtest.Upload(t, d, p.VS[:], p.V)
				call, err := d.Prepare(q, k, v, p.Opts)
				if err != nil {
					t.Fatal(err)
				}
				defer call.Close()
				if split := call.Output().Plan.Kernel.Splits > 0; split != (c.kind == "decode") {
					t.Fatalf("plan %v: split-K %v for a %s shape", call.Output().Plan.Kernel, split, c.kind)
				}
				before, objects := d.Stats(), vkattn.LiveObjects()
				for i := 0; i < replays; i++ {
					if _, err := call.Run(context.Background()); err != nil {
						t.Fatal(err)
					}
				}
				after := d.Stats()
				if after.Allocations != before.Allocations || after.Pools != before.Pools || vkattn.LiveObjects() != objects {
					t.Errorf("%d runs allocated %d buffers and %d descriptor pools; %d objects alive before, %d after",
						replays, after.Allocations-before.Allocations, after.Pools-before.Pools, objects, vkattn.LiveObjects())
				}
				if before.Pools == 0 {
					t.Errorf("the pool accounting saw no descriptor pool at all (Prepare binds sets)")
				}
				got := devtest.Download(t, call.Output().O)
				p.WantLSE, p.Weights = true, p.Opts.WantWeights
				devtest.Compare(t, "O after the replays", got, devtest.RunReference(t, p).O)
			})
		}
	}
}
