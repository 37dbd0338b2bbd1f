package main

import (
	"math"
	"math/rand"
	"path/filepath"
	"slices"
	"testing"

	"github.com/vkattn/vkattn"
	"github.com/vkattn/vkattn/internal/testutil"
	"github.com/vkattn/vkattn/nn"
	"github.com/vkattn/vkattn/reference"
	"github.com/vkattn/vkattn/weights"
)

// goldenAdditive writes the hand-worked case of reference's
// TestAdditiveGoldenKeys: W_q = W_k = I, b = 0, w_a = [1 1], q = [0 0],
// K = [[0 0] [a 0] [a a]] with a = atanh(1/2), so the scores are 0, 1/2
// and 1; V = [[1 0] [0 1] [1 1]].
func goldenAdditive(t *testing.T, dir string) (params, q, k, v string) {
	t.Helper()
	a := float32(math.Atanh(0.5))
	params = writeNPZ(t, dir, "p.npz", map[string]any{
		"W_q": [][]float32{{1, 0}, {0, 1}},
		"W_k": [][]float32{{1, 0}, {0, 1}},
		"b":   []float32{0, 0},
		"w_a": []float32{1, 1},
	})
	q = save(t, dir, "q.npy", [][]float32{{0, 0}})
	k = save(t, dir, "k.npy", [][]float32{{0, 0}, {a, 0}, {a, a}})
	v = save(t, dir, "v.npy", [][]float32{{1, 0}, {0, 1}, {1, 1}})
	return params, q, k, v
}

// additiveCase is a random additive layer and batch written to a test's
// folder: weights with a bias in p.npz (w_a as a column (d_a,1)), q, k, v
// of B=2, L=3, S=5, d_q=4, d_k=3, d_a=6, d_v=2 in q.npy, k.npy, v.npy.
type additiveCase struct {
	dir             string
	w               *nn.AdditiveWeights
	params, q, k, v string
	qd, kd, vd      []float32
	q3, k3, v3      [3]int
}

const addB, addL, addS, addDQ, addDK, addDA, addDV = 2, 3, 5, 4, 3, 6, 2

func newAdditiveCase(t *testing.T, r *rand.Rand) *additiveCase {
	t.Helper()
	c := &additiveCase{dir: t.TempDir(), q3: [3]int{addB, addL, addDQ}, k3: [3]int{addB, addS, addDK}, v3: [3]int{addB, addS, addDV}}
	c.w = &nn.AdditiveWeights{DQ: addDQ, DK: addDK, DA: addDA, WQ: normalValues(r, addDQ*addDA), WK: normalValues(r, addDK*addDA),
		Bias: normalValues(r, addDA), WA: normalValues(r, addDA)}
	c.params = writeNPZ(t, c.dir, "p.npz", map[string]any{"W_q": rows(c.w.WQ, addDA), "W_k": rows(c.w.WK, addDA), "b": c.w.Bias, "w_a": rows(c.w.WA, 1)})
	for _, x := range []struct {
		path *string
		data *[]float32
		name string
		s    [3]int
	}{{&c.q, &c.qd, "q.npy", c.q3}, {&c.k, &c.kd, "k.npy", c.k3}, {&c.v, &c.vd, "v.npy", c.v3}} {
		*x.data = normalValues(r, x.s[0]*x.s[1]*x.s[2])
		*x.path = writeArray(t, c.dir, x.name, x.s[:], *x.data)
	}
	return c
}

func TestAdditiveGolden(t *testing.T) {
	withDevice(t)
	dir := t.TempDir()
	params, q, k, v := goldenAdditive(t, dir)
	o, w, lse := filepath.Join(dir, "o.npy"), filepath.Join(dir, "w.npy"), filepath.Join(dir, "lse.npy")
	e, eh := math.E, math.Exp(0.5)
	z := 1 + eh + e

	out := cliOK(t, "additive", "-q", q, "-k", k, "-v", v, "--params", params, "-o", o, "--weights", w, "--lse", lse, "--check")
	mentions(t, "output", out, "wrote O (1, 2) to "+o, ": ok")
	testutil.Near(t, "O", load(t, o).F32, []float64{0.692804114, 0.813676277}, 1e-5)
	testutil.Near(t, "A", load(t, w).F32, []float64{0.186323723, 0.307195886, 0.506480391}, 1e-5)
	testutil.Near(t, "LSE", load(t, lse).F32, []float64{math.Log(z)}, 1e-5)
	for _, c := range []struct {
		path  string
		shape []int
	}{{o, []int{1, 2}}, {w, []int{1, 3}}, {lse, []int{1}}} {
		if got := load(t, c.path).Shape; !slices.Equal(got, c.shape) {
			t.Errorf("%s: shape %v, want %v", filepath.Base(c.path), got, c.shape)
		}
	}

	// Without -o: a summary; --explain shows the projections.
	out = cliOK(t, "additive", "-q", q, "-k", k, "-v", v, "--params", params, "--explain")
	mentions(t, "output", out, "O (1, 2): [0.6928", "projection", "q W_q + b", "k W_k", "no scale", "additive", "GPU time")

	// Bool masks in both senses: keys 0 and 2 remain, O = [1, e/(1+e)].
	masked := []float64{1, e / (1 + e)}
	block := save(t, dir, "block.npy", []bool{false, true, false})
	allow := save(t, dir, "allow.npy", [][]bool{{true, false, true}})
	for _, m := range [][]string{{block, "block"}, {allow, "allow"}} {
		cliOK(t, "additive", "-q", q, "-k", k, "-v", v, "--params", params, "--mask", m[0], "--mask-means", m[1], "-o", o, "--check")
		testutil.Near(t, "O masked ("+m[1]+")", load(t, o).F32, masked, 1e-5)
	}

	// Rank-3 inputs and --key-lengths 2: keys 0 and 1, scores 0 and 1/2.
	q3 := save(t, dir, "q3.npy", [][][]float32{{{0, 0}}})
	k3 := writeArray(t, dir, "k3.npy", []int{1, 3, 2}, load(t, k).F32)
	v3 := writeArray(t, dir, "v3.npy", []int{1, 3, 2}, load(t, v).F32)
	cliOK(t, "additive", "-q", q3, "-k", k3, "-v", v3, "--params", params, "--key-lengths", "2", "-o", o, "--check")
	got := load(t, o)
	if !slices.Equal(got.Shape, []int{1, 1, 2}) {
		t.Errorf("O shape %v, want [1 1 2]", got.Shape)
	}
	testutil.Near(t, "O with key length 2", got.F32, []float64{1 / (1 + eh), eh / (1 + eh)}, 1e-5)
}

// A batch with a 3-D (B,L,S) mask, per batch item, against the reference.
func TestAdditiveBatchMask(t *testing.T) {
	withDevice(t)
	c := newAdditiveCase(t, rand.New(rand.NewSource(3)))
	const B, L, S, dv = addB, addL, addS, addDV
	mask := make([]float32, B*L*S)
	for i := range mask {
		if i%4 == 1 {
			mask[i] = float32(math.Inf(-1))
		} else {
			mask[i] = float32(i%3) - 1
		}
	}
	m := writeArray(t, c.dir, "m.npy", []int{B, L, S}, mask)
	o, wp := filepath.Join(c.dir, "o.npy"), filepath.Join(c.dir, "w.npy")
	cliOK(t, "additive", "-q", c.q, "-k", c.k, "-v", c.v, "--params", c.params, "--mask", m, "--causal", "bottom-right", "-o", o, "--weights", wp, "--check")

	opts := vkattn.Options{Causal: vkattn.CausalBottomRight, Mask: &vkattn.Mask{Shape: vkattn.MaskShape{B, 1, L, S}, Values: mask}}
	ref, err := reference.AdditiveAttention(c.qd, c.q3, c.kd, c.k3, c.vd, c.v3, c.w, opts)
	if err != nil {
		t.Fatal(err)
	}
	got := load(t, o)
	if !slices.Equal(got.Shape, []int{B, L, dv}) {
		t.Fatalf("O shape %v", got.Shape)
	}
	nearReference(t, "O", got.F32, ref.O)
	gw := load(t, wp)
	if !slices.Equal(gw.Shape, []int{B, L, S}) {
		t.Fatalf("weights shape %v", gw.Shape)
	}
	nearReference(t, "weights", gw.F32, ref.Weights)
}

func TestAdditiveErrors(t *testing.T) {
	dir := t.TempDir()
	params, q, k, v := goldenAdditive(t, dir)
	q3w := save(t, dir, "q3w.npy", [][]float32{{0, 0, 0}})
	k3 := writeArray(t, dir, "k3.npy", []int{1, 3, 2}, make([]float32, 6))
	v4 := save(t, dir, "v4.npy", [][]float32{{1, 0}, {0, 1}, {1, 1}, {1, 1}})
	bm := save(t, dir, "bm.npy", []bool{false, true, false})
	noWk := writeNPZ(t, dir, "nowk.npz", map[string]any{"W_q": [][]float32{{1, 0}, {0, 1}}, "w_a": []float32{1, 1}})
	o := filepath.Join(dir, "o.npy")
	base := []string{"-q", q, "-k", k, "-v", v, "--params", params, "-o", o}
	with := func(args ...string) []string { return append(slices.Clone(base), args...) }

	checkRefusals(t, "additive", o, []refusal{
		{"missing params", []string{"-q", q, "-k", k, "-v", v}, exitUsage, "--params is required"},
		{"missing v", []string{"-q", q, "-k", k, "--params", params}, exitUsage, "-q, -k and -v are required"},
		{"bool mask without meaning", with("--mask", bm), exitUsage, "--mask-means"},
		{"scale is not a flag", with("--scale", "2"), exitUsage, "-scale"},
		{"W_q width", with("-q", q3w), exitFail, "W_q has shape [2 2], want [3 2]"},
		{"missing W_k", with("--params", noWk), exitFail, "W_k"},
		{"rank mismatch", with("-k", k3), exitFail, "K " + k3 + " has shape [1 3 2] but Q"},
		{"K/V lengths", with("-v", v4), exitFail, "positions"},
		{"key lengths count", with("--key-lengths", "2,2"), exitFail, "key lengths"},
		{"missing params file", with("--params", filepath.Join(dir, "nope.npz")), exitFail, "nope.npz"},
	})
}

// additive --dout --grads writes q, k, v, W_q, W_k, b and w_a's gradients
// equal to the float64 reference's, with a causal mask and key lengths.
func TestAdditiveGrads(t *testing.T) {
	withDevice(t)
	r := rand.New(rand.NewSource(161))
	c := newAdditiveCase(t, r)
	dO := normalValues(r, addB*addL*addDV)
	do := writeArray(t, c.dir, "do.npy", []int{addB, addL, addDV}, dO)
	g := filepath.Join(c.dir, "g.npz")
	cliOK(t, "additive", "-q", c.q, "-k", c.k, "-v", c.v, "--params", c.params, "--causal", "bottom-right", "--key-lengths", "5,2",
		"-o", filepath.Join(c.dir, "o.npy"), "--dout", do, "--grads", g, "--check")
	got, err := weights.Load(g)
	if err != nil {
		t.Fatal(err)
	}
	opts := vkattn.Options{Causal: vkattn.CausalBottomRight, KeyLengths: []int{5, 2}}
	ref, err := reference.AdditiveAttentionBackward(c.qd, c.q3, c.kd, c.k3, c.vd, c.v3, c.w, dO, opts)
	if err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string][]float64{"q": ref.DQ, "k": ref.DK, "v": ref.DV, "W_q": ref.DWQ, "W_k": ref.DWK, "b": ref.DBias, "w_a": ref.DWA} {
		m, ok := got[name]
		if !ok {
			t.Fatalf("no member %s in %v", name, got)
		}
		within(t, name, m.Data, want)
	}
	if len(got) != 7 {
		t.Errorf("%d members, want 7", len(got))
	}
}

// A projection wider than the kernels' head width is
// refused naming d_a, the projections' width, not d_k (the keys' width,
// here 2).
func TestAdditiveWideProjection(t *testing.T) {
	withDevice(t)
	dir := t.TempDir()
	_, q, k, v := goldenAdditive(t, dir)
	const da = 300
	ones := make([]float32, 2*da)
	for i := range ones {
		ones[i] = 0.01
	}
	params := writeNPZ(t, dir, "wide.npz", map[string]any{"W_q": rows(ones, da), "W_k": rows(ones, da), "w_a": ones[:da]})
	checkRefused(t, []string{"additive", "-q", q, "-k", k, "-v", v, "--params", params}, exitFail, "head width 300 (d_a=300, the projections' width; d_v=2)", "")
}
