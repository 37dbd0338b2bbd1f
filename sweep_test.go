package vkattn_test

import (
	"fmt"
	"math"
	"math/rand"
	"strings"
	"testing"

	"github.com/vkattn/vkattn"
	"github.com/vkattn/vkattn/internal/devtest"
	"github.com/vkattn/vkattn/pipelines"
)

var (
	sweepLengths = []int{1, 2, 3, 17, 64, 129, 300}
	sweepWidths  = []int{1, 8, 33, 64, 128, 256}
)

func pick(r *rand.Rand, xs []int) int { return xs[r.Intn(len(xs))] }

// randomMasks adds a random combination of every mask kind to p; each kind
// is present with probability about one half.
func randomMasks(r *rand.Rand, p *devtest.Problem) string {
	b, h, l, s := p.QS[0], p.QS[1], p.QS[2], p.KS[2]
	full := [4]int{b, h, l, s}
	shape := func() vkattn.MaskShape {
		var m vkattn.MaskShape
		for i := range m {
			m[i] = 1
			if r.Intn(2) == 0 {
				m[i] = full[i]
			}
		}
		return m
	}
	var kinds string
	if r.Intn(2) == 0 {
		ms := shape()
		vals := make([]float32, devtest.Size(ms))
		for i := range vals {
			switch r.Intn(5) {
			case 0:
				vals[i] = float32(math.Inf(-1))
			default:
				vals[i] = 3 * (r.Float32() - 0.5)
			}
		}
		p.Opts.Mask = &vkattn.Mask{Shape: ms, Values: vals}
		kinds += fmt.Sprintf(" additive%v", [4]int(ms))
	}
	if r.Intn(2) == 0 {
		ms := shape()
		vals := make([]bool, devtest.Size(ms))
		for i := range vals {
			vals[i] = r.Intn(4) != 0
		}
		meaning := []vkattn.MaskMeaning{vkattn.TrueAllows, vkattn.TrueBlocks}[r.Intn(2)]
		p.Opts.BoolMasks = []vkattn.BoolMask{{Shape: ms, Values: vals, Meaning: meaning}}
		kinds += fmt.Sprintf(" bool-%v%v", meaning, [4]int(ms))
	}
	if r.Intn(2) == 0 {
		p.Opts.Causal = []vkattn.Causal{vkattn.CausalTopLeft, vkattn.CausalBottomRight}[r.Intn(2)]
		kinds += " causal-" + p.Opts.Causal.String()
	}
	if r.Intn(2) == 0 {
		p.Opts.KeyLengths = make([]int, b)
		for i := range p.Opts.KeyLengths {
			p.Opts.KeyLengths[i] = r.Intn(s + 1) // includes zero: fully masked
		}
		kinds += fmt.Sprintf(" keylen%v", p.Opts.KeyLengths)
	}
	if r.Intn(3) == 0 {
		p.Opts.QueryLengths = make([]int, b)
		for i := range p.Opts.QueryLengths {
			p.Opts.QueryLengths[i] = r.Intn(l + 1)
		}
		kinds += fmt.Sprintf(" querylen%v", p.Opts.QueryLengths)
	}
	if kinds == "" {
		kinds = " unmasked"
	}
	return kinds
}

// TestSweepAgainstReference compares the GPU with the float64 reference over
// odd shapes, d_k != d_v, GQA/MQA and random combinations of every mask kind
// (fixed seed), on the planner's default load path.
func TestSweepAgainstReference(t *testing.T) {
	sweep(t, devtest.Dev, 1, 22, sweepWidths)
}

// TestSweepStoragePath runs a smaller sweep on the storage-buffer path, the
// one real GPUs get, whatever device runs the tests. Its widths stop at 64:
// lavapipe needs over a minute to compile each wider storage variant
// (measured: d=256 vec4 110 s, d=65 scalar 70 s), which would dominate CI.
func TestSweepStoragePath(t *testing.T) {
	sweep(t, devtest.StorageDev, 2, 16, []int{1, 8, 33, 64})
}

// quickUpTo is the widest head whose kernels compile quickly on d: the
// tiled kernels compile in seconds at every width; each lavapipe row
// kernel past d_max 64 (another mask set or type mix) takes 5-7 s. A sweep
// on d gives half inputs up to it (the widening does not depend on the
// width) and only wideCases cases wider than it.
func quickUpTo(d *vkattn.Device) int {
	if d == devtest.NVIDIADev || d == devtest.AMDDev {
		return vkattn.MaxHeadWidth
	}
	return 64
}

// wideCases is how many cases of a sweep may be wider than quickUpTo.
const wideCases = 2

func sweep(t *testing.T, d *vkattn.Device, seed int64, cases int, widths []int) {
	r := rand.New(rand.NewSource(seed))
	quick, wide := quickUpTo(d), 0
	var names []string
	var problems []*devtest.Problem
	for c := 0; c < cases; c++ {
		b := 1 + r.Intn(3)
		hkv := []int{1, 1, 2, 4}[r.Intn(4)]
		h := hkv * []int{1, 2, 4}[r.Intn(3)] // H up to 8 with H_kv dividing it: MHA, GQA, MQA
		h = min(h, 8)
		l, s := pick(r, sweepLengths), pick(r, sweepLengths)
		dk := pick(r, widths)
		dv := dk
		if r.Intn(2) == 0 {
			dv = pick(r, widths)
		}
		if max(dk, dv) > quick {
			if wide >= wideCases {
				dk, dv = min(dk, quick), min(dv, quick)
			}
			wide++
		}
		// Keep the float64 reference quick: big shapes only with small widths.
		for b*h*l*s*(dk+dv) > 6_000_000 {
			l, s = max(1, l/2), max(1, s/2)
		}
		p := devtest.NewProblem(r, b, h, hkv, l, s, dk, dv)
		kinds := randomMasks(r, p)
		if r.Intn(4) == 0 {
			p.Opts.Scale = vkattn.CustomScale(0.5 * r.Float64())
		}
		p.BLHD = r.Intn(3) == 0
		p.WantLSE = r.Intn(2) == 0
		p.Weights = r.Intn(3) == 0
		if max(dk, dv) <= quick {
			p.Types = typeMixes[c%len(typeMixes)]
		}
		names = append(names, fmt.Sprintf("%02d/B%d_H%d_Hkv%d_L%d_S%d_dk%d_dv%d%s%s", c, b, h, hkv, l, s, dk, dv, kinds, typesName(p.Types)))
		problems = append(problems, p)
	}
	runInCompileOrder(t, d, names, problems)
}

// runInCompileOrder checks each problem against the reference as a
// parallel subtest on d's pool, one problem of each kernel first.
func runInCompileOrder(t *testing.T, d *vkattn.Device, names []string, problems []*devtest.Problem) {
	kernels := make([]pipelines.AttentionPlan, len(problems))
	for i, p := range problems {
		opts := p.Opts
		opts.WantLSE, opts.WantWeights = p.WantLSE, p.Weights
		plan, err := d.PlanAs(p.QS[:], p.KS[:], p.VS[:], p.Types, opts)
		if err != nil {
			t.Fatalf("%s: %v", names[i], err)
		}
		kernels[i] = devtest.KernelOf(plan.Kernel)
	}
	devtest.InCompileOrder(t, kernels, func(i int) string { return names[i] }, func(t *testing.T, i int) {
		devtest.OnPool(t, d, func(d *vkattn.Device) { devtest.CheckAgainstReference(t, d, problems[i]) })
	})
}

// TestMaskKinds runs every mask kind alone and all together on one shape
// with L != S, including fully masked rows and zero key length.
func TestMaskKinds(t *testing.T) {
	const b, h, hkv, l, s, width = 2, 4, 2, 5, 7, 8
	full := vkattn.MaskShape{b, h, l, s}
	allowAll := make([]bool, s)
	blockSome := make([]bool, s)
	for j := range allowAll {
		allowAll[j] = true
		blockSome[j] = j%3 == 0
	}
	neg := float32(math.Inf(-1))
	rowMask := make([]float32, l*s) // row 2 fully masked by -inf
	for j := 0; j < s; j++ {
		rowMask[2*s+j] = neg
		rowMask[3*s+j] = 0.25 * float32(j)
	}
	boolFull := make([]bool, devtest.Size(full))
	for i := range boolFull {
		boolFull[i] = i%5 != 1
	}
	cases := map[string]vkattn.Options{
		"none":                {},
		"additive-rows":       {Mask: &vkattn.Mask{Shape: vkattn.MaskShape{1, 1, l, s}, Values: rowMask}},
		"bool-allows-keys":    {BoolMasks: []vkattn.BoolMask{{Shape: vkattn.MaskShape{1, 1, 1, s}, Values: blockSome, Meaning: vkattn.TrueAllows}}},
		"bool-blocks-keys":    {BoolMasks: []vkattn.BoolMask{{Shape: vkattn.MaskShape{1, 1, 1, s}, Values: blockSome, Meaning: vkattn.TrueBlocks}}},
		"bool-blocks-nothing": {BoolMasks: []vkattn.BoolMask{{Shape: vkattn.MaskShape{1, 1, 1, s}, Values: make([]bool, s), Meaning: vkattn.TrueBlocks}}},
		"bool-allows-all":     {BoolMasks: []vkattn.BoolMask{{Shape: vkattn.MaskShape{1, 1, 1, s}, Values: allowAll, Meaning: vkattn.TrueAllows}}},
		"bool-full":           {BoolMasks: []vkattn.BoolMask{{Shape: full, Values: boolFull, Meaning: vkattn.TrueAllows}}},
		"causal-top-left":     {Causal: vkattn.CausalTopLeft},
		"causal-bottom-right": {Causal: vkattn.CausalBottomRight},
		"key-lengths-zero":    {KeyLengths: []int{0, 4}},
		"query-lengths":       {QueryLengths: []int{3, 0}},
		"scale":               {Scale: vkattn.CustomScale(2)},
		"all": {
			Mask:         &vkattn.Mask{Shape: vkattn.MaskShape{1, 1, l, s}, Values: rowMask},
			BoolMasks:    []vkattn.BoolMask{{Shape: full, Values: boolFull, Meaning: vkattn.TrueBlocks}},
			Causal:       vkattn.CausalBottomRight,
			KeyLengths:   []int{6, 1},
			QueryLengths: []int{4, 5},
			Scale:        vkattn.CustomScale(0.3),
		},
	}
	for name, opts := range cases {
		for _, d := range devtest.EveryPlan() {
			p := devtest.NewProblem(rand.New(rand.NewSource(7)), b, h, hkv, l, s, width, width)
			p.Opts, p.WantLSE, p.Weights = opts, true, true
			t.Run(name, func(t *testing.T) {
				devtest.CheckAgainstReference(t, d, p)
			})
		}
	}
}

// lavapipe's prefill reads the additive mask and the (folded) boolean
// masks four keys a fetch (MaskVec4, BoolMaskVec4) where their keys are
// contiguous and their rows start on multiples of 4: a dense mask with a
// window (so the keys begin past 0), both kinds broadcast over rows of a
// length that is no multiple of 4 (their last texel partly past the row)
// with the weights pass, both kinds of different shapes, and dense masks
// of such a length read a key a fetch, all against the reference.
func TestMaskFourKeysAFetch(t *testing.T) {
	d := devtest.EveryPlan()["auto"]
	r := rand.New(rand.NewSource(71))
	type kind struct {
		shape vkattn.MaskShape // zero: none
		four  bool
	}
	for _, c := range []struct {
		name          string
		s             int
		mask, boolean kind
		opts          vkattn.Options
		weights       bool
	}{
		{"dense-window", 40, kind{vkattn.MaskShape{1, 2, 6, 40}, true}, kind{}, vkattn.Options{Window: &vkattn.Window{Left: 9, Right: 2}}, false},
		{"keys-only-weights", 37, kind{vkattn.MaskShape{1, 1, 1, 37}, true}, kind{vkattn.MaskShape{1, 1, 1, 37}, true}, vkattn.Options{Causal: vkattn.CausalBottomRight}, true},
		{"both", 40, kind{vkattn.MaskShape{1, 1, 6, 40}, true}, kind{vkattn.MaskShape{1, 2, 6, 40}, true}, vkattn.Options{Causal: vkattn.CausalTopLeft}, false},
		{"dense-odd", 37, kind{vkattn.MaskShape{1, 2, 6, 37}, false}, kind{vkattn.MaskShape{1, 2, 1, 37}, false}, vkattn.Options{}, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			p := devtest.NewProblem(r, 1, 2, 2, 6, c.s, 8, 8) // TestMaskKinds' width: some variants shared
			p.Opts = c.opts
			if c.mask.shape != (vkattn.MaskShape{}) {
				m := devtest.RandomValues(r, devtest.Size(c.mask.shape))
				m[3] = float32(math.Inf(-1))
				p.Opts.Mask = &vkattn.Mask{Shape: c.mask.shape, Values: m}
			}
			if c.boolean.shape != (vkattn.MaskShape{}) {
				allow := make([]bool, devtest.Size(c.boolean.shape))
				for i := range allow {
					allow[i] = r.Intn(4) != 0
				}
				p.Opts.BoolMasks = []vkattn.BoolMask{{Shape: c.boolean.shape, Values: allow, Meaning: vkattn.TrueAllows}}
			}
			p.WantLSE, p.Weights = true, c.weights
			plan, err := d.Plan(p.QS[:], p.KS[:], p.VS[:], p.Opts)
			if err != nil {
				t.Fatal(err)
			}
			k := plan.Kernel
			if k.MaskVec4 != c.mask.four || k.BoolMaskVec4 != c.boolean.four || strings.Contains(plan.String(), "masks four keys a fetch") != (c.mask.four || c.boolean.four) {
				t.Errorf("want a plan with MaskVec4 %v, BoolMaskVec4 %v; got %s", c.mask.four, c.boolean.four, plan)
			}
			devtest.CheckAgainstReference(t, d, p)
		})
	}
}

// TestBoolMasksCombine: boolean masks of both meanings and different
// broadcast shapes, with an additive mask and a causal one, all apply (a
// key is visible only where every boolean mask allows it); the GPU folds
// them into one mask, the reference reads each.
func TestBoolMasksCombine(t *testing.T) {
	const b, h, hkv, l, s, width = 2, 4, 2, 5, 7, 8
	r := rand.New(rand.NewSource(8))
	bools := func(n int, pTrue float64) []bool {
		x := make([]bool, n)
		for i := range x {
			x[i] = r.Float64() < pTrue
		}
		return x
	}
	add := devtest.RandomValues(r, l*s)
	add[3] = float32(math.Inf(-1))
	opts := vkattn.Options{
		Mask: &vkattn.Mask{Shape: vkattn.MaskShape{1, 1, l, s}, Values: add},
		BoolMasks: []vkattn.BoolMask{
			{Shape: vkattn.MaskShape{1, h, 1, s}, Values: bools(h*s, 0.8), Meaning: vkattn.TrueAllows}, // per head and key
			{Shape: vkattn.MaskShape{b, 1, l, 1}, Values: bools(b*l, 0.2), Meaning: vkattn.TrueBlocks}, // whole rows
			{Shape: vkattn.MaskShape{b, 1, 1, s}, Values: bools(b*s, 0.2), Meaning: vkattn.TrueBlocks}, // per batch item and key
		},
		Causal: vkattn.CausalTopLeft,
	}
	for _, d := range devtest.EveryPlan() {
		p := devtest.NewProblem(rand.New(rand.NewSource(9)), b, h, hkv, l, s, width, width)
		p.Opts, p.WantLSE, p.Weights = opts, true, true
		devtest.CheckAgainstReference(t, d, p)
	}
}

// TestFullyMaskedRowsAreZero checks the engine's definition for rows with no
// visible key: output zeros, log-sum-exp -Inf, weights zero, never NaN.
func TestFullyMaskedRowsAreZero(t *testing.T) {
	p := devtest.NewProblem(rand.New(rand.NewSource(3)), 1, 2, 2, 4, 3, 8, 8)
	// Bottom-right with L > S: rows 0 of 4 sees j <= 0 + 3 - 4 = -1, nothing.
	p.Opts = vkattn.Options{Causal: vkattn.CausalBottomRight, KeyLengths: []int{3}}
	p.WantLSE, p.Weights = true, true
	got := devtest.RunGPU(t, devtest.Dev, p)
	for h := 0; h < 2; h++ {
		row := h * 4 // row 0 of head h
		for i := 0; i < 8; i++ {
			if x := got.O[row*8+i]; x != 0 {
				t.Fatalf("head %d row 0 output[%d] = %v, want 0", h, i, x)
			}
		}
		if x := got.LSE[row]; !math.IsInf(float64(x), -1) {
			t.Fatalf("head %d row 0 log-sum-exp = %v, want -Inf", h, x)
		}
		for j := 0; j < 3; j++ {
			if x := got.W[row*3+j]; x != 0 {
				t.Fatalf("head %d row 0 weight %d = %v, want 0", h, j, x)
			}
		}
	}
	for i, x := range got.O {
		if math.IsNaN(float64(x)) {
			t.Fatalf("output[%d] is NaN", i)
		}
	}
}

// Rows of one workgroup whose leading keys are masked next to rows that see
// them: the running maximum of the masked rows stays -inf while other lanes
// raise theirs, which once gave NaN (exp2(-inf - -inf)). Both load paths,
// also with the split-K decode kernel.
func TestLeadingMaskedKeysBesideLiveRows(t *testing.T) {
	for _, c := range []struct{ h, hkv, l, s int }{{2, 2, 16, 40}, {8, 2, 1, 300}} {
		for _, d := range devtest.EveryPlan() {
			p := devtest.NewProblem(rand.New(rand.NewSource(4)), 1, c.h, c.hkv, c.l, c.s, 16, 16)
			m := &vkattn.Mask{Shape: vkattn.MaskShape{1, c.h, c.l, c.s}, Values: make([]float32, c.h*c.l*c.s)}
			for h := 0; h < c.h; h++ {
				for t := 0; t < c.l; t++ {
					for j := 0; j < c.s/3; j++ {
						if (h+t)%2 == 0 {
							m.Values[(h*c.l+t)*c.s+j] = float32(math.Inf(-1))
						}
					}
				}
			}
			p.Opts.Mask, p.WantLSE = m, true
			devtest.CheckAgainstReference(t, d, p)
		}
	}
}

// TestLongKeySequences checks rows that see thousands of keys: an earlier
// kernel whose register arrays lavapipe moved to scratch memory went wrong
// only past a few hundred keys, which the odd-shape sweep does not reach.
func TestLongKeySequences(t *testing.T) {
	r := rand.New(rand.NewSource(12))
	for _, d := range []int{33, 64, 128} {
		p := devtest.NewProblem(r, 1, 2, 1, 5, 3000, d, d)
		p.Opts.Causal = vkattn.CausalBottomRight
		p.WantLSE = true
		t.Run(fmt.Sprintf("d%d", d), func(t *testing.T) { devtest.CheckAgainstReference(t, devtest.Dev, p) })
	}
}

// TestDecodeSplitK covers the split-K (flash-decoding) path: few query rows
// per KV head and many keys, GQA/MQA packing, every mask kind, keys that do
// not fill the last split, on both load paths.
func TestDecodeSplitK(t *testing.T) {
	decodeSweep(t, 21, 14, []*vkattn.Device{devtest.Dev, devtest.StorageDev}, []int{1, 2, 4}, func(r *rand.Rand, c int) (int, int) {
		dk, dv := pick(r, []int{8, 64}), pick(r, []int{8, 64})
		if c == 0 {
			// d_max 128: one case, as a split-K row kernel of that width
			// takes lavapipe over a minute to compile.
			dk = 128
		}
		return dk, dv
	}, 1)
}

// decodeSweep checks random decode problems (few query rows per KV head,
// many keys, query heads per KV head from groups, every mask kind, keys
// that do not fill the last split, half types) against the reference, case
// c on devs[c%len(devs)] with the head widths widths picks; every plan
// must split the keys at least minSplits ways.
func decodeSweep(t *testing.T, seed int64, cases int, devs []*vkattn.Device, groups []int, widths func(r *rand.Rand, c int) (int, int), minSplits int) {
	r := rand.New(rand.NewSource(seed))
	names := map[*vkattn.Device][]string{}
	problems := map[*vkattn.Device][]*devtest.Problem{}
	for c := 0; c < cases; c++ {
		d := devs[c%len(devs)]
		b := 1 + r.Intn(2)
		hkv := []int{1, 2}[r.Intn(2)]
		group := groups[r.Intn(len(groups))]
		l := []int{1, 1, 2}[r.Intn(3)]
		s := []int{256, 300, 1000, 2053}[r.Intn(4)]
		dk, dv := widths(r, c)
		p := devtest.NewProblem(r, b, hkv*group, hkv, l, s, dk, dv)
		kinds := randomMasks(r, p)
		p.WantLSE = r.Intn(2) == 0
		p.Types = typeMixes[c%len(typeMixes)]
		plan, err := d.PlanAs(p.QS[:], p.KS[:], p.VS[:], p.Types, p.Opts)
		if err != nil {
			t.Fatal(err)
		}
		if plan.Kernel.Splits < minSplits {
			t.Fatalf("case %d: want split-K over at least %d splits for a decode shape: %v", c, minSplits, plan)
		}
		names[d] = append(names[d], fmt.Sprintf("%02d/B%d_H%d_Hkv%d_L%d_S%d_dk%d_dv%d%s%s", c, b, hkv*group, hkv, l, s, dk, dv, kinds, typesName(p.Types)))
		problems[d] = append(problems[d], p)
	}
	for _, d := range devs {
		runInCompileOrder(t, d, names[d], problems[d])
	}
}
