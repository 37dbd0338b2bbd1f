package main

import (
	"encoding/json"
	"math"
	"strings"
	"testing"

	"github.com/vkattn/vkattn/internal/golden"
)

// nearReference checks a GPU output read back from a file against the
// float64 reference under the suite's bound (golden.SweepTolerance).
func nearReference(t *testing.T, what string, got []float32, want []float64) {
	t.Helper()
	if c := golden.Compare(got, want, golden.SweepTolerance); !c.OK() {
		if c.Worst < 0 {
			t.Fatalf("%s: %d values, reference %d", what, c.Got, c.Want)
		}
		t.Fatalf("%s[%d] = %v, reference %v (%.3g times the bound)", what, c.Worst, got[c.Worst], want[c.Worst], c.Ratio)
	}
}

func TestCheckResultNamesTheWorstOutputAndEncodesInfinities(t *testing.T) {
	inf := math.Inf(1)
	for _, c := range []struct {
		name  string
		add   func(*checkResult)
		ok    bool
		worst string
	}{
		{"within 1e-4 * max(1, |ref|)", func(c *checkResult) {
			c.add("O", []float32{1000.05, 0.00005}, []float64{1000, 0})
			c.add("LSE", []float32{float32(-inf)}, []float64{-inf})
		}, true, ""},
		{"the worst against its limit, not the largest error", func(c *checkResult) {
			c.add("O", []float32{1000.05}, []float64{1000}) // 0.5 of its limit
			c.add("weights", []float32{0.3}, []float64{0.2})
		}, false, "weights[0] = 0.3, reference 0.2"},
		{"a finite log-sum-exp where the reference has -Inf", func(c *checkResult) {
			c.add("O", []float32{1}, []float64{1})
			c.add("LSE", []float32{0, -3}, []float64{0, -inf})
		}, false, "LSE[1] = -3, reference -Inf"},
		{"a NaN output", func(c *checkResult) {
			c.add("O", []float32{float32(math.NaN())}, []float64{0.5})
		}, false, "O[0] = NaN, reference 0.5"},
		{"a length mismatch stays the worst", func(c *checkResult) {
			c.add("O", []float32{1, 2}, []float64{1})
			c.add("weights", []float32{0.3}, []float64{0.2})
		}, false, "O has 2 values, reference 1"},
	} {
		chk := &checkResult{}
		c.add(chk)
		if chk.ok() != c.ok || chk.Pass != c.ok {
			t.Errorf("%s: ok %v, pass %v; want %v (%s)", c.name, chk.ok(), chk.Pass, c.ok, chk)
		}
		if !c.ok && (chk.worst != c.worst || !strings.Contains(chk.String(), "FAILED, worst "+c.worst)) {
			t.Errorf("%s: worst %q in %q, want %q", c.name, chk.worst, chk, c.worst)
		}
		if _, err := json.Marshal(chk); err != nil {
			t.Errorf("%s: --json cannot encode the check: %v", c.name, err)
		}
	}
}
