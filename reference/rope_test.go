package reference

import (
	"errors"
	"math"
	"math/cmplx"
	"math/rand"
	"testing"

	"github.com/vkattn/vkattn/core"
	"github.com/vkattn/vkattn/internal/random"
	"github.com/vkattn/vkattn/internal/testutil"
	"github.com/vkattn/vkattn/internal/verdict"
)

// The rotation as complex multiplication (RoFormer's formulation): pair i
// is the complex number x_a + i x_b, multiplied by e^(i p theta^(-2i/n)).
func TestRoPEIsComplexRotation(t *testing.T) {
	rng := rand.New(rand.NewSource(3))
	for _, style := range []core.RoPEStyle{core.RoPEHalf, core.RoPEInterleaved} {
		for _, c := range []struct{ d, n int }{{8, 8}, {12, 8}, {6, 2}} {
			r := &core.RoPE{Theta: 10000, Dims: c.n, Style: style}
			const pos = 37
			x32 := random.Normal(rng, c.d)
			got := widen(x32)
			RotateRoPE(got, [4]int{1, 1, 1, c.d}, r, func(int, int) int { return pos })
			want := widen(x32)
			for i := 0; i < c.n/2; i++ {
				a, b := i, i+c.n/2
				if style == core.RoPEInterleaved {
					a, b = 2*i, 2*i+1
				}
				angle := pos * math.Pow(10000, -2*float64(i)/float64(c.n))
				z := complex(want[a], want[b]) * cmplx.Exp(complex(0, angle))
				want[a], want[b] = real(z), imag(z)
			}
			testutil.Near(t, style.String(), got, want, 1e-12)
			for i := c.n; i < c.d; i++ {
				if got[i] != float64(x32[i]) {
					t.Errorf("%v d=%d n=%d: element %d past the rotated dims changed", style, c.d, c.n, i)
				}
			}
		}
	}
}

// Scores of rotated rows depend on positions only through their
// difference: attention with every position shifted by the same amount is
// unchanged, and differs once queries and keys are shifted apart.
func TestRoPERelativePositions(t *testing.T) {
	rng := rand.New(rand.NewSource(4))
	qs, ks := [4]int{2, 2, 3, 8}, [4]int{2, 1, 5, 8}
	q, k, v := random.Normal(rng, 2*2*3*8), random.Normal(rng, 2*5*8), random.Normal(rng, 2*5*8)
	positions := func(n, shift int) []int {
		p := make([]int, 2*n)
		for i := range p {
			p[i] = i%n + shift + 3*(i/n)
		}
		return p
	}
	run := func(qShift, kShift int) []float64 {
		r := &core.RoPE{Theta: 500000, QueryPositions: positions(3, qShift+2), KeyPositions: positions(5, kShift)}
		return mustRun(t, q, qs, k, ks, v, ks, core.Options{RoPE: r}).O
	}
	base := run(0, 0)
	testutil.Near(t, "shifted by 1000", run(1000, 1000), base, 1e-9)
	moved := run(7, 0)
	diff := 0.0
	for i := range moved {
		diff = math.Max(diff, math.Abs(moved[i]-base[i]))
	}
	if !(diff >= 1e-3) {
		t.Errorf("queries moved 7 positions from their keys: output changed by %g only", diff)
	}
}

// Default positions follow the bottom-right convention: query t at
// t + S - L, key j at j; under AlignToKeyLengths query t of item b at
// t + KeyLengths[b] - L. Spelled out, the same positions give the same
// output.
func TestRoPEDefaultPositions(t *testing.T) {
	rng := rand.New(rand.NewSource(5))
	qs, ks := [4]int{2, 1, 2, 4}, [4]int{2, 1, 6, 4}
	q, k, v := random.Normal(rng, 16), random.Normal(rng, 48), random.Normal(rng, 48)
	for _, align := range []bool{false, true} {
		opts := core.Options{KeyLengths: []int{6, 3}, AlignToKeyLengths: align, RoPE: &core.RoPE{Theta: 100}}
		qp := []int{4, 5, 4, 5}
		if align {
			qp = []int{4, 5, 1, 2}
		}
		explicit := opts
		explicit.RoPE = &core.RoPE{Theta: 100, QueryPositions: qp, KeyPositions: []int{0, 1, 2, 3, 4, 5, 0, 1, 2, 3, 4, 5}}
		testutil.Near(t, "defaults", mustRun(t, q, qs, k, ks, v, ks, opts).O, mustRun(t, q, qs, k, ks, v, ks, explicit).O, 0)
	}
}

func TestRoPEScaling(t *testing.T) {
	// Linear: position p with factor F is position p / F unscaled.
	r := &core.RoPE{Theta: 10000, Scaling: core.RoPEScaling{Kind: core.RoPELinear, Factor: 4}}
	plain := &core.RoPE{Theta: 10000}
	rng := rand.New(rand.NewSource(6))
	x := random.Normal(rng, 16)
	a, b := widen(x), widen(x)
	RotateRoPE(a, [4]int{1, 1, 1, 16}, r, func(int, int) int { return 12 })
	RotateRoPE(b, [4]int{1, 1, 1, 16}, plain, func(int, int) int { return 3 })
	testutil.Near(t, "linear:4 at 12 vs none at 3", a, b, 1e-12)

	// Llama 3 (factor 8, low 1, high 4, original context 8192: Llama
	// 3.1's): wavelengths under 8192/4 = 2048 positions keep their
	// frequency, those over 8192 are divided by 8, and in between the
	// factor moves smoothly from 1/8 to 1.
	l3 := &core.RoPE{Theta: 500000, Scaling: core.RoPEScaling{Kind: core.RoPELlama3, Factor: 8, LowFreqFactor: 1, HighFreqFactor: 4, OriginalContext: 8192}}
	inv, base := l3.InvFreq(128), (&core.RoPE{Theta: 500000}).InvFreq(128)
	medium := 0
	for i := range inv {
		wavelen := 2 * math.Pi / base[i]
		ratio := inv[i] / base[i]
		switch {
		case wavelen < 2048:
			if ratio != 1 {
				t.Errorf("inv_freq %d (wavelength %.0f): scaled by %g, want 1", i, wavelen, ratio)
			}
		case wavelen > 8192:
			if !verdict.Near(ratio, 0.125, 1e-15) {
				t.Errorf("inv_freq %d (wavelength %.0f): scaled by %g, want 1/8", i, wavelen, ratio)
			}
		default:
			medium++
			// smooth = 8192/wavelen/3 - 1/3; ratio = (1 - smooth)/8 + smooth.
			smooth := (8192/wavelen - 1) / 3
			if want := (1-smooth)/8 + smooth; !verdict.Near(ratio, want, 1e-12) || !(ratio >= 0.125 && ratio <= 1) {
				t.Errorf("inv_freq %d (wavelength %.0f): scaled by %g, want %g", i, wavelen, ratio, want)
			}
		}
	}
	if medium == 0 {
		t.Error("no frequency fell between the two wavelengths")
	}
}

func TestRoPERefusals(t *testing.T) {
	s := [4]int{1, 1, 2, 6}
	x := make([]float32, 12)
	for _, c := range []struct {
		name string
		r    core.RoPE
	}{
		{"odd dims", core.RoPE{Theta: 1e4, Dims: 3}},
		{"dims past d_k", core.RoPE{Theta: 1e4, Dims: 8}},
		{"zero theta", core.RoPE{}},
		{"bad style", core.RoPE{Theta: 1e4, Style: 7}},
		{"bad linear", core.RoPE{Theta: 1e4, Scaling: core.RoPEScaling{Kind: core.RoPELinear}}},
		{"bad llama3", core.RoPE{Theta: 1e4, Scaling: core.RoPEScaling{Kind: core.RoPELlama3, Factor: 8, LowFreqFactor: 4, HighFreqFactor: 1, OriginalContext: 8192}}},
		{"positions", core.RoPE{Theta: 1e4, QueryPositions: []int{1}}},
	} {
		r := c.r
		_, err := Attention(x, s, x, s, x, s, core.Options{RoPE: &r})
		if !errors.Is(err, core.ErrOption) && !errors.Is(err, core.ErrShape) {
			t.Errorf("%s: err %v, want ErrOption or ErrShape", c.name, err)
		}
	}
	// d_k = 6 with all dims rotated is fine; odd d_k needs Dims.
	if _, err := Attention(x, s, x, s, x, s, core.Options{RoPE: &core.RoPE{Theta: 1e4}}); err != nil {
		t.Errorf("d_k = 6, all dims: %v", err)
	}
}

func TestParseRoPEScaling(t *testing.T) {
	for _, s := range []string{"none", "linear:2", "llama3:8,1,4,8192"} {
		sc, err := core.ParseRoPEScaling(s)
		if err != nil || sc.String() != s {
			t.Errorf("ParseRoPEScaling(%q) = %v, %v", s, sc, err)
		}
	}
	for _, s := range []string{"linear", "linear:0", "llama3:8,1,4", "llama3:8,4,1,8192", "yarn:2", "llama3:8,1,4,81.5"} {
		if _, err := core.ParseRoPEScaling(s); !errors.Is(err, core.ErrOption) {
			t.Errorf("ParseRoPEScaling(%q): err %v, want ErrOption", s, err)
		}
	}
}
