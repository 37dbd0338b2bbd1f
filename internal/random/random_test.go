package random

import (
	"math"
	"math/rand/v2"
	"testing"
)

func TestDistributions(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	const n = 100000
	u, z := Uniform(r, n), Normal(r, n)
	var su, sz, sz2 float64
	for i := range u {
		if !(u[i] >= -1 && u[i] < 1) {
			t.Fatalf("uniform value %v outside [-1, 1)", u[i])
		}
		su += float64(u[i])
		sz += float64(z[i])
		sz2 += float64(z[i]) * float64(z[i])
	}
	// Means within 5 standard errors; the normal's variance within 2%.
	if !(math.Abs(su/n) <= 5/math.Sqrt(3*n)) || !(math.Abs(sz/n) <= 5/math.Sqrt(n)) || !(math.Abs(sz2/n-1) <= 0.02) {
		t.Errorf("uniform mean %v, normal mean %v and variance %v", su/n, sz/n, sz2/n)
	}
}
