package tune

import (
	"errors"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/vkattn/vkattn"
	"github.com/vkattn/vkattn/core"
)

func TestDMaxIsTheNextPowerOfTwoFrom16(t *testing.T) {
	for d, want := range map[int]int{1: 16, 16: 16, 17: 32, 64: 64, 100: 128, 129: 256, 256: 256} {
		if got := DMax(d); got != want {
			t.Errorf("DMax(%d) = %d, want %d", d, got, want)
		}
	}
}

func TestCheckWidthsWantsOnePerBucketWithinTheKernel(t *testing.T) {
	if err := CheckWidths([]int{16, 64, 100, 256}); err != nil {
		t.Errorf("valid widths: %v", err)
	}
	for _, c := range []struct {
		ds   []int
		want string
	}{
		{[]int{0}, "head width 0: want 1..256"},
		{[]int{core.MaxRowWidth + 1}, "head width 257"},
		{[]int{64, 60}, "widths 64 and 60 are both in d_max bucket 64"},
	} {
		if err := CheckWidths(c.ds); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("CheckWidths(%v) = %v, want an error with %q", c.ds, err, c.want)
		}
	}
}

func TestConfigCheckNamesTheBadField(t *testing.T) {
	ok := Config{Widths: []int{64}, Reps: 1, Length: 8}
	if err := ok.check(); err != nil {
		t.Fatalf("valid config: %v", err)
	}
	for want, mod := range map[string]func(*Config){
		"no head width":           func(c *Config) { c.Widths = nil },
		"0 timed calls":           func(c *Config) { c.Reps = 0 },
		"prefill length -1":       func(c *Config) { c.Length = -1 },
		"workgroup 0":             func(c *Config) { c.WorkGroups = []int{8, 0} },
		"-4 split-K keys":         func(c *Config) { c.SplitKeys = []int{-4} },
		"both in d_max bucket 16": func(c *Config) { c.Widths = []int{8, 16} },
	} {
		c := ok
		mod(&c)
		if err := c.check(); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%+v: error %v, want one with %q", c, err, want)
		}
	}
}

func TestCandidatesCoverRowsTimesWorkGroupsWithinMaxBody(t *testing.T) {
	def := &core.PathTuning{Rows: map[int]int{16: 8, 256: 4}, WorkGroup: 24}
	for _, c := range []struct {
		d        int
		wantRows []int
	}{{16, []int{1, 2, 4, 8}}, {256, []int{1, 2}}} {
		cs := candidates(def, c.d, 32, WorkGroups)
		b := DMax(c.d)
		// The default comes first, even where rows*d_max > MaxBody (d 256)
		// and its workgroup is not among WorkGroups.
		if len(cs) == 0 || !cs[0].Default || cs[0].Rows != def.Rows[b] || cs[0].WorkGroup != 24 {
			t.Fatalf("d=%d: first candidate %+v, want the default rows %d wg 24", c.d, cs[0], def.Rows[b])
		}
		seen := map[[2]int]bool{}
		for i, r := range cs {
			key := [2]int{r.Rows, r.WorkGroup}
			if seen[key] {
				t.Errorf("d=%d: rows %d wg %d twice", c.d, r.Rows, r.WorkGroup)
			}
			seen[key] = true
			if r.Default != (i == 0) {
				t.Errorf("d=%d: candidate %d %+v: Default %v", c.d, i, r, r.Default)
			}
			if want := (vkattn.Dims{B: 1, H: 4, HKV: 4, L: 32, S: 32, DK: c.d, DV: c.d}); r.Dims != want || r.D != c.d || r.DMax != b {
				t.Errorf("d=%d: candidate %+v, want dims %v", c.d, r, want)
			}
		}
		for _, wg := range WorkGroups {
			for _, rows := range c.wantRows {
				if !seen[[2]int{rows, wg}] {
					t.Errorf("d=%d: no candidate rows %d wg %d", c.d, rows, wg)
				}
			}
		}
		if want := 1 + len(c.wantRows)*len(WorkGroups); len(cs) != want {
			t.Errorf("d=%d: %d candidates, want %d", c.d, len(cs), want)
		}
	}
}

func TestSplitCandidatesPutAMissingDefaultFirst(t *testing.T) {
	if got := splitCandidates(64, SplitKeys); !slices.Equal(got, SplitKeys) {
		t.Errorf("default among the keys: %v, want %v", got, SplitKeys)
	}
	if got := splitCandidates(48, SplitKeys); !slices.Equal(got, append([]int{48}, SplitKeys...)) {
		t.Errorf("default 48: %v", got)
	}
}

// res is a measured prefill candidate of bucket b; gflops 0 is a failure.
func res(b, rows, wg int, gflops float64) Result {
	r := Result{D: b, DMax: b, Rows: rows, WorkGroup: wg, GFLOPS: gflops}
	if gflops == 0 {
		r.Error = "failed"
	}
	return r
}

func TestChooseKeepsDefaultsUnlessClearlyFaster(t *testing.T) {
	defRows := map[int]int{16: 8, 64: 4, 128: 4}
	for _, c := range []struct {
		name     string
		groups   [][]Result
		wantWG   int
		wantRows map[int]int
	}{
		{"a faster rows within the noise stays default",
			[][]Result{{res(16, 8, 8, 100), res(16, 4, 8, 104), res(16, 8, 16, 103)}},
			8, map[int]int{16: 8}},
		{"rows 5% faster at the default workgroup win",
			[][]Result{{res(16, 8, 8, 100), res(16, 4, 8, 106)}},
			8, map[int]int{16: 4}},
		{"a workgroup wins on the geometric mean over buckets",
			// At wg 16: sqrt(130*90) = 108.2 >= 1.05 * 100.
			[][]Result{{res(64, 4, 8, 100), res(64, 4, 16, 130)}, {res(128, 4, 8, 100), res(128, 2, 16, 90)}},
			16, map[int]int{64: 4, 128: 2}},
		{"a workgroup faster in one bucket but slower overall loses",
			// At wg 16: sqrt(120*80) = 98 < 105.
			[][]Result{{res(64, 4, 8, 100), res(64, 4, 16, 120)}, {res(128, 4, 8, 100), res(128, 4, 16, 80)}},
			8, map[int]int{64: 4, 128: 4}},
		{"a workgroup that fails in a bucket is never chosen",
			[][]Result{{res(64, 4, 8, 100), res(64, 4, 32, 500)}, {res(128, 4, 8, 100), res(128, 4, 32, 0)}},
			8, map[int]int{64: 4, 128: 4}},
		{"a failed default gives way to a workgroup that works",
			[][]Result{{res(16, 8, 8, 0), res(16, 2, 8, 0), res(16, 1, 64, 10)}},
			64, map[int]int{16: 1}},
		{"nothing works: the defaults",
			[][]Result{{res(16, 8, 8, 0), res(16, 1, 64, 0)}},
			8, map[int]int{16: 8}},
		{"an empty bucket is skipped",
			[][]Result{{}, {res(16, 8, 8, 100), res(16, 2, 8, 200)}},
			8, map[int]int{16: 2}},
	} {
		wg, rows := Choose(8, defRows, c.groups)
		if wg != c.wantWG || !maps.Equal(rows, c.wantRows) {
			t.Errorf("%s: workgroup %d, rows %v; want %d, %v", c.name, wg, rows, c.wantWG, c.wantRows)
		}
	}
}

func TestChooseSplitNeedsMinGain(t *testing.T) {
	split := func(keys int, gflops float64) Result {
		r := res(128, 4, 8, gflops)
		r.SplitKeys = keys
		return r
	}
	for _, c := range []struct {
		rs   []Result
		want int
	}{
		{[]Result{split(256, 100), split(128, 104)}, 256},
		{[]Result{split(256, 100), split(128, 106), split(64, 110)}, 64},
		{[]Result{split(256, 0), split(128, 10)}, 128},
		{[]Result{split(256, 0), split(128, 0)}, 256},
	} {
		if got := ChooseSplit(256, c.rs); got != c.want {
			t.Errorf("ChooseSplit(256, %+v) = %d, want %d", c.rs, got, c.want)
		}
	}
}

func TestSourceSummarisesTheTunedBuckets(t *testing.T) {
	def := vkattn.Tuning{Path: vkattn.TexelLoadPath,
		Texel: core.PathTuning{Rows: map[int]int{16: 8, 32: 8, 64: 4, 128: 4, 256: 1}, WorkGroup: 8, SplitKeys: 256}}
	now := time.Date(2025, 3, 4, 12, 0, 0, 0, time.UTC)
	got := source(def.Clone(), def, []int{64, 100}, 512, now)
	want := "vkattn tune 2025-03-04: texel path, d_max 64: 4 rows, d_max 128: 4 rows, workgroup 8, split-K 256 keys (measured at L=S=512; defaults kept)"
	if got != want {
		t.Errorf("source:\n%s\nwant\n%s", got, want)
	}
	changed := def.Clone()
	changed.Texel.Rows[256] = 2
	if got := source(changed, def, []int{64}, 512, now); !strings.HasSuffix(got, "changed from the defaults)") || strings.Contains(got, "d_max 256") {
		t.Errorf("a change in a bucket not listed: %s", got)
	}
}

func TestStatsOfTakesTheMiddle(t *testing.T) {
	ms := func(xs ...int) []time.Duration {
		var ds []time.Duration
		for _, x := range xs {
			ds = append(ds, time.Duration(x)*time.Millisecond)
		}
		return ds
	}
	for _, c := range []struct {
		ts   []time.Duration
		want Stats
	}{
		{ms(3), Stats{3e6, 3e6, 3e6}},
		{ms(5, 1, 3), Stats{1e6, 3e6, 5e6}},
		{ms(4, 1, 2, 8), Stats{1e6, 3e6, 8e6}},
		{nil, Stats{}},
	} {
		if got := StatsOf(c.ts); got != c.want {
			t.Errorf("StatsOf(%v) = %+v, want %+v", c.ts, got, c.want)
		}
	}
}

func TestUploadRandomRefusesWhatTheHostCannotFill(t *testing.T) {
	// Refused before any device call, so no device is needed.
	_, err := UploadRandom(nil, nil, vkattn.Dims{B: 1, H: 1, HKV: 1, L: 1 << 20, S: 1 << 20, DK: 1 << 12, DV: 1 << 12})
	if !errors.Is(err, vkattn.ErrTooLarge) {
		t.Errorf("2^32-value Q: %v, want ErrTooLarge", err)
	}
	_, err = UploadRandom(nil, nil, vkattn.Dims{B: 1, H: 3, HKV: 2, L: 1, S: 1, DK: 1, DV: 1})
	if !errors.Is(err, vkattn.ErrHeads) {
		t.Errorf("3 heads over 2: %v, want ErrHeads", err)
	}
}
