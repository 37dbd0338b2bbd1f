package tune

import (
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/vkattn/vkattn"
	"github.com/vkattn/vkattn/core"
)

// Choose picks the workgroup and the rows of each measured d_max bucket.
// groups holds each bucket's candidates (one bucket per group, as Run
// measures them); defWG and defRows are the default workgroup and rows by
// d_max bucket. For each workgroup, each bucket takes its fastest rows at
// it (at the default workgroup the default rows unless others are MinGain
// faster), and the workgroup is scored by the geometric mean of those
// rates over the buckets; a workgroup other than the default must score
// MinGain over the defaults'. Rows of buckets not measured are not
// returned.
func Choose(defWG int, defRows map[int]int, groups [][]Result) (int, map[int]int) {
	var measured [][]Result
	for _, cs := range groups {
		if len(cs) > 0 {
			measured = append(measured, cs)
		}
	}
	groups = measured
	find := func(cs []Result, rows, wg int) float64 {
		for _, c := range cs {
			if c.Rows == rows && c.WorkGroup == wg && c.OK() {
				return c.GFLOPS
			}
		}
		return 0
	}
	// at is the configuration at workgroup wg and its score (nil, 0: a
	// bucket has no working candidate there).
	at := func(wg int) (map[int]int, float64) {
		rows := map[int]int{}
		logSum := 0.0
		for _, cs := range groups {
			b := cs[0].DMax
			best, bestG := 0, 0.0
			for _, c := range cs {
				if c.WorkGroup == wg && c.OK() && c.GFLOPS > bestG {
					best, bestG = c.Rows, c.GFLOPS
				}
			}
			if wg == defWG {
				if g := find(cs, defRows[b], wg); g > 0 && bestG < MinGain*g {
					best, bestG = defRows[b], g
				}
			}
			if bestG == 0 {
				return nil, 0
			}
			rows[b] = best
			logSum += math.Log(bestG)
		}
		return rows, math.Exp(logSum / float64(len(groups)))
	}
	// The defaults' score: 0 if a default failed, so that any workgroup
	// that works everywhere may replace it.
	logSum, defScore := 0.0, 0.0
	for _, cs := range groups {
		g := find(cs, defRows[cs[0].DMax], defWG)
		if g == 0 {
			logSum = math.Inf(-1)
			break
		}
		logSum += math.Log(g)
	}
	if !math.IsInf(logSum, -1) {
		defScore = math.Exp(logSum / float64(len(groups)))
	}

	bestWG := defWG
	bestRows, bestScore := at(defWG)
	if bestRows == nil {
		// Nothing ran at the default workgroup: keep the default rows
		// unless another workgroup works.
		bestRows = map[int]int{}
		for _, cs := range groups {
			bestRows[cs[0].DMax] = defRows[cs[0].DMax]
		}
	}
	var wgs []int
	for _, cs := range groups {
		for _, c := range cs {
			if !slices.Contains(wgs, c.WorkGroup) {
				wgs = append(wgs, c.WorkGroup)
			}
		}
	}
	for _, wg := range wgs {
		if wg == defWG {
			continue
		}
		rows, score := at(wg)
		if rows != nil && score >= MinGain*defScore && score > bestScore {
			bestWG, bestRows, bestScore = wg, rows, score
		}
	}
	return bestWG, bestRows
}

// ChooseSplit is the split-K keys per lane of the fastest candidate of rs
// if it is MinGain faster than the default def, else def.
func ChooseSplit(def int, rs []Result) int {
	defG := 0.0
	for _, r := range rs {
		if r.SplitKeys == def && r.OK() {
			defG = r.GFLOPS
		}
	}
	best, bestG := def, defG
	for _, r := range rs {
		if r.OK() && r.GFLOPS > bestG && r.GFLOPS >= MinGain*defG {
			best, bestG = r.SplitKeys, r.GFLOPS
		}
	}
	return best
}

// source is the chosen tuning's Source: the date and a short summary.
func source(t, def vkattn.Tuning, ds []int, length int, now time.Time) string {
	pt := t.For(t.Path)
	var parts []string
	for _, b := range core.DMaxBuckets {
		if slices.ContainsFunc(ds, func(d int) bool { return DMax(d) == b }) {
			parts = append(parts, fmt.Sprintf("d_max %d: %d rows", b, pt.Rows[b]))
		}
	}
	changed := "defaults kept"
	if !sameShape(t, def) {
		changed = "changed from the defaults"
	}
	return fmt.Sprintf("vkattn tune %s: %s path, %s, workgroup %d, split-K %d keys (measured at L=S=%d; %s)",
		now.Format("2006-01-02"), t.Path, strings.Join(parts, ", "), pt.WorkGroup, pt.SplitKeys, length, changed)
}

// sameShape reports whether a and b launch their preferred path alike in
// everything Run tunes.
func sameShape(a, b vkattn.Tuning) bool {
	pa, pb := a.For(a.Path), b.For(b.Path)
	if a.Path != b.Path || pa.WorkGroup != pb.WorkGroup || pa.SplitKeys != pb.SplitKeys {
		return false
	}
	for _, d := range core.DMaxBuckets {
		if pa.Rows[d] != pb.Rows[d] {
			return false
		}
	}
	return true
}
