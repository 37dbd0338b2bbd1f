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

// A Q view that starts off a multiple of four makes the kernels read every
// input element by element (the scalar build, dequant1 of iq4_nl),
// against the reference on the dequantized K and V. Planned as NVIDIA
// only: the tiled kernel's scalar build compiles in seconds on lavapipe,
// the row kernel's (the same load macros) in about four minutes.
func TestIQ4NLScalarLoads(t *testing.T) {
	r := rand.New(rand.NewSource(53))
	const L, S = 5, 40
	qWide := devtest.RandomValues(r, 2*L*65)
	k, v := devtest.RandomValues(r, S*64), devtest.RandomValues(r, S*32)
	q := make([]float32, 0, 2*L*64)
	for row := range 2 * L {
		q = append(q, qWide[row*65+1:row*65+65]...)
	}
	want, err := reference.Attention(q, [4]int{1, 2, L, 64}, devtest.RoundAll(vkattn.IQ4_NL, k), [4]int{1, 1, S, 64},
		devtest.RoundAll(vkattn.IQ4_NL, v), [4]int{1, 1, S, 32}, vkattn.Options{})
	if err != nil {
		t.Fatal(err)
	}
	for _, plan := range []string{"nvidia"} {
		t.Run(plan, func(t *testing.T) {
			d := devtest.EveryPlan()[plan]
			qt := devtest.MustUploadAs(t, d, []int{1, 2, L, 65}, qWide, vkattn.Float32)
			defer qt.Close()
			qv, err := qt.Columns(1, 64)
			if err != nil {
				t.Fatal(err)
			}
			kt := devtest.MustUploadAs(t, d, []int{1, 1, S, 64}, k, vkattn.IQ4_NL)
			defer kt.Close()
			vt := devtest.MustUploadAs(t, d, []int{1, 1, S, 32}, v, vkattn.IQ4_NL)
			defer vt.Close()
			out, err := d.Attention(qv, kt, vt, vkattn.Options{})
			if err != nil {
				t.Fatal(err)
			}
			defer out.Close()
			if out.Plan.Kernel.Vec4 {
				t.Fatalf("plan %s: want element-by-element loads", out.Plan)
			}
			devtest.Compare(t, "O", devtest.Download(t, out.O), want.O)
		})
	}
}
