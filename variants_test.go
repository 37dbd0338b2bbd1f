package vkattn_test

import (
	"errors"
	"fmt"
	"math/rand"
	"testing"

	"github.com/vkattn/vkattn"
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
	{"sinks", func(r *rand.Rand, o *vkattn.Options, h int) { o.Sinks = randomValues(r, h) }},
	{"all", func(r *rand.Rand, o *vkattn.Options, h int) {
		o.Window = &vkattn.Window{Left: 7, Right: 2}
		o.Softcap = 0.8
		o.ALiBi = randomValues(r, h)
		o.Sinks = randomValues(r, h)
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
	for path, d := range everyPlan() {
		var names []string
		var problems []*problem
		for i, v := range variantCases {
			if v.name != "all" && path != "auto" && path != "nvidia" {
				continue
			}
			for _, decode := range []bool{false, true} {
				h, hkv, l, s := 4, 2, 9, 40
				if decode {
					l, s = 1, 300 // split-K
				}
				p := newProblem(r, 2, h, hkv, l, s, 8, 8)
				kinds := randomMasks(r, p)
				if i%2 == 0 && !decode {
					p.opts.Causal = vkattn.CausalTopLeft
				}
				v.apply(r, &p.opts, h)
				p.wantLSE, p.weights = true, !decode
				p.types = typeMixes[i%len(typeMixes)]
				names = append(names, fmt.Sprintf("%s/L%d_S%d%s%s", v.name, l, s, kinds, typesName(p.types)))
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
	p := newProblem(r, 1, 4, 2, 3, 6, 8, 8)
	p.opts.KeyLengths = []int{0} // every row fully masked
	p.opts.Sinks = []float32{0.5, -1, 2, 0}
	p.wantLSE, p.weights = true, true
	got := runGPU(t, dev, p)
	for i, x := range got.o {
		if x != 0 {
			t.Fatalf("O[%d] = %v, want 0", i, x)
		}
	}
	for i, x := range got.lse {
		if want := p.opts.Sinks[i/3]; x != want {
			t.Fatalf("LSE[%d] = %v, want the sink %v", i, x, want)
		}
	}
	checkAgainstReference(t, dev, p)

	d := smallBindings(t, vkattn.Config{}) // one KV head of K per chunk
	for _, l := range []int{8, 1} {
		c := newProblem(r, 2, 4, 2, l, 900, 32, 32)
		c.opts.ALiBi = vkattn.ALiBiSlopes(4)
		c.opts.Sinks = randomValues(r, 4)
		c.opts.Window = &vkattn.Window{Left: 300, Right: 0}
		c.wantLSE = true
		t.Run(fmt.Sprintf("chunked/L%d", l), func(t *testing.T) {
			got := runGPU(t, d, c)
			if got.out.Plan.Kernel.Chunks < 2 {
				t.Fatalf("plan %v: want a chunked call", got.out.Plan.Kernel)
			}
			want := runReference(t, c)
			compare(t, "O", got.o, want.O)
			compare(t, "LSE", got.lse, want.LSE)
		})
	}
}

// Bad variant options are refused with a sentinel before anything is
// allocated.
func TestScoreVariantRefusals(t *testing.T) {
	q := upload(t, dev, []int{1, 2, 3, 4}, make([]float32, 24))
	k := upload(t, dev, []int{1, 1, 5, 4}, make([]float32, 20))
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
		_, err := dev.Attention(q, k, k, c.opts)
		if !errors.Is(err, c.want) {
			t.Errorf("%s: %v, want %v", c.name, err, c.want)
		}
	}
	if n := vkattn.LiveObjects(); n != before {
		t.Errorf("%d Vulkan objects alive after the refusals, %d before", n, before)
	}
}

// Additive attention runs the same kernel: the score variants apply to
// its scores w_a . tanh(q + k) as to scaled dot products (one head).
func TestScoreVariantsAdditive(t *testing.T) {
	r := rand.New(rand.NewSource(47))
	const B, L, S, DQ, DK, DA, DV = 2, 6, 11, 5, 7, 8, 4
	for _, d := range []*vkattn.Device{dev, storageDev} {
		c := &additiveCase{B: B, L: L, S: S, DQ: DQ, DK: DK, DA: DA, DV: DV}
		c.q, c.k, c.v = randomValues(r, B*L*DQ), randomValues(r, B*S*DK), randomValues(r, B*S*DV)
		c.w = &vkattn.AdditiveWeights{DQ: DQ, DK: DK, DA: DA, WQ: randomValues(r, DQ*DA), WK: randomValues(r, DK*DA), WA: randomValues(r, DA)}
		c.opts = vkattn.Options{Window: &vkattn.Window{Left: 4, Right: 1}, Softcap: 0.9, ALiBi: []float32{0.3}, Sinks: []float32{0.2}}
		t.Run(map[bool]string{false: "auto", true: "storage"}[d == storageDev], func(t *testing.T) { checkAdditive(t, d, c) })
	}
}
