package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"os"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/vkattn/vkattn"
	"github.com/vkattn/vkattn/pipelines"
)

const tuneUsage = `Usage: vkattn tune [--device N|NAME] [--d 64,128] [--reps N] [--dry-run] [--json]

Measures launch shapes of the attention kernel on a device and saves the
fastest as the device's tuning: every later run (all vkattn commands, and
vkattn.Open in programs) plans with it instead of the quirk-table defaults.

Tuning starts from the quirk-table defaults (a tuning saved earlier is
ignored) and covers the device's preferred load path only (texel on
lavapipe). For each head width d of --d (its d_max bucket is the next power
of two >= 16: d=64 tunes bucket 64, d=100 bucket 128):
  candidates  query rows per invocation in 1, 2, 4, 8 with rows*d_max <= 512
              (bigger unrolled bodies compile for minutes on lavapipe), times
              workgroups of 8, 16, 32 and 64 invocations; the default is
              always a candidate. A candidate the device cannot run (a
              workgroup over its limits) is reported as failed and skipped.
  problem     prefill B=1, H=4, L=S=512 (--len), d_k=d_v=d, no mask,
              random data (fixed seed)
  timing      Prepare and one call, reported apart as "cold" (the first
              use of a variant compiles it: 0.5-9 s on lavapipe, most for
              rows*d_max = 512), then --reps timed calls of the prepared
              call; median GPU time (wall time without device timestamps);
              GFLOP/s = 4*B*H*L*S*d over the median
Then split-K decode: B=1, H=32, H_kv=8, L=1, S=4096, d = the widest --d
(128 by default) with 32, 64, 128 and 256 keys per lane (and the default),
using the chosen rows for its d_max bucket and the chosen workgroup.

Choosing (timings on a shared machine vary by +-20%, lavapipe on a busy CPU
more, so a change must win clearly; more --reps steady the medians, and a
second run shows what is noise):
  - a bucket's winner is its fastest candidate, but it replaces the default
    only if it is at least 5% faster (GFLOP/s) than the default;
  - the workgroup is one for all buckets of a path: with several --d each
    workgroup is scored by the geometric mean over the buckets of their
    fastest rows at it (at the default workgroup a bucket keeps its default
    rows unless others are 5% faster), and a workgroup other than the
    default needs a score 5% over the defaults';
  - split-K keys per lane likewise: the fastest, if 5% over the default.
Buckets not measured keep their defaults. The tuning's source reads
"vkattn tune DATE: ..." with a short summary.

Output: a table on stdout (candidate, cold time, median ms, GFLOP/s; "<-"
marks the winners, "default" the defaults) and a progress bar on stderr
(--quiet hides it); --json prints the measurements and the chosen tuning as
one JSON object instead. Unless --dry-run, the tuning is saved in the user
cache directory (vkattn.TuningFile: $XDG_CACHE_HOME/vkattn or
~/.cache/vkattn on Linux, one file per device and driver build) and its path
printed. To go back to the defaults, delete that file, or open the device
with vkattn.Config{DefaultTuning: true} in a program.

The default run (--d 64,128) compiles about 30 variants: 1-3 minutes on
lavapipe. --len shrinks the prefill problem (faster, noisier).

Examples:
  vkattn tune                          # tune d=64 and d=128, save
  vkattn tune --d 64 --reps 5 --dry-run
  vkattn tune --d 32,64,128,256 --json > tuning.json
  vkattn tune --device 1
`

// tuneWorkGroups are the workgroup sizes tune tries.
var tuneWorkGroups = []int{8, 16, 32, 64}

// tuneSplitKeys are the split-K keys per lane tune tries.
var tuneSplitKeys = []int{32, 64, 128, 256}

// tuneMaxBody bounds rows*d_max: bigger unrolled bodies compile for minutes
// on lavapipe.
const tuneMaxBody = 512

// tuneMinGain is how much faster a candidate must be to replace a default.
const tuneMinGain = 1.05

// tuneDecode is the split-K problem for head width d.
func tuneDecode(d int) vkattn.Dims {
	return vkattn.Dims{B: 1, H: 32, HKV: 8, L: 1, S: 4096, DK: d, DV: d}
}

// widthList is --d: comma-separated head widths, one per d_max bucket.
type widthList struct{ ds []int }

func (l *widthList) String() string {
	if l == nil {
		return ""
	}
	var s []string
	for _, d := range l.ds {
		s = append(s, strconv.Itoa(d))
	}
	return strings.Join(s, ",")
}

func (l *widthList) Set(s string) error {
	var ds []int
	seen := map[int]int{}
	for _, f := range strings.Split(s, ",") {
		f = strings.TrimSpace(f)
		d, err := strconv.Atoi(f)
		if err != nil {
			return fmt.Errorf("%q is not an integer (want head widths like 64,128)", f)
		}
		if d < 1 || d > pipelines.MaxHeadWidth {
			return fmt.Errorf("head width %d: want 1..%d", d, pipelines.MaxHeadWidth)
		}
		b := dMaxOf(d)
		if prev, ok := seen[b]; ok {
			return fmt.Errorf("widths %d and %d are both in d_max bucket %d: give one per bucket", prev, d, b)
		}
		seen[b] = d
		ds = append(ds, d)
	}
	l.ds = ds
	return nil
}

// dMaxOf is the kernel's d_max bucket of head width d.
func dMaxOf(d int) int {
	b := 16
	for b < d {
		b *= 2
	}
	return b
}

// tuneResult is one measured candidate: a row of the table, an element of
// the --json candidates or split_k array.
type tuneResult struct {
	D         int         `json:"d"`
	DMax      int         `json:"d_max"`
	Rows      int         `json:"rows"`
	WorkGroup int         `json:"workgroup"`
	SplitKeys int         `json:"split_keys,omitempty"` // split-K candidates
	Dims      vkattn.Dims `json:"dims"`
	Default   bool        `json:"default"` // the quirk-table default
	Winner    bool        `json:"winner"`  // in the chosen tuning
	Error     string      `json:"error,omitempty"`
	Variant   string      `json:"variant,omitempty"`
	Reps      int         `json:"reps"`
	ColdNS    int64       `json:"cold_ns"` // Prepare and the first call (compiles)
	GPU       benchStats  `json:"gpu_ns"`  // all 0 without device timestamps
	Wall      benchStats  `json:"wall_ns"`
	Timing    string      `json:"timing"` // "gpu" or "wall": what GFLOP/s divides by
	MedianNS  int64       `json:"median_ns"`
	FLOPs     float64     `json:"flops"`
	GFLOPS    float64     `json:"gflops"`
}

func (r tuneResult) ok() bool { return r.Error == "" && r.GFLOPS > 0 }

// tuneReport is the --json output.
type tuneReport struct {
	Device     string        `json:"device"`
	LoadPath   string        `json:"load_path"`
	Reps       int           `json:"reps"`
	Default    vkattn.Tuning `json:"default"`
	Candidates []tuneResult  `json:"candidates"`
	SplitK     []tuneResult  `json:"split_k"`
	SplitNote  string        `json:"split_k_note,omitempty"` // why split-K was not measured
	Tuning     vkattn.Tuning `json:"tuning"`                 // the chosen one
	Saved      string        `json:"saved,omitempty"`        // its file; empty with --dry-run
}

type tuneFlags struct {
	device string
	ds     widthList
	reps   int
	length int
	seed   uint64
	dryRun bool
	json   bool
	quiet  bool
}

func runTune(args []string, stdout, stderr io.Writer) int {
	fs := newFlags("tune", stderr)
	f := tuneFlags{ds: widthList{ds: []int{64, 128}}}
	fs.StringVar(&f.device, "device", "", "device `N|NAME`: index or part of its name (see 'vkattn devices'); default: the best one")
	fs.Var(&f.ds, "d", "head `widths` to tune, comma-separated, one per d_max bucket (16, 32, 64, 128, 256)")
	fs.IntVar(&f.reps, "reps", 3, "timed calls per candidate, after one cold call")
	fs.IntVar(&f.length, "len", 512, "L=S of the prefill problem (smaller is faster and noisier)")
	fs.Uint64Var(&f.seed, "seed", 1, "random `seed` for Q, K and V")
	fs.BoolVar(&f.dryRun, "dry-run", false, "measure and print, but do not save the tuning")
	fs.BoolVar(&f.json, "json", false, "print measurements and the chosen tuning as JSON instead of the table")
	fs.BoolVar(&f.quiet, "quiet", false, "no progress bar on stderr")
	if ok, code := parseFlags(fs, tuneUsage, args, stdout, stderr); !ok {
		return code
	}
	if f.reps < 1 {
		return usagef(stderr, "tune", "--reps %d: want at least 1", f.reps)
	}
	if f.length < 1 {
		return usagef(stderr, "tune", "--len %d: want at least 1", f.length)
	}
	if len(f.ds.ds) == 0 {
		return usagef(stderr, "tune", "--d: want at least one head width")
	}

	// The defaults, not an earlier tune: every candidate is measured
	// against the quirk table.
	dev, err := vkattn.Open(vkattn.Config{Device: f.device, DefaultTuning: true})
	if err != nil {
		return failf(stderr, "tune", "%v", err)
	}
	defer dev.Close()
	def := dev.Tuning()
	path := def.Path

	// Candidates per width, the default first.
	type group struct {
		d     int
		cands []tuneResult
	}
	var groups []group
	total := 0
	for _, d := range f.ds.ds {
		g := group{d: d}
		b := dMaxOf(d)
		pt := def.For(path)
		dims := vkattn.Dims{B: 1, H: 4, HKV: 4, L: f.length, S: f.length, DK: d, DV: d}
		add := func(rows, wg int) {
			for _, c := range g.cands {
				if c.Rows == rows && c.WorkGroup == wg {
					return
				}
			}
			g.cands = append(g.cands, tuneResult{D: d, DMax: b, Rows: rows, WorkGroup: wg, Dims: dims,
				Default: rows == pt.Rows[b] && wg == pt.WorkGroup})
		}
		add(pt.Rows[b], pt.WorkGroup)
		for _, wg := range tuneWorkGroups {
			for _, rows := range pipelines.RowChoices {
				if rows*b <= tuneMaxBody {
					add(rows, wg)
				}
			}
		}
		total += len(g.cands)
		groups = append(groups, g)
	}
	splitCands := len(tuneSplitKeys)
	if !slices.Contains(tuneSplitKeys, def.For(path).SplitKeys) {
		splitCands++
	}
	total += splitCands

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	prog := newBenchProgress(stderr, f.quiet, total*(1+f.reps))
	interrupted := false
	r := rand.New(rand.NewPCG(f.seed, 0x74756e65)) // "tune"

	var all []tuneResult
	for gi := range groups {
		g := &groups[gi]
		in, err := uploadRandom(dev, r, g.cands[0].Dims)
		if err != nil {
			prog.finish()
			return failf(stderr, "tune", "d=%d: %v", g.d, err)
		}
		for i := range g.cands {
			c := &g.cands[i]
			prog.describe(fmt.Sprintf("d_max %d rows %d wg %d", c.DMax, c.Rows, c.WorkGroup))
			t := def.Clone()
			pt := t.For(path)
			pt.Rows[c.DMax], pt.WorkGroup = c.Rows, c.WorkGroup
			tuneMeasure(ctx, dev, t, in, c, f.reps, prog)
			if ctx.Err() != nil {
				interrupted = true
				break
			}
		}
		closeAll(in)
		if interrupted {
			break
		}
	}

	// Winners of the prefill buckets.
	chosen := def.Clone()
	if !interrupted {
		var byBucket [][]tuneResult
		for _, g := range groups {
			byBucket = append(byBucket, g.cands)
		}
		wg, rows := tuneChoose(def.For(path).WorkGroup, def.For(path).Rows, byBucket)
		pt := chosen.For(path)
		pt.WorkGroup = wg
		for gi := range groups {
			for i := range groups[gi].cands {
				c := &groups[gi].cands[i]
				c.Winner = c.WorkGroup == wg && c.Rows == rows[c.DMax]
			}
			pt.Rows[groups[gi].cands[0].DMax] = rows[groups[gi].cands[0].DMax]
		}
	}
	for _, g := range groups {
		all = append(all, g.cands...)
	}

	// Split-K with the chosen rows and workgroup.
	decode := tuneDecode(slices.Max(f.ds.ds))
	var split []tuneResult
	splitNote := ""
	if !interrupted {
		split, splitNote, interrupted = tuneSplit(ctx, dev, chosen, decode, r, f.reps, prog)
		if !interrupted && splitNote == "" {
			keys := tuneChooseSplit(def.For(path).SplitKeys, split)
			chosen.For(path).SplitKeys = keys
			for i := range split {
				split[i].Winner = split[i].SplitKeys == keys
			}
		}
	}
	prog.finish()
	stop()

	if interrupted {
		if f.json {
			writeTuneJSON(stdout, tuneReport{Device: dev.String(), LoadPath: path.String(), Reps: f.reps,
				Default: def, Candidates: nonNil(all), SplitK: nonNil(split), Tuning: def})
		} else {
			printTuneTable(stdout, dev.String(), path, def, all, split, splitNote, decode)
		}
		return failf(stderr, "tune", "interrupted: nothing saved")
	}
	chosen.Source = tuneSource(chosen, def, f.ds.ds, f.length)

	saved := ""
	if !f.dryRun {
		if saved, err = dev.SaveTuning(chosen); err != nil {
			if f.json {
				writeTuneJSON(stdout, tuneReport{Device: dev.String(), LoadPath: path.String(), Reps: f.reps,
					Default: def, Candidates: nonNil(all), SplitK: nonNil(split), SplitNote: splitNote, Tuning: chosen})
			} else {
				printTuneTable(stdout, dev.String(), path, def, all, split, splitNote, decode)
			}
			return failf(stderr, "tune", "saving the tuning: %v", err)
		}
	}
	if f.json {
		if err := writeTuneJSON(stdout, tuneReport{Device: dev.String(), LoadPath: path.String(), Reps: f.reps,
			Default: def, Candidates: nonNil(all), SplitK: nonNil(split), SplitNote: splitNote, Tuning: chosen, Saved: saved}); err != nil {
			return failf(stderr, "tune", "%v", err)
		}
		return exitOK
	}
	printTuneTable(stdout, dev.String(), path, def, all, split, splitNote, decode)
	printTuneChoice(stdout, path, def, chosen, f.ds.ds)
	if f.dryRun {
		fmt.Fprintln(stdout, "dry run: not saved")
	} else {
		fmt.Fprintf(stdout, "saved to %s, used by later runs; delete it or pass DefaultTuning to go back\n", saved)
	}
	return exitOK
}

func nonNil(rs []tuneResult) []tuneResult {
	if rs == nil {
		return []tuneResult{}
	}
	return rs
}

func writeTuneJSON(w io.Writer, rep tuneReport) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(rep)
}

// uploadRandom uploads random Q, K and V of a problem.
func uploadRandom(dev *vkattn.Device, r *rand.Rand, d vkattn.Dims) ([3]*vkattn.Tensor, error) {
	var in [3]*vkattn.Tensor
	shapes := [][]int{{d.B, d.H, d.L, d.DK}, {d.B, d.HKV, d.S, d.DK}, {d.B, d.HKV, d.S, d.DV}}
	for i, s := range shapes {
		t, err := dev.Upload(s, randomData(r, s[0]*s[1]*s[2]*s[3]))
		if err != nil {
			closeAll(in)
			return in, fmt.Errorf("upload: %w", err)
		}
		in[i] = t
	}
	return in, nil
}

func closeAll(ts [3]*vkattn.Tensor) {
	for _, t := range ts {
		if t != nil {
			t.Close()
		}
	}
}

// tuneMeasure times candidate c with tuning t: Prepare and one cold call,
// then reps timed calls. A failure is recorded in c, not returned; the
// progress bar advances by 1+reps either way.
func tuneMeasure(ctx context.Context, dev *vkattn.Device, t vkattn.Tuning, in [3]*vkattn.Tensor, c *tuneResult, reps int, prog *benchProgress) {
	c.Reps = reps
	c.FLOPs = c.Dims.FLOPs()
	done := 0
	defer func() {
		for ; done < 1+reps; done++ {
			prog.add()
		}
	}()
	fail := func(err error) { c.Error = err.Error() }
	if err := dev.SetTuning(t); err != nil {
		fail(err)
		return
	}
	start := time.Now()
	call, err := dev.Prepare(in[0], in[1], in[2], vkattn.Options{})
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
	prog.add()
	done++
	k := call.Output().Plan.Kernel
	c.Variant = k.Variant.Name()
	if k.Rows != c.Rows || k.WorkGroup != c.WorkGroup || (c.SplitKeys > 0 && k.SplitKeys != c.SplitKeys) {
		// The planner clamped the shape: this is not the candidate.
		fail(fmt.Errorf("planned rows %d, workgroup %d, split keys %d instead", k.Rows, k.WorkGroup, k.SplitKeys))
		return
	}
	gpu := make([]time.Duration, reps)
	wall := make([]time.Duration, reps)
	for i := range reps {
		s := time.Now()
		g, err := call.Run(ctx)
		if err != nil {
			fail(err)
			return
		}
		wall[i], gpu[i] = time.Since(s), g
		prog.add()
		done++
	}
	c.GPU, c.Wall, c.Timing = statsOf(gpu), statsOf(wall), "gpu"
	median := time.Duration(c.GPU.Median)
	if slices.Contains(gpu, 0) {
		c.GPU, c.Timing = benchStats{}, "wall"
		median = time.Duration(c.Wall.Median)
	}
	c.MedianNS = int64(median)
	if median > 0 {
		c.GFLOPS = c.FLOPs / median.Seconds() / 1e9
	}
}

// tuneChoose picks the workgroup and the rows of each measured bucket (see
// tuneUsage): for each workgroup, each bucket's fastest rows at it (at the
// default workgroup the default rows unless others are tuneMinGain
// faster), scored by the geometric mean over the buckets; a workgroup other
// than the default must score tuneMinGain over the defaults. groups holds
// each bucket's candidates; rows of buckets not measured are not returned.
func tuneChoose(defWG int, defRows map[int]int, groups [][]tuneResult) (int, map[int]int) {
	find := func(cs []tuneResult, rows, wg int) float64 {
		for _, c := range cs {
			if c.Rows == rows && c.WorkGroup == wg && c.ok() {
				return c.GFLOPS
			}
		}
		return 0
	}
	// at is the configuration at workgroup wg and its score (0: a bucket
	// has no working candidate there).
	at := func(wg int) (map[int]int, float64) {
		rows := map[int]int{}
		logSum := 0.0
		for _, cs := range groups {
			if len(cs) == 0 {
				continue
			}
			b := cs[0].DMax
			best, bestG := 0, 0.0
			for _, c := range cs {
				if c.WorkGroup == wg && c.ok() && c.GFLOPS > bestG {
					best, bestG = c.Rows, c.GFLOPS
				}
			}
			if wg == defWG {
				if g := find(cs, defRows[b], wg); g > 0 && bestG < tuneMinGain*g {
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
	// The defaults' score.
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
	wgs := []int{}
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
		if rows != nil && score >= tuneMinGain*defScore && score > bestScore {
			bestWG, bestRows, bestScore = wg, rows, score
		}
	}
	return bestWG, bestRows
}

// tuneSplit measures split-K keys per lane on the decode problem d with
// t's rows and workgroup. note says why nothing was measured (the device
// does not split the decode problem); interrupted reports Ctrl-C.
func tuneSplit(ctx context.Context, dev *vkattn.Device, t vkattn.Tuning, d vkattn.Dims, r *rand.Rand, reps int, prog *benchProgress) (res []tuneResult, note string, interrupted bool) {
	pt := t.For(t.Path)
	keys := slices.Clone(tuneSplitKeys)
	if !slices.Contains(keys, pt.SplitKeys) {
		keys = append([]int{pt.SplitKeys}, keys...)
	}
	skip := func() {
		for range len(keys) * (1 + reps) {
			prog.add()
		}
	}
	if err := dev.SetTuning(t); err != nil {
		skip()
		return nil, fmt.Sprintf("split-K not measured: %v", err), false
	}
	plan, err := dev.Plan([]int{d.B, d.H, d.L, d.DK}, []int{d.B, d.HKV, d.S, d.DK}, []int{d.B, d.HKV, d.S, d.DV}, vkattn.Options{})
	if err != nil {
		skip()
		return nil, fmt.Sprintf("split-K not measured: %v", err), false
	}
	if plan.Kernel.Splits == 0 {
		skip()
		return nil, fmt.Sprintf("split-K not measured: the %s kernel does not split the decode problem on this device", plan.Kernel.Variant), false
	}
	in, err := uploadRandom(dev, r, d)
	if err != nil {
		skip()
		return nil, fmt.Sprintf("split-K not measured: %v", err), false
	}
	defer closeAll(in)
	b := dMaxOf(d.DK)
	for _, k := range keys {
		c := tuneResult{D: d.DK, DMax: b, Rows: pt.Rows[b], WorkGroup: pt.WorkGroup, SplitKeys: k, Dims: d,
			Default: k == pt.SplitKeys}
		prog.describe(fmt.Sprintf("split-K %d keys", k))
		ct := t.Clone()
		ct.For(ct.Path).SplitKeys = k
		tuneMeasure(ctx, dev, ct, in, &c, reps, prog)
		res = append(res, c)
		if ctx.Err() != nil {
			return res, "", true
		}
	}
	return res, "", false
}

// tuneChooseSplit is the fastest split-K candidate if tuneMinGain faster
// than the default, else the default.
func tuneChooseSplit(def int, rs []tuneResult) int {
	defG := 0.0
	for _, r := range rs {
		if r.SplitKeys == def && r.ok() {
			defG = r.GFLOPS
		}
	}
	best, bestG := def, defG
	for _, r := range rs {
		if r.ok() && r.GFLOPS > bestG && r.GFLOPS >= tuneMinGain*defG {
			best, bestG = r.SplitKeys, r.GFLOPS
		}
	}
	return best
}

// tuneSource is the chosen tuning's Source: the date and a short summary.
func tuneSource(t, def vkattn.Tuning, ds []int, length int) string {
	pt := t.For(t.Path)
	var parts []string
	for _, b := range pipelines.DMaxBuckets {
		if slices.ContainsFunc(ds, func(d int) bool { return dMaxOf(d) == b }) {
			parts = append(parts, fmt.Sprintf("d_max %d: %d rows", b, pt.Rows[b]))
		}
	}
	changed := "defaults kept"
	if !tuningEqual(t, def) {
		changed = "changed from the defaults"
	}
	return fmt.Sprintf("vkattn tune %s: %s path, %s, workgroup %d, split-K %d keys (measured at L=S=%d; %s)",
		time.Now().Format("2006-01-02"), t.Path, strings.Join(parts, ", "), pt.WorkGroup, pt.SplitKeys, length, changed)
}

func tuningEqual(a, b vkattn.Tuning) bool {
	pa, pb := a.For(a.Path), b.For(b.Path)
	if a.Path != b.Path || pa.WorkGroup != pb.WorkGroup || pa.SplitKeys != pb.SplitKeys {
		return false
	}
	for _, d := range pipelines.DMaxBuckets {
		if pa.Rows[d] != pb.Rows[d] {
			return false
		}
	}
	return true
}

// printTuneTable writes the candidates and split-K results as one aligned
// table.
func printTuneTable(w io.Writer, device string, path vkattn.LoadPath, def vkattn.Tuning, rs, split []tuneResult, splitNote string, decode vkattn.Dims) {
	fmt.Fprintf(w, "device: %s\n", device)
	fmt.Fprintf(w, "load path: %s; defaults: %s\n", path, def.Source)
	header := []string{"problem", "candidate", "cold", "median ms", "GFLOP/s", ""}
	rows := [][]string{header}
	row := func(problem, cand string, r tuneResult) {
		var mark []string
		if r.Default {
			mark = append(mark, "default")
		}
		if r.Winner {
			mark = append(mark, "<- chosen")
		}
		if r.Error != "" {
			rows = append(rows, []string{problem, cand, "", "", "", "failed: " + r.Error})
			return
		}
		cold := durString(time.Duration(r.ColdNS))
		med := strconv.FormatFloat(float64(r.MedianNS)/1e6, 'f', 3, 64)
		if r.Timing == "wall" {
			med += " (wall)"
		}
		rows = append(rows, []string{problem, cand, cold, med, rate(r.GFLOPS), strings.Join(mark, " ")})
	}
	for _, r := range rs {
		d := r.Dims
		row(fmt.Sprintf("d=%d (d_max %d) L=S=%d", r.D, r.DMax, d.L), fmt.Sprintf("rows %d, wg %d", r.Rows, r.WorkGroup), r)
	}
	for _, r := range split {
		row("decode split-K", fmt.Sprintf("%d keys (rows %d, wg %d)", r.SplitKeys, r.Rows, r.WorkGroup), r)
	}
	printAligned(w, rows, map[int]bool{0: true, 1: true, 5: true})
	if splitNote != "" {
		fmt.Fprintln(w, splitNote)
	}
	reps := 0
	if len(rs) > 0 {
		reps = rs[0].Reps
	}
	fmt.Fprintf(w, "prefill: B=1 H=4, no mask; decode: %s. Cold: Prepare and the first call (compiles the variant).\n", decode)
	fmt.Fprintf(w, "Median of %d timed calls (GPU time; wall where marked); GFLOP/s = 4*B*H*L*S*d over it. Noise is about +-20%%:\n", reps)
	fmt.Fprintf(w, "a candidate replaces a default only if at least %d%% faster.\n", int(math.Round((tuneMinGain-1)*100)))
}

// printTuneChoice says what changed from the defaults.
func printTuneChoice(w io.Writer, path vkattn.LoadPath, def, t vkattn.Tuning, ds []int) {
	pd, pt := def.For(path), t.For(path)
	fmt.Fprintf(w, "chosen (%s path):", path)
	change := func(name string, was, now int) string {
		if was == now {
			return fmt.Sprintf(" %s %d (default)", name, now)
		}
		return fmt.Sprintf(" %s %d (default %d)", name, now, was)
	}
	var parts []string
	for _, b := range pipelines.DMaxBuckets {
		if slices.ContainsFunc(ds, func(d int) bool { return dMaxOf(d) == b }) {
			parts = append(parts, change(fmt.Sprintf("d_max %d rows", b), pd.Rows[b], pt.Rows[b]))
		}
	}
	parts = append(parts, change("workgroup", pd.WorkGroup, pt.WorkGroup), change("split-K keys", pd.SplitKeys, pt.SplitKeys))
	fmt.Fprintln(w, strings.Join(parts, ","))
	fmt.Fprintf(w, "source: %s\n", t.Source)
}

// printAligned writes rows as columns two spaces apart: left-aligned where
// left says so, right-aligned otherwise; trailing blanks trimmed.
func printAligned(w io.Writer, rows [][]string, left map[int]bool) {
	var width []int
	for _, row := range rows {
		for i, c := range row {
			if i >= len(width) {
				width = append(width, 0)
			}
			width[i] = max(width[i], utf8.RuneCountInString(c))
		}
	}
	for _, row := range rows {
		var b strings.Builder
		for i, c := range row {
			if i > 0 {
				b.WriteString("  ")
			}
			pad := strings.Repeat(" ", width[i]-utf8.RuneCountInString(c))
			if left[i] {
				b.WriteString(c + pad)
			} else {
				b.WriteString(pad + c)
			}
		}
		fmt.Fprintln(w, strings.TrimRight(b.String(), " "))
	}
}
