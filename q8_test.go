package vkattn_test

import (
	"errors"
	"math/rand"
	"testing"

	"github.com/vkattn/vkattn"
	"github.com/vkattn/vkattn/internal/devtest"
)

// K and V in q8_0 (ggml's blocks of 32 with float16 scales) read directly
// by every kernel family: a prefill-shaped call (the row kernels; the
// tiled ones under the GPU plans) with GQA, a causal mask and lengths,
// against the reference on the dequantized values, which Download
// returns.
func TestQ8KVEveryPlan(t *testing.T) {
	for name, d := range devtest.EveryPlan() {
		t.Run(name, func(t *testing.T) {
			t.Parallel() // each plan's device compiles its kernel at once
			r := rand.New(rand.NewSource(97))
			p := devtest.NewProblem(r, 2, 4, 2, 5, 9, 32, 32)
			p.K[7] = 40 // an outlier in its block
			p.Types = [3]vkattn.DType{vkattn.Float32, vkattn.Q8_0, vkattn.Q8_0}
			p.Opts = vkattn.Options{Causal: vkattn.CausalBottomRight, KeyLengths: []int{9, 6}}
			devtest.CheckAgainstReference(t, d, p)
			k := devtest.MustUploadAs(t, d, p.KS[:], p.K, vkattn.Q8_0)
			defer k.Close()
			got := devtest.Download(t, k)
			want, err := vkattn.Round(vkattn.Q8_0, p.K)
			if err != nil {
				t.Fatal(err)
			}
			for i := range want {
				if got[i] != want[i] {
					t.Fatalf("downloaded K[%d] = %v, want %v", i, got[i], want[i])
				}
			}
		})
	}
	if _, err := devtest.Dev.UploadAs([]int{1, 1, 2, 48}, make([]float32, 96), vkattn.Q8_0); !errors.Is(err, vkattn.ErrShape) {
		t.Errorf("q8_0 rows of 48: %v, want ErrShape", err)
	}
	q := devtest.Zeros(t, devtest.Dev, 1, 1, 2, 32)
	k := devtest.MustUploadAs(t, devtest.Dev, []int{1, 1, 2, 32}, make([]float32, 64), vkattn.Q8_0)
	defer k.Close()
	if _, err := devtest.Dev.Attention(k, q, q, vkattn.Options{}); err == nil {
		t.Error("Q in q8_0 was accepted")
	}
}
