package stats

import (
	"testing"
	"time"
)

func TestOf(t *testing.T) {
	for _, c := range []struct {
		ts   []time.Duration
		want Summary
	}{
		{nil, Summary{}},
		{[]time.Duration{5}, Summary{5, 5, 5}},
		{[]time.Duration{9, 1, 5}, Summary{1, 5, 9}},
		{[]time.Duration{4, 1, 2, 9}, Summary{1, 3, 9}},
	} {
		if got := Of(c.ts); got != c.want {
			t.Errorf("Of(%v) = %+v, want %+v", c.ts, got, c.want)
		}
	}
}
