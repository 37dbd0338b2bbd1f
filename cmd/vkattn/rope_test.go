package main

import (
	"fmt"
	"math"
	"math/rand/v2"
	"path/filepath"
	"testing"

	"github.com/vkattn/vkattn"
	"github.com/vkattn/vkattn/internal/random"
	"github.com/vkattn/vkattn/internal/testutil"
	"github.com/vkattn/vkattn/reference"
)

// randomNPY writes a (B, heads, n, d) array of standard normals and
// returns its path and values.
func randomNPY(t *testing.T, r *rand.Rand, dir, name string, s [4]int) (string, []float32) {
	t.Helper()
	flat := random.Normal(r, s[0]*s[1]*s[2]*s[3])
	return save(t, dir, name, nest(flat, s)), flat
}

// within checks got against the float64 reference: |got - want| <=
// 2e-5 * max(1, max|want|).
func within(t *testing.T, what string, got []float32, want []float64) {
	t.Helper()
	top := 1.0
	for _, w := range want {
		top = math.Max(top, math.Abs(w))
	}
	testutil.Near(t, what, got, want, 2e-5*top)
}

// run --rope and decode --rope against the float64 reference's RoPE: both
// styles, partial dims, theta 10,000 and 500,000, linear and Llama 3
// scaling, positions up to 4,095; decode's cache rotates keys as they are
// appended and gives run's output.
func TestRoPECommands(t *testing.T) {
	withDevice(t)
	r := rand.New(rand.NewPCG(17, 17))
	dir := t.TempDir()
	llama3 := vkattn.RoPEScaling{Kind: vkattn.RoPELlama3, Factor: 8, LowFreqFactor: 1, HighFreqFactor: 4, OriginalContext: 8192}
	for i, c := range []struct {
		name   string
		q, k   [4]int
		args   []string
		rope   vkattn.RoPE
		causal vkattn.Causal
	}{
		{"half, theta 1e4", [4]int{1, 2, 5, 8}, [4]int{1, 2, 7, 8}, []string{"--rope", "10000"},
			vkattn.RoPE{Theta: 10000}, vkattn.NotCausal},
		{"interleaved, 6 of 8 dims, linear:4, causal", [4]int{2, 4, 6, 8}, [4]int{2, 2, 6, 8},
			[]string{"--rope", "10000", "--rope-dims", "6", "--rope-style", "interleaved", "--rope-scale", "linear:4", "--causal", "bottom-right"},
			vkattn.RoPE{Theta: 10000, Dims: 6, Style: vkattn.RoPEInterleaved, Scaling: vkattn.RoPEScaling{Kind: vkattn.RoPELinear, Factor: 4}}, vkattn.CausalBottomRight},
		{"half, theta 5e5, llama3, positions to 4095", [4]int{1, 1, 3, 16}, [4]int{1, 1, 4096, 16},
			[]string{"--rope", "500000", "--rope-dims", "12", "--rope-scale", "llama3:8,1,4,8192"},
			vkattn.RoPE{Theta: 500000, Dims: 12, Scaling: llama3}, vkattn.NotCausal},
	} {
		t.Run(c.name, func(t *testing.T) {
			vs := c.k
			qPath, q := randomNPY(t, r, dir, fmt.Sprintf("q%d.npy", i), c.q)
			kPath, k := randomNPY(t, r, dir, fmt.Sprintf("k%d.npy", i), c.k)
			vPath, v := randomNPY(t, r, dir, fmt.Sprintf("v%d.npy", i), vs)
			o := filepath.Join(t.TempDir(), "o.npy")
			cliOK(t, append([]string{"run", "-q", qPath, "-k", kPath, "-v", vPath, "-o", o}, c.args...)...)
			rope := c.rope
			want, err := reference.Attention(q, c.q, k, c.k, v, vs, vkattn.Options{Causal: c.causal, RoPE: &rope})
			if err != nil {
				t.Fatal(err)
			}
			within(t, "run", load(t, o).F32, want.O)
			if c.q[2] != c.k[2] {
				return
			}
			// decode: the same sequence through a KV cache (causal by
			// construction), paged, checked by the command and against
			// the reference.
			od := filepath.Join(t.TempDir(), "od.npy")
			args := []string{"decode", "-q", qPath, "-k", kPath, "-v", vPath, "-o", od, "--prefill", "2", "--page", "4", "--check"}
			for j := 0; j < len(c.args); j += 2 {
				if c.args[j] != "--causal" {
					args = append(args, c.args[j], c.args[j+1])
				}
			}
			cliOK(t, args...)
			within(t, "decode", load(t, od).F32, want.O)
			// A float16 cache stores keys rotated, then rounded: --check
			// compares with keys so rotated and rounded in float64.
			cliOK(t, append(args, "--kv-dtype", "f16")...)
		})
	}
	q, _ := randomNPY(t, r, dir, "q.npy", [4]int{1, 1, 2, 6})
	checkRefused(t, []string{"run", "-q", q, "-k", q, "-v", q, "--rope-dims", "4"}, 1, "--rope-dims needs --rope THETA", "")
	checkRefused(t, []string{"run", "-q", q, "-k", q, "-v", q, "--rope", "10000", "--rope-dims", "3"}, 1, "even", "")
	checkRefused(t, []string{"run", "-q", q, "-k", q, "-v", q, "--rope", "10000", "--rope-dims", "8"}, 1, "at most d_k", "")
	checkRefused(t, []string{"run", "-q", q, "-k", q, "-v", q, "--rope", "0"}, 1, "theta", "")
	checkRefused(t, []string{"run", "-q", q, "-k", q, "-v", q, "--rope", "1e4", "--rope-scale", "yarn:2"}, 1, "linear:F or llama3", "")
	checkRefused(t, []string{"decode", "-q", q, "-k", q, "-v", q, "--rope", "1e4", "--rope-style", "spiral"}, 2, "half or interleaved", "")
}
