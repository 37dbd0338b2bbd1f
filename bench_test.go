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
	types              [3]vkattn.DType // of Q, K and V (zero: float32)
}

// benchAttention times a prepared attention call (recorded once, replayed)
// on random data and reports GFLOP/s with the
// FLOP count of SEMANTICS.md §12 (4*B*H*L*S*d; half of it when causal, since fully
// masked key tiles are skipped) over device time when the device has
// timestamps, wall time otherwise; and GB/s of the bytes of Q, K and V
// read and O written once each (their element sizes): what a decode step
// reads, since its kernel reads each K/V element once per KV head.
func benchAttention(b *testing.B, sh benchShape) {
	r := rand.New(rand.NewSource(1))
	p := newProblem(r, sh.b, sh.h, sh.hkv, sh.l, sh.s, sh.d, sh.d)
	q, err := dev.UploadAs(p.qs[:], p.q, sh.types[0])
	if err != nil {
		b.Fatal(err)
	}
	k, _ := dev.UploadAs(p.ks[:], p.k, sh.types[1])
	v, _ := dev.UploadAs(p.vs[:], p.v, sh.types[2])
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
	bytes := float64(len(p.q)*sh.types[0].Bytes() + len(p.k)*sh.types[1].Bytes() + len(p.v)*sh.types[2].Bytes() + 4*len(p.q))
	secs := timeReplays(b, call.Run, flops)
	b.ReportMetric(bytes*float64(b.N)/secs/1e9, "GB/s")
}

// timeReplays runs a prepared call b.N times and reports GFLOP/s over
// device time when the device has timestamps, wall time otherwise.
// It returns the seconds timed.
func timeReplays(b *testing.B, run func(context.Context) (time.Duration, error), flops float64) float64 {
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
	return secs
}

// benchMHA times a prepared self-attention layer (packed weights with
// biases, one sequence of T positions), its weights and input stored as
// dt, and reports GFLOP/s counting the projections and the attention
// (MHAPlan.FLOPs). float16 weights and input put in_proj on the
// cooperative matrices of a device that has them, unless f32Products.
func benchMHA(b *testing.B, d, h, T int, dt vkattn.DType, f32Products bool) {
	r := rand.New(rand.NewSource(1))
	w := randomMHA(r, d, d, d, true)
	w.DType = dt
	layer, err := dev.NewMHA(w)
	if err != nil {
		b.Fatal(err)
	}
	defer layer.Close()
	x, err := dev.UploadAs([]int{1, T, d}, randomValues(r, T*d), dt)
	if err != nil {
		b.Fatal(err)
	}
	defer x.Close()
	opts := vkattn.MHAOptions{Heads: h}
	opts.Attention.Float32Products = f32Products
	call, err := layer.Prepare(x, nil, nil, opts)
	if err != nil {
		b.Fatal(err)
	}
	defer call.Close()
	if _, err := call.Run(context.Background()); err != nil { // compiles the variants
		b.Fatal(err)
	}
	timeReplays(b, call.Run, call.Output().Plan.FLOPs())
}

func BenchmarkMHAD512H8T1024(b *testing.B) { benchMHA(b, 512, 8, 1024, vkattn.Float32, false) }

// The same layer in float16: in_proj on the cooperative matrices where the
// device has them (Mesa 26's lavapipe emulates them), and with float32
// products, on linear.comp.
func BenchmarkMHAD512H8T1024F16(b *testing.B) { benchMHA(b, 512, 8, 1024, vkattn.Float16, false) }
func BenchmarkMHAD512H8T1024F16Float32Products(b *testing.B) {
	benchMHA(b, 512, 8, 1024, vkattn.Float16, true)
}

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

// Half K/V: the decode step reads half the bytes.
var halfKV = [3]vkattn.DType{vkattn.Float32, vkattn.Float16, vkattn.Float16}

func BenchmarkDecodeS4096D128H32KV8F16KV(b *testing.B) {
	benchAttention(b, benchShape{b: 1, h: 32, hkv: 8, l: 1, s: 4096, d: 128, types: halfKV})
}

func BenchmarkDecodeS16384D128H32KV8(b *testing.B) {
	benchAttention(b, benchShape{b: 1, h: 32, hkv: 8, l: 1, s: 16384, d: 128})
}

func BenchmarkDecodeS16384D128H32KV8F16KV(b *testing.B) {
	benchAttention(b, benchShape{b: 1, h: 32, hkv: 8, l: 1, s: 16384, d: 128, types: halfKV})
}

func BenchmarkAttentionL1024D64H8F16(b *testing.B) {
	benchAttention(b, benchShape{b: 1, h: 8, hkv: 8, l: 1024, s: 1024, d: 64,
		types: [3]vkattn.DType{vkattn.Float16, vkattn.Float16, vkattn.Float16}})
}

// The tiny call of a program that calls attention per layer per token:
// one-shot (Attention, then Close of its output) beside the same call
// prepared and replayed. The gap is what a one-shot call costs beyond a
// replay: recording, binding and freeing, with no allocation in steady
// state (TestOneShotSteadyState). Wall time per call (ns/op).
func tinyProblem() (q, k, v *vkattn.Tensor, close func()) {
	p := newProblem(rand.New(rand.NewSource(2)), 1, 1, 1, 16, 16, 16, 16)
	q, _ = dev.Upload(p.qs[:], p.q)
	k, _ = dev.Upload(p.ks[:], p.k)
	v, _ = dev.Upload(p.vs[:], p.v)
	return q, k, v, func() { q.Close(); k.Close(); v.Close() }
}

func BenchmarkTinyOneShot(b *testing.B) {
	q, k, v, done := tinyProblem()
	defer done()
	for i := 0; i < b.N+1; i++ {
		if i == 1 {
			b.ResetTimer() // the first call compiles the variant
		}
		out, err := dev.Attention(q, k, v, vkattn.Options{})
		if err != nil {
			b.Fatal(err)
		}
		out.Close()
	}
}

func BenchmarkTinyPrepared(b *testing.B) {
	q, k, v, done := tinyProblem()
	defer done()
	call, err := dev.Prepare(q, k, v, vkattn.Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer call.Close()
	for i := 0; i < b.N+1; i++ {
		if i == 1 {
			b.ResetTimer()
		}
		if _, err := call.Run(context.Background()); err != nil {
			b.Fatal(err)
		}
	}
}
