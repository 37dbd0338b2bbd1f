package harness

import (
	"context"
	"testing"

	"github.com/vkattn/vkattn/internal/devtest"
	"github.com/vkattn/vkattn/tune"
)

// The cascade suite times its three calls, the merge and the full
// attentions, every rep, and reports their medians.
func TestCascadeMeasuresBothWays(t *testing.T) {
	dev := devtest.Dev
	cs := CascadeSuite{Prefix: 64, Suffix: 16, Sequences: 2, Rows: 2, H: 2, HKV: 1, D: 16}
	ticks := 0
	rs, err := cs.Cascade(context.Background(), dev, 2, 1, &tune.Clock{}, func() { ticks++ })
	if err != nil {
		t.Fatal(err)
	}
	if len(rs) != 1 || ticks != 2 {
		t.Fatalf("%d results, %d ticks; want 1 and 2", len(rs), ticks)
	}
	r := rs[0]
	if r.CascadeSuite != cs || !(r.CascadeNS > 0 && r.MergeNS > 0 && r.FullNS > 0) ||
		!(r.Speedup > 0) || r.Speedup != float64(r.FullNS)/float64(r.CascadeNS) {
		t.Errorf("result %+v", r)
	}
}
