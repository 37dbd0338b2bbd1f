package random

import (
	"math"
	"math/rand/v2"
	"slices"
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

// QKV draws Q, K and V in that order, each of its shape: the same values
// as three draws of the generator.
func TestQKVShapesAndOrder(t *testing.T) {
	in, shapes := QKV(rand.New(rand.NewPCG(3, 4)), Normal, 2, 4, 2, 3, 5, 6, 7)
	if want := [3][4]int{{2, 4, 3, 6}, {2, 2, 5, 6}, {2, 2, 5, 7}}; shapes != want {
		t.Fatalf("shapes %v, want %v", shapes, want)
	}
	r := rand.New(rand.NewPCG(3, 4))
	for i, s := range shapes {
		want := Normal(r, s[0]*s[1]*s[2]*s[3])
		if !slices.Equal(in[i], want) {
			t.Fatalf("input %d: %d values %v..., want %d values %v...", i, len(in[i]), in[i][:2], len(want), want[:2])
		}
	}
}
