package main

import (
	"math/rand/v2"
	"path/filepath"
	"strings"
	"testing"

	"github.com/vkattn/vkattn/internal/random"
	"github.com/vkattn/vkattn/internal/testutil"
)

// latentInputs writes Q (1, H, T, 64) and K (1, 1, T, 64) of one latent
// head, and V as a file of its own: K's first 32 columns.
func latentInputs(t *testing.T, H, T int) (q, k, v string) {
	t.Helper()
	dir := t.TempDir()
	r := rand.New(rand.NewPCG(57, 6))
	rows := func(n, w int) [][]float32 {
		x := random.Normal(r, n*w)
		out := make([][]float32, n)
		for i := range out {
			out[i] = x[i*w : (i+1)*w]
		}
		return out
	}
	qs := make([][][]float32, H)
	for h := range qs {
		qs[h] = rows(T, 64)
	}
	ks := rows(T, 64)
	vs := make([][]float32, T)
	for i, row := range ks {
		vs[i] = row[:32]
	}
	return save(t, dir, "q.npy", [][][][]float32{qs}), save(t, dir, "k.npy", [][][][]float32{{ks}}), save(t, dir, "v.npy", [][][][]float32{{vs}})
}

// run --v-from-k N reads V as K's first N columns, a view of K on the
// device: --check passes, O is run's with those columns given as -v, and
// on NVIDIA's plan --explain says V is read from K's tiles; a V given
// twice, a width of 0, past K's rows or splitting q8_0 blocks is refused.
func TestRunVFromK(t *testing.T) {
	withDevice(t)
	q, k, v := latentInputs(t, 4, 20)
	common := []string{"--causal", "bottom-right", "--scale", "0.3", "--check"}
	for _, plan := range []string{"", "nvidia"} {
		var extra []string
		if plan != "" {
			extra = []string{"--plan-as", plan, "--explain"}
		}
		o, ro := filepath.Join(t.TempDir(), "o.npy"), filepath.Join(t.TempDir(), "ro.npy")
		out := cliOK(t, append(append([]string{"run", "-q", q, "-k", k, "--v-from-k", "32", "-o", o}, common...), extra...)...)
		if !strings.Contains(out, "check vs float64 reference") || !strings.Contains(out, ": ok") {
			t.Errorf("run --v-from-k 32 %v: no passed check:\n%s", extra, out)
		}
		cliOK(t, append([]string{"run", "-q", q, "-k", k, "-v", v, "-o", ro}, append(common, extra...)...)...)
		testutil.Near(t, "O with V from K against V's own file", load(t, o).F32, load(t, ro).F32, 2e-5)
		if got := load(t, o).Shape; len(got) != 4 || got[3] != 32 {
			t.Errorf("O of shape %v, want d_v 32", got)
		}
		if plan == "nvidia" {
			for _, want := range []string{"V is K's leading 32 columns", "K tiles (V read from their leading columns)"} {
				if !strings.Contains(out, want) {
					t.Errorf("run --v-from-k --explain on NVIDIA's plan does not say %q:\n%s", want, out)
				}
			}
		}
	}
	checkRefused(t, []string{"run", "-q", q, "-k", k, "-v", v, "--v-from-k", "32"}, 2, "give -v or --v-from-k, not both", "")
	checkRefused(t, []string{"run", "-q", q, "-k", k, "--v-from-k", "0"}, 2, "--v-from-k 0: want the width of V", "")
	checkRefused(t, []string{"run", "-q", q, "--v-from-k", "32"}, 2, "-q and -k are required", "")
	checkRefused(t, []string{"run", "-q", q, "-k", k, "--v-from-k", "65"}, 1, "rows of 64", "")
	checkRefused(t, []string{"run", "-q", q, "-k", k, "--v-from-k", "16", "--kv-dtype", "q8_0"}, 1, "multiple of 32", "")
	checkRefused(t, []string{"run", "-q", q, "-k", k}, 2, "-q, -k and -v are required", "")
}

// decode --latent N runs the loop through a latent cache (K's rows alone,
// V their first N columns): paged, q8_0, a custom scale, --check passes,
// and O is run --v-from-k's causal attention over the same values; -v
// beside it, --rope with it and a width past K's rows are refused.
func TestDecodeLatent(t *testing.T) {
	withDevice(t)
	q, k, v := latentInputs(t, 4, 20)
	o, ro := filepath.Join(t.TempDir(), "o.npy"), filepath.Join(t.TempDir(), "ro.npy")
	out := cliOK(t, "decode", "-q", q, "-k", k, "--latent", "32", "--prefill", "5", "--page", "4", "--kv-dtype", "q8_0", "--scale", "0.3", "--check", "--json", "-o", o)
	s := parseJSON[decodeSummary](t, out)
	if s.Check == nil || !s.Check.Pass || s.Steps != 15 || s.Dims.DV != 32 || !strings.Contains(s.Cache, "latent") {
		t.Errorf("summary %+v", s)
	}
	cliOK(t, "run", "-q", q, "-k", k, "--v-from-k", "32", "--kv-dtype", "q8_0", "--scale", "0.3", "--causal", "bottom-right", "-o", ro)
	testutil.Near(t, "O from decode --latent against run --v-from-k", load(t, o).F32, load(t, ro).F32, 2e-5)
	checkRefused(t, []string{"decode", "-q", q, "-k", k, "-v", v, "--latent", "32"}, 2, "give -v or --latent, not both", "")
	checkRefused(t, []string{"decode", "-q", q, "-k", k, "--latent", "32", "--rope", "10000"}, 2, "--latent takes no --rope", "")
	checkRefused(t, []string{"decode", "-q", q, "-k", k, "--latent", "96"}, 1, "rows of 64", "")
}
