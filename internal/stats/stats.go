// Package stats summarises measured times.
package stats

import (
	"slices"
	"time"
)

// Summary is the least, median and most of a set of times.
type Summary struct{ Min, Median, Max time.Duration }

// Of summarises ts (zero for none); the median of an even count is the
// mean of the middle two.
func Of(ts []time.Duration) Summary {
	if len(ts) == 0 {
		return Summary{}
	}
	s := slices.Clone(ts)
	slices.Sort(s)
	n := len(s)
	med := s[n/2]
	if n%2 == 0 {
		med = (s[n/2-1] + s[n/2]) / 2
	}
	return Summary{Min: s[0], Median: med, Max: s[n-1]}
}
