package vkattn_test

import (
	"context"
	"errors"
	"math/rand"
	"testing"
	"time"

	"github.com/vkattn/vkattn"
	"github.com/vkattn/vkattn/internal/golden"
	"github.com/vkattn/vkattn/internal/random"
	"github.com/vkattn/vkattn/internal/testutil"
	"github.com/vkattn/vkattn/reference"
)

// problem is one attention call with host data, runnable on the GPU and on
// the float64 reference.
type problem struct {
	q, k, v          []float32
	qs, ks, vs       [4]int
	opts             vkattn.Options
	blhd             bool // upload Q, K, V as (B, L, H, d) and read through strided views
	wantLSE, weights bool
	// types are the element types Q, K and V are uploaded as (zero:
	// float32); the reference reads the values rounded to them.
	types [3]vkattn.DType
}

// randomValues are n values uniform in [-1, 1) (internal/random).
func randomValues(r *rand.Rand, n int) []float32 { return random.Uniform(r, n) }

func size(s [4]int) int { return s[0] * s[1] * s[2] * s[3] }

// newProblem is a problem of uniform random inputs (random.QKV).
func newProblem(r *rand.Rand, b, h, hkv, l, s, dk, dv int) *problem {
	in, sh := random.QKV(r, random.Uniform, b, h, hkv, l, s, dk, dv)
	return &problem{q: in[0], k: in[1], v: in[2], qs: sh[0], ks: sh[1], vs: sh[2]}
}

// toBLHD rewrites dense (B,H,L,d) data as (B,L,H,d).
func toBLHD(x []float32, s [4]int) []float32 {
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

// mustUpload uploads x with the given shape on d; the caller closes it.
func mustUpload(t *testing.T, d *vkattn.Device, shape []int, x []float32) *vkattn.Tensor {
	t.Helper()
	tt, err := d.Upload(shape, x)
	if err != nil {
		t.Fatal(err)
	}
	return tt
}

// replay writes data into in, runs a prepared call and returns its
// output out downloaded: one step of a loop that replays a call.
func replay(t *testing.T, in *vkattn.Tensor, data []float32, run func(context.Context) (time.Duration, error), out *vkattn.Tensor) []float32 {
	t.Helper()
	if err := in.Write(data); err != nil {
		t.Fatal(err)
	}
	if _, err := run(t.Context()); err != nil {
		t.Fatal(err)
	}
	got := download(t, out)
	return got
}

// upload is mustUpload closed when the test ends.
// download is x's values on the host.
func download(t *testing.T, x *vkattn.Tensor) []float32 {
	t.Helper()
	got, err := x.Download()
	if err != nil {
		t.Fatal(err)
	}
	return got
}

// smallBindings opens a validated device whose bindings reach 128 KiB,
// otherwise as cfg says, so that calls and layers run in chunks and
// blocks; it is closed when the test ends.
func smallBindings(t *testing.T, cfg vkattn.Config) *vkattn.Device {
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

// prepareStep prepares a decode step of heads query heads on cache.
func prepareStep(t *testing.T, cache *vkattn.KVCache, heads int, opts vkattn.Options) *vkattn.DecodeStep {
	t.Helper()
	step, err := cache.PrepareStep(heads, opts)
	if err != nil {
		t.Fatal(err)
	}
	return step
}

func upload(t *testing.T, d *vkattn.Device, shape []int, x []float32) *vkattn.Tensor {
	t.Helper()
	tt := mustUpload(t, d, shape, x)
	t.Cleanup(tt.Close)
	return tt
}

// zeros uploads a tensor of zeros on d, closed when the test ends.
func zeros(t *testing.T, d *vkattn.Device, shape ...int) *vkattn.Tensor {
	t.Helper()
	n := 1
	for _, s := range shape {
		n *= s
	}
	return upload(t, d, shape, make([]float32, n))
}

// refusal is a call that must fail with an error wrapping err.
type refusal struct {
	name string
	err  error
	run  func() error
}

// checkRefusals reports every call whose error does not wrap its sentinel.
func checkRefusals(t *testing.T, rs []refusal) {
	t.Helper()
	for _, c := range rs {
		if err := c.run(); !errors.Is(err, c.err) {
			t.Errorf("%s: error %v, want %v", c.name, err, c.err)
		}
	}
}

// upload puts x, dense (B,H,L,d) data of shape s, on d as type dt, laid
// out as the problem says (as (B,L,H,d) read through a view when blhd);
// the caller closes it.
func (p *problem) upload(t *testing.T, d *vkattn.Device, x []float32, s [4]int, dt vkattn.DType) *vkattn.Tensor {
	t.Helper()
	if p.blhd {
		return mustUploadAs(t, d, []int{s[0], s[2], s[1], s[3]}, toBLHD(x, s), dt).SwapAxes12()
	}
	return mustUploadAs(t, d, s[:], x, dt)
}

// inputs uploads the problem's Q, K and V; the caller closes them.
func (p *problem) inputs(t *testing.T, d *vkattn.Device) (q, k, v *vkattn.Tensor) {
	t.Helper()
	return p.upload(t, d, p.q, p.qs, p.types[0]), p.upload(t, d, p.k, p.ks, p.types[1]), p.upload(t, d, p.v, p.vs, p.types[2])
}

type gpuResult struct {
	o, lse, w []float32
	out       *vkattn.Output
}

// runGPU uploads the problem, runs it and downloads every output.
func runGPU(t *testing.T, d *vkattn.Device, p *problem) gpuResult {
	t.Helper()
	q, k, v := p.inputs(t, d)
	defer q.Close()
	defer k.Close()
	defer v.Close()
	opts := p.opts
	opts.WantLSE, opts.WantWeights = p.wantLSE, p.weights
	out, err := d.Attention(q, k, v, opts)
	if err != nil {
		t.Fatal(err)
	}
	defer out.Close()
	res := gpuResult{out: out}
	if res.o, err = out.O.Download(); err != nil {
		t.Fatal(err)
	}
	if out.LSE != nil {
		if res.lse, err = out.LSE.Download(); err != nil {
			t.Fatal(err)
		}
	}
	if out.Weights != nil {
		if res.w, err = out.Weights.Download(); err != nil {
			t.Fatal(err)
		}
	}
	return res
}

func runReference(t *testing.T, p *problem) *reference.Result {
	t.Helper()
	q, k, v := p.rounded()
	want, err := reference.Attention(q, p.qs, k, p.ks, v, p.vs, p.opts)
	if err != nil {
		t.Fatal(err)
	}
	return want
}

// referenceOf is the reference output of p, for goroutines other than the
// test's.
func referenceOf(p *problem) ([]float64, error) {
	q, k, v := p.rounded()
	want, err := reference.Attention(q, p.qs, k, p.ks, v, p.vs, p.opts)
	if err != nil {
		return nil, err
	}
	return want.O, nil
}

// compareWithin is compare allowing extra more absolute error: a plan on
// cooperative matrices is off by its stated bound more
// (Plan.MatrixErrorBound).
func compareWithin(t *testing.T, what string, got []float32, want []float64, extra float64) {
	t.Helper()
	if err := testutil.Compare(got, want, tolerance, extra); err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

// tolerance is the sweep's error bound: |got - want| <= 2e-5 * max(1, |want|).
const tolerance = golden.SweepTolerance

// compare checks got against want element-wise under the sweep bound;
// -Inf (log-sum-exp of fully masked rows) must be -Inf.
func compare(t *testing.T, what string, got []float32, want []float64) {
	t.Helper()
	if err := closeTo(got, want); err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

// closeTo is compare's check as an error, for goroutines other than the
// test's: golden.Compare, the comparison the CLI's --check and verify use.
func closeTo(got []float32, want []float64) error { return testutil.Compare(got, want, tolerance, 0) }

// checkAgainstReference runs p on d and on the reference and compares every output.
func checkAgainstReference(t *testing.T, d *vkattn.Device, p *problem) {
	t.Helper()
	got := runGPU(t, d, p)
	want := runReference(t, p)
	q, k, v := p.rounded()
	bound := got.out.Plan.MatrixErrorBound(q, k, v, p.opts.Scale)
	compareWithin(t, "O", got.o, want.O, bound.O)
	if p.wantLSE {
		compareWithin(t, "LSE", got.lse, want.LSE, bound.LSE)
	}
	if p.weights {
		compare(t, "weights", got.w, want.Weights)
	}
}
