package vkattn_test

import (
	"errors"
	"math"
	"math/rand"
	"slices"
	"testing"

	"github.com/vkattn/vkattn"
	"github.com/vkattn/vkattn/internal/devtest"
	"github.com/vkattn/vkattn/reference"
)

// checkBackward runs the backward of p on d with a random dO and checks
// dQ, dK, dV and dSinks against the float64 reference; it returns the
// forward's plan.
func checkBackward(t *testing.T, d *vkattn.Device, r *rand.Rand, p *devtest.Problem) vkattn.Plan {
	t.Helper()
	return checkBackwardOf(t, d, p, devtest.RandomValues(r, p.QS[0]*p.QS[1]*p.QS[2]*p.VS[3]))
}

// checkBackwardOf is checkBackward with the given dO.
func checkBackwardOf(t *testing.T, d *vkattn.Device, p *devtest.Problem, dO []float32) vkattn.Plan {
	t.Helper()
	g := runBackward(t, d, p, dO)
	defer g.Close()
	rq, rk, rv := p.Rounded()
	want, err := reference.AttentionBackward(rq, p.QS, rk, p.KS, rv, p.VS, dO, p.Opts)
	if err != nil {
		t.Fatal(err)
	}
	for _, x := range []struct {
		name string
		t    *vkattn.Tensor
		want []float64
	}{{"dQ", g.DQ, want.DQ}, {"dK", g.DK, want.DK}, {"dV", g.DV, want.DV}} {
		got := devtest.Download(t, x.t)
		devtest.CompareGrad(t, x.name, got, x.want)
	}
	if p.Opts.Sinks != nil {
		devtest.CompareGrad(t, "dSinks", g.DSinks, want.DSinks)
	} else if g.DSinks != nil {
		t.Errorf("dSinks %v without sinks", g.DSinks)
	}
	return g.Plan
}

// The device backward (dQ, dK, dV, dSinks) equals the float64 reference's
// gradients on every plan: GQA, both causal alignments with L < S and
// L > S, every mask kind, key and query lengths (a zero key length: rows
// with no visible key), window, soft-cap, ALiBi and sinks, large logits,
// half inputs and strided views.
func TestAttentionBackwardEveryPlan(t *testing.T) {
	// The first case runs on every plan, the others on lavapipe's (the
	// row passes) and a tiled plan each (each plan's forward for a new
	// case is another lavapipe compile; the workgroup-tiled passes are
	// the same on every other plan).
	cases := []struct {
		name  string
		plans []string
		make  func(r *rand.Rand) *devtest.Problem
	}{
		{"GQA, bottom-right causal, L < S, strided", []string{"auto", "storage", "nvidia", "amd"}, func(r *rand.Rand) *devtest.Problem {
			p := devtest.NewProblem(r, 2, 4, 2, 5, 9, 8, 12)
			p.BLHD = true
			p.Opts = vkattn.Options{Causal: vkattn.CausalBottomRight}
			return p
		}},
		{"top-left causal, L > S, masks, lengths", []string{"auto", "amd"}, func(r *rand.Rand) *devtest.Problem {
			p := devtest.NewProblem(r, 2, 2, 2, 7, 4, 16, 8)
			add := make([]float32, 7*4)
			for i := range add {
				add[i] = float32(i%3) - 1
			}
			allow := make([]bool, 2*7*4)
			for i := range allow {
				allow[i] = i%5 != 2
			}
			p.Opts = vkattn.Options{Causal: vkattn.CausalTopLeft,
				Mask:         &vkattn.Mask{Shape: vkattn.MaskShape{1, 1, 7, 4}, Values: add},
				BoolMasks:    []vkattn.BoolMask{{Shape: vkattn.MaskShape{2, 1, 7, 4}, Values: allow, Meaning: vkattn.TrueAllows}},
				KeyLengths:   []int{4, 0}, // item 1: no visible key
				QueryLengths: []int{6, 7}}
			return p
		}},
		// Rows and keys in several blocks of the row passes' 32.
		{"window, softcap, ALiBi, sinks, large logits, halves", []string{"auto", "nvidia"}, func(r *rand.Rand) *devtest.Problem {
			p := devtest.NewProblem(r, 1, 4, 1, 40, 70, 8, 8)
			p.Types = [3]vkattn.DType{vkattn.Float16, vkattn.BFloat16, vkattn.Float16}
			p.Opts = vkattn.Options{Scale: vkattn.CustomScale(6), Window: &vkattn.Window{Left: 3, Right: 1},
				Softcap: 5, ALiBi: vkattn.ALiBiSlopes(4), Sinks: []float32{0.5, -1, 2, 0},
				KeyLengths: []int{61}, AlignToKeyLengths: true, Causal: vkattn.CausalBottomRight}
			return p
		}},
	}
	devtest.InParallel(t, devtest.EveryPlanName, func(t *testing.T, plan string) {
		for i, c := range cases {
			if slices.Contains(c.plans, plan) {
				t.Run(c.name, func(t *testing.T) {
					r := rand.New(rand.NewSource(int64(120 + i)))
					checkBackward(t, devtest.EveryPlan()[plan], r, c.make(r))
				})
			}
		}
	})
	q := devtest.Zeros(t, devtest.Dev, 1, 1, 2, 4)
	if _, err := devtest.Dev.AttentionBackward(q, q, q, devtest.Zeros(t, devtest.Dev, 1, 1, 3, 4), vkattn.Options{}); !errors.Is(err, vkattn.ErrShape) {
		t.Errorf("dO of the wrong shape: %v, want ErrShape", err)
	}
	if _, err := devtest.Dev.AttentionBackward(q, q, q, q, vkattn.Options{RoPE: &vkattn.RoPE{Theta: 1e4}}); !errors.Is(err, vkattn.ErrOption) {
		t.Errorf("RoPE: %v, want ErrOption", err)
	}
}

// The backward's sums run in a fixed order: two runs give the same bits,
// after lavapipe's forward and the tiled GPU forward, over several
// workgroups and tiles of rows and keys; both equal the reference's
// gradients. 1,500 keys: a key loop with per-element loops inside once
// ran past lavapipe's budget of loop iterations there and lost keys.
func TestAttentionBackwardDeterministic(t *testing.T) {
	r := rand.New(rand.NewSource(130))
	p := devtest.NewProblem(r, 1, 4, 2, 70, 1500, 16, 16)
	opts := vkattn.Options{Causal: vkattn.CausalBottomRight}
	dOValues := devtest.RandomValues(r, 4*70*16)
	want, err := reference.AttentionBackward(p.Q, p.QS, p.K, p.KS, p.V, p.VS, dOValues, opts)
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range devtest.OwnAndNVIDIA {
		d := devtest.EveryPlan()[name]
		t.Run(name, func(t *testing.T) {
			q, k, v := devtest.Upload(t, d, p.QS[:], p.Q), devtest.Upload(t, d, p.KS[:], p.K), devtest.Upload(t, d, p.VS[:], p.V)
			dO := devtest.Upload(t, d, []int{1, 4, 70, 16}, dOValues)
			var first [3][]float32
			for run := 0; run < 2; run++ {
				g, err := d.AttentionBackward(q, k, v, dO, opts)
				if err != nil {
					t.Fatal(err)
				}
				for i, x := range []*vkattn.Tensor{g.DQ, g.DK, g.DV} {
					got := devtest.Download(t, x)
					if run == 0 {
						first[i] = got
						devtest.CompareGrad(t, [3]string{"dQ", "dK", "dV"}[i], got, [3][]float64{want.DQ, want.DK, want.DV}[i])
						continue
					}
					for j := range got {
						if math.Float32bits(got[j]) != math.Float32bits(first[i][j]) {
							t.Fatalf("gradient %d element %d: %v, then %v", i, j, first[i][j], got[j])
						}
					}
				}
				g.Close()
			}
		})
	}
}

// runBackward runs the backward of p on d with dO, the inputs freed when
// it returns; the caller closes the gradients.
func runBackward(t *testing.T, d *vkattn.Device, p *devtest.Problem, dO []float32) *vkattn.Gradients {
	t.Helper()
	q, k, v := p.Inputs(t, d)
	dOT := p.Upload(t, d, dO, [4]int{p.QS[0], p.QS[1], p.QS[2], p.VS[3]}, vkattn.Float32)
	for _, x := range []*vkattn.Tensor{q, k, v, dOT} {
		defer x.Close()
	}
	g, err := d.AttentionBackward(q, k, v, dOT, p.Opts)
	if err != nil {
		t.Fatal(err)
	}
	return g
}
