package main

import (
	"flag"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/vkattn/vkattn"
	"github.com/vkattn/vkattn/heatmap"
	"github.com/vkattn/vkattn/internal/golden"
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

Rotary position embeddings (SEMANTICS.md §17), on Q and K before the scores:
` + ropeFlagsUsage + `
Element types: a float16 (<f2) input stays float16 on the device, others
are stored as float32 (float64 narrowed), unless
  --dtype f16|bf16|f32     stores Q, K and V as that type (rounded to nearest even;
                           a value out of range is an error, never inf)
  --kv-dtype f16|bf16|f32|q8_0|q4_0
                           stores K and V so, Q as --dtype or its file says; q8_0
                           is ggml's: int8 quants in blocks of 32 along a row (d_k
                           and d_v multiples of 32), a float16 scale each; q4_0
                           ggml's 4-bit blocks of 32, (q - 8) times the scale
The kernels widen on load and compute in float32; --check then compares
with the reference on the rounded values. The exception: half (f16 or
bf16) Q, K and V on a device with float16 cooperative matrices (vkattn
devices lists them) multiply on those, P rounded to float16 and bfloat16
scaled into float16 by a power of two per block, and --check allows the
bound SEMANTICS.md §18 states; --fp32-products keeps float32 products.

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

// qkvFlags are -q, -k and -v, the input files of run, view and additive.
type qkvFlags struct{ q, k, v string }

// qkvNames name the inputs in messages, as the help does.
var qkvNames = [3]string{"Q", "K", "V"}

// register adds the flags; each shapes says the ranks that input may have.
func (f *qkvFlags) register(fs *flag.FlagSet, qShapes, kShapes, vShapes string) {
	fs.StringVar(&f.q, "q", "", "queries `Q.npy`, "+qShapes)
	fs.StringVar(&f.k, "k", "", "keys `K.npy`, "+kShapes)
	fs.StringVar(&f.v, "v", "", "values `V.npy`, "+vShapes)
}

// missing reports whether any of the three was not given.
func (f *qkvFlags) missing() bool { return f.q == "" || f.k == "" || f.v == "" }

// read reads Q, K and V in turn as finite floats, each then checked by fit
// (given its index in qkvNames and its path), whose error is returned as
// it is. An input not given (V taken from K's columns) stays nil.
func (f *qkvFlags) read(fit func(i int, path string, a *npyArray) error) ([3]*npyArray, error) {
	var in [3]*npyArray
	for i, path := range [3]string{f.q, f.k, f.v} {
		if path == "" {
			continue
		}
		a, err := readFloatInput(qkvNames[i], path)
		if err != nil {
			return in, err
		}
		if err := fit(i, path, a); err != nil {
			return in, err
		}
		in[i] = a
	}
	return in, nil
}

// vFromKFlag is a flag that takes V from K's leading columns instead of a
// file (run's --v-from-k, decode's --latent): multi-head latent
// attention's V, the first n columns of its latent keys.
type vFromKFlag struct {
	name string // the flag, e.g. "--v-from-k"
	n    int    // d_v; 0: V is its own file
}

func (v *vFromKFlag) register(fs *flag.FlagSet, name, help string) {
	v.name = "--" + name
	fs.IntVar(&v.n, name, 0, help)
}

// parseInputs is parseInputFlags for a command whose V may come from K:
// with the flag, -q and -k are required and -v is refused.
func (v *vFromKFlag) parseInputs(fs *flag.FlagSet, usage string, args []string, stdout, stderr io.Writer, in *qkvFlags) (ok bool, code int) {
	if ok, code := parseFlags(fs, usage, args, stdout, stderr); !ok {
		return ok, code
	}
	set := false
	fs.Visit(func(f *flag.Flag) { set = set || "--"+f.Name == v.name })
	cmd := strings.TrimPrefix(fs.Name(), "vkattn ")
	switch {
	case !set && in.missing():
		return false, usagef(stderr, cmd, "-q, -k and -v are required")
	case !set:
		return true, exitOK
	case v.n < 1:
		return false, usagef(stderr, cmd, "%s %d: want the width of V, at least 1 (K's leading columns)", v.name, v.n)
	case in.v != "":
		return false, usagef(stderr, cmd, "%s %d takes V from K's leading columns: give -v or %s, not both", v.name, v.n, v.name)
	case in.q == "" || in.k == "":
		return false, usagef(stderr, cmd, "-q and -k are required (%s takes V from K)", v.name)
	}
	return true, exitOK
}

// values is V as K's leading n columns: the array the reference reads,
// stored as K is (a view of K's rows on the device). A width past K's or,
// for a quantized K, one splitting its blocks of 32 is refused.
func (v *vFromKFlag) values(k *npyArray) (*npyArray, error) {
	w := k.Shape[len(k.Shape)-1]
	if v.n > w {
		return nil, fmt.Errorf("%s %d: K %s has rows of %d; V is at most all of them: %w", v.name, v.n, k.Path, w, vkattn.ErrShape)
	}
	if k.Store.Quantized() && v.n%32 != 0 {
		return nil, fmt.Errorf("%s %d: a %v K is read in blocks of 32; V's width must be a multiple of 32: %w", v.name, v.n, k.Store, vkattn.ErrShape)
	}
	a := &npyArray{Path: fmt.Sprintf("%s's leading %d columns", k.Path, v.n), DType: k.DType, Store: k.Store}
	a.Shape = append(append([]int(nil), k.Shape[:len(k.Shape)-1]...), v.n)
	for i := 0; i < len(k.F32); i += w {
		a.F32 = append(a.F32, k.F32[i:i+v.n]...)
		if k.F16 != nil {
			a.F16 = append(a.F16, k.F16[i:i+v.n]...)
		}
	}
	return a, nil
}

// lengthFlags are --key-lengths and --query-lengths (run, view, additive).
type lengthFlags struct{ keyLens, queryLens intList }

func (l *lengthFlags) register(fs *flag.FlagSet) {
	fs.Var(&l.keyLens, "key-lengths", "valid key count per batch item, `N,N,...` (e.g. 3,5)")
	fs.Var(&l.queryLens, "query-lengths", "valid query count per batch item, `N,N,...` (e.g. 2,3)")
}

// apply sets the lengths given in opts.
func (l *lengthFlags) apply(opts *vkattn.Options) {
	if l.keyLens.set {
		opts.KeyLengths = l.keyLens.vals
	}
	if l.queryLens.set {
		opts.QueryLengths = l.queryLens.vals
	}
}

// outputFlags are -o, --lse and --weights: where run and additive write O,
// the log-sum-exp and the attention weights.
type outputFlags struct{ out, lse, weights string }

// register adds the flags, each with its help.
func (o *outputFlags) register(fs *flag.FlagSet, outHelp, weightsHelp, lseHelp string) {
	fs.StringVar(&o.out, "o", "", outHelp)
	fs.StringVar(&o.weights, "weights", "", weightsHelp)
	fs.StringVar(&o.lse, "lse", "", lseHelp)
}

// paths are the outputs as checkOutputPaths takes them.
func (o *outputFlags) paths() []outputFlag {
	return []outputFlag{{"-o", o.out}, {"--lse", o.lse}, {"--weights", o.weights}}
}

// outputs are the arrays of res asked for, with their shapes, in the order
// O, LSE, weights.
func (o *outputFlags) outputs(res *verify.Outputs, oShape, lseShape, wShape []int) []output {
	var outs []output
	for _, a := range []output{{"O", o.out, oShape, res.O}, {"LSE", o.lse, lseShape, res.LSE}, {"weights", o.weights, wShape, res.Weights}} {
		if a.path != "" {
			outs = append(outs, a)
		}
	}
	return outs
}

// intList is a comma-separated list of integers, e.g. 3,5.
type intList struct {
	vals []int
	set  bool
}

func (l *intList) String() string {
	s := make([]string, len(l.vals))
	for i, v := range l.vals {
		s[i] = strconv.Itoa(v)
	}
	return strings.Join(s, ",")
}

func (l *intList) Set(s string) error {
	l.vals, l.set = nil, true
	for _, f := range strings.Split(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil {
			return fmt.Errorf("%q is not a comma-separated list of integers", s)
		}
		l.vals = append(l.vals, n)
	}
	return nil
}

// pathList is a file flag that may be repeated; each use adds a file.
type pathList []string

func (l *pathList) String() string { return strings.Join(*l, ",") }

func (l *pathList) Set(s string) error {
	*l = append(*l, s)
	return nil
}

// optFloat is a float flag that remembers whether it was given, since any
// value (0 included) is a valid scale.
type optFloat struct {
	v   float64
	set bool
}

func (f *optFloat) String() string {
	if !f.set {
		return ""
	}
	return strconv.FormatFloat(f.v, 'g', -1, 64)
}

func (f *optFloat) Set(s string) error {
	v, err := strconv.ParseFloat(s, 64)
	if err != nil || math.IsNaN(v) || math.IsInf(v, 0) {
		return fmt.Errorf("%q is not a finite number", s)
	}
	f.v, f.set = v, true
	return nil
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

// variantFlags are the score variants of SEMANTICS.md §4.1: --window,
// --softcap, --sinks, --alibi and --alibi-slopes.
type variantFlags struct {
	window      intList
	softcap     optFloat
	sinks       string
	alibi       bool
	alibiSlopes string
	// fp32Products is Options.Float32Products.
	fp32Products bool
}

func (v *variantFlags) register(fs *flag.FlagSet) {
	fs.Var(&v.window, "window", "sliding window `LEFT,RIGHT` (-1: unbounded), bottom-right aligned: query t sees keys t+S-L-LEFT .. t+S-L+RIGHT")
	fs.Var(&v.softcap, "softcap", "soft-cap the scaled scores: s -> `C` tanh(s/C), C > 0 (Gemma 2)")
	fs.StringVar(&v.sinks, "sinks", "", "attention sinks `S.npy`: one logit per query head (H values) that joins the softmax denominator")
	fs.BoolVar(&v.alibi, "alibi", false, "ALiBi position bias with the published slopes 2^(-8(h+1)/H)")
	fs.StringVar(&v.alibiSlopes, "alibi-slopes", "", "ALiBi with the given slopes `A.npy` (H values)")
	fs.BoolVar(&v.fp32Products, "fp32-products", false, "half inputs: keep Q K^T and P V in float32, off the device's cooperative matrices (SEMANTICS.md §18)")
}

// setIn sets the variants in opts for h query heads, reading the files.
func (v *variantFlags) setIn(opts *vkattn.Options, h int) error {
	opts.Float32Products = v.fp32Products
	if v.window.set {
		if len(v.window.vals) != 2 {
			return fmt.Errorf("--window %s: want LEFT,RIGHT (two integers, -1 for unbounded)", v.window.String())
		}
		opts.Window = &vkattn.Window{Left: v.window.vals[0], Right: v.window.vals[1]}
	}
	if v.softcap.set {
		if !(v.softcap.v > 0) {
			return fmt.Errorf("--softcap %v: want a positive cap", v.softcap.v)
		}
		opts.Softcap = v.softcap.v
	}
	if v.alibi && v.alibiSlopes != "" {
		return fmt.Errorf("--alibi and --alibi-slopes: give one (--alibi uses the published slopes)")
	}
	if v.alibi {
		opts.ALiBi = vkattn.ALiBiSlopes(h)
	}
	for _, f := range []struct {
		flag, path string
		dst        *[]float32
	}{{"--sinks", v.sinks, &opts.Sinks}, {"--alibi-slopes", v.alibiSlopes, &opts.ALiBi}} {
		if f.path == "" {
			continue
		}
		a, err := readFloatInput(f.flag, f.path)
		if err != nil {
			return err
		}
		if len(a.Shape) != 1 || a.Shape[0] != h {
			return fmt.Errorf("%s %s has shape %v; want (%d,), one value per query head: %w", f.flag, f.path, a.Shape, h, vkattn.ErrShape)
		}
		*f.dst = a.F32
	}
	return nil
}

// typeFlags are --dtype and --kv-dtype: the element types Q, K and V are
// stored as on the device (run, view, bench).
type typeFlags struct{ dtype, kvDtype string }

func (t *typeFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&t.dtype, "dtype", "", "store Q, K and V on the device as `T`: f32, f16 or bf16 (default: as the file, f16 for <f2, else f32)")
	fs.StringVar(&t.kvDtype, "kv-dtype", "", "store K and V as `T` (f32, f16, bf16, or q8_0, q4_0: ggml's 8-bit and 4-bit blocks of 32), overriding --dtype for them")
}

// types are the element types of Q, K and V: each input's own (files is
// what each holds; nil: float32) unless a flag overrides it.
func (t *typeFlags) types(files [3]vkattn.DType) ([3]vkattn.DType, error) {
	ts := files
	for i, fl := range []struct{ name, v string }{{"--dtype", t.dtype}, {"--kv-dtype", t.kvDtype}} {
		if fl.v == "" {
			continue
		}
		dt, err := vkattn.ParseDType(fl.v)
		if err != nil {
			return ts, fmt.Errorf("%s %q: want f32, f16 or bf16 (or q8_0, q4_0 for --kv-dtype)", fl.name, fl.v)
		}
		if dt.Quantized() && i == 0 {
			return ts, fmt.Errorf("--dtype %v: %v stores K and V only; say --kv-dtype %v", dt, dt, dt)
		}
		for j := i; j < 3; j++ { // --dtype sets all three, --kv-dtype K and V
			ts[j] = dt
		}
	}
	return ts, nil
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
	var chk *golden.Check
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

// JSON summary types. Values use golden.Number so -inf (the log-sum-exp of
// a fully masked row) survives encoding.
type arrayJSON struct {
	Shape []int           `json:"shape"`
	First []golden.Number `json:"first"` // up to 8 leading values
	File  string          `json:"file,omitempty"`
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
	Check     *golden.Check     `json:"check,omitempty"`
	Written   []string          `json:"written"`
}

func runSummary(p *problem, r *verify.Outputs, oShape, wShape, lseShape []int, outs []output, chk *golden.Check) runJSON {
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

func first(x []float32, n int) []golden.Number {
	out := make([]golden.Number, 0, min(n, len(x)))
	for _, v := range x[:min(n, len(x))] {
		out = append(out, golden.Number(v))
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
