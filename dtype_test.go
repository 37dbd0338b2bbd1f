package vkattn_test

import (
	"errors"
	"fmt"
	"math"
	"math/rand"
	"strings"
	"testing"

	"github.com/vkattn/vkattn"
	"github.com/vkattn/vkattn/internal/devtest"
	"github.com/vkattn/vkattn/internal/golden"
	"github.com/x448/float16"
)

// typeMixes are the element types the sweeps give Q, K and V, case by
// case: float32, the decode case (float32 queries, half K/V), all float16,
// all bfloat16, and bfloat16 queries beside float16 K/V.
var typeMixes = [][3]vkattn.DType{
	{vkattn.Float32, vkattn.Float32, vkattn.Float32},
	{vkattn.Float32, vkattn.Float16, vkattn.Float16},
	{vkattn.Float16, vkattn.Float16, vkattn.Float16},
	{vkattn.BFloat16, vkattn.BFloat16, vkattn.BFloat16},
	{vkattn.Float32, vkattn.BFloat16, vkattn.BFloat16},
	{vkattn.BFloat16, vkattn.Float16, vkattn.Float16},
}

// typesName names a mix for subtest names ("" for all float32).
func typesName(ts [3]vkattn.DType) string {
	if ts == [3]vkattn.DType{} {
		return ""
	}
	return fmt.Sprintf("_%v-%v-%v", ts[0], ts[1], ts[2])
}

// Random values over many binades round as the independent rounding does,
// and a half tensor downloads exactly what it holds.
func TestHalfTensorsHoldTheRoundedValues(t *testing.T) {
	r := rand.New(rand.NewSource(5))
	x := make([]float32, 4099) // odd: the last word holds one half
	for i := range x {
		x[i] = float32(math.Ldexp(2*r.Float64()-1, r.Intn(40)-28))
	}
	x[0], x[1] = 65504, float32(math.Ldexp(1, -24))
	for _, dt := range []vkattn.DType{vkattn.Float16, vkattn.BFloat16} {
		tn := devtest.MustUploadAs(t, devtest.Dev, []int{1, len(x)}, x, dt)
		got, err := tn.Download()
		tn.Close()
		if err != nil {
			t.Fatal(err)
		}
		want := devtest.RoundAll(dt, x)
		for i := range want {
			if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
				t.Fatalf("%v: element %d (%g): holds %g, want %g", dt, i, x[i], got[i], want[i])
			}
		}
		if tn.DType() != dt {
			t.Errorf("DType() = %v, want %v", tn.DType(), dt)
		}
	}
	// Raw bits are stored as given; a view of them reads them too.
	bits := []uint16{0x3c00, 0x8001, 0x7bff, 0xc000}
	tn, err := devtest.Dev.UploadBits([]int{2, 2}, bits, vkattn.Float16)
	if err != nil {
		t.Fatal(err)
	}
	defer tn.Close()
	got := devtest.Download(t, tn)
	for i, h := range bits {
		if want := float16.Frombits(h).Float32(); got[i] != want {
			t.Errorf("UploadBits: element %d = %g, want %g", i, got[i], want)
		}
	}
}

// Values that do not fit, NaN and Inf are refused naming the element, and
// nothing is left allocated.
func TestHalfUploadRefusals(t *testing.T) {
	before := vkattn.LiveObjects()
	for _, c := range []struct {
		name string
		do   func() error
		want error
	}{
		{"f16 overflow", func() error {
			_, err := devtest.Dev.UploadAs([]int{1, 3}, []float32{1, 7e4, 2}, vkattn.Float16)
			return err
		}, vkattn.ErrOverflow},
		{"bf16 NaN", func() error {
			_, err := devtest.Dev.UploadAs([]int{1, 2}, []float32{1, float32(math.NaN())}, vkattn.BFloat16)
			return err
		}, vkattn.ErrNonFinite},
		{"f16 Inf bits", func() error {
			_, err := devtest.Dev.UploadBits([]int{1, 2}, []uint16{0, 0x7c00}, vkattn.Float16)
			return err
		}, vkattn.ErrNonFinite},
		{"bf16 NaN bits", func() error {
			_, err := devtest.Dev.UploadBits([]int{1, 1}, []uint16{0x7fc1}, vkattn.BFloat16)
			return err
		}, vkattn.ErrNonFinite},
		{"bits of float32", func() error { _, err := devtest.Dev.UploadBits([]int{1, 1}, []uint16{0}, vkattn.Float32); return err }, vkattn.ErrOption},
		{"shape", func() error { _, err := devtest.Dev.UploadAs([]int{2, 2}, []float32{1}, vkattn.Float16); return err }, vkattn.ErrShape},
	} {
		err := c.do()
		if !errors.Is(err, c.want) {
			t.Errorf("%s: %v, want %v", c.name, err, c.want)
		}
		t.Logf("%s: %v", c.name, err)
	}
	if err := (func() error {
		_, err := devtest.Dev.UploadAs([]int{1, 3}, []float32{1, 7e4, 2}, vkattn.Float16)
		return err
	})(); err == nil ||
		!strings.Contains(err.Error(), "element 1: 70000 does not fit f16") {
		t.Errorf("overflow error %q should name the element, the value and the type", err)
	}
	if n := vkattn.LiveObjects(); n != before {
		t.Errorf("%d Vulkan objects alive after the refusals, %d before", n, before)
	}
	// A half tensor's Write rounds too, and refuses what does not fit.
	tn := devtest.MustUploadAs(t, devtest.Dev, []int{1, 2}, []float32{1, 2}, vkattn.Float16)
	defer tn.Close()
	if err := tn.Write([]float32{0.1, 7e4}); !errors.Is(err, vkattn.ErrOverflow) {
		t.Errorf("Write of 7e4 to a float16 tensor: %v, want ErrOverflow", err)
	}
	if err := tn.Write([]float32{0.1, -3}); err != nil {
		t.Fatal(err)
	}
	if got, err := tn.Download(); err != nil || got[0] != devtest.RoundTo(vkattn.Float16, 0.1) || got[1] != -3 {
		t.Errorf("after Write: %v, %v", got, err)
	}
}

// The kernels read every type on every load path: one small case per mix,
// path and load width, against the reference on the rounded values (the
// scalar loads with each half type in every slot; the mixes with vec4).
func TestHalfInputsEveryPath(t *testing.T) {
	// NVIDIA's plan loads as AMD's does: other tiles, the same loads.
	devtest.InParallel(t, []string{"auto", "storage", "nvidia"}, func(t *testing.T, path string) {
		d := devtest.EveryPlan()[path]
		r := rand.New(rand.NewSource(9))
		for _, width := range []int{8, 5} { // vec4 and scalar loads
			mixes := typeMixes[1:]
			if width == 5 {
				mixes = typeMixes[2:4] // all f16, all bf16
			}
			for i, ts := range mixes {
				p := devtest.NewProblem(r, 2, 2, 1, 5, 37, width, width)
				p.Types = ts
				p.Opts.Causal = vkattn.CausalBottomRight
				p.WantLSE, p.Weights = true, i%2 == 0
				p.BLHD = i == 2
				t.Run(fmt.Sprintf("d%d%s", width, typesName(ts)), func(t *testing.T) {
					plan, err := d.PlanAs(p.QS[:], p.KS[:], p.VS[:], ts, p.Opts)
					if err != nil {
						t.Fatal(err)
					}
					// The plan says how each input is read.
					if want := fmt.Sprintf("Q %v K %v V %v widened to f32 on load", ts[0], ts[1], ts[2]); !strings.Contains(plan.String(), want) {
						t.Errorf("plan %q does not say %q", plan, want)
					}
					devtest.CheckAgainstReference(t, d, p)
				})
			}
		}
	})
}

// Split-K lanes on the texel path read half rows of whole 16-byte texels
// eight halves a fetch, and other widths four, both to the reference.
func TestHalvesEightAFetch(t *testing.T) {
	d := devtest.EveryPlan()["auto"]
	r := rand.New(rand.NewSource(10))
	for _, c := range []struct {
		width int
		ts    [3]vkattn.DType
		eight bool
	}{
		{8, typeMixes[2], true},   // all f16
		{16, typeMixes[4], true},  // bf16 K/V beside f32 queries
		{12, typeMixes[2], false}, // rows end mid-texel
	} {
		t.Run(fmt.Sprintf("d%d%s", c.width, typesName(c.ts)), func(t *testing.T) {
			p := devtest.NewProblem(r, 1, 2, 1, 1, 300, c.width, c.width)
			p.Types = c.ts
			plan, err := d.PlanAs(p.QS[:], p.KS[:], p.VS[:], c.ts, p.Opts)
			if err != nil {
				t.Fatal(err)
			}
			if plan.Kernel.Splits == 0 || plan.Kernel.Halves8 != c.eight || strings.Contains(plan.String(), "halves eight a fetch") != c.eight {
				t.Errorf("want a split-K plan with Halves8 %v; got %s", c.eight, plan)
			}
			devtest.CheckAgainstReference(t, d, p)
		})
	}
}

// Every golden case with its inputs stored as halves (all three, and half
// K/V beside float32 queries) on both load paths, against the reference on
// the rounded values at the sweep's float32 tolerance.
func TestGoldenCasesInHalves(t *testing.T) {
	cases, err := golden.Load("testdata")
	if err != nil {
		t.Fatal(err)
	}
	// NVIDIA's plan loads as AMD's does.
	devtest.InParallel(t, []string{"auto", "storage", "nvidia"}, func(t *testing.T, path string) {
		d := devtest.EveryPlan()[path]
		for _, c := range cases {
			for _, ts := range [][3]vkattn.DType{typeMixes[2], typeMixes[4]} {
				t.Run(c.Name+typesName(ts), func(t *testing.T) {
					g, err := c.Problem()
					if err != nil {
						t.Fatal(err)
					}
					devtest.CheckAgainstReference(t, d, &devtest.Problem{
						Q: g.Q, K: g.K, V: g.V, QS: g.Q4, KS: g.K4, VS: g.V4, Opts: g.Opts,
						WantLSE: c.Expect.LSE != nil, Weights: c.Expect.A != nil, Types: ts,
					})
				})
			}
		}
	})
}

// The kernels widen halves exactly, subnormals included: with one visible
// key the output row is that key's value row, bit for bit.
func TestHalfWideningIsExact(t *testing.T) {
	v := []float32{
		float32(math.Ldexp(1, -24)), float32(math.Ldexp(1023, -24)), -float32(math.Ldexp(3, -24)), 65504,
		float32(math.Ldexp(1, -14)), -0.333251953125, 1, float32(math.Ldexp(1, -133)),
	}
	for path, d := range devtest.EveryPlan() {
		for _, dt := range []vkattn.DType{vkattn.Float16, vkattn.BFloat16} {
			for _, width := range []int{8, 7} { // vec4 and scalar loads
				vals := devtest.RoundAll(dt, v[:width])
				if dt == vkattn.Float16 {
					vals[width-1] = 0 // 2^-133 is a bfloat16 subnormal, not a float16 one
				}
				p := &devtest.Problem{Q: make([]float32, width), K: make([]float32, width), V: vals,
					QS: [4]int{1, 1, 1, width}, KS: [4]int{1, 1, 1, width}, VS: [4]int{1, 1, 1, width},
					Types: [3]vkattn.DType{dt, dt, dt}}
				got := devtest.RunGPU(t, d, p)
				for i := range vals {
					if math.Float32bits(got.O[i]) != math.Float32bits(vals[i]) {
						t.Errorf("%s/%v/d%d: O[%d] = %g, want the widened value %g exactly", path, dt, width, i, got.O[i], vals[i])
					}
				}
			}
		}
	}
}

// Tensor.At reads the element Download gives at the same index, for every
// element type (a q8_0 tensor through its block) and a strided view; an
// index outside the shape is ErrShape.
func TestTensorAt(t *testing.T) {
	r := rand.New(rand.NewSource(61))
	x := devtest.RandomValues(r, 2*3*4*32)
	for _, dt := range []vkattn.DType{vkattn.Float32, vkattn.Float16, vkattn.BFloat16, vkattn.Q8_0} {
		full := devtest.MustUploadAs(t, devtest.Dev, []int{2, 3, 4, 32}, x, dt)
		defer full.Close()
		for _, tn := range []*vkattn.Tensor{full, full.SwapAxes12()} {
			want := devtest.Download(t, tn)
			s := tn.Shape()
			for _, ix := range [][4]int{{0, 0, 0, 0}, {1, 2, 2, 31}, {1, 0, 2, 17}, {0, s[1] - 1, s[2] - 1, 5}} {
				got, err := tn.At(ix[0], ix[1], ix[2], ix[3])
				if w := want[((ix[0]*s[1]+ix[1])*s[2]+ix[2])*s[3]+ix[3]]; err != nil || got != w {
					t.Errorf("%v %v At%v = %v, %v; Download has %v", dt, s, ix, got, err, w)
				}
			}
			if _, err := tn.At(0, 0, s[2], 0); !errors.Is(err, vkattn.ErrShape) {
				t.Errorf("%v: At past the positions: %v, want ErrShape", dt, err)
			}
		}
	}
}
