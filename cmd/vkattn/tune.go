package main

import (
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/vkattn/vkattn"
	"github.com/vkattn/vkattn/tune"
)

const tuneUsage = `Usage: vkattn tune [--device N|NAME] [--d 64,128] [--reps N] [--dry-run] [--json]

Measures launch shapes of the attention kernel on a device and saves the
fastest as the device's tuning: every later run (all vkattn commands, and
vkattn.Open in programs) plans with it instead of the quirk-table defaults.

The tuned shapes are those of the row kernels. Where the device plans
with the tiled GPU kernels (NVIDIA, AMD and Intel drivers, or --plan-as),
their tiles come from the quirk table and are kept as they are: tune then
measures the row kernels, which run additive attention and forced paths.

Tuning starts from the quirk-table defaults (a tuning saved earlier is
ignored) and covers the device's preferred load path only (texel on
lavapipe). For each head width d of --d (its d_max bucket is the next power
of two >= 16: d=64 tunes bucket 64, d=100 bucket 128):
  candidates  query rows per invocation in 1, 2, 4, 8 with rows*d_max <= 512
              (bigger unrolled bodies compile for minutes on lavapipe), times
              workgroups of 8, 16, 32 and 64 invocations (less those
              narrower than the device's one subgroup width, which plan as
              whole subgroups); the default is always a candidate. A
              candidate the device cannot run (a workgroup over its
              limits) is reported as failed and skipped.
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
~/.cache/vkattn on Linux, %LocalAppData%\vkattn on Windows,
~/Library/Caches/vkattn on macOS; one file per device and driver build) and
its path printed. To go back to the defaults, delete that file, or open the
device with vkattn.Config{DefaultTuning: true} in a program.

The default run (--d 64,128) compiles about 30 variants: 1-3 minutes on
lavapipe. --len shrinks the prefill problem (faster, noisier); it is at
most 32768, --reps at most 1000000.

Ctrl-C (SIGINT, SIGTERM, SIGHUP) stops at the next call, prints what was
measured and saves nothing; a long call stops at its next submission,
but a part on the device or a kernel compiling cannot be stopped, so
stderr says how long it may still take, and a second signal quits at
once. The exit status is then 128 + the signal (130).

Examples:
  vkattn tune                          # tune d=64 and d=128, save
  vkattn tune --d 64 --reps 5 --dry-run
  vkattn tune --d 32,64,128,256 --json > tuning.json
  vkattn tune --device 1
`

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
	for _, f := range strings.Split(s, ",") {
		f = strings.TrimSpace(f)
		d, err := strconv.Atoi(f)
		if err != nil {
			return fmt.Errorf("%q is not an integer (want head widths like 64,128)", f)
		}
		ds = append(ds, d)
	}
	if err := tune.CheckWidths(ds); err != nil {
		return err
	}
	l.ds = ds
	return nil
}

// tuneReport is the --json output.
type tuneReport struct {
	Device     string        `json:"device"`
	LoadPath   string        `json:"load_path"`
	Reps       int           `json:"reps"`
	Default    vkattn.Tuning `json:"default"`
	Candidates []tune.Result `json:"candidates"`
	SplitK     []tune.Result `json:"split_k"`
	SplitNote  string        `json:"split_k_note,omitempty"` // why split-K was not measured
	Tuning     vkattn.Tuning `json:"tuning"`                 // the chosen one
	Saved      string        `json:"saved,omitempty"`        // its file; empty with --dry-run
}

type tuneFlags struct {
	device deviceChoice
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
	deviceFlag(fs, &f.device)
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
	if code := checkRanges(stderr, "tune", rangeError("--reps", f.reps, 1, maxReps), rangeError("--len", f.length, 1, maxTuneLen)); code != exitOK {
		return code
	}
	if len(f.ds.ds) == 0 {
		return usagef(stderr, "tune", "--d: want at least one head width")
	}

	// The defaults, not an earlier tune: every candidate is measured
	// against the quirk table.
	dev, err := vkattn.Open(f.device.with(vkattn.Config{DefaultTuning: true}))
	if err != nil {
		return failf(stderr, "tune", "%v", err)
	}
	defer dev.Close()

	// The bar is made at the first report, which says how many steps.
	var prog *benchProgress
	var progMu sync.Mutex // prog is made here and cleared by a signal's note
	clock := &tune.Clock{}
	ctx, stop := interruptible("tune", func() string {
		progMu.Lock()
		if prog != nil {
			prog.clear()
		}
		progMu.Unlock()
		return clock.Estimate()
	})
	defer stop()
	what, lastDone := "", 0
	progress := func(done, total int, desc string) {
		progMu.Lock()
		if prog == nil {
			prog = newBenchProgress(stderr, f.quiet, total)
		}
		progMu.Unlock()
		// A new candidate starts with its cold call (Prepare and the
		// first call); every step done ends a call and starts the next.
		switch {
		case desc != what:
			what = desc
			prog.describe(desc)
			clock.Begin(true)
		case done > lastDone:
			clock.Lap()
		}
		lastDone = done
		prog.set(done)
	}
	rep, err := tune.Run(ctx, dev, tune.Config{Widths: f.ds.ds, Reps: f.reps, Length: f.length, Seed: f.seed, Progress: progress})
	clock.Idle()
	if prog != nil {
		prog.finish()
	}
	stop()
	if err != nil {
		return failf(stderr, "tune", "%v", err)
	}

	report := tuneReport{Device: rep.Device, LoadPath: rep.Path.String(), Reps: rep.Reps, Default: rep.Default,
		Candidates: nonNil(rep.Candidates), SplitK: nonNil(rep.SplitK), SplitNote: rep.SplitNote, Tuning: rep.Chosen}
	if rep.Interrupted {
		if f.json {
			writeTuneJSON(stdout, report)
		} else {
			printTuneTable(stdout, rep)
		}
		return failf(stderr, "tune", "interrupted: nothing saved")
	}

	if !f.dryRun {
		if report.Saved, err = dev.SaveTuning(rep.Chosen); err != nil {
			report.Saved = ""
			if f.json {
				writeTuneJSON(stdout, report)
			} else {
				printTuneTable(stdout, rep)
			}
			return failf(stderr, "tune", "saving the tuning: %v", err)
		}
	}
	if f.json {
		if err := writeTuneJSON(stdout, report); err != nil {
			return failf(stderr, "tune", "%v", err)
		}
		return exitOK
	}
	printTuneTable(stdout, rep)
	printTuneChoice(stdout, rep, f.ds.ds)
	if f.dryRun {
		fmt.Fprintln(stdout, "dry run: not saved")
	} else {
		fmt.Fprintf(stdout, "saved to %s, used by later runs; delete it or pass DefaultTuning to go back\n", report.Saved)
	}
	return exitOK
}

func nonNil(rs []tune.Result) []tune.Result {
	if rs == nil {
		return []tune.Result{}
	}
	return rs
}

func writeTuneJSON(w io.Writer, rep tuneReport) error { return printJSON(w, rep) }

// printTuneTable writes the candidates and split-K results as one aligned
// table.
func printTuneTable(w io.Writer, rep *tune.Report) {
	fmt.Fprintf(w, "device: %s\n", rep.Device)
	fmt.Fprintf(w, "load path: %s; defaults: %s\n", rep.Path, rep.Default.Source)
	header := []string{"problem", "candidate", "cold", "median ms", "GFLOP/s", ""}
	rows := [][]string{header}
	row := func(problem, cand string, r tune.Result) {
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
	for _, r := range rep.Candidates {
		d := r.Dims
		row(fmt.Sprintf("d=%d (d_max %d) L=S=%d", r.D, r.DMax, d.L), fmt.Sprintf("rows %d, wg %d", r.Rows, r.WorkGroup), r)
	}
	for _, r := range rep.SplitK {
		row("decode split-K", fmt.Sprintf("%d keys (rows %d, wg %d)", r.SplitKeys, r.Rows, r.WorkGroup), r)
	}
	printAligned(w, rows, map[int]bool{0: true, 1: true, 5: true})
	if rep.SplitNote != "" {
		fmt.Fprintln(w, rep.SplitNote)
	}
	reps := 0
	if len(rep.Candidates) > 0 {
		reps = rep.Candidates[0].Reps
	}
	fmt.Fprintf(w, "prefill: B=1 H=4, no mask; decode: %s. Cold: Prepare and the first call (compiles the variant).\n", rep.Decode)
	fmt.Fprintf(w, "Median of %d timed calls (GPU time; wall where marked); GFLOP/s = 4*B*H*L*S*d over it. Noise is about +-20%%:\n", reps)
	fmt.Fprintf(w, "a candidate replaces a default only if at least %d%% faster.\n", int(math.Round((tune.MinGain-1)*100)))
}

// printTuneChoice says what changed from the defaults.
func printTuneChoice(w io.Writer, rep *tune.Report, ds []int) {
	pd, pt := rep.Default.For(rep.Path), rep.Chosen.For(rep.Path)
	fmt.Fprintf(w, "chosen (%s path):", rep.Path)
	change := func(name string, was, now int) string {
		if was == now {
			return fmt.Sprintf(" %s %d (default)", name, now)
		}
		return fmt.Sprintf(" %s %d (default %d)", name, now, was)
	}
	var parts []string
	for _, b := range tune.DMaxBuckets {
		if slices.ContainsFunc(ds, func(d int) bool { return tune.DMax(d) == b }) {
			parts = append(parts, change(fmt.Sprintf("d_max %d rows", b), pd.Rows[b], pt.Rows[b]))
		}
	}
	parts = append(parts, change("workgroup", pd.WorkGroup, pt.WorkGroup), change("split-K keys", pd.SplitKeys, pt.SplitKeys))
	fmt.Fprintln(w, strings.Join(parts, ","))
	fmt.Fprintf(w, "source: %s\n", rep.Chosen.Source)
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
