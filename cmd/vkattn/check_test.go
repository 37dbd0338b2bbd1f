package main

import (
	"testing"

	"github.com/vkattn/vkattn/internal/testutil"
	"github.com/vkattn/vkattn/internal/verdict"
)

// nearReference checks a GPU output read back from a file against the
// float64 reference under the suite's bound (verdict.SweepTolerance).
func nearReference(t *testing.T, what string, got []float32, want []float64) {
	t.Helper()
	if err := testutil.Compare(got, want, verdict.SweepTolerance, 0); err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}
