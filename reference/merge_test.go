package reference

import (
	"errors"
	"math"
	"math/rand"
	"testing"

	"github.com/vkattn/vkattn/core"
	"github.com/vkattn/vkattn/internal/random"
	"github.com/vkattn/vkattn/internal/testutil"
)

// TestMergeIsAttentionOverTheUnion: the attention over keys split into
// ranges, merged, is the attention over all of them (O, LSE and weights),
// whatever the order of the parts, with parts that see no key (LSE -Inf)
// among them and with a sink given to one part only.
func TestMergeIsAttentionOverTheUnion(t *testing.T) {
	r := rand.New(rand.NewSource(21))
	in, sh := random.QKV(r, random.Normal, 2, 4, 2, 5, 23, 8, 6)
	q, k, v, qs, ks, vs := in[0], in[1], in[2], sh[0], sh[1], sh[2]
	sinks := []float32{0.5, -1, 2, 0}
	for _, c := range []struct {
		name  string
		cuts  []int // the parts' key ranges: [cuts[i], cuts[i+1])
		empty int   // parts seeing no key, added
		sinks bool
	}{
		{"two", []int{0, 11, 23}, 0, false},
		{"five", []int{0, 1, 6, 13, 20, 23}, 0, false},
		{"with empty parts", []int{0, 9, 23}, 2, false},
		{"only empty parts", nil, 3, false},
		{"a sink in one part", []int{0, 4, 17, 23}, 1, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			opts := core.Options{}
			if c.sinks {
				opts.Sinks = sinks
			}
			var parts []*Result
			for i := 0; i+1 < len(c.cuts); i++ {
				kp, kps := testutil.KeyRange(k, ks, c.cuts[i], c.cuts[i+1])
				vp, vps := testutil.KeyRange(v, vs, c.cuts[i], c.cuts[i+1])
				po := core.Options{}
				if i == 0 {
					po.Sinks = opts.Sinks // the sink joins one denominator
				}
				parts = append(parts, mustRun(t, q, qs, kp, kps, vp, vps, po))
			}
			for range c.empty {
				none := core.Options{KeyLengths: make([]int, qs[0])}
				parts = append(parts, mustRun(t, q, qs, k[:ks[0]*ks[1]*2*ks[3]], [4]int{ks[0], ks[1], 2, ks[3]}, v[:vs[0]*vs[1]*2*vs[3]], [4]int{vs[0], vs[1], 2, vs[3]}, none))
			}
			want := mustRun(t, q, qs, k, ks, v, vs, opts)
			if len(c.cuts) == 0 {
				want = mustRun(t, q, qs, k, ks, v, vs, core.Options{KeyLengths: make([]int, qs[0])})
			}
			for _, order := range testutil.Permutations(len(parts)) {
				got, err := Merge(testutil.Permute(parts, order))
				if err != nil {
					t.Fatal(err)
				}
				noNaN(t, got)
				testutil.Near(t, "O", got.O, want.O, 1e-12)
				testutil.Near(t, "LSE", got.LSE, want.LSE, 1e-12)
				if inOrder(order) && len(c.cuts) > 0 && c.empty == 0 {
					testutil.Near(t, "weights", got.Weights, want.Weights, 1e-12)
				}
			}
		})
	}
}

// inOrder reports whether p is the identity.
func inOrder(p []int) bool {
	for i, x := range p {
		if x != i {
			return false
		}
	}
	return true
}

// TestMergeCausalSuffix: the bottom-right causal attention of the last L
// tokens over a prefix and a suffix is the prefix part, every key visible,
// merged with the suffix part, bottom-right causal over its own keys.
func TestMergeCausalSuffix(t *testing.T) {
	r := rand.New(rand.NewSource(22))
	const P, N, L = 13, 6, 4 // prefix keys, suffix keys, query rows (the last L tokens)
	in, sh := random.QKV(r, random.Normal, 1, 2, 2, L, P+N, 8, 8)
	q, k, v, qs, ks, vs := in[0], in[1], in[2], sh[0], sh[1], sh[2]
	kp, kps := testutil.KeyRange(k, ks, 0, P)
	vp, vps := testutil.KeyRange(v, vs, 0, P)
	kn, kns := testutil.KeyRange(k, ks, P, P+N)
	vn, vns := testutil.KeyRange(v, vs, P, P+N)
	prefix := mustRun(t, q, qs, kp, kps, vp, vps, core.Options{})
	suffix := mustRun(t, q, qs, kn, kns, vn, vns, core.Options{Causal: core.CausalBottomRight})
	got, err := Merge([]*Result{prefix, suffix})
	if err != nil {
		t.Fatal(err)
	}
	want := mustRun(t, q, qs, k, ks, v, vs, core.Options{Causal: core.CausalBottomRight})
	testutil.Near(t, "O", got.O, want.O, 1e-12)
	testutil.Near(t, "LSE", got.LSE, want.LSE, 1e-12)
	testutil.Near(t, "weights", got.Weights, want.Weights, 1e-12)
}

// TestMergeRefusals: no parts, parts of other shapes and non-finite
// values are refused with their sentinels.
func TestMergeRefusals(t *testing.T) {
	part := func(b, h, l, dv int) *Result {
		n := b * h * l
		return &Result{Dims: core.Dims{B: b, H: h, L: l, DV: dv, S: 1}, O: make([]float64, n*dv), LSE: make([]float64, n)}
	}
	nanO, infLSE, short := part(1, 2, 3, 4), part(1, 2, 3, 4), part(1, 2, 3, 4)
	nanO.O[5] = math.NaN()
	infLSE.LSE[1] = math.Inf(1)
	short.LSE = short.LSE[:2]
	for _, c := range []struct {
		name  string
		parts []*Result
		err   error
	}{
		{"none", nil, core.ErrOption},
		{"other L", []*Result{part(1, 2, 3, 4), part(1, 2, 4, 4)}, core.ErrShape},
		{"other d_v", []*Result{part(1, 2, 3, 4), part(1, 2, 3, 5)}, core.ErrShape},
		{"short LSE", []*Result{part(1, 2, 3, 4), short}, core.ErrShape},
		{"NaN in O", []*Result{part(1, 2, 3, 4), nanO}, core.ErrNonFinite},
		{"+Inf LSE", []*Result{infLSE}, core.ErrNonFinite},
	} {
		if _, err := Merge(c.parts); !errors.Is(err, c.err) {
			t.Errorf("%s: error %v, want %v", c.name, err, c.err)
		}
	}
}
