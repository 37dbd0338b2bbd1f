package harness

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strconv"
	"time"

	"github.com/vkattn/vkattn"
	"github.com/vkattn/vkattn/internal/random"
	"github.com/vkattn/vkattn/kv"
	"github.com/vkattn/vkattn/tune"
)

// CacheSuite is the shape of the KV-cache suites of `vkattn bench`: decode
// steps of H query heads over HKV KV heads of width D (B = 1 but for the
// fork's sequences), caches of each of Types, paged ones in pages of Page
// positions, RoPE (nil: none); DecodeLoop's cache lengths and capacities;
// Fork's Sequences continuations of a Prompt-token prompt.
type CacheSuite struct {
	H, HKV, D, Page   int
	Types             []vkattn.DType
	Cases             []LoopCase
	Sequences, Prompt int
	RoPE              *vkattn.RoPE
}

// LoopCase is a decode-loop cache: stepped at Length positions, holding
// Capacity.
type LoopCase struct{ Length, Capacity int }

// DefaultCacheSuite is bench's: H=32 H_kv=8 d=128, pages of 256, f32,
// f16, q8_0 and q4_0 caches (their bytes per token side by side); decode
// steps at cache lengths 1k..32k, each cache as long as its length and the
// 1k step also in a 32k cache (a step's work follows the length, not the
// capacity); 8 continuations of a 4,096-token prompt.
var DefaultCacheSuite = CacheSuite{
	H: 32, HKV: 8, D: 128, Page: 256,
	Types:     []vkattn.DType{vkattn.Float32, vkattn.Float16, vkattn.Q8_0, vkattn.Q4_0},
	Cases:     []LoopCase{{1024, 1024}, {1024, 32768}, {4096, 4096}, {16384, 16384}, {32768, 32768}},
	Sequences: 8, Prompt: 4096,
}

// normals gives n standard normal values at a time from r.
func normals(r *rand.Rand) func(n int) []float32 {
	return func(n int) []float32 { return random.Normal(r, n) }
}

// LoopResults is how many results DecodeLoop gives: every case, layout and type.
func (cs CacheSuite) LoopResults() int { return len(cs.Cases) * 2 * len(cs.Types) }

// LoopResult is one decode-loop measurement. The counters are a step's:
// what a discrete GPU pays per token beyond the kernels (a submission and
// a host wait are a round trip each).
type LoopResult struct {
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

// DecodeLoop measures reps decode steps of each case, layout and type
// (bench --suite decode-loop): a step (DecodeStep.Run) appends one token's K and V, attends with
// its query and reads O back; the token is then rolled back (outside the
// step's timing and counts) so the length stays put. The cases of one
// cache length (the 1k step in a 1k and in a 32k cache, each layout and
// type) are prepared together and their steps taken in turns, so that
// the machine's drift falls on all of them alike.
func (cs CacheSuite) DecodeLoop(ctx context.Context, dev *vkattn.Device, reps int, seed uint64, clock *tune.Clock, tick func()) ([]LoopResult, error) {
	tick = tickOf(tick)
	randn := normals(rand.New(rand.NewPCG(seed, 0x6c6f6f70))) // "loop"
	var out []LoopResult
	for first := 0; first < len(cs.Cases); {
		last := first
		for last < len(cs.Cases) && cs.Cases[last].Length == cs.Cases[first].Length {
			last++
		}
		var group []*loopRun
		err := func() error {
			defer func() {
				clock.Idle()
				CloseAfter(ctx, func() {
					for _, l := range group {
						l.close()
					}
				})
			}()
			for _, c := range cs.Cases[first:last] {
				for _, page := range []int{0, cs.Page} {
					for _, dt := range cs.Types {
						l, err := cs.newLoopRun(ctx, dev, loopCache{c.Length, c.Capacity, page, dt}, randn, clock, tick)
						if l != nil {
							group = append(group, l)
						}
						if err != nil {
							return fmt.Errorf("cache length %d of %d, page %d, %v: %w", c.Length, c.Capacity, page, dt, err)
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
	res           LoopResult
	cache         *kv.Cache
	dstep         *kv.DecodeStep
	k, v, q, o    []float32
	steps, gpus   []time.Duration
	counted       vkattn.Stats
	historyLength int
	dt            vkattn.DType
}

// loopCache is one decode-loop case: a cache of capacity positions (page
// > 0: paged) of element type dt, stepped at length s.
type loopCache struct {
	s, capacity, page int
	dt                vkattn.DType
}

func (cs CacheSuite) newLoopRun(ctx context.Context, dev *vkattn.Device, c loopCache, randn func(int) []float32, clock *tune.Clock, tick func()) (*loopRun, error) {
	H, HKV, D := cs.H, cs.HKV, cs.D
	s, dt := c.s, c.dt
	l := &loopRun{res: LoopResult{Length: s, Capacity: c.capacity, Cache: "contiguous", DType: dt.String(), BytesPerToken: 2 * dt.StorageBytes(HKV*D)}, historyLength: s - 1, dt: dt}
	if c.page > 0 {
		l.res.Cache = "paged " + strconv.Itoa(c.page)
	}
	if r := cs.RoPE; r != nil {
		l.res.RoPE = fmt.Sprintf("theta %g, %d dims, %v, scaling %v", r.Theta, r.RotatedDims(D), r.Style, r.Scaling)
	}
	var err error
	if l.cache, err = kv.New(dev, kv.Config{B: 1, HKV: HKV, Capacity: c.capacity, DK: D, DV: D, DType: dt, PageSize: c.page, RoPE: cs.RoPE}); err != nil {
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
func (l *loopRun) result(reps int) LoopResult {
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

// ForkResult is one fork measurement: the pool after the steps against
// what independent copies of every sequence would hold.
type ForkResult struct {
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

// Fork measures reps decode steps of Sequences continuations of a
// Prompt-token prompt in a paged cache, for each cache type (bench
// --suite fork): the prompt goes into sequence 0 and is forked to the
// others, which then share its pages; each step appends every sequence's
// own token.
func (cs CacheSuite) Fork(ctx context.Context, dev *vkattn.Device, reps int, seed uint64, clock *tune.Clock, tick func()) ([]ForkResult, error) {
	tick = tickOf(tick)
	randn := normals(rand.New(rand.NewPCG(seed, 0x666f726b))) // "fork"
	B, H, HKV, D, page, prompt := cs.Sequences, cs.H, cs.HKV, cs.D, cs.Page, cs.Prompt
	var out []ForkResult
	for _, dt := range cs.Types {
		res, err := func() (ForkResult, error) {
			res := ForkResult{Sequences: B, Prompt: prompt, Page: page, DType: dt.String(), Steps: reps}
			// A pool for the shared prompt and each sequence's own pages
			// (a copy of the prompt's last one, and new ones): what
			// sharing saves, a pool B copies would not fit in.
			pages := (prompt+page-1)/page + B*(1+(reps+page-1)/page)
			cache, err := kv.New(dev, kv.Config{B: B, HKV: HKV, Capacity: prompt + reps + 1, DK: D, DV: D, DType: dt, PageSize: page, Pages: pages, RoPE: cs.RoPE})
			if err != nil {
				return res, err
			}
			var step *kv.DecodeStep
			defer func() {
				clock.Idle()
				CloseAfter(ctx, func() {
					step.Close()
					cache.Close()
				})
			}()
			for n := 0; n < prompt; {
				m := min(1024, prompt-n)
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
			res.PagesIndependent = B * ((prompt + reps + page - 1) / page)
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
