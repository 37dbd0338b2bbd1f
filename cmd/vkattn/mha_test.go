package main

import (
	"archive/zip"
	"bytes"
	"encoding/binary"
	"io"
	"math"
	"math/rand"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"codeberg.org/sbinet/npyio"

	"github.com/vkattn/vkattn"
	"github.com/vkattn/vkattn/internal/random"
	"github.com/vkattn/vkattn/internal/testutil"
	"github.com/vkattn/vkattn/nn"
	"github.com/vkattn/vkattn/reference"
	"github.com/vkattn/vkattn/weights"
	"github.com/x448/float16"
)

// mhaDir holds the PyTorch parity cases (tools/mha_parity.py).
var mhaDir = filepath.Join("..", "..", "testdata", "mha")

// parityCase reads testdata/mha/NAME.npz: inputs and PyTorch's outputs.
func parityCase(t *testing.T, name string) map[string]weights.Tensor {
	t.Helper()
	ts, err := weights.Load(filepath.Join(mhaDir, name+".npz"))
	if err != nil {
		t.Fatal(err)
	}
	return ts
}

// writeArray writes float32 data of the given shape as a .npy file in dir.
func writeArray(t *testing.T, dir, name string, shape []int, data []float32) string {
	t.Helper()
	path := filepath.Join(dir, name)
	if err := writeNPYFiles([]output{{name, path, shape, data}}); err != nil {
		t.Fatal(err)
	}
	return path
}

// writeBools writes a bool tensor (weights reads bools as 0 and 1) of rank
// 1 or 2 as a |b1 .npy file.
func writeBools(t *testing.T, dir, name string, x weights.Tensor) string {
	t.Helper()
	b := make([]bool, len(x.Data))
	for i, v := range x.Data {
		b[i] = v != 0
	}
	switch len(x.Shape) {
	case 1:
		return save(t, dir, name, b)
	case 2:
		return save(t, dir, name, rows(b, x.Shape[1]))
	}
	t.Fatalf("%s: rank %d bool tensor", name, len(x.Shape))
	return ""
}

// rows splits x into rows of n values, for npyio's writer.
func rows[T any](x []T, n int) [][]T {
	var r [][]T
	for i := 0; i < len(x); i += n {
		r = append(r, x[i:i+n])
	}
	return r
}

// writeNPZ writes arrays (name -> []float32 or [][]float32), each encoded
// by npyio, as the deflated .npz dir/name (testutil.WriteNPZ).
func writeNPZ(t *testing.T, dir, name string, arrays map[string]any) string {
	t.Helper()
	members := map[string][]byte{}
	for k, v := range arrays {
		var b bytes.Buffer
		if err := npyio.Write(&b, v); err != nil {
			t.Fatal(err)
		}
		members[k] = b.Bytes()
	}
	return testutil.WriteNPZ(t, filepath.Join(dir, name), members, true)
}

// sameTensor checks an output file against a PyTorch parity array: shape
// and values.
func sameTensor(t *testing.T, what, path string, want weights.Tensor, shape []int, tol float64) {
	t.Helper()
	got := load(t, path)
	if !slices.Equal(got.Shape, shape) {
		t.Fatalf("%s: shape %v, want %v", what, got.Shape, shape)
	}
	testutil.Near(t, what, got.F32, want.Data, tol)
}

// parityTol: the GPU in float32 against PyTorch in float64.
const parityTol = 2e-5

func TestMHASelfParity(t *testing.T) {
	withDevice(t)
	dir := t.TempDir()
	data := parityCase(t, "self") // B=2, T=3, d=8, heads=2
	q := data["query"]
	x := writeArray(t, dir, "x.npy", q.Shape, q.Data)
	o, w := filepath.Join(dir, "out.npy"), filepath.Join(dir, "w.npy")
	params := filepath.Join(mhaDir, "self_params.npz")

	out := cliOK(t, "mha", "-x", x, "--params", params, "--heads", "2", "-o", o, "--check")
	if !strings.Contains(out, "wrote out (2, 3, 8) to "+o) || !strings.Contains(out, "check vs float64 reference") || !strings.Contains(out, ": ok") {
		t.Errorf("output:\n%s", out)
	}
	sameTensor(t, "out", o, data["out"], []int{2, 3, 8}, parityTol)

	// Per-head weights, then their mean, read from the .safetensors copy.
	cliOK(t, "mha", "-x", x, "--params", params, "--heads", "2", "-o", o, "--weights", w, "--check")
	sameTensor(t, "weights", w, data["weights"], []int{2, 2, 3, 3}, parityTol)
	st := filepath.Join(mhaDir, "self_params.safetensors")
	cliOK(t, "mha", "-x", x, "--params", st, "--heads", "2", "-o", o, "--weights", w, "--average-weights", "--check")
	sameTensor(t, "out (safetensors)", o, data["out"], []int{2, 3, 8}, parityTol)
	sameTensor(t, "averaged weights", w, data["weights_avg"], []int{2, 3, 3}, parityTol)

	// Unbatched: X (T,d) is batch item 0; the outputs drop B.
	x0 := writeArray(t, dir, "x0.npy", []int{3, 8}, q.Data[:24])
	cliOK(t, "mha", "-x", x0, "--params", params, "--heads", "2", "-o", o, "--weights", w, "--check")
	first := func(x weights.Tensor, n int) weights.Tensor { return weights.Tensor{Data: x.Data[:n]} }
	sameTensor(t, "unbatched out", o, first(data["out"], 24), []int{3, 8}, parityTol)
	sameTensor(t, "unbatched weights", w, first(data["weights"], 18), []int{2, 3, 3}, parityTol)

	// Into a pipe: the output is the whole of standard output, the
	// command's own text on standard error.
	c := startCLI(t, nil, "mha", "-x", x, "--params", params, "--heads", "2", "-o", "/dev/stdout", "--check")
	if code, _ := c.wait(60 * time.Second); code != 0 {
		t.Fatalf("mha -o /dev/stdout: exit %d:\n%s", code, c.errText())
	}
	piped := filepath.Join(dir, "piped.npy")
	if err := os.WriteFile(piped, c.stdout.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	sameTensor(t, "out through a pipe", piped, data["out"], []int{2, 3, 8}, parityTol)
	mentions(t, "stderr", c.errText(), "wrote out (2, 3, 8) to /dev/stdout", "check vs float64 reference")
}

// Key padding and PyTorch's bool attn_mask (true = blocked), also given as
// --causal top-left, which is the same mask here.
func TestMHAPaddingParity(t *testing.T) {
	withDevice(t)
	dir := t.TempDir()
	data := parityCase(t, "padcausal") // B=2, T=S=5, d=12, heads=3
	q := data["query"]
	x := writeArray(t, dir, "x.npy", q.Shape, q.Data)
	kp := writeBools(t, dir, "kp.npy", data["key_padding_mask"])
	am := writeBools(t, dir, "am.npy", data["attn_mask"])
	o, w := filepath.Join(dir, "out.npy"), filepath.Join(dir, "w.npy")
	params := filepath.Join(mhaDir, "padcausal_params.npz")

	cliOK(t, "mha", "-x", x, "--params", params, "--heads", "3", "--key-padding", kp, "--mask", am, "--mask-means", "block",
		"-o", o, "--weights", w, "--check")
	sameTensor(t, "out", o, data["out"], []int{2, 5, 12}, parityTol)
	sameTensor(t, "weights", w, data["weights"], []int{2, 3, 5, 5}, parityTol)

	out := cliOK(t, "mha", "-x", x, "--params", params, "--heads", "3", "--key-padding", kp, "--causal", "top-left", "-o", o, "--check", "--explain")
	sameTensor(t, "out (causal)", o, data["out"], []int{2, 5, 12}, parityTol)
	mentions(t, "--explain output", out, "plan: multi-head attention B=2 T=5 S=5 d=12 heads=3", "in_proj (Q,K,V fused)", "out_proj",
		"masks: key padding (2,5), causal top-left", "GPU time")
}

// randomCross writes the weights of a cross-attention layer with kdim =
// vdim != d (separate q/k/v_proj_weight) and returns them with the path.
func randomCross(t *testing.T, r *rand.Rand, dir string, d, kdim int) (string, *nn.MHAWeights) {
	t.Helper()
	vals := func(n int) []float32 {
		x := make([]float32, n)
		for i := range x {
			x[i] = float32(r.NormFloat64() * 0.4)
		}
		return x
	}
	w := &nn.MHAWeights{
		DModel: d, KDim: kdim, VDim: kdim,
		QProjWeight: vals(d * d), KProjWeight: vals(d * kdim), VProjWeight: vals(d * kdim),
		InProjBias: vals(3 * d), OutProjWeight: vals(d * d), OutProjBias: vals(d),
	}
	path := writeNPZ(t, dir, "cross.npz", map[string]any{
		"q_proj_weight":   rows(w.QProjWeight, d),
		"k_proj_weight":   rows(w.KProjWeight, kdim),
		"v_proj_weight":   rows(w.VProjWeight, kdim),
		"in_proj_bias":    w.InProjBias,
		"out_proj.weight": rows(w.OutProjWeight, d),
		"out_proj.bias":   w.OutProjBias,
	})
	return path, w
}

// normalValues are n standard normal values (internal/random).
func normalValues(r *rand.Rand, n int) []float32 { return random.Normal(r, n) }

// Cross-attention (key = value = KV, kdim 6 != d 8) against the reference,
// plain and with key padding and PyTorch's 3-D (B*h,T,S) additive mask.
func TestMHACross(t *testing.T) {
	withDevice(t)
	r := rand.New(rand.NewSource(7))
	dir := t.TempDir()
	const B, T, S, d, kdim, h = 2, 3, 4, 8, 6, 2
	params, w := randomCross(t, r, dir, d, kdim)
	xd, kvd := normalValues(r, B*T*d), normalValues(r, B*S*kdim)
	x := writeArray(t, dir, "x.npy", []int{B, T, d}, xd)
	kv := writeArray(t, dir, "kv.npy", []int{B, S, kdim}, kvd)
	o, wp := filepath.Join(dir, "out.npy"), filepath.Join(dir, "w.npy")

	expect := func(what string, opts nn.MHAOptions, average bool) {
		t.Helper()
		opts.NeedWeights = true
		ref, err := reference.MultiHeadAttention(xd, []int{B, T, d}, kvd, []int{B, S, kdim}, kvd, []int{B, S, kdim}, w, opts)
		if err != nil {
			t.Fatal(err)
		}
		got := load(t, o)
		if !slices.Equal(got.Shape, []int{B, T, d}) {
			t.Fatalf("%s: out shape %v", what, got.Shape)
		}
		nearReference(t, what+" out", got.F32, ref.Out)
		gw, want, shape := load(t, wp), ref.Weights, []int{B, h, T, S}
		if average {
			want, shape = ref.AvgWeights, []int{B, T, S}
		}
		if !slices.Equal(gw.Shape, shape) {
			t.Fatalf("%s: weights shape %v, want %v", what, gw.Shape, shape)
		}
		nearReference(t, what+" weights", gw.F32, want)
	}

	out := cliOK(t, "mha", "-x", x, "--kv", kv, "--params", params, "--heads", "2", "-o", o, "--weights", wp, "--check", "--explain")
	expect("cross", nn.MHAOptions{Heads: h}, false)
	mentions(t, "output", out, "q_proj", "k_proj", "v_proj", "out_proj", "masks: none", ": ok")

	// Batch item 1 pads its last key; the (B*h,T,S) mask blocks one key of
	// one row per head and adds a bias elsewhere: no row is fully masked.
	padded := []bool{false, false, false, false, false, false, false, true}
	kp := save(t, dir, "kp.npy", rows(padded, S))
	mask := make([]float32, B*h*T*S)
	for i := range mask {
		mask[i] = float32(i%5) * 0.25
	}
	for bh := 0; bh < B*h; bh++ {
		mask[bh*T*S+(bh%T)*S+bh%S] = float32(math.Inf(-1))
	}
	m := writeArray(t, dir, "m.npy", []int{B * h, T, S}, mask)
	cliOK(t, "mha", "-x", x, "--kv", kv, "--params", params, "--heads", "2", "--key-padding", kp, "--mask", m,
		"-o", o, "--weights", wp, "--average-weights", "--check")
	expect("masked cross", nn.MHAOptions{
		Heads:      h,
		KeyPadding: &nn.KeyPadding{Padded: padded},
		Attention:  vkattn.Options{Mask: &vkattn.Mask{Shape: vkattn.MaskShape{B, h, T, S}, Values: mask}},
	}, true)
}

// Errors are found on the host, before a device is opened: exit 1 for bad
// files (naming them), 2 for bad command lines; nothing is written.
func TestMHAErrors(t *testing.T) {
	dir := t.TempDir()
	data := parityCase(t, "self")
	q := data["query"]
	x := writeArray(t, dir, "x.npy", q.Shape, q.Data)
	x4 := writeArray(t, dir, "x4.npy", append([]int{1}, q.Shape...), q.Data)
	kv := writeArray(t, dir, "kv.npy", []int{1, 3, 8}, q.Data[:24])
	params := filepath.Join(mhaDir, "self_params.npz")
	cross := filepath.Join(mhaDir, "cross_params.npz")
	noOut := writeNPZ(t, dir, "broken.npz", map[string]any{"in_proj_weight": rows(make([]float32, 24*8), 8)})
	boolMask := save(t, dir, "bm.npy", rows([]bool{false, true, false, false, false, true, false, false, false}, 3))
	floatMask := writeArray(t, dir, "fm.npy", []int{3, 3}, make([]float32, 9))
	wideMask := writeArray(t, dir, "wm.npy", []int{3, 4}, make([]float32, 12))
	kpFloat := writeArray(t, dir, "kpf.npy", []int{2, 3}, make([]float32, 6))
	kpShape := save(t, dir, "kps.npy", rows(make([]bool, 6), 2))
	o := filepath.Join(dir, "out.npy")
	base := []string{"-x", x, "--params", params, "--heads", "2", "-o", o}
	with := func(args ...string) []string { return append(slices.Clone(base), args...) }

	checkRefusals(t, "mha", o, []refusal{
		{"bad heads", with("--heads", "3"), exitFail, "--heads 3 does not divide embed_dim d = 8"},
		{"missing params", []string{"-x", x, "--heads", "2", "-o", o}, exitUsage, "--params is required"},
		{"missing heads", []string{"-x", x, "--params", params, "-o", o}, exitUsage, "--heads H is required"},
		{"negative heads", with("--heads", "-2"), exitUsage, "--heads"},
		{"missing x", []string{"--params", params, "--heads", "2", "-o", o}, exitUsage, "-x is required"},
		{"missing o", []string{"-x", x, "--params", params, "--heads", "2"}, exitUsage, "-o is required"},
		{"average without weights", with("--average-weights"), exitUsage, "--average-weights needs --weights"},
		{"bool mask without meaning", with("--mask", boolMask), exitUsage, "--mask-means"},
		{"meaning with float mask", with("--mask", floatMask, "--mask-means", "block"), exitUsage, "--mask-means applies to a bool mask"},
		{"meaning without mask", with("--mask-means", "block"), exitUsage, "no --mask"},
		{"bad meaning", with("--mask", boolMask, "--mask-means", "yes"), exitUsage, "--mask-means \"yes\""},
		{"bad causal", with("--causal", "diagonal"), exitUsage, "--causal"},
		{"mask shape", with("--mask", wideMask), exitFail, "--mask " + wideMask},
		{"float key padding", with("--key-padding", kpFloat), exitFail, "--key-padding " + kpFloat + " holds <f4 values"},
		{"key padding shape", with("--key-padding", kpShape), exitFail, "want (B,S) = (2,3)"},
		{"rank-4 X", []string{"-x", x4, "--params", params, "--heads", "2", "-o", o}, exitFail, "X " + x4 + " has shape [1 2 3 8]"},
		{"missing X file", []string{"-x", filepath.Join(dir, "nope.npy"), "--params", params, "--heads", "2", "-o", o}, exitFail, "nope.npy"},
		{"missing params file", with("--params", filepath.Join(dir, "nope.npz")), exitFail, "nope.npz"},
		{"cross params without kv", with("--params", cross), exitFail, "kdim = vdim = 8 from X, without --kv"},
		{"params lack out_proj", with("--params", noOut), exitFail, "out_proj.weight"},
		{"kv batch", with("--kv", kv), exitFail, "KV " + kv + " has batch size 1"},
		{"scale is not a flag", with("--scale", "2"), exitUsage, "-scale"},
		{"stray argument", with("extra"), exitUsage, "unexpected argument"},
		{"same output twice", with("--weights", o), exitUsage, "both write"},
	})
}

// --params is read a tensor at a time: a tensor of the wrong shape is
// refused from its header, and tensors the layer does not use are not
// read. Each huge tensor here is 1 GiB (a hole in a sparse file) whose
// first value float32 cannot hold, so any reader that decodes it fails.
func TestMHAParamsReadLazily(t *testing.T) {
	dir := t.TempDir()
	data := parityCase(t, "self")
	q := data["query"]
	x := writeArray(t, dir, "x.npy", q.Shape, q.Data)
	o := filepath.Join(dir, "out.npy")
	params := filepath.Join(mhaDir, "self_params.npz")
	wrong := hugeParams(t, filepath.Join(dir, "wrong.npz"), params, "in_proj_weight")
	checkRefusals(t, "mha", o, []refusal{
		{"huge in_proj_weight", []string{"-x", x, "--params", wrong, "--heads", "2", "-o", o}, exitFail,
			"in_proj_weight has shape [8192 16384], want [24 8]"},
	})

	withDevice(t)
	unused := hugeParams(t, filepath.Join(dir, "unused.npz"), params, "decoder.a", "decoder.b", "decoder.c")
	cliOK(t, "mha", "-x", x, "--params", unused, "--heads", "2", "-o", o, "--check")
}

// hugeParams writes to path a copy of the .npz params in which each named
// member (new, or in place of one of that name) is a stored float64
// (8192, 16384) array: its first value 1e300, the rest a hole.
func hugeParams(t *testing.T, path, params string, huge ...string) string {
	t.Helper()
	zr, err := zip.OpenReader(params)
	if err != nil {
		t.Fatal(err)
	}
	defer zr.Close()
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sw := &sparseWriter{f: f}
	zw := zip.NewWriter(sw)
	for _, m := range zr.File {
		if !slices.Contains(huge, strings.TrimSuffix(m.Name, ".npy")) {
			if err := zw.Copy(m); err != nil {
				t.Fatal(err)
			}
		}
	}
	dict := "{'descr': '<f8', 'fortran_order': False, 'shape': (8192, 16384), }"
	dict += strings.Repeat(" ", (64-(11+len(dict))%64)%64) + "\n"
	npy := binary.LittleEndian.AppendUint16([]byte("\x93NUMPY\x01\x00"), uint16(len(dict)))
	npy = binary.LittleEndian.AppendUint64(append(npy, dict...), math.Float64bits(1e300))
	const data = 8192 * 16384 * 8
	size := uint64(len(npy) - 8 + data)
	hole := make([]byte, 1<<20)
	for _, name := range huge {
		w, err := zw.CreateRaw(&zip.FileHeader{Name: name + ".npy", Method: zip.Store, CompressedSize64: size, UncompressedSize64: size})
		if err != nil {
			t.Fatal(err)
		}
		w.Write(npy)
		zw.Flush()
		sw.skip = true
		for n := data - 8; n > 0; n -= len(hole) {
			w.Write(hole[:min(n, len(hole))])
		}
		zw.Flush()
		sw.skip = false
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return path
}

// sparseWriter writes to f, what is written while skip is set as a hole.
type sparseWriter struct {
	f    *os.File
	skip bool
}

func (w *sparseWriter) Write(p []byte) (int, error) {
	if w.skip {
		_, err := w.f.Seek(int64(len(p)), io.SeekCurrent)
		return len(p), err
	}
	return w.f.Write(p)
}

func TestMHAHelp(t *testing.T) {
	for _, c := range []string{"mha", "additive"} {
		out, _, code := cli(t, c, "-h")
		if code != 0 || !strings.Contains(out, "Examples:") || !strings.Contains(out, "Flags:") || !strings.Contains(out, "-mask-means") {
			t.Errorf("%s -h: exit %d\n%s", c, code, out)
		}
	}
	out, _, _ := cli(t, "mha", "-h")
	if !strings.Contains(out, "out_proj.bias") || !strings.Contains(out, "NaN") {
		t.Errorf("mha -h does not say what a fully masked row gives:\n%s", out)
	}
	if out, _, _ := cli(t, "--help"); !strings.Contains(out, "  mha ") || !strings.Contains(out, "  additive ") {
		t.Errorf("top-level help lacks the commands:\n%s", out)
	}
}

// mha --dout --grads writes every gradient of the layer, named as its
// state_dict and its inputs, equal to the float64 reference's: a packed
// self-attention layer with a causal mask, and cross-attention with
// separate weights and key padding (kv the key's and value's sum).
func TestMHAGrads(t *testing.T) {
	withDevice(t)
	r := rand.New(rand.NewSource(160))
	dir := t.TempDir()
	const B, T, S, d, kdim = 2, 5, 6, 8, 12
	vals := func(n int) []float32 {
		x := make([]float32, n)
		for i := range x {
			x[i] = float32(r.NormFloat64() * 0.4)
		}
		return x
	}
	self := &nn.MHAWeights{DModel: d, KDim: d, VDim: d, InProjWeight: vals(3 * d * d), InProjBias: vals(3 * d), OutProjWeight: vals(d * d), OutProjBias: vals(d)}
	selfParams := writeNPZ(t, dir, "self.npz", map[string]any{
		"in_proj_weight": rows(self.InProjWeight, d), "in_proj_bias": self.InProjBias,
		"out_proj.weight": rows(self.OutProjWeight, d), "out_proj.bias": self.OutProjBias,
	})
	crossParams, cross := randomCross(t, r, dir, d, kdim)
	x := vals(B * T * d)
	kv := vals(B * S * kdim)
	dY := vals(B * T * d)
	xPath := writeArray(t, dir, "x.npy", []int{B, T, d}, x)
	kvPath := writeArray(t, dir, "kv.npy", []int{B, S, kdim}, kv)
	dyPath := writeArray(t, dir, "dy.npy", []int{B, T, d}, dY)
	padded := make([]bool, B*S)
	padded[4], padded[S+1] = true, true
	padPath := save(t, dir, "pad.npy", rows(padded, S))
	for _, c := range []struct {
		name   string
		args   []string
		w      *nn.MHAWeights
		kv     []float32
		opts   nn.MHAOptions
		params []string
	}{
		{"self, causal", []string{"--params", selfParams, "--causal", "top-left"}, self, nil,
			nn.MHAOptions{Heads: 2, Attention: vkattn.Options{Causal: vkattn.CausalTopLeft}},
			[]string{"x", "in_proj_weight", "in_proj_bias", "out_proj.weight", "out_proj.bias"}},
		{"cross, key padding", []string{"--params", crossParams, "--kv", kvPath, "--key-padding", padPath}, cross, kv,
			nn.MHAOptions{Heads: 2, KeyPadding: &nn.KeyPadding{Padded: padded}},
			[]string{"x", "kv", "q_proj_weight", "k_proj_weight", "v_proj_weight", "in_proj_bias", "out_proj.weight", "out_proj.bias"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			g := filepath.Join(t.TempDir(), "g.npz")
			cliOK(t, append([]string{"mha", "-x", xPath, "--heads", "2", "-o", filepath.Join(t.TempDir(), "out.npy"), "--dout", dyPath, "--grads", g, "--check"}, c.args...)...)
			got, err := weights.Load(g)
			if err != nil {
				t.Fatal(err)
			}
			var names []string
			for n := range got {
				names = append(names, n)
			}
			slices.Sort(names)
			want := slices.Clone(c.params)
			slices.Sort(want)
			if !slices.Equal(names, want) {
				t.Fatalf("members %v, want %v", names, want)
			}
			var kvShape []int
			if c.kv != nil {
				kvShape = []int{B, S, kdim}
			}
			ref, err := reference.MultiHeadAttentionBackward(x, []int{B, T, d}, c.kv, kvShape, c.kv, kvShape, c.w, dY, c.opts)
			if err != nil {
				t.Fatal(err)
			}
			refs := map[string][]float64{"x": ref.DX, "in_proj_weight": ref.InProjWeight, "q_proj_weight": ref.QProjWeight,
				"k_proj_weight": ref.KProjWeight, "v_proj_weight": ref.VProjWeight, "in_proj_bias": ref.InProjBias,
				"out_proj.weight": ref.OutProjWeight, "out_proj.bias": ref.OutProjBias}
			if c.kv != nil {
				sum := make([]float64, len(ref.DKey))
				for i := range sum {
					sum[i] = ref.DKey[i] + ref.DValue[i]
				}
				refs["kv"] = sum
			}
			for _, n := range c.params {
				within(t, n, got[n].Data, refs[n])
			}
			if s := got["x"].Shape; !slices.Equal(s, []int{B, T, d}) {
				t.Errorf("x gradient of shape %v", s)
			}
		})
	}
	checkRefused(t, []string{"mha", "-x", xPath, "--params", selfParams, "--heads", "2", "-o", filepath.Join(dir, "o.npy"), "--dout", dyPath}, 2, "go together", "")
}

// A float16 X and KV file stays float16 on the device; --dtype stores
// them as the type it names (rounded to it: the reference reads the
// rounded values); the plan says how each projection reads X, and
// --fp32-products is taken. A type a layer cannot read is a usage error.
func TestMHAInputTypes(t *testing.T) {
	withDevice(t)
	r := rand.New(rand.NewSource(8))
	dir := t.TempDir()
	const B, T, S, d, kdim = 2, 3, 4, 8, 6
	params, w := randomCross(t, r, dir, d, kdim)
	// Independent roundings: float16 by x448/float16, bfloat16 to nearest,
	// ties to even, on the bits.
	half := func(x []float32) []float32 {
		y := make([]float32, len(x))
		for i, v := range x {
			y[i] = float16.Fromfloat32(v).Float32()
		}
		return y
	}
	bf16 := func(x []float32) []float32 {
		y := make([]float32, len(x))
		for i, v := range x {
			b := math.Float32bits(v)
			y[i] = math.Float32frombits((b + 0x7fff + (b>>16)&1) &^ 0xffff)
		}
		return y
	}
	xd, kvd := normalValues(r, B*T*d), normalValues(r, B*S*kdim)
	o := filepath.Join(dir, "out.npy")
	for _, c := range []struct {
		name  string
		files func(name string, shape []int, x []float32) string
		flags []string
		round func([]float32) []float32
		reads string
	}{
		{"float16 files", func(name string, shape []int, x []float32) string { return saveF16(t, dir, name, shape, x) }, nil, half, "X f16"},
		{"--dtype bf16", func(name string, shape []int, x []float32) string { return writeArray(t, dir, name, shape, x) },
			[]string{"--dtype", "bf16", "--fp32-products"}, bf16, "X bf16"},
	} {
		x, kv := c.files("x.npy", []int{B, T, d}, xd), c.files("kv.npy", []int{B, S, kdim}, kvd)
		out := cliOK(t, append([]string{"mha", "-x", x, "--kv", kv, "--params", params, "--heads", "2", "-o", o, "--check", "--explain"}, c.flags...)...)
		for _, line := range strings.Split(out, "\n") {
			if strings.Contains(line, "_proj: ") && !strings.Contains(line, "out_proj") && !strings.Contains(line, c.reads) {
				t.Errorf("%s: an input projection does not read %s: %s", c.name, c.reads, line)
			}
		}
		mentions(t, "--explain", out, "q_proj: ", "k_proj: ", "v_proj: ")
		xr, kvr := c.round(xd), c.round(kvd)
		ref, err := reference.MultiHeadAttention(xr, []int{B, T, d}, kvr, []int{B, S, kdim}, kvr, []int{B, S, kdim}, w, nn.MHAOptions{Heads: 2})
		if err != nil {
			t.Fatal(err)
		}
		nearReference(t, c.name+" out", load(t, o).F32, ref.Out)
	}
	refused := filepath.Join(dir, "refused.npy")
	checkRefused(t, []string{"mha", "-x", filepath.Join(dir, "x.npy"), "--params", params, "--heads", "2", "-o", refused, "--dtype", "q8_0"},
		exitUsage, `--dtype "q8_0": want f32, f16 or bf16`, refused)
}
