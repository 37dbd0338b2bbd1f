package devtest

import (
	"context"
	"math"
	"math/rand"
	"os"
	"testing"
	"time"

	"github.com/vkattn/vkattn"
	"github.com/vkattn/vkattn/internal/verdict"
	"github.com/vkattn/vkattn/nn"
	"github.com/vkattn/vkattn/reference"
	"github.com/x448/float16"
)

// MustUploadAs uploads x as element type dt; the caller closes it.
func MustUploadAs(t *testing.T, d *vkattn.Device, shape []int, x []float32, dt vkattn.DType) *vkattn.Tensor {
	t.Helper()
	tt, err := d.UploadAs(shape, x, dt)
	if err != nil {
		t.Fatal(err)
	}
	return tt
}

// RoundAll is roundTo over a slice.
func RoundAll(dt vkattn.DType, xs []float32) []float32 {
	if dt.Quantized() {
		out, err := vkattn.Round(dt, xs) // whole blocks, not element by element
		if err != nil {
			panic(err)
		}
		return out
	}
	out := make([]float32, len(xs))
	for i, x := range xs {
		out[i] = RoundTo(dt, x)
	}
	return out
}

// Rounded is the problem's Q, K and V as the device holds them.
func (p *Problem) Rounded() (q, k, v []float32) {
	return RoundAll(p.Types[0], p.Q), RoundAll(p.Types[1], p.K), RoundAll(p.Types[2], p.V)
}

// RotatedFrom is x, rows of n positions of heads heads of width d, rotated
// in float64 by rope at positions first, first+1, ... and rounded to
// float32.
func RotatedFrom(x []float32, heads, n, d int, rope *vkattn.RoPE, first int) []float32 {
	x64 := make([]float64, len(x))
	for i, v := range x {
		x64[i] = float64(v)
	}
	reference.RotateRoPE(x64, [4]int{1, heads, n, d}, rope, func(_, t int) int { return first + t })
	out := make([]float32, len(x))
	for i, v := range x64 {
		out[i] = float32(v)
	}
	return out
}

// OpenOwnDevice opens a device of the test's own, so that closing it is
// part of what the test checks; it returns the live-object count before.
func OpenOwnDevice(t *testing.T) (*vkattn.Device, int64) {
	t.Helper()
	before := vkattn.LiveObjects()
	d, err := vkattn.Open(vkattn.Config{Validation: true})
	if err != nil {
		t.Fatal(err)
	}
	return d, before
}

// CloseOwnDevice closes d and checks that everything made on it is gone.
func CloseOwnDevice(t *testing.T, d *vkattn.Device, before int64) {
	t.Helper()
	if err := d.Close(); err != nil {
		t.Fatal(err)
	}
	if n := vkattn.LiveObjects(); n != before {
		t.Errorf("%d Vulkan objects alive after Close, want %d", n, before)
	}
}

// CompareGrad checks a gradient against the float64 reference's under
// verdict.GradCheck: |got - want| <= 1e-4 * max(1, max|want|) over the
// tensor.
func CompareGrad(t *testing.T, what string, got []float32, want []float64) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d values, want %d", what, len(got), len(want))
	}
	var c verdict.GradCheck
	c.Add(what, got, want)
	if !c.Pass {
		t.Fatalf("%s (%.3g times the bound)", c.Worst(), float64(c.Ratio))
	}
}

// NamedGrad is a device gradient and the reference's, by name.
type NamedGrad struct {
	Name string
	Got  []float32
	Want []float64
}

// CompareOptionalGrads is compareOptionalGrad for each of grads.
func CompareOptionalGrads(t *testing.T, grads ...NamedGrad) {
	t.Helper()
	for _, g := range grads {
		CompareOptionalGrad(t, g.Name, g.Got, g.Want)
	}
}

// CoopmatDevice is dev when it has float16 cooperative matrices. Without
// them the cooperative-matrix tests have nothing to run on: they say so,
// and under VKATTN_REQUIRE_COOPMAT=1 (make test's leg on Mesa 26's
// lavapipe, tools/lavapipe26.sh) they fail instead.
func CoopmatDevice(t *testing.T) *vkattn.Device {
	t.Helper()
	if Dev.Info().CooperativeMatrices != nil {
		return Dev
	}
	if os.Getenv("VKATTN_REQUIRE_COOPMAT") == "1" {
		t.Fatalf("%s has no cooperative matrices (VKATTN_REQUIRE_COOPMAT=1)", Dev)
	}
	t.Skipf("%s has no cooperative matrices: run on Mesa 26's lavapipe (tools/lavapipe26.sh)", Dev)
	return nil
}

// Filled returns n copies of x.
func Filled(n int, x float32) []float32 {
	v := make([]float32, n)
	for i := range v {
		v[i] = x
	}
	return v
}

// TimeReplays runs a prepared call b.N times and reports GFLOP/s over
// device time when the device has timestamps, wall time otherwise.
// It returns the seconds timed.
func TimeReplays(b *testing.B, run func(context.Context) (time.Duration, error), flops float64) float64 {
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

// RandomMHA returns weights scaled like PyTorch's initialisation (uniform
// in ±1/sqrt(fan_in)), so activations stay O(1) at every width: packed when
// kdim = vdim = d, separate otherwise.
func RandomMHA(r *rand.Rand, d, kdim, vdim int, bias bool) *nn.MHAWeights {
	scaled := func(n, fanIn int) []float32 {
		x := RandomValues(r, n)
		for i := range x {
			x[i] /= float32(math.Sqrt(float64(fanIn)))
		}
		return x
	}
	w := &nn.MHAWeights{DModel: d, KDim: kdim, VDim: vdim, OutProjWeight: scaled(d*d, d)}
	if kdim == d && vdim == d {
		w.InProjWeight = scaled(3*d*d, d)
	} else {
		w.QProjWeight, w.KProjWeight, w.VProjWeight = scaled(d*d, d), scaled(d*kdim, kdim), scaled(d*vdim, vdim)
	}
	if bias {
		w.InProjBias, w.OutProjBias = RandomValues(r, 3*d), RandomValues(r, d)
	}
	return w
}

// CheckMHA runs c on the GPU and on the float64 reference and compares the
// output and, when asked, the per-head and averaged weights.
func CheckMHA(t *testing.T, d *vkattn.Device, c *MHACase) MHAGot {
	t.Helper()
	got := RunMHA(t, d, c)
	want, err := reference.MultiHeadAttention(c.X, c.XS, c.Key, c.KeyS, c.Value, c.ValueS, c.W, c.Opts)
	if err != nil {
		t.Fatal(err)
	}
	Compare(t, "out", got.Out, want.Out)
	if c.Opts.NeedWeights {
		Compare(t, "weights", got.Weights, want.Weights)
		Compare(t, "averaged weights", got.Avg, want.AvgWeights)
	}
	return got
}

// RandomMHACase builds a layer call with the named masks; cross-attention
// uses S = T+3 keys of widths kdim = d+1, vdim = d+2 (separate weights).
func RandomMHACase(r *rand.Rand, d, h, T int, masks string, cross bool) *MHACase {
	const B = 2
	c := &MHACase{XS: []int{B, T, d}, Opts: nn.MHAOptions{Heads: h, NeedWeights: T <= 17}}
	S := T
	if cross {
		S = T + 3
		c.W = RandomMHA(r, d, d+1, d+2, r.Intn(2) == 0)
		c.KeyS, c.ValueS = []int{B, S, d + 1}, []int{B, S, d + 2}
		c.Key, c.Value = RandomValues(r, B*S*(d+1)), RandomValues(r, B*S*(d+2))
	} else {
		c.W = RandomMHA(r, d, d, d, true)
	}
	c.X = RandomValues(r, B*T*d)
	all := masks == "all"
	if all || masks == "key padding" {
		kp := &nn.KeyPadding{Padded: make([]bool, B*S)}
		for b := 0; b < B; b++ {
			for j := 0; j < S; j++ {
				// Batch item 1 pads its last third; item 0 pads at random
				// but keeps key 0.
				kp.Padded[b*S+j] = (b == 1 && j >= S-S/3 && j > 0) || (b == 0 && j > 0 && r.Intn(4) == 0)
			}
		}
		c.Opts.KeyPadding = kp
	}
	if all || masks == "additive" {
		m := &vkattn.Mask{Shape: vkattn.MaskShape{1, h, T, S}, Values: RandomValues(r, h*T*S)}
		m.Values[0] = float32(math.Inf(-1))
		c.Opts.Attention.Mask = m
	}
	if all || masks == "boolean" {
		m := vkattn.BoolMask{Shape: vkattn.MaskShape{B, 1, T, S}, Values: make([]bool, B*T*S), Meaning: vkattn.TrueAllows}
		for i := range m.Values {
			m.Values[i] = r.Intn(5) != 0
		}
		c.Opts.Attention.BoolMasks = []vkattn.BoolMask{m}
	}
	if all || masks == "causal" {
		c.Opts.Attention.Causal = vkattn.CausalBottomRight
		if T%2 == 1 {
			c.Opts.Attention.Causal = vkattn.CausalTopLeft
		}
	}
	return c
}

// RoundTo is x rounded to element type dt by means independent of
// vkattn's conversion: x448/float16 for float16, and for bfloat16 the
// nearer of the two bfloat16 neighbours of x compared in float64 (ties to
// the even one).
func RoundTo(dt vkattn.DType, x float32) float32 {
	switch dt {
	case vkattn.Float16:
		return float16.Fromfloat32(x).Float32()
	case vkattn.BFloat16:
		bits := math.Float32bits(x)
		down := bits &^ 0xffff // toward zero
		up := down + 0x10000   // away from zero
		dd := math.Abs(float64(x) - float64(math.Float32frombits(down)))
		du := math.Abs(float64(math.Float32frombits(up)) - float64(x))
		if du < dd || (du == dd && (down>>16)&1 == 1) {
			return math.Float32frombits(up)
		}
		return math.Float32frombits(down)
	}
	return x
}

// CompareOptionalGrad is compareGrad for a gradient a layer may lack:
// got and want are both nil, or both compared.
func CompareOptionalGrad(t *testing.T, what string, got []float32, want []float64) {
	t.Helper()
	if (got == nil) != (want == nil) {
		t.Fatalf("%s: %d values, want %d", what, len(got), len(want))
	}
	if got != nil {
		CompareGrad(t, what, got, want)
	}
}

// MHACase is one layer call with host data.
type MHACase struct {
	W                *nn.MHAWeights
	X, Key, Value    []float32
	XS, KeyS, ValueS []int // nil key and value for self-attention
	Opts             nn.MHAOptions
}

type MHAGot struct {
	Out, Weights, Avg []float32
	Plan              nn.MHAPlan
	OutShape          [4]int
}

// RunMHA runs c on d and downloads every output.
func RunMHA(t *testing.T, d *vkattn.Device, c *MHACase) MHAGot {
	t.Helper()
	layer, err := nn.NewMHA(d, c.W)
	if err != nil {
		t.Fatal(err)
	}
	defer layer.Close()
	upload := func(x []float32, s []int) *vkattn.Tensor {
		if x == nil {
			return nil
		}
		return MustUpload(t, d, s, x)
	}
	x, key, value := upload(c.X, c.XS), upload(c.Key, c.KeyS), upload(c.Value, c.ValueS)
	defer x.Close()
	defer key.Close()
	defer value.Close()
	out, err := layer.Forward(x, key, value, c.Opts)
	if err != nil {
		t.Fatal(err)
	}
	defer out.Close()
	var g MHAGot
	g.Plan, g.OutShape = out.Plan, out.Out.Shape()
	if g.Out, err = out.Out.Download(); err != nil {
		t.Fatal(err)
	}
	if c.Opts.NeedWeights {
		if g.Weights, err = out.Weights.Download(); err != nil {
			t.Fatal(err)
		}
		if g.Avg, err = out.AvgWeights.Download(); err != nil {
			t.Fatal(err)
		}
	} else if out.Weights != nil || out.AvgWeights != nil {
		t.Fatal("weights returned without NeedWeights")
	}
	// Plan (from shapes alone) agrees with what Forward ran.
	plan, err := layer.Plan(c.XS, c.KeyS, c.ValueS, c.Opts)
	if err != nil {
		t.Fatal(err)
	}
	if plan.String() != g.Plan.String() {
		t.Fatalf("Plan:\n%v\nForward ran:\n%v", plan, g.Plan)
	}
	return g
}
