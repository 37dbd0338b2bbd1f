package kv_test

import (
	"context"
	"fmt"
	"math/rand"
	"testing"

	"github.com/vkattn/vkattn"
	"github.com/vkattn/vkattn/internal/devtest"
	"github.com/vkattn/vkattn/kv"
)

// packedRows is sequence b's rows of x, packed (heads, total, d) as a
// ragged step takes them: (heads, counts[b], d).
func packedRows(x []float32, counts []int, b, heads, d int) []float32 {
	total, first := 0, 0
	for i, n := range counts {
		if i == b {
			first = total
		}
		total += n
	}
	var rows []float32
	for h := range heads {
		at := (h*total + first) * d
		rows = append(rows, x[at:at+counts[b]*d]...)
	}
	return rows
}

// raggedRun runs one step of counts with random tokens, adds them to the
// history and checks every sequence's outputs against the reference of
// that sequence alone over its whole history.
func raggedRun(t *testing.T, r *rand.Rand, step *kv.RaggedStep, hist *history, counts []int, H int, opts vkattn.Options, what string) {
	t.Helper()
	total := 0
	for _, n := range counts {
		total += n
	}
	k, v := devtest.RandomValues(r, hist.hkv*total*hist.dk), devtest.RandomValues(r, hist.hkv*total*hist.dv)
	q, o := devtest.RandomValues(r, H*total*hist.dk), make([]float32, H*total*hist.dv)
	if _, err := step.Run(context.Background(), counts, k, v, q, o); err != nil {
		t.Fatalf("%s, counts %v: %v", what, counts, err)
	}
	for b, n := range counts {
		if n == 0 {
			continue
		}
		hist.add(b, packedRows(k, counts, b, hist.hkv, hist.dk), packedRows(v, counts, b, hist.hkv, hist.dv), n)
		devtest.Compare(t, fmt.Sprintf("%s, counts %v, sequence %d", what, counts, b), packedRows(o, counts, b, H, hist.dv), hist.want(t, b, packedRows(q, counts, b, H, hist.dk), H, n, opts))
	}
}

// A ragged step appends each sequence's own number of tokens (none, one,
// a chunk) and every new token attends causally over its sequence: on
// lavapipe's plan and the NVIDIA plan, contiguous and paged.
func TestRaggedStep(t *testing.T) {
	const B, H, HKV, D = 4, 4, 2, 16
	for _, plan := range devtest.OwnAndNVIDIA {
		for _, page := range []int{0, 16} {
			t.Run(fmt.Sprintf("%s/page %d", plan, page), func(t *testing.T) {
				d := devtest.EveryPlan()[plan]
				r := rand.New(rand.NewSource(5))
				cfg := kv.Config{B: B, HKV: HKV, Capacity: 96, DK: D, DV: D, PageSize: page}
				cache, hist := filledCache(t, d, r, cfg, 10, 0, 3, 20)
				opts := vkattn.Options{}
				step, err := cache.PrepareRagged(kv.RaggedConfig{Heads: H, Tokens: 24, Chunks: 2, Options: opts})
				if err != nil {
					t.Fatal(err)
				}
				defer step.Close()
				for i, counts := range [][]int{{0, 1, 5, 1}, {3, 1, 0, 1}, {1, 1, 1, 1}, {7, 0, 2, 1}, {0, 17, 0, 0}} {
					raggedRun(t, r, step, hist, counts, H, opts, fmt.Sprintf("step %d", i))
				}
			})
		}
	}
}
