package nn_test

import (
	"context"
	"math/rand"
	"testing"

	"github.com/vkattn/vkattn"
	"github.com/vkattn/vkattn/internal/devtest"
	"github.com/vkattn/vkattn/nn"
)

// benchMHA times a prepared self-attention layer (packed weights with
// biases, one sequence of T positions), its weights and input stored as
// dt, and reports GFLOP/s counting the projections and the attention
// (MHAPlan.FLOPs). float16 weights and input put in_proj on the
// cooperative matrices of a device that has them, unless f32Products.
func benchMHA(b *testing.B, d, h, T int, dt vkattn.DType, f32Products bool) {
	r := rand.New(rand.NewSource(1))
	w := devtest.RandomMHA(r, d, d, d, true)
	w.DType = dt
	layer, err := nn.NewMHA(devtest.Dev, w)
	if err != nil {
		b.Fatal(err)
	}
	defer layer.Close()
	x, err := devtest.Dev.UploadAs([]int{1, T, d}, devtest.RandomValues(r, T*d), dt)
	if err != nil {
		b.Fatal(err)
	}
	defer x.Close()
	opts := nn.MHAOptions{Heads: h}
	opts.Attention.Float32Products = f32Products
	call, err := layer.Prepare(x, nil, nil, opts)
	if err != nil {
		b.Fatal(err)
	}
	defer call.Close()
	if _, err := call.Run(context.Background()); err != nil { // compiles the variants
		b.Fatal(err)
	}
	devtest.TimeReplays(b, call.Run, call.Output().Plan.FLOPs())
}

func BenchmarkMHAD512H8T1024(b *testing.B) { benchMHA(b, 512, 8, 1024, vkattn.Float32, false) }

// The same layer in float16: in_proj on the cooperative matrices where the
// device has them (Mesa 26's lavapipe emulates them), and with float32
// products, on linear.comp.
func BenchmarkMHAD512H8T1024F16(b *testing.B) { benchMHA(b, 512, 8, 1024, vkattn.Float16, false) }

func BenchmarkMHAD512H8T1024F16Float32Products(b *testing.B) {
	benchMHA(b, 512, 8, 1024, vkattn.Float16, true)
}
