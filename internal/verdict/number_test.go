package verdict

import (
	"math"
	"testing"
)

func TestNumberJSON(t *testing.T) {
	for _, x := range []float64{math.Inf(-1), math.Inf(1), 1.5} {
		b, err := Number(x).MarshalJSON()
		if err != nil {
			t.Fatal(err)
		}
		var n Number
		if err := n.UnmarshalJSON(b); err != nil || float64(n) != x {
			t.Errorf("%v -> %s -> %v, %v", x, b, float64(n), err)
		}
	}
}
