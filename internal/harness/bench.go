package harness

import (
	"context"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/vkattn/vkattn"
	"github.com/vkattn/vkattn/internal/random"
	"github.com/vkattn/vkattn/tune"
)

// Case is one attention problem to time (`vkattn bench`): its shape, causal
// mask, element types and rotary embedding, forward or backward.
type Case struct {
	Suite  string // the preset suite it belongs to; "" for a shape of its own
	Dims   vkattn.Dims
	Causal vkattn.Causal
	Types  [3]vkattn.DType // of Q, K and V
	RoPE   *vkattn.RoPE    // nil: none
	// Backward times Device.AttentionBackward (the forward and the
	// backward) instead of the forward.
	Backward bool
	// Float32Products keeps float16 inputs off cooperative matrices
	// (Options.Float32Products).
	Float32Products bool
}

// Options are the attention options the case runs with.
func (c Case) Options() vkattn.Options {
	return vkattn.Options{Causal: c.Causal, RoPE: c.RoPE, Float32Products: c.Float32Products}
}

// Suites are the preset suites in the order "all" runs them.
var Suites = []string{"prefill", "decode", "long"}

// SuiteCases are the cases of a preset suite (one of Suites, or "all"), nil
// for an unknown name: prefill H=8 L=S 512-4096 at d=64 and 1024-2048 at
// d=128, without a mask and causal; decode H=32 H_kv=8 L=1 S 1024-16384
// d=128; long H=1 L=S 8192-32768 d=64.
func SuiteCases(name string) []Case {
	sq := func(h, hkv, n, d int) vkattn.Dims {
		return vkattn.Dims{B: 1, H: h, HKV: hkv, L: n, S: n, DK: d, DV: d}
	}
	var cs []Case
	switch name {
	case "prefill":
		for _, g := range []struct {
			d  int
			ls []int
		}{{64, []int{512, 1024, 2048, 4096}}, {128, []int{1024, 2048}}} {
			for _, c := range []vkattn.Causal{vkattn.NotCausal, vkattn.CausalBottomRight} {
				for _, n := range g.ls {
					cs = append(cs, Case{Suite: name, Dims: sq(8, 8, n, g.d), Causal: c})
				}
			}
		}
	case "decode":
		for _, s := range []int{1024, 4096, 16384} {
			cs = append(cs, Case{Suite: name, Dims: vkattn.Dims{B: 1, H: 32, HKV: 8, L: 1, S: s, DK: 128, DV: 128}})
		}
	case "long":
		for _, n := range []int{8192, 16384, 32768} {
			cs = append(cs, Case{Suite: name, Dims: sq(1, 1, n, 64)})
		}
	case "all":
		for _, s := range Suites {
			cs = append(cs, SuiteCases(s)...)
		}
	}
	return cs
}

// Name is the case as a table row names it: "B=1 H=8 L=512 S=512 d=64".
func (c Case) Name() string {
	d := c.Dims
	s := fmt.Sprintf("B=%d H=%d", d.B, d.H)
	if d.HKV != d.H {
		s += fmt.Sprintf(" H_kv=%d", d.HKV)
	}
	s += fmt.Sprintf(" L=%d S=%d d=%d", d.L, d.S, d.DK)
	if c.Causal != vkattn.NotCausal {
		s += " causal " + c.Causal.String()
	}
	return s
}

// FLOPs is the count of SEMANTICS.md §16, halved when causal: the kernel
// skips fully masked key tiles, so about half the work is done for L = S.
// A backward call counts 3.5 times it: its forward (O and the LSE), then
// FlashAttention's count of the backward, 2.5 times the forward (the
// scores recomputed, dV, dP, dQ and dK: five products to the forward's two).
func (c Case) FLOPs() float64 {
	f := c.Dims.FLOPs()
	if c.Backward {
		f *= 3.5
	}
	if c.Causal != vkattn.NotCausal {
		f /= 2
	}
	return f
}

// Bytes is the least traffic a call needs: Q, K and V read at their
// element types, O written in float32.
func (c Case) Bytes() int64 {
	d := c.Dims
	b, h, hkv, l, s := int64(d.B), int64(d.H), int64(d.HKV), int64(d.L), int64(d.S)
	size := func(i int, n int64) int64 { return int64(c.Types[i].StorageBytes(int(n))) }
	return size(0, b*h*l*int64(d.DK)) + size(1, b*hkv*s*int64(d.DK)) + size(2, b*hkv*s*int64(d.DV)) + 4*b*h*l*int64(d.DV)
}

// Measurement is what Bench measured of a case.
type Measurement struct {
	Plan              vkattn.Plan   // the forward's
	ColdWall, ColdGPU time.Duration // the first call: Prepare, compile on a cache miss, run
	tune.Timing                     // the timed calls after it
	Reps              int
	Cost              vkattn.Stats // of the timed calls, summed
}

// Bench uploads random Q, K, V for c (from seed, whatever other cases
// run), makes one cold call and reps timed ones, and measures them; clock
// follows the calls and tick (if not nil) is called after each. The
// forward is prepared once and replayed (the timings are the dispatch and
// its wait, not allocation); a backward call runs whole each time.
func Bench(ctx context.Context, dev *vkattn.Device, c Case, reps int, seed uint64, clock *tune.Clock, tick func()) (*Measurement, error) {
	tick = tickOf(tick)
	r := rand.New(rand.NewPCG(seed, 0x7661747461)) // "vkatt"
	in, err := tune.UploadRandomAs(dev, r, c.Dims, c.Types)
	if err != nil {
		return nil, err
	}
	var prepared *vkattn.Call
	var grad *backwardRun
	defer func() {
		clock.Idle()
		free := func() {
			if prepared != nil {
				prepared.Close()
			}
			grad.close()
			in.Close()
		}
		CloseAfter(ctx, free)
	}()
	opts := c.Options()
	var runner tune.Runner
	if c.Backward {
		d := c.Dims
		dO, err := dev.Upload([]int{d.B, d.H, d.L, d.DV}, random.Uniform(r, d.B*d.H*d.L*d.DV))
		if err != nil {
			return nil, err
		}
		grad = &backwardRun{dev: dev, q: in.Q, k: in.K, v: in.V, dO: dO, opts: opts}
		runner = grad
	} else {
		if prepared, err = dev.Prepare(in.Q, in.K, in.V, opts); err != nil {
			return nil, err
		}
		runner = prepared
	}
	m := &Measurement{Reps: reps}
	start := time.Now()
	clock.Begin(true)
	m.ColdGPU, err = runner.Run(ctx)
	m.ColdWall = time.Since(start)
	clock.Lap()
	tick()
	if err != nil {
		return nil, err
	}
	if c.Backward {
		m.Plan = grad.plan
	} else {
		m.Plan = prepared.Output().Plan
	}
	before := dev.Stats()
	if m.Timing, err = tune.TimeRuns(ctx, runner, reps, func() { clock.Lap(); tick() }); err != nil {
		return nil, err
	}
	m.Cost = dev.Stats().Since(before)
	return m, nil
}

// tickOf is tick, or a tick that does nothing.
func tickOf(tick func()) func() {
	if tick == nil {
		return func() {}
	}
	return tick
}

// CloseAfter runs free, which waits for the device's work in flight: at
// once, or after a cancel in the background, so that what was measured
// so far is reported without waiting for a dispatch that cannot be
// abandoned (the device's Close waits for it).
func CloseAfter(ctx context.Context, free func()) {
	if ctx.Err() != nil {
		go free()
		return
	}
	free()
}

// backwardRun is one Device.AttentionBackward of fixed inputs, as
// tune.TimeRuns times it: the forward and the backward, their outputs freed
// each time.
type backwardRun struct {
	dev         *vkattn.Device
	q, k, v, dO *vkattn.Tensor
	opts        vkattn.Options
	plan        vkattn.Plan // the forward's, from the first run
}

func (b *backwardRun) Run(ctx context.Context) (time.Duration, error) {
	g, err := b.dev.AttentionBackwardContext(ctx, b.q, b.k, b.v, b.dO, b.opts)
	if err != nil {
		return 0, err
	}
	defer g.Close()
	b.plan = g.Plan
	return g.GPUTime, nil
}

func (b *backwardRun) close() {
	if b != nil {
		b.dO.Close()
	}
}
