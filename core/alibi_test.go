package core_test

import (
	"testing"

	"github.com/vkattn/vkattn/core"
)

// ALiBiSlopes against the values of Press et al. (2022), written out: for
// a power of two n, 2^(-8/n), 2^(-16/n), ...; otherwise the slopes of the
// largest power of two n below h, then every other slope of 2n from the
// first. Needs no device.
func TestALiBiSlopes(t *testing.T) {
	const (
		p1 = 0.5 // 2^-1
		p2 = 0.25
		p3 = 0.125
		p4 = 0.0625
		p5 = 0.03125
		p6 = 0.015625
		p7 = 0.0078125
		p8 = 0.00390625 // 2^-8
	)
	for _, c := range []struct {
		h    int
		want []float32
	}{
		{8, []float32{p1, p2, p3, p4, p5, p6, p7, p8}},
		{4, []float32{p2, p4, p6, p8}},
		{6, []float32{p2, p4, p6, p8, p1, p3}}, // n = 4's four, then 2n = 8's 1st and 3rd
		{1, []float32{p8}},
		{0, nil},
	} {
		got := core.ALiBiSlopes(c.h)
		if len(got) != len(c.want) {
			t.Fatalf("ALiBiSlopes(%d) = %v, want %v", c.h, got, c.want)
		}
		for i := range got {
			if got[i] != c.want[i] { // powers of two: exact
				t.Fatalf("ALiBiSlopes(%d)[%d] = %v, want %v", c.h, i, got[i], c.want[i])
			}
		}
	}
}
