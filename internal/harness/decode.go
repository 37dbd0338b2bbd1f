package harness

import (
	"context"
	"fmt"
	"time"

	"github.com/vkattn/vkattn"
	"github.com/vkattn/vkattn/kv"
	"github.com/vkattn/vkattn/reference"
	"github.com/vkattn/vkattn/tune"
)

// DecodeInput is a sequence to decode: Q (B, H, T, d_k), K (B, H_kv, T,
// d_k) and V (B, H_kv, T, d_v) of T tokens as host float32 (rounded to
// Types where those are halves), the tokens of the prefill, the cache's
// page size (0: contiguous), its RoPE and the calls' options.
type DecodeInput struct {
	Q, K, V                []float32
	QShape, KShape, VShape [4]int
	Prefill, Page          int
	// Window > 0: a rolling cache that keeps the last Window positions
	// (kv.Config.Window; Page > 0, and Opts.Window's Left below it).
	Window int
	// Latent: a latent cache (kv.Config.Latent) that stores K alone and
	// reads V as its leading d_v columns; V holds those columns for the
	// reference and is not appended.
	Latent bool
	Types  [3]vkattn.DType // of the queries, the cache's K and V
	RoPE   *vkattn.RoPE
	Opts   vkattn.Options
}

// DecodeRun is what Decode measured: every token's output (B, H, T, d_v),
// the cache's layout and type, the prefill's device time, the steps'
// median device time, their wall time with the appends and query writes,
// tokens per second over it, and the step's plan.
type DecodeRun struct {
	O                     []float32
	Cache                 string // "contiguous f16", "paged (16 positions a page) f32"
	Steps                 int
	PrefillGPU            time.Duration
	StepMedian, StepsWall time.Duration
	TokensPerSec          float64
	StepPlan              string
}

// Decode runs a sequence through a KV cache as a model's decoding does
// (vkattn decode): the first Prefill tokens appended and attended in one
// call, then each later token appended and attended with its query by a
// prepared call (the bottom-right causal alignment of the whole sequence,
// token by token), gathering every token's output; clock follows the
// calls. Steps are timed on the device (wall time without timestamps).
func Decode(ctx context.Context, dev *vkattn.Device, in DecodeInput, clock *tune.Clock) (*DecodeRun, error) {
	q, k, v, prefill, types, opts := in.QShape, in.KShape, in.VShape, in.Prefill, in.Types, in.Opts
	B, H, T, DK, HKV, DV := q[0], q[1], q[2], q[3], k[1], v[3]
	// Freed last to first on return; in the background after a signal
	// (CloseAfter), so the command need not wait for the step in flight.
	var frees []func()
	defer func() {
		CloseAfter(ctx, func() {
			for i := len(frees) - 1; i >= 0; i-- {
				frees[i]()
			}
		})
	}()
	cache, kind, err := in.newCache(dev, prefill)
	if err != nil {
		return nil, err
	}
	frees = append(frees, cache.Close)
	res := &DecodeRun{O: make([]float32, B*H*T*DV), Cache: kind, Steps: T - prefill}
	// tokens returns tokens [a, b) of a (B, heads, T, w) array as
	// (B, heads, b-a, w), and place puts a (B, H, n, DV) output at token a.
	tokens := func(x []float32, heads, w, a, b int) []float32 {
		out := make([]float32, 0, B*heads*(b-a)*w)
		for i := 0; i < B*heads; i++ {
			out = append(out, x[(i*T+a)*w:(i*T+b)*w]...)
		}
		return out
	}
	// values are tokens [a, b) of V as appended: none to a latent cache.
	values := func(a, b int) []float32 {
		if in.Latent {
			return nil
		}
		return tokens(in.V, HKV, DV, a, b)
	}
	place := func(o []float32, a, n int) {
		for i := 0; i < B*H; i++ {
			copy(res.O[(i*T+a)*DV:(i*T+a+n)*DV], o[i*n*DV:(i+1)*n*DV])
		}
	}
	if err := cache.Append(tokens(in.K, HKV, DK, 0, prefill), values(0, prefill), prefill); err != nil {
		return nil, err
	}
	qp, err := dev.UploadAs([]int{B, H, prefill, DK}, tokens(in.Q, H, DK, 0, prefill), types[0])
	if err != nil {
		return nil, err
	}
	frees = append(frees, qp.Close)
	clock.Begin(true)
	out, err := cache.AttentionContext(ctx, qp, opts)
	clock.Done()
	if err != nil {
		return nil, err
	}
	o, err := out.O.Download()
	res.PrefillGPU = out.GPUTime
	out.Close()
	if err != nil {
		return nil, err
	}
	place(o, 0, prefill)
	if prefill == T {
		return res, nil
	}

	qs, err := dev.UploadAs([]int{B, H, 1, DK}, make([]float32, B*H*DK), types[0])
	if err != nil {
		return nil, err
	}
	frees = append(frees, qs.Close)
	call, err := cache.Prepare(qs, opts)
	if err != nil {
		return nil, err
	}
	frees = append(frees, call.Close)
	res.StepPlan = call.Output().Plan.String()
	// One untimed run first: the first dispatch of a variant compiles it.
	clock.Begin(true)
	if _, err := call.Run(ctx); err != nil {
		return nil, err
	}
	clock.Done()
	var times []time.Duration
	start := time.Now()
	for t := prefill; t < T; t++ {
		if err := cache.Append(tokens(in.K, HKV, DK, t, t+1), values(t, t+1), 1); err != nil {
			return nil, err
		}
		if err := qs.Write(tokens(in.Q, H, DK, t, t+1)); err != nil {
			return nil, err
		}
		gpu, err := timedStep(clock, func() (time.Duration, error) { return call.Run(ctx) })
		if err != nil {
			return nil, err
		}
		times = append(times, gpu)
		o, err := call.Output().O.Download()
		if err != nil {
			return nil, err
		}
		place(o, t, 1)
	}
	wall := time.Since(start)
	res.StepsWall = wall
	res.StepMedian = time.Duration(tune.StatsOf(times).Median)
	res.TokensPerSec = float64(B*len(times)) / wall.Seconds()
	return res, nil
}

// timedStep runs a decode step under clock and returns its device time,
// or its wall time where the device has no timestamps.
func timedStep(clock *tune.Clock, run func() (time.Duration, error)) (time.Duration, error) {
	start := time.Now()
	clock.Begin(false)
	gpu, err := run()
	if err != nil {
		return 0, err
	}
	clock.Done()
	if gpu == 0 {
		gpu = time.Since(start)
	}
	return gpu, nil
}

// newCache is the cache a decode of in runs through, room the most
// tokens appended at once (a rolling cache holds them beside its window),
// and its description: "contiguous f16", "paged (16 positions a page) f32".
func (in DecodeInput) newCache(dev *vkattn.Device, room int) (*kv.Cache, string, error) {
	q, k, v, page := in.QShape, in.KShape, in.VShape, in.Page
	cfg := kv.Config{B: q[0], HKV: k[1], Capacity: q[2], DK: q[3], DV: v[3], DType: in.Types[1], PageSize: page, RoPE: in.RoPE, Latent: in.Latent}
	if in.Window > 0 {
		cfg.Window, cfg.Capacity = in.Window, in.Window+page-2+room
	}
	cache, err := kv.New(dev, cfg)
	if err != nil {
		return nil, "", err
	}
	kind := "contiguous"
	if page > 0 {
		kind = fmt.Sprintf("paged (%d positions a page)", page)
	}
	if in.Window > 0 {
		kind = fmt.Sprintf("rolling (the last %d positions in pages of %d)", in.Window, page)
	}
	if in.Latent {
		kind = fmt.Sprintf("latent (V the keys' first %d columns), %s", v[3], kind)
	}
	return cache, kind + " " + in.Types[1].String(), nil
}

// Reference is the float64 reference of the decode (the whole sequence,
// bottom-right causal) over the values as the cache holds them: the keys
// as given with RoPE rotating them in the reference, or, with RoPE and a
// half cache, rotated in float64, then rounded to the cache's type, the
// queries rotated alike.
func (in DecodeInput) Reference() (*reference.Result, error) {
	q, k, v, kt, opts := in.QShape, in.KShape, in.VShape, in.Types[1], in.Opts
	opts.Causal, opts.RoPE = vkattn.CausalBottomRight, in.RoPE
	r := opts.RoPE
	if r == nil || kt == vkattn.Float32 {
		return reference.Attention(in.Q, q, in.K, k, in.V, v, opts)
	}
	rotated := func(x []float32, s [4]int) []float32 {
		x64 := make([]float64, len(x))
		for i, e := range x {
			x64[i] = float64(e)
		}
		reference.RotateRoPE(x64, s, r, func(_, t int) int { return t })
		out := make([]float32, len(x))
		for i, e := range x64 {
			out[i] = float32(e)
		}
		return out
	}
	ks, err := vkattn.Round(kt, rotated(in.K, k))
	if err != nil {
		return nil, err
	}
	opts.RoPE = nil
	return reference.Attention(rotated(in.Q, q), q, ks, k, in.V, v, opts)
}
