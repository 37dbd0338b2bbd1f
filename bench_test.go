package vkattn_test

import (
	"context"
	"math/rand"
	"testing"

	"github.com/vkattn/vkattn"
	"github.com/vkattn/vkattn/internal/devtest"
)

type benchShape struct {
	b, h, hkv, l, s, d int
	causal             bool
	mask               bool            // an additive (1, 1, L, S) mask
	types              [3]vkattn.DType // of Q, K and V (zero: float32)
}

// benchAttention times a prepared attention call (recorded once, replayed)
// on random data and reports GFLOP/s with the
// FLOP count of SEMANTICS.md §16 (4*B*H*L*S*d; half of it when causal, since fully
// masked key tiles are skipped) over device time when the device has
// timestamps, wall time otherwise; and GB/s of the bytes of Q, K and V
// read and O written once each (their element sizes): what a decode step
// reads, since its kernel reads each K/V element once per KV head.
func benchAttention(b *testing.B, sh benchShape) {
	r := rand.New(rand.NewSource(1))
	p := devtest.NewProblem(r, sh.b, sh.h, sh.hkv, sh.l, sh.s, sh.d, sh.d)
	q, err := devtest.Dev.UploadAs(p.QS[:], p.Q, sh.types[0])
	if err != nil {
		b.Fatal(err)
	}
	k, _ := devtest.Dev.UploadAs(p.KS[:], p.K, sh.types[1])
	v, _ := devtest.Dev.UploadAs(p.VS[:], p.V, sh.types[2])
	defer q.Close()
	defer k.Close()
	defer v.Close()
	opts := vkattn.Options{}
	if sh.causal {
		opts.Causal = vkattn.CausalBottomRight
	}
	if sh.mask {
		m := make([]float32, sh.l*sh.s)
		for i := range m {
			m[i] = -float32(i % 7)
		}
		opts.Mask = &vkattn.Mask{Shape: vkattn.MaskShape{1, 1, sh.l, sh.s}, Values: m}
	}
	call, err := devtest.Dev.Prepare(q, k, v, opts)
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
	bytes := float64(len(p.Q)*sh.types[0].Bytes() + len(p.K)*sh.types[1].Bytes() + len(p.V)*sh.types[2].Bytes() + 4*len(p.Q))
	secs := devtest.TimeReplays(b, call.Run, flops)
	b.ReportMetric(bytes*float64(b.N)/secs/1e9, "GB/s")
}

func BenchmarkAttentionL1024D64H8(b *testing.B) {
	benchAttention(b, benchShape{b: 1, h: 8, hkv: 8, l: 1024, s: 1024, d: 64})
}

func BenchmarkAttentionL1024D64H8Causal(b *testing.B) {
	benchAttention(b, benchShape{b: 1, h: 8, hkv: 8, l: 1024, s: 1024, d: 64, causal: true})
}

func BenchmarkAttentionL1024D64H8Mask(b *testing.B) {
	benchAttention(b, benchShape{b: 1, h: 8, hkv: 8, l: 1024, s: 1024, d: 64, mask: true})
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
	p := devtest.NewProblem(rand.New(rand.NewSource(2)), 1, 1, 1, 16, 16, 16, 16)
	q, _ = devtest.Dev.Upload(p.QS[:], p.Q)
	k, _ = devtest.Dev.Upload(p.KS[:], p.K)
	v, _ = devtest.Dev.Upload(p.VS[:], p.V)
	return q, k, v, func() { q.Close(); k.Close(); v.Close() }
}

func BenchmarkTinyOneShot(b *testing.B) {
	q, k, v, done := tinyProblem()
	defer done()
	for i := 0; i < b.N+1; i++ {
		if i == 1 {
			b.ResetTimer() // the first call compiles the variant
		}
		out, err := devtest.Dev.Attention(q, k, v, vkattn.Options{})
		if err != nil {
			b.Fatal(err)
		}
		out.Close()
	}
}

func BenchmarkTinyPrepared(b *testing.B) {
	q, k, v, done := tinyProblem()
	defer done()
	call, err := devtest.Dev.Prepare(q, k, v, vkattn.Options{})
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
