package vkattn_test

import (
	"testing"

	"github.com/vkattn/vkattn/internal/golden"
)

// TestGoldenCases runs every case in testdata/ (the worked examples of
// SEMANTICS.md §14 and hand derivations from them; the numbers are copied, not
// computed by vkattn) on every plan (TestGoldenCases/<plan>/<case>) and
// compares with the expected O, weights and log-sum-exp under each case's
// tolerance (1e-5 unless the worked example gives fewer digits).
func TestGoldenCases(t *testing.T) {
	cases, err := golden.Load("testdata")
	if err != nil {
		t.Fatal(err)
	}
	if len(cases) < 8 {
		t.Fatalf("only %d golden cases loaded", len(cases))
	}
	for plan, d := range everyPlan() {
		for _, c := range cases {
			t.Run(plan+"/"+c.Name, func(t *testing.T) {
				p, err := c.Problem()
				if err != nil {
					t.Fatal(err)
				}
				got := runGPU(t, d, &problem{
					q: p.Q, k: p.K, v: p.V, qs: p.Q4, ks: p.K4, vs: p.V4, opts: p.Opts,
					wantLSE: c.Expect.LSE != nil, weights: c.Expect.A != nil,
				})
				tol := c.Tolerance()
				check := func(what string, got []float32, want *golden.Array) {
					if want == nil {
						return
					}
					if diff := golden.MaxAbsDiff(got, want.Float64()); diff > tol {
						t.Errorf("%s: max |error| %.3g > %.3g (%s)\n got %v\nwant %v", what, diff, tol, c.Source, got, want.Float64())
					}
				}
				check("O", got.o, c.Expect.O)
				check("A", got.w, c.Expect.A)
				check("LSE", got.lse, c.Expect.LSE)
			})
		}
	}
}
