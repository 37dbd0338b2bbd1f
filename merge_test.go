package vkattn_test

import (
	"errors"
	"fmt"
	"math"
	"math/rand"
	"testing"

	"github.com/vkattn/vkattn"
	"github.com/vkattn/vkattn/internal/devtest"
	"github.com/vkattn/vkattn/internal/testutil"
	"github.com/vkattn/vkattn/internal/verdict"
	"github.com/vkattn/vkattn/reference"
)

// causalPart is the mask that gives keys [from, to) of S, as their own
// part, the union's bottom-right causal mask: row t of L sees key j iff
// j <= t + S - L.
func causalPart(L, S, from, to int) vkattn.BoolMask {
	m := vkattn.BoolMask{Shape: vkattn.MaskShape{1, 1, L, to - from}, Values: make([]bool, L*(to-from)), Meaning: vkattn.TrueAllows}
	for t := 0; t < L; t++ {
		for j := from; j < to; j++ {
			m.Values[t*(to-from)+j-from] = j <= t+S-L
		}
	}
	return m
}

// mergeAndCompare merges parts in the order given and compares O and LSE
// with want (NaN fails; -Inf must be -Inf).
func mergeAndCompare(t *testing.T, d *vkattn.Device, parts []vkattn.Part, want *reference.Result) {
	t.Helper()
	out, err := d.Merge(parts)
	if err != nil {
		t.Fatal(err)
	}
	defer out.Close()
	if s := out.LSE.Shape(); s != [4]int{want.Dims.B, want.Dims.H, want.Dims.L, 1} {
		t.Fatalf("LSE shape %v", s)
	}
	devtest.Compare(t, "O", devtest.Download(t, out.O), want.O)
	devtest.Compare(t, "LSE", devtest.Download(t, out.LSE), want.LSE)
}

// TestMergeIsAttentionOverTheUnion: attention over keys split into 2 to 5
// ranges (each its own K and V, with the union's causal mask where it
// has one), merged on the device in every order, with parts that see no
// key (LSE -Inf, O 0) among them, is the attention over all the keys: the
// float64 reference's over the union, within the sweep tolerance. One
// case reads a part through strided views.
func TestMergeIsAttentionOverTheUnion(t *testing.T) {
	r := rand.New(rand.NewSource(37))
	p := devtest.NewProblem(r, 2, 4, 2, 5, 41, 16, 8)
	for _, c := range []struct {
		name   string
		cuts   []int
		empty  int
		causal bool
		views  bool
	}{
		{"two parts and an empty one", []int{0, 17, 41}, 1, false, false},
		{"three parts and two empty ones", []int{0, 3, 30, 41}, 2, false, false},
		{"five parts", []int{0, 8, 9, 20, 33, 41}, 0, false, false},
		{"four causal parts", []int{0, 12, 37, 39, 41}, 0, true, false},
		{"only empty parts", nil, 3, false, false},
		{"a part read through views", []int{0, 25, 41}, 1, true, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			var parts []vkattn.Part
			part := func(k []float32, ks [4]int, v []float32, vs [4]int, opts vkattn.Options) {
				t.Helper()
				q := devtest.Upload(t, devtest.Dev, p.QS[:], p.Q)
				kt, vt := devtest.Upload(t, devtest.Dev, ks[:], k), devtest.Upload(t, devtest.Dev, vs[:], v)
				opts.WantLSE = true
				out, err := devtest.Dev.Attention(q, kt, vt, opts)
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(out.Close)
				parts = append(parts, out.Part())
			}
			S := p.KS[2]
			for i := 0; i+1 < len(c.cuts); i++ {
				from, to := c.cuts[i], c.cuts[i+1]
				k, ks := testutil.KeyRange(p.K, p.KS, from, to)
				v, vs := testutil.KeyRange(p.V, p.VS, from, to)
				opts := vkattn.Options{}
				if c.causal {
					opts.BoolMasks = []vkattn.BoolMask{causalPart(p.QS[2], S, from, to)}
				}
				part(k, ks, v, vs, opts)
			}
			for range c.empty {
				k, ks := testutil.KeyRange(p.K, p.KS, 0, 3)
				v, vs := testutil.KeyRange(p.V, p.VS, 0, 3)
				part(k, ks, v, vs, vkattn.Options{KeyLengths: make([]int, p.QS[0])})
			}
			if c.views {
				// Part 0 again, uploaded as (B, L, H, d) and read as (B, H, L, d).
				o, lse := devtest.Download(t, parts[0].O), devtest.Download(t, parts[0].LSE)
				os, ls := parts[0].O.Shape(), parts[0].LSE.Shape()
				parts[0] = vkattn.Part{
					O:   devtest.Upload(t, devtest.Dev, []int{os[0], os[2], os[1], os[3]}, devtest.ToBLHD(o, os)).SwapAxes12(),
					LSE: devtest.Upload(t, devtest.Dev, []int{ls[0], ls[2], ls[1], ls[3]}, devtest.ToBLHD(lse, ls)).SwapAxes12(),
				}
			}
			union := *p
			if c.causal {
				union.Opts.Causal = vkattn.CausalBottomRight
			}
			if len(c.cuts) == 0 {
				union.Opts.KeyLengths = make([]int, p.QS[0])
			}
			want := devtest.RunReference(t, &union)
			for _, order := range testutil.Permutations(len(parts)) {
				mergeAndCompare(t, devtest.Dev, testutil.Permute(parts, order), want)
			}
		})
	}
}

// TestMergeCascade is cascade inference: a 4,096-token prefix shared by 8
// sequences is attended once, by the last 4 query rows of all 8 sequences
// together (32 rows of one call, every prefix key visible to each); each
// sequence's own suffix (64 to 256 tokens) is attended by its own rows
// alone, bottom-right causal within it (one call over the suffixes side
// by side, a mask keeping each sequence to its own); the two parts
// merged are each sequence's full attention, bottom-right causal over
// its prefix and suffix, as the float64 reference computes it.
func TestMergeCascade(t *testing.T) {
	const prefix, seqs, rows, H, HKV, D = 4096, 8, 4, 4, 2, 64
	r := rand.New(rand.NewSource(38))
	suffix := make([]int, seqs)
	starts := make([]int, seqs+1) // each suffix's first key among all suffixes
	for i := range suffix {
		suffix[i] = 64 + r.Intn(193)
		starts[i+1] = starts[i] + suffix[i]
	}
	total := starts[seqs]
	// Sequence i's queries are rows [i*rows, (i+1)*rows) of Q.
	qs := [4]int{1, H, seqs * rows, D}
	q := devtest.RandomValues(r, devtest.Size(qs))
	pks := [4]int{1, HKV, prefix, D}
	pk, pv := devtest.RandomValues(r, devtest.Size(pks)), devtest.RandomValues(r, devtest.Size(pks))
	sks := [4]int{1, HKV, total, D}
	sk, sv := devtest.RandomValues(r, devtest.Size(sks)), devtest.RandomValues(r, devtest.Size(sks))

	qt := devtest.Upload(t, devtest.Dev, qs[:], q)
	pre, err := devtest.Dev.Attention(qt, devtest.Upload(t, devtest.Dev, pks[:], pk), devtest.Upload(t, devtest.Dev, pks[:], pv), vkattn.Options{WantLSE: true})
	if err != nil {
		t.Fatal(err)
	}
	defer pre.Close()
	own := vkattn.BoolMask{Shape: vkattn.MaskShape{1, 1, seqs * rows, total}, Values: make([]bool, seqs*rows*total), Meaning: vkattn.TrueAllows}
	for i := range seqs {
		for t := range rows {
			for j := range suffix[i] {
				own.Values[(i*rows+t)*total+starts[i]+j] = j <= t+suffix[i]-rows
			}
		}
	}
	suf, err := devtest.Dev.Attention(qt, devtest.Upload(t, devtest.Dev, sks[:], sk), devtest.Upload(t, devtest.Dev, sks[:], sv), vkattn.Options{WantLSE: true, BoolMasks: []vkattn.BoolMask{own}})
	if err != nil {
		t.Fatal(err)
	}
	defer suf.Close()
	out, err := devtest.Dev.Merge([]vkattn.Part{pre.Part(), suf.Part()})
	if err != nil {
		t.Fatal(err)
	}
	defer out.Close()
	gotO, gotLSE := devtest.Download(t, out.O), devtest.Download(t, out.LSE)

	for i := range seqs {
		// Sequence i alone: Q its rows, K and V its prefix and suffix.
		qi := make([]float32, 0, H*rows*D)
		for h := range H {
			qi = append(qi, q[(h*seqs*rows+i*rows)*D:(h*seqs*rows+(i+1)*rows)*D]...)
		}
		kvs := [4]int{1, HKV, prefix + suffix[i], D}
		ki, vi := make([]float32, 0, devtest.Size(kvs)), make([]float32, 0, devtest.Size(kvs))
		for h := range HKV {
			ki = append(ki, pk[h*prefix*D:(h+1)*prefix*D]...)
			ki = append(ki, sk[(h*total+starts[i])*D:(h*total+starts[i+1])*D]...)
			vi = append(vi, pv[h*prefix*D:(h+1)*prefix*D]...)
			vi = append(vi, sv[(h*total+starts[i])*D:(h*total+starts[i+1])*D]...)
		}
		want, err := reference.Attention(qi, [4]int{1, H, rows, D}, ki, kvs, vi, kvs, vkattn.Options{Causal: vkattn.CausalBottomRight})
		if err != nil {
			t.Fatal(err)
		}
		var o []float32
		var lse []float32
		for h := range H {
			row := h*seqs*rows + i*rows
			o = append(o, gotO[row*D:(row+rows)*D]...)
			lse = append(lse, gotLSE[row:row+rows]...)
		}
		devtest.Compare(t, fmt.Sprintf("sequence %d O", i), o, want.O)
		devtest.Compare(t, fmt.Sprintf("sequence %d LSE", i), lse, want.LSE)
	}
}

// TestMergeSinks: a sink given to one part's call joins the merged
// denominator once: the merge is the attention with sinks over the union.
func TestMergeSinks(t *testing.T) {
	r := rand.New(rand.NewSource(39))
	p := devtest.NewProblem(r, 1, 4, 4, 3, 20, 8, 8)
	p.Opts.Sinks = []float32{1, -2, 0.5, 3}
	var parts []vkattn.Part
	for i, cut := range [][2]int{{0, 7}, {7, 20}} {
		k, ks := testutil.KeyRange(p.K, p.KS, cut[0], cut[1])
		v, vs := testutil.KeyRange(p.V, p.VS, cut[0], cut[1])
		opts := vkattn.Options{WantLSE: true}
		if i == 1 {
			opts.Sinks = p.Opts.Sinks
		}
		out, err := devtest.Dev.Attention(devtest.Upload(t, devtest.Dev, p.QS[:], p.Q), devtest.Upload(t, devtest.Dev, ks[:], k), devtest.Upload(t, devtest.Dev, vs[:], v), opts)
		if err != nil {
			t.Fatal(err)
		}
		defer out.Close()
		parts = append(parts, out.Part())
	}
	mergeAndCompare(t, devtest.Dev, parts, devtest.RunReference(t, p))
}

// TestMergeOfOnePart: a merge of one part is that part.
func TestMergeOfOnePart(t *testing.T) {
	o := []float32{1, -2, 3, 0, 0, 0}
	lse := []float32{0.25, float32(math.Inf(-1))}
	out, err := devtest.Dev.Merge([]vkattn.Part{{O: devtest.Upload(t, devtest.Dev, []int{2, 3}, o), LSE: devtest.Upload(t, devtest.Dev, []int{2, 1}, lse)}})
	if err != nil {
		t.Fatal(err)
	}
	defer out.Close()
	if c := verdict.Compare(devtest.Download(t, out.O), []float64{1, -2, 3, 0, 0, 0}, 0); !c.OK() {
		t.Errorf("O = %v, want %v", devtest.Download(t, out.O), o)
	}
	if c := verdict.Compare(devtest.Download(t, out.LSE), []float64{0.25, math.Inf(-1)}, 0); !c.OK() {
		t.Errorf("LSE = %v, want %v", devtest.Download(t, out.LSE), lse)
	}
}

// TestMergeRefusals: a merge of no parts, of parts that disagree in shape
// or lack their LSE, of half-precision, non-finite, closed or foreign
// tensors is refused with its sentinel, and allocates nothing.
func TestMergeRefusals(t *testing.T) {
	o := func(shape ...int) *vkattn.Tensor { return devtest.Zeros(t, devtest.Dev, shape...) }
	ok := vkattn.Part{O: o(2, 3, 8), LSE: o(2, 3, 1)}
	half, err := devtest.Dev.UploadAs([]int{2, 3, 8}, make([]float32, 48), vkattn.Float16)
	if err != nil {
		t.Fatal(err)
	}
	defer half.Close()
	nan := make([]float32, 48)
	nan[7] = float32(math.NaN())
	nanO := devtest.Upload(t, devtest.Dev, []int{2, 3, 8}, nan)
	lseOf := func(x float64) *vkattn.Tensor {
		xs := make([]float32, 6)
		xs[4] = float32(x)
		return devtest.Upload(t, devtest.Dev, []int{2, 3, 1}, xs)
	}
	nanLSE, infLSE, noKeys := lseOf(math.NaN()), lseOf(math.Inf(1)), lseOf(math.Inf(-1))
	closed := o(2, 3, 1)
	closed.Close()
	other := devtest.SmallBindings(t, vkattn.Config{})
	foreign, err := other.Upload([]int{2, 3, 1}, make([]float32, 6))
	if err != nil {
		t.Fatal(err)
	}
	defer foreign.Close()
	merge := func(parts ...vkattn.Part) func() error {
		return func() error {
			out, err := devtest.Dev.Merge(parts)
			out.Close()
			return err
		}
	}
	otherL, otherDV := vkattn.Part{O: o(2, 4, 8), LSE: o(2, 4, 1)}, vkattn.Part{O: o(2, 3, 4), LSE: o(2, 3, 1)}
	wide := o(2, 3, 2)
	before := devtest.Dev.Stats()
	devtest.CheckRefusals(t, []devtest.Refusal{
		{Name: "no parts", Err: vkattn.ErrOption, Run: merge()},
		{Name: "no LSE", Err: vkattn.ErrShape, Run: merge(ok, vkattn.Part{O: ok.O})},
		{Name: "no O", Err: vkattn.ErrShape, Run: merge(ok, vkattn.Part{LSE: ok.LSE})},
		{Name: "other L", Err: vkattn.ErrShape, Run: merge(ok, otherL)},
		{Name: "other d_v", Err: vkattn.ErrShape, Run: merge(ok, otherDV)},
		{Name: "LSE with a width", Err: vkattn.ErrShape, Run: merge(ok, vkattn.Part{O: ok.O, LSE: wide})},
		{Name: "float16 O", Err: vkattn.ErrOption, Run: merge(ok, vkattn.Part{O: half, LSE: ok.LSE})},
		{Name: "NaN in O", Err: vkattn.ErrNonFinite, Run: merge(ok, vkattn.Part{O: nanO, LSE: ok.LSE})},
		{Name: "NaN in LSE", Err: vkattn.ErrNonFinite, Run: merge(ok, vkattn.Part{O: ok.O, LSE: nanLSE})},
		{Name: "+Inf in LSE", Err: vkattn.ErrNonFinite, Run: merge(ok, vkattn.Part{O: ok.O, LSE: infLSE})},
		{Name: "closed LSE", Err: vkattn.ErrClosed, Run: merge(ok, vkattn.Part{O: ok.O, LSE: closed})},
		{Name: "LSE of another device", Err: vkattn.ErrDevice, Run: merge(ok, vkattn.Part{O: ok.O, LSE: foreign})},
	})
	if after := devtest.Dev.Stats(); after.Since(before).Allocations != 0 {
		t.Errorf("refused merges allocated %d buffers", after.Since(before).Allocations)
	}
	// -Inf is a row that saw no key: merged, not refused.
	if err := merge(ok, vkattn.Part{O: ok.O, LSE: noKeys})(); err != nil {
		t.Errorf("a part with a -Inf LSE row: %v", err)
	}
	if _, err := devtest.Dev.Merge(nil); !errors.Is(err, vkattn.ErrOption) {
		t.Errorf("Merge(nil): %v", err)
	}
}

// TestMergeOfManyParts: the merge's error does not grow with the number
// of parts (SEMANTICS.md §7.1). n copies of one part merge to the part's O
// exactly and to LSE + ln n; a plain running sum in float32 drifted by
// about a rounding per part (1.4e-5 at 1,000 parts, 9.7e-5 at 5,000, past
// §17's 2e-5). 400 random parts merge to the float64 merge of the same
// values.
func TestMergeOfManyParts(t *testing.T) {
	r := rand.New(rand.NewSource(21))
	const rows, d = 6, 8
	o := make([]float32, rows*d)
	lse := make([]float32, rows)
	for i := range o {
		o[i] = float32(r.NormFloat64())
	}
	for i := range lse {
		lse[i] = float32(3 * r.NormFloat64())
	}
	ot := devtest.Upload(t, devtest.Dev, []int{1, rows, d}, o)
	lt := devtest.Upload(t, devtest.Dev, []int{1, rows, 1}, lse)
	const n = 3000
	parts := make([]vkattn.Part, n)
	for i := range parts {
		parts[i] = vkattn.Part{O: ot, LSE: lt}
	}
	out, err := devtest.Dev.Merge(parts)
	if err != nil {
		t.Fatal(err)
	}
	wantO := make([]float64, len(o))
	for i, x := range o {
		wantO[i] = float64(x)
	}
	wantLSE := make([]float64, rows)
	for i, x := range lse {
		wantLSE[i] = float64(x) + math.Log(n)
	}
	devtest.Compare(t, fmt.Sprintf("O of %d copies", n), devtest.Download(t, out.O), wantO)
	devtest.Compare(t, fmt.Sprintf("LSE of %d copies", n), devtest.Download(t, out.LSE), wantLSE)
	out.Close()

	const m = 400
	var refs []*reference.Result
	parts = parts[:0]
	for range m {
		po, pl := make([]float32, rows*d), make([]float32, rows)
		for i := range po {
			po[i] = float32(r.NormFloat64())
		}
		for i := range pl {
			pl[i] = float32(2 * r.NormFloat64())
		}
		parts = append(parts, vkattn.Part{O: devtest.Upload(t, devtest.Dev, []int{1, rows, d}, po), LSE: devtest.Upload(t, devtest.Dev, []int{1, rows, 1}, pl)})
		ref := &reference.Result{Dims: vkattn.Dims{B: 1, H: 1, HKV: 1, L: rows, S: 1, DK: d, DV: d}, O: make([]float64, len(po)), LSE: make([]float64, len(pl))}
		for i, x := range po {
			ref.O[i] = float64(x)
		}
		for i, x := range pl {
			ref.LSE[i] = float64(x)
		}
		refs = append(refs, ref)
	}
	want, err := reference.Merge(refs)
	if err != nil {
		t.Fatal(err)
	}
	mergeAndCompare(t, devtest.Dev, parts, want)
}
