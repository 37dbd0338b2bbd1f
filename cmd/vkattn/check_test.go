package main

import (
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
