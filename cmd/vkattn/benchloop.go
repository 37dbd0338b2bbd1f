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

// The decode-loop suite: steps of a decode loop through a KV cache, H=32
// H_kv=8 d=128 (B=1), at cache lengths 1k..32k, contiguous and paged, f32
// and f16 caches.
var (
	loopLengths           = []int{1024, 4096, 16384, 32768}
	loopPage              = 256 // positions a page of the paged caches
	loopH, loopHKV, loopD = 32, 8, 128
)

// loopResult is one decode-loop measurement.
type loopResult struct {
	Length     int     `json:"cache_length"`
	Cache      string  `json:"cache"` // contiguous or paged
	DType      string  `json:"dtype"`
	StepNS     int64   `json:"step_median_ns"` // append, query write, run and its wait
	GPUNS      int64   `json:"gpu_median_ns"`  // the run's device time (0 without timestamps)
	StepsPerS  float64 `json:"steps_per_s"`
	GBPS       float64 `json:"cache_gb_per_s"` // bytes of K and V read a step over the device time
	Allocs     int     `json:"allocs_per_step"`
	Variant    string  `json:"variant"`
	ColdWallNS int64   `json:"cold_wall_ns"` // the first run, compiling its variant
}

// benchDecodeLoop measures reps decode steps at each cache length, layout
// and type: a step appends one token's K and V, writes its query and runs
// the prepared call, then rolls the token back so the length stays put.
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
	for _, s := range loopLengths {
		for _, page := range []int{0, loopPage} {
			for _, dt := range []vkattn.DType{vkattn.Float32, vkattn.Float16} {
				res, err := loopOne(ctx, dev, s, page, dt, reps, randn, clock, tick)
				if err != nil {
					return out, fmt.Errorf("cache length %d, page %d, %v: %w", s, page, dt, err)
				}
				out = append(out, res)
			}
		}
	}
	return out, nil
}

func loopOne(ctx context.Context, dev *vkattn.Device, s, page int, dt vkattn.DType, reps int, randn func(int) []float32, clock *dispatchClock, tick func()) (loopResult, error) {
	H, HKV, D := loopH, loopHKV, loopD
	res := loopResult{Length: s, Cache: "contiguous", DType: dt.String()}
	if page > 0 {
		res.Cache = "paged " + strconv.Itoa(page)
	}
	cache, err := dev.NewKVCache(vkattn.KVCacheConfig{B: 1, HKV: HKV, Capacity: s, DK: D, DV: D, DType: dt, PageSize: page})
	if err != nil {
		return res, err
	}
	var q *vkattn.Tensor
	var call *vkattn.Call
	defer func() {
		clock.idle()
		closeAfter(ctx, func() {
			if call != nil {
				call.Close()
			}
			q.Close()
			cache.Close()
		})
	}()
	// The history: s-1 tokens, appended in blocks to bound host memory.
	for n := 0; n < s-1; {
		m := min(1024, s-1-n)
		if err := cache.Append(randn(HKV*m*D), randn(HKV*m*D), m); err != nil {
			return res, err
		}
		n += m
	}
	k, v := randn(HKV*D), randn(HKV*D)
	if err := cache.Append(k, v, 1); err != nil {
		return res, err
	}
	if q, err = dev.Upload([]int{1, H, 1, D}, randn(H*D)); err != nil {
		return res, err
	}
	if call, err = cache.Prepare(q, vkattn.Options{}); err != nil {
		return res, err
	}
	res.Variant = call.Output().Plan.Kernel.Variant.Name()
	start := time.Now()
	clock.begin(true)
	if _, err := call.Run(ctx); err != nil { // compiles the variant
		return res, err
	}
	clock.done()
	res.ColdWallNS = int64(time.Since(start))
	tick()
	qData := randn(H * D)
	lens := []int{s - 1}
	before := dev.AllocStats().Count
	var steps, gpus []time.Duration
	for i := 0; i < reps; i++ {
		if err := cache.Truncate(lens); err != nil {
			return res, err
		}
		t0 := time.Now()
		if err := cache.Append(k, v, 1); err != nil {
			return res, err
		}
		if err := q.Write(qData); err != nil {
			return res, err
		}
		clock.begin(false)
		gpu, err := call.Run(ctx)
		if err != nil {
			return res, err
		}
		clock.done()
		steps, gpus = append(steps, time.Since(t0)), append(gpus, gpu)
		tick()
	}
	res.Allocs = (dev.AllocStats().Count - before) / reps
	res.StepNS, res.GPUNS = tune.StatsOf(steps).Median, tune.StatsOf(gpus).Median
	res.StepsPerS = 1 / time.Duration(res.StepNS).Seconds()
	if res.GPUNS > 0 {
		res.GBPS = float64(2*HKV*s*D*dt.Bytes()) / time.Duration(res.GPUNS).Seconds() / 1e9
	}
	return res, nil
}

// printLoopTable writes the decode-loop results as a table.
func printLoopTable(w io.Writer, device string, rs []loopResult) {
	fmt.Fprintf(w, "device: %s\ndecode steps, H=%d H_kv=%d d=%d B=1: append one token, write its query, run (median of the timed steps)\n", device, loopH, loopHKV, loopD)
	rows := [][]string{{"cache", "layout", "dtype", "kernel", "cold", "step", "gpu", "steps/s", "cache GB/s", "allocs/step"}}
	for _, r := range rs {
		gpu, gbps := "n/a", "n/a"
		if r.GPUNS > 0 {
			gpu, gbps = durString(time.Duration(r.GPUNS)), rate(r.GBPS)
		}
		rows = append(rows, []string{strconv.Itoa(r.Length), r.Cache, r.DType, r.Variant, durString(time.Duration(r.ColdWallNS)),
			durString(time.Duration(r.StepNS)), gpu, rate(r.StepsPerS), gbps, strconv.Itoa(r.Allocs)})
	}
	printAligned(w, rows, map[int]bool{1: true, 2: true, 3: true})
}
