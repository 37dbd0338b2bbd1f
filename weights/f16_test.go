package weights

import (
	"encoding/binary"
	"errors"
	"math"
	"math/rand"
	"reflect"
	"strings"
	"testing"

	"github.com/x448/float16"

	"github.com/vkattn/vkattn"
)

// halfValue is the exact value of IEEE 754 binary16 bits h.
func halfValue(h uint16) float64 {
	sign := 1.0
	if h&0x8000 != 0 {
		sign = -1
	}
	exp, frac := int(h>>10&0x1f), float64(h&0x3ff)
	switch exp {
	case 0: // zero or subnormal
		return sign * frac * 0x1p-24
	case 0x1f:
		if frac == 0 {
			return math.Inf(int(sign))
		}
		return math.NaN()
	}
	return sign * (1024 + frac) * math.Ldexp(1, exp-25)
}

// TestFloat16Exact loads every binary16 value from .npz (<f2 and >f2) and
// .safetensors (F16): each widens exactly, subnormals, ±0 and ±inf
// included (issue 12: .npz refused <f2; npyio's conversion, used for F16
// before, flushed subnormals to the wrong values).
func TestFloat16Exact(t *testing.T) {
	le := make([]byte, 2<<16)
	be := make([]byte, 2<<16)
	for i := range 1 << 16 {
		binary.LittleEndian.PutUint16(le[2*i:], uint16(i))
		binary.BigEndian.PutUint16(be[2*i:], uint16(i))
	}
	ts := mustLoad(t, writeNPZ(t, map[string][]byte{
		"le": npyBytes(npyDict("<f2", false, 1<<16), le),
		"be": npyBytes(npyDict(">f2", false, 1<<16), be),
	}, true))
	st := mustLoad(t, writeFile(t, "h.safetensors", stBytes(map[string]stTensor{"h": {"F16", []int{1 << 16}, le}})))
	for name, x := range map[string]Tensor{"npz <f2": ts["le"], "npz >f2": ts["be"], "safetensors F16": st["h"]} {
		if x.DType != "F16" || len(x.Data) != 1<<16 {
			t.Fatalf("%s: dtype %s, %d values", name, x.DType, len(x.Data))
		}
		for i, got := range x.Data {
			want := halfValue(uint16(i))
			if math.IsNaN(want) {
				if !math.IsNaN(float64(got)) {
					t.Fatalf("%s: %#04x is %g, want NaN", name, i, got)
				}
				continue
			}
			if math.Float32bits(got) != math.Float32bits(float32(want)) {
				t.Fatalf("%s: %#04x is %g, want %g", name, i, got, want)
			}
		}
	}
	// The values the issue names, spelled out.
	for bits, want := range map[uint16]float32{
		0x0001: 0x1p-24, 0x03ff: 1023 * 0x1p-24, 0x0400: 0x1p-14, 0x7bff: 65504, 0xfbff: -65504,
		0x7c00: float32(math.Inf(1)), 0xfc00: float32(math.Inf(-1)), 0x3c00: 1,
	} {
		if got := ts["le"].Data[bits]; got != want {
			t.Errorf("%#04x is %g, want %g", bits, got, want)
		}
	}
	if z := ts["le"].Data[0x8000]; z != 0 || !math.Signbit(float64(z)) {
		t.Errorf("0x8000 is %g, want -0", z)
	}
}

// MHA weights stored as float16 in a .npz load like float32 ones; an
// infinity is refused by the layer as any non-finite weight is.
func TestLoadMHAFloat16(t *testing.T) {
	ts := mhaTensors(4, 3, 2, false, true)
	f32, f16 := map[string][]byte{}, map[string][]byte{}
	for name, x := range ts {
		f32[name] = f32NPY(x.Shape, x.Data)
		f16[name] = halfNPY(x.Shape, x.Data)
	}
	want, err := LoadMHA(writeNPZ(t, f32, false), 4, 3, 2)
	if err != nil {
		t.Fatal(err)
	}
	got, err := LoadMHA(writeNPZ(t, f16, true), 4, 3, 2)
	if err != nil {
		t.Fatal(err)
	}
	// The same values, kept as float16 on the device.
	if got.DType != vkattn.Float16 || want.DType != vkattn.Float32 {
		t.Fatalf("element types %v and %v, want f16 and f32", got.DType, want.DType)
	}
	want.DType = vkattn.Float16
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("float16 weights %+v\nwant %+v", got, want)
	}
	bias := append([]float32(nil), ts["out_proj.bias"].Data...)
	bias[1] = float32(math.Inf(-1))
	f16["out_proj.bias"] = halfNPY(ts["out_proj.bias"].Shape, bias)
	if _, err := LoadMHA(writeNPZ(t, f16, true), 4, 3, 2); !errors.Is(err, vkattn.ErrNonFinite) || !strings.Contains(err.Error(), "out_proj.bias value 1") {
		t.Fatalf("float16 -inf bias: %v", err)
	}
}

// halfNPY is a little-endian float16 .npy; xs must be exact in float16.
func halfNPY(shape []int, xs []float32) []byte {
	raw := make([]byte, 2*len(xs))
	for i, x := range xs {
		binary.LittleEndian.PutUint16(raw[2*i:], float16.Fromfloat32(x).Bits())
	}
	return npyBytes(npyDict("<f2", false, shape...), raw)
}

// MHA weights stored as float16 (.npz <f2, safetensors F16) or bfloat16
// (safetensors BF16) stay half on the device, and the layer gives the
// output of the same weights as float32.
func TestHalfMHAWeightsOnDevice(t *testing.T) {
	const d, heads, T = 8, 2, 5
	r := rand.New(rand.NewSource(3))
	// Values with 8 significant bits and |x| >= 2^-10: exact in bfloat16
	// (their low 16 bits are zero) and in float16.
	exact := func(n int) []float32 {
		x := make([]float32, n)
		for i := range x {
			v := float32(math.Copysign(math.Ldexp(1+r.Float64(), -r.Intn(10)), r.Float64()-0.5))
			x[i] = math.Float32frombits(math.Float32bits(v) &^ 0xffff)
		}
		return x
	}
	ts := map[string]Tensor{
		"in_proj_weight":  {Shape: []int{3 * d, d}, Data: exact(3 * d * d)},
		"in_proj_bias":    {Shape: []int{3 * d}, Data: exact(3 * d)},
		"out_proj.weight": {Shape: []int{d, d}, Data: exact(d * d)},
		"out_proj.bias":   {Shape: []int{d}, Data: exact(d)},
	}
	halves := func(dtype string, x []float32) []byte {
		raw := make([]byte, 2*len(x))
		for i, v := range x {
			h := float16.Fromfloat32(v).Bits()
			if dtype == "BF16" {
				h = uint16(math.Float32bits(v) >> 16)
			}
			binary.LittleEndian.PutUint16(raw[2*i:], h)
		}
		return raw
	}
	npz32, npz16 := map[string][]byte{}, map[string][]byte{}
	st16, stBF := map[string]stTensor{}, map[string]stTensor{}
	for name, x := range ts {
		npz32[name], npz16[name] = f32NPY(x.Shape, x.Data), halfNPY(x.Shape, x.Data)
		st16[name] = stTensor{"F16", x.Shape, halves("F16", x.Data)}
		stBF[name] = stTensor{"BF16", x.Shape, halves("BF16", x.Data)}
	}
	files := []struct {
		name, path string
		dtype      vkattn.DType
	}{
		{"npz f32", writeNPZ(t, npz32, false), vkattn.Float32},
		{"npz f16", writeNPZ(t, npz16, true), vkattn.Float16},
		{"safetensors F16", writeFile(t, "w16.safetensors", stBytes(st16)), vkattn.Float16},
		{"safetensors BF16", writeFile(t, "wbf.safetensors", stBytes(stBF)), vkattn.BFloat16},
	}
	dev, err := vkattn.Open(vkattn.Config{Validation: true})
	if err != nil {
		t.Fatal(err)
	}
	defer dev.Close()
	xs := make([]float32, T*d)
	for i := range xs {
		xs[i] = 2*r.Float32() - 1
	}
	x, err := dev.Upload([]int{1, T, d}, xs)
	if err != nil {
		t.Fatal(err)
	}
	defer x.Close()
	var want []float32
	for _, f := range files {
		w, err := LoadMHA(f.path, d, 0, 0)
		if err != nil {
			t.Fatalf("%s: %v", f.name, err)
		}
		if w.DType != f.dtype {
			t.Fatalf("%s: weights kept as %v, want %v", f.name, w.DType, f.dtype)
		}
		m, err := dev.NewMHA(w)
		if err != nil {
			t.Fatal(err)
		}
		out, err := m.Forward(x, nil, nil, vkattn.MHAOptions{Heads: heads})
		if err != nil {
			t.Fatal(err)
		}
		got, err := out.Out.Download()
		if plan := out.Plan.OutProj.String(); f.dtype != vkattn.Float32 && !strings.Contains(plan, "W "+f.dtype.String()) {
			t.Errorf("%s: out_proj plan %q does not say it reads %v weights", f.name, plan, f.dtype)
		}
		out.Close()
		m.Close()
		if err != nil {
			t.Fatal(err)
		}
		if want == nil {
			want = got
			continue
		}
		for i := range want {
			if diff := math.Abs(float64(got[i] - want[i])); diff > 2e-5*max(1, math.Abs(float64(want[i]))) {
				t.Fatalf("%s: out[%d] = %v, float32 weights give %v", f.name, i, got[i], want[i])
			}
		}
	}
	if msgs := vkattn.ValidationMessages(); len(msgs) > 0 {
		t.Fatalf("validation messages: %v", msgs)
	}
}

// A float16 .npy keeps its bit patterns (row-major, Fortran order
// reordered) beside their widening.
func TestReadNPYKeepsFloat16Bits(t *testing.T) {
	// (2, 3) in Fortran order: column-major bits 1..6 of the halves below.
	bits := []uint16{0x3c00, 0x0001, 0x8400, 0x7bff, 0x3555, 0xc000} // column-major
	raw := make([]byte, 2*len(bits))
	for i, h := range bits {
		binary.LittleEndian.PutUint16(raw[2*i:], h)
	}
	a, err := ReadNPY(writeFile(t, "h.npy", npyBytes(npyDict("<f2", true, 2, 3), raw)))
	if err != nil {
		t.Fatal(err)
	}
	want := []uint16{0x3c00, 0x8400, 0x3555, 0x0001, 0x7bff, 0xc000} // row-major
	if !reflect.DeepEqual(a.F16, want) {
		t.Fatalf("F16 = %#04x, want %#04x", a.F16, want)
	}
	for i, h := range want {
		if a.F32[i] != float16.Frombits(h).Float32() {
			t.Fatalf("F32[%d] = %g, want the widening of %#04x", i, a.F32[i], h)
		}
	}
}
