package verdict

import (
	"fmt"
	"math"
)

// Check accumulates the comparisons of a call's outputs with the
// reference (the CLI's --check, verify): Compare under CheckTolerance.
// Its numbers are Numbers so an infinite error (NaN output) still
// encodes as JSON.
type Check struct {
	MaxAbs Number `json:"max_abs_err"`
	MaxRel Number `json:"max_rel_err"`
	Pass   bool   `json:"pass"`
	failed bool
	worst  string  // the worst element relative to its limit, for messages
	ratio  float64 // its error over its limit
	extra  float64 // the largest allowance AddWithin gave
}

// Add compares output name, got, with the reference, want.
func (c *Check) Add(name string, got []float32, want []float64) { c.AddWithin(name, got, want, 0) }

// AddWithin is Add allowing extra more absolute error: the stated bound of
// the cooperative-matrix path (SEMANTICS.md §9.3).
func (c *Check) AddWithin(name string, got []float32, want []float64, extra float64) {
	c.extra = math.Max(c.extra, extra)
	cmp := CompareWithin(got, want, CheckTolerance, extra)
	c.failed = c.failed || !cmp.OK()
	c.Pass = !c.failed
	if cmp.Got != cmp.Want {
		c.worst, c.ratio = fmt.Sprintf("%s has %d values, reference %d", name, cmp.Got, cmp.Want), math.Inf(1)
		return
	}
	c.MaxAbs = Number(math.Max(float64(c.MaxAbs), cmp.MaxAbs))
	c.MaxRel = Number(math.Max(float64(c.MaxRel), cmp.MaxRel))
	if cmp.Worst >= 0 && cmp.Ratio > c.ratio {
		c.ratio = cmp.Ratio
		c.worst = fmt.Sprintf("%s[%d] = %v, reference %v", name, cmp.Worst, got[cmp.Worst], want[cmp.Worst])
	}
}

func (c *Check) OK() bool { return !c.failed }

func (c *Check) String() string {
	verdict := "ok"
	if c.failed {
		verdict = "FAILED, worst " + c.worst
	}
	limit := fmt.Sprintf("%g * max(1,|ref|)", CheckTolerance)
	if c.extra > 0 {
		limit += fmt.Sprintf(" + %.3g (the cooperative-matrix bound, SEMANTICS.md §9.3)", c.extra)
	}
	return fmt.Sprintf("check vs float64 reference: max abs err %.3g, max rel err %.3g (where |ref| >= %g); limit %s: %s",
		float64(c.MaxAbs), float64(c.MaxRel), RelFloor, limit, verdict)
}

// Worst names the worst element relative to its limit, for messages.
func (c *Check) Worst() string { return c.worst }

// GradCheck is the verdict of a comparison of gradients with the
// reference (grad, mha and additive --check): the largest error and the
// worst over its bound, GradTolerance * max(1, max|reference|) of its
// tensor.
type GradCheck struct {
	MaxAbs Number `json:"max_abs_err"`
	Ratio  Number `json:"worst_over_bound"`
	Pass   bool   `json:"pass"`
	worst  string
}

// GradTolerance is GradCheck's bound relative to each tensor's largest
// reference magnitude (at least 1).
const GradTolerance = 1e-4

// Add compares gradient name, got, with the reference, want.
func (c *GradCheck) Add(name string, got []float32, want []float64) {
	top := 1.0
	for _, w := range want {
		top = math.Max(top, math.Abs(w))
	}
	for i := range got {
		e := math.Abs(float64(got[i]) - want[i])
		if math.IsNaN(e) {
			e = math.Inf(1)
		}
		c.MaxAbs = Number(math.Max(float64(c.MaxAbs), e))
		if r := e / (GradTolerance * top); r > float64(c.Ratio) || math.IsInf(r, 1) {
			c.Ratio = Number(r)
			c.worst = fmt.Sprintf("%s[%d] = %v, reference %v", name, i, got[i], want[i])
		}
	}
	c.Pass = float64(c.Ratio) <= 1
}

// Worst names the worst element relative to its bound, for messages.
func (c *GradCheck) Worst() string { return c.worst }
