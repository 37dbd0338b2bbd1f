package kv_test

import (
	"context"
	"fmt"
	"math/rand"
	"strings"
	"testing"

	"github.com/vkattn/vkattn"
	"github.com/vkattn/vkattn/internal/devtest"
	"github.com/vkattn/vkattn/kv"
)

// A KV cache with RoPE stores each key rotated at its position and
// rotates the queries of every call at theirs: appends from the host and
// from device tensors, prepared calls replayed after appends (their
// queries move with the lengths), and decode steps, on lavapipe's plan and
// the NVIDIA plan with discrete memory, a float32 cache against the
// reference's RoPE and a paged float16 one against keys rotated in
// float64 and then rounded, as it stores them.
func TestKVCacheRoPE(t *testing.T) {
	for _, plan := range devtest.OwnAndNVIDIA {
		for _, half := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/half %v", plan, half), func(t *testing.T) { cacheRoPE(t, devtest.EveryPlan()[plan], half) })
		}
	}
}

func cacheRoPE(t *testing.T, d *vkattn.Device, half bool) {
	const B, H, HKV, D, capacity = 2, 4, 2, 16, 40
	r := rand.New(rand.NewSource(95))
	rope := &vkattn.RoPE{Theta: 10000, Dims: 12, Style: vkattn.RoPEInterleaved}
	cfg := kv.Config{B: B, HKV: HKV, Capacity: capacity, DK: D, DV: D, RoPE: rope}
	if half {
		cfg.DType, cfg.PageSize = vkattn.Float16, 8
	}
	cache, err := kv.New(d, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer cache.Close()
	// The history holds what the reference attends over: unrotated keys
	// for the float32 cache (the reference rotates them), keys rotated in
	// float64 then rounded for the half one (queries rotated alike).
	hist := newHistory(B, HKV, D, D, cfg.DType)
	opts := vkattn.Options{}
	if !half {
		opts.RoPE = rope
	}
	rotate := func(x []float32, heads, n, first int) []float32 {
		return devtest.RotatedFrom(x, heads, n, D, rope, first)
	}
	record := func(b int, k, v []float32, n int) {
		if half {
			k = rotate(k, HKV, n, cache.Lengths()[b]-n)
		}
		hist.add(b, k, v, n)
	}
	check := func(what string, o, q []float32, L int) {
		t.Helper()
		if half {
			var rq []float32
			for b := 0; b < B; b++ {
				rq = append(rq, rotate(q[b*H*L*D:(b+1)*H*L*D], H, L, cache.Lengths()[b]-L)...)
			}
			q = rq
		}
		hist.check(t, what, o, q, H, L, opts)
	}
	// Ragged prefills from the host.
	for b, n := range []int{9, 6} {
		k, v := devtest.RandomValues(r, HKV*n*D), devtest.RandomValues(r, HKV*n*D)
		if err := cache.AppendTo(b, k, v, n); err != nil {
			t.Fatal(err)
		}
		record(b, k, v, n)
	}
	// Two tokens from device tensors.
	k, v := devtest.RandomValues(r, B*HKV*2*D), devtest.RandomValues(r, B*HKV*2*D)
	if err := cache.AppendTensors(devtest.Upload(t, d, []int{B, HKV, 2, D}, k), devtest.Upload(t, d, []int{B, HKV, 2, D}, v)); err != nil {
		t.Fatal(err)
	}
	for b := 0; b < B; b++ {
		record(b, k[b*HKV*2*D:(b+1)*HKV*2*D], v[b*HKV*2*D:(b+1)*HKV*2*D], 2)
	}
	// A prepared call of two queries, run, then replayed after an append.
	qData := devtest.RandomValues(r, B*H*2*D)
	q := devtest.Upload(t, d, []int{B, H, 2, D}, qData)
	call, err := cache.Prepare(q, vkattn.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer call.Close()
	if !strings.Contains(call.Output().Plan.String(), "after rotating Q (RoPE") {
		t.Errorf("plan %q does not name the query rotation", call.Output().Plan)
	}
	for round := 0; round < 2; round++ {
		if round == 1 {
			k, v := devtest.RandomValues(r, B*HKV*D), devtest.RandomValues(r, B*HKV*D)
			if err := cache.Append(k, v, 1); err != nil {
				t.Fatal(err)
			}
			for b := 0; b < B; b++ {
				record(b, k[b*HKV*D:(b+1)*HKV*D], v[b*HKV*D:(b+1)*HKV*D], 1)
			}
		}
		check(fmt.Sprintf("prepared call, round %d", round), devtest.Replay(t, q, qData, call.Run, call.Output().O), qData, 2)
	}
	// Decode steps.
	step := devtest.PrepareStep(t, cache, H, vkattn.Options{})
	defer step.Close()
	o := make([]float32, B*H*D)
	for i := 0; i < 3; i++ {
		k, v, q := devtest.RandomValues(r, B*HKV*D), devtest.RandomValues(r, B*HKV*D), devtest.RandomValues(r, B*H*D)
		if _, err := step.Run(context.Background(), k, v, q, o); err != nil {
			t.Fatal(err)
		}
		for b := 0; b < B; b++ {
			record(b, k[b*HKV*D:(b+1)*HKV*D], v[b*HKV*D:(b+1)*HKV*D], 1)
		}
		check(fmt.Sprintf("step %d", i), o, q, 1)
	}
}
