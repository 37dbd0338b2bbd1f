package vkattn_test

import (
	"context"
	"math/rand"
	"testing"

	"github.com/vkattn/vkattn"
	"github.com/vkattn/vkattn/internal/devtest"
)

// A one-shot call on shapes seen before allocates no device memory and
// creates no descriptor pool or command buffer: what it frees serves the
// next (vk's spares). It is one submission and one host wait, on the
// row kernels and on the NVIDIA plan with discrete memory, whose output
// then comes back through the staging area (one more each).
func TestOneShotSteadyState(t *testing.T) {
	for _, plan := range devtest.OwnAndNVIDIA {
		t.Run(plan, func(t *testing.T) {
			d := devtest.EveryPlan()[plan]
			q, k, v := uploadProblem(t, d, devtest.NewProblem(rand.New(rand.NewSource(81)), 1, 2, 1, 16, 16, 16, 16))
			call := func() {
				out, err := d.AttentionContext(context.Background(), q, k, v, vkattn.Options{WantLSE: true})
				if err != nil {
					t.Fatal(err)
				}
				if _, err := out.O.Download(); err != nil {
					t.Fatal(err)
				}
				out.Close()
			}
			call() // plans, compiles, fills the spares
			before := d.Stats()
			const n = 5
			for range n {
				call()
			}
			s := d.Stats().Since(before)
			if s.Allocations != 0 || s.Pools != 0 || s.Commands != 0 {
				t.Errorf("%d one-shot calls: %d allocations, %d descriptor pools, %d command buffers; want none", n, s.Allocations, s.Pools, s.Commands)
			}
			submits := 1
			if d.Memory() == vkattn.DiscreteMemory {
				submits = 2 // the download goes through the staging area
			}
			if s.Submits != n*submits || s.Waits != n*submits {
				t.Errorf("%d one-shot calls: %d submissions, %d waits; want %d each", n, s.Submits, s.Waits, n*submits)
			}
		})
	}
}
