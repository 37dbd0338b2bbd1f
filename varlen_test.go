// Sequences of different lengths: the KV cache and packed (varlen)
// batches (SEMANTICS.md §4.2).

package vkattn_test

import (
	"errors"
	"fmt"
	"math/rand"
	"testing"

	"github.com/vkattn/vkattn"
	"github.com/vkattn/vkattn/internal/devtest"
	"github.com/vkattn/vkattn/reference"
)

// A packed batch of sequences of different lengths (one with no queries,
// one with no keys) gives each sequence's own attention: against the
// reference on each sequence alone, with causal alignments and the score
// variants counted within each sequence, packed (total, H, d) data read in
// place, on both load paths and in half precision.
func TestAttentionVarlen(t *testing.T) {
	const H, HKV, D = 4, 2, 8
	lq, lk := []int{5, 0, 9, 3, 1}, []int{7, 3, 9, 0, 12}
	cuQ, cuK := []int{0}, []int{0}
	for i := range lq {
		cuQ, cuK = append(cuQ, cuQ[i]+lq[i]), append(cuK, cuK[i]+lk[i])
	}
	tq, tk := cuQ[len(lq)], cuK[len(lk)]
	devtest.InParallel(t, devtest.EveryPlanName, func(t *testing.T, path string) {
		d := devtest.EveryPlan()[path]
		r := rand.New(rand.NewSource(61))
		for _, c := range []struct {
			name string
			opts vkattn.Options
			dt   vkattn.DType
		}{
			{"bottom-right", vkattn.Options{Causal: vkattn.CausalBottomRight}, vkattn.Float32},
			{"top-left window alibi", vkattn.Options{Causal: vkattn.CausalTopLeft, Window: &vkattn.Window{Left: 3, Right: 1}, ALiBi: vkattn.ALiBiSlopes(H)}, vkattn.Float16},
			{"sinks softcap", vkattn.Options{Sinks: devtest.RandomValues(r, H), Softcap: 0.7}, vkattn.BFloat16},
		} {
			t.Run(c.name, func(t *testing.T) {
				// Packed (total, H, d) as a model lays it out.
				qp, kp, vp := devtest.RandomValues(r, tq*H*D), devtest.RandomValues(r, tk*HKV*D), devtest.RandomValues(r, tk*HKV*D)
				q := devtest.MustUploadAs(t, d, []int{1, tq, H, D}, qp, c.dt).SwapAxes12()
				defer q.Close()
				k := devtest.MustUploadAs(t, d, []int{1, tk, HKV, D}, kp, c.dt).SwapAxes12()
				defer k.Close()
				v := devtest.MustUploadAs(t, d, []int{1, tk, HKV, D}, vp, c.dt).SwapAxes12()
				defer v.Close()
				out, err := d.AttentionVarlen(q, k, v, cuQ, cuK, c.opts)
				if err != nil {
					t.Fatal(err)
				}
				defer out.Close()
				o, err := out.O.Download() // (1, H, tq, D)
				if err != nil {
					t.Fatal(err)
				}
				// sequence i's rows of a packed (total, heads, D) array as (heads, n, D).
				seq := func(x []float32, heads, first, n int) []float32 {
					s := make([]float32, 0, heads*n*D)
					for h := 0; h < heads; h++ {
						for p := first; p < first+n; p++ {
							row := x[(p*heads+h)*D : (p*heads+h+1)*D]
							s = append(s, devtest.RoundAll(c.dt, row)...)
						}
					}
					return s
				}
				for i := range lq {
					if lq[i] == 0 {
						continue
					}
					got := make([]float32, 0, H*lq[i]*D)
					for h := 0; h < H; h++ {
						got = append(got, o[(h*tq+cuQ[i])*D:(h*tq+cuQ[i]+lq[i])*D]...)
					}
					if lk[i] == 0 {
						for j, x := range got {
							if x != 0 {
								t.Fatalf("sequence %d has no keys: O[%d] = %v, want 0", i, j, x)
							}
						}
						continue
					}
					qs, ks, vs := seq(qp, H, cuQ[i], lq[i]), seq(kp, HKV, cuK[i], lk[i]), seq(vp, HKV, cuK[i], lk[i])
					want, err := reference.Attention(qs, [4]int{1, H, lq[i], D}, ks, [4]int{1, HKV, lk[i], D}, vs, [4]int{1, HKV, lk[i], D}, c.opts)
					if err != nil {
						t.Fatal(err)
					}
					devtest.CompareWithin(t, fmt.Sprintf("sequence %d (L=%d, S=%d)", i, lq[i], lk[i]), got, want.O, out.Plan.MatrixErrorBound(qs, ks, vs, c.opts.Scale).O)
				}
			})
		}
	})
	q := devtest.Upload(t, devtest.Dev, []int{1, H, tq, D}, make([]float32, H*tq*D))
	k := devtest.Upload(t, devtest.Dev, []int{1, HKV, tk, D}, make([]float32, HKV*tk*D))
	for _, c := range []struct {
		name     string
		cuQ, cuK []int
		opts     vkattn.Options
		want     error
	}{
		{"not ending at the total", []int{0, 3}, []int{0, tk}, vkattn.Options{}, vkattn.ErrLengths},
		{"decreasing", []int{0, 10, 5, tq}, []int{0, 1, 2, tk}, vkattn.Options{}, vkattn.ErrLengths},
		{"counts differ", cuQ, []int{0, tk}, vkattn.Options{}, vkattn.ErrLengths},
		{"a mask", cuQ, cuK, vkattn.Options{KeyLengths: []int{1}}, vkattn.ErrOption},
		{"LSE", cuQ, cuK, vkattn.Options{WantLSE: true}, vkattn.ErrOption},
	} {
		if _, err := devtest.Dev.AttentionVarlen(q, k, k, c.cuQ, c.cuK, c.opts); !errors.Is(err, c.want) {
			t.Errorf("%s: %v, want %v", c.name, err, c.want)
		}
	}
}
