// Package tune measures launch shapes of vkattn's attention kernel on a
// device and chooses a tuning from the measurements: the search behind
// `vkattn tune`, usable without the CLI.
//
// Run starts from the device's current tuning (open the device with
// vkattn.Config{DefaultTuning: true} to measure against the quirk-table
// defaults) and covers its preferred load path only. For each head width
// d of Config.Widths (its d_max bucket, DMax(d), is the next power of two
// >= 16) the candidates are the query rows per invocation of
// core.RowChoices with rows*d_max <= MaxBody, times the workgroups of
// WorkGroups; the default is always a candidate. Each is timed on a
// prefill problem, B=1, H=4, L=S=Config.Length, d_k=d_v=d, random data:
// Prepare and one call ("cold": the first use of a variant compiles it),
// then Config.Reps timed calls; GFLOP/s is Dims.FLOPs over the median GPU
// time (wall time without device timestamps). Split-K keys per lane
// (SplitKeys) are then timed on DecodeDims of the widest width with the
// chosen rows and workgroup.
//
// Timings on a shared machine vary by +-20%, so a change must win clearly:
// Choose and ChooseSplit keep a default unless a candidate is MinGain
// faster. Run leaves the device with the tuning it had; saving the chosen
// one (Device.SaveTuning) is the caller's decision.
package tune

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"time"

	"github.com/vkattn/vkattn"
	"github.com/vkattn/vkattn/core"
	"github.com/vkattn/vkattn/pipelines"
)

// WorkGroups are the workgroup sizes tried unless Config.WorkGroups says,
// those a device plans (WorkGroupsOn).
var WorkGroups = []int{8, 16, 32, 64}

// WorkGroupsOn is WorkGroups less those the planner would widen to whole
// subgroups on dev (8 where lavapipe runs 16 lanes): they would plan as
// another candidate. Workgroups given in Config are tried as asked.
func WorkGroupsOn(dev core.DeviceInfo) []int {
	return slices.DeleteFunc(slices.Clone(WorkGroups), func(wg int) bool { return pipelines.WholeSubgroups(dev, wg) != wg })
}

// SplitKeys are the split-K keys per lane tried unless Config.SplitKeys
// says.
var SplitKeys = []int{32, 64, 128, 256}

// MaxBody bounds rows*d_max of a candidate: bigger unrolled bodies compile
// for minutes on lavapipe.
const MaxBody = 512

// MinGain is how much faster (GFLOP/s) a candidate must be to replace a
// default: timings on a shared machine vary by about 20%.
const MinGain = 1.05

// DMaxBuckets are the head-width buckets a tuning holds rows for, in
// order: the planner's.
var DMaxBuckets = slices.Clone(core.DMaxBuckets)

// DMax is the kernel's d_max bucket of head width d: the next power of two
// at least 16.
func DMax(d int) int {
	b := 16
	for b < d {
		b *= 2
	}
	return b
}

// DecodeDims is the split-K problem for head width d: grouped-query decode,
// one query row over 4096 keys.
func DecodeDims(d int) vkattn.Dims {
	return vkattn.Dims{B: 1, H: 32, HKV: 8, L: 1, S: 4096, DK: d, DV: d}
}

// CheckWidths checks head widths to tune: each within the row kernels'
// limit (wider heads run on the tiled kernels, which Run does not tune)
// and at most one per d_max bucket (a bucket has one rows setting).
func CheckWidths(ds []int) error {
	seen := map[int]int{}
	for _, d := range ds {
		if d < 1 || d > core.MaxRowWidth {
			return fmt.Errorf("head width %d: want 1..%d", d, core.MaxRowWidth)
		}
		b := DMax(d)
		if prev, ok := seen[b]; ok {
			return fmt.Errorf("widths %d and %d are both in d_max bucket %d: give one per bucket", prev, d, b)
		}
		seen[b] = d
	}
	return nil
}

// Progress is told of every step of a Run: done of total steps (one per
// call: a cold call or a timed one) and what is being measured. It is
// called from Run's goroutine, before and after each step.
type Progress func(done, total int, what string)

// Config says what Run measures.
type Config struct {
	Widths []int  // head widths, one per d_max bucket (CheckWidths)
	Reps   int    // timed calls per candidate, after one cold call; at least 1
	Length int    // L = S of the prefill problem; at least 1
	Seed   uint64 // of the random Q, K and V
	// WorkGroups and SplitKeys replace the package's candidate lists when
	// not empty.
	WorkGroups []int
	SplitKeys  []int
	Progress   Progress // may be nil
}

func (c *Config) check() error {
	switch {
	case len(c.Widths) == 0:
		return errors.New("tune: no head width to tune")
	case c.Reps < 1:
		return fmt.Errorf("tune: %d timed calls per candidate: want at least 1", c.Reps)
	case c.Length < 1:
		return fmt.Errorf("tune: prefill length %d: want at least 1", c.Length)
	}
	for _, wg := range c.WorkGroups {
		if wg < 1 {
			return fmt.Errorf("tune: workgroup %d: want at least 1", wg)
		}
	}
	for _, k := range c.SplitKeys {
		if k < 1 {
			return fmt.Errorf("tune: %d split-K keys per lane: want at least 1", k)
		}
	}
	if err := CheckWidths(c.Widths); err != nil {
		return fmt.Errorf("tune: %w", err)
	}
	return nil
}

// Result is one measured candidate.
type Result struct {
	D         int         `json:"d"`
	DMax      int         `json:"d_max"`
	Rows      int         `json:"rows"`
	WorkGroup int         `json:"workgroup"`
	SplitKeys int         `json:"split_keys,omitempty"` // split-K candidates
	Dims      vkattn.Dims `json:"dims"`
	Default   bool        `json:"default"` // the starting tuning's shape
	Winner    bool        `json:"winner"`  // in the chosen tuning
	Error     string      `json:"error,omitempty"`
	Variant   string      `json:"variant,omitempty"`
	Reps      int         `json:"reps"`
	ColdNS    int64       `json:"cold_ns"` // Prepare and the first call (compiles)
	GPU       Stats       `json:"gpu_ns"`  // all 0 without device timestamps
	Wall      Stats       `json:"wall_ns"`
	Timing    string      `json:"timing"` // "gpu" or "wall": what GFLOP/s divides by
	MedianNS  int64       `json:"median_ns"`
	FLOPs     float64     `json:"flops"`
	GFLOPS    float64     `json:"gflops"`
}

// OK reports whether the candidate ran and has a rate.
func (r Result) OK() bool { return r.Error == "" && r.GFLOPS > 0 }

// Report is what Run measured and chose.
type Report struct {
	Device  string
	Path    vkattn.LoadPath // the load path tuned
	Reps    int
	Default vkattn.Tuning // the tuning Run started from
	// Candidates are the prefill candidates, width by width in
	// Config.Widths order, each width's default first.
	Candidates []Result
	SplitK     []Result
	SplitNote  string      // why split-K was not measured, if it was not
	Decode     vkattn.Dims // the split-K problem
	// Chosen is the tuning the measurements pick, its Source saying so
	// ("vkattn tune DATE: ..."); Default when Interrupted.
	Chosen vkattn.Tuning
	// Interrupted: ctx was cancelled; what was measured is kept, nothing
	// chosen.
	Interrupted bool
}

// Run measures the candidates on dev and chooses among them (see the
// package comment). A candidate that fails (a workgroup over the device's
// limits, or one the planner would clamp) is recorded in its Result, not
// returned; the error is for a problem that cannot be set up at all. A
// cancelled ctx stops the measurements and returns the Report so far with
// Interrupted set.
func Run(ctx context.Context, dev *vkattn.Device, cfg Config) (*Report, error) {
	if err := cfg.check(); err != nil {
		return nil, err
	}
	wgs, splitKeys := WorkGroupsOn(dev.Info()), SplitKeys
	if len(cfg.WorkGroups) > 0 {
		wgs = cfg.WorkGroups
	}
	if len(cfg.SplitKeys) > 0 {
		splitKeys = cfg.SplitKeys
	}
	def := dev.Tuning()
	// def is the device's own, so setting it back cannot fail.
	defer dev.SetTuning(def)
	path := def.Path
	rep := &Report{Device: dev.String(), Path: path, Reps: cfg.Reps, Default: def, Chosen: def,
		Decode: DecodeDims(slices.Max(cfg.Widths))}

	var groups [][]Result
	total := 0
	for _, d := range cfg.Widths {
		g := candidates(def.For(path), d, cfg.Length, wgs)
		total += len(g)
		groups = append(groups, g)
	}
	keys := splitCandidates(def.For(path).SplitKeys, splitKeys)
	total += len(keys)
	prog := &progress{total: total * (1 + cfg.Reps), report: cfg.Progress}
	r := rand.New(rand.NewPCG(cfg.Seed, 0x74756e65)) // "tune"

	for gi, g := range groups {
		in, err := UploadRandom(dev, r, g[0].Dims)
		if err != nil {
			return nil, fmt.Errorf("d=%d: %w", cfg.Widths[gi], err)
		}
		for i := range g {
			c := &g[i]
			prog.describe(fmt.Sprintf("d_max %d rows %d wg %d", c.DMax, c.Rows, c.WorkGroup))
			t := def.Clone()
			pt := t.For(path)
			pt.Rows[c.DMax], pt.WorkGroup = c.Rows, c.WorkGroup
			measure(ctx, dev, t, in, c, cfg.Reps, prog)
			if ctx.Err() != nil {
				rep.Interrupted = true
				break
			}
		}
		in.Close()
		if rep.Interrupted {
			break
		}
	}
	collect := func() {
		for _, g := range groups {
			rep.Candidates = append(rep.Candidates, g...)
		}
	}
	if rep.Interrupted {
		collect()
		return rep, nil
	}

	// Winners of the prefill buckets.
	chosen := def.Clone()
	wg, rows := Choose(def.For(path).WorkGroup, def.For(path).Rows, groups)
	pt := chosen.For(path)
	pt.WorkGroup = wg
	for _, g := range groups {
		for i := range g {
			g[i].Winner = g[i].WorkGroup == wg && g[i].Rows == rows[g[i].DMax]
		}
		pt.Rows[g[0].DMax] = rows[g[0].DMax]
	}
	collect()

	// Split-K with the chosen rows and workgroup.
	rep.SplitK, rep.SplitNote, rep.Interrupted = measureSplit(ctx, dev, chosen, rep.Decode, keys, r, cfg.Reps, prog)
	if rep.Interrupted {
		return rep, nil
	}
	if rep.SplitNote == "" {
		k := ChooseSplit(def.For(path).SplitKeys, rep.SplitK)
		chosen.For(path).SplitKeys = k
		for i := range rep.SplitK {
			rep.SplitK[i].Winner = rep.SplitK[i].SplitKeys == k
		}
	}
	chosen.Source = source(chosen, def, cfg.Widths, cfg.Length, time.Now())
	rep.Chosen = chosen
	return rep, nil
}

// candidates are the prefill candidates of width d, the default first.
func candidates(def *core.PathTuning, d, length int, wgs []int) []Result {
	b := DMax(d)
	dims := vkattn.Dims{B: 1, H: 4, HKV: 4, L: length, S: length, DK: d, DV: d}
	var cs []Result
	add := func(rows, wg int) {
		for _, c := range cs {
			if c.Rows == rows && c.WorkGroup == wg {
				return
			}
		}
		cs = append(cs, Result{D: d, DMax: b, Rows: rows, WorkGroup: wg, Dims: dims,
			Default: rows == def.Rows[b] && wg == def.WorkGroup})
	}
	add(def.Rows[b], def.WorkGroup)
	for _, wg := range wgs {
		for _, rows := range core.RowChoices {
			if rows*b <= MaxBody {
				add(rows, wg)
			}
		}
	}
	return cs
}

// splitCandidates are the split-K keys per lane to try: the default first
// when it is not among keys.
func splitCandidates(def int, keys []int) []int {
	if slices.Contains(keys, def) {
		return slices.Clone(keys)
	}
	return append([]int{def}, keys...)
}

// progress counts Run's steps for Config.Progress.
type progress struct {
	done, total int
	what        string
	report      Progress
}

func (p *progress) describe(what string) {
	p.what = what
	if p.report != nil {
		p.report(p.done, p.total, p.what)
	}
}

func (p *progress) add(n int) {
	p.done += n
	if p.report != nil {
		p.report(p.done, p.total, p.what)
	}
}

// measure times candidate c with tuning t: Prepare and one cold call, then
// reps timed calls. A failure is recorded in c, not returned; the progress
// advances by 1+reps either way.
func measure(ctx context.Context, dev *vkattn.Device, t vkattn.Tuning, in Inputs, c *Result, reps int, prog *progress) {
	c.Reps = reps
	c.FLOPs = c.Dims.FLOPs()
	done := 0
	defer func() { prog.add(1 + reps - done) }()
	fail := func(err error) { c.Error = err.Error() }
	// The candidates are shapes of the row kernels: measure those even
	// where the device's plans use the tiled GPU kernels, which are not
	// tuned yet (the chosen tuning keeps them as the defaults have them).
	t.Tiled = nil
	if err := dev.SetTuning(t); err != nil {
		fail(err)
		return
	}
	start := time.Now()
	call, err := dev.Prepare(in.Q, in.K, in.V, vkattn.Options{})
	if err != nil {
		fail(err)
		return
	}
	defer call.Close()
	if _, err := call.Run(ctx); err != nil {
		fail(err)
		return
	}
	c.ColdNS = int64(time.Since(start))
	prog.add(1)
	done++
	k := call.Output().Plan.Kernel
	c.Variant = k.Variant
	if k.Rows != c.Rows || k.WorkGroup != c.WorkGroup || (c.SplitKeys > 0 && k.SplitKeys != c.SplitKeys) {
		// The planner clamped the shape: this is not the candidate.
		fail(fmt.Errorf("planned rows %d, workgroup %d, split keys %d instead", k.Rows, k.WorkGroup, k.SplitKeys))
		return
	}
	tm, err := TimeRuns(ctx, call, reps, func() { prog.add(1); done++ })
	if err != nil {
		fail(err)
		return
	}
	c.GPU, c.Wall, c.Timing, c.MedianNS = tm.GPU, tm.Wall, tm.Timing, int64(tm.Median)
	if tm.Median > 0 {
		c.GFLOPS = c.FLOPs / tm.Median.Seconds() / 1e9
	}
}

// measureSplit measures split-K keys per lane on the decode problem d with
// t's rows and workgroup. note says why nothing was measured (the device
// does not split the decode problem); interrupted reports a cancelled ctx.
func measureSplit(ctx context.Context, dev *vkattn.Device, t vkattn.Tuning, d vkattn.Dims, keys []int, r *rand.Rand, reps int, prog *progress) (res []Result, note string, interrupted bool) {
	pt := t.For(t.Path)
	skip := func(err error) ([]Result, string, bool) {
		prog.add(len(keys) * (1 + reps))
		return nil, fmt.Sprintf("split-K not measured: %v", err), false
	}
	t.Tiled = nil // the row kernels' split-K, as measure times it
	if err := dev.SetTuning(t); err != nil {
		return skip(err)
	}
	plan, err := dev.Plan([]int{d.B, d.H, d.L, d.DK}, []int{d.B, d.HKV, d.S, d.DK}, []int{d.B, d.HKV, d.S, d.DV}, vkattn.Options{})
	if err != nil {
		return skip(err)
	}
	if plan.Kernel.Splits == 0 {
		return skip(fmt.Errorf("the %s kernel does not split the decode problem on this device", plan.Kernel.Variant))
	}
	in, err := UploadRandom(dev, r, d)
	if err != nil {
		return skip(err)
	}
	defer in.Close()
	b := DMax(d.DK)
	for _, k := range keys {
		// Rows as the planner packs this shape's rows (at most its packed
		// rows per KV head); only the split keys vary.
		c := Result{D: d.DK, DMax: b, Rows: plan.Kernel.Rows, WorkGroup: pt.WorkGroup, SplitKeys: k, Dims: d,
			Default: k == pt.SplitKeys}
		prog.describe(fmt.Sprintf("split-K %d keys", k))
		ct := t.Clone()
		ct.For(ct.Path).SplitKeys = k
		measure(ctx, dev, ct, in, &c, reps, prog)
		res = append(res, c)
		if ctx.Err() != nil {
			return res, "", true
		}
	}
	return res, "", false
}
