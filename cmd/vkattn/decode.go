package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/vkattn/vkattn"
	"github.com/vkattn/vkattn/internal/harness"
	"github.com/vkattn/vkattn/internal/verdict"
	"github.com/vkattn/vkattn/tune"
)

const decodeUsage = `Usage: vkattn decode -q Q.npy -k K.npy (-v V.npy | --latent N) [--prefill P | --schedule FILE] [flags] [-o O.npy]

Runs a generation loop over a whole sequence through a KV cache on the
device, as a Go program generating text does: the first P tokens go in as
one prefill (their K and V appended, their P queries attended), then one
token per step (append its K and V, attend with its query, the one
prepared call replayed). O holds every token's output, Q's shape, so it
equals full bottom-right causal attention over the sequence.

Inputs (.npy, as for run): Q (B,H,T,d_k), K (B,H_kv,T,d_k), V (B,H_kv,T,d_v),
rank 2 to 4 as for run; T is the sequence length, the cache's capacity.

  --prefill P          tokens of the prefill (default 1; 1 <= P <= T)
  --schedule FILE      instead of a prefill and single tokens, the steps of a
                       server batching its users (SEMANTICS.md §4.3): a line
                       per step of B counts, the new tokens each sequence
                       brings (0, 1 or a chunk; each sequence's counts sum to
                       T), every step one ragged step (kv.RaggedStep); O is
                       the same full causal attention
  --page N             a paged cache of N-position pages, N <= T (default: contiguous)
  --window-cache W     a rolling cache: it keeps only the last W positions of
                       the sequence (whole pages let go as the window moves
                       on), so its memory follows W, not T; needs --page and
                       --window L,R with L <= W-1
  --latent N           a latent cache (multi-head latent attention, SEMANTICS.md
                       §2): the cache stores K's rows alone and V is their first
                       N columns, no -v (DeepSeek V2/V3: -k (B,1,T,576),
                       --latent 512, and the model's --scale, 0.13523 for V3,
                       not 1/sqrt(576)); K's and Q's rotary columns rotated in
                       the files (no --rope)
  --scale X            score scale instead of 1/sqrt(d_k)
  --kv-dtype f16|bf16|q8_0|q4_0|iq4_nl
                       the cache's element type (default f32; q8_0, q4_0,
                       iq4_nl: ggml's 8-bit, 4-bit and 4-bit non-linear
                       blocks of 32 with float16 scales, d_k and d_v
                       multiples of 32); --dtype
                       f16|bf16 also stores Q so
  --window L,R, --softcap C, --alibi, --alibi-slopes A.npy, --sinks S.npy
                       the score variants, as for run
` + ropeFlagsUsage + `                       (token t at position t: the cache stores its keys
                       rotated, then in --kv-dtype, and rotates each query)

--check compares O with the float64 reference (full causal attention over
the sequence on the values as stored: with --rope and a half cache, keys
rotated in float64 and then rounded) and exits 1 if any |GPU - reference|
> 1e-4 * max(1, |reference|). The summary gives the prefill's and the
steps' device time and tokens/s (B tokens a step); --explain adds the
step's plan (kernel variant, load path, tiles, grid).

Example:
  vkattn decode -q q.npy -k k.npy -v v.npy --prefill 16 --page 16 --kv-dtype f16 --check -o o.npy
`

// decodeFlags are decode's command line.
type decodeFlags struct {
	qkvFlags
	latent      vFromKFlag
	scale       optFloat
	prefill     int
	schedule    string
	page        int
	windowCache int
	typeFlags
	variantFlags
	ropeFlags
	out    string
	device deviceChoice
	checkFlags
	json bool
}

func runDecode(args []string, stdout, stderr io.Writer) int {
	fs := newFlags("decode", stderr)
	var f decodeFlags
	f.register(fs)
	if ok, code := f.latent.parseInputs(fs, decodeUsage, args, stdout, stderr, &f.qkvFlags); !ok {
		return code
	}
	if f.page < 0 || f.page > maxPage {
		return usagef(stderr, "decode", "--page %d: want a page size of at least 1 and at most %d (or 0, contiguous)", f.page, maxPage)
	}
	if f.windowCache < 0 {
		return usagef(stderr, "decode", "--window-cache %d: want a window of at least 1 position (or 0, keep every position)", f.windowCache)
	}
	if f.windowCache > 0 && f.page == 0 {
		return usagef(stderr, "decode", "--window-cache %d lets go of whole pages: give --page N too", f.windowCache)
	}
	types, err := f.types([3]vkattn.DType{})
	if err != nil {
		return usagef(stderr, "decode", "%v", err)
	}
	if types[1] != types[2] {
		return usagef(stderr, "decode", "K and V share the cache: one --kv-dtype")
	}
	if code := checkOutputPaths("decode", stderr, []outputFlag{{"-o", f.out}}); code != exitOK {
		return code
	}
	stdout, code := textStreams("decode", f.json, stdout, stderr, []outputFlag{{"-o", f.out}})
	if code != exitOK {
		return code
	}
	rope, err := f.ropeFlags.rope(0) // against d_k below
	if err != nil {
		return usagef(stderr, "decode", "%v", err)
	}
	if rope != nil && f.latent.n > 0 {
		return usagef(stderr, "decode", "--latent takes no --rope: the cache's RoPE turns a key's leading columns, which are V's; rotate the latent's trailing rotary columns (and Q's) in the files")
	}
	var shapes [3][4]int
	in, err := f.read(func(i int, path string, a *npyArray) (err error) {
		if shapes[i], err = vkattn.Shape4(a.Shape); err != nil {
			return fmt.Errorf("%s %s: %w", qkvNames[i], path, err)
		}
		if i == 1 && rope != nil {
			// The cache rounds keys after rotating them, once.
			return a.storeAs(vkattn.Float32)
		}
		return a.storeAs(types[i])
	})
	if err != nil {
		return failf(stderr, "decode", "%v", err)
	}
	if f.latent.n > 0 {
		// The values the cache reads from its keys, as it stores them.
		if in[2], err = f.latent.values(in[1]); err != nil {
			return failf(stderr, "decode", "%v", err)
		}
		shapes[2], _ = vkattn.Shape4(in[2].Shape)
	}
	q, k, v := shapes[0], shapes[1], shapes[2]
	T := q[2]
	if k[2] != T || v[2] != T {
		return failf(stderr, "decode", "Q, K and V hold %d, %d and %d tokens: one sequence length T, please", T, k[2], v[2])
	}
	if f.prefill < 1 || f.prefill > T {
		return usagef(stderr, "decode", "--prefill %d: want 1..T (T = %d)", f.prefill, T)
	}
	schedule, err := f.readSchedule(fs, q[0], T)
	if err != nil {
		return usagef(stderr, "decode", "%v", err)
	}
	if f.page > T {
		// A longer page only allocates positions no token reaches.
		return usagef(stderr, "decode", "--page %d: want at most T (T = %d)", f.page, T)
	}
	if f.windowCache > T {
		// A rolling cache longer than the sequence lets nothing go.
		return usagef(stderr, "decode", "--window-cache %d: want at most T (T = %d); leave it out to keep every position", f.windowCache, T)
	}
	opts := vkattn.Options{}
	if f.scale.set {
		opts.Scale = vkattn.CustomScale(f.scale.v)
	}
	if err := f.variantFlags.setIn(&opts, q[1]); err != nil {
		return failf(stderr, "decode", "%v", err)
	}
	if w := f.windowCache; w > 0 && (opts.Window == nil || opts.Window.Left < 0 || opts.Window.Left > w-1) {
		return usagef(stderr, "decode", "--window-cache %d keeps the last %d positions a query sees: give --window L,R with 0 <= L <= %d", w, w, w-1)
	}
	// The whole problem checked on the host first: bad input fails before
	// a device is opened.
	full := opts
	full.Causal = vkattn.CausalBottomRight
	full.RoPE = rope
	if _, err := vkattn.CheckProblem(q, k, v, &full); err != nil {
		return failf(stderr, "decode", "Q %v, K %v, V %v: %v", q, k, v, err)
	}

	clock := &tune.Clock{}
	dev, ctx, done, code := openInterruptible("decode", f.device, stderr, clock.Estimate)
	if code != exitOK {
		return code
	}
	defer done()
	res, err := decodeLoop(ctx, dev, in, q, k, v, f.prefill, schedule, f.page, f.windowCache, f.latent.n > 0, types, rope, opts, clock)
	if ctx.Err() != nil {
		return failf(stderr, "decode", "interrupted: no output written")
	}
	if err != nil {
		return failf(stderr, "decode", "%v", err)
	}
	return f.report(res, harness.DecodeInput{Q: in[0].F32, K: in[1].F32, V: in[2].F32, QShape: q, KShape: k, VShape: v,
		Types: types, RoPE: rope, Opts: opts}, in[0].Shape, stdout, stderr)
}

// print writes decode's summary as text.
func (f *decodeFlags) print(stdout io.Writer, s decodeSummary) {
	if f.schedule != "" {
		fmt.Fprintf(stdout, "decode %v on %s: cache %s, %d ragged steps (%s)\n", s.Dims, s.Device, s.Cache, s.Steps, f.schedule)
		fmt.Fprintf(stdout, "steps: %s device time per step (median), %.1f tokens/s over %s wall\n",
			time.Duration(s.StepMedianNS), s.TokensPerSec, time.Duration(s.StepsWallNS))
	} else {
		fmt.Fprintf(stdout, "decode %v on %s: cache %s, %d steps after a prefill of %d\n", s.Dims, s.Device, s.Cache, s.Steps, s.Prefill)
		fmt.Fprintf(stdout, "prefill: %s; steps: %s device time per step (median), %.1f tokens/s over %s wall\n",
			time.Duration(s.PrefillNS), time.Duration(s.StepMedianNS), s.TokensPerSec, time.Duration(s.StepsWallNS))
	}
	if f.explain {
		fmt.Fprintf(stdout, "step plan: %s\n", s.StepPlan)
	}
	if s.Check != nil {
		fmt.Fprintln(stdout, s.Check.String())
	}
	if f.out != "" {
		fmt.Fprintf(stdout, "wrote %s\n", f.out)
	}
}

// decodeSummary is what decode reports (--json).
type decodeSummary struct {
	Device       string         `json:"device"`
	Dims         vkattn.Dims    `json:"dims"`
	Cache        string         `json:"cache"` // "contiguous f16", "paged (16) f32"
	Prefill      int            `json:"prefill"`
	Steps        int            `json:"steps"`
	PrefillNS    int64          `json:"prefill_gpu_ns"`
	StepMedianNS int64          `json:"step_gpu_median_ns"` // device time; wall time without timestamps
	StepsWallNS  int64          `json:"steps_wall_ns"`      // append, query write and run, all steps
	TokensPerSec float64        `json:"tokens_per_s"`       // B tokens a step over the steps' wall time
	StepPlan     string         `json:"step_plan"`
	Check        *verdict.Check `json:"check,omitempty"`
}

type decodeResult struct {
	o       []float32 // (B, H, T, d_v)
	summary decodeSummary
}

// decodeLoop runs the prefill and the steps (harness.Decode), or the ragged
// steps of a schedule (harness.DecodeRagged; prefill 0 then), gathering every
// token's output and the summary.
func decodeLoop(ctx context.Context, dev *vkattn.Device, in [3]*npyArray, q, k, v [4]int, prefill int, schedule [][]int, page, window int, latent bool, types [3]vkattn.DType, rope *vkattn.RoPE, opts vkattn.Options, clock *tune.Clock) (*decodeResult, error) {
	input := harness.DecodeInput{
		Q: in[0].F32, K: in[1].F32, V: in[2].F32, QShape: q, KShape: k, VShape: v,
		Prefill: prefill, Page: page, Window: window, Latent: latent, Types: types, RoPE: rope, Opts: opts,
	}
	var run *harness.DecodeRun
	var err error
	if schedule != nil {
		run, err = harness.DecodeRagged(ctx, dev, input, schedule, clock)
		prefill = 0
	} else {
		run, err = harness.Decode(ctx, dev, input, clock)
	}
	if err != nil {
		return nil, err
	}
	return &decodeResult{o: run.O, summary: decodeSummary{
		Device: dev.String(), Dims: vkattn.Dims{B: q[0], H: q[1], HKV: k[1], L: q[2], S: q[2], DK: q[3], DV: v[3]},
		Cache: run.Cache, Prefill: prefill, Steps: run.Steps,
		PrefillNS: int64(run.PrefillGPU), StepMedianNS: int64(run.StepMedian), StepsWallNS: int64(run.StepsWall),
		TokensPerSec: run.TokensPerSec, StepPlan: run.StepPlan,
	}}, nil
}

// readSchedule reads the --schedule file (nil without one): a line per
// step of B counts of new tokens, one per sequence, separated by spaces or
// commas; blank lines and lines starting with # are skipped. Each
// sequence's counts must sum to T; --prefill does not go with it.
func (f *decodeFlags) readSchedule(fs *flag.FlagSet, B, T int) ([][]int, error) {
	if f.schedule == "" {
		return nil, nil
	}
	set := map[string]bool{}
	fs.Visit(func(fl *flag.Flag) { set[fl.Name] = true })
	if set["prefill"] {
		return nil, fmt.Errorf("--schedule gives every step's tokens, the prefill's too: leave out --prefill")
	}
	schedule, err := parseSchedule(f.schedule, B, T)
	if err != nil {
		return nil, fmt.Errorf("--schedule %s: %w", f.schedule, err)
	}
	return schedule, nil
}

// parseSchedule reads the schedule file at path (see readSchedule).
func parseSchedule(path string, B, T int) ([][]int, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var schedule [][]int
	for i, line := range strings.Split(string(raw), "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		var counts []int
		for _, field := range strings.FieldsFunc(line, func(r rune) bool { return r == ' ' || r == '\t' || r == ',' }) {
			n, err := strconv.Atoi(field)
			if err != nil {
				return nil, fmt.Errorf("line %d: %q is not a count of tokens", i+1, field)
			}
			counts = append(counts, n)
		}
		schedule = append(schedule, counts)
	}
	if _, _, err := harness.CheckSchedule(schedule, B, T); err != nil {
		return nil, err
	}
	return schedule, nil
}

// register adds decode's flags to fs.
func (f *decodeFlags) register(fs *flag.FlagSet) {
	f.qkvFlags.register(fs, "(B,H,T,d_k), (H,T,d_k) or (T,d_k)", "(B,H_kv,T,d_k), ...", "(B,H_kv,T,d_v), ...")
	fs.IntVar(&f.prefill, "prefill", 1, "tokens of the first step, a prefill (`P`)")
	fs.StringVar(&f.schedule, "schedule", "", "run the ragged steps of `FILE` instead: a line per step of B counts of new tokens")
	fs.IntVar(&f.page, "page", 0, "a paged cache of `N`-position pages (0: contiguous)")
	fs.IntVar(&f.windowCache, "window-cache", 0, "a rolling cache keeping the last `W` positions (needs --page and --window L,R with L <= W-1)")
	f.typeFlags.register(fs)
	f.variantFlags.register(fs)
	f.ropeFlags.register(fs)
	fs.StringVar(&f.out, "o", "", "write every token's output to `O.npy` (Q's shape, last axis d_v)")
	deviceFlag(fs, &f.device)
	f.checkFlags.register(fs, "the step's kernel variant, load path, tiles, grid")
	fs.BoolVar(&f.json, "json", false, "print a machine-readable JSON summary")
	f.latent.register(fs, "latent", "a latent cache: K's rows alone, V their first `N` columns, no -v (multi-head latent attention: 512 of 576)")
	fs.Var(&f.scale, "scale", "score scale `X` instead of 1/sqrt(d_k)")
}

// report checks a decode's output against the reference of input (with
// --check), writes it (-o) and prints the summary; qShape is Q's shape as
// the file gave it.
func (f *decodeFlags) report(res *decodeResult, input harness.DecodeInput, qShape []int, stdout, stderr io.Writer) int {
	var chk *verdict.Check
	if f.check {
		ref, err := input.Reference()
		if err != nil {
			return failf(stderr, "decode", "reference: %v", err)
		}
		chk = &verdict.Check{}
		chk.Add("O", res.o, ref.O)
	}
	if chk != nil && !chk.OK() {
		return failf(stderr, "decode", "check failed: the GPU result differs from the float64 reference (%s); no output written", chk.Worst())
	}
	oShape := append(append([]int(nil), qShape[:len(qShape)-1]...), input.VShape[3])
	if f.out != "" {
		if err := writeNPYFiles([]output{{"O", f.out, oShape, res.o}}); err != nil {
			return failf(stderr, "decode", "%v", err)
		}
	}
	res.summary.Check = chk
	if f.json {
		if err := printJSON(stdout, res.summary); err != nil {
			return failf(stderr, "decode", "%v", err)
		}
		return exitOK
	}
	f.print(stdout, res.summary)
	return exitOK
}
