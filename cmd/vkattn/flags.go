package main

import (
	"flag"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"

	"github.com/vkattn/vkattn"
	"github.com/vkattn/vkattn/core"
	"github.com/vkattn/vkattn/internal/verify"
)

// The flags that several commands share: the Q, K and V files, V as K's
// columns, lengths, outputs, score variants and element types, and the
// flag value types behind them.

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
	if q, ok := k.Store.Quant(); ok && v.n%q.Block != 0 {
		return nil, fmt.Errorf("%s %d: a %v K is read in blocks of %d; V's width must be a multiple of %d: %w", v.name, v.n, k.Store, q.Block, q.Block, vkattn.ErrShape)
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
	fs.BoolVar(&v.fp32Products, "fp32-products", false, "half inputs: keep Q K^T and P V in float32, off the device's cooperative matrices (SEMANTICS.md §9.3)")
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
	fs.StringVar(&t.kvDtype, "kv-dtype", "", "store K and V as `T` (f32, f16, bf16, or "+quantTypeList()+": ggml's quantized blocks of 32), overriding --dtype for them")
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
			return ts, fmt.Errorf("%s %q: want f32, f16 or bf16 (or %s for --kv-dtype)", fl.name, fl.v, quantTypeList())
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

// quantTypeList names the quantized K/V element types (core.QuantTypes),
// for help and errors: "q8_0, q4_0".
func quantTypeList() string { return strings.Join(core.QuantNames(), ", ") }
