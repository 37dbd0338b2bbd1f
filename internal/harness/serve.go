package harness

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"time"

	"github.com/vkattn/vkattn"
	"github.com/vkattn/vkattn/kv"
)

// ServeSuite is the serving benchmark of `vkattn bench --suite serve`: a
// server batching its users over one paged KV cache. Requests arrive at
// Rate a second (Poisson arrivals), each with a prompt and an output
// length drawn uniformly from [PromptMin, PromptMax] and [OutputMin,
// OutputMax]; Slots sequences are served at once, each step carrying at
// most Budget new tokens (every decoding sequence's one, then prompt
// chunks of at most Chunks sequences: chunked prefill), and a request is
// admitted only when the pool's Pages of PageSize positions still hold its
// whole prompt and output beside those already admitted. Attention of H
// query heads over HKV KV heads of width D, the cache stored as DType.
type ServeSuite struct {
	Requests                   int
	Rate                       float64
	PromptMin, PromptMax       int
	OutputMin, OutputMax       int
	Slots, Budget, Chunks      int
	H, HKV, D, PageSize, Pages int
	DType                      vkattn.DType
}

// DefaultServeSuite is bench's: 64 requests at 20 a second, prompts of
// 64..512 tokens and outputs of 16..128, 16 slots, 256 tokens and 4 chunks
// a step, a float16 cache of 384 pages of 16 positions (6,144 positions:
// fewer than 16 of the longest requests, so admission waits for pages),
// H=8 H_kv=2 d=64.
var DefaultServeSuite = ServeSuite{
	Requests: 64, Rate: 20, PromptMin: 64, PromptMax: 512, OutputMin: 16, OutputMax: 128,
	Slots: 16, Budget: 256, Chunks: 4, H: 8, HKV: 2, D: 64, PageSize: 16, Pages: 384, DType: vkattn.Float16,
}

// ServeResult is one way of running the suite's schedule: "ragged" (one
// ragged step per step) or "per-sequence" (the same steps, one call per
// sequence that brings tokens). Times are the host's wall clock around
// each step, arrivals on the same clock. The counters are per steady step
// (one that prepared nothing: no device allocation), the allocations
// those of the whole run (each shape's first step prepares its calls).
type ServeResult struct {
	Mode       string  `json:"mode"`
	Steps      int     `json:"steps"`
	Generated  int     `json:"generated_tokens"`
	Prefilled  int     `json:"prompt_tokens"`
	Seconds    float64 `json:"seconds"` // from the first arrival to the last token
	TokensPerS float64 `json:"generated_tokens_per_s"`
	StepP50NS  int64   `json:"step_p50_ns"`
	StepP99NS  int64   `json:"step_p99_ns"`
	TTFTP50NS  int64   `json:"ttft_p50_ns"` // time to first token: arrival to the end of the prompt's last step
	TTFTP99NS  int64   `json:"ttft_p99_ns"`
	Steady     int     `json:"steady_steps"`
	Submits    float64 `json:"submits_per_step"`
	Waits      float64 `json:"waits_per_step"`
	Staged     float64 `json:"staging_bytes_per_step"`
	Allocs     int     `json:"allocations"`
}

// serveRequest is one request of the schedule.
type serveRequest struct {
	arrival         time.Duration // after the first
	prompt, output  int
	admitted, first int // the step that admitted it, the step of its first token
}

// serveStep is one step of the schedule: each slot's new tokens, and the
// slots whose requests took their last token in it.
type serveStep struct {
	counts, done []int
	ready        time.Duration // the latest arrival it admits: no step starts before
}

// Serve runs the suite (bench --suite serve): it schedules the requests
// while running ragged steps, then runs the same steps as one call per
// sequence, and returns both. tick is called as each request ends, in
// each run: 2 * Requests calls.
func (s ServeSuite) Serve(ctx context.Context, dev *vkattn.Device, seed uint64, tick func()) ([]ServeResult, error) {
	r := rand.New(rand.NewPCG(seed, 0x5e7e))
	reqs := make([]serveRequest, s.Requests)
	at := time.Duration(0)
	for i := range reqs {
		if i > 0 {
			at += time.Duration(r.ExpFloat64() / s.Rate * float64(time.Second))
		}
		reqs[i] = serveRequest{arrival: at, prompt: s.PromptMin + r.IntN(s.PromptMax-s.PromptMin+1), output: s.OutputMin + r.IntN(s.OutputMax-s.OutputMin+1)}
	}
	capacity := (s.PromptMax + s.OutputMax + s.PageSize - 1) / s.PageSize * s.PageSize
	cache, err := kv.New(dev, kv.Config{B: s.Slots, HKV: s.HKV, Capacity: capacity, DK: s.D, DV: s.D, DType: s.DType, PageSize: s.PageSize, Pages: s.Pages})
	if err != nil {
		return nil, err
	}
	defer cache.Close()
	step, err := cache.PrepareRagged(kv.RaggedConfig{Heads: s.H, Tokens: s.Budget, Chunks: s.Chunks})
	if err != nil {
		return nil, err
	}
	defer step.Close()
	data := func(n int) []float32 {
		x := make([]float32, n)
		for i := range x {
			x[i] = float32(r.NormFloat64())
		}
		return x
	}
	most := s.Budget
	k, v, q := data(s.HKV*most*s.D), data(s.HKV*most*s.D), data(s.H*most*s.D)
	o := make([]float32, s.H*most*s.D)
	var count serveCounters
	run := func(counts []int) (time.Duration, error) {
		total := 0
		for _, n := range counts {
			total += n
		}
		before := dev.Stats()
		start := time.Now()
		_, err := step.Run(ctx, counts, k[:s.HKV*total*s.D], v[:s.HKV*total*s.D], q[:s.H*total*s.D], o[:s.H*total*s.D])
		t := time.Since(start)
		count.add(dev.Stats().Since(before))
		return t, err
	}
	steps, ragged, err := s.schedule(ctx, cache, reqs, run, &count, tick)
	if err != nil {
		return nil, err
	}
	if err := cache.Reset(); err != nil {
		return nil, err
	}
	// The same steps, a call per sequence: each sequence's tokens alone.
	count = serveCounters{}
	times := make([]time.Duration, len(steps))
	one := make([]int, s.Slots)
	clock := time.Duration(0)
	ends := make([]time.Duration, len(steps))
	for i, st := range steps {
		for b, n := range st.counts {
			if n == 0 {
				continue
			}
			clear(one)
			one[b] = n
			t, err := run(one)
			if err != nil {
				return nil, err
			}
			times[i] += t
		}
		count.endStep()
		if err := emptySlots(cache, st.done); err != nil {
			return nil, err
		}
		clock = max(clock, st.ready) + times[i]
		ends[i] = clock
		ticks(tick, len(st.done))
	}
	perSeq := s.result("per-sequence", reqs, steps, times, ends, count)
	return []ServeResult{ragged, perSeq}, nil
}

// schedule serves reqs with ragged steps run by run and returns the steps
// it took and their result.
func (s ServeSuite) schedule(ctx context.Context, cache *kv.Cache, reqs []serveRequest, run func([]int) (time.Duration, error), count *serveCounters, tick func()) ([]serveStep, ServeResult, error) {
	slot := slices.Repeat([]int{-1}, s.Slots) // the request each slot serves
	prefilled, generated := make([]int, len(reqs)), make([]int, len(reqs))
	pagesOf := func(i int) int { return (reqs[i].prompt + reqs[i].output + s.PageSize - 1) / s.PageSize }
	reserved, next, finished := 0, 0, 0
	var steps []serveStep
	var times, ends []time.Duration
	clock := time.Duration(0)
	*count = serveCounters{}
	for finished < len(reqs) {
		if err := ctx.Err(); err != nil {
			return nil, ServeResult{}, err
		}
		active := slices.ContainsFunc(slot, func(i int) bool { return i >= 0 })
		if !active && next < len(reqs) {
			clock = max(clock, reqs[next].arrival) // idle until the next arrival
		}
		ready := time.Duration(0)
		for b := range slot {
			if slot[b] >= 0 || next >= len(reqs) || reqs[next].arrival > clock || reserved+pagesOf(next) > s.Pages {
				continue
			}
			slot[b], reqs[next].admitted = next, len(steps)
			reserved += pagesOf(next)
			ready = max(ready, reqs[next].arrival)
			next++
		}
		counts := make([]int, s.Slots)
		budget, chunks := s.Budget, s.Chunks
		for b, i := range slot {
			if i >= 0 && prefilled[i] == reqs[i].prompt && budget > 0 {
				counts[b], budget = 1, budget-1
			}
		}
		for b, i := range slot {
			if i >= 0 && prefilled[i] < reqs[i].prompt && budget > 0 && chunks > 0 {
				n := min(reqs[i].prompt-prefilled[i], budget)
				counts[b], budget = n, budget-n
				if n > 1 {
					chunks--
				}
			}
		}
		t, err := run(counts)
		if err != nil {
			return nil, ServeResult{}, err
		}
		count.endStep()
		clock += t
		st := serveStep{counts: counts, ready: ready}
		times, ends = append(times, t), append(ends, clock)
		for b, i := range slot {
			switch {
			case i < 0 || counts[b] == 0:
				continue
			case prefilled[i] < reqs[i].prompt:
				if prefilled[i] += counts[b]; prefilled[i] == reqs[i].prompt {
					generated[i], reqs[i].first = 1, len(steps)
				}
			default:
				generated[i]++
			}
			if generated[i] == reqs[i].output {
				slot[b], reserved, finished = -1, reserved-pagesOf(i), finished+1
				st.done = append(st.done, b)
			}
		}
		steps = append(steps, st)
		if err := emptySlots(cache, st.done); err != nil {
			return nil, ServeResult{}, err
		}
		ticks(tick, len(st.done))
	}
	return steps, s.result("ragged", reqs, steps, times, ends, *count), nil
}

// ticks calls tick n times (none if nil).
func ticks(tick func(), n int) {
	for range n {
		if tick != nil {
			tick()
		}
	}
}

// emptySlots empties the slots whose requests ended.
func emptySlots(cache *kv.Cache, slots []int) error {
	if len(slots) == 0 {
		return nil
	}
	lens := cache.Lengths()
	for _, b := range slots {
		lens[b] = 0
	}
	return cache.Truncate(lens)
}

// result sums up one run of the schedule.
func (s ServeSuite) result(mode string, reqs []serveRequest, steps []serveStep, times, ends []time.Duration, count serveCounters) ServeResult {
	res := ServeResult{Mode: mode, Steps: len(steps), Steady: count.steadySteps, Allocs: count.allocs}
	var ttft []time.Duration
	for _, rq := range reqs {
		res.Generated += rq.output
		res.Prefilled += rq.prompt
		ttft = append(ttft, ends[rq.first]-rq.arrival)
	}
	last := ends[len(ends)-1]
	res.Seconds = last.Seconds()
	res.TokensPerS = float64(res.Generated) / res.Seconds
	res.StepP50NS, res.StepP99NS = int64(percentile(times, 0.5)), int64(percentile(times, 0.99))
	res.TTFTP50NS, res.TTFTP99NS = int64(percentile(ttft, 0.5)), int64(percentile(ttft, 0.99))
	if n := float64(count.steadySteps); n > 0 {
		st := count.steady
		res.Submits, res.Waits, res.Staged = float64(st.Submits)/n, float64(st.Waits)/n, float64(st.StagingBytes)/n
	}
	return res
}

// serveCounters sum the device's counters of a run's steps: all the
// allocations, and the rest over the steady steps (those that allocated
// nothing).
type serveCounters struct {
	step, steady        vkattn.Stats // the step so far (its calls), the steady steps'
	steadySteps, allocs int
}

// add counts one call of the step under way.
func (c *serveCounters) add(s vkattn.Stats) {
	c.step.Allocations += s.Allocations
	c.step.Submits += s.Submits
	c.step.Waits += s.Waits
	c.step.StagingBytes += s.StagingBytes
}

// endStep closes the step under way.
func (c *serveCounters) endStep() {
	c.allocs += c.step.Allocations
	if c.step.Allocations == 0 {
		c.steadySteps++
		c.steady.Submits += c.step.Submits
		c.steady.Waits += c.step.Waits
		c.steady.StagingBytes += c.step.StagingBytes
	}
	c.step = vkattn.Stats{}
}

// percentile is the p-quantile of ts (nearest rank).
func percentile(ts []time.Duration, p float64) time.Duration {
	s := slices.Clone(ts)
	slices.Sort(s)
	i := int(math.Ceil(p*float64(len(s)))) - 1
	return s[max(0, min(i, len(s)-1))]
}

// String names the suite's shape in a line.
func (s ServeSuite) String() string {
	return fmt.Sprintf("%d requests at %g/s, prompts %d..%d, outputs %d..%d tokens; %d slots, %d tokens and %d chunks a step; %v cache of %d pages of %d; H=%d H_kv=%d d=%d",
		s.Requests, s.Rate, s.PromptMin, s.PromptMax, s.OutputMin, s.OutputMax, s.Slots, s.Budget, s.Chunks, s.DType, s.Pages, s.PageSize, s.H, s.HKV, s.D)
}
