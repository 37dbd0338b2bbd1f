package tune

import (
	"strings"
	"testing"
	"time"
)

// The estimate a signal prints comes from the calls before the one in
// flight.
func TestClockEstimate(t *testing.T) {
	now := time.Now()
	for i, c := range []struct {
		clock *Clock
		want  string
	}{
		{&Clock{}, "stopping"},
		{&Clock{start: now.Add(-2 * time.Second), last: 10 * time.Second}, "running for 2s: about 8s more (the last call took 10s)"},
		{&Clock{start: now.Add(-2 * time.Second), last: 2500 * time.Millisecond}, "stopping"},
		{&Clock{start: now.Add(-30 * time.Second), last: 10 * time.Second}, "running for 30s"},
		{&Clock{start: now.Add(-time.Second), first: 95 * time.Second}, "running for 1s: at most about 1m34s more (the first call, compiling included, took 1m35s)"},
		{&Clock{start: now.Add(-time.Second), cold: true, first: 5 * time.Second}, "first of its kernel variant, which compiles it (the last such call took 5s)"},
	} {
		if got := c.clock.Estimate(); got != c.want && (c.want == "stopping" || !strings.Contains(got, c.want)) {
			t.Errorf("case %d: %q, want %q", i, got, c.want)
		}
	}
	var c Clock
	c.Begin(true)
	c.Lap()
	c.Lap()
	if c.first == 0 || c.cold || c.start.IsZero() {
		t.Errorf("after a cold call and a warm one: first %v, cold %v, start %v", c.first, c.cold, c.start)
	}
	c.Idle()
	if c.Estimate() != "stopping" {
		t.Errorf("idle: %q", c.Estimate())
	}
}
