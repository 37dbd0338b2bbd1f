package vkattn_test

import (
	"testing"

	"github.com/vkattn/vkattn/internal/devtest"
	"github.com/vkattn/vkattn/internal/golden"
	"github.com/vkattn/vkattn/internal/verify"
)

// TestGoldenCases runs every case in testdata/ (the worked examples of
// SEMANTICS.md §18 and hand derivations from them; the numbers are copied, not
// computed by vkattn) on every plan (TestGoldenCases/<plan>/<case>) and
// compares with the expected O, weights and log-sum-exp under each case's
// tolerance (1e-5 unless the worked example gives fewer digits) and with
// the float64 reference: verify.Case, the runner `vkattn verify` uses.
func TestGoldenCases(t *testing.T) {
	cases, err := golden.Load("testdata")
	if err != nil {
		t.Fatal(err)
	}
	if len(cases) < 8 {
		t.Fatalf("only %d golden cases loaded", len(cases))
	}
	devtest.InParallel(t, devtest.EveryPlanName, func(t *testing.T, plan string) {
		d := devtest.EveryPlan()[plan]
		for _, c := range cases {
			t.Run(c.Name, func(t *testing.T) {
				if line, ok := verify.Case(d, &c); !ok {
					t.Errorf("%s (%s)", line, c.Source)
				}
			})
		}
	})
}
