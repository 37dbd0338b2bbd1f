package vkattn_test

import (
	"context"
	"math/rand"
	"testing"
	"time"

	"github.com/vkattn/vkattn"
)

type benchShape struct {
	b, h, hkv, l, s, d int
	causal             bool
}

// benchAttention times a prepared attention call (recorded once, replayed)
// on random data and reports GFLOP/s with the
// FLOP count of SEMANTICS.md §12 (4*B*H*L*S*d; half of it when causal, since fully
// masked key tiles are skipped) over device time when the device has
// timestamps, wall time otherwise.
func benchAttention(b *testing.B, sh benchShape) {
	r := rand.New(rand.NewSource(1))
	p := newProblem(r, sh.b, sh.h, sh.hkv, sh.l, sh.s, sh.d, sh.d)
	q, err := dev.Upload(p.qs[:], p.q)
	if err != nil {
		b.Fatal(err)
	}
	k, _ := dev.Upload(p.ks[:], p.k)
	v, _ := dev.Upload(p.vs[:], p.v)
	defer q.Close()
	defer k.Close()
	defer v.Close()
	opts := vkattn.Options{}
	if sh.causal {
		opts.Causal = vkattn.CausalBottomRight
	}
	call, err := dev.Prepare(q, k, v, opts)
	if err != nil {
		b.Fatal(err)
	}
	defer call.Close()
	if _, err := call.Run(context.Background()); err != nil { // first dispatch compiles the variant
		b.Fatal(err)
	}
	flops := call.Output().Plan.Dims.FLOPs()
	if sh.causal {
		flops /= 2
	}
	timeReplays(b, call.Run, flops)
}

// timeReplays runs a prepared call b.N times and reports GFLOP/s over
// device time when the device has timestamps, wall time otherwise.
func timeReplays(b *testing.B, run func(context.Context) (time.Duration, error), flops float64) {
	var gpu float64
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		t, err := run(context.Background())
		if err != nil {
			b.Fatal(err)
		}
		gpu += t.Seconds()
	}
	b.StopTimer()
	secs := gpu
	if secs == 0 {
		secs = b.Elapsed().Seconds()
	}
	b.ReportMetric(flops*float64(b.N)/secs/1e9, "GFLOP/s")
}

// benchMHA times a prepared self-attention layer (packed weights with
// biases, one sequence of T positions) and reports GFLOP/s counting the
// projections and the attention (MHAPlan.FLOPs).
func benchMHA(b *testing.B, d, h, T int) {
	r := rand.New(rand.NewSource(1))
	layer, err := dev.NewMHA(randomMHA(r, d, d, d, true))
	if err != nil {
		b.Fatal(err)
	}
	defer layer.Close()
	x, err := dev.Upload([]int{1, T, d}, randomValues(r, T*d))
	if err != nil {
		b.Fatal(err)
	}
	defer x.Close()
	call, err := layer.Prepare(x, nil, nil, vkattn.MHAOptions{Heads: h})
	if err != nil {
		b.Fatal(err)
	}
	defer call.Close()
	if _, err := call.Run(context.Background()); err != nil { // compiles the variants
		b.Fatal(err)
	}
	timeReplays(b, call.Run, call.Output().Plan.FLOPs())
}

func BenchmarkMHAD512H8T1024(b *testing.B) { benchMHA(b, 512, 8, 1024) }

func BenchmarkAttentionL1024D64H8(b *testing.B) {
	benchAttention(b, benchShape{b: 1, h: 8, hkv: 8, l: 1024, s: 1024, d: 64})
}

func BenchmarkAttentionL1024D64H8Causal(b *testing.B) {
	benchAttention(b, benchShape{b: 1, h: 8, hkv: 8, l: 1024, s: 1024, d: 64, causal: true})
}

func BenchmarkAttentionL1024D128H8(b *testing.B) {
	benchAttention(b, benchShape{b: 1, h: 8, hkv: 8, l: 1024, s: 1024, d: 128})
}

func BenchmarkDecodeS4096D128H32KV8(b *testing.B) {
	benchAttention(b, benchShape{b: 1, h: 32, hkv: 8, l: 1, s: 4096, d: 128})
}
