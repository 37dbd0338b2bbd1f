package weights

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/vkattn/vkattn/core"
	"github.com/vkattn/vkattn/internal/testutil"
)

// npyBytes builds a .npy file (format 1.0) from a header dictionary and raw
// data, so tests can write any dtype, order or malformed header.
func npyBytes(dict string, raw []byte) []byte {
	hdr := dict + "\n"
	var b bytes.Buffer
	b.WriteString("\x93NUMPY\x01\x00")
	binary.Write(&b, binary.LittleEndian, uint16(len(hdr)))
	b.WriteString(hdr)
	b.Write(raw)
	return b.Bytes()
}

func f32Bytes(xs ...float32) []byte {
	b := make([]byte, 4*len(xs))
	for i, x := range xs {
		binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(x))
	}
	return b
}

func f64Bytes(xs ...float64) []byte {
	b := make([]byte, 8*len(xs))
	for i, x := range xs {
		binary.LittleEndian.PutUint64(b[8*i:], math.Float64bits(x))
	}
	return b
}

// f32NPY is a C-ordered little-endian float32 .npy of the given shape.
func f32NPY(shape []int, xs []float32) []byte {
	return npyBytes(npyDict("<f4", false, shape...), f32Bytes(xs...))
}

func writeFile(t *testing.T, name string, data []byte) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, data, 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// mustLoad is Load that fails the test on an error.
func mustLoad(t *testing.T, path string) map[string]Tensor {
	t.Helper()
	ts, err := Load(path)
	if err != nil {
		t.Fatal(err)
	}
	return ts
}

type stTensor struct {
	dtype string
	shape []int
	raw   []byte
}

// stBytes builds a .safetensors file by hand: 8-byte little-endian header
// length, JSON header, data.
func stBytes(ts map[string]stTensor) []byte {
	hdr := map[string]any{}
	var data []byte
	for _, name := range slices.Sorted(maps.Keys(ts)) {
		x := ts[name]
		hdr[name] = map[string]any{"dtype": x.dtype, "shape": x.shape, "data_offsets": []int{len(data), len(data) + len(x.raw)}}
		data = append(data, x.raw...)
	}
	h, _ := json.Marshal(hdr)
	return stRaw(h, data)
}

func stRaw(header, data []byte) []byte {
	out := binary.LittleEndian.AppendUint64(nil, uint64(len(header)))
	return append(append(out, header...), data...)
}

func seq(n int) []float32 {
	x := make([]float32, n)
	for i := range x {
		x[i] = float32(i) - 2.5
	}
	return x
}

func TestLoadNPZ(t *testing.T) {
	for _, compress := range []bool{false, true} {
		p := writeFile(t, "w.npz", testutil.NPZ(map[string][]byte{
			"a":       f32NPY([]int{2, 3}, seq(6)),
			"dbl":     npyBytes(npyDict("<f8", false, 3), f64Bytes(0.1, -2, 1e-3)),
			"big":     npyBytes(npyDict(">f4", false, 2), []byte{0x3f, 0x80, 0, 0, 0xc0, 0, 0, 0}),
			"fortran": npyBytes(npyDict("<f4", true, 2, 3), f32Bytes(1, 4, 2, 5, 3, 6)),
			"mask":    npyBytes(npyDict("|b1", false, 2, 2), []byte{1, 0, 0, 1}),
			"scalar":  npyBytes("{'descr': '<f4', 'fortran_order': False, 'shape': (), }", f32Bytes(7)),
			"empty":   npyBytes(npyDict("<f4", false, 0, 4), nil),
			"ints":    npyBytes(npyDict("<i8", false, 1), make([]byte, 8)),
		}, compress))
		ts := mustLoad(t, p)
		want := map[string]Tensor{
			"a":       {Shape: []int{2, 3}, DType: "F32", Data: seq(6)},
			"dbl":     {Shape: []int{3}, DType: "F64", Data: []float32{0.1, -2, 1e-3}},
			"big":     {Shape: []int{2}, DType: "F32", Data: []float32{1, -2}},
			"fortran": {Shape: []int{2, 3}, DType: "F32", Data: []float32{1, 2, 3, 4, 5, 6}},
			"mask":    {Shape: []int{2, 2}, DType: "BOOL", Data: []float32{1, 0, 0, 1}},
			"scalar":  {Shape: []int{}, DType: "F32", Data: []float32{7}},
			"empty":   {Shape: []int{0, 4}, DType: "F32", Data: []float32{}},
			"ints":    {Shape: []int{1}, DType: "<i8"},
		}
		if !reflect.DeepEqual(ts, want) {
			t.Fatalf("compress %v:\n got %v\nwant %v", compress, ts, want)
		}
	}
}

func TestLoadSafetensors(t *testing.T) {
	p := writeFile(t, "w.safetensors", stBytes(map[string]stTensor{
		"a":    {"F32", []int{2, 3}, f32Bytes(seq(6)...)},
		"dbl":  {"F64", []int{3}, f64Bytes(0.1, -2, 1e-3)},
		"half": {"F16", []int{2}, []byte{0x00, 0x3c, 0x00, 0xc0}},  // 1, -2
		"bf":   {"BF16", []int{2}, []byte{0x80, 0x3f, 0x40, 0xc0}}, // 1, -3
		"mask": {"BOOL", []int{3}, []byte{1, 0, 1}},
		"ints": {"I64", []int{2}, make([]byte, 16)},
	}))
	ts := mustLoad(t, p)
	want := map[string]Tensor{
		"a":    {Shape: []int{2, 3}, DType: "F32", Data: seq(6)},
		"dbl":  {Shape: []int{3}, DType: "F64", Data: []float32{0.1, -2, 1e-3}},
		"half": {Shape: []int{2}, DType: "F16", Data: []float32{1, -2}},
		"bf":   {Shape: []int{2}, DType: "BF16", Data: []float32{1, -3}},
		"mask": {Shape: []int{3}, DType: "BOOL", Data: []float32{1, 0, 1}},
		"ints": {Shape: []int{2}, DType: "I64"},
	}
	if !reflect.DeepEqual(ts, want) {
		t.Fatalf("\n got %v\nwant %v", ts, want)
	}

	// And a file as github.com/nlpodyssey/safetensors's Serialize writes it
	// (a 2x2 F32 tensor, with metadata).
	lib := "X\x00\x00\x00\x00\x00\x00\x00" + `{"__metadata__":{"format":"pt"},"x":{"dtype":"F32","shape":[2,2],"data_offsets":[0,16]}}` +
		"\x00\x00\x80?\x00\x00\x00@\x00\x00@@\x00\x00\x80@"
	ts, err := Load(writeFile(t, "lib.safetensors", []byte(lib)))
	if err != nil {
		t.Fatal(err)
	}
	if x := ts["x"]; !reflect.DeepEqual(x.Data, []float32{1, 2, 3, 4}) || !reflect.DeepEqual(x.Shape, []int{2, 2}) {
		t.Fatalf("x = %+v", x)
	}
}

func TestLoadErrors(t *testing.T) {
	if _, err := Load(filepath.Join(t.TempDir(), "none.npz")); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("missing file: %v", err)
	}
	huge := math.MaxFloat32 * 4
	npzCases := map[string][]byte{
		"bad magic":        append([]byte("\x93NUMPX\x01\x00\x10\x00"), make([]byte, 16)...),
		"short":            []byte("\x93NUMPY"),
		"version":          append([]byte("\x93NUMPY\x07\x00\x10\x00"), make([]byte, 16)...),
		"header past end":  []byte("\x93NUMPY\x01\x00\xff\x00{'descr'"),
		"no newline":       append([]byte("\x93NUMPY\x01\x00\x04\x00"), "{ab}"...),
		"no dict":          npyBytes("nothing here", nil),
		"bad shape":        npyBytes(npyDict("<f4", false)+"x", nil),
		"shape text":       npyBytes("{'descr': '<f4', 'fortran_order': False, 'shape': (a, 2), }", nil),
		"bad order":        npyBytes("{'descr': '<f4', 'fortran_order': Maybe, 'shape': (1,), }", f32Bytes(1)),
		"negative":         npyBytes(npyDict("<f4", false, -2, 3), nil),
		"too large":        npyBytes(npyDict("<f4", false, 1<<20, 1<<20), nil),
		"short data":       npyBytes(npyDict("<f4", false, 2, 3), f32Bytes(1, 2, 3)),
		"long data":        npyBytes(npyDict("<f4", false, 2), f32Bytes(1, 2, 3)),
		"f64 out of range": npyBytes(npyDict("<f8", false, 1), f64Bytes(huge)),
		"bool size":        npyBytes(npyDict("|b1", false, 3), []byte{1}),
	}
	for name, member := range npzCases {
		t.Run("npz "+name, func(t *testing.T) {
			_, err := Load(writeFile(t, "w.npz", testutil.NPZ(map[string][]byte{"x": member}, false)))
			if !errors.Is(err, ErrFormat) {
				t.Fatalf("err = %v, want ErrFormat", err)
			}
			if !strings.Contains(err.Error(), `"x"`) {
				t.Fatalf("err = %q does not name the array", err)
			}
		})
	}

	hdr := func(s string) []byte { return []byte(s) }
	stCases := map[string][]byte{
		"empty":          {},
		"short":          {1, 2, 3},
		"header length":  stRaw(hdr(`{}`), nil)[:9],
		"huge header":    binary.LittleEndian.AppendUint64(nil, 1<<62),
		"bad json":       stRaw(hdr(`{"a":`), nil),
		"not object":     stRaw(hdr(`[1,2]`), nil),
		"bad dtype":      stRaw(hdr(`{"a":{"dtype":"F33","shape":[1],"data_offsets":[0,4]}}`), make([]byte, 4)),
		"offsets":        stRaw(hdr(`{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,4]}}`), make([]byte, 4)),
		"overlap":        stRaw(hdr(`{"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},"b":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}}`), make([]byte, 4)),
		"past end":       stRaw(hdr(`{"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}}`), make([]byte, 2)),
		"trailing":       stRaw(hdr(`{"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}}`), make([]byte, 8)),
		"overflow":       stRaw(hdr(`{"a":{"dtype":"F32","shape":[4294967296,4294967296],"data_offsets":[0,0]}}`), nil),
		"negative shape": stRaw(hdr(`{"a":{"dtype":"F32","shape":[-1],"data_offsets":[0,4]}}`), make([]byte, 4)),
		"missing keys":   stRaw(hdr(`{"a":{"dtype":"F32","shape":[1]}}`), make([]byte, 4)),
		"too large":      stRaw(hdr(`{"a":{"dtype":"BOOL","shape":[4294967296,0],"data_offsets":[0,0]}}`), nil),
		"f64 range":      stBytes(map[string]stTensor{"a": {"F64", []int{1}, f64Bytes(huge)}}),
		"text":           []byte("this is not a weights file at all"),
		"zip prefix":     []byte("PK\x03\x04 truncated zip"),
	}
	for name, file := range stCases {
		t.Run("safetensors "+name, func(t *testing.T) {
			if _, err := Load(writeFile(t, "x.safetensors", file)); !errors.Is(err, ErrFormat) {
				t.Fatalf("err = %v, want ErrFormat", err)
			}
		})
	}
}

// Every truncation of a real file is an error and every single-byte
// corruption is at worst an error: never a panic.
func TestCorruptFiles(t *testing.T) {
	dir := filepath.Join("..", "testdata", "mha")
	for _, f := range []string{"self.npz", "self_params.npz", "self_params.safetensors", "padcausal.npz"} {
		data, err := os.ReadFile(filepath.Join(dir, f))
		if err != nil {
			t.Fatal(err)
		}
		// decode is what Load runs on the file's bytes; calling it directly
		// keeps thousands of variants off the disk.
		for n := 0; n < len(data); n++ {
			ts, err := decode(data[:n])
			if !errors.Is(err, ErrFormat) {
				t.Fatalf("%s truncated to %d of %d bytes: err = %v, want ErrFormat", f, n, len(data), err)
			}
			if ts != nil {
				t.Fatalf("%s truncated to %d bytes: tensors returned with the error", f, n)
			}
		}
		bad := append([]byte(nil), data...)
		for i := range data {
			bad[i] ^= 0xa5
			// Must not panic; flipped weight bytes may load fine.
			if ts, err := decode(bad); err == nil {
				MHA(ts, "", 8, 8, 8)
			}
			bad[i] = data[i]
		}
	}
	// And once through the file API.
	data, err := os.ReadFile(filepath.Join(dir, "self_params.safetensors"))
	if err != nil {
		t.Fatal(err)
	}
	p := writeFile(t, "cut.safetensors", data[:len(data)-1])
	if _, err := LoadMHA(p, 8, 8, 8); !errors.Is(err, ErrFormat) || !strings.Contains(err.Error(), p) {
		t.Fatalf("LoadMHA of a truncated file: %v", err)
	}
}

func mhaTensors(d, kdim, vdim int, packed, bias bool) map[string]Tensor {
	ts := map[string]Tensor{"out_proj.weight": {Shape: []int{d, d}, DType: "F32", Data: seq(d * d)}}
	if packed {
		ts["in_proj_weight"] = Tensor{Shape: []int{3 * d, d}, DType: "F32", Data: seq(3 * d * d)}
	} else {
		ts["q_proj_weight"] = Tensor{Shape: []int{d, d}, DType: "F32", Data: seq(d * d)}
		ts["k_proj_weight"] = Tensor{Shape: []int{d, kdim}, DType: "F32", Data: seq(d * kdim)}
		ts["v_proj_weight"] = Tensor{Shape: []int{d, vdim}, DType: "F32", Data: seq(d * vdim)}
	}
	if bias {
		ts["in_proj_bias"] = Tensor{Shape: []int{3 * d}, DType: "F32", Data: seq(3 * d)}
		ts["out_proj.bias"] = Tensor{Shape: []int{d}, DType: "F32", Data: seq(d)}
	}
	return ts
}

func TestMHA(t *testing.T) {
	w, err := MHA(mhaTensors(8, 8, 8, true, true), "", 8, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	if w.KDim != 8 || w.VDim != 8 || w.ParamCount() != 288 || len(w.InProjWeight) != 192 {
		t.Fatalf("kdim %d vdim %d params %d", w.KDim, w.VDim, w.ParamCount())
	}
	w, err = MHA(mhaTensors(8, 5, 6, false, false), "", 8, 5, 6)
	if err != nil {
		t.Fatal(err)
	}
	if w.InProjWeight != nil || len(w.KProjWeight) != 40 || len(w.VProjWeight) != 48 || w.InProjBias != nil || w.OutProjBias != nil {
		t.Fatalf("separate weights: %+v", w)
	}

	// A prefix selects one layer of a larger state dict.
	ts := map[string]Tensor{}
	for k, v := range mhaTensors(4, 4, 4, true, true) {
		ts["layers.0.self_attn."+k] = v
	}
	ts["layers.0.linear1.weight"] = Tensor{Shape: []int{2}, DType: "I64"}
	if _, err := MHA(ts, "layers.0.self_attn.", 4, 4, 4); err != nil {
		t.Fatal(err)
	}

	cases := []struct {
		name string
		edit func(ts map[string]Tensor)
		d    int
		kd   int
		err  error
		msg  string
	}{
		{"missing out_proj.weight", func(ts map[string]Tensor) { delete(ts, "out_proj.weight") }, 8, 8, ErrMissing, "out_proj.weight, shape [8 8] (tensors: in_proj_bias, in_proj_weight, out_proj.bias)"},
		{"missing in_proj", func(ts map[string]Tensor) { delete(ts, "in_proj_weight") }, 8, 8, ErrMissing, "neither in_proj_weight"},
		{"in_proj shape", func(ts map[string]Tensor) {
			ts["in_proj_weight"] = Tensor{Shape: []int{24, 4}, DType: "F32", Data: seq(96)}
		}, 8, 8, core.ErrShape, "in_proj_weight has shape [24 4], want [24 8]"},
		{"bias shape", func(ts map[string]Tensor) {
			ts["out_proj.bias"] = Tensor{Shape: []int{1, 8}, DType: "F32", Data: seq(8)}
		}, 8, 8, core.ErrShape, "out_proj.bias has shape [1 8], want [8]"},
		{"d_model", func(map[string]Tensor) {}, 6, 6, core.ErrShape, "want [18 6]"},
		{"packed with kdim", func(map[string]Tensor) {}, 8, 5, core.ErrShape, "kdim is 5"},
		{"both layouts", func(ts map[string]Tensor) {
			ts["k_proj_weight"] = Tensor{Shape: []int{8, 8}, DType: "F32", Data: seq(64)}
		}, 8, 8, ErrUnsupported, "both"},
		{"bias_k", func(ts map[string]Tensor) { ts["bias_k"] = Tensor{Shape: []int{1, 1, 8}, DType: "F32", Data: seq(8)} }, 8, 8, ErrUnsupported, "bias_k"},
		{"int dtype", func(ts map[string]Tensor) { ts["out_proj.weight"] = Tensor{Shape: []int{8, 8}, DType: "I64"} }, 8, 8, ErrUnsupported, "out_proj.weight has dtype I64"},
		{"bool dtype", func(ts map[string]Tensor) { ts["out_proj.bias"] = Tensor{Shape: []int{8}, DType: "BOOL", Data: seq(8)} }, 8, 8, ErrUnsupported, "BOOL"},
		{"non-finite", func(ts map[string]Tensor) { ts["out_proj.bias"].Data[3] = float32(math.Inf(1)) }, 8, 8, core.ErrNonFinite, "out_proj.bias value 3"},
		{"zero d", func(map[string]Tensor) {}, 0, 0, core.ErrEmpty, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ts := mhaTensors(8, 8, 8, true, true)
			c.edit(ts)
			_, err := MHA(ts, "", c.d, c.kd, 0)
			if !errors.Is(err, c.err) || !strings.Contains(fmt.Sprint(err), c.msg) {
				t.Fatalf("err = %v, want %v mentioning %q", err, c.err, c.msg)
			}
		})
	}

	// Separate layout with a wrong kdim names k_proj_weight and both shapes.
	_, err = MHA(mhaTensors(8, 5, 6, false, true), "", 8, 4, 6)
	if !errors.Is(err, core.ErrShape) || !strings.Contains(err.Error(), "k_proj_weight has shape [8 5], want [8 4]") {
		t.Fatalf("err = %v", err)
	}
}

// LoadMHA from both formats, and errors that name the file.
func TestLoadMHA(t *testing.T) {
	ts := mhaTensors(4, 3, 2, false, true)
	npzMembers, stTensors := map[string][]byte{}, map[string]stTensor{}
	for name, x := range ts {
		npzMembers[name] = f32NPY(x.Shape, x.Data)
		stTensors[name] = stTensor{"F32", x.Shape, f32Bytes(x.Data...)}
	}
	a, err := LoadMHA(writeFile(t, "w.npz", testutil.NPZ(npzMembers, true)), 4, 3, 2)
	if err != nil {
		t.Fatal(err)
	}
	b, err := LoadMHA(writeFile(t, "w.safetensors", stBytes(stTensors)), 4, 3, 2)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(a, b) || !reflect.DeepEqual(a.KProjWeight, ts["k_proj_weight"].Data) {
		t.Fatalf("npz %+v\nsafetensors %+v", a, b)
	}
	p := writeFile(t, "w.safetensors", stBytes(stTensors))
	if _, err := LoadMHA(p, 4, 3, 3); !errors.Is(err, core.ErrShape) || !strings.Contains(err.Error(), p) || !strings.Contains(err.Error(), "v_proj_weight has shape [4 2], want [4 3]") {
		t.Fatalf("err = %v", err)
	}
}

func TestAdditive(t *testing.T) {
	base := func() map[string]Tensor {
		return map[string]Tensor{
			"W_q": {Shape: []int{2, 3}, DType: "F32", Data: seq(6)},
			"W_k": {Shape: []int{4, 3}, DType: "F32", Data: seq(12)},
			"b":   {Shape: []int{3}, DType: "F32", Data: seq(3)},
			"w_a": {Shape: []int{3}, DType: "F32", Data: seq(3)},
		}
	}
	w, err := Additive(base(), "", 2, 4)
	if err != nil {
		t.Fatal(err)
	}
	if w.DQ != 2 || w.DK != 4 || w.DA != 3 || !reflect.DeepEqual(w.WK, seq(12)) {
		t.Fatalf("%+v", w)
	}
	ts := base()
	ts["w_a"] = Tensor{Shape: []int{3, 1}, DType: "F32", Data: seq(3)}
	delete(ts, "b")
	if w, err = Additive(ts, "", 2, 4); err != nil || w.Bias != nil || len(w.WA) != 3 {
		t.Fatalf("column w_a, no b: %+v, %v", w, err)
	}

	cases := []struct {
		name string
		edit func(ts map[string]Tensor)
		err  error
		msg  string
	}{
		{"no W_q", func(ts map[string]Tensor) { delete(ts, "W_q") }, ErrMissing, "W_q"},
		{"no w_a", func(ts map[string]Tensor) { delete(ts, "w_a") }, ErrMissing, "w_a, shape [3]"},
		{"W_q rank", func(ts map[string]Tensor) { ts["W_q"] = Tensor{Shape: []int{6}, DType: "F32", Data: seq(6)} }, core.ErrShape, "W_q has shape [6], want (2, d_a)"},
		{"W_q rows", func(ts map[string]Tensor) { ts["W_q"] = Tensor{Shape: []int{3, 2}, DType: "F32", Data: seq(6)} }, core.ErrShape, "W_q has shape [3 2], want [2 2]"},
		{"W_k", func(ts map[string]Tensor) { ts["W_k"] = Tensor{Shape: []int{3, 4}, DType: "F32", Data: seq(12)} }, core.ErrShape, "W_k has shape [3 4], want [4 3]"},
		{"b", func(ts map[string]Tensor) { ts["b"] = Tensor{Shape: []int{2}, DType: "F32", Data: seq(2)} }, core.ErrShape, "b has shape [2], want [3]"},
		{"w_a row", func(ts map[string]Tensor) { ts["w_a"] = Tensor{Shape: []int{1, 3}, DType: "F32", Data: seq(3)} }, core.ErrShape, "w_a has shape [1 3], want [3 1]"},
		{"NaN", func(ts map[string]Tensor) { ts["b"].Data[1] = float32(math.NaN()) }, core.ErrNonFinite, "b value 1"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ts := base()
			c.edit(ts)
			_, err := Additive(ts, "", 2, 4)
			if !errors.Is(err, c.err) || !strings.Contains(fmt.Sprint(err), c.msg) {
				t.Fatalf("err = %v, want %v mentioning %q", err, c.err, c.msg)
			}
		})
	}

	members := map[string][]byte{}
	for name, x := range base() {
		members[name] = f32NPY(x.Shape, x.Data)
	}
	if _, err := LoadAdditive(writeFile(t, "w.npz", testutil.NPZ(members, false)), 2, 4); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadAdditive(writeFile(t, "w.npz", testutil.NPZ(members, false)), 2, 5); !errors.Is(err, core.ErrShape) {
		t.Fatalf("d_k 5: %v", err)
	}
}

// k_proj_weight and v_proj_weight with fewer rows than d are grouped-query
// K/V heads: KVDim is set and in_proj_bias is (d + 2 kv); a v_proj_weight
// that disagrees with k_proj_weight is a shape error naming it.
func TestMHAGroupedQueryWeights(t *testing.T) {
	const d, kv, kdim = 8, 4, 6
	ts := mhaTensors(d, kdim, kdim, false, false)
	ts["k_proj_weight"] = Tensor{Shape: []int{kv, kdim}, DType: "F32", Data: seq(kv * kdim)}
	ts["v_proj_weight"] = Tensor{Shape: []int{kv, kdim}, DType: "F32", Data: seq(kv * kdim)}
	ts["in_proj_bias"] = Tensor{Shape: []int{d + 2*kv}, DType: "F32", Data: seq(d + 2*kv)}
	w, err := MHA(ts, "", d, kdim, kdim)
	if err != nil {
		t.Fatal(err)
	}
	if w.KVDim != kv || w.KVOut() != kv || len(w.InProjBias) != d+2*kv {
		t.Fatalf("KVDim %d, bias %d values", w.KVDim, len(w.InProjBias))
	}
	if h, err := w.KVHeads(4); err != nil || h != 2 {
		t.Fatalf("4 query heads of width 2: %d K/V heads, %v; want 2", h, err)
	}
	ts["v_proj_weight"] = Tensor{Shape: []int{d, kdim}, DType: "F32", Data: seq(d * kdim)}
	if _, err := MHA(ts, "", d, kdim, kdim); !errors.Is(err, core.ErrShape) || !strings.Contains(err.Error(), "v_proj_weight") {
		t.Fatalf("mismatched v_proj_weight: %v", err)
	}
}

// TestMHAOptions checks the PyTorch mask conversion: meanings, the (B*h)
// axis, and errors for shapes and types PyTorch would not accept.
func TestMHAOptions(t *testing.T) {
	const heads, B, T, S = 2, 1, 2, 3
	ts := map[string]Tensor{
		"key_padding_mask": {Shape: []int{B, S}, DType: "BOOL", Data: []float32{0, 0, 1}},
		"attn_mask":        {Shape: []int{B * heads, T, S}, DType: "BOOL", Data: []float32{0, 1, 0, 0, 0, 1, 1, 0, 0, 0, 0, 0}},
	}
	opts, err := MHAOptions(ts, heads, B, T, S)
	if err != nil {
		t.Fatal(err)
	}
	if opts.Heads != heads || !slices.Equal(opts.KeyPadding.Padded, []bool{false, false, true}) {
		t.Errorf("heads %d, key padding %v", opts.Heads, opts.KeyPadding.Padded)
	}
	if len(opts.Attention.BoolMasks) != 1 {
		t.Fatalf("%d boolean masks, want 1", len(opts.Attention.BoolMasks))
	}
	bm := opts.Attention.BoolMasks[0]
	if bm.Shape != (core.MaskShape{B, heads, T, S}) || bm.Meaning != core.TrueBlocks || !bm.Values[1] || bm.Values[0] {
		t.Errorf("boolean mask %+v", bm)
	}
	ts["attn_mask"] = Tensor{Shape: []int{T, S}, DType: "F32", Data: []float32{0, -1, 0, 0, 0, -2}}
	if opts, err = MHAOptions(ts, heads, B, T, S); err != nil || opts.Attention.Mask == nil || opts.Attention.Mask.Shape != (core.MaskShape{1, 1, T, S}) {
		t.Errorf("float (T, S) mask: %v, %+v", err, opts.Attention.Mask)
	}
	for name, bad := range map[string]Tensor{
		"key_padding_mask": {Shape: []int{B, S}, DType: "F32", Data: make([]float32, B*S)},
		"attn_mask":        {Shape: []int{3, T, S}, DType: "F32", Data: make([]float32, 3*T*S)},
	} {
		c := maps.Clone(ts)
		c[name] = bad
		if _, err := MHAOptions(c, heads, B, T, S); !errors.Is(err, ErrFormat) || !strings.Contains(err.Error(), name) {
			t.Errorf("bad %s: got %v, want ErrFormat naming it", name, err)
		}
	}
}
