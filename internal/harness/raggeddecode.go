package harness

import (
	"context"
	"fmt"
	"time"

	"github.com/vkattn/vkattn"
	"github.com/vkattn/vkattn/kv"
	"github.com/vkattn/vkattn/tune"
)

// CheckSchedule checks a ragged schedule for a decode of B sequences of
// T tokens: steps of B counts of new tokens, none negative, each
// sequence's counts summing to T (every token appended and attended
// once). It returns the most tokens and the most chunks (sequences of
// more than one token) of a step.
func CheckSchedule(schedule [][]int, B, T int) (tokens, chunks int, err error) {
	if len(schedule) == 0 {
		return 0, 0, fmt.Errorf("an empty schedule: want a line of %d counts per step", B)
	}
	sums := make([]int, B)
	for i, counts := range schedule {
		if len(counts) != B {
			return 0, 0, fmt.Errorf("step %d has %d counts, want one per sequence (%d)", i+1, len(counts), B)
		}
		total, many := 0, 0
		for b, n := range counts {
			if n < 0 {
				return 0, 0, fmt.Errorf("step %d: sequence %d brings %d tokens", i+1, b, n)
			}
			total += n
			sums[b] += n
			if n > 1 {
				many++
			}
		}
		tokens, chunks = max(tokens, total), max(chunks, many)
	}
	for b, n := range sums {
		if n != T {
			return 0, 0, fmt.Errorf("sequence %d brings %d tokens over the schedule, want T = %d (every token once)", b, n, T)
		}
	}
	if tokens == 0 {
		return 0, 0, fmt.Errorf("no step brings a token")
	}
	return tokens, chunks, nil
}

// DecodeRagged runs a sequence through a KV cache as a server batching
// its users does (vkattn decode --schedule): step i appends schedule[i][b]
// next tokens of sequence b and attends with their queries, all in one
// ragged step (kv.RaggedStep), gathering every token's output. The
// schedule must pass CheckSchedule. Steps are timed on the device (wall
// time without timestamps); the first step of each shape prepares its
// calls and is timed with the rest.
func DecodeRagged(ctx context.Context, dev *vkattn.Device, in DecodeInput, schedule [][]int, clock *tune.Clock) (*DecodeRun, error) {
	q, k, v := in.QShape, in.KShape, in.VShape
	B, H, T, DK, HKV, DV := q[0], q[1], q[2], q[3], k[1], v[3]
	tokens, chunks, err := CheckSchedule(schedule, B, T)
	if err != nil {
		return nil, err
	}
	var frees []func()
	defer func() {
		CloseAfter(ctx, func() {
			for i := len(frees) - 1; i >= 0; i-- {
				frees[i]()
			}
		})
	}()
	longest := 0
	for _, counts := range schedule {
		for _, n := range counts {
			longest = max(longest, n)
		}
	}
	cache, kind, err := in.newCache(dev, longest)
	if err != nil {
		return nil, err
	}
	frees = append(frees, cache.Close)
	step, err := cache.PrepareRagged(kv.RaggedConfig{Heads: H, Tokens: tokens, Chunks: max(chunks, 1), Options: in.Opts})
	if err != nil {
		return nil, err
	}
	frees = append(frees, step.Close)
	res := &DecodeRun{O: make([]float32, B*H*T*DV), Cache: kind, Steps: len(schedule)}
	if plan, err := step.Plan(schedule[0]); err == nil {
		res.StepPlan = plan.String()
	}
	// pack gathers the next counts[b] tokens of each sequence of a
	// (B, heads, T, w) array, packed (heads, total, w); place scatters
	// the packed outputs back.
	pack := func(x []float32, heads, w int, at, counts []int, total int) []float32 {
		out := make([]float32, heads*total*w)
		for h := range heads {
			row := h * total
			for b, n := range counts {
				from := ((b*heads+h)*T + at[b]) * w
				copy(out[row*w:(row+n)*w], x[from:from+n*w])
				row += n
			}
		}
		return out
	}
	place := func(o []float32, at, counts []int, total int) {
		for h := range H {
			row := h * total
			for b, n := range counts {
				to := ((b*H+h)*T + at[b]) * DV
				copy(res.O[to:to+n*DV], o[row*DV:(row+n)*DV])
				row += n
			}
		}
	}
	at := make([]int, B) // each sequence's tokens so far
	var times []time.Duration
	start := time.Now()
	for _, counts := range schedule {
		total := 0
		for _, n := range counts {
			total += n
		}
		var vs []float32
		if !in.Latent {
			vs = pack(in.V, HKV, DV, at, counts, total)
		}
		o := make([]float32, H*total*DV)
		gpu, err := timedStep(clock, func() (time.Duration, error) {
			return step.Run(ctx, counts, pack(in.K, HKV, DK, at, counts, total), vs, pack(in.Q, H, DK, at, counts, total), o)
		})
		if err != nil {
			return nil, err
		}
		times = append(times, gpu)
		place(o, at, counts, total)
		for b, n := range counts {
			at[b] += n
		}
	}
	res.StepsWall = time.Since(start)
	res.StepMedian = time.Duration(tune.StatsOf(times).Median)
	res.TokensPerSec = float64(B*T) / res.StepsWall.Seconds()
	return res, nil
}
