package vkattn_test

import (
	"bytes"
	"math/rand"
	"testing"

	"github.com/vkattn/vkattn"
	"github.com/vkattn/vkattn/internal/devtest"
	"github.com/vkattn/vkattn/internal/engine"
	"github.com/vkattn/vkattn/reference"
)

// UploadAs iq4_nl stores ggml's iq4_nl blocks byte for byte, as an
// independent C reproduction of quantize_row_iq4_nl_ref wrote them for
// testdata/iq4_nl (ties between levels, zero, tiny and large blocks,
// random normals), and Download reads back their values bit for bit.
func TestIQ4NLUploadMatchesGGML(t *testing.T) {
	x, raw, values, err := devtest.GGMLIQ4NL()
	if err != nil {
		t.Fatal(err)
	}
	shape := []int{1, 2, len(x) / 128, 64}
	tn := devtest.MustUploadAs(t, devtest.Dev, shape, x, vkattn.IQ4_NL)
	defer tn.Close()
	stored := make([]byte, len(raw))
	if err := engine.Buf((*engine.Tensor)(tn)).Read(0, stored); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(stored, raw) {
		t.Fatalf("stored bytes\n% x\nggml's\n% x", stored, raw)
	}
	sameBits(t, "Download", devtest.Download(t, tn), values)
}

// Attention over iq4_nl K and V, in prefill and in decode (split-K), on
// lavapipe's plan (row kernels reading a block at a time) and planned as
// NVIDIA (tiled kernels), against the reference on the dequantized values.
func TestIQ4NLAttention(t *testing.T) {
	for _, plan := range devtest.OwnAndNVIDIA {
		for _, c := range []struct {
			name string
			l, s int
		}{{"prefill", 6, 40}, {"decode", 1, 300}} {
			t.Run(plan+"/"+c.name, func(t *testing.T) {
				r := rand.New(rand.NewSource(51))
				p := devtest.NewProblem(r, 1, 2, 1, c.l, c.s, 64, 32)
				p.K[40] = 12 // an outlier in the first row's second block
				p.Types = [3]vkattn.DType{vkattn.Float32, vkattn.IQ4_NL, vkattn.IQ4_NL}
				p.Opts = vkattn.Options{Causal: vkattn.CausalBottomRight}
				got := devtest.RunGPU(t, devtest.EveryPlan()[plan], p)
				k, v := devtest.RoundAll(vkattn.IQ4_NL, p.K), devtest.RoundAll(vkattn.IQ4_NL, p.V)
				want, err := reference.Attention(p.Q, p.QS, k, p.KS, v, p.VS, p.Opts)
				if err != nil {
					t.Fatal(err)
				}
				devtest.Compare(t, "O", got.O, want.O)
			})
		}
	}
}
