package main

import (
	"math"
	"path/filepath"
	"testing"
)

// The score variant flags on the seed 000 example (q = [1, 0]; keys [1, 0],
// [0, 1], [1, 1]; values [2, 0], [0, 4], [2, 2]; scale 1/sqrt(2)), with
// the expected outputs derived by hand from SEMANTICS.md §4.1.
func TestRunScoreVariants(t *testing.T) {
	withDevice(t)
	dir := t.TempDir()
	q, k, v := seed000(t, dir)
	s := []float64{1 / math.Sqrt2, 0, 1 / math.Sqrt2} // the scaled scores
	vals := [][2]float64{{2, 0}, {0, 4}, {2, 2}}
	// attend is the softmax of scores (plus a sink logit) over the values.
	attend := func(scores []float64, sink float64) []float64 {
		z := math.Exp(sink)
		var o [2]float64
		for j, x := range scores {
			z += math.Exp(x)
			o[0] += math.Exp(x) * vals[j][0]
			o[1] += math.Exp(x) * vals[j][1]
		}
		return []float64{o[0] / z, o[1] / z}
	}
	alibi := make([]float64, 3)
	capped := make([]float64, 3)
	for j := range s {
		alibi[j] = s[j] + math.Exp2(-8)*float64(j-2) // H = 1: slope 2^-8; t + S - L = 2
		capped[j] = 0.5 * math.Tanh(s[j]/0.5)
	}
	sinks := save(t, dir, "sinks.npy", []float32{0.25})
	for _, c := range []struct {
		name string
		args []string
		want []float64
	}{
		// Query 0 sits at key position 2: window (0, 0) leaves key 2 alone.
		{"window 0,0", []string{"--window", "0,0"}, vals[2][:]},
		{"window 1,-1", []string{"--window", "1,-1"}, attend([]float64{math.Inf(-1), s[1], s[2]}, math.Inf(-1))},
		{"softcap 0.5", []string{"--softcap", "0.5"}, attend(capped, math.Inf(-1))},
		{"alibi", []string{"--alibi"}, attend(alibi, math.Inf(-1))},
		{"sinks", []string{"--sinks", sinks}, attend(s, 0.25)},
	} {
		t.Run(c.name, func(t *testing.T) {
			o := filepath.Join(t.TempDir(), "o.npy")
			cliOK(t, append([]string{"run", "-q", q, "-k", k, "-v", v, "-o", o, "--check"}, c.args...)...)
			near(t, "O", load(t, o).F32, c.want, 1e-6)
		})
	}
	checkRefused(t, []string{"run", "-q", q, "-k", k, "-v", v, "--window", "-2,0"}, 1, "window (-2, 0)", "")
	checkRefused(t, []string{"run", "-q", q, "-k", k, "-v", v, "--softcap", "0"}, 1, "--softcap 0: want a positive cap", "")
	two := save(t, dir, "two.npy", []float32{1, 2})
	checkRefused(t, []string{"run", "-q", q, "-k", k, "-v", v, "--sinks", two}, 1, "want (1,), one value per query head", "")
	checkRefused(t, []string{"run", "-q", q, "-k", k, "-v", v, "--alibi-slopes", two}, 1, "want (1,), one value per query head", "")
}
