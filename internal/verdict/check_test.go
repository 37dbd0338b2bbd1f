package verdict

import (
	"encoding/json"
	"math"
	"strings"
	"testing"
)

// Check keeps the worst element relative to its limit, across outputs,
// and encodes infinite errors.
func TestCheckNamesTheWorstOutputAndEncodesInfinities(t *testing.T) {
	inf := math.Inf(1)
	for _, c := range []struct {
		name  string
		add   func(*Check)
		ok    bool
		worst string
	}{
		{"within 1e-4 * max(1, |ref|)", func(c *Check) {
			c.Add("O", []float32{1000.05, 0.00005}, []float64{1000, 0})
			c.Add("LSE", []float32{float32(-inf)}, []float64{-inf})
		}, true, ""},
		{"the worst against its limit, not the largest error", func(c *Check) {
			c.Add("O", []float32{1000.05}, []float64{1000}) // 0.5 of its limit
			c.Add("weights", []float32{0.3}, []float64{0.2})
		}, false, "weights[0] = 0.3, reference 0.2"},
		{"a finite log-sum-exp where the reference has -Inf", func(c *Check) {
			c.Add("O", []float32{1}, []float64{1})
			c.Add("LSE", []float32{0, -3}, []float64{0, -inf})
		}, false, "LSE[1] = -3, reference -Inf"},
		{"a NaN output", func(c *Check) {
			c.Add("O", []float32{float32(math.NaN())}, []float64{0.5})
		}, false, "O[0] = NaN, reference 0.5"},
		{"a length mismatch stays the worst", func(c *Check) {
			c.Add("O", []float32{1, 2}, []float64{1})
			c.Add("weights", []float32{0.3}, []float64{0.2})
		}, false, "O has 2 values, reference 1"},
	} {
		chk := &Check{}
		c.add(chk)
		if chk.OK() != c.ok || chk.Pass != c.ok {
			t.Errorf("%s: ok %v, pass %v; want %v (%s)", c.name, chk.OK(), chk.Pass, c.ok, chk)
		}
		if !c.ok && (chk.worst != c.worst || !strings.Contains(chk.String(), "FAILED, worst "+c.worst)) {
			t.Errorf("%s: worst %q in %q, want %q", c.name, chk.worst, chk, c.worst)
		}
		if _, err := json.Marshal(chk); err != nil {
			t.Errorf("%s: --json cannot encode the check: %v", c.name, err)
		}
	}
}
