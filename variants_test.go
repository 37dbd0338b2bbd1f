package vkattn_test

import (
	"errors"
	"fmt"
	"math/rand"
	"testing"

	"github.com/vkattn/vkattn"
	"github.com/vkattn/vkattn/internal/devtest"
)

// variantCase sets one mix of the score variants (SEMANTICS.md §4.1) on a
// problem with h query heads.
type variantCase struct {
	name  string
	apply func(r *rand.Rand, o *vkattn.Options, h int)
}

var variantCases = []variantCase{
	{"window", func(r *rand.Rand, o *vkattn.Options, h int) {
		o.Window = &vkattn.Window{Left: 1 + r.Intn(20), Right: r.Intn(3)}
	}},
	{"window-left", func(r *rand.Rand, o *vkattn.Options, h int) { o.Window = &vkattn.Window{Left: 5, Right: -1} }},
	{"softcap", func(r *rand.Rand, o *vkattn.Options, h int) { o.Softcap = 0.3 + r.Float64() }},
	{"alibi", func(r *rand.Rand, o *vkattn.Options, h int) { o.ALiBi = vkattn.ALiBiSlopes(h) }},
	{"sinks", func(r *rand.Rand, o *vkattn.Options, h int) { o.Sinks = devtest.RandomValues(r, h) }},
	{"all", func(r *rand.Rand, o *vkattn.Options, h int) {
		o.Window = &vkattn.Window{Left: 7, Right: 2}
		o.Softcap = 0.8
		o.ALiBi = devtest.RandomValues(r, h)
		o.Sinks = devtest.RandomValues(r, h)
	}},
}

// Each variant alone and all together, with masks, lengths, GQA, both
// causal alignments and fully masked rows: prefill and split-K decode,
// against the float64 reference. Each variant alone on the row kernel
// (lavapipe's plan) and the tiled kernel (NVIDIA's), where the score rules
// of attention_common.glsl meet each kernel's loop; all together on every
// plan (the other load path and tile shapes: each case is a kernel lavapipe
// compiles).
func TestScoreVariants(t *testing.T) {
	r := rand.New(rand.NewSource(41))
	for path, d := range devtest.EveryPlan() {
		var names []string
		var problems []*devtest.Problem
		for i, v := range variantCases {
			if v.name != "all" && path != "auto" && path != "nvidia" {
				continue
			}
			for _, decode := range []bool{false, true} {
				h, hkv, l, s := 4, 2, 9, 40
				if decode {
					l, s = 1, 300 // split-K
				}
				p := devtest.NewProblem(r, 2, h, hkv, l, s, 8, 8)
				kinds := randomMasks(r, p)
				if i%2 == 0 && !decode {
					p.Opts.Causal = vkattn.CausalTopLeft
				}
				v.apply(r, &p.Opts, h)
				p.WantLSE, p.Weights = true, !decode
				p.Types = typeMixes[i%len(typeMixes)]
				names = append(names, fmt.Sprintf("%s/L%d_S%d%s%s", v.name, l, s, kinds, typesName(p.Types)))
				problems = append(problems, p)
			}
		}
		t.Run(path, func(t *testing.T) { runInCompileOrder(t, d, names, problems) })
	}
}

// A row whose every key is masked gets zeros; with sinks its weights are
// zero too and its log-sum-exp is the sink. Split over chunks, the
// per-head data follows each chunk's heads.
func TestScoreVariantsFullyMaskedAndChunked(t *testing.T) {
	r := rand.New(rand.NewSource(43))
	p := devtest.NewProblem(r, 1, 4, 2, 3, 6, 8, 8)
	p.Opts.KeyLengths = []int{0} // every row fully masked
	p.Opts.Sinks = []float32{0.5, -1, 2, 0}
	p.WantLSE, p.Weights = true, true
	got := devtest.RunGPU(t, devtest.Dev, p)
	for i, x := range got.O {
		if x != 0 {
			t.Fatalf("O[%d] = %v, want 0", i, x)
		}
	}
	for i, x := range got.LSE {
		if want := p.Opts.Sinks[i/3]; x != want {
			t.Fatalf("LSE[%d] = %v, want the sink %v", i, x, want)
		}
	}
	devtest.CheckAgainstReference(t, devtest.Dev, p)

	d := devtest.SmallBindings(t, vkattn.Config{}) // one KV head of K per chunk
	for _, l := range []int{8, 1} {
		c := devtest.NewProblem(r, 2, 4, 2, l, 900, 32, 32)
		c.Opts.ALiBi = vkattn.ALiBiSlopes(4)
		c.Opts.Sinks = devtest.RandomValues(r, 4)
		c.Opts.Window = &vkattn.Window{Left: 300, Right: 0}
		c.WantLSE = true
		t.Run(fmt.Sprintf("chunked/L%d", l), func(t *testing.T) {
			got := devtest.RunGPU(t, d, c)
			if got.Out.Plan.Kernel.Chunks < 2 {
				t.Fatalf("plan %v: want a chunked call", got.Out.Plan.Kernel)
			}
			want := devtest.RunReference(t, c)
			devtest.Compare(t, "O", got.O, want.O)
			devtest.Compare(t, "LSE", got.LSE, want.LSE)
		})
	}
}

// Bad variant options are refused with a sentinel before anything is
// allocated.
func TestScoreVariantRefusals(t *testing.T) {
	q := devtest.Upload(t, devtest.Dev, []int{1, 2, 3, 4}, make([]float32, 24))
	k := devtest.Upload(t, devtest.Dev, []int{1, 1, 5, 4}, make([]float32, 20))
	before := vkattn.LiveObjects()
	for _, c := range []struct {
		name string
		opts vkattn.Options
		want error
	}{
		{"window left -2", vkattn.Options{Window: &vkattn.Window{Left: -2, Right: 0}}, vkattn.ErrOption},
		{"window right -3", vkattn.Options{Window: &vkattn.Window{Left: 0, Right: -3}}, vkattn.ErrOption},
		{"negative softcap", vkattn.Options{Softcap: -1}, vkattn.ErrOption},
		{"sinks of 3 heads", vkattn.Options{Sinks: []float32{1, 2, 3}}, vkattn.ErrShape},
		{"slopes of 1 head", vkattn.Options{ALiBi: []float32{1}}, vkattn.ErrShape},
	} {
		_, err := devtest.Dev.Attention(q, k, k, c.opts)
		if !errors.Is(err, c.want) {
			t.Errorf("%s: %v, want %v", c.name, err, c.want)
		}
	}
	if n := vkattn.LiveObjects(); n != before {
		t.Errorf("%d Vulkan objects alive after the refusals, %d before", n, before)
	}
}
