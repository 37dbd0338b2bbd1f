package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/schollz/progressbar/v3"

	"github.com/vkattn/vkattn"
	"github.com/vkattn/vkattn/internal/harness"
	"github.com/vkattn/vkattn/tune"
)

const benchUsage = `Usage: vkattn bench [--suite prefill|decode|long|all|decode-loop|fork|cascade|serve|mha-train] [flags]
       vkattn bench --shape B,H,H_kv,L,S,d [--shape ...] [--causal] [flags]
       vkattn bench --mha-train B,L,E,H [flags]

Times attention on random data (fixed seed) and prints one row per
problem shape. Each shape gets one warm-up call, reported apart as "cold"
(the first dispatch of a kernel variant compiles it: seconds on lavapipe),
then --reps timed runs. The call is prepared once (Device.Prepare: outputs
allocated, commands recorded) and replayed, as a decode loop would; for
each run the GPU time (device timestamps) and the wall time (submit and
wait) are recorded; min/median/max of both are reported.

Suites (B=1 and d_k = d_v = d throughout):
  prefill  H=8, L=S in 512, 1024, 2048, 4096, d=64, no mask and causal;
           d=128 at L=S in 1024, 2048, no mask and causal
  decode   H=32, H_kv=8 (grouped-query), L=1, S in 1024, 4096, 16384, d=128
  long     H=1, L=S in 8192, 16384, 32768, d=64 (slow on lavapipe)
  all      every suite above
  decode-loop  steps of a decode loop through a KV cache (vkattn decode's):
           H=32, H_kv=8, d=128, cache lengths 1024, 4096, 16384, 32768 in
           caches of that capacity, and 1024 in a 32768 cache; contiguous
           and paged (256-position pages), f32, f16, q8_0 and q4_0 caches; a
           step (DecodeStep) appends a token, attends with its query and
           reads O back in one submission; cache bytes per token,
           steps/s, cache GB/s and, per step, device allocations,
           submissions, host waits and staged bytes; the cases of one
           length step in turns (not in all: it compiles more variants);
           with --rope the caches rotate keys and queries
  fork     8 continuations of a 4,096-token prompt in a paged cache (256
           positions a page; H=32, H_kv=8, d=128; f32, f16, q8_0, q4_0): the
           prompt appended to one sequence and forked to the others, then
           --reps decode steps of all 8, each its own token; pages and
           bytes in use against 8 independent copies, steps/s
  cascade  8 sequences of 4 query rows sharing a 4,096-token prefix, each
           with 256 tokens of its own (H=8, H_kv=2, d=64): the prefix
           attended once by all 32 rows, the suffixes in one call, merged
           (Device.Merge), against 8 full causal attentions; medians of
           the three calls together, of the merge alone and of the 8
  serve    a server batching its users over one paged KV cache: 64
           requests arriving at 20/s (Poisson; --seed), prompts of 64..512
           tokens and outputs of 16..128, 16 slots, at most 256 new tokens
           and 4 prompt chunks a step (chunked prefill), admission while
           the pool's 384 pages of 16 hold every admitted request (f16,
           H=8, H_kv=2, d=64); every step one ragged step (kv.RaggedStep),
           then the same steps as one call per sequence; generated tokens/s,
           step time and time to first token p50/p99, and per step
           submissions, host waits and staged bytes of the steps that
           allocated nothing (--plan-as nvidia:
           a discrete GPU's plan and counters)
  mha-train  a training step of an nn.MHA self-attention layer (packed
           in_proj with biases, PyTorch's initialisation) at B=4, L=128,
           E=256, H=8: its forward, then its backward (MHA.PrepareBackward:
           every gradient on the device), both prepared once and replayed;
           forward, backward and step times, GFLOP/s of 3x the dense layers'
           count plus 3.5x the attention's; --mha-train B,L,E,H times
           another shape (tools/torch_cpu_backward.py --mha B,L,E,H times
           PyTorch's nn.MultiheadAttention doing the same on the CPU)
Causal rows use the bottom-right alignment (query t sees keys j <= t + S - L).

--shape replaces the suite with your own shapes: six integers B,H,H_kv,L,S,d
(d_k = d_v = d; H_kv must divide H). Repeat the flag, or separate shapes
with ';' ("1,8,8,512,512,64;1,8,8,1024,1024,64"), or list 6n integers.
--causal applies a bottom-right causal mask to every --shape
(--causal=top-left for the other alignment).

Rates, both from the median (GPU time; wall time where the device has no
timestamps, which the "timing" column/field says):
  GFLOP/s  SEMANTICS.md §16 count 2*B*H*L*S*(d_k+d_v) = 4*B*H*L*S*d over the median
           time, halved for causal rows: the kernel skips key tiles that are
           fully masked, so a causal L = S problem does about half the work
  GB/s     bytes of Q, K, V read plus O written over the median time, at
           their element sizes (4 bytes a float32, 2 a half; O is float32):
           the minimum traffic, not a measured one; a decode step (split-K)
           reads each K/V element once, so for decode it is the traffic

--backward times Device.AttentionBackward instead (random dO; the
forward and the backward, one-shot calls: allocations per call show);
its FLOPs are 3.5x the forward's: the forward, then FlashAttention's
count of the backward, 2.5x.

Element types: the random data is float32 unless
  --dtype f16|bf16      stores Q, K and V as that type
  --kv-dtype f16|bf16|q8_0|q4_0|iq4_nl
                        stores K and V so (Q as --dtype, else float32); q8_0,
                        q4_0 and iq4_nl are ggml's 8-bit, 4-bit and 4-bit
                        non-linear blocks of 32 with float16 scales
The kernels widen on load and compute in float32, but for half (f16 or
bf16) Q, K and V on a device with float16 cooperative matrices (vkattn
devices lists them), which multiply on those with P rounded to float16
(SEMANTICS.md §9.3); --fp32-products keeps them in float32 too.

Rotary position embeddings: --rope THETA (with --rope-dims, --rope-style,
--rope-scale as for run) rotates Q and K of every shape first (rope.comp;
its work is not in the FLOP count), and in decode-loop the caches rotate
each appended key and each step's query.

Output: an aligned table on stdout (--json: a JSON array, one object per
shape, times in nanoseconds), a progress bar on stderr (--quiet hides it).
--plot draws GFLOP/s against the sequence length S, one line per series
(same d, heads, causal and L regime); the format follows the extension
(.png, .svg, .pdf). Files are written to a temporary name and renamed.

Every shape is planned before any runs, so one the device cannot run (d
over the kernel's limit, say) fails at once with exit status 1. A shape
that fails while running (out of device memory, say) is reported on
stderr; the others still run and the exit status is 1. Ctrl-C (SIGINT,
SIGTERM, SIGHUP) stops the run at the next call and prints what was
measured so far, with no plot; a long call stops at its next submission
(it is submitted in parts of under a second's work on lavapipe), but a
part on the device or a kernel compiling cannot be stopped, so stderr
says how long it may still take, and a second signal quits at once. The exit status is then 128 + the signal (130).
--reps is at most 1000000.

Examples:
  vkattn bench                                    # prefill suite, 5 reps
  vkattn bench --suite decode --reps 10 --json > decode.json
  vkattn bench --suite all --plot gflops.png
  vkattn bench --shape 1,8,8,2048,2048,64 --causal --reps 3
  vkattn bench --shape '1,2,1,16,16,8;1,2,1,64,64,8' --reps 2 --quiet
  vkattn bench --device 1 --load-path storage     # force a load path
`

// shapeList is --shape: repeatable, each value one or more B,H,H_kv,L,S,d.
type shapeList struct{ dims []vkattn.Dims }

func (l *shapeList) String() string {
	var parts []string
	for _, d := range l.dims {
		parts = append(parts, fmt.Sprintf("%d,%d,%d,%d,%d,%d", d.B, d.H, d.HKV, d.L, d.S, d.DK))
	}
	return strings.Join(parts, ";")
}

func (l *shapeList) Set(s string) error {
	groups := strings.FieldsFunc(s, func(r rune) bool { return r == ';' || r == ' ' || r == '\t' || r == '\n' })
	if len(groups) == 0 {
		return fmt.Errorf("empty shape: want B,H,H_kv,L,S,d")
	}
	for _, g := range groups {
		fields := strings.Split(strings.Trim(g, ","), ",")
		if len(fields)%6 != 0 {
			return fmt.Errorf("%q has %d values: want B,H,H_kv,L,S,d (6 integers per shape)", g, len(fields))
		}
		var n [6]int
		for i, f := range fields {
			x, err := strconv.Atoi(strings.TrimSpace(f))
			if err != nil {
				return fmt.Errorf("%q: %q is not an integer (want B,H,H_kv,L,S,d)", g, f)
			}
			n[i%6] = x
			if i%6 < 5 {
				continue
			}
			d := vkattn.Dims{B: n[0], H: n[1], HKV: n[2], L: n[3], S: n[4], DK: n[5], DV: n[5]}
			q, k, v := [4]int{d.B, d.H, d.L, d.DK}, [4]int{d.B, d.HKV, d.S, d.DK}, [4]int{d.B, d.HKV, d.S, d.DV}
			if _, err := vkattn.CheckProblem(q, k, v, nil); err != nil {
				return fmt.Errorf("B,H,H_kv,L,S,d = %d,%d,%d,%d,%d,%d: %v", n[0], n[1], n[2], n[3], n[4], n[5], err)
			}
			l.dims = append(l.dims, d)
		}
	}
	return nil
}

// causalFlag is --causal: a bool flag meaning bottom-right, which also
// takes an alignment (--causal=top-left).
type causalFlag struct{ c vkattn.Causal }

func (f *causalFlag) IsBoolFlag() bool { return true }
func (f *causalFlag) String() string {
	if f == nil || f.c == vkattn.NotCausal {
		return "false"
	}
	return f.c.String()
}

func (f *causalFlag) Set(s string) error {
	switch s {
	case "true", "1":
		f.c = vkattn.CausalBottomRight
		return nil
	case "false", "0":
		f.c = vkattn.NotCausal
		return nil
	}
	c, err := vkattn.ParseCausal(s)
	if err != nil {
		return fmt.Errorf("%q: want no value (bottom-right), top-left, bottom-right or none", s)
	}
	f.c = c
	return nil
}

type benchFlags struct {
	suite    string
	shapes   shapeList
	causal   causalFlag
	reps     int
	seed     uint64
	json     bool
	plot     string
	device   deviceChoice
	loadPath string
	quiet    bool
	backward bool
	train    trainShape // --mha-train
	// fp32Products is Options.Float32Products.
	fp32Products bool
	typeFlags
	ropeFlags
	rope *vkattn.RoPE // from ropeFlags
}

// benchResult is one shape's measurements: a row of the table, an object of
// the --json array.
type benchResult struct {
	Suite             string      `json:"suite,omitempty"` // empty for --shape
	Dims              vkattn.Dims `json:"dims"`
	Causal            string      `json:"causal"` // none, top-left, bottom-right
	Device            string      `json:"device"`
	vkattn.KernelPlan             // flattened: variant, load_path, d_max, rows, ...
	Plan              string      `json:"plan"`
	Reps              int         `json:"reps"`
	ColdWallNS        int64       `json:"cold_wall_ns"`
	ColdGPUNS         int64       `json:"cold_gpu_ns"`
	GPU               tune.Stats  `json:"gpu_ns"` // all 0 without device timestamps
	Wall              tune.Stats  `json:"wall_ns"`
	Timing            string      `json:"timing"`             // "gpu" or "wall": the median the rates divide by
	FLOPs             float64     `json:"flops"`              // SEMANTICS.md §16, halved when causal
	Bytes             int64       `json:"bytes"`              // Q, K, V read + O written, at their element sizes
	DTypes            [3]string   `json:"dtypes"`             // element types of Q, K and V
	Backward          bool        `json:"backward,omitempty"` // Device.AttentionBackward timed: forward and backward
	GFLOPS            float64     `json:"gflops"`
	GBPS              float64     `json:"gb_per_s"`
	// Per timed call (a prepared call's Run): what a discrete GPU pays
	// beyond the kernels.
	Allocs       int     `json:"allocs_per_call"`
	Submits      float64 `json:"submits_per_call"`
	Waits        float64 `json:"waits_per_call"`
	StagingBytes float64 `json:"staging_bytes_per_call"`
}

func runBench(args []string, stdout, stderr io.Writer) int {
	fs := newFlags("bench", stderr)
	var f benchFlags
	f.register(fs)
	if ok, code := parseFlags(fs, benchUsage, args, stdout, stderr); !ok {
		return code
	}
	var err error
	if f.rope, err = f.ropeFlags.rope(0); err != nil { // against each d when planned
		return usagef(stderr, "bench", "%v", err)
	}
	if code := checkRanges(stderr, "bench", rangeError("--reps", f.reps, 1, maxReps)); code != exitOK {
		return code
	}
	types, err := f.types([3]vkattn.DType{})
	if err != nil {
		return usagef(stderr, "bench", "%v", err)
	}
	if f.backward && (types[1].Quantized() || types[2].Quantized()) {
		return usagef(stderr, "bench", "--backward with --kv-dtype %v: the backward reads float K and V; say f32, f16 or bf16", types[1])
	}
	set := map[string]bool{}
	fs.Visit(func(fl *flag.Flag) { set[fl.Name] = true })
	if f.backward && (f.suite == "decode-loop" || f.suite == "fork" || f.suite == "cascade" || f.suite == "serve") && !set["shape"] {
		return usagef(stderr, "bench", "--backward times the suites prefill, decode, long and all, or --shape")
	}
	if code, ran := runOwnSuite(&f, set, stdout, stderr); ran {
		return code
	}

	var cases []harness.Case
	switch {
	case set["shape"] && set["suite"]:
		return usagef(stderr, "bench", "--suite and --shape are mutually exclusive: a suite is a preset list of shapes")
	case set["shape"]:
		for _, d := range f.shapes.dims {
			cases = append(cases, harness.Case{Dims: d, Causal: f.causal.c})
		}
	case set["causal"]:
		return usagef(stderr, "bench", "--causal applies to --shape; the suites say per shape whether they are causal")
	default:
		if cases = harness.SuiteCases(f.suite); cases == nil {
			return usagef(stderr, "bench", "--suite %q: want prefill, decode, long, all, decode-loop, fork, cascade, serve or mha-train", f.suite)
		}
	}
	for i := range cases {
		cases[i].Types, cases[i].RoPE, cases[i].Backward, cases[i].Float32Products = types, f.rope, f.backward, f.fp32Products
	}
	path, err := vkattn.ParseLoadPath(f.loadPath)
	if err != nil {
		return usagef(stderr, "bench", "--load-path %q: want auto, texel or storage", f.loadPath)
	}
	if f.plot != "" {
		if _, ok := plotFormat(f.plot); !ok {
			return usagef(stderr, "bench", "--plot %s: unknown image format; want a name ending in .png, .svg or .pdf", f.plot)
		}
		if code := checkOutputPaths("bench", stderr, []outputFlag{{"--plot", f.plot}}); code != exitOK {
			return code
		}
		var code int
		if stdout, code = textStreams("bench", f.json, stdout, stderr, []outputFlag{{"--plot", f.plot}}); code != exitOK {
			return code
		}
	}

	return runShapes(&f, cases, path, stdout, stderr)
}

// benchOne measures c (harness.Bench) as a row of the table: clock and tick
// follow the calls.
func benchOne(ctx context.Context, dev *vkattn.Device, c harness.Case, reps int, seed uint64, clock *tune.Clock, tick func()) (benchResult, error) {
	m, err := harness.Bench(ctx, dev, c, reps, seed, clock, tick)
	if err != nil {
		return benchResult{}, err
	}
	plan := m.Plan
	c.Dims = plan.Dims
	res := benchResult{
		Suite:      c.Suite,
		Dims:       plan.Dims,
		Causal:     c.Causal.String(),
		Device:     plan.Device,
		KernelPlan: plan.Kernel,
		Plan:       plan.String(),
		Reps:       reps,
		ColdWallNS: int64(m.ColdWall),
		ColdGPUNS:  int64(m.ColdGPU),
		GPU:        m.GPU,
		Wall:       m.Wall,
		Timing:     m.Timing.Timing,
		FLOPs:      c.FLOPs(),
		Backward:   c.Backward,
		Bytes:      c.Bytes(),
		DTypes:     [3]string{c.Types[0].String(), c.Types[1].String(), c.Types[2].String()},
		Allocs:     m.Cost.Allocations / reps,
		Submits:    float64(m.Cost.Submits) / float64(reps),
		Waits:      float64(m.Cost.Waits) / float64(reps),

		StagingBytes: float64(m.Cost.StagingBytes) / float64(reps),
	}
	if median := m.Median; median > 0 {
		res.GFLOPS = res.FLOPs / median.Seconds() / 1e9
		res.GBPS = float64(res.Bytes) / median.Seconds() / 1e9
	}
	return res, nil
}

// printBenchTable writes the results as an aligned table: numbers right,
// names left.
// rowsColumn is the table's rows: per invocation, or per workgroup ("/wg")
// for the tiled kernels.
func (r benchResult) rowsColumn() string {
	if r.TileRows > 0 {
		return strconv.Itoa(r.TileRows) + "/wg"
	}
	return strconv.Itoa(r.Rows)
}

func printBenchTable(w io.Writer, device string, rs []benchResult) {
	fmt.Fprintf(w, "device: %s\n", device)
	if len(rs) == 0 {
		fmt.Fprintln(w, "no results")
		return
	}
	header := []string{"B", "H", "H_kv", "L", "S", "d", "causal", "kernel", "rows", "wg", "cold", "gpu min/med/max", "wall min/med/max", "GFLOP/s", "GB/s", "submits"}
	left := map[int]bool{6: true, 7: true}
	rows := [][]string{header}
	for _, r := range rs {
		d := r.Dims
		causal := "-"
		if r.Causal != vkattn.NotCausal.String() {
			causal = r.Causal
		}
		dd := strconv.Itoa(d.DK)
		if d.DV != d.DK {
			dd = fmt.Sprintf("%d/%d", d.DK, d.DV)
		}
		gpu := "n/a"
		if r.Timing == "gpu" {
			gpu = durTriple(r.GPU)
		}
		rows = append(rows, []string{
			strconv.Itoa(d.B), strconv.Itoa(d.H), strconv.Itoa(d.HKV), strconv.Itoa(d.L), strconv.Itoa(d.S), dd,
			causal, r.Variant, r.rowsColumn(), strconv.Itoa(r.WorkGroup),
			durString(time.Duration(r.ColdWallNS)), gpu, durTriple(r.Wall), rate(r.GFLOPS), rate(r.GBPS),
			strconv.FormatFloat(r.Submits, 'g', 3, 64),
		})
	}
	printAligned(w, rows, left)
	timing := "median GPU time"
	if slices.ContainsFunc(rs, func(r benchResult) bool { return r.Timing == "wall" }) {
		timing = "median GPU time (wall time where gpu is n/a: no device timestamps)"
	}
	fmt.Fprintf(w, "%d timed calls per shape after one cold call (wall time, includes compiling the variant).\n", rs[0].Reps)
	flops := "4*B*H*L*S*d"
	if rs[0].Backward {
		flops = "3.5 * 4*B*H*L*S*d (the forward, then FlashAttention's 2.5x for the backward)"
	}
	fmt.Fprintf(w, "GFLOP/s: %s (halved when causal) over the %s; GB/s: Q, K, V read + O written over the same.\n", flops, timing)
	fmt.Fprintln(w, "submits: queue submissions per timed call (each a host wait too; --json has allocations and staged bytes per call).")
}

// durTriple formats min/median/max in one unit, the median's.
func durTriple(s tune.Stats) string {
	unit, div := durUnit(time.Duration(s.Median))
	f := func(ns int64) string {
		return strconv.FormatFloat(float64(ns)/div, 'f', 3-digitsBefore(float64(s.Median)/div), 64)
	}
	return fmt.Sprintf("%s/%s/%s %s", f(s.Min), f(s.Median), f(s.Max), unit)
}

func durString(t time.Duration) string {
	unit, div := durUnit(t)
	x := float64(t) / div
	return strconv.FormatFloat(x, 'f', 3-digitsBefore(x), 64) + " " + unit
}

func durUnit(t time.Duration) (string, float64) {
	switch {
	case t >= time.Second:
		return "s", float64(time.Second)
	case t >= time.Millisecond:
		return "ms", float64(time.Millisecond)
	}
	return "µs", float64(time.Microsecond)
}

// digitsBefore is the number of digits before the point (at least 1, at
// most 3 so the result leaves 0 to 2 decimals).
func digitsBefore(x float64) int {
	switch {
	case x >= 100:
		return 3
	case x >= 10:
		return 2
	}
	return 1
}

func rate(x float64) string {
	if x == 0 {
		return "-"
	}
	return strconv.FormatFloat(x, 'f', 3-digitsBefore(x), 64)
}

// benchProgress is the progress bar on stderr, or nothing with --quiet or
// when stderr is not a file (tests).
type benchProgress struct{ bar *progressbar.ProgressBar }

func newBenchProgress(stderr io.Writer, quiet bool, total int) *benchProgress {
	f, ok := stderr.(*os.File)
	if quiet || !ok {
		return &benchProgress{}
	}
	return &benchProgress{bar: progressbar.NewOptions(total,
		progressbar.OptionSetWriter(f),
		progressbar.OptionSetWidth(30),
		progressbar.OptionShowCount(),
		progressbar.OptionSetElapsedTime(true),
		progressbar.OptionSetPredictTime(true),
		progressbar.OptionThrottle(100*time.Millisecond),
		progressbar.OptionClearOnFinish(),
		progressbar.OptionSetRenderBlankState(true),
	)}
}

func (p *benchProgress) describe(s string) {
	if p.bar != nil {
		p.bar.Describe(s)
	}
}

func (p *benchProgress) add() {
	if p.bar != nil {
		p.bar.Add(1)
	}
}

// set moves the bar to done steps.
func (p *benchProgress) set(done int) {
	if p.bar != nil {
		p.bar.Set(done)
	}
}

// clear erases the bar's line so a message can be written to stderr.
func (p *benchProgress) clear() {
	if p.bar != nil {
		p.bar.Clear()
	}
}

// finish erases the bar: the results follow on stdout.
func (p *benchProgress) finish() { p.clear() }

// runDecodeLoopSuite is bench --suite decode-loop.
func runDecodeLoopSuite(f *benchFlags, stdout, stderr io.Writer) int {
	s := cacheSuite
	s.RoPE = f.rope
	n := s.LoopResults()
	return runCacheSuite(f, stdout, stderr, "decode loop", n, n*(1+f.reps), s.DecodeLoop, printLoopTable)
}

// runCacheSuite runs a suite of KV cache measurements (decode-loop, fork):
// n results of ticks calls in all, run with the device and the flags'
// reps and seed, then printed by table or as JSON.
func runCacheSuite[T any](f *benchFlags, stdout, stderr io.Writer, name string, n, ticks int,
	run func(context.Context, *vkattn.Device, int, uint64, *tune.Clock, func()) ([]T, error),
	table func(io.Writer, string, []T)) int {
	dev, err := vkattn.Open(f.device.with(vkattn.Config{}))
	if err != nil {
		return failf(stderr, "bench", "%v", err)
	}
	defer dev.Close()
	prog := newBenchProgress(stderr, f.quiet, ticks)
	clock := &tune.Clock{}
	ctx, stop := interruptible("bench", func() string {
		prog.clear()
		return clock.Estimate()
	})
	defer stop()
	prog.describe(name)
	results, err := run(ctx, dev, f.reps, f.seed, clock, prog.add)
	prog.finish()
	stop()
	if ctx.Err() != nil {
		err = fmt.Errorf("interrupted after %d of %d measurements", len(results), n)
	}
	if err := emitResults(stdout, f.json, results, func() { table(stdout, dev.String(), results) }); err != nil {
		return failf(stderr, "bench", "%v", err)
	}
	if err != nil {
		return failf(stderr, "bench", "%v", err)
	}
	return exitOK
}

// runOwnSuite runs the suites that are not a list of shapes (cascade,
// decode-loop, fork, serve, mha-train, and --mha-train), if the flags ask
// for one: ran reports whether they did.
func runOwnSuite(f *benchFlags, set map[string]bool, stdout, stderr io.Writer) (code int, ran bool) {
	if f.suite == "cascade" && !set["shape"] {
		return runCacheSuite(f, stdout, stderr, "cascade", 1, f.reps, harness.DefaultCascadeSuite.Cascade, printCascadeTable), true
	}
	if f.suite == "decode-loop" && !set["shape"] {
		return runDecodeLoopSuite(f, stdout, stderr), true
	}
	if f.suite == "fork" && !set["shape"] {
		return runForkSuite(f, stdout, stderr), true
	}
	if f.suite == "serve" && !set["shape"] {
		s := harness.DefaultServeSuite
		serve := func(ctx context.Context, dev *vkattn.Device, _ int, seed uint64, _ *tune.Clock, tick func()) ([]harness.ServeResult, error) {
			return s.Serve(ctx, dev, seed, tick)
		}
		return runCacheSuite(f, stdout, stderr, "serve", 2, 2*s.Requests, serve, printServeTable), true
	}
	if set["mha-train"] || (f.suite == "mha-train" && !set["shape"]) {
		for _, other := range []string{"suite", "shape", "causal", "backward", "plot", "dtype", "kv-dtype", "fp32-products", "rope"} {
			if set[other] && (other != "suite" || set["mha-train"]) {
				return usagef(stderr, "bench", "--%s does not apply to an MHA training step (--suite mha-train, --mha-train): it runs float32 self-attention", other), true
			}
		}
		s := defaultTrainShape
		if set["mha-train"] {
			s = f.train
		}
		return runTrainBench(f, s, stdout, stderr), true
	}
	return 0, false
}

// register adds bench's flags to fs.
func (f *benchFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&f.suite, "suite", "prefill", "preset `suite`: prefill, decode, long, all, decode-loop, fork, cascade, serve or mha-train")
	fs.Var(&f.shapes, "shape", "time `B,H,H_kv,L,S,d` instead of a suite (repeatable; ';' separates shapes)")
	fs.Var(&f.causal, "causal", "bottom-right causal mask on every --shape (--causal=top-left for the other alignment)")
	fs.IntVar(&f.reps, "reps", 5, "timed calls per shape, after one warm-up call")
	fs.Uint64Var(&f.seed, "seed", 1, "random `seed` for Q, K and V")
	fs.BoolVar(&f.json, "json", false, "print a JSON array of results instead of the table")
	fs.StringVar(&f.plot, "plot", "", "draw GFLOP/s against S to `FILE.png` (or .svg, .pdf)")
	deviceFlag(fs, &f.device)
	fs.StringVar(&f.loadPath, "load-path", "auto", "force the kernel's load `path`: auto, texel or storage")
	fs.BoolVar(&f.quiet, "quiet", false, "no progress bar on stderr")
	fs.BoolVar(&f.backward, "backward", false, "time the gradients (Device.AttentionBackward: the forward and the backward) instead")
	fs.Var(&f.train, "mha-train", "time an MHA layer's training step (forward and backward) of `B,L,E,H` instead (the suite mha-train: 4,128,256,8)")
	fs.BoolVar(&f.fp32Products, "fp32-products", false, "half inputs: keep Q K^T and P V in float32, off the device's cooperative matrices (SEMANTICS.md §9.3)")
	f.typeFlags.register(fs)
	f.ropeFlags.register(fs)
}

// runShapes times cases (the shapes of a suite or of --shape) on the
// device the flags name and prints them (and --plot).
func runShapes(f *benchFlags, cases []harness.Case, path vkattn.LoadPath, stdout, stderr io.Writer) int {
	dev, err := vkattn.Open(f.device.with(vkattn.Config{LoadPath: path}))
	if err != nil {
		return failf(stderr, "bench", "%v", err)
	}
	defer dev.Close()

	// Plan every shape first: one the device cannot run fails before any
	// time is spent on the others.
	for _, c := range cases {
		d := c.Dims
		if _, err := dev.PlanAs([]int{d.B, d.H, d.L, d.DK}, []int{d.B, d.HKV, d.S, d.DK}, []int{d.B, d.HKV, d.S, d.DV},
			c.Types, c.Options()); err != nil {
			return failf(stderr, "bench", "%s: %v", c.Name(), err)
		}
	}

	prog := newBenchProgress(stderr, f.quiet, len(cases)*(1+f.reps))
	clock := &tune.Clock{}
	ctx, stop := interruptible("bench", func() string {
		prog.clear()
		return clock.Estimate()
	})
	defer stop()
	var results []benchResult
	failed := 0
	interrupted := false
	for _, c := range cases {
		prog.describe(c.Name())
		r, err := benchOne(ctx, dev, c, f.reps, f.seed, clock, prog.add)
		if err != nil {
			prog.clear()
			if ctx.Err() != nil {
				interrupted = true
				break
			}
			failf(stderr, "bench", "%s: %v", c.Name(), err)
			failed++
			continue
		}
		results = append(results, r)
	}
	prog.finish()
	stop()

	if err := emitResults(stdout, f.json, results, func() { printBenchTable(stdout, dev.String(), results) }); err != nil {
		return failf(stderr, "bench", "%v", err)
	}
	if f.plot != "" && interrupted {
		fmt.Fprintf(stderr, "vkattn bench: --plot %s not written: interrupted\n", f.plot)
	} else if f.plot != "" && len(results) > 0 {
		if err := writePlot(f.plot, dev.String(), results); err != nil {
			return failf(stderr, "bench", "--plot: %v", err)
		}
		if !f.json {
			fmt.Fprintf(stdout, "wrote %s\n", f.plot)
		}
	}
	switch {
	case interrupted:
		return failf(stderr, "bench", "interrupted after %d of %d shapes", len(results), len(cases))
	case failed > 0:
		return failf(stderr, "bench", "%d of %d shapes failed", failed, len(cases))
	}
	return exitOK
}
