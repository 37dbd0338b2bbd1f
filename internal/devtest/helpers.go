package devtest

import (
	"context"
	"errors"
	"math/rand"
	"os"
	"testing"
	"time"

	"github.com/vkattn/vkattn"
	"github.com/vkattn/vkattn/internal/random"
	"github.com/vkattn/vkattn/internal/testutil"
	"github.com/vkattn/vkattn/internal/verdict"
	"github.com/vkattn/vkattn/kv"
	"github.com/vkattn/vkattn/reference"
)

// Problem is one attention call with host data, runnable on the GPU and on
// the float64 reference.
type Problem struct {
	Q, K, V          []float32
	QS, KS, VS       [4]int
	Opts             vkattn.Options
	BLHD             bool // upload Q, K, V as (B, L, H, d) and read through strided views
	WantLSE, Weights bool
	// types are the element types Q, K and V are uploaded as (zero:
	// float32); the reference reads the values rounded to them.
	Types [3]vkattn.DType
}

// RandomValues are n values uniform in [-1, 1) (internal/random).
func RandomValues(r *rand.Rand, n int) []float32 { return random.Uniform(r, n) }

// Size is the number of elements of a tensor of shape s.
func Size(s [4]int) int { return s[0] * s[1] * s[2] * s[3] }

// NewProblem is a problem of uniform random inputs (random.QKV).
func NewProblem(r *rand.Rand, b, h, hkv, l, s, dk, dv int) *Problem {
	in, sh := random.QKV(r, random.Uniform, b, h, hkv, l, s, dk, dv)
	return &Problem{Q: in[0], K: in[1], V: in[2], QS: sh[0], KS: sh[1], VS: sh[2]}
}

// ToBLHD rewrites dense (B,H,L,d) data as (B,L,H,d).
func ToBLHD(x []float32, s [4]int) []float32 {
	out := make([]float32, len(x))
	for b := 0; b < s[0]; b++ {
		for h := 0; h < s[1]; h++ {
			for l := 0; l < s[2]; l++ {
				src := ((b*s[1]+h)*s[2] + l) * s[3]
				dst := ((b*s[2]+l)*s[1] + h) * s[3]
				copy(out[dst:dst+s[3]], x[src:src+s[3]])
			}
		}
	}
	return out
}

// MustUpload uploads x with the given shape on d; the caller closes it.
func MustUpload(t *testing.T, d *vkattn.Device, shape []int, x []float32) *vkattn.Tensor {
	t.Helper()
	tt, err := d.Upload(shape, x)
	if err != nil {
		t.Fatal(err)
	}
	return tt
}

// Replay writes data into in, runs a prepared call and returns its
// output out downloaded: one step of a loop that replays a call.
func Replay(t *testing.T, in *vkattn.Tensor, data []float32, run func(context.Context) (time.Duration, error), out *vkattn.Tensor) []float32 {
	t.Helper()
	if err := in.Write(data); err != nil {
		t.Fatal(err)
	}
	if _, err := run(t.Context()); err != nil {
		t.Fatal(err)
	}
	got := Download(t, out)
	return got
}

// Download is x's values on the host.
func Download(t *testing.T, x *vkattn.Tensor) []float32 {
	t.Helper()
	got, err := x.Download()
	if err != nil {
		t.Fatal(err)
	}
	return got
}

// SmallBindings opens a validated device whose bindings reach 128 KiB,
// otherwise as cfg says, so that calls and layers run in chunks and
// blocks; it is closed when the test ends.
func SmallBindings(t *testing.T, cfg vkattn.Config) *vkattn.Device {
	t.Helper()
	cfg.Validation, cfg.BindingLimit = true, 128<<10
	d, err := vkattn.Open(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := d.Close(); err != nil {
			t.Error(err)
		}
	})
	return d
}

// PrepareStep prepares a decode step of heads query heads on cache.
func PrepareStep(t *testing.T, cache *kv.Cache, heads int, opts vkattn.Options) *kv.DecodeStep {
	t.Helper()
	step, err := cache.PrepareStep(heads, opts)
	if err != nil {
		t.Fatal(err)
	}
	return step
}

// Upload is MustUpload closed when the test ends.
func Upload(t *testing.T, d *vkattn.Device, shape []int, x []float32) *vkattn.Tensor {
	t.Helper()
	tt := MustUpload(t, d, shape, x)
	t.Cleanup(tt.Close)
	return tt
}

// Zeros uploads a tensor of zeros on d, closed when the test ends.
func Zeros(t *testing.T, d *vkattn.Device, shape ...int) *vkattn.Tensor {
	t.Helper()
	n := 1
	for _, s := range shape {
		n *= s
	}
	return Upload(t, d, shape, make([]float32, n))
}

// Refusal is a call that must fail with an error wrapping err.
type Refusal struct {
	Name string
	Err  error
	Run  func() error
}

// CheckRefusals reports every call whose error does not wrap its sentinel.
func CheckRefusals(t *testing.T, rs []Refusal) {
	t.Helper()
	for _, c := range rs {
		if err := c.Run(); !errors.Is(err, c.Err) {
			t.Errorf("%s: error %v, want %v", c.Name, err, c.Err)
		}
	}
}

// Upload puts x, dense (B,H,L,d) data of shape s, on d as type dt, laid
// out as the problem says (as (B,L,H,d) read through a view when blhd);
// the caller closes it.
func (p *Problem) Upload(t *testing.T, d *vkattn.Device, x []float32, s [4]int, dt vkattn.DType) *vkattn.Tensor {
	t.Helper()
	if p.BLHD {
		return MustUploadAs(t, d, []int{s[0], s[2], s[1], s[3]}, ToBLHD(x, s), dt).SwapAxes12()
	}
	return MustUploadAs(t, d, s[:], x, dt)
}

// Inputs uploads the problem's Q, K and V; the caller closes them.
func (p *Problem) Inputs(t *testing.T, d *vkattn.Device) (q, k, v *vkattn.Tensor) {
	t.Helper()
	return p.Upload(t, d, p.Q, p.QS, p.Types[0]), p.Upload(t, d, p.K, p.KS, p.Types[1]), p.Upload(t, d, p.V, p.VS, p.Types[2])
}

type GPUResult struct {
	O, LSE, W []float32
	Out       *vkattn.Output
}

// RunGPU uploads the problem, runs it and downloads every output.
func RunGPU(t *testing.T, d *vkattn.Device, p *Problem) GPUResult {
	t.Helper()
	q, k, v := p.Inputs(t, d)
	defer q.Close()
	defer k.Close()
	defer v.Close()
	opts := p.Opts
	opts.WantLSE, opts.WantWeights = p.WantLSE, p.Weights
	out, err := d.Attention(q, k, v, opts)
	if err != nil {
		t.Fatal(err)
	}
	defer out.Close()
	res := GPUResult{Out: out}
	if res.O, err = out.O.Download(); err != nil {
		t.Fatal(err)
	}
	if out.LSE != nil {
		if res.LSE, err = out.LSE.Download(); err != nil {
			t.Fatal(err)
		}
	}
	if out.Weights != nil {
		if res.W, err = out.Weights.Download(); err != nil {
			t.Fatal(err)
		}
	}
	return res
}

func RunReference(t *testing.T, p *Problem) *reference.Result {
	t.Helper()
	q, k, v := p.Rounded()
	want, err := reference.Attention(q, p.QS, k, p.KS, v, p.VS, p.Opts)
	if err != nil {
		t.Fatal(err)
	}
	return want
}

// ReferenceOf is the reference output of p, for goroutines other than the
// test's.
func ReferenceOf(p *Problem) ([]float64, error) {
	q, k, v := p.Rounded()
	want, err := reference.Attention(q, p.QS, k, p.KS, v, p.VS, p.Opts)
	if err != nil {
		return nil, err
	}
	return want.O, nil
}

// CompareWithin is compare allowing extra more absolute error: a plan on
// cooperative matrices is off by its stated bound more
// (Plan.MatrixErrorBound).
func CompareWithin(t *testing.T, what string, got []float32, want []float64, extra float64) {
	t.Helper()
	if err := testutil.Compare(got, want, Tolerance, extra); err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

// Tolerance is the sweep's error bound: |got - want| <= 2e-5 * max(1, |want|).
const Tolerance = verdict.SweepTolerance

// Compare checks got against want element-wise under the sweep bound;
// -Inf (log-sum-exp of fully masked rows) must be -Inf.
func Compare(t *testing.T, what string, got []float32, want []float64) {
	t.Helper()
	if err := CloseTo(got, want); err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

// CloseTo is compare's check as an error, for goroutines other than the
// test's: verdict.Compare, the comparison the CLI's --check and verify use.
func CloseTo(got []float32, want []float64) error { return testutil.Compare(got, want, Tolerance, 0) }

// CheckAgainstReference runs p on d and on the reference and compares every output.
func CheckAgainstReference(t *testing.T, d *vkattn.Device, p *Problem) {
	t.Helper()
	got := RunGPU(t, d, p)
	want := RunReference(t, p)
	q, k, v := p.Rounded()
	bound := got.Out.Plan.MatrixErrorBound(q, k, v, p.Opts.Scale)
	CompareWithin(t, "O", got.O, want.O, bound.O)
	if p.WantLSE {
		CompareWithin(t, "LSE", got.LSE, want.LSE, bound.LSE)
	}
	if p.Weights {
		Compare(t, "weights", got.W, want.Weights)
	}
}

// TempUserCache points the user cache directory (where SaveTuning writes
// and vkattn keeps its pipeline cache) at a temporary one for t, and keeps
// Mesa's shader cache where it was (MESA_SHADER_CACHE_DIR): lavapipe would
// otherwise compile anew, in a cache of its own, every kernel the test runs.
func TempUserCache(t *testing.T) {
	t.Helper()
	if os.Getenv("MESA_SHADER_CACHE_DIR") == "" {
		if dir, err := os.UserCacheDir(); err == nil {
			t.Setenv("MESA_SHADER_CACHE_DIR", dir)
		}
	}
	dir := t.TempDir()
	t.Setenv("XDG_CACHE_HOME", dir)
	t.Setenv("HOME", dir)
}
