// Package verdict is how vkattn judges a result against the float64
// reference: the one comparison rule |got - ref| <= tol * max(1, |ref|)
// (Compare, Near), the tolerances of SEMANTICS.md §17, the checks behind
// the CLI's --check and verify (Check, GradCheck), and Number, the JSON
// float that may be infinite or NaN, in which the checks report. The
// golden cases (internal/golden) and the tests judge by it too.
package verdict
