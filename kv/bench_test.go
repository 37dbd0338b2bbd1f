package kv_test

import (
	"context"
	"math/rand"
	"testing"
	"time"

	"github.com/vkattn/vkattn"
	"github.com/vkattn/vkattn/internal/devtest"
	"github.com/vkattn/vkattn/kv"
)

// BenchmarkMixedStep times a ragged step of one 512-token prompt chunk
// (of a sequence holding 3,584 tokens: S = 4,096) beside 63 decode tokens
// (sequences of 1..4,096 tokens), H=32 H_kv=8 d=128, float16 paged
// caches, against the same chunk's prefill call over a cache of that
// sequence alone and the 63 tokens' decode step run alone, the three
// taken in turns each iteration. ratio is the mixed step's time over the
// sum of the other two; GFLOP/s count the mixed step's attention
// (4 H d per query row and visible key).
func BenchmarkMixedStep(b *testing.B) {
	const H, HKV, D, page, chunk, prior, decoders = 32, 8, 128, 256, 512, 3584, 63
	d := devtest.Dev
	r := rand.New(rand.NewSource(3))
	randn := func(n int) []float32 { return devtest.RandomValues(r, n) }
	lens := make([]int, decoders)
	for i := range lens {
		lens[i] = 1 + r.Intn(4095)
	}
	// Pools of the pages the sequences reach (the device's heap holds
	// a few caches of that size, not of every sequence's capacity).
	newCache := func(lengths []int) *kv.Cache {
		pages := 0
		for _, n := range lengths {
			pages += (n+chunk)/page + 1
		}
		c, err := kv.New(d, kv.Config{B: len(lengths), HKV: HKV, Capacity: 4096 + page, DK: D, DV: D, DType: vkattn.Float16, PageSize: page, Pages: pages})
		if err != nil {
			b.Fatal(err)
		}
		for s, n := range lengths {
			if err := c.AppendTo(s, randn(HKV*n*D), randn(HKV*n*D), n); err != nil {
				b.Fatal(err)
			}
		}
		return c
	}
	mixed := newCache(append([]int{prior}, lens...))
	defer mixed.Close()
	alone := newCache([]int{prior})
	defer alone.Close()
	decoding := newCache(lens)
	defer decoding.Close()

	step, err := mixed.PrepareRagged(kv.RaggedConfig{Heads: H, Tokens: chunk + decoders, Chunks: 1})
	if err != nil {
		b.Fatal(err)
	}
	defer step.Close()
	counts := make([]int, 1+decoders)
	counts[0] = chunk
	for i := 1; i <= decoders; i++ {
		counts[i] = 1
	}
	total := chunk + decoders
	k, v, q, o := randn(HKV*total*D), randn(HKV*total*D), randn(H*total*D), make([]float32, H*total*D)
	q1, err := d.Upload([]int{1, H, chunk, D}, randn(H*chunk*D))
	if err != nil {
		b.Fatal(err)
	}
	defer q1.Close()
	if err := alone.AppendTo(0, k[:HKV*chunk*D], v[:HKV*chunk*D], chunk); err != nil {
		b.Fatal(err)
	}
	prefill, err := alone.Prepare(q1, vkattn.Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer prefill.Close()
	decode, err := decoding.PrepareStep(H, vkattn.Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer decode.Close()
	dk, dv, dq, do := randn(decoders*HKV*D), randn(decoders*HKV*D), randn(decoders*H*D), make([]float32, decoders*H*D)
	ctx := context.Background()
	timed := func(f func() error, back *kv.Cache, to []int) time.Duration {
		start := time.Now()
		if err := f(); err != nil {
			b.Fatal(err)
		}
		t := time.Since(start)
		if err := back.Truncate(to); err != nil {
			b.Fatal(err)
		}
		return t
	}
	mixedLens, aloneLens, decodeLens := mixed.Lengths(), []int{prior}, decoding.Lengths()
	run := func() (m, p, s time.Duration) {
		m = timed(func() error { _, err := step.Run(ctx, counts, k, v, q, o); return err }, mixed, mixedLens)
		p = timed(func() error {
			if err := alone.AppendTo(0, k[:HKV*chunk*D], v[:HKV*chunk*D], chunk); err != nil {
				return err
			}
			_, err := prefill.Run(ctx)
			return err
		}, alone, aloneLens)
		s = timed(func() error { _, err := decode.Run(ctx, dk, dv, dq, do); return err }, decoding, decodeLens)
		return m, p, s
	}
	if err := alone.Truncate(aloneLens); err != nil {
		b.Fatal(err)
	}
	run() // each shape's first run prepares its calls
	var m, p, s time.Duration
	b.ResetTimer()
	for range b.N {
		mi, pi, si := run()
		m, p, s = m+mi, p+pi, s+si
	}
	n := float64(b.N)
	rows := 0.0 // query rows times the keys each sees
	for t := range chunk {
		rows += float64(prior + t + 1)
	}
	for _, l := range lens {
		rows += float64(l + 1)
	}
	b.ReportMetric(m.Seconds()/n*1e3, "mixed-ms")
	b.ReportMetric(p.Seconds()/n*1e3, "prefill-ms")
	b.ReportMetric(s.Seconds()/n*1e3, "decode-ms")
	b.ReportMetric(float64(m)/float64(p+s), "ratio")
	b.ReportMetric(4*H*D*rows/(m.Seconds()/n)/1e9, "GFLOP/s")
}
