package main

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"strconv"
	"time"

	"github.com/vkattn/vkattn"
	"github.com/vkattn/vkattn/tune"
)

// The fork suite: parallel sampling from one prompt in a paged cache.
// The prompt goes into sequence 0 and is forked to the others, which then
// share its pages; each decode step appends every sequence's own token.
var forkPrompt, forkSeqs = 4096, 8

// forkResult is one fork measurement: the pool after the steps against
// what independent copies of every sequence would hold.
type forkResult struct {
	Sequences        int     `json:"sequences"`
	Prompt           int     `json:"prompt"`
	Page             int     `json:"page"`
	DType            string  `json:"dtype"`
	Steps            int     `json:"steps"`
	PagesInUse       int     `json:"pages_in_use"`
	PagesIndependent int     `json:"pages_independent"` // every sequence's tokens in pages of its own
	BytesInUse       int64   `json:"cache_bytes_in_use"`
	BytesIndependent int64   `json:"cache_bytes_independent"`
	StepNS           int64   `json:"step_median_ns"` // a DecodeStep.Run of every sequence
	StepsPerS        float64 `json:"steps_per_s"`
}

// benchFork measures reps decode steps of forkSeqs continuations of a
// forkPrompt-token prompt for each cache type.
func benchFork(ctx context.Context, dev *vkattn.Device, reps int, seed uint64, rope *vkattn.RoPE, clock *tune.Clock, tick func()) ([]forkResult, error) {
	r := rand.New(rand.NewPCG(seed, 0x666f726b)) // "fork"
	randn := func(n int) []float32 {
		x := make([]float32, n)
		for i := range x {
			x[i] = float32(r.NormFloat64())
		}
		return x
	}
	B, H, HKV, D, page := forkSeqs, loopH, loopHKV, loopD, loopPage
	var out []forkResult
	for _, dt := range loopTypes {
		res, err := func() (forkResult, error) {
			res := forkResult{Sequences: B, Prompt: forkPrompt, Page: page, DType: dt.String(), Steps: reps}
			// A pool for the shared prompt and each sequence's own pages
			// (a copy of the prompt's last one, and new ones): what
			// sharing saves, a pool B copies would not fit in.
			pages := (forkPrompt+page-1)/page + B*(1+(reps+page-1)/page)
			cache, err := dev.NewKVCache(vkattn.KVCacheConfig{B: B, HKV: HKV, Capacity: forkPrompt + reps + 1, DK: D, DV: D, DType: dt, PageSize: page, Pages: pages, RoPE: rope})
			if err != nil {
				return res, err
			}
			var step *vkattn.DecodeStep
			defer func() {
				clock.Idle()
				tune.CloseAfter(ctx, func() {
					step.Close()
					cache.Close()
				})
			}()
			for n := 0; n < forkPrompt; {
				m := min(1024, forkPrompt-n)
				if err := cache.AppendTo(0, randn(HKV*m*D), randn(HKV*m*D), m); err != nil {
					return res, err
				}
				n += m
			}
			for b := 1; b < B; b++ {
				if err := cache.Fork(0, b); err != nil {
					return res, err
				}
			}
			if step, err = cache.PrepareStep(H, vkattn.Options{}); err != nil {
				return res, err
			}
			o := make([]float32, B*H*D)
			var times []time.Duration
			for i := 0; i < reps; i++ {
				k, v, q := randn(B*HKV*D), randn(B*HKV*D), randn(B*H*D)
				t0 := time.Now()
				clock.Begin(i == 0)
				if _, err := step.Run(ctx, k, v, q, o); err != nil {
					return res, err
				}
				clock.Done()
				times = append(times, time.Since(t0))
				tick()
			}
			pageBytes := int64(2 * dt.StorageBytes(HKV*page*D))
			res.PagesInUse = cache.PagesInUse()
			res.PagesIndependent = B * ((forkPrompt + reps + page - 1) / page)
			res.BytesInUse, res.BytesIndependent = int64(res.PagesInUse)*pageBytes, int64(res.PagesIndependent)*pageBytes
			res.StepNS = tune.StatsOf(times).Median
			res.StepsPerS = 1 / time.Duration(res.StepNS).Seconds()
			return res, nil
		}()
		if err != nil {
			return out, fmt.Errorf("%v cache: %w", dt, err)
		}
		out = append(out, res)
	}
	return out, nil
}

// printForkTable writes the fork results as a table.
func printForkTable(w io.Writer, device string, rs []forkResult) {
	fmt.Fprintf(w, "device: %s\n%d continuations of a %d-token prompt (H=%d H_kv=%d d=%d, pages of %d), forked, then decode steps of all of them\n",
		device, forkSeqs, forkPrompt, loopH, loopHKV, loopD, loopPage)
	rows := [][]string{{"dtype", "steps", "pages", "independent", "cache MB", "independent MB", "step", "steps/s"}}
	for _, r := range rs {
		rows = append(rows, []string{r.DType, strconv.Itoa(r.Steps), strconv.Itoa(r.PagesInUse), strconv.Itoa(r.PagesIndependent),
			strconv.FormatFloat(float64(r.BytesInUse)/1e6, 'f', 1, 64), strconv.FormatFloat(float64(r.BytesIndependent)/1e6, 'f', 1, 64),
			durString(time.Duration(r.StepNS)), rate(r.StepsPerS)})
	}
	printAligned(w, rows, map[int]bool{0: true})
}

// runForkSuite is bench --suite fork.
func runForkSuite(f *benchFlags, stdout, stderr io.Writer) int {
	return runCacheSuite(f, stdout, stderr, "fork", len(loopTypes), len(loopTypes)*f.reps, benchFork, printForkTable)
}
