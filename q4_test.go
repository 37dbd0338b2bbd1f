package vkattn_test

import (
	"bytes"
	"errors"
	"math"
	"math/rand"
	"strings"
	"testing"

	"github.com/vkattn/vkattn"
	"github.com/vkattn/vkattn/internal/devtest"
	"github.com/vkattn/vkattn/internal/engine"
	"github.com/vkattn/vkattn/reference"
)

// sameBits fails t unless got and want are the same float32s bit for bit
// (-0 is not 0).
func sameBits(t *testing.T, what string, got, want []float32) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d values, want %d", what, len(got), len(want))
	}
	for i := range want {
		if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
			t.Fatalf("%s: element %d is %v (%#08x), want %v (%#08x)", what, i, got[i], math.Float32bits(got[i]), want[i], math.Float32bits(want[i]))
		}
	}
}

// UploadAs q4_0 stores ggml's q4_0 blocks, byte for byte as an
// independent reproduction of ggml's quantizer writes them (quants, then
// the float16 scales), and Download, At, Write and a strided view read
// back their values, (q - 8) * d, bit for bit. Rows that are not whole
// blocks, a block whose scale overflows float16, and NaN are refused.
func TestQ4UploadDownload(t *testing.T) {
	r := rand.New(rand.NewSource(41))
	shape := [4]int{1, 2, 3, 64}
	x := devtest.Q4Data(r, devtest.Size(shape))
	raw, want := devtest.GGMLQ4_0(x)
	tn := devtest.MustUploadAs(t, devtest.Dev, shape[:], x, vkattn.Q4_0)
	defer tn.Close()
	stored := make([]byte, len(raw))
	if err := engine.Buf((*engine.Tensor)(tn)).Read(0, stored); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(stored, raw) {
		t.Fatalf("stored bytes\n% x\nggml's\n% x", stored, raw)
	}
	sameBits(t, "Download", devtest.Download(t, tn), want)
	for _, at := range [][4]int{{0, 0, 0, 0}, {0, 0, 0, 17}, {0, 1, 2, 63}, {0, 1, 0, 40}} {
		got, err := tn.At(at[0], at[1], at[2], at[3])
		if err != nil {
			t.Fatal(err)
		}
		if i := ((at[1]*shape[2])+at[2])*shape[3] + at[3]; math.Float32bits(got) != math.Float32bits(want[i]) {
			t.Errorf("At%v = %v, want %v", at, got, want[i])
		}
	}
	y := devtest.RandomValues(r, len(x))
	if err := tn.Write(y); err != nil {
		t.Fatal(err)
	}
	_, wantY := devtest.GGMLQ4_0(y)
	sameBits(t, "Download after Write", devtest.Download(t, tn), wantY)

	// (B, L, H, d) read as (B, H, L, d): rows gathered through strides.
	blhd := devtest.MustUploadAs(t, devtest.Dev, []int{1, 3, 2, 64}, devtest.ToBLHD(x, shape), vkattn.Q4_0)
	defer blhd.Close()
	sameBits(t, "strided view", devtest.Download(t, blhd.SwapAxes12()), want)

	for _, c := range []struct {
		name  string
		shape []int
		data  []float32
		err   error
		says  string
	}{
		{"rows of 48", []int{1, 1, 2, 48}, make([]float32, 96), vkattn.ErrShape, "32"},
		{"a scale beyond float16", []int{1, 1, 1, 32}, append([]float32{524160}, make([]float32, 31)...), vkattn.ErrOverflow, "block 0"},
		{"NaN", []int{1, 1, 1, 32}, append(make([]float32, 31), float32(math.NaN())), vkattn.ErrNonFinite, "element 31"},
	} {
		if _, err := devtest.Dev.UploadAs(c.shape, c.data, vkattn.Q4_0); !errors.Is(err, c.err) || !strings.Contains(err.Error(), c.says) {
			t.Errorf("%s: %v, want %v naming %q", c.name, err, c.err, c.says)
		}
	}
}

// A call whose Q and O exceed a binding runs in chunks of batch items; K
// and V in q4_0 (and q8_0) are bound whole, and each chunk must read its
// own batch item's keys and values in them. Against the reference on
// ggml's q4_0 values reproduced independently (q8_0: on Round's). Q in
// q4_0 is refused.
func TestQuantChunkedCall(t *testing.T) {
	d := devtest.SmallBindings(t, vkattn.Config{})
	for _, dt := range []vkattn.DType{vkattn.Q4_0, vkattn.Q8_0} {
		t.Run(dt.String(), func(t *testing.T) {
			r := rand.New(rand.NewSource(43))
			// Q and O of 160 rows: 164 KB, over the 128 KiB reach; one
			// batch item's 82 KB under it.
			p := devtest.NewProblem(r, 2, 4, 2, 160, 64, 32, 32)
			p.K[5] = 9 // an outlier in its block
			p.Types = [3]vkattn.DType{vkattn.Float32, dt, dt}
			p.Opts = vkattn.Options{Causal: vkattn.CausalBottomRight, KeyLengths: []int{64, 50}}
			got := devtest.RunGPU(t, d, p)
			if kp := got.Out.Plan.Kernel; kp.Chunks < 2 {
				t.Fatalf("plan %v: want chunks", kp)
			}
			var k, v []float32
			if dt == vkattn.Q4_0 {
				_, k = devtest.GGMLQ4_0(p.K)
				_, v = devtest.GGMLQ4_0(p.V)
			} else {
				_, k, v = p.Rounded()
			}
			want, err := reference.Attention(p.Q, p.QS, k, p.KS, v, p.VS, p.Opts)
			if err != nil {
				t.Fatal(err)
			}
			devtest.Compare(t, "O", got.O, want.O)
		})
	}
	k := devtest.MustUploadAs(t, devtest.Dev, []int{1, 1, 2, 32}, make([]float32, 64), vkattn.Q4_0)
	defer k.Close()
	if _, err := devtest.Dev.Attention(k, k, k, vkattn.Options{}); err == nil {
		t.Error("Q in q4_0 was accepted")
	}
}

// lavapipe's row kernels read q8_0 and q4_0 rows of whole blocks a texel
// of quants and a block's scale at a time (QuantBlocks): rows of several
// blocks, K and V of different widths, q8_0 in decode (split-K lanes) and
// q4_0 in prefill (one load macro serves both kernels' shapes, so each
// type runs once), against the reference on the dequantized values (q4_0
// from an independent reproduction of ggml's quantizer).
func TestQuantRowsReadByBlocks(t *testing.T) {
	d := devtest.EveryPlan()["auto"]
	for _, c := range []struct {
		dt     vkattn.DType
		l, s   int
		splitK bool
	}{{vkattn.Q8_0, 1, 300, true}, {vkattn.Q4_0, 6, 40, false}} {
		t.Run(c.dt.String(), func(t *testing.T) {
			r := rand.New(rand.NewSource(44))
			p := devtest.NewProblem(r, 1, 2, 1, c.l, c.s, 64, 32)
			p.K[40] = 12 // an outlier in the first row's second block
			p.Types = [3]vkattn.DType{vkattn.Float32, c.dt, c.dt}
			p.Opts = vkattn.Options{Causal: vkattn.CausalBottomRight}
			got := devtest.RunGPU(t, d, p)
			plan := got.Out.Plan
			if !plan.Kernel.QuantBlocks || !strings.Contains(plan.String(), "a block at a time") || (plan.Kernel.Splits > 0) != c.splitK {
				t.Errorf("want a plan reading %v a block at a time (split-K %v); got %s", c.dt, c.splitK, plan)
			}
			k, v := devtest.RoundAll(c.dt, p.K), devtest.RoundAll(c.dt, p.V)
			if c.dt == vkattn.Q4_0 {
				_, k = devtest.GGMLQ4_0(p.K)
				_, v = devtest.GGMLQ4_0(p.V)
			}
			want, err := reference.Attention(p.Q, p.QS, k, p.KS, v, p.VS, p.Opts)
			if err != nil {
				t.Fatal(err)
			}
			devtest.Compare(t, "O", got.O, want.O)
		})
	}
}
