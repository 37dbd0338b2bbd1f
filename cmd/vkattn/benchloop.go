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
	loopTypes             = []vkattn.DType{vkattn.Float32, vkattn.Float16, vkattn.Q8_0}
)

// loopResult is one decode-loop measurement. The counters are a step's:
// what a discrete GPU pays per token beyond the kernels (a submission and
// a host wait are a round trip each).
type loopResult struct {
	Length        int     `json:"cache_length"`
	Capacity      int     `json:"capacity"`
	Cache         string  `json:"cache"` // contiguous or paged
	DType         string  `json:"dtype"`
	RoPE          string  `json:"rope,omitempty"`        // the cache's RoPE; empty: none
	BytesPerToken int     `json:"cache_bytes_per_token"` // K and V of every KV head
	StepNS        int64   `json:"step_median_ns"`        // append, query, attention and O back: one DecodeStep.Run
	GPUNS         int64   `json:"gpu_median_ns"`         // the attention's device time (0 without timestamps)
	StepsPerS     float64 `json:"steps_per_s"`
	GBPS          float64 `json:"cache_gb_per_s"` // bytes of K and V read a step over the device time
	Allocs        int     `json:"allocs_per_step"`
	Submits       float64 `json:"submits_per_step"`
	Waits         float64 `json:"waits_per_step"`
	StagingBytes  float64 `json:"staging_bytes_per_step"`
	Variant       string  `json:"variant"`
	ColdWallNS    int64   `json:"cold_wall_ns"` // the first step, compiling its variant
}

// benchDecodeLoop measures reps decode steps of each case, layout and
// type: a step (DecodeStep.Run) appends one token's K and V, attends with
// its query and reads O back; the token is then rolled back (outside the
// step's timing and counts) so the length stays put. The cases of one
// cache length (the 1k step in a 1k and in a 32k cache, each layout and
// type) are prepared together and their steps taken in turns, so that
// the machine's drift falls on all of them alike.
func benchDecodeLoop(ctx context.Context, dev *vkattn.Device, reps int, seed uint64, rope *vkattn.RoPE, clock *tune.Clock, tick func()) ([]loopResult, error) {
	r := rand.New(rand.NewPCG(seed, 0x6c6f6f70)) // "loop"
	randn := func(n int) []float32 {
		x := make([]float32, n)
		for i := range x {
			x[i] = float32(r.NormFloat64())
		}
		return x
	}
	var out []loopResult
	for first := 0; first < len(loopCases); {
		last := first
		for last < len(loopCases) && loopCases[last].length == loopCases[first].length {
			last++
		}
		var group []*loopRun
		err := func() error {
			defer func() {
				clock.Idle()
				tune.CloseAfter(ctx, func() {
					for _, l := range group {
						l.close()
					}
				})
			}()
			for _, c := range loopCases[first:last] {
				for _, page := range []int{0, loopPage} {
					for _, dt := range loopTypes {
						l, err := newLoopRun(ctx, dev, loopCache{c.length, c.capacity, page, dt, rope}, randn, clock, tick)
						if l != nil {
							group = append(group, l)
						}
						if err != nil {
							return fmt.Errorf("cache length %d of %d, page %d, %v: %w", c.length, c.capacity, page, dt, err)
						}
					}
				}
			}
			for i := 0; i < reps; i++ {
				for _, l := range group {
					if err := l.step(ctx, dev, clock, tick); err != nil {
						return fmt.Errorf("cache length %d of %d, %s, %s: %w", l.res.Length, l.res.Capacity, l.res.Cache, l.res.DType, err)
					}
				}
			}
			return nil
		}()
		for _, l := range group {
			if len(l.steps) == reps {
				out = append(out, l.result(reps))
			}
		}
		if err != nil {
			return out, err
		}
		first = last
	}
	return out, nil
}

// loopRun is one decode-loop case prepared: its cache filled to one token
// short of its length, its step compiled, and what the timed steps saw.
type loopRun struct {
	res           loopResult
	cache         *vkattn.KVCache
	dstep         *vkattn.DecodeStep
	k, v, q, o    []float32
	steps, gpus   []time.Duration
	counted       vkattn.Stats
	historyLength int
	dt            vkattn.DType
}

// loopCache is one decode-loop case: a cache of capacity positions (page
// > 0: paged) of element type dt, with RoPE or not, stepped at length s.
type loopCache struct {
	s, capacity, page int
	dt                vkattn.DType
	rope              *vkattn.RoPE
}

func newLoopRun(ctx context.Context, dev *vkattn.Device, c loopCache, randn func(int) []float32, clock *tune.Clock, tick func()) (*loopRun, error) {
	H, HKV, D := loopH, loopHKV, loopD
	s, dt := c.s, c.dt
	l := &loopRun{res: loopResult{Length: s, Capacity: c.capacity, Cache: "contiguous", DType: dt.String(), BytesPerToken: 2 * dt.StorageBytes(HKV*D)}, historyLength: s - 1, dt: dt}
	if c.page > 0 {
		l.res.Cache = "paged " + strconv.Itoa(c.page)
	}
	if c.rope != nil {
		l.res.RoPE = fmt.Sprintf("theta %g, %d dims, %v, scaling %v", c.rope.Theta, c.rope.RotatedDims(D), c.rope.Style, c.rope.Scaling)
	}
	var err error
	if l.cache, err = dev.NewKVCache(vkattn.KVCacheConfig{B: 1, HKV: HKV, Capacity: c.capacity, DK: D, DV: D, DType: dt, PageSize: c.page, RoPE: c.rope}); err != nil {
		return nil, err
	}
	// The history: s-1 tokens, appended in blocks to bound host memory;
	// each step appends the s-th.
	for n := 0; n < s-1; {
		m := min(1024, s-1-n)
		if err := l.cache.Append(randn(HKV*m*D), randn(HKV*m*D), m); err != nil {
			return l, err
		}
		n += m
	}
	if l.dstep, err = l.cache.PrepareStep(H, vkattn.Options{}); err != nil {
		return l, err
	}
	plan, err := l.dstep.Plan()
	if err != nil {
		return l, err
	}
	l.res.Variant = plan.Kernel.Variant
	l.k, l.v, l.q, l.o = randn(HKV*D), randn(HKV*D), randn(H*D), make([]float32, H*D)
	start := time.Now()
	clock.Begin(true)
	if _, err := l.dstep.Run(ctx, l.k, l.v, l.q, l.o); err != nil { // compiles the variant
		return l, err
	}
	clock.Done()
	l.res.ColdWallNS = int64(time.Since(start))
	tick()
	return l, nil
}

// step takes one timed step, counting what it cost the device.
func (l *loopRun) step(ctx context.Context, dev *vkattn.Device, clock *tune.Clock, tick func()) error {
	if err := l.cache.Truncate([]int{l.historyLength}); err != nil {
		return err
	}
	before := dev.Stats()
	t0 := time.Now()
	clock.Begin(false)
	gpu, err := l.dstep.Run(ctx, l.k, l.v, l.q, l.o)
	if err != nil {
		return err
	}
	clock.Done()
	l.steps, l.gpus = append(l.steps, time.Since(t0)), append(l.gpus, gpu)
	d := dev.Stats().Since(before)
	l.counted.Allocations += d.Allocations
	l.counted.Submits += d.Submits
	l.counted.Waits += d.Waits
	l.counted.StagingBytes += d.StagingBytes
	tick()
	return nil
}

// result is the case's row, its reps timed steps done.
func (l *loopRun) result(reps int) loopResult {
	res := l.res
	res.Allocs = l.counted.Allocations / reps
	res.Submits, res.Waits = float64(l.counted.Submits)/float64(reps), float64(l.counted.Waits)/float64(reps)
	res.StagingBytes = float64(l.counted.StagingBytes) / float64(reps)
	res.StepNS, res.GPUNS = tune.StatsOf(l.steps).Median, tune.StatsOf(l.gpus).Median
	res.StepsPerS = 1 / time.Duration(res.StepNS).Seconds()
	if res.GPUNS > 0 {
		res.GBPS = float64(res.Length*res.BytesPerToken) / time.Duration(res.GPUNS).Seconds() / 1e9
	}
	return res
}

func (l *loopRun) close() {
	l.dstep.Close()
	l.cache.Close()
}

// printLoopTable writes the decode-loop results as a table.
func printLoopTable(w io.Writer, device string, rs []loopResult) {
	fmt.Fprintf(w, "device: %s\ndecode steps, H=%d H_kv=%d d=%d B=1: append one token, attend with its query, read O back (median of the timed steps; counts per step)\n", device, loopH, loopHKV, loopD)
	if len(rs) > 0 && rs[0].RoPE != "" {
		fmt.Fprintf(w, "RoPE: %s (keys rotated on append, each query on the device)\n", rs[0].RoPE)
	}
	rows := [][]string{{"length", "capacity", "layout", "dtype", "B/token", "kernel", "cold", "step", "gpu", "steps/s", "cache GB/s", "allocs", "submits", "waits", "staged"}}
	for _, r := range rs {
		gpu, gbps := "n/a", "n/a"
		if r.GPUNS > 0 {
			gpu, gbps = durString(time.Duration(r.GPUNS)), rate(r.GBPS)
		}
		rows = append(rows, []string{strconv.Itoa(r.Length), strconv.Itoa(r.Capacity), r.Cache, r.DType, strconv.Itoa(r.BytesPerToken), r.Variant, durString(time.Duration(r.ColdWallNS)),
			durString(time.Duration(r.StepNS)), gpu, rate(r.StepsPerS), gbps, strconv.Itoa(r.Allocs),
			strconv.FormatFloat(r.Submits, 'g', 3, 64), strconv.FormatFloat(r.Waits, 'g', 3, 64), strconv.FormatFloat(r.StagingBytes, 'f', 0, 64)})
	}
	printAligned(w, rows, map[int]bool{2: true, 3: true, 5: true})
}
