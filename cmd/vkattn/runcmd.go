package main

import (
	"flag"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/vkattn/vkattn"
	"github.com/vkattn/vkattn/heatmap"
	"github.com/vkattn/vkattn/internal/golden"
	"github.com/vkattn/vkattn/internal/verdict"
	"github.com/vkattn/vkattn/internal/verify"
	"github.com/vkattn/vkattn/reference"
)

const runUsage = `Usage: vkattn run -q Q.npy -k K.npy (-v V.npy | --v-from-k N) [-o O.npy] [flags]

Computes O = softmax(Q K^T * scale + masks) V on a Vulkan device, with the
fused online-softmax kernel (no (B,H,L,S) score buffer unless --weights).

Inputs are .npy files (float32, float16 or float64). Q, K and V have rank
2 (L,d), 3 (H,L,d) or 4 (B,H,L,d); missing leading axes are 1:
  Q (B,H,L,d_k)   K (B,H_kv,S,d_k)   V (B,H_kv,S,d_v)
H_kv must divide H (H_kv = 1: multi-query, else grouped-query attention).
The default scale is 1/sqrt(d_k).

Multi-head latent attention (DeepSeek V2/V3, SEMANTICS.md §2) reads V as the
leading columns of its latent K instead of a file of its own:
  --v-from-k N     V is K's first N columns (d_v = N <= d_k): a view of K's rows
                   on the device, no copy and no -v; the tiled kernels read V
                   from K's tiles. MLA: -q (B,128,L,576), -k (B,1,S,576),
                   --v-from-k 512 and the model's --scale (DeepSeek-V3:
                   0.13523 = 1/sqrt(192) * (0.1 ln 40 + 1)^2), not 1/sqrt(576)

Masks have rank 1 to 4 and broadcast to (B,H,L,S) from the left, NumPy
style (each axis full or 1). All masks combine:
  --mask M.npy     additive float mask, may hold -inf
  --allow A.npy    bool mask, true = may attend (PyTorch scaled_dot_product_attention)
  --block A.npy    bool mask, true = blocked (PyTorch MultiheadAttention masks)
                   --allow and --block repeat and mix: a key is visible only
                   where every bool mask allows it
  --causal top-left       query t sees keys j <= t (PyTorch is_causal)
  --causal bottom-right   query t sees keys j <= t + S - L (FlashAttention, KV cache)
  --key-lengths 3,5       keys past the length of batch item b are masked
  --query-lengths 2,3     query rows past it give zeros
A row whose every key is masked has output 0 and log-sum-exp -inf.

Score variants (SEMANTICS.md §4.1), with every mask above:
  --window L,R         sliding window, bottom-right aligned: query t sees keys
                       t+S-L-L .. t+S-L+R (-1: that side unbounded)
  --softcap C          scores s -> C tanh(s / C) before masks (Gemma 2)
  --alibi              ALiBi bias slope_h * (j - (t + S - L)), slopes 2^(-8(h+1)/H)
  --alibi-slopes A.npy the same with your slopes (H values)
  --sinks S.npy        one logit per query head joins the softmax denominator

Rotary position embeddings (SEMANTICS.md §5), on Q and K before the scores:
` + ropeFlagsUsage + `
Element types: a float16 (<f2) input stays float16 on the device, others
are stored as float32 (float64 narrowed), unless
  --dtype f16|bf16|f32     stores Q, K and V as that type (rounded to nearest even;
                           a value out of range is an error, never inf)
  --kv-dtype f16|bf16|f32|q8_0|q4_0|iq4_nl
                           stores K and V so, Q as --dtype or its file says; q8_0
                           is ggml's: int8 quants in blocks of 32 along a row (d_k
                           and d_v multiples of 32), a float16 scale each; q4_0
                           ggml's 4-bit blocks of 32, (q - 8) times the scale;
                           iq4_nl ggml's 4-bit non-linear blocks of 32, a level
                           of a fixed 16-entry table times the scale
The kernels widen on load and compute in float32; --check then compares
with the reference on the rounded values. The exception: half (f16 or
bf16) Q, K and V on a device with float16 cooperative matrices (vkattn
devices lists them) multiply on those, P rounded to float16 and bfloat16
scaled into float16 by a power of two per block, and --check allows the
bound SEMANTICS.md §9.3 states; --fp32-products keeps float32 products.

` + outputRule + `--json, whose summary cannot move, is refused with such a stream.
Outputs:
  -o O.npy         O, Q's shape with the last axis d_v
  --lse LSE.npy    natural log-sum-exp of each row, Q's shape without d_k
  --weights W.npy  attention weights, Q's leading axes then (L,S); small problems only
  --heatmap F.png  the weights as heat maps, one panel per head of batch item 0
                   (.png, .svg or .pdf; 'vkattn heatmap -h' draws more choices)
Without -o a short summary is printed instead.

--check compares with the float64 reference and exits 1 (writing nothing)
if any |GPU - reference| > 1e-4 * max(1, |reference|).

Examples:
  python3 -c "import numpy as np; np.save('q.npy', np.array([[1,0]],'f4')); np.save('k.npy', np.array([[1,0],[0,1],[1,1]],'f4')); np.save('v.npy', np.array([[2,0],[0,4],[2,2]],'f4'))"
  vkattn run -q q.npy -k k.npy -v v.npy            # O ~ [1.6044 1.5933]
  vkattn run -q q.npy -k k.npy -v v.npy --key-lengths 2 --check --explain
  vkattn run -q q.npy -k k.npy -v v.npy -o o.npy --weights w.npy --json
`

// runFlags are run's command line.
type runFlags struct {
	qkvFlags
	vFromK       vFromKFlag // run's --v-from-k
	mask         string
	allow, block pathList
	causal       string
	lengthFlags
	scale optFloat
	typeFlags
	variantFlags
	ropeFlags
	outputFlags
	heatmap string
	device  deviceChoice
	checkFlags
	json bool
}

// problem is a loaded and validated run: host arrays and options.
type problem struct {
	q, k, v    *npyArray
	q4, k4, v4 [4]int
	dims       vkattn.Dims
	opts       vkattn.Options
}

// types are the element types Q, K and V are stored as.
func (p *problem) types() [3]vkattn.DType { return [3]vkattn.DType{p.q.Store, p.k.Store, p.v.Store} }

// problemFlags registers the flags that give a problem: inputs, masks,
// options and the device (run and view share them).
func (f *runFlags) problemFlags(fs *flag.FlagSet) {
	f.qkvFlags.register(fs, "(L,d_k), (H,L,d_k) or (B,H,L,d_k)", "(S,d_k), (H_kv,S,d_k) or (B,H_kv,S,d_k)", "(S,d_v), (H_kv,S,d_v) or (B,H_kv,S,d_v)")
	fs.StringVar(&f.mask, "mask", "", "additive float mask `M.npy` broadcast to (B,H,L,S); -inf blocks")
	fs.Var(&f.allow, "allow", "bool mask `A.npy`: true = may attend (repeatable; every bool mask must allow a key)")
	fs.Var(&f.block, "block", "bool mask `A.npy`: true = blocked (repeatable; every bool mask must allow a key)")
	fs.StringVar(&f.causal, "causal", "none", "causal mask `alignment`: none, top-left or bottom-right")
	f.lengthFlags.register(fs)
	fs.Var(&f.scale, "scale", "score scale `X` instead of 1/sqrt(d_k)")
	f.variantFlags.register(fs)
	f.ropeFlags.register(fs)
	f.typeFlags.register(fs)
	deviceFlag(fs, &f.device)
}

// checkProblemFlags checks what the problem flags say before any file is
// read: the causal alignment's name and the element types.
func (f *runFlags) checkProblemFlags() (vkattn.Causal, error) {
	causal, err := vkattn.ParseCausal(f.causal)
	if err != nil {
		return causal, fmt.Errorf("--causal %q: want none, top-left or bottom-right", f.causal)
	}
	_, err = f.types([3]vkattn.DType{})
	return causal, err
}

func runRun(args []string, stdout, stderr io.Writer) int {
	fs := newFlags("run", stderr)
	var f runFlags
	f.problemFlags(fs)
	f.outputFlags.register(fs, "write the output O to `O.npy` (Q's shape, last axis d_v)",
		"write the attention weights to `W.npy` (Q's leading axes, L, S)", "write the log-sum-exp to `LSE.npy` (Q's shape without d_k)")
	fs.StringVar(&f.heatmap, "heatmap", "", "draw the weights of batch item 0 to `FILE` (.png, .svg or .pdf)")
	f.checkFlags.register(fs, "kernel variant, load path, tiles, grid")
	fs.BoolVar(&f.json, "json", false, "print a machine-readable JSON summary")
	f.vFromK.register(fs, "v-from-k", "V is K's leading `N` columns, a view of K's rows with no copy and no -v (multi-head latent attention: 512 of 576)")
	if ok, code := f.vFromK.parseInputs(fs, runUsage, args, stdout, stderr, &f.qkvFlags); !ok {
		return code
	}
	causal, err := f.checkProblemFlags()
	if err != nil {
		return usagef(stderr, "run", "%v", err)
	}
	if f.heatmap != "" {
		if _, err := heatmap.Format(f.heatmap); err != nil {
			return usagef(stderr, "run", "--heatmap %s: want a name ending in .png, .svg or .pdf", f.heatmap)
		}
	}
	outs := append(f.paths(), outputFlag{"--heatmap", f.heatmap})
	if code := checkOutputPaths("run", stderr, outs); code != exitOK {
		return code
	}
	stdout, code := textStreams("run", f.json, stdout, stderr, outs)
	if code != exitOK {
		return code
	}

	p, err := loadProblem(&f, causal)
	if err != nil {
		return failf(stderr, "run", "%v", err)
	}
	return execute(&f, p, stdout, stderr)
}

// readLayerInput is readFloatInput for a layer's input, stored on the
// device as *as (nil: as the file, a float16 file float16).
func readLayerInput(name, path string, as *vkattn.DType) (*npyArray, error) {
	a, err := readFloatInput(name, path)
	if err != nil {
		return nil, err
	}
	t := vkattn.Float32
	switch {
	case as != nil:
		t = *as
	case a.F16 != nil:
		t = vkattn.Float16
	}
	if err := a.storeAs(t); err != nil {
		return nil, fmt.Errorf("%s %s as %v: %w", name, path, t, err)
	}
	return a, nil
}

// readFloatInput reads an input tensor (name as the help calls it, e.g. Q)
// that must hold finite float values.
func readFloatInput(name, path string) (*npyArray, error) {
	a, err := readNPY(path)
	if err != nil {
		return nil, err
	}
	if a.Bools != nil {
		return nil, fmt.Errorf("%s %s holds bool values; want float32, float16 or float64", name, path)
	}
	if i := vkattn.FirstNonFinite(a.F32); i >= 0 {
		return nil, fmt.Errorf("%s %s: value %d is %v; %s must be finite", name, path, i, a.F32[i], name)
	}
	return a, nil
}

// readMask reads the mask file given with flag, float or bool, and fits
// its shape to (B,H,L,S) with fit (golden.FillMaskShape: NumPy broadcasting
// from the left).
func readMask(flag, path string, fit func([]int) (vkattn.MaskShape, error)) (*npyArray, vkattn.MaskShape, error) {
	a, err := readNPY(path)
	if err != nil {
		return nil, vkattn.MaskShape{}, err
	}
	s, err := fit(a.Shape)
	if err != nil {
		return nil, s, fmt.Errorf("%s %s: %w", flag, path, err)
	}
	return a, s, nil
}

// loadProblem reads the inputs and validates them on the host, so bad input
// fails before a device is opened.
func loadProblem(f *runFlags, causal vkattn.Causal) (*problem, error) {
	var shapes [3][4]int
	in, err := f.read(func(i int, path string, a *npyArray) (err error) {
		if shapes[i], err = vkattn.Shape4(a.Shape); err != nil {
			return fmt.Errorf("%s %s: %w", qkvNames[i], path, err)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	var files [3]vkattn.DType
	for i, a := range in {
		if a != nil && a.F16 != nil {
			files[i] = vkattn.Float16 // kept half on the device, not widened
		}
	}
	types, err := f.types(files)
	if err != nil {
		return nil, err
	}
	for i, a := range in {
		if a == nil {
			continue // V from K's columns
		}
		if err := a.storeAs(types[i]); err != nil {
			return nil, fmt.Errorf("%s %s as %v: %w", qkvNames[i], a.Path, types[i], err)
		}
	}
	if f.vFromK.n > 0 {
		// The values K's view reads, as K stores them.
		if in[2], err = f.vFromK.values(in[1]); err != nil {
			return nil, err
		}
		shapes[2], _ = vkattn.Shape4(in[2].Shape)
	}
	p := &problem{q: in[0], k: in[1], v: in[2], q4: shapes[0], k4: shapes[1], v4: shapes[2]}
	opts := vkattn.Options{
		Causal:      causal,
		WantLSE:     f.lse != "",
		WantWeights: f.weights != "" || f.heatmap != "",
	}
	if f.scale.set {
		opts.Scale = vkattn.CustomScale(f.scale.v)
	}
	f.apply(&opts)
	if f.mask != "" {
		a, s, err := readMask("--mask", f.mask, golden.FillMaskShape)
		if err != nil {
			return nil, err
		}
		if a.Bools != nil {
			return nil, fmt.Errorf("--mask %s holds bool values; use --allow or --block for a bool mask", f.mask)
		}
		opts.Mask = &vkattn.Mask{Shape: s, Values: a.F32}
	}
	for _, b := range []struct {
		flag    string
		paths   pathList
		meaning vkattn.MaskMeaning
	}{{"--allow", f.allow, vkattn.TrueAllows}, {"--block", f.block, vkattn.TrueBlocks}} {
		for _, path := range b.paths {
			a, s, err := readMask(b.flag, path, golden.FillMaskShape)
			if err != nil {
				return nil, err
			}
			if a.Bools == nil {
				return nil, fmt.Errorf("%s %s holds %s values; want bool (use --mask for an additive float mask)", b.flag, path, a.DType)
			}
			opts.BoolMasks = append(opts.BoolMasks, vkattn.BoolMask{Shape: s, Values: a.Bools, Meaning: b.meaning})
		}
	}
	if err := f.variantFlags.setIn(&opts, p.q4[1]); err != nil {
		return nil, err
	}
	if opts.RoPE, err = f.ropeFlags.rope(p.q4[3]); err != nil {
		return nil, err
	}
	d, err := vkattn.CheckProblem(p.q4, p.k4, p.v4, &opts)
	if err != nil {
		return nil, fmt.Errorf("Q %v, K %v, V %v: %w", p.q.Shape, p.k.Shape, p.v.Shape, err)
	}
	p.dims, p.opts = d, opts
	return p, nil
}

// attend runs p on dev and downloads every output it asked for.
func attend(dev *vkattn.Device, p *problem) (*verify.Outputs, error) {
	return attendWith(dev, p.q, p.k, p.v, dev.Prepare, p.opts, nil)
}

// attendWith runs the call prepare makes of q, k and v with opts
// (verify.RunCall; v nil: prepare gets a nil V and makes its own);
// explain, unless nil, gets its plan explained first.
func attendWith(dev *vkattn.Device, q, k, v *npyArray, prepare func(q, k, v *vkattn.Tensor, opts vkattn.Options) (*vkattn.Call, error),
	opts vkattn.Options, explain io.Writer) (*verify.Outputs, error) {
	var planned func(vkattn.Plan)
	if explain != nil {
		planned = func(plan vkattn.Plan) { fmt.Fprint(explain, plan.Explain(opts)) }
	}
	return verify.RunCall(dev, *q.input(), *k.input(), v.input(), func(q, k, v *vkattn.Tensor) (*vkattn.Call, error) {
		return prepare(q, k, v, opts)
	}, planned)
}

func execute(f *runFlags, p *problem, stdout, stderr io.Writer) int {
	dev, err := vkattn.Open(f.device.with(vkattn.Config{}))
	if err != nil {
		return failf(stderr, "run", "%v", err)
	}
	defer dev.Close()
	explain := f.explainTo(stdout)
	if f.json {
		explain = nil // stdout holds the JSON summary
	}
	v, prepare := p.v, dev.Prepare
	if n := f.vFromK.n; n > 0 {
		// Nothing of V uploaded: the call reads K's leading columns.
		v = nil
		prepare = func(q, k, _ *vkattn.Tensor, opts vkattn.Options) (*vkattn.Call, error) {
			view, err := k.Columns(0, n)
			if err != nil {
				return nil, err
			}
			return dev.Prepare(q, k, view, opts)
		}
	}
	res, err := attendWith(dev, p.q, p.k, v, prepare, p.opts, explain)
	if err != nil {
		return failf(stderr, "run", "%v", err)
	}

	oShape, wShape, lseShape := golden.OutputShapes(p.q.Shape, p.dims.S, p.dims.DV)
	var chk *verdict.Check
	if f.check {
		ref, err := reference.Attention(p.q.F32, p.q4, p.k.F32, p.k4, p.v.F32, p.v4, p.opts)
		if err != nil {
			return failf(stderr, "run", "reference: %v", err)
		}
		chk = res.Check(ref, p.q.F32, p.k.F32, p.v.F32, p.opts.Scale)
	}

	outs := f.outputs(res, oShape, lseShape, wShape)
	// A failed check writes nothing: a non-zero exit never leaves files.
	if chk == nil || chk.OK() {
		// The picture is drawn first and committed with the arrays, so a
		// failure to draw it leaves no array written either.
		var more []*pendingFile
		if f.heatmap != "" {
			w, err := heatmap.NewWeights(wShape, res.Weights)
			var pic *pendingFile
			if err == nil {
				pic, _, err = stageHeatmap(f.heatmap, w, heatmap.Options{})
			}
			if err != nil {
				return failf(stderr, "run", "--heatmap: %v", err)
			}
			more = append(more, pic)
		}
		if err := writeNPYFiles(outs, more...); err != nil {
			return failf(stderr, "run", "%v", err)
		}
		if f.heatmap != "" {
			outs = append(outs, output{name: "heat map", path: f.heatmap, shape: wShape})
		}
	}

	if f.json {
		s := runSummary(p, res, oShape, wShape, lseShape, outs, chk)
		if err := printJSON(stdout, s); err != nil {
			return failf(stderr, "run", "%v", err)
		}
	} else {
		if f.out == "" {
			fmt.Fprintf(stdout, "O %s: %s\n", shapeString(oShape), firstValues(res.O, 8))
			if res.LSE != nil && f.lse == "" {
				fmt.Fprintf(stdout, "LSE %s: %s\n", shapeString(lseShape), firstValues(res.LSE, 8))
			}
			if !f.explain {
				fmt.Fprintf(stdout, "plan: %v\n", res.Plan)
			}
			fmt.Fprintf(stdout, "GPU time: %s\n", gpuTimeString(res.GPUTime, p.dims.FLOPs()))
		}
		if chk == nil || chk.OK() {
			for _, o := range outs {
				fmt.Fprintf(stdout, "wrote %s %s to %s\n", o.name, shapeString(o.shape), o.path)
			}
		}
		if chk != nil {
			fmt.Fprintln(stdout, chk.String())
		}
	}
	if chk != nil && !chk.OK() {
		return failf(stderr, "run", "check failed: the GPU result differs from the float64 reference (%s); no output written", chk.Worst())
	}
	return exitOK
}

// JSON summary types. Values use verdict.Number so -inf (the log-sum-exp of
// a fully masked row) survives encoding.
type arrayJSON struct {
	Shape []int            `json:"shape"`
	First []verdict.Number `json:"first"` // up to 8 leading values
	File  string           `json:"file,omitempty"`
}

type runJSON struct {
	Device    string            `json:"device"`
	Dims      vkattn.Dims       `json:"dims"`
	Plan      string            `json:"plan"`
	Kernel    vkattn.KernelPlan `json:"kernel"`
	Masks     string            `json:"masks"`
	DTypes    [3]string         `json:"dtypes"`      // element types Q, K and V were stored as
	GPUTimeNS int64             `json:"gpu_time_ns"` // 0 when the device has no timestamps
	FLOPs     float64           `json:"flops"`
	GFLOPS    float64           `json:"gflops,omitempty"`
	O         arrayJSON         `json:"O"`
	LSE       *arrayJSON        `json:"LSE,omitempty"`
	Weights   *arrayJSON        `json:"weights,omitempty"`
	Check     *verdict.Check    `json:"check,omitempty"`
	Written   []string          `json:"written"`
}

func runSummary(p *problem, r *verify.Outputs, oShape, wShape, lseShape []int, outs []output, chk *verdict.Check) runJSON {
	s := runJSON{
		Device:    r.Plan.Device,
		Dims:      r.Plan.Dims,
		Plan:      r.Plan.String(),
		Kernel:    r.Plan.Kernel,
		Masks:     p.opts.MaskSummary(),
		DTypes:    [3]string{p.q.Store.String(), p.k.Store.String(), p.v.Store.String()},
		GPUTimeNS: r.GPUTime.Nanoseconds(),
		FLOPs:     p.dims.FLOPs(),
		O:         arrayJSON{Shape: oShape, First: first(r.O, 8)},
		Check:     chk,
		Written:   []string{},
	}
	if r.GPUTime > 0 {
		s.GFLOPS = p.dims.FLOPs() / r.GPUTime.Seconds() / 1e9
	}
	if r.LSE != nil {
		s.LSE = &arrayJSON{Shape: lseShape, First: first(r.LSE, 8)}
	}
	if r.Weights != nil {
		s.Weights = &arrayJSON{Shape: wShape, First: first(r.Weights, 8)}
	}
	if chk == nil || chk.OK() {
		for _, o := range outs {
			s.Written = append(s.Written, o.path)
			switch o.name {
			case "O":
				s.O.File = o.path
			case "LSE":
				s.LSE.File = o.path
			case "weights":
				s.Weights.File = o.path
			}
		}
	}
	return s
}

func first(x []float32, n int) []verdict.Number {
	out := make([]verdict.Number, 0, min(n, len(x)))
	for _, v := range x[:min(n, len(x))] {
		out = append(out, verdict.Number(v))
	}
	return out
}

func firstValues(x []float32, n int) string {
	parts := make([]string, 0, n+1)
	for _, v := range x[:min(n, len(x))] {
		parts = append(parts, strconv.FormatFloat(float64(v), 'g', 6, 32))
	}
	if len(x) > n {
		parts = append(parts, fmt.Sprintf("... (%d values)", len(x)))
	}
	return "[" + strings.Join(parts, " ") + "]"
}

func shapeString(s []int) string {
	parts := make([]string, len(s))
	for i, n := range s {
		parts[i] = strconv.Itoa(n)
	}
	if len(s) == 1 {
		return "(" + parts[0] + ",)"
	}
	return "(" + strings.Join(parts, ", ") + ")"
}

func gpuTimeString(t time.Duration, flops float64) string {
	if t <= 0 {
		return "not measured (the device has no compute-queue timestamps)"
	}
	return fmt.Sprintf("%v (%.3g GFLOP/s)", t, flops/t.Seconds()/1e9)
}
