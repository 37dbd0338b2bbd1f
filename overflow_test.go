package vkattn_test

import (
	"errors"
	"math"
	"math/rand"
	"strings"
	"testing"

	"github.com/vkattn/vkattn"
	"github.com/vkattn/vkattn/internal/devtest"
)

// TestOverflowIsRefused: finite inputs whose scores or output sums could
// exceed float32's range are refused at Prepare (ErrOverflow) instead of
// giving NaN rows. Bounds for d = 8, S = 3, default scale 1/sqrt(8):
// q.k <= 8 max|q| max|k|, and each output sums up to S value rows.
func TestOverflowIsRefused(t *testing.T) {
	const l, s, d = 2, 3, 8
	small := func(n int) []float32 { return devtest.RandomValues(rand.New(rand.NewSource(1)), n) }
	huge := float32(3e38)
	mask := devtest.Filled(s, 0)
	mask[1] = huge
	for _, c := range []struct {
		name    string
		q, k, v []float32
		opts    vkattn.Options
	}{
		{"inputs near 3e38", devtest.Filled(l*d, huge), devtest.Filled(s*d, huge), small(s * d), vkattn.Options{}},
		// 8 x 2e19 x 2e19 = 3.2e39: the unscaled q.k, formed first, overflows.
		{"one product overflows", devtest.Filled(l*d, 2e19), devtest.Filled(s*d, 2e19), small(s * d), vkattn.Options{}},
		// q.k <= 8e36 fits; times 100 it does not.
		{"scaled scores", devtest.Filled(l*d, 1e18), devtest.Filled(s*d, 1e18), small(s * d), vkattn.Options{Scale: vkattn.CustomScale(100)}},
		// Scores up to 8e37 (8 x 1e18 x 1e18 x 10) plus a mask of 3e38.
		{"scores plus mask", devtest.Filled(l*d, 1e18), devtest.Filled(s*d, 1e18), small(s * d), vkattn.Options{Scale: vkattn.CustomScale(10), Mask: &vkattn.Mask{Shape: vkattn.MaskShape{1, 1, 1, s}, Values: mask}}},
		// 3 keys x 3e38: the unnormalised output sum overflows.
		{"output sums", small(l * d), small(s * d), devtest.Filled(s*d, huge), vkattn.Options{}},
	} {
		t.Run(c.name, func(t *testing.T) {
			q, k, v := devtest.Upload(t, devtest.Dev, []int{l, d}, c.q), devtest.Upload(t, devtest.Dev, []int{s, d}, c.k), devtest.Upload(t, devtest.Dev, []int{s, d}, c.v)
			out, err := devtest.Dev.Attention(q, k, v, c.opts)
			if !errors.Is(err, vkattn.ErrOverflow) {
				if out != nil {
					o, _ := out.O.Download()
					out.Close()
					t.Fatalf("got output %v, error %v; want ErrOverflow", o, err)
				}
				t.Fatalf("got %v, want ErrOverflow", err)
			}
			if !strings.Contains(err.Error(), "float32") {
				t.Errorf("error %q does not say what overflows", err)
			}
			t.Log(err)
		})
	}
}

// TestLargeScoresInRange: scores of order 1e36, within the bounds, give
// the reference's finite result (a one-hot softmax), not NaN.
func TestLargeScoresInRange(t *testing.T) {
	p := devtest.NewProblem(rand.New(rand.NewSource(2)), 1, 1, 1, 2, 3, 8, 8)
	for i := range p.Q {
		p.Q[i] *= 1e18
	}
	for i := range p.K {
		p.K[i] *= 1e18
	}
	p.WantLSE, p.Weights = true, true
	devtest.CheckAgainstReference(t, devtest.Dev, p)
}

// TestWriteStaysInRange: Write refuses values beyond a tensor's bound, the
// larger of 2^32 and what Upload held, since calls prepared on the tensor
// were checked against that bound.
func TestWriteStaysInRange(t *testing.T) {
	const s, d = 3, 8
	q := devtest.Upload(t, devtest.Dev, []int{1, d}, devtest.Filled(d, 1))
	k := devtest.Upload(t, devtest.Dev, []int{s, d}, make([]float32, s*d)) // a cache filled later
	v := devtest.Upload(t, devtest.Dev, []int{s, d}, devtest.Filled(s*d, 1))
	call, err := devtest.Dev.Prepare(q, k, v, vkattn.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer call.Close()
	if err := k.Write(devtest.Filled(s*d, 1<<32)); err != nil {
		t.Errorf("Write of 2^32 into a tensor uploaded as zeros: %v", err)
	}
	if err := k.Write(devtest.Filled(s*d, 1e10)); !errors.Is(err, vkattn.ErrOverflow) {
		t.Errorf("Write of 1e10 into a tensor uploaded as zeros: %v, want ErrOverflow", err)
	}
	big := devtest.Upload(t, devtest.Dev, []int{s, d}, devtest.Filled(s*d, 1e20))
	if err := big.Write(devtest.Filled(s*d, -1e20)); err != nil {
		t.Errorf("Write of -1e20 into a tensor uploaded with 1e20: %v", err)
	}
	if err := big.Write(devtest.Filled(s*d, 2e20)); !errors.Is(err, vkattn.ErrOverflow) {
		t.Errorf("Write of 2e20 into a tensor uploaded with 1e20: %v, want ErrOverflow", err)
	}
}

// TestOutputsCarryBounds: a call's outputs fed to another call are
// checked too: O lies within max|V|, and the log-sum-exp may be -Inf.
func TestOutputsCarryBounds(t *testing.T) {
	const l, s, d = 2, 3, 8
	r := rand.New(rand.NewSource(3))
	q, k := devtest.Upload(t, devtest.Dev, []int{l, d}, devtest.RandomValues(r, l*d)), devtest.Upload(t, devtest.Dev, []int{s, d}, devtest.RandomValues(r, s*d))
	attend := func(q, k, v *vkattn.Tensor, opts vkattn.Options) (*vkattn.Output, error) {
		out, err := devtest.Dev.Attention(q, k, v, opts)
		if err == nil {
			t.Cleanup(out.Close)
		}
		return out, err
	}
	small, err := attend(q, k, devtest.Upload(t, devtest.Dev, []int{s, d}, devtest.RandomValues(r, s*d)), vkattn.Options{WantLSE: true})
	if err != nil {
		t.Fatal(err)
	}
	// |O| <= 2^32 (V's bound): 8 x 2^32 x 2^32 ~ 1.5e20 is in range.
	if _, err := attend(small.O, small.O, small.O, vkattn.Options{}); err != nil {
		t.Errorf("O of unit values as Q, K and V: %v", err)
	}
	if _, err := attend(small.LSE, small.LSE, small.LSE, vkattn.Options{}); !errors.Is(err, vkattn.ErrNonFinite) {
		t.Errorf("log-sum-exp as an input: %v, want ErrNonFinite (it may hold -Inf)", err)
	}
	large, err := attend(q, k, devtest.Upload(t, devtest.Dev, []int{s, d}, devtest.Filled(s*d, 1e20)), vkattn.Options{})
	if err != nil {
		t.Fatal(err)
	}
	// |O| <= 1e20: 8 x 1e20 x 1e20 = 8e40 is not.
	if _, err := attend(large.O, large.O, large.O, vkattn.Options{}); !errors.Is(err, vkattn.ErrOverflow) {
		t.Errorf("O of 1e20 values as Q and K: %v, want ErrOverflow", err)
	}
}

// TestFloat32MinMaskMatchesTheReference: models save "blocked" as the most
// negative finite float32 (torch.finfo(float32).min) in additive masks. It
// is finite, so it does not block as -Inf does: a key so masked beside
// unmasked keys gets weight 0, and a row whose every key is so masked gets
// the softmax of equal scores (uniform), as the float64 reference says;
// prefill and split-K decode, weights and log-sum-exp.
func TestFloat32MinMaskMatchesTheReference(t *testing.T) {
	r := rand.New(rand.NewSource(51))
	for _, c := range []struct {
		name      string
		l, s, d   int
		weights   bool
		onStorage bool
	}{
		{"prefill", 3, 5, 8, true, false},
		{"prefill, storage path", 3, 5, 8, true, true},
		{"split-K decode", 1, 300, 8, false, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			p := devtest.NewProblem(r, 1, 2, 2, c.l, c.s, c.d, c.d)
			mask := make([]float32, c.l*c.s)
			for i := range mask {
				if r.Intn(2) == 0 || i/c.s == 0 { // row 0: every key
					mask[i] = -math.MaxFloat32
				}
			}
			p.Opts.Mask = &vkattn.Mask{Shape: vkattn.MaskShape{1, 1, c.l, c.s}, Values: mask}
			p.WantLSE, p.Weights = true, c.weights
			d := devtest.Dev
			if c.onStorage {
				d = devtest.StorageDev
			}
			devtest.CheckAgainstReference(t, d, p)
		})
	}
}
