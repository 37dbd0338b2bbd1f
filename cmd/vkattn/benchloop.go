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

// The decode-loop suite: decode steps through a KV cache, H=32 H_kv=8
// d=128 (B=1), at cache lengths 1k..32k, contiguous and paged, f32 and
// f16 caches; each cache as long as its length, and the 1k step also in a
// 32k cache (a step's work follows the length, not the capacity).
var (
	loopCases = []struct{ length, capacity int }{
		{1024, 1024}, {1024, 32768}, {4096, 4096}, {16384, 16384}, {32768, 32768},
	}
	loopPage              = 256 // positions a page of the paged caches
	loopH, loopHKV, loopD = 32, 8, 128
)

// loopResult is one decode-loop measurement. The counters are a step's:
// what a discrete GPU pays per token beyond the kernels (a submission and
// a host wait are a round trip each).
type loopResult struct {
	Length       int     `json:"cache_length"`
	Capacity     int     `json:"capacity"`
	Cache        string  `json:"cache"` // contiguous or paged
	DType        string  `json:"dtype"`
	StepNS       int64   `json:"step_median_ns"` // append, query, attention and O back: one DecodeStep.Run
	GPUNS        int64   `json:"gpu_median_ns"`  // the attention's device time (0 without timestamps)
	StepsPerS    float64 `json:"steps_per_s"`
	GBPS         float64 `json:"cache_gb_per_s"` // bytes of K and V read a step over the device time
	Allocs       int     `json:"allocs_per_step"`
	Submits      float64 `json:"submits_per_step"`
	Waits        float64 `json:"waits_per_step"`
	StagingBytes float64 `json:"staging_bytes_per_step"`
	Variant      string  `json:"variant"`
	ColdWallNS   int64   `json:"cold_wall_ns"` // the first step, compiling its variant
}

// benchDecodeLoop measures reps decode steps of each case, layout and
// type: a step (DecodeStep.Run) appends one token's K and V, attends with
// its query and reads O back; the token is then rolled back (outside the
// step's timing and counts) so the length stays put.
func benchDecodeLoop(ctx context.Context, dev *vkattn.Device, reps int, seed uint64, clock *dispatchClock, tick func()) ([]loopResult, error) {
	r := rand.New(rand.NewPCG(seed, 0x6c6f6f70)) // "loop"
	randn := func(n int) []float32 {
		x := make([]float32, n)
		for i := range x {
			x[i] = float32(r.NormFloat64())
		}
		return x
	}
	var out []loopResult
	for _, c := range loopCases {
		for _, page := range []int{0, loopPage} {
			for _, dt := range []vkattn.DType{vkattn.Float32, vkattn.Float16} {
				res, err := loopOne(ctx, dev, c.length, c.capacity, page, dt, reps, randn, clock, tick)
				if err != nil {
					return out, fmt.Errorf("cache length %d of %d, page %d, %v: %w", c.length, c.capacity, page, dt, err)
				}
				out = append(out, res)
			}
		}
	}
	return out, nil
}

func loopOne(ctx context.Context, dev *vkattn.Device, s, capacity, page int, dt vkattn.DType, reps int, randn func(int) []float32, clock *dispatchClock, tick func()) (loopResult, error) {
	H, HKV, D := loopH, loopHKV, loopD
	res := loopResult{Length: s, Capacity: capacity, Cache: "contiguous", DType: dt.String()}
	if page > 0 {
		res.Cache = "paged " + strconv.Itoa(page)
	}
	cache, err := dev.NewKVCache(vkattn.KVCacheConfig{B: 1, HKV: HKV, Capacity: capacity, DK: D, DV: D, DType: dt, PageSize: page})
	if err != nil {
		return res, err
	}
	var step *vkattn.DecodeStep
	defer func() {
		clock.idle()
		closeAfter(ctx, func() {
			step.Close()
			cache.Close()
		})
	}()
	// The history: s-1 tokens, appended in blocks to bound host memory;
	// each step appends the s-th.
	for n := 0; n < s-1; {
		m := min(1024, s-1-n)
		if err := cache.Append(randn(HKV*m*D), randn(HKV*m*D), m); err != nil {
			return res, err
		}
		n += m
	}
	if step, err = cache.PrepareStep(H, vkattn.Options{}); err != nil {
		return res, err
	}
	plan, err := step.Plan()
	if err != nil {
		return res, err
	}
	res.Variant = plan.Kernel.Variant.Name()
	k, v, qData, o := randn(HKV*D), randn(HKV*D), randn(H*D), make([]float32, H*D)
	lens := []int{s - 1}
	start := time.Now()
	clock.begin(true)
	if _, err := step.Run(ctx, k, v, qData, o); err != nil { // compiles the variant
		return res, err
	}
	clock.done()
	res.ColdWallNS = int64(time.Since(start))
	tick()
	var steps, gpus []time.Duration
	var counted vkattn.Stats
	for i := 0; i < reps; i++ {
		if err := cache.Truncate(lens); err != nil {
			return res, err
		}
		before := dev.Stats()
		t0 := time.Now()
		clock.begin(false)
		gpu, err := step.Run(ctx, k, v, qData, o)
		if err != nil {
			return res, err
		}
		clock.done()
		steps, gpus = append(steps, time.Since(t0)), append(gpus, gpu)
		d := dev.Stats().Since(before)
		counted.Allocations += d.Allocations
		counted.Submits += d.Submits
		counted.Waits += d.Waits
		counted.StagingBytes += d.StagingBytes
		tick()
	}
	res.Allocs = counted.Allocations / reps
	res.Submits, res.Waits = float64(counted.Submits)/float64(reps), float64(counted.Waits)/float64(reps)
	res.StagingBytes = float64(counted.StagingBytes) / float64(reps)
	res.StepNS, res.GPUNS = tune.StatsOf(steps).Median, tune.StatsOf(gpus).Median
	res.StepsPerS = 1 / time.Duration(res.StepNS).Seconds()
	if res.GPUNS > 0 {
		res.GBPS = float64(2*HKV*s*D*dt.Bytes()) / time.Duration(res.GPUNS).Seconds() / 1e9
	}
	return res, nil
}

// printLoopTable writes the decode-loop results as a table.
func printLoopTable(w io.Writer, device string, rs []loopResult) {
	fmt.Fprintf(w, "device: %s\ndecode steps, H=%d H_kv=%d d=%d B=1: append one token, attend with its query, read O back (median of the timed steps; counts per step)\n", device, loopH, loopHKV, loopD)
	rows := [][]string{{"length", "capacity", "layout", "dtype", "kernel", "cold", "step", "gpu", "steps/s", "cache GB/s", "allocs", "submits", "waits", "staged"}}
	for _, r := range rs {
		gpu, gbps := "n/a", "n/a"
		if r.GPUNS > 0 {
			gpu, gbps = durString(time.Duration(r.GPUNS)), rate(r.GBPS)
		}
		rows = append(rows, []string{strconv.Itoa(r.Length), strconv.Itoa(r.Capacity), r.Cache, r.DType, r.Variant, durString(time.Duration(r.ColdWallNS)),
			durString(time.Duration(r.StepNS)), gpu, rate(r.StepsPerS), gbps, strconv.Itoa(r.Allocs),
			strconv.FormatFloat(r.Submits, 'g', 3, 64), strconv.FormatFloat(r.Waits, 'g', 3, 64), strconv.FormatFloat(r.StagingBytes, 'f', 0, 64)})
	}
	printAligned(w, rows, map[int]bool{2: true, 3: true, 4: true})
}
